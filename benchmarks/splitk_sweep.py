"""Split-K's sweep: skinny and decode-sized matmuls through the user's path, against cuBLAS.

    python3 benchmarks/splitk_sweep.py [--layouts TT,NT,TN,NN] [--dtypes f16,bf16]
                                       [--mn 16,32,64,128,256] [--k 16384,65536,262144]
                                       [--no-decode] [--shapes 128x128x262144,...]
                                       [--no-triton] [--repeat 50] [--json out.json]
                                       [--plot out.png] [--no-cluster-split]
    python3 benchmarks/splitk_sweep.py --plot out.png --from out.json   (no GPU needed)

Points: every M and N of --mn with every K of --k (the memory-bound shapes split-K
serves), and, unless --no-decode, the decode shapes M in {1, 8, 16, 32, 64} x (N, K) in
{(4096, 4096), (8192, 4096), (4096, 14336), (14336, 4096)}; or only the --shapes given;
each for every layout and dtype asked. Per layout and dtype one unscheduled fusion (`out = cast(matmul(A, B), dtype)`)
is compiled once; each point calls it with torch tensors, so it runs the heuristic's plan
for its size class (scheduled and compiled on the first call of the class, before the
timing). Each point is checked once against the float64 product (|out - ref| <= 1e-5 K +
rtol |ref|, rtol 2^-10 for f16, 2^-7 for bf16) and timed with benchmarks/common.py's
method (CUDA events around the whole call, L2 flushed before each, median of --repeat):
the time is all GPU work of the call, every kernel and memset of the plan, and cuBLAS is
torch.matmul on the same tensors in the same process. Beside them, unless --no-triton or
without Triton: the split-K baseline of benchmarks/triton_splitk.py on the same tensors,
its atomic and its deterministic (partials) reduction each autotuned, the faster
reported; and the fraction of the copy bandwidth (a cudaMemcpyAsync timed in the same
process) the fuserir call reaches, counting each operand and the output once.

--no-cluster-split: the device model's cluster_split off, so that the heuristic's
deterministic split-K sums through the arrival counters everywhere, also where it would
sum through a thread-block cluster's shared memory (splitk_mode "cluster": at most 16
splits on at most 4 tiles of 64 rows).

Prints a JSON line per point, then a Markdown table and the summary: the slowest point's
and the geometric mean of cuBLAS time / fuserir time. --plot draws that ratio per point
(matplotlib, an optional dependency; without it the plot is skipped with a message).
"""

import argparse
import datetime
import json
import math
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import common  # noqa: E402
import fuserir  # noqa: E402

OPERANDS = {"TT": ("[M, K]", "[K, N]"), "TN": ("[M, K]", "[N, K]"),
            "NT": ("[K, M]", "[K, N]"), "NN": ("[K, M]", "[N, K]")}
DECODE_M = (1, 8, 16, 32, 64)
DECODE_NK = ((4096, 4096), (8192, 4096), (4096, 14336), (14336, 4096))
RTOL = {"f16": 2.0 ** -10, "bf16": 2.0 ** -7}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layouts", default="TT,NT,TN,NN")
    p.add_argument("--dtypes", default="f16,bf16")
    p.add_argument("--mn", default="16,32,64,128,256", help="M and N values (every pair)")
    p.add_argument("--k", default="16384,65536,262144", help="K values")
    p.add_argument("--no-decode", action="store_true", help="leave out the decode shapes")
    p.add_argument("--shapes", help="only these MxNxK points (comma-separated)")
    p.add_argument("--no-triton", action="store_true", help="leave out the Triton baseline")
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", help="write the points here")
    p.add_argument("--no-cluster-split", action="store_true",
                   help="split-K through the arrival counters, never a cluster's shared "
                        "memory")
    p.add_argument("--plot", help="draw cuBLAS time / fuserir time per point (PNG)")
    p.add_argument("--from", dest="source", help="with --plot: the points of an earlier "
                                                 "--json, no GPU run")
    args = p.parse_args(argv)
    args.no_torch, args.copy_mib = False, 1024
    check_points(p, args)
    try:
        args.mn_list = [int(x) for x in args.mn.split(",")]
        args.k_list = [int(x) for x in args.k.split(",")]
    except ValueError:
        p.error("--mn and --k take comma-separated integers")
    if args.source and not args.plot:
        p.error("--from needs --plot")
    return args


