"""Pass `indexing`: every placed expression becomes stores of indexed loads.

The written tensor's element is named by its loop indices: a global tensor is indexed by
its root indices (loop indices replayed backwards through its splits and merges) times
its strides; a shared or local buffer by its kept loop indices times the allocation
layout (lowering.indexing.buffers; the staged tile of a TMA store by the store's loop
indices, its root indices replayed forwards through the store's transforms). A producer
is read at the element the consumer's root indices name (through the expression's root
map and index maps: a slice's start + step * i, a pad's or cat's shift clamped into the
producer; broadcast axes read index 0): globally through its strides, and in a buffer by
replaying the transforms of the tensor that lays it out (its own) forwards to its loop
indices. A pad or cat selects the pad value or the input whose range holds the index; a
vectorized one branches once per vector instead and loads the vector of the fusion input
under the region holding it (lowering.indexing.vectors). All index math is C integer
arithmetic in the kernel's index type.

Values are typed explicitly: f16/bf16 operands are converted to f32 before arithmetic and
the result is rounded to the output type, as the reference evaluator does. A reduction's
parts become: accumulator = identity; accumulator = op(accumulator, operand); and the
final store of the accumulator, converted to the output type.

Shared-memory accesses are tagged with AccessInfo (which thread owns each element) for
sync insertion. A cache_after(shared, async_copy=True) becomes cp.async copies (one per
element, or per vector when its innermost axis is vectorized: 4, 8 or 16 bytes), then a
commit and a wait_group 0 after its own loops; sync insertion adds the barriers. Block
and grid reductions are left to their own passes. Where no cp.async fits (an element of 1 or 2
bytes, not vectorized), an async cache is an ordinary load and shared store (which the
predicates pass makes store 0 out of bounds, as cp.async's zero fill does). A TMA copy is
lowering.indexing.tma_copies': a cache_after(shared, tma=True) one TmaLoad per box, a
cache_before(shared, tma=True) the TmaStores of every box of its staged tile and their
commit, by thread 0 of the block and unguarded (TMA writes only the elements inside the
tensor); sync insertion orders them.

A copy between global and shared memory whose innermost axis is vectorized (4, 8 or 16
bytes, such as the matmul epilogue's 16-byte rows from the shared tile to the output)
becomes one vector load and store of the whole vector (`width` 2-16 elements), once
lowering has proved both sides contiguous and aligned (lowering.indexing.vectors):
lowered once with a symbolic lane v, both indices must come out as `base + v` with
`base` a multiple of the width (lane-aware folds in lowering.indexing.arith:
`(g*q + s) / (g*m) -> (g*q) / (g*m)` for 0 <= s < g), else a ScheduleError.

Tensor cores: an ldmatrix operand cache becomes `ldmatrix.x4/.x2[.trans]` with per-lane row
addresses, the matmul's accumulate an `mma.sync`, a tensor in the accumulator layout (the
epilogue's cast, the accumulator's init and final copy) a loop over the 4 elements each
lane holds (a global output in that layout, stored from the registers, a loop over pairs:
elements 2j and 2j + 1 sit in neighbouring columns, one 2-element access where lowering
proves them contiguous, as for a vector copy, and vector_caps allow it; not after a
parallel grid reduction, whose CTAs store the elements they summed one by one; a 16-bit
shared tile in the wgmma layout, the staged output's, `stmatrix.x4`: fragment_stmatrix);
the per-lane maps are lowering.indexing.fragments', everything above them came from
transforms. A swizzled shared tensor's index goes through its XOR map, a padded one's
skips its rows' padding. Index arithmetic is
simplified with value ranges (lowering.indexing.arith). Which loops become unrolled is the next
pass's choice (unroll_register_loops).
"""

import numpy as np

from fuserir import numerics
from fuserir.ir.exprs import MatmulOp, ReductionOp
from fuserir.ir.iterdomain import roots_of

from fuserir.errors import ScheduleError
from fuserir.instructions import CP_ASYNC, STMATRIX

from .. import kir
from ..indexing import fragments, hopper_operands
from ..indexing.buffers import accumulator_index, element_index, global_index, tile_index
from ..indexing.tma_copies import tma_load, tma_store
from ..indexing.values import convert, load, pointwise_value, store
from ..indexing.vectors import base_of, vector_bases, vector_copy, vector_select
from ..kir import visit as kir_visit
from ..support.analysis import (StoreInfo, async_vector_bytes, is_async_copy, is_tma_copy,
                                is_tma_store, is_warp_group_tile, mma_kind, mma_positions,
                                vector_select_width, vector_copy_width)
