"""Every example parses, evaluates to what plain numpy computes, and round-trips."""

import pathlib

import numpy as np
import pytest

import fuserir
from fuserir.ir.equality import first_difference
from conftest import on_host

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
    assert "(S47, cp.async.wait_group 0):" in out
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


# -- the gallery: one example per op family, in the reference and the interpreter -------------

def gallery(name, inputs):
    """The example's outputs from the reference evaluator and from the interpreter
    (automatic schedules), and the number of kernels the interpreter ran."""
    import codegen
    f = load(name)
    exe = codegen.compile(f, backend="interp")
    return fuserir.evaluate(f, inputs), exe.run(inputs), len(exe.kernels)


def test_views_gallery(rng):
    x = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    scale = rng.standard_normal(3).astype(np.float32)
    bias = rng.standard_normal((1, 5)).astype(np.float32)
    expected = (x.transpose(0, 2, 1, 3) * scale[None, :, None, None]
                + bias[0][None, None, :, None]).transpose(0, 1, 3, 2).reshape(6, 4, 5)
    ref, out, kernels = gallery("views.fz", {"x": x, "scale": scale, "bias": bias})
    assert kernels == 1 and out["out"].shape == (6, 4, 5)
    np.testing.assert_allclose(ref["out"], expected, rtol=1e-6)
    np.testing.assert_array_equal(out["out"], ref["out"])


def test_sizes_and_scalars_gallery(rng):
    x = rng.standard_normal((3, 9)).astype(np.float32)
    expected = x * 0.5 + np.arange(9) / 8 + 1 / 9
    ref, out, _ = gallery("ramp.fz", {"x": x, "alpha": 0.5})
    np.testing.assert_allclose(ref["y"], expected, rtol=1e-6)
    np.testing.assert_allclose(out["y"], expected, rtol=1e-6)


def test_masks_gallery(rng):
    scores = rng.standard_normal((2, 6, 6)).astype(np.float32)
    scores[0, 4, 1] = np.nan
    valid = rng.random((2, 6)) < 0.7
    keep = np.tril(np.ones((6, 6), bool))[None] & valid[:, None, :]
    masked = np.where(keep, scores, -np.inf)
    expected = np.where(np.isnan(masked), 0, masked)
    ref, out, kernels = gallery("causal_mask.fz", {"scores": scores, "valid": valid})
    assert kernels == 1 and out["clean"][0, 4, 1] == (0 if valid[0, 1] else -np.inf)
    np.testing.assert_array_equal(ref["clean"], expected)
    np.testing.assert_array_equal(out["clean"], expected)


def test_slicing_gallery(rng):
    x = rng.standard_normal((4, 11)).astype(np.float32)
    x64 = x.astype(np.float64)
    circular = (np.roll(x64, 1, axis=1) + x64 + np.roll(x64, -1, axis=1)) / 3
    zeros = np.pad(x64, ((0, 0), (1, 1)))
    padded = (zeros[:, :-2] + x64 + zeros[:, 2:]) / 3
    ref, out, kernels = gallery("smooth.fz", {"x": x})
    assert kernels >= 2            # outputs of two shapes: at least two kernels
    for name, expected in [("circular", circular), ("padded", padded),
                           ("evens", circular[:, ::2])]:
        np.testing.assert_allclose(ref[name], expected, rtol=1e-6, atol=1e-7, err_msg=name)
        np.testing.assert_array_equal(out[name], ref[name], err_msg=name)


