"""Where an element of a tensor lives: the index into its buffer or global array.

A global tensor is indexed by its logical indices times its strides (global_index). A
shared or local buffer is laid out row-major over the loop axes the allocation pass kept
(ctx.layouts: (loop position, stride) pairs; a fragment position for the elements one
lane holds of an instruction tile, a stage position for a circular buffer), then through
the tile's XOR swizzle and row padding (buffer_index). The loop axes are those of the
tensor whose loop lays the buffer out (lowering.support.analysis.layout_owner): the
tensor's own, or, for the staged tile a TMA store copies out, the store's, whose boxes
the tile holds box after box. A write names its element by its own loops
(element_index), a read by the element's logical indices, replayed forwards through the
owner's splits and merges (tile_index); both agree where the owner is another tensor
because both go through the element's logical indices.

It sits below the indexing pass (and lowering.indexing.tma_copies), which build every
index through it.
"""

from ..support.analysis import layout_owner


def dot(ctx, terms):
    """sum of index * stride over `terms` [(index, stride)]."""
    index = ctx.const(0)
    for i, stride in terms:
        index = ctx.binop("add", index, ctx.binop("mul", i, stride))
    return index


def position_index(ctx, tv, p, loop_index, owner=None):
    """The index of layout position `p` of tv's buffer: the loop axis p of `owner` (the
    tensor whose loop lays the buffer out; tv where None) from `loop_index`, the fragment
    element being lowered, or the circular buffer's stage."""
    if p == "frag":
        return ctx.frag_offset if ctx.frag_offset is not None else ctx.const(0)
    if p == "stage":
        # The circular-buffering pass rewrites the loop index for copies that run ahead.
        loop = ctx.loop_var(ctx.circular[tv])
        return ctx.binop("mod", loop, ctx.const(tv.circular_buffer_stages))
    return loop_index[(owner or tv).loop[p]]


def swizzled(ctx, tv, index):
    """The XOR swizzle of tv (transforms.swizzle): in each row of tv.swizzle_row elements,
    16-byte chunk c moves to chunk c ^ ((row / p) % n), n the row's chunks (at most 8), p
    = 128 / its bytes (1 for 128 bytes or more): Hopper's 128B, 64B and 32B modes on rows
    of that many bytes."""
    if tv.swizzle_row is None:
        return index
    chunk_elems = ctx.const(16 // tv.dtype.itemsize)
    row_elems = ctx.const(tv.swizzle_row)
    row_bytes = tv.swizzle_row * tv.dtype.itemsize
    chunks, period = min(row_bytes // 16, 8), max(1, 128 // row_bytes)
    row = ctx.binop("div", index, row_elems)
    chunk = ctx.binop("div", ctx.binop("mod", index, row_elems), chunk_elems)
    phase = row if period == 1 else ctx.binop("div", row, ctx.const(period))
    moved = ctx.binop("xor", chunk, ctx.binop("mod", phase, ctx.const(chunks)))
    # row * row_elems + moved chunk * chunk_elems + the element within the chunk
    return ctx.binop("add", ctx.binop("add", ctx.binop("mul", row, row_elems),
                                      ctx.binop("mul", moved, chunk_elems)),
                     ctx.binop("mod", index, chunk_elems))


def padded(ctx, tv, index):
    """The row padding of tv (transforms.pad_rows): after each row of `row` elements,
    `pad` unused ones, so element i sits at i + (i / row) * pad."""
    if tv.row_padding is None:
        return index
    row, pad = tv.row_padding
    return ctx.binop("add", index, ctx.binop("mul", ctx.binop("div", index, ctx.const(row)),
                                             ctx.const(pad)))


def buffer_index(ctx, tv, loop_index, swizzle=True):
    """Index into tv's buffer given {loop axis of its layout owner: index} (the allocation
    layout), through its swizzle unless `swizzle` is false (TMA and wgmma address logical
    bytes: the hardware swizzles them), and through its row padding."""
    buffer, owner = ctx.buffers[tv], layout_owner(tv)
    index = dot(ctx, [(position_index(ctx, tv, p, loop_index, owner), s)
                      for p, s in ctx.layouts[buffer]])
    return padded(ctx, tv, swizzled(ctx, tv, index) if swizzle else index)


def tile_index(ctx, tv, logical, swizzle=True):
    """Index into tv's buffer of its element at `logical` ({shape axis of tv: index}):
    the indices replayed forwards through the transforms of the tensor whose loop lays
    the buffer out (a TMA store's, for its staged tile: through its copy's root map)."""
    owner = layout_owner(tv)
    if owner is not tv:
        logical = {c: logical.get(p, ctx.const(0))
                   for c, p in owner.definition.root_map(tv).items()}
    return buffer_index(ctx, tv, ctx.forward_indices(owner, logical), swizzle)


def element_index(ctx, tv, swizzle=True):
    """Index into tv's buffer of the element tv's own loops (and the lane being lowered)
    are at: the element a write of tv names."""
    if layout_owner(tv) is tv:
        loop = {a: ctx.loop_index(tv, i) for i, a in enumerate(tv.loop)}
        return buffer_index(ctx, tv, loop, swizzle)
    return tile_index(ctx, tv, ctx.root_indices(tv), swizzle)


def global_index(ctx, tv, logical_index):
    """Index into the global tensor tv of its element at `logical_index` ({shape axis:
    index}; an axis not given is at 0), through its stride parameters."""
    param = ctx.tensor_params[tv]
    return dot(ctx, [(logical_index.get(a, ctx.const(0)), stride)
                     for a, stride in zip(tv.shape_axes, param.strides)])


def accumulator_index(ctx, tv):
    """Index into the local accumulator of the reduction tv at its current loops."""
    acc = ctx.accumulators[tv]
    return dot(ctx, [(ctx.loop_index(tv, p) if p != "frag" else
                      position_index(ctx, tv, p, None), s) for p, s in ctx.layouts[acc]])
