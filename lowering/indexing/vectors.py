"""Vector accesses for the indexing pass: a copy of w consecutive elements in one load
and store (vector_copy), and a cat, pad or slice of the rows w elements at a time
(vector_select), each proved by lowering it once at a symbolic lane: every index it
touches must come out as base + lane with base a multiple of w (base_of), the
launch-time offsets lowering cannot prove so recorded for the executable to check per
call (kernel.vector_offsets).

It sits under lowering.passes.indexing and builds on lowering.indexing.values.
"""

from fuserir.errors import ScheduleError
from fuserir.ir.exprs import SliceOp

from .. import kir
from ..support.analysis import StoreInfo, row_regions
from .arith import addends, known_factor
from .buffers import global_index
from .values import load, operand_value, pointwise_value, store


def lane_free_base(ctx, index, lane):
    """b where `index` is b + lane with b free of lane, else None."""
    terms = addends(index)
    at = [i for i, t in enumerate(terms) if t is lane]
    rest = terms[:at[0]] + terms[at[0] + 1:] if len(at) == 1 else None
    if rest is None or any(e is lane for t in rest for e in kir.walk_expr(t)):
        return None
    return _sum_of(ctx, rest)


def _sum_of(ctx, terms):
    total = ctx.const(0)
    for t in terms:
        total = ctx.binop("add", total, t)
    return total


def base_of(ctx, index, lane, width):
    """b where `index` is b + lane with b a known multiple of `width` and free of lane, else
    None: the proof that a vector's `width` elements are consecutive and aligned."""
    base = lane_free_base(ctx, index, lane)
    return base if base is not None and known_factor(base) % width == 0 else None


def vector_bases(ctx, tv, buffer, index, logical, lane, width):
    """The lane-free base of each index a vector access of tv's buffer depends on (the
    buffer index for shared memory; each logical axis index for a global tensor, whose
    innermost axis holds the lane and whose strides the executable checks), or None."""
    if buffer.memory is not kir.Memory.global_:
        return [base_of(ctx, index, lane, width)]
    inner = tv.shape_axes[-1]
    others = [logical.get(a, ctx.const(0)) for a in tv.shape_axes[:-1]]
    lane_free = all(e is not lane for i in others for e in kir.walk_expr(i))
    return [base_of(ctx, logical[inner], lane, width) if lane_free else None]


def _copy_at_lane(ctx, tv, lane):
    """(root indices, load, store) of tv's copy with its vector axis indexed by `lane`."""
    axis = ctx.concrete_axis(tv, len(tv.loop) - 1)
    ctx.lane_index[axis] = lane
    try:
        index = ctx.root_indices(tv)
        source = load(ctx, tv.definition, tv.definition.inputs[0], index)
        return index, source, store(ctx, tv, source, index, "compute")
    finally:
        del ctx.lane_index[axis]


def vector_copy(ctx, tv, width):
    """tv's copy of `width` consecutive elements in one load and one store. Lowered once
    with the vector axis indexed by a symbolic lane v (0 <= v < width), each side's index
    must come out as base + v with base a multiple of width (lowering.indexing.arith folds the lane
    out of the splits and swizzles around it): that proves both sides contiguous and
    aligned. The vector access is then lowered at v = 0. A copy that cannot be proven so
    is refused."""
    lane = kir.Var(f"v{len(ctx.loop_vars)}", ctx.index_dtype)
    ctx.ranges.vars[id(lane)] = (0, width - 1)
    index, source, copy = _copy_at_lane(ctx, tv, lane)
    del ctx.store_info[copy]
    producer = tv.definition.inputs[0]
    src_logical = {p: index[c] for c, p in tv.definition.root_map(producer).items()}
    bases = (vector_bases(ctx, tv, copy.buffer, copy.index, index, lane, width)
             + vector_bases(ctx, producer, source.buffer, source.index, src_logical, lane,
                             width))
    if None in bases:
        raise ScheduleError(
            f"vectorize: {tv.name} copies {width} elements at a time from {producer.name}, "
            f"but lowering cannot prove them consecutive and {width}-aligned in both "
            f"({producer.name}[{kir.format_expr(source.index)}] at lane {lane.name}); "
            "vectorize an axis that is contiguous in the producer's layout too")
    _, source, copy = _copy_at_lane(ctx, tv, ctx.const(0))
    vector = kir.Store(copy.buffer, copy.index,
                       kir.Load(source.buffer, source.index, source.access, width),
                       copy.access, width=width)
    ctx.store_info[vector] = ctx.store_info.pop(copy)
    return vector


