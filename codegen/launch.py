"""Launch a compiled kernel on the GPU through CuPy: the minimal, correct path.

    launch(kernel, cubin, args, stream=None)

`args` maps each TensorParam's buffer name to a CuPy array and each ScalarParam's name to
an int. Arguments are passed in the ABI order of codegen.cuda (tensor pointers, then
every tensor's strides in elements, then the workspace pointers, then the scalars, all
strides and scalars in the kernel's index dtype).

Workspaces (kir.Workspace: split-K partial sums, semaphores) may be given in `args` under
their buffer names (1-D, contiguous, at least `size` elements); the others come from a
WorkspacePool per device: allocated as zeros the first time, sized from the launch's
scalars, and kept for later launches of the same kernel (a semaphore workspace is zeroed
once: the kernel leaves it zero), reallocated (zeros again) when a launch needs more. A
kept workspace is shared by every launch of its kernel, so launches of one kernel must
not overlap (one stream at a time). codegen.executable keeps its own pool the same way
(numpy arrays for the interpreter).

Grid and block come from kernel.launch evaluated with the scalars
(lowering.kir.evaluate_scalar, C integer semantics); the dynamic shared memory is
lowering.kir.shared_bytes, with the function's opt-in limit raised above 48 KB.

Checked here: every argument is present, arrays are CuPy arrays of the buffer's dtype (a
bf16 buffer takes a 2-byte integer array holding the bits, since CuPy has no bfloat16),
their rank and shape match the kernel's sizes, strides are whole elements and fit the
index type, extents are positive. The full executor (torch/numpy inputs, allocation of
outputs, size classes) lives elsewhere.
"""

import functools
import hashlib

import numpy as np

from fuserir.dtypes import DataType
from lowering import kir

__all__ = ["launch", "load_function", "launch_config", "workspace_sizes", "WorkspacePool"]

_STATIC_SHARED_LIMIT = 48 * 1024
_modules = {}       # (device id, sha256 of cubin) -> cupy Module (kept loaded)
_functions = {}     # (device id, id(cubin), name) -> (cubin, function): no rehash per launch
_configs = {}       # (id(kernel), scalar values) -> (kernel, (grid, block, shared bytes))


def load_function(cubin, name):
    """The CUDA function `name` of `cubin` (bytes) on the current device, loading the
    module once per device."""
    import cupy
    from cupy.cuda import function
    device = cupy.cuda.Device().id
    known = _functions.get((device, id(cubin), name))
    if known is not None and known[0] is cubin:
        return known[1]
    key = (device, hashlib.sha256(cubin).hexdigest())
    module = _modules.get(key)
    if module is None:
        module = function.Module()
        module.load(bytes(cubin))
        _modules[key] = module
    func = module.get_function(name)
    _functions[(device, id(cubin), name)] = (cubin, func)
    return func


def device_shared_limit():
    """The most shared memory one block of the current device may opt in to (bytes)."""
    import cupy
    return _shared_limit(cupy.cuda.Device().id)


@functools.lru_cache(maxsize=None)
def _shared_limit(device):
    import cupy
    runtime = cupy.cuda.runtime
    return runtime.deviceGetAttribute(runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin, device)


def launch_config(kernel, scalars):
    """(grid, block, shared_bytes) of `kernel` for the scalar values `scalars` (computed
    once per kernel and values)."""
    key = (id(kernel), tuple(sorted(scalars.items())))
    known = _configs.get(key)
    if known is not None and known[0] is kernel:
        return known[1]
    config = _launch_config(kernel, scalars)
    _configs[key] = (kernel, config)
    return config


def _launch_config(kernel, scalars):
    cfg = kernel.launch
    if cfg is None or cfg.grid is None or cfg.block is None:
        raise ValueError(f"kernel {kernel.name} has no launch configuration")
    grid = tuple(_positive(kernel, f"grid.{'xyz'[i]}", kir.evaluate_scalar(e, scalars))
                 for i, e in enumerate(cfg.grid))
    block = tuple(_positive(kernel, f"block.{'xyz'[i]}", kir.evaluate_scalar(e, scalars))
                  for i, e in enumerate(cfg.block))
    return grid, block, kir.shared_bytes(kernel, scalars)


