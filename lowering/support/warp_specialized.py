"""The warp-specialized TMA pipeline: what the circular_buffer pass builds for TMA caches.

Before, the loop the caches rotate over loads tile i (TMA boxes) and computes on it. After,
the block has one more warp group along TIDy, the producer, and the loop runs twice, once
in each role, handing the S stages over through two mbarriers per stage (full[s], then
empty[s], in one shared buffer):

    thread 0:      init full[s] (1 arrival; one per producer thread where it copies),
                   empty[s] (one per consumer thread), s < S;
                   fence.mbarrier_init
    __syncthreads
    if threadIdx.y == W (the producer), its thread 0 (TMA) or its 128 threads (copies):
        for i: s = i % S
               wait empty[s], parity (i / S) % 2 ^ 1   (a fresh barrier's previous phase
                                                        counts as complete)
          TMA: arrive.expect_tx full[s] (every box of tile i); the TMA loads of tile i
          copies: tile i's element copies (ld.global, st.shared); arrive full[s]
          both (one operand each way): the copies; thread 0 arrive.expect_tx full[s]
               and the TMA loads, the other threads arrive full[s]
    (with producer_registers P: setmaxnreg.dec P first; the consumers setmaxnreg.inc C
     first, C their share of what the producer gave up, and the kernel bounded to its
     block: __launch_bounds__(threads, 1))
    else (the W consumer warp groups, everything else the kernel does):
        for i: s = i % S
               wait full[s], parity (i / S) % 2        (tile i has landed)
               compute on tile i; wgmma commit and wait_group 0 (its reads retired)
               arrive empty[s]                          (the producer may refill it)

The loads of tile i are the loop's own copy statements, so coordinates and stage offsets
follow from indexing; tiles past a tensor's edge are zero-filled by the hardware (TMA) or
by the copies' predicates, which store 0 out of bounds. Copies are the path for operands
TMA cannot read (rows not a multiple of 16 bytes; a tile of each kind where only one
operand's rows are): the same swizzled tiles, written through the generic proxy, which is why sync insertion puts fence.proxy.async between
each producer thread's stores and its arrival. A barrier of the whole block left in the
consumers' code (the serial grid reduction's) becomes a named barrier of the consumers' threads: the producer never
reaches it. The fences the async proxy needs beyond this protocol (wgmma.fence after the
accumulators are zeroed, fence.proxy.async after generic writes that TMA or wgmma read)
are sync insertion's; the Hopper verifier proves the whole.

A persistent kernel's tile loop (the top-level loop around the K loop) is coalesced with
it first: one loop w over (tile, K tile) pairs, the stage w % S rotating on across tiles,
the tile loop's statements before the K loop run at the first K tile (before the wait),
those after it (the epilogue) at the last (after the release), the K tile counted in a
register; the wgmmas overwrite their accumulator at a tile's first K tile instead of
zeros in the loop. So the protocol keeps one run-time loop (what the verifier proves for
every trip count) and the producer loads the next tile during this one's epilogue.

It sits below the circular_buffer pass, which calls it, and above kernel IR.
"""

from dataclasses import fields

from fuserir.dtypes import DataType
from fuserir.errors import ScheduleError

from .. import kir
from ..kir import effects, visit as kir_visit
from .analysis import WARP_GROUP

CONSUMER_BARRIER_ID = 1      # the named barrier that stands for the consumers' __syncthreads
REGISTERS_PER_BLOCK = 65536  # a block's registers at most (sm_80, sm_90): the launch bound's


def _special(ctx, kind, axis):
    return kir.Special(kind, axis, ctx.index_dtype)


def _tx_bytes(ctx, copies):
    """Bytes the TMA loads among `copies` move per iteration (boxes in constant loops)."""
    total = 0

    def visit(stmts, times):
        nonlocal total
        for s in stmts:
            if isinstance(s, kir.ForLoop):
                if not isinstance(s.extent, kir.Const):
                    raise ScheduleError(f"the loop of TMA boxes {s.var.name} must have a "
                                        "constant extent")
                visit(s.body, times * s.extent.value)
            else:
                op = s.effects().mbarrier
                if op is not None and op.op == "complete_tx":
                    total += times * op.value
                for body in s.bodies():
                    visit(body, times)

    visit(copies, 1)
    return ctx.const(total)


