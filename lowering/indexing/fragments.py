"""Per-lane indices of tensor-core tiles, from the instruction descriptors' fragment maps.

Everything above the instruction tile is a transform the schedule recorded; below it,
which lane holds which element is fixed by the PTX ISA, and fuserir.instructions holds it
(MMA_M16N8K16's fragment maps, LDMATRIX's lane maps). This module turns those maps into
kernel-IR index expressions (the maps use // % * +, which _Index spells as ctx.binop).
The indexing pass asks it for per-lane indices of a tensor's mma axes, then indexes the
tensor as usual (so swizzles, circular-buffer stages and the producer's own layout all
apply unchanged):

* fragment layout (an accumulator, or a tensor computed from one such as the epilogue's
  cast): lane l = 4g + t holds element j (0..3) at row g + 8 (j / 2), column 2t + j % 2 of
  the 16x8 tile;
* ldmatrix: lane l supplies the address of row l % 8 of 8x8 matrix l / 8; the matrices
  are ordered so that the registers come out as the mma operand fragments (A: 16x16 as
  four matrices (m0-7, k0-7), (m8-15, k0-7), (m0-7, k8-15), (m8-15, k8-15); B: 16x8 (k x n)
  as two, (k0-7), (k8-15), or two such n8 tiles in one .x4, the second tile's registers
  after the first's). `.trans` is used when the shared tile is contiguous along
  M (A) or N (B) rather than K.
"""

from fuserir.errors import ScheduleError
from fuserir.instructions import LDMATRIX, MMA_M16N8K16, STMATRIX, WGMMA
from fuserir.ir.iterdomain import Merge, Split

from .. import kir
from ..support.analysis import is_a_operand, is_warp_group_tile, mma_positions


class _Index:
    """A kernel-IR index expression with the operators a descriptor's map uses, so that
    the map written for integers builds the expression (constants fold as ctx.binop
    folds them)."""

    def __init__(self, ctx, expr):
        self.ctx, self.expr = ctx, expr

    def _of(self, other):
        return other.expr if isinstance(other, _Index) else self.ctx.const(other)

    def _op(self, op, a, b):
        return _Index(self.ctx, self.ctx.binop(op, a, b))

    def __floordiv__(self, other):
        return self._op("div", self.expr, self._of(other))

    def __mod__(self, other):
        return self._op("mod", self.expr, self._of(other))

    def __mul__(self, other):
        return self._op("mul", self.expr, self._of(other))

    def __rmul__(self, other):
        return self._op("mul", self._of(other), self.expr)

    def __add__(self, other):
        return self._op("add", self.expr, self._of(other))

    def __radd__(self, other):
        return self._op("add", self._of(other), self.expr)


def lane(ctx):
    return kir.Special(kir.SpecialKind.threadIdx, "x", ctx.index_dtype)


def accumulator_fragment(tv):
    """The accumulator fragment map of tv's instruction tile: mma.sync's 16x8, or
    wgmma's 64 x n (its thread: threadIdx.x, the thread of the warp group)."""
    if is_warp_group_tile(tv):
        cols = [tv.loop[i] for i in mma_positions(tv) if not tv.loop[i].is_reduction][1]
        return WGMMA.d(cols.extent)
    return MMA_M16N8K16.c


def fragment_axes(ctx, tv, j, thread=None):
    """{mma axis of tv: per-lane index} for element j of a fragment-layout tensor, held by
    this thread or by `thread` (an expression of it naming another lane of its warp)."""
    rows, cols = [tv.loop[i] for i in mma_positions(tv) if not tv.loop[i].is_reduction]
    holder = _Index(ctx, lane(ctx) if thread is None else thread)
    row, col = accumulator_fragment(tv).at(holder, _Index(ctx, j))
    return {rows: row.expr, cols: col.expr}


STMATRIX_NUM = 4      # stmatrix.x4: four 8x8 matrices, 8 elements of the fragment a lane


