"""Pass `predicates`: guard each store that could touch an element it must not.

Three kinds of guard, none where provably unnecessary, nor around a store into the
thread's own registers that reads only registers and folds nothing into a reduction (it
touches no memory, and what it writes past an edge is never stored or summed):
* bounds: the index of an axis that a split divides unevenly (not provably divisible)
  past that axis's extent: the last tile of the split (where a broadcast is merged into
  the split axis, a loop of the consumer's larger extent: the indices of the real axes
  under it past theirs). This applies to every split in
  the history, not only splits of root axes: an uneven split of an inner piece makes
  its iterations overlap the next piece's, so that two threads would compute (and write)
  one element (nvFuser's non-divisible split predicates). The bound of a split's outer
  piece is left out where the split's input is bounded too, which implies it;
* thread extents: an axis bound to a thread/block index whose extent is smaller than the
  launch dimension (one index type bound to different extents in different tensors, or
  blockDim.x rounded up to whole warps for a block reduction);
* redundant writes (as in nvFuser): a shared or global tensor that is not
  parallelized on a thread index the block uses is written by thread 0 along it, the
  other threads skip; a global tensor not parallelized on a block index used by the grid
  is written by block 0 along it. A warp-specialized copy has no guard along its
  warp_specialize index: lowering.support.warp_specialized runs its copies in the producer warp
  group alone.
Each guarded Store is wrapped in its own IfThenElse, so a guard never encloses more than
one store and sync insertion can always place a barrier between two statements.

Out of bounds, an async copy is not skipped but zero-fills its bytes (the bounds become
its src-size, as a pipeline's tail needs). Its element fallback (no cp.async moves 1 or
2 bytes) and the element copies of a tile the tensor cores read (through ldmatrix or
wgmma) do the same: the store writes `bounds ? value : 0` (zero_filled says which; a vector copy of such a tile stores a
vector of zeros in its guard's else branch); only thread and redundant-write guards skip
them.
"""

from fuserir.ir.exprs import LoadStoreOp
from fuserir.ir.iterdomain import ParallelType, Split, history, roots_of
from fuserir.ir.tensor import MemoryType

from .. import kir
from ..kir import visit as kir_visit
from ..support.analysis import (BLOCK_TYPES, THREAD_TYPES, is_async_copy, mma_kind,
                                mma_positions)
from ..contract import Pass


def _divisible(split):
    e, f = split.input.extent, split.factor
    return isinstance(e, int) and isinstance(f, int) and e % f == 0


def _thread_guard(cond):
    """A guard on a thread or block index alone (extent or redundant write), not a bound."""
    return isinstance(cond, kir.BinOp) and isinstance(cond.a, kir.Special)


def _free_loop_vars(ctx, expr):
    loop_vars = {id(v) for v in ctx.loop_vars.values()}
    return {id(e) for e in kir.walk_expr(expr) if id(e) in loop_vars}


def _loop_vars_enclosing(ctx, tv):
    return {id(ctx.loop_index(tv, i)) for i in range(tv.ndim)}


def _special(ctx, ptype):
    kind = kir.SpecialKind.threadIdx if ptype in THREAD_TYPES else kir.SpecialKind.blockIdx
    return kir.Special(kind, ptype.value[-1], ctx.index_dtype)


def conditions(ctx, info, launch):
    tv, role = info.tv, info.role
    conds = []
    # A fully inlined tensor computes what its consumer reads, so the consumer's bounds are
    # exactly the ones it needs (its own splits may be replays over a larger loop).
    bounded = ctx.inline_target(tv)
    index = info.root_index if bounded is tv else ctx.root_indices(bounded)
    splits = [t for t in history(bounded.loop) if isinstance(t, Split)]
    shared = {id(t) for t in history(bounded.loop[:bounded.compute_at_pos or 0])}
    bounds = {}
    for t in splits:
        split_axis = t.input
        if _divisible(t) or split_axis.is_broadcast:
            continue
        if split_axis.is_reduction and bounded is tv and role != "accumulate":
            continue     # a reduction's init and final store sit outside its reduction loops
        below = roots_of(split_axis)
        own = set(bounded.root) | set(bounded.logical)
        if any(r.is_broadcast and (r not in own or id(t) in shared) for r in below):
            # A broadcast merged into the split axis (compute_at's loop-only b{1} for a
            # consumer axis tv lacks, or tv's own broadcast under a loop it shares with
            # its consumer: a persistent kernel's tiles of a bias): the shared loop runs
            # over the consumer's larger extent, which the axis's own extent does not
            # bound; the real axes under it are bounded instead (their indices wrap
            # within them).
            for r in below:
                if not r.is_broadcast and r in index:
                    bounds[r] = ctx.binop("lt", index[r], ctx.extent(r.extent))
            continue
        bounds[split_axis] = ctx.binop("lt", index[split_axis], ctx.extent(split_axis.extent))
    if bounded is not tv:
        # The consumer's guards on loops this statement does not run inside do not apply.
        in_scope = {id(v) for v in ctx.loop_vars.values()} & _loop_vars_enclosing(ctx, tv)
        bounds = {a: c for a, c in bounds.items() if _free_loop_vars(ctx, c) <= in_scope}
    # The outer piece's bound is implied by its split input's: index(input) = index(outer)
    # * extent(inner) + index(inner) >= extent(input) once index(outer) >= extent(outer).
    implied = {t.outer for t in splits if t.input in bounds}
    for axis, cond in bounds.items():
        if axis not in implied and all(kir.format_expr(cond) != kir.format_expr(c)
                                       for c in conds):
            conds.append(cond)
    bound_here = set()
    if mma_positions(tv):
        bound_here.add(ParallelType.TIDx)   # the lanes hold the instruction tile's elements
    if ctx.grid_reduced:
        bound_here.add(ParallelType.BIDz)   # the grid reduction picks the CTA that writes
    if tv.warp_specialized is not None:
        bound_here.add(tv.warp_specialized)  # its copies run in one warp group: the producer
    for i, axis in enumerate(tv.loop):
        ptype = ctx.concrete_axis(tv, i).parallel
        if ptype not in THREAD_TYPES + BLOCK_TYPES or axis.is_broadcast:
            continue
        if role != "accumulate" and axis.is_reduction:
            continue
        bound_here.add(ptype)
        extent = ctx.extent(ctx.concrete_axis(tv, i).extent)   # the loop's extent
        if kir.format_expr(launch[ptype]) != kir.format_expr(extent):
            conds.append(ctx.binop("lt", _special(ctx, ptype), extent))
    if info.memory is not kir.Memory.local and role != "accumulate":
        used = [p for p in THREAD_TYPES if ctx.bound[p]]
        if info.memory is kir.Memory.global_:
            used += [p for p in BLOCK_TYPES if ctx.bound[p]]
        for ptype in used:
            if ptype not in bound_here:
                conds.append(ctx.binop("eq", _special(ctx, ptype), ctx.const(0)))
    return conds


