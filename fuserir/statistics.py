"""Statistics and normalizations made of reductions: mean, var, std, var_mean, softmax,
log_softmax, argmax and argmin mean what torch's do, and each is a few of fuserir.ops'
builders (which re-exports them): the IR, the evaluators, the schedulers and CUDA need
nothing of their own for them, and a fusion prints them as those ops.

f16 and bf16 operands are computed in f32 and rounded once, at the end. var, std and
var_mean are two-pass (the mean first, then the squares of the differences from it); the
automatic schedule keeps a row in one block, so both passes read it from registers or
shared memory, not twice from global memory. welford is the one-pass form: each element
cast to a welford state and the states merged (Chan's update, as stable as two passes),
one reduction whose partials any thread, block or CTA can merge in any grouping, so a
row split over CTAs is read once. argmax is two
reductions of the row too: its max, then the least index holding it.
"""

from .dtypes import DataType
from .errors import FusionError
from .ir import extent as ext
from .ir.tensor import Scalar
from .ops import (_accumulated_as, _check_keepdim, _check_tensor, _kept, _normalize_axes,
                  axis_index, broadcast, cast, div, eq, exp, isnan, log, logical_or, max, min,
                  mul, sqrt, sub, sum, welford_m2, welford_mean, welford_merge, where)
from .slicing import _requires

INT64_MAX = 2 ** 63 - 1     # an index no row reaches: what min over no hit gives


def _float_operand(op, x, dtype, keepdim=False):
    """x (cast to `dtype` where given), checked to hold floats: what op computes on (and
    `keepdim` checked before anything is built)."""
    _check_tensor(op, x)
    _check_keepdim(op, keepdim)
    if dtype is not None:
        x = _accumulated_as(op, x, dtype)
    if not x.dtype.is_float:
        raise FusionError(f"{op}: operand {x.name} is {x.dtype}; {op} computes on floats: "
                          f"give dtype=f32 or cast it first")
    return x


def _computed(x):
    """x in the type its arithmetic runs in (f32 for f16 and bf16)."""
    return x if x.dtype is x.dtype.compute else cast(x, x.dtype.compute)


def _rounded(y, dtype):
    return y if y.dtype is dtype else cast(y, dtype)


def _count(x, axes):
    """How many elements of x each reduction over `axes` combines: an integer, or a size
    (the product of the reduced extents) as a value."""
    count = 1
    for a in axes:
        count = ext.mul(count, x.shape_axes[a].extent)
    return count


def _as_value(extent):
    return extent if isinstance(extent, int) else Scalar(extent, DataType.i64)


def mean(x, axes, keepdim=False, dtype=None):
    """The mean of x's elements over `axes` (NaN over none), in x's float type (or
    `dtype`'s: the elements are cast first); keepdim keeps the reduced axes."""
    x = _float_operand("mean", x, dtype, keepdim)
    axes = _normalize_axes("mean", x, axes)
    y = div(sum(_computed(x), axes), _as_value(_count(x, axes)))
    return _kept(_rounded(y, x.dtype), axes, keepdim)


def _variance(op, x, axes, correction):
    """(the variance over `axes`, the mean), both in x's compute type."""
    _check_correction(op, correction)
    xc = _computed(x)
    count = _count(x, axes)
    m = div(sum(xc, axes), _as_value(count))
    d = sub(xc, broadcast(m, [i in axes for i in range(x.rank)]))
    return div(sum(mul(d, d), axes), _divisor(op, x, count, correction)), m


def _check_correction(op, correction):
    if isinstance(correction, bool) or not isinstance(correction, int) or correction < 0:
        raise FusionError(f"{op}: correction must be an integer >= 0 (0: the population "
                          f"variance, 1: Bessel's), got {correction!r}")


def _divisor(op, x, count, correction):
    """count - correction as a value, refused where it may be 0 or less."""
    # torch divides by max(count - correction, 0); fuserir asks for count >= correction
    # (a size class with fewer elements than the correction is refused, never -0)
    _requires(op, x.fusion, correction, count,
              f"{x.name}'s reduced axes hold {count} elements, fewer than the correction "
              f"{correction}", f"{op} of {x.name}: the reduced axes must hold at least "
              f"the correction's {correction} elements")
    if isinstance(count, int) and count == correction:
        raise FusionError(f"{op}: {x.name}'s reduced axes hold {count} elements, as many "
                          f"as the correction: the variance divides by 0")
    return _as_value(ext.sub(count, correction))


