"""A warp-specialized Hopper matmul, built by hand in kernel IR, with a switch for every
wait, fence, barrier and arrive its correctness rests on: the kernels of the bug class
on this path (nvFuser #2000, #3960, #1552, cudnn-frontend #784, a stage released before
its wgmma retired, a producer on the wrong parity, a persistent kernel's epilogue tile
reused while its TMA store still reads it) are this kernel with one of them dropped.

    ws_matmul(tiles=1, k_tiles=4, stages=2, prefetch=False, drop=())

C[64, 64 * tiles] (f16) = A[64, 64 * k_tiles] (f16, K-major) x B[64 * tiles, 64 * k_tiles]^T
(B given N x K, K-major), by one block of 256 threads:

    warp group 0, the producer (thread 0 elected): for every output tile and k-tile k,
        stage s = k % stages: wait empty[s] (parity starting at 1: a fresh barrier's
        previous phase counts as complete), arrive.expect_tx full[s] with both boxes'
        bytes, TMA-load the 64 x 64 boxes of A and B (128-byte swizzle) into stage s;
        with `prefetch`, one more load than the consumer uses (a pipeline running ahead,
        whose last stage the consumer must drain, and release, before reusing the bytes)
    warp group 1, the consumer: per output tile zero the accumulators, wgmma.fence, then
        per k-tile wait full[s], four wgmma k-steps from the stage's descriptors, commit,
        wait_group 0, arrive on empty[s] (all 128 threads; its count); then the
        shared-memory epilogue: f16 fragments, bar.sync 1, 128 (every consumer past its
        wgmmas, and past the previous tile's store wait), stmatrix into the C tile
        (128-byte swizzled as the TMA store expects), fence.proxy.async, bar.sync 1,
        128, thread 128 issues the TMA store, commits, and waits for its reads
        (wait_group.read)

With tiles == 1 the C tile aliases A's stage 0 (the epilogue reuses operand memory); a
persistent kernel (tiles > 1) keeps it apart (its producer refills stage 0 for the next
tile while the epilogue runs). mbarriers: thread 0 initialises full[s] (count 1) and
empty[s] (count 128), fence.mbarrier_init, __syncthreads.

`drop` names what to leave out (each is an anchor's bug):
    "init_barrier"      the __syncthreads after the mbarrier inits (nvFuser #1552)
    "empty_parity"      the producer's first waits on empty use parity 0 (a wrong phase)
    "release_early"     the consumer arrives on empty[s] before its wgmma wait_group
    "drain"             with prefetch: the consumer's wait on the last prefetched stage
                        before the epilogue reuses it (nvFuser #2000 on this path)
    "epilogue_barrier"  the bar.sync between the stmatrix writes and the TMA store that
                        reads them (nvFuser #3960)
    "proxy_fence"       the fence.proxy.async between stmatrix and the TMA store
                        (cudnn-frontend #784)
    "store_read_wait"   the wait_group.read before the next tile's stmatrix reuses the C
                        tile (persistent kernels)

The kernel the Hopper scheduler lowers, shaped by hand, run-time sizes and all:

    sched_matmul(stages=2, k_tiles=None, split_k=False, drop=())

C[M, N] (f16) = A[M, K] x B[N, K]^T with M, N, K scalar parameters, one 128 x 64 tile of
C per block (grid ceildiv(N, 64) x ceildiv(M, 128) x splitk), blockDim (128, 3, 1):
threadIdx.y 0 and 1 are the consumer warp groups (rows 64 y .. 64 y + 63 of the tile),
threadIdx.y == 2 the producer warp group, its thread threadIdx.x == 0 elected. The K loop
runs ceildiv(K, 64) times (k_tiles: a constant count instead, the same kernel otherwise);
with split_k, block z runs its slice min(ceildiv(ceildiv(K, 64), splitk), ceildiv(K, 64) -
z * slice) of it and the blocks of a tile meet in lowering.passes.grid_reductions'
serial turnstile (f32 partials in a workspace, a semaphore per tile), the last one writing
C. Stage s = k % stages holds A's 128 x 64 box and B's 64 x 64 box (128-byte swizzle);
full[s] (count 1) and empty[s] (count 256, every consumer) as in ws_matmul. With
`overlap` the consumers keep one wgmma group in flight (wait_group 1) and release the
stage of iteration k - 1 under `if (k > 0)`, then wait_group 0 after the loop (with
"release_early": the stage of iteration k, whose wgmmas may still run). Consumers keep
f32 accumulators (32 per thread, WGMMA.d(64)'s layout) and store them, converted to f16,
straight to global memory under `if (row < M && col < N)`.

`drop` (SCHED_DROPS), the faults that apply to this shape:
    "init_barrier"   the __syncthreads after the mbarrier inits
    "init_fence"     the fence.mbarrier_init after them
    "empty_parity"   the producer's first waits on empty use parity 0
    "release_early"  the consumers arrive on empty[s] before their wgmma wait_group
    "wgmma_fence"    the wgmma.fence before the K loop
    "full_wait"      the consumers' wait on full[s]
"""

