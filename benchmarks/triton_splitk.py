"""The Triton baseline of split-K: skinny matmuls (few output tiles, long K) in Triton, TMA-fed.

The peer the split-K benchmarks compare with besides cuBLAS. Each program computes one
BM x BN output tile over one of SPLIT equal K ranges, reading both operands through
device-side tensor descriptors (TMA on Hopper; Triton pipelines the loads over
`num_stages`), f32 accumulation. Two ways to combine the partials, both measured, the
faster one reported:

- atomic: every program adds its tile into a zeroed f32 buffer (`tl.atomic_add`); the
  buffer's memset and the cast to the output dtype are two more launches. The order of
  the adds is the hardware's: the last bits may differ run to run.
- partials: every program stores its tile in its own slot of an f32 [SPLIT, M, N]
  workspace, and a second kernel sums the slots in split order and casts: two launches,
  the same bits every run (as fuserir's default split-K).

Autotuned per (M, N, K) over tile, K step, pipeline depth and split count (a multiple of
the SM count over the tile count). Operands of any layout whose rows are contiguous in
one of their two dimensions (row-major [M, K] or its transpose, likewise for B).

Imported only on a GPU machine that has Triton.
"""

import torch
import triton
import triton.language as tl

from fuserir.numerics import ceil_div

# (BM, BN, BK, stages): 64-row tiles give a skinny output more programs per tile row
TILES = [(128, 128, 64, 4), (128, 128, 128, 3), (64, 128, 128, 4), (64, 64, 128, 6)]
WAVES = (1, 2)        # programs per SM: SPLIT = WAVES * SMs / tiles (at least 1)
REDUCE_BLOCK = 1024


def _allocate(size, alignment, stream):
    """Global scratch for device-side tensor descriptors (Triton's allocator hook)."""
    return torch.empty(size, device="cuda", dtype=torch.int8)


def _configs(sms):
    return [triton.Config({"BM": bm, "BN": bn, "BK": bk, "WAVES": w}, num_warps=4,
                          num_stages=s)
            for bm, bn, bk, s in TILES for w in WAVES]


