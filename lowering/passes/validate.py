"""Pass `validate`: refuse what this lowering cannot do, before anything is built.

It first computes the facts the rest of lowering shares (the exact map, the live tensors,
the parallel extents, the loops circular buffers rotate over: LoweringContext.analyze),
which is only possible now that inline_defaults has placed every tensor, then checks the
schedule against them (analysis.check_supported): grid reductions other than a serial one
over BIDz, TIDz reductions or reductions over two thread indices, mma axes that are not the
instruction tiles lowering knows (innermost; 16x8x16 on the matmul, 16x16 / 8x16 on
ldmatrix operand caches, 16x8 on tensors in the accumulator's fragment layout, TIDx left to
the lanes), global intermediates, circular buffers that are not async copies, a local or
shared tensor read by a thread or block that does not hold it, a placement a consumer
cannot see. Each refusal is a ScheduleError naming the tensor, the axis and a way out.
"""

from ..support.analysis import check_supported
from ..contract import Pass


def run(ctx, kernel):
    ctx.analyze()
    check_supported(ctx)
    return kernel


PASS = Pass("validate", run, __doc__, reads=("placement",),
            provides=("live", "vector_axes", "exact", "bound", "grid_reduced", "circular"),
            why="fail with a clear ScheduleError before anything is built; the first pass "
                "that sees every tensor placed")
