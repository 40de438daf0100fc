"""tools/dump_kernels.py, the restructuring's behaviour check: it records every kernel
source emitted (wherever a module bound emit_cuda), and its comparison fails when the
two sides' sets of sources differ, naming the contexts."""

import pathlib
import sys

import codegen
import fuserir

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tools import dump_kernels  # noqa: E402

SCALE = "fusion scale(x: f32[N]) {\n  y = x * 2.0\n  output y\n}\n"


def test_the_recorder_sees_the_driver_emit_and_writes_each_source_once(tmp_path,
                                                                       monkeypatch):
    import collections

    import codegen.cuda
    import driver.build
    import driver.compiler
    # as in the tool's own process: the driver's emit is CUDA's (this suite's conftest
    # wraps it), and nothing is compiled yet (no cache hit)
    monkeypatch.setattr(driver.build, "emit_cuda", codegen.cuda.emit_cuda)
    monkeypatch.setattr(driver.compiler, "_compiled", collections.OrderedDict())
    recorder = dump_kernels.Recorder()
    monkeypatch.setattr(codegen.cuda, "emit_cuda", recorder.original)  # undone after
    with recorder.within("scale"):
        codegen.compile(fuserir.parse(SCALE), backend="interp").plan_for({"N": 1000})
    recorder.write(tmp_path)
    manifest = (tmp_path / "manifest.txt").read_text().splitlines()
    assert manifest and all(line.endswith(" scale") for line in manifest)
    sources = list((tmp_path / "sources").iterdir())
    assert len(sources) == len({line.split()[0] for line in manifest})
    assert "scale" in sources[0].read_text()


def _dump(root, pairs):
    root.mkdir()
    (root / "manifest.txt").write_text("".join(f"{sha} {ctx}\n" for sha, ctx in pairs))
    return root


def test_compare_fails_and_names_the_context_of_a_changed_source(tmp_path, capsys):
    before = _dump(tmp_path / "a", [("aa", "test one"), ("bb", "test two")])
    same = _dump(tmp_path / "b", [("bb", "test two"), ("aa", "test one moved")])
    changed = _dump(tmp_path / "c", [("aa", "test one"), ("cc", "test two")])
    assert dump_kernels.compare(before, same) == 0
    assert dump_kernels.compare(before, changed) == 1
    out = capsys.readouterr().out
    assert "only before: test two" in out and "only after: test two" in out
