"""Scheduling transforms: the algorithms behind TensorView's scheduling methods.

They follow nvFuser's meaning (DESIGN.md section 4). Transforms reshape a tensor's loop
domain (split, merge, reorder), annotate it (parallelize, vectorize, circular_buffer,
memory type), or rewrite the graph without changing what it computes (rfactor,
cache_after, cache_before). compute_at makes a producer replay its consumer's transforms
so that the two share their outer loops.

Every illegal request raises ScheduleError naming the transform, the tensor and the axis,
so that a schedule that cannot be lowered is refused here rather than miscompiled later.
"""

from ..errors import FusionError, ScheduleError
from ..ir import extent as ext
from ..ir.exprs import LoadStoreOp, MatmulOp, ReductionOp
from ..ir.iterdomain import (IterDomain, IterKind, Merge, ParallelType, Split, history, replay,
                            roots_of)
from ..ir.tensor import MemoryType, TensorView, memory_type as _memory_type
from ..ops import accumulate_dtype

# -- argument checks -----------------------------------------------------------------------


def _axis(op, tv, axis):
    """Normalise a (possibly negative) loop axis number of `tv`."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise ScheduleError(f"{op}: axis {axis!r} is not an integer (tensor {tv.name})")
    p = axis + tv.ndim if axis < 0 else axis
    if not 0 <= p < tv.ndim:
        raise ScheduleError(f"{op}: axis {axis} is out of range for tensor {tv.name} with "
                            f"{tv.ndim} loop axes")
    return p


def _not_input(op, tv):
    if tv.is_input:
        raise ScheduleError(f"{op}: {tv.name} is a fusion input; inputs are read, not "
                            f"computed: schedule a cache of it (cache_after) instead")


def _placed_producers(tv):
    """The tensors computed at `tv`: they share its outer loops. Usually direct producers,
    but a cache_after inserted since may stand between (x computed at y, then x cached)."""
    return [p for p in tv.fusion.tensors if p.compute_at_consumer is tv and p.compute_at_pos]


def _max_producer_pos(tv):
    """The deepest loop position of `tv` that a producer computed at `tv` shares."""
    return max((p.compute_at_pos for p in _placed_producers(tv)), default=0)


def _not_shared(op, tv, positions):
    """Refuse to change loop axes that are shared with a consumer or a producer."""
    for p in positions:
        if tv.compute_at_pos and p < tv.compute_at_pos:
            raise ScheduleError(
                f"{op}: axis {p} of {tv.name} is inside its compute-at position "
                f"{tv.compute_at_pos} (the loop is shared with {tv.compute_at_consumer.name}); "
                f"transform {tv.compute_at_consumer.name} before compute_at instead")
        shared = _max_producer_pos(tv)
        if p < shared:
            raise ScheduleError(
                f"{op}: axis {p} of {tv.name} is shared with a producer computed at position "
                f"{shared}; transform {tv.name} before that compute_at")


def _memory(op, value):
    try:
        return _memory_type(value)
    except ValueError:
        raise ScheduleError(f"{op}: unknown memory type {value!r}; expected global, shared "
                            "or local") from None


def _ptype(op, value):
    if isinstance(value, ParallelType):
        return value
    try:
        return ParallelType(value)
    except ValueError:
        names = ", ".join(p.value for p in ParallelType)
        raise ScheduleError(f"{op}: unknown parallel type {value!r}; expected one of "
                            f"{names}") from None


# -- loop-domain transforms ----------------------------------------------------------------


def split(tv, axis, factor, inner=True):
    _not_input("split", tv)
    p = _axis("split", tv, axis)
    if isinstance(factor, bool) or not isinstance(factor, (int, str, ext.Sym)):
        raise ScheduleError(f"split: factor {factor!r} must be a positive integer or the name "
                            f"of a run-time scalar (tensor {tv.name}, axis {axis})")
    if isinstance(factor, int) and factor < 1:
        raise ScheduleError(f"split: factor must be >= 1, got {factor} (tensor {tv.name}, "
                            f"axis {axis})")
    if isinstance(factor, str) and not factor.isidentifier():
        raise ScheduleError(f"split: factor {factor!r} is not a valid scalar name (tensor "
                            f"{tv.name}, axis {axis})")
    _not_shared("split", tv, [p])
    if isinstance(factor, (str, ext.Sym)):
        try:                      # a named factor is a run-time scalar of the fusion
            tv.fusion.declare(str(factor))
        except FusionError as e:
            raise ScheduleError(f"split: {e} (tensor {tv.name}, axis {axis})") from None
    s = Split(tv.loop[p], factor, inner)
    tv.loop[p:p + 1] = [s.outer, s.inner]


def merge(tv, axis):
    _not_input("merge", tv)
    p = _axis("merge", tv, axis)
    if p + 1 >= tv.ndim:
        raise ScheduleError(f"merge: axis {axis} is the last loop axis of {tv.name}; there is "
                            "no next axis to merge it with")
    outer, inner = tv.loop[p], tv.loop[p + 1]
    if IterKind.reduction in (outer.kind, inner.kind) and IterKind.iteration in (outer.kind,
                                                                             inner.kind):
        raise ScheduleError(f"merge: cannot merge a reduction axis with an iteration axis "
                            f"(tensor {tv.name}, axes {p} and {p + 1}: {outer} and {inner})")
    if IterKind.reduction in (outer.kind, inner.kind) and (outer.is_broadcast
                                                           or inner.is_broadcast):
        # a broadcast axis stands for no data: merged into a reduction, the merged loop
        # would run the reduction once per broadcast index and count each element again
        raise ScheduleError(f"merge: cannot merge a broadcast axis with a reduction axis "
                            f"(tensor {tv.name}, axes {p} and {p + 1}: {outer} and {inner}); "
                            "the merged loop would reduce every element more than once")
    _not_shared("merge", tv, [p, p + 1])
    tv.loop[p:p + 2] = [Merge(outer, inner).output]


def reorder(tv, mapping):
    _not_input("reorder", tv)
    if not isinstance(mapping, dict):
        raise ScheduleError(f"reorder: expected a map {{old: new}}, got {mapping!r} "
                            f"(tensor {tv.name})")
    moves = {}
    for old, new in mapping.items():
        o, n = _axis("reorder", tv, old), _axis("reorder", tv, new)
        if o in moves:
            raise ScheduleError(f"reorder: axis {o} of {tv.name} is moved twice (as {old})")
        if n in moves.values():
            raise ScheduleError(f"reorder: two axes of {tv.name} are moved to position {new}")
        moves[o] = n
    _not_shared("reorder", tv, [p for o, n in moves.items() if o != n for p in (o, n)])
    order = [None] * tv.ndim
    for o, n in moves.items():
        order[n] = tv.loop[o]
    rest = iter(a for i, a in enumerate(tv.loop) if i not in moves)
    tv.loop = [a if a is not None else next(rest) for a in order]


def _not_bound(op, tv, p, axis, ptype):
    """One parallel type per axis: a second one would silently override the first."""
    old = tv.loop[p].parallel
    if old is not ParallelType.serial and old is not ptype:
        raise ScheduleError(f"{op}: axis {axis} of {tv.name} is already parallelized as "
                            f"{old.value}; it cannot also be {ptype.value}")


def parallelize(tv, axis, ptype):
    _not_input("parallelize", tv)
    p = _axis("parallelize", tv, axis)
    ptype = _ptype("parallelize", ptype)
    _not_bound("parallelize", tv, p, axis, ptype)
    if ptype is ParallelType.vectorize:
        vectorize(tv, p)
        return
    if ptype.is_grid_mapped:
        for i, a in enumerate(tv.loop):
            if i != p and a.parallel is ptype:
                raise ScheduleError(f"parallelize: {tv.name} already binds {ptype} to axis "
                                    f"{i}; each block/thread index binds one axis (axis "
                                    f"{axis})")
    tv.loop[p].parallel = ptype


def vectorize(tv, axis):
    _not_input("vectorize", tv)
    p = _axis("vectorize", tv, axis)
    _not_bound("vectorize", tv, p, axis, ParallelType.vectorize)
    a = tv.loop[p]
    where = f"(tensor {tv.name}, axis {axis})"
    if p != tv.ndim - 1:
        raise ScheduleError(f"vectorize: axis {p} is not the innermost loop axis of "
                            f"{tv.name} ({tv.ndim} loop axes) {where}")
    if a.is_reduction:
        raise ScheduleError(f"vectorize: cannot vectorize a reduction axis {where}")
    if not isinstance(a.extent, int):
        raise ScheduleError(f"vectorize: extent {a.extent} is not a constant; split by a "
                            f"constant first {where}")
    nbytes = a.extent * tv.dtype.itemsize
    if nbytes not in (1, 2, 4, 8, 16):
        raise ScheduleError(f"vectorize: {a.extent} x {tv.dtype} is {nbytes} bytes; a vector "
                            f"access is 1, 2, 4, 8 or 16 bytes {where}")
    innermost = [r for r in tv.root if not r.is_reduction and not r.is_broadcast]
    walk = a
    while walk.definition is not None:
        d = walk.definition
        if isinstance(d, Split):
            if walk is not d.inner:
                raise ScheduleError(f"vectorize: the axis is the outer piece of a split, "
                                    f"not contiguous in memory {where}")
            walk = d.input
        else:
            walk = d.inner
    if not innermost or walk is not innermost[-1]:
        raise ScheduleError(f"vectorize: the axis is not contiguous in memory: it does not "
                            f"come from the innermost axis of {tv.name} {where}")
    a.parallel = ParallelType.vectorize


# -- graph rewrites ------------------------------------------------------------------------


def _rebuild_loop(old_loop, axis_map):
    """Replay the transforms behind `old_loop` from re-rooted axes (`axis_map`: old root ->
    new root); loop axes whose roots are not all mapped are dropped."""
    axis_map = replay(history(old_loop), axis_map)
    loop = []
    for a in old_loop:
        if a in axis_map:
            axis_map[a].parallel = a.parallel
            loop.append(axis_map[a])
    return loop


def rfactor(tv, axes):
    _not_input("rfactor", tv)
    expr = tv.definition
    if not isinstance(expr, (ReductionOp, MatmulOp)):
        raise ScheduleError(f"rfactor: {tv.name} is not defined by a reduction or matmul")
    if tv.logical != tv.root:
        raise ScheduleError(f"rfactor: {tv.name} is already an rfactor producer")
    # rfactor rebuilds tv's loops and moves its definition: loops already shared through
    # compute_at (and their loop-only broadcast axes) would be left dangling.
    if tv.compute_at_consumer is not None:
        raise ScheduleError(f"rfactor: {tv.name} already shares loops with "
                            f"{tv.compute_at_consumer.name} through compute_at; rfactor it "
                            "before compute_at")
    if _max_producer_pos(tv):
        raise ScheduleError(f"rfactor: a producer is computed at position "
                            f"{_max_producer_pos(tv)} of {tv.name}; rfactor {tv.name} before "
                            "that compute_at")
    if isinstance(axes, int):
        axes = [axes]
    positions = [_axis("rfactor", tv, a) for a in axes]
    if not positions:
        raise ScheduleError(f"rfactor: no axes given (tensor {tv.name})")
    for a, p in zip(axes, positions):
        if not tv.loop[p].is_reduction:
            raise ScheduleError(f"rfactor: axis {a} of {tv.name} is not a reduction axis "
                                f"({tv.loop[p]})")
    reduction_loop = [i for i, a in enumerate(tv.loop) if a.is_reduction]
    if set(reduction_loop) <= set(positions):
        raise ScheduleError(f"rfactor: every reduction axis of {tv.name} is listed; leave at "
                            "least one for it to reduce")
    fusion = tv.fusion
    rfactored = {tv.loop[p] for p in positions}

    # The producer replays the whole schedule of tv; its logical domain keeps the iteration
    # roots and the reduction's loop pieces, those not rfactored becoming iteration axes.
    root_map = {r: r.clone() for r in tv.root}
    producer_map = replay(history(tv.loop), root_map)
    logical, origin = [], []
    for r in tv.root:
        if not r.is_reduction:
            logical.append(root_map[r])
            origin.append(r)
            continue
        for a in tv.loop:
            if a.is_reduction and r in roots_of(a) and a not in origin:
                producer_map[a].kind = (IterKind.reduction if a in rfactored
                                        else IterKind.iteration)
                logical.append(producer_map[a])
                origin.append(a)
    dtype = accumulate_dtype(tv.dtype) if isinstance(expr, ReductionOp) else tv.dtype
    producer = TensorView(fusion, fusion.fresh_name(f"{tv.name}_rf"), dtype,
                          [root_map[r] for r in tv.root])
    producer.logical = logical
    producer.loop = [producer_map[a] for a in tv.loop]
    for a in tv.loop:
        producer_map[a].parallel = a.parallel
    fusion.add_tensor(producer)
    fusion.remove_expr(expr)
    expr.output = producer
    fusion.add_expr(expr)

    # tv now reduces what the producer did not: its root is the producer's shape, with the
    # pieces that were reduction axes of tv still reduction axes.
    consumer_map = {}
    for old, new in zip(origin, logical):
        if not new.is_reduction:
            consumer_map[old] = IterDomain(new.extent, IterKind.reduction if old.is_reduction
                                           else new.kind)
    tv.root = list(consumer_map.values())
    tv.logical = list(tv.root)
    tv.loop = _rebuild_loop([a for a in tv.loop if a not in rfactored], consumer_map)
    op = expr.op if isinstance(expr, ReductionOp) else "sum"
    reduced = [i for i, a in enumerate(tv.root) if a.is_reduction]
    fusion.add_expr(ReductionOp(op, producer, tv, reduced))
    return producer


def cache_after(tv, memory_type, async_copy=False, ldmatrix=False):
    mt = _memory("cache_after", memory_type)
    fusion = tv.fusion
    uses = fusion.uses(tv)
    if not uses:
        raise ScheduleError(f"cache_after: {tv.name} has no consumers to read the cache")
    if ldmatrix:
        if mt is not MemoryType.local:
            raise ScheduleError(f"cache_after: ldmatrix loads into registers (local), not "
                                f"{mt} (tensor {tv.name})")
        if tv.memory_type is not MemoryType.shared:
            raise ScheduleError(f"cache_after: ldmatrix reads shared memory, but {tv.name} "
                                f"is in {tv.memory_type} memory")
        if not all(isinstance(u, MatmulOp) for u in uses):
            raise ScheduleError(f"cache_after: an ldmatrix cache holds tensor-core operand "
                                f"fragments, so every consumer of {tv.name} must be a matmul")
    if async_copy and mt is not MemoryType.shared:
        raise ScheduleError(f"cache_after: async_copy copies into shared memory, not {mt} "
                            f"(tensor {tv.name})")
    if async_copy and tv.memory_type is not MemoryType.global_:
        raise ScheduleError(f"cache_after: async_copy copies from global memory, but "
                            f"{tv.name} is in {tv.memory_type} memory")
    root = [IterDomain(a.extent, a.kind) for a in tv.shape_axes]
    cache = TensorView(fusion, fusion.fresh_name(f"{tv.name}_cache"), tv.dtype, root, mt)
    fusion.add_tensor(cache)
    fusion.add_expr(LoadStoreOp(tv, cache, async_copy, ldmatrix))
    for use in uses:
        fusion.replace_input(use, tv, cache)
    return cache


def cache_before(tv, memory_type):
    mt = _memory("cache_before", memory_type)
    if tv.definition is None:
        raise ScheduleError(f"cache_before: {tv.name} is a fusion input with no definition to "
                            "cache; use cache_after")
    # (as in nvFuser: the cache takes tv's loops and definition, so placements that share
    # tv's loops would be left pointing at the wrong tensor)
    if tv.compute_at_pos:
        raise ScheduleError(f"cache_before: {tv.name} is computed at "
                            f"{tv.compute_at_consumer.name} (position {tv.compute_at_pos}); "
                            "cache it before compute_at")
    if _max_producer_pos(tv):
        raise ScheduleError(f"cache_before: a producer is computed at position "
                            f"{_max_producer_pos(tv)} of {tv.name}; cache {tv.name} before "
                            "that compute_at")
    fusion = tv.fusion
    expr = tv.definition
    cache = TensorView(fusion, fusion.fresh_name(f"{tv.name}_cache"), tv.dtype, [], mt)
    cache.root, cache.logical, cache.loop = tv.root, tv.logical, tv.loop
    fusion.add_tensor(cache)
    fusion.remove_expr(expr)
    expr.output = cache
    fusion.add_expr(expr)
    axis_map = {}
    for a in cache.shape_axes:
        axis_map[a] = IterDomain(a.extent, a.kind)
    tv.root = list(axis_map.values())
    tv.logical = list(tv.root)
    tv.loop = _rebuild_loop(cache.loop, axis_map)
    fusion.add_expr(LoadStoreOp(cache, tv))
    return cache


def set_memory_type(tv, memory_type):
    mt = _memory("set_memory_type", memory_type)
    if (tv.is_input or tv.is_output) and mt is not MemoryType.global_:
        role = "input" if tv.is_input else "output"
        raise ScheduleError(f"set_memory_type: {tv.name} is a fusion {role} and stays in "
                            "global memory")
    tv.memory_type = mt


# -- compute_at ----------------------------------------------------------------------------


def compute_at(tv, consumer, pos):
    _not_input("compute_at", tv)
    if not isinstance(consumer, TensorView) or consumer.fusion is not tv.fusion:
        raise ScheduleError(f"compute_at: {consumer!r} is not a tensor of {tv.name}'s fusion")
    fusion = tv.fusion
    if not fusion.depends_on(consumer, tv):
        raise ScheduleError(f"compute_at: {consumer.name} does not use {tv.name}, directly or "
                            "indirectly")
    if isinstance(pos, bool) or not isinstance(pos, int):
        raise ScheduleError(f"compute_at: position {pos!r} is not an integer (tensor "
                            f"{tv.name})")
    p = consumer.ndim + 1 + pos if pos < 0 else pos
    if not 0 <= p <= consumer.ndim:
        raise ScheduleError(f"compute_at: position {pos} is past the depth of consumer "
                            f"{consumer.name}, which has {consumer.ndim} loop axes "
                            f"(tensor {tv.name})")
    _place_along_paths(tv, consumer, p)


def _place_along_paths(tv, consumer, pos):
    """Compute tv at `pos` of consumer, a direct or indirect consumer. Every tensor on a
    path between them is computed at the same position. Those in between that no
    compute_at placed stay unplaced: lowering inlines them as far as legal, which keeps
    the shared loops and adds their own inner ones."""
    fusion = tv.fusion
    on_path = [t for t in fusion.tensors
               if t is tv or (fusion.depends_on(t, tv) and fusion.depends_on(consumer, t))]
    targets = set(on_path) | {consumer}
    for t in reversed(on_path):
        if t is consumer:
            continue
        c = next(c for c in fusion.consumers(t) if c in targets)
        placed = t.compute_at_pos
        _replay_keeping_placements(t, c, pos, skip=on_path)
        if t is not tv and placed is None:
            t.compute_at_pos = None


def _replay_at(producer, consumer, pos):
    """Make `producer` share the first `pos` loops of `consumer` (see compute_at)."""
    shared = consumer.loop[:pos]
    for i, a in enumerate(shared):
        if a.parallel in (ParallelType.vectorize, ParallelType.mma):
            raise ScheduleError(f"compute_at: position {pos} would share {consumer.name}'s "
                                f"{a.parallel} axis {i} with {producer.name}")
    transforms = history(shared)
    root_map = consumer.definition.root_map(producer)
    needed = []
    for a in shared:
        for r in roots_of(a):
            if r not in needed:
                needed.append(r)
    # A consumer axis with no producer counterpart (a new broadcast, say) becomes a loop-only
    # broadcast axis of the producer: the producer is computed once per iteration of it.
    axis_map = {r: root_map.get(r) or IterDomain(1, IterKind.broadcast) for r in needed}
    axis_map = replay(transforms, axis_map)
    new_shared = [axis_map[a] for a in shared]
    for old, new in zip(shared, new_shared):
        new.parallel = old.parallel

    consumed = {i for t in transforms for i in t.inputs}
    leftovers = [o for t in transforms for o in t.outputs if o not in consumed
                 and o not in shared]

    def consumer_position(axis):
        for j, a in enumerate(consumer.loop):
            if axis is a or axis in _ancestors(a):
                return j
        return len(consumer.loop)

    leftovers.sort(key=consumer_position)
    used = {axis_map[r] for r in needed if r in root_map}
    free = [a for a in producer.logical if a not in used]
    # (a loop axis with no logical ancestor is a loop-only broadcast axis of an earlier
    # compute_at: it exists only to share a consumer loop, so it is not kept)
    kept = [a for a in producer.loop if _ancestors_in(a, producer.logical)
            and all(r in free for r in _ancestors_in(a, producer.logical))]
    covered = {r for a in kept for r in _ancestors_in(a, producer.logical)}
    producer.loop = (new_shared + [axis_map[o] for o in leftovers] + kept
                     + [a for a in free if a not in covered])
    producer.compute_at_pos = pos
    producer.compute_at_consumer = consumer


def _ancestors(axis):
    """Every axis that `axis` derives from, however far up."""
    if axis.definition is None:
        return []
    return [x for i in axis.definition.inputs for x in [i] + _ancestors(i)]


def _ancestors_in(axis, domain):
    """The axes of `domain` that `axis` derives from (itself if it is one of them)."""
    if axis in domain:
        return [axis]
    if axis.definition is None:
        return []
    return [r for i in axis.definition.inputs for r in _ancestors_in(i, domain)]


def concrete_loop(tv, i):
    """The (tensor, position) whose loop tv.loop[i] runs in: inside its compute-at position
    an axis shares its consumer's loop, recursively."""
    while tv.compute_at_pos and i < tv.compute_at_pos:
        tv = tv.compute_at_consumer
    return tv, i


