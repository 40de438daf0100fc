"""The GPU stack of the cuda backend, loaded on first use, and a clear error where a part
is missing.

The `cuda13` or `cuda12` extra installs it: CuPy (memory, streams, launches), NVRTC (CUDA
source -> cubin, through CuPy's binding; its library comes from the nvidia-cuda-nvrtc
wheel) and cuda.bindings (TMA tensor maps). Everything else (the DSL, IR, schedulers,
lowering, verifiers, CUDA source emission and the CPU interpreter) needs none of it, so
this module imports CuPy only when asked:

    nvrtc()          CuPy's NVRTC binding, for building a cubin (no GPU needed)
    cupy_with_gpu()  CuPy, once a CUDA device has answered (running on the GPU)
    cuda_driver_bindings()  cuda.bindings.driver (encoding tensor maps)

Each raises codegen.errors.GpuUnavailableError saying what is missing (the packages, the
driver, a device; the driver's CUDA version against the one CuPy needs when CUDA tells
them), how to fix it, and that backend="interp" runs without a GPU. It sits in codegen,
the layer that builds and launches kernels; the driver and the CLI ask through it.
"""

import functools
import os

from .errors import GpuUnavailableError

__all__ = ["nvrtc", "cupy_with_gpu", "cuda_driver_bindings", "INSTALL", "INTERP"]

INSTALL = "pip install 'fuserir[cuda13]' (or 'fuserir[cuda12]' for a CUDA 12 driver)"
INTERP = 'backend="interp" compiles and runs on the CPU without a GPU or CUDA packages'
_INSUFFICIENT_DRIVER = 35       # cudaErrorInsufficientDriver
_NO_DEVICE = 100                # cudaErrorNoDevice


def _first_line(error):
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


@functools.cache
def nvrtc():
    """CuPy's NVRTC binding, its library loaded (checked once)."""
    try:
        from cupy.cuda import nvrtc as binding
    except ImportError as error:
        raise GpuUnavailableError(
            f'backend "cuda" builds cubins with NVRTC through CuPy, which is not installed '
            f"({_first_line(error)}). Install them with {INSTALL}; {INTERP}.",
            missing="CuPy and NVRTC") from None
    try:
        binding.getVersion()
    except Exception as error:  # noqa: BLE001 - CuPy is there, libnvrtc is not (or broken)
        raise GpuUnavailableError(
            f'backend "cuda" builds cubins with NVRTC, and CuPy could not load the NVRTC '
            f"library ({_first_line(error)}). Install it with {INSTALL}; {INTERP}.",
            missing="the NVRTC library") from None
    return binding


@functools.cache
def cupy_with_gpu():
    """CuPy, once a CUDA device has answered (checked once; a failure is checked again at
    the next call)."""
    try:
        import cupy
    except ImportError as error:
        raise GpuUnavailableError(
            f'running on the GPU (backend "cuda") needs CuPy, which is not installed '
            f"({_first_line(error)}). Install it with {INSTALL}; {INTERP}.",
            missing="CuPy") from None
    runtime = cupy.cuda.runtime
    try:
        count = runtime.getDeviceCount()
    except Exception as error:  # noqa: BLE001 - CuPy's CUDARuntimeError, or worse
        raise _device_error(runtime, error) from None
    if count < 1:
        raise _device_error(runtime, None)
    return cupy


def _version(ask):
    """(major, minor) of a CUDA version query (12040 -> (12, 4)), None where it fails; a
    driver version of 0 means no driver was found: (0, 0)."""
    try:
        number = int(ask())
    except Exception:  # noqa: BLE001
        return None
    return number // 1000, number % 1000 // 10


def _text(version):
    return f"{version[0]}.{version[1]}"


def _device_error(runtime, error):
    """GpuUnavailableError for a CUDA runtime that found no usable device (`error` what
    CUDA raised, None where it counted zero devices)."""
    driver = _version(runtime.driverGetVersion)
    needed = _version(runtime.runtimeGetVersion)
    status = getattr(error, "status", None)
    said = f" (CUDA: {_first_line(error)})" if error is not None else ""
    head = 'running on the GPU (backend "cuda") needs '
    if driver == (0, 0):
        missing = "an NVIDIA driver"
        what = (f"{head}an NVIDIA GPU and its driver, and no NVIDIA driver was found (the "
                f"CUDA driver library libcuda.so.1 is not loadable){said}. Run on a machine "
                f"with an NVIDIA GPU and its driver installed")
    elif status == _INSUFFICIENT_DRIVER and driver and needed and driver < needed:
        missing = "a newer NVIDIA driver"
        package = f"cupy-cuda{needed[0]}x"
        what = (f"{head}an NVIDIA driver for CUDA {_text(needed)} or newer (the CUDA runtime "
                f"of the installed {package}); this machine's driver supports CUDA "
                f"{_text(driver)}{said}. ")
        if driver[0] == 12 and needed[0] > 12:
            what += (f"For this driver install the CUDA 12 stack: pip uninstall {package} "
                     f"&& pip install 'fuserir[cuda12]'; or update the NVIDIA driver")
        else:
            what += "Update the NVIDIA driver (fuserir runs on CUDA 12 and 13 drivers)"
    elif status == _NO_DEVICE or error is None:
        missing = "a CUDA device"
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        hidden = f"; CUDA_VISIBLE_DEVICES is {visible!r}" if visible is not None else ""
        what = f"{head}a CUDA device, and none is visible{said}{hidden}"
    else:
        missing = "a working CUDA device"
        what = f"{head}a working CUDA device, and CUDA could not use one{said}"
    return GpuUnavailableError(f"{what}; {INTERP}.", missing=missing,
                               driver_version=driver, runtime_version=needed)


def cuda_driver_bindings():
    """cuda.bindings.driver (the cuda-bindings package), for encoding TMA tensor maps."""
    try:
        from cuda.bindings import driver
    except ImportError as error:
        raise GpuUnavailableError(
            f"a kernel with TMA tensor maps is launched through cuda.bindings (the "
            f"cuda-bindings package), which is not installed ({_first_line(error)}). "
            f"Install it with {INSTALL}; {INTERP}.", missing="cuda-bindings") from None
    return driver
