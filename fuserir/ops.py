"""Builders for every fusion operation.

Each builder checks its operands (types, ranks, extents), computes the result's dtype and
root domain, and registers the expression in the operands' fusion. Python numbers are
literals: a literal takes the dtype of the tensor operand beside it, and one that the dtype
cannot hold (2.5 as i32; 1e39 or 1e-50 as f32, which would round to inf or 0) is an error,
never a silent truncation.
"""

import functools
import builtins
import math

import ml_dtypes
import numpy as np

from . import dtypes, op_table
from .dtypes import DataType
from .errors import FusionError, LiteralError
from .ir import extent as ext
from .ir.exprs import (BINARY_OPS, UNARY_OPS, AxisIndexOp,
                       BinaryOp, BroadcastOp, CastOp, ExpandOp, LoadStoreOp,
                       PermuteOp, ReductionOp, SqueezeOp, UnaryOp, WhereOp)
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
    for t in tensors:
        _check_tensor(op, t)
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
        # a size takes the dtype beside it, as a literal does (read and converted at run)
        return Scalar(value.value, dtype) if value.is_size else value
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


# The ops that take a welford state (no other computes on one)
_TAKE_STATES = ("welford_mean", "welford_m2", "welford_merge", "set")


def _check_tensor(op, v, what="operand"):
    if not isinstance(v, TensorView):
        raise FusionError(f"{op}: {what} must be a tensor, got {v!r}")
    if v.dtype.is_state and op not in _TAKE_STATES:
        raise FusionError(f"{op}: {what} {v.name} is a welford state, not a number: read "
                          "it with welford_mean or welford_m2")


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


def _refusal(op, entry, operands, cast_hint):
    """Why `op` refuses its operands (`operands` says what they are): what ops of its kind
    take (fuserir.op_table.TAKES), or, where they refuse only bool, `cast_hint`."""
    takes = op_table.TAKES.get(entry.kind)
    return f"{op}: {operands}; " + (f"{op} takes {takes}" if takes else cast_hint)


# -- unary ---------------------------------------------------------------------------------
def _unary(op, x, approximate="none"):
    _check_tensor(op, x)
    entry = op_table.FUSION_UNARY[op]
    types = op_table.fusion_types(entry, x.dtype)
    if types is None:
        raise FusionError(_refusal(op, entry, f"operand {x.name} is {x.dtype}",
                                   "cast it first"))
    fusion, _, root = _pointwise(op, [x])
    out = _new_tensor(fusion, types[1], root)
    fusion.add_expr(UnaryOp(op, x, out, approximate))
    return out


def _unary_builder(op):
    def build(x):
        return _unary(op, x)
    build.__name__ = build.__qualname__ = op
    build.__doc__ = (f"{op}(x), elementwise (its meaning: "
                     f"fuserir.op_table.FUSION_UNARY[{op!r}]).")
    return build


# neg, abs, exp, sin, isnan, logical_not, ...: one builder per unary op of the op table
# (gelu, below, also takes `approximate`)
globals().update({op: _unary_builder(op) for op in UNARY_OPS if op != "gelu"})


def gelu(x, approximate="none"):
    """GELU: erf form by default, `approximate="tanh"` for the tanh approximation."""
    if approximate not in ("none", "tanh"):
        raise FusionError(f"gelu: approximate must be \"none\" or \"tanh\", got {approximate!r}")
    return _unary("gelu", x, approximate)


# -- binary --------------------------------------------------------------------------------
# The ops that divide, by their C operator: an integer one by the literal 0 is refused
_DIVISIONS = {"div": "/", "fmod": "%", "remainder": "%"}


def _lift_rank_0(operands):
    """Rank-0 tensors among `operands` (tensors or numbers) broadcast to the others' rank,
    as a number would be: `x * s` with s: f32[] scales every element of x."""
    rank = builtins.max((v.rank for v in operands if isinstance(v, TensorView)), default=0)
    return [broadcast(v, [True] * rank) if isinstance(v, TensorView) and v.rank == 0
            and rank > 0 else v for v in operands]


