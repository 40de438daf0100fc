"""How the reduction scheduler lays out a fusion's rows at some sizes on some device
(`reduction_plan`: a ReductionPlan), and what it reads the fusion for: the axes its
reductions reduce, its tensors of the full and the reduced shape, whether a reduction is
broadcast back into its rows. A plan is part of a schedule's key (schedule_key), so
fuserir.scheduler.auto, which applies it, and the executable, which keys its kernels by
it, read it from here.
"""

from dataclasses import dataclass

from .. import device as devices
from ..errors import ScheduleError
from ..ir import extent as ext
from ..ir.exprs import BroadcastOp, ReductionOp

GRID_MIN_ELEMENTS = 1 << 15  # an inner reduction's row split over CTAs: elements per CTA
GRID_SPLITS_MAX = 8      # ... and at most this many CTAs a row: the cross-CTA proof
                         # enumerates the semaphore operations' interleavings of a
                         # constant split factor, within its bound up to 8 (not 12)
WARP_ROW_MAX = 1024      # inner rows this short get a warp each ...
WARP_ROWS = 8            # ... and a block holds this many of them
OUTER_COLUMNS = 32       # outer reductions: columns per block (TIDx) ...
OUTER_BLOCKS_PER_SM = 4  # column splits: blocks of 512 threads to give each SM ...
COLUMN_SPLIT_MIN_ROWS = 256  # ... each summing at least this many rows

LARGE = 4096     # the size assumed for a symbolic extent whose value is not known


def size_at(extent, sizes):
    """The value of `extent` at `sizes` ({symbol: int}), LARGE where a symbol is unknown."""
    try:
        return ext.evaluate(extent, sizes)
    except KeyError:
        return LARGE


def reduced_axes(fusion):
    """The axes (of the full shape) that every reduction of the fusion reduces."""
    found = set()
    rank = None
    for e in fusion.exprs:
        if isinstance(e, ReductionOp):
            found.add(tuple(e.axes))
            rank = e.inputs[0].rank
    if len(found) != 1:
        raise ScheduleError(f"the reductions of {fusion.name} reduce different axes")
    return list(found.pop()), rank


def classify(fusion, axes, rank):
    """Split the non-input tensors into full-shape ones (including reductions, whose root
    is full-shape) and reduced-shape ones; anything else does not fit one kernel."""
    full, reduced = [], []
    for t in fusion.tensors:
        if t.is_input:
            continue
        if len(t.logical) == rank and (t.rank == rank or isinstance(t.definition, ReductionOp)):
            full.append(t)
        elif t.rank == rank - len(axes):
            reduced.append(t)
        else:
            raise ScheduleError(f"{t.name} has neither the full nor the reduced shape")
    for t in full:
        if isinstance(t.definition, BroadcastOp):
            flags = [i for i, new in enumerate(t.definition.flags) if new]
            if flags != axes and set(flags) & set(axes):
                raise ScheduleError(f"{t.name} broadcasts some but not all reduced axes")
    return full, reduced


def is_broadcast_back(t, axes):
    """Is t a reduction result broadcast back over the reduced axes? (A tensor computed
    from inputs alone broadcast over them, a column reduction's weight, is not.)"""
    return isinstance(t.definition, BroadcastOp) and \
        [i for i, new in enumerate(t.definition.flags) if new] == axes and \
        after_a_reduction(t.definition.inputs[0])


def after_a_reduction(tv):
    """Is tv computed from the result of a reduction?"""
    todo, seen = [tv], set()
    while todo:
        t = todo.pop()
        if t in seen or t.definition is None:
            continue
        if isinstance(t.definition, ReductionOp):
            return True
        seen.add(t)
        todo.extend(t.definition.tensor_inputs)
    return False


@dataclass(frozen=True)
class ReductionPlan:
    """How the reduction scheduler lays out the rows at some sizes on some device."""

    splits: int = 1             # CTAs sharing each row (grid_splits)
    warp_rows: bool = False     # a warp a row, WARP_ROWS rows a block
    column_splits: int = 1      # CTAs sharing each strip of columns (column_splits)


