"""Reductions beyond sum and max (prod, min), keepdim and dtype=, and the statistics made of
them (mean, var, std, var_mean, softmax, log_softmax): each against numpy in f64, in the
reference evaluator and in the interpreter (automatic schedules, kernels compiled by
NVRTC); each refusal located in the DSL; and each on the GPU where there is one."""

import math

import ml_dtypes
import numpy as np
import pytest

import codegen
import fuserir
from fuserir import DataType, DslError, EvaluationError, FusionError
from fuserir import ops
from conftest import on_host

BF16 = ml_dtypes.bfloat16


def run_both(text, inputs, backend="interp"):
    """The fusion's outputs from the reference evaluator and from `backend`."""
    fusion = fuserir.parse(text)
    outputs = codegen.compile(fusion, backend=backend).run(inputs)
    return fuserir.evaluate(fusion, inputs), on_host(outputs, fusion)


def close(actual, expected, rtol, atol=0.0, name=""):
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=rtol,
                               atol=atol, equal_nan=True, err_msg=name)


# -- prod and min ----------------------------------------------------------------------------

def test_prod_and_min_reduce_rows_and_columns_with_nan_propagating(rng):
    x = rng.uniform(0.5, 1.5, (6, 130)).astype(np.float32)
    x[2, 7] = np.nan
    text = """fusion f(x: f32[M, N]) {
  p = prod(x, axes=[1])
  lo = min(x, axes=[1])
  hi = max(x, axes=[0])
  c = min(x, axes=[0])
  output p, lo, hi, c
}"""
    x64 = x.astype(np.float64)
    want = {"p": x64.prod(1), "lo": x64.min(1), "hi": x64.max(0), "c": x64.min(0)}
    ref, out = run_both(text, {"x": x})
    assert np.isnan(out["p"][2]) and np.isnan(out["lo"][2]) and np.isnan(out["c"][7])
    for name, expected in want.items():
        close(ref[name], expected, 1e-6, name=name)
        close(out[name], expected, 1e-5, name=name)


def test_integer_prod_and_min_are_exact_and_wrap_like_the_type(rng):
    x = rng.integers(-3, 4, (5, 40)).astype(np.int32)
    text = """fusion f(x: i32[M, N]) {
  p = prod(x, axes=[1])
  lo = min(x, axes=[0, 1])
  output p, lo
}"""
    ref, out = run_both(text, {"x": x})
    want = x.prod(1, dtype=np.int32)        # numpy wraps in int32 as the kernel does
    np.testing.assert_array_equal(ref["p"], want)
    np.testing.assert_array_equal(out["p"], want)
    assert out["lo"] == ref["lo"] == x.min()


@pytest.mark.parametrize("op, identity", [("prod", 1.0), ("min", math.inf),
                                          ("max", -math.inf), ("sum", 0.0)])
def test_a_reduction_over_no_elements_gives_its_identity(op, identity):
    text = f"fusion f(x: f32[M, N]) {{\n  r = {op}(x, axes=[1])\n  output r\n}}"
    ref, out = run_both(text, {"x": np.zeros((3, 0), np.float32)})
    np.testing.assert_array_equal(ref["r"], np.full(3, identity, np.float32))
    np.testing.assert_array_equal(out["r"], np.full(3, identity, np.float32))


def test_min_of_integers_over_no_elements_is_the_types_maximum():
    ref, out = run_both("fusion f(x: i64[N]) {\n  r = min(x, axes=[0])\n  output r\n}",
                        {"x": np.zeros(0, np.int64)})
    assert ref["r"] == out["r"] == np.iinfo(np.int64).max


def test_keepdim_keeps_the_reduced_axes_and_dtype_casts_the_elements_first(rng):
    x = rng.standard_normal((4, 3, 50)).astype(BF16)
    text = """fusion f(x: bf16[A, B, C]) {
  k = sum(x, axes=[0, 2], keepdim=true)
  d = sum(x, axes=[2], dtype=f64)
  m = max(x, axes=[1], keepdim=true)
  output k, d, m
}"""
    ref, out = run_both(text, {"x": x})
    x64 = x.astype(np.float64)
    assert out["k"].shape == (1, 3, 1) and out["k"].dtype == BF16
    assert out["d"].dtype == np.float64 and out["m"].shape == (4, 1, 50)
    close(out["k"], x64.sum((0, 2), keepdims=True), 2 ** -7)
    close(out["d"], x64.sum(2), 1e-12)
    np.testing.assert_array_equal(out["m"], x.max(1, keepdims=True))
    for name in ("k", "d", "m"):
        np.testing.assert_array_equal(out[name], ref[name], err_msg=name)


