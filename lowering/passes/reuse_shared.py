"""Pass `reuse_shared`: a shared tensor marked promote_reuse takes the bytes of dead buffers.

A shared tensor that asked for it (promote_reuse) reuses the bytes of shared buffers that
are dead by the time it is first touched (the matmul's epilogue tile lands on the operand
stages). Each shared buffer's live range is the span of statements, in program order, from
its first access to its last, widened to the whole of every loop around any access (a
value may be carried around a loop's back edge). A promoted buffer is moved to the lowest
16-byte aligned offset whose bytes belong to no buffer with an overlapping live range; the
pool shrinks accordingly. Buffers not promoted keep the allocation pass's offsets.

It runs after circular buffering (the pipeline's prologue and prefetches are accesses too)
and before sync insertion, which then reasons on the aliased bytes: a copy that may still
be in flight into bytes the promoted tensor now writes is an async-pending hazard there,
and sync insertion drains it (the seed report's epilogue hazard, closed by analysis).
"""

from .. import kir, kir_visit
from ..contract import Pass
from ..hazards import accesses_of


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
        else:
            for access in accesses_of(s):
                self._widen(access.buffer, start, start)

    def _widen(self, buffer, lo, hi):
        r = self.ranges.setdefault(buffer, [lo, hi])
        r[0], r[1] = min(r[0], lo), max(r[1], hi)


def _live_ranges(kernel):
    visitor = _LiveRanges()
    visitor.visit(kernel.body)
    return visitor.ranges


def _touched(stmts):
    return {a.buffer for s in kir.walk(stmts) for a in accesses_of(s)}


def _nbytes(buffer):
    if not isinstance(buffer.size, kir.Const):
        return None
    return -(-buffer.size.value * buffer.dtype.itemsize // 16) * 16


def run(ctx, kernel):
    promoted = [b for tv, b in ctx.buffers.items() if b.memory is kir.Memory.shared
                and tv.reuse_shared]
    if not promoted:
        return kernel
    ranges = _live_ranges(kernel)
    shared = [b for b in ranges if b.memory is kir.Memory.shared]
    for buffer in promoted:
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
            offset = max(offset, end)
        buffer.byte_offset = ctx.const(offset)
    return kernel


PASS = Pass("reuse_shared", run, __doc__, reads=("kernel", "buffers"),
            why="after circular buffering (the pipeline's copies are accesses too), before "
                "sync insertion, which must see the aliasing")
