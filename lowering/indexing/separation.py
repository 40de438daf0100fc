"""Which blocks of a grid can never touch the same element through two index expressions:
the block indices an index separates, shown symbolically, for every grid size.

An index is read as a polynomial over atoms: `index = sum over axes a of C_a * blockIdx.a
+ rest` (`linear_in_blocks`), where each coefficient C_a is a polynomial over sizes (the
kernel's scalar parameters, and ceildiv / div / mod / min / max of them: the atoms) and
the rest holds no block index. Given the range [lo, hi] of the elements the rest reaches
(its caller evaluates it over the threads and iterations that compute it, plus a vector's
width), two such indices with the same coefficients separate their axes when those nest
as mixed-radix digits in some order a1, a2, ...:

    0 <= lo,  hi < C_a1,  C_a2 >= C_a1 * gridDim.a1,  C_a3 >= C_a2 * gridDim.a2, ...

then index = rest + sum C_a * blockIdx.a is one-to-one in (rest, blockIdx), so blocks that
differ in any of those axes touch different elements. The inequalities are shown for
every value of the sizes: a polynomial is at least k when its coefficients (but the
constant) are non-negative and its value with every atom at its least (1 for a size and a
ceildiv of sizes, 0 for the other atoms) is at least k. Sizes are at least 1 (a zero size
launches nothing).

It sits in indexing/ with the other index arithmetic; lowering.verify.grid_protocol asks it
which blocks of different tiles may meet in a workspace.
"""

import itertools
from dataclasses import dataclass

from .. import kir

AXES = "xyz"


class NotLinear(Exception):
    """The index holds a block index inside an operator other than + - * (or a size
    atom holds a thread index or a loop variable)."""


def polynomial(expr, atoms, inside=""):
    """expr as {monomial: coefficient}, a monomial a sorted tuple of atom keys (blockIdx.a
    is the atom "block.a"); operators other than + - * and integer casts are atoms, kept
    by key in `atoms`, and may not hold a block index but those of the axes `inside`."""
    if isinstance(expr, kir.Const):
        return {(): int(expr.value)}
    if isinstance(expr, kir.Cast) and expr.dtype.is_int and expr.a.dtype.is_int:
        return polynomial(expr.a, atoms, inside)
    if isinstance(expr, kir.BinOp) and expr.op in ("add", "sub", "mul"):
        a, b = polynomial(expr.a, atoms, inside), polynomial(expr.b, atoms, inside)
        if expr.op == "mul":
            return times(a, b)
        return plus(a, b, 1 if expr.op == "add" else -1)
    if isinstance(expr, kir.Special) and expr.kind is kir.SpecialKind.blockIdx:
        return {(f"block.{expr.axis}",): 1}
    if any(isinstance(x, kir.Special) and x.kind is kir.SpecialKind.blockIdx
           and x.axis not in inside for x in kir.walk_expr(expr)):
        raise NotLinear(kir.format_expr(expr))
    key = kir.format_expr(expr)
    atoms[key] = expr
    return {(key,): 1}


def plus(p, q, sign=1):
    out = dict(p)
    for m, c in q.items():
        out[m] = out.get(m, 0) + sign * c
    return {m: c for m, c in out.items() if c}


def times(p, q):
    out = {}
    for (ma, ca), (mb, cb) in itertools.product(p.items(), q.items()):
        m = tuple(sorted(ma + mb))
        out[m] = out.get(m, 0) + ca * cb
    return {m: c for m, c in out.items() if c}


@dataclass
class Linear:
    """An index as sum C_a * blockIdx.a + rest (polynomials over `atoms`)."""
    coeffs: dict              # axis -> polynomial, only the axes present
    rest: dict
    atoms: dict               # atom key -> its kir expression


def linear_in_blocks(index, inside=""):
    """The index's Linear form, or None where a block index is not a linear term (but
    those of the axes `inside`, which may also sit in the rest's atoms: the caller
    evaluates those over the axis's values)."""
    atoms = {}
    try:
        p = polynomial(index, atoms, inside)
    except NotLinear:
        return None
    coeffs, rest = {}, {}
    for m, c in p.items():
        blocks = [a for a in m if a.startswith("block.")]
        if len(blocks) > 1:
            return None
        if blocks:
            mono = tuple(a for a in m if a != blocks[0])
            coeffs.setdefault(blocks[0][-1], {})[mono] = c
        else:
            rest[m] = c
    return Linear(coeffs, rest, atoms)


@dataclass
class Span:
    """An index's block coefficients and the elements its rest reaches, lo..hi."""
    coeffs: dict
    lo: int
    hi: int


class Grid:
    """The grid's extents as polynomials over the kernel's sizes, and the least value of
    each size atom."""

    def __init__(self, kernel, fixed=None):
        self.params = {p.var.name for p in kernel.scalar_params}
        self.fixed = dict(fixed or {})      # sizes of known value: {name: int}
        self.atoms = {}
        self.extents = {a: polynomial(e, self.atoms) for a, e in zip(AXES, kernel.launch.grid)}

    def floor(self, expr):
        """The least value of a size atom: its value where every size in it is fixed,
        else 1 (a size, or a ceildiv, product or sum of sizes), 0 (a quotient,
        remainder, min or max of sizes), None (anything else: a thread index, a loop
        variable, a difference)."""
        if self.fixed and expr is not None:
            try:
                return int(kir.evaluate_scalar(expr, self.fixed))
            except (KeyError, TypeError):
                pass
        if isinstance(expr, kir.Var):
            return 1 if expr.name in self.params else None
        if isinstance(expr, kir.Const) and expr.dtype.is_int:
            return int(expr.value) if expr.value >= 0 else None
        if isinstance(expr, kir.BinOp) and expr.op in ("ceildiv", "add", "mul", "div", "mod",
                                                       "min", "max"):
            a, b = self.floor(expr.a), self.floor(expr.b)
            if a is None or b is None:
                return None
            if expr.op == "add":
                return a + b
            if expr.op == "mul":
                return a * b
            if expr.op == "ceildiv":
                return 1 if a >= 1 and b >= 1 else 0
            return 0
        return None

    def at_least(self, p, k, atoms):
        """Is polynomial p >= k for every value of the sizes?"""
        least = 0
        for m, c in p.items():
            if m and c < 0:
                return False
            term = c
            for a in m:
                f = self.floor(atoms.get(a, self.atoms.get(a)))
                if f is None:
                    return False
                term *= f
            least += term
        return least >= k

    def separated(self, a, b, atoms):
        """The block axes that keep two accesses' elements apart (their Spans over one
        `atoms`), or () where nothing is shown."""
        if a is None or b is None or not a.coeffs or a.coeffs.keys() != b.coeffs.keys():
            return ()
        if any(plus(a.coeffs[x], b.coeffs[x], -1) for x in a.coeffs):
            return ()
        if min(a.lo, b.lo) < 0:
            return ()
        hi = max(a.hi, b.hi)
        for order in itertools.permutations(a.coeffs):
            if self._nests(order, a.coeffs, hi, atoms):
                return tuple(order)
        return ()

    def _nests(self, order, coeffs, hi, atoms):
        if not self.at_least(coeffs[order[0]], hi + 1, atoms):
            return False
        for prev, nxt in zip(order, order[1:]):
            need = times(coeffs[prev], self.extents[prev])
            if not self.at_least(plus(coeffs[nxt], need, -1), 0, atoms):
                return False
        return True
