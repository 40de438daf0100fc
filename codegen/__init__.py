"""Code generation: kernel IR becomes CUDA C++ compiled by NVRTC (codegen.cuda,
codegen.nvrtc, codegen.launch), or runs in the CPU interpreter with its race detector
(codegen.interp).

`codegen.compile` is the public entry point, but compiling a fusion takes every layer
(scheduling, lowering, this package): it lives in the driver above (driver.compile). This
module is the contract, above every layer (tests/test_layers.py): it re-exports the
driver's compile, Executable, CompiledKernel and BACKENDS lazily on first use (PEP 562),
so that importing a module of this package loads no driver; nothing inside the packages
imports it, only this package's modules.
"""

from .errors import CompileError, GpuUnavailableError, Hazard, HazardError, RaceError

_FROM_DRIVER = ("BACKENDS", "CompiledKernel", "Executable", "compile")

__all__ = ["CompileError", "GpuUnavailableError", "Hazard", "HazardError", "RaceError", *_FROM_DRIVER]


def __getattr__(name):
    if name in _FROM_DRIVER:
        import driver           # the contract sits above the driver (see the header)
        return getattr(driver, name)
    raise AttributeError(f"module 'codegen' has no attribute {name!r}")