def max_inline_position(tv):
    """The deepest position `tv` can be computed at in its consumers' loops.

    It stops before a vectorized or mma axis; where tv has several consumers, after the
    loops they all share; and for a reduction, before a consumer axis that does not map
    to one of its iteration axes (a broadcast the consumer resolves), which would recompute
    the whole reduction in every iteration of that loop.
    """
    consumers = tv.fusion.consumers(tv)
    if not consumers:
        return 0
    first = consumers[0]
    limit = first.ndim
    for i, a in enumerate(first.loop):
        if a.parallel in (ParallelType.vectorize, ParallelType.mma):
            limit = min(limit, i)
    for c in consumers[1:]:
        depth = 0
        while (depth < min(c.ndim, first.ndim)
               and concrete_loop(c, depth) == concrete_loop(first, depth)):
            depth += 1
        limit = min(limit, depth)
    if any(a.is_reduction for a in tv.loop):
        mapped = set(first.definition.root_map(tv))
        for i, a in enumerate(first.loop[:limit]):
            if not all(r in mapped for r in roots_of(a)):
                limit = i
                break
    return limit


def inline_most(target):
    """Inline a tensor, or every tensor of a fusion that no compute_at placed, as deep into
    its consumers' loops as is legal (consumers first, so producers replay final loops).
    Inlining replaces the loops it shares with the consumer's: schedule the consumer and
    compute producers at it, as in nvFuser."""
    if isinstance(target, TensorView):
        _not_input("inline_most", target)
        if not target.fusion.consumers(target):
            raise ScheduleError(f"inline_most: {target.name} has no consumer to be inlined "
                                "into")
        tensors = [target]
    else:
        tensors = [t for t in reversed(target.tensors) if not t.is_input
                   and t.compute_at_pos is None and target.consumers(t)]
    for t in tensors:
        pos = max_inline_position(t)
        if pos > 0:
            _replay_keeping_placements(t, t.fusion.consumers(t)[0], pos)
        else:
            t.compute_at_pos = 0


