"""The compute-bound sweep: transformer layers' matmuls through the user's path, against
cuBLAS and the persistent Triton baseline.

    python3 benchmarks/matmul_sweep.py [--layouts TT,NT,TN] [--dtypes f16,bf16]
                                       [--shapes 4096x4096x4096,...] [--no-triton]
                                       [--repeat 50] [--json out.json] [--plot out.png]
    python3 benchmarks/matmul_sweep.py --plot out.png --from out.json   (no GPU needed)
    (also `python3 benchmarks/matmul.py --sweep [these options]`)

Points: SHAPES below (or --shapes), every layout and dtype asked. SHAPES are the layers
of transformer models at batch x sequence lengths of 256 to 16384 tokens (M): attention
projections, fused QKV, MLP up and down projections of hidden sizes 768 to 8192, K small
beside M and N among them (8192x3072x768, 16384x4096x1024), and the square and
vocabulary-sized shapes the Hopper path is judged on. As benchmarks/splitk_sweep.py
does, per layout and dtype one unscheduled fusion (`out = cast(matmul(A, B), dtype)`) is
compiled once, its size classes compiled ahead in worker processes; each point calls it
with torch tensors (the heuristic's plan for its size class, no tuning database), checked
once against the float64 product and timed with benchmarks/common.py's method (CUDA events
around the whole call, L2 flushed before each, median of --repeat); cuBLAS is
torch.matmul on the same tensors in the same process, and beside it, unless --no-triton
or without Triton, benchmarks/triton_persistent.py's persistent TMA kernel, autotuned per
point (its first call, before the timing), on the same tensors.

Prints a JSON line per point, then a Markdown table (times, TFLOP/s, ratios, the plan)
and the summary: the slowest point and the geometric mean of cuBLAS time / fuserir time,
and of Triton time / fuserir time. --plot draws cuBLAS time / fuserir time per point
(matplotlib, optional).
"""

import argparse
import datetime
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import common, splitk_sweep  # noqa: E402

SHAPES = (
    # square, and the shapes the Hopper path is judged on
    "3072x3072x3072", "4096x4096x4096", "6144x6144x6144", "8192x8192x8192",
    "1024x1024x4096", "1024x2048x4096", "1024x1024x50304", "1024x2048x50304",
    # hidden 4096 (QKV fused, MLP up to 14336 and 11008, down), 256 to 16384 tokens
    "256x12288x4096", "2048x12288x4096", "4096x14336x4096", "4096x4096x14336",
    "1024x11008x4096", "16384x4096x4096", "512x8192x8192",
    # hidden 768 (QKV, projection, MLP up and down) and 2048, 5120
    "8192x2304x768", "8192x768x768", "8192x3072x768", "8192x768x3072",
    "8192x2048x2048", "2048x16384x2048", "4096x15360x5120", "4096x5120x13824",
    # K small beside M and N, and K long beside them
    "16384x4096x1024", "16384x1024x4096", "512x2048x16384")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layouts", default="TT,NT,TN")
    p.add_argument("--dtypes", default="f16,bf16")
    p.add_argument("--shapes", help="only these MxNxK points (comma-separated)")
    p.add_argument("--no-triton", action="store_true", help="leave out the Triton baseline")
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", help="write the points here")
    p.add_argument("--plot", help="draw cuBLAS time / fuserir time per point (PNG)")
    p.add_argument("--from", dest="source", help="with --plot: the points of an earlier "
                                                 "--json, no GPU run")
    args = p.parse_args(argv)
    args.no_torch, args.copy_mib = False, 1024
    if args.source and not args.plot:
        p.error("--from needs --plot")
    splitk_sweep.check_points(p, args)
    if args.shape_list is None:
        args.shape_list = [tuple(int(d) for d in s.split("x")) for s in SHAPES]
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    return args


def tflops(point):
    m, n, k = (int(x) for x in point["shape"].split("x"))
    return 2 * m * n * k / point["fuserir_us"] / 1e6


def table(points, device):
    nan = float("nan")
    lines = [f"## matmul sweep, {device}, {datetime.date.today()}",
             "| layout | dtype | shape | plan | fuserir us | TFLOP/s | cuBLAS us | Triton us "
             "| cuBLAS/fuserir | Triton/fuserir | mismatches |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        triton = p.get("triton_us", nan)
        versus = f"{triton / p['fuserir_us']:.2f}x" if "triton_us" in p else "-"
        lines.append(f"| {p['layout']} | {p['dtype']} | {p['shape']} | {p['plan']} | "
                     f"{p['fuserir_us']:.1f} | {tflops(p):.0f} | {p['cublas_us']:.1f} | "
                     f"{triton:.1f} | {p['cublas_us'] / p['fuserir_us']:.2f}x | "
                     f"{versus} | {p['mismatches']}"
                     + (f", Triton {p['mismatches_triton']}" if "triton_us" in p else "")
                     + " |")
    low, mean = splitk_sweep.summary(points)
    lines.append(f"\nslowest point {low:.2f}x cuBLAS, geometric mean {mean:.2f}x over "
                 f"{len(points)} points")
    against = [p for p in points if "triton_us" in p]
    if against:
        low, mean = splitk_sweep.summary([{"cublas_us": p["triton_us"],
                                           "fuserir_us": p["fuserir_us"]} for p in against])
        lines.append(f"against Triton: slowest {low:.2f}x, geometric mean {mean:.2f}x over "
                     f"{len(against)} points")
    return "\n".join(lines)


def triton_baseline(args):
    """A function timing the persistent Triton kernel on a point, or None without Triton
    or with --no-triton."""
    triton_persistent = common.triton_module("triton_persistent", args.no_triton)
    if triton_persistent is None:
        return None

    def measure(ta, tb, ref, dtype, sms, bench):
        torch = bench.torch
        out_dtype = torch.float16 if dtype == "f16" else torch.bfloat16
        try:
            fn, _ = triton_persistent.matmul_fn(ta, tb, out_dtype, sms)
            out = fn()                                     # autotunes on the first call
        except Exception as failed:  # noqa: BLE001 - report it, go on without
            print(f"Triton baseline failed at {tuple(ta.shape)}x{tb.shape[1]}: {failed}",
                  file=sys.stderr)
            return {}
        k = ta.shape[1]
        bad = (out.double() - ref).abs() > 1e-5 * k + splitk_sweep.RTOL[dtype] * ref.abs()
        return {"triton_us": bench.time(fn)["median_us"], "mismatches_triton": int(bad.sum()),
                "triton_config": triton_persistent.tuned_text()}
    return measure


def run(args, bench):
    points = splitk_sweep.sweep(args, bench, triton_baseline(args))
    print(table(points, points[0]["device"] if points else "no points"))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(points, indent=1))
    if args.plot:
        splitk_sweep.plot(points, args.plot, "matmul sweep", 0.9)
    return 1 if any(p["mismatches"] or p.get("mismatches_triton") for p in points) else 0


def main(argv=None):
    args = parse_args(argv)
    return splitk_sweep.start(args, table, lambda points: splitk_sweep.plot(
        points, args.plot, "matmul sweep", 0.9), run)


if __name__ == "__main__":
    sys.exit(main())
