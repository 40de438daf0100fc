"""Launch-time evaluation of kernel-IR scalar expressions (grid and block extents,
shared-memory sizes and offsets), shared by the CUDA launcher, the interpreter and
lowering's constant folding; and the same for many threads at once (evaluate_lanes: the
async verifier's per-thread indices). The meaning of each operator is fuserir.op_table's.
"""

import numpy as np

from fuserir import numerics, op_table
from fuserir.dtypes import DataType

from .expressions import BinOp, Cast, Const, Select, UnOp, Var
from .printer import format_expr
from .statements import Allocate, Memory
from .traversal import walk


# ---------------------------------------------------------------------------------------
# Launch-time evaluation (shared by the CUDA launcher and the interpreter)
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
    nodes compute in their numpy type (f16/bf16 have no arithmetic). Returns a
    Python int, bool or numpy float. Thread indices, loads and shuffles have no launch-time
    value: they raise TypeError; a variable missing from `env` raises KeyError.
    """
    env = {} if env is None else env
    if isinstance(expr, Const):
        if expr.dtype is DataType.bool:
            return bool(expr.value)
        if expr.dtype.is_int:
            return _wrap_int(expr.value, expr.dtype)
        return expr.dtype.numpy.type(expr.value)
    if isinstance(expr, Var):
        if expr.name not in env:
            raise KeyError(f"no value for scalar {expr.name!r} (have: {sorted(env)})")
        value = env[expr.name]
        if expr.dtype.is_int:
            return _wrap_int(value, expr.dtype)
        return bool(value) if expr.dtype is DataType.bool else expr.dtype.numpy.type(value)
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


def evaluate_lanes(expr, env):
    """evaluate_scalar for many threads at once: `env`'s values may be numpy integer
    arrays of one shape (a value per thread), and the result is an array of that shape
    (or a scalar, where nothing per-thread reaches it). Integer and bool expressions only,
    with evaluate_scalar's C meaning (a float, a load or a thread index raises TypeError,
    a missing variable KeyError); both sides of and/or and of a select are evaluated,
    which is harmless: integer operators are defined everywhere."""
    if isinstance(expr, Const):
        if expr.dtype is DataType.bool:
            return np.bool_(expr.value)
        if expr.dtype.is_int:
            return expr.dtype.numpy.type(_wrap_int(expr.value, expr.dtype))
        raise TypeError(f"float constant {format_expr(expr)} in a per-thread index")
    if isinstance(expr, Var):
        if expr.name not in env:
            raise KeyError(f"no value for scalar {expr.name!r} (have: {sorted(env)})")
        value = env[expr.name]
        if expr.dtype is DataType.bool:
            return np.asarray(value).astype(bool)
        if not expr.dtype.is_int:
            raise TypeError(f"float variable {expr.name} in a per-thread index")
        if isinstance(value, np.ndarray):
            with np.errstate(over="ignore"):
                return value.astype(expr.dtype.numpy)        # wraps, as C's conversion
        return expr.dtype.numpy.type(_wrap_int(value, expr.dtype))
    if isinstance(expr, Select):
        return np.where(evaluate_lanes(expr.cond, env), evaluate_lanes(expr.a, env),
                        evaluate_lanes(expr.b, env)).astype(expr.dtype.numpy)
    if isinstance(expr, Cast):
        value, src, dst = evaluate_lanes(expr.a, env), expr.a.dtype, expr.dtype
        if src.is_float or dst.is_float:
            raise TypeError(f"float cast {format_expr(expr)} in a per-thread index")
        if dst is DataType.bool:
            return np.asarray(value != 0)
        with np.errstate(over="ignore"):
            return np.asarray(value).astype(dst.numpy)
    if isinstance(expr, UnOp):
        entry = op_table.UNARY[expr.op]
        a = evaluate_lanes(expr.a, env)
        if entry.kind == "logical":
            return np.asarray(entry.meaning(a)).astype(bool)
        if not expr.dtype.is_int or entry.kind != "exact":
            raise TypeError(f"unary {expr.op} on {expr.dtype} has no per-thread value")
        with np.errstate(over="ignore"):
            return np.asarray(entry.meaning(np.asarray(a, dtype=expr.dtype.numpy))).astype(
                expr.dtype.numpy)
    if isinstance(expr, BinOp):
        a, b = evaluate_lanes(expr.a, env), evaluate_lanes(expr.b, env)
        if expr.op in ("and", "or"):
            return (np.logical_and if expr.op == "and" else np.logical_or)(a, b)
        entry = op_table.BINARY[expr.op]
        if entry.kind == "compare":
            return np.asarray(entry.meaning(a, b))
        if not expr.dtype.is_int or entry.integer is None:
            raise TypeError(f"binary {expr.op} on {expr.dtype} has no per-thread value")
        t = expr.dtype.numpy
        with np.errstate(over="ignore"):
            return np.asarray(entry.integer(np.asarray(a, dtype=t),
                                            np.asarray(b, dtype=t))).astype(t)
    raise TypeError(f"{type(expr).__name__} {format_expr(expr)} has no per-thread value")


def _eval_cast(value, src, dst):
    if dst is DataType.bool:
        return bool(value != 0)
    if dst.is_int:
        if src.is_float:
            return int(numerics.convert(src.numpy.type(value), dst))   # saturating
        return _wrap_int(value, dst)
    return dst.numpy.type(value)


def _eval_unop(op, a, dtype):
    entry = op_table.UNARY[op]
    if entry.kind == "logical":
        return bool(entry.meaning(a))
    if dtype.is_int:
        if entry.kind != "exact":
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
    if dtype.is_int:
        if entry.integer is None:
            raise TypeError(f"binary {op} on {dtype} has no launch-time value")
        x, y = np.asarray(a, dtype=dtype.numpy), np.asarray(b, dtype=dtype.numpy)
        with np.errstate(over="ignore"):
            return _wrap_int(entry.integer(x, y), dtype)
    if entry.meaning is None or entry.kind != "arith":
        raise TypeError(f"binary {op} on {dtype} has no launch-time value")
    t = dtype.numpy.type
    with np.errstate(all="ignore"):
        return t(entry.meaning(t(a), t(b)))


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
