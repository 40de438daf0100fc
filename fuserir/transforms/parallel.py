"""Parallelization: bind loop axes to block/thread indices, vectorize, reduce across CTAs.

These transforms change no axis, only how one is run: a block or thread index, an unrolled
or vectorized loop, an mma tile, or (serial_grid_reduction, parallel_grid_reduction,
atomic_grid_reduction) a
reduction over a block index
carried out by the CTAs in turn. Each axis has one parallel type and each block/thread
index binds one axis of a tensor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ScheduleError
from ..ir.exprs import MatmulOp, ReductionOp
from ..ir.iterdomain import ParallelType, Split
from .common import _axis, _not_input, _ptype

if TYPE_CHECKING:
    from ..ir.tensor import TensorView


def _not_bound(op, tv, p, axis, ptype):
    """One parallel type per axis: a second one would silently override the first."""
    old = tv.loop[p].parallel
    if old is not ParallelType.serial and old is not ptype:
        raise ScheduleError(f"{op}: axis {axis} of {tv.name} is already parallelized as "
                            f"{old.value}; it cannot also be {ptype.value}")


def parallelize(tv: TensorView, axis: int, ptype: ParallelType | str) -> None:
    """Bind loop axis `axis` of `tv` to a parallel type (TensorView.parallelize).

    A block index (BIDx/y/z) or thread index (TIDx/y/z) runs the loop across CTAs or threads;
    unroll unrolls it; mma marks it part of the tensor-core instruction tile; vectorize runs
    vectorize's checks; serial (the default) leaves it a plain loop. Reduction axes may be
    parallelized too.

      axis    a loop axis number of tv; a negative one counts from the end
      ptype   a ParallelType or its name ("BIDx")

    Raises ScheduleError if tv is a fusion input, the axis is out of range, ptype is unknown,
    the axis already has another parallel type (set by parallelize, vectorize or a
    compute_at that shares it), or tv already binds the same block/thread index to another
    axis.

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(x: f32[M, N]) { y = relu(x)  output y }")
    >>> y = f.tensor("y")
    >>> y.split(1, 128)
    >>> print(y.describe())
    y: f32[M, N] global loop=[i{M} i{ceildiv(N, 128)} i{128}]
    >>> y.parallelize(0, "BIDx")
    >>> y.parallelize(2, "TIDx")
    >>> print(y.describe())
    y: f32[M, N] global loop=[iBIDx{M} i{ceildiv(N, 128)} iTIDx{128}]
    >>> y.parallelize(1, "TIDx")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: parallelize: y already binds TIDx to axis 2; each
        block/thread index binds one axis (axis 1)
    """
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


def vectorize(tv: TensorView, axis: int) -> None:
    """Access loop axis `axis` of `tv` as one vector of 1 to 16 bytes (TensorView.vectorize).

    The axis must be contiguous in memory: the innermost loop axis, derived from tv's
    innermost (non-broadcast) axis through inner pieces of splits. An async cache copies each
    vector with one cp.async; another copy between global and shared memory becomes vector
    loads and stores once lowering proves the elements consecutive and aligned in the
    producer too; a compute op becomes an unrolled loop of element accesses.

      axis    a loop axis number of tv; a negative one counts from the end

    Raises ScheduleError if tv is a fusion input, the axis is out of range, not the innermost,
    a reduction axis, of an extent that is not a constant, not 1, 2, 4, 8 or 16 bytes long
    (extent x dtype size), not contiguous in memory, or already of another parallel type.

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(x: f32[M, N]) { y = relu(x)  output y }")
    >>> y = f.tensor("y")
    >>> y.split(1, 4)
    >>> print(y.describe())
    y: f32[M, N] global loop=[i{M} i{ceildiv(N, 4)} i{4}]
    >>> y.vectorize(2)
    >>> print(y.describe())
    y: f32[M, N] global loop=[i{M} i{ceildiv(N, 4)} ivectorize{4}]
    >>> y.vectorize(1)  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: vectorize: axis 1 is not the innermost loop axis of y (3 loop
        axes) (tensor y, axis 1)
    """
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


def serial_grid_reduction(tv: TensorView) -> None:
    """Reduce across CTAs in turn: serial split-K (TensorView.serial_grid_reduction).

    `tv` is a reduction or matmul whose reduction axis is bound to BIDz. The CTAs of one
    output tile take turns on a global semaphore, in split order, accumulating f32 partials
    in a workspace; the last one writes the result (the grid_reductions pass). Without the
    BIDz axis lowering refuses the tensor.

    Raises ScheduleError if tv is a fusion input or is not defined by a reduction or matmul.

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(h: f16[M, N]) { r = sum(h, axes=[1])  output r }")
    >>> r = f.tensor("r")
    >>> r.split(1, 4, inner=False)
    >>> r.parallelize(1, "BIDz")
    >>> print(r.describe())
    r: f16[M] global loop=[i{M} rBIDz{4} r{ceildiv(N, 4)}]
    >>> r.serial_grid_reduction()
    >>> print(r.describe())
    r: f16[M] global loop=[i{M} rBIDz{4} r{ceildiv(N, 4)}] serial-grid
    >>> f.tensor("h").serial_grid_reduction()  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: serial_grid_reduction: h is a fusion input; inputs are read,
        not computed: schedule a cache of it (cache_after) instead
    """
    _grid_reduction("serial_grid_reduction", tv, "serial")


def parallel_grid_reduction(tv: TensorView) -> None:
    """Reduce across CTAs at once: split-K with the sum spread over the CTAs of a tile
    (TensorView.parallel_grid_reduction).

    `tv` is a reduction or matmul whose reduction axis is bound to BIDz. Every CTA of an
    output tile writes its f32 partials to a workspace and arrives on the tile's counter;
    when all have arrived, each sums a slice of the tile over the splits, in a fixed order
    (deterministic: the same bits every run), and arrives on a second counter; the last
    CTA waits for every slice and writes the result (the grid_reductions pass). A CTA
    waits for CTAs launched after it, so the whole grid must be resident at once: the
    launcher refuses a grid larger than the device holds.

    Raises ScheduleError if tv is a fusion input or is not defined by a reduction or matmul.

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(h: f16[M, N]) { r = sum(h, axes=[1])  output r }")
    >>> r = f.tensor("r")
    >>> r.split(1, 4, inner=False)
    >>> r.parallelize(1, "BIDz")
    >>> print(r.describe())
    r: f16[M] global loop=[i{M} rBIDz{4} r{ceildiv(N, 4)}]
    >>> r.parallel_grid_reduction()
    >>> print(r.describe())
    r: f16[M] global loop=[i{M} rBIDz{4} r{ceildiv(N, 4)}] parallel-grid
    """
    _grid_reduction("parallel_grid_reduction", tv, "parallel")


def atomic_grid_reduction(tv: TensorView) -> None:
    """Reduce across CTAs by atomic adds: split-K whose CTAs add their partials into the
    tile's sums (TensorView.atomic_grid_reduction). Opt-in: the adds land in an order the
    hardware picks, so a float sum's last bits may differ from run to run.

    `tv` is a sum or matmul whose reduction axis is bound to BIDz. Every CTA of an output
    tile adds its f32 partials into a workspace (red.global.add) and arrives on the tile's
    counter; the last CTA waits for all, reads the sums, stores zeros back for the next
    launch and writes the result (the grid_reductions pass). Like the parallel reduction
    it waits for CTAs launched after it: the launcher refuses a grid larger than the
    device holds. A max reduction is refused by lowering (there is no float max add).

    Raises ScheduleError if tv is a fusion input or is not defined by a reduction or matmul.

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(h: f16[M, N]) { r = sum(h, axes=[1])  output r }")
    >>> r = f.tensor("r")
    >>> r.split(1, 4, inner=False)
    >>> r.parallelize(1, "BIDz")
    >>> print(r.describe())
    r: f16[M] global loop=[i{M} rBIDz{4} r{ceildiv(N, 4)}]
    >>> r.atomic_grid_reduction()
    >>> print(r.describe())
    r: f16[M] global loop=[i{M} rBIDz{4} r{ceildiv(N, 4)}] atomic-grid
    """
    _grid_reduction("atomic_grid_reduction", tv, "atomic")


def cluster_grid_reduction(tv: TensorView) -> None:
    """Reduce across the CTAs of a thread-block cluster: split-K on sm_90 whose CTAs of an
    output tile are one cluster (TensorView.cluster_grid_reduction).

    `tv` is a reduction or matmul whose reduction axis is bound to BIDz, split at most 16
    ways (the cluster's CTAs: more than 8 need a device that allows the non-portable
    size). Every CTA writes its f32 partials to its own shared memory; after a cluster
    barrier each sums a run of the tile's elements over its peers' partials (read through
    distributed shared memory, in split order: deterministic) and stores them; a second
    cluster barrier keeps every CTA's shared memory alive until its peers have read it
    (the grid_reductions pass). No workspace, no semaphore, no co-residency beyond the
    cluster's, which the hardware guarantees.

    Raises ScheduleError if tv is a fusion input or is not defined by a reduction or matmul.

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(h: f16[M, N]) { r = sum(h, axes=[1])  output r }")
    >>> r = f.tensor("r")
    >>> r.split(1, 4, inner=False)
    >>> r.parallelize(1, "BIDz")
    >>> print(r.describe())
    r: f16[M] global loop=[i{M} rBIDz{4} r{ceildiv(N, 4)}]
    >>> r.cluster_grid_reduction()
    >>> print(r.describe())
    r: f16[M] global loop=[i{M} rBIDz{4} r{ceildiv(N, 4)}] cluster-grid
    """
    _grid_reduction("cluster_grid_reduction", tv, "cluster")


def _grid_reduction(what, tv, order):
    _not_input(what, tv)
    if not isinstance(tv.definition, (ReductionOp, MatmulOp)):
        raise ScheduleError(f"{what}: {tv.name} is not defined by a reduction or matmul")
    tv.grid_reduction = order
