"""Launch a compiled kernel on the GPU, checking its arguments once per
argument signature.

    launch(kernel, cubin, args, stream=None)
    bound = bind(kernel, cubin, args)          # launch()'s checks, without launching
    bound(tensors, workspaces, stream=None)    # launch with arrays of that signature
    bound.launch(pointers, stream_handle)      # the same with their addresses (ints)

`args` maps each TensorParam's buffer name to a CuPy array and each ScalarParam's name to
an int. Arguments are passed in the ABI order of codegen.cuda (tensor pointers, then
every tensor's strides in elements, then one 128-byte TMA tensor map per
kernel.tensor_maps entry, then the workspace pointers, then the scalars, all strides and
scalars in the kernel's index dtype).

Tensor maps (kir.TensorMap) are built from the bound tensors: their fields (dimensions,
byte strides, box, swizzle; codegen.tensor_maps, which checks them against the array)
and their encoding once per argument signature; a launch whose tensor moved re-points the
map (codegen.kernel_params). Kernels without tensor maps do none of this.

Workspaces (kir.Workspace: split-K partial sums, semaphores) may be given in `args` under
their buffer names (1-D, contiguous, at least `size` elements); the others are allocated
for the launch on its stream (new_workspaces: CuPy's stream-ordered pool, a zeroed one
queued for zeroing), so launches on two streams never share them.

Grid and block come from kernel.launch evaluated with the scalars
(lowering.kir.evaluate_scalar, C integer semantics); the dynamic shared memory is
lowering.kir.shared_bytes. Above 48 KB the function's opt-in limit is raised
(funcSetAttribute) only when a launch needs more than the function was opted in to
before, so the limit only grows and a later launch needing less leaves it alone.

Checked here: every argument is present, arrays are CuPy arrays of the buffer's dtype (a
bf16 buffer takes a 2-byte integer array holding the bits, since CuPy has no bfloat16),
their rank and shape match the kernel's sizes, strides are whole elements and fit the
index type, extents are positive, workspaces are 1-D, contiguous and large enough, the
shared memory fits the device, and a co-resident kernel's grid (blocks that wait for
blocks launched after them) fits the device at once; such a kernel is launched
cooperatively (codegen.kernel_params), so the driver keeps it resident beside other
streams' kernels. A kernel in thread-block clusters (kir.Kernel.cluster) is checked for
clusters of at most 16 CTAs that tile its grid and that one of them fits a GPC (the
driver's cuOccupancyMaxActiveClusters), and launched by cuLaunchKernelEx with the
cluster's shape. The full executor (torch/numpy inputs, allocation of
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
also kept per kernel and scalar values, and loaded modules per device and cubin.
"""

import contextlib
import functools
import hashlib

import numpy as np

from fuserir import device as devices
from fuserir.dtypes import DataType
from fuserir.errors import FuserirError
from fuserir.instructions import CLUSTER_MAX
from lowering import kir

from . import gpu_stack, tensor_maps
from .cuda import entry_point
from . import kernel_params
from .kernel_params import KernelParameters

__all__ = ["launch", "bind", "BoundLaunch", "load_function", "launch_config",
           "workspace_sizes", "new_workspaces"]

SIGNATURES_KEPT = 256   # per kernel: argument signatures whose checks are kept
_modules = {}       # (device id, sha256 of cubin) -> cupy Module (kept loaded)
_functions = {}     # (device id, id(cubin), name) -> (cubin, function): no rehash per launch
_configs = {}       # (id(kernel), scalar values) -> (kernel, (grid, block, shared bytes))
_opted_in = {}      # CUDA function handle -> dynamic shared bytes its opt-in limit allows
_resident_per_sm = {}   # (function handle, threads, shared bytes) -> blocks an SM holds
_launchers = {}     # (id(kernel), id(cubin)) -> _Launcher (which holds both)


def cupy_module():
    """CuPy, imported when first needed (compiling and the interpreter need no GPU), once:
    an import statement costs more than this call on a per-launch path. Where CuPy, the
    driver or a device is missing it raises GpuUnavailableError saying what to do
    (codegen.gpu_stack)."""
    return gpu_stack.cupy_with_gpu()


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
        l2_bytes=attribute("cudaDevAttrL2CacheSize"),
        cluster_split=cluster_launches())