def test_builder_reductions_take_keepdim_and_dtype():
    with fuserir.FusionDefinition("f") as fd:
        x = fd.define_tensor("x", "f16", ["M", "N"])
        p = fd.ops.prod(x, [1], keepdim=True, dtype=DataType.f32)
        fd.add_output(p, "p")
    assert p.dtype is DataType.f32 and p.rank == 2
    assert fuserir.print_fusion(fd.fusion).splitlines()[1] == \
        "  p = broadcast(prod(cast(x, f32), axes=[1]), [false, true])"


# -- mean, var, std, var_mean ------------------------------------------------------------------

STATS_TEXT = """fusion f(x: {dtype}[M, N]) {{
  mu = mean(x, axes=[1])
  v = var(x, axes=[1])
  pop = var(x, axes=[1], correction=0, keepdim=true)
  s = std(x, axes=[0, 1])
  v2, m2 = var_mean(x, axes=[0])
  output mu, v, pop, s, v2, m2
}}"""


@pytest.mark.parametrize("dtype, host, rtol", [("f32", np.float32, 1e-5),
                                               ("bf16", BF16, 2 ** -7)])
def test_mean_var_std_and_var_mean_match_numpy(rng, dtype, host, rtol):
    x = (rng.standard_normal((5, 70)) * 3 + 100).astype(host)   # far from 0: cancellation
    ref, out = run_both(STATS_TEXT.format(dtype=dtype), {"x": x})
    x64 = x.astype(np.float64)
    want = {"mu": x64.mean(1), "v": x64.var(1, ddof=1), "pop": x64.var(1, keepdims=True),
            "s": x64.std(ddof=1), "v2": x64.var(0, ddof=1), "m2": x64.mean(0)}
    for name, expected in want.items():
        assert out[name].dtype == host and out[name].shape == np.shape(expected), name
        close(ref[name], expected, rtol, name=name)
        close(out[name], expected, rtol, name=name)


def test_var_mean_computes_the_mean_once_and_prints_as_reductions():
    fusion = fuserir.parse("fusion f(x: f32[M, N]) {\n  v, m = var_mean(x, axes=[1])\n"
                           "  output v, m\n}")
    text = fuserir.print_fusion(fusion)
    assert text.count("sum(") == 2, text          # the mean's sum, the squares' sum
    assert "/ (N - 1)" in text and fuserir.print_fusion(fuserir.parse(text)) == text


def test_mean_of_several_symbolic_axes_divides_by_their_product(rng):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    ref, out = run_both("fusion f(x: f32[A, B, C]) {\n  m = mean(x, axes=[0, 2])\n"
                        "  output m\n}", {"x": x})
    close(out["m"], x.astype(np.float64).mean((0, 2)), 1e-6)


def test_a_variance_with_fewer_elements_than_the_correction_is_refused_at_run_time():
    fusion = fuserir.parse("fusion f(x: f32[N]) {\n  v = var(x, axes=[0], correction=2)\n"
                           "  output v\n}")
    x = np.ones(1, np.float32)
    message = "var of x: the reduced axes must hold at least the correction's 2 elements"
    with pytest.raises(EvaluationError, match=message):
        fuserir.evaluate(fusion, {"x": x})
    with pytest.raises(EvaluationError, match=message):
        codegen.compile(fusion, backend="interp").run({"x": x})
    # as many elements as the correction: the squares' sum divided by 0, as torch.var
    out = codegen.compile(fusion, backend="interp").run({"x": np.array([1, 3], np.float32)})
    assert out["v"] == np.inf


def test_a_static_size_no_larger_than_the_correction_is_refused_where_the_fusion_is_built():
    for text, message in [
            ("var(x, axes=[0], correction=4)",
             "var: x's reduced axes hold 3 elements, fewer than the correction 4"),
            ("std(x, axes=[0], correction=3)",
             "std: x's reduced axes hold 3 elements, as many as the correction: the "
             "variance divides by 0")]:
        with pytest.raises(DslError, match=message) as caught:
            fuserir.parse(f"fusion f(x: f32[3]) {{\n  v = {text}\n  output v\n}}")
        assert (caught.value.line, caught.value.column) == (2, 7)