import numpy as np

import kir_examples as ex
from fuserir.dtypes import DataType
from lowering import kir

I32, I64, F16, F32, BOOL = DataType.i32, DataType.i64, DataType.f16, DataType.f32, \
    DataType.bool
c = ex.const
TILE = 64                        # M, N and K of one tile
BOX_BYTES = TILE * TILE * 2      # one 64 x 64 f16 box
SWIZZLE = "128B"
DROPS = ("init_barrier", "empty_parity", "release_early", "drain", "epilogue_barrier",
         "proxy_fence", "store_read_wait")
SCHED_DROPS = ("init_barrier", "init_fence", "empty_parity", "release_early", "wgmma_fence",
               "full_wait")
ROWS = 2 * TILE                  # rows of a sched_matmul tile: two consumer warp groups


def _op(name, a, b):
    return ex.binop(name, a, b)


def _shared(name, dtype, size, offset):
    return kir.Buffer(name, dtype, kir.Memory.shared, size=c(size), byte_offset=c(offset),
                      tensor=name)


def _if(cond, then, orelse=()):
    return kir.IfThenElse(cond, list(then), list(orelse))


def ws_matmul(tiles=1, k_tiles=4, stages=2, prefetch=False, drop=()):
    unknown = set(drop) - set(DROPS)
    assert not unknown, unknown
    M, N, K = TILE, TILE * tiles, TILE * k_tiles
    A = ex.tensor("A", F16, [c(M), c(K)])
    B = ex.tensor("B", F16, [c(N), c(K)])
    C = ex.tensor("C", F16, [c(M), c(N)], is_output=True)
    a_map, b_map, c_map = maps = [
        kir.TensorMap(f"{t.buffer.name}_map", t, [c(cols), c(rows)], [t.strides[0]],
                      (TILE, TILE), SWIZZLE) for t, rows, cols in ((A, M, K), (B, N, K),
                                                                  (C, M, N))]
    bars = _shared("bars", I64, 2 * stages, 0)                 # full[s] then empty[s]
    a_st = _shared("a_stages", F16, stages * TILE * TILE, 1024)
    b_st = _shared("b_stages", F16, stages * TILE * TILE, 1024 + stages * BOX_BYTES)
    c_at = 1024 if tiles == 1 else 1024 + 2 * stages * BOX_BYTES
    c_tile = _shared("c_tile", F16, TILE * TILE, c_at)
    acc = kir.Buffer("acc", F32, kir.Memory.local, size=c(TILE // 2))
    frag = kir.Buffer("frag", F16, kir.Memory.local, size=c(TILE // 2))
    t = ex.tid()
    full = lambda s: s                                          # noqa: E731
    empty = lambda s: ex.add(s, c(stages))                      # noqa: E731
    layout = kir.MatrixLayout(16, 1024, SWIZZLE)

    # -- the producer --------------------------------------------------------------------
    loads = k_tiles + (1 if prefetch else 0)
    tile_v, k_v = kir.Var("tile", I32), kir.Var("k", I32)
    ptile_v, pk_v = kir.Var("ptile", I32), kir.Var("pk", I32)
    step = ex.add(ex.mul(ptile_v, c(loads)), pk_v)              # the producer's load count
    ps = _op("mod", step, c(stages))
    round_ = _op("div", step, c(stages))
    parity = _op("xor", _op("mod", round_, c(2)), c(0 if "empty_parity" in drop else 1))
    producer = [kir.ForLoop(ptile_v, c(tiles), [kir.ForLoop(pk_v, c(loads), [
        kir.MbarrierWait(bars, empty(ps), parity),
        kir.MbarrierArrive(bars, full(ps), tx_bytes=c(2 * BOX_BYTES)),
        kir.TmaLoad(a_st, ex.mul(ps, c(TILE * TILE)), a_map, ex.mul(pk_v, c(TILE)), c(0),
                    bar=bars, bar_index=full(ps)),
        kir.TmaLoad(b_st, ex.mul(ps, c(TILE * TILE)), b_map, ex.mul(pk_v, c(TILE)),
                    ex.mul(ptile_v, c(TILE)), bar=bars, bar_index=full(ps)),
    ])])]

    # -- the consumer --------------------------------------------------------------------
    cstep = ex.add(ex.mul(tile_v, c(loads)), k_v)
    cs = _op("mod", cstep, c(stages))
    cparity = _op("mod", _op("div", cstep, c(stages)), c(2))
    j = kir.Var("j", I32)
    mainloop = [kir.MbarrierWait(bars, full(cs), cparity)]
    for ks in range(4):
        base = ex.add(ex.mul(cs, c(TILE * TILE)), c(16 * ks))
        mainloop.append(kir.Wgmma(d=acc, d_index=c(0), a=a_st, a_index=base, b=b_st,
                                  b_index=base, n=TILE, dtype=F16, a_layout=layout,
                                  b_layout=layout))
    release = kir.MbarrierArrive(bars, empty(cs))
    waits = [kir.WgmmaCommit(), kir.WgmmaWait(0)]
    mainloop += ([release] + waits) if "release_early" in drop else (waits + [release])

    lane = ex.sub(t, c(128))
    consumer = [kir.ForLoop(tile_v, c(tiles), [
        kir.ForLoop(j, c(TILE // 2), [kir.Store(acc, j, c(0.0, F32))], kind="unroll"),
        kir.WgmmaFence(),
        kir.ForLoop(k_v, c(k_tiles), mainloop),
        *_drain(prefetch, drop, bars, tile_v, loads, k_tiles, stages),
        *_epilogue(drop, acc, frag, c_tile, c_map, lane, tile_v),
    ])]

    body = [kir.Allocate(bars), kir.Allocate(a_st), kir.Allocate(b_st), kir.Allocate(c_tile),
            kir.Allocate(acc), kir.Allocate(frag),
            _if(ex.binop("eq", t, c(0)), [
                kir.ForLoop(kir.Var("s", I32), c(stages), [
                    kir.MbarrierInit(bars, full(kir.Var("s", I32)), c(1)),
                    kir.MbarrierInit(bars, empty(kir.Var("s", I32)), c(128))]),
                kir.FenceMbarrierInit()])]
    if "init_barrier" not in drop:
        body.append(kir.Barrier())
    body.append(_if(ex.lt(t, c(128)), [_if(ex.binop("eq", t, c(0)), producer)], consumer))
    kernel = kir.Kernel("ws_matmul", [A, B, C], [], body,
                        ex.launch([c(1)], [c(256)]), tensor_maps=maps)
    return ex.finish(kernel)


def _drain(prefetch, drop, bars, tile_v, loads, k_tiles, stages):
    """With prefetch: wait for the load the consumer does not use, before its stage's
    bytes are reused, and release the stage. (Without the release a persistent kernel
    deadlocks: the producer waits for that stage's next phase of `empty` forever; the
    interpreter found this in an earlier version of this kernel.)"""
    if not prefetch or "drain" in drop:
        return []
    last = ex.add(ex.mul(tile_v, c(loads)), c(k_tiles))
    stage = _op("mod", last, c(stages))
    # wait for the load, then give its stage back (the producer refills it next tile)
    return [kir.MbarrierWait(bars, stage, _op("mod", _op("div", last, c(stages)), c(2))),
            kir.MbarrierArrive(bars, ex.add(stage, c(stages)))]


def _epilogue(drop, acc, frag, c_tile, c_map, lane, tile_v):
    """f16 fragments, stmatrix into the swizzled C tile, proxy fence, bar.sync among the
    consumers, the TMA store by thread 128 and its read wait."""
    j = kir.Var("jj", I32)
    body = [kir.ForLoop(j, c(TILE // 2), [kir.Store(frag, j, kir.Cast(kir.Load(acc, j),
                                                                          F16))],
                        kind="unroll"),
            # every consumer is past its last wgmma (the C tile may alias an operand
            # stage) and, in a persistent kernel, past the previous tile's read wait
            kir.NamedBarrier(1, 128)]
    # stmatrix x4 per pair of 8-column chunks: lane l gives row l % 8 of matrix l / 8,
    # matrix i = (chunk 2p + i // 2, rows 8 * (i % 2) ..) of its warp's 16 rows
    warp = _op("div", lane, c(32))
    li = _op("mod", lane, c(32))
    mi = _op("div", li, c(8))
    row = ex.add(ex.add(ex.mul(warp, c(16)), ex.mul(_op("mod", mi, c(2)), c(8))),
                 _op("mod", li, c(8)))
    for pair in range(4):
        chunk = ex.add(c(2 * pair), _op("div", mi, c(2)))
        phys = _op("xor", chunk, _op("mod", row, c(8)))          # 128B swizzle of 16-byte chunks
        address = ex.add(ex.mul(row, c(TILE)), ex.mul(phys, c(8)))
        body.append(kir.StMatrix(c_tile, address, frag, c(8 * pair), num=4))
    if "proxy_fence" not in drop:
        body.append(kir.FenceProxyAsync())
    if "epilogue_barrier" not in drop:
        body.append(kir.NamedBarrier(1, 128))
    store = [kir.TmaStore(c_tile, c(0), c_map, ex.mul(tile_v, c(TILE)), c(0)),
             kir.BulkCommit()]
    if "store_read_wait" not in drop:
        store.append(kir.BulkWait(0, read=True))
    body.append(_if(ex.binop("eq", lane, c(0)), store))
    return body


def inputs(tiles=1, k_tiles=4, seed=0):
    """Integer-valued A, B (|values| <= 2: every sum exact in f32 and in f16) and C."""
    rng = np.random.default_rng(seed)
    A = rng.integers(-2, 3, (TILE, TILE * k_tiles)).astype(np.float16)
    B = rng.integers(-2, 3, (TILE * tiles, TILE * k_tiles)).astype(np.float16)
    return {"A": A, "B": B, "C": np.zeros((TILE, TILE * tiles), np.float16)}


def expected(args):
    return (args["A"].astype(np.float64) @ args["B"].astype(np.float64).T).astype(np.float16)


# ---------------------------------------------------------------------------------------
# The scheduler's shape: run-time sizes, two consumer warp groups, optional split-K
# ---------------------------------------------------------------------------------------


def _tid(axis):
    return ex.tid(axis)


def sched_matmul(stages=2, k_tiles=None, split_k=False, overlap=False, drop=()):
    unknown = set(drop) - set(SCHED_DROPS)
    assert not unknown, unknown
    M, N, K = ex.scalar("M"), ex.scalar("N"), ex.scalar("K")
    scalars = [M, N, K]
    A = ex.tensor("A", F16, [M.var, K.var])
    B = ex.tensor("B", F16, [N.var, K.var])
    C = ex.tensor("C", F16, [M.var, N.var], is_output=True)
    a_map = kir.TensorMap("A_map", A, [K.var, M.var], [A.strides[0]], (TILE, ROWS), SWIZZLE)
    b_map = kir.TensorMap("B_map", B, [K.var, N.var], [B.strides[0]], (TILE, TILE), SWIZZLE)
    a_box, b_box = ROWS * TILE, TILE * TILE                   # elements
    bars = _shared("bars", I64, 2 * stages, 0)
    a_st = _shared("a_stages", F16, stages * a_box, 1024)
    b_st = _shared("b_stages", F16, stages * b_box, 1024 + stages * 2 * a_box)
    acc = kir.Buffer("acc", F32, kir.Memory.local, size=c(TILE // 2))
    x, y, z = _tid("x"), _tid("y"), ex.bid("z")
    full = lambda s: s                                          # noqa: E731
    empty = lambda s: ex.add(s, c(stages))                      # noqa: E731
    layout = kir.MatrixLayout(16, 1024, SWIZZLE)

    k_total = ex.ceildiv(K.var, c(TILE))
    if split_k:
        splitk = ex.scalar("splitk")
        scalars.append(splitk)
        slice_ = ex.ceildiv(k_total, splitk.var)
        extent = ex.binop("min", slice_, ex.sub(k_total, ex.mul(z, slice_)))
        first_k = ex.mul(z, slice_)
    else:
        extent, first_k = k_total, c(0)
    if k_tiles is not None:
        extent = c(k_tiles)

    # -- the producer --------------------------------------------------------------------
    pk = kir.Var("pk", I32)
    ps = _op("mod", pk, c(stages))
    parity = _op("xor", _op("mod", _op("div", pk, c(stages)), c(2)),
                 c(0 if "empty_parity" in drop else 1))
    kk = ex.mul(ex.add(first_k, pk), c(TILE))
    producer = [kir.ForLoop(pk, extent, [
        kir.MbarrierWait(bars, empty(ps), parity),
        kir.MbarrierArrive(bars, full(ps), tx_bytes=c(2 * (a_box + b_box))),
        kir.TmaLoad(a_st, ex.mul(ps, c(a_box)), a_map, kk, ex.mul(ex.bid("y"), c(ROWS)),
                    bar=bars, bar_index=full(ps)),
        kir.TmaLoad(b_st, ex.mul(ps, c(b_box)), b_map, kk, ex.mul(ex.bid("x"), c(TILE)),
                    bar=bars, bar_index=full(ps)),
    ])]

    # -- the consumers -------------------------------------------------------------------
    k = kir.Var("k", I32)
    cs = _op("mod", k, c(stages))
    mainloop = [] if "full_wait" in drop else [
        kir.MbarrierWait(bars, full(cs), _op("mod", _op("div", k, c(stages)), c(2)))]
    for ks in range(4):
        a_at = ex.add(ex.add(ex.mul(cs, c(a_box)), ex.mul(y, c(TILE * TILE))), c(16 * ks))
        b_at = ex.add(ex.mul(cs, c(b_box)), c(16 * ks))
        mainloop.append(kir.Wgmma(d=acc, d_index=c(0), a=a_st, a_index=a_at, b=b_st,
                                  b_index=b_at, n=TILE, dtype=F16, a_layout=layout,
                                  b_layout=layout))
    if overlap:         # keep one group in flight: release the stage of iteration k - 1
        previous = _op("mod", ex.add(k, c(stages - 1)), c(stages))
        release = _if(ex.binop("gt", k, c(0)), [kir.MbarrierArrive(bars, empty(previous))])
        if "release_early" in drop:
            release = kir.MbarrierArrive(bars, empty(cs))
        mainloop += [kir.WgmmaCommit(), kir.WgmmaWait(1), release]
    else:
        release = kir.MbarrierArrive(bars, empty(cs))
        waits = [kir.WgmmaCommit(), kir.WgmmaWait(0)]
        mainloop += ([release] + waits) if "release_early" in drop else (waits + [release])
    j = kir.Var("j", I32)
    consumer = [kir.ForLoop(j, c(TILE // 2), [kir.Store(acc, j, c(0.0, F32))], kind="unroll")]
    if "wgmma_fence" not in drop:
        consumer.append(kir.WgmmaFence())
    consumer.append(kir.ForLoop(k, extent, mainloop))
    if overlap:
        consumer.append(kir.WgmmaWait(0))

    init = [kir.ForLoop(kir.Var("s", I32), c(stages), [
        kir.MbarrierInit(bars, full(kir.Var("s", I32)), c(1)),
        kir.MbarrierInit(bars, empty(kir.Var("s", I32)), c(2 * 128))])]
    if "init_fence" not in drop:
        init.append(kir.FenceMbarrierInit())
    thread0 = ex.land(ex.binop("eq", x, c(0)), ex.binop("eq", y, c(0)))
    body = [kir.Allocate(bars), kir.Allocate(a_st), kir.Allocate(b_st), kir.Allocate(acc),
            _if(thread0, init)]
    if "init_barrier" not in drop:
        body.append(kir.Barrier())
    store = _sched_epilogue(acc, C, M, N)
    grid = [ex.ceildiv(N.var, c(TILE)), ex.ceildiv(M.var, c(ROWS)),
            splitk.var if split_k else c(1)]
    if split_k:
        body.append(_if(ex.binop("eq", y, c(2)), [_if(ex.binop("eq", x, c(0)), producer)],
                        consumer))
        workspaces, turnstile = _sched_turnstile(acc, store, grid)
        body += turnstile
    else:
        workspaces = []
        body.append(_if(ex.binop("eq", y, c(2)), [_if(ex.binop("eq", x, c(0)), producer)],
                        consumer + store))
    kernel = kir.Kernel("sched_matmul", [A, B, C], scalars, body,
                        ex.launch(grid, [c(128), c(3)]), tensor_maps=[a_map, b_map],
                        workspaces=workspaces)
    return ex.finish(kernel)


def _sched_epilogue(acc, C, M, N):
    """Each consumer thread's 32 accumulators, as f16, to C under the bounds predicate."""
    x, y = _tid("x"), _tid("y")
    j = kir.Var("jj", I32)
    row = ex.add(ex.add(ex.mul(ex.bid("y"), c(ROWS)), ex.mul(y, c(TILE))),
                 ex.add(ex.add(ex.mul(_op("div", x, c(32)), c(16)),
                               _op("div", _op("mod", x, c(32)), c(4))),
                        ex.mul(_op("div", _op("mod", j, c(4)), c(2)), c(8))))
    col = ex.add(ex.add(ex.mul(ex.bid("x"), c(TILE)), ex.mul(_op("div", j, c(4)), c(8))),
                 ex.add(ex.mul(_op("mod", x, c(4)), c(2)), _op("mod", j, c(2))))
    inside = ex.land(ex.lt(row, M.var), ex.lt(col, N.var))
    return [kir.ForLoop(j, c(TILE // 2), [
        _if(inside, [ex.store(C, [row, col], kir.Cast(kir.Load(acc, j), F16))])],
        kind="unroll")]


def _sched_turnstile(acc, store, grid):
    """lowering.passes.grid_reductions' serial turnstile over blockIdx.z (grid: the
    launch's extents), run by every thread: the consumers' partial sums pass through the
    `work` workspace, block z waiting for z on the tile's semaphore; the last split
    stores C."""
    x, y, z = _tid("x"), _tid("y"), ex.bid("z")
    tile = ex.add(ex.bid("x"), ex.mul(grid[0], ex.bid("y")))
    tiles = ex.mul(grid[0], grid[1])
    thread = ex.add(x, ex.mul(c(128), y))                     # a consumer's id, < 256
    work = kir.Buffer("work", F32, kir.Memory.global_)
    sem = kir.Buffer("sem", I32, kir.Memory.global_)
    workspaces = [kir.Workspace(work, ex.mul(tiles, c(TILE // 2 * 256))),
                  kir.Workspace(sem, tiles, zeroed=True)]
    e = kir.Var("e", I32)
    slot = ex.add(ex.mul(ex.add(ex.mul(tile, c(TILE // 2)), e), c(256)), thread)
    value = kir.Load(acc, e)
    consumers = ex.lt(y, c(2))
    first = ex.land(ex.binop("eq", x, c(0)), ex.binop("eq", y, c(0)))
    add = kir.ForLoop(e, c(TILE // 2),
                      [kir.Store(acc, e, ex.add(value, kir.Load(work, slot)))], kind="unroll")
    keep = kir.ForLoop(e, c(TILE // 2), [kir.Store(work, slot, value)], kind="unroll")
    not_last = [_if(consumers, [keep]), kir.Fence(), kir.Barrier(),
                _if(first, [kir.SemRelease(sem, tile, ex.add(z, c(1)))])]
    is_last = [_if(first, [kir.SemRelease(sem, tile, c(0))]), _if(consumers, store)]
    return workspaces, [
        _if(first, [kir.SemWait(sem, tile, z)]), kir.Barrier(),
        _if(ex.binop("gt", z, c(0)), [_if(consumers, [add])]),
        _if(ex.lt(z, ex.sub(grid[2], c(1))), not_last, is_last)]


def sched_inputs(M, N, K, seed=0, splitk=None):
    """Integer-valued A[M, K], B[N, K] (exact sums), C[M, N] and the scalars."""
    rng = np.random.default_rng(seed)
    args = {"A": rng.integers(-2, 3, (M, K)).astype(np.float16),
            "B": rng.integers(-2, 3, (N, K)).astype(np.float16),
            "C": np.zeros((M, N), np.float16), "M": M, "N": N, "K": K}
    if splitk is not None:
        args["splitk"] = splitk
    return args
