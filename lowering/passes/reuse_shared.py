"""Pass `reuse_shared`: a shared tensor marked promote_reuse takes the bytes of dead buffers.

A shared tensor that asked for it (promote_reuse) reuses the bytes of shared buffers that
are dead by the time it is first touched (the matmul's epilogue tile lands on the operand
stages). Each shared buffer's live range is the span of statements, in program order, from
its first access to its last, widened to the whole of every loop around any access (a
value may be carried around a loop's back edge). A promoted buffer is moved to the lowest
offset aligned as the allocation pass aligns it (16 bytes, or 1024 for a tile TMA or wgmma
reads or writes) whose bytes belong to no buffer with an overlapping live range; the
pool shrinks accordingly. Buffers not promoted keep the allocation pass's offsets.

The accesses are lowering.verify.accesses', and the shared buffers an asynchronous instruction
names (a TMA box's destination, a wgmma's operands): in a warp-specialized kernel the
producer's loads come first in program order, and the consumers wait for every one of
them before their epilogue. An mbarrier's bytes are never reused (PTX asks for an
mbarrier.inval before an mbarrier's memory is repurposed): they are live throughout.

It runs after circular buffering (the pipeline's prologue and prefetches are accesses too)
and before sync insertion, which then reasons on the aliased bytes: a copy that may still
be in flight into bytes the promoted tensor now writes is an async-pending hazard there,
and sync insertion drains it (the seed report's epilogue hazard, closed by analysis).
"""

from dataclasses import fields

from fuserir.numerics import round_up

from .. import kir
from ..kir import visit as kir_visit
from ..contract import Pass
from ..support.analysis import shared_alignment
from ..verify.hazards import accesses_of

_WHOLE_KERNEL = (0, float("inf"))


def _buffers_of(stmt):
    """The shared buffers one statement touches itself (see the module docstring)."""
    named = (getattr(stmt, f.name) for f in fields(stmt))
    return {a.buffer for a in accesses_of(stmt)} | {
        b for b in named if isinstance(b, kir.Buffer) and b.memory is kir.Memory.shared}


class _LiveRanges(kir_visit.StmtVisitor):
    """{buffer: [first, last]} over statement positions in program order (`ranges`)."""

    def __init__(self):
        self.ranges, self.position = {}, 0

    def visit_stmt(self, s):
        start = self.position
        self.position += 1
        self.generic_visit(s)             # the statements inside take the next positions
        if isinstance(s, kir.ForLoop):
            for b in _touched(s.body):    # live around the back edge too
                self._widen(b, start, self.position)
        elif isinstance(s, kir.Allocate):
            pass                          # a declaration, not an access
        else:
            mbarrier = s.effects().mbarrier
            if mbarrier is not None:      # an mbarrier lives from its init to the end
                self._widen(mbarrier.bar, *_WHOLE_KERNEL)
            for b in _buffers_of(s):
                if mbarrier is None or b is not mbarrier.bar:
                    self._widen(b, start, start)

    def _widen(self, buffer, lo, hi):
        r = self.ranges.setdefault(buffer, [lo, hi])
        r[0], r[1] = min(r[0], lo), max(r[1], hi)


def _live_ranges(kernel):
    visitor = _LiveRanges()
    visitor.visit(kernel.body)
    return visitor.ranges


def _touched(stmts):
    return {b for s in kir.walk(stmts) for b in _buffers_of(s)}


def _nbytes(buffer):
    if not isinstance(buffer.size, kir.Const):
        return None
    return round_up(buffer.size.value * buffer.dtype.itemsize, 16)


def run(ctx, kernel):
    promoted = [(tv, b) for tv, b in ctx.buffers.items() if b.memory is kir.Memory.shared
                and tv.reuse_shared]
    if not promoted:
        return kernel
    ranges = _live_ranges(kernel)
    shared = [b for b in ranges if b.memory is kir.Memory.shared]
    for tv, buffer in promoted:
        align = shared_alignment(tv)
        if buffer not in ranges or _nbytes(buffer) is None:
            continue
        lo, hi = ranges[buffer]
        taken = []
        for other in shared:
            if other is buffer or not isinstance(other.byte_offset, kir.Const):
                continue
            olo, ohi = ranges[other]
            if olo <= hi and lo <= ohi and _nbytes(other) is not None:
                start = other.byte_offset.value
                taken.append((start, start + _nbytes(other)))
        offset = 0
        for start, end in sorted(taken):
            if offset + _nbytes(buffer) <= start:
                break
            offset = max(offset, round_up(end, align))
        buffer.byte_offset = ctx.const(offset)
    return kernel


PASS = Pass("reuse_shared", run, __doc__, reads=("kernel", "buffers"),
            why="after circular buffering (the pipeline's copies are accesses too), before "
                "sync insertion, which must see the aliasing")
