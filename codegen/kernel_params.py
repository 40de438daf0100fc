"""One checked launch's kernel parameters as cuLaunchKernel takes them, and the driver
calls of the per-call path: launch (cooperatively, for a kernel whose blocks wait for each
other; in thread-block clusters through cuLaunchKernelEx), set a workspace's bytes,
re-point a tensor map.

    params = KernelParameters(func, config, pointers=3, values=[...], maps=[...])
    params.launch((ptr_a, ptr_y, ptr_ws), stream)    # ints in ABI order; stream: a handle

Why it sits here, below codegen.launch: launch() checks arguments once per signature
(codegen.launch) and the driver's Executable calls what those checks produced once per
call; both end in KernelParameters.launch, the one place a kernel is launched.

The parameters live in ctypes storage made once per checked launch: the pointers (tensors,
then workspaces) in one u64 array, each stride and scalar as a value of the kernel's index
type, and each tensor map in a 64-byte aligned 128-byte block. `kernelParams` points at
each parameter in ABI order (codegen.cuda: pointers of the tensors, their strides, the
maps, the workspace pointers, the scalars) and the driver places them at the offsets the
kernel declares, so a 64-byte aligned `__grid_constant__` map needs no layout rule of ours
(checked on the H200: packed into one buffer at natural alignments it lands at the wrong
offset). A call writes the pointers, re-points each map whose tensor moved (no
re-encoding: see _Map for how, once the driver has shown where the address lives, a move
is one 8-byte write), and launches. Calls from several threads share the storage, so
writing it and launching hold a lock; cuLaunchKernel copies the parameters before it
returns, as stream capture copies them into the graph's node, so the storage may change
right after.

Where there is no CUDA driver (the tests' recording GPU) or FUSERIR_LAUNCH=cupy asks for
it, the same values go through CuPy's launch (pointers as u64, maps as numpy V128) and a
moved map is encoded again (codegen.tensor_maps).
"""

import ctypes
import functools
import os
import struct
import threading

import numpy as np

from . import tensor_maps

__all__ = ["KernelParameters", "memset_async", "cuda_driver"]

_MAP_ALIGN = 64                   # CUtensorMap is declared alignas(64)


class _Driver:
    """The driver entry points of the per-call path, through ctypes (a C call each)."""

    def __init__(self, lib):
        self.launch = lib.cuLaunchKernel
        self.launch.restype = ctypes.c_int
        self.launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        self.launch_cooperative = lib.cuLaunchCooperativeKernel
        self.launch_cooperative.restype = ctypes.c_int
        self.launch_cooperative.argtypes = ([ctypes.c_void_p] + [ctypes.c_uint] * 7
                                            + [ctypes.c_void_p] * 2)
        self.memset = lib.cuMemsetD8Async
        self.memset.restype = ctypes.c_int
        self.memset.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t,
                                ctypes.c_void_p]
        self.replace_address = lib.cuTensorMapReplaceAddress
        self.replace_address.restype = ctypes.c_int
        self.replace_address.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        self.launch_ex = lib.cuLaunchKernelEx
        self.launch_ex.restype = ctypes.c_int
        self.launch_ex.argtypes = [ctypes.c_void_p] * 4
        self.set_attribute = lib.cuFuncSetAttribute
        self.set_attribute.restype = ctypes.c_int
        self.set_attribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        self.max_active_clusters = lib.cuOccupancyMaxActiveClusters
        self.max_active_clusters.restype = ctypes.c_int
        self.max_active_clusters.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p,
                                             ctypes.c_void_p]


# cuLaunchKernelEx's configuration (cuda.h: CUlaunchConfig, CUlaunchAttribute, whose value
# is a 64-byte union aligned to 8) and the constants a cluster launch uses
_CLUSTER_DIMENSION = 4                    # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14   # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED


class _LaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4),
                ("value", ctypes.c_uint * 16)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("count", ctypes.c_uint)]


def cluster_launch_config(func, config, cluster):
    """The cuLaunchKernelEx configuration of a launch of `func` with `config` (grid,
    block, shared bytes) in clusters of `cluster` CTAs (x, y, z), its stream left to set;
    more than fuserir.instructions.CLUSTER_PORTABLE CTAs a cluster are allowed on the
    function first. Returns (configuration, attribute: kept alive beside it)."""
    from fuserir.instructions import CLUSTER_PORTABLE
    driver = cuda_driver()
    size = cluster[0] * cluster[1] * cluster[2]
    if size > CLUSTER_PORTABLE:
        _check(driver.set_attribute(func.ptr, _NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
               "cuFuncSetAttribute (a non-portable cluster size)")
    attribute = _LaunchAttribute(id=_CLUSTER_DIMENSION)
    attribute.value[:3] = cluster
    grid, block, shared = config
    launch = _LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), shared,
                           None, ctypes.pointer(attribute), 1)
    return launch, attribute


