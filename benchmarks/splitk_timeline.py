"""Where a parallel split-K kernel's time goes: a timeline of its phases per CTA.

    python3 benchmarks/splitk_timeline.py K [--mn MxN] [--layout TT|TN|NT|NN]
                                            [benchmarks/matmul.py options]
        e.g. 8448 --splitk 66 --cta-tile 128x64x64
             175704 --mn 136x184 --splitk 66 --cta-tile 128x192x64 --warp-tile 64x192x64
                    --stages 5 --producer-registers 40
             175704 --mn 136x184 --layout TN --splitk 66 --cta-tile 128x192x64
                    --warp-tile 64x192x64 --stages 4 --producer-registers 40

The kernel is the Hopper path's matmul (benchmarks/matmul.py's layout fusion, NT unless
--layout) with a parallel split-K (benchmarks/matmul.py's --hopper --no-smem-epilogue
--splitk-mode parallel --splitk-interleaved, 6 stages unless given) at M x N (--mn,
default 128x128). Its generated CUDA gets a read of %globaltimer by thread 0 of each CTA
(of every tile) at five points (instrument()): the kernel's start, the end of the main
loop (the grid reduction's first statement), past the wait for every split's partials,
its own elements summed over the splits (the epilogue's start), and its own elements
stored (the epilogue's end). Those are the points of the stored-where-summed sum; a plan
whose accumulator does not stay live through the sum (gathered by the last CTA) is
NotInstrumentable. The instrumented source is compiled by NVRTC and launched with the
plan's arguments after an L2 flush, several times; the last launch's times are printed
per phase as the median and the largest over CTAs of (time - the earliest CTA's start),
in microseconds, with the output checked against the float64 product. The reads cost a
few tens of nanoseconds each: this is for where the time goes, not for how much there
is (benchmarks/matmul.py).
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

PHASES = ("start", "main loop done", "all partials in", "own elements summed",
          "own elements stored")
SLOTS = 8                  # timer slots per CTA in the device array
MAX_CTAS = 1024


class NotInstrumentable(Exception):
    pass


def _stamp(slot):
    return ("if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) { "
            "unsigned long long t_; asm volatile(\"mov.u64 %0, %%globaltimer;\" : "
            "\"=l\"(t_)); fz_timeline[(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * "
            f"blockIdx.z)) * {SLOTS} + {slot}] = t_; }}")


def instrument(source):
    """The parallel split-K kernel's CUDA `source` with a %globaltimer read at each of
    PHASES into the device array fz_timeline[block * SLOTS + phase] (block: the CTA's
    linear index in the grid). NotInstrumentable names a point not found."""
    lines = source.split("\n")

    def find(what, pattern, start=0, stop=None):
        for i in range(start, len(lines) if stop is None else stop):
            if re.search(pattern, lines[i]):
                return i
        raise NotInstrumentable(f"no {what} ({pattern!r}) in the kernel's source")

    def indent(i):
        return len(lines[i]) - len(lines[i].lstrip())

    def closing(i):             # the line that closes the block opened on line i
        depth = 0
        for j in range(i, len(lines)):
            depth += lines[j].count("{") - lines[j].count("}")
            if depth == 0:
                return j
        raise NotInstrumentable(f"line {i + 1} opens a block that does not close")

    reduction = find("parallel grid reduction", r"parallel grid reduction of .* storing")
    arrived = find("bar.sync after the wait for every partial", r"bar\.sync",
                   find("wait for every partial", r"sem_wait\(&\w+_arrived", reduction))
    protocol = find("the reduction's condition", r"^\s*if \(", reduction)
    summed = closing(protocol) + 1
    reset = find("the last CTA's wait", r"sem_wait\(&\w+_passed", summed)
    stored = max(i for i in range(summed, reset) if indent(i) == indent(protocol)
                 and lines[i].lstrip().startswith("if ("))
    inserts = [(find("the kernel's shared pool", r"extern __shared__"), 0),
               (reduction, 1), (arrived + 1, 2), (summed, 3), (stored, 4)]
    for at, slot in sorted(inserts, reverse=True):
        lines.insert(at, _stamp(slot))
    text = "\n".join(lines)
    kernel = text.index('extern "C" __global__')
    return (text[:kernel] + f"__device__ unsigned long long fz_timeline[{SLOTS * MAX_CTAS}];\n"
            + text[kernel:])


def parse_args(argv):
    """(K, (M, N), benchmarks/matmul.py's arguments, with .layout) from the command
    line."""
    if not argv or not argv[0].isdigit():
        raise SystemExit(__doc__)
    rest, mn, layout = list(argv[1:]), (128, 128), "NT"
    if "--layout" in rest:
        at = rest.index("--layout")
        layout = rest[at + 1].upper() if at + 1 < len(rest) else ""
        if layout not in bench_matmul.OPERANDS:
            raise SystemExit("--layout takes TT, TN, NT or NN")
        del rest[at:at + 2]
    if "--mn" in rest:
        at = rest.index("--mn")
        try:
            mn = tuple(int(x) for x in rest[at + 1].split("x"))
        except (IndexError, ValueError):
            mn = ()
        if len(mn) != 2 or min(mn) < 1:
            raise SystemExit("--mn takes MxN, two positive sizes (e.g. 136x184)")
        del rest[at:at + 2]
    extra = ["--hopper", "--no-smem-epilogue", "--splitk-mode", "parallel",
             "--splitk-interleaved"] + ([] if "--stages" in rest else ["--stages", "6"])
    args = bench_matmul.parse_args(extra + rest)
    args.layout = layout
    return int(argv[0]), mn, args


def main(argv=None):
    import numpy as np
    from benchmarks import common
    k_size, (m, n), args = parse_args(sys.argv[1:] if argv is None else argv)
    common.require_gpu()
    import cupy as cp
    import codegen
    from codegen import launch as launching, nvrtc
    from driver.build import kernel_arch
    from fuserir.scheduler.matmul import schedule_matmul
    params = bench_matmul.params_of(args)
    fusion = bench_matmul.layout_fusion(args.layout)
    schedule_matmul(fusion, params)
    compiled = codegen.compile(fusion, backend="cuda").kernels[0]
    kernel = compiled.kir
    cubin = nvrtc.compile_to_cubin(instrument(compiled.source), kernel.name,
                                   kernel_arch(kernel, nvrtc.default_arch()))
    a, b = bench_matmul.layout_inputs(cp, cp.random.default_rng(0), args.layout, m, n,
                                      k_size)
    scalars = {"M": m, "N": n, "K": k_size, "splitk": args.splitk}
    out = cp.full((m, n), cp.nan, dtype=cp.float16)
    bound = {"A": a, "B": b, "out": out, **scalars,
             **launching.new_workspaces(kernel, scalars)}
    tm, tn, _ = params.cta_tile
    rows, columns = (n, m) if params.swap_mn else (m, n)    # the tiles' rows: M or N
    ctas = -(-rows // tm) * -(-columns // tn) * args.splitk
    if ctas > MAX_CTAS:
        raise SystemExit(f"{ctas} CTAs; at most {MAX_CTAS}")
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
    times = host[:ctas * SLOTS].reshape(ctas, SLOTS).astype(np.int64)
    origin = times[:, 0].min()
    print(f"{args.layout} {m}x{n}x{k_size} splits={args.splitk} ({ctas} CTAs) CTA tile "
          f"{params.cta_tile}{' (rows along N: swap_mn)' if params.swap_mn else ''}, "
          f"stages {params.stages}: us from the first CTA's start, median / largest over "
          "CTAs")
    for slot, name in enumerate(PHASES):
        column = times[:, slot]
        column = (column[column > 0] - origin) / 1000
        print(f"  {name:22s} {np.median(column):8.2f} / {column.max():8.2f}")
    ref = bench_matmul.layout_reference(cp, args.layout, a, b)
    print("  mismatches:", bench_matmul.mismatches(cp, out, ref, k_size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
