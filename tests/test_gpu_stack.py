"""Without the GPU stack the cuda backend says what is missing and how to fix it.

A missing CUDA package (CuPy, NVRTC, cuda.bindings), driver or device is a
GpuUnavailableError (a FuserirError) naming what is missing, the extra to install (and
the driver's CUDA version against the one CuPy needs where CUDA tells them) and that
backend="interp" runs without a GPU; the interpreter meanwhile works without any of it.
Missing packages and old drivers are simulated through sys.modules; the no-GPU case is
also run for real where NVRTC is installed and no GPU answers.
"""

import sys
import types

import numpy as np
import pytest

import codegen
import fuserir
from codegen import gpu_stack
from codegen.errors import GpuUnavailableError

DOUBLE = "fusion double(x: f32[N]) {\n  y = x * 2.0\n  output y\n}\n"
INSTALL = ("pip install 'fuserir[cuda13]'", "'fuserir[cuda12]' for a CUDA 12 driver")
INTERP = 'backend="interp" compiles and runs on the CPU without a GPU'


@pytest.fixture
def fresh(monkeypatch):
    """gpu_stack's checks run again (they keep only a success), before and after."""
    gpu_stack.nvrtc.cache_clear()
    gpu_stack.cupy_with_gpu.cache_clear()
    yield monkeypatch
    gpu_stack.nvrtc.cache_clear()
    gpu_stack.cupy_with_gpu.cache_clear()


def _no_cupy(monkeypatch):
    for name in ("cupy", "cupy.cuda", "cupy.cuda.nvrtc", "cupy_backends"):
        monkeypatch.setitem(sys.modules, name, None)       # import fails


def _says_how_to_fix(error):
    text = str(error)
    assert all(part in text for part in INSTALL), text
    assert INTERP in text, text


def test_is_a_fuserir_error_offered_by_every_front():
    assert issubclass(GpuUnavailableError, fuserir.FuserirError)
    assert codegen.GpuUnavailableError is GpuUnavailableError
    assert fuserir.GpuUnavailableError is GpuUnavailableError


def test_compile_for_cuda_without_the_cuda_packages_says_what_to_install(fresh):
    _no_cupy(fresh)
    fusion = fuserir.parse(DOUBLE)
    for compile_ in (codegen.compile, fuserir.compile):
        with pytest.raises(GpuUnavailableError) as raised:
            compile_(fusion)                            # backend="cuda", the default
        assert "builds cubins with NVRTC through CuPy, which is not installed" in \
            str(raised.value)
        assert raised.value.missing == "CuPy and NVRTC"
        _says_how_to_fix(raised.value)


def test_the_interpreter_and_cuda_source_need_no_cuda_package(fresh):
    _no_cupy(fresh)
    exe = fuserir.compile(fuserir.parse(DOUBLE), backend="interp")
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(exe.run({"x": x})["y"], 2 * x)
    np.testing.assert_array_equal(exe(x), 2 * x)
    assert "__global__" in exe.kernels[0].source


def test_cupy_without_its_nvrtc_library_says_what_to_install(fresh):
    cupy = pytest.importorskip("cupy")

    def fail():
        raise RuntimeError("CuPy failed to load libnvrtc.so.13: OSError: libnvrtc.so.13: "
                           "cannot open shared object file: No such file or directory")

    fresh.setattr(cupy.cuda, "nvrtc", types.SimpleNamespace(getVersion=fail))
    fresh.setitem(sys.modules, "cupy.cuda.nvrtc", cupy.cuda.nvrtc)
    with pytest.raises(GpuUnavailableError) as raised:
        gpu_stack.nvrtc()
    assert "CuPy could not load the NVRTC library (CuPy failed to load libnvrtc.so.13" in \
        str(raised.value)
    assert raised.value.missing == "the NVRTC library"
    _says_how_to_fix(raised.value)


class _CudaError(RuntimeError):
    def __init__(self, status, text):
        super().__init__(text)
        self.status = status


def _fake_cupy(monkeypatch, driver, runtime, devices=1, error=None):
    """A CuPy whose runtime reports these versions (e.g. 12040 for 12.4) and either
    raises `error` or counts `devices` devices."""
    def count():
        if error is not None:
            raise error
        return devices
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(
        getDeviceCount=count, driverGetVersion=lambda: driver,
        runtimeGetVersion=lambda: runtime)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return fake


