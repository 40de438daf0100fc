"""Launch a compiled kernel on the GPU through CuPy, checking its arguments once per
argument signature.

    launch(kernel, cubin, args, stream=None)
    bound = bind(kernel, cubin, args)          # launch()'s checks, without launching
    bound(tensors, workspaces, stream=None)    # launch with arrays of that signature

`args` maps each TensorParam's buffer name to a CuPy array and each ScalarParam's name to
an int. Arguments are passed in the ABI order of codegen.cuda (tensor pointers, then
every tensor's strides in elements, then one 128-byte TMA tensor map per
kernel.tensor_maps entry, then the workspace pointers, then the scalars, all strides and
scalars in the kernel's index dtype).

Tensor maps (kir.TensorMap) are built from the bound tensors: their fields (dimensions,
byte strides, box, swizzle; codegen.tensor_maps, which checks them against the array)
once per argument signature, the encoded 128 bytes per launch from the tensor's address,
kept per (device, address, fields), so a launch at addresses seen before encodes nothing.
Kernels without tensor maps do none of this.

Workspaces (kir.Workspace: split-K partial sums, semaphores) may be given in `args` under
their buffer names (1-D, contiguous, at least `size` elements); the others come from a
WorkspacePool per device: allocated as zeros the first time, sized from the launch's
scalars, and kept for later launches of the same kernel (a semaphore workspace is zeroed
once: the kernel leaves it zero), reallocated (zeros again) when a launch needs more. A
kept workspace is shared by every launch of its kernel, so launches of one kernel must
not overlap (one stream at a time). driver.executable keeps its own pool the same way
(numpy arrays for the interpreter).

Grid and block come from kernel.launch evaluated with the scalars
(lowering.kir.evaluate_scalar, C integer semantics); the dynamic shared memory is
lowering.kir.shared_bytes. Above 48 KB the function's opt-in limit is raised
(funcSetAttribute) only when a launch needs more than the function was opted in to
before, so the limit only grows and a later launch needing less leaves it alone.

Checked here: every argument is present, arrays are CuPy arrays of the buffer's dtype (a
bf16 buffer takes a 2-byte integer array holding the bits, since CuPy has no bfloat16),
their rank and shape match the kernel's sizes, strides are whole elements and fit the
index type, extents are positive, workspaces are 1-D, contiguous and large enough, the
shared memory fits the device. The full executor (torch/numpy inputs, allocation of
outputs, size classes) lives elsewhere.

What is computed once. All of the above depends on the arguments only through their
signature: the current device, each scalar's type and value, each array's type, shape,
strides and dtype, and which workspaces are given. The first launch of a kernel and cubin
with a signature checks everything (bind) and keeps a BoundLaunch: the CUDA function, the
launch configuration, and the strides and scalars already converted to kernel arguments.
A later launch() with the same signature builds the signature tuple, finds the
BoundLaunch and launches; any difference (a shape, a stride, a dtype, a scalar's value
or type, an array's type, an argument missing) finds none and goes through the full
checks, which raise the errors above. Each kernel keeps up to SIGNATURES_KEPT signatures
(the oldest is forgotten first). Launch sizes, workspace sizes and configurations are
also kept per kernel and scalar values, loaded modules per device and cubin, and a
WorkspacePool answers again from what it answered until its arrays change.
"""

import ctypes
import functools
import hashlib
import os
import struct

import numpy as np

from fuserir import device as devices
from fuserir.dtypes import DataType
from fuserir.errors import FuserirError
from lowering import kir

from . import tensor_maps
from .cuda import entry_point

__all__ = ["launch", "bind", "BoundLaunch", "load_function", "launch_config",
           "workspace_sizes", "WorkspacePool"]

_STATIC_SHARED_LIMIT = 48 * 1024
SIGNATURES_KEPT = 256   # per kernel: argument signatures whose checks are kept
_modules = {}       # (device id, sha256 of cubin) -> cupy Module (kept loaded)
_functions = {}     # (device id, id(cubin), name) -> (cubin, function): no rehash per launch
_configs = {}       # (id(kernel), scalar values) -> (kernel, (grid, block, shared bytes))
_opted_in = {}      # CUDA function handle -> dynamic shared bytes its opt-in limit allows
_launchers = {}     # (id(kernel), id(cubin)) -> _Launcher (which holds both)
_tensor_maps = {}   # (device id, address, TensorMapFields) -> encoded map (numpy V128)


