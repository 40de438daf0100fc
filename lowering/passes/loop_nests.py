"""Pass `loop_nests`: the kernel skeleton — parameters, launch configuration, loop nests.

The parameters are the input and output tensors (each with a stride per axis) and every
size symbol and named split factor (one kernel serves every size). Each block and thread
index spans the largest extent bound to it; blockDim.x is rounded up to whole warps for a
block reduction over TIDx.

Every fusion expression is placed in the loops of its output tensor's loop axes; an axis
inside the tensor's compute-at position runs in its consumer's loop (lowering.support.analysis
`concrete`), so producers land inside the loops they share with consumers. Thread and
block axes are not loops. A reduction is placed as four parts: its initialisation before
its first reduction loop, the accumulation inside all its loops, a block reduction where a
reduction axis is bound to TIDx, and the final store after the loops.

Parts that share a loop are grouped under one ForLoop; sibling groups are ordered by their
data dependences (a stable topological sort), and a schedule whose loops cannot be ordered
is refused. The expressions stay as ExprStmt placeholders for the indexing pass.
"""


from fuserir.errors import ScheduleError
from fuserir.ir.exprs import MatmulOp, ReductionOp
from fuserir.ir.graph import CycleError, DiGraph, topological_order
from fuserir.ir import extent as ext
from fuserir.ir.iterdomain import ParallelType, Split, history

from .. import kir
from ..support.analysis import THREAD_TYPES, is_async_copy, reduction_thread
from ..contract import Pass


class Item:
    """One placed part of an expression: its loop path, and what it reads and writes."""

    def __init__(self, order, tv, role, path, reads, writes, own_from=None):
        self.order, self.tv, self.role, self.path = order, tv, role, path
        self.reads, self.writes = set(reads), set(writes)
        # loops from this depth on are this part's own (a reduction's init and final store
        # loop over the accumulator's inner axes in loops of their own)
        self.own_from = len(path) if own_from is None else own_from


def _items(ctx):
    items = []
    for expr in ctx.fusion.exprs:
        tv = expr.output
        if tv not in ctx.live:
            continue          # dead code: no output depends on it
        loops = [ctx.concrete_axis(tv, i) for i in range(tv.ndim)]
        path = [a for a in loops if ctx.is_loop(a)]
        inputs = {id(t) for t in expr.tensor_inputs}

        def add(role, p, reads, writes, own_from=None):
            items.append(Item(len(items), tv, role, p, reads, writes, own_from))

        if isinstance(expr, (ReductionOp, MatmulOp)):
            first = next(i for i, a in enumerate(tv.loop) if a.is_reduction)
            outer = [a for a in loops[:first] if ctx.is_loop(a)]
            # The accumulator keeps the iteration axes inside the reduction loops: its
            # initialisation and final store loop over them too.
            inner = [a for i, a in enumerate(loops) if i > first and ctx.is_loop(a)
                     and not tv.loop[i].is_reduction]
            acc = ("acc", id(tv))
            add("init", outer + inner, (), {acc}, len(outer))
            add("accumulate", path, inputs | {acc}, {acc})
            if any(a.is_reduction and loops[i].parallel in THREAD_TYPES
                   for i, a in enumerate(tv.loop)):
                add("block_reduce", outer, {acc}, {acc})
            if tv.grid_reduction:
                add("grid_reduce", outer, {acc}, {acc})
            add("final", outer + inner, {acc}, {id(tv)}, len(outer))
        else:
            add("compute", path, inputs, {id(tv)})
            if is_async_copy(tv) and not tv.circular_buffer_stages:
                # The copies of one placement form a group: commit it and wait for it
                # after the tensor's own loops (circular buffering will pipeline this).
                shared = [a for a in loops[:tv.compute_at_pos or 0] if ctx.is_loop(a)]
                add("async_wait", shared, {id(tv)}, {id(tv)})
    return items


def _dependences(keys, groups):
    """The edges (i, j) between groups: some part of group j depends on an earlier part of
    group i (reads what it writes, or writes what it reads or writes). Found through who reads and writes each value, not by
    comparing every pair of groups (quadratic in the parts of a long inlined chain)."""
    group_of, readers, writers = {}, {}, {}
    for g, key in enumerate(keys):
        for item in groups[key]:
            group_of[item.order] = g
            for value in item.reads:
                readers.setdefault(value, []).append(item)
            for value in item.writes:
                writers.setdefault(value, []).append(item)
    edges = set()
    for j, key in enumerate(keys):
        for a in groups[key]:
            earlier = [b for value in a.reads | a.writes for b in writers.get(value, ())]
            earlier += [b for value in a.writes for b in readers.get(value, ())]
            edges.update((group_of[b.order], j) for b in earlier
                         if b.order < a.order and group_of[b.order] != j)
    return sorted(edges)


