"""The per-call path: what a call of an Executable with a signature it has seen does.

    key = call_key(arrays, scalars, out)     # cheap attributes only
    plan = exe._calls[key]                   # a CallPlan, made by the first such call
    outputs = plan(arrays, out)              # allocate, launch, return; no synchronization

Why it sits here: the Executable (driver.executable) checks and plans a signature once,
through every layer below (binding, scheduling, kernel variants, launch checks); this
module is what remains of a call once that is done, so it is kept apart and small.

A call's signature (call_key) is each array's framework, dtype, shape, strides, device
and address modulo 16 (the alignment every vector copy and TMA needs), each run-time
scalar's type and value, and the same of every `out=` array. Anything that changes a
check or a choice of the first call changes the key, so a call with a new signature goes
the full way again, with its checks and errors.

A CallPlan holds, for one signature: the framework of the caller (torch tensors from
torch's caching allocator for torch inputs; CuPy arrays otherwise), the device, each
output's layout, one scratch allocation per call that holds the intermediates between
kernels and every kernel's workspaces (split-K partial sums, semaphores: the zeroed ones
last, zeroed by one memset queued on the call's stream), and per kernel its checked
launch (codegen.launch.BoundLaunch) with where each pointer comes from. A call reads the
caller's current stream on the inputs' device, allocates its outputs and scratch there
(both allocators are stream-ordered: a block freed by one call is reused only after the
work queued before on that stream, and torch's allocator gives a CUDA graph being captured
memory of its own), writes the pointers and launches each kernel.

Semaphores (the workspaces a kernel needs zeroed) live in the stream's block of zeros
(StreamZeros), not in the scratch block: every launch leaves its semaphores zero again
(lowering.verify.grid_protocol proves it of every kernel that has them), so the calls of
one stream, which run one after another, share one block zeroed once when it was made,
and a call queues no memset. Calls on other streams have blocks of their own; a call
being captured into a CUDA graph gets a scratch block of its own, zeroed by a memset the
graph holds, since a graph may be replayed on any stream beside anything. Nothing else is
shared between calls but the launch parameters' storage, written under a lock: calls from
several threads, on several streams, and graph captures beside eager calls never share
partial sums or semaphores.
"""

import threading

import numpy as np

from codegen import kernel_params
from fuserir.dtypes import DataType
from fuserir.errors import FuserirError
from fuserir.numerics import round_up

SCRATCH_ALIGN = 256        # bytes: each intermediate and workspace in the scratch block
PER_THREAD_STREAM = 2      # cudaStreamPerThread: one handle, a stream per host thread

_TORCH_DTYPES = {DataType.f16: "float16", DataType.bf16: "bfloat16",
                 DataType.f32: "float32", DataType.f64: "float64",
                 DataType.i32: "int32", DataType.i64: "int64", DataType.bool: "bool"}


def _torch_key(t):
    return (t.dtype, t.shape, t.stride(), t.get_device(), t.data_ptr() & 15)


def _cupy_key(a):
    data = a.data
    return (a.dtype, a.shape, a.strides, data.device_id, data.ptr & 15)


def _torch_pointer(t):
    return t.data_ptr()


def _cupy_pointer(a):
    return a.data.ptr


def pointer_of(array):
    """The function giving an array of `array`'s kind (torch or CuPy) its address."""
    return _torch_pointer if is_torch(array) else _cupy_pointer


_KEYS = {}       # type -> the function giving an array of that type its part of a key


def describer(kind):
    """The key function for arrays of type `kind` (torch or CuPy), or None: an array of
    another kind is converted to CuPy (as_cupy) before its call is keyed."""
    known = _KEYS.get(kind)
    if known is None:
        module = kind.__module__
        if module.startswith("torch") and hasattr(kind, "data_ptr"):
            known = _KEYS[kind] = _torch_key
        elif module.split(".")[0] == "cupy":
            known = _KEYS[kind] = _cupy_key
    return known


def call_key(arrays, scalars, out):
    """The signature of a call (see the module header); KeyError for an array of a kind
    describer does not know."""
    keys = _KEYS
    return (*[keys[type(a)](a) for a in arrays], scalars,
            None if out is None else tuple([keys[type(a)](a) for a in out]))


def is_torch(array):
    return describer(type(array)) is _torch_key


