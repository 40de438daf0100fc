"""Pass `verify_hazards`: refuse a kernel that the hazard analysis cannot prove safe.

The last pass. It re-runs the hazard analysis on the final kernel IR, after sync
insertion and after any barrier the caller dropped (`drop_syncs`), and raises
codegen.HazardError listing every unordered conflict and every barrier under
thread-dependent control flow. A kernel of Hopper's async protocol is proved by
lowering.verify.async_protocol instead (mbarrier phases, TMA and wgmma in flight, the async
proxy's fences, and the generic accesses between them). A kernel with a workspace or a
semaphore also has its protocol between blocks proved (lowering.verify.grid_protocol: the
split-K turnstile, for every split factor and grid size), a kernel with cluster barriers
or cluster loads the order between the CTAs of a cluster
(lowering.verify.cluster_protocol, for every cluster size), and their findings join the
others. `verify=False` skips it, so that the interpreter (or the GPU) can show what a
missing barrier does.
"""

from .. import kir
from ..verify.async_protocol import verify_async_protocol
from ..verify.cluster_protocol import check_cluster_protocol
from ..verify.grid_protocol import check_grid_protocol
from ..contract import Pass
from ..errors import Hazard, HazardError
from ..verify.hazards import divergent_barriers, find_hazards


def _point(stmt):
    return f"{stmt.label}: {kir.format_stmt(stmt)}"


def to_hazards(found):
    """Hazards for a report: one per pair of statements and kind (a conflict that is also
    loop-carried through enclosing loops is reported once, direct if it is direct)."""
    hazards, seen = [], set()
    for f in found:
        key = (id(f.first.stmt), id(f.second.stmt), f.kind)
        if key in seen:
            continue
        seen.add(key)
        buffers = "/".join(dict.fromkeys((f.first.buffer.name, f.second.buffer.name)))
        detail = f"loop-carried through loop {f.loop.var.name}" if f.loop is not None else ""
        hazards.append(Hazard(f.kind.value, buffers, _point(f.first.stmt),
                              _point(f.second.stmt), detail=detail))
    return hazards


def verify(kernel, proofs=None):
    """Raise HazardError listing what the hazard analysis (or, for a kernel of the async
    protocol, its proof) finds in `kernel`; `proofs` as lowering.pipeline.lower's. The
    pass's check, for tools that verify a kernel lowered without it."""
    across = check_grid_protocol(kernel) + check_cluster_protocol(kernel)
    if kir.uses_async_protocol(kernel):
        try:
            verify_async_protocol(kernel, proofs)
        except HazardError as e:
            raise HazardError(e.hazards + across, kernel.name) from None
        hazards = []
    else:
        hazards = to_hazards(find_hazards(kernel.body))
        for barrier in divergent_barriers(kernel.body):
            hazards.append(Hazard("barrier-divergence", "-", _point(barrier), _point(barrier),
                                  detail="a barrier under thread-dependent control flow"))
    if hazards + across:
        raise HazardError(hazards + across, kernel.name)


def run(ctx, kernel):
    verify(kernel, getattr(ctx, "proofs", None))     # a test may run the pass alone
    return kernel


PASS = Pass("verify_hazards", run, __doc__, reads=("kernel",), optional=True,
            why="last, so nothing after it can break what it proved")