def cluster_launches():
    """Can this process launch kernels in thread-block clusters? Only through the
    driver's cuLaunchKernelEx (kernel_params): without it (no libcuda, or
    FUSERIR_LAUNCH=cupy) CuPy's launch refuses them, so the device model's heuristics
    must not plan a split-K through clusters (cluster_split False: the arrival
    counters instead)."""
    return kernel_params.cuda_driver() is not None


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
    if kernel.cluster is not None:
        _check_cluster(kernel, scalars, value, bad)
    local = 0
    for s in kir.walk(kernel.body):
        if isinstance(s, kir.Allocate) and s.buffer.memory is kir.Memory.local:
            elements = value(s.buffer.size)
            local += (elements or 0) * s.buffer.dtype.itemsize
    if local > device.local_bytes:
        bad(f"{local} bytes of local arrays per thread (at most {device.local_bytes})")


def _check_cluster(kernel, scalars, value, bad):
    """check_launch_limits' part for a kernel launched in thread-block clusters (that
    the device has them at all is the CUDA backend's check of the instructions' arch)."""
    if scalars is None:
        return
    cluster = [value(e) for e in kernel.cluster]
    size = cluster[0] * cluster[1] * cluster[2]
    if size > CLUSTER_MAX:
        bad(f"clusters of {size} CTAs {tuple(cluster)} (at most {CLUSTER_MAX})")
    grid = [value(e) for e in kernel.launch.grid]
    for axis, (n, c) in enumerate(zip(grid, cluster)):
        if n % c:
            bad(f"{n} blocks along grid {'xyz'[axis]}, not a multiple of the cluster's {c}")


def cluster_shape(kernel, scalars):
    """The (x, y, z) CTAs of `kernel`'s clusters for `scalars`, None without clusters."""
    if kernel.cluster is None:
        return None
    return tuple(int(kir.evaluate_scalar(e, scalars)) for e in kernel.cluster)


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


def new_workspaces(kernel, scalars, stream=None):
    """{workspace buffer name: fresh CuPy array} for one launch of `kernel` with `scalars`,
    allocated on `stream` (a cupy Stream; CuPy's current one when None), a zeroed
    workspace queued for zeroing there: CuPy's memory pool is stream-ordered, so launches
    on other streams never share them (bf16 as uint16 bits: CuPy has no bfloat16)."""
    cupy = cupy_module()
    out = {}
    with stream if stream is not None else contextlib.nullcontext():
        handle = cupy.cuda.get_current_stream().ptr
        for w, size in workspace_sizes(kernel, scalars):
            host = np.uint16 if w.buffer.dtype is DataType.bf16 else w.buffer.dtype.numpy
            array = cupy.empty(max(size, 1), dtype=host)
            if w.zeroed:
                kernel_params.memset_async(array.data.ptr, array.nbytes, handle)
            out[w.buffer.name] = array
    return out


def _positive(kernel, what, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"kernel {kernel.name}: {what} evaluates to {value!r}; launch "
                         "extents must be positive integers")
    return value


