"""Every op builder: result dtype and shape, promotion, literals, error messages, and the
reference evaluator's values against an independent plain-numpy computation."""

import math
import re

import numpy as np
import pytest

import fuserir
from fuserir import DataType, Fusion, FusionError, IterKind, ops
from fuserir.dtypes import promote
from fuserir.ir import Scalar
from fuserir.ir.extent import Sym

from conftest import (ALL_DTYPES, FLOAT_DTYPES, HOST, INT_DTYPES, NUMERIC_DTYPES, as_f64,
                      assert_matches, random_array)

SHAPE = (3, 5)
D = DataType


def one_input(dtype, dims=("M", "N")):
    f = Fusion("t")
    return f, f.new_input("x", dtype, list(dims))


def two_inputs(da, db, dims_a=("M", "N"), dims_b=("M", "N")):
    f = Fusion("t")
    return f, f.new_input("a", da, list(dims_a)), f.new_input("b", db, list(dims_b))


def run(f, out, **inputs):
    f.add_output(out)
    result = fuserir.evaluate(f, inputs)
    assert list(result) == [out.name]
    return result[out.name]


# -- unary ----------------------------------------------------------------------------------

SIGN_OPS = {
    "neg": lambda v: -v,
    "abs": np.abs,
    "relu": lambda v: np.where(v > 0, v, 0),
}


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
@pytest.mark.parametrize("op", sorted(SIGN_OPS))
def test_sign_ops_keep_dtype(op, dtype, rng):
    f, x = one_input(dtype)
    y = getattr(ops, op)(x)
    assert y.dtype is dtype
    assert y.shape == [Sym("M"), Sym("N")]
    xs = random_array(rng, dtype, SHAPE)
    expected = SIGN_OPS[op](xs.astype(np.float64) if dtype.is_float else xs.astype(np.int64))
    assert_matches(run(f, y, x=xs), expected, dtype)


def _gelu_erf(v):
    # x * Phi(x) = x/2 * erfc(-x / sqrt 2), a different route than 0.5 x (1 + erf(x / sqrt 2))
    return 0.5 * v * np.vectorize(math.erfc)(-v / math.sqrt(2.0))


def _gelu_tanh(v):
    return 0.5 * v * (1.0 + np.tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))


FLOAT_OPS = {
    "exp": (np.exp, -4, 4),
    "log": (np.log, 0.05, 8),
    "sqrt": (np.sqrt, 0, 9),
    "rsqrt": (lambda v: v ** -0.5, 0.05, 9),
    "tanh": (np.tanh, -4, 4),
    "sigmoid": (lambda v: 0.5 * (1.0 + np.tanh(v / 2.0)), -8, 8),
    "gelu": (_gelu_erf, -5, 5),
}


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("op", sorted(FLOAT_OPS))
def test_float_unary_ops(op, dtype, rng):
    f, x = one_input(dtype)
    y = getattr(ops, op)(x)
    out_dtype = dtype if dtype.is_float else D.f32  # float ops on ints and bool give f32
    assert y.dtype is out_dtype
    assert y.shape == x.shape
    fn, low, high = FLOAT_OPS[op]
    xs = random_array(rng, dtype, SHAPE, low, high)
    with np.errstate(divide="ignore"):
        expected = fn(as_f64(xs))
    assert_matches(run(f, y, x=xs), expected, out_dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + [D.i32])
def test_gelu_tanh_approximation(dtype, rng):
    f, x = one_input(dtype)
    y = ops.gelu(x, approximate="tanh")
    out_dtype = dtype if dtype.is_float else D.f32
    assert y.dtype is out_dtype
    xs = random_array(rng, dtype, SHAPE, -5, 5)
    assert_matches(run(f, y, x=xs), _gelu_tanh(as_f64(xs)), out_dtype)


def test_gelu_known_values_and_forms_differ():
    f, x = one_input(D.f64, [6])
    y_erf = ops.gelu(x)
    y_tanh = ops.gelu(x, approximate="tanh")
    f.add_output(y_erf)
    f.add_output(y_tanh)
    out = fuserir.evaluate(f, {"x": np.array([0.0, 1.0, -1.0, 3.0, -6.0, -10.0])})
    # x * Phi(x); deep in the negative tail 1 + erf(x / sqrt 2) cancels to nothing in f64,
    # while the true values are tiny but far from zero in relative terms
    np.testing.assert_allclose(out[y_erf.name],
                               [0.0, 0.8413447460685429, -0.15865525393145707,
                                2.99595030590511, -5.9195258702262e-09, -7.6198530241605e-23],
                               rtol=1e-12)
    np.testing.assert_allclose(out[y_tanh.name][:4],
                               [0.0, 0.8411919906082768, -0.15880800939172324,
                                2.996362607918227], rtol=1e-14)


