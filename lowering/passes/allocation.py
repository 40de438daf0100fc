"""Pass `allocation`: a buffer for every intermediate tensor and reduction accumulator.

A local buffer drops thread and block axes and the axes left of the
compute-at position (those loops enclose every use); a shared buffer keeps thread axes
even left of the compute-at position (other threads read them) and drops block axes; a
global tensor keeps all (inputs and outputs are kernel parameters). Broadcast and
reduction axes hold no data. The buffer is laid out row-major over the kept loop axes;
`ctx.layouts` records (loop position, stride) pairs for the indexing pass. A padded shared
tile (pad_rows) holds `pad` more elements after every row of `row` (the indexing pass
skips them). The staged tile a TMA store copies out (cache_before(shared, tma=True)) is
laid out over the store's loop axes past the tile's compute-at position instead of its
own (analysis.layout_owner): the boxes the store issues, box after box, each as the
hardware reads it, whatever loops write the tile.

A register tile of tensor-core fragments gets an innermost fragment position (the elements
one lane holds of the instruction tile), a circular buffer an outermost stage position.
`ctx.buffers` maps every tensor to its buffer: the parameters' (loop_nests made them) and
the allocated ones.

A reduction accumulates in a local buffer of its accumulation type, which keeps only the
iteration axes that sit inside its reduction loops. A block reduction gets a shared
scratch: 32 partials for one over TIDx (one per warp of a 1024-thread block; none where
blockDim.x is a warp: its shuffles alone combine the row), 1024 for one over TIDy (one
per thread).

Shared buffers are placed one after another in the block's shared-memory pool at 16-byte
aligned byte offsets (1024-byte aligned for the tiles TMA and wgmma read or write: their
swizzle is a function of the pool offset that repeats every 1024 bytes, so a tile starting
on that boundary is swizzled as its own rows say; the pool itself is 1024-byte aligned); later passes reason on these physical byte ranges (and reuse_shared
may move a promoted tensor onto dead ones). All allocations sit at the top of the kernel.
"""

from fuserir.device import MAX_THREADS_PER_BLOCK
from fuserir.errors import ScheduleError
from fuserir.ir.exprs import MatmulOp, ReductionOp
from fuserir.ir.iterdomain import ParallelType
from fuserir.ir.tensor import MemoryType
from fuserir.ops import accumulate_dtype

from .. import kir
from ..support.analysis import (BLOCK_TYPES, LOOP_TYPES, THREAD_TYPES, fragment_size,
                                layout_owner, mma_kind, reduction_thread, shared_alignment,
                                warp_reduces_alone)
from ..contract import Pass

SCRATCH_WARPS = 32       # a TIDx reduction keeps one partial per warp


def _kept_positions(ctx, tv):
    pos = tv.compute_at_pos or 0
    kept = []
    for i, axis in enumerate(tv.loop):
        if axis.is_reduction or axis.is_broadcast:
            continue
        parallel = ctx.concrete_axis(tv, i).parallel
        if tv.memory_type is MemoryType.shared:
            if parallel in THREAD_TYPES or (i >= pos and parallel not in BLOCK_TYPES):
                kept.append(i)
        elif i >= pos and parallel in LOOP_TYPES:
            kept.append(i)
    return kept


def _layout(ctx, tv, positions, fragment=1, stages=1):
    """Row-major (position, stride) pairs over the kept loop axes, and the element count.
    A register tile of tensor-core fragments adds an innermost "frag" position (the
    fragment's elements, fixed by the instruction); a circular buffer an outermost "stage"
    position (the circular-buffering pass indexes it)."""
    strides, stride = [], ctx.const(1)
    if fragment > 1:
        strides.append(("frag", stride))
        stride = ctx.const(fragment)
    for i in reversed(positions):
        strides.append((i, stride))
        stride = ctx.binop("mul", ctx.extent(tv.loop[i].extent), stride)
    if stages > 1:
        strides.append(("stage", stride))
        stride = ctx.binop("mul", ctx.const(stages), stride)
    return list(reversed(strides)), stride


def _fragment(tv, memory):
    """Elements per lane of the instruction tile a register tensor holds (1: none)."""
    return fragment_size(tv) if memory is kir.Memory.local and mma_kind(tv) else 1


