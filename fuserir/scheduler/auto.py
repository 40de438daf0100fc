"""Automatic schedules for fusions that come without one (nvFuser's pointwise, reduction
and persistent-normalization schedulers, in miniature).

Each scheduler only calls the public transforms. `schedule_auto(fusion)` picks one by
what the fusion contains and raises ScheduleError when none fits, so that the caller
(codegen's segmentation) splits the fusion into kernels that each fit one:

* pointwise: a single output whose innermost axis is not known to be short is cut into
  16-byte vectors along that axis, LANES vectors of a row a warp (TIDx), VECTOR_ROWS rows
  a block (TIDy), each thread one vector: the inputs read at the output's own element
  (pointwise ops, casts, selects, slices from 0, broadcasts over any axis but the last)
  are loaded into registers as vectors (cache_after(local, consumers=...) where a tensor
  also reads one shifted), computed there, and the output stored as a vector (the
  executable runs a narrower variant where an array's rows are no whole number of
  vectors); a cat, pad or slice along the rows read at the output's element, whose
  inputs are unary ops, casts and slices of inputs (a rotary embedding's cat, a gated
  unit's halves), is itself vectorized: each vector one load of the input under the
  region holding it, the ops computed on it in registers. Other outputs are flattened, split into blocks of
  THREADS threads that each handle UNROLL elements a warp-width apart (so every access
  is coalesced); other reads
  (shifted, transposed, broadcast along the last axis) are element by element in either;
* transpose: a pointwise fusion with an input contiguous along another axis than its
  output (read through a permute) is tiled on both innermost axes, that input staged
  through a padded shared tile so that it is read and the output written coalesced
  (fuserir.scheduler.transpose; transpose_plan says why not where it does not apply);
* reduction and normalization: every tensor is viewed as [iteration, reduction] (the
  reduced axes merged into one); for an inner reduction one block handles a row, its
  threads striding the row and combining through a block reduction (where the fusion's
  one reduction has too few rows to fill the SMs and long ones, several blocks share a
  row, each summing a contiguous part, and a parallel grid reduction, the split-K's
  cross-CTA protocol, combines them: grid_splits; rows of at most WARP_ROW_MAX elements
  get a warp each instead, WARP_ROWS rows a block, combined by the warp's shuffles
  alone: reduction_plan); a reduction broadcast
  back into the row (softmax, layer norm) stays in the same block, inputs read by several
  loop nests are cached in shared memory (not one of one value a row, a saved mean: its
  copy would cost a barrier), and cheap intermediates used by several nests
  are recomputed rather than stored; for an outer reduction a block owns 32 neighbouring
  outputs (TIDx, so each warp reads a contiguous piece of a row) and 16 rows of threads
  (TIDy) stride down the reduced rows, then combine (where those strips are too few
  for the SMs, each strip's rows are split over CTAs writing f32 partial sums that a
  second kernel adds: reduction_plans.column_splits); a row's serial loop is unrolled
  by REDUCTION_UNROLL; an inner reduction over one axis whose rows an input runs along
  lays each thread's 16 bytes of neighbouring row elements side by side, and reads and
  writes the rows as vectors (fuserir.scheduler.row_vectors);
* a matmul: the tensor-core scheduler (fuserir.scheduler.matmul) with the parameters of
  matmul_heuristic (fuserir.scheduler.matmul_heuristic) for the sizes and device it will run on (the executable schedules per
  size class at run(): schedule_key says which size classes share a schedule; arrays too
  narrow or unaligned for its 16-byte copies take a variant with narrower copies). Where
  it does not apply (other epilogues, or the plan without special requirements,
  `persistent=False`, which the executable takes when a kernel would not fit the
  device's shared memory): one thread per output element, K serial.
"""

import math

from ..errors import ScheduleError
from ..ir.exprs import (AxisIndexOp, BinaryOp, BroadcastOp, CastOp, CatOp, ExpandOp, FullOp,
                        LoadStoreOp, MatmulOp, PadOp, PermuteOp, ReductionOp, ReshapeOp,
                        SliceOp, SqueezeOp, UnaryOp, WhereOp, row_chains)
