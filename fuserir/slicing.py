"""Builders of the ops that read other elements than their own (slice, pad, cat) and of
tensors made from nothing (full, iota, arange); fuserir.ops re-exports them.

A slice, pad or cat is one expression whose output axis reads its input's axis through an
index map (fuserir.ir.exprs.AxisMap): the same loops and inlining as a pointwise op, with
another index. Bounds and widths are extents: integers, sizes, or size expressions (N - 2,
D / 2). What the extents decide is checked here; what only the sizes bound at run time can
decide is recorded on the fusion (Fusion.require) and checked when the inputs are bound.
iota and arange are made of full, axis_index and arithmetic.
"""

import builtins
import math

import numpy as np

from . import dtypes
from .dtypes import DataType
from .errors import FusionError
from .ir import extent as ext
from .ir.exprs import CatOp, FullOp, PadOp, SliceOp
from .ir.iterdomain import IterDomain, IterKind
from .ir.tensor import Scalar, TensorView
from .composite import _computed_in
from .ops import (_check_known, _check_tensor, _fusion_of, _literal, _new_tensor, _position,
                  _same_axis, add, axis_index, broadcast, expand, ge, logical_and, lt, mul,
                  set, where)


# -- slices, pads, cats: other elements of the same tensors -----------------------------------
def _size(op, value, what):
    """A bound or width as an extent: an integer (negative allowed: the caller decides), a
    name of a size, a size expression (fuserir.ir.extent), or a size as a value."""
    if isinstance(value, Scalar) and value.is_size:
        return value.value
    if isinstance(value, ext.EXTENTS):
        return value
    if isinstance(value, str) and value.isidentifier():
        return ext.Sym(value)
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    raise FusionError(f"{op}: {what} {value!r} is neither an integer nor a size")


def _at_most(a, b):
    """a <= b as far as the extents show: True, False, or None where only the sizes bound
    at run time can tell."""
    difference = ext.sub(b, a)
    return difference >= 0 if isinstance(difference, int) else None


def _requires(op, fusion, lhs, rhs, refusal, what):
    """lhs <= rhs: checked now where the extents tell (else FusionError `refusal`), or
    when the sizes are bound (Fusion.require: `what`)."""
    known = _at_most(lhs, rhs)
    if known is False:
        raise FusionError(f"{op}: {refusal}")
    if known is None:
        fusion.require(lhs, rhs, what)


def _entries(n):
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def _bound_list(op, x, values, what):
    if isinstance(values, (str, int)) or not hasattr(values, "__len__"):
        raise FusionError(f"{op}: {what} must be a list with one entry per axis of {x.name}")
    values = list(values)
    if len(values) != x.rank:
        raise FusionError(f"{op}: {what} has {_entries(len(values))} but {x.name} has "
                          f"{x.rank} axes (one per axis)")
    return [_size(op, v, f"{what} entry") for v in values]


