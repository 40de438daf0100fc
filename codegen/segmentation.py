"""Segmentation: a fusion that no single automatic schedule fits becomes several kernels.

`plan(fusion)` first tries the whole fusion as one kernel (fuserir.scheduler.auto plus
lowering). Where that is refused, it walks the expressions in topological order and grows
a segment while the segment still schedules and lowers, starting a new one where it stops.
Tensors that cross a segment boundary become global intermediates: outputs of the kernel
that computes them and inputs of the kernels that read them; the executor allocates them.
Each segment is a fusion of its own, rebuilt with the same operations, so every kernel
still comes out of scheduling and lowering a fusion.
"""

from dataclasses import dataclass

from fuserir.errors import FuserirError, ScheduleError
from fuserir.ir.fusion import Fusion
from fuserir.ir.iterdomain import IterDomain
from fuserir.ir.tensor import MemoryType, TensorView
from fuserir.scheduler.auto import apply_like, schedule_auto
from lowering.analysis import live_tensors
from lowering.errors import HazardError
from lowering.pipeline import lower


@dataclass
class Segment:
    fusion: Fusion          # scheduled
    inputs: list            # names of the tensors it reads (fusion inputs or intermediates)
    outputs: list           # names of the tensors it writes


def extract(fusion, exprs, name):
    """A new fusion computing `exprs` (in order) of `fusion`; reads from outside become
    inputs, results used outside (or fusion outputs) become outputs."""
    sub = Fusion(name)
    made = {}
    inside = {e.output for e in exprs}
    for e in exprs:
        for v in e.tensor_inputs:
            if v not in inside and v not in made:
                root = [IterDomain(a.extent, a.kind) for a in v.shape_axes]
                made[v] = sub.add_input(TensorView(sub, v.name, v.dtype, root,
                                                   MemoryType.global_))
        out = apply_like(e, [made.get(v, v) for v in e.inputs])
        sub.rename(out, e.output.name, named=e.output.is_named)
        made[e.output] = out
    later = {v for e in fusion.exprs if e not in exprs for v in e.tensor_inputs}
    outputs = [e.output for e in exprs if e.output.is_output or e.output in later]
    for t in outputs:
        sub.add_output(made[t])
    return Segment(sub, [t.name for t in sub.inputs], [t.name for t in outputs])


def _schedulable(fusion, exprs, name, persistent):
    try:
        segment = extract(fusion, exprs, name)
        schedule_auto(segment.fusion, persistent)
        lower(segment.fusion, trial=True)
        return segment
    except (ScheduleError, HazardError):
        return None


def plan(fusion, persistent=True):
    """The segments (scheduled fusions) that together compute `fusion`."""
    live = live_tensors(fusion)
    exprs = [e for e in fusion.exprs if e.output in live]
    whole = _schedulable(fusion, exprs, fusion.name, persistent)
    if whole is not None:
        return [whole]
    segments, current, best = [], [], None
    for expr in exprs:
        trial = _schedulable(fusion, current + [expr], f"{fusion.name}_{len(segments)}",
                             persistent)
        if trial is not None:
            current, best = current + [expr], trial
            continue
        if best is None:
            raise FuserirError(f"no automatic schedule fits {expr} of fusion {fusion.name}")
        segments.append(best)
        current = [expr]
        best = _schedulable(fusion, current, f"{fusion.name}_{len(segments)}", persistent)
        if best is None:
            raise FuserirError(f"no automatic schedule fits {expr} of fusion {fusion.name}")
    segments.append(best)
    return segments
