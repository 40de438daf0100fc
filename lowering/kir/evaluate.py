"""Evaluation of kernel-IR scalar expressions: the one home of how an expression's value
follows from its operands'. What each operator computes is fuserir.op_table's (on
fuserir.numerics' total integer division and conversions); here is how values flow:

  evaluate_scalar   one thread, Python values, && / || / ?: short-circuit: launch-time
                    extents, sizes and offsets (the CUDA launcher, the interpreter's
                    launch checks, lowering's constant folding, the async proof)
  LaneEvaluator     many lanes at once, numpy values in each node's dtype (an array over
                    the lanes, or a scalar where uniform): the interpreter (a subclass in
                    codegen.interp supplies thread indices, loads and shuffles), the
                    bank-conflict report (lowering.verify.bank_conflicts) and
  evaluate_lanes    the async verifier's per-thread indices (eager, integers only)

Both follow C in the node's dtype, as the emitted CUDA computes: integers wrap to 32 or
64 bits, / and % truncate toward zero, ceildiv is (a + b - 1) / b, a / 0 = 0 and
a % 0 = a; floats compute in their own type, f16/bf16 in f32 rounded once, math
functions in f64 rounded once; casts are numerics.convert. tests/test_evaluate.py pins
that the two agree on every operator they share.

It sits in kir because every layer above evaluates kernel IR: lowering (folding, the
verifiers), codegen (the launcher, the interpreter).
"""

import numpy as np

from fuserir import op_table
from fuserir.dtypes import DataType
from fuserir.numerics import convert

from .expressions import (BinOp, Cast, Const, Load, Select, ShuffleXor, Special, UnOp, Var,
                          format_expr)
from .statements import Allocate, Memory
from .traversal import walk


# ---------------------------------------------------------------------------------------
# One thread (launch-time values)
# ---------------------------------------------------------------------------------------

_INT_BITS = {DataType.i32: 32, DataType.i64: 64}


def _wrap_int(value, dtype):
    """`value` reduced to the two's-complement range of `dtype` (C on the GPU wraps)."""
    if dtype is DataType.bool:
        return bool(value)
    bits = _INT_BITS[dtype]
    value = int(value) & ((1 << bits) - 1)
    return value - (1 << bits) if value >> (bits - 1) else value


def evaluate_scalar(expr, env=None):
    """The value of a launch-time scalar expression (grid/block extents, shared-memory
    sizes and offsets, tensor sizes) given `env`, a {name: value} map of the kernel's
    scalar parameters.

    Integer arithmetic follows C in the node's dtype, exactly as the emitted CUDA computes
    it: / and % truncate toward zero, ceildiv is (a + b - 1) / b, results wrap to 32 or 64
    bits; where C leaves a result undefined, fuserir.numerics defines it (a / 0 = 0,
    a % 0 = a; a cast float -> integer saturates, NaN -> 0), as every backend does. Float
    nodes compute in their numpy type, constants and casts rounded once
    (numerics.convert), as LaneEvaluator and the emitted CUDA do. Returns a
    Python int, bool or numpy float. Thread indices, loads and shuffles have no launch-time
    value: they raise TypeError; a variable missing from `env` raises KeyError.
    """
    env = {} if env is None else env
    if isinstance(expr, Const):
        if expr.dtype is DataType.bool:
            return bool(expr.value)
        if expr.dtype.is_int:
            return _wrap_int(expr.value, expr.dtype)
        return convert(np.float64(expr.value), expr.dtype)
    if isinstance(expr, Var):
        if expr.name not in env:
            raise KeyError(f"no value for scalar {expr.name!r} (have: {sorted(env)})")
        value = env[expr.name]
        if expr.dtype.is_int:
            return _wrap_int(value, expr.dtype)
        if expr.dtype is DataType.bool:
            return bool(value)
        return convert(np.float64(value), expr.dtype)
    if isinstance(expr, Select):
        chosen = expr.a if evaluate_scalar(expr.cond, env) else expr.b
        return evaluate_scalar(chosen, env)
    if isinstance(expr, Cast):
        return _eval_cast(evaluate_scalar(expr.a, env), expr.a.dtype, expr.dtype)
    if isinstance(expr, UnOp):
        return _eval_unop(expr.op, evaluate_scalar(expr.a, env), expr.dtype)
    if isinstance(expr, BinOp):
        if expr.op in ("and", "or"):         # C short-circuits
            a = bool(evaluate_scalar(expr.a, env))
            if a == (expr.op == "or"):
                return a
            return bool(evaluate_scalar(expr.b, env))
        return _eval_binop(expr.op, evaluate_scalar(expr.a, env),
                           evaluate_scalar(expr.b, env), expr.a.dtype, expr.dtype)
    raise TypeError(f"{type(expr).__name__} {format_expr(expr)} has no launch-time value")


