"""Views: permute and transpose, squeeze and unsqueeze, expand and broadcast_in_dim, and
input axes declared of size 1. Each builder's shapes and located errors, the DSL round
trip, and kernels (automatic schedules, segments) in the interpreter against the reference
evaluator and numpy; the generated CUDA compiles with NVRTC."""

import numpy as np
import pytest

import codegen
import fuserir
from fuserir import DataType, Fusion, FusionError, ops
from fuserir.errors import DslError
from fuserir.ir.equality import structurally_equal

D = DataType


def shape(tv):
    return [str(e) for e in tv.shape]


def inputs(*shapes):
    f = Fusion("v")
    return f, [f.new_input(f"x{i}", D.f32, list(s)) for i, s in enumerate(shapes)]


# -- builders ---------------------------------------------------------------------------------

def test_view_shapes():
    f, (x, s) = inputs(["M", "N", "K"], ["M", 1, "N"])
    assert shape(ops.permute(x, [2, 0, 1])) == ["K", "M", "N"]
    assert shape(ops.transpose(x, 0, -1)) == ["K", "N", "M"]
    assert shape(ops.squeeze(s, 1)) == ["M", "N"]
    assert shape(ops.unsqueeze(x, -1)) == ["M", "N", "K", "1"]
    assert ops.unsqueeze(x, 0).shape_axes[0].is_broadcast
    assert shape(ops.expand(s, [-1, "K", "N"])) == ["M", "K", "N"]
    assert ops.expand(s, ["M", 1, "N"]) is s             # nothing to stretch: s itself
    assert shape(ops.broadcast_in_dim(ops.squeeze(s, [1]), ["M", "K", "N"], [0, 2])) == [
        "M", "K", "N"]


@pytest.mark.parametrize("build, message", [
    (lambda x, s: ops.permute(x, [0, 1]), "permute: dims [0, 1] name 2 of the 3 axes of x0; "
     "a permutation names each once"),
    (lambda x, s: ops.permute(x, [0, 0, 1]), "permute: dim 0 of x0 is listed twice"),
    (lambda x, s: ops.permute(x, [0, 1, 3]), "permute: dim 3 is out of range for x0 with 3 "
     "axes"),
    (lambda x, s: ops.transpose(x, 0, 1.0), "transpose: dim1 1.0 is not an integer"),
    (lambda x, s: ops.squeeze(x, [1]), "squeeze: axis 1 of x0 has extent N, not 1; only an "
     "axis of extent 1 can be squeezed"),
    (lambda x, s: ops.unsqueeze(x, 4), "unsqueeze: dim 4 is out of range for a result of 4 "
     "axes"),
    (lambda x, s: ops.expand(x, ["M", "N"]), "expand: shape ['M', 'N'] has 2 sizes, x0 has 3 "
     "axes"),
    (lambda x, s: ops.expand(x, ["M", 4, "K"]), "expand: axis 1 of x0 has extent N; only an "
     "axis of extent 1 expands (to 4)"),
    (lambda x, s: ops.expand(s, ["M", "B", "N"]), "expand: size B is neither a size of an "
     "input of v (M, N, K) nor a declared run-time scalar"),
    (lambda x, s: ops.expand(s, ["M", 0, "N"]), "expand: size 0 is neither a positive "
     "integer, -1 (keep) nor the name of a size"),
    (lambda x, s: ops.broadcast_in_dim(s, ["M", "N"], [0, 1]), "broadcast_in_dim: "
     "broadcast_dims [0, 1] name 2 axes but x1 has 3"),
    (lambda x, s: ops.broadcast_in_dim(s, ["M", 1, "K", "N"], [0, 2, 1]), "broadcast_in_dim: "
     "broadcast_dims [0, 2, 1] must increase"),
    (lambda x, s: ops.broadcast_in_dim(s, ["M", 1, "N"], [0, 1, 3]), "broadcast_in_dim: "
     "broadcast_dims entry 3 is not an axis of the 3-axis result"),
    (lambda x, s: ops.broadcast_in_dim(s, ["M", "K", "K"], [0, 1, 2]), "broadcast_in_dim: "
     "axis 2 of x1 has extent N; only an axis of extent 1 expands (to K)"),
])
def test_view_errors(build, message):
    f, (x, s) = inputs(["M", "N", "K"], ["M", 1, "N"])
    with pytest.raises(FusionError) as caught:
        build(x, s)
    assert str(caught.value) == message


