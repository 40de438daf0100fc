"""Loop-domain transforms: split, merge and reorder reshape a tensor's loop axes.

They never change what the tensor means: each new axis remembers the Split or Merge that
derived it (fuserir.ir.iterdomain), so lowering can replay them backwards from loop
indices to the tensor's root indices. Loops shared through compute_at are refused here,
on either side: transform the consumer first, then compute the producer at it.
"""

from ..errors import FusionError, ScheduleError
from ..ir import extent as ext
from ..ir.iterdomain import IterKind, Merge, Split
from .common import _axis, _not_input, _not_shared


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