def zero_filled(tv):
    """Do tv's elements outside its producer's bounds read as zero? True for an async copy
    (a cp.async past the end zero-fills: src-size 0), and so for its element fallback,
    which stores 0 there instead of skipping the store; and for a shared tile that an
    ldmatrix cache or a wgmma reads: the tensor cores read whole tiles, the K tail
    included, so a skipped element would add whatever its bytes held before. (A matmul
    that reads shared tiles directly, without tensor cores, guards each product by the
    bounds, so it needs no zeros.)"""
    if is_async_copy(tv):
        return True
    return tv.memory_type is MemoryType.shared and any(
        (isinstance(c.definition, LoadStoreOp) and c.definition.ldmatrix)
        or mma_kind(c) == "wgmma" for c in tv.fusion.consumers(tv))


def _bounds_apart(ctx, conds):
    """(the conjunction of the bounds among `conds` or None, the thread guards)."""
    bounds = [c for c in conds if not _thread_guard(c)]
    inside = None
    for c in bounds:
        inside = c if inside is None else ctx.binop("and", inside, c)
    return inside, [c for c in conds if _thread_guard(c)]


def _reads_registers_only(store):
    """Does `store` read nothing but registers (local buffers and constants)?"""
    return all(x.buffer.memory is kir.Memory.local for e in kir.expressions(store)
               for x in kir.walk_expr(e) if isinstance(x, kir.Load))


class _Guard(kir_visit.StmtMutator):
    """Each store and async copy that needs guards, guarded (or zero-filled)."""

    def __init__(self, ctx, launch):
        self.ctx, self.launch = ctx, launch

    def mutate_stmt(self, s):
        info = self.ctx.store_info.get(s)
        if info is None:
            return self.generic_mutate(s)
        if info.memory is kir.Memory.local and info.role != "accumulate" and \
                _reads_registers_only(s):
            # the thread's own registers from its own registers (an accumulator's
            # identity, its copy for the epilogue, a pointwise op on them): nothing past
            # an edge is read, and an element past it is never stored to memory nor
            # folded into a reduction (an accumulation keeps its guard).
            # Unguarded, each such array is written whole, so it does not stay live
            # across a persistent kernel's tiles for the elements a guard would skip
            return s
        conds = conditions(self.ctx, info, self.launch)
        inside, guards = _bounds_apart(self.ctx, conds)
        if inside is not None:
            # Out of bounds an async copy reads nothing and zero-fills (as a pipeline's
            # tail does), and so does an element copy of a tile a matmul reads
            # (zero_filled); thread and redundant-write guards still skip them.
            store_zeros = info.role == "compute" and zero_filled(info.tv)
            filled = s.zero_filled_unless(inside, store_zeros, self.ctx.index_dtype)
            if filled is not None:
                return self._under(guards, filled)
        return self._under(conds, s)

    def _under(self, conds, s):
        """s under one IfThenElse of the conjunction of conds (s itself when none)."""
        if not conds:
            return s
        cond = conds[0]
        for c in conds[1:]:
            cond = self.ctx.binop("and", cond, c)
        return kir.IfThenElse(cond, [s])


def run(ctx, kernel):
    launch = dict(zip(THREAD_TYPES, kernel.launch.block))
    launch.update(zip(BLOCK_TYPES, kernel.launch.grid))
    kernel.body = _Guard(ctx, launch).mutate(kernel.body)
    return kernel


PASS = Pass("predicates", run, __doc__,
            reads=("kernel", "vector_axes", "bound", "grid_reduced", "store_info"),
            why="one guard per store, so a barrier can always go between two statements")

