"""Integer index arithmetic: value ranges and the simplifications they allow.

Index expressions come from replaying splits and merges, so they are full of
`(x * 256 + y) % 256` and `(x * 64 + y) / 64`. C's / and % truncate toward zero, so these
only simplify when the operands are known non-negative, which index terms are: thread and
block indices, loop variables and sizes are >= 0. `Ranges` computes an interval per
expression (None where unbounded) from what lowering knows (loop extents, block
dimensions), with the interval arithmetic of lowering.indexing.intervals, and
`simplify_binop` applies the identities that hold for non-negative operands and a
positive constant divisor c:

    (c*q + r) / c  ->  q + r / c          (c*q + r) % c  ->  r % c
    r / c -> 0 and r % c -> r  when 0 <= r < c
    (x % (k*c)) % c -> x % c              (x / a) / b -> x / (a*b)
    (g*q + s) / (g*m) -> (g*q) / (g*m)    (g*q + s) % (g*m) -> (g*q) % (g*m) + s
                                          when 0 <= s < g
    (g*q + s) ^ r -> g*q + (s ^ r)        when g is a power of two, 0 <= s, r < g

The last pair keeps a vector's lane (s, 0 <= s < w) out of the divisions of a split or
swizzle by a multiple of w, so that an index comes out as `base + lane`: that form is how
lowering proves a vectorized copy contiguous (lowering.passes.indexing).

This is more than cosmetics: an index into a register array must fold to a constant once
loops are unrolled, or the array is demoted to (slow) local memory, and nvcc cannot do
these folds on signed integers itself.
"""

import math

from .. import kir
from . import intervals


class Ranges:
    """Intervals of integer index expressions: (lo, hi), either end None if unknown (how
    each operator acts on them: lowering.indexing.intervals)."""

    def __init__(self):
        self.vars = {}        # id(Var) -> (lo, hi)
        self.specials = {}    # (kind, axis) -> (lo, hi)

    def of(self, e):
        if isinstance(e, kir.Const):
            return (e.value, e.value) if isinstance(e.value, int) else (None, None)
        if isinstance(e, kir.Var):
            return self.vars.get(id(e), (0, None))       # sizes and scalars are >= 0
        if isinstance(e, kir.Special):
            return self.specials.get((e.kind, e.axis), (0, None))
        if not isinstance(e, kir.BinOp) or not e.dtype.is_int:
            return (None, None)
        a, b = self.of(e.a), self.of(e.b)
        if not _answered(e.op, a, b):
            return (None, None)
        return intervals.BINARY[e.op](a, b)

    def nonneg(self, e):
        return _nonneg(self.of(e)[0])


def _nonneg(x):
    return x is not None and x >= 0


def _answered(op, a, b):
    """Whether Ranges answers `a op b` (else it is unknown): sums and differences; a
    product, quotient or xor of non-negative terms, a remainder of one by a non-negative
    term (a % 0 = a: still non-negative), a min or max of terms with known lower bounds.
    That is all the folds need (they apply to non-negative index terms only), and where
    these give up, no fold is made."""
    if op in ("add", "sub"):
        return True
    if op in ("min", "max"):
        return a[0] is not None and b[0] is not None
    if op == "mod":
        return _nonneg(a[0]) and _nonneg(b[0])
    return op in ("mul", "div", "ceildiv", "xor") and _nonneg(a[0]) and _nonneg(b[0])


def addends(e):
    """The addends of a sum."""
    if isinstance(e, kir.BinOp) and e.op == "add":
        return addends(e.a) + addends(e.b)
    return [e]


def _quotient(e, c):
    """e / c when e is a known multiple of c (else None)."""
    if isinstance(e, kir.Const) and isinstance(e.value, int) and e.value % c == 0:
        return kir.Const(e.value // c, e.dtype)
    if isinstance(e, kir.BinOp) and e.op == "mul":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, kir.Const) and isinstance(y.value, int) and y.value % c == 0:
                k = y.value // c
                return x if k == 1 else kir.BinOp("mul", x, kir.Const(k, y.dtype), e.dtype)
    return None