def test_dsl_errors_are_located():
    head = "fusion f(x: f32[M, N]) {\n"
    with pytest.raises(DslError, match=r"<string>:2:7: permute: dim 0 of x is listed twice"):
        fuserir.parse(head + "  y = permute(x, [0, 0])\n  output y\n}\n")
    with pytest.raises(DslError, match=r"<string>:2:17: expand: shape must be a list of "
                                       r"sizes \(integers or names of sizes\)"):
        fuserir.parse(head + "  y = expand(x, M)\n  output y\n}\n")
    with pytest.raises(DslError, match=r"<string>:2:21: expand: shape must be a list of "
                                       r"sizes \(integers or names of sizes\)"):
        fuserir.parse(head + "  y = expand(x, [M, 2.5])\n  output y\n}\n")


# -- the DSL: every view prints and parses back -----------------------------------------------

PROGRAM = """
fusion f(x: f32[M, N], b: f32[1, N], c: f32[N], s: f32[M, 1, N]) {
  t = permute(x, [1, 0])
  u = transpose(t, 0, 1) + expand(b, [M, N])
  v = u * broadcast_in_dim(c, [M, N], [1]) + squeeze(s, [1])
  w = unsqueeze(v, 0) + unsqueeze(b, 0)
  output t, w
}
"""


def test_views_print_and_parse_back():
    f = fuserir.parse(PROGRAM)
    text = fuserir.print_fusion(f)
    assert "permute(x, dims=[1, 0])" in text and "expand(b, shape=[M, N])" in text
    assert "squeeze(s, dims=[1])" in text
    assert structurally_equal(fuserir.parse(text), f)


# -- kernels: the interpreter against the reference and numpy ---------------------------------

def data(rng, m=37, n=53):
    return {"x": rng.standard_normal((m, n)).astype(np.float32),
            "b": rng.standard_normal((1, n)).astype(np.float32),
            "c": rng.standard_normal((n,)).astype(np.float32),
            "s": rng.standard_normal((m, 1, n)).astype(np.float32)}


def test_views_in_kernels_equal_the_reference_and_numpy(rng):
    """Two outputs of different shapes: segmented; the segment that expands b to [M, N]
    reads no tensor of extent M, so M reaches its kernel as a run-time scalar."""
    f = fuserir.parse(PROGRAM)
    d = data(rng)
    out = codegen.compile(f, backend="interp").run(d)
    ref = fuserir.evaluate(f, d)
    x, b, c, s = d["x"], d["b"], d["c"], d["s"]
    assert np.array_equal(out["t"], x.T) and np.array_equal(ref["t"], x.T)
    expected = (((x + b) * c + s[:, 0, :]) + b)[None]
    assert out["w"].shape == (1, 37, 53)
    np.testing.assert_allclose(ref["w"], expected, rtol=1e-6)
    np.testing.assert_array_equal(out["w"], ref["w"])


@pytest.mark.parametrize("body, numpy", [
    ("w = x + expand(b * 2.0, [M, N])", lambda d: d["x"] + 2 * d["b"]),
    ("w = expand(b * 2.0, [M, N])", lambda d: np.broadcast_to(2 * d["b"], d["x"].shape)),
    ("w = x * broadcast_in_dim(c, [M, N], [1])", lambda d: d["x"] * d["c"]),
    ("w = x + b", lambda d: d["x"] + d["b"]),
    ("w = permute(x, [1, 0]) * 3.0", lambda d: d["x"].T * 3),
    ("w = sum(permute(x, [1, 0]), [1])", lambda d: d["x"].T.sum(axis=1)),
])
def test_one_kernel_views(body, numpy, rng):
    f = fuserir.parse(f"fusion f(x: f32[M, N], b: f32[1, N], c: f32[N]) {{\n  {body}\n"
                      "  output w\n}\n")
    d = data(rng, 5, 7)
    del d["s"]
    out = codegen.compile(f, backend="interp").run(d)["w"]
    np.testing.assert_allclose(out, numpy(d), rtol=1e-5, atol=1e-5)
    # (a sum in f32 against the reference's f64 sum rounded once: within an ulp or two)
    np.testing.assert_allclose(out, fuserir.evaluate(f, d)["w"], rtol=3e-7, atol=0)