@functools.cache
def cupy_module():
    """CuPy, imported when first needed (compiling and the interpreter need no GPU), once:
    an import statement costs more than this call on a per-launch path."""
    import cupy
    return cupy


def current_device():
    """The id of CuPy's current CUDA device."""
    return cupy_module().cuda.runtime.getDevice()


def remember(cache, key, value):
    """cache[key] = value, forgetting the oldest entries beyond SIGNATURES_KEPT."""
    cache[key] = value
    while len(cache) > SIGNATURES_KEPT:
        del cache[next(iter(cache))]
    return value


def load_function(cubin, name):
    """The CUDA function `name` of `cubin` (bytes) on the current device, loading the
    module once per device."""
    from cupy.cuda import function
    device = current_device()
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
    return device_model().shared_limit


def device_model():
    """The fuserir.device.Device of CuPy's current GPU, or fuserir.device.DEFAULT (the
    H200) where no GPU answers (compiling and the interpreter need none)."""
    try:
        device = current_device()
    except Exception:  # noqa: BLE001 - no driver, no device, no CuPy
        return devices.DEFAULT
    return _device_model(device)


@functools.lru_cache(maxsize=None)
def _device_model(device):
    runtime = cupy_module().cuda.runtime
    props = runtime.getDeviceProperties(device)

    def attribute(name):
        return runtime.deviceGetAttribute(getattr(runtime, name), device)

    name = props["name"]
    return devices.Device(
        name.decode() if isinstance(name, bytes) else str(name),
        (props["major"], props["minor"]), sms=attribute("cudaDevAttrMultiProcessorCount"),
        shared_limit=attribute("cudaDevAttrMaxSharedMemoryPerBlockOptin"),
        l2_bytes=attribute("cudaDevAttrL2CacheSize"))


def _kernel_key(kernel, scalars):
    """The key of what is kept per kernel and scalar values."""
    return id(kernel), tuple(sorted(scalars.items()))


def launch_config(kernel, scalars):
    """(grid, block, shared_bytes) of `kernel` for the scalar values `scalars` (computed
    once per kernel and values)."""
    key = _kernel_key(kernel, scalars)
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


class LaunchLimitError(FuserirError):
    """A kernel the device cannot launch: too many threads in a block or along one of its
    dimensions, too many blocks along a grid dimension, more shared memory than a block
    may have, more local memory than a thread may have. The message has the numbers."""


def check_launch_limits(kernel, device, scalars=None):
    """Refuse (LaunchLimitError) what `device` (a fuserir.device.Device) cannot launch.
    With `scalars` None (when the kernel is built) only what does not depend on run-time
    sizes is checked: constant block dimensions, constant shared memory, local arrays;
    with the scalar values (before a launch, on either backend) everything, including the
    grid."""
    def bad(why):
        where = f" at {', '.join(f'{k}={v}' for k, v in sorted(scalars.items()))}" \
            if scalars else ""
        raise LaunchLimitError(f"kernel {kernel.name}{where}: {why}, over the limit of "
                               f"{device.name}")

    def value(expr):
        try:
            return kir.evaluate_scalar(expr, scalars or {})
        except (KeyError, ValueError):
            return None               # depends on a size not known yet

    cfg = kernel.launch
    block = [value(e) for e in cfg.block]
    for axis, (n, most) in enumerate(zip(block, device.max_block)):
        if n is not None and n > most:
            bad(f"{n} threads along block {'xyz'[axis]} (at most {most})")
    if None not in block and block[0] * block[1] * block[2] > device.max_threads:
        bad(f"{block[0] * block[1] * block[2]} threads per block {tuple(block)} (at most "
            f"{device.max_threads})")
    if scalars is not None:
        grid = [value(e) for e in cfg.grid]
        for axis, (n, most) in enumerate(zip(grid, device.max_grid)):
            if n is not None and n > most:
                bad(f"{n} blocks along grid {'xyz'[axis]} (at most {most})")
    try:
        shared = kir.shared_bytes(kernel, scalars or {})
    except (KeyError, ValueError):
        shared = None
    if shared is not None and shared > device.shared_limit:
        bad(f"{shared} bytes of shared memory per block (at most {device.shared_limit})")
    local = 0
    for s in kir.walk(kernel.body):
        if isinstance(s, kir.Allocate) and s.buffer.memory is kir.Memory.local:
            elements = value(s.buffer.size)
            local += (elements or 0) * s.buffer.dtype.itemsize
    if local > device.local_bytes:
        bad(f"{local} bytes of local arrays per thread (at most {device.local_bytes})")


