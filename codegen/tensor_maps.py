"""The host side of TMA tensor maps: what cuTensorMapEncodeTiled is given for a
kir.TensorMap and the array bound to its tensor, and the encoding itself.

    fields = tensor_map_fields(kernel, tmap, array, scalars)   # checked; no GPU needed
    fields = at_address(fields, ptr)                           # the same map elsewhere
    value = encode_tensor_map(fields)                          # the driver's 128 bytes

A kir.TensorMap describes its tensor by expressions (sizes innermost first, element
strides of dimensions 1..) over the kernel's scalar parameters and its tensor's stride
parameters; tensor_map_fields evaluates them for one launch's scalars and array, checks
that they describe exactly the array's elements (the zero fill of a box is right only at
the tensor's real edge) and everything cuTensorMapEncodeTiled requires (its rules are
fuserir.instructions' TMA_* limits), and raises a ValueError naming the kernel, the map
and the tensor, before the driver is asked. The fields depend on the array only through
its shape, strides and address, so the launcher computes them once per argument
signature and re-points them per launch with at_address (which checks the address); it
keeps the encoded maps (codegen.launch).

Only the driver can encode a map (the 128 bytes are opaque): encode_tensor_map imports
cuda.bindings (PyPI cuda-bindings) when called, so compiling, the interpreter and CI,
which have no driver, never need it. It returns the kernel parameter as CuPy takes it by
value: a numpy scalar of dtype V128 (the kernel's 64-byte aligned
`const __grid_constant__ TensorMap`, see codegen.cuda's ABI). The interpreter reads
dtype, dimensions, strides, box, swizzle and zero fill from the kernel IR, never from
these bytes.
"""

import ctypes
import dataclasses
from dataclasses import dataclass

import numpy as np

from fuserir.dtypes import DataType
from fuserir.instructions import (SWIZZLE_BYTES, TMA_ADDRESS_ALIGN, TMA_BOX_MAX,
                                  TMA_DIM_LIMIT, TMA_RANKS, TMA_STRIDE_ALIGN,
                                  element_runs, tma_map_strides, tma_stride_ok)
from lowering import kir

from . import gpu_stack

__all__ = ["TensorMapFields", "tensor_map_fields", "at_address", "encode_tensor_map",
           "TENSOR_MAP_BYTES"]

TENSOR_MAP_BYTES = 128          # sizeof(CUtensorMap), the kernel parameter's size

# CUtensorMapDataType of each dtype a map may have (the member's name without its
# CU_TENSOR_MAP_DATA_TYPE_ prefix)
DTYPE_CODES = {DataType.f16: "FLOAT16", DataType.bf16: "BFLOAT16",
               DataType.f32: "FLOAT32", DataType.f64: "FLOAT64",
               DataType.i32: "INT32", DataType.i64: "INT64"}

# CUtensorMapSwizzle of each kir swizzle (without CU_TENSOR_MAP_SWIZZLE_)
SWIZZLE_CODES = {"none": "NONE", "32B": "32B", "64B": "64B", "128B": "128B"}


@dataclass(frozen=True)
class TensorMapFields:
    """The arguments of cuTensorMapEncodeTiled for one map, checked: the data type and
    the enums as the driver's member names without their prefixes, global dimensions
    (elements, innermost first), global strides (bytes, dimensions 1..), box extents,
    element strides (all 1). `address` and `where` (the kernel, map and tensor, for
    messages) take no part in equality: fields equal but for the address describe the
    same map at another place."""

    dtype: str
    dims: tuple
    strides: tuple
    box: tuple
    swizzle: str
    element_strides: tuple
    interleave: str = "NONE"
    l2_promotion: str = "L2_128B"
    oob_fill: str = "NONE"          # out-of-bounds elements read as zeros
    address: int = dataclasses.field(default=0, compare=False)
    where: str = dataclasses.field(default="", compare=False)

    @property
    def rank(self):
        return len(self.dims)


