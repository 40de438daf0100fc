"""The plan cache (driver.plans): a plan built once is loaded by later processes instead of
being scheduled, lowered, proved and compiled again; its key holds everything that
decides the kernels (the fusion, backend, options, which plan, the device model, the
compiler's own source), so a change of any of them builds afresh; an entry that does not
check out is rebuilt. Compiles build only what runs: an automatic schedule is planned at
the first call of its sizes or at precompile(), not at compile(). A "later process" is
this one with its in-memory caches emptied."""

import numpy as np
import pytest

import codegen
import fuserir
from driver import compiler, plans
from fuserir.device import H200
from fuserir.errors import FuserirError
from lowering.verify import async_protocol

from test_builder import BIAS_RELU

SOFTMAX = """
fusion softmax(x: f32[M, N]) {
  m = max(x, axes=[1])
  e = exp(x - broadcast(m, [false, true]))
  s = sum(e, axes=[1])
  out = e / broadcast(s, [false, true])
  output out
}
"""


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSERIR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(compiler, "_compiled", compiler.collections.OrderedDict())
    monkeypatch.setattr(async_protocol, "_VERDICTS", {})
    monkeypatch.setattr(plans, "stats", dict.fromkeys(plans.stats, 0))


def _new_process(monkeypatch):
    """Forget what this process keeps in memory (compiles, proofs)."""
    compiler._compiled.clear()
    async_protocol._VERDICTS.clear()


def _no_lowering(monkeypatch):
    """Make any scheduling or lowering fail: what follows must load its plans."""
    def refuse(*args, **kwargs):
        raise AssertionError("lowered instead of loading the plan")
    from driver import build, segmentation
    monkeypatch.setattr(build, "lower", refuse)
    monkeypatch.setattr(segmentation, "lower", refuse)


def _entries(tmp_path):
    directory = tmp_path / "cache" / "plans"
    return sorted(directory.iterdir()) if directory.exists() else []


def test_an_explicit_schedule_is_loaded_by_a_later_process(tmp_path, monkeypatch):
    first = codegen.compile(fuserir.parse(BIAS_RELU), backend="interp")
    assert plans.stats["stores"] == 1 and len(_entries(tmp_path)) == 1
    _new_process(monkeypatch)
    _no_lowering(monkeypatch)
    again = codegen.compile(fuserir.parse(BIAS_RELU), backend="interp")
    assert plans.stats["hits"] == 1
    assert [k.source for k in again.kernels] == [k.source for k in first.kernels]
    x, b = np.ones((3, 130), np.float32), np.ones(130, np.float32)
    assert np.array_equal(again.run({"x": x, "b": b})["y"], first.run({"x": x, "b": b})["y"])


def test_an_automatic_schedule_is_planned_at_its_first_call_not_at_compile(tmp_path,
                                                                          monkeypatch):
    exe = codegen.compile(fuserir.parse(SOFTMAX), backend="interp")
    assert plans.stats["stores"] == 0 and not _entries(tmp_path)     # nothing built yet
    x = np.random.default_rng(0).standard_normal((4, 40)).astype(np.float32)
    got = exe.run({"x": x})["out"]
    assert np.allclose(got, fuserir.evaluate(exe.fusion, {"x": x})["out"], rtol=1e-5)
    assert plans.stats["stores"] == 1
    _new_process(monkeypatch)
    _no_lowering(monkeypatch)
    again = codegen.compile(fuserir.parse(SOFTMAX), backend="interp")
    assert np.array_equal(again.run({"x": x})["out"], got)
    assert plans.stats["hits"] == 1


def test_precompile_builds_what_a_call_of_those_sizes_takes(tmp_path, monkeypatch):
    exe = codegen.compile(fuserir.parse(SOFTMAX), backend="interp")
    [kernels] = exe.precompile({"M": 4, "N": 40})
    assert [k.name for k in kernels] == ["softmax"]
    _no_lowering(monkeypatch)             # the call plans nothing: precompile did
    x = np.ones((4, 40), np.float32)
    assert np.allclose(exe.run({"x": x})["out"], 1 / 40)
    _new_process(monkeypatch)
    codegen.compile(fuserir.parse(SOFTMAX), backend="interp").run({"x": x})
    assert plans.stats["hits"] == 1


def test_precompile_says_what_it_needs(monkeypatch):
    exe = codegen.compile(fuserir.parse(SOFTMAX), backend="interp")
    with pytest.raises(FuserirError, match=r"fusion softmax also needs N"):
        exe.precompile({"M": 4})
    with pytest.raises(FuserirError, match=r"takes sizes as dicts .* got tuple"):
        exe.precompile((4, 40))


@pytest.mark.parametrize("change", ["schedule", "backend", "options", "compiler"])
def test_what_decides_the_kernels_is_in_the_key(change, tmp_path, monkeypatch):
    codegen.compile(fuserir.parse(BIAS_RELU), backend="interp")
    _new_process(monkeypatch)
    text, backend, options = BIAS_RELU, "interp", {}
    if change == "schedule":
        text = BIAS_RELU.replace("y.split(1, 128)", "y.split(1, 64)")
        assert text != BIAS_RELU
    elif change == "backend":
        backend = "cuda"            # NVRTC compiles without a GPU
    elif change == "options":
        options = {"verify": False}
    else:
        monkeypatch.setattr(plans, "compiler_version", lambda: "another compiler")
    codegen.compile(fuserir.parse(text), backend=backend, **options)
    assert plans.stats["hits"] == 0 and plans.stats["stores"] == 2
    assert len(_entries(tmp_path)) == 2