INSUFFICIENT = _CudaError(35, "cudaErrorInsufficientDriver: CUDA driver version is "
                              "insufficient for CUDA runtime version")


def test_a_cuda_12_driver_under_the_cuda_13_stack_is_told_to_take_cuda12(fresh):
    _fake_cupy(fresh, driver=12040, runtime=13020, error=INSUFFICIENT)
    with pytest.raises(GpuUnavailableError) as raised:
        gpu_stack.cupy_with_gpu()
    text = str(raised.value)
    assert "an NVIDIA driver for CUDA 13.2 or newer (the CUDA runtime of the installed " \
           "cupy-cuda13x); this machine's driver supports CUDA 12.4" in text
    assert "pip uninstall cupy-cuda13x && pip install 'fuserir[cuda12]'" in text
    assert "or update the NVIDIA driver" in text and INTERP in text
    assert (raised.value.driver_version, raised.value.runtime_version) == ((12, 4), (13, 2))
    assert raised.value.missing == "a newer NVIDIA driver"


def test_a_driver_older_than_cuda_12_is_told_to_update(fresh):
    _fake_cupy(fresh, driver=11080, runtime=12090, error=INSUFFICIENT)
    with pytest.raises(GpuUnavailableError) as raised:
        gpu_stack.cupy_with_gpu()
    text = str(raised.value)
    assert "driver supports CUDA 11.8" in text and "needs an NVIDIA driver for CUDA 12.9" in text
    assert "Update the NVIDIA driver (fuserir runs on CUDA 12 and 13 drivers)" in text


def test_no_driver_at_all(fresh):
    _fake_cupy(fresh, driver=0, runtime=13020, error=INSUFFICIENT)
    with pytest.raises(GpuUnavailableError) as raised:
        gpu_stack.cupy_with_gpu()
    assert "no NVIDIA driver was found (the CUDA driver library libcuda.so.1 is not " \
           "loadable)" in str(raised.value)
    assert INTERP in str(raised.value) and raised.value.missing == "an NVIDIA driver"


def test_no_device(fresh):
    fresh.setenv("CUDA_VISIBLE_DEVICES", "")
    _fake_cupy(fresh, driver=13000, runtime=13020, devices=0)
    with pytest.raises(GpuUnavailableError) as raised:
        gpu_stack.cupy_with_gpu()
    assert "needs a CUDA device, and none is visible; CUDA_VISIBLE_DEVICES is ''" in \
        str(raised.value)
    assert INTERP in str(raised.value)


def test_without_cupy_running_on_the_gpu_says_what_to_install(fresh):
    _no_cupy(fresh)
    with pytest.raises(GpuUnavailableError) as raised:
        gpu_stack.cupy_with_gpu()
    assert 'running on the GPU (backend "cuda") needs CuPy, which is not installed' in \
        str(raised.value)
    _says_how_to_fix(raised.value)


def test_without_cuda_bindings_tensor_maps_say_what_to_install(monkeypatch):
    for name in ("cuda", "cuda.bindings", "cuda.bindings.driver"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(GpuUnavailableError) as raised:
        gpu_stack.cuda_driver_bindings()
    assert "cuda.bindings (the cuda-bindings package), which is not installed" in \
        str(raised.value)
    _says_how_to_fix(raised.value)


def _gpu_answers():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device
        return False


@pytest.mark.skipif(_gpu_answers(), reason="a GPU answers here")
def test_running_a_cuda_executable_without_a_gpu_is_a_clear_error():
    """For real, where NVRTC is installed and no GPU answers (CI; a core install skips)."""
    exe = codegen.compile(fuserir.parse(DOUBLE))
    x = np.ones(4, np.float32)
    for run in (lambda: exe.run({"x": x}), lambda: exe(x)):
        with pytest.raises(GpuUnavailableError) as raised:
            run()
        text = str(raised.value)
        assert text.startswith('running on the GPU (backend "cuda") needs ') and INTERP in text
        if raised.value.driver_version == (0, 0):
            assert "no NVIDIA driver was found" in text
