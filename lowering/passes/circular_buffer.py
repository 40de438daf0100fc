"""Pass `circular_buffer`: pipeline the async copies of circular-buffered shared tensors.

A tensor with `circular_buffer(S)` has S stages in its buffer (the allocation pass added
an outermost stage position, indexed by `i % S` where i is the loop it rotates over: the
innermost loop inside its compute-at position). Before this pass that loop copies tile i
and then computes on it. This pass rewrites it into a pipeline, nvFuser-style:

```text
prologue   for s in 0 .. S-2 (unrolled): copy tile s (zero-filled if s >= extent);
           commit
main loop  for i: wait_group S-2             (tile i has landed for its own thread)
                  copy tile i+S-1 (zero-filled past the end: no tail loop); commit
                  compute on tile i
```

The copies of tile i+S-1 are the loop's own copy statements with i replaced by i+S-1
(so source indices, stage indices and bounds all follow); the commit is unconditional, so
the FIFO distance is static: after the prologue's S-1 groups and i groups of the loop,
tile i is the (S-1)-th newest, hence `wait_group S-2`. Every access to a stage is tagged
(kir.AccessInfo.stage: the loop, the offset from the current iteration, S) so the hazard
analysis sees that copies of later tiles do not touch the stage being read.

TMA caches (warp-specialized circular buffers) become the producer and consumer roles of
lowering.support.warp_specialized instead: a producer warp group loads every tile, S stages
ahead, through a pair of mbarriers per stage.

No barrier and no drain is emitted here: sync insertion (which runs after this pass and
after shared-memory reuse) adds the barrier that publishes each tile, and a drain only
where a later access meets bytes a copy may still be writing.
"""

from dataclasses import fields, replace

from fuserir.errors import ScheduleError

from .. import kir
from ..kir import visit as kir_visit
from ..support import warp_specialized
from ..contract import Pass


class _ZeroFill(kir_visit.StmtMutator):
    """Every copy reads nothing (zero-fills) unless `cond` holds; an ordinary store (where
    no cp.async fits) is skipped instead: cond fails only for tiles past the loop's end,
    which no iteration reads (within the loop, the predicates pass already made such a
    store write 0 out of bounds)."""

    def __init__(self, ctx, cond):
        self.ctx, self.cond = ctx, cond

    def mutate_stmt(self, s):
        if s.bodies():
            return self.generic_mutate(s)
        filled = s.zero_filled_unless(self.cond, False, self.ctx.index_dtype)
        return kir.IfThenElse(self.cond, [s]) if filled is None else filled


def _zero_fill_unless(ctx, stmt, cond):
    """stmt with every copy in it zero-filled, every store skipped, unless cond holds."""
    (filled,) = _ZeroFill(ctx, cond).mutate([stmt])
    return filled


def _tag(name, offset, stages):
    return lambda info: replace(info, stage=(name, offset % stages, stages))


class _TagReads(kir_visit.StmtVisitor):
    """Tags the reads of circular buffers (offset 0: the current iteration's tile): those
    the statements make themselves (their effects) and the loads in their expressions."""

    def __init__(self, buffers, tag):
        self.buffers, self.tag = buffers, tag
        self.loads = _TagLoads(buffers, tag)

    def generic_visit(self, s):
        kir.retag_accesses(s, lambda a: not a.write and a.buffer in self.buffers, self.tag)
        for f in fields(s):
            value = getattr(s, f.name)
            if isinstance(value, kir.ScalarExpr):
                setattr(s, f.name, self.loads.mutate(value))
        super().generic_visit(s)


class _TagLoads(kir_visit.ExprMutator):
    def __init__(self, buffers, tag):
        self.buffers, self.tag = buffers, tag

    def mutate_Load(self, load):
        if load.buffer not in self.buffers:
            return self.generic_mutate(load)
        return replace(load, index=self.mutate(load.index), access=self.tag(load.access))


def _writes(stmt, buffers):
    """Does the statement (not those nested in it) write one of `buffers`?"""
    return any(a.write and a.buffer in buffers for a in stmt.effects().accesses)


def _pipeline(ctx, kernel, axis, tensors):
    stages = {tv.circular_buffer_stages for tv in tensors}
    names = ", ".join(tv.name for tv in tensors)
    if len(stages) > 1:
        raise ScheduleError(f"{names} rotate over the same loop with different stage counts "
                            f"({sorted(stages)}); give them the same")
    stages = stages.pop()
    var = ctx.loop_var(axis)
    found = kir_visit.find_place(kernel.body,
                                 lambda s: isinstance(s, kir.ForLoop) and s.var is var)
    if found is None:
        raise ScheduleError(f"{names}: the loop to circular-buffer over is not in the kernel")
    outer, at = found
    loop = outer[at]
    buffers = {ctx.buffers[tv] for tv in tensors}
    copies, rest = [], []
    for s in loop.body:
        writes = any(_writes(x, buffers) for x in kir.walk([s]))
        (copies if writes else rest).append(s)
    for s in copies:
        others = [x for x in kir.walk([s]) if not x.bodies() and not _writes(x, buffers)]
        if others:
            raise ScheduleError(f"{names}: the copy loops of a circular buffer may hold only "
                                f"its copies, but {kir.format_stmt(others[0])} is there")

    specialized = {tv.warp_specialized is not None for tv in tensors}
    if len(specialized) > 1:
        raise ScheduleError(f"{names} rotate over the same loop, but only some are "
                            "warp-specialized; load all of them by TMA or none")
    if specialized.pop():
        registers = {tv.producer_registers for tv in tensors}
        if len(registers) > 1:
            raise ScheduleError(f"{names} rotate over the same loop with different "
                                f"producer_registers ({sorted(registers, key=str)}); give "
                                "them the same")
        return warp_specialized.build(ctx, kernel, loop, copies, rest, stages, names,
                                      registers.pop())

    prologue = []
    for s in range(stages - 1):
        for c in copies:
            copy = kir.copy_stmt(c, {id(var): ctx.const(s)}, _tag(var.name, s, stages))
            prologue.append(_zero_fill_unless(ctx, copy, ctx.binop("lt", ctx.const(s),
                                                                   loop.extent)))
        prologue.append(kir.CpAsyncCommit())
    ahead = ctx.binop("add", var, ctx.const(stages - 1))
    prefetch = []
    for c in copies:
        copy = kir.copy_stmt(c, {id(var): ahead}, _tag(var.name, stages - 1, stages))
        prefetch.append(_zero_fill_unless(ctx, copy, ctx.binop("lt", ahead, loop.extent)))
    _TagReads(buffers, _tag(var.name, 0, stages)).visit(rest)
    loop.body = ([kir.CpAsyncWait(stages - 2)] + prefetch + [kir.CpAsyncCommit()] + rest)
    outer[at:at] = prologue


def run(ctx, kernel):
    by_loop = {}
    for tv in ctx.fusion.tensors:        # in the fusion's order (ctx.circular has none)
        if tv in ctx.circular:
            by_loop.setdefault(ctx.circular[tv], []).append(tv)
    for axis, tensors in by_loop.items():
        _pipeline(ctx, kernel, axis, tensors)
    return kernel


PASS = Pass("circular_buffer", run, __doc__, reads=("kernel", "circular", "buffers"),
            why="after predicates (the copies carry their guards), before reuse and sync "
                "insertion, which reason on the expanded pipeline")
