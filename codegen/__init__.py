"""Code generation: kernel IR becomes CUDA C++ compiled by NVRTC (codegen.cuda,
codegen.nvrtc, codegen.launch), or runs in the CPU interpreter with its race detector
(codegen.interp).

`codegen.compile` is the public entry point (DESIGN.md section 3), but compiling a fusion
takes every layer (scheduling, lowering, this package): it lives in the driver above
(driver.compile), and this package re-exports it, and the driver's Executable,
CompiledKernel and BACKENDS, lazily on first use (PEP 562), so that nothing here imports
the driver when a module of this package is imported.
"""

from .errors import CompileError, Hazard, HazardError, RaceError

_FROM_DRIVER = ("BACKENDS", "CompiledKernel", "Executable", "compile")

__all__ = ["CompileError", "Hazard", "HazardError", "RaceError", *_FROM_DRIVER]


def __getattr__(name):
    if name in _FROM_DRIVER:
        import driver           # the one re-export of a layer above (see the header)
        return getattr(driver, name)
    raise AttributeError(f"module 'codegen' has no attribute {name!r}")
