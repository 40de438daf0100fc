"""Pass `validate`: refuse what this lowering cannot do, before anything is built.

It first computes the facts the rest of lowering shares (the exact map and parallel
extents, lowering.analysis), which is only possible now that inline_defaults has placed
every tensor, then checks the schedule against them (analysis.check_supported): grid and
TIDz or two-index block reductions, mma axes, global intermediates, circular buffering, a local or
shared tensor read by a thread or block that does not hold it, a placement a consumer
cannot see. Each refusal is a ScheduleError naming the tensor, the axis and a way out.
"""

from ..analysis import check_supported


def run(ctx, kernel):
    ctx.analyze()
    check_supported(ctx)
    return kernel
