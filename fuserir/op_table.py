"""The op table: what every elementwise operation means, written once.

Each entry gives one operation everything the compiler needs of it:

    name        its kernel-IR name (kir.UnOp / kir.BinOp.op)
    fusion      its name as a fusion op (the DSL, fuserir.ops, the builder), or None
                where it exists only in kernel IR (index arithmetic, `not`, gelu_tanh)
    meaning     a numpy function on arrays: the reference evaluator (fuserir.reference),
                the interpreter (codegen.interp), launch-time evaluation (lowering.kir)
                and the bank-conflict report (lowering.verify.bank_conflicts) all call it
    cuda        how codegen.cuda spells it: a C operator, the builtin NVRTC provides
                without headers per float type, or the body of a preamble function

Computing types, the same in every evaluator: a `math` op (exp, tanh, gelu, erf, ...)
computes in float64 and is rounded once to its result type; an `exact` op (neg, abs,
relu, min, max, + - * /) computes in its operand type, f16/bf16 in f32 (rounded once;
exact for + - * /). Integer ops follow C in their type, with the results C leaves
undefined defined by fuserir.numerics (a / 0 = 0, a % 0 = a, MIN / -1 = MIN): `integer`
below is that meaning, on arrays of the op's integer type (numpy wraps as C does).
min, max and relu are what the CUDA preamble computes: `(a < b || a != a) ? a : b`
(NaN propagates; of two equal values the second), `x < 0 ? 0 : x` (NaN and -0 kept).

Adding an elementwise op is one entry here (and its tests): the DSL, fuserir.ops,
lowering, the reference, the interpreter and the CUDA emitter read this table. It sits
in the front-end core because the reference evaluator and the op builders need it, and
lowering and codegen below nothing of theirs.
"""

import math
from dataclasses import dataclass

import numpy as np

from . import numerics

_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)


def _as_f64(x):
    return np.asarray(x, dtype=np.float64)


def _gelu(x):
    # 1 + erf(x / sqrt 2) = erfc(-x / sqrt 2), without cancellation for x << 0
    return 0.5 * x * _as_f64(_erfc(-x / math.sqrt(2.0)))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _pick(cond, a, b):
    r = np.where(cond, a, b)
    return r[()] if r.ndim == 0 else r


def _min(a, b):
    return _pick((a < b) | (a != a), a, b)


def _max(a, b):
    return _pick((a > b) | (a != a), a, b)


def _relu(x):
    x = np.asarray(x)
    return _pick(x < 0, x.dtype.type(0), x)


@dataclass(frozen=True)
class UnaryOp:
    """One unary op. `kind`: "math" (float64 then rounded; a float result, an integer
    operand of a fusion op is cast to f32 first), "exact" (in the operand type) or
    "logical" (bool). `builtin`: the (f32, f64) math functions NVRTC provides; `preamble`:
    else the C expression of a preamble function of x per float type ({"f32": ..., "f64":
    ...}), with an optional comment line above it."""

    name: str
    meaning: object
    kind: str = "math"
    fusion: str = None
    builtin: tuple = None
    preamble: dict = None
    comment: str = None


@dataclass(frozen=True)
class BinaryOp:
    """One binary op. `kind`: "arith" (a result of the operand type), "compare" (bool),
    "logical" (bool operands, C short-circuit), "integer" (integer operands only).
    `meaning`: on float (or bool) arrays, None where integers only; `integer`: on arrays
    of the op's integer type, None where floats only. `infix`: the C operator, None where a
    preamble function spells it (min_/max_, and div_/mod_ for integer division by a
    divisor that may be 0 or -1)."""

    name: str
    kind: str
    meaning: object = None
    integer: object = None
    infix: str = None
    fusion: str = None