def test_special_values_of_float_ops():
    f, x = one_input(D.f32, [4])
    outs = [ops.log(x), ops.sqrt(x), ops.rsqrt(x), ops.exp(x), ops.sigmoid(x)]
    for o in outs:
        f.add_output(o)
    xs = np.array([0.0, -1.0, np.inf, -np.inf], np.float32)
    r = fuserir.evaluate(f, {"x": xs})
    np.testing.assert_array_equal(r[outs[0].name][[0, 2]], [-np.inf, np.inf])
    assert np.isnan(r[outs[0].name][1]) and np.isnan(r[outs[1].name][1])
    np.testing.assert_array_equal(r[outs[2].name][[0, 2]], [np.inf, 0.0])
    np.testing.assert_array_equal(r[outs[3].name][[2, 3]], [np.inf, 0.0])
    np.testing.assert_array_equal(r[outs[4].name][[2, 3]], [1.0, 0.0])


@pytest.mark.parametrize("op", ["neg", "abs", "relu"])
def test_sign_ops_refuse_bool(op):
    _, x = one_input(D.bool)
    with pytest.raises(FusionError, match=rf"^{op}: operand x is bool; cast it first$"):
        getattr(ops, op)(x)


@pytest.mark.parametrize("bad", ["erf", "Tanh", None, ""])
def test_gelu_bad_approximate(bad):
    _, x = one_input(D.f32)
    with pytest.raises(FusionError,
                       match=rf"gelu: approximate must be \"none\" or \"tanh\", got {bad!r}"):
        ops.gelu(x, approximate=bad)


def test_unary_needs_a_tensor():
    with pytest.raises(FusionError, match=r"exp: operand must be a tensor, got 2\.0"):
        ops.exp(2.0)


# -- binary -----------------------------------------------------------------------------------


def _cdiv(a, b):
    """C division of int64 arrays: truncate toward zero."""
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


ARITH = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "maximum": np.maximum,
    "minimum": np.minimum,
}


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
@pytest.mark.parametrize("op", sorted(ARITH))
def test_arithmetic_same_dtype(op, dtype, rng):
    f, a, b = two_inputs(dtype, dtype)
    y = getattr(ops, op)(a, b)
    assert y.dtype is dtype
    assert y.shape == [Sym("M"), Sym("N")]
    av = random_array(rng, dtype, SHAPE, -50, 50)
    bv = random_array(rng, dtype, SHAPE, -9, 9, away_from_zero=0.5 if op == "div" else 0)
    if dtype.is_int:
        expected = (_cdiv if op == "div" else ARITH[op])(av.astype(np.int64), bv.astype(np.int64))
    else:
        expected = ARITH[op](as_f64(av), as_f64(bv))
    assert_matches(run(f, y, a=av, b=bv), expected, dtype)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_division_truncates_toward_zero(dtype):
    f, a, b = two_inputs(dtype, dtype, ["N"], ["N"])
    av = np.array([-7, 7, -7, 7, 0, -1, 6, -6, 9], HOST[dtype])
    bv = np.array([2, -2, -2, 2, 5, 3, 3, 3, -10], HOST[dtype])
    got = run(f, ops.div(a, b), a=av, b=bv)
    assert got.dtype == HOST[dtype]
    np.testing.assert_array_equal(got, [-3, -3, 3, 3, 0, 0, 2, -2, 0])


def test_integer_division_by_literal_and_of_literal():
    f, x = one_input(D.i32, ["N"])
    q1 = ops.div(x, 2)
    q2 = ops.div(-7, x)
    f.add_output(q1)
    f.add_output(q2)
    r = fuserir.evaluate(f, {"x": np.array([-7, 7, 3, -3], np.int32)})
    np.testing.assert_array_equal(r[q1.name], [-3, 3, 1, -1])
    np.testing.assert_array_equal(r[q2.name], [1, -1, -2, 2])


COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
           "gt": np.greater, "ge": np.greater_equal}


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("op", sorted(COMPARE))
def test_comparisons_give_bool(op, dtype, rng):
    f, a, b = two_inputs(dtype, dtype)
    y = getattr(ops, op)(a, b)
    assert y.dtype is D.bool
    av = random_array(rng, dtype, SHAPE, -2, 2)
    bv = random_array(rng, dtype, SHAPE, -2, 2)
    bv[0] = av[0]  # some equal pairs
    bv[1] = ~av[1] if dtype is D.bool else av[1] + 1  # some unequal ones
    expected = COMPARE[op](av, bv)
    assert expected.any() and not expected.all()  # the data exercise both outcomes
    assert_matches(run(f, y, a=av, b=bv), expected, D.bool)


PROMOTIONS = [
    (D.f16, D.bf16, D.f32), (D.f16, D.f32, D.f32), (D.bf16, D.f32, D.f32),
    (D.f16, D.f64, D.f64), (D.bf16, D.f64, D.f64), (D.f32, D.f64, D.f64),
    (D.i32, D.i64, D.i64), (D.i32, D.f16, D.f16), (D.i64, D.bf16, D.bf16),
    (D.i64, D.f32, D.f32), (D.i32, D.f64, D.f64), (D.bool, D.i32, D.i32),
    (D.bool, D.f16, D.f16), (D.bool, D.i64, D.i64),
]


@pytest.mark.parametrize("da,db,expected", PROMOTIONS)
def test_promotion_table(da, db, expected):
    assert promote(da, db) is expected
    assert promote(db, da) is expected


@pytest.mark.parametrize("da,db,expected", PROMOTIONS)
@pytest.mark.parametrize("op", ["add", "mul", "maximum", "lt"])
def test_mixed_dtype_binary(op, da, db, expected, rng):
    f, a, b = two_inputs(da, db)
    y = getattr(ops, op)(a, b)
    out_dtype = D.bool if op == "lt" else expected
    assert y.dtype is out_dtype
    av = random_array(rng, da, SHAPE, -3, 3)
    bv = random_array(rng, db, SHAPE, -3, 3)
    fn = {"add": np.add, "mul": np.multiply, "maximum": np.maximum, "lt": np.less}[op]
    assert_matches(run(f, y, a=av, b=bv), fn(as_f64(av), as_f64(bv)), out_dtype)


def test_f16_plus_bf16_is_computed_in_f32():
    f, a, b = two_inputs(D.f16, D.bf16, ["N"], ["N"])
    av = np.array([1.0, 2048.0], np.float16)
    bv = np.array([2.0 ** -9, 1.0], "bfloat16")
    got = run(f, ops.add(a, b), a=av, b=bv)
    assert got.dtype == np.float32
    # exact in f32; neither f16 (2049 is not an f16) nor bf16 (1 + 2^-9 is not a bf16)
    np.testing.assert_array_equal(got, [1.0 + 2.0 ** -9, 2049.0])


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "minimum"])
def test_bool_arithmetic_is_refused(op):
    _, a, b = two_inputs(D.bool, D.bool)
    with pytest.raises(FusionError, match=rf"^{op}: operands are bool; cast them first$"):
        getattr(ops, op)(a, b)
    with pytest.raises(FusionError, match=rf"^{op}: operands are bool"):
        getattr(ops, op)(a, True)


def test_binary_rank_mismatch():
    _, a, b = two_inputs(D.f32, D.f32, ["M", "N"], ["N"])
    with pytest.raises(FusionError, match=r"add: operand ranks differ \(a has 2, b has 1\); "
                                          r"broadcast the smaller operand first"):
        ops.add(a, b)


def test_binary_extent_mismatch_names_axis_and_tensors():
    _, a, b = two_inputs(D.f32, D.f32, ["M", "N"], ["M", "K"])
    with pytest.raises(FusionError, match=r"mul: axis 1 extents differ: N \(a\) vs K \(b\)"):
        ops.mul(a, b)
    _, c, d = two_inputs(D.f32, D.f32, [4, 5], [3, 5])
    with pytest.raises(FusionError, match=r"sub: axis 0 extents differ: 4 \(a\) vs 3 \(b\)"):
        ops.sub(c, d)
    with pytest.raises(FusionError, match=r"where: axis 0 extents differ: 4 \(a\) vs 3 \(b\)"):
        ops.where(ops.gt(c, 0), c, d)


def test_operands_from_different_fusions():
    _, a = one_input(D.f32)
    _, b = one_input(D.f32)
    with pytest.raises(FusionError, match=r"add: operands x and x belong to different fusions"):
        ops.add(a, b)


