"""Graph rewrites: rfactor, cache_after and cache_before add a tensor to the fusion.

None of them changes what the fusion computes. rfactor splits a reduction in two (a
producer reducing some axes, the tensor reducing the rest); the caches insert a copy in
another memory, after a tensor (its consumers read the copy) or before it (its definition
computes the copy). The tensors whose loops they rebuild replay the old loop transforms
from new root axes (_rebuild_loop), so a schedule made before the rewrite is kept.
"""

from __future__ import annotations

from typing import Sequence

from ..errors import ScheduleError
from ..ir.exprs import LoadStoreOp, MatmulOp, ReductionOp
from ..ir.iterdomain import IterDomain, IterKind, history, replay, roots_of
from ..ir.tensor import MemoryType, TensorView
from ..ops import accumulate_dtype
from .common import _axis, _max_producer_pos, _memory, _not_input


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


def rfactor(tv: TensorView, axes: Sequence[int]) -> TensorView:
    """Split the reduction of `tv` in two; return the new producer (TensorView.rfactor).

    The producer replays tv's whole schedule and reduces only the listed loop axes; tv's
    other reduction pieces become iteration axes of the producer, which tv then reduces.
    The producer takes the accumulation type (f32 for an f16/bf16 sum), so partial sums are
    not rounded, and is named `<tv>_rf` (`_1`, `_2`, ... if taken).

      axes    a loop axis number of tv, or a list of them: reduction axes, not all of them

    Raises ScheduleError if tv is a fusion input, is not defined by a reduction or matmul, is
    already an rfactor producer, shares loops through compute_at (as producer or consumer),
    or if an axis is out of range, not a reduction axis, or the list holds every reduction
    axis (split the reduction first).

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(h: f16[M, N]) { r = sum(h, axes=[1])  output r }")
    >>> r = f.tensor("r")
    >>> r.split(1, 32)
    >>> print(r.describe())
    r: f16[M] global loop=[i{M} r{ceildiv(N, 32)} r{32}]
    >>> rf = r.rfactor([1])
    >>> print(rf.describe())
    r_rf: f32[M, 32] local loop=[i{M} r{ceildiv(N, 32)} i{32}]
    >>> print(r.describe())
    r: f16[M] global loop=[i{M} r{32}]
    >>> r.rfactor([1])  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: rfactor: every reduction axis of r is listed; leave at least
        one for it to reduce
    """
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
    loop_only = [str(a) for a in tv.loop if a not in producer_map]
    if loop_only:
        # (a loop-only broadcast axis a compute_at gave it, or the tensor it caches)
        raise ScheduleError(f"rfactor: {tv.name} has loop axes not made of its root "
                            f"({', '.join(loop_only)}: broadcast axes a compute_at added); "
                            "rfactor it before that compute_at")
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


