"""Symbolic extents: an axis is an integer long or has a size known only at run time.

Input dimensions are named symbols (M, N, K) bound from the input arrays when a fusion
runs; split factors may be named run-time scalars too. Splits and merges derive new
extents (ceildiv(K, 32), M*N); these small expression trees simplify integer parts at
construction so that printed domains stay readable. Everything is immutable and hashable,
so two extents compare equal exactly when they print the same.
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


def is_const(e):
    return isinstance(e, int)


def ceildiv(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return ceil_div(a, b)
    if b == 1:
        return a
    return CeilDiv(a, b)


def mul(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if a == 1:
        return b
    if b == 1:
        return a
    return Mul(a, b)


def symbols(e):
    """The names of the symbols an extent depends on."""
    if isinstance(e, int):
        return set()
    if isinstance(e, Sym):
        return {e.name}
    if isinstance(e, CeilDiv):
        return symbols(e.numerator) | symbols(e.denominator)
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
    return evaluate(e.lhs, env) * evaluate(e.rhs, env)


def as_extent(value):
    """An int stays an int, a str becomes a Sym; anything else is not an extent."""
    if isinstance(value, bool):
        raise TypeError(f"not an extent: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return Sym(value)
    if isinstance(value, (Sym, CeilDiv, Mul)):
        return value
    raise TypeError(f"not an extent: {value!r}")