def _eval_cast(value, src, dst):
    if dst is DataType.bool:
        return bool(value != 0)
    if dst.is_int:
        if src.is_float:
            return int(convert(src.numpy.type(value), dst))   # saturating
        return _wrap_int(value, dst)
    return convert(src.numpy.type(value), dst)          # rounded once


def _eval_unop(op, a, dtype):
    entry = op_table.UNARY[op]
    if entry.kind == "predicate":
        return bool(op_table.math_unary(op, a))
    if entry.kind == "logical" or dtype is DataType.bool:
        if entry.kind not in ("logical", "bitwise"):
            raise TypeError(f"unary {op} on bool has no launch-time value")
        return bool(entry.meaning(bool(a)))
    if dtype.is_int:
        if entry.kind not in ("exact", "bitwise"):
            raise TypeError(f"unary {op} on {dtype} has no launch-time value")
        return _wrap_int(entry.meaning(np.asarray(a, dtype=dtype.numpy)), dtype)
    t = dtype.numpy.type
    if entry.kind == "exact":
        return t(entry.meaning(t(a)))
    return t(op_table.math_unary(op, a))


def _eval_binop(op, a, b, operand_dtype, dtype):
    entry = op_table.BINARY[op]
    if entry.kind == "compare":
        return bool(entry.meaning(a, b))
    if entry.kind == "logical" or dtype is DataType.bool:
        if entry.kind not in ("logical", "bitwise"):
            raise TypeError(f"binary {op} on bool has no launch-time value")
        return bool(entry.meaning(bool(a), bool(b)))
    if dtype.is_int:
        if entry.integer is None:
            raise TypeError(f"binary {op} on {dtype} has no launch-time value")
        x, y = np.asarray(a, dtype=dtype.numpy), np.asarray(b, dtype=dtype.numpy)
        with np.errstate(over="ignore"):
            return _wrap_int(entry.integer(x, y), dtype)
    if entry.meaning is None or entry.kind in ("integer", "bitwise"):
        raise TypeError(f"binary {op} on {dtype} has no launch-time value")
    t = dtype.numpy.type
    if entry.kind == "math":
        return t(op_table.math_binary(op, a, b))
    with np.errstate(all="ignore"):
        return t(entry.meaning(t(a), t(b)))


# ---------------------------------------------------------------------------------------
# Many lanes at once
# ---------------------------------------------------------------------------------------

_HALF = (DataType.f16.numpy, DataType.bf16.numpy)
_DIVISIONS = ("div", "mod", "ceildiv")


def as_dtype(value, dtype):
    """A numpy value (scalar or array) in DataType `dtype` (numerics.convert; unchanged
    when it already is)."""
    return value if value.dtype == dtype.numpy else convert(value, dtype)


def truth(value):
    """A numpy value as bool (!= 0; unchanged when it already is)."""
    return value if np.asarray(value).dtype == np.bool_ else convert(value, DataType.bool)


def lane_constant(value, dtype):
    """A Python number as the uniform lane value of `dtype`: a numpy scalar, wrapped to
    the integer type's range, a float rounded once (numerics.convert)."""
    if dtype is DataType.bool:
        return np.bool_(bool(value))
    if dtype.is_int:
        return dtype.numpy.type(_wrap_int(value, dtype))
    if dtype.is_state:
        return np.asarray(value, dtype.numpy)[()]
    return convert(np.float64(value), dtype)