def _binary(op, a, b):
    fusion = _fusion_of(op, [a, b])
    a, b = _lift_rank_0([a, b])
    ta = a if isinstance(a, TensorView) else None
    tb = b if isinstance(b, TensorView) else None
    if ta is None:
        a = _literal(op, a, tb.dtype, tb.name, "a")
    if tb is None:
        b = _literal(op, b, ta.dtype, ta.name, "b")
    entry = op_table.FUSION_BINARY[op]
    types = op_table.fusion_types(entry, dtypes.promote(a.dtype, b.dtype))
    if types is None:
        kinds = a.dtype if a.dtype is b.dtype else f"{a.dtype} and {b.dtype}"
        raise FusionError(_refusal(op, entry, f"operands are {kinds}", "cast them first"))
    operand_dtype, out_dtype = types
    if op in _DIVISIONS and operand_dtype.is_int and isinstance(b, Scalar) and b.value == 0:
        what = "division" if op == "div" else "remainder"
        raise FusionError(f"{op}: {ta.name} {_DIVISIONS[op]} 0: integer {what} of {ta.name} "
                          f"({ta.dtype}) by the literal 0")
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
def fmod(a, b): return _binary("fmod", a, b)
def remainder(a, b): return _binary("remainder", a, b)
def atan2(a, b): return _binary("atan2", a, b)
def pow(a, b): return _binary("pow", a, b)  # noqa: A001 - the op is called pow
def nextafter(a, b): return _binary("nextafter", a, b)
def logical_and(a, b): return _binary("logical_and", a, b)
def logical_or(a, b): return _binary("logical_or", a, b)
def logical_xor(a, b): return _binary("logical_xor", a, b)
def bitwise_and(a, b): return _binary("bitwise_and", a, b)
def bitwise_or(a, b): return _binary("bitwise_or", a, b)
def bitwise_xor(a, b): return _binary("bitwise_xor", a, b)
def bitwise_left_shift(a, b): return _binary("bitwise_left_shift", a, b)
def bitwise_right_shift(a, b): return _binary("bitwise_right_shift", a, b)


def _literals_dtype(values):
    """The dtype of a result made of literals alone (torch.where's): bool of two bools,
    f32 where one is a float, else i64 (integers, sizes); literals already typed (a copy
    of such a where, rebuilt) keep theirs."""
    typed = [v.dtype for v in values if isinstance(v, Scalar) and not v.is_size]
    if typed:
        return functools.reduce(dtypes.promote, typed)
    if all(isinstance(v, bool) for v in values):
        return DataType.bool
    return DataType.f32 if any(isinstance(v, float) for v in values) else DataType.i64


def where(cond, a, b):
    """cond ? a : b, elementwise; cond must be bool. Two numbers give a tensor of cond's
    shape (bool, i64, or f32 where one is a float, as torch.where)."""
    _check_tensor("where", cond, "condition")
    if cond.dtype is not DataType.bool:
        raise FusionError(f"where: condition {cond.name} must be bool, got {cond.dtype}")
    cond, a, b = _lift_rank_0([cond, a, b])
    values = [v for v in (a, b) if isinstance(v, TensorView)]
    for v in values:
        _check_tensor("where", v)
    if values:
        dtype = values[0].dtype if len(values) == 1 else dtypes.promote(a.dtype, b.dtype)
        beside = values[0].name
    else:
        dtype, beside = _literals_dtype([a, b]), f"where({cond.name}, ...)"
    if not isinstance(a, TensorView):
        a = _literal("where", a, dtype, beside, "a")
    if not isinstance(b, TensorView):
        b = _literal("where", b, dtype, beside, "b")
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
    if dtype.is_state and not x.dtype.is_float:
        raise FusionError(f"cast: {x.name} is {x.dtype}; a welford state is made of floats "
                          "(cast it to f32 first)")
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


# -- sizes as values -----------------------------------------------------------------------
def size(x, dim):
    """The extent of x's axis `dim` as a value (an operand of an op: its integer value,
    bound from the inputs' shapes at run time, in the dtype of the tensor beside it), as
    nvFuser's `size(x, dim)`: `sum(x, [1]) / size(x, 1)` is the mean of rows."""
    _check_tensor("size", x)
    extent = x.shape_axes[_position("size", x, dim)].extent
    return extent if isinstance(extent, int) else Scalar(extent, DataType.i64)


