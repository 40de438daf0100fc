"""Every example parses, evaluates to what plain numpy computes, and round-trips."""

import pathlib

import numpy as np
import pytest

import fuserir
from fuserir.ir.equality import first_difference

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def load(name):
    return fuserir.dsl.parse_file(EXAMPLES / name)


def exact_matmul(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.fz")))
def test_example_round_trips(name):
    fusion = load(name)
    again = fuserir.parse(fuserir.print_fusion(fusion))
    assert first_difference(fusion, again) is None


@pytest.mark.parametrize("splitk", [1, 3, 5, 13])
def test_splitk_matmul(splitk, rng):
    f = load("splitk_matmul.fz")
    assert [t.name for t in f.tensors] == ["A", "B", "partial", "acc", "out"]
    assert [str(a) for a in f.tensor("partial").logical] == \
        ["i{M}", "i{N}", "i{splitk}", "r{ceildiv(K, splitk)}"]
    k, m, n = 32 * 13, 24, 16
    a = rng.standard_normal((k, m)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    out = fuserir.evaluate(f, {"A": a, "B": b, "splitk": splitk})["out"]
    assert out.dtype == np.float16
    exact = exact_matmul(a.T, b)
    np.testing.assert_allclose(out.astype(np.float64), exact, rtol=2 ** -10, atol=1e-5 * k)


def test_bias_relu_matmul(rng):
    f = load("bias_relu_matmul.fz")
    a = rng.standard_normal((20, 40)).astype(np.float16)
    b = rng.standard_normal((40, 12)).astype(np.float16)
    bias = rng.standard_normal(12).astype(np.float32)
    out = fuserir.evaluate(f, {"A": a, "B": b, "bias": bias})["out"]
    exact = np.maximum(exact_matmul(a, b) + bias[None, :], 0)
    np.testing.assert_allclose(out.astype(np.float64), exact, rtol=2 ** -10, atol=1e-5 * 40)


def test_pointwise_chain(rng):
    import math
    f = load("pointwise_chain.fz")
    assert f.tensor("xs").memory_type is fuserir.MemoryType.shared
    x = rng.standard_normal((5, 300)).astype(np.float32)
    y = rng.standard_normal((5, 300)).astype(np.float32)
    out = fuserir.evaluate(f, {"x": x, "y": y})["out"]
    v = x.astype(np.float64) * 0.5 + y
    gelu = 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))
    exact = gelu - 1 / (1 + np.exp(-y.astype(np.float64))) / 4
    np.testing.assert_allclose(out.astype(np.float64), exact, rtol=2 ** -7, atol=1e-6)


def test_softmax(rng):
    f = load("softmax.fz")
    x = rng.standard_normal((7, 33)).astype(np.float32)
    out = fuserir.evaluate(f, {"x": x})["out"]
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-6)


def test_main_job_demo_runs_and_shows_every_barrier_with_its_reason():
    import subprocess
    import sys
    result = subprocess.run([sys.executable, str(EXAMPLES / "demo.py")], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "sync1 (S" in out and "sync4 (S" in out
    assert "RAW on A_cache: threads read bytes that other threads wrote" in out
    assert "WAR on B_cache: threads overwrite bytes that other threads read, across loop " \
           "iterations" in out
    # the drain the seed report's kernel lacked, with its reason
    assert "(S48, cp.async.wait_group 0):" in out
    assert "async-pending on A_cache/out_cache: an async copy may still be writing these " \
           "bytes" in out
    assert "mismatches vs float64 (rtol 2^-10, atol 1e-5*K): 0;" in out
    assert out.count("the verifier refuses the kernel") == 4
    assert out.count("the interpreter sees it") == 4
    # the summary a newcomer reads at the end
    summary = " ".join(out.split("== summary ==")[1].split())
    assert summary.startswith("What ran: the split-K matmul of the original report")
    assert "0 mismatches against a float64 matmul." in summary
    assert ("The original kernel lacked sync2, the cp.async drain (cp.async.wait_group 0) "
            "before the epilogue writes out_cache over the operand buffers' shared memory"
            in summary)
    assert ("With sync2 dropped, the static verifier refuses to emit the kernel (18 hazards, "
            "async-pending on A_cache/out_cache), and the interpreter, run anyway, reports "
            "async-pending on A_cache" in summary)


@pytest.mark.parametrize("command", ["check", "inspect", "run"])
@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.fz")))
def test_the_cli_works_on_every_example_at_its_default_sizes(command, name):
    # the defaults are twice the largest tile plus 3 (M=515 for the seed's 256-row tiles):
    # partial tiles everywhere, and rows no 16-byte copy fits, on the same schedule
    from test_cli import fuserir as cli
    result = cli(command, EXAMPLES / name)
    assert result.returncode == 0, result.stdout + result.stderr
    if name == "seed_matmul.fz":
        assert "K=67, M=515, N=259" in result.stdout


def test_center_rows_in_the_reference_and_the_interpreter(rng):
    """Views, a size as a value and a declared size-1 axis, against numpy."""
    import codegen
    f = load("center_rows.fz")
    x = rng.standard_normal((6, 40)).astype(np.float32)
    w = rng.standard_normal((1, 40)).astype(np.float32)
    expected = ((x - x.astype(np.float64).mean(axis=1, keepdims=True)) * w).T
    ref = fuserir.evaluate(f, {"x": x, "w": w})["out"]
    np.testing.assert_allclose(ref, expected, rtol=1e-5, atol=1e-6)
    out = codegen.compile(f, backend="interp").run({"x": x, "w": w})["out"]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