def test_rotary_embedding_gallery(rng):
    """Rotary position embedding: slices and a cat (rotate_half), cos and sin broadcast over
    batch and heads; one kernel, against numpy in f64."""
    import ml_dtypes
    b, h, s, d = 2, 3, 5, 8
    x = rng.standard_normal((b, h, s, d)).astype(ml_dtypes.bfloat16)
    angle = np.arange(s)[:, None] / 10000 ** (np.arange(d // 2) * 2 / d)[None, :]
    angle = np.concatenate([angle, angle], axis=1)
    cos, sin = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
    x64 = x.astype(np.float64)
    rotated = np.concatenate([-x64[..., d // 2:], x64[..., :d // 2]], axis=-1)
    expected = x64 * cos + rotated * sin
    ref, out, kernels = gallery("rotary.fz", {"x": x, "cos": cos, "sin": sin})
    assert kernels == 1 and out["out"].dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(ref["out"].astype(np.float64), expected, rtol=2 ** -7,
                               atol=1e-6)
    np.testing.assert_array_equal(out["out"], ref["out"])


# -- normalizations and losses: statistics written plainly, against numpy in f64 ---------------

def run_fusion(name, inputs, backend="interp"):
    """Example `name` run by `backend`: (outputs, number of kernels at these inputs'
    sizes on the device: a plan for other sizes may differ)."""
    import codegen
    fusion = load(name + ".fz")
    exe = codegen.compile(fusion, backend=backend)
    return on_host(exe.run(inputs), fusion), len(exe.kernels_for(inputs))


def near(actual, expected, rtol, name):
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=rtol,
                               atol=rtol * np.abs(expected).max(), err_msg=name)


def norm_inputs(rng, m=6, n=300):
    import ml_dtypes
    bf16 = ml_dtypes.bfloat16
    x, dy = (rng.standard_normal((m, n)).astype(bf16) * 2 + 1 for _ in range(2))
    w, b = (rng.standard_normal(n).astype(bf16) for _ in range(2))
    return x, dy, w, b


def test_layer_norm_forward_and_backward(rng, backend="interp"):
    x, dy, w, b = norm_inputs(rng)
    x64, dy64, w64, b64 = (a.astype(np.float64) for a in (x, dy, w, b))
    mean = x64.mean(1, keepdims=True)
    rstd = 1 / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    xhat = (x64 - mean) * rstd
    out, kernels = run_fusion("layer_norm", {"x": x, "w": w, "b": b},
                              backend)
    assert kernels == 1              # statistics and normalization: a row in one block
    near(out["y"], xhat * w64 + b64, 2 ** -7, "y")
    near(out["mean"], mean, 1e-6, "mean")
    near(out["rstd"], rstd, 1e-6, "rstd")
    g = dy64 * w64
    dx = rstd * (g - g.mean(1, keepdims=True) - xhat * (g * xhat).mean(1, keepdims=True))
    grads, kernels = run_fusion("layer_norm_backward",
                          {"dy": dy, "x": x, "w": w, "mean": out["mean"],
                           "rstd": out["rstd"]}, backend)
    assert kernels == 2              # dx along the rows; dw and db down the columns
    near(grads["dx"], dx, 2 ** -7, "dx")
    near(grads["dw"], (dy64 * xhat).sum(0), 2 ** -7, "dw")
    near(grads["db"], dy64.sum(0), 2 ** -7, "db")


def test_rms_norm_forward_and_backward(rng, backend="interp"):
    x, dy, w, _ = norm_inputs(rng)
    x64, dy64, w64 = (a.astype(np.float64) for a in (x, dy, w))
    rstd = 1 / np.sqrt((x64 * x64).mean(1, keepdims=True) + 1e-6)
    out, kernels = run_fusion("rms_norm", {"x": x, "w": w}, backend)
    assert kernels == 1
    near(out["y"], x64 * rstd * w64, 2 ** -7, "y")
    xhat, g = x64 * rstd, dy64 * w64
    grads, kernels = run_fusion("rms_norm_backward",
                          {"dy": dy, "x": x, "w": w, "rstd": out["rstd"]}, backend)
    assert kernels == 2
    near(grads["dx"], rstd * (g - xhat * (g * xhat).mean(1, keepdims=True)), 2 ** -7, "dx")
    near(grads["dw"], (dy64 * xhat).sum(0), 2 ** -7, "dw")


def test_masked_softmax(rng, backend="interp"):
    b, s = 3, 9
    scores = rng.standard_normal((b, s, s)).astype(np.float32) * 3
    valid = rng.random((b, s)) < 0.6
    valid[:, 0] = True                   # every query keeps at least its first key
    keep = np.tril(np.ones((s, s), bool))[None] & valid[:, None, :]
    masked = np.where(keep, scores.astype(np.float64), -np.inf)
    e = np.exp(masked - masked.max(2, keepdims=True))
    out, kernels = run_fusion("masked_softmax",
                              {"scores": scores, "valid": valid}, backend)
    assert kernels == 1
    near(out["probs"], e / e.sum(2, keepdims=True), 1e-6, "probs")
    assert (out["probs"][~np.broadcast_to(keep, scores.shape)] == 0).all()


def test_causal_attention_scores(rng, backend="interp"):
    import ml_dtypes
    bh, s, d = 3, 150, 32                # two tiles of query rows a head, the last partial
    q, k = (rng.standard_normal((bh, s, d)).astype(ml_dtypes.bfloat16) for _ in range(2))
    scale = np.float32(d ** -0.5)
    scores = q.astype(np.float64) @ np.swapaxes(k.astype(np.float64), 1, 2) * scale
    scores = scores.astype(ml_dtypes.bfloat16).astype(np.float64)   # rounded once to bf16
    future = np.triu(np.ones((s, s), bool), 1)[None]
    masked = np.where(future, -np.inf, scores)
    e = np.exp(masked - masked.max(2, keepdims=True))
    out, kernels = run_fusion("attention_scores", {"q": q, "k": k, "scale": scale}, backend)
    # the scores scaled and rounded in the batched matmul's epilogue (bf16 cross to the
    # softmax's kernel, not f32), the mask computed on either side
    assert kernels == 2 and out["p"].dtype == ml_dtypes.bfloat16
    near(out["p"], e / e.sum(2, keepdims=True), 2 ** -8, "p")
    assert (out["p"][np.broadcast_to(future, out["p"].shape)] == 0).all()


def test_cross_entropy_loss(rng, backend="interp"):
    import ml_dtypes
    m, c = 9, 1000
    logits = (rng.standard_normal((m, c)) * 2).astype(ml_dtypes.bfloat16)
    labels = rng.integers(0, c, m)
    l64 = logits.astype(np.float64)
    top = l64.max(1)
    logsumexp = np.log(np.exp(l64 - top[:, None]).sum(1)) + top
    out, kernels = run_fusion("cross_entropy",
                        {"logits": logits, "labels": labels}, backend)
    assert kernels == 2              # the rows' losses, then their mean
    near(out["loss"], (logsumexp - l64[np.arange(m), labels]).mean(), 1e-6, "loss")


def test_linear_layer_with_bias_and_gelu(rng, backend="interp"):
    import math
    import ml_dtypes
    bf16 = ml_dtypes.bfloat16
    x = rng.standard_normal((40, 64)).astype(bf16)
    w = (rng.standard_normal((24, 64)) / 8).astype(bf16)
    b = rng.standard_normal(24).astype(bf16)
    out, kernels = run_fusion("linear_gelu", {"x": x, "w": w, "b": b}, backend)
    assert kernels == 1 and out["y"].dtype == bf16
    v = x.astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)
    v = v.astype(bf16).astype(np.float64)      # linear's result is bf16, then the GELU
    near(out["y"], 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2))), 2 ** -7, "y")


@pytest.mark.gpu
@pytest.mark.parametrize("example", [test_layer_norm_forward_and_backward,
                                     test_rms_norm_forward_and_backward,
                                     test_masked_softmax, test_cross_entropy_loss,
                                     test_linear_layer_with_bias_and_gelu,
                                     test_causal_attention_scores])
def test_normalizations_and_losses_on_the_gpu(rng, example):
    example(rng, backend="cuda")