class BoundLaunch:
    """A launch of one kernel checked for one argument signature: its parameters
    (codegen.kernel_params.KernelParameters: the function, grid, block, dynamic shared
    bytes, strides, scalars and tensor maps), the scalar values by name, and the names of
    its tensors and workspaces in ABI order. `launch(pointers, stream)` launches with the
    arrays' addresses (ints; the tensors', then the workspaces') on a stream handle;
    calling it with arrays does the same. Neither checks them: they must have the
    signature it was bound for."""

    __slots__ = ("params", "scalar_values", "tensor_names", "workspace_names", "launch")

    def __init__(self, launcher, func, config, strides, scalar_values, maps, cluster=None):
        index = launcher.kernel.index_dtype.numpy.type
        scalars = [index(scalar_values[p.var.name]) for p in launcher.kernel.scalar_params]
        self.tensor_names = launcher.tensor_names
        self.workspace_names = launcher.workspace_names
        self.scalar_values = scalar_values
        self.params = KernelParameters(func, config, len(self.tensor_names),
                                       len(self.workspace_names), strides, scalars, maps,
                                       cooperative=launcher.kernel.co_resident,
                                       cluster=cluster)
        self.launch = self.params.launch     # launch(pointers, stream): no frame of ours

    def __call__(self, tensors, workspaces, stream=None):
        if stream is None:
            stream = cupy_module().cuda.get_current_stream()
        self.params.launch([a.data.ptr for a in (*tensors, *workspaces)], stream.ptr)


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
        bound = self.bound_for(args, current_device())
        missing = [name for name in self.workspace_names if name not in args]
        if missing:      # fresh ones on the launch's stream (new_workspaces)
            args = {**args, **new_workspaces(self.kernel, bound.scalar_values, stream)}
        bound([args[name] for name in self.tensor_names],
              [args[name] for name in self.workspace_names], stream)

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

        for w, size in workspace_sizes(kernel, scalars):
            name = w.buffer.name
            if name not in args:     # allocated per launch (new_workspaces)
                continue
            a = args[name]
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
        if kernel.co_resident:
            _check_co_resident(kernel, func, config, scalars)
        cluster = cluster_shape(kernel, scalars)
        if cluster is not None:
            check_launch_limits(kernel, device_model(), scalars)
            _check_clusters_fit(kernel, func, config, cluster)
        return BoundLaunch(self, func, config, strides, scalars, maps, cluster)

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
    if shared <= devices.DEFAULT.static_shared or shared <= _opted_in.get(func.ptr, 0):
        return
    limit = device_shared_limit()
    if shared > limit:
        raise ValueError(f"kernel {kernel.name} needs {shared} bytes of shared memory; "
                         f"this device allows {limit} per block")
    from cupy.cuda import driver
    driver.funcSetAttribute(func.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                            shared)
    _opted_in[func.ptr] = shared


def _check_co_resident(kernel, func, config, scalars):
    """Refuse (LaunchLimitError) a co-resident kernel's grid (blocks that wait for blocks
    launched after them) that the device cannot hold at once: its progress would need
    blocks that are not running."""
    grid, block, shared = config
    blocks = grid[0] * grid[1] * grid[2]
    key = (func.ptr, block[0] * block[1] * block[2], shared)
    per_sm = _resident_per_sm.get(key)
    if per_sm is None:
        from cupy.cuda import driver
        per_sm = _resident_per_sm[key] = \
            driver.occupancyMaxActiveBlocksPerMultiprocessor(*key)
    device = device_model()
    if per_sm == 0:
        raise LaunchLimitError(
            f"kernel {kernel.name}: one block of {key[1]} threads and {shared} bytes of "
            f"dynamic shared memory does not fit on an SM of {device.name} (its registers "
            "or shared memory): use smaller tiles or fewer stages")
    if blocks > per_sm * device.sms:
        where = ", ".join(f"{k}={v}" for k, v in sorted(scalars.items()))
        raise LaunchLimitError(
            f"kernel {kernel.name} at {where}: its {blocks} blocks wait for each other (a "
            f"parallel grid reduction's counters) and must all be resident at once, but "
            f"{device.name} holds {per_sm} per SM x {device.sms} SMs = {per_sm * device.sms}"
            ": use fewer splits (splitk) or larger tiles")


def _check_clusters_fit(kernel, func, config, cluster):
    """Refuse (LaunchLimitError) clusters the device cannot hold even one of at once
    (every CTA of a cluster runs at once on one GPC): the launch would fail."""
    if kernel_params.cuda_driver() is None or not isinstance(getattr(func, "ptr", None), int):
        return                       # CuPy's launch refuses clusters itself
    if kernel_params.clusters_resident(func, config, cluster) == 0:
        grid, block, shared = config
        raise LaunchLimitError(
            f"kernel {kernel.name}: a cluster of {cluster[0] * cluster[1] * cluster[2]} "
            f"CTAs of {block[0] * block[1] * block[2]} threads and {shared} bytes of shared "
            f"memory each does not fit on one GPC of {device_model().name}: use fewer "
            "splits, smaller tiles or fewer stages (an automatic schedule: compile with "
            "device=codegen.launch.device_model().with_(cluster_split=False), whose "
            "split-K sums through arrival counters instead)")


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
