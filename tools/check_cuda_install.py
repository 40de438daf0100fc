"""Check an install with a CUDA extra: fuserir imports, and NVRTC of the expected CUDA
major builds an sm_90 cubin of a small kernel through the cuda backend (no GPU needed).

    python tools/check_cuda_install.py 12      # in a venv with fuserir[cuda12]
"""

import sys

import fuserir
from codegen import nvrtc

DOUBLE = ("fusion double(x: f32[N]) {\n  y = x * 2.0\n  output y\n}\n"
          "schedule double {\n  y.split(0, 128)\n  y.parallelize(0, BIDx)\n"
          "  y.parallelize(1, TIDx)\n}\n")


def main(argv):
    if len(argv) != 1 or not argv[0].isdigit():
        sys.exit("usage: check_cuda_install.py CUDA_MAJOR (12 or 13)")
    major = int(argv[0])
    exe = fuserir.compile(fuserir.parse(DOUBLE))      # the cuda backend builds the cubin
    kernel = exe.kernels[0]
    version = nvrtc.nvrtc_version()
    if version[0] != major:
        sys.exit(f"expected NVRTC {major}.x, found {version[0]}.{version[1]}")
    if not (kernel.cubin or b"").startswith(b"\x7fELF"):
        sys.exit(f"NVRTC {version} returned no cubin for {kernel.name}")
    print(f"fuserir {fuserir.__version__}: NVRTC {version[0]}.{version[1]} built "
          f"{kernel.name} for {nvrtc.default_arch()} ({len(kernel.cubin)} bytes of cubin)")


if __name__ == "__main__":
    main(sys.argv[1:])