def _replay_keeping_placements(tv, consumer, pos, skip=()):
    """_replay_at, then put the producers computed at tv (except those in `skip`, which the
    caller replays itself) back at their positions in tv's new loops: placing tv anew must
    not leave them sharing loops it no longer has."""
    placed = [(q, q.compute_at_pos) for q in _placed_producers(tv) if q not in skip]
    before = _loop_signature(tv)
    _replay_at(tv, consumer, pos)
    after = _loop_signature(tv)
    for q, k in placed:
        if k <= len(after) and before[:k] == after[:k]:
            continue    # the loops q shares are unchanged: keep q's own schedule
        if tv.fusion.depends_on(tv, q):
            _place_along_paths(q, tv, min(k, tv.ndim))


def _loop_signature(tv):
    """What a producer sharing tv's loops depends on: each loop's extent and binding."""
    return [(str(a.extent), a.kind, a.parallel) for a in tv.loop]


def circular_buffer(tv, stages):
    _not_input("circular_buffer", tv)
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 2:
        raise ScheduleError(f"circular_buffer: stages must be an integer >= 2, got {stages!r} "
                            f"(tensor {tv.name})")
    if not isinstance(tv.definition, LoadStoreOp):
        raise ScheduleError(f"circular_buffer: {tv.name} is not a copy; only loads made by "
                            "cache_after/cache_before are circular-buffered")
    if tv.memory_type is MemoryType.global_:
        raise ScheduleError(f"circular_buffer: {tv.name} is in global memory; circular "
                            "buffers live in shared or local memory")
    pos = tv.compute_at_pos or 0
    serial = [a for a in tv.loop[:pos] if a.parallel in (ParallelType.serial,
                                                         ParallelType.unroll)
              and a.extent != 1]
    if not serial:
        raise ScheduleError(f"circular_buffer: {tv.name} is not computed inside a serial loop "
                            f"(compute-at position {pos}); compute_at it inside one first")
    tv.circular_buffer_stages = stages



