"""Kernel-IR expression evaluation has one home (lowering.kir.evaluate): evaluate_scalar for
one thread and kir.LaneEvaluator for many lanes, which evaluate_lanes (the async proof),
the bank-conflict report and the interpreter all use. These tests pin that every one of
them gives C's answer, the answer evaluate_scalar gave before the lane evaluators were
merged into one: on negative operands, division and remainder (by zero too), wrapping,
the bitwise operators and shifts (by amounts C leaves undefined too), integer pow,
selects, && and ||, casts, and per-lane thread indices; and that where a user asks for
lazy evaluation (the interpreter, the bank report), a lane that does not reach an operand
does not evaluate it."""

import random
import types

import numpy as np
import pytest

from codegen.interp.base import InterpError
from codegen.interp.expressions import _Evaluator as InterpEvaluator
from fuserir import op_table
from fuserir.dtypes import DataType
from lowering import kir
from lowering.verify import bank_conflicts

I32, I64, F32, F64, BOOL = (DataType.i32, DataType.i64, DataType.f32, DataType.f64,
                            DataType.bool)
MIN32, MAX32 = -2 ** 31, 2 ** 31 - 1
LANES = 64


def c(value, dtype=I32):
    return kir.Const(value, dtype)


def op(name, a, b, dtype=None):
    if dtype is None:
        dtype = op_table.result_type(op_table.BINARY[name], a.dtype)
    return kir.BinOp(name, a, b, dtype)


A, B, N = kir.Var("a", I32), kir.Var("b", I32), kir.Var("n", I64)
TID = kir.Special(kir.SpecialKind.threadIdx, "x", I32)
TX = kir.Var("tx", I32)          # the thread index as evaluate_lanes gets it (a variable)

# (expression, {variable: value}, C's value)
CASES = [
    (op("div", c(-7), c(2)), {}, -3),
    (op("mod", c(-7), c(2)), {}, -1),
    (op("div", c(7), c(-2)), {}, -3),
    (op("mod", c(7), c(-2)), {}, 1),
    (op("div", A, B), {"a": -9, "b": 4}, -2),
    (op("mod", A, B), {"a": -9, "b": 4}, -1),
    (op("div", A, B), {"a": 5, "b": 0}, 0),               # a / 0 = 0
    (op("mod", A, B), {"a": -5, "b": 0}, -5),             # a % 0 = a
    (op("div", c(MIN32), c(-1)), {}, MIN32),              # wraps
    (op("mod", c(MIN32), c(-1)), {}, 0),
    (op("ceildiv", c(7), c(2)), {}, 4),
    (op("ceildiv", c(-7), c(2)), {}, -3),                 # (a + b - 1) / b
    (op("ceildiv", A, c(128)), {"a": MAX32}, -16777215),  # a + 127 wraps first
    (op("add", c(MAX32), c(1)), {}, MIN32),
    (op("mul", A, A), {"a": 65536}, 0),
    (op("sub", c(MIN32), c(1)), {}, MAX32),
    (kir.UnOp("neg", c(MIN32), I32), {}, MIN32),
    (kir.UnOp("abs", c(-5), I32), {}, 5),
    (op("xor", A, c(5)), {"a": -2}, -5),
    (op("bitand", A, B), {"a": -2, "b": 7}, 6),
    (op("bitor", A, c(8)), {"a": 3}, 11),
    (kir.UnOp("bitnot", A, I32), {"a": 5}, -6),
    (op("shl", A, B), {"a": 3, "b": 30}, -2 ** 31 + 2 ** 30),     # wraps
    (op("shl", A, B), {"a": 3, "b": 32}, 0),                       # past the width: 0
    (op("shl", A, B), {"a": 3, "b": -1}, 0),
    (op("shr", A, B), {"a": -9, "b": 2}, -3),                      # arithmetic
    (op("shr", A, B), {"a": -9, "b": 40}, -1),
    (op("pow", A, B), {"a": 3, "b": 21}, 3 ** 21 - 2 ** 33),       # wraps
    (op("pow", A, B), {"a": -1, "b": -3}, -1),
    (op("pow", A, B), {"a": 2, "b": -1}, 0),
    (op("remainder", A, B), {"a": -7, "b": 3}, 2),
    (op("remainder", A, B), {"a": 7, "b": -3}, -2),
    (op("remainder", A, B), {"a": -7, "b": 0}, -7),
    (op("logical_xor", op("lt", A, B), op("eq", B, c(2))), {"a": 1, "b": 2}, False),
    (op("min", A, B), {"a": -3, "b": 2}, -3),
    (op("max", A, B), {"a": -3, "b": 2}, 2),
    (op("lt", A, B), {"a": -3, "b": 2}, True),
    (op("ge", A, B), {"a": -3, "b": 2}, False),
    (op("and", op("lt", A, B), op("ne", B, c(0))), {"a": 1, "b": 2}, True),
    (op("or", op("gt", A, B), op("eq", B, c(7))), {"a": 1, "b": 2}, False),
    (kir.UnOp("not", op("eq", A, c(0)), BOOL), {"a": 0}, False),
    (kir.Select(op("lt", A, c(0)), kir.UnOp("neg", A, I32), A, I32), {"a": -6}, 6),
    (kir.Select(op("eq", B, c(0)), c(0), op("div", A, B), I32), {"a": 9, "b": 0}, 0),
    (kir.Cast(N, I32), {"n": 2 ** 32 + 5}, 5),
    (kir.Cast(N, I32), {"n": 2 ** 31}, MIN32),
    (kir.Cast(A, I64), {"a": -1}, -1),
    (kir.Cast(A, BOOL), {"a": -1}, True),
    (kir.Cast(op("lt", A, B), I32), {"a": 1, "b": 2}, 1),
    (op("add", N, kir.Cast(A, I64)), {"n": 2 ** 40, "a": -1}, 2 ** 40 - 1),
]