def _complete_on(copies, bars, index):
    """Every TMA load among `copies` completes its transaction bytes on mbarrier
    bars[index]."""
    for s in kir.walk(copies):
        op = s.effects().mbarrier
        if op is not None and op.op == "complete_tx":
            s.complete_on(bars, index)


class _ConsumerBarriers(kir_visit.StmtMutator):
    """A __syncthreads in the consumers' code becomes bar.sync over their threads."""

    def __init__(self, threads):
        self.threads = threads

    def mutate_stmt(self, s):
        if not effects.is_block_barrier(s.effects()):
            return self.generic_mutate(s)
        return kir.NamedBarrier(CONSUMER_BARRIER_ID, self.threads, sync_id=s.sync_id,
                                reasons=s.reasons)


def _pool_end(ctx, kernel):
    """The first 16-byte aligned pool offset past every shared buffer but those that will
    move onto dead bytes (promote_reuse: reuse_shared places them after this pass, around
    the mbarriers, which stay live)."""
    end = ctx.const(0)
    moving = {b for tv, b in ctx.buffers.items() if tv.reuse_shared}
    for s in kernel.body:
        if isinstance(s, kir.Allocate) and s.buffer.memory is kir.Memory.shared \
                and s.buffer not in moving:
            b = s.buffer
            last = ctx.binop("add", b.byte_offset,
                             ctx.binop("mul", b.size, ctx.const(b.dtype.itemsize)))
            end = ctx.binop("max", end, last)
    return ctx.binop("mul", ctx.binop("ceildiv", end, ctx.const(16)), ctx.const(16))


def _consume(ctx, loop, rest, bars, stages, stage, parity, head=(), tail=()):
    """The consumers' loop body: wait for tile i, compute on it, retire its wgmmas
    (wait_group 0), release its stage. (Keeping one tile's wgmmas in flight while the next
    tile's are issued measured no faster with two consumer warp groups: docs/perf.md.)
    A coalesced tile loop's statements before its K loop (`head`: the epilogue's loads
    of a tile) run before the wait, while the tile lands; those after
    it (`tail`: the epilogue) once the stage is released, so that the producer refills
    it meanwhile."""
    wgmma = any(effects.joins_group(s.effects(), "wgmma") for s in kir.walk(rest))
    retire = [kir.WgmmaCommit(), kir.WgmmaWait(0)] if wgmma else []
    loop.body = [*head, kir.MbarrierWait(bars, stage, parity), *rest, *retire,
                 kir.MbarrierArrive(bars, ctx.binop("add", stage, ctx.const(stages))),
                 *tail]


class _Coalesce(kir_visit.ExprMutator):
    """Indices of the coalesced loop w = t Kt + k (t the tile loop's index, k the K
    loop's, Kt its extent): k % S, a stage, becomes w % S, so the stages rotate on across
    tiles with the mbarriers' phases; t and k become w / Kt and w % Kt."""

    def __init__(self, ctx, tile_var, k_var, w, k_tiles, stages):
        self.tile_var, self.k_var, self.stages = tile_var, k_var, stages
        self.stage = ctx.binop("mod", w, ctx.const(stages))
        self.tile = ctx.binop("div", w, k_tiles)
        self.k = ctx.binop("mod", w, k_tiles)

    def mutate_BinOp(self, e):
        if e.op == "mod" and e.a == self.k_var and isinstance(e.b, kir.Const) \
                and e.b.value == self.stages:
            return self.stage
        return self.generic_mutate(e)

    def mutate_Var(self, v):
        return self.tile if v == self.tile_var else self.k if v == self.k_var else v

    def statements(self, stmts):
        out = [kir.copy_stmt(s, {}) for s in stmts]
        for s in kir.walk(out):
            for f in fields(s):
                value = getattr(s, f.name)
                if isinstance(value, kir.ScalarExpr):
                    setattr(s, f.name, self.mutate(value))
        return out


