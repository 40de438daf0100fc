"""One kernel built: a scheduled fusion lowered (lowering.pipeline), refused if the device
cannot launch it whatever the sizes (codegen.launch.check_launch_limits), emitted as CUDA
(codegen.cuda) and, for the GPU, compiled to a cubin (codegen.nvrtc). The driver's
compile() and the run-time variants (64-bit indices, narrower copies) both build here.
"""

from dataclasses import dataclass, field

from codegen.cuda import emit_cuda
from codegen.launch import check_launch_limits
from codegen.nvrtc import CompileError, compile_to_cubin, default_arch
from fuserir import device as devices
from fuserir.dtypes import DataType
from lowering import kir
from lowering.pipeline import PASS_NAMES, lower

from . import stages


@dataclass
class CompiledKernel:
    """A kernel as built: kernel IR, CUDA text, the cubin (cuda backend), and the vector
    caps it was lowered with ({global tensor: bytes}; empty: the schedule's widths)."""

    name: str
    kir: kir.Kernel
    source: str
    cubin: bytes = None
    caps: dict = field(default_factory=dict)

    @property
    def kir_text(self):
        return kir.format_kernel(self.kir)


SM80_STATEMENTS = (kir.Mma, kir.LdMatrix, kir.CpAsync)


def build_kernel(fusion, backend, index_dtype=DataType.i32, vector_caps=None, device=None,
           **options):
    """Lower, emit and (for the GPU) compile one kernel, refusing what `device` (the
    device model; the default where None) cannot launch whatever the sizes."""
    kernel, _ = lower(fusion, index_dtype=index_dtype, vector_caps=vector_caps,
                      instrument=stages.env_instrument(PASS_NAMES), **options)
    check_launch_limits(kernel, device or devices.DEFAULT)
    source = emit_cuda(kernel)
    compiled = CompiledKernel(kernel.name, kernel, source, caps=dict(vector_caps or {}))
    if backend == "cuda":
        arch = default_arch()
        needs = sorted({type(s).__name__ for s in kir.walk(kernel.body)
                        if isinstance(s, SM80_STATEMENTS)})
        if needs and int(arch[3:].rstrip("af")) < 80:
            raise CompileError(f"kernel {kernel.name} uses {', '.join(needs)} (mma.sync "
                               f"m16n8k16, ldmatrix, cp.async), which need sm_80 or newer; "
                               f"this GPU is {arch}")
        compiled.cubin = compile_to_cubin(source, kernel.name, arch)
    return compiled
