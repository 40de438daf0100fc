"""Pass `grid_reductions`: split-K across CTAs: serial, parallel, atomic or cluster.

A reduction marked serial_grid_reduction(), parallel_grid_reduction(),
atomic_grid_reduction() or cluster_grid_reduction() binds a reduction
axis to BIDz: the CTAs of one output tile (same blockIdx.x, blockIdx.y) each reduce a
slice of it, then combine their partials through global workspaces and semaphores (kir's
grid synchronization statements), or, in a cluster, through each other's shared
memory. Serial: in launch order, through a turnstile:

```text
if z > 0:    if thread 0: SemWait(sem[tile] == z)     acquire split z-1's partials
Barrier
if z > 0:    acc[e] = op(acc[e], work[tile, e, thread])   (+ for sum, max for max)
if z < last: work[tile, e, thread] = acc[e]; Fence; Barrier
             if thread 0: SemRelease(sem[tile] = z + 1)
else:        if z > 0: if thread 0: SemRelease(sem[tile] = 0)   reset for the next launch
             <the rest of the kernel: only the last split computes the epilogue>
```

Parallel: every CTA of the tile at once, the sum spread over them, in a fixed order. Where
the rest of the kernel stores register elements of the accumulator (its output from the
registers, element by element), each CTA stores the elements it summed ("stored where
summed"):

```text
if last > 0: work[tile, z, e, thread] = acc[e]; Fence; Barrier
             if thread 0: SemArrive(arrived[tile] += 1); SemWait(arrived[tile] == splits)
                          SemArrive(passed[tile] += 1)
             Barrier
             for e in this CTA's run [first, end) of the elements (about E / splits of them):
                 each warp: its 32 threads' 16-byte vectors of work[tile, *, e, thread]
                 summed by eight lane groups (group g: splits g, g + 8, ... in order),
                 combined ((g0 op g1) op (g2 op g3)) op ((g4 op g5) op (g6 op g7)) (a
                 butterfly: shuffles xor 4, 8, 16),
                 each thread's own sum handed to it by one more shuffle: acc[e] = it
<the rest of the kernel, its stores of element x only where first <= x < end>
if last > 0 and z == last: if thread 0: SemWait(passed[tile] == splits)
                                        SemRelease(arrived[tile] = 0)
                                        SemRelease(passed[tile] = 0)
```

The last CTA resets the counters once every CTA has passed its wait (`passed`); nothing
waits on the sums. Where the rest stages the output through shared memory, or the
accumulator is too large to stay live through the sum (its E registers and 112 more
exceed a thread's share of the block's), the last CTA gathers the sums instead
("gathered"): the accumulator is dead while the slices are summed:

```text
if last > 0: work[tile, z, e, thread] = acc[e]; Fence; Barrier
             if thread 0: SemArrive(arrived[tile] += 1); SemWait(arrived[tile] == splits)
             Barrier
             for p in slice z of the tile (L = a multiple of the threads, L * splits >= E T):
                 sums[tile, p] = the same eight lane groups' sum, in the same order
             Fence; Barrier; if thread 0: SemArrive(done[tile] += 1)
if z == last:
  if last > 0: if thread 0: SemWait(done[tile] == splits)
               Barrier; acc[e] = sums[tile, e, thread]
               if thread 0: SemRelease(arrived[tile] = 0); SemRelease(done[tile] = 0)
  <the rest of the kernel>
```

Both read the splits' partials in batches of a constant, unrolled loop (a run-time loop
unrolled by a factor larger than its count runs its reads one by one), and both give the
same bits.

Atomic (a sum only; opt-in: the adds land in an order the hardware picks, so the last
bits may differ run to run): every CTA adds its partials into the tile's sums, the last
reads them and stores zeros back, so the sums workspace is zero for the next launch as
the counters are:

```text
if last > 0: sums[tile, e, thread] += acc[e] (red.global.add, every e); Fence; Barrier
             if thread 0: SemArrive(arrived[tile] += 1)
if z == last:
  if last > 0: if thread 0: SemWait(arrived[tile] == splits)
               Barrier; acc[e] = sums[tile, e, thread]; sums[tile, e, thread] = 0
               if thread 0: SemRelease(arrived[tile] = 0)
  <the rest of the kernel>
```

Cluster (sm_90): the CTAs of a tile are one thread-block cluster (kernel.cluster =
(1, 1, splits): at most 16), so they are resident at once and read each other's shared
memory. No workspace, no semaphore, no fence:

```text
if last > 0: partials[e, thread] = acc[e] (this CTA's shared memory, every e)
             ClusterBarrier                     every CTA's partials visible to the cluster
             for e in this CTA's run [first, end) (as the parallel form's):
                 acc[e] = partials[e, thread] of CTA 0, 1, .., last, summed in that order
                 (ld.shared::cluster, batches of SUM_LOADS reads in flight)
<the rest of the kernel, its stores of element x only where first <= x < end>
if last > 0: ClusterBarrier                     no CTA exits while a peer reads its partials
```

The parallel sum costs each CTA a slice (E T / splits elements times the splits) instead
of the whole tile, so it stays short with many splits, and its order is fixed: the same
bits every run (the two forms' bits are the same). Its CTAs (and the atomic reduction's last one) wait for CTAs launched
after them, so the kernel is marked co_resident: the launcher refuses a grid the device
cannot hold at once and launches it cooperatively (every block resident at once, even
beside other streams' kernels).

Each thread keeps its own partials (work is laid out [.., element, thread] so the
accesses are coalesced), so no shared memory is involved and the barriers here belong to
the semaphore protocol, not to shared-memory hazards. Sizes and the split factor are
kernel arguments, so the workspaces' sizes are expressions over them. With one split (a
run-time factor of 1) no workspace is touched and all take no bytes: a call then
allocates and zeroes nothing for them. The zeroed workspaces (semaphores, the atomic
sums) must be zero before a launch and every launch leaves them zero, so the executor
zeroes them once per stream and keeps them.
"""