def test_tensor_operator_sugar(rng):
    f, a, b = two_inputs(D.f32, D.f32)
    y = (a + b) * 2 - a / b
    z = 1 - (-a)
    w = 3 / b + 2 * a
    for t in (y, z, w):
        f.add_output(t)
    av = random_array(rng, D.f32, SHAPE)
    bv = random_array(rng, D.f32, SHAPE, away_from_zero=0.5)
    r = fuserir.evaluate(f, {"a": av, "b": bv})
    a64, b64 = as_f64(av), as_f64(bv)
    assert_matches(r[y.name], (a64 + b64) * 2 - a64 / b64, D.f32, rtol_=1e-5)
    assert_matches(r[z.name], 1 + a64, D.f32)
    assert_matches(r[w.name], 3 / b64 + 2 * a64, D.f32, rtol_=1e-5)


# -- literals ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
def test_literal_takes_tensor_dtype(dtype, rng):
    f, x = one_input(dtype)
    y = ops.add(x, 2)
    z = ops.sub(3, x)
    assert y.dtype is dtype and z.dtype is dtype
    lit_y, lit_z = y.definition.inputs[1], z.definition.inputs[0]
    assert isinstance(lit_y, Scalar) and lit_y.dtype is dtype and lit_y.value == 2
    assert isinstance(lit_z, Scalar) and lit_z.dtype is dtype and lit_z.value == 3
    f.add_output(y)
    f.add_output(z)
    xs = random_array(rng, dtype, SHAPE, -20, 20)
    r = fuserir.evaluate(f, {"x": xs})
    ref = xs.astype(np.int64) if dtype.is_int else as_f64(xs)
    assert_matches(r[y.name], ref + 2, dtype)
    assert_matches(r[z.name], 3 - ref, dtype)


def test_literal_keeps_f16_not_f32():
    # 2049 = 2048 + 1 is not an f16: adding the f16 literal 1 to 2048 in f32 and rounding
    # back gives 2048 (round to even), and the result stays f16
    f, x = one_input(D.f16, ["N"])
    got = run(f, ops.add(x, 1), x=np.array([2048.0, 1.5], np.float16))
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, [2048.0, 2.5])


@pytest.mark.parametrize("dtype", [D.f16, D.bf16])
def test_literal_is_rounded_to_the_tensor_dtype(dtype):
    # 0.1 as an f16/bf16 literal equals the f16/bf16 value 0.1, not the f32 value 0.1
    f, x = one_input(dtype, ["N"])
    xs = np.array([0.1, 0.2, 0.1], HOST[dtype])
    got = run(f, ops.eq(x, 0.1), x=xs)
    np.testing.assert_array_equal(got, [True, False, True])


def test_float_literal_with_int_tensor_is_an_error():
    _, x = one_input(D.i32)
    with pytest.raises(FusionError, match=r"^add: literal 2\.5 cannot take the dtype i32 of "
                                          r"x$"):
        ops.add(x, 2.5)
    with pytest.raises(FusionError, match=r"^mul: literal 0\.5 cannot take the dtype i32 of "
                                          r"x$"):
        ops.mul(0.5, x)
    with pytest.raises(FusionError, match=r"literal nan cannot take the dtype i32"):
        ops.add(x, float("nan"))


def test_integral_float_literal_with_int_tensor_is_accepted():
    f, x = one_input(D.i64, ["N"])
    y = ops.add(x, 2.0)
    assert y.dtype is D.i64 and y.definition.inputs[1].value == 2
    assert isinstance(y.definition.inputs[1].value, int)
    np.testing.assert_array_equal(run(f, y, x=np.array([1, -5], np.int64)), [3, -3])


def test_literal_out_of_range_is_an_error():
    _, x = one_input(D.i32)
    with pytest.raises(FusionError, match=r"add: literal 4294967296 is out of range for the "
                                          r"dtype i32 of x"):
        ops.add(x, 2 ** 32)
    _, y = one_input(D.f16)
    with pytest.raises(FusionError, match=r"mul: literal 100000\.0 is out of range for the "
                                          r"dtype f16 of x"):
        ops.mul(y, 1e5)
    # the largest values do fit, and infinities are meant
    ops.add(x, 2 ** 31 - 1)
    ops.add(x, -2 ** 31)
    ops.mul(y, 65504.0)
    ops.mul(y, float("-inf"))


def test_bool_literals():
    f, x = one_input(D.bool, ["N"])
    y = ops.eq(x, True)
    assert y.definition.inputs[1].dtype is D.bool
    np.testing.assert_array_equal(run(f, y, x=np.array([True, False])), [True, False])
    with pytest.raises(FusionError, match=r"ne: literal 3 cannot take the dtype bool of x"):
        ops.ne(x, 3)


