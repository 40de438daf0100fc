"""Pass `insert_syncs`: insert the barriers that order every shared-memory hazard.

It runs after allocation (so it reasons on physical buffers) and after predication (so it
sees the final control flow). Repeatedly, it asks the hazard analysis (lowering.verify.hazards)
for the first unordered conflict and places one barrier for it:
* a conflict within one pass through the code gets a barrier in the innermost statement
  list that holds both accesses, right before the statement holding the later access:
  as late as possible, and as far out as possible (between two loop nests rather than
  inside the second);
* a loop-carried conflict gets a barrier at the end of the innermost list holding both,
  inside the loop that carries it;
* unless a place right after a cp.async wait on the way into the later access also orders
  it and leaves fewer hazards: there one barrier publishes what the wait landed and
  separates what came before (a pipeline's RAW and loop-carried WAR, with one barrier);
* a copy still pending at the end of the kernel gets a drain (commit, wait_group 0) as the
  kernel's last statement.
A barrier never goes under thread-dependent control flow; where it would have to, lowering
refuses the kernel. One barrier often orders several hazards; afterwards every barrier that
the others make redundant is removed. Each barrier left gets an id (sync1, sync2, ... in
program order) and the list of hazards it orders: exactly those that appear when it alone
is dropped, so every barrier is necessary by construction.

A kernel of Hopper's async protocol (TMA, wgmma, mbarriers: kir.uses_async_protocol) gets
its synchronization from lowering.verify.async_syncs instead, which asks the Hopper verifier
(the sm_80 analysis does not see TMA boxes or wgmma operands): wgmma.fence and
fence.proxy.async where the async proxy needs them, named barriers within a role. Those
it places get ids the same way.

All these questions are about one body, give or take synchronization statements: a single
lowering.verify.hazards.HazardAnalysis answers them, analysing again only what follows a change.
"""

from .. import kir
from ..verify.async_syncs import insert_async_syncs
from ..contract import Pass
from ..errors import HazardError
from ..verify.hazards import END, HazardAnalysis, path_to, thread_dependent
from .verify_hazards import to_hazards


def _cp_async_wait(effects):
    """Does it retire cp.async groups (a cp.async.wait_group)?"""
    group = effects.group
    return group is not None and group.kind == "cp.async" and group.op == "wait"

def _place(analysis, body, found):
    """Insert the synchronization one hazard needs; returns the inserted statements. An
    async-pending hazard needs a drain first: commit what is issued (an empty group is
    legal) and wait for every group, then the barrier that makes the landed bytes visible
    to the other threads."""
    if found.second.stmt is END:
        # A copy still pending when the kernel ends: drain it (no thread reads it after).
        unit = [kir.CpAsyncCommit(), kir.CpAsyncWait(0)]
        body.extend(unit)
        return unit
    first = path_to(body, found.first.stmt)
    second = path_to(body, found.second.stmt)
    depth = 0
    while (depth + 1 < min(len(first), len(second))
           and first[depth][0] is second[depth][0] and first[depth][1] == second[depth][1]):
        depth += 1
    stmts, index, owner = second[depth]
    if isinstance(owner, kir.IfThenElse) and thread_dependent(owner.cond):
        raise _unplaceable(found, "a barrier would have to go under thread-dependent "
                           "control flow")
    unit = [kir.Barrier()]
    if found.kind is kir.HazardKind.ASYNC:
        unit = [kir.CpAsyncCommit(), kir.CpAsyncWait(0)] + unit
    at = len(stmts) if found.loop is not None else index
    if found.kind is not kir.HazardKind.ASYNC:
        places = [(stmts, at)] + _after_waits(second, depth)
        stmts, at = _best_position(analysis, body, found, places, unit)
    stmts[at:at] = unit
    return unit


def _after_waits(second, depth):
    """Other places that order the hazard: right after a cp.async wait on the way into the
    later access (where copies land for their own threads, so one barrier there publishes
    them; a barrier before that wait would not order a copy it retires)."""
    places = []
    for d in range(depth, len(second)):
        stmts, index, owner = second[d]
        if isinstance(owner, kir.IfThenElse) and thread_dependent(owner.cond):
            break
        places += [(stmts, p) for p in range(1, index + 1)
                   if _cp_async_wait(stmts[p - 1].effects())]
    return places


def _best_position(analysis, body, found, places, unit):
    """The place that orders `found` and leaves the fewest hazards (the first on a tie)."""
    best, fewest = places[0], None
    for stmts, at in places:
        stmts[at:at] = unit
        left = analysis.find(body)
        del stmts[at:at + len(unit)]
        if any(f.key() == found.key() for f in left):
            continue
        if fewest is None or len(left) < fewest:
            best, fewest = (stmts, at), len(left)
    return best


def _unplaceable(found, why):
    hazards = to_hazards([found])
    hazards[0].detail = why
    return HazardError(hazards)


def _detach(body, stmt):
    stmts, index, _ = path_to(body, stmt)[-1]
    del stmts[index]
    return stmts, index


def _reasons(found):
    reasons = {}
    for f in found:
        reason = f.reason()
        reasons.setdefault(str(reason), reason)
    return list(reasons.values())


def _name_async_syncs(kernel, memo):
    """insert_async_syncs, then an id for each statement it placed (program order)."""
    placed = {id(s) for s in insert_async_syncs(kernel, memo)}
    syncs = [s for s in kir.walk(kernel.body) if id(s) in placed]
    for n, sync in enumerate(syncs, 1):
        sync.sync_id = f"sync{n}"
    return kernel


def run(ctx, kernel):
    if kir.uses_async_protocol(kernel):
        return _name_async_syncs(kernel, ctx.proofs)
    analysis = HazardAnalysis()
    inserted = []
    while True:
        found = analysis.find(kernel.body)
        if not found:
            break
        f = found[0]
        if len(inserted) > 4 * len(list(kir.walk(kernel.body))):
            raise _unplaceable(f, "sync insertion does not converge (internal error)")
        if f.first.stmt is f.second.stmt and f.loop is None and not f.first.pending:
            raise _unplaceable(f, "two threads conflict within one statement; no barrier "
                               "can order them")
        inserted.append(_place(analysis, kernel.body, f))
    # Drop every inserted unit the others make redundant.
    for unit in reversed(inserted):
        places = [_detach(kernel.body, stmt) for stmt in reversed(unit)]
        if analysis.find(kernel.body):
            for (stmts, index), stmt in zip(reversed(places), unit):
                stmts.insert(index, stmt)
    # Name the barriers and waits left, in program order, and record why each exists: the
    # hazards that appear when it alone is dropped.
    kept = {id(stmt) for unit in inserted for stmt in unit}
    syncs = [s for s in kir.walk(kernel.body) if id(s) in kept
             and (_cp_async_wait(s.effects()) or s.effects().order is not None)]
    for n, sync in enumerate(syncs, 1):
        sync.sync_id = f"sync{n}"
        stmts, index = _detach(kernel.body, sync)
        sync.reasons = _reasons(analysis.find(kernel.body))
        stmts.insert(index, sync)
    return kernel


PASS = Pass("insert_syncs", run, __doc__, reads=("kernel",), provides=("sync_ids",),
            optional=True,
            why="runs on final control flow and physical buffers: syncs are planned after "
                "allocation and aliasing, and after pipeline expansion (docs/hazards.md)")
