"""Pass `insert_syncs`: insert the barriers that order every shared-memory hazard.

It runs after allocation (so it reasons on physical buffers) and after predication (so it
sees the final control flow). Repeatedly, it asks the hazard analysis (lowering.hazards)
for the first unordered conflict and places one barrier for it:
* a conflict within one pass through the code gets a barrier in the innermost statement
  list that holds both accesses, right before the statement holding the later access:
  as late as possible, and as far out as possible (between two loop nests rather than
  inside the second);
* a loop-carried conflict gets a barrier at the end of the innermost list holding both,
  inside the loop that carries it.
A barrier never goes under thread-dependent control flow; where it would have to, lowering
refuses the kernel. One barrier often orders several hazards; afterwards every barrier that
the others make redundant is removed. Each barrier left gets an id (sync1, sync2, ... in
program order) and the list of hazards it orders: exactly those that appear when it alone
is dropped, so every barrier is necessary by construction.
"""

from ..errors import HazardError

from .. import kir
from ..hazards import find_hazards, path_to, thread_dependent
from .verify_hazards import to_hazards


def _place(body, found):
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
    barrier = kir.Barrier()
    if found.loop is not None:
        stmts.append(barrier)
    else:
        stmts.insert(index, barrier)
    return barrier


def _unplaceable(found, why):
    hazards = to_hazards([found])
    hazards[0].detail = why
    return HazardError(hazards)


def _detach(body, barrier):
    stmts, index, _ = path_to(body, barrier)[-1]
    del stmts[index]
    return stmts, index


def run(ctx, kernel):
    inserted = []
    while True:
        found = find_hazards(kernel.body)
        if not found:
            break
        f = found[0]
        if f.first.stmt is f.second.stmt and f.loop is None:
            raise _unplaceable(f, "two threads conflict within one statement; no barrier "
                               "can order them")
        inserted.append(_place(kernel.body, f))
    for barrier in reversed(inserted):
        stmts, index = _detach(kernel.body, barrier)
        if find_hazards(kernel.body):
            stmts.insert(index, barrier)
    barriers = [s for s in kir.walk(kernel.body) if isinstance(s, kir.Barrier)
                and s in inserted]
    for n, barrier in enumerate(barriers, 1):
        barrier.sync_id = f"sync{n}"
        stmts, index = _detach(kernel.body, barrier)
        reasons = {}
        for f in find_hazards(kernel.body):
            reason = f.reason()
            reasons.setdefault(str(reason), reason)
        barrier.reasons = list(reasons.values())
        stmts.insert(index, barrier)
    return kernel
