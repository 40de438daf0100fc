"""What Hopper's copy and matrix instructions see of a scheduled shared tile: a TMA copy's
box, and a wgmma operand's matrix layout.

A TMA copy (cache_after(shared, tma=True)) moves a box per instruction: its two innermost
loop axes, past its compute-at position. Each must run along one axis of the global tensor
it caches, as the innermost piece of that axis's splits (so box element b lands at the
box origin's coordinate + b), the inner one along the axis the global tensor's
elements are contiguous on: box dimension 0, as the hardware counts them. A TMA store
(cache_before(shared, tma=True)) is read the same way off the global tensor's own loop
axes, past its staged tile's compute-at position, and the tile's swizzle. That axis is
the tensor's last, or another where the last has one element (a decode matmul's A stored
K x 1, staged along K); lowering cannot know extents, so the launch checks it: the tensor
map's dimension 0 has stride 1 there, and a map that does not cover the array exactly is
refused (codegen.tensor_maps). Outer axes of its own are loops of boxes. A tensor of
three axes (a batched matmul's operand or output) is a map of three dimensions, the box
one element deep along the axis it does not run along, at that axis's index.
The tile's swizzle (transforms.swizzle) is the box's swizzle mode: none, or rows of 128,
64 or 32 bytes (the 128B, 64B and 32B modes, whose XOR of a row's 16-byte chunks with
bits 7 .. of the byte offset is exactly the tile's swizzle when the tile starts on a
1024-byte boundary, which allocation makes so); a swizzled box's rows are the mode's
bytes.

A wgmma reads an operand (64 x 16 of A, n x 16 of B^T) through a matrix descriptor:
leading and stride byte offsets and a swizzle mode (kir.MatrixLayout), K-major or MN-major
(`trans`). matrix_layout finds the layout whose bytes are the tile's: the indexing pass
computes the logical byte offset of every operand element from the tile's start, and the
layout is accepted only if MatrixLayout.offsets reproduces all of them. A tile no
descriptor can describe is refused with the reason, never approximated.

It sits below the passes that ask it (validate's checks through analysis, indexing) and
above fuserir's instruction descriptors, which hold the hardware's limits.
"""

from dataclasses import dataclass

import numpy as np

from fuserir.errors import ScheduleError
from fuserir.instructions import (SWIZZLE_BYTES, SWIZZLE_MODE_OF_ROW_BYTES, TMA_BOX_MAX,
                                  TMA_RANKS, WGMMA)
from fuserir.ir.iterdomain import ParallelType, Split

from .. import kir
from ..support.analysis import is_tma_store

def swizzle_mode(tv):
    """The hardware swizzle mode of the shared tile tv: "none", or "32B", "64B" or
    "128B" for rows of that many bytes."""
    if tv.row_padding is not None:
        raise ScheduleError(f"{tv.name}: padded (pad_rows); TMA and wgmma read tiles laid "
                            "out as their matrix descriptors say, unpadded")
    if tv.swizzle_row is None:
        return "none"
    row_bytes = tv.swizzle_row * tv.dtype.itemsize
    if row_bytes not in SWIZZLE_MODE_OF_ROW_BYTES:
        rows = ", ".join(f"swizzle({n // tv.dtype.itemsize})"
                         for n in SWIZZLE_MODE_OF_ROW_BYTES)
        raise ScheduleError(
            f"{tv.name}: swizzled in rows of {row_bytes} bytes; TMA and wgmma read tiles "
            f"swizzled in rows of 32, 64 or 128 bytes ({rows}) or not swizzled")
    return SWIZZLE_MODE_OF_ROW_BYTES[row_bytes]


@dataclass(frozen=True)
class TmaBox:
    """A TMA copy's box: `axes` (the loop axes of dimensions 0 and 1), `dims` (the global
    tensor's axes they run along, then its other axis where it has three: a batch axis,
    one element of the box), `extents` (elements per dimension) and the swizzle."""

    axes: tuple
    dims: tuple
    extents: tuple
    swizzle: str


def _innermost_of(axis):
    """The root axis `axis` is the innermost piece of (through inner splits), or None."""
    while axis.definition is not None:
        d = axis.definition
        if not isinstance(d, Split) or axis is not d.inner:
            return None
        axis = d.input
    return axis


