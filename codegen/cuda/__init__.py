"""Kernel IR -> CUDA C++ text that NVRTC compiles without a single #include.

`emit_cuda(kernel)` returns one self-contained translation unit: a preamble holding only
what the kernel uses (type names, 16-bit float structs converted with inline PTX `cvt`,
math helpers), then the kernel as `extern "C" __global__`.

    emitter.py      emit_cuda; the ABI, the signature and one rule per statement
    hopper.py       the rules of the sm_90 statements (kir.hopper), a mixin of the emitter
    tma.py          TMA's rules and spellings, one instruction family, a mixin too
    expressions.py  the emitter's state, C identifiers, one rule per expression
    preamble.py     the snippets a kernel's preamble is made of, by what it uses
    ptx.py          the inline-asm spellings (instructions from fuserir.instructions)
    ptx_sm90.py     the same for the sm_90 statements, and their preamble helpers
    names.py        C type names, reserved identifiers, mangle, entry_point
    literals.py     the C literals of constants

This package re-exports what the rest of codegen, the tools and the tests use.
"""

from ..errors import CodegenError
from .emitter import emit_cuda
from .names import C_TYPES, entry_point, mangle
# the fixed names and the identifier pattern that tests/test_names.py checks mangling against
from .names import _IDENT, _RESERVED  # noqa: F401
from .preamble import preamble_names

__all__ = ["emit_cuda", "entry_point", "mangle", "C_TYPES", "preamble_names", "CodegenError"]
