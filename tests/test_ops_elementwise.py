"""The elementwise ops of nvFuser's Python frontend, each an entry of fuserir.op_table (or,
for truediv, clamp, lerp, addcmul and threshold, a few of the ops): their meaning in the
reference evaluator against numpy formulas and known values (NaN, infinities, signed
zeros, negative operands, halfway cases), in f32 and f16/bf16; the interpreter equal to
the reference on fusions (one per dtype) using every op that takes the dtype, whose CUDA
source compiles with NVRTC (no GPU needed) and which round-trip through the DSL; the
errors for the dtypes an op does not take; and the inventory of nvFuser's names."""

import math

import numpy as np
import pytest

import codegen
import fuserir
from fuserir import DataType, DslError, Fusion, FusionError, numerics, op_table, ops
from fuserir.dsl.parser import OPS
from fuserir.ir.equality import first_difference

D = DataType
F16, BF16, F32, F64, I32, I64, BOOL = (D.f16, D.bf16, D.f32, D.f64, D.i32, D.i64, D.bool)
FLOATS = (F32, F16, BF16)
NAN, INF = math.nan, math.inf


def reference(op, *args, **kwargs):
    """ops.<op> applied to `args` (a numpy array is an input of its dtype, anything else
    is passed as it is), evaluated by the reference."""
    f = Fusion("t")
    inputs, operands = {}, []
    for k, arg in enumerate(args):
        if isinstance(arg, np.ndarray):
            inputs[f"in{k}"] = arg
            arg = f.new_input(f"in{k}", fuserir.dtypes.from_numpy(arg.dtype), ["N"])
        operands.append(arg)
    out = getattr(ops, op)(*operands, **kwargs)
    f.add_output(out)
    return fuserir.evaluate(f, inputs)[out.name]


def array(values, dtype):
    """`values` (Python numbers) as an array of `dtype`, each rounded once."""
    return numerics.convert(np.array(values, dtype=np.float64), dtype) if dtype.is_float \
        else np.array(values, dtype=dtype.numpy)