def slice(x, start_indices, end_indices, strides=None):  # noqa: A001 - the op is called slice
    """x[start:end:stride] along every axis (nvFuser's slice; torch's indexing): the
    elements from start (included) to end (excluded), every stride-th. A bound is an
    integer (negative counts from the axis's end, as in Python), a size or a size
    expression (`N - 1`, `D / 2`); a stride is a positive integer. Bounds must lie in the
    axis, 0 <= start < end <= extent (no clamping, unlike Python's slices; an empty slice
    is refused): checked here where the extents are integers, else when the sizes are
    bound at run()."""
    _check_tensor("slice", x)
    starts = _bound_list("slice", x, start_indices, "start_indices")
    ends = _bound_list("slice", x, end_indices, "end_indices")
    steps = [1] * x.rank if strides is None else strides
    if isinstance(steps, (int, str)) or not hasattr(steps, "__len__") or len(steps) != x.rank:
        raise FusionError(f"slice: strides must be a list with one entry per axis of "
                          f"{x.name} ({x.rank})")
    steps, root, normalized = list(steps), [], []
    _check_known("slice", x.fusion, starts + ends)
    for i, (axis, start, end, step) in enumerate(zip(x.shape_axes, starts, ends, steps)):
        where = f"axis {i} of {x.name}"
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise FusionError(f"slice: stride {step!r} for {where}; a stride is a positive "
                              "integer")
        extent = axis.extent
        given = (start, end)
        start, end = (ext.add(extent, v) if isinstance(v, int) and v < 0 else v
                      for v in (start, end))
        told = f"{where} (extent {extent})"
        _requires("slice", x.fusion, 0, start,
                  f"start {given[0]} is outside {told}",
                  f"slice of {x.name}, axis {i}: the start must lie in the axis")
        _requires("slice", x.fusion, ext.add(start, 1), extent,
                  f"start {given[0]} is outside {told}",
                  f"slice of {x.name}, axis {i}: the start must lie in the axis")
        _requires("slice", x.fusion, end, extent,
                  f"end {given[1]} is past the end of {told}",
                  f"slice of {x.name}, axis {i}: the end must lie in the axis")
        _requires("slice", x.fusion, ext.add(start, 1), end,
                  f"end {given[1]} is not past start {given[0]} on {told}; a slice keeps "
                  "at least one element",
                  f"slice of {x.name}, axis {i}: the end must be past the start")
        normalized.append((start, end, step))
        size = ext.ceildiv(ext.sub(end, start), step)
        root.append(_same_axis(axis) if axis.is_broadcast else IterDomain(size))
    out = _new_tensor(x.fusion, x.dtype, root)
    x.fusion.add_expr(SliceOp(x, out, *zip(*normalized)))
    return out