def _nest(ctx, items, depth):
    groups = {}
    for item in items:
        if len(item.path) <= depth:
            key = ("part", item.order)
        elif depth >= item.own_from:
            key = ("own", item.order, item.path[depth])
        else:
            key = item.path[depth]
        groups.setdefault(key, []).append(item)
    keys = list(groups)
    dependences = DiGraph()
    dependences.add_nodes_from(range(len(keys)))
    dependences.add_edges_from(_dependences(keys, groups))
    first = {i: min(it.order for it in groups[k]) for i, k in enumerate(keys)}
    try:
        order = topological_order(dependences, key=lambda i: first[i])
    except CycleError:
        names = sorted({it.tv.name for k in keys for it in groups[k]})
        raise ScheduleError(f"the compute-at positions of {', '.join(names)} interleave "
                            "their loops so that no order computes every producer before "
                            "its consumers") from None
    body = []
    for i in order:
        key, members = keys[i], groups[keys[i]]
        if isinstance(key, tuple) and key[0] == "own":
            key = key[2]
        elif isinstance(key, tuple):
            item = members[0]
            body.append(kir.ExprStmt(tv=item.tv, role=item.role))
            continue
        kind = "unroll" if key.parallel in (ParallelType.unroll,
                                            ParallelType.vectorize) else "serial"
        body.append(kir.ForLoop(ctx.loop_var(key), ctx.extent(key.extent),
                                _nest(ctx, members, depth + 1), kind))
    return body


def _params(ctx):
    """{input or output tensor: its kir.TensorParam}, inputs first."""
    params = {}
    for tv in ctx.fusion.inputs + ctx.fusion.outputs:
        buffer = kir.Buffer(tv.name, tv.dtype, kir.Memory.global_, tensor=tv.name, user=True)
        sizes = [ctx.extent(e) for e in tv.shape]
        strides = [kir.Var(f"{tv.name}_stride{i}", ctx.index_dtype) for i in range(tv.rank)]
        params[tv] = kir.TensorParam(buffer, sizes, strides, is_output=tv.is_output)
    return params


def _symbols(ctx):
    """Every size symbol and named split factor of the fusion, and every size an
    expression reads (a size as a value, `s / N`; a slice's start), in order of
    appearance: the kernel's scalar parameters (so one kernel serves every size)."""
    names = []
    for tv in ctx.fusion.tensors:
        extents = [a.extent for a in tv.root]
        extents += [t.factor for t in history(tv.loop + tv.logical) if isinstance(t, Split)]
        if tv.definition is not None:      # sizes as values, index maps' starts
            extents += tv.definition.extents()
        for e in extents:
            for name in sorted(ext.symbols(e)):
                if name not in names:
                    names.append(name)
    return names


def run(ctx, kernel):
    ctx.tensor_params = _params(ctx)
    body = _nest(ctx, _items(ctx), 0)
    has_block_reduction = any(isinstance(s, kir.ExprStmt) and s.role == "block_reduce"
                              and reduction_thread(ctx, s.tv) is ParallelType.TIDx
                              for s in kir.walk(body))
    block = tuple(ctx.launch_extent(p, 32 if (p is ParallelType.TIDx and has_block_reduction)
                                    else 1) for p in THREAD_TYPES)
    for axis, extent in zip("xyz", block):      # what index arithmetic may assume
        if isinstance(extent, kir.Const):
            ctx.ranges.specials[(kir.SpecialKind.threadIdx, axis)] = (0, extent.value - 1)
    grid = tuple(ctx.launch_extent(p) for p in (ParallelType.BIDx, ParallelType.BIDy,
                                                ParallelType.BIDz))
    scalar_params = [kir.ScalarParam(ctx.extent(ext.Sym(name))) for name in _symbols(ctx)]
    return kir.Kernel(ctx.fusion.name, list(ctx.tensor_params.values()), scalar_params, body,
                      kir.LaunchConfig(grid, block), ctx.index_dtype, user=True)


PASS = Pass("loop_nests", run, __doc__, reads=("live", "vector_axes", "bound"),
            provides=("tensor_params", "kernel"), why="the skeleton everything else fills in")