def test_views_compile_to_cuda():
    f = fuserir.parse(PROGRAM)
    exe = codegen.compile(f, backend="cuda")
    steps = exe.plan_for({"M": 37, "N": 53}, device=None)[2]
    assert len(steps) >= 2 and all(step.kernel.cubin for step in steps)


# -- positions: axis_index, triu, tril --------------------------------------------------------

@pytest.mark.parametrize("dtype", [D.f32, D.i32, D.bool])
@pytest.mark.parametrize("diagonal", [-2, 0, 3])
def test_triu_and_tril_in_kernels_equal_numpy(dtype, diagonal, rng):
    f = fuserir.parse(f"fusion f(x: {dtype}[B, M, N]) {{\n  u = triu(x, {diagonal})\n"
                      f"  l = tril(x, diagonal={diagonal})\n  output u, l\n}}\n")
    x = rng.integers(-3, 4, (2, 5, 7)).astype(dtype.numpy)
    out = codegen.compile(f, backend="interp").run({"x": x})
    assert np.array_equal(out["u"], np.triu(x, diagonal))
    assert np.array_equal(out["l"], np.tril(x, diagonal))
    assert np.array_equal(fuserir.evaluate(f, {"x": x})["u"], np.triu(x, diagonal))


def test_axis_index_of_a_broadcast_axis_is_0_and_reads_no_values(rng):
    f = fuserir.parse("fusion f(x: f32[M, N], b: f32[1, N]) {\n"
                      "  r = axis_index(x + b, 0) + axis_index(b, 0)\n  output r\n}\n")
    x = rng.standard_normal((4, 3)).astype(np.float32)
    b = np.full((1, 3), np.nan, np.float32)                   # never read as a value
    out = codegen.compile(f, backend="interp").run({"x": x, "b": b})["r"]
    assert out.dtype == np.int64
    assert np.array_equal(out, np.broadcast_to(np.arange(4)[:, None], (4, 3)))


@pytest.mark.parametrize("build, message", [
    (lambda x, v: ops.triu(v), "triu: x1 has 1 axes; it needs at least 2 (the matrix is the "
     "last two)"),
    (lambda x, v: ops.tril(x, 1.5), "tril: diagonal 1.5 is not an integer"),
    (lambda x, v: ops.axis_index(x, 3), "axis_index: dim 3 is out of range for x0 with 3 "
     "axes"),
])
def test_position_errors(build, message):
    f, (x, v) = inputs(["M", "N", "K"], ["N"])
    with pytest.raises(FusionError) as caught:
        build(x, v)
    assert str(caught.value) == message


def test_where_of_two_numbers_in_kernels_keeps_its_dtype():
    """Three outputs, rebuilt per kernel (segments copy each expression): the copies keep
    the literals' dtypes."""
    f = fuserir.parse("fusion f(x: f32[N]) {\n  m = where(x > 0, 1.0, 0)\n"
                      "  i = where(x > 0, 1, -1)\n  b = where(x > 0, false, true)\n"
                      "  u = triu(broadcast(where(x > 0, 2.0, 3), [true, false]) + "
                      "broadcast(x, [false, true]) * 0, 0)\n"
                      "  output m, i, b, u\n}\n")
    x = np.array([-1, 2, 0, 3], np.float32)
    out = codegen.compile(f, backend="interp").run({"x": x})
    ref = fuserir.evaluate(f, {"x": x})
    for name, dtype in (("m", np.float32), ("i", np.int64), ("b", np.bool_),
                        ("u", np.float32)):
        assert out[name].dtype == dtype and np.array_equal(out[name], ref[name]), name
    assert np.array_equal(out["m"], [0, 1, 0, 1]) and np.array_equal(out["i"], [-1, 1, -1, 1])
