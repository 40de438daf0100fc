"""The transpose scheduler: a pointwise fusion whose inputs and output disagree on their
innermost axis goes through shared memory, coalesced on both sides (nvFuser's transpose
scheduler, in miniature).

A fusion like `z = transpose(x, 0, 1) + y` (x: [N, M], z and y: [M, N]) scheduled by the
pointwise scheduler puts z's innermost axis on the threads, so a warp reads x 32 rows
apart. Here the output is tiled on both innermost axes instead: its own (I) and the one
a transposed input is contiguous along (A), TILE x TILE elements a block:

  z:        [.., A, .., I] -> [tiles(BIDx), TILE/ROWS(unroll), ROWS(TIDy), TILE of I(TIDx)]
  x_cache:  shared, computed at the tile loop: [tiles, TILE/ROWS, ROWS(TIDy), TILE of A(TIDx)]

Each input whose innermost axis is A is read into a shared tile by threads that run along
A (a warp reads 32 consecutive elements of a row of x), a barrier follows (sync insertion
puts it there), and the output's loop reads the tile across (a warp reads down one
column of it) while it reads the other inputs and writes z along I. The tile's rows are
padded by one 4-byte bank (pad_rows: 1 element of 4 or 8 bytes, 2 of 2, 4 of 1), so that
a column's elements lie in different banks: row r of the column starts r (odd) words
further on, and an odd stride visits all 32 banks. Every
other input, and every intermediate, is computed in z's loops as the pointwise scheduler
would. Sizes need not be multiples of the tile (lowering predicates the edges) and stay
run-time values: one kernel serves every size.

Where every tensor the tile's loops touch is narrower than 4 bytes (bf16, f16, 1-byte
types), each access moves a 4-byte vector instead (PAIR_BYTES): the innermost TILE of
each loop is split into TILE / w threads (TIDx) x w elements (vectorize), the tile copy
moves pairs along A, the other inputs are loaded into registers as pairs before the
tile's barrier, and the output is computed in registers and stored as pairs: half the
instructions per byte (measured in docs/perf.md). The rows of 17 words keep the reads
down a column conflict free; the tile's stores, two rows of 16 pairs a warp, meet on one
bank (2 ways). Inputs other than the staged ones are loaded before the barrier whatever
the width, so their loads overlap the tile's.

Only the public transforms are called. `transpose_plan` says whether this applies, and
why not where a transpose is left to the pointwise (or another) scheduler.
"""

from ..errors import ScheduleError
from ..ir.exprs import (BinaryOp, BroadcastOp, CastOp, ExpandOp, LoadStoreOp, PermuteOp,
                        UnaryOp, WhereOp)
from ..ir.tensor import MemoryType

TILE = 32            # elements of each innermost axis a block handles
ROWS = 8             # TIDy: a block is TILE x ROWS threads, TILE / ROWS elements each
BANK_BYTES = 4       # a shared row of TILE is padded by one bank (one element where wider)
PAIR_BYTES = 4       # elements narrower than this move in vectors of this many bytes

# Expressions through which an output element reads its inputs at a permutation of its own
# indices (so each input axis is one output axis, or none: a broadcast).
_AXIS_PRESERVING = (BinaryOp, BroadcastOp, CastOp, ExpandOp, LoadStoreOp, PermuteOp,
                    UnaryOp, WhereOp)


class _Refused(Exception):
    """Why the transpose scheduler does not apply (in words)."""


def transpose_plan(fusion, reasons=None):
    """(output, {input: the output axis its innermost axis is}, the output's axis A) where
    some input of `fusion` (a pointwise fusion) is contiguous along another axis than its
    single output, else None. `reasons` (a list) receives why a transposed input is not
    staged through shared memory, where the fusion has one."""
    try:
        return _plan(fusion)
    except _Refused as why:
        if reasons is not None:
            reasons.append(f"not staged through shared memory: {why}")
        return None


def transposes(fusion):
    """The tensors of `fusion` made by a permute that moves the innermost axis."""
    return [e.output for e in fusion.exprs
            if isinstance(e, PermuteOp) and e.dims and e.dims[-1] != len(e.dims) - 1]