from ..ir.tensor import MemoryType
from .. import device as devices, ops
from ..ir import extent as ext
from .reduction_plans import (OUTER_COLUMNS, WARP_ROW_MAX, WARP_ROWS, classify,
                              is_broadcast_back, plan_or_default, reduced_axes,
                              reduction_classes, reduction_plan, size_at)
from .row_vectors import VECTOR_BYTES, row_vector_width, row_vectors
from .transpose import schedule_transpose, transpose_plan, transposes

POINTWISE_THREADS = 128
UNROLL = 4
# VECTOR_BYTES (row_vectors): vectorized pointwise: bytes a thread loads of each input ...
LANES = 32               # ... vectors of one row a warp handles (TIDx) ...
VECTOR_ROWS = 4          # ... and rows a block handles (TIDy)
REDUCTION_THREADS = 512
REDUCTION_UNROLL = 8     # elements of a row a thread loads in one unrolled step
WARP = 32
NORMALIZATION_THREADS = 256
MATMUL_THREADS = 128
OUTER_ROWS = 16          # outer reductions: rows of threads (TIDy) striding down the
                         # reduced rows, beside OUTER_COLUMNS columns (TIDx)


def schedule_auto(fusion, persistent=True, sizes=None, device=None):
    """Schedule `fusion` in place; `persistent=False` refuses normalizations (so that the
    caller segments them, e.g. when a row does not fit in shared memory). `sizes` ({symbol:
    int}) and `device` (fuserir.device.Device) are what the schedule is chosen for: the
    sizes it will run at (unknown ones count as large) and the GPU it will run on."""
    if fusion.trace:
        raise ScheduleError(f"fusion {fusion.name} already has a schedule")
    _consumers_read_a_local_copy_of_outputs(fusion)
    exprs = fusion.exprs
    if any(isinstance(e, MatmulOp) for e in exprs):
        if not (persistent and _schedule_tensor_cores(fusion, sizes, device)):
            _schedule_matmul(fusion)
    elif any(isinstance(e, ReductionOp) for e in exprs):
        _schedule_reduction(fusion, persistent, sizes, device)
    else:
        plan = transpose_plan(fusion)
        if plan is None:
            _schedule_pointwise(fusion, sizes)
        else:
            _recompute_shared_intermediates(fusion, set())
            schedule_transpose(fusion, plan)
    return fusion


def _consumers_read_a_local_copy_of_outputs(fusion):
    """An output that other expressions read is computed into a local tensor, stored from
    there, and read from there: a thread reads its registers, never global memory that
    another thread of the kernel wrote (nothing would order the two)."""
    for out in list(fusion.outputs):
        uses = fusion.uses(out)
        if uses:
            local = out.cache_before(MemoryType.local)
            for use in uses:
                fusion.replace_input(use, out, local)


# -- pointwise -----------------------------------------------------------------------------


def _flatten(tv):
    while tv.ndim > 1:
        tv.merge(0)


def _schedule_pointwise(fusion, sizes=None):
    shapes = {tuple(str(e) for e in t.shape) for t in fusion.outputs}
    if len(shapes) > 1:
        raise ScheduleError(f"pointwise outputs of {fusion.name} differ in shape")
    _recompute_shared_intermediates(fusion, set())
    if _schedule_vectors(fusion, sizes):
        return
    for out in fusion.outputs:
        if out.ndim == 0:
            continue
        _flatten(out)
        out.split(0, POINTWISE_THREADS)
        out.split(0, UNROLL)
        out.parallelize(0, "BIDx")
        out.parallelize(1, "unroll")
        out.parallelize(2, "TIDx")


# Expressions whose output element reads each tensor input at its own index, or at the
# index with the broadcast axes left out (unless the expression's index maps shift it: a
# slice from a non-zero start, a pad, a cat).
_SAME_INDEX = (BinaryOp, BroadcastOp, CastOp, CatOp, LoadStoreOp, PadOp, SliceOp, UnaryOp,
               WhereOp)