class LaneEvaluator:
    """Kernel-IR expressions evaluated for many lanes (threads) at once.

    `ev(e, act)` is e's value for the lanes `act` (an array of lane ids, or None where
    nothing per-lane is in play): a numpy array in e's dtype with one value per lane, or a
    numpy scalar where the value is uniform. The operators are evaluated here; the leaves
    are the subclass's: _var, _special, _load and _shuffle (and _const, which wraps a
    constant to its type), each (self, e, act) -> value. Anything without a value goes to
    _refuse(e, why), which raises (TypeError here; a subclass raises its own error).

    Two switches make up the differences between the users:
      lazy          Select, && and || evaluate an operand only for the lanes that reach
                    it, as C does (`c ? a[i] : 0` loads nothing where !c), narrowing
                    `act`; else both sides for every lane (cheaper, and harmless where no
                    operand can fail: the integer operators are total)
      indices_only  integer and bool values only: a float value, a float cast or
                    arithmetic on bool is refused (index arithmetic has none)
    and _divisor(e, b), called with the divisor of every integer / % ceildiv before it
    divides, may refuse a zero divisor (the bank-conflict report does).
    """

    lazy = True
    indices_only = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._dispatch = _dispatch(cls)

    def ev(self, e, act):
        f = self._dispatch.get(type(e))
        if f is None:
            self._refuse(e, f"cannot evaluate {type(e).__name__}")
        return f(self, e, act)

    def _refuse(self, e, why):
        raise TypeError(why)

    def _divisor(self, e, b):
        pass

    # -- leaves ---------------------------------------------------------------------------

    def _const(self, e, act):
        if self.indices_only and e.dtype.is_float:
            self._refuse(e, f"float constant {format_expr(e)}")
        return lane_constant(e.value, e.dtype)

    def _var(self, e, act):
        self._refuse(e, f"no value for {e.name}")

    def _special(self, e, act):
        self._refuse(e, f"no value for {e.name}")

    def _load(self, e, act):
        self._refuse(e, f"no value for the load {format_expr(e)}")

    def _shuffle(self, e, act):
        self._refuse(e, f"no value for the shuffle {format_expr(e)}")

    # -- operators ------------------------------------------------------------------------

    def _binop(self, e, act):
        op, dt = e.op, e.dtype
        entry = op_table.BINARY.get(op)
        if entry is None:
            self._refuse(e, f"unknown operator {op}")
        if op in ("and", "or"):
            return self._logical(e, act)
        a = self.ev(e.a, act)
        b = self.ev(e.b, act)
        if entry.kind == "logical":
            return entry.meaning(truth(a), truth(b))
        if entry.kind == "state":
            if self.indices_only:
                self._refuse(e, f"operator {op} on {dt}")
            return entry.meaning(a, b)
        if entry.kind == "compare":
            if a.dtype in _HALF:
                a = a.astype(np.float32)
            if b.dtype in _HALF:
                b = b.astype(np.float32)
            return entry.meaning(a, b)
        if dt.is_float:
            if self.indices_only or entry.meaning is None:
                self._refuse(e, f"operator {op} on {dt}")
            if entry.kind == "math":
                return convert(op_table.math_binary(op, a, b), dt)
            work = dt.compute
            r = entry.meaning(as_dtype(a, work), as_dtype(b, work))
            return r if work is dt else convert(r, dt)
        if entry.integer is None:
            self._refuse(e, f"operator {op} on {dt}")
        if dt is DataType.bool:
            if self.indices_only or entry.kind == "integer":
                self._refuse(e, f"operator {op} on bool (integers only)")
            if entry.kind == "bitwise":
                return entry.meaning(truth(a), truth(b))
            return convert(entry.integer(as_dtype(a, DataType.i32),
                                         as_dtype(b, DataType.i32)), dt)
        if op in _DIVISIONS:
            self._divisor(e, b)
        a, b = as_dtype(a, dt), as_dtype(b, dt)
        if type(a) is np.ndarray or type(b) is np.ndarray:
            return entry.integer(a, b)        # numpy arrays wrap silently
        with np.errstate(over="ignore"):      # scalars would warn
            return entry.integer(a, b)

    def _logical(self, e, act):
        a = truth(self.ev(e.a, act))
        is_and = e.op == "and"
        if not self.lazy:
            return (np.logical_and if is_and else np.logical_or)(a, truth(self.ev(e.b, act)))
        if np.ndim(a) == 0:
            if bool(a) != is_and:         # false && ..., true || ...
                return a
            return truth(self.ev(e.b, act))
        need = a if is_and else ~a        # where the right operand decides
        if not need.any():
            return a
        if need.all():
            return truth(self.ev(e.b, act))
        r = a.copy()
        r[need] = truth(self.ev(e.b, act[need]))
        return r

    def _unop(self, e, act):
        a = self.ev(e.a, act)
        op, dt = e.op, e.dtype
        entry = op_table.UNARY.get(op)
        if entry is None:
            self._refuse(e, f"unknown operator {op}")
        if entry.kind == "logical" or (entry.kind == "bitwise" and dt is DataType.bool):
            return convert(entry.meaning(truth(a)), dt)
        if self.indices_only and not (dt.is_int and entry.kind in ("exact", "bitwise")):
            self._refuse(e, f"{op} on {dt}")
        if entry.kind == "state":
            return entry.meaning(a)
        if entry.kind == "predicate":
            return op_table.math_unary(op, a)
        if entry.kind == "bitwise":
            return entry.meaning(as_dtype(a, dt))
        if entry.kind == "exact":
            if dt.is_float:
                work = dt.compute
                r = entry.meaning(as_dtype(a, work))
                return r if work is dt else convert(r, dt)
            with np.errstate(over="ignore"):
                return entry.meaning(as_dtype(a, dt))
        if not dt.is_float:
            self._refuse(e, f"{op} on {dt}")
        return convert(op_table.math_unary(op, convert(a, DataType.f64)), dt)

    def _select(self, e, act):
        c = truth(self.ev(e.cond, act))
        dt = e.dtype
        if not self.lazy:
            return as_dtype(np.where(c, self.ev(e.a, act), self.ev(e.b, act)), dt)
        if np.ndim(c) == 0:
            return as_dtype(self.ev(e.a if c else e.b, act), dt)
        if c.all():
            return as_dtype(self.ev(e.a, act), dt)
        if not c.any():
            return as_dtype(self.ev(e.b, act), dt)
        out = np.empty(len(act), dtype=dt.numpy)
        out[c] = as_dtype(self.ev(e.a, act[c]), dt)          # only where taken, as C's ?:
        out[~c] = as_dtype(self.ev(e.b, act[~c]), dt)
        return out

    def _cast(self, e, act):
        a = self.ev(e.a, act)
        if self.indices_only and (e.a.dtype.is_float or e.dtype.is_float):
            self._refuse(e, f"cast {e.a.dtype} -> {e.dtype}")
        return convert(a, e.dtype)


