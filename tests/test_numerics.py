"""One numeric meaning (fuserir.numerics) in the reference evaluator, the interpreter, the
launch-time evaluator and the emitted CUDA: casts float -> integer, integer division and
remainder (by zero too), and reductions over no elements. Regressions:
`cast(x, i32)` of nan/inf/3e9 was INT_MIN in the evaluator but saturated in the
interpreter; `i / 0` was i in the evaluator, an error in the interpreter and `/ 0` in
CUDA; `max` over an empty axis crashed the evaluator."""

import re

import numpy as np
import pytest

import codegen
import fuserir
from codegen import nvrtc
from codegen.cuda import emit_cuda
from codegen.interp import run_kernel
from fuserir import numerics, ops
from fuserir.dtypes import DataType as D
from fuserir.errors import DslError, FusionError
from fuserir.ir.fusion import Fusion
from lowering import kir

import kir_examples as ex

FLOATS = [D.f16, D.bf16, D.f32, D.f64]
INTS = [D.i32, D.i64]


def _cast_fusion(src, dst):
    f = Fusion("cast")
    x = f.new_input("x", src, ["N"])
    y = ops.cast(x, dst)
    f.add_output(y)
    return f, y.name


def _cast_inputs(src, dst):
    """nan, +-inf, past the range both ways (as far as src reaches), -0.0, ordinary values,
    and what each must become: truncated toward zero, saturated, NaN -> 0."""
    info = np.iinfo(dst.numpy)
    values = [np.nan, np.inf, -np.inf, 3e9, -3e9, 1e19, -1e19, 2.0 ** 31, -2.0 ** 31 - 2 ** 9,
              -0.0, 0.0, 2.75, -2.75, 0.5, -0.5, 7.0, -7.0, 65504.0, 1e-40]
    with np.errstate(over="ignore"):
        xs = np.array(values, np.float64).astype(src.numpy)
    exact = xs.astype(np.float64)
    want = []
    for v in exact:
        if np.isnan(v):
            want.append(0)
        elif v >= info.max:
            want.append(int(info.max))
        elif v <= info.min:
            want.append(int(info.min))
        else:
            want.append(int(np.trunc(v)))
    return xs, np.array(want, dst.numpy)


@pytest.mark.parametrize("dst", INTS, ids=str)
@pytest.mark.parametrize("src", FLOATS, ids=str)
def test_float_to_int_casts_saturate_and_map_nan_to_zero_everywhere(src, dst):
    f, out = _cast_fusion(src, dst)
    xs, want = _cast_inputs(src, dst)
    reference = fuserir.evaluate(f, {"x": xs})[out]
    assert reference.dtype == dst.numpy and reference.tolist() == want.tolist()
    exe = codegen.compile(f, backend="interp")
    assert exe.run({"x": xs})[out].tolist() == want.tolist()
    # launch-time evaluation agrees, element by element
    for x, w in zip(xs, want):
        assert kir.evaluate_scalar(kir.Cast(kir.Const(x, src), dst)) == w
    # CUDA converts with the PTX instruction whose meaning this is (C's cast is undefined
    # past the range), through f32 for the 16-bit floats
    via = "f64" if src is D.f64 else "f32"
    source = exe.kernels[0].source
    assert f'asm("cvt.rzi.s{dst.value[1:]}.{via} %0, %1;"' in source
    assert re.search(rf"= {via}_to_{dst.value}\(", source)


def test_cast_to_int_in_cuda_compiles():
    for src in (D.f32, D.f64):
        f, _ = _cast_fusion(src, D.i64)
        kernel = codegen.compile(f, backend="interp").kernels[0]
        assert nvrtc.compile_to_cubin(kernel.source, kernel.name, arch="sm_90")[:4] == \
            b"\x7fELF"


# -- integer division and remainder -----------------------------------------------------------

def _pairs(dtype):
    low, high = int(np.iinfo(dtype.numpy).min), int(np.iinfo(dtype.numpy).max)
    pairs = [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (0, 5), (-1, 7), (7, 0), (-7, 0),
             (0, 0), (low, -1), (low, 1), (low, 0), (high, -1), (low + 1, -1), (low, low),
             (high, low)]
    a = np.array([p[0] for p in pairs], dtype.numpy)
    b = np.array([p[1] for p in pairs], dtype.numpy)
    return pairs, a, b


