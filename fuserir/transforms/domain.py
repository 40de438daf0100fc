"""Loop-domain transforms: split, merge and reorder reshape a tensor's loop axes.

They never change what the tensor means: each new axis remembers the Split or Merge that
derived it (fuserir.ir.iterdomain), so lowering can replay them backwards from loop
indices to the tensor's root indices. Loops shared through compute_at are refused here,
on either side: transform the consumer first, then compute the producer at it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from ..errors import FusionError, ScheduleError
from ..ir import extent as ext
from ..ir.iterdomain import IterKind, Merge, Split
from .common import _axis, _not_input, _not_shared

if TYPE_CHECKING:
    from ..ir.tensor import TensorView


def split(tv: TensorView, axis: int, factor: int | str, inner: bool = True) -> None:
    """Split loop axis `axis` of `tv` into an outer and an inner piece (TensorView.split).

    With inner=True the inner piece has extent `factor` and the outer ceildiv(extent, factor);
    with inner=False the outer piece has extent `factor`. A factor need not divide the
    extent: lowering predicates the partial last iteration.

      axis    a loop axis number of tv; a negative one counts from the end
      factor  an integer >= 1, or the name of a run-time scalar ("tile"), which the split
              declares in the fusion (the kernel takes it as an argument)
      inner   whether `factor` is the extent of the inner piece (else of the outer one)

    Raises ScheduleError if tv is a fusion input, the axis is out of range or its loop is
    shared through compute_at (with tv's consumer or a producer computed at tv), or the factor
    is neither a positive integer nor a valid name.

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(x: f32[M, N]) { y = relu(x)  output y }")
    >>> y = f.tensor("y")
    >>> print(y.describe())
    y: f32[M, N] global loop=[i{M} i{N}]
    >>> y.split(1, 128)
    >>> print(y.describe())
    y: f32[M, N] global loop=[i{M} i{ceildiv(N, 128)} i{128}]
    >>> y.split(0, "tile", inner=False)
    >>> print(y.describe())
    y: f32[M, N] global loop=[i{tile} i{ceildiv(M, tile)} i{ceildiv(N, 128)} i{128}]
    >>> y.split(1, 0)
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: split: factor must be >= 1, got 0 (tensor y, axis 1)
    """
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


def merge(tv: TensorView, axis: int) -> None:
    """Merge loop axes `axis` and `axis` + 1 of `tv` into one axis (TensorView.merge).

    The merged axis has the product of the two extents; its index o runs the outer axis as
    o / extent(inner) and the inner one as o % extent(inner).

      axis    a loop axis number of tv, not the last; a negative one counts from the end

    Raises ScheduleError if tv is a fusion input, the axis is out of range or the last one,
    either loop is shared through compute_at, or the two axes mix a reduction with an
    iteration axis or with a broadcast axis (the merged loop would reduce every element more
    than once).

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(x: f32[M, N]) { y = relu(x)  output y }")
    >>> y = f.tensor("y")
    >>> print(y.describe())
    y: f32[M, N] global loop=[i{M} i{N}]
    >>> y.merge(0)
    >>> print(y.describe())
    y: f32[M, N] global loop=[i{M*N}]
    >>> y.merge(0)  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: merge: axis 0 is the last loop axis of y; there is no next
        axis to merge it with
    """
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


def reorder(tv: TensorView, mapping: Mapping[int, int]) -> None:
    """Move loop axes of `tv` to new positions (TensorView.reorder).

      mapping  a dict {old position: new position}; keys and values may be negative. The axes
               it does not name fill the remaining positions in their original order.

    Raises ScheduleError if tv is a fusion input, mapping is not a dict, a position is out of
    range, an axis is moved twice or two axes to one position, or a moved loop is shared
    through compute_at.

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(x: f32[M, N]) { y = relu(x)  output y }")
    >>> y = f.tensor("y")
    >>> y.split(1, 128)
    >>> print(y.describe())
    y: f32[M, N] global loop=[i{M} i{ceildiv(N, 128)} i{128}]
    >>> y.reorder({2: 0})
    >>> print(y.describe())
    y: f32[M, N] global loop=[i{128} i{M} i{ceildiv(N, 128)}]
    >>> y.reorder({0: -1, -1: 0})
    >>> print(y.describe())
    y: f32[M, N] global loop=[i{ceildiv(N, 128)} i{M} i{128}]
    >>> y.reorder({0: 1, 2: 1})
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: reorder: two axes of y are moved to position 1
    """
    _not_input("reorder", tv)
    if not isinstance(mapping, dict):
        raise ScheduleError(f"reorder: expected a map {{old: new}}, got {mapping!r} "
                            f"(tensor {tv.name})")
    moves: dict[int, int] = {}
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
