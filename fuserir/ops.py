"""Builders for every fusion operation.

Each builder checks its operands (types, ranks, extents), computes the result's dtype and
root domain, and registers the expression in the operands' fusion. Python numbers are
literals: a literal takes the dtype of the tensor operand beside it, and one that the dtype
cannot hold (2.5 as i32; 1e39 or 1e-50 as f32, which would round to inf or 0) is an error,
never a silent truncation.
"""

import math

import ml_dtypes
import numpy as np

from . import dtypes
from .dtypes import DataType
from .errors import FusionError, LiteralError
from .ir.exprs import (ARITH_BINARY_OPS, COMPARE_OPS, FLOAT_UNARY_OPS, LAYOUTS, UNARY_OPS,
                       BinaryOp, BroadcastOp, CastOp, LoadStoreOp, MatmulOp, ReductionOp,
                       UnaryOp, WhereOp)
from .ir.iterdomain import IterDomain, IterKind
from .ir.tensor import Scalar, TensorView


def _fusion_of(op, operands):
    tensors = [v for v in operands if isinstance(v, TensorView)]
    if not tensors:
        raise FusionError(f"{op}: needs at least one tensor operand")
    fusion = tensors[0].fusion
    for t in tensors[1:]:
        if t.fusion is not fusion:
            raise FusionError(f"{op}: operands {tensors[0].name} and {t.name} belong to "
                              "different fusions")
    return fusion


def _new_tensor(fusion, dtype, root):
    tv = TensorView(fusion, fusion.temp_name(), dtype, root, named=False)
    fusion.add_tensor(tv)
    return tv


def _shown(value):
    """A literal as messages show it: a long integer shortened."""
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}...{text[-6:]} ({len(text)} characters)"


def _literal(op, value, dtype, beside, argument):
    """The Scalar a number `value` passed as operand `argument` of `op` becomes: it takes
    `dtype` (that of the tensor `beside` it). A value the dtype cannot hold is a
    LiteralError: a fraction or nan for an integer dtype, an integer out of range, a finite
    float that rounds to infinity (overflow) or a nonzero one that rounds to 0 (underflow).
    Rounding to the nearest value of the dtype is what a literal means, not an error."""
    if isinstance(value, Scalar):
        return value
    if not isinstance(value, (bool, int, float)):
        raise FusionError(f"{op}: operand {value!r} is neither a tensor nor a number")
    target = f"the dtype {dtype} of {beside}"
    if isinstance(value, bool) and dtype is not DataType.bool:
        raise LiteralError(f"{op}: literal {'true' if value else 'false'} cannot take "
                           f"{target}; write 1 or 0", argument)
    shown = _shown(value)
    if dtype is DataType.bool:
        if not isinstance(value, bool) and value not in (0, 1):
            raise LiteralError(f"{op}: literal {shown} cannot take {target}", argument)
        return Scalar(bool(value), dtype)
    if dtype.is_int:
        info = np.iinfo(dtype.numpy)
        if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
            raise LiteralError(f"{op}: literal {shown} cannot take {target}", argument)
        if not info.min <= value <= info.max:
            raise LiteralError(f"{op}: literal {shown} is out of range for {target}", argument)
        return Scalar(int(value), dtype)
    if isinstance(value, float) and not math.isfinite(value):
        return Scalar(value, dtype)  # inf and nan mean what they say
    with np.errstate(over="ignore", under="ignore"):
        try:
            rounded = np.float64(value).astype(dtype.numpy)
        except OverflowError:  # an integer beyond even f64
            rounded = None
    if rounded is None or not np.isfinite(rounded):
        raise LiteralError(f"{op}: literal {shown} is out of range for {target}", argument)
    if rounded == 0 and value != 0:
        tiny = float(ml_dtypes.finfo(dtype.numpy).smallest_subnormal)
        raise LiteralError(f"{op}: literal {shown} underflows to 0 in {target} (its smallest "
                           f"nonzero magnitude is {tiny:.3g})", argument)
    return Scalar(float(value), dtype)


def _check_tensor(op, v, what="operand"):
    if not isinstance(v, TensorView):
        raise FusionError(f"{op}: {what} must be a tensor, got {v!r}")


def _pointwise_root(op, tensors):
    """The root axes of a pointwise result: operands' shapes must agree axis by axis,
    except that a broadcast axis matches any extent."""
    rank = tensors[0].rank
    for t in tensors[1:]:
        if t.rank != rank:
            names = ", ".join(f"{u.name} has {u.rank}" for u in tensors)
            raise FusionError(f"{op}: operand ranks differ ({names}); broadcast the "
                              "smaller operand first")
    root = []
    for i in range(rank):
        concrete = [(t, t.shape_axes[i]) for t in tensors if not t.shape_axes[i].is_broadcast]
        for (t0, a0), (t1, a1) in zip(concrete, concrete[1:]):
            if a0.extent != a1.extent:
                raise FusionError(f"{op}: axis {i} extents differ: {a0.extent} ({t0.name}) "
                                  f"vs {a1.extent} ({t1.name})")
        if concrete:
            root.append(IterDomain(concrete[0][1].extent, IterKind.iteration))
        else:
            root.append(IterDomain(1, IterKind.broadcast))
    return root


