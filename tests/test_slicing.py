"""slice, pad and cat (expressions that read other elements of their input through an
index map), and tensors made from nothing: full, iota, arange. Each builder's shapes and
located errors, bounds checked when the sizes are bound, the DSL round trip, and kernels
(automatic schedules, segments) in the interpreter against the reference evaluator and
numpy; every generated kernel compiles with NVRTC (conftest); a GPU test where a GPU is."""

import numpy as np
import pytest

import codegen
import fuserir
from fuserir import DataType, Fusion, FusionError, ops
from fuserir.errors import DslError, EvaluationError, ScheduleError
from fuserir.ir import extent as ext
from fuserir.ir.equality import structurally_equal
from lowering import kir
from conftest import on_host

D = DataType


def shape(tv):
    return [str(e) for e in tv.shape]


def graph():
    f = Fusion("g")
    return f, [f.new_input("x", D.f32, ["M", "N"]), f.new_input("y", D.f32, [4, 6]),
               f.new_input("h", D.f16, ["M", "N"]), f.new_input("v", D.f32, ["N"])]


# -- builders ---------------------------------------------------------------------------------

def test_shapes():
    f, (x, y, h, v) = graph()
    half = ext.floordiv(ext.Sym("N"), 2)
    assert shape(ops.slice(y, [1, -4], [4, 6], [2, 1])) == ["2", "4"]
    assert shape(ops.slice(y, [0, 0], [4, 6], [3, 4])) == ["2", "2"]
    assert shape(ops.slice(x, [1, 0], ["M", half])) == ["M - 1", "N / 2"]
    assert shape(ops.slice(x, [0, half], ["M", "N"])) == ["M", "N - N / 2"]
    assert shape(ops.slice(x, [0, -3], [-1, "N"], [1, 2])) == ["M - 1", "2"]
    assert shape(ops.pad(x, [1, 2])) == ["M", "N + 3"]
    assert shape(ops.pad(y, [0, 0, 2, "M"])) == ["M + 6", "6"]
    # the halves of a rotary embedding join back into N
    x1, x2 = ops.slice(x, [0, 0], ["M", half]), ops.slice(x, [0, half], ["M", "N"])
    assert shape(ops.cat([ops.neg(x2), x1], -1)) == ["M", "N"]
    assert shape(ops.cat([x, x, h.fusion.tensor("x")], 0)) == ["3*M", "N"]
    assert shape(ops.full(["M", 1, 3], 0.5, "f16", fusion=f)) == ["M", "1", "3"]
    assert ops.full(["M", 1], 1, D.i32, fusion=f).shape_axes[1].is_broadcast
    assert shape(ops.iota("N", fusion=f)) == ["N"]
    assert shape(ops.arange(1, "N", 2, fusion=f)) == ["ceildiv(N - 1, 2)"]
    assert shape(ops.arange(0.0, 1.0, 0.25, fusion=f)) == ["4"]


def test_one_tensor_twice_in_a_cat_is_read_through_a_copy():
    f, (x, y, h, v) = graph()
    joined = ops.cat([v, v], 0)
    first, second = joined.definition.inputs
    assert first is v and second.definition.op == "set" and second.definition.inputs == [v]


def test_sizes_of_an_extent_simplify():
    n, d = ext.Sym("N"), ext.floordiv(ext.Sym("D"), 2)
    assert ext.add(ext.sub(ext.Sym("D"), d), d) == ext.Sym("D")
    assert ext.sub(ext.add(n, 2), 2) == n
    assert str(ext.sub(ext.scale(n, 2), ext.add(n, 1))) == "N - 1"
    assert str(ext.scale(ext.add(n, ext.Sym("M")), -1)) == "-M - N"
    assert ext.evaluate(ext.add(ext.sub(n, d), 3), {"N": 10, "D": 7}) == 10


