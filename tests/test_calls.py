"""Calling an Executable (`exe(a, b)`): arguments by position and by name, `out=`, the
signature that decides when a call goes the full way again, one device per call, and
calls from several threads. On the CPU, CuPy's device side is the recording fake of
test_launch_cache (FakeGPU); the torch, stream and CUDA-graph contracts are checked on the
GPU in test_calls_gpu."""

import sys
import threading

import numpy as np
import pytest

import codegen
import fuserir
from driver import executable
from fuserir.errors import EvaluationError, FuserirError

from test_async_copy import F16_VECTORS
from test_builder import BIAS_RELU
from test_launch_cache import I32, FakeArray, gpu, ptr  # noqa: F401 - the fixture


@pytest.fixture
def binds(monkeypatch):
    """The kernels whose launches a call checked in full (codegen.launch.bind), in order."""
    bound = []
    bind = executable.bind

    def recording(kernel, cubin, args):
        bound.append(kernel)
        return bind(kernel, cubin, args)
    monkeypatch.setattr(executable, "bind", recording)
    return bound


def bias_relu(gpu, m=3, n=300):
    return codegen.compile(fuserir.parse(BIAS_RELU), backend="cuda"), \
        gpu.array((m, n)), gpu.array((n,))


def test_a_call_by_position_launches_on_its_arrays_and_returns_the_output(gpu, binds):
    exe, x, b = bias_relu(gpu)
    y = exe(x, b)
    assert isinstance(y, FakeArray) and y.shape == (3, 300) and y.dtype == np.float32
    assert gpu.function.last_args[:3] == (ptr(x), ptr(b), ptr(y))
    again = exe(x=x, b=b)                  # by name: the same signature, checked once
    assert again is not y and gpu.function.last_args[2] == ptr(again)
    x2, b2 = gpu.array((3, 300)), gpu.array((300,))
    exe(x2, b=b2)
    assert gpu.function.last_args[:2] == (ptr(x2), ptr(b2))
    assert len(binds) == 1 and len(gpu.function.launches) == 3


def test_run_is_a_call_by_name(gpu, binds):
    exe, x, b = bias_relu(gpu)
    y = exe.run({"x": x, "b": b})["y"]
    assert gpu.function.last_args[:3] == (ptr(x), ptr(b), ptr(y))
    exe(x, b)
    assert len(binds) == 1


@pytest.mark.parametrize("call, error, message", [
    (lambda exe, x, b: exe(x, b, x), FuserirError,
     r"fusion bias_relu takes 2 inputs \(x, b\), got 3 positional"),
    (lambda exe, x, b: exe(x, x=x), FuserirError,
     "input x of fusion bias_relu is given twice, by position and by name"),
    (lambda exe, x, b: exe(x), EvaluationError, "missing input 'b' of fusion bias_relu"),
    (lambda exe, x, b: exe(x, b, c=3), EvaluationError,
     "'c' is neither an input nor a run-time scalar of fusion bias_relu"),
    (lambda exe, x, b: exe(x, [1.0] * 300), EvaluationError,
     "input b: expected f32, got float64"),
    (lambda exe, x, b: exe(x, [np.float32(1.0)] * 300), FuserirError,
     r"input b: expected a device array \(torch, CuPy, __cuda_array_interface__ or "
     r"__dlpack__\), got list"),
    (lambda exe, x, b: exe(x, b, out=(x, b)), FuserirError,
     r"out= gives 2 arrays; fusion bias_relu writes 1 \(y\)"),
    (lambda exe, x, b: exe(x, b, out={"z": x}), FuserirError,
     "out= names z; fusion bias_relu writes y"),
])
def test_bad_calls_say_what_is_wrong(gpu, call, error, message):
    exe, x, b = bias_relu(gpu)
    exe(x, b)
    with pytest.raises(error, match=message):
        call(exe, x, b)