class TorchArrays:
    """The caller's framework when an input is a torch tensor: outputs and scratch from
    torch's caching allocator, on torch's current stream of the device."""

    name = "torch"

    def __init__(self, device):
        import torch
        self.torch = torch
        self.device = torch.device("cuda", device)
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self.stream = raw or (lambda d: torch.cuda.current_stream(d).cuda_stream)
        self.bytes = torch.uint8

    def dtype(self, dtype):
        return getattr(self.torch, _TORCH_DTYPES[dtype])

    def empty(self, shape, strides, dtype):
        return self.torch.empty_strided(shape, strides, dtype=dtype, device=self.device)

    def empty_bytes(self, nbytes):
        return self.torch.empty(nbytes, dtype=self.bytes, device=self.device)

    pointer = staticmethod(_torch_pointer)

    def capturing(self):
        """Is the current stream being captured into a CUDA graph?"""
        return self.torch.cuda.is_current_stream_capturing()

    @staticmethod
    def fill(t, value):
        t.fill_(value)


class CuPyArrays:
    """The caller's framework otherwise: CuPy arrays (bf16 as its uint16 bits) from CuPy's
    memory pool, which keeps freed blocks per stream, on CuPy's current stream."""

    name = "cupy"

    def __init__(self, device, cupy):
        self.cupy = cupy
        self.device = device
        self.bytes = np.uint8

    def stream(self, device):
        return self.cupy.cuda.get_current_stream().ptr

    @staticmethod
    def dtype(dtype):
        return np.dtype(np.uint16 if dtype is DataType.bf16 else dtype.numpy)

    def empty(self, shape, strides, dtype):
        if not shape:
            return self.cupy.empty((), dtype=dtype)
        order = sorted(range(len(shape)), key=lambda a: -strides[a])
        stored = self.cupy.empty([shape[a] for a in order], dtype=dtype)
        return stored.transpose([order.index(a) for a in range(len(shape))])

    def empty_bytes(self, nbytes):
        return self.cupy.empty(nbytes, dtype=self.bytes)

    pointer = staticmethod(_cupy_pointer)

    def capturing(self):
        runtime = self.cupy.cuda.runtime
        is_capturing = getattr(runtime, "streamIsCapturing", None)
        return bool(is_capturing and self.stream(self.device) and
                    is_capturing(self.stream(self.device)))

    @staticmethod
    def fill(a, value):
        a.fill(value)


class StreamZeros:
    """Per (device, stream): a block of zeros the semaphores of every call on that stream
    share (see the module header), grown when a call needs more, made and zeroed on the
    stream itself (so its memset is ordered before the first launch that uses it, and
    the block a grown one replaces goes back to its allocator after the stream's work).
    Keyed by the stream's handle, as torch's and CuPy's allocators key their free blocks:
    the per-thread default stream, one handle for a stream per host thread, is keyed by
    the thread too."""

    def __init__(self):
        self._blocks = {}
        self._lock = threading.Lock()

    def address(self, fw, device, stream, nbytes):
        """The address of the block of at least `nbytes` zeros for `stream` on `device`,
        made with `fw` (TorchArrays or CuPyArrays) when there is none large enough."""
        key = (device, stream) if stream != PER_THREAD_STREAM else \
            (device, stream, threading.get_ident())
        known = self._blocks.get(key)
        if known is None or known[1] < nbytes:
            with self._lock:
                known = self._blocks.get(key)
                if known is None or known[1] < nbytes:
                    size = round_up(nbytes, 4096)
                    block = fw.empty_bytes(size)
                    address = fw.pointer(block)
                    kernel_params.memset_async(address, size, stream)
                    known = self._blocks[key] = (address, size, block)
        return known[0]

    def clear(self):
        """Forget every block (tests; a block still in use is kept alive by nothing else,
        so only between synchronized calls)."""
        with self._lock:
            self._blocks.clear()


STREAM_ZEROS = StreamZeros()


