"""How a kernel-IR integer expression depends on one loop variable v: whether it is
periodic in v, and with which period. lowering.verify.async_runtime's argument for a run-time loop
needs every expression the async protocol evaluates inside the loop (mbarrier indices,
parities, counts, stage offsets, byte indices, conditions) to repeat with the iteration.

A shape (step D, rise A, from v0) says f(v + D) = f(v) + A for every v >= v0 and every
value of the other variables; rise 0 is periodic with period D. Shapes are built
bottom-up, v0 the largest of the operands':

    v                       (1, 1), never negative
    an expression without v (1, 0)
    f + g, f - g            steps to their lcm, rises added (subtracted)
    f * c, c a constant     rise times c
    f / d, f % m            d, m positive constants and f never negative (C truncates
                            toward zero, so a negative dividend breaks the repetition):
                            with k = d / gcd(A, d), f(v + D k) = f(v) + A k and A k is a
                            multiple of d, so f / d has shape (D k, A k / d); likewise
                            f % m has shape (D m / gcd(A, m), 0)
    p v + q OP c            p > 0, q and c constants, OP a comparison: constant from
                            v0 = (c - q) / p + 1 on (an eventually constant guard such as
                            k > 0; `eventual_period` admits it, for conditions only)
    any other operation     periodic operands give a periodic result (lcm of periods);
                            a rising operand (A != 0: v itself, k / 4, ...) gives none

So `k % S`, `(k / S) % 2`, `(tile * 5 + k) % 3 + S` are periodic and `k > 0` is from 1
on; `k`, `min(k, 2)`, `(k - 1) % 2` are not. Integer wrap-around is not modelled: the
indices the protocol uses stay far below 2^31 (lowering.indexing.index_bounds proves index widths).
"""

from dataclasses import dataclass
from math import gcd, lcm

from .. import kir


@dataclass(frozen=True)
class _Shape:
    step: int
    rise: int
    nonneg: bool             # f(v) >= 0 for every v >= start and any other values
    start: int = 0
    exact: tuple = None      # (p, q): f(v) = p v + q, both constants


def period(expr, var, nonneg_names=()):
    """The period of `expr` in the variable named `var` (1: it does not depend on it), or
    None when it is not periodic in it from v = 0 on. `nonneg_names`: other variables
    known >= 0 (loop variables, thread indices)."""
    found = eventual_period(expr, var, nonneg_names)
    return found[0] if found is not None and found[1] == 0 else None


def eventual_period(expr, var, nonneg_names=()):
    """(period, v0): `expr` is periodic in `var` from v0 on; None when it is not."""
    shape = _shape(expr, var, frozenset(nonneg_names))
    return (shape.step, shape.start) if shape is not None and shape.rise == 0 else None


def _shape(e, var, nonneg):
    if isinstance(e, kir.Const):
        return _Shape(1, 0, bool(e.value >= 0),
                      exact=(0, int(e.value)) if e.dtype.is_int else None)
    if isinstance(e, kir.Var):
        if e.name == var:
            return _Shape(1, 1, True, exact=(1, 0))
        return _Shape(1, 0, e.name in nonneg)
    if isinstance(e, kir.Special):
        return _Shape(1, 0, True)
    if isinstance(e, kir.Cast):
        inner = _shape(e.a, var, nonneg)
        if inner is None or (inner.rise and not (e.dtype.is_int and e.a.dtype.is_int)):
            return None
        return inner
    if isinstance(e, kir.BinOp):
        return _binop(e, var, nonneg)
    parts = [_shape(c, var, nonneg) for c in e.children()]
    return _periodic(parts, nonneg=False)


def _periodic(parts, nonneg):
    """The shape of an operation that repeats only where its operands do."""
    if any(p is None or p.rise for p in parts):
        return None
    return _Shape(lcm(*(p.step for p in parts)), 0, nonneg,
                  max(p.start for p in parts))


def _align(a, b):
    """Both shapes over the lcm of their steps."""
    step = lcm(a.step, b.step)
    return step, a.rise * (step // a.step), b.rise * (step // b.step)


def _binop(e, var, nonneg):
    a, b = _shape(e.a, var, nonneg), _shape(e.b, var, nonneg)
    if a is None or b is None:
        return None
    start = max(a.start, b.start)
    const = e.b.value if isinstance(e.b, kir.Const) and e.b.dtype.is_int else None
    if e.op in ("add", "sub"):
        step, ra, rb = _align(a, b)
        sign = 1 if e.op == "add" else -1
        exact = None if a.exact is None or b.exact is None else \
            (a.exact[0] + sign * b.exact[0], a.exact[1] + sign * b.exact[1])
        return _Shape(step, ra + sign * rb, sign > 0 and a.nonneg and b.nonneg, start,
                      exact)
    if e.op == "mul":
        if not (a.rise or b.rise):
            return _Shape(lcm(a.step, b.step), 0, a.nonneg and b.nonneg, start)
        rising, other = (a, e.b) if a.rise else (b, e.a)
        if not (isinstance(other, kir.Const) and other.dtype.is_int) or (a.rise and b.rise):
            return None
        c = other.value
        exact = None if rising.exact is None else (rising.exact[0] * c, rising.exact[1] * c)
        return _Shape(rising.step, rising.rise * c, rising.nonneg and c >= 0, start, exact)
    if e.op in ("div", "mod", "ceildiv") and a.rise:
        if const is None or const <= 0 or not a.nonneg:
            return None
        if e.op == "mod":
            return _Shape(a.step * (const // gcd(a.rise, const)), 0, True, start)
        k = const // gcd(a.rise, const)           # ceildiv: (f + d - 1) / d, same shape
        return _Shape(a.step * k, a.rise * k // const, True, start)
    if e.op in kir.COMPARISONS and (a.rise or b.rise):
        return _settled(a, b, start)
    kept = e.op in kir.COMPARISONS or e.op in ("and", "or") or \
        (e.op in ("xor", "min", "max", "div", "mod", "ceildiv") and a.nonneg and b.nonneg)
    return _periodic([a, b], nonneg=kept)


def _settled(a, b, start):
    """A comparison of p v + q with a constant c: constant once p v + q > c."""
    rising, other = (a, b) if a.rise else (b, a)
    if rising.exact is None or other.exact is None or other.exact[0] or \
            rising.exact[0] <= 0:
        return None
    (p, q), c = rising.exact, other.exact[1]
    return _Shape(1, 0, True, max(start, (c - q) // p + 1, 0))
