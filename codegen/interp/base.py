"""What every room of the interpreter shares: InterpError, a program point as reports
name it ("<label>: <statement>"), _NONE (the empty mark of the shadow arrays), and values
with kir.Cast semantics: constants of a dtype, truth values, conversion to a dtype.

It sits at the bottom of codegen.interp, so that each room takes these from one home and
none imports another room for them.
"""

import ml_dtypes
import numpy as np

from fuserir.dtypes import DataType
from fuserir.errors import FuserirError
from fuserir.numerics import convert
from lowering import kir
from lowering.kir.evaluate import as_dtype, truth


class InterpError(FuserirError):
    """A kernel or argument the interpreter cannot run (missing argument, wrong dtype or
    shape, thread-dependent loop extent, unknown statement)."""


def _point(stmt):
    return f"{stmt.label}: {kir.format_stmt(stmt)}"


_NONE = -1   # the empty mark of every shadow array (no thread, event, epoch, buffer)


# Values with kir.Cast semantics. The conversions themselves are fuserir.numerics' (shared
# with the reference evaluator).
_F16 = np.dtype(np.float16)
_BF16 = np.dtype(ml_dtypes.bfloat16)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_BOOL = np.dtype(np.bool_)
_HALF = (_F16, _BF16)


def _const(value, dtype):
    if dtype is DataType.bool:
        return np.bool_(bool(value))
    if dtype.is_int:
        v = int(value)
        info = np.iinfo(dtype.numpy)
        if not info.min <= v <= info.max:
            raise InterpError(f"constant {value} does not fit {dtype}")
        return dtype.numpy.type(v)
    if dtype.is_state:
        return np.asarray(value, dtype.numpy)[()]
    return convert(np.float64(value), dtype)


# a value as bool, and in a dtype: the lane evaluator's (lowering.kir.evaluate)
_truth = truth
_to = as_dtype


def switch_point(handler):
    """Leaf statement `handler` run after a switch point (a None yield, roles.py), as a
    compound statement's handler."""
    def run(self, s, act):
        yield None
        handler(self, s, act)
    return run