@pytest.mark.parametrize("build, message", [
    (lambda x, y, h, v: ops.slice(x, [0], ["M"]), "slice: start_indices has 1 entry but x "
     "has 2 axes (one per axis)"),
    (lambda x, y, h, v: ops.slice(x, [0, 0], ["M", "N"], [1, 0]), "slice: stride 0 for axis "
     "1 of x; a stride is a positive integer"),
    (lambda x, y, h, v: ops.slice(x, [0, 0], ["M", "N"], 2), "slice: strides must be a list "
     "with one entry per axis of x (2)"),
    (lambda x, y, h, v: ops.slice(y, [0, 7], [4, 6]), "slice: start 7 is outside axis 1 of "
     "y (extent 6)"),
    (lambda x, y, h, v: ops.slice(y, [0, -7], [4, 6]), "slice: start -7 is outside axis 1 "
     "of y (extent 6)"),
    (lambda x, y, h, v: ops.slice(y, [0, 3], [4, 3]), "slice: end 3 is not past start 3 on "
     "axis 1 of y (extent 6); a slice keeps at least one element"),
    (lambda x, y, h, v: ops.slice(y, [0, 0], [4, 8]), "slice: end 8 is past the end of axis "
     "1 of y (extent 6)"),
    (lambda x, y, h, v: ops.slice(x, [0, 0], ["M", "K"]), "slice: size K is neither a size "
     "of an input of g (M, N) nor a declared run-time scalar"),
    (lambda x, y, h, v: ops.slice(x, [0, 1.5], ["M", "N"]), "slice: start_indices entry "
     "1.5 is neither an integer nor a size"),
    (lambda x, y, h, v: ops.pad(x, [1]), "pad: pad_widths has 1 entry, an odd number; they "
     "are pairs (before, after), the last axis's first"),
    (lambda x, y, h, v: ops.pad(x, [1, 1, 1, 1, 1, 1]), "pad: pad_widths has 6 entries, 3 "
     "pairs, but x has 2 axes"),
    (lambda x, y, h, v: ops.pad(x, [1, -1]), "pad: width -1 for axis 1 of x is negative; pad "
     "adds elements (slice removes them)"),
    (lambda x, y, h, v: ops.pad(x, [1, 1], v), "pad: value v must be a number, a size or a "
     "rank-0 tensor of x's dtype f32; it is f32[N]"),
    (lambda x, y, h, v: ops.pad(x, [1, 1], x.fusion.new_input("s16", D.f16, [])),
     "pad: value s16 must be a number, a size or a rank-0 tensor of x's dtype f32; it is "
     "f16[]"),
    (lambda x, y, h, v: ops.pad(x, [1, 1], 1e39), "pad: literal 1e+39 is out of range for "
     "the dtype f32 of x"),
    (lambda x, y, h, v: ops.cat([x, v], 0), "cat: x has 2 axes but v has 1; cat joins "
     "tensors of one rank"),
    (lambda x, y, h, v: ops.cat([x, h], 0), "cat: x is f32 but h is f16; cast them to one "
     "dtype first"),
    (lambda x, y, h, v: ops.cat([x, y], 0), "cat: axis 1 extents differ: N (x) vs 6 (y); "
     "only axis 0 (dim) may differ"),
    (lambda x, y, h, v: ops.cat([x, x], 2), "cat: dim 2 is out of range for x with 2 axes"),
    (lambda x, y, h, v: ops.cat(x, 0), "cat: tensors must be a non-empty list of tensors"),
    (lambda x, y, h, v: ops.cat([], 0), "cat: tensors must be a non-empty list of tensors"),
    (lambda x, y, h, v: ops.full(["M"], 1.0, D.f32), "full: pass fusion= (the fusion to add "
     "the tensor to); with no tensor operand there is none to take it from"),
    (lambda x, y, h, v: ops.full(["M", 0], 1.0, D.f32, x.fusion), "full: size 0 of shape "
     "['M', 0] is not positive"),
    (lambda x, y, h, v: ops.full(["M"], 1.0, "f8", x.fusion), "full: unknown dtype 'f8'; "
     "expected one of f16, bf16, f32, f64, i32, i64, bool"),
    (lambda x, y, h, v: ops.full(["M"], 2.5, D.i32, x.fusion), "full: literal 2.5 cannot "
     "take the dtype i32 of its result"),
    (lambda x, y, h, v: ops.full(["M"], v, D.f32), "full: fill_value v has 1 axes; a tensor "
     "fill value is rank 0 (a host scalar)"),
    (lambda x, y, h, v: ops.iota(4, dtype="bool", fusion=x.fusion), "iota: dtype bool holds "
     "no sequence; use an integer or float dtype"),
    (lambda x, y, h, v: ops.iota(0, fusion=x.fusion), "iota: length 0 is not positive"),
    (lambda x, y, h, v: ops.arange(5, 2, fusion=x.fusion), "arange(5, 2, 1) is empty; it "
     "must hold at least one element"),
    (lambda x, y, h, v: ops.arange(0, 5, 0, fusion=x.fusion), "arange: step 0 is not a "
     "nonzero number"),
])
def test_errors(build, message):
    f, tensors = graph()
    with pytest.raises(FusionError) as caught:
        build(*tensors)
    assert str(caught.value) == message


