"""Segmentation: a fusion that no single automatic schedule fits becomes several kernels.

`plan(fusion)` first tries the whole fusion as one kernel (fuserir.scheduler.auto plus
lowering). Where that is refused, it groups the fusion's outputs: each output's cone (the
expressions it needs, back to the fusion's inputs or to tensors an earlier kernel
already writes) joins the first kernel it still schedules and lowers with, or else
starts a kernel of its own. Pointwise work two cones share is computed in each kernel
that needs it, not written to global memory and read back: a layer norm's backward is
one normalization kernel for the input gradient and one column reduction for the weight
and bias gradients, each recomputing the normalized input from x. A cone that no
kernel fits alone (a loss: a sum along the rows, then a mean down them) has its first
reduction placed first, as an output of its own (a row of sums crosses to the next kernel,
not the full-size work around it), and is placed again; one with no reduction left to
place is cut by growing a kernel along its expressions in topological order and starting
the next where it stops. The tensors that cross from one kernel to another become global
intermediates, outputs of the kernel that computes them and inputs of the kernels that
read them (the executor allocates them). Each kernel is a fusion of its own, rebuilt
with the same operations, so every kernel still comes out of scheduling and lowering a
fusion.

`cut(fusion)` does the same for a fusion with an explicit schedule that put intermediates
in global memory (the matmul's two-kernel split-K and a column reduction split over CTAs
put their f32 partial sums there): one kernel per such tensor, in order (those of one
launch that do not depend on one another share one), then one for the outputs, each a
copy of the scheduled fusion that computes its targets and reads earlier ones as
inputs.
"""

import copy

from dataclasses import dataclass

from fuserir.errors import FuserirError, ScheduleError
from fuserir.ir import extent as ext
from fuserir.ir.exprs import CastOp, MatmulOp, ReductionOp
from fuserir.ir.fusion import Fusion
from fuserir.ir.iterdomain import IterDomain
from fuserir.ir.tensor import MemoryType, TensorView
from fuserir.scheduler.auto import apply_like, schedule_auto
from fuserir.scheduler.matmul import EPILOGUE_OPS
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


def extract(fusion, exprs, name, outputs=None):
    """A new fusion computing `exprs` (in order) of `fusion`; reads from outside become
    inputs; `outputs` (default: the results used outside, and fusion outputs) become
    outputs."""
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
    if outputs is None:
        later = {v for e in fusion.exprs if e not in exprs for v in e.tensor_inputs}
        outputs = [e.output for e in exprs if e.output.is_output or e.output in later]
    for t in outputs:
        if t.dtype.is_state:
            raise ScheduleError(f"{fusion.name}: the welford state {t.name} would cross "
                                "from one kernel to another; what is read of it crosses")
        sub.add_output(made[t])
    return Segment(sub, [t.name for t in sub.inputs], [t.name for t in outputs])


def _schedulable(fusion, exprs, name, persistent, sizes, device, outputs=None):
    try:
        segment = extract(fusion, exprs, name, outputs)
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
    return _Grouping(fusion, exprs, persistent, sizes, device).segments()


