"""The Triton baseline of the persistent Hopper matmul: one program per SM walking the tiles.

The peer the persistent and large-tile plans compare with besides cuBLAS, after Triton's
persistent-matmul tutorial (its device-side descriptor kernel). min(SMs, tiles) programs
each walk the BM x BN output tiles tile_id = pid, pid + SMs, ... in grouped order (GROUP_M
rows of tiles per group, walked column by column, so the tiles in flight share rows of A
and columns of B in L2). A and B are read and C written through device-side tensor
descriptors (TMA; Triton pipelines the loads over `num_stages`), f32 accumulation, the
output cast to f16 or bf16; the epilogue optionally stores C in two BN/2 halves (less
shared memory for the staged tile, room for one more stage). Where the installed Triton's
`tl.range` takes `flatten` and `warp_specialize`, the tile and K loops are flattened into
one software pipeline (the next tile's loads overlap this tile's epilogue), and some
configurations warp-specialize (producer and consumer warps) instead.

Autotuned per (M, N, K, layouts) over tile, K step, pipeline depth, warps and the options
above. Operands of any layout whose rows are contiguous in one of their two dimensions
(A as [M, K] or its transpose, B as [K, N] or [N, K]), rows 16-byte aligned (TMA).

Imported only on a GPU machine that has Triton.
"""

import inspect

import torch
import triton
import triton.language as tl

from benchmarks.triton_splitk import _allocate, _layout, k_steps
from fuserir.numerics import ceil_div

# (BM, BN, BK, stages, warps, subtiled epilogue): 128x256x64 in 4 stages leaves no shared
# memory for a whole staged C tile, only for half of one
TILES = [(128, 128, 64, 3, 8, False), (128, 128, 64, 4, 4, False),
         (128, 256, 64, 3, 8, False), (256, 128, 64, 3, 8, False),
         (128, 128, 128, 3, 8, False), (128, 256, 64, 4, 8, True),
         (64, 128, 64, 4, 4, False), (128, 64, 64, 4, 4, False),
         (128, 256, 64, 3, 8, True)]
WARP_SPECIALIZED = [(128, 128, 64, 3, 8, False), (128, 128, 64, 4, 4, False),
                    (128, 256, 64, 3, 8, False)]
GROUP_M = 8
RANGE_OPTIONS = {"flatten", "warp_specialize"} <= set(inspect.signature(tl.range).parameters)
_RANGE_OPTIONS = tl.constexpr(RANGE_OPTIONS)


def _configs():
    """TILES, flattened where supported, and WARP_SPECIALIZED warp-specialized (unflattened:
    Hopper's warp specialization takes the nested loops)."""
    variants = [(tile, RANGE_OPTIONS, False) for tile in TILES]
    if RANGE_OPTIONS:
        variants += [(tile, False, True) for tile in WARP_SPECIALIZED]
    return [triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP_M": GROUP_M,
                           "SUBTILE": subtile, "FLATTEN": flatten, "WS": ws},
                          num_warps=warps, num_stages=stages)
            for (bm, bn, bk, stages, warps, subtile), flatten, ws in variants]


