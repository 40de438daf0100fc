"""What a value means: the one definition of conversions, integer division and remainder,
and the identities of reductions, shared by the reference evaluator (fuserir.reference),
the interpreter (codegen.interp) and launch-time evaluation (lowering.kir), and spelled
out in CUDA by codegen.cuda. Where C leaves a result undefined, fuserir defines it:

Conversions (a CastOp, a kir.Cast):
  * float -> integer truncates toward zero and saturates: a value past the range gives
    the type's minimum or maximum, +-inf too, NaN gives 0 (what PTX's cvt.rzi.s32/s64 do,
    which the CUDA backend emits; a C cast of such a value is undefined).
  * integer -> integer wraps (two's complement); anything -> bool is != 0 (NaN -> true);
    bool -> anything is 0 or 1.
  * to a narrower float: rounded to nearest even, once, with overflow to +-inf: f64 and
    large integers reach bf16 through a round-to-odd f32 (ml_dtypes would round twice).
Integer division and remainder (C: truncation toward zero, the remainder takes the sign
of the dividend, a == (a / b) * b + a % b):
  * a / 0 = 0 and a % 0 = a (C leaves both undefined; the GPU does not trap);
  * MIN / -1 = MIN (the quotient wraps, as every integer operation does) and MIN % -1 = 0.
  A literal zero divisor is refused when the fusion is built (fuserir.ops).
Sizes (tiles, grids, bytes) are divided up by ceil_div and rounded up by round_up: the
one spelling of both on the host (a kernel's ceildiv is kir's op, (a + b - 1) / b).
Reductions combine their elements with a binary op (REDUCTIONS: sum adds, prod
multiplies, max and min keep the larger or smaller and propagate NaN); over no elements
they give that op's identity: sum -> 0, prod -> 1, max -> -inf for floats and the type's
minimum for integers, min -> +inf or the type's maximum (matmul over K = 0 is a sum: 0).
Welford states (DataType.welford: mean, m2 = the sum of squared differences from the
mean, count; f32): a float x cast to one is (x, x - x, 1), so m2 is NaN once an infinity
or NaN is in; welford_merge merges two in f32 as Chan et al.'s parallel update, n = na +
nb, d = mb - ma, r = nb / n, mean = ma + d r, m2 = m2a + m2b + (d na)(d r) (either side
empty: the other, exactly); its identity is (0, 0, 0). welford_mean reads NaN where m2 is
NaN (the data held an infinity or a NaN: the running differences of infinities make
the mean depend on the order) or the count is 0 (no elements), else the mean;
welford_m2 reads m2. A count past 2^24 is rounded as f32 rounds it.
"""

import ml_dtypes
import numpy as np

from .dtypes import DataType

__all__ = ["convert", "float_to_int", "int_div", "int_mod", "identity", "ceil_div", "round_up",
           "REDUCTIONS", "welford_merge", "welford_mean", "welford_reduce"]

# reduction -> the binary op (fuserir.op_table's and kernel IR's name) that combines two
# partials of it
REDUCTIONS = {"sum": "add", "prod": "mul", "max": "max", "min": "min",
              "welford_merge": "welford_merge"}

_F16 = np.dtype(np.float16)
_BF16 = np.dtype(ml_dtypes.bfloat16)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_BOOL = np.dtype(np.bool_)
_WELFORD = DataType.welford.numpy
_HALF = (_F16, _BF16)


# -- conversions -----------------------------------------------------------------------------

def _f64_to_bf16(x):
    """f64 -> bf16 rounded to nearest even exactly once: round to odd into f32 (24 bits
    >= 8 + 2, so the second rounding is exact), then f32 -> bf16 (ml_dtypes, RNE).
    (ml_dtypes' own f64 -> bf16 goes through f32 with two RNE roundings.)"""
    x = np.asarray(x, dtype=_F64)
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(_F32)
    over = np.abs(f.astype(_F64)) > np.abs(x)          # RNE went away from zero
    f = np.where(over, np.nextafter(f, np.float32(0)), f).astype(_F32)
    inexact = (f.astype(_F64) != x).astype(np.uint32)  # NaN stays NaN with bit 0 set
    return (f.view(np.uint32) | inexact).view(_F32).astype(_BF16)