def tensor_map_fields(kernel, tmap, array, scalars):
    """The TensorMapFields of `tmap` (a kir.TensorMap of `kernel`) over `array` (what the
    launcher binds to tmap.tensor: .data.ptr, .shape, .strides in bytes), its sizes and
    strides evaluated with `scalars` ({scalar parameter name: value}) and the array's
    strides; ValueError when the map cannot describe the array (see the module header)."""
    where = f"kernel {kernel.name}: tensor map {tmap.name} of {tmap.tensor.buffer.name}"

    def bad(why):
        raise ValueError(f"{where}: {why}")

    if tmap.dtype not in DTYPE_CODES:
        bad(f"dtype {tmap.dtype} has no tensor map (supported: "
            f"{', '.join(str(d) for d in DTYPE_CODES)})")
    if tmap.swizzle not in SWIZZLE_CODES:
        bad(f"unknown swizzle {tmap.swizzle!r} (one of {', '.join(SWIZZLE_CODES)})")
    rank, itemsize = tmap.rank, tmap.dtype.itemsize
    if rank not in TMA_RANKS:
        bad(f"rank {rank} (the box {tmap.box}); a tensor map has rank "
            f"{TMA_RANKS[0]}..{TMA_RANKS[-1]}")
    if len(tmap.sizes) != rank or len(tmap.strides) != rank - 1:
        bad(f"a rank-{rank} box needs {rank} sizes and {rank - 1} strides, the map has "
            f"{len(tmap.sizes)} and {len(tmap.strides)}")

    array_strides = tuple(s // itemsize for s in array.strides)       # elements
    env = dict(scalars)
    env.update((v.name, s) for v, s in zip(tmap.tensor.strides, array_strides))

    def value(expr, what):
        try:
            return kir.evaluate_scalar(expr, env)
        except (KeyError, TypeError) as e:
            bad(f"{what} {kir.format_expr(expr)} has no launch-time value ({e})")

    dims = tuple(value(e, f"size {d}") for d, e in enumerate(tmap.sizes))
    strides = tuple(value(e, f"stride {d + 1}") for d, e in enumerate(tmap.strides))
    for d, n in enumerate(dims):
        if not 1 <= n <= TMA_DIM_LIMIT:
            bad(f"size {d} ({kir.format_expr(tmap.sizes[d])}) is {n}; a dimension has "
                f"1..2^32 elements")
    strides = tma_map_strides(dims, strides, itemsize)
    if element_runs(dims, (1, *strides)) != element_runs(array.shape, array_strides):
        bad(f"dimensions {dims} with element strides {(1, *strides)} (innermost first) "
            f"do not cover the array of shape {tuple(array.shape)} and element strides "
            f"{array_strides} exactly")
    byte_strides = tuple(s * itemsize for s in strides)
    for d, s in enumerate(byte_strides, start=1):
        if not tma_stride_ok(s):
            bad(f"stride {d} is {s} bytes; a tensor map's strides are positive multiples "
                f"of {TMA_STRIDE_ALIGN} bytes below 2^40")

    box = tuple(tmap.box)
    if len(box) != rank or not all(1 <= b <= TMA_BOX_MAX for b in box):
        bad(f"box {box}: each extent is 1..{TMA_BOX_MAX}")
    span = SWIZZLE_BYTES[tmap.swizzle]
    if tmap.swizzle == "none" and box[0] * itemsize % span:
        bad(f"the box's dimension 0 spans {box[0] * itemsize} bytes, not a multiple of "
            f"{span}")
    if tmap.swizzle != "none" and box[0] * itemsize != span:
        bad(f"the box's dimension 0 spans {box[0] * itemsize} bytes; swizzle "
            f"{tmap.swizzle} needs exactly {span}")
    fields = TensorMapFields(DTYPE_CODES[tmap.dtype], dims, byte_strides, box,
                             SWIZZLE_CODES[tmap.swizzle], (1,) * rank, where=where)
    return at_address(fields, array.data.ptr)


def at_address(fields, address):
    """`fields` for the same map at global address `address` (checked: 16-byte
    aligned)."""
    if address % TMA_ADDRESS_ALIGN:
        raise ValueError(f"{fields.where}: the tensor's address {address:#x} is not "
                         f"{TMA_ADDRESS_ALIGN}-byte aligned, which a tensor map needs")
    return dataclasses.replace(fields, address=address)


def encode_tensor_map(fields):
    """The map `fields` describes, encoded by the driver (cuTensorMapEncodeTiled), as a
    kernel parameter CuPy passes by value (numpy V128). Needs the CUDA driver."""
    driver = gpu_stack.cuda_driver_bindings()

    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    status, tmap = driver.cuTensorMapEncodeTiled(
        getattr(driver.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{fields.dtype}"),
        u32(fields.rank), fields.address,
        [u64(n) for n in fields.dims], [u64(s) for s in fields.strides],
        [u32(b) for b in fields.box], [u32(e) for e in fields.element_strides],
        getattr(driver.CUtensorMapInterleave,
                f"CU_TENSOR_MAP_INTERLEAVE_{fields.interleave}"),
        getattr(driver.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{fields.swizzle}"),
        getattr(driver.CUtensorMapL2promotion,
                f"CU_TENSOR_MAP_L2_PROMOTION_{fields.l2_promotion}"),
        getattr(driver.CUtensorMapFloatOOBfill,
                f"CU_TENSOR_MAP_FLOAT_OOB_FILL_{fields.oob_fill}"))
    if status != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{fields.where}: cuTensorMapEncodeTiled failed with "
                           f"{getattr(status, 'name', status)} ({fields.dtype}, address "
                           f"{fields.address:#x}, dims {fields.dims}, strides "
                           f"{fields.strides} bytes, box {fields.box}, swizzle "
                           f"{fields.swizzle})")
    raw = ctypes.string_at(tmap.getPtr(), TENSOR_MAP_BYTES)
    return np.frombuffer(raw, dtype=f"V{TENSOR_MAP_BYTES}")[0]