from fuserir.dtypes import DataType
from fuserir.errors import ScheduleError
from fuserir.ir.exprs import ReductionOp

from .. import kir
from ..kir import visit as kir_visit
from ..contract import Pass
from ..support.analysis import WARP_GROUP
from ..support.warp_specialized import register_split
from .indexing import combine, identity


def _special(ctx, kind, axis):
    return kir.Special(kind, axis, ctx.index_dtype)


def _fresh(name, taken):
    """`name`, or `name` with underscores appended, that is not in `taken`."""
    while name in taken:
        name += "_"
    taken.add(name)
    return name


class _Grid:
    """The names a grid reduction's protocol is written with: the tile, the thread, the
    turn and their counts, as index expressions."""

    def __init__(self, ctx, kernel, tv):
        self.ctx, self.tv, self.acc = ctx, tv, ctx.accumulators[tv]
        grid, block = kernel.launch.grid, kernel.launch.block
        b = lambda a: _special(ctx, kir.SpecialKind.blockIdx, a)     # noqa: E731
        t = lambda a: _special(ctx, kir.SpecialKind.threadIdx, a)    # noqa: E731
        self.tile = ctx.binop("add", b("x"), ctx.binop("mul", grid[0], b("y")))
        self.tiles = ctx.binop("mul", grid[0], grid[1])
        self.thread = ctx.binop("add", t("x"), ctx.binop("mul", block[0], ctx.binop(
            "add", t("y"), ctx.binop("mul", block[1], t("z")))))
        self.threads = ctx.binop("mul", block[0], ctx.binop("mul", block[1], block[2]))
        self.z, self.splits = b("z"), grid[2]
        self.last = ctx.binop("sub", grid[2], ctx.const(1))
        # 0 for one split, else 1: one split touches no workspace, which then takes no bytes
        self.several = ctx.binop("ceildiv", self.last, grid[2])
        # workspaces are arguments by name (kir.arg_name), beside the user's tensors and scalars
        self.taken = {x.name for x in ctx.fusion.tensors} | set(ctx.scalar_vars) | \
            set(ctx.fusion.scalars)
        self.op = combine(tv.definition.op if isinstance(tv.definition, ReductionOp)
                          else "sum")
        # positions a lane sums side by side, read as one vector (the two parallel forms)
        self.vector = max(1, min(SUM_VECTOR, SUM_VECTOR_BYTES // self.acc.dtype.itemsize))

    def workspace(self, kernel, suffix, dtype, size, zeroed=False):
        ctx = self.ctx
        buffer = kir.Buffer(_fresh(f"{self.tv.name}_{suffix}", self.taken), dtype,
                            kir.Memory.global_)
        kernel.workspaces.append(kir.Workspace(buffer, ctx.binop("mul", size, self.several),
                                               zeroed=zeroed))
        return buffer

    def fresh_var(self, prefix):
        v = kir.Var(f"{prefix}{len(self.ctx.fragment_vars)}", self.ctx.index_dtype)
        self.ctx.fragment_vars.append(v)
        return v

    def thread0(self, *stmts):
        return kir.IfThenElse(self.ctx.binop("eq", self.thread, self.ctx.const(0)),
                              list(stmts))


def _turnstile(ctx, kernel, tv, rest):
    """The serial grid reduction of `tv` (see the module docstring), `rest` the
    statements after it."""
    g = _Grid(ctx, kernel, tv)
    acc, tile, threads, z, last = g.acc, g.tile, g.threads, g.z, g.last
    work = kir.Buffer(_fresh(f"{tv.name}_work", g.taken), acc.dtype, kir.Memory.global_)
    sem = kir.Buffer(_fresh(f"{tv.name}_sem", g.taken), DataType.i32, kir.Memory.global_)
    kernel.workspaces += [
        kir.Workspace(work, ctx.binop("mul", ctx.binop("mul", g.tiles, g.several),
                                      ctx.binop("mul", acc.size, threads))),
        kir.Workspace(sem, ctx.binop("mul", g.tiles, g.several), zeroed=True)]

    e = g.fresh_var("e")
    slot = ctx.binop("add", ctx.binop("mul", ctx.binop("add", ctx.binop(
        "mul", tile, acc.size), e), threads), g.thread)
    value = kir.Load(acc, e)

    def each_element(stmt):
        return kir.ForLoop(e, acc.size, [stmt], "unroll")   # registers: constant indices

    add = each_element(kir.Store(acc, e, kir.BinOp(g.op, value, kir.Load(work, slot),
                                                   acc.dtype)))
    store = each_element(kir.Store(work, slot, value))
    not_last = [store, kir.Fence(), kir.Barrier(),
                g.thread0(kir.SemRelease(sem, tile, ctx.binop("add", z, ctx.const(1))))]
    after_first = ctx.binop("gt", z, ctx.const(0))
    is_last = [kir.IfThenElse(after_first, [g.thread0(kir.SemRelease(sem, tile,
                                                                     ctx.const(0)))])] + rest
    return [kir.Comment(f"serial grid reduction of {tv.name} over BIDz: CTAs of a tile in "
                        "turn"),
            kir.IfThenElse(after_first, [g.thread0(kir.SemWait(sem, tile, z))]), kir.Barrier(),
            kir.IfThenElse(after_first, [add]),
            kir.IfThenElse(ctx.binop("lt", z, last), not_last, is_last)]


WARP = 32
# The sums over the splits (both forms): 8 groups of a warp's lanes each take every 8th
# split, SUM_LOADS of them read at a time, combined by shuffles (docs/perf.md, "the
# split-K's tail": 4, 8 and 16 reads in flight measured the same)
SUM_GROUPS = 8     # a slice's splits summed by 8 groups of a warp's lanes, combined by shuffles
SUM_VECTOR = 4     # each lane sums 4 neighbouring positions, read 16 bytes at a time
SUM_VECTOR_BYTES = 16   # (of wider elements, as many as 16 bytes hold: an f64 2, a welford 1)
SUM_LOADS = 8
# Stored where summed is taken where the accumulator's registers, live through the sum,
# and SUM_REGISTERS more fit a thread's share (ptxas, sm_90a: 128x64 tiles, 32 elements,
# 84 registers; 64x192 tiles, 96 elements, 180; 128x128 tiles' bias-relu kernel, 64
# elements, 167-185, over the 170 a thread of 384 has: gathered, 160)
SUM_REGISTERS = 112
REGISTERS_PER_BLOCK, MAX_REGISTERS = 65536, 255


def _parallel(ctx, kernel, tv, rest):
    """The parallel grid reduction of `tv` (see the module docstring), `rest` the
    statements after it: stored where summed where `rest` stores register elements only,
    else gathered by the last CTA."""
    g = _Grid(ctx, kernel, tv)
    try:
        threads = int(kir.evaluate_scalar(g.threads, {}))
    except (KeyError, TypeError):
        threads = None
    if threads is None or threads % WARP:
        raise ScheduleError(f"{tv.name}: a parallel grid reduction needs a block of a "
                            f"constant multiple of {WARP} threads")
    kernel.co_resident = True
    stores = _element_stores(rest, g.acc)
    if stores is not None and _accumulator_may_stay_live(ctx, g, threads):
        return _stored_where_summed(ctx, kernel, g, rest, stores)
    return _gathered(ctx, kernel, g, rest, threads)


def _accumulator_may_stay_live(ctx, g, threads):
    """Stored where summed keeps the accumulator's E registers live beside the sum's:
    taken where E + SUM_REGISTERS fit a thread's share of the block's registers (the
    producer warp group of a TMA pipeline counted in, and where it gives registers to the
    consumers (setmaxnreg), a consumer's share after the split). Else the gathered form,
    whose sum runs with the accumulator dead."""
    share = REGISTERS_PER_BLOCK // threads
    specialized = [tv for tv in ctx.circular if tv.warp_specialized is not None]
    if specialized:
        producer = specialized[0].producer_registers
        share = REGISTERS_PER_BLOCK // (threads + WARP_GROUP) if producer is None else \
            register_split(threads // WARP_GROUP, producer, g.tv.name)[1]
    return g.acc.size.value + SUM_REGISTERS <= min(MAX_REGISTERS, share)


def _element_stores(rest, acc):
    """{id(store): (store, element index, width)} for the global stores of `rest` when
    each stores a register element of the accumulator's: it reads the accumulator, or
    registers computed element by element from it (same index), at one index; None where
    `rest` does anything else with memory (shared memory, a barrier, a store of something
    else, registers of the accumulator's values at other indices)."""
    derived = {id(acc)}                 # the accumulator and registers computed from it
    stores = {}
    for s in kir.walk(rest):
        if s.bodies():
            continue
        fx = s.effects()
        if fx.order is not None or any(a.memory is kir.Memory.shared for a in fx.accesses):
            return None
        loads = [x for e in kir.expressions(s) for x in kir.walk_expr(e)
                 if isinstance(x, kir.Load)]
        if any(x.buffer.memory is kir.Memory.shared for x in loads):
            return None
        reads = [x for x in loads if id(x.buffer) in derived]
        if len({kir.format_expr(x.index) for x in reads}) > 1:
            return None
        writes = [a for a in fx.accesses if a.write]
        if not writes:
            if reads:
                return None
            continue
        (write,) = writes if len(writes) == 1 and writes[0].via == "store" else (None,)
        if write is None:
            return None
        if write.memory is kir.Memory.local:
            if reads and kir.format_expr(reads[0].index) != kir.format_expr(write.index):
                return None
            if reads:
                derived.add(id(write.buffer))
        elif write.memory is kir.Memory.global_ and reads:
            stores[id(s)] = (s, reads[0].index, max(x.width for x in reads))
        else:
            return None
    return stores or None


class _Guard(kir_visit.StmtMutator):
    """Each store of `stores` only where its element index satisfies `cond(index)`."""

    def __init__(self, stores, cond):
        self.stores, self.cond = stores, cond

    def mutate_stmt(self, s):
        if id(s) in self.stores:
            _, index, _ = self.stores[id(s)]
            return kir.IfThenElse(self.cond(index), [s])
        return self.generic_mutate(s)


def _stored_where_summed(ctx, kernel, g, rest, stores):
    """Every CTA of the tile sums a run of the threads' register elements over the splits
    and stores those elements itself: no second arrival to wait for, no sums to gather."""
    acc, binop, const = g.acc, ctx.binop, ctx.const
    row = binop("mul", acc.size, g.threads)                  # E T: one CTA's partials
    work = g.workspace(kernel, "work", acc.dtype, binop("mul", binop("mul", g.tiles,
                                                                     g.splits), row))
    arrived = g.workspace(kernel, "arrived", DataType.i32, g.tiles, zeroed=True)
    passed = g.workspace(kernel, "passed", DataType.i32, g.tiles, zeroed=True)

    def partial(split, position):     # work[tile, split, position = element T + thread]
        return binop("add", binop("mul", binop("add", binop("mul", g.tile, g.splits), split),
                                  row), position)

    e = g.fresh_var("e")
    write = kir.ForLoop(e, acc.size, [kir.Store(work, partial(g.z, binop(
        "add", binop("mul", e, g.threads), g.thread)), kir.Load(acc, e))], "unroll")
    # this CTA's elements: [first, end), a whole number of the widest store's vectors
    width = max(w for _, _, w in stores.values())
    per = binop("mul", binop("ceildiv", binop("ceildiv", acc.size, g.splits), const(width)),
                const(width))
    first = binop("mul", g.z, per)
    end = binop("min", binop("add", first, per), acc.size)
    guarded = _Guard(stores, lambda x: binop("and", binop("ge", x, first),
                                             binop("lt", x, end))).mutate(rest)

    sum_own, buffers = _sum_own_elements(ctx, g, work, partial, first, end)
    several = binop("gt", g.last, const(0))
    return [kir.Comment(f"parallel grid reduction of {g.tv.name} over BIDz: the CTAs of a "
                        "tile at once, each summing and storing a run of the elements"),
            *[kir.Allocate(b) for b in buffers],
            kir.IfThenElse(several, [
                write, kir.Fence(), kir.Barrier(),
                g.thread0(kir.SemArrive(arrived, g.tile, const(1)),
                          kir.SemWait(arrived, g.tile, g.splits),
                          kir.SemArrive(passed, g.tile, const(1))),
                kir.Barrier(), sum_own])] + guarded + [
            kir.IfThenElse(several, [kir.IfThenElse(binop("eq", g.z, g.last), [
                g.thread0(kir.SemWait(passed, g.tile, g.splits),
                          kir.SemRelease(arrived, g.tile, const(0)),
                          kir.SemRelease(passed, g.tile, const(0)))])])]


def _over_the_splits(ctx, g, group, make, groups=SUM_GROUPS):
    """make(s, checked) for s = 0 .. ceil(splits / groups) - 1 (lane group `group` reads
    split s groups + group) in as few batches as the registers allow: a batch's
    reads are in flight together, but a branch between two batches makes the second's
    wait for the first's. Batches of SUM_LOADS iterations while that many complete ones
    (every group's split exists) are left (a run-time loop of a constant, unrolled loop:
    `#pragma unroll` over a run-time count smaller than its factor runs the reads one by
    one), then the 0 .. SUM_LOADS iterations left as one `checked` batch, the smallest
    of 1, 2, 4 .. SUM_LOADS iterations that holds them (a group whose split does not
    exist reads the last split again and folds nothing). Each call of make builds fresh
    statements."""
    binop, const = ctx.binop, ctx.const
    full = binop("div", binop("div", g.splits, const(groups)), const(SUM_LOADS))
    b, s = g.fresh_var("b"), g.fresh_var("s")

    def batch(first, n, checked):         # iterations first .. first + n - 1, unrolled
        return [kir.ForLoop(s, const(n), make(binop("add", first, s), checked), "unroll")]

    start = binop("mul", full, const(SUM_LOADS))
    rest = binop("sub", binop("ceildiv", g.splits, const(groups)), start)
    sizes = [1 << i for i in range(SUM_LOADS.bit_length()) if 1 << i <= SUM_LOADS]
    chain = []
    for n, smaller in zip(reversed(sizes), [*reversed(sizes[:-1]), 0]):
        # rest in (smaller, n]: one batch of n; the else of the test before
        step = kir.IfThenElse(binop("gt", rest, const(smaller)), batch(start, n, True))
        if chain:
            chain[-1].else_body = [step]
        chain.append(step)
    return [kir.ForLoop(b, full, batch(binop("mul", b, const(SUM_LOADS)), SUM_LOADS,
                                       False)), chain[0]]


def _sum_own_elements(ctx, g, work, partial, first, end):
    """The loop that sums this CTA's elements [first, end) of every thread over the splits
    into the accumulator (kir, and the local buffers it uses). One element a round: a
    warp sums its 32 threads' positions, the 16-byte vectors of 4 threads by 8 groups of
    4 lanes (lane / 4: the group, splits group, group + 8, ...; lane % 4: the vector, in
    each half-warp), combines the groups by shuffles (xor 4, 8, 16: every lane then holds
    its vector's sums), and hands each thread its own sum through one more shuffle from
    the lane that holds it (xor 0-3)."""
    acc, op, binop, const, vector = g.acc, g.op, ctx.binop, ctx.const, g.vector
    lanes = WARP // SUM_GROUPS                      # vectors a half-warp (of 4 f32): 4
    halves = WARP // (lanes * vector)               # 2 (of 4 f32)
    r, j = g.fresh_var("r"), g.fresh_var("j")
    lane = binop("mod", g.thread, const(WARP))
    group, column = binop("div", lane, const(lanes)), binop("mod", lane, const(lanes))
    element = binop("add", first, r)
    here = binop("min", element, binop("sub", end, const(1)))     # (the proof's bound)
    base = binop("add", binop("mul", here, g.threads),
                 binop("mul", binop("div", g.thread, const(WARP)), const(WARP)))
    total, loaded, swap, own = (
        kir.Buffer(_fresh(f"{g.tv.name}_{name}", g.taken), acc.dtype, kir.Memory.local,
                   size=const(n))
        for name, n in (("sums", halves * vector), ("loaded", halves * vector),
                        ("swap", lanes), ("own", 1)))
    ident = identity(op, acc.dtype)

    def at(h, v):
        return const(h * vector + v)

    def fold(h, v, value):
        return kir.Store(total, at(h, v), kir.BinOp(op, kir.Load(total, at(h, v)), value,
                                                    acc.dtype))

    cells = [(h, v) for h in range(halves) for v in range(vector)]

    def add_split(s, checked):
        split = binop("add", binop("mul", s, const(SUM_GROUPS)), group)
        read = binop("min", split, g.last) if checked else split
        loads = [kir.Store(loaded, at(h, 0), kir.Load(work, partial(read, binop(
            "add", base, binop("add", const(h * lanes * vector),
                               binop("mul", column, const(vector))))), width=vector),
            width=vector) for h in range(halves)]
        return loads + [fold(h, v, kir.Select(binop("lt", split, g.splits), kir.Load(
            loaded, at(h, v)), ident, acc.dtype) if checked else kir.Load(loaded, at(h, v)))
            for h, v in cells]
    combine = [fold(h, v, kir.ShuffleXor(kir.Load(total, at(h, v)), lanes << k))
               for k in range(SUM_GROUPS.bit_length() - 1) for h, v in cells]

    def pick(index, values):              # values[index], index a run-time value
        out = values[-1]
        for i in range(len(values) - 2, -1, -1):
            out = kir.Select(binop("eq", index, const(i)), values[i], out, acc.dtype)
        return out

    # lane l's own sum sits in lane (l % 16) / 4 (+ 4 k) of its half at vector element
    # l % 4; lane l ^ m sends the element its partner wants, m = 0..3
    sums = [kir.Load(total, at(h, v)) for h, v in cells]
    half = binop("div", lane, const(lanes * vector))
    send = [kir.Store(swap, const(m), pick(binop("add", binop(
        "mul", half, const(vector)), binop("mod", binop("xor", lane, const(m)),
                                               const(vector))), sums))
        for m in range(lanes)]
    receive = [kir.Store(swap, const(m), kir.ShuffleXor(kir.Load(swap, const(m)), m))
               for m in range(1, lanes)]
    partner = binop("xor", column, binop("div", binop("mod", lane, const(lanes * vector)),
                                         const(vector)))
    # the thread's own sum, picked once: inside each element's select below, NVRTC
    # evaluated the pick lazily, a branch or two an element (75 a round: docs/perf.md)
    mine = kir.Store(own, const(0), pick(partner, [kir.Load(swap, const(m))
                                                   for m in range(lanes)]))
    take = kir.ForLoop(j, acc.size, [kir.Store(acc, j, kir.Select(
        binop("eq", j, element), kir.Load(own, const(0)), kir.Load(acc, j), acc.dtype))],
        "unroll")
    body = [*(kir.Store(total, at(h, v), ident) for h, v in cells),
            *_over_the_splits(ctx, g, group, add_split),
            *combine, *send, *receive, mine, take]
    # one round an element; a CTA past the last element has none
    return kir.ForLoop(r, binop("sub", binop("max", end, first), first), body), \
        [total, loaded, swap, own]


def _gathered(ctx, kernel, g, rest, threads):
    """Each CTA sums a slice of the tile's positions into the tile's sums; the last CTA
    waits for every slice, reads the sums and runs `rest`."""
    acc, op, binop, const, vector = g.acc, g.op, ctx.binop, ctx.const, g.vector
    per_split = binop("mul", acc.size, g.threads)               # E T: one CTA's partials
    # A round: each warp sums 32 / SUM_GROUPS positions x `vector` (4 f32) over its
    # groups of splits.
    lanes = WARP // SUM_GROUPS
    per_round = const(threads // WARP * lanes * vector)
    rounds = binop("ceildiv", binop("ceildiv", per_split, g.splits), per_round)
    slice_len = binop("mul", rounds, per_round)
    # a split's row: the slices end to end (>= E T, the positions past it never touched),
    # so that every index the protocol forms stays in its tile's and its split's row
    row = binop("mul", slice_len, g.splits)
    work = g.workspace(kernel, "work", acc.dtype,
                       binop("mul", binop("mul", g.tiles, g.splits), row))
    sums = g.workspace(kernel, "sums", acc.dtype, binop("mul", g.tiles, row))
    arrived = g.workspace(kernel, "arrived", DataType.i32, g.tiles, zeroed=True)
    done = g.workspace(kernel, "done", DataType.i32, g.tiles, zeroed=True)

    def partial(split, position):     # work[tile, split, position]
        return binop("add", binop("mul", binop("add", binop("mul", g.tile, g.splits),
                                               split), row), position)

    e = g.fresh_var("e")
    mine = binop("add", binop("mul", e, g.threads), g.thread)   # element e of this thread
    write = kir.ForLoop(e, acc.size, [kir.Store(work, partial(g.z, mine), kir.Load(acc, e))],
                        "unroll")
    # The slice: the positions z L + r R + (warp lanes + lane % lanes) 4 + v of the tile's
    # E T (lanes = 32 / SUM_GROUPS); lane / lanes is the lane's group, which sums the
    # splits group, group + SUM_GROUPS, ...
    r, v = g.fresh_var("r"), g.fresh_var("v")
    lane = binop("mod", g.thread, const(WARP))
    group = binop("div", lane, const(lanes))
    column = binop("add", binop("mul", binop("div", g.thread, const(WARP)), const(lanes)),
                   binop("mod", lane, const(lanes)))
    position = binop("add", binop("mul", g.z, slice_len), binop(
        "add", binop("mul", r, per_round), binop("mul", column, const(vector))))
    total = kir.Buffer(_fresh(f"{g.tv.name}_slice", g.taken), acc.dtype, kir.Memory.local,
                       size=const(vector))
    loaded = kir.Buffer(_fresh(f"{g.tv.name}_loaded", g.taken), acc.dtype, kir.Memory.local,
                        size=const(vector))
    zero = const(0)

    def each(body):
        return kir.ForLoop(v, const(vector), body, "unroll")

    def fold(value):
        return kir.Store(total, v, kir.BinOp(op, kir.Load(total, v), value, acc.dtype))

    def add_split(s, checked):
        # checked: the clamp keeps the index in the tile's rows, so every read is made
        # (none waits on a branch); a clamped read folds the identity instead
        split = binop("add", binop("mul", s, const(SUM_GROUPS)), group)
        read = binop("min", split, g.last) if checked else split
        value = kir.Load(loaded, v)
        return [kir.Store(loaded, zero, kir.Load(work, partial(read, position),
                                                 width=vector), width=vector),
                each([fold(kir.Select(binop("lt", split, g.splits), value,
                                      identity(op, acc.dtype), acc.dtype)
                           if checked else value)])]
    in_tile = binop("lt", position, per_split)       # the same for a warp's lanes
    combine_groups = [each([fold(kir.ShuffleXor(kir.Load(total, v), mask))])
                      for mask in (lanes << k for k in range(SUM_GROUPS.bit_length() - 1))]
    sum_slice = kir.ForLoop(r, rounds, [
        each([kir.Store(total, v, identity(op, acc.dtype))]),
        kir.IfThenElse(in_tile, _over_the_splits(ctx, g, group, add_split)),
        *combine_groups,
        kir.IfThenElse(binop("and", in_tile, binop("eq", group, zero)), [
            kir.Store(sums, binop("add", binop("mul", g.tile, row), position),
                      kir.Load(total, zero, width=vector), width=vector)])])
    read = kir.ForLoop(e, acc.size, [kir.Store(acc, e, kir.Load(
        sums, binop("add", binop("mul", g.tile, row), mine)))], "unroll")
    several = binop("gt", g.last, zero)
    return [kir.Comment(f"parallel grid reduction of {g.tv.name} over BIDz: the CTAs of a "
                        "tile at once, each summing a slice"),
            kir.Allocate(total), kir.Allocate(loaded),
            kir.IfThenElse(several, [
                write, kir.Fence(), kir.Barrier(),
                g.thread0(kir.SemArrive(arrived, g.tile, const(1)),
                          kir.SemWait(arrived, g.tile, g.splits)),
                kir.Barrier(), sum_slice, kir.Fence(), kir.Barrier(),
                g.thread0(kir.SemArrive(done, g.tile, const(1)))]),
            kir.IfThenElse(binop("eq", g.z, g.last), [
                kir.IfThenElse(several, [
                    g.thread0(kir.SemWait(done, g.tile, g.splits)), kir.Barrier(), read,
                    g.thread0(kir.SemRelease(arrived, g.tile, zero),
                              kir.SemRelease(done, g.tile, zero))])] + rest)]


def _atomic(ctx, kernel, tv, rest):
    """The atomic grid reduction of `tv` (see the module docstring), `rest` the
    statements after it."""
    g = _Grid(ctx, kernel, tv)
    acc, binop, const = g.acc, ctx.binop, ctx.const
    if g.op != "add":
        raise ScheduleError(f"{tv.name}: an atomic grid reduction adds its partials "
                            "(red.global.add); it cannot combine them with "
                            f"{g.op}: use a serial or parallel grid reduction")
    sums = g.workspace(kernel, "sums", acc.dtype,
                       binop("mul", g.tiles, binop("mul", acc.size, g.threads)), zeroed=True)
    arrived = g.workspace(kernel, "arrived", DataType.i32, g.tiles, zeroed=True)
    e = g.fresh_var("e")
    slot = binop("add", binop("mul", binop("add", binop("mul", g.tile, acc.size), e),
                              g.threads), g.thread)          # sums[tile, e, thread]
    zero = const(0)
    add = kir.ForLoop(e, acc.size, [kir.AtomicAdd(sums, slot, kir.Load(acc, e))], "unroll")
    take = kir.ForLoop(e, acc.size, [kir.Store(acc, e, kir.Load(sums, slot)),
                                     kir.Store(sums, slot, identity("add", acc.dtype))],
                       "unroll")
    several = binop("gt", g.last, zero)
    kernel.co_resident = True
    return [kir.Comment(f"atomic grid reduction of {tv.name} over BIDz: the CTAs of a "
                        "tile add their partials (red.global.add), the last reads the sum"),
            kir.IfThenElse(several, [
                add, kir.Fence(), kir.Barrier(),
                g.thread0(kir.SemArrive(arrived, g.tile, const(1)))]),
            kir.IfThenElse(binop("eq", g.z, g.last), [
                kir.IfThenElse(several, [
                    g.thread0(kir.SemWait(arrived, g.tile, g.splits)), kir.Barrier(), take,
                    g.thread0(kir.SemRelease(arrived, g.tile, zero))])] + rest)]


def _cluster(ctx, kernel, tv, rest):
    """The cluster grid reduction of `tv` (see the module docstring), `rest` the
    statements after it."""
    g = _Grid(ctx, kernel, tv)
    acc, op, binop, const = g.acc, g.op, ctx.binop, ctx.const
    stores = _element_stores(rest, acc)
    if stores is None:
        raise ScheduleError(f"{tv.name}: a cluster grid reduction has each CTA store the "
                            "elements it sums, so the rest of the kernel must store the "
                            "accumulator's register elements (not staged through shared "
                            "memory)")
    kernel.cluster = (const(1), const(1), g.splits)
    partials = kir.Buffer(_fresh(f"{tv.name}_partials", g.taken), acc.dtype,
                          kir.Memory.shared, binop("mul", acc.size, g.threads))
    partials.byte_offset = _pool_end(ctx, kernel)
    loaded, own = (kir.Buffer(_fresh(f"{tv.name}_{name}", g.taken), acc.dtype,
                              kir.Memory.local, size=const(1)) for name in ("loaded", "own"))
    zero = const(0)
    e, r, j = g.fresh_var("e"), g.fresh_var("r"), g.fresh_var("j")
    write = kir.ForLoop(e, acc.size, [kir.Store(partials, binop(
        "add", binop("mul", e, g.threads), g.thread), kir.Load(acc, e))], "unroll")
    # this CTA's elements: [first, end), a whole number of the widest store's vectors
    width = max(w for _, _, w in stores.values())
    per = binop("mul", binop("ceildiv", binop("ceildiv", acc.size, g.splits), const(width)),
                const(width))
    first = binop("mul", g.z, per)
    end = binop("min", binop("add", first, per), acc.size)
    element = binop("add", first, r)
    here = binop("add", binop("mul", binop("min", element, binop("sub", end, const(1))),
                              g.threads), g.thread)
    ident = identity(op, acc.dtype)

    def add_split(split, checked):
        value = kir.Load(loaded, zero)
        return [kir.ClusterLoad(loaded, zero, partials, here,
                                binop("min", split, g.last) if checked else split),
                kir.Store(own, zero, kir.BinOp(op, kir.Load(own, zero), kir.Select(
                    binop("lt", split, g.splits), value, ident, acc.dtype)
                    if checked else value, acc.dtype))]
    take = kir.ForLoop(j, acc.size, [kir.Store(acc, j, kir.Select(
        binop("eq", j, element), kir.Load(own, zero), kir.Load(acc, j), acc.dtype))],
        "unroll")
    sum_own = kir.ForLoop(r, binop("sub", binop("max", end, first), first), [
        kir.Store(own, zero, ident), *_over_the_splits(ctx, g, zero, add_split, groups=1),
        take])
    guarded = _Guard(stores, lambda x: binop("and", binop("ge", x, first),
                                             binop("lt", x, end))).mutate(rest)
    several = binop("gt", g.last, zero)
    return [kir.Allocate(partials),
            kir.Comment(f"cluster grid reduction of {tv.name} over BIDz: the tile's CTAs "
                        "one cluster, each summing its peers' partials for a run of the "
                        "elements and storing them"),
            kir.Allocate(loaded), kir.Allocate(own),
            kir.IfThenElse(several, [write, kir.ClusterBarrier(), sum_own])] + guarded + [
            kir.IfThenElse(several, [kir.ClusterBarrier()])]


def _pool_end(ctx, kernel):
    """The first 16-byte aligned byte past every shared buffer placed so far."""
    end = ctx.const(0)
    for s in kir.walk(kernel.body):
        if isinstance(s, kir.Allocate) and s.buffer.memory is kir.Memory.shared:
            b = s.buffer
            end = ctx.binop("max", end, ctx.binop("add", b.byte_offset, ctx.binop(
                "mul", b.size, ctx.const(b.dtype.itemsize))))
    return ctx.binop("mul", ctx.binop("ceildiv", end, ctx.const(16)), ctx.const(16))


_PROTOCOLS = {"serial": _turnstile, "parallel": _parallel, "atomic": _atomic,
              "cluster": _cluster}


def run(ctx, kernel):
    for s in kir.walk(kernel.body):
        if isinstance(s, kir.ExprStmt) and s.role == "grid_reduce" and s not in kernel.body:
            raise ScheduleError(f"{s.tv.name}: a grid reduction must finish outside every "
                                "loop (its non-reduction axes bound to blocks and threads, "
                                "or computed in registers inside its loops)")
    for i, s in enumerate(kernel.body):
        if isinstance(s, kir.ExprStmt) and s.role == "grid_reduce":
            protocol = _PROTOCOLS[s.tv.grid_reduction]
            stmts = protocol(ctx, kernel, s.tv, kernel.body[i + 1:])
            # a shared buffer of the protocol sits at the top, with the other allocations
            shared = [x for x in stmts if isinstance(x, kir.Allocate)
                      and x.buffer.memory is kir.Memory.shared]
            kernel.body[i:] = [x for x in stmts if not any(x is y for y in shared)]
            kernel.body[:0] = shared
            break
    return kernel


PASS = Pass("grid_reductions", run, __doc__, reads=("kernel", "accumulators"),
            why="after indexing (the accumulator exists), before predicates (the epilogue it "
                "wraps gets its guards)")
