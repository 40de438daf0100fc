"""Per-kernel targets and ptxas's failing warnings: a kernel that issues an
architecture-specific instruction (a descriptor's arch_specific, as wgmma on sm_90a) is
compiled for the `a` target of its GPU, every other kernel for the plain one; and a cubin
ptxas warns will not run as built (setmaxnreg ignored, wgmma serialized) fails its build."""

import dataclasses

import pytest

import codegen
import fuserir
from codegen import nvrtc
from codegen.errors import CompileError
from driver import build
from fuserir.instructions import MMA_M16N8K16
from lowering import kir

SEED = (__import__("pathlib").Path(__file__).resolve().parents[1] / "examples"
        / "seed_matmul.fz")
POINTWISE = "fusion p(x: f32[N]) {\n  y = x + 1.0\n  output y\n}\n"


def _kernel(text):
    return codegen.compile(fuserir.parse(text), backend="interp").kernels[0].kir


@pytest.fixture
def mma_only_on_sm90a(monkeypatch):
    """Pretend mma.sync were an sm_90a-only instruction (what wgmma is)."""
    sm90a = dataclasses.replace(MMA_M16N8K16, arch=90, arch_specific=True)
    declared = kir.Mma.effects
    monkeypatch.setattr(kir.Mma, "effects", lambda self: dataclasses.replace(
        declared(self), instruction=sm90a))


def test_a_kernel_with_an_arch_specific_instruction_gets_the_a_target(mma_only_on_sm90a):
    seed, pointwise = _kernel(SEED.read_text()), _kernel(POINTWISE)
    assert build.kernel_arch(seed, "sm_90") == "sm_90a"
    assert build.kernel_arch(pointwise, "sm_90") == "sm_90"      # the others keep theirs
    with pytest.raises(CompileError, match=r"uses mma.sync m16n8k16, which exist only on "
                                           r"sm_90a; this GPU is sm_100"):
        build.kernel_arch(seed, "sm_100")
    with pytest.raises(CompileError, match="which need sm_90 or newer; this GPU is sm_80"):
        build.kernel_arch(seed, "sm_80")


def test_hopper_kernels_get_their_targets_from_the_instructions_they_issue():
    import hopper_probes as hp
    wgmma, _, _ = hp.wgmma_probe(64)
    tma = hp.tma_load_probe(40, 96, (64, 8), "128B")
    assert build.kernel_arch(wgmma, "sm_90") == "sm_90a"
    assert build.kernel_arch(hp.roles_probe(), "sm_90") == "sm_90a"       # setmaxnreg
    assert build.kernel_arch(tma, "sm_90") == "sm_90"                     # TMA alone
    with pytest.raises(CompileError) as caught:
        build.kernel_arch(tma, "sm_89")
    assert str(caught.value) == (
        "kernel tma_load_2d_128B uses FenceMbarrierInit (mbarrier, sm_90), MbarrierArrive "
        "(mbarrier, sm_90), MbarrierInit (mbarrier, sm_90), MbarrierWait (mbarrier, sm_90), "
        "TmaLoad (cp.async.bulk.tensor (TMA), sm_90), which need sm_90 or newer; this GPU "
        "is sm_89")
    with pytest.raises(CompileError, match=r"uses setmaxnreg, wgmma.mma_async m64nNk16, "
                                           r"which exist only on sm_90a; this GPU is sm_100"):
        build.kernel_arch(_with_setmaxnreg(wgmma), "sm_100")


def _with_setmaxnreg(kernel):
    from lowering import kir
    kernel.body.insert(0, kir.SetMaxNReg(240))
    return kernel


def test_the_driver_compiles_that_kernel_for_sm_90a(mma_only_on_sm90a, monkeypatch):
    asked = []
    real = nvrtc.compile_to_cubin
    monkeypatch.setattr(nvrtc, "default_arch", lambda: "sm_90")
    monkeypatch.setattr(nvrtc, "compile_to_cubin",
                        lambda source, name, arch=None, **kw: asked.append(arch)
                        or real(source, name, arch, **kw))
    exe = codegen.compile(fuserir.parse(SEED.read_text().replace("splitk_nt", "arch_probe")),
                          backend="cuda")
    assert asked == ["sm_90a"] and exe.kernels[0].cubin[:4] == b"\x7fELF"


def test_without_arch_specific_instructions_nothing_changes():
    assert build.kernel_arch(_kernel(SEED.read_text()), "sm_90") == "sm_90"


WARNED = """ptxas info    : 0 bytes gmem
ptxas warning : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized due to the presence of Extern calls in the function 'k'
"""


def test_a_failing_ptxas_warning_fails_the_build_and_is_not_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSERIR_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(nvrtc, "_compile",
                        lambda source, name, options, want: calls.append(1)
                        or (b"\x7fELF-not-run", WARNED))
    for _ in range(2):                     # refused each time: nothing was cached
        with pytest.raises(CompileError) as caught:
            nvrtc.compile_to_cubin("// warned\n", "k", "sm_90")
        assert "C7510: wgmma was serialized (a function call between wgmma and its wait)" \
            in str(caught.value)
        assert "Potential Performance Loss" in str(caught.value)
    assert len(calls) == 2


def test_other_warnings_pass():
    nvrtc.check_warnings("ptxas warning : (C7000) something else\n", "k")
    nvrtc.check_warnings("", "k")


@pytest.mark.gpu
def test_a_kernel_built_for_sm_90a_runs_on_the_gpu(mma_only_on_sm90a, monkeypatch):
    """On an sm_90 GPU the chosen a target loads and computes: the seed matmul, built for
    sm_90a because its mma is marked arch-specific here, against a float64 matmul."""
    import cupy as cp
    import numpy as np
    if nvrtc.default_arch() != "sm_90":
        pytest.skip("needs an sm_90 GPU")
    asked = []
    real = nvrtc.compile_to_cubin
    monkeypatch.setattr(nvrtc, "compile_to_cubin",
                        lambda source, name, arch=None, **kw: asked.append(arch)
                        or real(source, name, arch, **kw))
    exe = codegen.compile(fuserir.parse(SEED.read_text().replace("splitk_nt", "on_sm90a")),
                          backend="cuda")
    rng = np.random.default_rng(0)
    m, n, k = 256, 384, 1000
    a = cp.asarray(rng.uniform(-1, 1, (k, m)).astype(np.float16))
    b = cp.asarray(rng.uniform(-1, 1, (k, n)).astype(np.float16))
    out = exe.run({"A": a, "B": b})["out"].astype(cp.float64)
    ref = a.astype(cp.float64).T @ b.astype(cp.float64)
    assert asked == ["sm_90a"]
    assert int((cp.abs(out - ref) > 1e-5 * k + 2 ** -10 * cp.abs(ref)).sum()) == 0
