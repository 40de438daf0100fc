"""Expression evaluation, vectorised over the active threads, and the operator tables:
the one home of what each BinOp and UnOp computes.

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

import math

import numpy as np

from codegen.interp.base import _F32, _F64, _HALF, InterpError, _const, _point, _to, _truth
from fuserir.dtypes import DataType
from fuserir.numerics import convert, int_div, int_mod
from lowering import kir

_erfc = np.frompyfunc(math.erfc, 1, 1)


def _gelu(x):
    # 1 + erf(x / sqrt 2) = erfc(-x / sqrt 2), without cancellation for x << 0
    return 0.5 * x * np.asarray(_erfc(-x / math.sqrt(2.0)), dtype=_F64)


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


_TRANSCENDENTAL = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "tanh": np.tanh, "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "gelu": _gelu, "gelu_tanh": _gelu_tanh,
}

_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
            "eq": np.equal, "ne": np.not_equal}


def _pick(cond, a, b):
    r = np.where(cond, a, b)
    return r[()] if r.ndim == 0 else r


# min/max as the CUDA preamble spells them: (a < b || a != a) ? a : b (NaN propagates;
# min(-0, +0) is the second operand), and relu as x < 0 ? 0 : x (NaN and -0 kept).
def _min(a, b):
    return _pick((a < b) | (a != a), a, b)


def _max(a, b):
    return _pick((a > b) | (a != a), a, b)


def _relu(x):
    return _pick(x < 0, x.dtype.type(0), x)


_FLOAT_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                 "div": np.true_divide, "mod": np.fmod, "min": _min, "max": _max}

_INT_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
               "min": _min, "max": _max, "xor": np.bitwise_xor}


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
        op = e.op
        if op == "and" or op == "or":
            return self._logical(e, act)
        a = self.ev(e.a, act)
        b = self.ev(e.b, act)
        if op in _COMPARE:
            if a.dtype in _HALF:
                a = a.astype(_F32)
            if b.dtype in _HALF:
                b = b.astype(_F32)
            return _COMPARE[op](a, b)
        dt = e.dtype
        if dt.is_float:
            work = DataType.f32 if dt.numpy in _HALF else dt
            a, b = _to(a, work), _to(b, work)
            if op not in _FLOAT_BINARY:
                raise InterpError(f"operator {op} on {dt}{self.where()}")
            r = _FLOAT_BINARY[op](a, b)
            return r if work is dt else convert(r, dt)
        if dt is DataType.bool:
            if op == "xor":
                raise InterpError(f"xor on bool (integers only){self.where()}")
            ai, bi = _to(a, DataType.i32), _to(b, DataType.i32)
            return convert(self._int_op(op, ai, bi), dt)
        return self._int_op(op, _to(a, dt), _to(b, dt))

    def _int_op(self, op, a, b):
        f = _INT_BINARY.get(op)
        if f is not None:
            return f(a, b)
        if op == "div":                 # fuserir.numerics: a / 0 = 0, MIN / -1 = MIN
            return int_div(a, b)
        if op == "mod":                 # a % 0 = a, MIN % -1 = 0
            return int_mod(a, b)
        if op == "ceildiv":
            return int_div(a + b - b.dtype.type(1), b)
        raise InterpError(f"unknown operator {op}{self.where()}")

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
        if op == "not":
            return convert(np.logical_not(_truth(a)), dt)
        if op in ("neg", "abs", "relu"):
            if dt.is_float:
                work = DataType.f32 if dt.numpy in _HALF else dt
                x = _to(a, work)
                if op == "neg":
                    r = np.negative(x)
                elif op == "abs":
                    r = np.abs(x)
                else:
                    r = _relu(x)
                return r if work is dt else convert(r, dt)
            x = _to(a, dt)
            if op == "neg":
                return np.negative(x)
            if op == "abs":
                return np.abs(x)
            return _relu(x)
        f = _TRANSCENDENTAL.get(op)
        if f is None:
            raise InterpError(f"unknown operator {op}{self.where()}")
        if not dt.is_float:
            raise InterpError(f"{op} on {dt}{self.where()}")
        r = f(np.asarray(convert(a, DataType.f64), dtype=_F64))
        return convert(r, dt)

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