def check_points(p, args):
    """args.layout_list, dtype_list and shape_list (None without --shapes) from --layouts,
    --dtypes and --shapes, or p.error naming what is wrong (this script's and
    benchmarks/splitk_stress.py's)."""
    args.layout_list = [x.strip().upper() for x in args.layouts.split(",")]
    for layout in args.layout_list:
        if layout not in OPERANDS:
            p.error(f"--layouts: unknown layout {layout!r} (TT, TN, NT, NN)")
    args.dtype_list = [x.strip() for x in args.dtypes.split(",")]
    for dtype in args.dtype_list:
        if dtype not in RTOL:
            p.error(f"--dtypes: {dtype!r} is not f16 or bf16")
    try:
        args.shape_list = [tuple(int(d) for d in x.lower().split("x"))
                           for x in args.shapes.split(",")] if args.shapes else None
    except ValueError:
        p.error("--shapes takes MxNxK points, comma-separated")
    if args.shape_list and any(len(x) != 3 or min(x) < 1 for x in args.shape_list):
        p.error("--shapes: each point is MxNxK, three positive integers")


def shapes(args):
    """The sweep's (M, N, K) points, skinny ones first, then the decode ones."""
    if args.shape_list:
        return list(args.shape_list)
    out = [(m, n, k) for m in args.mn_list for n in args.mn_list for k in args.k_list]
    if not args.no_decode:
        out += [(m, n, k) for m in DECODE_M for n, k in DECODE_NK]
    return out


def fusion(layout, dtype):
    a, b = OPERANDS[layout]
    return fuserir.parse(f"""
fusion mm_{layout}_{dtype}(A: {dtype}{a}, B: {dtype}{b}) {{
  acc = matmul(A, B, layout={layout})
  out = cast(acc, {dtype})
  output out
}}""")


def operands(torch, layout, dtype, m, n, k, gen):
    """uniform(-1, 1) operands in the layout's storage, and views of them as [M, K] and
    [K, N] for torch.matmul (no copies)."""
    dims = {"M": m, "N": n, "K": k}
    tdtype = torch.float16 if dtype == "f16" else torch.bfloat16
    a, b = (torch.rand([dims[d] for d in spec.strip("[]").split(", ")], device="cuda",
                       generator=gen, dtype=torch.float32).mul_(2).sub_(1).to(tdtype)
            for spec in OPERANDS[layout])
    return a, b, (a if layout[0] == "T" else a.t()), (b if layout[1] == "T" else b.t())


def summary(points):
    """(slowest point's ratio, geometric mean ratio), ratio = cuBLAS time / fuserir time."""
    ratios = [p["cublas_us"] / p["fuserir_us"] for p in points]
    return min(ratios), math.exp(sum(map(math.log, ratios)) / len(ratios))