def _c_div(a, b):
    """The definition, by hand: C's truncation, a / 0 = 0, results wrapped."""
    if b == 0:
        return 0
    q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    return q


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_integer_division_agrees_in_the_reference_and_the_interpreter(dtype):
    pairs, a, b = _pairs(dtype)
    bits = 8 * dtype.itemsize
    want = [((_c_div(x, y) + 2 ** (bits - 1)) % 2 ** bits) - 2 ** (bits - 1) for x, y in pairs]
    f = fuserir.parse(f"fusion d(a: {dtype}[N], b: {dtype}[N]) {{\n  q = a / b\n  output q\n}}")
    assert fuserir.evaluate(f, {"a": a, "b": b})["q"].tolist() == want
    exe = codegen.compile(f, backend="interp")
    assert exe.run({"a": a, "b": b})["q"].tolist() == want
    source = exe.kernels[0].source
    assert f"= div_{dtype}(a_cache_[" in source      # a run-time divisor: the total form
    assert f"return b == 0 ? ({dtype})0 : b == -1 ?" in source
    assert f"{dtype} q = a / ((b == 0) | (b == -1) ? ({dtype})1 : b);" in source


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_remainder_agrees_in_every_evaluator(dtype):
    """Remainder exists in kernel IR (`mod`): the interpreter, launch-time evaluation and
    fuserir.numerics agree, C's sign rule with a % 0 = a and MIN % -1 = 0."""
    pairs, a, b = _pairs(dtype)
    want = [x if y == 0 else x - y * _c_div(x, y) for x, y in pairs]
    assert numerics.int_mod(a, b).tolist() == want
    assert [kir.evaluate_scalar(ex.binop("mod", ex.const(x, dtype), ex.const(y, dtype)))
            for x, y in pairs] == want
    n = len(pairs)
    ta, tb = ex.tensor("a", dtype, [ex.const(n)]), ex.tensor("b", dtype, [ex.const(n)])
    tr = ex.tensor("r", dtype, [ex.const(n)], is_output=True)
    tid = [ex.tid()]
    body = [ex.store(tr, tid, ex.binop("mod", ex.load(ta, tid), ex.load(tb, tid)))]
    k = ex.finish(kir.Kernel("rem", [ta, tb, tr], [], body,
                             ex.launch([ex.const(1)], [ex.const(n)])))
    r = np.zeros(n, dtype.numpy)
    run_kernel(k, {"a": a, "b": b, "r": r})
    assert r.tolist() == want
    source = emit_cuda(k)
    assert f"= mod_{dtype}(a[" in source and "return b == 0 ? a : r;" in source
    # the division itself is unconditional, by a divisor that is never 0 or -1 (so the
    # compiler may hoist and share it)
    assert f"{dtype} r = a % ((b == 0) | (b == -1) ? ({dtype})1 : b);" in source
    assert nvrtc.compile_to_cubin(source, k.name, arch="sm_90")[:4] == b"\x7fELF"


def test_division_by_a_constant_stays_cs_operator():
    f = fuserir.parse("fusion d(a: i32[N]) {\n  q = a / 3\n  r = a / -1\n  output q\n"
                      "  output r\n}")
    a = np.array([7, -7, -2 ** 31, 2 ** 31 - 1], np.int32)
    exe = codegen.compile(f, backend="interp")
    got = exe.run({"a": a})
    assert got["q"].tolist() == [2, -2, -715827882, 715827882]
    assert got["r"].tolist() == [-7, 7, -2 ** 31, -2 ** 31 + 1]       # MIN / -1 wraps
    source = exe.kernels[0].source
    assert re.search(r"= a_\[[^;]*\] / 3;", source)       # index-style: C's operator
    assert re.search(r"= div_i32\(a_\[[^;]*\], -1\);", source)        # -1: the total form