def _dispatch(cls):
    """{node type: the method of `cls` that evaluates it} (looked up once per class, so
    that a subclass's leaves take part)."""
    return {Const: cls._const, Var: cls._var, Special: cls._special, BinOp: cls._binop,
            UnOp: cls._unop, Select: cls._select, Cast: cls._cast, Load: cls._load,
            ShuffleXor: cls._shuffle}


LaneEvaluator._dispatch = _dispatch(LaneEvaluator)


class _Eager(LaneEvaluator):
    """evaluate_lanes: values of the variables by name from `env`."""

    lazy = False
    indices_only = True

    def __init__(self, env):
        self.env = env

    def _var(self, e, act):
        if e.name not in self.env:
            raise KeyError(f"no value for scalar {e.name!r} (have: {sorted(self.env)})")
        value = self.env[e.name]
        if e.dtype is DataType.bool:
            return np.asarray(value).astype(bool)
        if not e.dtype.is_int:
            self._refuse(e, f"float variable {e.name}")
        if isinstance(value, np.ndarray):
            return value.astype(e.dtype.numpy)        # wraps, as C's conversion
        return lane_constant(value, e.dtype)

    def _refuse(self, e, why):
        raise TypeError(f"{why}: {format_expr(e)} has no per-thread value")


def evaluate_lanes(expr, env):
    """evaluate_scalar for many threads at once: `env`'s values may be numpy integer
    arrays of one shape (a value per thread), and the result is an array of that shape
    (or a scalar, where nothing per-thread reaches it). Integer and bool expressions only,
    with evaluate_scalar's C meaning (a float, a load or a thread index raises TypeError,
    a missing variable KeyError); both sides of and/or and of a select are evaluated,
    which is harmless: integer operators are defined everywhere."""
    return _Eager(env).ev(expr, None)



def shared_bytes(kernel, env=None):
    """Bytes of dynamic shared memory the kernel needs: the end of the furthest shared
    buffer (byte_offset + size * itemsize, evaluated with the scalar values in `env`),
    0 when it has none."""
    end = 0
    for s in walk(kernel.body):
        if isinstance(s, Allocate) and s.buffer.memory is Memory.shared:
            b = s.buffer
            if b.byte_offset is None:
                raise ValueError(f"shared buffer {b.name} ({s.label}) has no byte_offset: "
                                 "the allocation pass places shared buffers")
            start = evaluate_scalar(b.byte_offset, env)
            end = max(end, start + evaluate_scalar(b.size, env) * b.dtype.itemsize)
    return end
