"""Step `drop_syncs`: remove the barriers a caller names, to show what each prevents.

Not a pass of the normal pipeline: lowering runs it between insert_syncs and
verify_hazards only when codegen.compile(..., drop_syncs=(...)) names barrier ids
(sync1, ...); the verifier then refuses the kernel unless verify=False, in which case the
interpreter or the GPU shows the race the barrier was there for.
"""

from .. import kir
from ..errors import LoweringError


def run(ctx, kernel, ids):
    barriers = {s.sync_id: s for s in kir.walk(kernel.body)
                if isinstance(s, (kir.Barrier, kir.CpAsyncWait)) and s.sync_id}
    unknown = [i for i in ids if i not in barriers]
    if unknown:
        have = ", ".join(barriers) or "none"
        raise LoweringError(f"drop_syncs: kernel {kernel.name} has no barrier "
                            f"{', '.join(unknown)} (it has: {have})")

    def strip(stmts):
        stmts[:] = [s for s in stmts if not (isinstance(s, (kir.Barrier, kir.CpAsyncWait))
                                              and s.sync_id in ids)]
        for s in stmts:
            for body in s.bodies():
                strip(body)

    strip(kernel.body)
    return kernel