# -- views: the same elements in another shape ---------------------------------------------
def _position(op, x, axis, what="dim"):
    """An axis position of x (a negative one counts from the end)."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise FusionError(f"{op}: {what} {axis!r} is not an integer")
    p = axis + x.rank if axis < 0 else axis
    if not 0 <= p < x.rank:
        raise FusionError(f"{op}: {what} {axis} is out of range for {x.name} with {x.rank} "
                          "axes")
    return p


def _positions(op, x, dims):
    dims = [dims] if isinstance(dims, int) and not isinstance(dims, bool) else list(dims)
    positions = [_position(op, x, d) for d in dims]
    for d, p in zip(dims, positions):
        if positions.count(p) > 1:
            raise FusionError(f"{op}: dim {d} of {x.name} is listed twice")
    return positions


def _same_axis(a):
    return IterDomain(a.extent, a.kind)


def permute(x, dims):
    """x's axes in the order `dims`: out's axis i is x's axis dims[i] (torch.permute)."""
    _check_tensor("permute", x)
    dims = _positions("permute", x, dims)
    if len(dims) != x.rank:
        raise FusionError(f"permute: dims {dims} name {len(dims)} of the {x.rank} axes of "
                          f"{x.name}; a permutation names each once")
    out = _new_tensor(x.fusion, x.dtype, [_same_axis(x.shape_axes[d]) for d in dims])
    x.fusion.add_expr(PermuteOp(x, out, dims))
    return out


def transpose(x, dim0, dim1):
    """x with axes dim0 and dim1 swapped (torch.transpose)."""
    _check_tensor("transpose", x)
    a, b = _position("transpose", x, dim0, "dim0"), _position("transpose", x, dim1, "dim1")
    dims = list(range(x.rank))
    dims[a], dims[b] = b, a
    return permute(x, dims)


def _of_extent_one(axis):
    return axis.is_broadcast or axis.extent == 1


def squeeze(x, dims):
    """x without its axes `dims`, each of extent 1 (declared 1, or a broadcast axis)."""
    _check_tensor("squeeze", x)
    dims = sorted(_positions("squeeze", x, dims))
    for d in dims:
        if not _of_extent_one(x.shape_axes[d]):
            raise FusionError(f"squeeze: axis {d} of {x.name} has extent "
                              f"{x.shape_axes[d].extent}, not 1; only an axis of extent 1 "
                              "can be squeezed")
    root = [_same_axis(a) for i, a in enumerate(x.shape_axes) if i not in dims]
    out = _new_tensor(x.fusion, x.dtype, root)
    x.fusion.add_expr(SqueezeOp(x, out, dims))
    return out


def unsqueeze(x, dim):
    """x with a new axis of extent 1 at position `dim` of the result (torch.unsqueeze)."""
    _check_tensor("unsqueeze", x)
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise FusionError(f"unsqueeze: dim {dim!r} is not an integer")
    p = dim + x.rank + 1 if dim < 0 else dim
    if not 0 <= p <= x.rank:
        raise FusionError(f"unsqueeze: dim {dim} is out of range for a result of "
                          f"{x.rank + 1} axes")
    return broadcast(x, [i == p for i in range(x.rank + 1)])


def _extent(op, value):
    """A size as a builder or the DSL gives it: an integer, or the name of a size."""
    if isinstance(value, str) and value.isidentifier():
        return ext.Sym(value)
    if isinstance(value, ext.EXTENTS):
        return value
    if isinstance(value, Scalar) and value.is_size:
        return value.value
    if isinstance(value, bool) or not isinstance(value, int) or value < -1 or value == 0:
        raise FusionError(f"{op}: size {value!r} is neither a positive integer, -1 (keep) "
                          "nor the name of a size")
    return value


def _check_known(op, fusion, sizes):
    """Every symbol of `sizes` must be a size of an input or a declared run-time scalar."""
    known = {*fusion.size_symbols(), *fusion.scalars}
    for size in sizes:
        unknown = sorted(ext.symbols(size) - known) if not isinstance(size, int) else []
        if unknown:
            raise FusionError(f"{op}: size {unknown[0]} is neither a size of an input of "
                              f"{fusion.name} ({', '.join(fusion.size_symbols()) or 'none'}) "
                              "nor a declared run-time scalar")


def _expand(op, x, shape):
    shape = [_extent(op, v) for v in shape]
    _check_known(op, x.fusion, shape)
    if len(shape) != x.rank:
        raise FusionError(f"{op}: shape {[str(v) for v in shape]} has {len(shape)} sizes, "
                          f"{x.name} has {x.rank} axes")
    root, stretched = [], []
    for i, (axis, size) in enumerate(zip(x.shape_axes, shape)):
        if size == -1 or size == axis.extent or (size == 1 and axis.is_broadcast):
            root.append(_same_axis(axis))
            stretched.append(False)
        elif _of_extent_one(axis):
            root.append(IterDomain(size))
            stretched.append(True)
        else:
            raise FusionError(f"{op}: axis {i} of {x.name} has extent {axis.extent}; only an "
                              f"axis of extent 1 expands (to {size})")
    if not any(stretched):
        return x
    out = _new_tensor(x.fusion, x.dtype, root)
    x.fusion.add_expr(ExpandOp(x, out, stretched))
    return out


