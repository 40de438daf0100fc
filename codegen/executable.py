"""codegen.compile: a scheduled fusion -> an Executable that runs on either backend.

    exe = codegen.compile(fusion, backend="cuda" | "interp",
                          disable_passes=(), drop_syncs=(), verify=True)
    exe.kernels[0].source         # CUDA text (both backends)
    outs = exe.run({"x": x, ...}) # {output name: array}

Compilation never needs a GPU: the fusion is lowered (lowering.pipeline) and, for the cuda
backend, compiled to a cubin by NVRTC at compile(); sizes and named scalars are kernel
arguments bound at run(). run() checks inputs against the fusion (dtypes, ranks, sizes),
allocates outputs poisoned with NaN (or an integer sentinel) so an unwritten element shows,
and launches: on the GPU through CuPy, or in the interpreter (which raises RaceError for
any hazard it observes). The full executor (torch streams, caches per size class,
automatic schedules) grows here with the executor issue.
"""

from dataclasses import dataclass

import numpy as np

from fuserir import reference
from fuserir.dtypes import DataType
from fuserir.errors import EvaluationError, FuserirError
from fuserir.ir import extent as ext
from lowering import kir
from lowering.pipeline import lower

from .cuda import emit_cuda

BACKENDS = ("cuda", "interp")


@dataclass
class CompiledKernel:
    name: str
    kir: kir.Kernel
    source: str
    cubin: bytes = None

    @property
    def kir_text(self):
        return kir.format_kernel(self.kir)


def _poison(dtype):
    if dtype.is_float:
        return np.nan
    if dtype is DataType.bool:
        return True
    return np.iinfo(dtype.numpy).min


INDEX_LIMIT = 2 ** 31 - 1


class Executable:
    def __init__(self, fusion, kernels, backend, options):
        self.fusion = fusion
        self.kernels = kernels            # compiled with 32-bit indices
        self.backend = backend
        self._options = options
        self._wide = None                 # the same kernels with 64-bit indices, on demand

    def _kernels_for(self, env, given):
        """The 32-bit-index kernels, or 64-bit ones where some tensor spans more elements
        (or offsets) than an i32 holds."""
        spans = [max(1, int(np.prod([ext.evaluate(e, env) for e in t.shape])))
                 for t in self.fusion.tensors if not t.is_input]
        spans += [_element_span(a) for a in given.values()]
        if max(spans, default=1) <= INDEX_LIMIT:
            return self.kernels
        if self._wide is None:
            self._wide = _build(self.fusion, self.backend, index_dtype=DataType.i64,
                                **self._options)
        return self._wide

    def _bind(self, inputs):
        """(input arrays by name, symbol values) checked against the fusion."""
        host = {k: v for k, v in inputs.items() if not _is_device_array(v)}
        shapes = {k: _ShapeOnly(v) for k, v in inputs.items() if _is_device_array(v)}
        arrays, env = reference.bind_inputs(
            self.fusion, {**host, **shapes},
            convert=lambda a: a if isinstance(a, _ShapeOnly) else np.asarray(a))
        return {t.name: inputs[t.name] for t in arrays}, env

    def run(self, inputs, blocks=None):
        """Run on `inputs` ({name: array} plus {name: int} for named scalars); returns
        {output name: array} (numpy for interp, CuPy for cuda). `blocks` (interp only)
        runs just those blocks (x, y, z); the other blocks' outputs stay poisoned."""
        given, env = self._bind(inputs)
        kernel = self.kernels[0]
        for p in kernel.kir.scalar_params:
            if p.var.name not in env:
                raise EvaluationError(f"kernel {kernel.name} needs a value for "
                                      f"'{p.var.name}'; pass it in the inputs")
        shapes = {t.name: [ext.evaluate(e, env) for e in t.shape] for t in self.fusion.outputs}
        kernel = self._kernels_for(env, given)[0]
        if self.backend == "interp":
            if blocks is not None:
                blocks = [tuple(b) + (0,) * (3 - len(b)) for b in blocks]
            return self._run_interp(kernel, given, env, shapes, blocks)
        if blocks is not None:
            raise FuserirError("run(blocks=...) selects blocks in the interpreter only")
        return self._run_cuda(kernel, given, env, shapes)

    def _run_interp(self, kernel, given, env, shapes, blocks):
        from .interp import run_kernel
        args = {name: reference.to_numpy(a) for name, a in given.items()}
        outputs = {t.name: np.full(shapes[t.name], _poison(t.dtype), dtype=t.dtype.numpy)
                   for t in self.fusion.outputs}
        run_kernel(kernel.kir, {**args, **outputs, **_scalars(kernel, env)}, blocks=blocks)
        return outputs

    def _run_cuda(self, kernel, given, env, shapes):
        import cupy

        from .launch import launch

        def device(array):
            if isinstance(array, np.ndarray) and array.dtype == DataType.bf16.numpy:
                array = array.view(np.uint16)
            return cupy.asarray(array)

        args = {name: device(a) for name, a in given.items()}
        outputs = {}
        for t in self.fusion.outputs:
            host_dtype = np.uint16 if t.dtype is DataType.bf16 else t.dtype.numpy
            fill = np.array(_poison(t.dtype), dtype=t.dtype.numpy).view(host_dtype)
            outputs[t.name] = cupy.full(shapes[t.name], fill, dtype=host_dtype)
        launch(kernel.kir, kernel.cubin, {**args, **outputs, **_scalars(kernel, env)})
        return outputs


def _element_span(array):
    """One past the largest element offset an array's strides reach."""
    strides = getattr(array, "strides", None)
    if strides is None or not array.shape:
        return 1
    itemsize = array.dtype.itemsize
    return 1 + sum((d - 1) * abs(s) // itemsize for d, s in zip(array.shape, strides) if d)


class _ShapeOnly:
    """A device array seen only through its shape and dtype (binding checks no data)."""

    def __init__(self, array):
        self.shape = tuple(array.shape)
        self.dtype = np.dtype(str(array.dtype).replace("torch.", "")) \
            if not isinstance(array.dtype, np.dtype) else array.dtype
        self.ndim = len(self.shape)


def _is_device_array(value):
    module = type(value).__module__
    return module.startswith("cupy") or module.startswith("torch")


def _scalars(kernel, env):
    return {p.var.name: int(env[p.var.name]) for p in kernel.kir.scalar_params}


def compile(fusion, backend="cuda", disable_passes=(), drop_syncs=(), verify=True):
    """Lower `fusion` and build it for `backend` (see module docstring)."""
    if backend not in BACKENDS:
        raise FuserirError(f"unknown backend {backend!r}; expected one of "
                           f"{', '.join(BACKENDS)}")
    options = dict(disable_passes=tuple(disable_passes), drop_syncs=tuple(drop_syncs),
                   verify=verify)
    return Executable(fusion, _build(fusion, backend, **options), backend, options)


def _build(fusion, backend, index_dtype=DataType.i32, **options):
    kernel, _ = lower(fusion, index_dtype=index_dtype, **options)
    source = emit_cuda(kernel)
    compiled = CompiledKernel(kernel.name, kernel, source)
    if backend == "cuda":
        from .nvrtc import compile_to_cubin
        compiled.cubin = compile_to_cubin(source, kernel.name)
    return [compiled]