class CallPlan:
    """What a call with one signature does (see the module header). `outputs`: per fusion
    output, (shape, element strides, framework dtype, poison value or None); `scratch`:
    its bytes, and the (offset, bytes) to poison in it or None; `launches`: per kernel,
    (its launch: BoundLaunch.launch, ((position in the address table, byte offset), ...))
    for its tensors and then its workspaces, where the table is the inputs, then the
    outputs, then the scratch block, then the block of zeros (`zeroed`: its bytes, the
    semaphores'). `pointers`: the address function of each input's and each out= array's
    kind (a call may mix torch and CuPy arrays)."""

    __slots__ = ("arrays", "device", "outputs", "scratch", "zeroed", "poisoned",
                 "launches", "switch", "pointers")

    def __init__(self, arrays, device, outputs, scratch, zeroed, poisoned, launches, switch,
                 pointers):
        self.pointers = pointers
        self.arrays = arrays
        self.device = device
        self.outputs = outputs
        self.scratch = scratch
        self.zeroed = zeroed
        self.poisoned = poisoned
        self.launches = launches
        self.switch = switch       # makes the device current around a call (or None)

    @property
    def parameters(self):
        """The codegen.kernel_params.KernelParameters of each kernel, in launch order."""
        return [launch.__self__ for launch, _ in self.launches]

    def __call__(self, inputs, out=None):
        """Launch on `inputs` (arrays in the fusion's input order) and return the outputs
        (`out`, or fresh arrays), on the caller's current stream, not synchronized."""
        if self.switch is None:
            return self._call(inputs, out)
        with self.switch():          # the inputs' device made current for CuPy's sake
            return self._call(inputs, out)

    def _call(self, inputs, out):
        fw = self.arrays
        stream = fw.stream(self.device)
        if out is None:
            out = [fw.empty(shape, strides, dtype) for shape, strides, dtype, _ in self.outputs]
            for array, (_, _, _, poison) in zip(out, self.outputs):
                if poison is not None:
                    fw.fill(array, poison)
        table = [pointer(a) for pointer, a in zip(self.pointers, (*inputs, *out))]
        scratch = zeros = None
        if self.scratch:
            scratch = fw.empty_bytes(self.scratch)
            base = fw.pointer(scratch)
            table.append(base)
            if self.poisoned:
                kernel_params.memset_async(base + self.poisoned[0], self.poisoned[1], stream,
                                           0xFF)
        else:
            table.append(0)       # workspaces of no bytes (one split): never touched
        if self.zeroed:
            if fw.capturing():    # a graph's own zeros, zeroed at each replay
                zeros = fw.empty_bytes(self.zeroed)
                table.append(fw.pointer(zeros))
                kernel_params.memset_async(table[-1], self.zeroed, stream)
            else:
                table.append(STREAM_ZEROS.address(fw, self.device, stream, self.zeroed))
        else:
            table.append(0)
        for launch, sources in self.launches:
            launch([table[i] + offset for i, offset in sources], stream)
        del scratch, zeros    # back to the allocator, reused only after this stream's work
        return out


def devices_of(arrays):
    """{name: device} of the named arrays (a torch or CuPy array each); a torch tensor on
    the CPU is refused, naming it."""
    found = {}
    for name, array in arrays.items():
        if is_torch(array):
            if not array.is_cuda:
                raise FuserirError(f"input {name} is a torch tensor on {array.device}; the "
                                   f"cuda backend takes tensors on a CUDA device (move it "
                                   f"with .cuda())")
            found[name] = array.get_device()
        else:
            found[name] = array.data.device_id
    return found


def one_device(arrays, what="inputs"):
    """The one device of the named arrays ({name: array}); FuserirError naming each array's
    device when they are on several."""
    devices = devices_of(arrays)
    if len(set(devices.values())) > 1:
        listed = ", ".join(f"{name} on cuda:{d}" for name, d in devices.items())
        raise FuserirError(f"the {what} are on different devices ({listed}); a call runs on "
                           f"one device: move them to one")
    return next(iter(devices.values()), None)


def as_cupy(value, cupy):
    """An array as a CuPy array: a torch tensor or anything with __cuda_array_interface__
    or __dlpack__ over the same memory (bf16, which CuPy lacks, as its uint16 bits), a host
    array (numpy, or anything else with a shape) copied to the current device, a CuPy
    array as it is; other values (a scalar, a list) as they are."""
    if type(value) is cupy.ndarray:
        return value
    if is_torch(value):
        import torch
        if value.dtype == torch.bfloat16:
            return cupy.from_dlpack(value.view(torch.int16)).view(np.uint16)
        return cupy.from_dlpack(value)
    if hasattr(value, "__cuda_array_interface__"):
        return cupy.asarray(value)
    if isinstance(value, np.ndarray):
        return cupy.asarray(value.view(np.uint16) if value.dtype == DataType.bf16.numpy
                            else value)
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
        return cupy.from_dlpack(value)
    return cupy.asarray(value) if hasattr(value, "shape") else value


def scratch_layout(pieces, zeroed):
    """Offsets of `pieces` ([(key, bytes)]) in one scratch block and of `zeroed` ([(key,
    bytes)]) in the stream's block of zeros, each SCRATCH_ALIGN-aligned (a piece of no
    bytes takes none: nothing touches it): ({key: offset}, scratch bytes, zeros bytes)."""
    offsets, sizes = {}, []
    for group in (pieces, zeroed):
        at = 0
        for key, nbytes in group:
            offsets[key] = at
            at += round_up(nbytes, SCRATCH_ALIGN)
        sizes.append(at)
    return offsets, sizes[0], sizes[1]


def torch_dtype_name(dtype):
    """The name of torch's dtype for a fuserir DataType (float16, bfloat16, ...)."""
    return _TORCH_DTYPES[dtype]