def expand(x, shape):
    """x with each axis of extent 1 stretched to the size `shape` gives it (-1, or the
    axis's own extent: kept); sizes are integers or names of sizes (torch.expand)."""
    _check_tensor("expand", x)
    return _expand("expand", x, list(shape))


def broadcast_in_dim(x, shape, broadcast_dims):
    """x as a tensor of `shape`: x's axis i becomes the result's axis broadcast_dims[i]
    (increasing), the result's other axes are new; axes of extent 1 stretch to the size
    `shape` gives them (nvFuser's broadcast_in_dim)."""
    _check_tensor("broadcast_in_dim", x)
    shape, dims = list(shape), list(broadcast_dims)
    if len(dims) != x.rank:
        raise FusionError(f"broadcast_in_dim: broadcast_dims {dims} name {len(dims)} axes "
                          f"but {x.name} has {x.rank}")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d < len(shape):
            raise FusionError(f"broadcast_in_dim: broadcast_dims entry {d!r} is not an axis "
                              f"of the {len(shape)}-axis result")
    if any(a >= b for a, b in zip(dims, dims[1:])):
        raise FusionError(f"broadcast_in_dim: broadcast_dims {dims} must increase")
    for i, d in enumerate(dims):
        axis, size = x.shape_axes[i], _extent("broadcast_in_dim", shape[d])
        if size not in (-1, axis.extent) and not _of_extent_one(axis):
            raise FusionError(f"broadcast_in_dim: axis {i} of {x.name} has extent "
                              f"{axis.extent}; only an axis of extent 1 expands (to {size})")
    new = [i not in dims for i in range(len(shape))]
    return _expand("broadcast_in_dim", broadcast(x, new) if any(new) else x, shape)


# -- positions -------------------------------------------------------------------------------
def axis_index(x, dim):
    """An i64 tensor of x's shape holding each element's index along x's axis `dim` (x's
    values are not read)."""
    _check_tensor("axis_index", x)
    d = _position("axis_index", x, dim)
    out = _new_tensor(x.fusion, DataType.i64, [_same_axis(a) for a in x.shape_axes])
    x.fusion.add_expr(AxisIndexOp(x, out, d))
    return out


def _triangle(op, x, diagonal, keep):
    _check_tensor(op, x)
    if x.rank < 2:
        raise FusionError(f"{op}: {x.name} has {x.rank} axes; it needs at least 2 (the "
                          "matrix is the last two)")
    if isinstance(diagonal, bool) or not isinstance(diagonal, int):
        raise FusionError(f"{op}: diagonal {diagonal!r} is not an integer")
    offset = sub(axis_index(x, -1), axis_index(x, -2))    # column - row
    return where(keep(offset, diagonal), x, 0)          # (0 as a bool literal is false)


def triu(x, diagonal=0):
    """x with the elements below the `diagonal`-th diagonal of its last two axes zeroed
    (torch.triu: kept where column - row >= diagonal)."""
    return _triangle("triu", x, diagonal, ge)


def tril(x, diagonal=0):
    """x with the elements above the `diagonal`-th diagonal of its last two axes zeroed
    (torch.tril: kept where column - row <= diagonal)."""
    return _triangle("tril", x, diagonal, le)


# -- reductions ----------------------------------------------------------------------------
def _normalize_axes(op, x, axes):
    if isinstance(axes, int):
        axes = [axes]
    axes = list(axes)
    if not axes:
        raise FusionError(f"{op}: no axes to reduce")
    normalized = []
    for a in axes:
        p = _position(op, x, a, "axis")
        if p in normalized:
            raise FusionError(f"{op}: axis {a} is listed twice")
        normalized.append(p)
    return sorted(normalized)


def accumulate_dtype(dtype):
    """The type a reduction over `dtype` accumulates in (f16/bf16 accumulate in f32)."""
    return dtype.compute


def _reduction(op, x, axes, keepdim=False, dtype=None):
    _check_tensor(op, x)
    _check_keepdim(op, keepdim)
    if dtype is not None:
        x = _accumulated_as(op, x, dtype)
    if x.dtype is DataType.bool:
        raise FusionError(f"{op}: operand {x.name} is bool; cast it first")
    if (op == "welford_merge") != x.dtype.is_state:
        raise FusionError(f"{op}: operand {x.name} is {x.dtype}; welford_merge merges "
                          "welford states (cast(x, welford) makes one of a float)")
    axes = _normalize_axes(op, x, axes)
    root = []
    for i, a in enumerate(x.shape_axes):
        if i in axes:
            root.append(IterDomain(a.extent, IterKind.reduction))
        else:
            root.append(IterDomain(a.extent, a.kind))
    out = _new_tensor(x.fusion, x.dtype, root)
    x.fusion.add_expr(ReductionOp(op, x, out, axes))
    return _kept(out, axes, keepdim)