def var(x, axes, correction=1, keepdim=False):
    """The variance of x's elements over `axes`: the squares of their differences from
    the mean, summed and divided by (count - correction)."""
    x = _float_operand("var", x, None, keepdim)
    axes = _normalize_axes("var", x, axes)
    v, _ = _variance("var", x, axes, correction)
    return _kept(_rounded(v, x.dtype), axes, keepdim)


def std(x, axes, correction=1, keepdim=False):
    """The standard deviation: sqrt of var."""
    x = _float_operand("std", x, None, keepdim)
    axes = _normalize_axes("std", x, axes)
    v, _ = _variance("std", x, axes, correction)
    return _kept(_rounded(sqrt(v), x.dtype), axes, keepdim)


def var_mean(x, axes, correction=1, keepdim=False):
    """(var, mean) of x over `axes`, the mean computed once for both (torch.var_mean)."""
    x = _float_operand("var_mean", x, None, keepdim)
    axes = _normalize_axes("var_mean", x, axes)
    v, m = _variance("var_mean", x, axes, correction)
    return tuple(_kept(_rounded(y, x.dtype), axes, keepdim) for y in (v, m))


def welford(x, axes, correction=1, keepdim=False):
    """(var, mean) of x over `axes`, as var_mean, in one pass: each element a welford
    state, merged over the axes (the module docstring). f16, bf16 and f32 operands
    (the state is f32). A mean over data holding an infinity is NaN (var_mean's: +-inf)."""
    x = _float_operand("welford", x, None, keepdim)
    if x.dtype is DataType.f64:
        raise FusionError(f"welford: operand {x.name} is f64; a welford state is f32 "
                          "(var_mean computes in f64)")
    axes = _normalize_axes("welford", x, axes)
    _check_correction("welford", correction)
    count = _count(x, axes)
    divisor = _divisor("welford", x, count, correction)
    merged = welford_merge(cast(x, DataType.welford), axes)
    v, m = div(welford_m2(merged), divisor), welford_mean(merged)
    return tuple(_kept(_rounded(y, x.dtype), axes, keepdim) for y in (v, m))


def _normalized(op, x, dim, dtype):
    """(x in its compute type, the one axis normalized over, the type of the result)."""
    x = _float_operand(op, x, dtype)
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise FusionError(f"{op}: dim must be one axis (an integer), got {dim!r}")
    return _computed(x), _normalize_axes(op, x, [dim]), x.dtype


def softmax(x, dim, dtype=None):
    """exp(x - max) / the sum of those along `dim` (torch.softmax; `dtype` casts x first)."""
    xc, axes, result = _normalized("softmax", x, dim, dtype)
    e = exp(sub(xc, max(xc, axes, keepdim=True)))
    return _rounded(div(e, sum(e, axes, keepdim=True)), result)


def log_softmax(x, dim, dtype=None):
    """x - max - log(the sum of exp(x - max)) along `dim` (torch.log_softmax)."""
    xc, axes, result = _normalized("log_softmax", x, dim, dtype)
    shifted = sub(xc, max(xc, axes, keepdim=True))
    return _rounded(sub(shifted, log(sum(exp(shifted), axes, keepdim=True))), result)


def _arg_extreme(op, pick, x, dim, keepdim):
    """The index along `dim` of the first element equal to the row's `pick` (max or min),
    or of its first NaN (torch's argmax/argmin: NaN counts as the extreme), as i64."""
    _check_tensor(op, x)
    _check_keepdim(op, keepdim)
    if x.dtype is DataType.bool:
        raise FusionError(f"{op}: operand {x.name} is bool; cast it first")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise FusionError(f"{op}: dim must be one axis (an integer), got {dim!r}")
    axes = _normalize_axes(op, x, [dim])
    extent = x.shape_axes[axes[0]].extent
    _requires(op, x.fusion, 1, extent, f"axis {dim} of {x.name} has no elements",
              f"{op} of {x.name}: axis {dim} must hold at least one element")
    hit = eq(x, pick(x, axes, keepdim=True))
    if x.dtype.is_float:
        hit = logical_or(hit, isnan(x))
    first = min(where(hit, axis_index(x, axes[0]), INT64_MAX), axes)
    return _kept(first, axes, keepdim)


def argmax(x, dim, keepdim=False):
    """The index (i64) of the largest element along `dim`, the first where several are
    (torch.argmax; a NaN is the largest)."""
    return _arg_extreme("argmax", max, x, dim, keepdim)


def argmin(x, dim, keepdim=False):
    """The index (i64) of the smallest element along `dim` (torch.argmin)."""
    return _arg_extreme("argmin", min, x, dim, keepdim)
