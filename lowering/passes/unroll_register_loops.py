"""Pass `unroll_register_loops`: unroll loops that index registers, short tensor-core loops.

Every constant-extent loop whose variable indexes registers (a local buffer: a store to it,
a load of it, an ldmatrix destination, an mma fragment) is marked `unroll`: a local array
indexed by a run-time value lives in (slow) local memory instead of registers, and unrolled
its indices are constants. Short loops (at most UNROLL_LIMIT iterations) around the
statements that ask for it (kir.Stmt.overlaps_unrolled: ldmatrix, mma and cp.async) are
unrolled too, so that nvcc can overlap the fragment loads of one k-step with the mma of
the previous one. Only loop kinds change; the loops a later pass
builds (block and grid reductions, the pipeline's prologue) choose their own kind.
"""

from .. import kir
from ..contract import Pass


def _register_indices(stmt):
    """The index expressions of stmt that address registers (local buffers): those of the
    accesses it makes itself (its effects) and of the loads in its expressions."""
    out = [a.index for a in stmt.effects().accesses if a.memory is kir.Memory.local]
    for e in kir.expressions(stmt):
        out += [x.index for x in kir.walk_expr(e)
                if isinstance(x, kir.Load) and x.buffer.memory is kir.Memory.local]
    return out


UNROLL_LIMIT = 16      # most iterations of a short tensor-core/copy loop to unroll


def run(ctx, kernel):
    for loop in kir.walk(kernel.body):
        if not isinstance(loop, kir.ForLoop) or not isinstance(loop.extent, kir.Const):
            continue
        inside = list(kir.walk(loop.body))
        if any(loop.var is v for s in inside for index in _register_indices(s)
               for v in kir.walk_expr(index)):
            loop.kind = "unroll"
        elif loop.extent.value <= UNROLL_LIMIT and any(s.overlaps_unrolled
                                                       for s in inside):
            loop.kind = "unroll"
    return kernel


PASS = Pass("unroll_register_loops", run, __doc__, reads=("kernel",),
            why="right after indexing, whose register indices it reads, before later passes "
                "add loops of their own")