def _coalesce(ctx, kernel, loop, copies, rest, stages, names):
    """A persistent kernel's tile loop (a top-level loop holding `loop`, the K loop the
    caches rotate over) and the K loop as one loop over (tile, K tile) pairs:
    (new loop, its copies, the rest of its body, the tile loop's statements before the K
    loop to run when k == 0, those after it when k == Kt - 1). One loop, so the producer
    runs ahead across tiles (the next tile's stages load during this one's epilogue) and
    the protocol has one run-time loop, which the Hopper verifier proves for every trip
    count."""
    outer = next((s for s in kernel.body if isinstance(s, kir.ForLoop) and loop in s.body),
                 None)
    if outer is None:
        raise ScheduleError(f"{names}: a warp-specialized circular buffer rotates over a "
                            "loop of the kernel's outermost level, or over one nested "
                            "directly in a top-level loop (a persistent kernel's tile "
                            "loop), not one nested deeper or in a condition")
    if any(isinstance(e, kir.Var) and e == outer.var for e in kir.walk_expr(loop.extent)):
        raise ScheduleError(f"{names}: the K loop's extent {kir.format_expr(loop.extent)} "
                            f"depends on the tile loop's {outer.var.name}")
    at = outer.body.index(loop)
    head, tail = outer.body[:at], outer.body[at + 1:]
    buffers = {b for s in kir.walk(copies) for a in s.effects().accesses if a.write
               for b in (a.buffer,)}
    for s in kir.walk(head + tail):
        if any(a.buffer in buffers for a in s.effects().accesses):
            raise ScheduleError(f"{names}: {kir.format_stmt(s)}, in the tile loop around "
                                "the pipeline, uses its buffers; only the K loop may")
    k_tiles = loop.extent
    w = kir.Var(f"w{len(ctx.loop_vars)}", ctx.index_dtype)
    rewrite = _Coalesce(ctx, outer.var, loop.var, w, k_tiles, stages)
    # The consumers test k == 0 and k == Kt - 1 every iteration, between one stage's
    # wgmmas and the next's: on a register counter (an add and a select an iteration),
    # not as w % Kt, a division by a run-time value on that path
    k = kir.Buffer(f"{w.name}_k", ctx.index_dtype, kir.Memory.local, size=ctx.const(1))
    zero, one = ctx.const(0), ctx.const(1)
    at_k = kir.Load(k, zero)
    first = ctx.binop("eq", at_k, zero)
    last = ctx.binop("eq", at_k, ctx.binop("sub", k_tiles, one))
    following = ctx.binop("add", at_k, one)
    counter = ([kir.Allocate(k), kir.Store(k, zero, zero)],
               [kir.Store(k, zero, kir.Select(ctx.binop("eq", following, k_tiles), zero,
                                              following, ctx.index_dtype))])
    rest = rewrite.statements(rest)
    head = _first_wgmmas_overwrite(ctx, head, rest, at_k)
    head = [kir.IfThenElse(first, rewrite.statements(head))] if head else []
    tail = [kir.IfThenElse(last, rewrite.statements(tail))] if tail else []
    merged = kir.ForLoop(w, ctx.binop("mul", outer.extent, k_tiles), [], loop.kind)
    kernel.body[kernel.body.index(outer)] = merged
    return merged, rewrite.statements(copies), rest, head, tail, counter


def _zeros_of(stmt, buffers):
    """The buffer among `buffers` that `stmt` fills with zeros (stores of 0 under
    unrolled loops, nothing else), or None."""
    if isinstance(stmt, kir.ForLoop):
        found = {_zeros_of(x, buffers) for x in stmt.body}
        return found.pop() if len(found) == 1 else None
    written = [a.buffer for a in effects.register_writes(stmt.effects())]
    if stmt.stores_zeros() and len(written) == 1 and written[0] in buffers:
        return written[0]
    return None


def _accumulator(stmt):
    """The registers an asynchronous instruction accumulates into (a wgmma's), or None."""
    return next((a.buffer for a in effects.async_register_uses(stmt.effects()) if a.write),
                None)