def _int_to_f64_odd(a):
    """Integers -> f64 rounded to odd at <= 53 bits (exact up to 2^53), so that a later
    rounding to bf16 through _f64_to_bf16 rounds the integer exactly once."""
    a = a.astype(np.int64)
    f = a.astype(_F64)
    big = np.abs(f) > 2.0 ** 53
    if not big.any():
        return f
    m = np.where(a < 0, -a, a).view(np.uint64)            # |a| (2^63 for INT64_MIN)
    shift = np.maximum(np.frexp(m.astype(_F64))[1] - 53, 0).astype(np.uint64)
    low = m & ((np.uint64(1) << shift) - np.uint64(1))
    kept = ((m >> shift) | (low != 0).astype(np.uint64)) << shift
    odd = np.where(a < 0, -kept.astype(_F64), kept.astype(_F64))
    return np.where(big, odd, f)


def float_to_int(a, nt):
    """Floats -> the numpy integer type `nt`: truncation toward zero, saturating, NaN -> 0
    (cvt.rzi.s32/s64 semantics)."""
    info = np.iinfo(nt)
    t = np.trunc(np.asarray(a).astype(_F64))
    nan = np.isnan(t)
    big = t >= float(info.max) + 1.0        # 2^31 / 2^63, exact in f64
    small = t < float(info.min)
    safe = np.where(nan | big | small, 0.0, t).astype(nt)
    return np.where(big, info.max, np.where(small, info.min, safe)).astype(nt)


def convert(value, dtype):
    """A numpy value (scalar or array) converted to DataType `dtype` (see the header)."""
    a = np.asarray(value)
    src = a.dtype
    nt = dtype.numpy
    if src == nt:
        return value
    if dtype is DataType.welford or src == _WELFORD:
        return _to_welford(a, src, dtype)
    if dtype is DataType.bool:
        r = (a.astype(_F32) if src in _HALF else a) != 0
    elif src == _BOOL:
        return convert(a.astype(np.int32), dtype)
    elif dtype.is_int:
        r = a.astype(nt) if src.kind in "iu" else float_to_int(a, nt)
    elif src.kind in "iu":
        if nt == _BF16:
            r = _f64_to_bf16(_int_to_f64_odd(a))
        elif nt == _F16:
            with np.errstate(over="ignore"):
                r = a.astype(_F64).astype(_F16)   # f64 holds every i32; i64 > 2^53 is inf
        else:
            r = a.astype(nt)
    elif nt == _BF16:
        r = _f64_to_bf16(a) if src == _F64 else a.astype(_F32).astype(_BF16)
    elif nt == _F16 and src == _BF16:
        r = a.astype(_F32).astype(_F16)
    else:
        with np.errstate(over="ignore"):
            r = a.astype(nt)                  # widening (exact), f64->f32/f16, f32->f16
    return r[()] if r.ndim == 0 else r


def _to_welford(a, src, dtype):
    """A float's Welford state (x, x - x, 1); a state converts to nothing else."""
    if dtype is not DataType.welford or src not in (_F16, _BF16, _F32, _F64):
        raise ValueError(f"no conversion from {src} to {dtype}: a welford state is read "
                         "with welford_mean or welford_m2, and made of floats")
    x = convert(a, DataType.f32)
    state = np.zeros(np.shape(x), _WELFORD)
    with np.errstate(invalid="ignore"):
        state["mean"], state["m2"], state["count"] = x, x - x, 1.0
    return state[()] if state.ndim == 0 else state


# -- welford states ---------------------------------------------------------------------------

def welford_merge(a, b):
    """Two states (arrays or records of DataType.welford) merged, in f32 as the CUDA
    preamble's welford_merge computes it (the header)."""
    a, b = np.asarray(a, _WELFORD), np.asarray(b, _WELFORD)
    na, nb = a["count"], b["count"]
    with np.errstate(all="ignore"):
        n = na + nb
        empty = n == 0
        d = b["mean"] - a["mean"]
        r = nb / np.where(empty, np.float32(1), n)
        out = np.zeros(np.broadcast(a, b).shape, _WELFORD)
        out["mean"] = np.where(empty, a["mean"], a["mean"] + d * r)
        out["m2"] = np.where(empty, a["m2"], a["m2"] + b["m2"] + (d * na) * (d * r))
        out["count"] = np.where(empty, na, n)
    return out[()] if out.ndim == 0 else out