def _split(m, n, k, bm, bn, bk, waves, sms):
    """Split count: `waves` programs per SM over the tiles, each at least one K step."""
    tiles = ceil_div(m, bm) * ceil_div(n, bn)
    return max(1, min(waves * sms // tiles, ceil_div(k, bk)))


@triton.jit
def _tile(a, b, M, N, K, sam, sak, sbk, sbn, pm, pn, first, steps,
          A_ROWS_K: tl.constexpr, B_ROWS_N: tl.constexpr,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """The f32 BM x BN product of tile (pm, pn) over K steps [first, first + steps)."""
    if A_ROWS_K:      # A stored [M, K], K contiguous
        da = tl.make_tensor_descriptor(a, shape=[M, K], strides=[sam, 1], block_shape=[BM, BK])
    else:             # A stored [K, M], M contiguous
        da = tl.make_tensor_descriptor(a, shape=[K, M], strides=[sak, 1], block_shape=[BK, BM])
    if B_ROWS_N:      # B stored [K, N], N contiguous
        db = tl.make_tensor_descriptor(b, shape=[K, N], strides=[sbk, 1], block_shape=[BK, BN])
    else:             # B stored [N, K], K contiguous
        db = tl.make_tensor_descriptor(b, shape=[N, K], strides=[sbn, 1], block_shape=[BN, BK])
    return k_steps(da, db, pm, pn, first, steps, A_ROWS_K, B_ROWS_N, BM, BN, BK)


@triton.jit
def k_steps(da, db, pm, pn, first, steps, A_ROWS_K: tl.constexpr, B_ROWS_N: tl.constexpr,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """The f32 BM x BN product of tile (pm, pn) over K steps [first, first + steps), its
    operands read through the descriptors da and db (stored as A_ROWS_K and B_ROWS_N
    say; benchmarks/triton_persistent.py's tiles too)."""
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for s in range(first, first + steps):
        k = s * BK
        if A_ROWS_K:
            x = da.load([pm * BM, k])
        else:
            x = da.load([k, pm * BM]).T
        if B_ROWS_N:
            y = db.load([k, pn * BN])
        else:
            y = db.load([pn * BN, k]).T
        acc = tl.dot(x, y, acc)
    return acc


@triton.jit
def _splitk(a, b, out, M, N, K, sam, sak, sbk, sbn, SMS,
            A_ROWS_K: tl.constexpr, B_ROWS_N: tl.constexpr, ATOMIC: tl.constexpr,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, WAVES: tl.constexpr):
    tiles_n = tl.cdiv(N, BN)
    tiles = tl.cdiv(M, BM) * tiles_n
    k_steps = tl.cdiv(K, BK)
    split_count = tl.maximum(1, tl.minimum(WAVES * SMS // tiles, k_steps))   # as _split
    tile, split = tl.program_id(0), tl.program_id(1)
    pm, pn = tile // tiles_n, tile % tiles_n
    per = tl.cdiv(k_steps, split_count)
    first = split * per
    steps = tl.maximum(0, tl.minimum(per, k_steps - first))
    acc = _tile(a, b, M, N, K, sam, sak, sbk, sbn, pm, pn, first, steps,
                A_ROWS_K, B_ROWS_N, BM, BN, BK)
    om = pm * BM + tl.arange(0, BM)
    on = pn * BN + tl.arange(0, BN)
    inside = (om[:, None] < M) & (on[None, :] < N)
    if ATOMIC:
        tl.atomic_add(out + om[:, None] * N + on[None, :], acc, mask=inside)
    else:
        tl.store(out + split * M * N + om[:, None] * N + on[None, :], acc, mask=inside)


@triton.jit
def _sum_partials(partials, c, MN, SPLIT, BLOCK: tl.constexpr):
    """c[i] = partials[0, i] + partials[1, i] + ... in split order, cast to c's dtype."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = i < MN
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(0, SPLIT):
        total += tl.load(partials + s * MN + i, mask=inside, other=0.0)
    tl.store(c + i, total.to(c.dtype.element_ty), mask=inside)


@triton.jit
def _cast(src, c, MN, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = i < MN
    tl.store(c + i, tl.load(src + i, mask=inside).to(c.dtype.element_ty), mask=inside)


_TUNED = {}


def _tuned(atomic, sms):
    """The autotuned split-K kernel of one reduction kind (the atomic one zeroes its
    buffer before each trial)."""
    if atomic not in _TUNED:
        _TUNED[atomic] = triton.autotune(
            configs=_configs(sms), key=["M", "N", "K", "A_ROWS_K", "B_ROWS_N"],
            reset_to_zero=["out"] if atomic else None)(_splitk)
    return _TUNED[atomic]


def _layout(t, rows_first):
    """True when the 2-D view `t` is stored with its second dimension contiguous, False
    for its transpose; anything else is refused."""
    if t.stride(1) == 1:
        return True
    if t.stride(0) == 1:
        return False
    raise ValueError(f"{rows_first}: neither dimension is contiguous (strides {t.stride()})")


def matmul_fn(a, b, out_dtype, sms, atomic=False):
    """A zero-argument callable computing a @ b ([M, K] and [K, N] torch views) into a
    fresh-per-call result of `out_dtype` with split-K, and that result's holder."""
    triton.set_allocator(_allocate)
    m, k = a.shape
    n = b.shape[1]
    a_rows_k, b_rows_n = _layout(a, "A"), _layout(b, "B")
    kernel = _tuned(atomic, sms)
    most = max(_split(m, n, k, bm, bn, bk, w, sms) for bm, bn, bk, _ in TILES for w in WAVES)
    work = torch.zeros((1 if atomic else most, m, n), device=a.device, dtype=torch.float32)
    holder = [None]

    def grid(meta):
        return (ceil_div(m, meta["BM"]) * ceil_div(n, meta["BN"]),
                _split(m, n, k, meta["BM"], meta["BN"], meta["BK"], meta["WAVES"], sms))

    def run():
        c = torch.empty((m, n), device=a.device, dtype=out_dtype)
        if atomic:
            work.zero_()
        kernel[grid](a, b, work, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                     sms, A_ROWS_K=a_rows_k, B_ROWS_N=b_rows_n, ATOMIC=atomic)
        blocks = (ceil_div(m * n, REDUCE_BLOCK),)
        if atomic:
            _cast[blocks](work, c, m * n, BLOCK=REDUCE_BLOCK)
        else:
            best = kernel.best_config.kwargs
            split = _split(m, n, k, best["BM"], best["BN"], best["BK"], best["WAVES"], sms)
            _sum_partials[blocks](work, c, m * n, split, BLOCK=REDUCE_BLOCK)
        holder[0] = c
        return c
    return run, holder
