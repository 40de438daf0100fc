"""What every transform module shares: argument checks and the queries about shared loops.

The checks turn a bad argument into a ScheduleError that names the transform, the tensor
and the axis. The queries answer who shares whose loops through compute_at: the loop
transforms refuse to change a shared loop, the graph rewrites refuse to move a tensor
whose loops are shared, and lowering (concrete_loop) finds the loop an axis runs in.
They sit below every other module of the package, which all import them.
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..ir.iterdomain import ParallelType
from ..ir.tensor import memory_type as _memory_type

# -- argument checks -----------------------------------------------------------------------


def _axis(op, tv, axis):
    """Normalise a (possibly negative) loop axis number of `tv`."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise ScheduleError(f"{op}: axis {axis!r} is not an integer (tensor {tv.name})")
    p = axis + tv.ndim if axis < 0 else axis
    if not 0 <= p < tv.ndim:
        raise ScheduleError(f"{op}: axis {axis} is out of range for tensor {tv.name} with "
                            f"{tv.ndim} loop axes")
    return p


def _not_input(op, tv):
    if tv.is_input:
        raise ScheduleError(f"{op}: {tv.name} is a fusion input; inputs are read, not "
                            f"computed: schedule a cache of it (cache_after) instead")


def _not_shared(op, tv, positions):
    """Refuse to change loop axes that are shared with a consumer or a producer."""
    for p in positions:
        if tv.compute_at_pos and p < tv.compute_at_pos:
            raise ScheduleError(
                f"{op}: axis {p} of {tv.name} is inside its compute-at position "
                f"{tv.compute_at_pos} (the loop is shared with {tv.compute_at_consumer.name}); "
                f"transform {tv.compute_at_consumer.name} before compute_at instead")
        shared = _max_producer_pos(tv)
        if p < shared:
            raise ScheduleError(
                f"{op}: axis {p} of {tv.name} is shared with a producer computed at position "
                f"{shared}; transform {tv.name} before that compute_at")


def _memory(op, value):
    try:
        return _memory_type(value)
    except ValueError:
        raise ScheduleError(f"{op}: unknown memory type {value!r}; expected global, shared "
                            "or local") from None


def _ptype(op: str, value: ParallelType | str) -> ParallelType:
    if isinstance(value, ParallelType):
        return value
    try:
        return ParallelType(value)
    except ValueError:
        names = ", ".join(p.value for p in ParallelType)
        raise ScheduleError(f"{op}: unknown parallel type {value!r}; expected one of "
                            f"{names}") from None


# -- shared loops --------------------------------------------------------------------------


def _placed_producers(tv):
    """The tensors computed at `tv`: they share its outer loops. Usually direct producers,
    but a cache_after inserted since may stand between (x computed at y, then x cached)."""
    return [p for p in tv.fusion.tensors if p.compute_at_consumer is tv and p.compute_at_pos]


def _max_producer_pos(tv):
    """The deepest loop position of `tv` that a producer computed at `tv` shares."""
    return max((p.compute_at_pos for p in _placed_producers(tv)), default=0)


def concrete_loop(tv, i):
    """The (tensor, position) whose loop tv.loop[i] runs in: inside its compute-at position
    an axis shares its consumer's loop, recursively.

    Lowering asks it to tell which loop axes of different tensors are one loop.

    >>> import fuserir
    >>> from fuserir.transforms import concrete_loop
    >>> f = fuserir.parse("fusion f(x: f32[M, N]) { t = exp(x)  y = t * 2  output y }")
    >>> t, y = f.tensor("t"), f.tensor("y")
    >>> y.split(1, 128)
    >>> t.compute_at(y, 2)
    >>> print(t.describe())
    t: f32[M, N] local loop=[i{M} i{ceildiv(N, 128)} i{128}] compute_at=2
    >>> concrete_loop(t, 1)
    (<TensorView y: f32[M, N] global>, 1)
    >>> concrete_loop(t, 2)
    (<TensorView t: f32[M, N] local>, 2)
    """
    while tv.compute_at_pos and i < tv.compute_at_pos:
        tv = tv.compute_at_consumer
    return tv, i
