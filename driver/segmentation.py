"""Segmentation: a fusion that no single automatic schedule fits becomes several kernels.

`plan(fusion)` first tries the whole fusion as one kernel (fuserir.scheduler.auto plus
lowering). Where that is refused, it walks the expressions in topological order and grows
a segment while the segment still schedules and lowers, starting a new one where it stops.
Tensors that cross a segment boundary become global intermediates: outputs of the kernel
that computes them and inputs of the kernels that read them; the executor allocates them.
Each segment is a fusion of its own, rebuilt with the same operations, so every kernel
still comes out of scheduling and lowering a fusion.

`cut(fusion)` does the same for a fusion with an explicit schedule that put intermediates
in global memory (the matmul's two-kernel split-K puts its f32 partial sums there): one
kernel per such tensor, in order, then one for the outputs, each a copy of the scheduled
fusion that computes its targets and reads earlier ones as inputs.
"""

import copy

from dataclasses import dataclass

from fuserir.errors import FuserirError, ScheduleError
from fuserir.ir import extent as ext
from fuserir.ir.fusion import Fusion
from fuserir.ir.iterdomain import IterDomain
from fuserir.ir.tensor import MemoryType, TensorView
from fuserir.scheduler.auto import apply_like, schedule_auto
from lowering.support.analysis import live_tensors
from lowering.errors import HazardError
from lowering.pipeline import lower

from .proofs import PROOFS


@dataclass
class Segment:
    fusion: Fusion          # scheduled
    inputs: list            # names of the tensors it reads (fusion inputs or intermediates)
    outputs: list           # names of the tensors it writes
    kernels: list = None    # plan(): the trial lowering's kernel of each of cut(fusion)


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
    # a size its inputs do not bind (an expand to a size of the whole fusion's other
    # inputs): a run-time scalar of the segment, which run() binds from the whole's
    for e in exprs:
        extents = [a.extent for a in e.output.root] + e.extents()
        for size in sorted(set().union(*map(ext.symbols, extents))):
            if size not in sub.size_symbols():
                sub.declare(size)
    for e in exprs:
        out = apply_like(e, [made.get(v, v) for v in e.inputs], sub)
        sub.rename(out, e.output.name, named=e.output.is_named)
        made[e.output] = out
    later = {v for e in fusion.exprs if e not in exprs for v in e.tensor_inputs}
    outputs = [e.output for e in exprs if e.output.is_output or e.output in later]
    for t in outputs:
        sub.add_output(made[t])
    return Segment(sub, [t.name for t in sub.inputs], [t.name for t in outputs])


def _schedulable(fusion, exprs, name, persistent, sizes, device):
    try:
        segment = extract(fusion, exprs, name)
        schedule_auto(segment.fusion, persistent, sizes, device)
        # a trial (a schedule may make several kernels): no instrument, no dumps; the
        # kernels serve the build where it would lower them the same way
        segment.kernels = [lower(part.fusion, proofs=PROOFS)[0]
                           for part in cut(segment.fusion)]
        return segment
    except (ScheduleError, HazardError):
        return None


def plan(fusion, persistent=True, sizes=None, device=None):
    """The segments (scheduled fusions) that together compute `fusion`, each scheduled for
    `sizes` ({symbol: int}; None: unknown) on `device` (fuserir.scheduler.auto)."""
    live = live_tensors(fusion)
    exprs = [e for e in fusion.exprs if e.output in live]
    whole = _schedulable(fusion, exprs, fusion.name, persistent, sizes, device)
    if whole is not None:
        return [whole]
    segments, current, best = [], [], None
    for expr in exprs:
        trial = _schedulable(fusion, current + [expr], f"{fusion.name}_{len(segments)}",
                             persistent, sizes, device)
        if trial is not None:
            current, best = current + [expr], trial
            continue
        if best is None:
            raise FuserirError(f"no automatic schedule fits {expr} of fusion {fusion.name}")
        segments.append(best)
        current = [expr]
        best = _schedulable(fusion, current, f"{fusion.name}_{len(segments)}", persistent,
                            sizes, device)
        if best is None:
            raise FuserirError(f"no automatic schedule fits {expr} of fusion {fusion.name}")
    segments.append(best)
    return segments


def cut(fusion):
    """The kernels of an explicitly scheduled fusion: one per live global intermediate (in
    topological order), then one for the outputs (see module docstring)."""
    live = live_tensors(fusion)
    cuts = [t for t in fusion.tensors if t in live and not t.is_input and not t.is_output
            and t.memory_type is MemoryType.global_]
    if not cuts:
        return [Segment(fusion, [t.name for t in fusion.inputs],
                        [t.name for t in fusion.outputs])]
    segments = []
    for k, targets in enumerate([[c] for c in cuts] + [list(fusion.outputs)]):
        part = copy.deepcopy(fusion)
        part.name = f"{fusion.name}_{k}"
        wanted = [part.tensor(t.name) for t in targets]
        for c in cuts:
            tv = part.tensor(c.name)
            if tv not in wanted and any(part.depends_on(w, tv) for w in wanted):
                _make_input(part, tv)
        part.outputs = []
        for tv in wanted:
            part.add_output(tv)
        # what computes only later kernels' tensors is not this kernel's (left in place,
        # an unplaced target would be inlined into a consumer it no longer has)
        keep = live_tensors(part)
        for e in part.exprs:
            if e.output not in keep:
                part.remove_expr(e)
        for tv in part.tensors:
            if tv not in keep and not tv.is_input:
                part.remove_node(tv)
        segments.append(Segment(part, [t.name for t in part.inputs],
                                [t.name for t in part.outputs]))
    return segments


def _make_input(fusion, tv):
    """tv, computed by an earlier kernel, is read from global memory here."""
    fusion.remove_expr(tv.definition)
    tv.definition = None
    tv.compute_at_pos, tv.compute_at_consumer = None, None
    fusion.inputs.append(tv)