def test_a_literal_zero_divisor_is_a_located_error():
    with pytest.raises(DslError) as error:
        fuserir.parse("fusion d(a: i32[N]) {\n  q = (a + 1) / 0\n  output q\n}")
    assert error.value.line == 2 and error.value.column == 15
    assert "integer division of t1 (i32) by the literal 0" in str(error.value)
    f = Fusion("d")
    a = f.new_input("a", D.i64, ["N"])
    with pytest.raises(FusionError, match=r"^div: a / 0: integer division of a \(i64\) by "
                                          r"the literal 0$"):
        ops.div(a, 0)
    assert ops.div(f.new_input("x", D.f32, ["N"]), 0).dtype is D.f32   # IEEE: inf, nan


# -- reductions over no elements ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", [D.f32, D.f16, D.bf16, D.f64, D.i32, D.i64], ids=str)
@pytest.mark.parametrize("op", ["sum", "max"])
def test_a_reduction_over_no_elements_gives_its_identity(op, dtype):
    f = fuserir.parse(f"fusion e(x: {dtype}[M, K]) {{\n  s = {op}(x, axes=[1])\n  output s\n}}")
    x = np.zeros((3, 0), dtype.numpy)
    want = numerics.identity(op, dtype)
    assert want == (0 if op == "sum" else
                    -np.inf if dtype.is_float else np.iinfo(dtype.numpy).min)
    reference = fuserir.evaluate(f, {"x": x})["s"]
    assert reference.dtype == dtype.numpy
    assert reference.astype(np.float64).tolist() == [float(want)] * 3
    exe = codegen.compile(f, backend="interp")
    got = exe.run({"x": x})["s"]
    assert got.astype(np.float64).tolist() == [float(want)] * 3
    # CUDA starts the accumulator (f32 for 16-bit floats) at the same identity
    literal = {("max", D.f64): "__longlong_as_double(0xfff0000000000000LL)",
               ("max", D.i32): "-2147483647 - 1",               # INT_MIN
               ("max", D.i64): "-9223372036854775807LL - 1LL",
               ("sum", D.f64): "0.0", ("sum", D.i32): "0", ("sum", D.i64): "0LL"}.get(
        (op, dtype), "__int_as_float(0xff800000)" if op == "max" else "0.0f")
    (step,) = exe.plan_for({"M": 3, "K": 0})[2]
    assert re.search(rf"s_acc\[0\] = {re.escape(literal)};", step.kernel.source)


GRID = """
fusion g(x: f32[M, K]) {
  s = OP(x, axes=[1])
  output s
}
schedule g {
  s.split(1, S, inner=false)
  s.split(0, 32)
  s.parallelize(0, BIDx)
  s.parallelize(1, TIDx)
  s.parallelize(2, BIDz)
  s.serial_grid_reduction()
}
"""


@pytest.mark.parametrize("op", ["sum", "max"])
def test_a_serial_grid_reduction_combines_partials_with_its_own_op(op):
    # the turnstile added the splits' partial maxima; with more splits than K elements,
    # some splits reduce nothing and contribute the identity
    f = fuserir.parse(GRID.replace("OP", op))
    exe = codegen.compile(f, backend="interp")
    x = (np.random.default_rng(1).standard_normal((45, 7)) * 8).round().astype(np.float32)
    for splits in (1, 3, 9):
        got = exe.run({"x": x, "S": splits})["s"]
        assert np.array_equal(got, fuserir.evaluate(f, {"x": x, "S": splits})["s"])
    empty = np.zeros((45, 0), np.float32)
    want = 0.0 if op == "sum" else -np.inf
    assert exe.run({"x": empty, "S": 2})["s"].tolist() == [want] * 45
    assert fuserir.evaluate(f, {"x": empty, "S": 2})["s"].tolist() == [want] * 45


def test_a_matmul_over_no_k_is_zero_in_the_reference():
    f = fuserir.parse("fusion m(A: f16[M, K], B: f16[K, N]) {\n  c = matmul(A, B)\n"
                      "  output c\n}")
    out = fuserir.evaluate(f, {"A": np.zeros((2, 0), np.float16),
                               "B": np.zeros((0, 3), np.float16)})["c"]
    assert out.dtype == np.float32 and out.tolist() == [[0.0] * 3] * 2
