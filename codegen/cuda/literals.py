"""C literals of kernel IR constants, as the emitter writes every Const: bool as
true/false; an integer checked to fit its dtype, i64 with LL and the type's minimum as an
expression (its literal would not fit); f32/f64 in the fewest digits that read back the
same value, NaN and infinities through their bit patterns; f16/bf16 as the preamble's
conversion of the f32 literal of the rounded value. Errors are the emitter's (passed in),
so that they name the statement being emitted.
"""

import math

import numpy as np

from fuserir.dtypes import DataType

from .names import _FLOAT, _HALF, _INT


def _literal(value, dtype, emitter):
    if dtype is DataType.welford:
        emitter.type_of(dtype)
        fields = (float(np.asarray(value, dtype.numpy)[f]) for f in ("mean", "m2", "count"))
        return "welford{" + ", ".join(_float_literal(v, DataType.f32) for v in fields) + \
            ", 0.0f}"
    if isinstance(value, np.generic):
        value = value.item()
    if dtype is DataType.bool:
        return "true" if value else "false"
    if dtype in _INT:
        v = int(value)
        bits = 32 if dtype is DataType.i32 else 64
        if not -(1 << (bits - 1)) <= v < (1 << (bits - 1)):
            raise emitter.error(f"constant {v} does not fit {dtype}")
        suffix = "LL" if dtype is DataType.i64 else ""
        if v == -(1 << (bits - 1)):            # the C literal would not fit its own type
            return f"(-{-(v + 1)}{suffix} - 1{suffix})"
        return f"(-{-v}{suffix})" if v < 0 else f"{v}{suffix}"
    if dtype in _HALF:
        emitter.type_of(dtype)
        rounded = float(np.array(value, dtype=dtype.numpy).astype(np.float32))
        return f"f32_to_{dtype.value}({_float_literal(rounded, DataType.f32)})"
    if dtype in _FLOAT:
        v = float(np.array(value, dtype=dtype.numpy))
        return _float_literal(v, dtype)
    raise emitter.error(f"constant of unknown dtype {dtype!r}")


def _float_literal(v, dtype):
    f32 = dtype is DataType.f32
    if math.isnan(v):
        return "__int_as_float(0x7fffffff)" if f32 else \
            "__longlong_as_double(0x7fffffffffffffffLL)"
    if math.isinf(v):
        pos = "__int_as_float(0x7f800000)" if f32 else \
            "__longlong_as_double(0x7ff0000000000000LL)"
        neg = "__int_as_float(0xff800000)" if f32 else \
            "__longlong_as_double(0xfff0000000000000LL)"
        return pos if v > 0 else neg
    if f32:
        text = np.format_float_positional(np.float32(v), unique=True, trim="0") \
            if 1e-4 <= abs(v) < 1e7 or v == 0 else \
            np.format_float_scientific(np.float32(v), unique=True, trim="0")
    else:
        text = repr(v)
    if "." not in text and "e" not in text and "inf" not in text:
        text += ".0"
    if "e" in text and "." not in text.split("e")[0]:
        mant, exp = text.split("e")
        text = f"{mant}.0e{exp}"
    text += "f" if f32 else ""
    return f"({text})" if text.startswith("-") else text