def workspace_sizes(kernel, scalars):
    """[(Workspace, elements)] of `kernel` for the scalar values `scalars` (computed once
    per kernel and values)."""
    return _sizes(kernel, scalars)[1]


def tensor_sizes(kernel, scalars):
    """The extents each tensor parameter must have, per parameter, for `scalars`."""
    return _sizes(kernel, scalars)[0]


_sizes_known = {}    # (id(kernel), scalar values) -> (kernel, (tensor sizes, workspaces))


def _sizes(kernel, scalars):
    key = (id(kernel), tuple(sorted(scalars.items())))
    known = _sizes_known.get(key)
    if known is None or known[0] is not kernel:
        tensors = [tuple(kir.evaluate_scalar(e, scalars) for e in p.sizes)
                   for p in kernel.tensor_params]
        known = _sizes_known[key] = (kernel, (tensors, _workspace_sizes(kernel, scalars)))
    return known[1]


def _workspace_sizes(kernel, scalars):
    sizes = []
    for w in kernel.workspaces:
        n = kir.evaluate_scalar(w.size, scalars)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"kernel {kernel.name}: workspace {w.buffer.name} size "
                             f"{kir.format_expr(w.size)} evaluates to {n!r}")
        sizes.append((w, n))
    return sizes


class WorkspacePool:
    """Workspaces kept across launches: one array per (kernel, workspace), made by
    `zeros(elements, DataType)` when first needed and again (larger) when a launch needs
    more elements than the kept one has. Kernels are held, so ids stay valid."""

    def __init__(self, zeros):
        self._zeros = zeros
        self._arrays = {}       # (id(kernel), buffer name) -> (kernel, array)

    def arrays(self, kernel, scalars):
        """{workspace buffer name: array} for a launch of `kernel` with `scalars`."""
        out = {}
        for w, size in workspace_sizes(kernel, scalars):
            key = (id(kernel), w.buffer.name)
            known = self._arrays.get(key)
            if known is None or known[0] is not kernel or len(known[1]) < size:
                known = self._arrays[key] = (kernel, self._zeros(max(size, 1),
                                                                 w.buffer.dtype))
            out[w.buffer.name] = known[1]
        return out

    def forget(self, kernel):
        """Drop `kernel`'s workspaces (after a launch that failed and may have left its
        semaphores set): the next launch allocates zeros again."""
        for key in [k for k, (kern, _) in self._arrays.items() if kern is kernel]:
            del self._arrays[key]


def cupy_zeros(elements, dtype):
    """A CuPy array of zeros (bf16 as its uint16 bits: CuPy has no bfloat16)."""
    import cupy
    host = np.uint16 if dtype is DataType.bf16 else dtype.numpy
    return cupy.zeros(elements, dtype=host)


_pools = {}         # device id -> WorkspacePool of launch()'s own workspaces


def _positive(kernel, what, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"kernel {kernel.name}: {what} evaluates to {value!r}; launch "
                         "extents must be positive integers")
    return value


