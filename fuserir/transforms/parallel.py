"""Parallelization: bind loop axes to block/thread indices, vectorize, reduce across CTAs.

These transforms change no axis, only how one is run: a block or thread index, an unrolled
or vectorized loop, an mma tile, or (serial_grid_reduction) a reduction over a block index
carried out by the CTAs in turn. Each axis has one parallel type and each block/thread
index binds one axis of a tensor.
"""

from ..errors import ScheduleError
from ..ir.exprs import MatmulOp, ReductionOp
from ..ir.iterdomain import ParallelType, Split
from .common import _axis, _not_input, _ptype


def _not_bound(op, tv, p, axis, ptype):
    """One parallel type per axis: a second one would silently override the first."""
    old = tv.loop[p].parallel
    if old is not ParallelType.serial and old is not ptype:
        raise ScheduleError(f"{op}: axis {axis} of {tv.name} is already parallelized as "
                            f"{old.value}; it cannot also be {ptype.value}")


def parallelize(tv, axis, ptype):
    _not_input("parallelize", tv)
    p = _axis("parallelize", tv, axis)
    ptype = _ptype("parallelize", ptype)
    _not_bound("parallelize", tv, p, axis, ptype)
    if ptype is ParallelType.vectorize:
        vectorize(tv, p)
        return
    if ptype.is_grid_mapped:
        for i, a in enumerate(tv.loop):
            if i != p and a.parallel is ptype:
                raise ScheduleError(f"parallelize: {tv.name} already binds {ptype} to axis "
                                    f"{i}; each block/thread index binds one axis (axis "
                                    f"{axis})")
    tv.loop[p].parallel = ptype


def vectorize(tv, axis):
    _not_input("vectorize", tv)
    p = _axis("vectorize", tv, axis)
    _not_bound("vectorize", tv, p, axis, ParallelType.vectorize)
    a = tv.loop[p]
    where = f"(tensor {tv.name}, axis {axis})"
    if p != tv.ndim - 1:
        raise ScheduleError(f"vectorize: axis {p} is not the innermost loop axis of "
                            f"{tv.name} ({tv.ndim} loop axes) {where}")
    if a.is_reduction:
        raise ScheduleError(f"vectorize: cannot vectorize a reduction axis {where}")
    if not isinstance(a.extent, int):
        raise ScheduleError(f"vectorize: extent {a.extent} is not a constant; split by a "
                            f"constant first {where}")
    nbytes = a.extent * tv.dtype.itemsize
    if nbytes not in (1, 2, 4, 8, 16):
        raise ScheduleError(f"vectorize: {a.extent} x {tv.dtype} is {nbytes} bytes; a vector "
                            f"access is 1, 2, 4, 8 or 16 bytes {where}")
    innermost = [r for r in tv.root if not r.is_reduction and not r.is_broadcast]
    walk = a
    while walk.definition is not None:
        d = walk.definition
        if isinstance(d, Split):
            if walk is not d.inner:
                raise ScheduleError(f"vectorize: the axis is the outer piece of a split, "
                                    f"not contiguous in memory {where}")
            walk = d.input
        else:
            walk = d.inner
    if not innermost or walk is not innermost[-1]:
        raise ScheduleError(f"vectorize: the axis is not contiguous in memory: it does not "
                            f"come from the innermost axis of {tv.name} {where}")
    a.parallel = ParallelType.vectorize


def serial_grid_reduction(tv):
    _not_input("serial_grid_reduction", tv)
    if not isinstance(tv.definition, (ReductionOp, MatmulOp)):
        raise ScheduleError(f"serial_grid_reduction: {tv.name} is not defined by a reduction "
                            "or matmul")
    tv.serial_grid = True