def pad(x, pad_widths, value=0):
    """x with `value` added around its axes (torch.nn.functional.pad with a constant,
    nvFuser's pad): `pad_widths` is a flat list of pairs (before, after), the last axis's
    pair first, covering the last len(pad_widths) / 2 axes; a width is a non-negative
    integer or a size. `value` is a number (or a size) of x's dtype, or a rank-0 tensor of
    x's dtype (a host scalar: x padded with zeros, then `value` where an element lies
    outside x)."""
    _check_tensor("pad", x)
    if isinstance(pad_widths, (str, int)) or not hasattr(pad_widths, "__len__"):
        raise FusionError("pad: pad_widths must be a list of pairs (before, after), the last "
                          "axis's first")
    given = list(pad_widths)
    if len(given) % 2:
        raise FusionError(f"pad: pad_widths has {_entries(len(given))}, an odd number; they "
                          "are pairs (before, after), the last axis's first")
    if len(given) > 2 * x.rank:
        raise FusionError(f"pad: pad_widths has {len(given)} entries, {len(given) // 2} pairs, "
                          f"but {x.name} has {x.rank} axes")
    widths = [_size("pad", w, "width") for w in given]
    _check_known("pad", x.fusion, widths)
    per_axis = [(0, 0)] * x.rank
    for k in range(len(widths) // 2):
        d = x.rank - 1 - k
        for w in widths[2 * k:2 * k + 2]:
            if isinstance(w, int) and w < 0:
                raise FusionError(f"pad: width {w} for axis {d} of {x.name} is negative; pad "
                                  "adds elements (slice removes them)")
        per_axis[d] = (widths[2 * k], widths[2 * k + 1])
    if isinstance(value, TensorView):
        return _pad_with_tensor(x, given, per_axis, value)
    fill = _literal("pad", value, x.dtype, x.name, "value")
    root = [_same_axis(a) if (before, after) == (0, 0) else
            IterDomain(ext.add(ext.add(before, a.extent), after))
            for a, (before, after) in zip(x.shape_axes, per_axis)]
    out = _new_tensor(x.fusion, x.dtype, root)
    x.fusion.add_expr(PadOp(x, fill, out, widths, per_axis))
    return out


def _pad_with_tensor(x, pad_widths, per_axis, value):
    """pad(x, pad_widths, value) for a rank-0 tensor `value`: x padded with zeros, and
    `value` where an element lies outside x along a padded axis."""
    if value.rank != 0 or value.dtype is not x.dtype:
        raise FusionError(f"pad: value {value.name} must be a number, a size or a rank-0 "
                          f"tensor of {x.name}'s dtype {x.dtype}; it is {value.dtype}"
                          f"[{', '.join(map(str, value.shape))}]")
    padded = pad(x, pad_widths, False if x.dtype is DataType.bool else 0)
    inside = None
    for d, ((before, after), axis) in enumerate(zip(per_axis, x.shape_axes)):
        if (before, after) == (0, 0):
            continue
        i = axis_index(padded, d)
        here = logical_and(ge(i, _as_value(before)),
                           lt(i, _as_value(ext.add(before, axis.extent))))
        inside = here if inside is None else logical_and(inside, here)
    return padded if inside is None else where(inside, padded, value)


def _as_value(extent):
    """An extent as an operand: an integer, or a size as a value."""
    return extent if isinstance(extent, int) else Scalar(extent, DataType.i64)


def cat(tensors, dim):
    """The tensors joined along axis `dim` (torch.cat, nvFuser's cat): one rank and dtype,
    equal extents on every other axis."""
    if isinstance(tensors, TensorView) or not isinstance(tensors, (list, tuple)) or \
            not tensors:
        raise FusionError("cat: tensors must be a non-empty list of tensors")
    for t in tensors:
        _check_tensor("cat", t, "each of tensors")
    _fusion_of("cat", tensors)
    first = tensors[0]
    for t in tensors[1:]:
        if t.rank != first.rank:
            raise FusionError(f"cat: {first.name} has {first.rank} axes but {t.name} has "
                              f"{t.rank}; cat joins tensors of one rank")
        if t.dtype is not first.dtype:
            raise FusionError(f"cat: {first.name} is {first.dtype} but {t.name} is {t.dtype}; "
                              "cast them to one dtype first")
    d = _position("cat", first, dim)
    for t in tensors[1:]:
        for i, (a, b) in enumerate(zip(first.shape_axes, t.shape_axes)):
            if i != d and a.extent != b.extent:
                raise FusionError(f"cat: axis {i} extents differ: {a.extent} ({first.name}) vs "
                                  f"{b.extent} ({t.name}); only axis {d} (dim) may differ")
    # each input is read through its own index map, so one tensor given twice is copied
    tensors = [t if t not in tensors[:k] else set(t) for k, t in enumerate(tensors)]
    offsets = [0]
    for t in tensors:
        offsets.append(ext.add(offsets[-1], t.shape_axes[d].extent))
    root = [IterDomain(offsets[-1]) if i == d else _same_axis(a)
            for i, a in enumerate(first.shape_axes)]
    out = _new_tensor(first.fusion, first.dtype, root)
    first.fusion.add_expr(CatOp(tensors, out, d, offsets))
    return out


# -- tensors made from nothing: full, iota, arange -----------------------------------------
def _dtype(op, dtype):
    if isinstance(dtype, DataType):
        return dtype
    named = dtypes.from_name(dtype) if isinstance(dtype, str) else None
    if named is None:
        raise FusionError(f"{op}: unknown dtype {dtype!r}; expected one of "
                          f"{', '.join(dtypes.DTYPE_NAMES)}")
    return named


def _the_fusion(op, fusion, operands):
    """The fusion a builder with no tensor operand adds to: `fusion`, or a tensor's."""
    tensors = [v for v in operands if isinstance(v, TensorView)]
    if fusion is None and not tensors:
        raise FusionError(f"{op}: pass fusion= (the fusion to add the tensor to); with no "
                          "tensor operand there is none to take it from")
    return fusion if fusion is not None else tensors[0].fusion


def full(shape, fill_value, dtype, fusion=None):
    """A tensor of `shape` (sizes: integers >= 1, names of sizes, size expressions) holding
    `fill_value` (a number, a size, or a rank-0 tensor: a host scalar) everywhere, of
    `dtype` (nvFuser's full). In Python, `fusion=` says which fusion it belongs to (the DSL
    passes its own)."""
    dtype = _dtype("full", dtype)
    fusion = _the_fusion("full", fusion, [fill_value])
    if isinstance(shape, (str, int)) or not hasattr(shape, "__len__"):
        raise FusionError("full: shape must be a list of sizes")
    sizes = [_size("full", v, "size") for v in shape]
    for v in sizes:
        if isinstance(v, int) and v < 1:
            raise FusionError(f"full: size {v} of shape {list(shape)} is not positive")
    _check_known("full", fusion, sizes)
    for v in sizes:
        if isinstance(v, (ext.Linear, ext.FloorDiv)):     # (N - 1 may be 0)
            fusion.require(1, v, f"full: size {v} of its shape must be at least 1")
    if isinstance(fill_value, TensorView):
        if fill_value.rank:
            raise FusionError(f"full: fill_value {fill_value.name} has {fill_value.rank} "
                              "axes; a tensor fill value is rank 0 (a host scalar)")
        value = _computed_in(fill_value, dtype)
        return expand(broadcast(value, [True] * len(sizes)), sizes) if sizes else set(value)
    value = _literal("full", fill_value, dtype, "its result", "fill_value")
    root = [IterDomain(1, IterKind.broadcast) if v == 1 else IterDomain(v) for v in sizes]
    out = _new_tensor(fusion, dtype, root)
    fusion.add_expr(FullOp(value, out))
    return out


def iota(length, start=0, step=1, dtype="i64", fusion=None):
    """A 1-D tensor of `length` holding start + i * step at index i, in `dtype` (nvFuser's
    iota): made of full, axis_index and arithmetic in dtype's compute type, rounded once.
    `length` is a positive integer or a size; start and step are numbers (or sizes)."""
    dtype = _dtype("iota", dtype)
    if dtype is DataType.bool:
        raise FusionError("iota: dtype bool holds no sequence; use an integer or float dtype")
    fusion = _the_fusion("iota", fusion, [])
    size = _size("iota", length, "length")
    if isinstance(size, int) and size < 1:
        raise FusionError(f"iota: length {size} is not positive")
    compute = dtype.compute if dtype.is_float else DataType.i64
    index = axis_index(full([size], 0, DataType.i64, fusion), 0)
    value = _computed_in(index, compute)
    if not (isinstance(step, (int, float)) and not isinstance(step, bool) and step == 1):
        value = mul(value, step)
    if not (isinstance(start, (int, float)) and not isinstance(start, bool) and start == 0):
        value = add(value, start)
    return _computed_in(value, dtype)


def arange(start, end=None, step=1, dtype=None, fusion=None):
    """torch.arange: start, start + step, ... up to end (excluded); `arange(end)` starts at
    0. Integers or sizes (then dtype defaults to i64), or numbers with a float (f32): the
    length is ceil((end - start) / step), at least 1. An iota of that length."""
    if end is None:
        start, end = 0, start
    if isinstance(step, bool) or not isinstance(step, (int, float)) or step == 0:
        raise FusionError(f"arange: step {step!r} is not a nonzero number")
    numbers = [v for v in (start, end) if not isinstance(v, (Scalar, str))]
    if any(isinstance(v, float) for v in (*numbers, step)):
        if len(numbers) < 2:
            raise FusionError("arange: a float bound or step needs both bounds numbers")
        length = math.ceil((end - start) / step)
        dtype = dtype or DataType.f32
    else:
        lo, hi = _size("arange", start, "start"), _size("arange", end, "end")
        span = ext.sub(hi, lo) if step > 0 else ext.sub(lo, hi)
        length = ext.ceildiv(span, builtins.abs(step))
        dtype = dtype or DataType.i64
        if not isinstance(length, int):
            fusion = _the_fusion("arange", fusion, [])
            _check_known("arange", fusion, [length])
            fusion.require(1, length, f"arange({start}, {end}, {step}): the range must hold "
                           "at least one element")
    if isinstance(length, int) and length < 1:
        raise FusionError(f"arange({start}, {end}, {step}) is empty; it must hold at least "
                          "one element")
    start = start.value if isinstance(start, Scalar) else start
    first = Scalar(ext.Sym(start), DataType.i64) if isinstance(start, str) else \
        Scalar(start, DataType.i64) if isinstance(start, ext.EXTENTS) else start
    return iota(length, first, step, dtype, fusion)
