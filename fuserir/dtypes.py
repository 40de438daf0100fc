"""Element types of fusion tensors and the promotion rules between them.

A DataType knows its byte size and its host (numpy) type; bf16 on the host is
`ml_dtypes.bfloat16`. Promotion follows the usual category order bool < integer < float,
and within floats the wider type; f16 with bf16 promotes to f32 (neither holds the other).

One type holds no number: `welford`, the running state of a one-pass mean and variance
(its mean, the sum of squared differences from it, and its count, each f32; 16 bytes).
A float cast to it is the state of one element; a `welford_merge` reduction merges
states; welford_mean and welford_m2 read a state (fuserir.numerics says what each means).
It lives between a fusion's operations only: no input or output holds it.
"""

from __future__ import annotations

import builtins
from enum import Enum

import ml_dtypes
import numpy as np


class DataType(Enum):
    f16 = "f16"
    bf16 = "bf16"
    f32 = "f32"
    f64 = "f64"
    i32 = "i32"
    i64 = "i64"
    bool = "bool"
    welford = "welford"

    def __repr__(self):
        return self.value

    def __str__(self):
        return self.value

    @property
    def numpy(self) -> type:
        return _NUMPY[self]

    @property
    def itemsize(self) -> int:
        return _NUMPY[self].itemsize

    @property
    def is_float(self) -> builtins.bool:   # `bool` here is the member DataType.bool
        return self in (DataType.f16, DataType.bf16, DataType.f32, DataType.f64)

    @property
    def is_int(self) -> builtins.bool:
        return self in (DataType.i32, DataType.i64)

    @property
    def is_state(self) -> builtins.bool:
        """A reduction's running state (welford), not a number."""
        return self is DataType.welford

    @property
    def compute(self) -> DataType:
        """The type arithmetic on this type is carried out in (f16/bf16 compute in f32)."""
        return DataType.f32 if self in (DataType.f16, DataType.bf16) else self


_NUMPY = {
    DataType.f16: np.dtype(np.float16),
    DataType.bf16: np.dtype(ml_dtypes.bfloat16),
    DataType.f32: np.dtype(np.float32),
    DataType.f64: np.dtype(np.float64),
    DataType.i32: np.dtype(np.int32),
    DataType.i64: np.dtype(np.int64),
    DataType.bool: np.dtype(np.bool_),
    # 16 bytes, as the CUDA struct (the padding keeps a state one aligned vector)
    DataType.welford: np.dtype([("mean", np.float32), ("m2", np.float32),
                                ("count", np.float32), ("pad", np.float32)]),
}

# the number types (what inputs, outputs and arrays hold); `welford` is a name too
DTYPE_NAMES = tuple(d.value for d in DataType if not d.is_state)


def from_name(name):
    """The DataType called `name` ("f16", ...), or None if there is none."""
    try:
        return DataType(name)
    except ValueError:
        return None


def from_numpy(np_dtype):
    """The DataType of a numpy dtype, or None where fuserir has no such type."""
    np_dtype = np.dtype(np_dtype)
    for dtype, host in _NUMPY.items():
        if host == np_dtype:
            return dtype
    return None


_RANK = {
    DataType.bool: 0,
    DataType.i32: 1,
    DataType.i64: 2,
    DataType.f16: 3,
    DataType.bf16: 3,
    DataType.f32: 4,
    DataType.f64: 5,
}


def promote(a, b):
    """The common type of a binary operation's operands (the ops refuse a welford state
    beside anything else before they ask)."""
    if a == b:
        return a
    if a.is_state or b.is_state:
        return DataType.welford
    if {a, b} == {DataType.f16, DataType.bf16}:
        return DataType.f32
    return a if _RANK[a] > _RANK[b] else b
