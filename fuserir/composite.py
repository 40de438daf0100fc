"""Ops made of other ops: truediv, clamp, threshold, lerp and addcmul mean what
torch's do, and each is a few of fuserir.ops' builders (which re-exports them): the IR,
the evaluators and CUDA need nothing of their own for them (a fusion prints them as those
ops). Where a chain of arithmetic on f16/bf16 operands would round after every step, it
is computed in f32 and rounded once.
"""

import functools

from . import dtypes
from .dtypes import DataType
from .errors import FusionError
from .ir.tensor import TensorView
from .ops import (_check_tensor, _fusion_of, _literal, broadcast, cast, div, le, lt,
                  maximum, minimum, where)


def _computed_in(v, dtype):
    """A tensor operand converted to `dtype` (a number stays a literal)."""
    return cast(v, dtype) if isinstance(v, TensorView) and v.dtype is not dtype else v


def _as_float(v):
    """A tensor of integers or bool as f32; a float tensor or a number as it is."""
    return v if not isinstance(v, TensorView) or v.dtype.is_float else cast(v, DataType.f32)


def truediv(a, b):
    """a / b, with integer and bool operands divided as f32 (torch.true_divide); div on
    floats."""
    _fusion_of("truediv", [a, b])
    return div(_as_float(a), _as_float(b))


def _bound(op, v, x, argument):
    """A bound of `op` on tensor x: a tensor, or a number as a literal of x's dtype."""
    return v if isinstance(v, TensorView) else _literal(op, v, x.dtype, x.name, argument)


def clamp(x, min=None, max=None):  # noqa: A002 - torch's names
    """x limited to [min, max], either bound left out where None: maximum(x, min), then
    minimum with max, so that NaN (in x or a bound) propagates and min > max gives max,
    as torch.clamp."""
    _check_tensor("clamp", x)
    if x.dtype is DataType.bool:
        raise FusionError(f"clamp: operand {x.name} is bool; cast it first")
    if min is None and max is None:
        raise FusionError("clamp: give min, max or both")
    if min is not None:
        x = maximum(x, _bound("clamp", min, x, "min"))
    if max is not None:
        x = minimum(x, _bound("clamp", max, x, "max"))
    return x


def threshold(x, threshold, value):
    """value where x <= threshold, else x (torch.nn.functional.threshold: NaN is kept)."""
    _check_tensor("threshold", x)
    return where(le(x, _bound("threshold", threshold, x, "threshold")),
                 _bound("threshold", value, x, "value"), x)


def _float_operands(op, tensors):
    """The promoted dtype of `op`'s tensor operands, each of which must be a float."""
    for t in tensors:
        if not t.dtype.is_float:
            raise FusionError(f"{op}: operand {t.name} is {t.dtype}; {op} takes floats")
    return functools.reduce(dtypes.promote, [t.dtype for t in tensors])


def lerp(start, end, weight):
    """start + weight (end - start), as torch.lerp computes it: so from start where weight
    < 0.5, else as end - (end - start) (1 - weight), which gives start at weight 0 and end
    at weight 1 exactly. Float operands; `weight` a tensor or a number."""
    _check_tensor("lerp", start, "start")
    _check_tensor("lerp", end, "end")
    weighted = isinstance(weight, TensorView)
    dtype = _float_operands("lerp", [start, end] + ([weight] if weighted else []))
    compute = dtype.compute
    start, end = _computed_in(start, compute), _computed_in(end, compute)
    difference = end - start
    if weighted:
        weight = _computed_in(weight, compute)
        near_start = start + weight * difference
        near_end = end - difference * (1 - weight)
        result = where(lt(weight, 0.5), near_start, near_end)
    else:
        w = _literal("lerp", weight, compute, start.name, "weight").value
        w = compute.numpy.type(w)
        result = start + float(w) * difference if w < 0.5 else \
            end - difference * float(compute.numpy.type(1) - w)
    return _computed_in(result, dtype)


def addcmul(x, tensor1, tensor2, value=1):
    """x + value * tensor1 * tensor2 (torch.addcmul), in that order."""
    for name, t in (("x", x), ("tensor1", tensor1), ("tensor2", tensor2)):
        _check_tensor("addcmul", t, name)
    dtype = functools.reduce(dtypes.promote, [x.dtype, tensor1.dtype, tensor2.dtype])
    if dtype is DataType.bool:
        raise FusionError("addcmul: operands are bool; cast them first")
    compute = dtype.compute
    x, tensor1, tensor2 = (_computed_in(t, compute) for t in (x, tensor1, tensor2))
    if not isinstance(value, TensorView):
        value = _literal("addcmul", value, compute, tensor1.name, "value")
    return _computed_in(x + value * tensor1 * tensor2, dtype)
