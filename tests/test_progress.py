"""Progress bars (fuserir.progress): shown on stderr for long operations where stderr is
a terminal (after a second) or FUSERIR_PROGRESS=1 asks; silent in tests, pipes and logs,
and under FUSERIR_PROGRESS=0 even on a terminal."""

import io

import numpy as np

import codegen
import fuserir
from driver import compiler, plans
from fuserir import progress as progress_module
from fuserir.progress import progress

from test_builder import BIAS_RELU


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def _interpret(monkeypatch, stream):
    """Compile (afresh: no cache in memory or on disk) and run BIAS_RELU in the
    interpreter, with `stream` as stderr; what was written there."""
    monkeypatch.setattr(compiler, "_compiled", compiler.collections.OrderedDict())
    monkeypatch.setattr(plans.PlanCache, "load", lambda self, key: None)
    monkeypatch.setattr("sys.stderr", stream)
    exe = codegen.compile(fuserir.parse(BIAS_RELU), backend="interp")
    x, b = np.ones((3, 300), np.float32), np.ones(300, np.float32)
    assert np.array_equal(exe.run({"x": x, "b": b})["y"], np.full((3, 300), 2, np.float32))
    return stream.getvalue()


def test_silent_where_stderr_is_not_a_terminal(monkeypatch):
    monkeypatch.delenv("FUSERIR_PROGRESS", raising=False)
    assert _interpret(monkeypatch, io.StringIO()) == ""


def test_forced_bars_show_the_interpreters_blocks(monkeypatch):
    monkeypatch.setenv("FUSERIR_PROGRESS", "1")
    shown = _interpret(monkeypatch, io.StringIO())
    assert "interpreting bias_relu" in shown and "/3 " in shown     # 3 blocks
    assert "building bias_relu" in shown                             # the compile


def test_on_a_terminal_a_bar_waits_a_second_and_zero_silences_it(monkeypatch):
    monkeypatch.delenv("FUSERIR_PROGRESS", raising=False)
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    bar = progress("quick", total=3)
    assert not isinstance(bar, progress_module._Silent)
    with bar:
        bar.update(3)                       # done before the delay: nothing printed
    assert "quick" not in terminal.getvalue()
    monkeypatch.setenv("FUSERIR_PROGRESS", "0")
    assert isinstance(progress("never", total=3), progress_module._Silent)
