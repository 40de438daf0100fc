"""Placement: compute_at and inline_most decide which loops a producer shares with a consumer.

A producer computed at position p of a consumer replays the consumer's transforms for its
first p loop axes and shares those loops (with their parallel types); its own remaining
axes follow. Placing a tensor anew puts the producers already computed at it back at
their positions, so that none is left sharing loops it no longer has. inline_most is
also lowering's first step (the inline_defaults pass) for every tensor no schedule placed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ScheduleError
from ..ir.iterdomain import IterDomain, IterKind, ParallelType, history, replay, roots_of
from ..ir.tensor import TensorView
from .common import _not_input, _placed_producers, concrete_loop

if TYPE_CHECKING:
    from ..ir.fusion import Fusion


def compute_at(tv: TensorView, consumer: TensorView, pos: int) -> None:
    """Compute `tv` inside the first `pos` loops of `consumer` (TensorView.compute_at).

    tv replays consumer's transforms for those loop axes and shares the loops, parallel types
    included; axes left over from the replayed transforms and tv's own remaining axes follow.
    Every tensor on a path between the two shares the same loops (those that no compute_at
    of their own placed stay unplaced, free to be inlined deeper). A consumer axis tv lacks
    (a broadcast) becomes a loop-only broadcast axis b{1}: tv is computed once per iteration.
    A broadcast axis of tv (loop-only or its own) that stands for a real consumer axis
    records that axis's extent (IterDomain.concrete_extent), which the shared loop runs
    over: lowering replays tv's merges backwards over it.

      consumer  a tensor of the same fusion that uses tv, directly or indirectly
      pos       0 ... consumer's loop count; a negative one counts from loop count + 1, so
                -1 shares every loop

    Raises ScheduleError if tv is a fusion input, consumer is not a tensor of tv's fusion
    that uses tv, pos is not an integer or is past the consumer's depth, or the shared loops
    would include a vectorize or mma axis. Afterwards, split, merge and reorder refuse to
    change the shared loops, on either side.

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(x: f32[M, N]) { t = exp(x)  y = t * 2  output y }")
    >>> t, y = f.tensor("t"), f.tensor("y")
    >>> y.split(1, 128)
    >>> y.parallelize(0, "BIDx")
    >>> print(t.describe())
    t: f32[M, N] local loop=[i{M} i{N}]
    >>> t.compute_at(y, 2)
    >>> print(t.describe())
    t: f32[M, N] local loop=[iBIDx{M} i{ceildiv(N, 128)} i{128}] compute_at=2
    >>> t.compute_at(y, 4)  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: compute_at: position 4 is past the depth of consumer y, which
        has 3 loop axes (tensor t)
    """
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
    for r, a in axis_map.items():
        # a broadcast where the consumer has a real axis runs over that axis's extent in
        # the shared loops: lowering divides a merged loop index by it
        if a.is_broadcast:
            a.concrete_extent = r.concrete_extent if r.is_broadcast else r.extent
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


def max_inline_position(tv: TensorView) -> int:
    """The deepest position `tv` can be computed at in its consumers' loops.

    It stops before a vectorized or mma axis; where tv has several consumers, after the
    loops they all share; and for a reduction, before a consumer axis that does not map
    to one of its iteration axes (a broadcast the consumer resolves), which would recompute
    the whole reduction in every iteration of that loop. A tensor that a slice, pad or cat
    reads at other indices than its own (Expr.index_maps) is inlined fully or not at all. A
    tensor with no consumer gives 0.
    It only asks: inline_most places the tensor there.

    >>> import fuserir
    >>> from fuserir.transforms import max_inline_position
    >>> f = fuserir.parse("fusion f(x: f32[M, N]) { t = exp(x)  y = t * 2  output y }")
    >>> t, y = f.tensor("t"), f.tensor("y")
    >>> y.split(1, 4)
    >>> print(y.describe())
    y: f32[M, N] global loop=[i{M} i{ceildiv(N, 4)} i{4}]
    >>> max_inline_position(t)
    3
    >>> y.vectorize(2)
    >>> print(y.describe())
    y: f32[M, N] global loop=[i{M} i{ceildiv(N, 4)} ivectorize{4}]
    >>> max_inline_position(t)
    2
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
    if any(c.definition.index_maps(tv) for c in consumers) and (
            limit < first.ndim or len(consumers) > 1):
        limit = 0     # shared loops would run over the reader's indices, not tv's
    return limit


def inline_most(target: TensorView | Fusion) -> None:
    """Inline a tensor, or every tensor of a fusion that no compute_at placed, as deep into
    its consumers' loops as is legal (consumers first, so producers replay final loops).

    TensorView.inline_most; lowering's inline_defaults pass calls it on the whole fusion.
    Inlining replaces the loops it shares with the consumer's: schedule the consumer and
    compute producers at it, as in nvFuser. The position is max_inline_position's, in the
    tensor's first direct consumer; a tensor that can share no loop is placed at 0.

      target  a TensorView, or a Fusion (every non-input tensor with a consumer that no
              compute_at placed)

    Raises ScheduleError if the tensor is a fusion input or has no consumer.

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(x: f32[M, N]) { t = exp(x)  y = t * 2  output y }")
    >>> t, y = f.tensor("t"), f.tensor("y")
    >>> y.split(1, 4)
    >>> y.vectorize(2)
    >>> print(t.describe())
    t: f32[M, N] local loop=[i{M} i{N}]
    >>> t.inline_most()
    >>> print(t.describe())
    t: f32[M, N] local loop=[i{M} i{ceildiv(N, 4)} i{4}] compute_at=2
    >>> y.inline_most()
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: inline_most: y has no consumer to be inlined into
    """
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