def stmatrix_row_source(ctx, q):
    """(j, thread): the element of the wgmma accumulator fragment at the start of the row
    whose address lane l gives stmatrix.x4 storing the fragment's elements 8q .. 8q + 7.
    In WGMMA.d's map, lane l of warp w holds element j at row 16w + l / 4 + 8 ((j % 4) / 2),
    column 8 (j / 4) + 2 (l % 4) + j % 2; so its elements 8q + 2i, 8q + 2i + 1 (register i
    of the stmatrix) are row l / 4, columns 2 (l % 4), + 1 of the 8x8 matrix at rows
    16w + 8 (i % 2), columns 16q + 8 (i / 2), as stmatrix's register i of lane l is of
    matrix i. Lane l names row l % 8 of matrix l / 8 (STMATRIX's address map): the
    element 8q + 2 (l / 8) of lane 4 (l % 8) of its warp."""
    q = _Index(ctx, q)
    tid = _Index(ctx, lane(ctx))
    warp_lane = tid % 32
    matrix, row = STMATRIX.address_matrix(warp_lane), STMATRIX.address_row(warp_lane)
    thread = (tid // 32) * 32 + 4 * row       # register(4 row) = (row, column 0)
    j = q * (2 * STMATRIX_NUM) + 2 * matrix
    return j.expr, thread.expr


def _innermost_run(smem):
    """The axis whose consecutive elements are the last ones of a shared tile's buffer: its
    innermost loop axis, with the splits undone whose two pieces are its last loop axes in
    order (the buffer is row-major over its loop axes, so those pieces are as contiguous
    as the axis they split: narrow_vectors splits an 8-element vector axis into [4, 2])."""
    loop = smem.loop
    axis, pos = loop[-1], len(loop) - 1
    while isinstance(axis.definition, Split) and axis is axis.definition.inner \
            and pos > 0 and loop[pos - 1] is axis.definition.outer:
        axis, pos = axis.definition.input, pos - 1
    return axis


def _contiguous_root(smem):
    """The root axis of a shared tile whose consecutive elements are consecutive in its
    buffer (its innermost run of loop axes, followed inwards through splits and merges)."""
    axis = _innermost_run(smem)
    while axis.definition is not None:
        d = axis.definition
        if isinstance(d, Split):
            if axis is not d.inner:
                return None
            axis = d.input
        elif isinstance(d, Merge):
            axis = d.inner
        else:
            return None
    return axis


def ldmatrix_plan(ctx, tv):
    """(num, trans, {mma axis: per-lane index}) for the ldmatrix that fills tv, an operand
    fragment cache (cache_after(local, ldmatrix=True)) of the matmul that reads it."""
    smem = tv.definition.inputs[0]
    matmul = ctx.fusion.consumers(tv)[0]
    is_a = is_a_operand(tv)
    k_root = next(p for c, p in matmul.definition.root_map(tv).items() if c.is_reduction)
    k_pos = tv.root.index(k_root)
    contiguous, run = _contiguous_root(smem), _innermost_run(smem)
    if contiguous is None or not isinstance(run.extent, int) or run.extent % 8:
        raise ScheduleError(f"{tv.name}: ldmatrix reads rows of 8 contiguous elements of "
                            f"{smem.name}, but its innermost axis {run} is not 8 "
                            "contiguous elements (split the contiguous axis by 8)")
    trans = smem.root.index(contiguous) != k_pos
    x_axis, k_axis = [tv.loop[i] for i in mma_positions(tv)]
    l = _Index(ctx, lane(ctx))
    q, r = LDMATRIX.address_matrix(l).expr, LDMATRIX.address_row(l).expr
    q2, qhi = ctx.binop("mod", q, ctx.const(2)), ctx.binop("div", q, ctx.const(2))
    eight = ctx.const(LDMATRIX.matrix)
    if is_a:
        # matrices (m0-7, k0-7), (m8-15, k0-7), (m0-7, k8-15), (m8-15, k8-15)
        m_base, k_base = ctx.binop("mul", eight, q2), ctx.binop("mul", eight, qhi)
        num = 4
    elif x_axis.extent == 16:
        # two n8 tiles: (k0-7, n0-7), (k8-15, n0-7), (k0-7, n8-15), (k8-15, n8-15)
        m_base, k_base = ctx.binop("mul", eight, qhi), ctx.binop("mul", eight, q2)
        num = 4
    else:
        # matrices (k0-7, n0-7), (k8-15, n0-7); lanes 16-31 supply no address
        m_base, k_base = ctx.const(0), ctx.binop("mul", eight, q2)
        num = 2
    if trans:      # stored rows run along K: lane r names row k_base + r
        index = {x_axis: m_base, k_axis: ctx.binop("add", k_base, r)}
    else:          # stored rows run along M (N): lane r names row m_base + r
        index = {x_axis: ctx.binop("add", m_base, r), k_axis: k_base}
    return num, trans, index


def operand_offset(ctx, producer, x_index):
    """Offset, within an operand fragment, of the instruction tile an mma reads: a B cache
    holding two n8 tiles keeps the second tile's 4 elements after the first's. `x_index`
    is the index, within the cache's tile, of the mma's first row (A) or column (B)."""
    x_axis = producer.loop[mma_positions(producer)[0]]
    rows = 16 if x_axis.extent == 16 and is_a_operand(producer) else 8
    per_tile = 8 if rows == 16 else 4
    return ctx.binop("mul", ctx.binop("div", x_index, ctx.const(rows)), ctx.const(per_tile))

