"""Interval arithmetic has one home (lowering.indexing.intervals), used by the index folds'
Ranges (arith.py) and by the 64-bit-index decision's reach (index_bounds.py). Soundness
is what both rely on: every value an expression takes lies in its interval. Checked here
against evaluate_scalar (C's meaning) on random operands and random expressions, for
each operator alone, through Ranges and through reach; and Ranges' answers on the index
shapes its folds use are pinned."""

import random

import pytest

from fuserir.dtypes import DataType
from lowering import kir
from lowering.indexing import intervals
from lowering.indexing.arith import Ranges
from lowering.indexing.index_bounds import reach

import kir_examples as ex

I32, I64 = DataType.i32, DataType.i64
ENDS = [None, -1000, -64, -7, -1, 0, 1, 2, 3, 5, 8, 64, 100, 1000]


def _inside(value, interval):
    lo, hi = interval
    return (lo is None or lo <= value) and (hi is None or value <= hi)


def _random_interval(r):
    lo, hi = r.choice(ENDS), r.choice(ENDS)
    if lo is not None and hi is not None and lo > hi:
        lo, hi = hi, lo
    return (lo, hi)


def _sample(r, interval):
    """A value of `interval` (an unknown end: up to 2000 past the other end)."""
    lo, hi = interval
    if lo is None and hi is None:
        lo, hi = -2000, 2000
    elif lo is None:
        lo = hi - 2000
    elif hi is None:
        hi = lo + 2000
    return r.choice([lo, hi, r.randint(lo, hi)])


def _c_value(op, x, y):
    e = kir.BinOp(op, kir.Const(x, I64), kir.Const(y, I64), I64)
    return kir.evaluate_scalar(e)


@pytest.mark.parametrize("op", sorted(intervals.BINARY))
def test_each_operator_is_sound(op):
    r = random.Random(op)
    for _ in range(2000):
        a, b = _random_interval(r), _random_interval(r)
        result = intervals.BINARY[op](a, b)
        for _ in range(4):
            x, y = _sample(r, a), _sample(r, b)
            assert _inside(_c_value(op, x, y), result), (op, a, b, x, y, result)


def test_unary_operators_and_the_hull_are_sound():
    r = random.Random(1)
    for _ in range(3000):
        a, b = _random_interval(r), _random_interval(r)
        x, y = _sample(r, a), _sample(r, b)
        assert _inside(-x, intervals.neg(a))
        assert _inside(abs(x), intervals.absolute(a))
        assert _inside(x, intervals.hull(a, b)) and _inside(y, intervals.hull(a, b))


def test_the_answers_are_exact_where_index_arithmetic_needs_them():
    assert intervals.div((0, 1000), (8, 16)) == (0, 125)
    assert intervals.ceildiv((1, 1000), (8, 16)) == (1, 125)
    assert intervals.mod((0, None), (64, 64)) == (0, 63)
    assert intervals.mod((0, 10), (64, 64)) == (0, 10)
    assert intervals.mod((-100, 5), (1, 8)) == (-7, 5)
    assert intervals.mul((-2, 3), (-5, 4)) == (-15, 12)
    assert intervals.div((0, None), (0, None)) == (0, None)          # a / 0 = 0
    assert intervals.div((-9, 9), (0, 0)) == (0, 0)
    assert intervals.mod((-9, 4), (-3, 3)) == (-9, 4)                 # a % 0 = a
    assert intervals.xor((0, 5), (0, 9)) == (0, 15)


OPS = ["add", "sub", "mul", "div", "mod", "ceildiv", "min", "max", "xor"]


def _random_expr(r, leaves, depth):
    if depth == 0 or r.random() < 0.25:
        if r.random() < 0.3:
            return kir.Const(r.choice([0, 1, 2, 3, 4, 16, 64, 100, -1, -5]), I64)
        return r.choice(leaves)
    if r.random() < 0.85:
        return kir.BinOp(r.choice(OPS), _random_expr(r, leaves, depth - 1),
                         _random_expr(r, leaves, depth - 1), I64)
    if r.random() < 0.5:
        cond = kir.BinOp("lt", _random_expr(r, leaves, depth - 1), r.choice(leaves),
                         DataType.bool)
        return kir.Select(cond, _random_expr(r, leaves, depth - 1),
                          _random_expr(r, leaves, depth - 1), I64)
    return kir.UnOp(r.choice(["neg", "abs"]), _random_expr(r, leaves, depth - 1), I64)


