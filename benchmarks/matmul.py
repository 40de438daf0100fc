"""Tensor-core matmul (the seed configuration) against cuBLAS, with correctness stress.

    python3 benchmarks/matmul.py [--shapes 1024x2048x4096,...] [--splitk 5] [--stages 3]
                                 [--warps 8] [--no-smem-epilogue] [--repeat 50]
                                 [--stress RUNS] [--determinism RUNS]
                                 [--drop-syncs sync2 --no-verify] [--once] [--json out.json]

Each shape is C[M, N] = A[K, M]^T B[K, N] (NT, f16 in, f32 accumulation, f16 out), the
fusion of examples/splitk_matmul.fz scheduled by fuserir.scheduler.schedule_matmul with
CTA tile (32 * warps, 128, 32), warp tile (64, 64, 32) and serial split-K. One compiled
kernel serves every shape (sizes and the split factor are kernel arguments).

* check: once per shape, fresh uniform(-1, 1) inputs, against a float64 reference on the
  GPU: |out - ref| <= atol + rtol |ref| with rtol = 2^-10, atol = 1e-5 K (DESIGN.md 7).
* --stress N: N runs with fresh random inputs each, counting mismatching elements/runs.
* --determinism N: N runs on fixed inputs, all bitwise equal to the first.
* timing: benchmarks/common.py's method (CUDA events, L2 flushed before each call,
  warm-up, median of --repeat) for fuserir and for cuBLAS through torch.matmul (f16,
  reduced-precision reduction off, so f32 accumulation) in the same process. fuserir is
  timed twice: the kernel (arguments bound once, codegen.launch per call; the ratio to
  cuBLAS uses this) and a whole exe.run() call (host binding included).
* --once: one launch at the first shape and exit (for compute-sanitizer on a small grid).
"""

import argparse
import datetime
import json
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import common  # noqa: E402
import fuserir  # noqa: E402
from fuserir.scheduler import MatmulParams, schedule_matmul  # noqa: E402

SEED_SHAPES = "1024x2048x4096"
DEFINITION = (ROOT / "examples" / "splitk_matmul.fz").read_text().split("schedule")[0]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=SEED_SHAPES, help="MxNxK,... (default: the seed's)")
    p.add_argument("--splitk", type=int, default=5)
    p.add_argument("--stages", type=int, default=3)
    p.add_argument("--warps", type=int, default=8, choices=(4, 8))
    p.add_argument("--no-smem-epilogue", action="store_true")
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--stress", type=int, default=0, help="runs with fresh random inputs")
    p.add_argument("--determinism", type=int, default=0, help="runs on fixed inputs")
    p.add_argument("--drop-syncs", default="", help="comma-separated sync ids to drop")
    p.add_argument("--no-verify", action="store_true", help="skip the static verifier")
    p.add_argument("--once", action="store_true", help="one launch, then exit")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    args.no_torch, args.copy_mib = False, 1024
    args.shape_list = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    return args


def build(args):
    params = MatmulParams(cta_tile=(32 * args.warps, 128, 32), warp_tile=(64, 64, 32),
                          stages=args.stages, splitk_factor=args.splitk,
                          use_smem_epilogue=not args.no_smem_epilogue,
                          promote_prologue_smem_reuse=not args.no_smem_epilogue)
    fusion = fuserir.parse(DEFINITION)
    schedule_matmul(fusion, params)
    return fusion, params


def mismatches(cp, out, a, b):
    """Elements outside rtol 2^-10, atol 1e-5 K of the float64 reference."""
    k = a.shape[0]
    ref = a.astype(cp.float64).T @ b.astype(cp.float64)
    bad = cp.abs(out.astype(cp.float64) - ref) > 1e-5 * k + 2.0 ** -10 * cp.abs(ref)
    return int(bad.sum())


def main(argv=None):
    args = parse_args(argv)
    common.require_gpu()
    import cupy as cp
    import codegen
    from codegen.launch import WorkspacePool, cupy_zeros, launch
    bench = common.Bench(args)
    torch = bench.torch
    if torch is not None:
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    fusion, params = build(args)
    drop = tuple(s for s in args.drop_syncs.split(",") if s)
    started = time.perf_counter()
    exe = codegen.compile(fusion, backend="cuda", drop_syncs=drop, verify=not args.no_verify)
    compile_s = time.perf_counter() - started
    rng = cp.random.default_rng(0)

    def inputs(m, n, k):
        a = rng.uniform(-1, 1, (k, m), dtype=cp.float32).astype(cp.float16)
        b = rng.uniform(-1, 1, (k, n), dtype=cp.float32).astype(cp.float16)
        return a, b

    def run(a, b):
        return exe.run({"A": a, "B": b, **params.scalars()})["out"]

    results = []
    for m, n, k in args.shape_list:
        a, b = inputs(m, n, k)
        out = run(a, b)
        r = {"shape": f"{m}x{n}x{k}", "splitk": args.splitk, "stages": args.stages,
             "warps": args.warps, "smem_epilogue": not args.no_smem_epilogue,
             "dropped": list(drop), "mismatches": mismatches(cp, out, a, b)}
        if args.once:
            cp.cuda.runtime.deviceSynchronize()
            print(json.dumps(r))
            return 0
        if args.stress:
            bad_runs = bad_elems = 0
            for _ in range(args.stress):
                a2, b2 = inputs(m, n, k)
                bad = mismatches(cp, run(a2, b2), a2, b2)
                bad_runs += bad > 0
                bad_elems += bad
            r["stress"] = {"runs": args.stress, "bad_runs": bad_runs, "bad_elements": bad_elems}
        if args.determinism:
            first = run(a, b).copy()
            r["determinism"] = {"runs": args.determinism, "differing_runs": sum(
                int(not bool(cp.array_equal(run(a, b), first)))
                for _ in range(args.determinism))}
        stats = bench.time(lambda: run(a, b))
        r["run_us"] = stats["median_us"]
        # The kernel alone: arguments bound once, then codegen.launch per call (run()'s
        # binding and checks are host work that can exceed the L2 flush it hides behind).
        kernel = exe.kernels[0]
        scalars = {"M": m, "N": n, "K": k, **params.scalars()}
        pool = WorkspacePool(cupy_zeros)
        bound = {"A": a, "B": b, "out": cp.empty((m, n), dtype=cp.float16), **scalars,
                 **pool.arrays(kernel.kir, scalars)}
        stats = bench.time(lambda: launch(kernel.kir, kernel.cubin, bound))
        r["fuserir_us"] = stats["median_us"]
        r["tflops"] = 2 * m * n * k / stats["median_us"] / 1e6
        if torch is not None:
            ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
            cublas = bench.time(lambda: torch.matmul(ta.t(), tb))
            r["cublas_us"] = cublas["median_us"]
            r["speedup_vs_cublas"] = cublas["median_us"] / stats["median_us"]
        results.append(r)
        print(json.dumps(r), flush=True)
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"\n## fuserir matmul, {device}, {datetime.date.today()}, compile {compile_s:.2f} s")
    print("| shape | splitk | stages | warps | smem epi | kernel us | run() us | cuBLAS us | "
          "fuserir/cuBLAS speed | TFLOP/s | mismatches |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['shape']} | {r['splitk']} | {r['stages']} | {r['warps']} | "
              f"{int(r['smem_epilogue'])} | {r['fuserir_us']:.1f} | {r['run_us']:.1f} | "
              f"{r.get('cublas_us', float('nan')):.1f} | "
              f"{r.get('speedup_vs_cublas', float('nan')):.2f}x | {r['tflops']:.1f} | "
              f"{r['mismatches']} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
