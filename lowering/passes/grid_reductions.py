"""Pass `grid_reductions`: serial grid reductions (split-K across CTAs, in turn).

A reduction marked serial_grid_reduction() binds a reduction axis to BIDz: the CTAs of
one output tile (same blockIdx.x, blockIdx.y) each reduce a slice, then combine their
partials in launch order through a turnstile on a global semaphore (kir's grid
synchronization section):

```text
if z > 0:    if thread 0: SemWait(sem[tile] == z)     acquire split z-1's partials
Barrier
if z > 0:    acc[e] = op(acc[e], work[tile, e, thread])   (+ for sum, max for max)
if z < last: work[tile, e, thread] = acc[e]; Fence; Barrier
             if thread 0: SemRelease(sem[tile] = z + 1)
else:        if z > 0: if thread 0: SemRelease(sem[tile] = 0)   reset for the next launch
             <the rest of the kernel: only the last split computes the epilogue>
```

Each thread keeps its own partials (work is laid out [tile, element, thread] so the
accesses are coalesced), so no shared memory is involved and the barriers here belong to
the semaphore protocol, not to shared-memory hazards. Sizes and the split factor are
kernel arguments, so the workspaces' sizes are expressions over them. The first split
has nobody to wait for, so with one split (a run-time factor of 1) neither workspace is
touched and both take no bytes: a call then allocates and zeroes nothing for them. The
semaphores must be zero before a launch (the executor zeroes each call's) and every
launch leaves them zero.
"""

from fuserir.dtypes import DataType
from fuserir.errors import ScheduleError
from fuserir.ir.exprs import ReductionOp

from .. import kir
from ..contract import Pass
from .indexing import combine


def _special(ctx, kind, axis):
    return kir.Special(kind, axis, ctx.index_dtype)


def _fresh(name, taken):
    """`name`, or `name` with underscores appended, that is not in `taken`."""
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _turnstile(ctx, kernel, tv, rest):
    acc = ctx.accumulators[tv]
    grid, block = kernel.launch.grid, kernel.launch.block
    b = lambda a: _special(ctx, kir.SpecialKind.blockIdx, a)     # noqa: E731
    t = lambda a: _special(ctx, kir.SpecialKind.threadIdx, a)    # noqa: E731
    tile = ctx.binop("add", b("x"), ctx.binop("mul", grid[0], b("y")))
    tiles = ctx.binop("mul", grid[0], grid[1])
    thread = ctx.binop("add", t("x"), ctx.binop("mul", block[0], ctx.binop(
        "add", t("y"), ctx.binop("mul", block[1], t("z")))))
    threads = ctx.binop("mul", block[0], ctx.binop("mul", block[1], block[2]))
    z, last = b("z"), ctx.binop("sub", grid[2], ctx.const(1))

    # workspaces are arguments by name (kir.arg_name), beside the user's tensors and scalars
    taken = {t.name for t in ctx.fusion.tensors} | set(ctx.scalar_vars) | set(ctx.fusion.scalars)
    work = kir.Buffer(_fresh(f"{tv.name}_work", taken), acc.dtype, kir.Memory.global_)
    sem = kir.Buffer(_fresh(f"{tv.name}_sem", taken), DataType.i32, kir.Memory.global_)
    # one split (a run-time split factor of 1) touches neither: they take no bytes then
    several = ctx.binop("ceildiv", last, grid[2])            # 0 for one split, else 1
    kernel.workspaces += [
        kir.Workspace(work, ctx.binop("mul", ctx.binop("mul", tiles, several),
                                      ctx.binop("mul", acc.size, threads))),
        kir.Workspace(sem, ctx.binop("mul", tiles, several), zeroed=True)]

    e = kir.Var(f"e{len(ctx.fragment_vars)}", ctx.index_dtype)
    ctx.fragment_vars.append(e)
    slot = ctx.binop("add", ctx.binop("mul", ctx.binop("add", ctx.binop(
        "mul", tile, acc.size), e), threads), thread)
    value = kir.Load(acc, e)

    def each_element(stmt):
        return kir.ForLoop(e, acc.size, [stmt], "unroll")   # registers: constant indices

    def thread0(stmt):
        cond = ctx.binop("eq", thread, ctx.const(0))
        return kir.IfThenElse(cond, [stmt])

    op = combine(tv.definition.op if isinstance(tv.definition, ReductionOp) else "sum")
    add = each_element(kir.Store(acc, e, kir.BinOp(op, value, kir.Load(work, slot),
                                                   acc.dtype)))
    store = each_element(kir.Store(work, slot, value))
    not_last = [store, kir.Fence(), kir.Barrier(),
                thread0(kir.SemRelease(sem, tile, ctx.binop("add", z, ctx.const(1))))]
    after_first = ctx.binop("gt", z, ctx.const(0))
    is_last = [kir.IfThenElse(after_first, [thread0(kir.SemRelease(sem, tile, ctx.const(0)))])
               ] + rest
    return [kir.Comment(f"serial grid reduction of {tv.name} over BIDz: CTAs of a tile in "
                        "turn"),
            kir.IfThenElse(after_first, [thread0(kir.SemWait(sem, tile, z))]), kir.Barrier(),
            kir.IfThenElse(after_first, [add]),
            kir.IfThenElse(ctx.binop("lt", z, last), not_last, is_last)]


def run(ctx, kernel):
    for s in kir.walk(kernel.body):
        if isinstance(s, kir.ExprStmt) and s.role == "grid_reduce" and s not in kernel.body:
            raise ScheduleError(f"{s.tv.name}: a serial grid reduction must finish outside "
                                "every loop (its non-reduction axes bound to blocks and "
                                "threads, or computed in registers inside its loops)")
    for i, s in enumerate(kernel.body):
        if isinstance(s, kir.ExprStmt) and s.role == "grid_reduce":
            kernel.body[i:] = _turnstile(ctx, kernel, s.tv, kernel.body[i + 1:])
            break
    return kernel


PASS = Pass("grid_reductions", run, __doc__, reads=("kernel", "accumulators"),
            why="after indexing (the accumulator exists), before predicates (the epilogue it "
                "wraps gets its guards)")