def welford_mean(state):
    """A state's mean: NaN where its m2 is NaN or its count 0 (the header)."""
    s = np.asarray(state, _WELFORD)
    r = np.where(np.isnan(s["m2"]) | (s["count"] == 0), np.float32(np.nan),
                 s["mean"]).astype(_F32)
    return r[()] if r.ndim == 0 else r


def welford_reduce(states, axes):
    """States merged over `axes`, exactly (f64) and rounded once to f32: what any order of
    welford_merge approximates (the reference evaluator's meaning). Over no elements:
    the identity."""
    s = np.asarray(states, _WELFORD)
    axes = tuple(axes)
    n = s["count"].astype(_F64)
    total = n.sum(axis=axes, keepdims=True)
    safe = np.where(total == 0, 1.0, total)
    with np.errstate(all="ignore"):
        mean = (n * s["mean"]).sum(axis=axes, keepdims=True) / safe
        m2 = (s["m2"].astype(_F64) + n * (s["mean"] - mean) ** 2).sum(axis=axes,
                                                                         keepdims=True)
    out = np.zeros(np.squeeze(total, axis=axes).shape, _WELFORD)
    out["mean"] = np.squeeze(np.where(total == 0, 0.0, mean), axis=axes)
    out["m2"] = np.squeeze(np.where(total == 0, 0.0, m2), axis=axes)
    out["count"] = np.squeeze(total, axis=axes)
    return out


# -- integer division and remainder -----------------------------------------------------------

def int_div(a, b):
    """a / b on numpy integers of one type (arrays or scalars): truncated toward zero,
    a / 0 = 0, MIN / -1 = MIN."""
    a, b = np.asarray(a), np.asarray(b)
    one = b.dtype.type(1)
    safe = np.where((b == 0) | (b == -1), one, b)       # neither traps nor overflows
    r = np.fmod(a, safe)                                # C remainder: the dividend's sign
    q = (a - r) // safe                                 # exact, so floor == trunc
    with np.errstate(over="ignore"):
        q = np.where(b == -1, np.negative(a), q)        # wraps at MIN
    q = np.where(b == 0, b.dtype.type(0), q).astype(np.result_type(a, b))
    return q[()] if q.ndim == 0 else q


def int_mod(a, b):
    """a % b on numpy integers of one type: the sign of the dividend, a % 0 = a,
    MIN % -1 = 0."""
    a, b = np.asarray(a), np.asarray(b)
    safe = np.where((b == 0) | (b == -1), b.dtype.type(1), b)
    r = np.where(b == 0, a, np.where(b == -1, 0, np.fmod(a, safe)))
    r = r.astype(np.result_type(a, b))
    return r[()] if r.ndim == 0 else r


# -- reductions -------------------------------------------------------------------------------

def ceil_div(a, b):
    """The least integer >= a / b (integers; b > 0): how many b-sized pieces cover a."""
    return -(-a // b)


def round_up(a, b):
    """a rounded up to a multiple of b (integers; b > 0)."""
    return ceil_div(a, b) * b


def identity(op, dtype):
    """The value a reduction `op` (a key of REDUCTIONS, or the binary op that combines
    its partials) over no elements gives, as a Python number of DataType `dtype`'s
    kind (a welford state: the empty state, a numpy record)."""
    op = {combine: reduction for reduction, combine in REDUCTIONS.items()}.get(op, op)
    if op == "welford_merge":
        return np.zeros((), _WELFORD)[()]
    if op == "sum":
        return 0.0 if dtype.is_float else 0
    if op == "prod":
        return 1.0 if dtype.is_float else 1
    if op in ("max", "min"):
        if dtype.is_float:
            return float("-inf" if op == "max" else "inf")
        info = np.iinfo(dtype.numpy)
        return int(info.min if op == "max" else info.max)
    raise ValueError(f"unknown reduction {op!r}")
