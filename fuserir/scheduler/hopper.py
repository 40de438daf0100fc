"""The matmul scheduler's Hopper path: wgmma on TMA-loaded, 128-byte-swizzled shared tiles,
a warp-specialized pipeline, written with the public scheduling transforms only.

schedule_matmul takes this path when the instruction tile is a wgmma's (64, n, 16). The
loop structure of the accumulator (CTA tile 128x256x64, warp-group tile 64x256, two
consumer warp groups):

    acc  [BIDx Mo, BIDy No, BIDz splitk, K tiles, TIDy warp groups, k16 steps, Mm 1, Nn 1,
          mma M64, mma N256, mma K16]

Each operand is cached in shared memory by TMA (cache_after(shared, tma=True)), one K tile
per iteration of the K-tile loop, laid out as TMA boxes of 128-byte rows (its contiguous
axis split by 64 elements where it is longer) and swizzled by 128-byte rows, which is
what a wgmma matrix descriptor reads; circular-buffered over `stages` with a producer
warp group (circular_buffer(stages, warp_specialize=TIDy)). With
async_gmem_load_operands=False (operands TMA cannot read; a pair (A, B) says it per
operand) the cache is a plain copy instead, into the same layout: the producer warp
group's 128 threads copy each tile, 16 bytes per access where the arrays allow. The
accumulator lives in the
registers of the warp group's 128 threads (TIDx: lowering adds it for the instruction),
the epilogue's pointwise ops run on them, and the output is stored from them or staged
through shared memory over the operand stages (use_smem_epilogue), swizzled by 128-byte
rows, and copied out by the consumer threads or, with tma_store, by TMA stores
(cache_before(shared, tma=True)): the tile laid out as boxes of 128-byte rows.
"""

from ..errors import ScheduleError
from ..instructions import SWIZZLE_MODE_OF_ROW_BYTES
from ..ir.iterdomain import ParallelType, roots_of
from ..ir.tensor import MemoryType
from .matmul_tiles import (CTAS, SPLITK, broadcasts_first, grid_reduction, output_tiles, split_k,
                           tensor_core_loops, two_kernel)

SWIZZLE_ROW_BYTES = 128      # the 128B swizzle mode: boxes of 128-byte rows
WARP_GROUP = 128             # threads of a warp group: TIDx on the Hopper path