from ..contract import Pass


def identity(op, dtype):
    """What a reduction `op` (or the binary op combining it) starts from (no elements)."""
    return kir.Const(numerics.identity(op, dtype), dtype)


def combine(op):
    """The binary op that combines two partials of reduction `op`."""
    return numerics.REDUCTIONS[op]


def reduction_operand(ctx, expr, index, dtype):
    if isinstance(expr, MatmulOp):
        a, b = expr.inputs
        return kir.BinOp("mul", convert(load(ctx, expr, a, index), dtype),
                         convert(load(ctx, expr, b, index), dtype), dtype)
    return convert(load(ctx, expr, expr.inputs[0], index), dtype)


def async_copy(ctx, tv, index):
    """cp.async of tv's element (or vector) from the global tensor it caches."""
    source = load(ctx, tv.definition, tv.definition.inputs[0], index)
    buffer = ctx.buffers[tv]
    target = element_index(ctx, tv)
    nbytes = async_vector_bytes(tv)
    if nbytes not in (4, 8, 16):
        # No cp.async moves this size (it moves 4, 8 or 16 bytes): an ordinary load and shared
        # store, one element at a time, under the same loops.
        if nbytes > tv.dtype.itemsize:
            raise ScheduleError(f"{tv.name}: an async copy moves 4, 8 or 16 bytes, but one "
                                f"vector of {tv.name} is {nbytes}; vectorize 4, 8 or 16 "
                                "bytes, or none (ordinary loads)")
        return store(ctx, tv, source, index, "compute")
    access = kir.AccessInfo(tv.name, ctx.owner(tv, is_write=True))
    copy = kir.CpAsync(buffer, target, source.buffer, source.index, nbytes,
                       kir.Const(nbytes, ctx.index_dtype), CP_ASYNC.cache_for(nbytes),
                       access)
    ctx.store_info[copy] = StoreInfo(tv, "async", index, kir.Memory.shared)
    return copy


def ldmatrix(ctx, tv):
    """ldmatrix of one operand fragment of tv from the shared tile it caches."""
    num, trans, lane_index = fragments.ldmatrix_plan(ctx, tv)
    smem = tv.definition.inputs[0]
    ctx.lane_index = lane_index
    source = load(ctx, tv.definition, smem, ctx.root_indices(tv))
    ctx.lane_index = {}
    target = element_index(ctx, tv)
    return kir.LdMatrix(ctx.buffers[tv], target, ctx.buffers[smem], source.index, num, trans,
                        kir.AccessInfo(smem.name, ctx.owner(tv, is_write=False)))


def mma(ctx, tv):
    """mma.sync of one instruction tile: acc += a_frag * b_frag (mma axes at index 0)."""
    expr = tv.definition
    index = ctx.root_indices(tv)

    def operand(frag):
        ld = load(ctx, expr, frag, index)
        logical = {p: index[c] for c, p in expr.root_map(frag).items()}
        x_axis = frag.loop[mma_positions(frag)[0]]
        x_index = ctx.forward_indices(frag, logical)[x_axis]
        return ld.buffer, ctx.binop("add", ld.index,
                                    fragments.operand_offset(ctx, frag, x_index))

    (a, a_index), (b, b_index) = operand(expr.inputs[0]), operand(expr.inputs[1])
    acc = ctx.accumulators[tv]
    acc_index = accumulator_index(ctx, tv)
    return kir.Mma(acc, acc_index, a, a_index, b, b_index, acc, acc_index,
                   expr.inputs[0].dtype)


def per_fragment_element(ctx, tv, lower):
    """A loop over the accumulator elements each lane holds of tv's instruction tile (16x8
    of mma.sync, 64 x n of wgmma), with the mma axes indexed by the fragment map; `lower()`
    builds the body."""
    count = fragments.accumulator_fragment(tv).count
    j = kir.Var(f"j{len(ctx.loop_vars) + len(ctx.fragment_vars)}", ctx.index_dtype)
    ctx.fragment_vars.append(j)
    ctx.ranges.vars[id(j)] = (0, count - 1)
    ctx.lane_index, ctx.frag_offset = fragments.fragment_axes(ctx, tv, j), j
    body = lower()
    ctx.lane_index, ctx.frag_offset = {}, None
    body = body if isinstance(body, list) else [body]
    return kir.ForLoop(j, ctx.const(count), body, "unroll")


PAIR = 2      # a fragment's lane holds its elements 2 j, 2 j + 1 in neighbouring columns