def cache_after(tv: TensorView, memory_type: MemoryType | str, async_copy: bool = False,
                ldmatrix: bool = False, tma: bool = False,
                consumers: Sequence[TensorView] | None = None) -> TensorView:
    """Insert a copy of `tv` in `memory_type` that its consumers then read; return it.

    TensorView.cache_after. The usual way to stage an input: the copy (named `<tv>_cache`)
    has tv's shape as its loop domain, ready to be scheduled; tv itself is unchanged.

      memory_type  a MemoryType or its name: "global", "shared" or "local"
      async_copy   copy global -> shared with cp.async
      ldmatrix     load tensor-core operand fragments from shared memory into registers
                   (local) with ldmatrix; every consumer must be a matmul (mark the cache's
                   two innermost axes mma)
      tma          copy global -> shared with TMA (Hopper's tensor copies): the cache's
                   two innermost axes past its compute-at position are the box one
                   instruction moves (the inner one along the global tensor's contiguous
                   axis), any outer ones loops of boxes; it is circular-buffered with a
                   producer warp group (circular_buffer(stages, warp_specialize=TIDy))
      consumers    the tensors computed from tv that read the copy instead (default:
                   every one); the others keep reading tv itself, so that a cache placed
                   in one consumer's loops serves that consumer only (nvFuser's cached
                   uses)

    Raises ScheduleError if the memory type is unknown, tv has no consumers, a tensor of
    `consumers` is not computed from tv, or async_copy, ldmatrix or tma is asked for
    between the wrong memories (or ldmatrix for a non-matmul use), or more than one of
    them.

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(x: f32[M, N]) { t = exp(x)  y = t * 2  output y }")
    >>> x = f.tensor("x")
    >>> print(x.describe())
    x: f32[M, N] global loop=[i{M} i{N}]
    >>> xs = x.cache_after("shared", async_copy=True)
    >>> print(xs.describe())
    x_cache: f32[M, N] shared loop=[i{M} i{N}]
    >>> f.producers(f.tensor("t"))
    [<TensorView x_cache: f32[M, N] shared>]
    >>> g = fuserir.parse("fusion g(x: f32[N]) { y = exp(x) + relu(x)  output y }")
    >>> g.tensor("x").cache_after("local", consumers=[g.tensor("t1")]).name
    'x_cache'
    >>> [e.output.name for e in g.uses(g.tensor("x"))]   # relu(x) still reads x
    ['t2', 'x_cache']
    >>> t1, t2 = g.tensor("t1"), g.tensor("t2")
    >>> t1.cache_after("local", consumers=[t2])  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: cache_after: t2 is not computed from t1 (the tensors that
        read it: y)
    >>> f.tensor("t").cache_after("local", async_copy=True)  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: cache_after: async_copy copies into shared memory, not local
        (tensor t)
    """
    mt = _memory("cache_after", memory_type)
    fusion = tv.fusion
    uses = fusion.uses(tv)
    if not uses:
        raise ScheduleError(f"cache_after: {tv.name} has no consumers to read the cache")
    if consumers is not None:
        readers = {e.output: e for e in uses}
        for c in consumers:
            if c not in readers:
                names = ", ".join(t.name for t in readers)
                raise ScheduleError(f"cache_after: {getattr(c, 'name', c)} is not computed "
                                    f"from {tv.name} (the tensors that read it: {names})")
        uses = [readers[c] for c in dict.fromkeys(consumers)]
        if not uses:
            raise ScheduleError(f"cache_after: consumers is empty; name the tensors that "
                                f"read the cache of {tv.name}")
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
    asked = [name for name, flag in (("async_copy", async_copy), ("ldmatrix", ldmatrix),
                                     ("tma", tma)) if flag]
    if len(asked) > 1:
        raise ScheduleError(f"cache_after: {' and '.join(asked)} are different copies; ask "
                            f"for one (tensor {tv.name})")
    if tma and (mt is not MemoryType.shared or tv.memory_type is not MemoryType.global_):
        raise ScheduleError(f"cache_after: tma copies global memory into shared memory, not "
                            f"{tv.memory_type} into {mt} (tensor {tv.name})")
    if async_copy and mt is not MemoryType.shared:
        raise ScheduleError(f"cache_after: async_copy copies into shared memory, not {mt} "
                            f"(tensor {tv.name})")
    if async_copy and tv.memory_type is not MemoryType.global_:
        raise ScheduleError(f"cache_after: async_copy copies from global memory, but "
                            f"{tv.name} is in {tv.memory_type} memory")
    root = [IterDomain(a.extent, a.kind) for a in tv.shape_axes]
    cache = TensorView(fusion, fusion.fresh_name(f"{tv.name}_cache"), tv.dtype, root, mt)
    fusion.add_tensor(cache)
    fusion.add_expr(LoadStoreOp(tv, cache, async_copy, ldmatrix, tma))
    for use in uses:
        fusion.replace_input(use, tv, cache)
    return cache


def cache_before(tv: TensorView, memory_type: MemoryType | str, tma: bool = False) -> TensorView:
    """Compute `tv` into a new tensor in `memory_type`, then copy it to `tv`; return the cache.

    TensorView.cache_before. The cache (named `<tv>_cache`) takes tv's definition and its
    loop domain, schedule included; tv becomes a copy of it, with the same loop transforms
    replayed on fresh axes.

      memory_type  a MemoryType or its name: "global", "shared" or "local"
      tma          copy the shared cache into tv, a global tensor, with TMA stores
                   (Hopper's tensor copies, shared -> global): tv's loop axes past the
                   cache's compute-at position are the boxes the copy stores, its two
                   innermost one box per instruction (the inner one along tv's contiguous
                   axis), the outer ones the boxes of the tile; the cache is laid out
                   as those boxes, box after box, one thread issues them all, and the
                   hardware leaves out the elements past tv's edges

    Raises ScheduleError if the memory type is unknown, tv is a fusion input (it has no
    definition: use cache_after), or tv shares loops through compute_at (as producer or
    consumer): cache it before compute_at; or if tma is asked for other than from shared
    memory into a global tensor.

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(x: f32[M, N]) { t = exp(x)  y = t * 2  output y }")
    >>> y = f.tensor("y")
    >>> y.split(1, 128)
    >>> print(y.describe())
    y: f32[M, N] global loop=[i{M} i{ceildiv(N, 128)} i{128}]
    >>> yc = y.cache_before("local")
    >>> print(yc.describe())
    y_cache: f32[M, N] local loop=[i{M} i{ceildiv(N, 128)} i{128}]
    >>> print(y.describe())
    y: f32[M, N] global loop=[i{M} i{ceildiv(N, 128)} i{128}]
    >>> f.producers(y)
    [<TensorView y_cache: f32[M, N] local>]
    >>> f.tensor("x").cache_before("local")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: cache_before: x is a fusion input with no definition to
        cache; use cache_after
    >>> y.cache_before("local", tma=True)  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: cache_before: tma stores a shared cache into global
        memory, not local into global (tensor y)
    """
    mt = _memory("cache_before", memory_type)
    if tma and (mt is not MemoryType.shared or tv.memory_type is not MemoryType.global_):
        raise ScheduleError(f"cache_before: tma stores a shared cache into global memory, "
                            f"not {mt} into {tv.memory_type} (tensor {tv.name})")
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
    fusion.add_expr(LoadStoreOp(cache, tv, tma=tma))
    return cache
