"""The loop structure both matmul paths share (the mma.sync path in
fuserir.scheduler.matmul, the Hopper path in fuserir.scheduler.hopper): the output as CTA
tiles with the accumulator and fused pointwise ops in the instruction's fragment layout,
the tensor-core loops of the matmul tensor, and split-K in two kernels. Written with the
public scheduling transforms only; it sits below both paths, which call it.
"""

from ..errors import ScheduleError
from ..ir.tensor import MemoryType
from ..ir.iterdomain import ParallelType

SPLITK = "splitk"     # the run-time scalar that carries the split-K factor
CTAS = "ctas"         # the run-time scalar that carries a persistent kernel's grid size
REDUCE_COLUMNS = 32   # two-kernel split-K's sum: outputs per block (TIDx) ...
REDUCE_ROWS = 16      # ... and splits summed in parallel (TIDy)


def output_tiles(fusion, params, acc, out, fused, threads):
    """The output as one CTA tile per block, the accumulator and the fused pointwise ops
    in the instruction's fragment layout (`threads`: TIDx, the threads of one
    instruction); with params.use_smem_epilogue, staged through a shared tile (returned)
    and stored by rows of 16 bytes, or with params.tma_store by TMA, a box per 128 bytes
    of the tile's rows (tma_boxes); else (None) from the registers."""
    tm, tn, _ = params.cta_tile
    wm, wn, _ = params.warp_tile
    im, in_, _ = params.instruction_tile
    c_smem = out.cache_before(MemoryType.shared, tma=params.tma_store) \
        if params.use_smem_epilogue else None
    b = int(out.rank > 2)                     # a batched matmul: [B.., M, N]
    while out.ndim > 3:
        out.merge(0)                          # [B, M, N]
    out.split(b, tm)
    out.split(b + 2, tn)
    out.reorder({b + 1: b + 2, b + 2: b + 1})  # [B?, Mo, No, Mt, Nt]
    if b:
        out.merge(0)                          # [B Mo, No, Mt, Nt]: a tile in one matrix
    group = params.tile_group
    if group > 1:                             # G rows of tiles, column by column
        out.split(0, group)                   # [Mo/G, G, No, Mt, Nt]
        out.reorder({1: 2, 2: 1})             # [Mo/G, No, G, Mt, Nt]
    if params.persistent:                     # tile t = b + T ctas of CTA b
        out.merge(0)                          # [tiles, Mt, Nt]
        if group > 1:
            out.merge(0)
        out.split(0, CTAS)                    # [T, ctas, Mt, Nt]
        out.parallelize(1, ParallelType.BIDx)
    elif group > 1:                           # [Mo/G, No G, Mt, Nt]: blocks are dispatched
        out.merge(1)                          # x fastest, so G rows of one column first
        out.parallelize(0, ParallelType.BIDy)
        out.parallelize(1, ParallelType.BIDx)
    else:
        out.parallelize(0, ParallelType.BIDx)
        out.parallelize(1, ParallelType.BIDy)
    epilogue = c_smem if c_smem is not None else out
    if params.tma_store:
        c_smem.compute_at(out, 2)
        tma_boxes(out)
    elif c_smem is not None:
        out.merge(2)                          # [Mo, No, Mt*Nt]
        out.split(2, 16 // out.dtype.itemsize)
        out.split(2, threads)
        out.split(2, params.warps)            # [Mo, No, rest, warps, threads, vec]
        out.parallelize(3, ParallelType.TIDy)
        out.parallelize(4, ParallelType.TIDx)
        out.parallelize(5, ParallelType.vectorize)
        c_smem.compute_at(out, 2)
    # The accumulator layout: [Mo, No, warps, Mm, Nn, M, N] (the instruction's fragment).
    warp_layout(epilogue, tm // wm, tn // wn, wm, wn, im, in_)
    acc.compute_at(epilogue, 2)
    # Fused pointwise ops run on the fragments each thread holds, inside the tile loops.
    # (consumers first, each at its own consumer: compute_at re-places every tensor on
    # the path to the tensor named, which would undo the mma axes of those in between)
    for t in reversed(fused):
        t.compute_at(fusion.consumers(t)[0], 5)   # [Mo, No, W, Mm, Nn | M, N]
        t.parallelize(-2, ParallelType.mma)
        t.parallelize(-1, ParallelType.mma)
    return c_smem

TMA_BOX_ROW_BYTES = 128       # a TMA-stored tile's boxes: rows of 128 bytes (the 128B
                              # swizzle's), as many rows as the tile has


def tma_boxes(out):
    """[T0, T1, Mt, Nt] -> [T0, T1, Nt / b chunks, Mt, b] (T0, T1: the tile axes): the
    output tile as the TMA boxes that store it, b elements (128 bytes) of each of its
    rows a box (its staged tile is laid out so: box after box)."""
    row = TMA_BOX_ROW_BYTES // out.dtype.itemsize
    if out.loop[3].extent % row:
        raise ScheduleError(f"schedule_matmul: tma_store: the tile's rows of "
                            f"{out.loop[3].extent} x {out.dtype} are no whole number of "
                            f"TMA boxes of {TMA_BOX_ROW_BYTES} bytes ({row} elements); "
                            "take a cta_tile N that is a multiple of it")
    out.split(3, row)                         # [T0, T1, Mt, chunks, b]
    out.reorder({2: 3, 3: 2})                 # [T0, T1, chunks, Mt, b]


def split_k(tv, at, interleaved):
    """Split the K tiles at axis `at` into [rKs splitk, rKtiles]: each split a contiguous
    run of K tiles, or, `interleaved`, every splitk-th K tile (the CTAs of an output tile
    then read neighbouring K tiles at the same time: DRAM pages and L2 lines they share
    are fetched once, measured faster on the Hopper path's skinny shapes)."""
    if interleaved:
        tv.split(at, SPLITK)                  # [.., rKtiles, rKs, ..]
        tv.reorder({at: at + 1, at + 1: at})  # [.., rKs, rKtiles, ..]
    else:
        tv.split(at, SPLITK, inner=False)     # [.., rKs, rKtiles, ..]


def grid_reduction(tv, mode):
    """Mark `tv`'s reduction over BIDz as split-K `mode` combines it: "serial" (a
    turnstile), "parallel" (every CTA sums a slice, in a fixed order), "atomic" (adds
    into the tile's sums, opt-in: the last bits may differ run to run) or "cluster" (the
    tile's CTAs one cluster, summing through each other's shared memory)."""
    {"serial": tv.serial_grid_reduction, "parallel": tv.parallel_grid_reduction,
     "atomic": tv.atomic_grid_reduction, "cluster": tv.cluster_grid_reduction}[mode]()


def tensor_core_loops(tv, params, split=True):
    """[Mo, No, splitk, Ktiles, Mt, Nt, rK32] -> [BIDx Mo, BIDy No, BIDz splitk, Ktiles,
    TIDy W, rKk, Mm, Nn, mma M16, mma N8, mma rK16]; without `split` (a persistent
    kernel's [T, ctas, Ktiles, Mt, Nt, rK]) the same loops, the splitk axis absent."""
    tm, tn, tk = params.cta_tile
    wm, wn, _ = params.warp_tile
    im, in_, ik = params.instruction_tile
    o = 0 if split else -1                    # the axes after splitk move up by one
    tv.split(6 + o, ik)                       # [.., Mt, Nt, rKk, rK16]
    warp_layout(tv, tm // wm, tn // wn, wm, wn, im, in_, first=4 + o)
    # [Mo, No, rKs, rKtiles, W, Mm, Nn, M16, N8, rKk, rK16]
    tv.reorder({9 + o: 5 + o, 5 + o: 6 + o, 6 + o: 7 + o, 7 + o: 8 + o, 8 + o: 9 + o})
    if split:
        tv.parallelize(2, ParallelType.BIDz)
    tv.parallelize(10 + o, ParallelType.mma)

def two_kernel(params, acc, out, caches, stage_operands):
    """Split-K in two kernels: the matmul's split pieces are rfactored into an f32 partial
    [M, N, splitk] in global memory (kernel 1, on tensor cores, a split per blockIdx.z),
    then a second kernel sums the splits and applies the epilogue, one thread per output
    element (codegen cuts the fusion at the global partial). `stage_operands(partial)`
    places the operand caches (`caches`, by role) for kernel 1's matmul tensor."""
    tm, tn, tk = params.cta_tile
    acc.split(2, tk)                          # [M, N, rKt, rK32]
    split_k(acc, 2, params.splitk_interleaved)  # [M, N, rKs, rKtiles, rK32]
    partial = acc.rfactor([3, 4])             # partial: [M, N, splitk | rKtiles, rK32]
    partial.set_memory_type(MemoryType.global_)
    partial.split(0, tm)
    partial.split(2, tn)                      # [Mo, Mt, No, Nt, S, rKtiles, rK32]
    partial.reorder({1: 4, 2: 1, 3: 5, 4: 2, 5: 3})
    partial.parallelize(0, ParallelType.BIDx)
    partial.parallelize(1, ParallelType.BIDy)
    tensor_core_loops(partial, params)
    stage_operands(partial)
    # Kernel 2: a block per 32 neighbouring outputs; its 32 x 16 threads stride down the
    # splits (a warp reads 128 contiguous bytes of one split's partial), then combine by a
    # block reduction over TIDy. Sixteen loads in flight per output, not one: the sum is
    # bound by memory bandwidth, not by the latency of one thread's serial loads.
    acc.merge(0)                              # [MN, rS]
    acc.split(0, REDUCE_COLUMNS)
    acc.split(2, REDUCE_ROWS)                 # [MNo, 32, rSo, 16]
    acc.parallelize(0, ParallelType.BIDx)
    acc.parallelize(1, ParallelType.TIDx)
    acc.parallelize(3, ParallelType.TIDy)
    out.merge(0)
    out.split(0, REDUCE_COLUMNS)
    out.parallelize(0, ParallelType.BIDx)
    out.parallelize(1, ParallelType.TIDx)
    return {"acc": acc, "partial": partial, "out": out, **caches}

def warp_layout(tv, warps_m, warps_n, wm, wn, im, in_, first=2):
    """[.., Mt, Nt, ..] at `first` -> [.., W(TIDy), Mm, Nn, M16(mma), N8(mma), ..]."""
    f = first
    tv.split(f, wm)                           # [Mw, wm, Nt]
    tv.split(f + 2, wn)                       # [Mw, wm, Nw, wn]
    tv.reorder({f + 1: f + 2, f + 2: f + 1})  # [Mw, Nw, wm, wn]
    tv.merge(f)                               # [W, wm, wn]
    tv.split(f + 1, im)                       # [W, Mm, M16, wn]
    tv.split(f + 3, in_)                      # [W, Mm, M16, Nn, N8]
    tv.reorder({f + 2: f + 3, f + 3: f + 2})  # [W, Mm, Nn, M16, N8]
    tv.parallelize(f, ParallelType.TIDy)
    tv.parallelize(f + 3, ParallelType.mma)
    tv.parallelize(f + 4, ParallelType.mma)

def broadcasts_first(tv, pos):
    """Move tv's loop-only broadcast axes past `pos` to `pos` (they are not loops)."""
    rest = tv.loop[pos:]
    order = [a for a in rest if a.is_broadcast] + [a for a in rest if not a.is_broadcast]
    moves = {pos + rest.index(a): pos + i for i, a in enumerate(order)
             if rest.index(a) != i}
    if moves:
        tv.reorder(moves)