@pytest.mark.parametrize("statement, where, message", [
    ("y = slice(x, [0, 0], [M, N], [1, 0])", "2:7", "slice: stride 0 for axis 1 of x"),
    ("y = slice(x, [0], [M])", "2:7", "slice: start_indices has 1 entry but x has 2 axes"),
    ("y = slice(x, [0, J], [M, N])", "2:20", "slice: 'J' in start_indices is not a size of "
     "the inputs of f (M, N, K) nor a declared run-time scalar"),
    ("y = slice(x, [0, 0], [M, N / 0])", "2:28", "size division by 0: a size is divided by a "
     "positive integer or a size"),
    ("y = pad(x, [1, -2])", "2:7", "pad: width -2 for axis 1 of x is negative"),
    ("y = pad(x, [1, 2], value=2.5e39)", "2:28", "pad: literal 2.5e+39 is out of range"),
    ("y = cat([x, exp(b)], dim=0)", "2:7", "cat: axis 1 extents differ: N (x) vs K (t"),
    ("y = cat([x, 2], dim=0)", "2:15", "cat: tensors must be a list of tensors"),
    ("y = cat([x, x], dim=3)", "2:7", "cat: dim 3 is out of range for x with 2 axes"),
    ("y = x + full([M, N], 2, bool)", "2:24", "full: literal 2 cannot take the dtype bool of "
     "its result"),
    ("y = slice(x, [0, 0], [M, N], strides=[1, N])", "2:40", "slice: strides must be a list "
     "of integers"),
    ("y = slice(x, [0, 0.5], [M, N])", "2:20", "slice: start_indices must be sizes: "
     "integers, names of sizes and + - * / of them"),
    ("y = pad(x, 2)", "2:14", "pad: pad_widths must be a list of sizes (integers, names of "
     "sizes or expressions of them: N - 2, D / 2)"),
    ("y = cat(x, dim=0)", "2:11", "cat: tensors must be a list of tensors"),
])
def test_dsl_errors_are_located(statement, where, message):
    text = f"fusion f(x: f32[M, N], b: f32[M, K]) {{\n  {statement}\n  output y\n}}\n"
    with pytest.raises(DslError) as caught:
        fuserir.parse(text)
    assert str(caught.value).startswith(f"<string>:{where}: {message}")


# -- bounds only the sizes decide: checked when the inputs are bound --------------------------

BOUNDED = """
fusion f(x: f32[M, N]) {
  y = slice(x, [0, 3], [M, N / 2]) * 2
  output y
}
"""


def test_bounds_past_the_sizes_are_refused_at_run():
    f = fuserir.parse(BOUNDED)
    x = np.ones((2, 10), np.float32)
    np.testing.assert_array_equal(fuserir.evaluate(f, {"x": x})["y"], 2 * x[:, 3:5])
    message = ("slice of x, axis 1: the end must be past the start: needs 4 <= N / 2, but "
               "N / 2 = 3 here")
    with pytest.raises(EvaluationError) as caught:
        fuserir.evaluate(f, {"x": np.ones((2, 7), np.float32)})
    assert str(caught.value) == message
    exe = codegen.compile(f, backend="interp")
    np.testing.assert_array_equal(exe.run({"x": x})["y"], 2 * x[:, 3:5])
    with pytest.raises(EvaluationError) as caught:
        exe.run({"x": np.ones((2, 7), np.float32)})
    assert str(caught.value) == message


def test_a_negative_bound_counts_from_a_symbolic_end():
    f = fuserir.parse("fusion f(x: f32[N]) {\n  y = slice(x, [-3], [-1])\n  output y\n}\n")
    x = np.arange(8, dtype=np.float32)
    assert shape(f.tensor("y")) == ["2"]
    np.testing.assert_array_equal(fuserir.evaluate(f, {"x": x})["y"], x[-3:-1])
    with pytest.raises(EvaluationError, match=r"slice of x, axis 0: the start must lie in the "
                       r"axis: needs 0 <= N - 3, but N - 3 = -1 here"):
        fuserir.evaluate(f, {"x": x[:2]})


# -- the DSL round trip -----------------------------------------------------------------------

PROGRAM = """
fusion f(x: f32[B, S, D], c: f32[S, D], s: f32[S, 1], k: i32[]) {
  x1 = slice(x, [0, 0, 0], [B, S, D / 2])
  x2 = slice(x, [0, 0, D / 2], [B, S, D])
  r = cat([-x2, x1], dim=-1)
  y = x * broadcast(c, [true, false, false]) + r * broadcast(s, [true, false, false])
  p = pad(x1, [1, 2, 0, 3], value=-1.5)
  e = slice(x, [0, 1, 0], [B, S, D - 1], strides=[1, 2, 3])
  q = full([S, 4], 2.5, f16) + broadcast(cast(iota(4, 1, 2, i32), f16), [true, false])
  a = arange(1, S, 2) * 3 + (D / 2)
  g = full([B, S], k, f32)
  output y, p, e, q, a, g
}
"""


def test_print_and_parse_back():
    f = fuserir.parse(PROGRAM)
    text = fuserir.print_fusion(f)
    assert "slice(x, start_indices=[0, 0, 0], end_indices=[B, S, D / 2], strides=[1, 1, 1])" \
        in text
    assert "cat([-x2, x1], dim=2)" in text and "pad(x1, pad_widths=[1, 2, 0, 3], value=-1.5)" \
        in text
    assert "full(shape=[S, 4], fill_value=2.5, dtype=f16)" in text and "+ (D / 2)" in text
    again = fuserir.parse(text)
    assert structurally_equal(again, f) and fuserir.print_fusion(again) == text