def test_literal_operand_errors():
    _, x = one_input(D.f32)
    with pytest.raises(FusionError, match=r"add: operand 'a' is neither a tensor nor a number"):
        ops.add(x, "a")
    with pytest.raises(FusionError, match=r"add: needs at least one tensor operand"):
        ops.add(1, 2)


# -- where ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_where(dtype, rng):
    f = Fusion("w")
    c = f.new_input("c", D.bool, ["M", "N"])
    a = f.new_input("a", dtype, ["M", "N"])
    b = f.new_input("b", dtype, ["M", "N"])
    y = ops.where(c, a, b)
    assert y.dtype is dtype
    cv = random_array(rng, D.bool, SHAPE)
    av, bv = random_array(rng, dtype, SHAPE), random_array(rng, dtype, SHAPE)
    assert_matches(run(f, y, c=cv, a=av, b=bv), np.where(cv, av, bv), dtype)


def test_where_promotes_and_takes_literals(rng):
    f = Fusion("w")
    c = f.new_input("c", D.bool, ["N"])
    a = f.new_input("a", D.f16, ["N"])
    b = f.new_input("b", D.bf16, ["N"])
    i = f.new_input("i", D.i32, ["N"])
    mixed = ops.where(c, a, b)
    lit_right = ops.where(c, i, 7)
    lit_left = ops.where(c, 0.5, a)
    assert mixed.dtype is D.f32
    assert lit_right.dtype is D.i32 and lit_right.definition.inputs[2].dtype is D.i32
    assert lit_left.dtype is D.f16 and lit_left.definition.inputs[1].dtype is D.f16
    for t in (mixed, lit_right, lit_left):
        f.add_output(t)
    cv = np.array([True, False, True, False])
    av = np.array([1.5, 2.5, -3.0, 4.0], np.float16)
    bv = np.array([0.25, -8.0, 3.0, 1.0], "bfloat16")
    iv = np.array([1, 2, 3, 4], np.int32)
    r = fuserir.evaluate(f, {"c": cv, "a": av, "b": bv, "i": iv})
    np.testing.assert_array_equal(r[mixed.name], np.array([1.5, -8.0, -3.0, 1.0], np.float32))
    assert r[mixed.name].dtype == np.float32
    np.testing.assert_array_equal(r[lit_right.name], [1, 7, 3, 7])
    np.testing.assert_array_equal(r[lit_left.name], np.array([0.5, 2.5, 0.5, 4.0], np.float16))


def test_where_errors():
    f = Fusion("w")
    c = f.new_input("c", D.f32, ["N"])
    cb = f.new_input("cb", D.bool, ["N"])
    i = f.new_input("i", D.i32, ["N"])
    with pytest.raises(FusionError, match=r"where: condition c must be bool, got f32"):
        ops.where(c, i, i)
    with pytest.raises(FusionError, match=r"where: condition must be a tensor, got True"):
        ops.where(True, i, i)
    with pytest.raises(FusionError, match=r"where: literal 2\.5 cannot take the dtype i32 of "
                                          r"i"):
        ops.where(cb, i, 2.5)
    with pytest.raises(FusionError, match=r"where: literal 1e\+39 is out of range for the "
                                          r"dtype f32 of where\(cb, \.\.\.\)"):
        ops.where(cb, 1e39, 0)
    with pytest.raises(FusionError, match=r"where: literal true cannot take the dtype i64"):
        ops.where(cb, True, 2)


@pytest.mark.parametrize("a, b, dtype", [(1.0, 0, D.f32), (1, -1, D.i64),
                                         (False, True, D.bool)])
def test_where_of_two_numbers_takes_torch_s_dtype(a, b, dtype):
    """As torch.where(cond, 1.0, 0): a tensor of cond's shape, f32 where a number is a
    float, i64 of integers, bool of two bools."""
    f = Fusion("w")
    cb = f.new_input("cb", D.bool, ["N"])
    y = ops.where(cb, a, b)
    assert y.dtype is dtype and [str(e) for e in y.shape] == ["N"]
    got = run(f, y, cb=np.array([True, False, True]))
    np.testing.assert_array_equal(got, np.array([a, b, a], dtype.numpy))


# -- cast and set -----------------------------------------------------------------------------