def _read_at_output_index(fusion, out):
    """({input: the tensors that read it at `out`'s own element index}, every tensor read
    at it, `out` among them) for the inputs of `fusion` that some tensor reads so: through
    pointwise ops, casts, selects, unshifted slices and broadcasts only, its axes some of
    `out`'s in order, its last `out`'s last, of the same extents (a bias of [N] broadcast
    to [M, N] is read at the output's column, a mask [B, D] of [B, S, D] at its batch and
    column). A vector of `out` then reads a vector of each of them."""
    at = {out: list(range(out.rank))}   # tensor -> out's axis of each of its axes, or None
    readers = {}
    for e in reversed(fusion.exprs):
        o = e.output
        if at.get(o) is None:
            continue
        where = dict(zip(o.root, at[o])) if len(o.root) == len(o.shape_axes) else None
        for p in e.tensor_inputs:
            positions = None
            if where is not None and isinstance(e, _SAME_INDEX) and not e.index_maps(p):
                axis_of = {a: where[r] for r, a in e.root_map(p).items()}
                positions = [None if a.is_broadcast else axis_of.get(a)
                             for a in p.shape_axes]
                if any(x is None and not a.is_broadcast
                       for x, a in zip(positions, p.shape_axes)):
                    positions = None
            at[p] = positions if at.get(p, positions) == positions else None
            # the input's axes are out's in order, its last out's last (a vector of it is a
            # vector of out); what it lacks is a loop-only broadcast in out's merged rows
            if p.is_input and p.rank > 0 and positions is not None and \
                    None not in positions and positions == sorted(set(positions)) and \
                    positions[-1] == out.rank - 1 and \
                    all(a.extent == out.shape_axes[k].extent       # not a size-1 axis
                        for a, k in zip(p.shape_axes, positions)):  # read at index 0
                readers.setdefault(p, []).append(o)
    identity = list(range(out.rank))
    return readers, [t for t, positions in at.items() if positions == identity]


def _never_negative(extent):
    """Whether `extent` is non-negative by its form alone (sizes, constants, and sums,
    products and quotients of them), as lowering's index ranges will see it; an extent
    such as N / 2 - 3 is non-negative only by a run-time check."""
    if isinstance(extent, int):
        return extent >= 0
    if isinstance(extent, ext.Sym):
        return True
    if isinstance(extent, ext.Mul):
        return _never_negative(extent.lhs) and _never_negative(extent.rhs)
    if isinstance(extent, (ext.FloorDiv, ext.CeilDiv)):
        return _never_negative(extent.numerator) and _never_negative(extent.denominator)
    if isinstance(extent, ext.Linear):
        return extent.const >= 0 and all(c > 0 and _never_negative(t)
                                         for t, c in extent.terms)
    return False


def _vector_plan(fusion, sizes):
    """(output, {input: its readers at the output's element}, width) of the vectorized
    pointwise schedule of the module docstring at `sizes` (a symbol not given counts as
    LARGE), or None where it does not apply: several outputs, a broadcast innermost
    axis, or one shorter than a warp's vectors (LANES x width elements: where rows are
    short, most lanes would idle, and the flattened schedule keeps them busy) or, for a
    constant, no whole number of vectors."""
    if len(fusion.outputs) != 1:
        return None
    out = fusion.outputs[0]
    if out.rank == 0 or out.ndim != out.rank or out.shape_axes[-1].is_broadcast:
        return None
    readers, same_index = _read_at_output_index(fusion, out)
    width = VECTOR_BYTES // max(t.dtype.itemsize for t in [out, *readers])
    inner = out.shape_axes[-1].extent
    if isinstance(inner, int) and inner % width:
        return None
    if not _never_negative(inner) or size_at(inner, sizes or {}) < width * LANES:
        return None         # (lowering could not fold the vector's lane out of the former)
    selects = [t for t in same_index if _vector_select(t, width)]
    return out, readers, width, selects