@pytest.mark.parametrize("seed", range(3))
def test_ranges_are_sound_on_random_expressions(seed):
    r = random.Random(seed)
    for _ in range(500):
        names = ("u", "v", "w")
        leaves = [kir.Var(n, I64) for n in names]
        ranges = Ranges()
        known = {}
        for var in leaves:
            if r.random() < 0.8:
                ranges.vars[id(var)] = known[var.name] = _random_interval(r)
            else:
                known[var.name] = (0, None)          # a size: >= 0
        e = _random_expr(r, leaves, r.randint(1, 4))
        interval = ranges.of(e)
        for _ in range(8):
            values = {n: _sample(r, known[n]) for n in names}
            assert _inside(kir.evaluate_scalar(e, values), interval), \
                (kir.format_expr(e), values, interval)


def _subexpressions(e):
    return [x for x in kir.walk_expr(e) if x.dtype.is_int]


@pytest.mark.parametrize("seed", range(3))
def test_reach_is_sound_on_random_index_expressions(seed):
    """Every integer subexpression of a kernel's index, at every thread, loop value and
    the run's N, lies within reach(kernel)."""
    r = random.Random(seed)
    n, t, i = ex.scalar("N", I64), ex.tid(dtype=I64), kir.Var("i", I64)
    tv = kir.Var("t", I64)
    for _ in range(100):
        index = _random_expr(r, [n.var, t, i], r.randint(1, 4))
        y = ex.tensor("y", DataType.f32, [n.var], is_output=True, index_dtype=I64)
        store = kir.Store(y.buffer, index, kir.Const(1.0, DataType.f32))
        loop = kir.ForLoop(i, kir.Const(5, I64), [store])
        kernel = ex.finish(kir.Kernel("k", [y], [n], [loop],
                                      ex.launch([ex.const(1, I64)], [ex.const(8, I64)]),
                                      I64))
        size = r.choice([0, 1, 7, 100, 3000])
        lo, hi = reach(kernel, {"N": size}, {"y": [1]})
        for thread in range(8):
            for step in range(5):
                values = {"N": size, "i": step, "t": thread}
                for sub in _subexpressions(index):
                    value = kir.evaluate_scalar(_bind_thread(sub, t, tv), values)
                    assert lo <= value <= hi, (kir.format_expr(index), values,
                                               kir.format_expr(sub), (lo, hi))


def _bind_thread(e, t, var):
    """e with threadIdx.x as the variable `var` (evaluate_scalar has no thread)."""
    if e is t:
        return var
    if isinstance(e, kir.BinOp):
        return kir.BinOp(e.op, _bind_thread(e.a, t, var), _bind_thread(e.b, t, var), e.dtype)
    if isinstance(e, kir.UnOp):
        return kir.UnOp(e.op, _bind_thread(e.a, t, var), e.dtype)
    if isinstance(e, kir.Select):
        return kir.Select(_bind_thread(e.cond, t, var), _bind_thread(e.a, t, var),
                          _bind_thread(e.b, t, var), e.dtype)
    return e


def test_ranges_answer_the_index_shapes_the_folds_use_and_nothing_more():
    ranges = Ranges()
    t, k = ex.tid(), kir.Var("k", I32)
    size = kir.Var("N", I32)                         # a size: [0, unknown)
    ranges.specials[(kir.SpecialKind.threadIdx, "x")] = (0, 127)
    ranges.vars[id(k)] = (0, 3)
    c = ex.const
    assert ranges.of(ex.binop("mod", ex.add(ex.mul(t, c(4)), c(3)), c(8))) == (0, 7)
    assert ranges.of(ex.binop("div", ex.add(ex.mul(k, c(64)), ex.binop("mod", t, c(64))),
                              c(64))) == (0, 3)
    assert ranges.of(ex.binop("ceildiv", size, c(128))) == (0, None)
    assert ranges.of(ex.binop("mod", size, c(64))) == (0, 63)
    assert ranges.of(ex.binop("xor", ex.binop("mod", t, c(8)), k)) == (0, 7)
    # a remainder of a non-negative term by one that may be 0 is non-negative and at most
    # the dividend (a % 0 = a): a block index modulo a run-time count of column blocks
    assert ranges.of(ex.binop("mod", t, size)) == (0, 127)
    assert ranges.of(ex.binop("mod", ex.sub(k, size), size)) == (None, None)
    # the folds apply to non-negative terms: a product of a possibly negative term, a
    # min with an unknown lower end stay unknown
    assert ranges.of(ex.mul(ex.sub(k, c(1)), c(4))) == (None, None)
    assert ranges.of(ex.binop("min", ex.sub(k, size), c(4))) == (None, None)
    assert ranges.of(ex.binop("min", size, c(64))) == (0, None)
