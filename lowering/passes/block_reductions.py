"""Pass `block_reductions`: combine the partials of a reduction bound to TIDx or TIDy.

After its serial loops every thread holds a partial in its accumulator. The block then
all-reduces along x, spelled out in kernel IR rather than hidden in a helper, so that sync
insertion sees (and the interpreter checks) every shared-memory access:

```text
acc = op(acc, shfl_xor(acc, 16)) ... op(acc, shfl_xor(acc, 1))   # within each warp
if (threadIdx.x % 32 == 0) scratch[warp] = acc                   # one partial per warp
acc = identity; for w: acc = op(acc, scratch[first warp of my row + w])
```

Every thread ends with the row's result. blockDim.x is a multiple of 32 (the loop-nest
pass rounds it up) so warps never straddle rows; threads past the axis extent hold the
identity. Where blockDim.x is 32 (a warp a row), the shuffles alone leave the row's
result in every lane: no scratch, no barrier. A reduction bound to TIDy (an outer
reduction whose rows are spread over the block's y threads) goes through shared memory
alone: every thread writes its partial and then folds its column's. The barriers between the scratch writes and reads (and before
the scratch is written again in a later iteration) are not emitted here: sync insertion
finds them.
"""

from fuserir.ir.exprs import ReductionOp
from fuserir.ir.iterdomain import ParallelType

from .. import kir
from ..kir import visit as kir_visit
from ..support.analysis import reduction_thread, warp_reduces_alone
from ..contract import Pass
from .indexing import accumulator_index, combine, identity

WARP = 32


def _parts(ctx, tv):
    """(combining op, accumulator, shared scratch, accumulator index) of tv's reduction."""
    expr = tv.definition
    op = combine(expr.op if isinstance(expr, ReductionOp) else "sum")
    return op, ctx.accumulators[tv], ctx.scratch.get(tv), accumulator_index(ctx, tv)


def _threads(ctx):
    """threadIdx.x, .y, .z, blockDim.x, .y."""
    def special(kind, axis):
        return kir.Special(kind, axis, ctx.index_dtype)
    T, D = kir.SpecialKind.threadIdx, kir.SpecialKind.blockDim
    return (special(T, "x"), special(T, "y"), special(T, "z"), special(D, "x"),
            special(D, "y"))


def expand(ctx, kernel, part):
    tv = part.tv
    if reduction_thread(ctx, tv) is ParallelType.TIDy:
        return expand_over_y(ctx, tv)
    op, acc, scratch, index = _parts(ctx, tv)

    def partial():
        return kir.Load(acc, index)

    stmts = [kir.Comment(f"block reduction of {tv.name} over threadIdx.x")]
    for lane_mask in (16, 8, 4, 2, 1):
        stmts.append(kir.Store(acc, index, kir.BinOp(op, partial(),
                                                     kir.ShuffleXor(partial(), lane_mask),
                                                     acc.dtype)))
    if warp_reduces_alone(ctx, kernel, tv):
        return stmts        # a warp a row: the shuffles leave the row's result in every lane
    tx, ty, tz, dx, dy = _threads(ctx)
    b = ctx.binop
    warps_per_row = b("div", dx, ctx.const(WARP))
    row = b("add", b("mul", tz, dy), ty)
    first_warp = b("mul", row, warps_per_row)
    my_warp = b("add", first_warp, b("div", tx, ctx.const(WARP)))
    owner = tuple((p.value, None) for p in ctx.threads_used())
    access = kir.AccessInfo(scratch.name, owner)
    is_lane0 = b("eq", b("mod", tx, ctx.const(WARP)), ctx.const(0))
    stmts.append(kir.IfThenElse(is_lane0, [kir.Store(scratch, my_warp, partial(), access)]))
    stmts.append(kir.Store(acc, index, identity(op, acc.dtype)))
    w = kir.Var(f"w_{tv.name}", ctx.index_dtype)
    gathered = kir.Load(scratch, b("add", first_warp, w), access)
    stmts.append(kir.ForLoop(w, warps_per_row, [
        kir.Store(acc, index, kir.BinOp(op, partial(), gathered, acc.dtype))]))
    return stmts


def expand_over_y(ctx, tv):
    """A reduction bound to TIDy: threads of one column of the block (same x) combine
    through shared memory, one partial per thread:

        scratch[(z * bdy + y) * bdx + x] = acc
        acc = identity; for w: acc = op(acc, scratch[(z * bdy + w) * bdx + x])
    """
    op, acc, scratch, index = _parts(ctx, tv)
    tx, ty, tz, dx, dy = _threads(ctx)
    b = ctx.binop
    access = kir.AccessInfo(scratch.name, tuple((p.value, None) for p in ctx.threads_used()))

    def slot(y):
        return b("add", b("mul", b("add", b("mul", tz, dy), y), dx), tx)

    w = kir.Var(f"w_{tv.name}", ctx.index_dtype)
    return [
        kir.Comment(f"block reduction of {tv.name} over threadIdx.y"),
        kir.Store(scratch, slot(ty), kir.Load(acc, index), access),
        kir.Store(acc, index, identity(op, acc.dtype)),
        kir.ForLoop(w, dy, [kir.Store(acc, index, kir.BinOp(
            op, kir.Load(acc, index), kir.Load(scratch, slot(w), access), acc.dtype))]),
    ]


class _Expand(kir_visit.StmtMutator):
    def __init__(self, ctx, kernel):
        self.ctx, self.kernel = ctx, kernel

    def mutate_ExprStmt(self, part):
        return expand(self.ctx, self.kernel, part) if part.role == "block_reduce" else part


def run(ctx, kernel):
    kernel.body = _Expand(ctx, kernel).mutate(kernel.body)
    return kernel


PASS = Pass("block_reductions", run, __doc__,
            reads=("kernel", "vector_axes", "bound", "accumulators", "scratch", "layouts"),
            why="spelled out in kernel IR so that sync insertion and the interpreter see every "
                "shared access")