def _schedule_vectors(fusion, sizes):
    """The vectorized pointwise schedule, if _vector_plan gives one (else False, the
    fusion untouched)."""
    plan = _vector_plan(fusion, sizes)
    if plan is None:
        return False
    out, readers, width, selects = plan
    computed = out.cache_before(MemoryType.local)
    # [.., D] -> [rows, D / (w L), L, w] -> [blocks, VECTOR_ROWS, L, w]
    out.split(-1, width)
    out.split(-2, LANES)
    for _ in range(out.rank - 2):
        out.merge(0)
    out.split(0, VECTOR_ROWS)
    if out.rank > 1:
        out.reorder({1: 2})
        out.merge(0)
    for i, ptype in enumerate(("BIDx", "TIDy", "TIDx")):
        out.parallelize(i, ptype)
    out.vectorize(3)
    for x, reading in readers.items():
        # (out's definition moved to `computed`); a tensor that reads x elsewhere
        # (shifted, broadcast along its rows) keeps reading x itself
        reading = list(dict.fromkeys(computed if t is out else t for t in reading))
        if len(reading) == len(fusion.uses(x)):
            vector = x.cache_after(MemoryType.local)
        else:
            vector = x.cache_after(MemoryType.local, consumers=reading)
        vector.compute_at(out, 3)
        vector.vectorize(-1)
    computed.compute_at(out, 3)
    if out in selects:                # (its definition moved to `computed`)
        computed.vectorize(-1)
    else:
        computed.parallelize(-1, "unroll")
    for select in selects:
        if select is not out:
            select.compute_at(out, 3)
            select.vectorize(-1)
    return True


def _vector_select(tv, width):
    """Is tv (read at the output's element) a cat or pad along its innermost axis, or a
    slice of the rows, whose inputs are each made from one fusion input by
    unary ops, casts and slices (fuserir.ir.exprs.row_chains), each fusion input's vector
    4, 8 or 16 bytes, and no offset a constant that is no multiple of the vector?
    Vectorized, such a tensor loads each vector of the fusion input under the region
    holding it at once and computes the ops on it in registers (the executable checks
    that the rows and the offsets, a slice's start or a boundary, allow the vector, and
    reads element by element where they do not)."""
    regions = row_chains(tv)
    if regions is None:
        return False
    offsets = [start for start, _ in regions] + [
        t.definition.starts[-1] for t in [tv] + [c for _, chain in regions if chain
                                               for c in chain[:-1]]
        if isinstance(t.definition, SliceOp)]
    if any(isinstance(o, int) and o % width for o in offsets):
        return False        # every call would take the element variant (x[:, 1:], ...)
    return all(width * chain[-1].dtype.itemsize in (4, 8, 16)
               for _, chain in regions if chain)


# -- reductions and normalizations ---------------------------------------------------------


def _to_rows(tv, axes):
    """[..] -> [iteration, reduction]: reduced axes moved last and merged, the rest merged."""
    kept = [i for i in range(tv.ndim) if i not in axes]
    order = {old: new for new, old in enumerate(kept + axes)}
    if any(old != new for old, new in order.items()):
        tv.reorder(order)
    for _ in range(len(axes) - 1):
        tv.merge(len(kept))
    for _ in range(len(kept) - 1):
        tv.merge(0)
    return len(kept) > 0


def _nests(fusion, tv):
    """How many consumers of tv are not inlined into one another: each is a loop nest."""
    return len(fusion.uses(tv))


def _recompute_shared_intermediates(fusion, reduced_set):
    """Give each extra consumer of a cheap full-shape intermediate its own copy of it, so
    that each loop nest recomputes it instead of storing a row."""
    changed = True
    while changed:
        changed = False
        for t in reversed(fusion.tensors):
            if (t.is_input or t.is_output or t in reduced_set
                    or isinstance(t.definition, (ReductionOp, MatmulOp))
                    or len(fusion.uses(t)) < 2):
                continue
            for use in fusion.uses(t)[1:]:
                fusion.replace_input(use, t, clone_definition(t))
            changed = True


