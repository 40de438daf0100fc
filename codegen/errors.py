"""Errors of the backends: races the interpreter observes, hazards the verifier refuses.

Both carry every hazard found (not just the first), each naming its kind, buffer, byte
range, the two program points (labelled kernel IR statements), the threads and loop
iterations involved, so a report reads like the story of the bug.
"""

from fuserir.errors import FuserirError
from lowering.errors import Hazard, HazardError, RaceError  # noqa: F401 (re-exported)


class CodegenError(FuserirError):
    """Kernel IR a backend cannot emit: it breaks the kir contract (an operand not of the
    type its node computes in, a shared buffer without a byte offset, ...). The message
    names the kernel, the statement (label and kir text) and the offending expression."""


class CompileError(FuserirError):
    """NVRTC refused generated CUDA source. The message holds NVRTC's log and, for each
    error it reports, the offending generated lines with context (for ptxas errors: the PTX
    line and, through -lineinfo, the CUDA line it came from). Attributes: .log, .source,
    .name, .options."""

    def __init__(self, message, log="", source="", name="", options=()):
        self.log = log
        self.source = source
        self.name = name
        self.options = tuple(options)
        super().__init__(message)


class GpuUnavailableError(FuserirError):
    """The cuda backend needs what this machine lacks: the CUDA packages (CuPy, NVRTC,
    cuda.bindings: the `cuda13` or `cuda12` extra), an NVIDIA driver new enough for them,
    or a GPU. The message says which, how to fix it, and that backend="interp" runs
    without any of them (codegen.gpu_stack). Attributes: .missing (what is missing, in
    words), .driver_version and .runtime_version ((major, minor) where CUDA told them,
    else None)."""

    def __init__(self, message, missing="", driver_version=None, runtime_version=None):
        self.missing = missing
        self.driver_version = driver_version
        self.runtime_version = runtime_version
        super().__init__(message)