def workspace_sizes(kernel, scalars):
    """[(Workspace, elements)] of `kernel` for the scalar values `scalars` (computed once
    per kernel and values)."""
    return _sizes(kernel, scalars)[1]


def tensor_sizes(kernel, scalars):
    """The extents each tensor parameter must have, per parameter, for `scalars`."""
    return _sizes(kernel, scalars)[0]


_sizes_known = {}    # (id(kernel), scalar values) -> (kernel, (tensor sizes, workspaces))


def _sizes(kernel, scalars):
    key = _kernel_key(kernel, scalars)
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
    more elements than the kept one has. Kernels are held, so ids stay valid. The
    {name: array} answer for a kernel and scalar values is kept until the pool changes,
    so asking again is one lookup."""

    def __init__(self, zeros):
        self._zeros = zeros
        self._arrays = {}       # (id(kernel), buffer name) -> (kernel, array)
        self._answers = {}      # (id(kernel), scalar values) -> (kernel, {name: array})
        self.generation = 0     # counts the changes of the arrays kept: an answer holds
                                # while it has not changed

    def arrays(self, kernel, scalars):
        """{workspace buffer name: array} for a launch of `kernel` with `scalars` (the
        same dict while the pool keeps those arrays: do not modify it)."""
        key = _kernel_key(kernel, scalars)
        known = self._answers.get(key)
        if known is not None and known[0] is kernel:
            return known[1]
        out = {}
        for w, size in workspace_sizes(kernel, scalars):
            array_key = (id(kernel), w.buffer.name)
            kept = self._arrays.get(array_key)
            if kept is None or kept[0] is not kernel or len(kept[1]) < size:
                self._answers.clear()       # answers may name the array replaced here
                self.generation += 1
                kept = self._arrays[array_key] = (kernel, self._zeros(max(size, 1),
                                                                      w.buffer.dtype))
            out[w.buffer.name] = kept[1]
        self._answers[key] = (kernel, out)
        return out

    def forget(self, kernel):
        """Drop `kernel`'s workspaces (after a launch that failed and may have left its
        semaphores set): the next launch allocates zeros again."""
        for key in [k for k, (kern, _) in self._arrays.items() if kern is kernel]:
            del self._arrays[key]
        self._answers.clear()
        self.generation += 1


def cupy_zeros(elements, dtype):
    """A CuPy array of zeros (bf16 as its uint16 bits: CuPy has no bfloat16)."""
    host = np.uint16 if dtype is DataType.bf16 else dtype.numpy
    return cupy_module().zeros(elements, dtype=host)


_pools = {}         # device id -> WorkspacePool of launch()'s own workspaces


def _pool(device):
    pool = _pools.get(device)
    if pool is None:
        pool = _pools[device] = WorkspacePool(cupy_zeros)
    return pool


def _positive(kernel, what, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"kernel {kernel.name}: {what} evaluates to {value!r}; launch "
                         "extents must be positive integers")
    return value


class BoundLaunch:
    """A launch of one kernel checked for one argument signature: the function, grid,
    block and dynamic shared bytes, the strides and scalars as kernel arguments, and the
    scalar values by name. Calling it launches with `tensors` (in the order of
    `tensor_names`) and `workspaces` (in the order of `workspace_names`) without checking
    them: they must have the signature it was bound for.

    Where the CUDA driver is at hand, the call goes straight to cuLaunchKernel with every
    parameter packed into one buffer as the kernel's ABI lays them out (each at its natural
    alignment, in order: pointers 8 bytes, index-typed strides and scalars 4 or 8), built
    once; a call only writes the arrays' addresses into it. CuPy's launch converts every
    argument to a C value on every call, which cost most of a launch's host time (18 us for
    the seed kernel's 17 arguments on the H200's host). Without the driver (the tests'
    recording GPU) it launches through CuPy with the same arguments."""

    __slots__ = ("func", "grid", "block", "shared", "strides", "scalars", "scalar_values",
                 "tensor_names", "workspace_names", "pooled", "_packed")

    def __init__(self, launcher, func, config, strides, scalar_values, pooled):
        self.func = func
        self.grid, self.block, self.shared = config
        self.strides = tuple(strides)
        index = launcher.kernel.index_dtype.numpy.type
        self.scalars = tuple(index(scalar_values[p.var.name])
                             for p in launcher.kernel.scalar_params)
        self.scalar_values = scalar_values
        self.tensor_names = launcher.tensor_names
        self.workspace_names = launcher.workspace_names
        self.pooled = pooled      # a workspace not given: launch() takes the pool's
        self._packed = _PackedLaunch.for_bound(self, len(self.tensor_names),
                                               len(self.workspace_names))

    def __call__(self, tensors, workspaces, stream=None):
        if self._packed is not None:
            self._packed(tensors, workspaces, stream)
            return
        self.func(self.grid, self.block, (*tensors, *self.strides, *workspaces, *self.scalars),
                  shared_mem=self.shared, stream=stream)


class _MappedLaunch(BoundLaunch):
    """The BoundLaunch of a kernel with tensor maps: each call takes the maps of its
    tensors' addresses (tensor_map_value) and passes them after the strides as CuPy
    arguments (numpy V128, by value).

    Always through CuPy's launch, never the packed buffer, whose layout (each parameter
    at its natural alignment from offset 0) does not hold for the 64-byte aligned map:
    checked on the H200 with cuFuncGetParamInfo, after two pointers and three i32 strides
    (28 bytes) the map sits at offset 48, not 64 (as if aligned in the constant bank,
    where sm_90's parameters start at 0x210), and a packed launch fails. CuPy passes each
    argument by pointer and the driver places it."""

    __slots__ = ("maps", "device")

    def __init__(self, launcher, func, config, strides, scalar_values, pooled, maps, device):
        super().__init__(launcher, func, config, strides, scalar_values, pooled)
        self._packed = None     # see above
        self.maps = maps        # ((index into tensors, TensorMapFields), ...) in ABI order
        self.device = device

    def __call__(self, tensors, workspaces, stream=None):
        maps = [tensor_map_value(fields, tensors[i].data.ptr, self.device)
                for i, fields in self.maps]
        self.func(self.grid, self.block,
                  (*tensors, *self.strides, *maps, *workspaces, *self.scalars),
                  shared_mem=self.shared, stream=stream)


def tensor_map_value(fields, address, device):
    """The tensor map `fields` describes, at `address`, encoded once per device, address
    and fields (codegen.tensor_maps.encode_tensor_map; the address checked first)."""
    key = (device, address, fields)
    known = _tensor_maps.get(key)
    if known is None:
        known = remember(_tensor_maps, key, tensor_maps.encode_tensor_map(
            tensor_maps.at_address(fields, address)))
    return known


@functools.cache
def _cu_launch_kernel():
    """The driver's cuLaunchKernel through ctypes, or None where there is no driver (or
    FUSERIR_LAUNCH=cupy asks for CuPy's launch)."""
    if os.environ.get("FUSERIR_LAUNCH") == "cupy":
        return None
    try:
        driver = ctypes.CDLL("libcuda.so.1")
        fn = driver.cuLaunchKernel
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    return fn


class _PackedLaunch:
    """cuLaunchKernel of one BoundLaunch with its parameters in one packed buffer (see
    BoundLaunch): the strides and scalars written once, the pointers of the tensors and
    workspaces at their offsets on each call."""

    END, BUFFER_POINTER, BUFFER_SIZE = 0, 1, 2      # CU_LAUNCH_PARAM_*

    @classmethod
    def for_bound(cls, bound, tensors, workspaces):
        fn = _cu_launch_kernel()
        if fn is None or not isinstance(getattr(bound.func, "ptr", None), int):
            return None
        return cls(fn, bound, tensors, workspaces)

    def __init__(self, fn, bound, tensors, workspaces):
        values = ([None] * tensors + list(bound.strides) + [None] * workspaces
                  + list(bound.scalars))
        offsets, offset = [], 0
        for v in values:
            size = 8 if v is None else v.itemsize        # None: a pointer
            offset = -(-offset // size) * size
            offsets.append(offset)
            offset += size
        self.buffer = ctypes.create_string_buffer(max(offset, 1))
        for v, at in zip(values, offsets):
            if v is not None:
                struct.pack_into(v.dtype.char, self.buffer, at, v)
        self.tensor_offsets = offsets[:tensors]
        self.workspace_offsets = offsets[tensors + len(bound.strides):][:workspaces]
        self.size = ctypes.c_size_t(offset)
        self.extra = (ctypes.c_void_p * 5)(
            self.BUFFER_POINTER, ctypes.addressof(self.buffer), self.BUFFER_SIZE,
            ctypes.addressof(self.size), self.END)
        self.fn = fn
        self.args = (bound.func.ptr, *bound.grid, *bound.block, bound.shared)

    _pointer = struct.Struct("Q").pack_into

    def __call__(self, tensors, workspaces, stream):
        buffer, put = self.buffer, self._pointer
        for at, array in zip(self.tensor_offsets, tensors):
            put(buffer, at, array.data.ptr)
        for at, array in zip(self.workspace_offsets, workspaces):
            put(buffer, at, array.data.ptr)
        if stream is None:
            stream = cupy_module().cuda.get_current_stream()
        status = self.fn(*self.args, stream.ptr, None, self.extra)
        if status:
            raise RuntimeError(f"cuLaunchKernel failed with CUresult {status}")


_ABSENT = object()      # a workspace not given in args


def _layout(array):
    return type(array), array.shape, array.strides, array.dtype


class _Launcher:
    """launch()'s state for one kernel and cubin: the argument names in ABI order, and a
    BoundLaunch per argument signature seen."""

    def __init__(self, kernel, cubin):
        self.kernel = kernel
        self.cubin = cubin
        self.scalar_names = tuple(kir.arg_name(kernel, p) for p in kernel.scalar_params)
        self.tensor_names = tuple(p.buffer.name for p in kernel.tensor_params)
        self.workspace_names = tuple(w.buffer.name for w in kernel.workspaces)
        self.bound = {}         # signature -> BoundLaunch

    def launch(self, args, stream):
        device = current_device()
        bound = self.bound_for(args, device)
        workspaces = [args.get(name, _ABSENT) for name in self.workspace_names]
        if bound.pooled:
            kept = _pool(device).arrays(self.kernel, bound.scalar_values)
            workspaces = [kept[name] if w is _ABSENT else w
                          for name, w in zip(self.workspace_names, workspaces)]
        bound([args[name] for name in self.tensor_names], workspaces, stream)

    def bound_for(self, args, device):
        """The BoundLaunch of `args`' signature, checking `args` in full when new."""
        try:
            scalars = tuple([args[name] for name in self.scalar_names])
            signature = (device, scalars, tuple(map(type, scalars)),
                         tuple([_layout(args[name]) for name in self.tensor_names]),
                         tuple([_layout(args[name]) if name in args else None
                                for name in self.workspace_names]))
            bound = self.bound.get(signature)
        except (KeyError, AttributeError, TypeError):     # missing, not an array, unhashable
            signature = bound = None
        if bound is None:
            bound = self._check(args, device)
            if signature is not None:
                remember(self.bound, signature, bound)
        return bound

    def _check(self, args, device):
        """Every check of launch() on `args`, raising its errors; the BoundLaunch."""
        cupy = cupy_module()
        kernel = self.kernel
        index_np = kernel.index_dtype.numpy
        limits = np.iinfo(index_np)
        scalars = {}
        for p, name in zip(kernel.scalar_params, self.scalar_names):
            if name not in args:
                raise ValueError(f"kernel {kernel.name}: missing scalar argument {name!r}")
            value = args[name]
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"kernel {kernel.name}: scalar {name} must be an int, got "
                                f"{type(value).__name__}")
            value = int(value)
            if not limits.min <= value <= limits.max:
                raise ValueError(f"kernel {kernel.name}: scalar {name}={value} does not fit "
                                 f"the index type {kernel.index_dtype}")
            scalars[p.var.name] = value

        strides = []
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
                raise ValueError(f"kernel {kernel.name}: {b.name} has rank {len(p.sizes)}, "
                                 f"the array has shape {a.shape}")
            for axis, (size, want) in enumerate(zip(p.sizes, want_shape)):
                if a.shape[axis] != want:
                    raise ValueError(f"kernel {kernel.name}: {b.name} axis {axis} must have "
                                     f"extent {kir.format_expr(size)} = {want}, the array "
                                     f"has shape {a.shape}")
            for axis, stride in enumerate(a.strides):
                if stride % a.itemsize:
                    raise ValueError(f"kernel {kernel.name}: {b.name} axis {axis} has stride "
                                     f"{stride} bytes, not a whole number of {a.itemsize}-"
                                     "byte elements")
                elements = stride // a.itemsize
                if not limits.min <= elements <= limits.max:
                    raise ValueError(f"kernel {kernel.name}: {b.name} stride {elements} does "
                                     f"not fit the index type {kernel.index_dtype}")
                strides.append(index_np.type(elements))

        pooled = any(name not in args for name in self.workspace_names)
        if kernel.workspaces:
            kept = _pool(device).arrays(kernel, scalars) if pooled else {}
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

        maps = tuple(self._tensor_map_fields(args, scalars))
        config = launch_config(kernel, scalars)
        func = load_function(self.cubin, entry_point(kernel))
        _opt_in(kernel, func, config[2])
        if maps:
            return _MappedLaunch(self, func, config, strides, scalars, pooled, maps, device)
        return BoundLaunch(self, func, config, strides, scalars, pooled)

    def _tensor_map_fields(self, args, scalars):
        """(index into the tensors, checked TensorMapFields) of each tensor map."""
        for m in self.kernel.tensor_maps:
            name = m.tensor.buffer.name
            if name not in self.tensor_names:
                raise ValueError(f"kernel {self.kernel.name}: tensor map {m.name} is over "
                                 f"{name}, which is not a tensor parameter of the kernel")
            yield self.tensor_names.index(name), tensor_maps.tensor_map_fields(
                self.kernel, m, args[name], scalars)


def _opt_in(kernel, func, shared):
    """Let `func` take `shared` bytes of dynamic shared memory (above 48 KB it must opt in;
    the limit is raised only when this needs more than it allows already)."""
    if shared <= _STATIC_SHARED_LIMIT or shared <= _opted_in.get(func.ptr, 0):
        return
    limit = device_shared_limit()
    if shared > limit:
        raise ValueError(f"kernel {kernel.name} needs {shared} bytes of shared memory; "
                         f"this device allows {limit} per block")
    from cupy.cuda import driver
    driver.funcSetAttribute(func.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                            shared)
    _opted_in[func.ptr] = shared


def _launcher(kernel, cubin):
    key = (id(kernel), id(cubin))
    known = _launchers.get(key)
    if known is None or known.kernel is not kernel or known.cubin is not cubin:
        known = _launchers[key] = _Launcher(kernel, cubin)
    return known


def launch(kernel, cubin, args, stream=None):
    """Run `kernel` (its compiled `cubin`) once with `args`; asynchronous on `stream`
    (default: CuPy's current stream)."""
    _launcher(kernel, cubin).launch(args, stream)


def bind(kernel, cubin, args):
    """The BoundLaunch of `args`' signature on the current device: every check of
    launch(), once per signature (the same errors), and no launch."""
    return _launcher(kernel, cubin).bound_for(args, current_device())


def _dtype_ok(array_dtype, dtype):
    if dtype is DataType.bf16:       # CuPy has no bfloat16: accept the bits
        return array_dtype in (np.dtype(np.uint16), np.dtype(np.int16)) or \
            array_dtype == dtype.numpy
    return array_dtype == dtype.numpy