def reduction_plan(fusion, sizes=None, device=None):
    """The ReductionPlan of `fusion` at `sizes` ({symbol: int}; unknown: LARGE) on
    `device`: rows of an inner reduction of at most WARP_ROW_MAX elements get a warp each
    (a block's 256 threads would hold a few elements each, and its barriers would cost
    more than the row); few long rows are split over CTAs (grid_splits). Column strips of
    welford states are not split (their partials would cross kernels as states)."""
    axes, rank = reduced_axes(fusion)
    inner = axes == list(range(rank - len(axes), rank))
    x = next(e.inputs[0] for e in fusion.exprs if isinstance(e, ReductionOp))
    rows, length = _rows_and_length(x, axes, sizes)
    splits = grid_splits(fusion, rows, length, device) if inner else 1
    return ReductionPlan(splits, inner and rank > len(axes) and splits == 1
                         and length <= WARP_ROW_MAX,
                         1 if inner or x.dtype.is_state else
                         column_splits(rows, length, device))


def _rows_and_length(x, axes, sizes):
    """(rows, elements a row) of a reduction of x over `axes` at `sizes`: the product of
    the kept axes' extents and of the reduced ones'."""
    rows, length = 1, 1
    for i, a in enumerate(x.shape_axes):
        if i in axes:
            length *= size_at(a.extent, sizes or {})
        else:
            rows *= size_at(a.extent, sizes or {})
    return rows, length


def column_splits(columns, length, device=None):
    """How many CTAs share each strip of OUTER_COLUMNS columns of an outer reduction
    (`columns` columns of `length` elements: a layer norm's weight gradient): 1 where
    the strips alone give every SM OUTER_BLOCKS_PER_SM blocks; else as many as do, each
    still summing at least COLUMN_SPLIT_MIN_ROWS rows. Each CTA writes f32 partial sums of
    its rows; a second kernel sums them in order (deterministic), OUTER_COLUMNS columns a
    block."""
    strips = -(-columns // OUTER_COLUMNS)
    wanted = OUTER_BLOCKS_PER_SM * devices.resolve(device).sms
    if strips >= wanted:
        return 1
    splits = min(-(-wanted // strips), length // COLUMN_SPLIT_MIN_ROWS)
    return splits if splits > 1 else 1


def grid_splits(fusion, rows, length, device=None):
    """How many CTAs share each of the `rows` rows of `length` elements of the fusion's
    inner reduction: 1, unless it is the fusion's one reduction, not broadcast back, every
    output depends on it, and the rows are too few to give every SM one (on `device`) and
    long enough that each CTA still sums GRID_MIN_ELEMENTS; then the rows are split so
    that rows x splits CTAs fill the SMs once at most (all resident: the parallel grid
    reduction's CTAs wait for one another), at most GRID_SPLITS_MAX a row, and combined
    by the cross-CTA reduction split-K uses."""
    axes, rank = reduced_axes(fusion)
    if any(is_broadcast_back(t, axes) for t in classify(fusion, axes, rank)[0]):
        return 1
    reductions = [e.output for e in fusion.exprs if isinstance(e, ReductionOp)]
    if len(reductions) > 1 or not all(out is reductions[0] or fusion.depends_on(
            out, reductions[0]) for out in fusion.outputs):
        return 1    # a kernel's grid reduction is its one, and only its last CTAs store
    sms = devices.resolve(device).sms
    return max(1, min(sms // max(rows, 1), length // GRID_MIN_ELEMENTS, GRID_SPLITS_MAX))


def reduction_classes(fusion, sizes, device):
    """What each reduction's own plan depends on at `sizes`: for a fusion no one plan fits
    (segmented), the kernels each reduction lands in are planned alone, so the schedule
    key must tell their size classes apart (rows for a warp each, CTAs a row or a column
    strip)."""
    sms = devices.resolve(device).sms
    classes = []
    for e in fusion.exprs:
        if not isinstance(e, ReductionOp):
            continue
        x = e.inputs[0]
        rows, length = _rows_and_length(x, e.axes, sizes)
        if list(e.axes) == list(range(x.rank - len(e.axes), x.rank)):
            classes.append(("inner", length <= WARP_ROW_MAX,
                            max(1, min(sms // max(rows, 1), length // GRID_MIN_ELEMENTS,
                                       GRID_SPLITS_MAX))))
        else:
            classes.append(("outer", 1 if x.dtype.is_state else
                            column_splits(rows, length, device)))
    return tuple(classes)


def plan_or_default(fusion, sizes, device):
    """reduction_plan, or the default where no one reduction scheduler's plan fits (the
    fusion will be segmented, each segment planned on its own)."""
    try:
        return reduction_plan(fusion, sizes, device)
    except ScheduleError:
        return ReductionPlan()