def _first_wgmmas_overwrite(ctx, head, rest, k):
    """`head` without the zeros of the wgmmas' accumulators, the first wgmma of each tile
    overwriting its accumulator instead (accumulating only where K tile k > 0 or a loop
    around it that its accumulator's index does not follow is past its first step), as a
    non-persistent kernel's zeros before its K loop would: zeroed in the loop, the
    registers were selected (selp) every K tile, 128 instructions a thread for a 64x256
    warp-group tile, between one stage's wgmmas and the next's."""
    wgmmas = []

    def visit(stmts, loops):
        for x in stmts:
            if _accumulator(x) is not None:
                wgmmas.append((x, loops))
            for body in x.bodies():
                visit(body, loops + [x] if isinstance(x, kir.ForLoop) else loops)

    visit(rest, [])
    buffers = {_accumulator(x) for x, _ in wgmmas}
    zeroed = {id(_zeros_of(x, buffers)) for x in head} - {id(None)}
    if not zeroed:
        return head
    for x, loops in wgmmas:
        if id(_accumulator(x)) not in zeroed:
            continue
        index = next(a.index for a in effects.async_register_uses(x.effects()) if a.write)
        used = {e for e in kir.walk_expr(index) if isinstance(e, kir.Var)}
        later = ctx.binop("ne", k, ctx.const(0))
        for loop in loops:
            if loop.var not in used:
                later = ctx.binop("or", later, ctx.binop("ne", loop.var, ctx.const(0)))
        if not x.accumulate_only_where(later):
            raise ScheduleError(f"{kir.format_stmt(x)}: its accumulator is zeroed at each "
                                "tile, but it cannot overwrite it instead")
    return [x for x in head if id(_zeros_of(x, buffers)) not in zeroed]


def _expressions(stmts):
    """Every subexpression of every statement in `stmts`."""
    for s in kir.walk(stmts):
        for e in kir.expressions(s):
            yield from kir.walk_expr(e)


def _is_ty(e):
    return isinstance(e, kir.Special) and e.kind is kir.SpecialKind.threadIdx and e.axis == "y"


def _split_by_proxy(copies, names):
    """(TMA loads, element copies) among the top-level statements of `copies`: each
    operand's tile is loaded one way (a statement that loads some bytes by TMA and others
    by copies is refused)."""
    tma, generic = [], []
    for s in copies:
        boxes = any(effects.async_shared(x.effects()) for x in kir.walk([s]))
        stores = any(effects.generic_shared(x.effects()) for x in kir.walk([s]))
        if boxes and stores:
            raise ScheduleError(f"{names}: {kir.format_stmt(s)} loads part of a tile by TMA "
                                "and part by copies; a tile is loaded one way")
        (tma if boxes else generic).append(s)
    return tma, generic


def _check_producer_copies(copies, names):
    """The element copies run in the producer warp group: along TIDx only (the
    predicates pass guards them by no TIDy row either)."""
    if any(_is_ty(e) for e in _expressions(copies)):
        raise ScheduleError(f"{names}: the producer warp group copies its tiles with its "
                            f"{WARP_GROUP} threads along TIDx; a copy bound to TIDy would "
                            "need the consumers' threads")