def plot(points, path, title="split-K sweep", floor=0.95):
    """cuBLAS time / fuserir time per point, a panel per dtype, one mark per layout, a
    line at 1 and a dashed one at `floor` (the target)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        print("no plot: matplotlib is not installed (pip install matplotlib)",
              file=sys.stderr)
        return False
    dtypes = sorted({p["dtype"] for p in points})
    fig, axes = pyplot.subplots(len(dtypes), 1, figsize=(14, 4 * len(dtypes)), squeeze=False)
    for ax, dtype in zip(axes[:, 0], dtypes):
        mine = [p for p in points if p["dtype"] == dtype]
        labels = sorted({p["shape"] for p in mine}, key=lambda s: [int(x) for x in s.split("x")])
        for layout in sorted({p["layout"] for p in mine}):
            xs, ys = [], []
            for p in mine:
                if p["layout"] == layout:
                    xs.append(labels.index(p["shape"]))
                    ys.append(p["cublas_us"] / p["fuserir_us"])
            ax.scatter(xs, ys, s=12, label=layout)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(floor, color="red", linewidth=0.8, linestyle="--")
        ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=6)
        ax.set_ylabel("cuBLAS time / fuserir time")
        ax.set_title(f"{title}, {dtype}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def table(points, device):
    lines = [f"## split-K sweep, {device}, {datetime.date.today()}",
             "| layout | dtype | shape | plan | fuserir us | cuBLAS us | Triton us | "
             "cuBLAS/fuserir | Triton/fuserir | % of copy | mismatches |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        triton = p.get("triton_us")
        lines.append(f"| {p['layout']} | {p['dtype']} | {p['shape']} | {p['plan']} | "
                     f"{p['fuserir_us']:.1f} | {p['cublas_us']:.1f} | "
                     + (f"{triton:.1f} ({p['triton_kind']}) | " if triton else "- | ")
                     + f"{p['cublas_us'] / p['fuserir_us']:.2f}x | "
                     + (f"{triton / p['fuserir_us']:.2f}x | " if triton else "- | ")
                     + f"{100 * p.get('copy_fraction', float('nan')):.0f} | "
                     f"{p['mismatches']}" + (f", Triton {p['mismatches_triton']}"
                                              if triton else "") + " |")
    low, mean = summary(points)
    lines.append(f"\nslowest point {low:.2f}x cuBLAS, geometric mean {mean:.2f}x over "
                 f"{len(points)} points")
    return "\n".join(lines)


def _compile_class(job):
    """(In a worker process.) Schedule and compile one size class's kernel as the first
    call of that class will: NVRTC's disk cache keeps the cubin for the call."""
    import codegen
    from fuserir.scheduler.auto import schedule_auto
    layout, dtype, (m, n, k), device = job
    f = fusion(layout, dtype)
    schedule_auto(f, sizes={"M": m, "N": n, "K": k}, device=device)
    codegen.compile(f, backend="cuda")
    return job[:3]


def compile_ahead(args, device):
    """Every size class of the sweep compiled in parallel worker processes, one per
    distinct schedule (schedule_key), before the first timed call; the count."""
    import concurrent.futures
    from fuserir.scheduler.auto import schedule_key
    jobs, seen = [], set()
    for dtype in args.dtype_list:
        for layout in args.layout_list:
            f = fusion(layout, dtype)
            for m, n, k in shapes(args):
                key = (layout, dtype, schedule_key(f, {"M": m, "N": n, "K": k}, device)[0])
                if key not in seen:
                    seen.add(key)
                    jobs.append((layout, dtype, (m, n, k), device))
    with concurrent.futures.ProcessPoolExecutor() as pool:
        list(pool.map(_compile_class, jobs))
    return len(jobs)


def triton_baseline(args):
    """A function timing the Triton split-K baseline on a point (its atomic and its
    partials reduction, the faster kept), or None without Triton or with --no-triton."""
    triton_splitk = common.triton_module("triton_splitk", args.no_triton)
    if triton_splitk is None:
        return None

    def measure(ta, tb, ref, dtype, sms, bench):
        torch, best = bench.torch, {}
        out_dtype = torch.float16 if dtype == "f16" else torch.bfloat16
        k = ta.shape[1]
        for kind in ("partials", "atomic"):
            fn, _ = triton_splitk.matmul_fn(ta, tb, out_dtype, sms, atomic=kind == "atomic")
            out = fn()                                     # autotunes on the first call
            bad = (out.double() - ref).abs() > 1e-5 * k + RTOL[dtype] * ref.abs()
            us = bench.time(fn)["median_us"]
            if not best or us < best["triton_us"]:
                best = {"triton_us": us, "triton_kind": kind,
                        "mismatches_triton": int(bad.sum())}
        return best
    return measure


