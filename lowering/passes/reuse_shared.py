"""Pass `reuse_shared`: let a shared tensor that asked for it (promote_reuse) reuse the bytes
of shared buffers that are dead by the time it is first touched.

Each shared buffer's live range is the span of statements, in program order, from its
first access to its last, widened to the whole of every loop around any access (a value
may be carried around a loop's back edge). A promoted buffer is moved to the lowest
16-byte aligned offset whose bytes belong to no buffer with an overlapping live range;
the pool shrinks accordingly. Buffers not promoted keep the allocation pass's offsets.

It runs after circular buffering (the pipeline's prologue and prefetches are accesses too)
and before sync insertion, which then reasons on the aliased bytes: a copy that may still
be in flight into bytes the promoted tensor now writes is an async-pending hazard there,
and sync insertion drains it (the seed report's epilogue hazard, closed by analysis).
"""

from .. import kir
from ..hazards import accesses_of


def _live_ranges(kernel):
    """{buffer: [first, last]} over statement positions in program order."""
    ranges = {}
    position = 0

    def visit(stmts):
        nonlocal position
        for s in stmts:
            start = position
            position += 1
            if isinstance(s, kir.ForLoop):
                visit(s.body)
                for b in _touched(s.body):       # live around the back edge too
                    widen(b, start, position)
                continue
            for body in s.bodies():
                visit(body)
            for access in accesses_of(s):
                widen(access.buffer, start, start)

    def widen(buffer, lo, hi):
        r = ranges.setdefault(buffer, [lo, hi])
        r[0], r[1] = min(r[0], lo), max(r[1], hi)

    visit(kernel.body)
    return ranges


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
