"""Kernel IR -> CUDA C++ (codegen.cuda.emitter); this package re-exports what the rest
of codegen, the tools and the tests use."""

from ..errors import CodegenError
from .emitter import emit_cuda
from .names import _IDENT, _RESERVED, C_TYPES, entry_point, mangle
from .preamble import preamble_names

__all__ = ["emit_cuda", "entry_point", "mangle", "C_TYPES"]