def _launch_time(ctx, e):
    """Is `e` a value fixed at launch (built of constants and scalar parameters, no thread
    index, loop variable or lane)?"""
    bound = {id(v) for v in ctx.loop_vars.values()} | set(ctx.ranges.vars)
    return all(not isinstance(x, (kir.Special, kir.Load)) and
               not (isinstance(x, kir.Var) and id(x) in bound) for x in kir.walk_expr(e))


def _unproven_offset(ctx, base, width):
    """The sum of `base`'s addends that are not known multiples of `width` (None where
    there are none), if all of them are launch-time values, else False: what the
    executable must check to be a multiple of width for base to be one."""
    rest = [t for t in addends(base) if known_factor(t) % width]
    if not rest:
        return None
    if not all(_launch_time(ctx, t) for t in rest):
        return False
    return _sum_of(ctx, rest)


def _chain_index(ctx, expr, chain, index):
    """{shape axis: index} of the fusion input under `chain` (a view chain a cat, pad or
    slice reads) for the output element at root `index`: the expression's shift along its
    axis without the clamp (the branch that reads it holds the index inside the region),
    then each slice's map."""
    at = ctx.producer_indices(expr, chain[0], index)
    axis = chain[0].shape_axes[expr.output.rank - 1]
    shift = expr.index_maps(chain[0]).get(axis)      # a slice's start, or -offset: step 1
    at[axis] = ctx.binop("add", ctx.extent(shift.start if shift else 0),
                         index.get(expr.output.root[-1], ctx.const(0)))
    for reader, t in zip(chain, chain[1:]):
        root = {a: at.get(a, ctx.const(0)) for a in reader.root}
        at = ctx.producer_indices(reader.definition, t, root)
    return at


