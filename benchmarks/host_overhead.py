"""Host time per call of a compiled kernel (issue 8's target: under 20 us per launch).

    python3 benchmarks/host_overhead.py [--calls 500]

Compiles examples/seed_matmul.fz, then calls it back to back on a problem so small that
the GPU finishes each kernel before the host issues the next (M=256, N=128, K=64,
splitk=1: one CTA, two K tiles), and reports wall time per call for `exe.run()` (binding,
checks, output allocation, launch) and for `codegen.launch` with arguments bound once
(the launch path alone). A second line does the same for examples/pointwise_chain.fz, a
small pointwise kernel (two f32 inputs, one bf16 output, 256x256). Every call repeats
the first one's argument signature, so both paths run as they do for a cached kernel
called again: checked once per signature (codegen.launch, driver.executable). Wall time
per call is max(host, device) per call, so these are upper bounds on the host's share.
"""

import argparse
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import common  # noqa: E402


def per_call_us(fn, calls, sync):
    for _ in range(20):
        fn()
    sync()
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - started) / calls * 1e6


def run_and_launch_us(example, inputs, scalars, calls):
    """(us per exe.run(inputs), us per codegen.launch of its one kernel with the arguments
    bound once) for the fusion of examples/<example>.fz."""
    import cupy as cp
    import codegen
    import fuserir
    from codegen.launch import WorkspacePool, cupy_zeros, launch
    exe = codegen.compile(fuserir.parse((ROOT / "examples" / f"{example}.fz").read_text()),
                          backend="cuda")
    sync = cp.cuda.runtime.deviceSynchronize
    run_us = per_call_us(lambda: exe.run(inputs), calls, sync)
    (kernel,) = exe.kernels
    arrays = {name: value for name, value in inputs.items() if hasattr(value, "shape")}
    bound = {**arrays, **exe.run(inputs), **scalars,
             **WorkspacePool(cupy_zeros).arrays(kernel.kir, scalars)}
    launch_us = per_call_us(lambda: launch(kernel.kir, kernel.cubin, bound), calls, sync)
    return run_us, launch_us


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=500)
    args = p.parse_args(argv)
    common.require_gpu()
    import cupy as cp
    m, n, k = 256, 128, 64
    a = cp.random.random((k, m)).astype(cp.float16)
    b = cp.random.random((k, n)).astype(cp.float16)
    run_us, launch_us = run_and_launch_us(
        "seed_matmul", {"A": a, "B": b, "splitk": 1}, {"M": m, "N": n, "K": k, "splitk": 1},
        args.calls)
    print(f"seed kernel at {m}x{n}x{k}: exe.run() {run_us:.1f} us per call, "
          f"codegen.launch with bound arguments {launch_us:.1f} us per call "
          f"(target < 20 us)")
    rows = cols = 256
    x = cp.random.random((rows, cols)).astype(cp.float32)
    y = cp.random.random((rows, cols)).astype(cp.float32)
    run_us, launch_us = run_and_launch_us(
        "pointwise_chain", {"x": x, "y": y}, {"M": rows, "N": cols}, args.calls)
    print(f"pointwise_chain at {rows}x{cols}: exe.run() {run_us:.1f} us per call, "
          f"codegen.launch with bound arguments {launch_us:.1f} us per call "
          f"(target < 20 us)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
