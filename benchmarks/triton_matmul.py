"""The Triton baseline of the matmul benchmark: a tutorial-style tiled matmul, autotuned.

The peer to beat besides cuBLAS (Triton emits wgmma and TMA-like copies on Hopper): each
program computes a BM x BN tile of C = A @ B, walking K in BK steps, with grouped tile
order for L2 reuse; f16 or bf16 operands of any layout (strides), f32 accumulation, the
result cast to C's dtype. Autotuned (per M, N, K) over the eight (BM, BN, BK, warps,
stages) configurations below. Skinny shapes (few output tiles, long K) take the split-K
baseline of benchmarks/triton_splitk.py.

Imported only on a GPU machine that has Triton (`benchmarks/matmul.py --triton`).
"""

import torch
import triton
import triton.language as tl

from benchmarks import triton_splitk
from fuserir.numerics import ceil_div

CONFIGS = [(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 4, 4),
           (128, 128, 32, 4, 4), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4),
           (128, 128, 64, 8, 4), (64, 64, 64, 4, 5)]
GROUP_M = tl.constexpr(8)    # tile rows per group (grouped order for L2 reuse)


def _configs():
    return [triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_warps=w, num_stages=s)
            for bm, bn, bk, w, s in CONFIGS]


@triton.autotune(configs=_configs(), key=["M", "N", "K"])
@triton.jit
def _matmul(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pm = first_m + (pid % (GROUP_M * tiles_n)) % rows
    pn = (pid % (GROUP_M * tiles_n)) // rows
    om = pm * BM + tl.arange(0, BM)
    on = pn * BN + tl.arange(0, BN)
    ok = tl.arange(0, BK)
    pa = a + om[:, None] * sam + ok[None, :] * sak
    pb = b + ok[:, None] * sbk + on[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        left = K - k * BK
        x = tl.load(pa, mask=(om[:, None] < M) & (ok[None, :] < left), other=0.0)
        y = tl.load(pb, mask=(ok[:, None] < left) & (on[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc)
        pa += BK * sak
        pb += BK * sbk
    pc = c + om[:, None] * scm + on[None, :] * scn
    tl.store(pc, acc.to(c.dtype.element_ty), mask=(om[:, None] < M) & (on[None, :] < N))


def skinny(m, n, k, sms):
    """Does a shape take the split-K kernel? Fewer 128x128 tiles than SMs and a long K."""
    return ceil_div(m, 128) * ceil_div(n, 128) < sms // 2 and k >= 16 * 1024


def matmul_fn(a, b, out_dtype, sms):
    """A zero-argument callable computing a @ b (torch tensors of any strides) into a
    fresh-per-call result of `out_dtype`, and that result's holder: ([result],)."""
    m, k = a.shape
    n = b.shape[1]
    holder = [None]
    if skinny(m, n, k, sms):
        return triton_splitk.matmul_fn(a, b, out_dtype, sms)
    c = torch.empty((m, n), device=a.device, dtype=out_dtype)

    def run():
        grid = lambda meta: (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)  # noqa: E731
        _matmul[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                      c.stride(0), c.stride(1))
        holder[0] = c
        return c
    return run, holder