def register_split(groups, producer, names):
    """(the producer's, each consumer's) registers a thread for a block of `groups`
    consumer warp groups and a producer keeping `producer`: the consumers share what the
    producer gives up, in multiples of 8, at most 256. Refused where the producer would
    keep more than a thread of the bounded block has (setmaxnreg.dec only lowers)."""
    threads = WARP_GROUP * (groups + 1)
    bound = REGISTERS_PER_BLOCK // threads // 8 * 8
    if producer > bound:
        raise ScheduleError(f"{names}: producer_registers={producer} is more than the "
                            f"{bound} registers a thread of a block of {threads} threads has; "
                            "the producer gives registers away")
    consumer = min(256, (REGISTERS_PER_BLOCK - WARP_GROUP * producer)
                   // (WARP_GROUP * groups) // 8 * 8)
    return producer, consumer


def build(ctx, kernel, loop, copies, rest, stages, names, producer_registers=None):
    """Rewrite `kernel` (whose top-level loop `loop` holds `copies` then `rest`) into the
    warp-specialized pipeline of the module header; with `producer_registers`, the
    producer gives its other registers to the consumers (setmaxnreg, first thing in each
    role)."""
    head = tail = ()
    counter = [], []
    if loop not in kernel.body:
        loop, copies, rest, head, tail, counter = _coalesce(ctx, kernel, loop, copies,
                                                            rest, stages, names)
    bx, by, bz = kernel.launch.block
    if kir.format_expr(bx) != str(WARP_GROUP) or not isinstance(by, kir.Const) or \
            kir.format_expr(bz) != "1":
        raise ScheduleError(f"{names}: a warp-specialized kernel's threads are warp groups "
                            f"of {WARP_GROUP} along TIDx and warp groups along TIDy, but the "
                            f"block is ({', '.join(kir.format_expr(e) for e in (bx, by, bz))})")
    groups = by.value
    consumers = groups * WARP_GROUP
    ctx.ranges.specials[(kir.SpecialKind.threadIdx, "y")] = (0, groups)   # + the producer
    tx, ty = (_special(ctx, kir.SpecialKind.threadIdx, a) for a in "xy")
    bars = kir.Buffer("pipeline_bars", DataType.i64, kir.Memory.shared,
                      ctx.const(2 * stages), byte_offset=_pool_end(ctx, kernel))
    full = lambda s: s                                             # noqa: E731
    empty = lambda s: ctx.binop("add", s, ctx.const(stages))       # noqa: E731

    var = loop.var
    stage = ctx.binop("mod", var, ctx.const(stages))
    parity = ctx.binop("mod", ctx.binop("div", var, ctx.const(stages)), ctx.const(2))
    boxes, stores = _split_by_proxy(copies, names)
    kind = "copies and TMA loads" if boxes and stores else "TMA loads" if boxes else "copies"
    wait_empty = kir.MbarrierWait(bars, empty(stage), ctx.binop("xor", parity, ctx.const(1)))
    if boxes:
        _complete_on(boxes, bars, full(stage))
        expect = kir.MbarrierArrive(bars, full(stage), tx_bytes=_tx_bytes(ctx, boxes))
    if stores:
        _check_producer_copies(stores, names)
    if not stores:           # thread 0: expect the boxes' bytes, issue them
        produce = [wait_empty, expect, *boxes]
    elif not boxes:          # every producer thread: its copies, then its arrival
        produce = [wait_empty, *stores, kir.MbarrierArrive(bars, full(stage))]
    else:                    # every thread copies and arrives; thread 0's arrival also
        produce = [wait_empty, *stores,        # expects the boxes, which it then issues
                   kir.IfThenElse(ctx.binop("eq", tx, ctx.const(0)), [expect, *boxes],
                                  [kir.MbarrierArrive(bars, full(stage))])]
    producer = kir.ForLoop(var, loop.extent, produce, loop.kind)
    _consume(ctx, loop, rest, bars, stages, stage, parity, head, [*tail, *counter[1]])

    at = next(i for i, s in enumerate(kernel.body) if not isinstance(s, kir.Allocate))
    allocations, work = kernel.body[:at], kernel.body[at:]
    work = _ConsumerBarriers(consumers).mutate(work)
    if counter[0]:
        at_loop = work.index(loop)
        work[at_loop:at_loop] = counter[0]
    s = kir.Var(f"s{len(ctx.loop_vars)}", ctx.index_dtype)
    first = ctx.binop("and", ctx.binop("eq", tx, ctx.const(0)),
                      ctx.binop("eq", ty, ctx.const(0)))
    init = kir.IfThenElse(first, [
        kir.ForLoop(s, ctx.const(stages), [kir.MbarrierInit(bars, full(s), ctx.const(
                        WARP_GROUP if stores else 1)),
                                           kir.MbarrierInit(bars, empty(s),
                                                            ctx.const(consumers))],
                    "unroll"),
        kir.FenceMbarrierInit()])
    produce = [producer if stores else
               kir.IfThenElse(ctx.binop("eq", tx, ctx.const(0)), [producer])]
    if producer_registers is not None:
        mine, theirs = register_split(groups, producer_registers, names)
        produce.insert(0, kir.SetMaxNReg(mine, increase=False))
        work = [kir.SetMaxNReg(theirs, increase=True)] + work
    roles = kir.IfThenElse(ctx.binop("eq", ty, ctx.const(groups)), [
        kir.Comment(f"the producer warp group: {kind} of {names}, {stages} stages ahead"),
        *produce], work)
    kernel.body = allocations + [kir.Allocate(bars), init, kir.Barrier(), roles]
    kernel.launch.block = (bx, ctx.const(groups + 1), bz)
    return kernel
