"""Expression evaluation, vectorised over the active threads. What each BinOp and UnOp
computes is fuserir.op_table's meaning; this module applies it in the interpreter's
computing types and evaluation order.

  * Every scalar expression evaluates to a numpy array over `act` (or a numpy scalar when
    it is uniform). Select and && / || evaluate their operands lazily, as the emitted C
    does (`c ? a[i] : 0` does not load a[i] where !c).
  * Arithmetic: every BinOp/UnOp computes in its node's dtype. f16/bf16 arithmetic is done
    in f32 and rounded once (exact for + - * /); transcendental functions in f64, rounded
    to the node's dtype. min/max/relu are spelled as codegen.cuda's preamble spells them
    (NaN propagates). Integer math wraps like the GPU, / and % truncate toward zero
    (C), ceildiv is (a + b - 1) / b; by zero, a / 0 = 0 and a % 0 = a, and MIN / -1 wraps
    to MIN (fuserir.numerics, which the CUDA emitter spells out). Casts follow kir.Cast
    (fuserir.numerics.convert): float->int truncates (saturating, NaN -> 0, as cvt.rzi
    does), to bool is != 0, narrowing floats round to nearest even exactly once (f64->bf16
    by round-to-odd through f32). The interpreter is more lenient than
    the CUDA emitter about types: a stored value or operand of another dtype is converted
    with Cast semantics rather than refused.

_Evaluator alone (no block: the launch configuration, allocation sizes) evaluates
constants, parameters and arithmetic; a block (execution.py) adds thread and block
indices, loads and shuffles. _EVAL, at the end, dispatches on the node's type.
"""

import numpy as np

from codegen.interp.base import _F32, _HALF, InterpError, _const, _point, _to, _truth
from fuserir import op_table
from fuserir.dtypes import DataType
from fuserir.numerics import convert
from lowering import kir

class _Evaluator:
    """Evaluates scalar expressions; without a block (launch configuration, allocation
    sizes) only constants, parameters and arithmetic are allowed."""

    def __init__(self, interp):
        self.interp = interp
        self.env = interp.env
        self.stmt = None

    def where(self):
        return f" in {_point(self.stmt)}" if self.stmt is not None else ""

    def ev(self, e, act):
        try:
            f = _EVAL[type(e)]
        except KeyError:
            raise InterpError(f"the interpreter cannot evaluate {type(e).__name__}"
                              f"{self.where()}") from None
        return f(self, e, act)

    def uniform(self, e, what):
        if e is None:
            raise InterpError(f"{what} is not set")
        v = self.ev(e, None)
        if np.ndim(v) != 0:
            raise InterpError(f"{what} is not uniform")
        return v

    def _const(self, e, act):
        c = self.interp.consts.get(e)
        if c is None:
            c = self.interp.consts[e] = _const(e.value, e.dtype)
        return c

    def _var(self, e, act):
        try:
            return self.env[e.key]
        except KeyError:
            raise InterpError(f"unbound variable {e.name}{self.where()}") from None

    def _special(self, e, act):
        if e.kind is kir.SpecialKind.blockDim:
            return _const(self.interp.block["xyz".index(e.axis)], e.dtype)
        if e.kind is kir.SpecialKind.gridDim:
            return _const(self.interp.grid["xyz".index(e.axis)], e.dtype)
        raise InterpError(f"{e.name} used outside a block{self.where()}")

    def _binop(self, e, act):
        op, dt = e.op, e.dtype
        entry = op_table.BINARY.get(op)
        if entry is not None and entry.kind == "logical":
            return self._logical(e, act)
        a = self.ev(e.a, act)
        b = self.ev(e.b, act)
        if entry is not None and entry.kind == "compare":
            if a.dtype in _HALF:
                a = a.astype(_F32)
            if b.dtype in _HALF:
                b = b.astype(_F32)
            return entry.meaning(a, b)
        if dt.is_float:
            work = DataType.f32 if dt.numpy in _HALF else dt
            a, b = _to(a, work), _to(b, work)
            if entry is None or entry.meaning is None:
                raise InterpError(f"operator {op} on {dt}{self.where()}")
            r = entry.meaning(a, b)
            return r if work is dt else convert(r, dt)
        if entry is None or entry.integer is None:
            raise InterpError(f"unknown operator {op}{self.where()}")
        if dt is DataType.bool:
            if op == "xor":
                raise InterpError(f"xor on bool (integers only){self.where()}")
            ai, bi = _to(a, DataType.i32), _to(b, DataType.i32)
            return convert(entry.integer(ai, bi), dt)
        return entry.integer(_to(a, dt), _to(b, dt))

    def _logical(self, e, act):
        a = _truth(self.ev(e.a, act))
        is_and = e.op == "and"
        if np.ndim(a) == 0:
            if bool(a) != is_and:         # false && ..., true || ...
                return a
            return _truth(self.ev(e.b, act))
        need = a if is_and else ~a        # where the right operand decides
        if not need.any():
            return a
        if need.all():
            return _truth(self.ev(e.b, act))
        r = a.copy()
        r[need] = _truth(self.ev(e.b, act[need]))
        return r

    def _unop(self, e, act):
        a = self.ev(e.a, act)
        op, dt = e.op, e.dtype
        entry = op_table.UNARY.get(op)
        if entry is None:
            raise InterpError(f"unknown operator {op}{self.where()}")
        if entry.kind == "logical":
            return convert(entry.meaning(_truth(a)), dt)
        if entry.kind == "exact":
            if dt.is_float:
                work = DataType.f32 if dt.numpy in _HALF else dt
                r = entry.meaning(_to(a, work))
                return r if work is dt else convert(r, dt)
            return entry.meaning(_to(a, dt))
        if not dt.is_float:
            raise InterpError(f"{op} on {dt}{self.where()}")
        return convert(op_table.math_unary(op, convert(a, DataType.f64)), dt)

    def _select(self, e, act):
        c = _truth(self.ev(e.cond, act))
        dt = e.dtype
        if np.ndim(c) == 0:
            return _to(self.ev(e.a if c else e.b, act), dt)
        if c.all():
            return _to(self.ev(e.a, act), dt)
        if not c.any():
            return _to(self.ev(e.b, act), dt)
        out = np.empty(len(act), dtype=dt.numpy)
        out[c] = _to(self.ev(e.a, act[c]), dt)          # only where taken, as C's ?:
        out[~c] = _to(self.ev(e.b, act[~c]), dt)
        return out

    def _cast(self, e, act):
        return convert(self.ev(e.a, act), e.dtype)

    def _load(self, e, act):
        raise InterpError(f"load of {e.buffer.name} outside a block{self.where()}")

    def _shuffle(self, e, act):
        raise InterpError(f"shuffle outside a block{self.where()}")


_EVAL = {
    kir.Const: _Evaluator._const, kir.Var: _Evaluator._var,
    kir.Special: lambda self, e, act: self._special(e, act),
    kir.BinOp: _Evaluator._binop, kir.UnOp: _Evaluator._unop,
    kir.Select: _Evaluator._select, kir.Cast: _Evaluator._cast,
    kir.Load: lambda self, e, act: self._load(e, act),
    kir.ShuffleXor: lambda self, e, act: self._shuffle(e, act),
}