def swizzle(tv, row):
    _not_input("swizzle", tv)
    if tv.memory_type is not MemoryType.shared:
        raise ScheduleError(f"swizzle: {tv.name} is in {tv.memory_type} memory; only shared "
                            "tiles are swizzled (bank conflicts are a shared-memory matter)")
    if isinstance(row, bool) or not isinstance(row, int) or row < 1:
        raise ScheduleError(f"swizzle: row must be a positive number of elements, got "
                            f"{row!r} (tensor {tv.name})")
    if (row * tv.dtype.itemsize) % 128:
        raise ScheduleError(f"swizzle: a row of {row} x {tv.dtype} is "
                            f"{row * tv.dtype.itemsize} bytes; the XOR swizzle permutes 8 "
                            f"16-byte chunks, so a row must be a multiple of 128 bytes "
                            f"(tensor {tv.name})")
    tv.swizzle_row = row


def promote_reuse(tv):
    _not_input("promote_reuse", tv)
    if tv.memory_type is not MemoryType.shared:
        raise ScheduleError(f"promote_reuse: {tv.name} is in {tv.memory_type} memory; only "
                            "shared tensors reuse bytes")
    tv.reuse_shared = True


def serial_grid_reduction(tv):
    _not_input("serial_grid_reduction", tv)
    if not isinstance(tv.definition, (ReductionOp, MatmulOp)):
        raise ScheduleError(f"serial_grid_reduction: {tv.name} is not defined by a reduction "
                            "or matmul")
    tv.serial_grid = True