def vector_select(ctx, tv, width):
    """tv's cat, pad or slice along its innermost axis, `width` elements at a time: an if
    per boundary between its regions (analysis.row_regions), and in the region holding the
    vector one vector load of the fusion input under it, the unary ops, casts and slices
    between them computed on the loaded elements in registers (or, in a pad's margins,
    the pad value). Lowered once with the vector axis indexed by a symbolic lane, each
    index must come out as base + lane, base a multiple of width: the innermost axis's
    (the vector's elements consecutive in the output) and each fusion input's
    (consecutive and aligned there). The addends lowering cannot prove multiples of width
    must be launch-time values (a slice's start, an input's extent, a pad's width): they
    go to kernel.vector_offsets, with the boundaries, for the executable to check per
    call (where one is not, it runs a variant reading element by element). Then no vector
    straddles a boundary, the condition at lane 0 holds for every lane, and no clamp is
    needed: the branch taken reads inside its region."""
    expr = tv.definition
    axis = ctx.concrete_axis(tv, len(tv.loop) - 1)
    row_axis = tv.root[-1]
    lane = kir.Var(f"v{len(ctx.loop_vars)}", ctx.index_dtype)
    ctx.ranges.vars[id(lane)] = (0, width - 1)

    def indices_at(position):
        ctx.lane_index[axis] = position
        try:
            return ctx.root_indices(tv)
        finally:
            del ctx.lane_index[axis]

    def refuse(what, index):
        raise ScheduleError(
            f"vectorize: {tv.name} takes {width} elements at a time through its "
            f"{expr.op}, but lowering cannot prove them consecutive and {width}-aligned "
            f"in {what} ({kir.format_expr(index)} at lane {lane.name}); vectorize the "
            f"innermost axis of the {expr.op}'s axis, with its inputs read at offsets of "
            "launch-time values")

    def multiple(base, of, index):
        """Check `base` is a multiple of width, up to the launch-time offsets it records
        for the executable."""
        unproven = None if base is None else _unproven_offset(ctx, base, width)
        if base is None or unproven is False:
            refuse(of, index)
        if unproven is not None:
            offsets.append(unproven)

    def proved(indices, axes, inner, of):
        """Check the lane runs along `inner` only, its index base + lane with base a
        multiple of width (up to offsets)."""
        index = indices.get(inner, ctx.const(0))
        if any(e is lane for a in axes if a is not inner
               for e in kir.walk_expr(indices.get(a, ctx.const(0)))):
            refuse(of, index)
        multiple(lane_free_base(ctx, index, lane), of, index)

    regions = row_regions(tv)
    offsets = []
    at_lane = indices_at(lane)
    proved(at_lane, tv.root, row_axis, f"{tv.name}'s rows")
    for start, _ in regions[1:]:                   # the boundaries: multiples of width
        multiple(ctx.extent(start), "the boundaries between its regions", ctx.extent(start))
    index = indices_at(ctx.const(0))
    i = index.get(row_axis, ctx.const(0))

    def elements(value_at):
        """tv[j] = value_at(j) for the vector's elements j, in an unrolled loop."""
        element = kir.Var(f"v{len(ctx.loop_vars)}_{len(elements_made)}", ctx.index_dtype)
        elements_made.append(element)
        ctx.ranges.vars[id(element)] = (0, width - 1)
        value = value_at(element)
        ctx.lane_index[axis] = element
        try:
            computed = store(ctx, tv, value, ctx.root_indices(tv), "compute")
        finally:
            del ctx.lane_index[axis]
        return kir.ForLoop(element, ctx.const(width), [computed], kind="unroll")

    def branch(k):
        chain = regions[k][1]
        if chain is None:                    # a pad's margin: its value
            return [elements(lambda _: operand_value(ctx, expr, expr.inputs[1], index,
                                                     tv.dtype))]
        leaf = chain[-1]
        inner = leaf.shape_axes[-1]
        symbolic = _chain_index(ctx, expr, chain, at_lane)
        proved(symbolic, leaf.shape_axes, inner, f"{leaf.name}'s rows")
        vector = kir.Load(ctx.buffers[leaf],
                          global_index(ctx, leaf, _chain_index(ctx, expr, chain, index)),
                          None, width)
        if all(isinstance(t.definition, SliceOp) for t in chain[:-1]):   # copied as is
            copy = store(ctx, tv, kir.Load(ctx.buffers[leaf], ctx.const(0)), index,
                         "compute")
            moved = kir.Store(copy.buffer, copy.index, vector, copy.access, width=width)
            ctx.store_info[moved] = ctx.store_info.pop(copy)
            return [moved]
        loaded = kir.Buffer(f"{tv.name}_{k}_{leaf.name}", leaf.dtype, kir.Memory.local,
                            ctx.const(width))
        fill = kir.Store(loaded, ctx.const(0), vector, width=width)
        ctx.store_info[fill] = StoreInfo(tv, "compute", index, kir.Memory.local)

        def value_at(element):
            value = kir.Load(loaded, element)
            for t in reversed(chain[:-1]):        # from the fusion input up to the region
                ctx.inline_values = {t.definition.tensor_inputs[0]: value}
                try:
                    value = pointwise_value(ctx, t.definition, {})
                finally:
                    ctx.inline_values = None
            return value
        return [kir.Allocate(loaded), fill, elements(value_at)]

    elements_made = []
    chosen = branch(len(regions) - 1)
    for k in range(len(regions) - 2, -1, -1):
        chosen = [kir.IfThenElse(ctx.binop("lt", i, ctx.extent(regions[k + 1][0])),
                                 branch(k), chosen)]
    leaves = sorted({chain[-1].name for _, chain in regions if chain is not None})
    ctx.vector_offsets.extend((name, e) for e in offsets for name in leaves)
    return chosen