def clone_definition(tv):
    """A new tensor computed by the same expression from the same inputs as tv."""
    expr = tv.definition
    return apply_like(expr, expr.inputs)


def apply_like(expr, inputs, fusion=None):
    """Build expr's operation again on `inputs` (tensors or scalars), in their fusion (or
    in `fusion`, for an expression with no tensor input: a full)."""
    if isinstance(expr, UnaryOp):
        if expr.op == "gelu":
            return ops.gelu(inputs[0], expr.approximate)
        return {**ops.UNARY, **ops.STATES}[expr.op](inputs[0])
    if isinstance(expr, BinaryOp):
        return ops.BINARY[expr.op](*inputs)
    if isinstance(expr, WhereOp):
        return ops.where(*inputs)
    if isinstance(expr, CastOp):
        return ops.cast(inputs[0], expr.output.dtype)
    if isinstance(expr, LoadStoreOp):
        return ops.set(inputs[0])
    if isinstance(expr, BroadcastOp):
        return ops.broadcast(inputs[0], expr.flags)
    if isinstance(expr, PermuteOp):
        return ops.permute(inputs[0], expr.dims)
    if isinstance(expr, AxisIndexOp):
        return ops.axis_index(inputs[0], expr.dim)
    if isinstance(expr, SqueezeOp):
        return ops.squeeze(inputs[0], expr.dims)
    if isinstance(expr, ExpandOp):
        return ops.expand(inputs[0], [a.extent for a in expr.output.root])
    if isinstance(expr, ReshapeOp):
        return ops.reshape(inputs[0], expr.shape)
    if isinstance(expr, SliceOp):
        return ops.slice(inputs[0], expr.starts, expr.ends, expr.steps)
    if isinstance(expr, PadOp):
        return ops.pad(inputs[0], expr.pad_widths, inputs[1])
    if isinstance(expr, CatOp):
        return ops.cat(inputs, expr.dim)
    if isinstance(expr, FullOp):
        return ops.full([a.extent for a in expr.output.root], inputs[0], expr.output.dtype,
                        fusion or expr.output.fusion)
    if isinstance(expr, ReductionOp):
        return {**ops.REDUCTIONS, **ops.STATES}[expr.op](inputs[0], list(expr.axes))
    if isinstance(expr, MatmulOp):
        return ops.matmul(inputs[0], inputs[1], expr.layout)
    raise ScheduleError(f"cannot rebuild {expr}")


def _broadcast_before_casts(fusion):
    """broadcast(cast(w)) -> cast(broadcast(w)) (and other unary ops), until no broadcast
    reads one: a layer norm's weight cast before its broadcast over the rows is a tensor
    of the reduced rank running along the reduced axis, which the reduction scheduler
    would take for one value a row; cast after the broadcast, it is of the full shape,
    computed where it is read. The same values: a unary op commutes with a broadcast.
    (Not a read of a welford state: a state is never broadcast.)"""
    changed = True
    while changed:
        changed = False
        for e in list(fusion.exprs):
            source = e.inputs[0] if isinstance(e, BroadcastOp) else None
            if source is None or source.is_input or source.is_output or e.output.is_output \
                    or not isinstance(source.definition, (UnaryOp, CastOp)) \
                    or source.definition.inputs[0].dtype.is_state \
                    or len(fusion.uses(source)) != 1:
                continue
            op = source.definition
            moved = apply_like(op, [ops.broadcast(op.inputs[0], list(e.flags))])
            for use in list(fusion.uses(e.output)):
                fusion.replace_input(use, e.output, moved)
            for node in (e, e.output, op, source):
                fusion.remove_node(node)
            changed = True
            break