class _Interp(InterpEvaluator):
    """The interpreter's evaluator with a block's thread index (as its execution gives
    one: codegen.interp.execution), over LANES threads."""

    def _special(self, e, act):
        if e.kind is kir.SpecialKind.threadIdx:
            ids = np.arange(LANES, dtype=np.int32)
            return ids if act is None else ids[act]
        return super()._special(e, act)


def _interp(values):
    machine = types.SimpleNamespace(env={}, consts={}, block=(LANES, 1, 1), grid=(1, 1, 1))
    for var in (A, B, N):
        if var.name in values:
            machine.env[var.key] = kir.lane_constant(values[var.name], var.dtype)
    return _Interp(machine)


def _bank(values):
    return bank_conflicts._Evaluator(values, (LANES, 1, 1), (0, 0, 0), (1, 1, 1))


def _per_lane(value):
    return np.broadcast_to(np.asarray(value), (LANES,)).tolist()


@pytest.mark.parametrize("expr, values, want", CASES,
                         ids=[kir.format_expr(e) for e, _, _ in CASES])
def test_every_evaluator_gives_c_s_value(expr, values, want):
    lanes = np.arange(LANES, dtype=np.int64)
    assert kir.evaluate_scalar(expr, values) == want
    assert _per_lane(kir.evaluate_lanes(expr, values)) == [want] * LANES
    try:
        assert _bank(values).value(expr, lanes, {}).tolist() == [want] * LANES
    except bank_conflicts.Unknown as why:      # the report refuses a division by zero
        assert "division by zero" in str(why)
        assert any(kir.evaluate_scalar(x.b, values) == 0 for x in kir.walk_expr(expr)
                   if isinstance(x, kir.BinOp) and x.op in ("div", "mod", "ceildiv"))
    assert _per_lane(_interp(values).ev(expr, lanes)) == [want] * LANES
    assert _interp(values).ev(expr, None) == want


def _random_index(r, depth):
    """A random i32 expression over the thread index and a, b."""
    if depth == 0 or r.random() < 0.25:
        return r.choice([TID, TID, A, B, c(r.choice([0, 1, -1, 3, -7, 32, MAX32, MIN32]))])
    k = r.random()
    if k < 0.6:
        name = r.choice(["add", "sub", "mul", "div", "mod", "ceildiv", "min", "max", "xor"])
        return op(name, _random_index(r, depth - 1), _random_index(r, depth - 1))
    if k < 0.7:
        return kir.UnOp(r.choice(["neg", "abs"]), _random_index(r, depth - 1), I32)
    if k < 0.9:
        cond = op(r.choice(["lt", "ge", "eq", "ne"]), _random_index(r, depth - 1),
                  _random_index(r, depth - 1))
        if r.random() < 0.3:
            cond = op(r.choice(["and", "or"]), cond, op("lt", TID, c(r.randrange(LANES))))
        return kir.Select(cond, _random_index(r, depth - 1), _random_index(r, depth - 1),
                          I32)
    return kir.Cast(kir.Cast(_random_index(r, depth - 1), I64), I32)


def _as_variable(e):
    """e with threadIdx.x as the variable tx (how the async proof binds it)."""
    if e is TID:
        return TX
    if isinstance(e, kir.BinOp):
        return kir.BinOp(e.op, _as_variable(e.a), _as_variable(e.b), e.dtype)
    if isinstance(e, kir.UnOp):
        return kir.UnOp(e.op, _as_variable(e.a), e.dtype)
    if isinstance(e, kir.Select):
        return kir.Select(_as_variable(e.cond), _as_variable(e.a), _as_variable(e.b),
                          e.dtype)
    if isinstance(e, kir.Cast):
        return kir.Cast(_as_variable(e.a), e.dtype)
    return e