def assert_same(got, want):
    """Equal values of one dtype, NaN equal to NaN and -0.0 told from 0.0."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if got.dtype.kind == "f" or got.dtype == np.dtype(BF16.numpy):
        g, w = got.astype(np.float64), want.astype(np.float64)
        assert np.array_equal(g, w, equal_nan=True), (g, w)
        numbers = ~np.isnan(w)
        assert np.array_equal(np.signbit(g[numbers]), np.signbit(w[numbers])), (g, w)
    else:
        assert np.array_equal(got, want), (got, want)


# -- unary float math: the f64 formula of the value, rounded once ------------------------------

EDGES = [NAN, INF, -INF, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0, -1.0, 0.1, 3.75, -7.25,
         1e-3, 200.0]
UNARY_MATH = {
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "exp2": np.exp2, "expm1": np.expm1,
    "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
    "erfc": np.vectorize(math.erfc, otypes=[float]), "ceil": np.ceil, "floor": np.floor,
    "round": np.rint, "trunc": np.trunc, "frac": lambda v: v - np.trunc(v),
    "reciprocal": lambda v: 1 / v, "sign": np.sign,
    "silu": lambda v: v * (1 / (1 + np.exp(-v))),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", sorted(UNARY_MATH))
def test_unary_math_is_the_f64_value_rounded_once(op, dtype):
    x = array(EDGES, dtype)
    with np.errstate(all="ignore"):
        want = numerics.convert(UNARY_MATH[op](x.astype(np.float64)), dtype)
    got = reference(op, x)
    if op == "silu":    # x sigmoid(x) in f64 may differ from x / (1 + e^-x) in the last bit
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))
    else:
        assert_same(got, want)


@pytest.mark.parametrize("op", ["sin", "round", "sign", "lgamma", "reciprocal"])
def test_an_integer_operand_of_a_math_op_is_converted_to_f32_first(op):
    x = np.array([-3, 0, 7, 2 ** 24 + 1, -2 ** 31], np.int32)
    got = reference(op, x)
    assert got.dtype == np.float32
    assert_same(got, reference(op, x.astype(np.float32)))
    assert_same(reference(op, np.array([True, False])), reference(op, array([1, 0], F32)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_rounding_ops_known_values(dtype):
    x = array([0.5, 1.5, 2.5, -0.5, -2.5, 3.5, -3.75, 2.0, -0.0, INF, NAN], dtype)
    known = {
        "round": [0.0, 2.0, 2.0, -0.0, -2.0, 4.0, -4.0, 2.0, -0.0, INF, NAN],  # half to even
        "floor": [0.0, 1.0, 2.0, -1.0, -3.0, 3.0, -4.0, 2.0, -0.0, INF, NAN],
        "ceil": [1.0, 2.0, 3.0, -0.0, -2.0, 4.0, -3.0, 2.0, -0.0, INF, NAN],
        "trunc": [0.0, 1.0, 2.0, -0.0, -2.0, 3.0, -3.0, 2.0, -0.0, INF, NAN],
        "frac": [0.5, 0.5, 0.5, -0.5, -0.5, 0.5, -0.75, 0.0, 0.0, NAN, NAN],  # x - x = +0
        "sign": [1.0, 1.0, 1.0, -1.0, -1.0, 1.0, -1.0, 1.0, 0.0, 1.0, NAN],
        "reciprocal": [2.0, 1 / 1.5, 0.4, -2.0, -0.4, 1 / 3.5, -1 / 3.75, 0.5, -INF, 0.0,
                       NAN],
    }
    for op, values in known.items():
        assert_same(reference(op, x), array(values, dtype))


def test_special_functions_known_values():
    x = array([1.0, 2.0, 0.0, -0.0, -1.0, 0.5, -0.5, INF, -INF, NAN], F32)
    lgamma = [0.0, 0.0, INF, INF, INF, math.log(math.pi) / 2, math.log(2 * math.sqrt(math.pi)),
              INF, INF, NAN]
    assert_same(reference("lgamma", x), array(lgamma, F32))
    y = array([0.0, -0.0, 0.3, -0.7, 0.999, 1.0, -1.0, 1.5, NAN], F64)
    erfinv = reference("erfinv", y)
    assert_same(erfinv[[0, 1, 5, 6, 7, 8]], array([0.0, -0.0, INF, -INF, NAN, NAN], F64))
    np.testing.assert_allclose([math.erf(v) for v in erfinv[2:5]], y[2:5], rtol=1e-15)
    c = array([0.0, 1e-30, 0.3, 1.0, 1.7, 2.0, -0.5, 2.5], F64)
    erfcinv = reference("erfcinv", c)
    assert_same(erfcinv[[0, 3, 5, 6, 7]], array([INF, 0.0, -INF, NAN, NAN], F64))
    np.testing.assert_allclose([math.erfc(v) for v in erfcinv[[1, 2, 4]]], c[[1, 2, 4]],
                               rtol=1e-13)
    # f32: the f64 inverse rounded once
    np.testing.assert_array_equal(reference("erfinv", array([0.5], F32)),
                                  array([0.4769362762044699], F32))
    assert reference("expm1", array([1e-10], F64))[0] == 1.00000000005e-10
    assert reference("log1p", array([-1.0], F32))[0] == -INF


# -- predicates --------------------------------------------------------------------------------

PREDICATE_VALUES = [NAN, INF, -INF, 0.0, -0.0, 1.5, -2.0]
PREDICATES = {
    "isfinite": [False, False, False, True, True, True, True],
    "isinf": [False, True, True, False, False, False, False],
    "isnan": [True, False, False, False, False, False, False],
    "isneginf": [False, False, True, False, False, False, False],
    "isposinf": [False, True, False, False, False, False, False],
    "signbit": [False, False, True, False, True, False, True],
}


@pytest.mark.parametrize("dtype", FLOATS + (F64,))
@pytest.mark.parametrize("op", sorted(PREDICATES))
def test_predicates_give_bool(op, dtype):
    assert_same(reference(op, array(PREDICATE_VALUES, dtype)), np.array(PREDICATES[op]))


def test_predicates_of_integers_and_bool():
    i = np.array([-5, 0, 2 ** 31 - 1], np.int32)
    assert_same(reference("isfinite", i), np.array([True] * 3))
    assert_same(reference("isnan", i.astype(np.int64)), np.array([False] * 3))
    assert_same(reference("signbit", i), np.array([True, False, False]))
    assert_same(reference("isinf", np.array([True, False])), np.array([False, False]))


# -- logical and bitwise -----------------------------------------------------------------------

def test_logical_ops_compare_operands_with_zero():
    x = array([0.0, -0.0, NAN, 2.0, 0.0, 1.0], F32)
    i = np.array([0, 3, 0, -1, 7, 0], np.int32)
    truth_x, truth_i = x != 0, i != 0                      # NaN is true, -0.0 false
    assert_same(reference("logical_not", x), ~truth_x)
    assert_same(reference("logical_not", i), ~truth_i)
    assert_same(reference("logical_and", x, i), truth_x & truth_i)
    assert_same(reference("logical_or", x, i), truth_x | truth_i)
    assert_same(reference("logical_xor", x, i), truth_x ^ truth_i)
    assert_same(reference("logical_and", i, 1), truth_i)
    c = np.array([True, False, True, False, True, False])
    assert_same(reference("logical_xor", c, x.astype(np.float16)), c ^ truth_x)


@pytest.mark.parametrize("dtype", [I32, I64])
def test_bitwise_ops_on_integers(dtype):
    a = np.array([0, -1, 12, -7, 5, np.iinfo(dtype.numpy).min], dtype.numpy)
    b = np.array([3, 6, 10, -1, 0, -1], dtype.numpy)
    assert_same(reference("bitwise_and", a, b), a & b)
    assert_same(reference("bitwise_or", a, b), a | b)
    assert_same(reference("bitwise_xor", a, b), a ^ b)
    assert_same(reference("bitwise_not", a), ~a)
    assert_same(reference("bitwise_xor", a, 5), a ^ np.array(5, dtype.numpy))


def test_bitwise_ops_on_bool_are_logical():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    assert_same(reference("bitwise_and", a, b), a & b)
    assert_same(reference("bitwise_or", a, b), a | b)
    assert_same(reference("bitwise_xor", a, b), a ^ b)
    assert_same(reference("bitwise_not", a), ~a)
    i = np.array([6, 6, 6, 6], np.int32)
    assert_same(reference("bitwise_and", a, i), (a.astype(np.int32) & i))    # promoted


def _python_shifts(a, b, bits):
    """torch's shifts, with Python integers: << by a negative amount or >= the width is 0,
    >> by one is by width - 1; results wrapped to the width."""
    def wrap(v):
        return (v + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))
    left = [wrap(x << y) if 0 <= y < bits else 0 for x, y in zip(a, b)]
    right = [x >> (y if 0 <= y < bits else bits - 1) for x, y in zip(a, b)]
    return left, right


@pytest.mark.parametrize("dtype", [I32, I64])
def test_shifts(dtype):
    bits = 8 * dtype.itemsize
    a = [1, -1, 5, -8, 3, 1, -5, 123456789, -1, 7]
    b = [0, 1, bits - 1, 2, bits, bits + 1, -1, 4, 200, -bits]
    left, right = _python_shifts(a, b, bits)
    x, y = np.array(a, dtype.numpy), np.array(b, dtype.numpy)
    assert_same(reference("bitwise_left_shift", x, y), np.array(left, dtype.numpy))
    assert_same(reference("bitwise_right_shift", x, y), np.array(right, dtype.numpy))


# -- binary math -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + (F64,))
def test_fmod_takes_the_dividend_s_sign_remainder_the_divisor_s(dtype):
    a = array([-5.0, 5.0, -5.0, 5.0, 5.5, -0.0, INF, 1.0, -1.0, -4.0, 7.0, NAN], dtype)
    b = array([3.0, -3.0, -3.0, 3.0, 2.0, 1.0, 1.0, INF, INF, 2.0, 0.0, 1.0], dtype)
    fmod = [-2.0, 2.0, -2.0, 2.0, 1.5, -0.0, NAN, 1.0, -1.0, -0.0, NAN, NAN]
    remainder = [1.0, -1.0, -2.0, 2.0, 1.5, -0.0, NAN, 1.0, INF, -0.0, NAN, NAN]
    assert_same(reference("fmod", a, b), array(fmod, dtype))
    assert_same(reference("remainder", a, b), array(remainder, dtype))


@pytest.mark.parametrize("dtype", [I32, I64])
def test_integer_fmod_and_remainder(dtype):
    low = np.iinfo(dtype.numpy).min
    a = np.array([-5, 5, -5, 5, 7, -7, low, low], dtype.numpy)
    b = np.array([3, -3, -3, 3, 0, 0, -1, 3], dtype.numpy)
    # x % 0 = x (fuserir.numerics), MIN % -1 = 0
    assert_same(reference("fmod", a, b),
                np.array([-2, 2, -2, 2, 7, -7, 0, math.fmod(low, 3)], dtype.numpy))
    assert_same(reference("remainder", a, b),
                np.array([1, -1, -2, 2, 7, -7, 0, low % 3], dtype.numpy))


def _int_pow(a, b, bits):
    def power(x, y):
        if y < 0:           # torch: 1 ** -n = 1, (-1) ** -n = +-1, any other base 0
            return x ** -y if x in (1, -1) else 0
        return (x ** y + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))
    return [power(x, y) for x, y in zip(a, b)]


@pytest.mark.parametrize("dtype", [I32, I64])
def test_integer_pow_wraps_and_stays_integer(dtype):
    a = [2, 3, -1, -1, 2, 1, 0, 0, 7, -3]
    b = [10, 40, -3, -4, -1, -5, 0, 5, 0, 3]
    got = reference("pow", np.array(a, dtype.numpy), np.array(b, dtype.numpy))
    assert_same(got, np.array(_int_pow(a, b, 8 * dtype.itemsize), dtype.numpy))


@pytest.mark.parametrize("dtype", FLOATS + (F64,))
def test_float_pow_and_atan2(dtype):
    a = array([2.0, -8.0, 0.0, NAN, 1.0, -2.0, 0.5, -0.0, 0.0, -0.0, 1.0], dtype)
    b = array([0.5, 1 / 3, -1.0, 0.0, NAN, 3.0, 2.5, 1.0, -0.0, -0.0, 0.0], dtype)
    x, y = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(all="ignore"):
        assert_same(reference("pow", a, b), numerics.convert(np.power(x, y), dtype))
    assert_same(reference("atan2", a, b), numerics.convert(np.arctan2(x, y), dtype))
    # the known ones: (-8) ** (1/3) is NaN, NaN ** 0 = 1 ** NaN = 1, 0 ** -1 = inf; atan2
    # of signed zeros
    assert_same(reference("pow", a, b)[[1, 3, 4, 2]], array([NAN, 1.0, 1.0, INF], dtype))
    assert_same(reference("atan2", array([-0.0, 0.0, -0.0], dtype),
                          array([-0.0, -1.0, 1.0], dtype)),
                array([-math.pi, math.pi, -0.0], dtype))


def test_pow_of_an_integer_tensor_and_a_float_one_is_float():
    got = reference("pow", np.array([2, 3], np.int32), array([0.5, -1.0], F32))
    assert_same(got, array([math.sqrt(2), 1 / 3], F32))


def test_truediv_divides_integers_as_f32():
    a, b = np.array([7, -7, 1, 5], np.int32), np.array([2, 2, 3, 0], np.int32)
    assert_same(reference("truediv", a, b), array([3.5, -3.5, 1 / 3, INF], F32))
    assert_same(reference("truediv", a, 0), array([INF, -INF, INF, INF], F32))
    x = array([1.0, -3.0, 0.0, 2.0], F16)
    assert_same(reference("truediv", x, 3), reference("div", x, 3))
    assert_same(reference("truediv", np.array([True, False, True, True]), a),
                array([1 / 7, -0.0, 1.0, 0.2], F32))


@pytest.mark.parametrize("dtype", [F32, F64])
def test_nextafter_steps_in_the_operand_type(dtype):
    t = dtype.numpy.type
    a = np.array([1.0, 1.0, 0.0, NAN, -0.0, 2.0, INF], dtype.numpy)
    b = np.array([2.0, 0.0, -1.0, 1.0, 1.0, 2.0, 0.0], dtype.numpy)
    tiny = np.finfo(dtype.numpy).smallest_subnormal
    want = [np.nextafter(t(1), t(2)), np.nextafter(t(1), t(0)), -tiny, NAN, tiny, 2.0,
            np.finfo(dtype.numpy).max]
    assert_same(reference("nextafter", a, b), np.array(want, dtype.numpy))
    assert reference("nextafter", a, b)[0] - 1 == np.finfo(dtype.numpy).eps


# -- ternary: made of the ops above ------------------------------------------------------------

def test_clamp_propagates_nan_and_takes_tensor_or_number_bounds():
    x = array([NAN, -5.0, 0.5, 5.0, -0.0], F32)
    assert_same(reference("clamp", x, 0.0, 1.0), array([NAN, 0.0, 0.5, 1.0, 0.0], F32))
    assert_same(reference("clamp", x, min=0.0), array([NAN, 0.0, 0.5, 5.0, 0.0], F32))
    assert_same(reference("clamp", x, max=1.0), array([NAN, -5.0, 0.5, 1.0, -0.0], F32))
    low = array([0.0, NAN, 1.0, 6.0, -1.0], F32)
    assert_same(reference("clamp", x, low, 2.0), array([NAN, NAN, 1.0, 2.0, -0.0], F32))
    assert_same(reference("clamp", x, 3.0, 1.0), array([NAN, 1.0, 1.0, 1.0, 1.0], F32))
    i = np.array([-9, 0, 9, 3, 4], np.int32)
    assert_same(reference("clamp", i, -2, 3), np.array([-2, 0, 3, 3, 3], np.int32))


@pytest.mark.parametrize("dtype", FLOATS)
def test_lerp_is_torch_s_two_sided_formula_rounded_once(dtype):
    start = array([1.0, -2.0, 0.5, 3.0, 1e-3, 10.0, -1.0, 2.0], dtype)
    end = array([3.0, 5.0, 0.25, -3.0, 7.0, 10.5, NAN, 1e4], dtype)
    weight = array([0.0, 0.25, 0.5, 1.0, 0.75, 2.0, 0.5, -1.0], dtype)
    s, e, w = (v.astype(np.float32) for v in (start, end, weight))
    with np.errstate(all="ignore"):
        want = np.where(w < 0.5, s + w * (e - s), e - (e - s) * (np.float32(1) - w))
    got = reference("lerp", start, end, weight)
    assert_same(got, numerics.convert(want, dtype))
    assert_same(got[[0, 3]], array([1.0, -3.0], dtype))          # exact at weight 0 and 1
    for number in (0.25, 0.75):
        with np.errstate(all="ignore"):
            w = np.float32(number)
            want = s + w * (e - s) if number < 0.5 else e - (e - s) * (np.float32(1) - w)
        assert_same(reference("lerp", start, end, number), numerics.convert(want, dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_addcmul_rounds_once(dtype):
    x = array([1.0, -2.0, 0.1, NAN, 3.0], dtype)
    t1 = array([3.0, 0.3, 7.0, 1.0, -1.5], dtype)
    t2 = array([0.1, -2.0, 0.7, 2.0, 4.0], dtype)
    a, b, c = (v.astype(np.float32) for v in (x, t1, t2))
    assert_same(reference("addcmul", x, t1, t2, value=0.5),
                numerics.convert(a + np.float32(0.5) * b * c, dtype))
    assert_same(reference("addcmul", x, t1, t2), numerics.convert(a + b * c, dtype))
    i = np.array([1, 2, 3], np.int32)
    assert_same(reference("addcmul", i, i, i, value=-2), np.array([-1, -6, -15], np.int32))


def test_threshold_keeps_nan():
    x = array([NAN, 1.0, 2.0, 3.0, -INF], F32)
    assert_same(reference("threshold", x, 2.0, -1.0), array([NAN, -1.0, -1.0, 3.0, -1.0], F32))
    i = np.array([1, 5, 2], np.int32)
    assert_same(reference("threshold", i, 2, 0), np.array([0, 5, 0], np.int32))


# -- every op, every dtype it takes: interpreter, CUDA source, DSL round trip ----------------

ALL_DTYPES = (F32, F16, BF16, F64, I32, I64, BOOL)
# The ops made of others, applied in the fusion of one dtype each
COMPOSITES = {
    F32: lambda a, b: [("clamp", ops.clamp(a, b, 1.0)),
                       ("addcmul", ops.addcmul(a, b, a, value=0.5))],
    F16: lambda a, b: [("lerp", ops.lerp(a, b, a))],
    BF16: lambda a, b: [("lerp", ops.lerp(a, b, 0.75))],
    F64: lambda a, b: [("threshold", ops.threshold(a, 0.5, -1.0))],
    I32: lambda a, b: [("truediv", ops.truediv(a, b))],
    I64: lambda a, b: [("clamp", ops.clamp(a, -3, 3))],
    BOOL: lambda a, b: [],
}


def _every_op_fusion(dtype):
    """A fusion applying every unary and binary op of fuserir.ops that takes `dtype` to
    inputs a and b of it, and some of the composite ops; returns it with [(output, op)].
    (One fusion per dtype: the suite compiles every kernel it generates with NVRTC, whose
    time grows faster than the kernel.)"""
    f = Fusion(f"every_op_{dtype}")
    a, b = f.new_input("a", dtype, ["N"]), f.new_input("b", dtype, ["N"])
    made = []
    for op, entry in op_table.FUSION_UNARY.items():
        if op_table.fusion_types(entry, dtype) is not None:
            made.append((op, ops.UNARY[op](a)))
    for op, entry in op_table.FUSION_BINARY.items():
        if op_table.fusion_types(entry, dtype) is not None:
            made.append((op, ops.BINARY[op](a, b)))
    made += COMPOSITES[dtype](a, b)
    for _, out in made:
        f.add_output(out)
    return f, [(out.name, op) for op, out in made]


def _inputs(dtype, n=48):
    rng = np.random.default_rng(7)
    floats = {"a": EDGES + [65504.0, -1e-5], "b": [1.0, 2.0, -0.0, 0.5, 3.0, -2.0, NAN, 0.0]}
    values = {}
    for v in "ab":
        if dtype is BOOL:
            x = rng.random(n) < 0.5
        elif dtype.is_int:
            x = rng.integers(-9, 40, n).astype(dtype.numpy)
            x[:4] = [np.iinfo(dtype.numpy).min, -1, 0, 2 ** 20] if v == "a" else [-1, 0, 33, -5]
        else:
            x = rng.uniform(-4, 4, n)
            x[:len(floats[v])] = floats[v]
            x = numerics.convert(x, dtype)
        values[v] = x
    return values


def _every_op_computed(dtype, backend):
    """(the ops' (output name, op) pairs, the reference's outputs, the backend's) for the
    fusion of every op on `dtype`."""
    f, made = _every_op_fusion(dtype)
    values = _inputs(dtype)
    return made, fuserir.evaluate(f, values), codegen.compile(f, backend=backend).run(values)


def test_the_fusions_use_every_op():
    used = {op for d in ALL_DTYPES for _, op in _every_op_fusion(d)[1]}
    assert used == set(ops.UNARY) | set(ops.BINARY) | set(ops.TERNARY)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_the_interpreter_equals_the_reference(dtype):
    made, want, got = _every_op_computed(dtype, "interp")
    for name, op in made:
        try:
            assert_same(np.asarray(got[name]), want[name])
        except AssertionError as differs:
            raise AssertionError(f"{op} on {dtype}: {differs}") from None


def test_the_cuda_source_compiles():
    """Each op on f16 (computed in f32), f32 and i32: kir_examples' all_ops_kernel
    compiles every kernel-IR op on every type it takes (test_cuda_codegen)."""
    source = ""
    for dtype in (F16, F32, I32):
        exe = codegen.compile(_every_op_fusion(dtype)[0], backend="cuda")     # no GPU needed
        assert all(k.cubin for k in exe.kernels)
        source += "\n".join(k.source for k in exe.kernels)
    for spelling in ("sinf(f16_to_f32(", "erfinvf(", "rintf(", "isnan(", "atan2f(",
                     "nextafterf(", "remainder_f32(", "shl_i32(", "isposinf_f32(",
                     "sign_f32(", "pow_i32(", "~a_"):
        assert spelling in source, spelling


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_the_dsl_round_trips_every_op(dtype):
    f, _ = _every_op_fusion(dtype)
    text = fuserir.print_fusion(f)
    again = fuserir.parse(text)
    assert first_difference(f, again) is None
    assert fuserir.print_fusion(again) == text
    for op, entry in op_table.FUSION_UNARY.items():
        if op_table.fusion_types(entry, dtype) is not None and op != "neg":   # -a
            assert f"{op}(a)" in text
    if dtype is I32:
        assert "cast(a, f32) / cast(b, f32)" in text          # truediv, as the ops it is


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_the_gpu_computes_every_op(dtype):
    """CUDA's math functions are within a few ulp of the exact value; the rest is exact."""
    made, want, got = _every_op_computed(dtype, "cuda")
    ulps = {F32: 2.0 ** -23, F64: 2.0 ** -52, F16: 2.0 ** -10, BF16: 2.0 ** -7}
    for name, op in made:
        g = np.asarray(got[name].get() if hasattr(got[name], "get") else got[name])
        if want[name].dtype == np.dtype(BF16.numpy):
            g = g.view(BF16.numpy)                  # CuPy has no bf16: its bits as uint16
        entry = op_table.FUSION_UNARY.get(op) or op_table.FUSION_BINARY.get(op)
        approximate = entry is None or entry.kind == "math" and not (
            op == "pow" and dtype.is_int)
        if approximate and want[name].dtype.kind != "b" and g.dtype.kind not in "iu":
            ulp = ulps[fuserir.dtypes.from_numpy(g.dtype)]
            np.testing.assert_allclose(g.astype(np.float64), want[name].astype(np.float64),
                                       rtol=16 * ulp, atol=16 * ulp, equal_nan=True,
                                       err_msg=f"{op} {dtype}")
        else:
            assert_same(g, want[name]), (op, dtype)


# -- errors ------------------------------------------------------------------------------------

def _tensors(*dtypes):
    f = Fusion("e")
    return [f.new_input(name, d, ["N"]) for name, d in zip("xyz", dtypes)]


@pytest.mark.parametrize("op, dtypes, message", [
    ("bitwise_and", (F32, F32), "bitwise_and: operands are f32; bitwise_and takes integers "
                                "or bool"),
    ("bitwise_or", (I32, F16), "bitwise_or: operands are i32 and f16; bitwise_or takes "
                               "integers or bool"),
    ("bitwise_xor", (BF16, BOOL), "bitwise_xor: operands are bf16 and bool; bitwise_xor "
                                  "takes integers or bool"),
    ("bitwise_left_shift", (BOOL, BOOL), "bitwise_left_shift: operands are bool; "
                                         "bitwise_left_shift takes integers"),
    ("bitwise_right_shift", (F64, I64), "bitwise_right_shift: operands are f64 and i64; "
                                        "bitwise_right_shift takes integers"),
    ("nextafter", (F16, F16), "nextafter: operands are f16; nextafter takes f32 or f64"),
    ("nextafter", (I32, I32), "nextafter: operands are i32; nextafter takes f32 or f64"),
    ("nextafter", (BF16, BF16), "nextafter: operands are bf16; nextafter takes f32 or f64"),
    ("fmod", (BOOL, BOOL), "fmod: operands are bool; cast them first"),
    ("remainder", (BOOL, BOOL), "remainder: operands are bool; cast them first"),
])
def test_binary_dtype_errors(op, dtypes, message):
    with pytest.raises(FusionError, match=f"^{message}$"):
        getattr(ops, op)(*_tensors(*dtypes))


@pytest.mark.parametrize("op, dtype, message", [
    ("bitwise_not", F32, "bitwise_not: operand x is f32; bitwise_not takes integers or bool"),
    ("bitwise_not", BF16, "bitwise_not: operand x is bf16; bitwise_not takes integers or "
                          "bool"),
])
def test_unary_dtype_errors(op, dtype, message):
    with pytest.raises(FusionError, match=f"^{message}$"):
        getattr(ops, op)(*_tensors(dtype))


def test_integer_remainders_by_a_literal_zero_are_refused():
    x, = _tensors(I32)
    for op in ("fmod", "remainder"):
        with pytest.raises(FusionError, match=rf"^{op}: x % 0: integer remainder of x \(i32\) "
                                              r"by the literal 0$"):
            getattr(ops, op)(x, 0)
    assert ops.fmod(_tensors(F32)[0], 0).dtype is F32           # a float fmod by 0 is NaN


def test_composite_op_errors():
    x, c, h = _tensors(I32, BOOL, F16)
    with pytest.raises(FusionError, match=r"^lerp: operand x is i32; lerp takes floats$"):
        ops.lerp(x, x, 0.5)
    with pytest.raises(FusionError, match=r"^lerp: operand x is i32; lerp takes floats$"):
        ops.lerp(h, x, h)
    with pytest.raises(FusionError, match=r"^clamp: operand y is bool; cast it first$"):
        ops.clamp(c, 0, 1)
    with pytest.raises(FusionError, match=r"^clamp: give min, max or both$"):
        ops.clamp(x)
    with pytest.raises(FusionError, match=r"^clamp: literal 0.5 cannot take the dtype i32 "
                                          r"of x$"):
        ops.clamp(x, 0.5, 2)
    with pytest.raises(FusionError, match=r"^addcmul: operands are bool; cast them first$"):
        ops.addcmul(c, c, c)
    with pytest.raises(FusionError, match=r"^truediv: needs at least one tensor operand$"):
        ops.truediv(1, 2)


def test_dsl_errors_name_the_op_and_the_dtype():
    text = "fusion f(x: f32[N], i: i32[N]) {\n  y = bitwise_and(i, x)\n  output y\n}\n"
    with pytest.raises(DslError, match=r"2:7: bitwise_and: operands are i32 and f32; "
                                       r"bitwise_and takes integers or bool"):
        fuserir.parse(text)
    text = "fusion f(x: f32[N]) {\n  y = clamp(x, min=nan, max=0.5)\n  output y\n}\n"
    assert fuserir.parse(text).outputs[0].dtype is F32
    text = "fusion f(i: i32[N]) {\n  y = clamp(i, 1.5)\n  output y\n}\n"
    with pytest.raises(DslError, match=r"2:16: clamp: literal 1.5 cannot take the dtype "
                                       r"i32 of i\n"):
        fuserir.parse(text)


# -- nvFuser's names ---------------------------------------------------------------------------

# The elementwise ops of nvFuser's Python frontend (fd.ops), by family
NVFUSER_UNARY = """abs acos acosh asin asinh atan atanh bitwise_not ceil cos cosh digamma erf
    erfc erfcinv erfinv exp exp2 expm1 floor frac isfinite isinf isnan isneginf isposinf lgamma
    log log10 log1p log2 logical_not neg reciprocal relu round rsqrt sigmoid sign signbit silu
    sin sinh sqrt tan tanh trunc""".split()
NVFUSER_BINARY = """add atan2 bitwise_and bitwise_or bitwise_xor bitwise_left_shift
    bitwise_right_shift div eq fmod ge gt le logical_and logical_or logical_xor lt maximum
    minimum mod mul ne nextafter pow remainder sub truediv""".split()
NVFUSER_TERNARY = "clamp lerp addcmul where threshold".split()
# nvFuser's name -> fuserir's, where they differ (docs/dsl.md lists them)
ALIASES = {"mod": "fmod"}        # C's remainder, the sign of the dividend
# nvFuser's names fuserir leaves out, and why
NOT_PROVIDED = {"digamma": "NVRTC has no digamma builtin (it would need a header)"}


def test_every_nvfuser_elementwise_op_is_provided_or_listed():
    missing = []
    for name in NVFUSER_UNARY + NVFUSER_BINARY + NVFUSER_TERNARY:
        if name in NOT_PROVIDED:
            assert not hasattr(ops, name) and name not in OPS, f"{name} is provided now"
            continue
        ours = ALIASES.get(name, name)
        if not (callable(getattr(ops, ours, None)) and ours in OPS):
            missing.append(name)
    assert not missing, f"neither provided nor listed in NOT_PROVIDED: {missing}"
    assert len(NOT_PROVIDED) <= 3
    assert all(name not in OPS for name in ALIASES)