def tma_box(tv):
    """The box of the TMA copy tv (see the module header): a load's (tv the shared cache)
    or a store's (tv the global tensor, its staged tile the shared side), or a
    ScheduleError."""
    store = is_tma_store(tv)
    where = f"{tv.name} (a TMA {'store' if store else 'copy'})"
    source, tile = (tv, tv.definition.inputs[0]) if store else (tv.definition.inputs[0], tv)
    if source.rank not in TMA_RANKS:
        raise ScheduleError(f"{where}: TMA boxes of {source.rank}-D tensors are not "
                            f"supported; the global tensor must have "
                            f"{' or '.join(map(str, TMA_RANKS))} axes (one batch axis "
                            "at most)")
    own = tv.ndim - ((tile if store else tv).compute_at_pos or 0)
    if own < 2:
        raise ScheduleError(f"{where}: its two innermost loop axes are the box, but only "
                            f"{own} axis is past its compute-at position")
    root_map = {a: a for a in tv.root} if store else tv.definition.root_map(source)
    inner, outer = tv.loop[-1], tv.loop[-2]
    dims = []
    for axis, name in ((inner, "innermost"), (outer, "second innermost")):
        if axis.parallel not in (ParallelType.serial, ParallelType.unroll):
            raise ScheduleError(f"{where}: its {name} loop axis {axis} is part of the box "
                                f"one thread issues; it cannot be bound to {axis.parallel}")
        if not isinstance(axis.extent, int) or not 1 <= axis.extent <= TMA_BOX_MAX:
            raise ScheduleError(f"{where}: box axis {axis} must have a constant extent of "
                                f"1 to {TMA_BOX_MAX}")
        root = _innermost_of(axis)
        if root is None or root not in root_map:
            raise ScheduleError(f"{where}: box axis {axis} is not the innermost piece of "
                                "one of its axes (split an axis, keep its inner part last)")
        dims.append(root_map[root])
    if dims[1] is dims[0]:
        raise ScheduleError(f"{where}: the two box axes must run along two different axes "
                            f"of {source.name}")
    mode = swizzle_mode(tile)
    row_bytes = inner.extent * tv.dtype.itemsize
    span = SWIZZLE_BYTES[mode]
    if mode != "none" and row_bytes != span:
        raise ScheduleError(f"{where}: a box row of {row_bytes} bytes in a tile swizzled by "
                            f"{span}-byte rows; make the innermost box axis "
                            f"{span // tv.dtype.itemsize} elements")
    if row_bytes % 16:
        raise ScheduleError(f"{where}: a box row of {row_bytes} bytes; TMA moves rows of "
                            "a multiple of 16 bytes")
    batch = [a for a in source.shape_axes if a not in dims]   # a box one element deep
    return TmaBox((inner, outer), tuple(dims + batch),
                  (inner.extent, outer.extent) + (1,) * len(batch), mode)


def _guesses(table, trans, swizzle, rows):
    """(leading, stride) byte offsets that would give `table`, read off its entries."""
    at = lambda r, k: int(table[r, k]) if r < rows else 16       # noqa: E731
    if swizzle == "none":                   # both majors: LBO along k, SBO along rows
        return at(0, 8), at(8, 0)
    if not trans:
        return 16, at(8, 0)                 # LBO is not used by a K-major swizzled tile
    t = SWIZZLE_BYTES[swizzle] // 2
    return at(t, 0), int(table[0, 8])


def matrix_layout(table, swizzle, rows, where):
    """(kir.MatrixLayout, trans) describing an operand whose element (row, k) sits
    `table[row, k]` bytes past its start (before the swizzle), or a ScheduleError."""
    for trans in (False, True):
        lead, stride = _guesses(table, trans, swizzle, rows)
        if min(lead, stride) < 16 or lead % 16 or stride % 16 or max(lead, stride) >= 1 << 18:
            continue
        layout = kir.MatrixLayout(lead, stride, swizzle)
        if np.array_equal(layout.offsets(trans, rows), table):
            return layout, trans
    raise ScheduleError(
        f"{where}: no wgmma matrix descriptor ({swizzle} swizzle, K-major or MN-major) "
        f"describes the tile's layout; lay it out as TMA boxes of 128-byte rows swizzled "
        f"by swizzle(64) (element (1, 0) is "
        f"{int(table[1, 0])} bytes from (0, 0), (0, 1) {int(table[0, 1])})")


def operand_rows(is_a, n):
    """The rows of a wgmma operand tile: A's m, or B^T's n."""
    return WGMMA.m if is_a else n