def launch(kernel, cubin, args, stream=None):
    """Run `kernel` (its compiled `cubin`) once with `args`; asynchronous on `stream`
    (default: CuPy's current stream)."""
    import cupy
    from cupy.cuda import driver

    index_np = kernel.index_dtype.numpy
    limits = np.iinfo(index_np)
    scalars = {}
    for p in kernel.scalar_params:
        name = p.var.name
        if name not in args:
            raise ValueError(f"kernel {kernel.name}: missing scalar argument {name!r}")
        value = args[name]
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"kernel {kernel.name}: scalar {name} must be an int, got "
                            f"{type(value).__name__}")
        value = int(value)
        if not limits.min <= value <= limits.max:
            raise ValueError(f"kernel {kernel.name}: scalar {name}={value} does not fit the "
                             f"index type {kernel.index_dtype}")
        scalars[name] = value

    pointers, strides = [], []
    expected = tensor_sizes(kernel, scalars)
    for p, want_shape in zip(kernel.tensor_params, expected):
        b = p.buffer
        if b.name not in args:
            raise ValueError(f"kernel {kernel.name}: missing tensor argument {b.name!r}")
        a = args[b.name]
        if not isinstance(a, cupy.ndarray):
            raise TypeError(f"kernel {kernel.name}: {b.name} must be a cupy array, got "
                            f"{type(a).__name__}")
        if not _dtype_ok(a.dtype, b.dtype):
            raise TypeError(f"kernel {kernel.name}: {b.name} is {b.dtype}, the array is "
                            f"{a.dtype}")
        if a.ndim != len(p.sizes):
            raise ValueError(f"kernel {kernel.name}: {b.name} has rank {len(p.sizes)}, the "
                             f"array has shape {a.shape}")
        for axis, (size, want) in enumerate(zip(p.sizes, want_shape)):
            if a.shape[axis] != want:
                raise ValueError(f"kernel {kernel.name}: {b.name} axis {axis} must have "
                                 f"extent {kir.format_expr(size)} = {want}, the array has "
                                 f"shape {a.shape}")
        for axis, stride in enumerate(a.strides):
            if stride % a.itemsize:
                raise ValueError(f"kernel {kernel.name}: {b.name} axis {axis} has stride "
                                 f"{stride} bytes, not a whole number of {a.itemsize}-byte "
                                 "elements")
            elements = stride // a.itemsize
            if not limits.min <= elements <= limits.max:
                raise ValueError(f"kernel {kernel.name}: {b.name} stride {elements} does not "
                                 f"fit the index type {kernel.index_dtype}")
            strides.append(index_np.type(elements))
        pointers.append(a)

    workspaces = []
    if kernel.workspaces:
        if any(w.buffer.name not in args for w in kernel.workspaces):
            device = cupy.cuda.Device().id
            pool = _pools.setdefault(device, WorkspacePool(cupy_zeros))
            kept = pool.arrays(kernel, scalars)
        for w, size in workspace_sizes(kernel, scalars):
            name = w.buffer.name
            a = args[name] if name in args else kept[name]
            if not isinstance(a, cupy.ndarray):
                raise TypeError(f"kernel {kernel.name}: workspace {name} must be a cupy "
                                f"array, got {type(a).__name__}")
            if not _dtype_ok(a.dtype, w.buffer.dtype):
                raise TypeError(f"kernel {kernel.name}: workspace {name} is "
                                f"{w.buffer.dtype}, the array is {a.dtype}")
            if a.ndim != 1 or a.size < size or (a.size > 1 and a.strides[0] != a.itemsize):
                raise ValueError(f"kernel {kernel.name}: workspace {name} needs a "
                                 f"contiguous 1-D array of at least {size} elements, got "
                                 f"shape {a.shape}, strides {a.strides}")
            workspaces.append(a)

    grid, block, shared = launch_config(kernel, scalars)
    func = load_function(cubin, kernel.name)
    if shared > _STATIC_SHARED_LIMIT:
        limit = device_shared_limit()
        if shared > limit:
            raise ValueError(f"kernel {kernel.name} needs {shared} bytes of shared memory; "
                             f"this device allows {limit} per block")
        driver.funcSetAttribute(func.ptr,
                                driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                shared)
    values = pointers + strides + workspaces + [index_np.type(scalars[p.var.name])
                                                for p in kernel.scalar_params]
    func(grid, block, tuple(values), shared_mem=shared, stream=stream)


def _dtype_ok(array_dtype, dtype):
    if dtype is DataType.bf16:       # CuPy has no bfloat16: accept the bits
        return array_dtype in (np.dtype(np.uint16), np.dtype(np.int16)) or \
            array_dtype == dtype.numpy
    return array_dtype == dtype.numpy