def test_the_device_model_is_in_the_key():
    key = plans.plan_key("a compile", True, None, H200)
    assert key != plans.plan_key("a compile", True, None, H200.with_(tma=False))
    assert key != plans.plan_key("a compile", False, None, H200)
    assert key != plans.plan_key("a compile", True, (("stages", 4),), H200)
    assert key == plans.plan_key("a compile", True, None, H200)


@pytest.mark.parametrize("damage", ["truncated", "flipped", "another key"])
def test_an_entry_that_does_not_check_out_is_rebuilt(damage, tmp_path, monkeypatch):
    first = codegen.compile(fuserir.parse(BIAS_RELU), backend="interp")
    [entry] = _entries(tmp_path)
    data = entry.read_bytes()
    if damage == "truncated":
        entry.write_bytes(data[:len(data) // 2])
    elif damage == "flipped":
        entry.write_bytes(data[:-10] + bytes([data[-10] ^ 1]) + data[-9:])
    else:                                  # another plan's valid entry, copied over it
        codegen.compile(fuserir.parse(BIAS_RELU.replace("y.split(1, 128)",
                                                        "y.split(1, 64)")), backend="interp")
        [other] = [e for e in _entries(tmp_path) if e != entry]
        entry.write_bytes(other.read_bytes())
    monkeypatch.setattr(plans, "stats", dict.fromkeys(plans.stats, 0))
    _new_process(monkeypatch)
    again = codegen.compile(fuserir.parse(BIAS_RELU), backend="interp")
    assert plans.stats["hits"] == 0 and plans.stats["rejects"] == 1
    assert plans.stats["stores"] == 1                     # rebuilt and rewritten
    assert again.kernels[0].source == first.kernels[0].source
    _new_process(monkeypatch)
    codegen.compile(fuserir.parse(BIAS_RELU), backend="interp")
    assert plans.stats["hits"] == 1


def test_dumps_after_passes_bypass_the_cache(tmp_path, monkeypatch, capsys):
    codegen.compile(fuserir.parse(BIAS_RELU), backend="interp")
    _new_process(monkeypatch)
    monkeypatch.setenv("FUSERIR_DUMP_AFTER", "insert_syncs")
    codegen.compile(fuserir.parse(BIAS_RELU), backend="interp")
    assert "insert_syncs" in capsys.readouterr().err
    assert plans.stats["hits"] == 0


def test_the_cache_lives_under_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.delenv("FUSERIR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    codegen.compile(fuserir.parse(BIAS_RELU), backend="interp")
    assert list((tmp_path / "xdg" / "fuserir" / "plans").iterdir())
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")      # not absolute: ignored
    from codegen.disk_cache import cache_root
    assert cache_root() == __import__("pathlib").Path.home() / ".cache" / "fuserir"


def test_an_unwritable_cache_still_compiles(tmp_path, monkeypatch):
    blocker = tmp_path / "a file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("FUSERIR_CACHE_DIR", str(blocker))
    exe = codegen.compile(fuserir.parse(BIAS_RELU), backend="interp")
    assert exe.kernels and plans.stats["write_errors"] == 1


TINY_MATMUL = ("fusion mm(A: f16[M, K], B: f16[K, N]) {\n  acc = matmul(A, B, layout=TT)\n"
               "  out = cast(acc, f16)\n  output out\n}\n")


def test_the_interpreter_plans_tiles_fitted_to_the_sizes_unless_told_a_device(rng):
    """Without a device model the interpreter plans the mma.sync path on the smallest
    tiles that cover each call's sizes (its cost is every thread of a tile); told the
    H200, it interprets the H200's kernels."""
    f = fuserir.parse(TINY_MATMUL)
    exe = codegen.compile(f, backend="interp")
    data = {"A": rng.integers(-3, 4, (1, 1)).astype(np.float16),
            "B": rng.integers(-3, 4, (1, 8)).astype(np.float16)}
    assert np.array_equal(exe.run(data)["out"], fuserir.evaluate(f, data)["out"])
    [kernel] = exe.kernels_for(data)
    assert "mma.m16n8k16" in kernel.kir_text and "wgmma" not in kernel.kir_text
    assert dict(exe.plan_for({"M": 1, "N": 8, "K": 1})[0])["cta_tile"] == (16, 16, 16)
    assert dict(exe.plan_for({"M": 70, "N": 20, "K": 100})[0])["cta_tile"] == (128, 32, 32)
    h200 = codegen.compile(fuserir.parse(TINY_MATMUL), backend="interp", device=H200)
    assert "wgmma" in h200.plan_for({"M": 1, "N": 8, "K": 1})[2][0].kernel.kir_text
    with pytest.raises(FuserirError, match="device must be a fuserir.device.Device .*got str"):
        codegen.compile(f, backend="interp", device="H200")
