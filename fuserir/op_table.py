"""The op table: what every elementwise operation means, written once.

Each entry gives one operation everything the compiler needs of it:

    name        its kernel-IR name (kir.UnOp / kir.BinOp.op)
    kind        which operands it takes and what it computes in (below)
    fusion      its name as a fusion op (the DSL, fuserir.ops, the builder), or None
                where it exists only in kernel IR (index arithmetic, gelu_tanh)
    meaning     a numpy function on arrays: the reference evaluator (fuserir.reference),
                the interpreter (codegen.interp), launch-time evaluation (lowering.kir)
                and the bank-conflict report (lowering.verify.bank_conflicts) all call it
    cuda        how codegen.cuda spells it: a C operator, the builtin NVRTC provides
                without headers per float type, or the body of a preamble function per
                type (of x, or of a and b)

Kinds. A fusion op's operands are promoted to one type, then converted to the type its
kind computes in (fusion_types; the builders refuse the types a kind does not take, and
TAKES says what it takes):

    math       float math (exp, sin, atan2, pow, ...): a float result; integer and bool
               operands are converted to f32 first, except where the op has an integer
               meaning of its own (pow)
    exact      neg, abs, relu: in the operand type, not bool
    arith      + - * / fmod remainder min max: in the operand type, not bool
    compare    a bool result, of operands of any type
    predicate  isnan, isinf, signbit, ...: a bool result of a float (integers and bool as
               f32, which holds every value's class and sign)
    logical    not, and, or, logical_xor: bool operands (a fusion op's are != 0 first) and a
               bool result; and/or short-circuit, as C's && and ||
    bitwise    ~ & | ^: integers or bool, in their type (on bool they are logical)
    integer    shifts and ceildiv: integers only
    float      nextafter: f32 or f64 only, in that type (a step is one of the type's own;
               f16/bf16 have no arithmetic of their own to step in)
    state      welford_mean, welford_m2 (an f32 of a welford state) and welford_merge
               (two states: a state), as fuserir.numerics defines them; no other kind
               takes a state

Computing types, the same in every evaluator: a `math` op (or a predicate) computes in
float64 and is rounded once to its result type; `exact` and `arith` ops compute in their
operand type, f16/bf16 in f32 (rounded once; exact for + - * / and fmod, so that f16
results are correctly rounded). Integer ops follow C in their type, with the results C
leaves undefined defined by fuserir.numerics (a / 0 = 0, a % 0 = a, MIN / -1 = MIN) and
here (shifts by a negative amount or by the width or more, integer pow to a negative
power, both as torch computes them): `integer` below is that meaning, on arrays of the
op's integer type (numpy wraps as C does). min, max and relu are what the CUDA preamble
computes: `(a < b || a != a) ? a : b` (NaN propagates; of two equal values the second),
`x < 0 ? 0 : x` (NaN and -0 kept).

Adding an elementwise op is one entry here (and its tests; a binary op also has its
one-line builder in fuserir.ops): the DSL, fuserir.ops, lowering, the reference, the
interpreter and the CUDA emitter read this table. It sits
in the front-end core because the reference evaluator and the op builders need it, and
lowering and codegen below nothing of theirs.
"""

import math
import re
from dataclasses import dataclass

import numpy as np

from . import numerics
from .dtypes import DataType


def _as_f64(x):
    return np.asarray(x, dtype=np.float64)


def _elementwise(scalar_function):
    """A float64 array function from a function of one Python float."""
    vectorized = np.frompyfunc(scalar_function, 1, 1)
    return lambda x: _as_f64(vectorized(x))


def _array_result(r):
    r = np.asarray(r)
    return r[()] if r.ndim == 0 else r


def _pick(cond, a, b):
    return _array_result(np.where(cond, a, b))


# -- meanings that numpy does not have as one function -------------------------------------

def _gelu(x):
    # 1 + erf(x / sqrt 2) = erfc(-x / sqrt 2), without cancellation for x << 0
    return 0.5 * x * _erfc(-x / math.sqrt(2.0))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _min(a, b):
    return _pick((a < b) | (a != a), a, b)