def known_factor(e):
    """A constant that e is known to be a multiple of (0 for the constant 0: a multiple
    of everything; 1 when nothing is known)."""
    if isinstance(e, kir.Const) and isinstance(e.value, int):
        return abs(e.value)
    if isinstance(e, kir.BinOp) and e.op == "mul":
        return known_factor(e.a) * known_factor(e.b)
    if isinstance(e, kir.BinOp) and e.op == "add":
        return math.gcd(known_factor(e.a), known_factor(e.b))
    if isinstance(e, kir.BinOp) and e.op == "mod" and isinstance(e.b, kir.Const) and \
            isinstance(e.b.value, int) and e.b.value > 0:
        return math.gcd(known_factor(e.a), e.b.value)
    return 1


def _split_low(terms, g, ranges, build, dtype):
    """(sum of the terms that are known multiples of g, sum of the others) where the
    others are non-negative and sum to less than g; None where the terms do not split so."""
    large = [t for t in terms if known_factor(t) % g == 0]
    small = [t for t in terms if known_factor(t) % g != 0]
    highs = [ranges.of(t)[1] for t in small]
    if not large or not small or None in highs or sum(highs) >= g or \
            not all(ranges.nonneg(t) for t in small):
        return None
    big, part = kir.Const(0, dtype), kir.Const(0, dtype)
    for t in large:
        big = build("add", big, t)
    for t in small:
        part = build("add", part, t)
    return big, part


def _drop_small_part(op, terms, c, ranges, build, dtype):
    """(g*q + s) / c -> (g*q) / c and (g*q + s) % c -> (g*q) % c + s, where g divides c,
    the large terms are multiples of g and the small ones sum to [0, g). None if no such
    split exists."""
    for g in sorted({math.gcd(c, known_factor(t)) for t in terms}, reverse=True):
        if g <= 1:
            break
        split = _split_low(terms, g, ranges, build, dtype)
        if split is not None:
            big, part = split
            divided = build(op, big, kir.Const(c, dtype))
            return divided if op == "div" else build("add", divided, part)
    return None


def _xor_low_bits(a, b, ranges, build, dtype):
    """(g*q + s) ^ r -> g*q + (s ^ r) for g a power of two, 0 <= s, r < g: the xor only
    touches the low bits (an XOR swizzle's chunk index, whose row part is a multiple of
    the chunks per row). None if a does not split so."""
    r_lo, r_hi = ranges.of(b)
    if r_lo is None or r_lo < 0 or r_hi is None or not ranges.nonneg(a):
        return None
    split = _split_low(addends(a), 1 << max(r_hi, 1).bit_length(), ranges, build, dtype)
    if split is None:
        return None
    big, part = split
    return build("add", big, kir.BinOp("xor", part, b, dtype))


def simplify_binop(op, a, b, ranges, build):
    """A simpler expression equal to `a op b`, or None. `build(op, a, b)` makes (and
    simplifies) sub-expressions."""
    if op == "xor":
        return _xor_low_bits(a, b, ranges, build, b.dtype)
    if op not in ("div", "mod") or not isinstance(b, kir.Const) or \
            not isinstance(b.value, int) or b.value <= 0 or not ranges.nonneg(a):
        return None
    c = b.value
    lo, hi = ranges.of(a)
    if hi is not None and hi < c:
        return a if op == "mod" else kir.Const(0, b.dtype)
    if op == "div" and isinstance(a, kir.BinOp) and a.op == "div" and \
            isinstance(a.b, kir.Const) and isinstance(a.b.value, int) and a.b.value > 0:
        return build("div", a.a, kir.Const(a.b.value * c, b.dtype))
    if op == "mod" and isinstance(a, kir.BinOp) and a.op == "mod" and \
            isinstance(a.b, kir.Const) and isinstance(a.b.value, int) and \
            a.b.value % c == 0:
        return build("mod", a.a, b)
    terms = addends(a)
    if len(terms) < 2 or not all(ranges.nonneg(t) for t in terms):
        single = _quotient(a, c)
        if single is not None:
            return single if op == "div" else kir.Const(0, b.dtype)
        return None
    multiples = [(t, _quotient(t, c)) for t in terms]
    whole = [q for _, q in multiples if q is not None]
    rest = [t for t, q in multiples if q is None]
    if not whole:
        return _drop_small_part(op, terms, c, ranges, build, b.dtype)
    remainder = kir.Const(0, b.dtype)
    for t in rest:
        remainder = build("add", remainder, t)
    if op == "mod":
        return build("mod", remainder, b)
    total = build("div", remainder, b)
    for q in whole:
        total = build("add", q, total)
    return total