@pytest.mark.parametrize("seed", range(4))
def test_per_lane_values_are_the_scalar_value_of_each_thread(seed):
    r = random.Random(seed)
    lanes = np.arange(LANES, dtype=np.int64)
    for _ in range(150):
        e = _random_index(r, r.randint(1, 4))
        values = {"a": r.choice([5, -3, 0, MAX32, MIN32]), "b": r.choice([2, -2, 0, 7])}
        want = [kir.evaluate_scalar(_as_variable(e), {**values, "tx": t})
                for t in range(LANES)]
        text = kir.format_expr(e)
        got = kir.evaluate_lanes(_as_variable(e), {**values, "tx": lanes})
        assert _per_lane(got) == want, text
        assert _per_lane(_interp(values).ev(e, lanes)) == want, text
        odd = lanes[1::2]                     # the interpreter's active set: some threads
        assert _per_lane_of(_interp(values).ev(e, odd), odd) == want[1::2], text
        try:
            bank = _bank(values).value(e, lanes, {}).tolist()
        except bank_conflicts.Unknown as why:    # a lane divides by zero
            assert "division by zero" in str(why), text
        else:
            assert bank == want, text


def _per_lane_of(value, act):
    return np.broadcast_to(np.asarray(value), act.shape).tolist()


def test_lazy_users_do_not_evaluate_what_a_lane_does_not_reach():
    lanes = np.arange(LANES, dtype=np.int64)
    guarded = kir.Select(op("gt", TID, c(0)), op("div", c(100), TID), c(-1), I32)
    want = [-1] + [100 // t for t in range(1, LANES)]
    # the bank report refuses a division by zero, but lane 0 never divides here
    assert _bank({}).value(guarded, lanes, {}).tolist() == want
    assert _interp({}).ev(guarded, lanes).tolist() == want
    with pytest.raises(bank_conflicts.Unknown, match="division by zero"):
        _bank({}).value(op("div", c(100), TID), lanes, {})
    # && does not evaluate its right side where the left is false: no load happens
    buf = kir.Buffer("g", F32, kir.Memory.global_, c(LANES))
    load = kir.Load(buf, TID)
    short = op("and", op("lt", TID, c(0)), op("gt", load, c(0.0, F32)))
    assert not _interp({}).ev(short, lanes).any()
    with pytest.raises(InterpError, match="load of g outside a block"):
        _interp({}).ev(op("and", op("ge", TID, c(0)), op("gt", load, c(0.0, F32))), lanes)
    # evaluate_lanes is eager (both sides of a select, for every lane): harmless on the
    # integer operators, which are total
    eager = kir.Select(op("gt", TX, c(0)), op("div", c(100), TX), c(-1), I32)
    assert kir.evaluate_lanes(eager, {"tx": lanes}).tolist() == want


FLOATS = [
    (op("add", c(1.5, F32), c(2.25, F32)), np.float32(3.75)),
    (op("div", c(1.0, F32), c(3.0, F32)), np.float32(1) / np.float32(3)),
    (op("div", c(1.0, F64), c(3.0, F64)), 1.0 / 3.0),
    (op("mod", c(-7.5, F32), c(2.0, F32)), np.float32(-1.5)),
    (op("max", c(-0.0, F32), c(0.0, F32)), np.float32(0.0)),
    (kir.UnOp("exp", c(1.0, F32), F32), np.float32(np.exp(1.0))),
    (kir.UnOp("relu", c(-2.0, F64), F64), 0.0),
    (kir.Cast(c(3.9e9, F64), I32), MAX32),                  # saturates
    (kir.Cast(c(-2.5, F32), I32), -2),
    (kir.Cast(A, F32), np.float32(-3.0)),
    # rounded once to nearest even (fuserir.numerics.convert): just above the halfway
    # point between two bf16 values, so rounding through f32 first would land on the tie
    # and round down to 1.0
    (kir.Cast(c(1 + 2 ** -8 + 2 ** -30, F64), DataType.bf16), 1 + 2 ** -7),
    (c(1 + 2 ** -8 + 2 ** -30, DataType.bf16), 1 + 2 ** -7),
    (kir.Cast(N, DataType.f16), np.float16(65504.0)),
]


@pytest.mark.parametrize("expr, want", FLOATS, ids=[kir.format_expr(e) for e, _ in FLOATS])
def test_the_interpreter_and_launch_time_evaluation_agree_on_floats(expr, want):
    scalar = kir.evaluate_scalar(expr, {"a": -3, "n": 65519})
    lanes = _interp({"a": -3, "n": 65519}).ev(expr, None)
    assert scalar == want and lanes == want
    assert np.asarray(lanes).dtype == expr.dtype.numpy


def test_index_evaluators_refuse_floats_and_the_interpreter_its_malformed_constants():
    lanes = np.arange(4, dtype=np.int64)
    f = op("add", c(1.0, F32), c(2.0, F32))
    with pytest.raises(TypeError):
        kir.evaluate_lanes(f, {})
    with pytest.raises(bank_conflicts.Unknown, match="float constant"):
        _bank({}).value(f, lanes, {})
    with pytest.raises(TypeError):
        kir.evaluate_lanes(kir.Var("x", F32), {"x": 1.0})
    with pytest.raises(KeyError):
        kir.evaluate_lanes(A, {})
    # a constant that does not fit its type: launch-time evaluation wraps it (as C's
    # conversion of the literal would), the interpreter refuses the kernel
    big = c(2 ** 31)
    assert kir.evaluate_scalar(big) == MIN32
    assert kir.evaluate_lanes(big, {}) == MIN32
    with pytest.raises(InterpError, match="does not fit i32"):
        _interp({}).ev(big, None)