def _max(a, b):
    return _pick((a > b) | (a != a), a, b)


def _relu(x):
    x = np.asarray(x)
    return _pick(x < 0, x.dtype.type(0), x)


def _lgamma(x):
    try:
        return math.lgamma(x)
    except (ValueError, OverflowError):     # the poles (0, negative integers); huge x
        return math.inf


def _halley(residual, slope_sign, x, iterations=6):
    """x refined towards the root of `residual`, erf(x) - y (slope_sign +1) or erfc(x) - c
    (-1): its slope is slope_sign * 2 / sqrt(pi) * exp(-x^2) and its second derivative -2x
    times that, which makes Halley's step r / (slope + x r)."""
    for _ in range(iterations):
        r = residual(x)
        x -= r / (slope_sign * 2.0 / math.sqrt(math.pi) * math.exp(-x * x) + x * r)
    return x


def _erf_root(y):
    """x with erf(x) = y, for |y| <= 1/2 (from erf's first term)."""
    return _halley(lambda x: math.erf(x) - y, 1.0, y * math.sqrt(math.pi) / 2.0)


def _erfc_root(c):
    """x >= 0 with erfc(x) = c, for 0 < c < 1/2 (from erfc(x) ~ exp(-x^2) / (x sqrt pi))."""
    tail = -math.log(c)
    start = math.sqrt(max(tail - 0.5 * math.log(math.pi * tail), 0.25))
    return _halley(lambda x: math.erfc(x) - c, -1.0, start)


def _erfinv(y):
    if not -1.0 < y < 1.0:
        return math.copysign(math.inf, y) if abs(y) == 1.0 else math.nan
    if abs(y) <= 0.5:
        return _erf_root(y)
    return math.copysign(_erfc_root(1.0 - abs(y)), y)      # 1 - |y| is exact


def _erfcinv(c):
    if c < 0.5:
        return _erfc_root(c) if c > 0.0 else (math.inf if c == 0.0 else math.nan)
    return _erfinv(1.0 - c)                                  # exact for 1/2 <= c <= 2


_erf = _elementwise(math.erf)
_erfc = _elementwise(math.erfc)


def _toward_divisor(r, b):
    """A C remainder r of a / b moved to b's sign (Python's and torch's remainder)."""
    return _pick((r != 0) & ((r < 0) != (b < 0)), r + b, r)


def _shift_left(a, b):
    """a << b on integers: the bits shifted out are lost; 0 where b < 0 or b >= the width."""
    a, b = np.asarray(a), np.asarray(b)
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    inside = (b >= 0) & (b < 8 * a.dtype.itemsize)
    amount = np.where(inside, b, 0).astype(unsigned)
    return _pick(inside, np.left_shift(a.astype(unsigned), amount).astype(a.dtype),
                 a.dtype.type(0))


def _shift_right(a, b):
    """a >> b on integers, arithmetic: by width - 1 (0 or -1) where b < 0 or b >= that."""
    a, b = np.asarray(a), np.asarray(b)
    top = 8 * a.dtype.itemsize - 1
    return _array_result(np.right_shift(a, np.where((b < 0) | (b > top), top, b)
                                        .astype(a.dtype)))


