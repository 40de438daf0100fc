"""Where a parallel split-K kernel's time goes: a timeline of its phases per CTA.

    python3 benchmarks/splitk_timeline.py K [benchmarks/matmul.py options]
        e.g. 8448 --splitk 66 --cta-tile 128x64x64

The kernel is the Hopper path's NT matmul with a parallel split-K (benchmarks/matmul.py's
--hopper --no-smem-epilogue --splitk-mode parallel --splitk-interleaved, 6 stages unless
given) at M = N = 128. Its generated CUDA gets a read of %globaltimer by thread 0 of each
CTA at six points (instrument()): the kernel's start, the end of the main loop (the grid
reduction's first statement), past the wait for every split's partials, the slice summed,
and, in the tile's last CTA, past the wait for every slice and at the epilogue's start.
The instrumented source is compiled by NVRTC and launched with the plan's arguments after
an L2 flush, several times; the last launch's times are printed per phase as the median
and the largest over CTAs of (time - the earliest CTA's start), in microseconds, with
the output checked against the float64 product. The reads cost a few tens of nanoseconds
each: this is for where the time goes, not for how much there is (benchmarks/matmul.py).
"""

import hashlib
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import matmul as bench_matmul  # noqa: E402

PHASES = ("start", "main loop done", "all partials in", "slice summed",
          "last CTA: slices in", "last CTA: epilogue")
SLOTS = 8                  # timer slots per CTA in the device array
MAX_CTAS = 1024


class NotInstrumentable(Exception):
    pass


def _stamp(slot):
    return ("if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) { "
            "unsigned long long t_; asm volatile(\"mov.u64 %0, %%globaltimer;\" : "
            f"\"=l\"(t_)); fz_timeline[blockIdx.z * {SLOTS} + {slot}] = t_; }}")


def instrument(source):
    """The parallel split-K kernel's CUDA `source` with a %globaltimer read at each of
    PHASES into the device array fz_timeline[blockIdx.z * SLOTS + phase] (one tile's
    CTAs: launch with M, N within one tile). NotInstrumentable names a point not found."""
    lines = source.split("\n")

    def find(what, pattern, start=0):
        for i in range(start, len(lines)):
            if re.search(pattern, lines[i]):
                return i
        raise NotInstrumentable(f"no {what} ({pattern!r}) in the kernel's source")

    reduction = find("parallel grid reduction", r"parallel grid reduction of ")
    arrived = find("bar.sync after the wait for every partial", r"bar\.sync",
                   find("wait for every partial", r"sem_wait\(&\w+_arrived", reduction))
    summed = find("fence after the slice sums", r"__threadfence\(\);",
                  find("first fence", r"__threadfence\(\);", reduction) + 1)
    slices = find("bar.sync after the wait for every slice", r"bar\.sync",
                  find("wait for every slice", r"sem_wait\(&\w+_done", summed))
    epilogue = find("the epilogue's first loop", r"^\s*(#pragma unroll|for \()",
                    find("the last reset", r"sem_release\(&\w+_done", slices) + 2)
    inserts = [(find("the kernel's shared pool", r"extern __shared__"), 0),
               (reduction, 1), (arrived + 1, 2), (summed, 3), (slices + 1, 4),
               (epilogue, 5)]
    for at, slot in sorted(inserts, reverse=True):
        lines.insert(at, _stamp(slot))
    text = "\n".join(lines)
    kernel = text.index('extern "C" __global__')
    return (text[:kernel] + f"__device__ unsigned long long fz_timeline[{SLOTS * MAX_CTAS}];\n"
            + text[kernel:])


def parse_args(argv):
    if not argv or not argv[0].isdigit():
        raise SystemExit(__doc__)
    given = set(argv[1:])
    extra = ["--hopper", "--no-smem-epilogue", "--splitk-mode", "parallel",
             "--splitk-interleaved"] + ([] if "--stages" in given else ["--stages", "6"])
    return int(argv[0]), bench_matmul.parse_args(extra + argv[1:])


def main(argv=None):
    import numpy as np
    from benchmarks import common
    k_size, args = parse_args(sys.argv[1:] if argv is None else argv)
    common.require_gpu()
    import cupy as cp
    import codegen
    from codegen import launch as launching, nvrtc
    from driver.build import kernel_arch
    fusion, params = bench_matmul.build(args)
    compiled = codegen.compile(fusion, backend="cuda").kernels[0]
    kernel = compiled.kir
    cubin = nvrtc.compile_to_cubin(instrument(compiled.source), kernel.name,
                                   kernel_arch(kernel, nvrtc.default_arch()))
    m = n = 128
    rng = cp.random.default_rng(0)
    a = rng.uniform(-1, 1, (k_size, m), dtype=cp.float32).astype(cp.float16)
    b = rng.uniform(-1, 1, (k_size, n), dtype=cp.float32).astype(cp.float16)
    scalars = {"M": m, "N": n, "K": k_size, "splitk": args.splitk}
    out = cp.full((m, n), cp.nan, dtype=cp.float16)
    bound = {"A": a, "B": b, "out": out, **scalars,
             **launching.new_workspaces(kernel, scalars)}
    splits = args.splitk
    if splits > MAX_CTAS:
        raise SystemExit(f"at most {MAX_CTAS} splits")
    flush = cp.empty(256 << 18, dtype=cp.float32)
    host = np.zeros(SLOTS * MAX_CTAS, dtype=np.uint64)
    for _ in range(12):
        flush.fill(0)
        launching.launch(kernel, cubin, bound)
    cp.cuda.runtime.deviceSynchronize()
    module = launching._modules[(launching.current_device(),
                                 hashlib.sha256(cubin).hexdigest())]
    cp.cuda.runtime.memcpy(host.ctypes.data, module.get_global_var("fz_timeline"),
                           host.nbytes, cp.cuda.runtime.memcpyDeviceToHost)
    times = host[:splits * SLOTS].reshape(splits, SLOTS).astype(np.int64)
    origin = times[:, 0].min()
    print(f"K={k_size} splits={splits} CTA tile {params.cta_tile}, stages {params.stages}: "
          "us from the first CTA's start, median / largest over CTAs")
    for slot, name in enumerate(PHASES):
        column = times[:, slot] if slot < 4 else times[-1:, slot]
        column = (column[column > 0] - origin) / 1000
        print(f"  {name:22s} {np.median(column):8.2f} / {column.max():8.2f}")
    ref = bench_matmul.nt_reference(cp, a, b)
    print("  mismatches:", bench_matmul.mismatches(cp, out, ref, k_size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
