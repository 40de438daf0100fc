"""reshape: a tensor's elements in row-major order in another shape, as a logical domain
made of its root axes by merges and splits. Shapes and the transforms chosen, located
errors, the DSL round trip, and kernels (fused with pointwise ops, views, slices,
reductions; automatic schedules) in the interpreter against numpy and the reference."""

import numpy as np
import pytest

import codegen
import fuserir
from fuserir import DataType, Fusion, FusionError, ops
from fuserir.errors import DslError
from fuserir.ir.equality import structurally_equal
from fuserir.ir.iterdomain import Merge, Split, history

D = DataType


def shape(tv):
    return [str(e) for e in tv.shape]


def test_shapes_and_the_transforms_of_the_logical_domain():
    f = Fusion("g")
    x = f.new_input("x", D.f32, ["M", "N"])
    s = f.new_input("s", D.f32, [6, 4])
    h = f.new_input("h", D.f32, ["B", "S", "H", "D"])
    flat = ops.reshape(x, [-1])
    assert shape(flat) == ["M*N"]
    assert [type(t) for t in history(flat.logical)] == [Merge]
    heads = ops.reshape(ops.reshape(h, ["B", "S", -1]), ["B", "S", "H", "D"])
    assert shape(heads) == ["B", "S", "H", "D"]
    assert [type(t) for t in history(heads.logical)] == [Split]
    assert shape(ops.reshape(s, [3, 8])) == ["3", "8"]          # merged, then split
    assert [type(t) for t in history(ops.reshape(s, [3, 8]).logical)] == [Merge, Split]
    swapped = ops.reshape(x, ["N", "M"])                          # one group: M*N
    assert shape(swapped) == ["N", "M"] and len(history(swapped.logical)) == 2
    ones = ops.reshape(x, [1, "M", 1, "N"])
    assert shape(ones) == ["1", "M", "1", "N"] and history(ones.logical) == []
    assert ones.shape_axes[0].is_broadcast and ones.shape_axes[2].is_broadcast


@pytest.mark.parametrize("build, message", [
    (lambda s, m: ops.reshape(s, 24), "reshape: shape must be a list of sizes"),
    (lambda s, m: ops.reshape(s, [0, 24]), "reshape: size 0 of shape [0, 24] is neither "
     "positive nor -1 (the size that keeps the element count)"),
    (lambda s, m: ops.reshape(s, [-1, -1]), "reshape: shape [-1, -1] has 2 sizes -1; at most "
     "one size is solved for"),
    (lambda s, m: ops.reshape(s, [5, -1]), "reshape: the sizes [5] do not divide the 24 "
     "elements of s"),
    (lambda s, m: ops.reshape(s, [5, 5]), "reshape: shape [5, 5] holds 25 elements but s "
     "holds 24; a reshape keeps every element"),
    (lambda s, m: ops.reshape(m, ["N"]), "reshape: shape [N] holds N elements but m holds "
     "M*N; a reshape keeps every element"),
    (lambda s, m: ops.reshape(m, [2, -1]), "reshape: the sizes [2] do not divide the M*N "
     "elements of m"),
    (lambda s, m: ops.reshape(m, ["M", "K"]), "reshape: size K is neither a size of an input "
     "of g (M, N) nor a declared run-time scalar"),
])
def test_errors(build, message):
    f = Fusion("g")
    s, m = f.new_input("s", D.f32, [6, 4]), f.new_input("m", D.f32, ["M", "N"])
    with pytest.raises(FusionError) as caught:
        build(s, m)
    assert str(caught.value) == message


def test_dsl_errors_are_located():
    with pytest.raises(DslError) as caught:
        fuserir.parse("fusion f(x: f32[E]) {\n  y = reshape(x, [4, E / 4])\n  output y\n}\n")
    assert str(caught.value).startswith("<string>:2:7: reshape: shape [4, E / 4] holds "
                                        "4*(E / 4) elements but x holds E")


PROGRAM = """
fusion f(x: f32[B, S, H, D], s: f32[6, 4]) {
  t = reshape(permute(x, [0, 2, 1, 3]), [B*H, S, D])
  y = reshape(t * 2, [B, H, S*D]) + 1
  z = reshape(s, [3, -1])
  output y, z
}
"""


