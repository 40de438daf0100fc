"""C names: the element types' typedef names, the identifiers the generated code must
leave alone (keywords, built-ins, the math functions NVRTC provides that the op table
spells its ops with, the preamble's names), and the user's names mangled. The emitter
(codegen.cuda.expressions) gives every kernel IR name its identifier from these; the
launcher finds a kernel by entry_point.

The user's names (kir's `user=True`: tensors, sizes and run-time scalars, the fusion) are
mangled, so that they never meet a generated name (loop indices i0, j0, v0, e0; strides
x_stride0; smem, ldm0..3), a C/C++ keyword, a CUDA built-in or macro (threadIdx, dim3,
printf, NULL, std) or each other (a size named like a tensor): the name, an underscore
and a tag for its kind, x -> x_, N -> N_s, fusion f -> f_kernel. The last underscore
splits a mangled name into (name, tag) and the tags differ, so mangling is one-to-one
across kinds; the tags are no suffix any built-in ends with. A name that is not a plain
ASCII identifier is spelled by its UTF-8 bytes, u<hex>_<tag>x: Python allows non-ASCII
identifiers, and C++ reserves names with a leading underscore or a double underscore
(CUDA's __global__, __align__, ... are macros), which mangling must never produce.
Dumps, messages and `fuserir inspect` show the names as written.
"""

import re

from fuserir import op_table
from fuserir.dtypes import DataType

from .preamble import preamble_names

C_TYPES = {DataType.f16: "f16", DataType.bf16: "bf16", DataType.f32: "f32",
           DataType.f64: "f64", DataType.i32: "i32", DataType.i64: "i64",
           DataType.bool: "bool", DataType.welford: "welford"}

_ARITH = (DataType.i32, DataType.i64, DataType.f32, DataType.f64)
_FLOAT = (DataType.f32, DataType.f64)
_INT = (DataType.i32, DataType.i64)
_VECTOR_WORDS = {4: "unsigned int", 8: "u32x2", 16: "u32x4"}   # vector copies by bytes
_HALF = (DataType.f16, DataType.bf16)

# Names the generated code defines or uses; kernel IR names that collide get a suffix.
_CPP_KEYWORDS = set("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
char32_t class compl concept const consteval constexpr constinit const_cast continue
co_await co_return co_yield decltype default delete do double dynamic_cast else enum
explicit export extern false float for friend goto if inline int long mutable namespace new
noexcept not not_eq nullptr operator or or_eq private protected public register
reinterpret_cast requires return short signed sizeof static static_assert static_cast struct
switch template this thread_local throw true try typedef typeid typename union unsigned using
virtual void volatile wchar_t while xor xor_eq
threadIdx blockIdx blockDim gridDim warpSize smem main
""".split())
_RESERVED = (_CPP_KEYWORDS | set(C_TYPES.values())
             | op_table.c_names()
             | {f"ldm{i}" for i in range(4)})     # ldmatrix's result registers
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_]*(?<!_)\Z")     # no leading or trailing _
_RESERVED |= preamble_names()

# The user's names in C (see the module docstring): the tag of each kind.
_USER_TAGS = {"tensor": "", "scalar": "s", "fusion": "kernel"}


def mangle(name, kind):
    """The C identifier of the user's name `name` of `kind` ("tensor", "scalar" or
    "fusion"); see the module docstring."""
    tag = _USER_TAGS[kind]
    if _PLAIN.match(name) and "__" not in name:
        return f"{name}_{tag}"
    return f"u{name.encode().hex()}_{tag}x"


def entry_point(kernel):
    """The C name of `kernel`'s entry point, which the launcher looks up in its cubin: a
    user's fusion name mangled (mangle(name, "fusion")); a kernel built by hand in kernel
    IR keeps its name."""
    return mangle(kernel.name, "fusion") if kernel.user else kernel.name
