"""A TMA copy's statements, read off its scheduled tensors: the tensor map of its global
tensor, a load's box into the shared cache, a store's boxes out of its staged tile.

* A load (cache_after(shared, tma=True)) is one kir.TmaLoad per iteration of the loops
  around its box: the coordinates of the box's first element, the destination the
  tile's element there (the mbarrier it completes on is the circular-buffering pass's).
* A store (cache_before(shared, tma=True)) copies the whole staged tile out at once: its
  loop axes past the tile's compute-at position are boxes, not loops (ctx.vector_axes),
  the two innermost one box (lowering.indexing.hopper_operands.tma_box) and the outer
  ones enumerated, one kir.TmaStore per box, then a kir.BulkCommit closing their bulk
  group, all issued by thread 0 of the block (the first consumer warp group's: the
  producer warp group is added after the consumers along TIDy). No bounds guard: the
  hardware writes only the elements of a box inside the tensor, so the tiles at the
  output's edges and a persistent kernel's rounds past the last tile store what lies
  inside and nothing else. The tile is laid out as the boxes, box after box
  (lowering.support.analysis.layout_owner); what orders the threads' writes of the tile
  before the stores, and the stores' reads before the tile is written again or the
  kernel ends (a proxy fence, a barrier, cp.async.bulk.wait_group.read), is sync
  insertion's (lowering.verify.async_syncs).

Both check that the shared side keeps a box's rows contiguous, as the hardware moves
them. A map is made once per global tensor and box and shared by the copies that use it.
It sits below the indexing pass, which asks it, over lowering.indexing.buffers and
hopper_operands.
"""

import itertools

from fuserir.errors import ScheduleError

from .. import kir
from ..support.analysis import THREAD_TYPES
from . import hopper_operands
from .buffers import buffer_index


def tensor_map(ctx, source, box):
    """The tensor map of the global tensor `source` for boxes like `box` (one per tensor
    and box: copies of the same box share it)."""
    key = (source, box.extents, box.swizzle)
    if key not in ctx.tensor_maps:
        param = ctx.tensor_params[source]
        axes = source.shape_axes
        d = [axes.index(dim) for dim in box.dims]       # innermost first
        name = f"{source.name}_map" + (f"{len(ctx.tensor_maps)}" if any(
            k[0] is source for k in ctx.tensor_maps) else "")
        ctx.tensor_maps[key] = kir.TensorMap(name, param, [param.sizes[i] for i in d],
                                             [param.strides[i] for i in d[1:]],
                                             box.extents, box.swizzle)
    return ctx.tensor_maps[key]


def _check_rows(ctx, tv, tile, box):
    """Refuse a shared tile whose buffer does not keep the box's axes (tv's two innermost)
    innermost and contiguous."""
    strides = dict(ctx.layouts[ctx.buffers[tile]])
    inner, outer = (tv.ndim - 1, tv.ndim - 2)
    if kir.format_expr(strides.get(inner, ctx.const(0))) != "1" or \
            kir.format_expr(strides.get(outer, ctx.const(0))) != str(box.extents[0]):
        raise ScheduleError(f"{tile.name}: a TMA box moves row by row, but the tile's "
                            "buffer does not keep the box's axes innermost and contiguous")


def _at_box(ctx, tv, tile, fixed):
    """(root indices of tv, index into tile's buffer, before the swizzle) of the first
    element of a box: tv's axes in `fixed` ({axis: constant}) and its box axes at 0."""
    ctx.lane_index = {**fixed, **{a: ctx.const(0) for a in tv.loop[-2:]}}
    try:
        loop = {a: ctx.loop_index(tv, i) for i, a in enumerate(tv.loop)}
        return ctx.root_indices(tv), buffer_index(ctx, tile, loop, swizzle=False)
    finally:
        ctx.lane_index = {}


def _coordinates(box, index):
    """A TMA statement's coordinates (c0, c1[, c2]): the index of each of the box's
    dimensions in the global tensor (`index`: {its axis: index})."""
    return {f"c{i}": index[dim] for i, dim in enumerate(box.dims)}


def tma_load(ctx, tv):
    """A TMA load of one box of tv from the global tensor it caches (module header)."""
    box = hopper_operands.tma_box(tv)
    source = tv.definition.inputs[0]
    _check_rows(ctx, tv, tv, box)
    index, target = _at_box(ctx, tv, tv, {})
    logical = {p: index[c] for c, p in tv.definition.root_map(source).items()}
    access = kir.AccessInfo(tv.name, ctx.owner(tv, is_write=True))
    return kir.TmaLoad(dst=ctx.buffers[tv], dst_index=target,
                       map=tensor_map(ctx, source, box), **_coordinates(box, logical),
                       access=access)


def tma_store(ctx, tv):
    """The TMA stores of tv's staged tile, a box each, and their commit, by one thread
    (module header)."""
    box = hopper_operands.tma_box(tv)
    tile = tv.definition.inputs[0]
    _check_rows(ctx, tv, tile, box)
    outer = tv.loop[tile.compute_at_pos:-2]
    buffer, tmap = ctx.buffers[tile], tensor_map(ctx, tv, box)
    access = kir.AccessInfo(tile.name, ctx.owner(tv, is_write=False))
    stores = []
    for at in itertools.product(*(range(a.extent) for a in outer)):
        index, source = _at_box(ctx, tv, tile, {a: ctx.const(i) for a, i in zip(outer, at)})
        stores.append(kir.TmaStore(src=buffer, src_index=source, map=tmap,
                                   **_coordinates(box, index), access=access))
    elected = None
    for ptype in THREAD_TYPES:
        if ctx.bound[ptype]:
            first = ctx.binop("eq", kir.Special(kir.SpecialKind.threadIdx, ptype.value[-1],
                                                ctx.index_dtype), ctx.const(0))
            elected = first if elected is None else ctx.binop("and", elected, first)
    body = stores + [kir.BulkCommit()]
    return body if elected is None else [kir.IfThenElse(elected, body)]