@pytest.mark.parametrize("src", ALL_DTYPES)
@pytest.mark.parametrize("dst", ALL_DTYPES)
def test_cast(src, dst, rng):
    f, x = one_input(src)
    y = ops.cast(x, dst)
    assert y.dtype is dst and y.shape == x.shape
    xs = random_array(rng, src, SHAPE, -100, 100)
    if src.is_float:
        xs[0, 0] = 0  # so that float -> bool sees a zero
    got = run(f, y, x=xs)
    values = as_f64(xs)
    if dst is D.bool:
        expected = values != 0
    elif dst.is_int:
        expected = np.trunc(values)
    else:
        expected = values
    assert_matches(got, expected, dst)


def test_float_to_int_cast_truncates_toward_zero():
    for src in FLOAT_DTYPES:
        f, x = one_input(src, ["N"])
        xs = np.array([2.75, -2.75, 0.5, -0.5, 7.0, -7.0], HOST[src])
        got = run(f, ops.cast(x, "i32"), x=xs)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, [2, -2, 0, 0, 7, -7])


def test_cast_rounds_to_the_target():
    f, x = one_input(D.f32, ["N"])
    y16, yb = ops.cast(x, D.f16), ops.cast(x, D.bf16)
    f.add_output(y16)
    f.add_output(yb)
    xs = np.array([1.0 + 2.0 ** -12, 1.0 + 2.0 ** -8 + 2.0 ** -12, 70000.0], np.float32)
    r = fuserir.evaluate(f, {"x": xs})
    np.testing.assert_array_equal(r[y16.name], np.array([1.0, 1.0 + 2.0 ** -8, np.inf],
                                                        np.float16))
    np.testing.assert_array_equal(as_f64(r[yb.name]), [1.0, 1.0 + 2.0 ** -7, 70144.0])


@pytest.mark.parametrize("bad", ["f8", "float32", 5, None, np.float32])
def test_cast_unknown_dtype(bad):
    _, x = one_input(D.f32)
    with pytest.raises(FusionError, match=rf"^cast: unknown dtype {re.escape(repr(bad))}; "
                                          r"expected one of f16, bf16, f32, f64, i32, i64, "
                                          r"bool$"):
        ops.cast(x, bad)


def test_cast_unknown_dtype_names_it():
    _, x = one_input(D.f32)
    with pytest.raises(FusionError, match=r"cast: unknown dtype 'f8'; expected one of f16, "
                                          r"bf16, f32, f64, i32, i64, bool"):
        ops.cast(x, "f8")


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_set_copies(dtype, rng):
    f, x = one_input(dtype)
    y = ops.set(x)
    assert y.dtype is dtype and y.shape == x.shape and y.memory_type.value == "local"
    xs = random_array(rng, dtype, SHAPE)
    got = run(f, y, x=xs)
    np.testing.assert_array_equal(got, xs)
    assert got is not xs


# -- broadcast ------------------------------------------------------------------------------


def test_broadcast_then_add(rng):
    f = Fusion("b")
    row = f.new_input("row", D.f32, ["N"])
    col = f.new_input("col", D.f32, ["M"])
    m = f.new_input("m", D.f32, ["M", "N"])
    br = ops.broadcast(row, [True, False])
    bc = ops.broadcast(col, [False, True])
    assert [a.kind for a in br.root] == [IterKind.broadcast, IterKind.iteration]
    assert br.shape == [1, Sym("N")] and bc.shape == [Sym("M"), 1]
    y = ops.add(ops.add(m, br), bc)
    assert y.shape == [Sym("M"), Sym("N")]
    assert all(a.kind is IterKind.iteration for a in y.root)
    rv = random_array(rng, D.f32, [5])
    cv = random_array(rng, D.f32, [3])
    mv = random_array(rng, D.f32, [3, 5])
    got = run(f, y, row=rv, col=cv, m=mv)
    assert_matches(got, as_f64(mv) + as_f64(rv)[None, :] + as_f64(cv)[:, None], D.f32)


def test_broadcast_several_axes_and_broadcast_with_broadcast(rng):
    f, x = one_input(D.f64, ["N"])
    b = ops.broadcast(x, [True, False, True])
    assert b.shape == [1, Sym("N"), 1]
    bb = ops.add(ops.broadcast(ops.sum(x, [0]), [True, True, True]),
                 ops.broadcast(x, [True, False, True]))
    assert bb.shape == [1, Sym("N"), 1]
    xs = random_array(rng, D.f64, [4])
    got = run(f, bb, x=xs)
    assert_matches(got, (xs.sum() + xs)[None, :, None], D.f64)
    empty = ops.broadcast(x, [False])
    assert empty.shape == [Sym("N")]