# -- softmax and log_softmax -------------------------------------------------------------------

def softmax64(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


@pytest.mark.parametrize("dtype, host, rtol", [("f32", np.float32, 1e-5),
                                               ("bf16", BF16, 2 ** -7)])
def test_softmax_and_log_softmax_match_numpy_in_one_kernel(rng, dtype, host, rtol):
    x = (rng.standard_normal((4, 3, 90)) * 4).astype(host)
    x[1, 2, :] = -np.inf                # a fully masked row: NaN, as torch gives
    x[2, 0, 5] = np.inf
    text = f"""fusion f(x: {dtype}[A, B, C]) {{
  p = softmax(x, dim=-1)
  q = log_softmax(x, dim=2)
  output p, q
}}"""
    fusion = fuserir.parse(text)
    exe = codegen.compile(fusion, backend="interp")
    out, ref = exe.run({"x": x}), fuserir.evaluate(fusion, {"x": x})
    assert len(exe.kernels) == 1
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        p = softmax64(x64, 2)
        q = x64 - x64.max(2, keepdims=True)
        q = q - np.log(np.exp(q).sum(2, keepdims=True))
    assert np.isnan(out["p"][1, 2]).all() and np.isnan(out["q"][1, 2]).all()
    for name, expected in (("p", p), ("q", q)):
        assert out[name].dtype == host
        close(ref[name], expected, rtol, atol=1e-7, name=name)
        close(out[name], expected, rtol, atol=1e-7, name=name)


def test_softmax_over_a_leading_axis_and_with_dtype(rng):
    x = rng.standard_normal((40, 6)).astype(np.float16)
    ref, out = run_both("fusion f(x: f16[M, N]) {\n  p = softmax(x, dim=0, dtype=f32)\n"
                        "  output p\n}", {"x": x})
    assert out["p"].dtype == np.float32
    close(out["p"], softmax64(x.astype(np.float64), 0), 1e-6)


# -- located refusals ---------------------------------------------------------------------------

@pytest.mark.parametrize("statement, message, column", [
    ("v = var_mean(x, axes=[1])",
     "var_mean(...) gives 2 tensors: assign them to as many names "
     "(`a, b = var_mean(...)`)", 7),
    ("v = var_mean(x, axes=[1]) + 1",
     "var_mean(...) gives 2 tensors: assign them to as many names "
     "(`a, b = var_mean(...)`) before using them", 7),
    ("v, w = sum(x, axes=[1])", "2 names are assigned but sum(...) gives one tensor", 10),
    ("v, v = var_mean(x, axes=[1])", "duplicate name 'v'", 6),
    ("x, v = var_mean(x, axes=[1])",
     "'x' is an input of fusion f and cannot be redefined", 3),
    ("v = mean(i, axes=[1])",
     "mean: operand i is i32; mean computes on floats: give dtype=f32 or cast it first", 7),
    ("v = var(x, axes=[1], correction=-1)",
     "var: correction must be an integer >= 0", 7),
    ("v = softmax(x, dim=[1])", "softmax: dim must be an integer", 22),
    ("v = sum(x, axes=[1], keepdim=1)", "sum: keepdim must be true or false", 32),
    ("v = min(x, axes=[2])", "min: axis 2 is out of range", 7),
    ("v = prod(b, axes=[0])", "prod: operand b is bool; cast it first", 7),
    # welford (tests/test_welford.py)
    ("v = exp(cast(x, welford))",
     "exp: operand t4 is a welford state, not a number: read it with welford_mean or "
     "welford_m2", 7),
    ("v = cast(cast(x, welford), f32)", "cast: operand t4 is a welford state", 7),
    ("v = cast(i, welford)",
     "cast: i is i32; a welford state is made of floats (cast it to f32 first)", 7),
    ("v = welford_merge(x, axes=[1])",
     "welford_merge: operand x is f32; welford_merge merges welford states", 7),
    ("v = welford_mean(x)", "welford_mean: operand x is f32; welford_mean takes a welford "
     "state", 7),
    ("v, m = welford(d, axes=[1])",
     "welford: operand d is f64; a welford state is f32 (var_mean computes in f64)", 10),
    ("v, m = welford(i, axes=[1])", "welford: operand i is i32; welford computes on floats",
     10),
    ("v, m = welford(x, axes=[1], correction=-1)",
     "welford: correction must be an integer >= 0", 10),
])
def test_statistics_refusals_name_the_problem_and_where(statement, message, column):
    text = (f"fusion f(x: f32[M, N], i: i32[M, N], b: bool[N], d: f64[M, N]) {{\n"
            f"  {statement}\n"
            f"  output v\n}}")
    with pytest.raises(DslError) as caught:
        fuserir.parse(text)
    assert message in str(caught.value)
    assert (caught.value.line, caught.value.column) == (2, column), str(caught.value)


def test_builder_refusals():
    with fuserir.FusionDefinition("f") as fd:
        x = fd.define_tensor("x", "i64", ["N"])
        with pytest.raises(FusionError, match="softmax: operand x is i64"):
            ops.softmax(x, 0)
        with pytest.raises(FusionError, match="var: correction must be an integer >= 0"):
            ops.var(ops.cast(x, DataType.f32), [0], correction=0.5)
        with pytest.raises(FusionError, match="sum: dtype must be a DataType"):
            ops.sum(x, [0], dtype="f32")
        before = len(fd.fusion.exprs)
        for reduce in (ops.max, ops.mean, ops.var, ops.argmax):
            with pytest.raises(FusionError, match="keepdim must be true or false, got 1"):
                reduce(ops.cast(x, DataType.f32) if reduce is not ops.max else x, 0,
                       keepdim=1)
        # refused before anything was built (the casts above are the only additions)
        assert len(fd.fusion.exprs) == before + 3
        fd.add_output(ops.sum(x, [0]))


# -- on the GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype, host, rtol", [("f32", np.float32, 1e-5),
                                               ("bf16", BF16, 2 ** -7)])