def test_print_and_parse_back():
    f = fuserir.parse(PROGRAM)
    text = fuserir.print_fusion(f)
    assert "reshape(permute(x, dims=[0, 2, 1, 3]), shape=[B*H, S, D])" in text
    assert "reshape(s, shape=[3, 8])" in text          # the -1 solved
    again = fuserir.parse(text)
    assert structurally_equal(again, f) and fuserir.print_fusion(again) == text


@pytest.mark.parametrize("body, numpy", [
    ("y = reshape(x, [M*N]) * 2", lambda x: x.reshape(-1) * 2),
    ("y = reshape(x * 2, [N, M]) + 1", lambda x: (x * 2).reshape(7, 5) + 1),
    ("y = transpose(reshape(x, [N, M]), 0, 1) * 2", lambda x: x.reshape(7, 5).T * 2),
    ("y = reshape(reshape(x, [M*N]) * 3, [M, N]) + x", lambda x: 4 * x),
    ("y = reshape(x, [1, M, 1, N]) - 1", lambda x: x.reshape(1, 5, 1, 7) - 1),
    ("y = sum(reshape(x, [M*N]), [0])", lambda x: x.sum()),
    ("y = slice(reshape(x, [M*N]), [1], [M*N], [2])", lambda x: x.reshape(-1)[1::2]),
    ("y = reshape(pad(x, [1, 0]), [M*(N + 1)])", lambda x: np.pad(x, ((0, 0), (1, 0)))
     .reshape(-1)),
])
def test_reshapes_in_kernels_equal_numpy(body, numpy, rng):
    f = fuserir.parse(f"fusion f(x: f32[M, N]) {{\n  {body}\n  output y\n}}\n")
    x = rng.integers(-3, 4, (5, 7)).astype(np.float32)     # integers: sums are exact
    exe = codegen.compile(f, backend="interp")
    np.testing.assert_array_equal(exe.run({"x": x})["y"], numpy(x))
    np.testing.assert_array_equal(fuserir.evaluate(f, {"x": x})["y"], numpy(x))
    assert len(exe.kernels) == 1


def test_heads_merged_into_rows_and_normalized_in_one_kernel(rng):
    """[B, S, H, D] -> [B, S, H*D], then each row less its maximum: the normalization
    scheduler takes the reshaped tensor as its full shape."""
    f = fuserir.parse("fusion f(x: f32[B, S, H, D]) {\n  t = reshape(x, [B, S, H*D])\n"
                      "  y = t - broadcast(max(t, [2]), [false, false, true])\n  output y\n}\n")
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    rows = x.reshape(2, 3, 20)
    exe = codegen.compile(f, backend="interp")
    np.testing.assert_array_equal(exe.run({"x": x})["y"], rows - rows.max(2, keepdims=True))
    assert len(exe.kernels) == 1


def test_a_reshaped_output_also_read_by_others(rng):
    f = fuserir.parse(PROGRAM)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    s = rng.standard_normal((6, 4)).astype(np.float32)
    out = codegen.compile(f, backend="interp").run({"x": x, "s": s})
    expected = (x.transpose(0, 2, 1, 3).reshape(8, 3, 5) * 2).reshape(2, 4, 15) + 1
    np.testing.assert_allclose(out["y"], expected, rtol=1e-6)
    np.testing.assert_array_equal(out["z"], s.reshape(3, 8))


@pytest.mark.gpu
def test_reshapes_on_the_gpu():
    import cupy as cp
    rng = np.random.default_rng(3)
    f = fuserir.parse(PROGRAM)
    x = rng.standard_normal((3, 50, 4, 16)).astype(np.float32)
    s = rng.standard_normal((6, 4)).astype(np.float32)
    out = codegen.compile(f, backend="cuda").run({"x": cp.asarray(x), "s": cp.asarray(s)})
    ref = fuserir.evaluate(f, {"x": x, "s": s})
    for name in ref:
        np.testing.assert_array_equal(cp.asnumpy(out[name]), ref[name], err_msg=name)