def sweep(args, bench, baseline, device=None, copy_gbps=None):
    """The points of shapes(args), every layout and dtype of args, through the user's
    path: each checked once against the float64 product and timed with cuBLAS (and
    `baseline`, a function of (ta, tb, ref, dtype, sms, bench) giving more fields, where
    not None) beside it; with copy_gbps, the fraction of that copy rate each reaches.
    Every size class compiled ahead first. Prints a JSON line per point."""
    import time
    import codegen
    from codegen.launch import device_model
    from fuserir.scheduler.matmul_heuristic import matmul_heuristic
    torch = bench.torch
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    device = device or device_model()
    started = time.perf_counter()
    classes = compile_ahead(args, device)
    print(f"{classes} size classes compiled ahead in {time.perf_counter() - started:.0f} s",
          flush=True)
    points = []
    for dtype in args.dtype_list:
        for layout in args.layout_list:
            exe = codegen.compile(fusion(layout, dtype), backend="cuda", device=device)
            for m, n, k in shapes(args):
                a, b, ta, tb = operands(torch, layout, dtype, m, n, k, gen)
                out = exe.run({"A": a, "B": b})["out"]          # plans the size class
                ref = ta.double() @ tb.double()
                bad = (out.double() - ref).abs() > 1e-5 * k + RTOL[dtype] * ref.abs()
                params = matmul_heuristic(m, n, k, layout=layout, dtypes=(dtype, dtype),
                                          device=device)
                p = {"layout": layout, "dtype": dtype, "shape": f"{m}x{n}x{k}",
                     "device": device.describe(),
                     "plan": f"{'hopper' if params.hopper else 'mma.sync'} "
                             f"{'x'.join(map(str, params.cta_tile))} "
                             f"{params.splitk_factor} {params.splitk_mode}",
                     "mismatches": int(bad.sum()),
                     "fuserir_us": bench.time(lambda: exe.run({"A": a, "B": b}))["median_us"],
                     "cublas_us": bench.time(lambda: torch.matmul(ta, tb))["median_us"]}
                if copy_gbps:
                    p["copy_fraction"] = common.gb_per_s(2 * (m * k + k * n + m * n),
                                                         p["fuserir_us"]) / copy_gbps
                if baseline:
                    p.update(baseline(ta, tb, ref, dtype, device.sms, bench))
                points.append(p)
                print(json.dumps(p), flush=True)
    return points


def run(args, bench):
    from codegen.launch import device_model
    device = device_model().with_(cluster_split=not args.no_cluster_split)
    copy = bench.copy_bandwidth()
    print(f"copy bandwidth: {copy['gbps']:.0f} GB/s", flush=True)
    points = sweep(args, bench, triton_baseline(args), device, copy["gbps"])
    print(table(points, device.describe()))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(points, indent=1))
    if args.plot:
        plot(points, args.plot)
    return 1 if any(p["mismatches"] or p.get("mismatches_triton") for p in points) else 0


def start(args, table, draw, run):
    """A sweep's main (this script's and benchmarks/matmul_sweep.py's): with --from, the
    table of the points of an earlier --json and their plot (draw(points), False where
    it could not be drawn); else run(args, bench) on the GPU, torch needed."""
    if args.source:
        points = json.loads(pathlib.Path(args.source).read_text())
        print(table(points, "(from " + args.source + ")"))
        return 0 if draw(points) else 1
    common.require_gpu()
    bench = common.Bench(args)
    if bench.torch is None:
        print("the sweep needs torch (its tensors in, cuBLAS beside)", file=sys.stderr)
        return 1
    return run(args, bench)


def main(argv=None):
    args = parse_args(argv)
    return start(args, table, lambda points: plot(points, args.plot), run)


if __name__ == "__main__":
    sys.exit(main())
