"""The matmul scheduler: tensor-core tiles, split-K, a cp.async pipeline and a shared-memory
epilogue, written with the public scheduling transforms only.

`schedule_matmul(fusion, params)` takes a fusion computing one output from
`matmul(A, B, layout)` (any layout, f16 or bf16 operands) through pointwise ops, and
calls TensorView methods exactly as a user could in a DSL schedule block (so the schedule
prints as a trace and parses back). Nothing here emits code: the fixed fragment maps below
the 16x8x16 instruction tile are lowering's job, everything above is a transform recorded
here. The loop structure of the accumulator (seed configuration: CTA tile 256x128x32,
warp tile 64x64x32, 8 warps):

    acc  [BIDx Mo, BIDy No, BIDz splitk, K tiles, TIDy warps, k16 steps, Mm 4, Nn 8,
          mma M16, mma N8, mma K16]

with the operands staged global -> shared (cp.async, circular-buffered over the K-tile
loop, XOR-swizzled) -> registers (ldmatrix), the epilogue's pointwise ops on the
accumulator's registers, and the output stored from registers or staged through shared
memory (optionally reusing the operand bytes) and stored by rows of 16 bytes (a
vectorized copy: one 16-byte load and store per thread and row). Split-K is serial (a
turnstile across the CTAs of a tile) or two kernels (f32 partials, then their sum by 32 x
16 threads per 32 outputs and the epilogue). `matmul_heuristic` (matmul_heuristic.py)
chooses the parameters from the sizes; the Hopper path's schedule is hopper.py's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import device as devices
from ..errors import ScheduleError
from ..ir.exprs import AxisIndexOp, BinaryOp, CastOp, MatmulOp, UnaryOp, WhereOp
from ..ir.iterdomain import ParallelType, roots_of
from ..ir.tensor import MemoryType
from .hopper import schedule_hopper_matmul
from .matmul_params import MatmulParams
from .matmul_tiles import (SPLITK, broadcasts_first, grid_reduction, output_tiles, split_k,
                           tensor_core_loops, two_kernel)

if TYPE_CHECKING:
    from ..ir.fusion import Fusion

# what the epilogue may compute from the product, on the accumulator's registers (the
# positions of its elements included: a causal mask)
EPILOGUE_OPS = (UnaryOp, BinaryOp, CastOp, WhereOp, AxisIndexOp)


def _find_matmul(fusion):
    mms = [e for e in fusion.exprs if isinstance(e, MatmulOp)]
    if len(mms) != 1:
        raise ScheduleError(f"schedule_matmul: fusion {fusion.name} has {len(mms)} matmuls; "
                            "the matmul scheduler takes exactly one")
    if fusion.trace or any(t.compute_at_pos is not None or t.loop != t.root
                           for t in fusion.tensors if not t.is_input):
        raise ScheduleError(f"schedule_matmul: fusion {fusion.name} is already scheduled")
    mm = mms[0]
    acc = mm.output
    # The epilogue: pointwise tensors computed from acc, ending in the one output.
    after = [t for t in fusion.tensors if t is not acc and fusion.depends_on(t, acc)]
    outputs = [t for t in fusion.outputs]
    bad = [t for t in after if not isinstance(t.definition, EPILOGUE_OPS)]
    if acc.is_output or len(outputs) != 1 or not after or outputs[0] not in after or bad \
            or any(fusion.uses(t) == [] and not t.is_output for t in after):
        why = (f"{bad[0].name} is not pointwise" if bad else
               "the matmul must feed exactly one output through pointwise ops")
        raise ScheduleError(f"schedule_matmul: fusion {fusion.name} must compute "
                            f"output = pointwise(matmul(A, B), ...) with its result cast to "
                            f"f16, bf16 or f32 ({why})")
    out = outputs[0]
    if out.dtype.value not in ("f16", "bf16", "f32"):
        raise ScheduleError(f"schedule_matmul: the output {out.name} is {out.dtype}; tensor "
                            "cores produce f32, cast to f16, bf16 or f32")
    return mm, acc, out, [t for t in after if t is not out]


def schedule_matmul(fusion: Fusion, params: MatmulParams,
                    device: devices.Device | None = None) -> dict[str, Any]:
    """Schedule `output = epilogue(matmul(A, B))` for tensor cores (see module docstring):
    any layout, f16 or bf16 operands, pointwise epilogue ops (bias, activation, residual,
    cast to f16, bf16 or f32) fused on the accumulator's registers. Returns a dict of the
    tensors it created or scheduled, by role. The split-K factor is the run-time scalar
    `splitk`, declared with params.splitk_factor as its default (run() may pass another:
    one kernel serves every factor). `device` (a fuserir.device.Device, the H200 when None):
    a schedule needing more shared memory than one of its blocks may use is refused."""
    if not isinstance(params, MatmulParams):
        raise ScheduleError(f"schedule_matmul: params must be a MatmulParams, got "
                            f"{type(params).__name__}")
    params.check()
    device = devices.resolve(device)
    shared_limit = device.shared_limit
    mm, acc, out, fused = _find_matmul(fusion)
    if params.hopper:
        return schedule_hopper_matmul(fusion, params, device, mm, acc, out, fused)
    a, b = mm.inputs
    tm, tn, tk = params.cta_tile
    operands = params.stages * (tm + tn) * tk * a.dtype.itemsize
    epilogue = tm * tn * out.dtype.itemsize if params.use_smem_epilogue else 0
    needed = max(operands, epilogue) if params.promote_prologue_smem_reuse else \
        operands + epilogue
    if needed > shared_limit:
        raise ScheduleError(
            f"schedule_matmul: the schedule needs {needed} bytes of shared memory "
            f"({params.stages} stages of {tm}x{tk} + {tk}x{tn} operand tiles"
            + (f", and a {tm}x{tn} epilogue tile" if epilogue else "")
            + f"), over the limit of {shared_limit} bytes per block; use fewer stages or "
            "smaller tiles")
    fusion.declare_scalar(SPLITK, params.splitk_factor)
    im, in_, _ = params.instruction_tile

    # Operand caches: global -> shared (cp.async) -> registers (ldmatrix).
    a_async, b_async = params.async_loads
    a_smem = a.cache_after(MemoryType.shared, async_copy=a_async)
    b_smem = b.cache_after(MemoryType.shared, async_copy=b_async)
    a_frag = a_smem.cache_after(MemoryType.local, ldmatrix=True)
    b_frag = b_smem.cache_after(MemoryType.local, ldmatrix=True)
    if params.splitk_mode == "two_kernel":
        caches = {"a_smem": a_smem, "b_smem": b_smem, "a_frag": a_frag, "b_frag": b_frag}
        return two_kernel(params, acc, out, caches, lambda mm: _operand_caches(
            params, mm, a_smem, b_smem, a_frag, b_frag))
    c_smem = output_tiles(fusion, params, acc, out, fused, WARP)

    # acc: [Mo, No, Mt, Nt, rK] -> [Mo, No, splitk, Ktiles, warps, k16, Mm, Nn, mma x3]
    acc.split(4, tk)                          # [Mo, No, Mt, Nt, rKt, rK32]
    split_k(acc, 4, params.splitk_interleaved)  # [.., rKs, rKtiles, rK32]
    acc.reorder({4: 2, 5: 3, 2: 4, 3: 5})     # [Mo, No, rKs, rKtiles, Mt, Nt, rK32]
    tensor_core_loops(acc, params)
    grid_reduction(acc, params.splitk_mode)
    _operand_caches(params, acc, a_smem, b_smem, a_frag, b_frag)
    if c_smem is not None:
        c_smem.swizzle(im * in_)              # a row: one instruction tile
        if params.promote_prologue_smem_reuse:
            c_smem.promote_reuse()
    return {"acc": acc, "out": out, "a_smem": a_smem, "b_smem": b_smem,
            "a_frag": a_frag, "b_frag": b_frag, "c_smem": c_smem, "fused": fused}


WARP = 32                     # threads of a warp: TIDx on the mma.sync path


def _operand_caches(params, mm, a_smem, b_smem, a_frag, b_frag):
    """The operands staged for the matmul tensor `mm` (tiled by tensor_core_loops)."""
    im, in_, _ = params.instruction_tile

    # Shared operand tiles, one K tile per iteration of the K-tile loop (computed at acc
    # before the fragments: compute_at places every tensor on the path to acc).
    for smem in (a_smem, b_smem):
        smem.compute_at(mm, 4)
        row = _copy_layout(smem, params.warps)
        # XOR-swizzle rows of at least 128 bytes (8 chunks): rows of a K-contiguous tile
        # (32 elements) pair up, which keeps ldmatrix's 8 rows on 8 bank groups.
        smem.swizzle(max(row, 128 // smem.dtype.itemsize))
        if params.stages > 1:
            smem.circular_buffer(params.stages)

    # Register fragments, loaded once per k16 step for the whole warp tile:
    # [.., rKk | Xm, X16(mma), K16(mma)] with X = M (im) for A and N (in_) for B.
    # (B's cache holds two n8 tiles where the warp tile allows: one ldmatrix.x4)
    b_tile = 2 * in_ if params.warp_tile[1] % (2 * in_) == 0 else in_
    for frag, inst in ((a_frag, im), (b_frag, b_tile)):
        frag.compute_at(mm, 6)
        broadcasts_first(frag, 6)
        frag.split(-2, inst)
        frag.parallelize(-2, ParallelType.mma)
        frag.parallelize(-1, ParallelType.mma)


def _copy_layout(smem, warps):
    """A shared operand tile copied by every thread of the block, 16 bytes at a time:
    [.., broadcasts, rest, warps(TIDy), lanes(TIDx), vec], laid out as the operand is in
    global memory (its last axis contiguous, whatever the layout). Returns the tile's
    row length (the contiguous extent)."""
    pos = smem.compute_at_pos
    broadcasts_first(smem, pos)
    pos += sum(a.is_broadcast for a in smem.loop[pos:])
    if smem.ndim - pos != 2:
        raise ScheduleError(f"schedule_matmul: unexpected loop structure of {smem.name}: "
                            f"{smem.describe()}")
    contiguous = smem.root[-1]
    if contiguous in roots_of(smem.loop[pos]):
        smem.reorder({pos: pos + 1, pos + 1: pos})
    row = smem.loop[pos + 1].extent
    vec = 16 // smem.dtype.itemsize
    smem.merge(pos)
    smem.split(pos, vec)
    smem.split(pos, 32)
    smem.split(pos, warps)
    smem.parallelize(pos + 1, ParallelType.TIDy)
    smem.parallelize(pos + 2, ParallelType.TIDx)
    smem.parallelize(pos + 3, ParallelType.vectorize)
    return row