UNARY = {op.name: op for op in (
    UnaryOp("neg", np.negative, "exact", fusion="neg"),
    UnaryOp("abs", np.abs, "exact", fusion="abs", builtin=("fabsf", "fabs")),
    UnaryOp("not", np.logical_not, "logical"),
    UnaryOp("exp", np.exp, fusion="exp", builtin=("expf", "exp")),
    UnaryOp("log", np.log, fusion="log", builtin=("logf", "log")),
    UnaryOp("sqrt", np.sqrt, fusion="sqrt", builtin=("sqrtf", "sqrt")),
    UnaryOp("rsqrt", lambda x: 1.0 / np.sqrt(x), fusion="rsqrt", builtin=("rsqrtf", "rsqrt")),
    UnaryOp("tanh", np.tanh, fusion="tanh", builtin=("tanhf", "tanh")),
    UnaryOp("erf", lambda x: _as_f64(_erf(x)), fusion="erf", builtin=("erff", "erf")),
    UnaryOp("sigmoid", lambda x: 1.0 / (1.0 + np.exp(-x)), fusion="sigmoid",
            preamble={"f32": "1.0f / (1.0f + expf(-x))", "f64": "1.0 / (1.0 + exp(-x))"}),
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
)}

BINARY = {op.name: op for op in (
    BinaryOp("add", "arith", np.add, np.add, "+", fusion="add"),
    BinaryOp("sub", "arith", np.subtract, np.subtract, "-", fusion="sub"),
    BinaryOp("mul", "arith", np.multiply, np.multiply, "*", fusion="mul"),
    BinaryOp("div", "arith", np.true_divide, numerics.int_div, "/", fusion="div"),
    BinaryOp("mod", "arith", np.fmod, numerics.int_mod, "%"),
    BinaryOp("ceildiv", "integer", None,
             lambda a, b: numerics.int_div(a + b - b.dtype.type(1), b)),
    BinaryOp("min", "arith", _min, _min, fusion="minimum"),
    BinaryOp("max", "arith", _max, _max, fusion="maximum"),
    BinaryOp("lt", "compare", np.less, np.less, "<", fusion="lt"),
    BinaryOp("le", "compare", np.less_equal, np.less_equal, "<=", fusion="le"),
    BinaryOp("gt", "compare", np.greater, np.greater, ">", fusion="gt"),
    BinaryOp("ge", "compare", np.greater_equal, np.greater_equal, ">=", fusion="ge"),
    BinaryOp("eq", "compare", np.equal, np.equal, "==", fusion="eq"),
    BinaryOp("ne", "compare", np.not_equal, np.not_equal, "!=", fusion="ne"),
    BinaryOp("and", "logical", np.logical_and, None, "&&"),
    BinaryOp("or", "logical", np.logical_or, None, "||"),
    BinaryOp("xor", "integer", None, np.bitwise_xor, "^"),
)}

COMPARISONS = tuple(n for n, op in BINARY.items() if op.kind == "compare")

# The fusion-level names (DSL, fuserir.ops) and the kernel-IR op each lowers to
FUSION_UNARY = {op.fusion: op for op in UNARY.values() if op.fusion}
FUSION_BINARY = {op.fusion: op for op in BINARY.values() if op.fusion}
FUSION_FLOAT_UNARY = tuple(n for n, op in FUSION_UNARY.items() if op.kind == "math")
FUSION_COMPARE = tuple(n for n, op in FUSION_BINARY.items() if op.kind == "compare")
FUSION_ARITH = tuple(n for n, op in FUSION_BINARY.items() if op.kind == "arith")


def kernel_unary(fusion_op, approximate="none"):
    """The kernel-IR op a fusion's unary op lowers to (gelu's tanh form is gelu_tanh)."""
    if fusion_op == "gelu" and approximate == "tanh":
        return "gelu_tanh"
    return FUSION_UNARY[fusion_op].name


def math_unary(name, x):
    """A math op's float64 meaning (the caller rounds it to the result type once)."""
    with np.errstate(all="ignore"):
        return UNARY[name].meaning(_as_f64(x))


def c_names():
    """Every C function name the table's CUDA spellings use (reserved for the emitter):
    the builtins, and those the emitter and the preamble functions call besides (erf in
    gelu, fmod for a float %, abs and llabs for integers, min and max)."""
    names = {n for op in UNARY.values() if op.builtin for n in op.builtin}
    return names | {"erf", "erff", "fmod", "fmodf", "abs", "llabs", "min", "max"}