def clusters_resident(func, config, cluster):
    """How many clusters of `cluster` CTAs of `func` with `config` the device holds at
    once (cuOccupancyMaxActiveClusters; 0: not even one)."""
    launch, attribute = cluster_launch_config(func, config, cluster)
    count = ctypes.c_int(0)
    _check(cuda_driver().max_active_clusters(ctypes.byref(count), func.ptr,
                                             ctypes.byref(launch)),
           "cuOccupancyMaxActiveClusters")
    return count.value


@functools.cache
def cuda_driver():
    """The driver's entry points (_Driver), or None where there is no driver (or
    FUSERIR_LAUNCH=cupy asks for CuPy's launch)."""
    if os.environ.get("FUSERIR_LAUNCH") == "cupy":
        return None
    try:
        return _Driver(ctypes.CDLL("libcuda.so.1"))
    except (OSError, AttributeError):
        return None


def _check(status, what):
    if status:
        raise RuntimeError(f"{what} failed with CUresult {status}")


def memset_async(address, nbytes, stream, value=0):
    """Queue setting `nbytes` bytes at device `address` to `value` (a byte) on `stream` (a
    handle): zeroed workspaces, poisoned intermediates."""
    if nbytes <= 0:
        return
    driver = cuda_driver()
    if driver is not None:
        _check(driver.memset(address, value, nbytes, stream), "cuMemsetD8Async")
        return
    import cupy
    cupy.cuda.runtime.memsetAsync(address, value, nbytes, stream)


_ADDRESS = struct.Struct("<Q")
_UNKNOWN = object()           # a map's address word before its first move

# Addresses a map is re-pointed at, never launched, to find where its bytes keep the
# address: every 16-byte alignment from 16 to 64 KiB, and high bits set, so a layout that
# kept alignment flags or a shifted address anywhere would show it.
_PROBES = tuple(16 << k for k in range(13)) + tuple(
    (1 << bit) + (16 << k) for bit in (32, 40, 47) for k in (0, 4, 8))


def address_word(at, old, new, replace):
    """The offset in the 128 bytes at `at` (a map encoded for address `old`) of the one
    aligned 8-byte word that holds the address, as `replace(at, address)` (the driver's
    cuTensorMapReplaceAddress) writes it; None where a re-pointing at `new` or at any
    probe address changes anything but that word, stores the address any other way, or
    is refused. The bytes are restored (encoded for `old`) before it returns."""
    original = ctypes.string_at(at, tensor_maps.TENSOR_MAP_BYTES)
    words = set()
    try:
        for probe in (new, *_PROBES):
            if probe == old:
                continue
            if replace(at, probe):
                return None                   # refused: leave every move to the driver
            after = ctypes.string_at(at, tensor_maps.TENSOR_MAP_BYTES)
            changed = [i for i in range(0, len(original), 8)
                       if original[i:i + 8] != after[i:i + 8]]
            if (len(changed) != 1 or _ADDRESS.unpack_from(original, changed[0])[0] != old
                    or _ADDRESS.unpack_from(after, changed[0])[0] != probe):
                return None
            words.add(changed[0])
        return words.pop() if len(words) == 1 else None
    finally:
        ctypes.memmove(at, original, tensor_maps.TENSOR_MAP_BYTES)


class _Map:
    """One tensor map parameter: the tensor it is over (an index into the pointers), its
    fields, and its 128 bytes at a 64-byte aligned address, encoded for `address`.

    Re-pointing at a moved tensor never encodes again. The first move asks the driver
    where the bytes keep the address (address_word: re-pointing at probe addresses of
    every alignment with cuTensorMapReplaceAddress and comparing the bytes). Where each
    re-pointing changed exactly one 8-byte word, from the old address to the new, every
    move writes the address into that word (a struct write, about 0.1 us, where the
    driver's call cost 1-2.5 us on the H200's host); otherwise every move asks the
    driver."""

    __slots__ = ("pointer", "fields", "address", "storage", "at", "view", "word")

    def __init__(self, pointer, fields):
        self.pointer = pointer
        self.fields = fields
        self.storage = ctypes.create_string_buffer(tensor_maps.TENSOR_MAP_BYTES + _MAP_ALIGN)
        base = ctypes.addressof(self.storage)
        self.at = base + (-base % _MAP_ALIGN)
        self.view = memoryview(self.storage).cast("B")
        self.word = _UNKNOWN        # the address word's offset in storage; None: the driver
        self.address = None
        self.encode(fields.address)

    def encode(self, address):
        encoded = tensor_maps.encode_tensor_map(tensor_maps.at_address(self.fields, address))
        ctypes.memmove(self.at, encoded.tobytes(), tensor_maps.TENSOR_MAP_BYTES)
        self.address = address

    def point_at(self, address, driver):
        """Re-point the map at `address` (its tensor moved)."""
        if address % tensor_maps.TMA_ADDRESS_ALIGN:
            tensor_maps.at_address(self.fields, address)      # raises the address error
        if driver is None:
            self.encode(address)
            return
        if self.word is _UNKNOWN:
            word = address_word(self.at, self.address, address, driver.replace_address)
            offset = self.at - ctypes.addressof(self.storage)
            self.word = None if word is None else offset + word
        if self.word is None:
            _check(driver.replace_address(self.at, address),
                   f"{self.fields.where}: cuTensorMapReplaceAddress")
        else:
            _ADDRESS.pack_into(self.view, self.word, address)
        self.address = address

    def value(self):
        """The map's bytes as CuPy's launch takes them (numpy V128, by value)."""
        raw = ctypes.string_at(self.at, tensor_maps.TENSOR_MAP_BYTES)
        return np.frombuffer(raw, dtype=f"V{tensor_maps.TENSOR_MAP_BYTES}")[0]


