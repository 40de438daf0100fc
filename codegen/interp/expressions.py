"""Expression evaluation, vectorised over the active threads: the interpreter's adapter of
lowering.kir.LaneEvaluator, which evaluates every operator (fuserir.op_table's meaning,
computed in the node's dtype, with lazy ?:, && and ||). What the interpreter adds is its
machine state: the values of the kernel's scalars and loop variables (by name key),
constants checked against their type and kept, and its own errors.

  * Every scalar expression evaluates to a numpy array over `act` (or a numpy scalar when
    it is uniform). Select and && / || evaluate their operands lazily, as the emitted C
    does (`c ? a[i] : 0` does not load a[i] where !c).
  * Arithmetic (kir.LaneEvaluator, whose header says it once): every BinOp/UnOp
    computes in its node's dtype, f16/bf16 in f32 rounded once, math functions in f64;
    min/max/relu as codegen.cuda's preamble spells them; integers wrap, / and % truncate,
    a / 0 = 0, a % 0 = a, MIN / -1 = MIN; casts are fuserir.numerics.convert. The
    interpreter is more lenient than the CUDA emitter about types: a stored value or
    operand of another dtype is converted with Cast semantics rather than refused.
  * A constant that does not fit its dtype is an error here (launch-time evaluation
    wraps it): the interpreter runs only well-formed kernels.

_Evaluator alone (no block: the launch configuration, allocation sizes) evaluates
constants, parameters and arithmetic; a block (execution.py) adds thread and block
indices, loads and shuffles.
"""

import numpy as np

from codegen.interp.base import InterpError, _const, _point
from lowering import kir


class _Evaluator(kir.LaneEvaluator):
    """Evaluates scalar expressions; without a block (launch configuration, allocation
    sizes) only constants, parameters and arithmetic are allowed."""

    def __init__(self, interp):
        self.interp = interp
        self.env = interp.env
        self.stmt = None

    def where(self):
        return f" in {_point(self.stmt)}" if self.stmt is not None else ""

    def uniform(self, e, what):
        if e is None:
            raise InterpError(f"{what} is not set")
        v = self.ev(e, None)
        if np.ndim(v) != 0:
            raise InterpError(f"{what} is not uniform")
        return v

    def _refuse(self, e, why):
        raise InterpError(f"{why}{self.where()}")

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

    def _load(self, e, act):
        raise InterpError(f"load of {e.buffer.name} outside a block{self.where()}")

    def _shuffle(self, e, act):
        raise InterpError(f"shuffle outside a block{self.where()}")