def test_broadcast_errors():
    _, x = one_input(D.f32)
    with pytest.raises(FusionError, match=r"broadcast: x has 2 axes but the flags keep 1 "
                                          r"\(one flag per output axis, true = new axis\)"):
        ops.broadcast(x, [True, False])
    with pytest.raises(FusionError, match=r"broadcast: x has 2 axes but the flags keep 3"):
        ops.broadcast(x, [False, False, False])
    with pytest.raises(FusionError, match=r"broadcast: flags must be true/false, got \[0, 1, "
                                          r"1\]"):
        ops.broadcast(x, [0, 1, 1])


def test_an_input_axis_declared_of_size_1_broadcasts_a_run_time_size_does_not():
    f = Fusion("b")
    x = f.new_input("x", D.f32, [1, 4])
    y = f.new_input("y", D.f32, [3, 4])
    one = f.new_input("one", D.f32, ["R", 4])
    assert x.shape_axes[0].is_broadcast and not one.shape_axes[0].is_broadcast
    assert ops.add(x, y).shape == [3, 4]
    with pytest.raises(FusionError, match=r"add: axis 0 extents differ: R \(one\) vs 3 \(y\)"):
        ops.add(one, y)
    ok = ops.add(ops.broadcast(ops.sum(x, [0]), [True, False]), y)
    assert ok.shape == [3, 4]


# -- reductions -------------------------------------------------------------------------------

REDUCE = {"sum": np.sum, "max": np.max}


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
@pytest.mark.parametrize("op", ["sum", "max"])
@pytest.mark.parametrize("axes,kept", [([0], [1, 2]), ([2], [0, 1]), ([-1], [0, 1]),
                                       ([0, 2], [1]), ([2, 0], [1]), ([0, 1, 2], []),
                                       (1, [0, 2])])
def test_reductions(op, dtype, axes, kept, rng):
    f, x = one_input(dtype, ["A", "B", "C"])
    y = getattr(ops, op)(x, axes)
    assert y.dtype is dtype
    names = ["A", "B", "C"]
    assert y.shape == [Sym(names[i]) for i in kept]
    # the domain keeps the reduced axes as reduction axes
    assert [a.is_reduction for a in y.root] == [i not in kept for i in range(3)]
    assert y.root == y.logical == y.loop
    xs = random_array(rng, dtype, (3, 4, 5), -10, 10)
    norm = tuple(sorted(a % 3 for a in ([axes] if isinstance(axes, int) else axes)))
    assert y.definition.axes == norm
    ref = xs.astype(np.int64) if dtype.is_int else as_f64(xs)
    expected = REDUCE[op](ref, axis=norm)
    assert_matches(run(f, y, x=xs), expected, dtype)


def test_sum_of_f16_accumulates_exactly():
    # 4096 ones and one 0.5: an f16 accumulator would stall at 2048; the exact sum 4096.5
    # rounds to 4096 in f16
    f, x = one_input(D.f16, ["N"])
    xs = np.ones(4097, np.float16)
    xs[0] = 0.5
    got = run(f, ops.sum(x, [0]), x=xs)
    assert got.dtype == np.float16 and got.shape == ()
    assert float(got) == 4096.0


def test_reduction_errors():
    _, x = one_input(D.f32)
    with pytest.raises(FusionError, match=r"sum: axis 2 is out of range for x with 2 axes"):
        ops.sum(x, [2])
    with pytest.raises(FusionError, match=r"max: axis -3 is out of range for x with 2 axes"):
        ops.max(x, -3)
    with pytest.raises(FusionError, match=r"sum: axis -1 is listed twice"):
        ops.sum(x, [1, -1])
    with pytest.raises(FusionError, match=r"sum: no axes to reduce"):
        ops.sum(x, [])
    with pytest.raises(FusionError, match=r"max: axis '0' is not an integer"):
        ops.max(x, ["0"])
    with pytest.raises(FusionError, match=r"sum: axis True is not an integer"):
        ops.sum(x, [True])
    _, b = one_input(D.bool)
    with pytest.raises(FusionError, match=r"max: operand x is bool; cast it first"):
        ops.max(b, [0])


def test_reduce_then_reduce_again(rng):
    f, x = one_input(D.f64, ["A", "B", "C"])
    y = ops.max(ops.sum(x, [1]), [1])
    assert y.shape == [Sym("A")]
    xs = random_array(rng, D.f64, (2, 3, 4))
    assert_matches(run(f, y, x=xs), xs.sum(axis=1).max(axis=1), D.f64)


# -- matmul ---------------------------------------------------------------------------------