def _aligned(ctx, nbytes, align=16):
    return ctx.binop("mul", ctx.binop("ceildiv", nbytes, ctx.const(align)), ctx.const(align))


def run(ctx, kernel):
    ctx.buffers = {tv: param.buffer for tv, param in ctx.tensor_params.items()}
    ctx.accumulators, ctx.scratch, ctx.layouts = {}, {}, {}
    allocations = []
    offset = ctx.const(0)

    def place(buffer, layout, align=16):
        nonlocal offset
        ctx.layouts[buffer] = layout
        if buffer.memory is kir.Memory.shared:
            if align > 16:            # (every offset is already a multiple of 16)
                offset = _aligned(ctx, offset, align)
            buffer.byte_offset = offset
            nbytes = ctx.binop("mul", buffer.size, ctx.const(buffer.dtype.itemsize))
            offset = ctx.binop("add", offset, _aligned(ctx, nbytes))
        elif not isinstance(buffer.size, kir.Const):
            raise ScheduleError(
                f"{buffer.tensor or buffer.name}: a local buffer needs a constant size, but this one holds "
                f"{kir.format_expr(buffer.size)} elements; compute {buffer.tensor} at a "
                "deeper position, split its axes by constants, or put it in shared memory")
        allocations.append(kir.Allocate(buffer))

    block_reduced = {s.tv for s in kir.walk(kernel.body)
                     if isinstance(s, kir.ExprStmt) and s.role == "block_reduce"}
    for tv in ctx.fusion.tensors:
        if tv.is_input or tv.is_output or tv not in ctx.live:
            continue
        memory = kir.Memory.shared if tv.memory_type is MemoryType.shared else kir.Memory.local
        owner = layout_owner(tv)
        kept = _kept_positions(ctx, tv) if owner is tv else \
            list(range(tv.compute_at_pos or 0, owner.ndim))   # a TMA store's boxes
        layout, size = _layout(ctx, owner, kept, _fragment(tv, memory),
                               tv.circular_buffer_stages or 1)
        if tv.row_padding is not None:
            row, pad = tv.row_padding       # every started row is followed by its padding
            rows = ctx.binop("div", ctx.binop("add", size, ctx.const(row - 1)), ctx.const(row))
            size = ctx.binop("add", size, ctx.binop("mul", rows, ctx.const(pad)))
        buffer = kir.Buffer(tv.name, tv.dtype, memory, size, tensor=tv.name, user=True)
        ctx.buffers[tv] = buffer
        place(buffer, layout, shared_alignment(tv) if memory is kir.Memory.shared else 16)
    for tv in ctx.fusion.tensors:
        if not isinstance(tv.definition, (ReductionOp, MatmulOp)) or tv not in ctx.live:
            continue
        dtype = accumulate_dtype(tv.definition.inputs[0].dtype)
        first = next(i for i, a in enumerate(tv.loop) if a.is_reduction)
        inner = [i for i in range(first + 1, tv.ndim)
                 if not tv.loop[i].is_reduction and not tv.loop[i].is_broadcast
                 and ctx.concrete_axis(tv, i).parallel in LOOP_TYPES]
        layout, size = _layout(ctx, tv, inner, _fragment(tv, kir.Memory.local))
        acc = kir.Buffer(f"{tv.name}_acc", dtype, kir.Memory.local, size, tensor=None)
        ctx.accumulators[tv] = acc
        place(acc, layout)
        if tv in block_reduced and not warp_reduces_alone(ctx, kernel, tv):
            size = SCRATCH_WARPS if reduction_thread(ctx, tv) is ParallelType.TIDx \
                else MAX_THREADS_PER_BLOCK    # a TIDy reduction: one per thread
            scratch = kir.Buffer(f"{tv.name}_scratch", dtype, kir.Memory.shared,
                                 ctx.const(size), tensor=None)
            ctx.scratch[tv] = scratch
            place(scratch, [])
    kernel.body = allocations + kernel.body
    return kernel


PASS = Pass("allocation", run, __doc__, reads=("kernel", "live", "tensor_params"),
            provides=("buffers", "accumulators", "scratch", "layouts"),
            why="indexing needs the layouts; sync analysis reasons on byte ranges")