class _Grouping:
    """The kernels of a fusion no one kernel fits, grown output cone by output cone (see
    the module docstring)."""

    def __init__(self, fusion, exprs, persistent, sizes, device):
        self.fusion, self.exprs = fusion, exprs
        self.settings = (persistent, sizes, device)
        self.order = {e: i for i, e in enumerate(exprs)}
        self.groups = []            # [exprs of a kernel, its trial Segment]
        self.written = {}           # tensor -> index of the kernel that writes it

    def segments(self):
        for out in sorted({t for t in self.fusion.outputs if not t.is_input},
                          key=lambda t: self.order[t.definition]):
            if out not in self.written:
                self.place(out)
        return [segment for _, segment in self.groups]

    def cone(self, out):
        """The expressions `out` needs, back to inputs and tensors a kernel writes."""
        found, todo = set(), [out]
        while todo:
            t = todo.pop()
            if t.is_input or t in self.written or t.definition in found:
                continue
            found.add(t.definition)
            todo.extend(t.definition.tensor_inputs)
        return sorted(found, key=self.order.get)

    def reads(self, exprs):
        inside = {e.output for e in exprs}
        return {v for e in exprs for v in e.tensor_inputs
                if v not in inside and not v.is_input}

    def trial(self, exprs, k, outputs):
        return _schedulable(self.fusion, exprs, f"{self.fusion.name}_{k}", *self.settings,
                            outputs=outputs)

    def outputs_of(self, k, extra=()):
        return [t for t, g in self.written.items() if g == k] + list(extra)

    def place(self, out):
        cone = self.cone(out)
        for k, (exprs, _) in enumerate(self.groups):
            # only a kernel that runs after every kernel the cone reads from
            if any(self.written[v] > k for v in self.reads(cone)):
                continue
            merged = sorted(set(exprs) | set(cone), key=self.order.get)
            segment = self.trial(merged, k, self.outputs_of(k, [out]))
            if segment is not None:
                self.groups[k] = [merged, segment]
                self.written[out] = k
                return
        segment = self.trial(cone, len(self.groups), [out])
        if segment is not None:
            self.written[out] = len(self.groups)
            self.groups.append([cone, segment])
            return
        # No kernel fits the cone: its first reduction is written by a kernel (a row of
        # sums, not the full-size work around it), and the rest placed again
        inner = [e.output for e in cone if isinstance(e, (ReductionOp, MatmulOp))
                 and e.output is not out]
        if inner and inner[0].dtype.is_state:
            # a welford state crosses as what is read of it (its mean, its m2)
            for e in self.fusion.uses(inner[0]):
                if e in cone:
                    self.place(e.output)
            self.place(out)
            return
        if inner:
            first = inner[0]
            if isinstance(first.definition, MatmulOp):
                # the matmul with its pointwise epilogue, where that schedules (a bare
                # f32 product is not a tensor-core schedule's output)
                end = self.epilogue_end(cone, first)
                if end is not first and self.trial(self.cone(end), len(self.groups),
                                                   [end]) is not None:
                    first = end
            self.place(first)
            self.place(out)
            return
        self.cut_cone(cone, out)

    def epilogue_end(self, cone, product):
        """The last tensor of the pointwise chain the cone computes from a matmul's
        `product` before a non-pointwise expression reads it (a scaled, masked score
        before its softmax), before any cast that widens it (the reader casts: bf16
        scores cross at half the bytes), or `product` itself."""
        chain, end = {product}, product
        for e in cone[cone.index(product.definition) + 1:]:
            reads = [v for v in e.tensor_inputs if v in chain]
            if not reads:
                continue
            others = [v for v in e.tensor_inputs if v not in chain]
            if not isinstance(e, EPILOGUE_OPS) or any(
                    self.fusion.depends_on(v, product) for v in others):
                return _before_widening(max(reads, key=lambda v: self.order[v.definition]))
            chain.add(e.output)
            end = e.output
        return _before_widening(end)

    def cut_cone(self, cone, out):
        """Kernels grown along the cone's expressions in order, each as long as it still
        schedules; what one computes and a later one reads is written by the first."""
        parts, current = [], []
        for expr in cone:
            if current and self.trial(current + [expr], len(self.groups), None) is None:
                parts.append(current)
                current = []
            if not current and self.trial([expr], len(self.groups), None) is None:
                raise FuserirError(f"no automatic schedule fits {expr} of fusion "
                                   f"{self.fusion.name}")
            current.append(expr)
        parts.append(current)
        for i, part in enumerate(parts):
            k = len(self.groups)
            later = {v for p in parts[i + 1:] for e in p for v in e.tensor_inputs}
            for e in part:
                if e.output in later or e.output is out:
                    self.written[e.output] = k
            segment = self.trial(part, k, self.outputs_of(k))
            if segment is None:
                raise FuserirError(f"no automatic schedule fits {part[0]} of fusion "
                                   f"{self.fusion.name} with its outputs")
            self.groups.append([part, segment])


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
    for k, targets in enumerate(_kernels_of(fusion, cuts) + [list(fusion.outputs)]):
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


def _before_widening(tv):
    """tv, or what a chain of widening casts ending in tv casts from."""
    while isinstance(tv.definition, CastOp) and \
            tv.dtype.itemsize > tv.definition.inputs[0].dtype.itemsize:
        tv = tv.definition.inputs[0]
    return tv


def _kernels_of(fusion, cuts):
    """The global intermediates grouped into kernels, in order: the partial sums of a
    reduction (an rfactor producer) that neither depends on the kernel's others nor runs
    in other loops (its loop axes' extents and parallel types) joins the kernel of the
    partials before it, so that two column reductions' partials are one kernel reading
    the inputs once; any other intermediate is a kernel of its own."""
    kernels = []
    for c in cuts:
        last = kernels[-1] if kernels else None
        if last and _partial_sums(c) and all(map(_partial_sums, last)) and \
                _launch(c) == _launch(last[0]) and not any(
                    fusion.depends_on(c, t) for t in last):
            last.append(c)
        else:
            kernels.append([c])
    return kernels


def _partial_sums(tv):
    """Is tv the partial result of a reduction split by rfactor?"""
    return isinstance(tv.definition, ReductionOp) and tv.logical != tv.root


def _launch(tv):
    return [(str(a.extent), a.parallel) for a in tv.loop if a.parallel.value != "serial"]


def _make_input(fusion, tv):
    """tv, computed by an earlier kernel, is read from global memory here."""
    fusion.remove_expr(tv.definition)
    tv.definition = None
    tv.compute_at_pos, tv.compute_at_consumer = None, None
    fusion.inputs.append(tv)