def _stored(layout, m, n, k):
    a_shape = (m, k) if layout[0] == "T" else (k, m)
    b_shape = (k, n) if layout[1] == "T" else (n, k)
    return a_shape, b_shape


@pytest.mark.parametrize("dtype", [D.f16, D.bf16])
@pytest.mark.parametrize("layout", ["TT", "TN", "NT", "NN"])
def test_matmul_layouts(layout, dtype, rng):
    m, n, k = 5, 7, 9
    a_shape, b_shape = _stored(layout, m, n, k)
    names = {5: "M", 7: "N", 9: "K"}
    f = Fusion("mm")
    a = f.new_input("a", dtype, [names[s] for s in a_shape])
    b = f.new_input("b", dtype, [names[s] for s in b_shape])
    y = ops.matmul(a, b, layout)
    assert y.dtype is D.f32
    assert y.shape == [Sym("M"), Sym("N")]
    assert [str(r) for r in y.root] == ["i{M}", "i{N}", "r{K}"]
    assert y.definition.layout == layout
    av = random_array(rng, dtype, a_shape)
    bv = random_array(rng, dtype, b_shape)
    a_mk = as_f64(av) if layout[0] == "T" else as_f64(av).T
    b_kn = as_f64(bv) if layout[1] == "T" else as_f64(bv).T
    expected = np.einsum("mk,kn->mn", a_mk, b_kn)
    assert_matches(run(f, y, a=av, b=bv), expected, D.f32, atol_=1e-30)


def test_matmul_default_layout_is_tt():
    f = Fusion("mm")
    a = f.new_input("a", D.f16, [2, 3])
    b = f.new_input("b", D.f16, [3, 4])
    y = ops.matmul(a, b)
    assert y.definition.layout == "TT" and y.shape == [2, 4]


def test_matmul_errors():
    f = Fusion("mm")
    a = f.new_input("a", D.f16, ["M", "K"])
    b = f.new_input("b", D.f16, ["K", "N"])
    a3 = f.new_input("a3", D.f16, ["M", "K", "N"])
    v = f.new_input("v", D.f16, ["K"])
    a32 = f.new_input("a32", D.f32, ["M", "K"])
    bb = f.new_input("bb", D.bf16, ["K", "N"])
    bl = f.new_input("bl", D.f16, ["L", "N"])
    bl3 = f.new_input("bl3", D.f16, ["L", "N", "K"])
    with pytest.raises(FusionError, match=r"matmul: batch axis 0 of the result: M \(a3 "
                                          r"\[M, K, N\]\) vs L \(bl3 \[L, N, K\]\); batch "
                                          "extents must be equal, or one a broadcast axis"):
        ops.matmul(a3, bl3)
    with pytest.raises(FusionError, match=r"matmul: B \(v\) must have at least 2 axes \(a "
                                          r"matrix, after any batch axes\), has 1"):
        ops.matmul(a, v)
    with pytest.raises(FusionError, match=r"matmul: A \(a32\) must be f16 or bf16, got f32"):
        ops.matmul(a32, b)
    with pytest.raises(FusionError, match=r"matmul: A \(a\) is f16 but B \(bb\) is bf16"):
        ops.matmul(a, bb)
    with pytest.raises(FusionError, match=r"matmul: K extents differ: K \(a\) vs L \(bl\) "
                                          r"for layout TT"):
        ops.matmul(a, bl)
    with pytest.raises(FusionError, match=r"matmul: K extents differ: M \(a\) vs K \(b\) "
                                          r"for layout NT"):
        ops.matmul(a, b, "NT")
    with pytest.raises(FusionError, match=r"matmul: unknown layout 'XY'; expected one of TT, "
                                          r"TN, NT, NN"):
        ops.matmul(a, b, "XY")
    with pytest.raises(FusionError, match=r"matmul: unknown layout 'tt'"):
        ops.matmul(a, b, "tt")
    with pytest.raises(FusionError, match=r"matmul: A must be a tensor, got 1\.0"):
        ops.matmul(1.0, b)


# -- builders in general ----------------------------------------------------------------------


def test_results_get_fresh_names_and_register_in_the_fusion():
    f, x = one_input(D.f32)
    y = ops.relu(x)
    z = ops.exp(y)
    assert y.name != z.name and not y.is_named
    assert f.tensor(y.name) is y and f.tensor(z.name) is z
    assert [e.output for e in f.exprs] == [y, z]
    assert f.consumers(x) == [y] and f.producers(z) == [y]
