"""What launch() and Executable.run() keep per argument signature, and that a change of
signature goes the full way again: a launch or run like an earlier one is not checked
again and still passes its own arrays; another shape, strides, dtype, scalar value or
type, array type or alignment is checked again, with the errors of a first call.

On the CPU, CuPy's device side is replaced by fakes that record what would be launched
(FakeGPU); on a GPU (marked `gpu`) the same contracts hold with real arrays."""

import contextlib
import itertools
import types
from pathlib import Path

import numpy as np
import pytest

import codegen
import fuserir
import kir_examples as ex
from codegen import nvrtc
from driver import calls as calling, executable
from codegen import kernel_params, launch as launching
from codegen.cuda import emit_cuda
from fuserir.device import H200
from fuserir.dtypes import DataType
from fuserir.errors import EvaluationError, FuserirError
from lowering import kir

from test_async_copy import F16_VECTORS
from test_builder import BIAS_RELU
from test_grid_sync import turnstile
from test_matmul import seed_fusion

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SHARED_LIMIT = 232448          # sm_90's opt-in limit per block


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSERIR_CACHE_DIR", str(tmp_path / "cache"))


# -- a GPU that records instead of running ---------------------------------------------------

class FakeArray:
    """What launch() and run() read of a cupy.ndarray: shape, strides, dtype, address."""

    def __init__(self, shape, dtype, strides, address):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.itemsize = self.dtype.itemsize
        self.ndim = len(self.shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        if strides is None:                  # C order
            strides, step = [], self.itemsize
            for extent in reversed(self.shape):
                strides.insert(0, step)
                step *= max(extent, 1)
        self.strides = tuple(strides)
        self.nbytes = self.size * self.itemsize
        self.data = types.SimpleNamespace(ptr=address, device_id=0)

    def __len__(self):
        return self.shape[0]

    def transpose(self, axes):
        return FakeArray([self.shape[a] for a in axes], self.dtype,
                         [self.strides[a] for a in axes], self.data.ptr)

    def fill(self, value):
        pass


def ptr(array):
    """The pointer argument a launch passes for `array`."""
    return np.uint64(array.data.ptr)


FakeArray.__module__ = "cupy"      # how driver.executable tells a device array


class FakeFunction:
    """A loaded CUDA function that records its launches."""

    ptr = 0xF00D

    def __init__(self):
        self.launches = []
        self.cooperative = []       # per launch: through CuPy's cooperative launch

    def __call__(self, grid, block, args, shared_mem=0, stream=None,
                 enable_cooperative_groups=False):
        self.launches.append((grid, block, args, shared_mem))
        self.cooperative.append(enable_cooperative_groups)

    @property
    def last_args(self):
        return self.launches[-1][2]


class FakeGPU:
    """CuPy's device side as launch() and run() use it: arrays at distinct 64 KB-aligned
    addresses, one recording function, the shared-memory opt-ins asked for."""

    def __init__(self):
        self.function = FakeFunction()
        self.loads = 0              # full checks: load_function is only asked by them
        self.opt_ins = []           # funcSetAttribute(shared bytes)
        self.addresses = itertools.count((1 << 20) + (1 << 16), 1 << 16)   # atomic: threads call too
        self.memsets = []           # (address, bytes, stream, value) queued
        self.cupy = types.SimpleNamespace(
            ndarray=FakeArray, empty=self.array, zeros=self.array, asarray=lambda a: a,
            full=lambda shape, fill, dtype: self.array(shape, dtype),
            cuda=types.SimpleNamespace(
                runtime=types.SimpleNamespace(getDevice=lambda: 0, getDeviceCount=lambda: 1),
                Device=lambda device: contextlib.nullcontext(),
                get_current_stream=lambda: types.SimpleNamespace(ptr=0)))

    def array(self, shape, dtype=np.float32, strides=None):
        shape = (shape,) if isinstance(shape, int) else shape
        return FakeArray(shape, dtype, strides, next(self.addresses))

    def load_function(self, cubin, name):
        self.loads += 1
        return self.function


@pytest.fixture
def gpu(monkeypatch):
    from cupy.cuda import driver
    fake = FakeGPU()
    monkeypatch.setattr(launching, "cupy_module", lambda: fake.cupy)
    monkeypatch.setattr(executable, "cupy_module", lambda: fake.cupy)
    monkeypatch.setattr(launching, "load_function", fake.load_function)
    monkeypatch.setattr(launching, "device_shared_limit", lambda: SHARED_LIMIT)
    monkeypatch.setattr(executable, "device_shared_limit", lambda: SHARED_LIMIT)
    monkeypatch.setattr(executable, "device_model", lambda: H200)
    monkeypatch.setattr(kernel_params, "cuda_driver", lambda: None)   # CuPy's launch
    monkeypatch.setattr(kernel_params, "memset_async",
                        lambda *args: fake.memsets.append(args))
    monkeypatch.setattr(driver, "funcSetAttribute",
                        lambda func, attribute, value: fake.opt_ins.append(value))
    for cache in ("_launchers", "_opted_in"):
        monkeypatch.setattr(launching, cache, {})
    monkeypatch.setattr(calling, "STREAM_ZEROS", calling.StreamZeros())
    return fake


I32 = np.int32


def pointwise_args(gpu, m=4, n=8):
    return {"x": gpu.array((m, n)), "y": gpu.array((m, n)), "M": m, "N": n}


# -- launch() ----------------------------------------------------------------------------------

def test_launch_checks_a_signature_once_and_passes_each_calls_arrays(gpu):
    kernel = ex.pointwise_kernel()
    for _ in range(3):
        args = pointwise_args(gpu)
        launching.launch(kernel, b"cubin", args)
        assert gpu.function.last_args == (ptr(args["x"]), ptr(args["y"]), I32(8), I32(1),
                                          I32(8), I32(1), I32(4), I32(8))
    assert gpu.loads == 1 and len(gpu.function.launches) == 3
    grid, block, _, shared = gpu.function.launches[-1]
    assert grid == (1, 1, 1) and block == (32, 8, 1) and shared == 0


def recording_driver(calls):
    """A CUDA driver whose launch records the grid, block, shared bytes and stream, and the
    bytes each kernelParams entry points at (`sizes`: each parameter's size in order)."""
    import ctypes

    def launch(func, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        calls.append(((func, gx, gy, gz, bx, by, bz, shared, stream, extra), params))
        return 0

    def launch_cooperative(func, gx, gy, gz, bx, by, bz, shared, stream, params):
        calls.append(((func, gx, gy, gz, bx, by, bz, shared, stream, "cooperative"),
                      params))
        return 0

    return types.SimpleNamespace(launch=launch, launch_cooperative=launch_cooperative,
                                 memset=None, replace_address=None,
                                 read=lambda params, i, size: ctypes.string_at(params[i], size))


def test_a_kernel_whose_blocks_wait_for_each_other_is_launched_cooperatively(gpu, monkeypatch):
    """A co-resident kernel (the parallel split-K's blocks wait for blocks launched after
    them) goes through cuLaunchCooperativeKernel, which puts the whole grid on the device
    at once even beside other streams' kernels; others through cuLaunchKernel; through
    CuPy's launch, the same choice."""
    calls = []
    monkeypatch.setattr(kernel_params, "cuda_driver", lambda: recording_driver(calls))
    from cupy.cuda import driver
    monkeypatch.setattr(driver, "occupancyMaxActiveBlocksPerMultiprocessor",
                        lambda *args: 1)
    monkeypatch.setattr(launching, "_resident_per_sm", {})
    monkeypatch.setattr(launching, "device_model", lambda: H200)
    kernel = turnstile()
    args = {"x": gpu.array((5, 300)), "y": gpu.array((300,)), "ws": gpu.array((300,)),
            "sem": gpu.array((3,), np.int32), "N": 300, "S": 5}
    launching.launch(kernel, b"cubin", args)
    kernel.co_resident = True
    launching.launch(kernel, b"cubin-co", args)
    assert [head[-1] for head, _ in calls] == [None, "cooperative"]
    monkeypatch.setattr(kernel_params, "cuda_driver", lambda: None)
    launching.launch(kernel, b"cubin-co2", args)
    kernel.co_resident = False
    launching.launch(kernel, b"cubin-2", args)
    assert gpu.function.cooperative == [True, False]


def test_a_driver_launch_points_at_each_parameter_in_abi_order(gpu, monkeypatch):
    import struct
    calls = []
    driver = recording_driver(calls)
    monkeypatch.setattr(kernel_params, "cuda_driver", lambda: driver)
    kernel = turnstile()     # x f32[S, N], y f32[N]; workspaces ws f32, sem i32; N, S
    sizes = [8, 8, 4, 4, 4, 8, 8, 4, 4]
    for n in (300, 300):
        x, y = gpu.array((5, n)), gpu.array((n,))
        ws, sem = gpu.array((n,)), gpu.array((3,), np.int32)
        launching.launch(kernel, b"cubin", {"x": x, "y": y, "ws": ws, "sem": sem, "N": n,
                                            "S": 5}, stream=types.SimpleNamespace(ptr=77))
        head, params = calls[-1]
        assert head == (gpu.function.ptr, 1, 1, 1, 128, 1, 1, 0, 77, None) or \
            head[0] == gpu.function.ptr and head[8:] == (77, None)
        got = b"".join(driver.read(params, i, size) for i, size in enumerate(sizes))
        # the pointers, the three i32 strides, the workspace pointers, the i32 scalars
        assert got == struct.pack("<QQiiiQQii", x.data.ptr, y.data.ptr, n, 1, 1,
                                  ws.data.ptr, sem.data.ptr, n, 5)
    assert not gpu.function.launches        # no launch went through CuPy


@pytest.mark.parametrize("change, error, message", [
    ({"y": ("array", (1, 9))}, ValueError, r"y axis 1 must have extent N = 8"),
    ({"x": ("array", (1, 8), np.float64)}, TypeError, "x is f32, the array is float64"),
    ({"x": np.zeros((1, 8), np.float32)}, TypeError, "x must be a cupy array"),
    ({"x": ("array", (1, 8), np.float32, (34, 4))}, ValueError,
     "stride 34 bytes, not a whole number"),
    ({"M": 2 ** 31}, ValueError, "does not fit the index type i32"),
    ({"M": True}, TypeError, "scalar M must be an int, got bool"),     # True == 1, same hash
    ({"M": 1.0}, TypeError, "scalar M must be an int, got float"),
    ({"N": None}, ValueError, "missing scalar argument 'N'"),
    ({"y": None}, ValueError, "missing tensor argument 'y'"),
])
def test_launch_checks_a_new_signature_after_a_good_launch(gpu, change, error, message):
    kernel = ex.pointwise_kernel()
    launching.launch(kernel, b"cubin", pointwise_args(gpu, m=1))
    args = pointwise_args(gpu, m=1)
    for name, value in change.items():
        if value is None:
            del args[name]
        elif isinstance(value, tuple):
            args[name] = gpu.array(*value[1:])
        else:
            args[name] = value
    with pytest.raises(error, match=message):
        launching.launch(kernel, b"cubin", args)
    assert len(gpu.function.launches) == 1
    launching.launch(kernel, b"cubin", pointwise_args(gpu, m=1))     # still launches
    assert len(gpu.function.launches) == 2


def test_launch_passes_the_strides_and_sizes_of_a_new_signature(gpu):
    kernel = ex.pointwise_kernel()
    launching.launch(kernel, b"cubin", pointwise_args(gpu, m=40, n=70))
    column_major = gpu.array((40, 70), strides=(4, 160))
    launching.launch(kernel, b"cubin", {**pointwise_args(gpu, m=40, n=70), "y": column_major})
    assert gpu.function.last_args[2:] == (I32(70), I32(1), I32(1), I32(40), I32(40), I32(70))
    launching.launch(kernel, b"cubin", pointwise_args(gpu, m=9, n=33))
    grid, _, args, _ = gpu.function.launches[-1]
    assert grid == (2, 2, 1) and args[2:] == (I32(33), I32(1), I32(33), I32(1), I32(9), I32(33))
    assert gpu.loads == 3


def symbolic_shared_kernel():
    """A kernel needing 10 * n bytes of dynamic shared memory."""
    n = kir.Var("n", DataType.i32)
    xs = kir.Buffer("xs", DataType.f32, kir.Memory.shared, size=ex.binop("mul", n, ex.const(2)),
                    byte_offset=ex.const(0))
    ys = kir.Buffer("ys", DataType.f16, kir.Memory.shared, size=n,
                    byte_offset=ex.binop("mul", n, ex.const(8)))
    return kir.Kernel("k", [], [kir.ScalarParam(n)], [kir.Allocate(xs), kir.Allocate(ys)],
                      ex.launch([ex.const(1)], [ex.const(1)]))


def test_the_shared_memory_opt_in_is_raised_only_when_a_launch_needs_more(gpu):
    kernel = symbolic_shared_kernel()
    for n in (6000, 6000, 5000, 4000, 8000, 6000, 8000):
        launching.launch(kernel, b"cubin", {"n": n})
        assert gpu.function.launches[-1][3] == 10 * n
    assert gpu.opt_ins == [60000, 80000]        # 40000 needs no opt-in
    with pytest.raises(ValueError, match=f"k needs 300000 bytes of shared memory; this "
                                         f"device allows {SHARED_LIMIT} per block"):
        launching.launch(kernel, b"cubin", {"n": 30000})


def test_launch_allocates_workspaces_per_launch_and_zeroes_the_semaphores(gpu):
    kernel = turnstile()

    def launch(n):
        args = {"x": gpu.array((5, n)), "y": gpu.array((n,)), "N": n, "S": 5}
        launching.launch(kernel, b"cubin", args)
        return gpu.function.last_args[5:7]

    first, second = launch(300), launch(300)
    assert first[0] != second[0] and first[1] != second[1]      # fresh each launch
    (address, nbytes, stream), = [m[:3] for m in gpu.memsets if m[0] == second[1]]
    assert nbytes == 3 * 4 and stream == 0        # sem (3 tiles), on the launch's stream
    assert not [m for m in gpu.memsets if m[0] == second[0]]    # ws needs no zeros
    given = gpu.array((700,)), gpu.array((6,), np.int32)
    args = {"x": gpu.array((5, 300)), "y": gpu.array((300,)), "N": 300, "S": 5,
            "ws": given[0], "sem": given[1]}
    launching.launch(kernel, b"cubin", args)
    assert gpu.function.last_args[5:7] == (ptr(given[0]), ptr(given[1]))
    with pytest.raises(ValueError, match="workspace sem needs a contiguous 1-D array of at "
                                         "least 3 elements, got shape \\(2,\\)"):
        launching.launch(kernel, b"cubin", {**args, "sem": gpu.array((2,), np.int32)})


# -- Executable.run() --------------------------------------------------------------------------

@pytest.fixture
def binds(monkeypatch):
    """How many times run() checked its inputs against the fusion."""
    calls = []
    bind = executable.Executable._bind

    def counting(self, inputs):
        calls.append(1)
        return bind(self, inputs)
    monkeypatch.setattr(executable.Executable, "_bind", counting)
    return calls


def bias_relu_inputs(rng, m=3, n=300):
    return {"x": rng.integers(-9, 9, (m, n)).astype(np.float32),
            "b": rng.integers(-9, 9, n).astype(np.float32)}


def test_run_checks_a_signature_once_and_again_for_a_new_one(rng, binds):
    fusion = fuserir.parse(BIAS_RELU)
    exe = codegen.compile(fusion, backend="interp")
    for m, n in [(3, 300), (3, 300), (5, 130), (3, 300)]:
        data = bias_relu_inputs(rng, m, n)
        np.testing.assert_array_equal(exe.run(data)["y"], fuserir.evaluate(fusion, data)["y"])
    assert len(binds) == 2
    wide = rng.integers(-9, 9, (3, 600)).astype(np.float32)
    strided = {"x": wide[:, ::2], "b": data["b"]}       # same shape, other strides
    np.testing.assert_array_equal(exe.run(strided)["y"], fuserir.evaluate(fusion, strided)["y"])
    assert len(binds) == 3


def test_run_checks_inputs_without_a_signature_every_time(rng, binds):
    fusion = fuserir.parse(BIAS_RELU)
    exe = codegen.compile(fusion, backend="interp")
    data = bias_relu_inputs(rng)
    for _ in range(2):                  # a memoryview has strides but no dtype
        got = exe.run({"x": memoryview(data["x"]), "b": data["b"]})["y"]
        np.testing.assert_array_equal(got, fuserir.evaluate(fusion, data)["y"])
    assert len(binds) == 2
    with pytest.raises(EvaluationError, match="input x: expected f32, got float64"):
        exe.run({"x": data["x"].tolist(), "b": data["b"]})


@pytest.mark.parametrize("bad, message", [
    ({"x": np.zeros((3, 4), np.float64), "b": np.zeros(4, np.float32)},
     "input x: expected f32, got float64"),
    ({"x": np.zeros((3, 4), np.float32), "b": np.zeros(5, np.float32)},
     "input b: axis 0 is N = 5, but N = 4 from input x axis 1"),
    ({"x": np.zeros((3, 4), np.float32)}, "missing input 'b'"),
    ({"x": np.zeros((3, 4), np.float32), "b": np.zeros(4, np.float32), "c": 1.5},
     "'c' is neither an input nor a run-time scalar of fusion bias_relu \\(inputs: x, b; "
     "run-time scalars: none; sizes: M, N\\)"),
])
def test_run_checks_a_new_signature_after_a_good_run(bad, message):
    exe = codegen.compile(fuserir.parse(BIAS_RELU), backend="interp")
    exe.run({"x": np.zeros((3, 4), np.float32), "b": np.zeros(4, np.float32)})
    with pytest.raises(EvaluationError, match=message):
        exe.run(bad)


def test_run_checks_named_scalars_of_each_signature(rng, binds):
    exe = codegen.compile(fuserir.parse((EXAMPLES / "splitk_matmul.fz").read_text()),
                          backend="interp")
    a = rng.integers(-3, 4, (8, 4)).astype(np.float16)
    want = (a.astype(np.float32).T @ a.astype(np.float32)).astype(np.float16)
    for splitk in (1, 2, 1, 3):
        np.testing.assert_array_equal(exe.run({"A": a, "B": a, "splitk": splitk})["out"], want)
    assert len(binds) == 3
    with pytest.raises(EvaluationError, match="run-time scalar 'splitk' must be an integer"):
        exe.run({"A": a, "B": a, "splitk": True})     # True == 1, but not a size
    with pytest.raises(EvaluationError, match="run-time scalar 'splitk' must be >= 1"):
        exe.run({"A": a, "B": a, "splitk": 0})
    with pytest.raises(EvaluationError, match="needs a value for 'splitk'"):
        exe.run({"A": a, "B": a})


def aligned(array, offset=0):
    """A copy of `array` whose data starts `offset` bytes past a 64-byte boundary."""
    raw = np.zeros(array.nbytes + 128, np.uint8)
    start = -raw.ctypes.data % 64 + offset
    copy = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    copy[...] = array
    return copy


def test_run_checks_vector_alignment_of_each_call(rng, binds):
    fusion = fuserir.parse(F16_VECTORS)
    exe = codegen.compile(fusion, backend="interp")
    x = rng.integers(-5, 5, (3, 256)).astype(np.float16)
    want = fuserir.evaluate(fusion, {"x": x})["y"]
    np.testing.assert_array_equal(exe.run({"x": aligned(x)})["y"], want)
    assert exe.kernels_for({"x": aligned(x)}) == [exe.steps[0].kernel]   # 16 bytes fit
    # the same shape, strides and dtype 2 and 8 bytes past a 16-byte boundary: variants
    # with element and 8-byte copies of x, each built once for its alignment
    for offset, caps in ((2, {"x": 2}), (8, {"x": 8}), (16, {})):
        for _ in range(2):
            np.testing.assert_array_equal(exe.run({"x": aligned(x, offset)})["y"], want)
        (kernel,) = exe.kernels_for({"x": aligned(x, offset)})
        assert kernel.caps == caps
    assert len(binds) == 1


def test_cuda_run_checks_each_signature_once_and_allocates_each_call(gpu, binds):
    exe = codegen.compile(fuserir.parse(BIAS_RELU), backend="cuda")
    outputs = []
    for m, n in [(3, 300), (3, 300), (5, 130)]:
        x, b = gpu.array((m, n)), gpu.array((n,))
        out = exe.run({"x": x, "b": b})["y"]
        assert out.shape == (m, n) and out.strides == (4 * n, 4) and out.dtype == np.float32
        assert gpu.function.last_args == (ptr(x), ptr(b), ptr(out), I32(n), I32(1), I32(1),
                                          I32(n), I32(1), I32(m), I32(n))
        outputs.append(out)
    assert len({id(out) for out in outputs}) == 3 and len(binds) == 2 and gpu.loads == 2
    with pytest.raises(EvaluationError, match="input x: expected f32, got float16"):
        exe.run({"x": gpu.array((5, 130), np.float16), "b": gpu.array((130,))})
    with pytest.raises(FuserirError, match=r"run\(blocks=\.\.\., interleavings=\.\.\.\) are "
                                           "the interpreter's options only"):
        exe.run({"x": gpu.array((5, 130)), "b": gpu.array((130,))}, blocks=[(0,)])


def stride_args(kernel, args, name):
    """The element strides a launch passed for tensor `name` of `kernel`."""
    params = kernel.tensor_params
    at = len(params) + sum(len(p.sizes) for p in params[:[p.buffer.name for p in params]
                                                      .index(name)])
    (rank,) = [len(p.sizes) for p in params if p.buffer.name == name]
    return tuple(int(v) for v in args[at:at + rank])


def test_cuda_run_passes_each_runs_intermediates(gpu, binds):
    exe = codegen.compile(seed_fusion(splitk_mode="two_kernel"), backend="cuda")
    first, second = ([p.buffer.name for p in k.kir.tensor_params] for k in exe.kernels)
    a, b = gpu.array((64, 256), np.float16), gpu.array((64, 128), np.float16)
    partials = []
    for _ in range(2):
        exe.run({"A": a, "B": b, "splitk": 4})
        made, read = gpu.function.launches[-2][2], gpu.function.launches[-1][2]
        partials.append(made[first.index("acc_rf")])
        assert read[second.index("acc_rf")] == partials[-1]
        # [256, 128, 4] f32 with the splits outermost in memory
        assert stride_args(exe.kernels[0].kir, made, "acc_rf") == (128, 1, 32768)
    assert partials[0] != partials[1]            # a scratch block of each call's own
    assert len(binds) == 1 and gpu.loads == 2


def test_cuda_run_gives_each_run_its_own_partials_and_each_stream_its_semaphores(
        gpu, monkeypatch):
    """Partial sums: a scratch block of each call's own. Semaphores (which every launch
    leaves zero): the stream's block of zeros, zeroed once on that stream when made or
    grown; another stream has its own; a call being captured into a graph gets its own,
    zeroed by a memset the graph holds."""
    exe = codegen.compile(fuserir.parse((EXAMPLES / "seed_matmul.fz").read_text()),
                          backend="cuda")
    kernel = exe.kernels[0].kir
    assert [w.buffer.name for w in kernel.workspaces] == ["acc_work", "acc_sem"]
    assert [w.zeroed for w in kernel.workspaces] == [False, True]
    after = len(kernel.tensor_params) + sum(len(p.sizes) for p in kernel.tensor_params)
    a, b = gpu.array((64, 256), np.float16), gpu.array((64, 128), np.float16)
    stream = types.SimpleNamespace(ptr=0x51)
    monkeypatch.setattr(gpu.cupy.cuda, "get_current_stream", lambda: stream)

    def call(splitk):
        gpu.memsets.clear()
        exe.run({"A": a, "B": b, "splitk": splitk})
        work, sem = gpu.function.last_args[after:after + 2]
        return int(work), int(sem), [m for m in gpu.memsets if m[0] == sem]

    works, sems = [], []
    for splitk in (2, 2, 3):
        work, sem, memsets = call(splitk)
        works.append(work)
        sems.append(sem)
        if splitk == 2 and len(works) == 1:      # the stream's first: its zeros are made
            (address, nbytes, on, *value), = memsets
            assert (address, on, value) == (sem, 0x51, []) and nbytes >= 4
        else:
            assert memsets == []                 # zeros kept: every launch leaves them 0
    assert len(set(works)) == 3 and len(set(sems)) == 1
    stream.ptr = 0x52                            # another stream: zeros of its own
    work, sem, memsets = call(3)
    assert sem not in sems and [m[:3] for m in memsets] == [(sem, 4096, 0x52)]
    exe.run({"A": a, "B": b, "splitk": 1})  # one split: no workspace bytes, nothing zeroed
    gpu.memsets.clear()
    exe.run({"A": a, "B": b, "splitk": 1})
    assert gpu.function.last_args[after:after + 2] == (0, 0) and not gpu.memsets
    assert gpu.loads == 3             # a signature per split factor
    monkeypatch.setattr(gpu.cupy.cuda.runtime, "streamIsCapturing", lambda s: True,
                        raising=False)
    captured = [call(3) for _ in range(2)]       # a graph's: its own, zeroed in the graph
    for work, sem, memsets in captured:
        assert sem not in sems and [m[:3] for m in memsets] == [(sem, 256, 0x52)]
    assert captured[0][1] != captured[1][1]


def test_a_stream_block_of_zeros_grows_and_per_thread_streams_are_apart(gpu):
    zeros, fw = calling.StreamZeros(), calling.CuPyArrays(0, gpu.cupy)
    first = zeros.address(fw, 0, 7, 100)
    assert zeros.address(fw, 0, 7, 4096) == first           # rounded up to 4 KiB
    grown = zeros.address(fw, 0, 7, 5000)
    assert grown != first and gpu.memsets[-1][:3] == (grown, 8192, 7)
    assert zeros.address(fw, 1, 7, 16) not in (first, grown)   # another device
    here = zeros.address(fw, 0, calling.PER_THREAD_STREAM, 16)
    import threading
    there = []
    worker = threading.Thread(target=lambda: there.append(
        zeros.address(fw, 0, calling.PER_THREAD_STREAM, 16)))
    worker.start()
    worker.join()
    assert there[0] != here and zeros.address(fw, 0, calling.PER_THREAD_STREAM, 16) == here


# -- on the GPU --------------------------------------------------------------------------------

@pytest.mark.gpu
def test_launch_with_changing_signatures_on_gpu(rng):
    import cupy as cp
    kernel = ex.pointwise_kernel()
    cubin = nvrtc.compile_to_cubin(emit_cuda(kernel), kernel.name)
    for m, n, column_major in [(37, 70, False), (37, 70, False), (37, 70, True), (5, 9, False)]:
        host = rng.standard_normal((m, n)).astype(np.float32)
        y = cp.full((n, m), np.nan, cp.float32).T if column_major else \
            cp.full((m, n), np.nan, cp.float32)
        launching.launch(kernel, cubin, {"x": cp.asarray(host), "y": y, "M": m, "N": n})
        np.testing.assert_array_equal(cp.asnumpy(y), host * np.float32(2) + np.float32(1))
    with pytest.raises(ValueError, match=r"y axis 1 must have extent N = 9"):
        launching.launch(kernel, cubin, {"x": cp.zeros((5, 9), cp.float32),
                                         "y": cp.zeros((5, 8), cp.float32), "M": 5, "N": 9})
    big = ex.shared_reverse_kernel(pad_bytes=60 * 1024)          # the opt-in, once
    cubin = nvrtc.compile_to_cubin(emit_cuda(big), big.name)
    for n in (300, 300, 1000):
        host = rng.standard_normal(n).astype(np.float32)
        y = cp.full(n, np.nan, cp.float32)
        launching.launch(big, cubin, {"x": cp.asarray(host), "y": y, "N": n})
        got = cp.asnumpy(y)
        full = n // 128 * 128
        np.testing.assert_array_equal(got[:full].reshape(-1, 128),
                                      host[:full].reshape(-1, 128)[:, ::-1])


@pytest.mark.gpu
def test_run_with_changing_signatures_on_gpu(rng):
    import cupy as cp
    fusion = fuserir.parse(BIAS_RELU)
    exe = codegen.compile(fusion, backend="cuda")
    for m, n, step in [(3, 300, 1), (3, 300, 1), (3, 300, 2), (7, 130, 1)]:
        wide = bias_relu_inputs(rng, m, step * n)
        data = {"x": wide["x"][:, ::step], "b": wide["b"][:n]}
        device = {"x": cp.asarray(wide["x"])[:, ::step], "b": cp.asarray(data["b"])}
        got = cp.asnumpy(exe.run(device)["y"])
        np.testing.assert_array_equal(got, fuserir.evaluate(fusion, data)["y"])
    with pytest.raises(EvaluationError, match="input b: axis 0 is N = 5, but N = 130"):
        exe.run({"x": cp.zeros((7, 130), cp.float32), "b": cp.zeros(5, cp.float32)})
    vectors = codegen.compile(fuserir.parse(F16_VECTORS), backend="cuda")
    x = cp.asarray(rng.integers(-5, 5, (3, 264)).astype(np.float16))
    host = cp.asnumpy(x)
    for window in (slice(0, 256), slice(1, 257), slice(4, 260), slice(0, 256)):
        # the same shape, strides and dtype at addresses 16, 2, 8 and 16 bytes aligned:
        # 16-byte cp.async, element copies, 8-byte cp.async, 16-byte again
        got = cp.asnumpy(vectors.run({"x": x[:, window]})["y"])
        want = fuserir.evaluate(fuserir.parse(F16_VECTORS), {"x": host[:, window]})["y"]
        np.testing.assert_array_equal(got, want)
    caps = [k.caps for w in (slice(0, 256), slice(1, 257), slice(4, 260))
            for k in vectors.kernels_for({"x": x[:, w]})]
    assert caps == [{}, {"x": 2}, {"x": 8}]


@pytest.mark.gpu
def test_run_with_torch_tensors_of_changing_strides_on_gpu(rng):
    torch = pytest.importorskip("torch")
    fusion = fuserir.parse(BIAS_RELU)
    exe = codegen.compile(fusion, backend="cuda")
    for transposed in (False, False, True):
        data = bias_relu_inputs(rng)
        x = (torch.from_numpy(data["x"].T.copy()).cuda().t() if transposed
             else torch.from_numpy(data["x"]).cuda())
        got = exe.run({"x": x, "b": torch.from_numpy(data["b"]).cuda()})["y"]
        assert isinstance(got, torch.Tensor)
        np.testing.assert_array_equal(got.cpu().numpy(), fuserir.evaluate(fusion, data)["y"])