@triton.jit
def _tile_position(tile_id, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(tile row, tile column) of the tile_id-th tile in grouped order."""
    group_id = tile_id // (GROUP_M * tiles_n)
    first_m = group_id * GROUP_M
    group_size_m = tl.minimum(tiles_m - first_m, GROUP_M)
    pm = first_m + tile_id % group_size_m
    pn = tile_id % (GROUP_M * tiles_n) // group_size_m
    return pm, pn


@triton.jit
def _one_tile(da, db, dc, tile_id, tile_id_c, tiles_m, tiles_n, k_tiles,
              NUM_SMS: tl.constexpr, A_ROWS_K: tl.constexpr, B_ROWS_N: tl.constexpr,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
              GROUP_M: tl.constexpr, SUBTILE: tl.constexpr):
    """Compute and store the tile_id-th tile; returns the store's counter, tile_id_c."""
    pm, pn = _tile_position(tile_id, tiles_m, tiles_n, GROUP_M)
    acc = k_steps(da, db, pm, pn, 0, k_tiles, A_ROWS_K, B_ROWS_N, BM, BN, BK)
    # The store finds its tile from a counter of its own, as the tutorial does: it breaks
    # the dependency between the loads and the epilogue that a flattened pipeline overlaps.
    tile_id_c += NUM_SMS
    cm, cn = _tile_position(tile_id_c, tiles_m, tiles_n, GROUP_M)
    if SUBTILE:
        halves = tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1))
        left, right = tl.split(halves)
        dc.store([cm * BM, cn * BN], left.to(dc.dtype))
        dc.store([cm * BM, cn * BN + BN // 2], right.to(dc.dtype))
    else:
        dc.store([cm * BM, cn * BN], acc.to(dc.dtype))
    return tile_id_c


@triton.jit
def _persistent(a, b, c, M, N, K, sam, sak, sbk, sbn,
                NUM_SMS: tl.constexpr, A_ROWS_K: tl.constexpr, B_ROWS_N: tl.constexpr,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                GROUP_M: tl.constexpr, SUBTILE: tl.constexpr,
                FLATTEN: tl.constexpr, WS: tl.constexpr):
    if A_ROWS_K:      # A stored [M, K], K contiguous
        da = tl.make_tensor_descriptor(a, shape=[M, K], strides=[sam, 1], block_shape=[BM, BK])
    else:             # A stored [K, M], M contiguous
        da = tl.make_tensor_descriptor(a, shape=[K, M], strides=[sak, 1], block_shape=[BK, BM])
    if B_ROWS_N:      # B stored [K, N], N contiguous
        db = tl.make_tensor_descriptor(b, shape=[K, N], strides=[sbk, 1], block_shape=[BK, BN])
    else:             # B stored [N, K], K contiguous
        db = tl.make_tensor_descriptor(b, shape=[N, K], strides=[sbn, 1], block_shape=[BN, BK])
    if SUBTILE:
        dc = tl.make_tensor_descriptor(c, shape=[M, N], strides=[N, 1],
                                       block_shape=[BM, BN // 2])
    else:
        dc = tl.make_tensor_descriptor(c, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    start_pid = tl.program_id(0)
    tile_id_c = start_pid - NUM_SMS
    if _RANGE_OPTIONS:
        for tile_id in tl.range(start_pid, tiles_m * tiles_n, NUM_SMS, flatten=FLATTEN,
                                warp_specialize=WS):
            tile_id_c = _one_tile(da, db, dc, tile_id, tile_id_c, tiles_m, tiles_n, k_tiles,
                                  NUM_SMS, A_ROWS_K, B_ROWS_N, BM, BN, BK, GROUP_M, SUBTILE)
    else:
        for tile_id in range(start_pid, tiles_m * tiles_n, NUM_SMS):
            tile_id_c = _one_tile(da, db, dc, tile_id, tile_id_c, tiles_m, tiles_n, k_tiles,
                                  NUM_SMS, A_ROWS_K, B_ROWS_N, BM, BN, BK, GROUP_M, SUBTILE)


_tuned = triton.autotune(configs=_configs(), key=["M", "N", "K", "A_ROWS_K", "B_ROWS_N"])(
    _persistent)


def tuned_text():
    """The configuration the autotuner chose for the last call, e.g. 128x256x64x3 w8 ws."""
    best = _tuned.best_config
    kw = best.kwargs
    text = f"{kw['BM']}x{kw['BN']}x{kw['BK']}x{best.num_stages} w{best.num_warps}"
    for option in ("SUBTILE", "FLATTEN", "WS"):
        text += f" {option.lower()}" if kw[option] else ""
    return text


def _require_tma_rows(t, rows_contiguous, name):
    """TMA reads and writes rows that start on 16-byte boundaries."""
    row_stride = t.stride(0) if rows_contiguous else t.stride(1)
    if t.data_ptr() % 16 or row_stride * t.element_size() % 16:
        raise ValueError(f"{name}: TMA needs 16-byte aligned rows (address "
                         f"{t.data_ptr():#x}, row stride {row_stride} elements)")


def matmul_fn(a, b, out_dtype, sms):
    """A zero-argument callable computing a @ b ([M, K] and [K, N] torch views) into a
    fresh-per-call result of `out_dtype` with the persistent kernel, and that result's
    holder; ValueError where TMA cannot address an operand's or the result's rows."""
    triton.set_allocator(_allocate)
    m, k = a.shape
    n = b.shape[1]
    a_rows_k, b_rows_n = _layout(a, "A"), _layout(b, "B")
    _require_tma_rows(a, a_rows_k, "A")
    _require_tma_rows(b, b_rows_n, "B")
    if n * torch.finfo(out_dtype).bits // 8 % 16:
        raise ValueError(f"C: TMA needs 16-byte aligned rows (N = {n})")
    holder = [None]

    def grid(meta):
        return (min(sms, ceil_div(m, meta["BM"]) * ceil_div(n, meta["BN"])),)

    def run():
        c = torch.empty((m, n), device=a.device, dtype=out_dtype)
        _tuned[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                     NUM_SMS=sms, A_ROWS_K=a_rows_k, B_ROWS_N=b_rows_n)
        holder[0] = c
        return c
    return run, holder