def test_statistics_on_the_gpu(rng, dtype, host, rtol):
    x = (rng.standard_normal((300, 1000)) * 3 + 10).astype(host)
    text = f"""fusion f(x: {dtype}[M, N]) {{
  v, mu = var_mean(x, axes=[1], correction=0)
  p = softmax(x, dim=1)
  lo = min(x, axes=[0])
  pr = prod(x, axes=[1], dtype=f32)
  am = argmax(x, dim=1)
  output v, mu, p, lo, pr, am
}}"""
    ref, out = run_both(text, {"x": x}, backend="cuda")
    np.testing.assert_array_equal(out["am"], ref["am"])
    for name in ("v", "mu", "p", "lo"):
        close(out[name], ref[name].astype(np.float64), rtol, atol=1e-7, name=name)
    close(out["pr"], ref["pr"].astype(np.float64), 1e-4, name="pr")


# -- argmax and argmin --------------------------------------------------------------------------

def test_argmax_and_argmin_take_the_first_extreme_and_count_nan_as_the_max(rng):
    x = rng.standard_normal((5, 130)).astype(np.float32)
    x[1, [40, 20]] = np.nan                      # the first NaN wins, as in torch
    x[3, [7, 90]] = x[3].max() + 1               # a tie: the first index
    i = rng.integers(-3, 3, (5, 130)).astype(np.int32)
    text = """fusion f(x: f32[M, N], i: i32[M, N]) {
  a = argmax(x, dim=1)
  b = argmin(x, 0, keepdim=true)
  c = argmax(i, -1)
  output a, b, c
}"""
    fusion = fuserir.parse(text)
    exe = codegen.compile(fusion, backend="interp")
    out, ref = exe.run({"x": x, "i": i}), fuserir.evaluate(fusion, {"x": x, "i": i})
    nan_first = np.where(np.isnan(x).any(1), np.isnan(x).argmax(1), np.argmax(x, 1))
    assert out["a"][1] == 20 and out["a"][3] == 7
    want = {"a": nan_first, "b": np.argmin(x, 0, keepdims=True),
            "c": np.argmax(i, 1)}
    for name, expected in want.items():
        assert out[name].dtype == np.int64
        np.testing.assert_array_equal(out[name], expected, err_msg=name)
        np.testing.assert_array_equal(ref[name], expected, err_msg=name)


def test_argmax_of_a_row_of_no_elements_is_refused_where_the_sizes_bind():
    fusion = fuserir.parse("fusion f(x: f32[M, N]) {\n  a = argmax(x, 1)\n  output a\n}")
    with pytest.raises(EvaluationError, match="argmax of x: axis 1 must hold at least one "
                                              "element: needs 1 <= N, but N = 0 here"):
        codegen.compile(fusion, backend="interp").run({"x": np.zeros((2, 0), np.float32)})
