"""Symbolic extents: an axis is an integer long or has a size known only at run time.

Input dimensions are named symbols (M, N, K) bound from the input arrays when a fusion
runs; split factors may be named run-time scalars too. Splits and merges derive new
extents (ceildiv(K, 32), M*N); these small expression trees simplify integer parts at
construction so that printed domains stay readable. Slices, pads and cats add and subtract
sizes (N - 2, N + M, D - D / 2): a sum is kept as a Linear form (integer multiples of
terms plus a constant, in a canonical order), so that (D - D / 2) + D / 2 is D again, and
`/` of sizes is floor division (FloorDiv). Everything is immutable and hashable, so two
extents compare equal exactly when they print the same.
"""

from dataclasses import dataclass

from ..numerics import ceil_div


@dataclass(frozen=True)
class Sym:
    """A named run-time size: an input dimension or a named split factor."""

    name: str

    def __str__(self):
        return self.name


@dataclass(frozen=True)
class CeilDiv:
    numerator: object
    denominator: object

    def __str__(self):
        return f"ceildiv({self.numerator}, {self.denominator})"


@dataclass(frozen=True)
class Mul:
    lhs: object
    rhs: object

    def __str__(self):
        return f"{self.lhs}*{self.rhs}"


@dataclass(frozen=True)
class FloorDiv:
    """numerator / denominator, rounded down (sizes are never negative)."""

    numerator: object
    denominator: object

    def __str__(self):
        return f"{_operand_text(self.numerator)} / {_operand_text(self.denominator)}"


@dataclass(frozen=True)
class Linear:
    """sum(coefficient * term) + const: terms are extents other than ints and Linear
    forms, each once, in the order of their text; no coefficient is 0."""

    terms: tuple          # ((term, coefficient), ...)
    const: int = 0

    def __str__(self):
        text = ""
        for term, c in self.terms:
            sign = "-" if c < 0 else "+"
            piece = _operand_text(term) if abs(c) == 1 else f"{abs(c)}*{_operand_text(term)}"
            text = (f"-{piece}" if sign == "-" else piece) if not text else \
                f"{text} {sign} {piece}"
        if self.const:
            text += f" {'-' if self.const < 0 else '+'} {abs(self.const)}"
        return text


def _operand_text(e):
    """An extent as an operand of / or *: parenthesized where it is a sum."""
    return f"({e})" if isinstance(e, Linear) else str(e)


def _linear(e):
    """({term: coefficient}, const) of an extent."""
    if isinstance(e, int):
        return {}, e
    if isinstance(e, Linear):
        return dict(e.terms), e.const
    return {e: 1}, 0


def _from_linear(terms, const):
    terms = {t: c for t, c in terms.items() if c}
    if not terms:
        return const
    if const == 0 and len(terms) == 1:
        (term, c), = terms.items()
        if c == 1:
            return term
    return Linear(tuple(sorted(terms.items(), key=lambda tc: str(tc[0]))), const)


def add(a, b):
    """a + b, simplified (a Linear form, or an int or a single term where it is one)."""
    ta, ca = _linear(a)
    tb, cb = _linear(b)
    for t, c in tb.items():
        ta[t] = ta.get(t, 0) + c
    return _from_linear(ta, ca + cb)


def scale(a, factor):
    """factor * a for an integer factor, as a Linear form."""
    terms, const = _linear(a)
    return _from_linear({t: c * factor for t, c in terms.items()}, const * factor)


def sub(a, b):
    return add(a, scale(b, -1))


def floordiv(a, b):
    """a / b rounded down; b a positive integer or a size."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    if b == 1:
        return a
    return FloorDiv(a, b)


def is_const(e):
    return isinstance(e, int)


def ceildiv(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return ceil_div(a, b)
    if b == 1:
        return a
    return CeilDiv(a, b)


def mul(a, b):
    """a * b, simplified: an integer factor scales (a Linear form, as `8*N` parses), a
    product of two sizes is a Mul."""
    if isinstance(a, int):
        return scale(b, a)
    if isinstance(b, int):
        return scale(a, b)
    return Mul(a, b)


def symbols(e):
    """The names of the symbols an extent depends on."""
    if isinstance(e, int):
        return set()
    if isinstance(e, Sym):
        return {e.name}
    if isinstance(e, (CeilDiv, FloorDiv)):
        return symbols(e.numerator) | symbols(e.denominator)
    if isinstance(e, Linear):
        return set().union(*(symbols(t) for t, _ in e.terms))
    return symbols(e.lhs) | symbols(e.rhs)


def evaluate(e, env):
    """The integer value of extent `e` with symbols bound by `env` (name -> int)."""
    if isinstance(e, int):
        return e
    if isinstance(e, Sym):
        if e.name not in env:
            raise KeyError(e.name)
        return int(env[e.name])
    if isinstance(e, CeilDiv):
        return ceil_div(evaluate(e.numerator, env), evaluate(e.denominator, env))
    if isinstance(e, FloorDiv):
        return evaluate(e.numerator, env) // evaluate(e.denominator, env)
    if isinstance(e, Linear):
        return sum(c * evaluate(t, env) for t, c in e.terms) + e.const
    return evaluate(e.lhs, env) * evaluate(e.rhs, env)


def as_extent(value):
    """An int stays an int, a str becomes a Sym; anything else is not an extent."""
    if isinstance(value, bool):
        raise TypeError(f"not an extent: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return Sym(value)
    if isinstance(value, EXTENTS):
        return value
    raise TypeError(f"not an extent: {value!r}")


EXTENTS = (Sym, CeilDiv, Mul, FloorDiv, Linear)   # the symbolic kinds (an int is the other)