def _accumulated_as(op, x, dtype):
    """x converted to `dtype` before a reduction with `dtype=` (torch's meaning: the
    elements are cast, then reduced and accumulated in that type)."""
    if not isinstance(dtype, DataType):
        raise FusionError(f"{op}: dtype must be a DataType, got {dtype!r}")
    return x if x.dtype is dtype else cast(x, dtype)


def _check_keepdim(op, keepdim):
    """Refuse a keepdim that is not a bool (before anything is built)."""
    if not isinstance(keepdim, bool):
        raise FusionError(f"{op}: keepdim must be true or false, got {keepdim!r}")


def _kept(out, axes, keepdim):
    """`out` with its reduced `axes` back as axes of extent 1 where `keepdim`."""
    if not keepdim:
        return out
    return broadcast(out, [i in axes for i in range(out.rank + len(axes))])


def sum(x, axes, keepdim=False, dtype=None):  # noqa: A001 - the op is called sum
    """The sum of x's elements over `axes`; f16/bf16 accumulate in f32 and round once.
    `keepdim` keeps the reduced axes (extent 1); `dtype` casts the elements first."""
    return _reduction("sum", x, axes, keepdim, dtype)


def prod(x, axes, keepdim=False, dtype=None):
    """The product of x's elements over `axes` (1 over none); as sum otherwise."""
    return _reduction("prod", x, axes, keepdim, dtype)


def max(x, axes, keepdim=False):  # noqa: A001 - the op is called max
    """The largest of x's elements over `axes` (NaN if any is; -inf, or the integer type's
    minimum, over none): torch.amax."""
    return _reduction("max", x, axes, keepdim)


def min(x, axes, keepdim=False):  # noqa: A001 - the op is called min
    """The smallest of x's elements over `axes`: torch.amin (as max)."""
    return _reduction("min", x, axes, keepdim)


def welford_merge(x, axes):
    """The welford states of x merged over `axes` (fuserir.numerics: Chan's update): the
    one-pass mean and variance fuserir.statistics.welford is made of."""
    return _reduction("welford_merge", x, axes)


# the ops of numbers; those of welford states (a reduction and its two reads)
UNARY = {name: globals()[name] for name in UNARY_OPS if not name.startswith("welford_")}
STATES = {"welford_merge": welford_merge, "welford_mean": globals()["welford_mean"],
          "welford_m2": globals()["welford_m2"]}
# truediv, clamp, threshold, lerp, addcmul (fuserir.composite), slice, pad, cat, full,
# iota, arange (fuserir.slicing): built of the builders above; matmul, bmm, linear
# (fuserir.matmuls)
from .composite import addcmul, clamp, lerp, threshold, truediv  # noqa: E402
from .matmuls import bmm, linear, matmul  # noqa: E402
from .slicing import arange, cat, full, iota, pad, slice  # noqa: E402,A004
from .reshaping import reshape  # noqa: E402
from .statistics import (argmax, argmin, log_softmax, mean, softmax, std, var,  # noqa: E402
                         var_mean, welford)

BINARY = {**{name: globals()[name] for name in BINARY_OPS}, "truediv": truediv}
TERNARY = {"clamp": clamp, "lerp": lerp, "addcmul": addcmul, "threshold": threshold}
REDUCTIONS = {"sum": sum, "prod": prod, "max": max, "min": min}     # of numbers
MATMULS = {"matmul": matmul, "bmm": bmm, "linear": linear}
VIEWS = {name: globals()[name] for name in ("permute", "transpose", "squeeze", "unsqueeze",
                                            "expand", "broadcast_in_dim")}
VIEWS["reshape"] = reshape
POSITIONS = {name: globals()[name] for name in ("axis_index", "triu", "tril")}
# mean, var, std, var_mean and welford (two tensors each), softmax, log_softmax, argmax, argmin
# (fuserir.statistics): built of the reductions and ops above
STATISTICS = {"mean": mean, "var": var, "std": std, "var_mean": var_mean,
              "welford": welford,
              "softmax": softmax, "log_softmax": log_softmax, "argmax": argmax,
              "argmin": argmin}

SLICING = {"slice": slice, "pad": pad, "cat": cat}
FACTORIES = {"full": full, "iota": iota, "arange": arange}