def _schedule_reduction(fusion, persistent, sizes=None, device=None):
    _broadcast_before_casts(fusion)
    axes, rank = reduced_axes(fusion)
    inner = axes == list(range(rank - len(axes), rank))
    full, reduced = classify(fusion, axes, rank)
    broadcasts_back = any(is_broadcast_back(t, axes) for t in full)
    plan = reduction_plan(fusion, sizes, device)
    if broadcasts_back and not (inner and persistent):
        raise ScheduleError(f"{fusion.name} broadcasts a reduction back into its rows: one "
                            "kernel needs the row in a block (inner, persistent)")
    # a cheap intermediate several loop nests read is computed in each (two sums of one
    # product, a normalization's centred row): no row of it is stored
    _recompute_shared_intermediates(fusion, set(reduced))
    if broadcasts_back:
        for x in fusion.inputs:
            # (an input of one value a row, a layer norm's saved mean, is read as it is:
            # a shared copy would cost a barrier to save rereading one cached value)
            if len(fusion.uses(x)) > 1 and x.rank == rank and not all(
                    x.shape_axes[a].is_broadcast for a in axes):
                x.cache_after(MemoryType.shared)
    # again: the copies of shared intermediates and the caches of inputs are tensors too
    full = [t for t in fusion.tensors if not t.is_input and len(t.logical) == rank
            and (t.rank == rank or isinstance(t.definition, ReductionOp))]
    reduced = [t for t in fusion.tensors if not t.is_input and t not in full]
    threads = NORMALIZATION_THREADS if broadcasts_back else REDUCTION_THREADS
    # (one reduced axis: a vector of merged axes could straddle two of them)
    width = row_vector_width(fusion, rank) if inner and len(axes) == 1 and plan.splits == 1 \
        else 1
    # U elements (or vectors) of a lane's in one unrolled step: loads in flight, not one
    unroll = max(2, REDUCTION_UNROLL // width) if width > 1 else REDUCTION_UNROLL
    vectors, placed = row_vectors(fusion, rank, width) if width > 1 else ([], [])
    full += [c for c, _ in placed if c.rank == rank and c not in full]
    for t in full:
        has_rows = _to_rows(t, axes)
        if width > 1:
            # [I, R] -> [I, R / w, w]: a thread's w neighbouring elements of a row, which
            # the caches of the inputs read as one 16-byte vector
            t.split(-1, width)
        if plan.warp_rows:
            # [I, R (/ w, w)] -> [I / W, W, R / 32 U, U, 32 (, w)]: warp y of a block
            # strides row y
            t.split(-1 - (width > 1), WARP)
            t.split(-2 - (width > 1), unroll)
            t.split(0, WARP_ROWS)
            for i, ptype in ((0, "BIDx"), (1, "TIDy"), (3, "unroll"), (4, "TIDx")):
                t.parallelize(i, ptype)
            if width > 1 and t not in vectors:
                t.parallelize(5, "unroll")
        elif inner and width > 1:
            # [I, R / w, w] -> [I, R / T U w, U, T, w]
            t.split(-2, threads)
            t.split(-3, unroll)
            if has_rows:
                t.parallelize(0, "BIDx")
            t.parallelize(-3, "unroll")
            t.parallelize(-2, "TIDx")
            if t not in vectors:
                t.parallelize(-1, "unroll")
        elif inner:
            t.split(-1, threads)
            if has_rows:
                t.parallelize(0, "BIDx")
            t.parallelize(-1, "TIDx")
            if plan.splits > 1:
                # [.., R / T, T] -> [.., S, R / (T S), T]: CTA z of a row sums its part
                # (not unrolled: the cross-CTA proof's interleavings of its semaphore
                # operations grow past its bound at 16 splits)
                t.split(-2, plan.splits, inner=False)
                t.parallelize(-3, "BIDz")
                if isinstance(t.definition, ReductionOp):
                    t.parallel_grid_reduction()
            else:
                # [.., R / T U, U, T] (U unrolled, as above)
                t.split(-2, REDUCTION_UNROLL)
                t.parallelize(-2, "unroll")
        else:
            # [I, R] -> [I/32, 32, R/16 U, U, 16]: a warp reads 32 neighbouring columns of
            # a row, 16 rows of threads stride down the reduced rows, U rows a thread's
            # in one unrolled step (U loads in flight), then combine over TIDy; with S
            # column splits [I/32, 32, S, R/(16 U S), U, 16], CTA y summing the y-th part
            # of the rows (rfactored below)
            t.split(0, OUTER_COLUMNS)
            split = plan.column_splits > 1
            if split:
                t.split(2, plan.column_splits, inner=False)
                if not isinstance(t.definition, ReductionOp):
                    t.parallelize(2, "BIDy")
            t.split(2 + split, OUTER_ROWS)
            t.split(2 + split, REDUCTION_UNROLL)
            t.parallelize(0, "BIDx")
            t.parallelize(1, "TIDx")
            t.parallelize(3 + split, "unroll")
            t.parallelize(4 + split, "TIDy")
    for copy, beside in placed:
        copy.compute_at(beside, beside.ndim - 1)
    for t in vectors:
        t.vectorize(-1)
    if plan.column_splits > 1:
        for t in full:
            if isinstance(t.definition, ReductionOp):
                # kernel 1: each CTA's f32 partial sums [I, S]; kernel 2: t sums the S
                # partials of each column serially, a thread a column
                partial = t.rfactor([3, 4, 5])
                partial.set_memory_type(MemoryType.global_)
                partial.parallelize(2, "BIDy")
    for t in reduced:
        if t.ndim == 0:
            continue
        _flatten(t)
        if plan.warp_rows:
            t.split(0, WARP_ROWS)
            t.parallelize(1, "TIDy")
        elif not inner:
            t.split(0, OUTER_COLUMNS)
            t.parallelize(1, "TIDx")
        t.parallelize(0, "BIDx")
    if broadcasts_back:
        # Tensors several loop nests read are stored for the whole row, in shared memory.
        # (A reduction's result is already in every thread after the block reduction.)
        for t in full:
            if (not t.is_output and _nests(fusion, t) > 1
                    and not isinstance(t.definition, ReductionOp)
                    and t.memory_type is not MemoryType.shared):
                t.set_memory_type(MemoryType.shared)


# -- matmul ----------------------------------------------------------------------------------

def matmul_params(fusion, sizes=None, device=None, reasons=None):
    """The MatmulParams matmul_heuristic gives the fusion's matmul at `sizes` ({symbol:
    int}; a symbol not given counts as LARGE) on `device`, or None where the fusion has no
    matmul or the heuristic refuses it (operand dtypes, device). `reasons`: a list that
    receives why, in words."""
    from .matmul_heuristic import matmul_heuristic
    mm = next((e for e in fusion.exprs if isinstance(e, MatmulOp)), None)
    if mm is None:
        return None
    sizes = sizes or {}
    *batch_axes, m, n, k = (size_at(a.extent, sizes) for a in mm.output.root)
    out_dtype = fusion.outputs[0].dtype.value if len(fusion.outputs) == 1 else "f32"
    if len(batch_axes) > 1:
        # a TMA map has one axis past the box's two (TMA_RANKS): the mma.sync path
        device = devices.resolve(device).with_(tma=False)
        if reasons is not None:
            reasons.append(f"{len(batch_axes)} batch axes: more than TMA's maps hold, so "
                           "no TMA")
    try:
        return matmul_heuristic(m, n, k, layout=mm.layout,
                                dtypes=(mm.inputs[0].dtype.value, mm.inputs[1].dtype.value,
                                        out_dtype), device=device, reasons=reasons,
                                batch=math.prod(batch_axes))
    except ScheduleError as refused:
        if reasons is not None:
            reasons.append(f"no tensor cores: {refused}")
        return None


def schedule_key(fusion, sizes=None, device=None):
    """What the automatic schedule of `fusion` depends on at `sizes` on `device`, as
    (key, run-time scalars): two size classes with equal keys get the same schedule, so
    one compiled kernel serves both, each run passing its own scalars (a matmul's split-K
    factor). A matmul's schedule depends on the sizes (and, on Hopper, on whether TMA
    can read its operand arrays: device.tma); a pointwise fusion's on whether its rows
    are long enough for vectors; a reduction's on how many CTAs share a row."""
    params = matmul_params(fusion, sizes, device)
    if params is None:
        if any(isinstance(e, MatmulOp) for e in fusion.exprs):
            return None, {}
        if any(isinstance(e, ReductionOp) for e in fusion.exprs):
            return ("reduction", plan_or_default(fusion, sizes, device),
                    reduction_classes(fusion, sizes, device)), {}
        return ("pointwise vectors", _vector_plan(fusion, sizes) is not None), {}
    from .matmul import SPLITK
    key = tuple((f, getattr(params, f)) for f in params.__dataclass_fields__
                if f != "splitk_factor")
    return key, {SPLITK: params.splitk_factor}


def explain(fusion, sizes=None, device=None):
    """Lines saying which automatic schedule `fusion` takes at `sizes` on `device`, and
    why (`fuserir inspect`)."""
    exprs = fusion.exprs
    if not any(isinstance(e, MatmulOp) for e in exprs):
        return _explain_without_matmul(fusion, sizes, device)
    reasons = []
    params = matmul_params(fusion, sizes, device, reasons)
    if params is None:
        return reasons + ["one thread per output element, K serial"]
    return [f"the tensor-core matmul scheduler: {params}"] + reasons


def _explain_without_matmul(fusion, sizes, device):
    same = "its schedule does not depend on the sizes"
    transposed = ", ".join(t.name for t in transposes(fusion))
    if any(isinstance(e, ReductionOp) for e in fusion.exprs):
        plan = plan_or_default(fusion, sizes, device)
        if plan.splits > 1:
            how = (f": each row split over {plan.splits} CTAs (too few rows to fill the "
                   "SMs), combined by a parallel grid reduction")
        elif plan.column_splits > 1:
            how = (f": each strip of {OUTER_COLUMNS} columns split over "
                   f"{plan.column_splits} CTAs (too few strips to fill the SMs), their f32 "
                   "partial sums added by a second kernel")
        elif plan.warp_rows:
            how = (f": a warp a row, {WARP_ROWS} rows a block (rows of at most "
                   f"{WARP_ROW_MAX} elements)")
        else:
            how = " (no row split over CTAs at these sizes)"
        lines = [f"the reduction scheduler{how}"]
        if transposed:
            lines.append(f"the transpose {transposed} is not staged through shared memory: "
                         "the transpose scheduler takes no reduction")
        return lines
    reasons = []
    plan = transpose_plan(fusion, reasons)
    if plan is None:
        vectors = _vector_plan(fusion, sizes)
        how = (f"16-byte vectors of {vectors[0].name}'s rows" if vectors else
               "flattened: several outputs, or rows too short for a warp of vectors")
        return [f"the pointwise scheduler ({how})"] + reasons
    out, staged, a = plan
    return [f"the transpose scheduler ({same}): {out.name} tiled on its axes {a} and "
            f"{out.rank - 1}, {', '.join(x.name for x in staged)} staged through padded "
            "shared tiles"]


def _schedule_tensor_cores(fusion, sizes, device):
    """schedule_matmul with the heuristic's parameters for `sizes` on `device`; False
    (fusion untouched) where the tensor-core scheduler does not apply."""
    from .matmul import schedule_matmul
    params = matmul_params(fusion, sizes, device)
    if params is None:
        return False
    try:
        schedule_matmul(fusion, params, device)
    except ScheduleError:
        return False
    return True


def _schedule_matmul(fusion):
    for e in fusion.exprs:
        if isinstance(e, ReductionOp):
            raise ScheduleError(f"{fusion.name} mixes a matmul with other reductions")
    for t in fusion.tensors:
        if t.is_input:
            continue
        if t.rank != 2:
            raise ScheduleError(f"{t.name} is not a [M, N] tensor of the matmul epilogue")
        t.merge(0)
        t.split(0, MATMUL_THREADS)
        t.parallelize(0, "BIDx")
        t.parallelize(1, "TIDx")