def fragment_pairs(ctx, tv):
    """A global tensor in the accumulator's fragment layout (the epilogue's output stored
    from the registers) stored a pair of elements at a time, or None where it cannot be:
    in both fragment maps (mma.sync's 16x8, wgmma's 64 x n) a lane holds elements 2 j and
    2 j + 1 in neighbouring columns, so where the columns run along the array's
    contiguous axis they are one access of 2 elements (4 bytes of a 16-bit output), half
    the store instructions and the partly written sectors of element stores. Proved as
    vector_copy proves a vector: the pair's index, with its element a symbolic lane
    v in [0, 2), must come out as base + v with base even; the array's rows are checked
    at run time (an odd extent or an unaligned array takes the variant whose vector_caps
    store it element by element). Not after a parallel or cluster grid reduction, which
    restricts each CTA's stores to the register elements it summed."""
    cap = (ctx.vector_caps or {}).get(tv.name)
    buffer = ctx.buffers[tv]
    summed_where_stored = any(t.grid_reduction in ("parallel", "cluster") for t in ctx.fusion.tensors)
    if buffer.memory is not kir.Memory.global_ or summed_where_stored or \
            (cap is not None and cap < PAIR * tv.dtype.itemsize):
        return None
    count = fragments.accumulator_fragment(tv).count
    p = kir.Var(f"j{len(ctx.loop_vars) + len(ctx.fragment_vars)}", ctx.index_dtype)
    lane = kir.Var(f"v{len(ctx.loop_vars) + len(ctx.fragment_vars)}", ctx.index_dtype)
    ctx.fragment_vars.append(p)
    ctx.ranges.vars[id(p)] = (0, count // PAIR - 1)
    ctx.ranges.vars[id(lane)] = (0, PAIR - 1)

    def element(v):                       # (root indices, value) of element 2 p + v
        j = ctx.binop("add", ctx.binop("mul", p, ctx.const(PAIR)), v)
        ctx.lane_index, ctx.frag_offset = fragments.fragment_axes(ctx, tv, j), j
        try:
            index = ctx.root_indices(tv)
            return index, pointwise_value(ctx, tv.definition, index)
        finally:
            ctx.lane_index, ctx.frag_offset = {}, None

    index, _ = element(lane)
    if None not in vector_bases(ctx, tv, buffer, None, index, lane, PAIR):
        pair = kir.Buffer(f"{tv.name}_pair{len(ctx.fragment_vars)}", tv.dtype,
                          kir.Memory.local, size=ctx.const(PAIR))
        body = []
        for v in range(PAIR):
            index, value = element(ctx.const(v))
            body.append(kir.Store(pair, ctx.const(v), convert(value, tv.dtype)))
        index, _ = element(ctx.const(0))
        vector = kir.Store(buffer, global_index(ctx, tv, index),
                           kir.Load(pair, ctx.const(0), width=PAIR), width=PAIR)
        ctx.store_info[vector] = StoreInfo(tv, "compute", index, buffer.memory)
        return [kir.Allocate(pair),
                kir.ForLoop(p, ctx.const(count // PAIR), body + [vector], "unroll")]
    ctx.fragment_vars.remove(p)
    return None


def fragment_stmatrix(ctx, tv):
    """A shared 16-bit tensor in the wgmma accumulator's layout (the staged output's tile)
    written by stmatrix.x4, 8 elements a lane (16 instructions a thread for a 64x256 tile,
    not 128 stores with their addresses and guards), or None where it cannot be: its value
    must read registers only (no load a bounds guard would skip), each row of 8 an address
    names proved consecutive and 16-byte aligned through the swizzle, as vector_copy
    proves a vector. Rows past the tensor's edge are written too (the CTA's own bytes; the
    copy out is guarded)."""
    per, buffer = 2 * fragments.STMATRIX_NUM, ctx.buffers[tv]
    if buffer.memory is not kir.Memory.shared or tv.dtype.itemsize != STMATRIX.element_bytes \
            or not is_warp_group_tile(tv) or fragments.accumulator_fragment(tv).count % per:
        return None
    count = fragments.accumulator_fragment(tv).count
    q = kir.Var(f"j{len(ctx.loop_vars) + len(ctx.fragment_vars)}", ctx.index_dtype)
    ctx.fragment_vars.append(q)
    ctx.ranges.vars[id(q)] = (0, count // per - 1)

    def at(j, thread=None, along_row=None):
        """(buffer index, root indices) of element j of this thread's or `thread`'s."""
        lanes = fragments.fragment_axes(ctx, tv, j, thread)
        if along_row is not None:
            cols = list(lanes)[1]             # fragment_axes': {rows: ..., cols: ...}
            lanes[cols] = ctx.binop("add", lanes[cols], along_row)
        ctx.lane_index, ctx.frag_offset = lanes, j
        return element_index(ctx, tv), ctx.root_indices(tv)

    try:
        registers = kir.Buffer(f"{tv.name}_rows{len(ctx.fragment_vars)}", tv.dtype,
                               kir.Memory.local, size=ctx.const(per))
        body = []
        for e in range(per):
            j = ctx.binop("add", ctx.binop("mul", q, ctx.const(per)), ctx.const(e))
            value = pointwise_value(ctx, tv.definition, at(j)[1])
            if any(isinstance(x, kir.Load) and x.buffer.memory is not kir.Memory.local
                   for x in kir.walk_expr(value)):
                break
            body.append(kir.Store(registers, ctx.const(e), convert(value, tv.dtype)))
        else:
            j, thread = fragments.stmatrix_row_source(ctx, q)
            lane = kir.Var(f"v{len(ctx.loop_vars) + len(ctx.fragment_vars)}", ctx.index_dtype)
            ctx.ranges.vars[id(lane)] = (0, STMATRIX.matrix - 1)
            if base_of(ctx, at(j, thread, lane)[0], lane, STMATRIX.matrix) is not None:
                body.append(kir.StMatrix(buffer, at(j, thread)[0], registers, ctx.const(0),
                                         fragments.STMATRIX_NUM, False,
                                         kir.AccessInfo(tv.name, ctx.owner(tv, is_write=True))))
                return [kir.Allocate(registers),
                        kir.ForLoop(q, ctx.const(count // per), body, "unroll")]
    finally:
        ctx.lane_index, ctx.frag_offset = {}, None
    ctx.fragment_vars.remove(q)
    return None


def _operand_table(ctx, expr, operand, row_axis, k_axis, rows):
    """(start, offsets): the element index in `operand`'s tile of the instruction
    tile's element (0, 0), and the logical byte offset from it of every element (row, k)
    of the operand (rows x 16, evaluated at once: kir.evaluate_lanes), with every other
    index at 0 (the tile's layout is linear in the instruction tile's indices:
    lowering.indexing.hopper_operands checks it against a descriptor's)."""
    tv = expr.output
    r = kir.Var(f"r{len(ctx.loop_vars)}", ctx.index_dtype)
    k = kir.Var(f"k{len(ctx.loop_vars)}", ctx.index_dtype)
    ctx.ranges.vars[id(r)], ctx.ranges.vars[id(k)] = (0, rows - 1), (0, 15)

    def element(row, col):
        ctx.lane_index = {row_axis: row, k_axis: col}
        try:
            index = ctx.root_indices(tv)
            logical = {p: index[c] for c, p in expr.root_map(operand).items()}
            return tile_index(ctx, operand, logical, swizzle=False)
        finally:
            ctx.lane_index = {}

    start, symbolic = element(ctx.const(0), ctx.const(0)), element(r, k)
    zero = _AtZero({r.name, k.name})
    at = zero.mutate(symbolic)
    size = operand.dtype.itemsize
    lanes = {r.name: np.arange(rows)[:, None], k.name: np.arange(16)[None, :]}
    table = np.broadcast_to(kir.evaluate_lanes(at, lanes), (rows, 16)).astype(np.int64)
    return start, (table - table[0, 0]) * size


class _AtZero(kir_visit.ExprMutator):
    """An index expression with every variable but `keep` (and every thread and block
    index) at 0."""

    def __init__(self, keep):
        self.keep = keep

    def mutate_Var(self, var):
        return var if var.name in self.keep else kir.Const(0, var.dtype)

    def mutate_Special(self, special):
        return kir.Const(0, special.dtype)


def wgmma(ctx, tv):
    """wgmma of one instruction tile: acc (64 x n) += A (64 x 16) x B (16 x n), both from
    their shared tiles through descriptors read off the tiles' layouts."""
    expr = tv.definition
    positions = mma_positions(tv)
    m_axis, n_axis, k_axis = [ctx.concrete_axis(tv, i) for i in positions]
    n = n_axis.extent
    # The instruction's M runs along the output's N where the schedule swapped them
    # (MatmulParams.swap_mn: D^T = B^T A^T): B's tile is then the wgmma's A operand.
    inputs = expr.inputs[::-1] if tv.root[-2] in roots_of(tv.loop[positions[0]]) \
        else expr.inputs
    operands = []
    for operand, row_axis in zip(inputs, (m_axis, n_axis)):
        rows = hopper_operands.operand_rows(operand is inputs[0], n)
        start, table = _operand_table(ctx, expr, operand, row_axis, k_axis, rows)
        where = f"{tv.name}: its operand {operand.name}"
        layout, trans = hopper_operands.matrix_layout(table, hopper_operands.swizzle_mode(operand),
                                                      rows, where)
        operands.append((ctx.buffers[operand], start, layout, trans))
    (a, a_index, a_layout, trans_a), (b, b_index, b_layout, trans_b) = operands
    access = kir.AccessInfo(tv.name, ctx.owner(tv, is_write=False))
    return kir.Wgmma(d=ctx.accumulators[tv], d_index=accumulator_index(ctx, tv), a=a,
                     a_index=a_index, b=b, b_index=b_index, n=n, dtype=expr.inputs[0].dtype,
                     a_layout=a_layout, b_layout=b_layout, trans_a=trans_a, trans_b=trans_b,
                     access=access)


def lower_part(ctx, part):
    tv, role = part.tv, part.role
    kind = mma_kind(tv)
    if kind == "ldmatrix" and role == "compute":
        return ldmatrix(ctx, tv)
    if kind == "mma" and role == "accumulate":
        return mma(ctx, tv)
    if kind == "wgmma" and role == "accumulate":
        return wgmma(ctx, tv)
    if kind == "fragment" and role == "compute" and ctx.frag_offset is None:
        paired = fragment_pairs(ctx, tv)
        if paired is not None:
            return paired
        stored = fragment_stmatrix(ctx, tv)
        if stored is not None:
            return stored
    if kind in ("mma", "wgmma", "fragment") and ctx.frag_offset is None:
        return per_fragment_element(ctx, tv, lambda: lower_part(ctx, part))
    expr = tv.definition
    if role == "async_wait":
        return [kir.CpAsyncCommit(), kir.CpAsyncWait(0)]
    index = ctx.root_indices(tv)
    if role == "compute" and is_async_copy(tv):
        return async_copy(ctx, tv, index)
    if role == "compute" and is_tma_store(tv):
        return tma_store(ctx, tv)
    if role == "compute" and is_tma_copy(tv):
        return tma_load(ctx, tv)
    width = vector_copy_width(tv) if role == "compute" else 0
    if width:
        return vector_copy(ctx, tv, width)
    width = vector_select_width(tv) if role == "compute" else 0
    if width:
        return vector_select(ctx, tv, width)
    if role == "compute":
        return store(ctx, tv, pointwise_value(ctx, expr, index), index, role)
    acc = ctx.accumulators[tv]
    acc_index = accumulator_index(ctx, tv)
    op = combine(expr.op if isinstance(expr, ReductionOp) else "sum")
    if role == "init":
        s = kir.Store(acc, acc_index, identity(op, acc.dtype))
    elif role == "accumulate":
        operand = reduction_operand(ctx, expr, index, acc.dtype)
        s = kir.Store(acc, acc_index, kir.BinOp(op, kir.Load(acc, acc_index), operand,
                                                acc.dtype))
    else:
        return store(ctx, tv, kir.Load(acc, acc_index), index, role)
    ctx.store_info[s] = StoreInfo(tv, role, index, kir.Memory.local)
    return s


class _LowerParts(kir_visit.StmtMutator):
    """Every placed part but block and grid reductions (the next passes') becomes its
    loads and stores."""

    def __init__(self, ctx):
        self.ctx = ctx

    def mutate_ExprStmt(self, part):
        if part.role in ("block_reduce", "grid_reduce"):
            return part
        return lower_part(self.ctx, part)


def run(ctx, kernel):
    ctx.store_info, ctx.tensor_maps, ctx.vector_offsets = {}, {}, []
    kernel.body = _LowerParts(ctx).mutate(kernel.body)
    kernel.tensor_maps = list(ctx.tensor_maps.values())
    kernel.vector_offsets = list(ctx.vector_offsets)
    return kernel


PASS = Pass("indexing", run, __doc__,
            reads=("kernel", "vector_axes", "exact", "bound", "circular", "tensor_params",
                   "buffers", "accumulators", "layouts"),
            provides=("store_info", "tensor_maps", "vector_offsets"),
            why="needs the allocation layouts; leaves block and grid reductions to the next "
                "passes")