def _pointwise(op, operands):
    """Shared body of unary/binary/where builders: returns (fusion, operands, root)."""
    fusion = _fusion_of(op, operands)
    tensors = [v for v in operands if isinstance(v, TensorView)]
    return fusion, tensors, _pointwise_root(op, tensors)


# -- unary ---------------------------------------------------------------------------------
def _unary(op, x, approximate="none"):
    _check_tensor(op, x)
    if x.dtype is DataType.bool and op not in FLOAT_UNARY_OPS:
        raise FusionError(f"{op}: operand {x.name} is bool; cast it first")
    dtype = x.dtype
    if op in FLOAT_UNARY_OPS and not dtype.is_float:
        dtype = DataType.f32
    fusion, _, root = _pointwise(op, [x])
    out = _new_tensor(fusion, dtype, root)
    fusion.add_expr(UnaryOp(op, x, out, approximate))
    return out


def _unary_builder(op):
    def build(x):
        return _unary(op, x)
    build.__name__ = build.__qualname__ = op
    build.__doc__ = f"{op}(x), elementwise (its meaning: fuserir.op_table.UNARY[{op!r}])."
    return build


# neg, abs, exp, log, ...: one builder per unary op of the op table (gelu, below, also
# takes `approximate`)
globals().update({op: _unary_builder(op) for op in UNARY_OPS if op != "gelu"})


def gelu(x, approximate="none"):
    """GELU: erf form by default, `approximate="tanh"` for the tanh approximation."""
    if approximate not in ("none", "tanh"):
        raise FusionError(f"gelu: approximate must be \"none\" or \"tanh\", got {approximate!r}")
    return _unary("gelu", x, approximate)


# -- binary --------------------------------------------------------------------------------
def _binary(op, a, b):
    fusion = _fusion_of(op, [a, b])
    ta = a if isinstance(a, TensorView) else None
    tb = b if isinstance(b, TensorView) else None
    if ta is None:
        a = _literal(op, a, tb.dtype, tb.name, "a")
    if tb is None:
        b = _literal(op, b, ta.dtype, ta.name, "b")
    in_dtype = dtypes.promote(a.dtype, b.dtype)
    if op == "div" and in_dtype.is_int and isinstance(b, Scalar) and b.value == 0:
        raise FusionError(f"div: {ta.name} / 0: integer division of {ta.name} "
                          f"({ta.dtype}) by the literal 0")
    if op in ARITH_BINARY_OPS and in_dtype is DataType.bool:
        raise FusionError(f"{op}: operands are bool; cast them first")
    out_dtype = DataType.bool if op in COMPARE_OPS else in_dtype
    _, tensors, root = _pointwise(op, [v for v in (a, b) if isinstance(v, TensorView)])
    out = _new_tensor(fusion, out_dtype, root)
    fusion.add_expr(BinaryOp(op, a, b, out))
    return out


def add(a, b): return _binary("add", a, b)
def sub(a, b): return _binary("sub", a, b)
def mul(a, b): return _binary("mul", a, b)
def div(a, b): return _binary("div", a, b)
def maximum(a, b): return _binary("maximum", a, b)
def minimum(a, b): return _binary("minimum", a, b)
def eq(a, b): return _binary("eq", a, b)
def ne(a, b): return _binary("ne", a, b)
def lt(a, b): return _binary("lt", a, b)
def le(a, b): return _binary("le", a, b)
def gt(a, b): return _binary("gt", a, b)
def ge(a, b): return _binary("ge", a, b)


def where(cond, a, b):
    """cond ? a : b, elementwise; cond must be bool."""
    _check_tensor("where", cond, "condition")
    if cond.dtype is not DataType.bool:
        raise FusionError(f"where: condition {cond.name} must be bool, got {cond.dtype}")
    values = [v for v in (a, b) if isinstance(v, TensorView)]
    if not values:
        raise FusionError("where: at least one of the two value operands must be a tensor")
    dtype = values[0].dtype if len(values) == 1 else dtypes.promote(a.dtype, b.dtype)
    if not isinstance(a, TensorView):
        a = _literal("where", a, dtype, values[0].name, "a")
    if not isinstance(b, TensorView):
        b = _literal("where", b, dtype, values[0].name, "b")
    fusion, _, root = _pointwise("where", [cond] + values)
    out = _new_tensor(fusion, dtype, root)
    fusion.add_expr(WhereOp(cond, a, b, out))
    return out


# -- type and shape ------------------------------------------------------------------------
def cast(x, dtype):
    _check_tensor("cast", x)
    if not isinstance(dtype, DataType):
        named = dtypes.from_name(dtype) if isinstance(dtype, str) else None
        if named is None:
            raise FusionError(f"cast: unknown dtype {dtype!r}; expected one of "
                              f"{', '.join(dtypes.DTYPE_NAMES)}")
        dtype = named
    fusion, _, root = _pointwise("cast", [x])
    out = _new_tensor(fusion, dtype, root)
    fusion.add_expr(CastOp(x, out))
    return out


