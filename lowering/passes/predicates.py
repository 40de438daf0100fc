"""Pass `predicates`: guard each store that could touch an element it must not.

Three kinds of guard, none where provably unnecessary:
* bounds: a root index past its extent, possible where a split in its history is not
  provably divisible (the last tile of a non-divisible split);
* thread extents: an axis bound to a thread/block index whose extent is smaller than the
  launch dimension (one index type bound to different extents in different tensors, or
  blockDim.x rounded up to whole warps for a block reduction);
* redundant writes (DESIGN.md section 4): a shared or global tensor that is not
  parallelized on a thread index the block uses is written by thread 0 along it, the
  other threads skip; a global tensor not parallelized on a block index used by the grid
  is written by block 0 along it.
Each guarded Store is wrapped in its own IfThenElse, so a guard never encloses more than
one store and sync insertion can always place a barrier between two statements.
"""

from fuserir.ir.iterdomain import Split, history

from .. import kir
from ..analysis import BLOCK_TYPES, THREAD_TYPES


def _divisible(split):
    e, f = split.input.extent, split.factor
    return isinstance(e, int) and isinstance(f, int) and e % f == 0


def _needs_bound(tv, root):
    for t in history(tv.loop):
        if isinstance(t, Split) and not _divisible(t) and root in _roots(t.input):
            return True
    return False


def _roots(axis):
    if axis.definition is None:
        return {axis}
    return set().union(*(_roots(i) for i in axis.definition.inputs))


def _special(ctx, ptype):
    kind = kir.SpecialKind.threadIdx if ptype in THREAD_TYPES else kir.SpecialKind.blockIdx
    return kir.Special(kind, ptype.value[-1], ctx.index_dtype)


def conditions(ctx, info, launch):
    tv, role = info.tv, info.role
    conds = []
    roots = tv.root if role == "accumulate" else [r for r in tv.root if not r.is_reduction]
    for r in roots:
        if not r.is_broadcast and _needs_bound(tv, r):
            conds.append(ctx.binop("lt", info.root_index[r], ctx.extent(r.extent)))
    bound_here = set()
    for i, axis in enumerate(tv.loop):
        ptype = ctx.concrete_axis(tv, i).parallel
        if ptype not in THREAD_TYPES + BLOCK_TYPES or axis.is_broadcast:
            continue
        if role != "accumulate" and axis.is_reduction:
            continue
        bound_here.add(ptype)
        extent = ctx.extent(axis.extent)
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


def _guard(ctx, stmts, launch):
    out = []
    for s in stmts:
        for body in s.bodies():
            body[:] = _guard(ctx, body, launch)
        info = ctx.store_info.get(s) if isinstance(s, kir.Store) else None
        conds = conditions(ctx, info, launch) if info is not None else []
        if conds:
            cond = conds[0]
            for c in conds[1:]:
                cond = ctx.binop("and", cond, c)
            s = kir.IfThenElse(cond, [s])
        out.append(s)
    return out


def run(ctx, kernel):
    launch = dict(zip(THREAD_TYPES, kernel.launch.block))
    launch.update(zip(BLOCK_TYPES, kernel.launch.grid))
    kernel.body = _guard(ctx, kernel.body, launch)
    return kernel


