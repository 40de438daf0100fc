"""The compile driver: the floor above codegen and below the CLI.

    exe = driver.compile(fusion, backend="cuda" | "interp", ...)   # also codegen.compile

It owns what needs every layer below it: compile() and its cache (driver.compiler),
cutting a fusion into kernels and planning unscheduled ones per size class
(driver.segmentation, with fuserir.scheduler.auto), building one kernel through
lowering, CUDA emission and NVRTC (driver.build), the Executable that binds inputs, picks
kernel variants (driver.vector_widths) and launches (driver.executable), and the stage
texts and FUSERIR_DUMP hooks (driver.stages). `codegen.compile` is the public contract
(docs/architecture.md, "The contract"); the codegen package re-exports these names from here.
"""

from codegen.errors import GpuUnavailableError

from .build import CompiledKernel
from .compiler import BACKENDS, compile
from .executable import Executable

__all__ = ["BACKENDS", "CompiledKernel", "Executable", "GpuUnavailableError", "compile"]