def _int_pow(a, b):
    """a ** b on integers, wrapping; for b < 0: 1 ** b = 1, (-1) ** b = +-1, else 0."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    result, base, exponent = np.ones_like(a), a.copy(), np.maximum(b, 0)
    with np.errstate(over="ignore"):
        while exponent.any():
            result = np.where((exponent & 1) == 1, result * base, result)
            base = base * base
            exponent = exponent >> 1
    negative = np.where(a == 1, 1, np.where(a == -1, 1 - 2 * (b & 1), 0)).astype(a.dtype)
    return _pick(b < 0, negative, result)


def _int_bodies(template):
    """A preamble body per integer type: `template` with {t} the type, {u} its unsigned
    type and {top} its width - 1."""
    return {t: template.format(t=t, u=u, top=top)
            for t, u, top in (("i32", "unsigned int", 31), ("i64", "unsigned long long", 63))}


@dataclass(frozen=True)
class UnaryOp:
    """One unary op of kind "math", "exact", "predicate", "logical" or "bitwise" (the
    module docstring). `builtin`: the (f32, f64) functions NVRTC provides; `preamble`:
    else the C expression of a preamble function of x per float type ({"f32": ...,
    "f64": ...}), with an optional comment line above it. The emitter spells the exact
    ops, `not` and `bitnot` itself."""

    name: str
    meaning: object
    kind: str = "math"
    fusion: str = None
    builtin: tuple = None
    preamble: dict = None
    comment: str = None


@dataclass(frozen=True)
class BinaryOp:
    """One binary op (kinds: the module docstring). `meaning`: on float (or bool) arrays,
    None where integers only; `integer`: on arrays of the op's integer type, None where
    floats only. `infix`: the C operator; else `builtin`, the (f32, f64) functions NVRTC
    provides, and `preamble`, the body of a preamble function of a and b per type (an
    expression, or statements ending in a return), where the emitter spells it neither
    way itself (min_/max_, and div_/mod_ for integer division by a divisor that may be 0
    or -1)."""

    name: str
    kind: str
    meaning: object = None
    integer: object = None
    infix: str = None
    fusion: str = None
    builtin: tuple = None
    preamble: dict = None


UNARY = {op.name: op for op in (
    UnaryOp("neg", np.negative, "exact", fusion="neg"),
    UnaryOp("abs", np.abs, "exact", fusion="abs", builtin=("fabsf", "fabs")),
    UnaryOp("not", np.logical_not, "logical", fusion="logical_not"),
    UnaryOp("bitnot", np.invert, "bitwise", fusion="bitwise_not"),
    UnaryOp("exp", np.exp, fusion="exp", builtin=("expf", "exp")),
    UnaryOp("exp2", np.exp2, fusion="exp2", builtin=("exp2f", "exp2")),
    UnaryOp("expm1", np.expm1, fusion="expm1", builtin=("expm1f", "expm1")),
    UnaryOp("log", np.log, fusion="log", builtin=("logf", "log")),
    UnaryOp("log2", np.log2, fusion="log2", builtin=("log2f", "log2")),
    UnaryOp("log10", np.log10, fusion="log10", builtin=("log10f", "log10")),
    UnaryOp("log1p", np.log1p, fusion="log1p", builtin=("log1pf", "log1p")),
    UnaryOp("sqrt", np.sqrt, fusion="sqrt", builtin=("sqrtf", "sqrt")),
    UnaryOp("rsqrt", lambda x: 1.0 / np.sqrt(x), fusion="rsqrt", builtin=("rsqrtf", "rsqrt")),
    UnaryOp("reciprocal", lambda x: 1.0 / x, fusion="reciprocal",
            preamble={"f32": "1.0f / x", "f64": "1.0 / x"}),
    UnaryOp("sin", np.sin, fusion="sin", builtin=("sinf", "sin")),
    UnaryOp("cos", np.cos, fusion="cos", builtin=("cosf", "cos")),
    UnaryOp("tan", np.tan, fusion="tan", builtin=("tanf", "tan")),
    UnaryOp("asin", np.arcsin, fusion="asin", builtin=("asinf", "asin")),
    UnaryOp("acos", np.arccos, fusion="acos", builtin=("acosf", "acos")),
    UnaryOp("atan", np.arctan, fusion="atan", builtin=("atanf", "atan")),
    UnaryOp("sinh", np.sinh, fusion="sinh", builtin=("sinhf", "sinh")),
    UnaryOp("cosh", np.cosh, fusion="cosh", builtin=("coshf", "cosh")),
    UnaryOp("tanh", np.tanh, fusion="tanh", builtin=("tanhf", "tanh")),
    UnaryOp("asinh", np.arcsinh, fusion="asinh", builtin=("asinhf", "asinh")),
    UnaryOp("acosh", np.arccosh, fusion="acosh", builtin=("acoshf", "acosh")),
    UnaryOp("atanh", np.arctanh, fusion="atanh", builtin=("atanhf", "atanh")),
    UnaryOp("erf", _erf, fusion="erf", builtin=("erff", "erf")),
    UnaryOp("erfc", _erfc, fusion="erfc", builtin=("erfcf", "erfc")),
    UnaryOp("erfinv", _elementwise(_erfinv), fusion="erfinv", builtin=("erfinvf", "erfinv")),
    UnaryOp("erfcinv", _elementwise(_erfcinv), fusion="erfcinv",
            builtin=("erfcinvf", "erfcinv")),
    UnaryOp("lgamma", _elementwise(_lgamma), fusion="lgamma", builtin=("lgammaf", "lgamma")),
    UnaryOp("ceil", np.ceil, fusion="ceil", builtin=("ceilf", "ceil")),
    UnaryOp("floor", np.floor, fusion="floor", builtin=("floorf", "floor")),
    # half to even, as torch.round
    UnaryOp("round", np.rint, fusion="round", builtin=("rintf", "rint")),
    UnaryOp("trunc", np.trunc, fusion="trunc", builtin=("truncf", "trunc")),
    UnaryOp("frac", lambda x: x - np.trunc(x), fusion="frac",
            preamble={"f32": "x - truncf(x)", "f64": "x - trunc(x)"}),
    UnaryOp("sign", np.sign, fusion="sign",
            preamble={"f32": "x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x != x ? x : 0.0f",
                      "f64": "x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : x != x ? x : 0.0"},
            comment="sign: -1, +1, 0 for either zero, NaN kept"),
    UnaryOp("sigmoid", lambda x: 1.0 / (1.0 + np.exp(-x)), fusion="sigmoid",
            preamble={"f32": "1.0f / (1.0f + expf(-x))", "f64": "1.0 / (1.0 + exp(-x))"}),
    UnaryOp("silu", lambda x: x / (1.0 + np.exp(-x)), fusion="silu",
            preamble={"f32": "x / (1.0f + expf(-x))", "f64": "x / (1.0 + exp(-x))"},
            comment="silu: x sigmoid(x)"),
    UnaryOp("relu", _relu, "exact", fusion="relu"),
    UnaryOp("gelu", _gelu, fusion="gelu",
            preamble={"f32": "0.5f * x * (1.0f + erff(x * 0.70710678118654752f))",
                      "f64": "0.5 * x * (1.0 + erf(x * 0.70710678118654752))"},
            comment="gelu, erf form: 0.5 x (1 + erf(x / sqrt(2)))"),
    UnaryOp("gelu_tanh", _gelu_tanh,
            preamble={"f32": "0.5f * x * (1.0f + tanhf(0.79788456080286536f * "
                             "(x + 0.044715f * x * x * x)))",
                      "f64": "0.5 * x * (1.0 + tanh(0.79788456080286536 * "
                             "(x + 0.044715 * x * x * x)))"},
            comment="gelu, tanh form: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))"),
    UnaryOp("isfinite", np.isfinite, "predicate", fusion="isfinite",
            builtin=("isfinite", "isfinite")),
    UnaryOp("isinf", np.isinf, "predicate", fusion="isinf", builtin=("isinf", "isinf")),
    UnaryOp("isnan", np.isnan, "predicate", fusion="isnan", builtin=("isnan", "isnan")),
    UnaryOp("isneginf", np.isneginf, "predicate", fusion="isneginf",
            preamble={"f32": "isinf(x) && x < 0.0f", "f64": "isinf(x) && x < 0.0"}),
    UnaryOp("isposinf", np.isposinf, "predicate", fusion="isposinf",
            preamble={"f32": "isinf(x) && x > 0.0f", "f64": "isinf(x) && x > 0.0"}),
    UnaryOp("signbit", np.signbit, "predicate", fusion="signbit",
            builtin=("signbit", "signbit")),
    UnaryOp("welford_mean", numerics.welford_mean, "state", fusion="welford_mean"),
    UnaryOp("welford_m2", lambda s: np.asarray(s, DataType.welford.numpy)["m2"][()], "state",
            fusion="welford_m2"),
)}

BINARY = {op.name: op for op in (
    BinaryOp("add", "arith", np.add, np.add, "+", fusion="add"),
    BinaryOp("sub", "arith", np.subtract, np.subtract, "-", fusion="sub"),
    BinaryOp("mul", "arith", np.multiply, np.multiply, "*", fusion="mul"),
    BinaryOp("div", "arith", np.true_divide, numerics.int_div, "/", fusion="div"),
    # C's remainder: the sign of the dividend
    BinaryOp("mod", "arith", np.fmod, numerics.int_mod, "%", fusion="fmod",
             builtin=("fmodf", "fmod")),
    # Python's: the sign of the divisor
    BinaryOp("remainder", "arith", lambda a, b: _toward_divisor(np.fmod(a, b), b),
             lambda a, b: _toward_divisor(numerics.int_mod(a, b), b), fusion="remainder",
             preamble={"f32": "f32 r = fmodf(a, b);\n"
                              "return r != 0.0f && (r < 0.0f) != (b < 0.0f) ? r + b : r;",
                       "f64": "f64 r = fmod(a, b);\n"
                              "return r != 0.0 && (r < 0.0) != (b < 0.0) ? r + b : r;",
                       **_int_bodies("{t} r = mod_{t}(a, b);\n"
                                     "return r != 0 && (r < 0) != (b < 0) ? r + b : r;")}),
    BinaryOp("ceildiv", "integer", None,
             lambda a, b: numerics.int_div(a + b - b.dtype.type(1), b)),
    BinaryOp("min", "arith", _min, _min, fusion="minimum"),
    BinaryOp("max", "arith", _max, _max, fusion="maximum"),
    BinaryOp("atan2", "math", np.arctan2, fusion="atan2", builtin=("atan2f", "atan2")),
    BinaryOp("pow", "math", np.power, _int_pow, fusion="pow", builtin=("powf", "pow"),
             preamble=_int_bodies(
                 "if (b < 0) return a == 1 ? 1 : a == -1 ? 1 - 2 * (b & 1) : 0;\n"
                 "{u} r = 1, x = ({u})a;\n"
                 "for (; b != 0; b >>= 1) {{ if (b & 1) r *= x; x *= x; }}\n"
                 "return ({t})r;")),
    BinaryOp("nextafter", "float", np.nextafter, fusion="nextafter",
             builtin=("nextafterf", "nextafter")),
    BinaryOp("lt", "compare", np.less, np.less, "<", fusion="lt"),
    BinaryOp("le", "compare", np.less_equal, np.less_equal, "<=", fusion="le"),
    BinaryOp("gt", "compare", np.greater, np.greater, ">", fusion="gt"),
    BinaryOp("ge", "compare", np.greater_equal, np.greater_equal, ">=", fusion="ge"),
    BinaryOp("eq", "compare", np.equal, np.equal, "==", fusion="eq"),
    BinaryOp("ne", "compare", np.not_equal, np.not_equal, "!=", fusion="ne"),
    BinaryOp("and", "logical", np.logical_and, None, "&&", fusion="logical_and"),
    BinaryOp("or", "logical", np.logical_or, None, "||", fusion="logical_or"),
    BinaryOp("logical_xor", "logical", np.logical_xor, None, "!=", fusion="logical_xor"),
    BinaryOp("bitand", "bitwise", np.bitwise_and, np.bitwise_and, "&", fusion="bitwise_and"),
    BinaryOp("bitor", "bitwise", np.bitwise_or, np.bitwise_or, "|", fusion="bitwise_or"),
    BinaryOp("xor", "bitwise", np.bitwise_xor, np.bitwise_xor, "^", fusion="bitwise_xor"),
    BinaryOp("shl", "integer", None, _shift_left, fusion="bitwise_left_shift",
             preamble=_int_bodies("(b < 0) | (b > {top}) ? 0 : ({t})(({u})a << b)")),
    BinaryOp("shr", "integer", None, _shift_right, fusion="bitwise_right_shift",
             preamble=_int_bodies("a >> ((b < 0) | (b > {top}) ? {top} : b)")),
    # a reduction's combine only (the welford_merge reduction's; fuserir.numerics)
    BinaryOp("welford_merge", "state", numerics.welford_merge),
)}

COMPARISONS = tuple(n for n, op in BINARY.items() if op.kind == "compare")

# The fusion-level names (DSL, fuserir.ops) and the kernel-IR op each lowers to
FUSION_UNARY = {op.fusion: op for op in UNARY.values() if op.fusion}
FUSION_BINARY = {op.fusion: op for op in BINARY.values() if op.fusion}

# What the operands of a fusion op of each kind may be, where a kind refuses more than
# bool (exact and arith ops refuse bool only: "cast it first")
TAKES = {"bitwise": "integers or bool", "integer": "integers", "float": "f32 or f64",
         "state": "a welford state"}


def fusion_types(entry, dtype):
    """(operand type, result type) of the fusion op `entry` on operands promoted to
    `dtype`: its operands are converted to the first, and it computes the second (in
    `.compute` of the first, where that is f16 or bf16). None where the op does not take
    `dtype` (see TAKES)."""
    kind = entry.kind
    if (kind == "state") != dtype.is_state:
        return None
    if kind == "state":
        operand = dtype
    elif kind in ("math", "predicate"):
        keeps_integers = dtype.is_int and getattr(entry, "integer", None) is not None
        operand = dtype if dtype.is_float or keeps_integers else DataType.f32
    elif kind == "logical":
        operand = DataType.bool
    elif kind == "bitwise":
        operand = None if dtype.is_float else dtype
    elif kind == "integer":
        operand = dtype if dtype.is_int else None
    elif kind == "float":
        operand = dtype if dtype in (DataType.f32, DataType.f64) else None
    elif kind == "compare":
        operand = dtype
    else:                                   # exact, arith
        operand = None if dtype is DataType.bool else dtype
    if operand is None:
        return None
    return operand, result_type(entry, operand)


def result_type(entry, dtype):
    """The type `entry` gives on operands of `dtype` (as converted: fusion_types)."""
    if entry.kind == "state":
        return DataType.f32 if isinstance(entry, UnaryOp) else DataType.welford
    return DataType.bool if entry.kind in ("compare", "logical", "predicate") else dtype


def kernel_unary(fusion_op, approximate="none"):
    """The kernel-IR op a fusion's unary op lowers to (gelu's tanh form is gelu_tanh)."""
    if fusion_op == "gelu" and approximate == "tanh":
        return "gelu_tanh"
    return FUSION_UNARY[fusion_op].name


def math_unary(name, x):
    """A math op's or predicate's float64 meaning (the caller rounds a math op's result
    to its type once)."""
    with np.errstate(all="ignore"):
        return UNARY[name].meaning(_as_f64(x))


def math_binary(name, a, b):
    """A binary math op's float64 meaning (the caller rounds it to the result type once)."""
    with np.errstate(all="ignore"):
        return BINARY[name].meaning(_as_f64(a), _as_f64(b))


def c_names():
    """Every C function name the table's CUDA spellings use (reserved for the emitter):
    the builtins, those the preamble bodies call, and those the emitter calls besides
    (abs and llabs for integers, min and max)."""
    ops = (*UNARY.values(), *BINARY.values())
    names = {n for op in ops if op.builtin for n in op.builtin}
    for op in ops:
        for body in (op.preamble or {}).values():
            names.update(re.findall(r"(\w+)\(", body))
    return names | {"abs", "llabs", "min", "max"}