def test_out_receives_the_output(gpu, binds):
    exe, x, b = bias_relu(gpu)
    out = gpu.array((3, 300))
    assert exe(x, b, out=out) is out
    assert gpu.function.last_args[2] == ptr(out)
    other = gpu.array((3, 300))
    assert exe(x, b, out={"y": other}) is other and gpu.function.last_args[2] == ptr(other)
    assert len(binds) == 1          # the same signature: out='s layout and alignment
    with pytest.raises(FuserirError, match=r"out= y: expected f32 \(float32\), got float16"):
        exe(x, b, out=gpu.array((3, 300), np.float16))
    with pytest.raises(FuserirError, match=r"out= y: expected shape \(3, 300\), got "
                                           r"\(3, 299\)"):
        exe(x, b, out=gpu.array((3, 299)))
    transposed = gpu.array((300, 3)).transpose((1, 0))
    assert exe(x, b, out=transposed) is transposed       # any strides: passed to the kernel
    assert gpu.function.last_args[6:8] == (I32(1), I32(3))


def test_inputs_on_two_devices_are_refused(gpu):
    exe, x, b = bias_relu(gpu)
    b.data.device_id = 1
    with pytest.raises(FuserirError, match=r"the inputs are on different devices \(x on "
                                           r"cuda:0, b on cuda:1\); a call runs on one device"):
        exe(x, b)
    b.data.device_id = 0
    out = gpu.array((3, 300))
    out.data.device_id = 1
    with pytest.raises(FuserirError, match=r"the inputs and outputs are on different devices "
                                           r"\(x on cuda:0, b on cuda:0, out= y on cuda:1\)"):
        exe(x, b, out=out)


def test_the_signature_refuses_a_changed_dtype_and_replans_strides_and_alignment(
        gpu, binds):
    exe, x, b = bias_relu(gpu)
    exe(x, b)
    with pytest.raises(EvaluationError, match="input x: expected f32, got float16"):
        exe(gpu.array((3, 300), np.float16), b)
    strided = gpu.array((3, 600)).transpose((0, 1))
    strided.strides = (2400, 8)                       # every other column
    strided.shape = (3, 300)
    exe(strided, b)
    assert len(binds) == 2 and gpu.function.last_args[3:5] == (I32(600), I32(2))
    vectors = codegen.compile(fuserir.parse(F16_VECTORS), backend="cuda")
    v = gpu.array((3, 256), np.float16)
    vectors(v)
    moved = gpu.array((3, 256), np.float16)
    moved.data.ptr += 2                               # 2 bytes past 16: element copies
    vectors(moved)
    assert [k.name for k in binds[2:]] == [vectors.kernels[0].kir.name] * 2
    assert binds[3] is not binds[2]                   # another kernel: narrower copies
    assert vectors.kernels_for({"x": moved})[0].caps == {"x": 2}


def test_calls_from_several_threads_launch_their_own_arrays(gpu):
    """Each launch takes the pointers of the call that made it: the launch parameters'
    storage is written and launched under a lock (CPython switches threads often here)."""
    exe, x, b = bias_relu(gpu)
    exe(x, b)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    expected, errors = {}, []

    def caller():
        try:
            for _ in range(200):
                xi, bi = gpu.array((3, 300)), gpu.array((300,))
                y = exe(xi, bi)
                expected[int(ptr(xi))] = (ptr(bi), ptr(y))
        except Exception as e:   # noqa: BLE001 - reported below
            errors.append(e)
    try:
        threads = [threading.Thread(target=caller) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    launched = gpu.function.launches[1:]
    assert len(launched) == 8 * 200
    for _, _, args, _ in launched:
        assert expected[int(args[0])] == (args[1], args[2])


def test_the_interpreter_takes_calls_too():
    exe = codegen.compile(fuserir.parse(BIAS_RELU), backend="interp")
    x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    b = np.ones(4, np.float32)
    want = np.maximum(x + b, 0)
    np.testing.assert_array_equal(exe(x, b), want)
    out = np.full((3, 4), np.nan, np.float32)
    assert exe(x, b=b, out=out) is out
    np.testing.assert_array_equal(out, want)
    with pytest.raises(FuserirError, match=r"out= y: expected float32 of shape \(3, 4\), "
                                           r"got float64 of shape \(3, 4\)"):
        exe(x, b, out=np.zeros((3, 4)))
