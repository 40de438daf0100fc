"""Code generation: kernel IR becomes CUDA C++ compiled by NVRTC (codegen.cuda,
codegen.nvrtc, codegen.launch), or runs in the CPU interpreter with its race detector
(codegen.interp). codegen.compile is the entry point (codegen.executable)."""

from .errors import CompileError, Hazard, HazardError, RaceError
from .executable import BACKENDS, CompiledKernel, Executable, compile

__all__ = ["BACKENDS", "CompileError", "CompiledKernel", "Executable", "Hazard",
           "HazardError", "RaceError", "compile"]