# -- kernels: the interpreter against the reference and numpy ---------------------------------

def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def test_every_op_in_kernels_equals_the_reference_and_numpy(rng):
    """Outputs of six shapes: segmented into kernels the automatic schedules fit."""
    f = fuserir.parse(PROGRAM)
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    c = rng.standard_normal((5, 8)).astype(np.float32)
    s = rng.standard_normal((5, 1)).astype(np.float32)
    d = {"x": x, "c": c, "s": s, "k": 7}
    out = codegen.compile(f, backend="interp").run(d)
    ref = fuserir.evaluate(f, d)
    expected = {
        "y": x * c + rotate_half(x) * s,
        "p": np.pad(x[..., :4], ((0, 0), (0, 3), (1, 2)), constant_values=-1.5),
        "e": x[:, 1::2, 0:7:3],
        "q": 2.5 + (1 + 2 * np.arange(4))[None, :].repeat(5, 0).astype(np.float16),
        "a": np.arange(1, 5, 2) * 3 + 4,
        "g": np.full((2, 5), 7.0),
    }
    for name, value in expected.items():
        assert out[name].dtype == ref[name].dtype, name
        np.testing.assert_allclose(ref[name], value, rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(out[name], ref[name], rtol=1e-6, err_msg=name)


@pytest.mark.parametrize("dtype", [D.f16, D.i32, D.bool])
@pytest.mark.parametrize("body, numpy", [
    ("y = slice(x, [1, 0], [M, N], [2, 3])", lambda x: x[1::2, ::3]),
    ("y = pad(x, [2, 1, 0, 2], value=1)", lambda x: np.pad(x, ((0, 2), (2, 1)),
                                                            constant_values=1)),
    ("y = pad(x, [0, 0, 1, 0])", lambda x: np.pad(x, ((1, 0), (0, 0)))),
    ("y = pad(x, [0, N], value=0)", lambda x: np.pad(x, ((0, 0), (0, x.shape[1])))),
    ("y = cat([x, x, slice(x, [0, 1], [M, N])], dim=1)",
     lambda x: np.concatenate([x, x, x[:, 1:]], axis=1)),
    ("y = cat([slice(x, [2, 0], [M, N]), slice(x, [0, 0], [2, N])], dim=0)",
     lambda x: np.roll(x, -2, axis=0)),
])
def test_one_kernel_of_each_op(body, numpy, dtype, rng):
    f = fuserir.parse(f"fusion f(x: {dtype}[M, N]) {{\n  {body}\n  output y\n}}\n")
    x = rng.integers(-3, 4, (5, 7)).astype(dtype.numpy)
    exe = codegen.compile(f, backend="interp")
    out = exe.run({"x": x})["y"]
    assert len(exe.kernels) == 1
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(out, numpy(x))
    np.testing.assert_array_equal(fuserir.evaluate(f, {"x": x})["y"], numpy(x))


@pytest.mark.parametrize("widths, numpy_widths", [
    ("[1, 2]", ((0, 0), (1, 2))), ("[0, 0, 2, 1]", ((2, 1), (0, 0))),
    ("[1, 0, 0, N]", ((0, "N"), (1, 0))), ("[0, 0]", ((0, 0), (0, 0)))])
def test_a_rank_0_tensor_pads_with_its_value(widths, numpy_widths, rng):
    """A host scalar as the pad value: in the reference and the interpreter, given as a
    0-d array and as a Python number."""
    f = fuserir.parse(f"fusion f(x: f32[M, N], s: f32[]) {{\n  y = pad(x, {widths}, s)\n"
                      "  output y\n}\n")
    x = rng.standard_normal((3, 4)).astype(np.float32)
    pads = [tuple(x.shape[1] if w == "N" else w for w in pair) for pair in numpy_widths]
    want = np.pad(x, pads, constant_values=-2.5)
    for s in (np.array(-2.5, np.float32), -2.5):
        np.testing.assert_array_equal(
            codegen.compile(f, backend="interp").run({"x": x, "s": s})["y"], want)
        np.testing.assert_array_equal(fuserir.evaluate(f, {"x": x, "s": s})["y"], want)


@pytest.mark.parametrize("body, numpy", [
    ("pad(sum(x, [1]), [1, 2], value=7)", lambda x: np.pad(x.sum(1), (1, 2),
                                                             constant_values=7)),
    ("slice(sum(x, [1]), [1], [M])", lambda x: x.sum(1)[1:]),
    ("sum(slice(x, [0, 1], [M, N], [1, 2]), [1])", lambda x: x[:, 1::2].sum(1)),
    ("sum(pad(x, [1, 1], value=1), [1])", lambda x: x.sum(1) + 2),
    ("sum(cat([x, x * 2], dim=0), [0])", lambda x: 3 * x.sum(0)),
    ("slice(x, [0, 1], [M, N]) - broadcast(max(slice(x, [0, 1], [M, N]), [1]), "
     "[false, true])", lambda x: x[:, 1:] - x[:, 1:].max(1, keepdims=True)),
    ("cat([x, broadcast(sum(x, [1]), [false, true])], dim=1)",
     lambda x: np.concatenate([x, x.sum(1, keepdims=True)], 1)),
])
def test_with_reductions_the_automatic_schedules_segment_where_needed(body, numpy, rng):
    f = fuserir.parse(f"fusion f(x: f32[M, N]) {{\n  y = {body}\n  output y\n}}\n")
    x = rng.integers(-3, 4, (5, 7)).astype(np.float32)      # integers: sums are exact
    np.testing.assert_array_equal(codegen.compile(f, backend="interp").run({"x": x})["y"],
                                  numpy(x))
    np.testing.assert_array_equal(fuserir.evaluate(f, {"x": x})["y"], numpy(x))


CAT3 = """fusion cat3(a: {t}[R, Q], b: {t}[R, Q], c: {t}[R, H]) {{
  out = cat([a, b, c], dim=1)
  output out
}}"""


def _vector_loads(kernels):
    """{input name: widths of its loads} over the kernel IR of `kernels`."""
    found = {}
    for k in kernels:
        for s in kir.walk(k.kir.body):
            for e in kir.expressions(s):
                for x in kir.walk_expr(e):
                    if isinstance(x, kir.Load) and x.buffer.memory is kir.Memory.global_:
                        found.setdefault(x.buffer.name, set()).add(x.width)
    return found


@pytest.mark.parametrize("dtype, width", [(D.bf16, 8), (D.f32, 4)])
def test_a_cat_of_inputs_loads_whole_vectors_of_the_input_holding_them(dtype, width, rng):
    """The pointwise schedule vectorizes a cat of inputs along their rows: each vector of
    the output is one vector load of the input whose range holds it (an if per boundary,
    no select per element), where every input's rows are a whole number of vectors; a
    row of another length, a strided or a misaligned input runs a narrower variant of
    the same schedule. Every run equals numpy."""
    f = fuserir.parse(CAT3.format(t=dtype))
    exe = codegen.compile(f, backend="interp")

    def run(a, b, c):
        inputs = {"a": a, "b": b, "c": c}
        np.testing.assert_array_equal(exe.run(inputs)["out"],
                                      np.concatenate([a, b, c], axis=1))
        return _vector_loads(exe.kernels_for(inputs))

    def arrays(q, h, rows=3):
        return [rng.standard_normal((rows, n)).astype(dtype.numpy) for n in (q, q, h)]

    q = 32 * width          # a warp's vectors in each quarter: the vectorized schedule
    assert run(*arrays(q, 2 * q)) == {"a": {width}, "b": {width}, "c": {width}}
    source = exe.kernels_for(dict(zip("abc", arrays(q, 2 * q))))[0].source
    assert "min_i32" not in source and "?" not in source.split("__global__")[1]
    assert run(*arrays(q + 2, 2 * q)) == {"a": {1}, "b": {1}, "c": {1}}   # 2-element rows
    assert run(*arrays(q, 2 * q + 1)) == {"a": {1}, "b": {1}, "c": {1}}
    a, b, c = arrays(q, 2 * q)
    wide = rng.standard_normal((3, 2 * q)).astype(dtype.numpy)
    assert run(a, wide[:, ::2], c)["a"] == {1}                  # b strided: elements
    base = np.zeros(3 * q + width // 2 * 0 + 4, dtype.numpy)
    shifted = base[1:1 + 3 * q].reshape(3, q)                   # rows one element off
    shifted[...] = a
    assert run(shifted, b, c)["a"] == {1}
    assert run(a, b, c) == {"a": {width}, "b": {width}, "c": {width}}


ROTATE = """fusion rotate(x: {t}[R, D], cos: {t}[R, D], sin: {t}[R, D]) {{
  x1 = slice(x, [0, 0], [R, D / 2])
  x2 = slice(x, [0, D / 2], [R, D])
  out = x * cos + cat([-x2, x1], dim=1) * sin
  output out
}}"""


@pytest.mark.parametrize("dtype, width", [(D.bf16, 8), (D.f32, 4)])
def test_a_cat_of_slices_computes_its_inputs_on_whole_vectors(dtype, width, rng):
    """A rotary embedding's cat of x's negated and plain halves: the pointwise schedule
    vectorizes the cat, which loads each vector of x at the half's offset (D / 2) once
    and negates it in registers, no select per element. D / 2 is a launch-time offset
    lowering records (kernel.vector_offsets); where it is no multiple of the vector, the
    executable runs a variant whose cat reads x element by element. Every run equals
    the reference evaluator bit for bit."""
    f = fuserir.parse(ROTATE.format(t=dtype))
    exe = codegen.compile(f, backend="interp")

    def run(d):
        x, cos, sin = (rng.standard_normal((3, d)).astype(dtype.numpy) for _ in range(3))
        inputs = {"x": x, "cos": cos, "sin": sin}
        np.testing.assert_array_equal(exe.run(inputs)["out"],
                                      fuserir.evaluate(f, inputs)["out"])
        x1, x2 = x[:, :d // 2], x[:, d // 2:]
        np.testing.assert_allclose(exe.run(inputs)["out"].astype(np.float64),
                                   x * cos + np.concatenate([-x2, x1], 1) * sin,
                                   rtol=2 ** -7, atol=1e-2)
        kernels = exe.kernels_for(inputs)
        return _vector_loads(kernels), kernels

    loads, kernels = run(64 * width)
    assert len(kernels) == 1 and loads["x"] == {width}      # only whole vectors of x
    kernel = kernels[0]
    assert "?" not in kernel.source.split("__global__")[1]
    assert "(D / 2)" in [kir.format_expr(e) for _, e in kernel.kir.vector_offsets]
    narrower = run(64 * width + width)[0]     # D / 2 half a vector off: x's cat by elements
    assert 1 in narrower["x"] and width not in narrower["x"]
    assert run(64 * width + 2)[0]["x"] == {1}


@pytest.mark.parametrize("dtype, width", [(D.bf16, 8), (D.f32, 4)])
def test_a_pad_of_the_rows_fills_and_loads_whole_vectors(dtype, width, rng):
    """A pad of the rows by launch-time widths, of a negated input: each vector of the
    output is the pad value or one vector load of x negated in registers; where the
    widths or x's rows are no whole number of vectors, the element variant. Every run
    equals numpy."""
    f = fuserir.parse(f"fusion f(x: {dtype}[M, N]) {{\n"
                      "  y = pad(-x, [8, N / 2], value=1.5)\n  output y\n}\n")
    exe = codegen.compile(f, backend="interp")
    for n, widths in [(64 * width, {width}), (66 * width, {width}), (64 * width + 2, {1})]:
        x = rng.standard_normal((3, n)).astype(dtype.numpy)
        inputs = {"x": x}
        np.testing.assert_array_equal(
            exe.run(inputs)["y"],
            np.pad(-x, ((0, 0), (8, n // 2)), constant_values=1.5).astype(dtype.numpy))
        assert _vector_loads(exe.kernels_for(inputs))["x"] == widths
    assert "?" not in exe.kernels_for({"x": np.zeros((3, 64 * width), dtype.numpy)}
                                      )[0].source.split("__global__")[1]
    # a margin of half a vector: the boundary is no multiple of the vector at any size
    f = fuserir.parse(f"fusion f(x: {dtype}[M, N]) {{\n"
                      f"  y = pad(-x, [{width // 2}, 0], value=1.5)\n  output y\n}}\n")
    exe = codegen.compile(f, backend="interp")
    x = rng.standard_normal((3, 64 * width)).astype(dtype.numpy)
    np.testing.assert_array_equal(
        exe.run({"x": x})["y"],
        np.pad(-x, ((0, 0), (width // 2, 0)), constant_values=1.5).astype(dtype.numpy))
    assert _vector_loads(exe.kernels_for({"x": x}))["x"] == {1}


@pytest.mark.parametrize("dtype, width", [(D.bf16, 8), (D.f32, 4)])
def test_slices_of_the_rows_load_whole_vectors(dtype, width, rng):
    """A gated unit's halves (SwiGLU: `a * sigmoid(a) * b`, a and b the halves of x's rows)
    are read as whole vectors of x, b's at the launch-time offset D / 2; where D / 2 is no
    whole number of vectors, element reads. A slice at a constant offset that no vector
    fits (`x[:, 1:] - x[:, :-1]`) keeps its element reads in every variant. Each run equals
    the reference evaluator bit for bit."""
    f = fuserir.parse(f"fusion f(x: {dtype}[R, D]) {{\n"
                      "  a = slice(x, [0, 0], [R, D / 2])\n"
                      "  b = slice(x, [0, D / 2], [R, 2 * (D / 2)])\n"
                      "  out = a * sigmoid(a) * b\n  output out\n}\n")
    exe = codegen.compile(f, backend="interp")
    for d, widths in [(64 * width, {width}), (66 * width, {width}), (64 * width + 2, {1})]:
        x = rng.standard_normal((3, d)).astype(dtype.numpy)
        np.testing.assert_array_equal(exe.run({"x": x})["out"],
                                      fuserir.evaluate(f, {"x": x})["out"])
        assert _vector_loads(exe.kernels_for({"x": x}))["x"] == widths
    f = fuserir.parse(f"fusion f(x: {dtype}[R, D]) {{\n"
                      "  out = slice(x, [0, 1], [R, D]) - slice(x, [0, 0], [R, D - 1])\n"
                      "  output out\n}\n")
    exe = codegen.compile(f, backend="interp")
    x = rng.standard_normal((3, 64 * width + 1)).astype(dtype.numpy)
    np.testing.assert_array_equal(exe.run({"x": x})["out"], x[:, 1:] - x[:, :-1])
    assert 1 in _vector_loads(exe.kernels_for({"x": x}))["x"]
    assert not exe.kernels_for({"x": x})[0].kir.vector_offsets


def test_without_the_offset_check_the_misaligned_vector_is_caught(monkeypatch, rng):
    """The executable's check of the launch-time offsets is what keeps the vectors
    aligned: with it taken away, D = 520 (D / 2 = 260 bf16 elements, 8 bytes past a
    16-byte boundary) runs the whole-vector kernel, and the interpreter refuses its
    misaligned load."""
    from codegen.interp.base import InterpError
    from driver import vector_widths
    monkeypatch.setattr(vector_widths, "offset_access_bytes",
                        lambda offset, itemsize, most=16: most)
    f = fuserir.parse(ROTATE.format(t=D.bf16))
    x, cos, sin = (rng.standard_normal((2, 520)).astype(D.bf16.numpy) for _ in range(3))
    with pytest.raises(InterpError, match=r"vector access x\[\d+\] of thread .* is not "
                                          r"aligned to 8 elements \(16 bytes\)"):
        codegen.compile(f, backend="interp").run({"x": x, "cos": cos, "sin": sin})


@pytest.mark.gpu
@pytest.mark.parametrize("program, inputs", [
    (CAT3, {"a": (5, 256), "b": (5, 256), "c": (5, 512)}),
    (CAT3, {"a": (5, 260), "b": (5, 260), "c": (5, 512)}),
    (ROTATE, {"x": (5, 1024), "cos": (5, 1024), "sin": (5, 1024)}),
    (ROTATE, {"x": (5, 1040), "cos": (5, 1040), "sin": (5, 1040)})])
def test_vectorized_cats_on_the_gpu_equal_the_reference(program, inputs):
    """The vectorized cats (whole vectors, and the element variant where a row or D / 2 is
    no whole number of vectors) on the GPU, bit for bit the reference evaluator."""
    import cupy as cp
    rng = np.random.default_rng(3)
    f = fuserir.parse(program.format(t=D.bf16))
    values = {k: rng.standard_normal(shape).astype(D.bf16.numpy)
              for k, shape in inputs.items()}
    out = codegen.compile(f, backend="cuda").run({k: cp.asarray(v)
                                                  for k, v in values.items()})
    np.testing.assert_array_equal(on_host(out, f)["out"], fuserir.evaluate(f, values)["out"])


def test_a_cat_vectorized_across_its_axis_is_refused():
    """A schedule that would vectorize a cat along another axis than its own is refused
    by the transform, naming the tensor and the axis."""
    f = fuserir.parse(CAT3.format(t=D.f32))
    out = f.tensor("out")
    computed = out.cache_before(fuserir.MemoryType.local)
    out.split(0, 4)
    out.reorder({1: 2})
    computed.compute_at(out, 2)
    with pytest.raises(ScheduleError, match=r"vectorize: the axis is not contiguous in "
                                            r"memory: it does not come from the innermost "
                                            r"axis of out_cache \(tensor out_cache, axis -1\)"):
        computed.vectorize(-1)


def test_a_computed_producer_is_read_only_inside_its_extent(rng):
    """A pad (and a cat) computes its inlined producer at an index clamped into the
    producer's extent: log of a row read past its end would be log(garbage); here the
    element read is a real one and the pad value replaces it."""
    f = fuserir.parse("fusion f(x: f32[M, N]) {\n  y = pad(log(x) * 2, [3, 3, 1, 1], "
                      "value=nan)\n  output y\n}\n")
    x = rng.uniform(1, 2, (4, 6)).astype(np.float32)
    exe = codegen.compile(f, backend="interp")
    out = exe.run({"x": x})["y"]
    expected = np.pad(np.log(x) * 2, ((1, 1), (3, 3)), constant_values=np.nan)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    source = exe.kernels[0].source
    assert "min_" in source and "max_" in source        # the clamped read


def test_one_kernel_serves_every_size(rng):
    f = fuserir.parse("fusion f(x: f32[M, N]) {\n  y = slice(x, [1, 2], [M - 1, N - 2]) "
                      "+ 1\n  output y\n}\n")
    exe = codegen.compile(f, backend="interp")
    for m, n in [(4, 6), (9, 20)]:
        x = rng.standard_normal((m, n)).astype(np.float32)
        np.testing.assert_array_equal(exe.run({"x": x})["y"], x[1:-1, 2:-2] + 1)
    assert len({k.source for k in exe.kernels}) == 1


def test_a_full_alone_takes_its_sizes_as_scalars():
    f = Fusion("f")
    f.declare("R")
    y = ops.iota("R", 0.5, 0.25, D.f32, fusion=f)
    f.add_output(y)
    out = codegen.compile(f, backend="interp").run({"R": 6})[y.name]
    np.testing.assert_array_equal(out, 0.5 + 0.25 * np.arange(6, dtype=np.float32))


def test_a_partly_shared_loop_across_a_slice_is_refused():
    f = fuserir.parse("fusion f(x: f32[M, N]) {\n  t = exp(x)\n"
                      "  y = slice(t, [0, 1], [M, N])\n  output y\n}\n")
    t, y = f.tensor("t"), f.tensor("y")
    y.split(1, 32)
    y.parallelize(0, "BIDx")
    y.parallelize(2, "TIDx")
    t.compute_at(y, 2)
    with pytest.raises(ScheduleError, match=r"t is computed at position 2 of y, but y reads "
                       r"it through a slice \(other elements than its own\); inline t fully "
                       r"into y \(compute_at\(-1\)\) or compute it at position 0"):
        codegen.compile(f, backend="interp")
    assert fuserir.transforms.max_inline_position(t) == 3


@pytest.mark.gpu
def test_slices_pads_and_cats_on_the_gpu():
    import cupy as cp
    rng = np.random.default_rng(7)
    f = fuserir.parse(PROGRAM)
    x = rng.standard_normal((3, 50, 64)).astype(np.float32)
    c = rng.standard_normal((50, 64)).astype(np.float32)
    s = rng.standard_normal((50, 1)).astype(np.float32)
    d = {"x": x, "c": c, "s": s, "k": cp.asarray(np.int32(7))}
    out = codegen.compile(f, backend="cuda").run({k: cp.asarray(v) for k, v in d.items()})
    ref = fuserir.evaluate(f, {**d, "k": 7})
    for name in ref:
        np.testing.assert_allclose(cp.asnumpy(out[name]), ref[name], rtol=2 ** -20,
                                   atol=1e-6, err_msg=name)


def test_a_declared_run_time_scalar_bounds_a_slice(rng):
    """A bound may be a run-time scalar: one kernel for every value, each checked."""
    f = Fusion("f")
    x = f.new_input("x", D.f32, ["N"])
    f.declare("k")
    y = ops.slice(x, ["k"], ["N"])
    f.add_output(ops.mul(y, 2))
    out_name = f.outputs[0].name
    data = rng.standard_normal(9).astype(np.float32)
    exe = codegen.compile(f, backend="interp")
    for k in (1, 4):
        np.testing.assert_array_equal(exe.run({"x": data, "k": k})[out_name], 2 * data[k:])
    with pytest.raises(EvaluationError, match=r"slice of x, axis 0: the start must lie in the "
                       r"axis: needs k \+ 1 <= N, but k \+ 1 = 10 and N = 9 here"):
        exe.run({"x": data, "k": 9})


def test_an_empty_arange_is_refused_when_the_sizes_are_bound():
    f = fuserir.parse("fusion f(x: f32[N]) {\n  y = cast(arange(2, N), f32) + 1\n"
                      "  output y\n}\n")
    np.testing.assert_array_equal(fuserir.evaluate(f, {"x": np.ones(5, np.float32)})["y"],
                                  [3, 4, 5])
    with pytest.raises(EvaluationError) as caught:
        fuserir.evaluate(f, {"x": np.ones(2, np.float32)})
    assert str(caught.value) == ("arange(2, N, 1): the range must hold at least one element: "
                                 "needs 1 <= N - 2, but N - 2 = 0 here")


def test_a_shifted_axis_is_not_exactly_mapped_to_its_input():
    """The sync analysis proves accesses of one thread through the exact map: a slice's
    axis reads another index of its input, so the two are not joined."""
    from lowering.support.analysis import build_exact_map
    f = fuserir.parse("fusion f(x: f32[M, N]) {\n  y = slice(x, [0, 1], [M, N])\n"
                      "  output y\n}\n")
    x, y = f.tensor("x"), f.tensor("y")
    exact = build_exact_map(f)
    assert exact.find(y.root[0]) is exact.find(x.root[0])
    assert exact.find(y.root[1]) is not exact.find(x.root[1])


def test_a_size_expression_of_a_full_must_be_positive_when_bound():
    f = fuserir.parse("fusion f(x: f32[N]) {\n  y = full([N - 1], 2, f32) + slice(x, [1], [N])\n"
                      "  output y\n}\n")
    np.testing.assert_array_equal(fuserir.evaluate(f, {"x": np.ones(3, np.float32)})["y"],
                                  [3, 3])
    with pytest.raises(EvaluationError) as caught:
        fuserir.evaluate(f, {"x": np.ones(1, np.float32)})
    assert str(caught.value) == ("full: size N - 1 of its shape must be at least 1: needs "
                                 "1 <= N - 1, but N - 1 = 0 here")