def set(x):  # noqa: A001 - the op is called set
    """A copy of x (what caches are made of)."""
    _check_tensor("set", x)
    fusion, _, root = _pointwise("set", [x])
    out = _new_tensor(fusion, x.dtype, root)
    fusion.add_expr(LoadStoreOp(x, out))
    return out


def broadcast(x, flags):
    """Insert new broadcast axes: one flag per output axis, true = new broadcast axis."""
    _check_tensor("broadcast", x)
    flags = list(flags)
    if not all(isinstance(f, bool) for f in flags):
        raise FusionError(f"broadcast: flags must be true/false, got {flags}")
    kept = flags.count(False)
    if kept != x.rank:
        raise FusionError(f"broadcast: {x.name} has {x.rank} axes but the flags keep {kept} "
                          f"(one flag per output axis, true = new axis)")
    fusion = x.fusion
    root, axes = [], iter(x.shape_axes)
    for is_new in flags:
        if is_new:
            root.append(IterDomain(1, IterKind.broadcast))
        else:
            a = next(axes)
            root.append(IterDomain(a.extent, a.kind))
    out = _new_tensor(fusion, x.dtype, root)
    fusion.add_expr(BroadcastOp(x, out, flags))
    return out


# -- reductions ----------------------------------------------------------------------------
def _normalize_axes(op, x, axes):
    if isinstance(axes, int):
        axes = [axes]
    axes = list(axes)
    if not axes:
        raise FusionError(f"{op}: no axes to reduce")
    normalized = []
    for a in axes:
        if isinstance(a, bool) or not isinstance(a, int):
            raise FusionError(f"{op}: axis {a!r} is not an integer")
        p = a + x.rank if a < 0 else a
        if not 0 <= p < x.rank:
            raise FusionError(f"{op}: axis {a} is out of range for {x.name} with {x.rank} "
                              "axes")
        if p in normalized:
            raise FusionError(f"{op}: axis {a} is listed twice")
        normalized.append(p)
    return sorted(normalized)


def accumulate_dtype(dtype):
    """The type a reduction over `dtype` accumulates in (f16/bf16 accumulate in f32)."""
    return dtype.compute


def _reduction(op, x, axes):
    _check_tensor(op, x)
    if x.dtype is DataType.bool:
        raise FusionError(f"{op}: operand {x.name} is bool; cast it first")
    axes = _normalize_axes(op, x, axes)
    root = []
    for i, a in enumerate(x.shape_axes):
        if i in axes:
            root.append(IterDomain(a.extent, IterKind.reduction))
        else:
            root.append(IterDomain(a.extent, a.kind))
    out = _new_tensor(x.fusion, x.dtype, root)
    x.fusion.add_expr(ReductionOp(op, x, out, axes))
    return out


def sum(x, axes):  # noqa: A001 - the op is called sum
    return _reduction("sum", x, axes)


def max(x, axes):  # noqa: A001 - the op is called max
    return _reduction("max", x, axes)



def matmul(a, b, layout="TT"):
    """f32 matmul of f16/bf16 operands stored per layout (TT, TN, NT, NN); see MatmulOp."""
    _check_tensor("matmul", a, "A")
    _check_tensor("matmul", b, "B")
    if layout not in LAYOUTS:
        raise FusionError(f"matmul: unknown layout {layout!r}; expected one of "
                          f"{', '.join(LAYOUTS)}")
    _fusion_of("matmul", [a, b])
    if b is a:
        # x^T x: the two operands are cached and read differently (each its own shared
        # tile and register fragment layout), so B is a copy of A, a tensor of its own
        b = set(a)
    for name, t in (("A", a), ("B", b)):
        if t.rank != 2:
            raise FusionError(f"matmul: {name} ({t.name}) must have 2 axes, has {t.rank}")
        if t.dtype not in (DataType.f16, DataType.bf16):
            raise FusionError(f"matmul: {name} ({t.name}) must be f16 or bf16, got {t.dtype}")
    if a.dtype is not b.dtype:
        raise FusionError(f"matmul: A ({a.name}) is {a.dtype} but B ({b.name}) is {b.dtype}")
    m_axis, ka = (a.shape_axes[0], a.shape_axes[1]) if layout[0] == "T" else \
        (a.shape_axes[1], a.shape_axes[0])
    kb, n_axis = (b.shape_axes[0], b.shape_axes[1]) if layout[1] == "T" else \
        (b.shape_axes[1], b.shape_axes[0])
    if ka.extent != kb.extent:
        raise FusionError(f"matmul: K extents differ: {ka.extent} ({a.name}) vs {kb.extent} "
                          f"({b.name}) for layout {layout}")
    root = [IterDomain(m_axis.extent), IterDomain(n_axis.extent),
            IterDomain(ka.extent, IterKind.reduction)]
    out = _new_tensor(a.fusion, DataType.f32, root)
    a.fusion.add_expr(MatmulOp(a, b, out, layout))
    return out


UNARY = {name: globals()[name] for name in UNARY_OPS}
BINARY = {name: globals()[name] for name in ARITH_BINARY_OPS + COMPARE_OPS}
REDUCTIONS = {"sum": sum, "max": max}
