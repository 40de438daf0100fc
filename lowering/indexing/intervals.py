"""Interval arithmetic over the integers: the one home of how each integer operator of
kernel IR acts on ranges of values, for the two analyses that bound index arithmetic:

    arith.Ranges              at lowering time, over symbolic sizes: which folds of
                              `/` and `%` are valid (lowering.indexing.arith)
    index_bounds._Reach       at a run's sizes: whether the run needs 64-bit indices
                              (lowering.indexing.index_bounds)

An interval is (lo, hi), both ends included; an end is None where unknown (unbounded).
The values are mathematical integers: nothing wraps here. index_bounds uses that to see
where C's 32-bit arithmetic would wrap; the folds of arith may assume it, because
index_bounds picks an index type that holds every value.

Every function is sound: each value `a op b` takes, for a in `a` and b in `b`, lies in the
result (tests/test_intervals.py checks that against evaluate_scalar on random expressions).
The operators mean what fuserir.op_table and fuserir.numerics say, as C computes them in
the emitted CUDA: / truncates toward zero and a / 0 = 0; % takes the dividend's sign and
a % 0 = a; ceildiv is (a + b - 1) / b. The answer is the exact range where that is cheap
(sums, products, quotients and remainders at known ends); where an end it would need is
unknown, the result's end is unknown too, except where index arithmetic needs better and
gets it exactly: the quotient, ceildiv and remainder of a non-negative dividend by a
positive divisor, and a remainder's bound by its divisor. kernel IR has no shifts: a
shift would be a product or a quotient by a power of two here.
"""

import operator

from fuserir.numerics import ceil_div

__all__ = ["add", "sub", "mul", "div", "ceildiv", "mod", "minimum", "maximum", "xor",
           "neg", "absolute", "hull", "BINARY", "BOOL"]

BOOL = (0, 1)          # a comparison, && or ||, `not`, a cast to bool


def _both(f, x, y):
    return None if x is None or y is None else f(x, y)


def _nonneg(x):
    return x is not None and x >= 0


def _has_zero(b):
    lo, hi = b
    return (lo is None or lo <= 0) and (hi is None or hi >= 0)


def add(a, b):
    return (_both(operator.add, a[0], b[0]), _both(operator.add, a[1], b[1]))


def sub(a, b):
    return (_both(operator.sub, a[0], b[1]), _both(operator.sub, a[1], b[0]))


def mul(a, b):
    (alo, ahi), (blo, bhi) = a, b
    if None not in (alo, ahi, blo, bhi):
        corners = [x * y for x in a for y in b]
        return (min(corners), max(corners))
    if _nonneg(alo) and _nonneg(blo):
        return (alo * blo, _both(operator.mul, ahi, bhi))
    return (None, None)


def _trunc(x, y):
    q = abs(x) // abs(y)
    return -q if (x < 0) != (y < 0) else q


def div(a, b):
    """C's a / b: truncated toward zero, a / 0 = 0."""
    (alo, ahi), (blo, bhi) = a, b
    if _has_zero(b):                       # 0 from b = 0, and the rest of b either side
        parts = [(0, 0)]
        if bhi is None or bhi >= 1:
            parts.append(div(a, (1, bhi)))
        if blo is None or blo <= -1:
            parts.append(div(a, (blo, -1)))
        return hull(*parts)
    if None not in (alo, ahi, blo, bhi):
        corners = [_trunc(x, y) for x in a for y in b]
        return (min(corners), max(corners))
    if _nonneg(alo) and blo is not None and blo > 0:
        return (0 if bhi is None else alo // bhi, _both(operator.floordiv, ahi, blo))
    return (None, None)


def ceildiv(a, b):
    """C's (a + b - 1) / b: exact for a non-negative dividend and divisor (a / 0 = 0),
    else the quotient of the two intervals (which forgets that a + b - 1 and b move
    together)."""
    (alo, ahi), (blo, bhi) = a, b
    if _nonneg(alo) and _nonneg(blo):
        if blo == 0:                       # (a - 1) / 0 = 0
            return (0, 0) if bhi == 0 else hull((0, 0), ceildiv(a, (1, bhi)))
        return (0 if bhi is None else ceil_div(alo, bhi), _both(ceil_div, ahi, blo))
    return div(sub(add(a, b), (1, 1)), b)


def mod(a, b):
    """C's a % b: the sign of the dividend, |a % b| < |b| and <= |a|; a % 0 = a."""
    (alo, ahi), (blo, bhi) = a, b
    if _has_zero(b):
        return (_both(min, alo, 0), _both(max, ahi, 0))
    bound = None if None in (blo, bhi) else max(-blo, bhi) - 1
    lo = 0 if _nonneg(alo) else _least(alo, None if bound is None else -bound, max)
    hi = 0 if ahi is not None and ahi <= 0 else _least(ahi, bound, min)
    return (lo, hi)


def _least(x, y, f):
    """f(x, y) of two bounds of one value, either of which may be unknown."""
    if x is None:
        return y
    return x if y is None else f(x, y)


def minimum(a, b):
    return (_both(min, a[0], b[0]), _both(min, a[1], b[1]))


def maximum(a, b):
    return (_both(max, a[0], b[0]), _both(max, a[1], b[1]))


def xor(a, b):
    """Of non-negative operands with known ends: below the next power of two."""
    (alo, ahi), (blo, bhi) = a, b
    if _nonneg(alo) and _nonneg(blo) and ahi is not None and bhi is not None:
        return (0, (1 << max(ahi, bhi).bit_length()) - 1)
    return (None, None)


def neg(a):
    lo, hi = a
    return (None if hi is None else -hi, None if lo is None else -lo)


def absolute(a):
    lo, hi = a
    least = 0 if _has_zero(a) else min(abs(x) for x in a if x is not None)
    return (least, None if None in a else max(abs(lo), abs(hi)))


def hull(*intervals):
    """The smallest interval holding all of `intervals` (a select's two arms)."""
    los, his = [i[0] for i in intervals], [i[1] for i in intervals]
    return (None if None in los else min(los), None if None in his else max(his))


BINARY = {"add": add, "sub": sub, "mul": mul, "div": div, "ceildiv": ceildiv, "mod": mod,
          "min": minimum, "max": maximum, "xor": xor}
