"""One kernel built: a scheduled fusion lowered (lowering.pipeline, with driver.proofs'
cache of the async verifier's proofs), refused if the device cannot launch it whatever the
sizes (codegen.launch.check_launch_limits), emitted as CUDA (codegen.cuda) and, for the
GPU, compiled to a cubin (codegen.nvrtc). The driver's compile() and the run-time variants
(64-bit indices, narrower copies) both build here; an automatic plan's kernels are the
ones segmentation's trials lowered, where the build would lower them alike.
"""

import contextlib
import gc
from dataclasses import dataclass, field

from codegen.cuda import emit_cuda
from codegen.launch import check_launch_limits
from codegen import nvrtc
from codegen.nvrtc import CompileError
from fuserir import device as devices
from fuserir.dtypes import DataType
from lowering import kir
from lowering.pipeline import PASS_NAMES, lower

from . import stages
from .proofs import PROOFS


@dataclass
class CompiledKernel:
    """A kernel as built: kernel IR, CUDA text, the cubin (cuda backend), and the vector
    caps it was lowered with ({global tensor: bytes}; empty: the schedule's widths)."""

    name: str
    kir: kir.Kernel
    source: str
    cubin: bytes | None = None
    caps: dict = field(default_factory=dict)

    @property
    def kir_text(self) -> str:
        return kir.format_kernel(self.kir)


def build_kernel(fusion, backend, index_dtype=DataType.i32, vector_caps=None, device=None,
                 trial=None, **options):
    """Lower, emit and (for the GPU) compile one kernel, refusing what `device` (the
    device model; the default where None) cannot launch whatever the sizes. `trial`: the
    kernel segmentation's trial lowered from this fusion with lowering's defaults, taken
    instead of lowering again where this lowering is the same (the defaults, no dumps)."""
    instrument = stages.env_instrument(PASS_NAMES)
    same = (instrument is None and index_dtype is DataType.i32 and vector_caps is None
            and options == _DEFAULTS)
    if trial is not None and same:
        kernel = trial
    else:
        kernel, _ = lower(fusion, index_dtype=index_dtype, vector_caps=vector_caps,
                          instrument=instrument, proofs=PROOFS, **options)
    check_launch_limits(kernel, device or devices.DEFAULT)
    source = emit_cuda(kernel)
    compiled = CompiledKernel(kernel.name, kernel, source, caps=dict(vector_caps or {}))
    if backend == "cuda":
        arch = kernel_arch(kernel, nvrtc.default_arch())
        compiled.cubin = nvrtc.compile_to_cubin(source, kernel.name, arch)
    return compiled


_DEFAULTS = dict(disable_passes=(), drop_syncs=(), verify=True)   # compile()'s options


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector paused while kernels are planned and built:
    lowering and its proofs allocate millions of small objects that live until the build
    ends, and the collections they would trigger walk every one of them again and again
    (a third of a Hopper kernel's proof). What becomes garbage meanwhile is collected
    after it resumes."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def kernel_arch(kernel, arch):
    """The target to compile `kernel` for on a GPU of `arch` (sm_XY): `arch` itself, or its
    architecture-specific target sm_XYa where an instruction the kernel issues exists only
    there (a descriptor's arch_specific, as wgmma on sm_90a; code for an `a` target runs on
    that architecture alone, so other kernels keep the plain one). Refuses a kernel whose
    instructions (the fuserir.instructions descriptors its statements' effects name) need
    a newer GPU, or an architecture-specific instruction of another architecture."""
    cc = int(arch[3:].rstrip("af"))
    issued = ((type(s).__name__, s.effects().instruction) for s in kir.walk(kernel.body))
    used = {name: d for name, d in issued if d is not None}
    need = max((d.arch for d in used.values()), default=0)
    if cc < need:
        newer = ", ".join(f"{stmt} ({d.name}, sm_{d.arch})" for stmt, d in sorted(used.items())
                          if d.arch > cc)
        raise CompileError(f"kernel {kernel.name} uses {newer}, which need sm_{need} or "
                           f"newer; this GPU is {arch}")
    specific = {d.arch for d in used.values() if d.arch_specific}
    if not specific:
        return arch
    if specific != {cc}:
        names = ", ".join(sorted({d.name for d in used.values() if d.arch_specific}))
        raise CompileError(f"kernel {kernel.name} uses {names}, which exist only on "
                           f"sm_{max(specific)}a; this GPU is {arch}")
    return f"sm_{cc}a"