def _plan(fusion):
    if not transposes(fusion):
        return None
    if len(fusion.outputs) != 1:
        raise _Refused(f"{fusion.name} has {len(fusion.outputs)} outputs (one is tiled)")
    out = fusion.outputs[0]
    if out.rank < 2:
        raise _Refused(f"{out.name} has fewer than two axes")
    positions = _output_axes(fusion, out)
    inner = out.rank - 1
    staged = {}
    for x in fusion.inputs:
        axes = [p for p, a in zip(positions.get(x, []), x.shape_axes) if not a.is_broadcast]
        if not axes or axes[-1] is None or axes[-1] == inner or inner not in axes:
            continue            # not read, read along I already, or not across I at all
        staged[x] = axes[-1]
    if not staged:
        return None
    across = set(staged.values())
    if len(across) > 1:
        raise _Refused(f"the inputs {', '.join(x.name for x in staged)} are contiguous "
                       f"along different axes of {out.name} ({sorted(across)})")
    a = across.pop()
    if out.shape_axes[a].is_broadcast or out.shape_axes[inner].is_broadcast:
        raise _Refused(f"a tiled axis of {out.name} is a broadcast")
    return out, staged, a


def _output_axes(fusion, out):
    """{tensor: for each of its shape axes, the axis of `out` it is read at (None: none)}
    for every tensor `out` reads, walking back from it."""
    found = {out: list(range(out.rank))}
    for e in reversed(fusion.exprs):
        if e.output not in found:
            continue
        if not isinstance(e, _AXIS_PRESERVING) or any(e.index_maps(p)
                                                       for p in e.tensor_inputs):
            raise _Refused(f"{e.output.name} is a {e.op}; the transpose scheduler follows "
                           "only pointwise ops, casts, broadcasts and permutes")
        if len(e.output.root) != len(e.output.shape_axes):
            raise _Refused(f"{e.output.name} is reshaped")
        at = dict(zip(e.output.root, found[e.output]))
        for p in e.tensor_inputs:
            axes = p.shape_axes
            mine = [None] * len(axes)
            for out_axis, axis in e.root_map(p).items():
                mine[axes.index(axis)] = at.get(out_axis)
            if found.get(p, mine) != mine:
                raise _Refused(f"{p.name} is read in two axis orders")
            found[p] = mine
    return found


def schedule_transpose(fusion, plan):
    """Tile `plan`'s output on its axes A and I and stage the inputs contiguous along A in
    padded shared tiles (the module docstring's schedule)."""
    out, staged, a = plan
    rank = out.rank
    if out.ndim != rank:
        raise ScheduleError(f"{out.name} already has a schedule")
    early = _read_along_output(fusion, out, staged)
    width = max(1, PAIR_BYTES // max(t.dtype.itemsize for t in [out, *staged, *early]))
    computed = out.cache_before(MemoryType.local) if width > 1 else None
    # [.., A, .., I] -> [.., A/T, .., I/T, T of A, T of I] -> [tiles, T of A, T of I]
    out.split(rank - 1, TILE)
    out.split(a, TILE)
    out.reorder({a + 1: rank})
    for _ in range(rank - 1):
        out.merge(0)
    _rows_of_threads(out, width)
    out.parallelize(0, "BIDx")
    for x in staged:
        tile = x.cache_after(MemoryType.shared)
        tile.compute_at(out, 1)
        # the replayed tile loops follow the output's order [tiles, T of A, T of I]: the
        # copy runs along A instead, the axis x is contiguous along
        tile.reorder({1: 2})
        _rows_of_threads(tile, width)
        tile.pad_rows(TILE, max(1, BANK_BYTES // tile.dtype.itemsize))
    for y in early:
        registers = y.cache_after(MemoryType.local)
        registers.compute_at(out, 1)
        _rows_of_threads(registers, width)
    if computed is not None:
        computed.compute_at(out, 4)
        computed.parallelize(-1, "unroll")


def _rows_of_threads(tv, width):
    """[tiles, T, T] -> [tiles, T/ROWS (unroll), ROWS (TIDy), T/width (TIDx)(, width
    (vectorize))]."""
    tv.split(1, ROWS)
    if width > 1:
        tv.split(3, width)
        tv.vectorize(4)
    for i, ptype in enumerate(("unroll", "TIDy", "TIDx"), start=1):
        tv.parallelize(i, ptype)


def _read_along_output(fusion, out, staged):
    """The inputs other than `staged` that out's loop reads at its own element."""
    positions = _output_axes(fusion, out)
    return [x for x in fusion.inputs if x not in staged and x.rank == out.rank
            and positions.get(x) == list(range(out.rank))
            and not any(a.is_broadcast for a in x.shape_axes)]
