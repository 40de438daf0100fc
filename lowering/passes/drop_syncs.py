"""Step `drop_syncs`: remove the syncs a caller names, to show what each prevents.

Not a pass of the normal pipeline: lowering runs it between insert_syncs and
verify_hazards only when codegen.compile(..., drop_syncs=(...)) names barrier ids
(sync1, ...; ctx.dropped_syncs); the verifier then refuses the kernel unless verify=False,
in which case the interpreter or the GPU shows the race the barrier was there for.
"""

from .. import kir
from ..kir import visit as kir_visit
from ..contract import Pass
from ..errors import LoweringError


class _Strip(kir_visit.StmtMutator):
    def __init__(self, ids):
        self.ids = ids

    def mutate_stmt(self, s):
        if getattr(s, "sync_id", None) in self.ids:
            return None
        return super().mutate_stmt(s)


def run(ctx, kernel):
    ids = ctx.dropped_syncs
    # every inserted sync: barriers, cp.async waits, and the async protocol's fences,
    # waits and named barriers
    barriers = {s.sync_id: s for s in kir.walk(kernel.body) if getattr(s, "sync_id", None)}
    unknown = [i for i in ids if i not in barriers]
    if unknown:
        have = ", ".join(barriers) or "none"
        raise LoweringError(f"drop_syncs: kernel {kernel.name} has no barrier "
                            f"{', '.join(unknown)} (it has: {have})")
    kernel.body[:] = _Strip(ids).mutate(kernel.body)
    return kernel


PASS = Pass("drop_syncs", run, __doc__, reads=("kernel", "sync_ids"), on_request=True,
            why="between insert_syncs and verify_hazards, only when asked: to show what a "
                "barrier prevents")
