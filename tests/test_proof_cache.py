"""The driver's cache of the async verifier's proofs (driver.proofs): a proved kernel is
kept on disk beside NVRTC's cubins, by its text and the verifier's version (the hash of
every module of lowering); lowering's verifier reads and writes no files itself, and asks
the memo the driver hands it. A second compile proves nothing it proved before; another
verifier version, or a kernel with findings, is checked again."""

import pathlib

import hopper_pipelines as hp
import fuserir
from driver import proofs
from driver.build import build_kernel
from driver.proofs import PROOFS, DiskProofs
from fuserir.scheduler import MatmulParams, schedule_matmul
from lowering import kir
from lowering.verify import async_protocol, async_runtime
from lowering.verify.async_protocol import check_async_protocol


def _kept(root):
    directory = root / "proofs"
    return sorted(directory.iterdir()) if directory.exists() else []


def test_a_proof_is_kept_on_disk_for_this_verifier_version(tmp_path, monkeypatch):
    """A proved kernel is remembered across processes (an empty file named by the
    kernel's text and the verifier's source); a kernel with findings is not."""
    monkeypatch.setenv("FUSERIR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(async_protocol, "_VERDICTS", {})
    assert check_async_protocol(hp.sched_matmul(stages=2), memo=PROOFS) == []
    assert len(_kept(tmp_path)) == 1
    monkeypatch.setattr(async_protocol, "_VERDICTS", {})
    monkeypatch.setattr(async_runtime, "Trace", None)        # no unrolling: from disk
    assert check_async_protocol(hp.sched_matmul(stages=2), memo=PROOFS) == []
    monkeypatch.undo()
    monkeypatch.setenv("FUSERIR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(async_protocol, "_VERDICTS", {})
    assert check_async_protocol(hp.sched_matmul(stages=2, drop=("init_barrier",)),
                                memo=PROOFS)
    assert len(_kept(tmp_path)) == 1


def test_lowering_alone_keeps_no_proof_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSERIR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(async_protocol, "_VERDICTS", {})
    assert check_async_protocol(hp.sched_matmul(stages=2)) == []
    assert not any(tmp_path.iterdir())


def test_another_verifier_version_proves_again(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSERIR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(async_protocol, "_VERDICTS", {})
    assert check_async_protocol(hp.sched_matmul(stages=2), memo=PROOFS) == []
    unrolled = []
    real = async_runtime.Trace

    def recording(*args):
        unrolled.append(args)
        return real(*args)
    monkeypatch.setattr(async_runtime, "Trace", recording)
    monkeypatch.setattr(async_protocol, "_VERDICTS", {})
    other = DiskProofs(version="0" * 16)
    assert not other.proved(kir.format_kernel(hp.sched_matmul(stages=2)))
    assert check_async_protocol(hp.sched_matmul(stages=2), memo=other) == []
    assert unrolled                                   # proved again, not read from disk
    assert len(_kept(tmp_path)) == 2                  # and kept for that version too


def _hopper_fusion():
    f = fuserir.parse("fusion mm(A: f16[K, M], B: f16[K, N]) {\n"
                      "  acc = matmul(A, B, layout=NT)\n  out = cast(acc, f16)\n"
                      "  output out\n}\n")
    schedule_matmul(f, MatmulParams(cta_tile=(128, 128, 64), warp_tile=(64, 128, 64),
                                    instruction_tile=(64, 128, 16), stages=2))
    return f


def test_a_second_compile_proves_nothing_it_proved_before(tmp_path, monkeypatch):
    """The driver hands lowering its cache: a build in a new process (here: with the
    in-process verdicts forgotten) re-checks only the kernels that had findings (sync
    insertion's first tries), and proves none again."""
    monkeypatch.setenv("FUSERIR_CACHE_DIR", str(tmp_path))
    proved = []
    real = async_protocol.check_every_case

    def recording(*args):
        verdict = real(*args)
        proved.append(not verdict)
        return verdict
    monkeypatch.setattr(async_protocol, "check_every_case", recording)
    sources = []
    for _ in range(2):
        monkeypatch.setattr(async_protocol, "_VERDICTS", {})
        proved.clear()
        sources.append(build_kernel(_hopper_fusion(), "interp").source)
        if not sources[1:]:
            assert any(proved) and _kept(tmp_path)
    assert not any(proved)
    assert sources[0] == sources[1]


def test_a_kept_proof_depends_on_every_module_of_lowering():
    """A proof on disk is keyed by the hash of the verifier's sources: the kernel IR and its
    effects, the checks, the index arithmetic, wherever in lowering/ they live, and the
    instruction descriptors and operator table they read."""
    import lowering
    root = pathlib.Path(lowering.__file__).resolve().parents[1]
    names = {p.relative_to(root).as_posix() for p in proofs.verifier_sources()}
    assert {"lowering/kir/effects.py", "lowering/kir/statements.py",
            "lowering/verify/async_order.py", "lowering/verify/async_protocol.py",
            "lowering/indexing/arith.py", "fuserir/instructions.py",
            "fuserir/op_table.py"} <= names