class KernelParameters:
    """What a launch of one kernel with one argument signature passes: the function, grid,
    block, dynamic shared bytes, and the parameters in ABI order (see the module header).
    `tensors` and `workspaces` count the pointer parameters (the tensors', then the
    workspaces'); `strides` and `scalars` are numpy scalars of the kernel's index type;
    `maps` are (position among the tensors, TensorMapFields encoded at the bound tensor's
    address), passed after the strides. `cooperative`: launched by
    cuLaunchCooperativeKernel, which puts every block of the grid on the device at once
    or fails (a kernel whose blocks wait for blocks launched after them: kir.Kernel's
    co_resident), even beside kernels of other streams. `cluster`: (x, y, z), launched by
    cuLaunchKernelEx in thread-block clusters of that shape (kir.Kernel's cluster)."""

    def __init__(self, func, config, tensors, workspaces, strides, scalars, maps,
                 cooperative=False, cluster=None):
        self.func = func
        self.cooperative = cooperative
        self.cluster = None         # (cuLaunchKernelEx's configuration, its attribute)
        if cluster is not None:
            driven = cuda_driver() is not None and isinstance(getattr(func, "ptr", None), int)
            self.cluster = cluster_launch_config(func, config, cluster) if driven else \
                (None, cluster)       # CuPy's launch, which refuses it
        self.grid, self.block, self.shared = config
        self.pointers = (ctypes.c_uint64 * max(tensors + workspaces, 1))()
        self.count = tensors + workspaces
        self.values = [np.ctypeslib.as_ctypes_type(v.dtype)(v) for v in (*strides, *scalars)]
        self.maps = [_Map(pointer, fields) for pointer, fields in maps]
        base, word = ctypes.addressof(self.pointers), ctypes.sizeof(ctypes.c_uint64)
        addresses = ([base + word * i for i in range(tensors)]
                     + [ctypes.addressof(v) for v in self.values[:len(strides)]]
                     + [m.at for m in self.maps]
                     + [base + word * (tensors + i) for i in range(workspaces)]
                     + [ctypes.addressof(v) for v in self.values[len(strides):]])
        self.kernel_params = (ctypes.c_void_p * max(len(addresses), 1))(*addresses)
        self._tensors = tensors
        self._strides, self._scalars = tuple(strides), tuple(scalars)
        self._lock = threading.Lock()
        self._head = (getattr(func, "ptr", None), *self.grid, *self.block, self.shared)

    def launch(self, pointers, stream):
        """Launch with `pointers` (ints: the tensors', then the workspaces', in ABI order)
        on `stream` (a CUDA stream handle; 0 the legacy default stream)."""
        driver = cuda_driver()
        with self._lock:
            self.pointers[:self.count] = pointers
            for m in self.maps:
                address = pointers[m.pointer]
                if address != m.address:
                    m.point_at(address, driver)
            if driver is None or not isinstance(self._head[0], int):
                self._through_cupy(pointers, stream)
                return
            if self.cluster is not None:
                launch, _ = self.cluster
                launch.stream = stream
                _check(driver.launch_ex(ctypes.byref(launch), self._head[0],
                                        self.kernel_params, None), "cuLaunchKernelEx")
            elif self.cooperative:
                _check(driver.launch_cooperative(*self._head, stream, self.kernel_params),
                       "cuLaunchCooperativeKernel")
            else:
                _check(driver.launch(*self._head, stream, self.kernel_params, None),
                       "cuLaunchKernel")

    def _through_cupy(self, pointers, stream):
        if self.cluster is not None:
            raise RuntimeError("a kernel launched in thread-block clusters needs the CUDA "
                               "driver's cuLaunchKernelEx (not CuPy's launch: unset "
                               "FUSERIR_LAUNCH=cupy)")
        tensors = [np.uint64(p) for p in pointers[:self._tensors]]
        workspaces = [np.uint64(p) for p in pointers[self._tensors:self.count]]
        maps = [m.value() for m in self.maps]
        self.func(self.grid, self.block,
                  (*tensors, *self._strides, *maps, *workspaces, *self._scalars),
                  shared_mem=self.shared, stream=_cupy_stream(stream),
                  enable_cooperative_groups=self.cooperative)


class _StreamHandle:
    """A stream handle through the CUDA stream protocol (what CuPy's from_external reads)."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return 0, self.handle


def _cupy_stream(handle):
    """A CuPy stream object over a stream handle (CuPy 14's from_external, else 13's
    ExternalStream)."""
    import cupy
    if hasattr(cupy.cuda.Stream, "from_external"):
        return cupy.cuda.Stream.from_external(_StreamHandle(handle))
    return cupy.cuda.ExternalStream(handle)