def schedule_hopper_matmul(fusion, params, device, mm, acc, out, fused):
    """schedule_matmul's Hopper path (see the module docstring) for `device`."""
    shared_limit = device.shared_limit
    a, b = mm.inputs
    tm, tn, tk = params.cta_tile
    operands = params.stages * (tm + tn) * tk * a.dtype.itemsize
    if operands > shared_limit:
        raise ScheduleError(
            f"schedule_matmul: the schedule needs {operands} bytes of shared memory "
            f"({params.stages} stages of {tm}x{tk} + {tk}x{tn} operand tiles), over the "
            f"limit of {shared_limit} bytes per block; use fewer stages or smaller tiles")
    if params.tma_store and (device.cc < (9, 0) or not device.tma):
        raise ScheduleError(f"schedule_matmul: tma_store: {device.describe()} has no TMA "
                            "(sm_90's tensor copies) to store the staged tile with; "
                            "leave tma_store off")
    if params.persistent:
        fusion.declare_scalar(CTAS, device.sms)
    else:
        fusion.declare_scalar(SPLITK, params.splitk_factor)

    a_tma, b_tma = params.async_loads
    a_smem = a.cache_after(MemoryType.shared, tma=a_tma)
    b_smem = b.cache_after(MemoryType.shared, tma=b_tma)

    def stage_operands(mm, inside_k_tiles=4):
        for smem, tma, along_k in zip((a_smem, b_smem), (a_tma, b_tma),
                                      params.staged_along_k):
            smem.compute_at(mm, inside_k_tiles)
            row = _box_layout(smem, along_k)
            if row * smem.dtype.itemsize in SWIZZLE_MODE_OF_ROW_BYTES:   # (16: none)
                smem.swizzle(row)
            if not tma:
                _producer_copies(smem)
            registers = {} if params.producer_registers is None else \
                {"producer_registers": params.producer_registers}
            smem.circular_buffer(params.stages, warp_specialize=ParallelType.TIDy,
                                 **registers)

    if params.splitk_mode == "two_kernel":
        return two_kernel(params, acc, out, {"a_smem": a_smem, "b_smem": b_smem},
                          stage_operands)

    if params.swap_mn:        # [N, M]: the tiles' rows, the instruction's M, along N
        out.reorder({0: 1, 1: 0})
    c_smem = output_tiles(fusion, params, acc, out, fused, WARP_GROUP)

    acc.split(4, tk)                          # [Mo, No, Mt, Nt, rKt, rK64]
    if params.persistent:                     # [T, ctas, rKtiles, Mt, Nt, rK64]
        acc.reorder({4: 2, 2: 3, 3: 4})
        tensor_core_loops(acc, params, split=False)
        stage_operands(acc, 3)
    else:
        split_k(acc, 4, params.splitk_interleaved)  # [.., rKs, rKtiles, rK64]
        acc.reorder({4: 2, 5: 3, 2: 4, 3: 5})     # [Mo, No, rKs, rKtiles, Mt, Nt, rK64]
        tensor_core_loops(acc, params)
        grid_reduction(acc, params.splitk_mode)
        stage_operands(acc, 4)
    if c_smem is not None:
        c_smem.swizzle(SWIZZLE_ROW_BYTES // c_smem.dtype.itemsize)
        if params.promote_prologue_smem_reuse:
            c_smem.promote_reuse()
    return {"acc": acc, "out": out, "a_smem": a_smem, "b_smem": b_smem, "c_smem": c_smem,
            "fused": fused}


def _box_layout(smem, along_k=False):
    """A shared operand tile as TMA boxes: [.., chunks, rows, 64] with the operand's
    contiguous axis innermost, split into rows of 128 bytes where it is longer (each
    chunk one box; the box's rows run along the other axis); the elements of a box row,
    which the tile is swizzled by where they are 32, 64 or 128 bytes (a tile fitted to
    a small M or N stored contiguously: rows of 16, 32 or 64 bytes). The contiguous axis
    is the array's last, or with `along_k` the one before (K: the last has one element,
    MatmulParams.staged_along_k)."""
    pos = smem.compute_at_pos
    broadcasts_first(smem, pos)
    pos += sum(a.is_broadcast for a in smem.loop[pos:])
    if smem.ndim - pos != 2 or len(smem.root) < 2:
        raise ScheduleError(f"schedule_matmul: unexpected loop structure of {smem.name}: "
                            f"{smem.describe()}")
    contiguous = smem.root[-2 if along_k else -1]       # (past any batch axes)
    if contiguous in roots_of(smem.loop[pos]):
        smem.reorder({pos: pos + 1, pos + 1: pos})
    row = SWIZZLE_ROW_BYTES // smem.dtype.itemsize
    extent = smem.loop[pos + 1].extent
    if extent > row:
        if extent % row:
            raise ScheduleError(f"schedule_matmul: {smem.name}'s contiguous tile extent "
                                f"{extent} is not a multiple of {row}")
        smem.split(pos + 1, row)              # [rows, chunks, 64]
        smem.reorder({pos: pos + 1, pos + 1: pos})   # [chunks, rows, 64]
    return min(row, extent)


COPY_BYTES = 16              # the producer's element copies: 16 bytes per access where the
                             # arrays allow (the executable narrows them where they do not)


def _producer_copies(smem):
    """A box-laid-out tile [.., chunks, rows, 64] copied by the producer warp group's
    threads: [.., chunks, rest, 128(TIDx), vec], the layout (and so the swizzled bytes
    wgmma reads) unchanged."""
    pos = smem.ndim - 2
    vec = COPY_BYTES // smem.dtype.itemsize
    smem.merge(pos)
    extent = smem.loop[pos].extent
    if extent % (vec * WARP_GROUP):
        raise ScheduleError(f"schedule_matmul: {smem.name}'s box of {extent} elements is not "
                            f"a multiple of {vec * WARP_GROUP} ({WARP_GROUP} threads x {vec})")
    smem.split(pos, vec)
    smem.split(pos, WARP_GROUP)
    smem.parallelize(pos + 1, ParallelType.TIDx)
    smem.parallelize(pos + 2, ParallelType.vectorize)
