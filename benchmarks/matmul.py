"""Tensor-core matmul (the seed configuration) against cuBLAS, with correctness stress.

    python3 benchmarks/matmul.py [--shapes 1024x2048x4096,...] [--splitk 5] [--stages 3]
                                 [--warps 8] [--cta-tile 256x128x32] [--warp-tile 64x64x32]
                                 [--no-smem-epilogue] [--repeat 50]
                                 [--stress RUNS] [--determinism RUNS]
                                 [--drop-syncs sync2 --no-verify] [--once] [--json out.json]
    python3 benchmarks/matmul.py --sweep [--layouts TT,NT,TN] [--dtypes f16,bf16] [...]

Each shape is C[M, N] = A[K, M]^T B[K, N] (NT, f16 in, f32 accumulation, f16 out), the
fusion of examples/splitk_matmul.fz scheduled by fuserir.scheduler.schedule_matmul with
CTA tile (32 * warps, 128, 32) (or --cta-tile), warp tile (64, 64, 32) (or --warp-tile)
and serial split-K (or --splitk-mode parallel, atomic, two_kernel or, with --hopper,
cluster; --splitk-interleaved:
each split every splitk-th K tile). One compiled
kernel serves every shape (sizes and the split factor are kernel arguments).

* check: once per shape, fresh uniform(-1, 1) inputs, against a float64 reference on the
  GPU: |out - ref| <= atol + rtol |ref| with rtol = 2^-10, atol = 1e-5 K (docs/perf.md).
* --stress N: N runs with fresh random inputs each, counting mismatching elements/runs.
* --determinism N: N runs on fixed inputs, all bitwise equal to the first.
* % of copy: the ideal traffic (A and B read once, the output written once) over the
  kernel time, against cudaMemcpyAsync's device-to-device rate measured in the process.
* timing: benchmarks/common.py's method (CUDA events, L2 flushed before each call,
  warm-up, median of --repeat) for fuserir and for cuBLAS through torch.matmul (f16,
  reduced-precision reduction off, so f32 accumulation) in the same process. fuserir is
  timed twice: the kernel (arguments bound once, codegen.launch per call; the ratio to
  cuBLAS uses this) and a whole exe.run() call (host binding included).
* --hopper: the seed configuration on the Hopper path (wgmma on TMA-loaded tiles, a
  producer warp group): CTA tile 128x128x64 (or --cta-tile MxNx64), two consumer warp
  groups of 64xN, --stages, --splitk, the shared-memory epilogue unless told not to.
* --sweep [options]: the compute-bound sweep instead, every option after it
  benchmarks/matmul_sweep.py's: transformer layers' shapes, f16 and bf16, layouts TT, NT
  and TN, through the user's path against cuBLAS and the persistent Triton baseline
  (times, TFLOP/s, ratios) in one command.
* --once: one launch at the first shape and exit (for compute-sanitizer on a small grid).
* --matrix: the seed benchmark matrix (every layout, 4 or 8 warps, 3-5 stages,
  shared-memory epilogue or not, at the seed shapes with split-K 2..6): 48 kernels
  compiled ahead in a process pool, each configuration checked against float64 and timed
  (--repeat) against cuBLAS; prints counts and the best configuration per layout/shape.
  With --hopper, the Hopper path's matrix instead (tiles 128x128 and 128x256, 3 or 4
  stages, shared-memory epilogue or not: 32 kernels).
* --user-path: the path a user takes, per layout (--layouts) and shape: the unscheduled
  fusion through codegen.compile(fusion).run(inputs), which schedules per size class,
  against the same heuristic told the sizes (an explicit schedule_matmul with
  matmul_heuristic's parameters), the mma.sync path (the heuristic told this device
  without Hopper's instructions), cuBLAS and the Triton baseline
  (benchmarks/triton_matmul.py, when Triton is installed), all in this process; both
  fuserir paths checked against float64. Timed as the kernels alone and as whole calls.
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
from fuserir.progress import progress  # noqa: E402
from fuserir.scheduler import MatmulParams, schedule_matmul  # noqa: E402
from fuserir.scheduler.matmul_heuristic import matmul_heuristic  # noqa: E402

SEED_SHAPES = "1024x2048x4096"
DEFINITION = (ROOT / "examples" / "splitk_matmul.fz").read_text().split("schedule")[0]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=SEED_SHAPES, help="MxNxK,... (default: the seed's)")
    p.add_argument("--splitk", type=int, default=5)
    p.add_argument("--stages", type=int, default=3)
    p.add_argument("--warps", type=int, default=8, choices=(4, 8))
    p.add_argument("--cta-tile", help="MxNxK CTA tile (default: (32 * warps)x128x32)")
    p.add_argument("--warp-tile", default="64x64x32", help="MxNxK warp tile")
    p.add_argument("--no-smem-epilogue", action="store_true")
    p.add_argument("--splitk-mode", default="serial",
                   choices=("serial", "parallel", "atomic", "two_kernel", "cluster"))
    p.add_argument("--splitk-interleaved", action="store_true",
                   help="each split takes every splitk-th K tile")
    p.add_argument("--heuristic", action="store_true",
                   help="parameters from matmul_heuristic per shape (overrides the above)")
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--stress", type=int, default=0, help="runs with fresh random inputs")
    p.add_argument("--determinism", type=int, default=0, help="runs on fixed inputs")
    p.add_argument("--drop-syncs", default="", help="comma-separated sync ids to drop")
    p.add_argument("--no-verify", action="store_true", help="skip the static verifier")
    p.add_argument("--once", action="store_true", help="one launch, then exit")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--matrix", action="store_true",
                   help="the seed benchmark matrix (layouts x warps x stages x shapes x "
                        "splitk 2..6 x smem epilogue) instead")
    p.add_argument("--matrix-shapes", default=MATRIX_SHAPES)
    p.add_argument("--swap-mn", action="store_true",
                   help="with --hopper: the instruction's M along the output's N "
                        "(MatmulParams.swap_mn; --cta-tile then names N x M x K)")
    p.add_argument("--producer-registers", type=int,
                   help="with --hopper: the producer warp group keeps this many registers "
                        "a thread, the consumers get the rest (setmaxnreg)")
    p.add_argument("--hopper", action="store_true",
                   help="the Hopper path (wgmma, TMA): CTA tile 128x128x64 (or --cta-tile) "
                        "in two consumer warp groups; with --matrix, its configurations")
    p.add_argument("--user-path", action="store_true",
                   help="unscheduled fusions through compile().run() against the "
                        "heuristic's explicit schedule, cuBLAS and Triton")
    p.add_argument("--layouts", default="NT", help="with --user-path: TT,TN,NT,NN")
    p.add_argument("--no-triton", action="store_true", help="leave out the Triton baseline")
    args = p.parse_args(argv)
    args.no_torch, args.copy_mib = False, 1024
    args.shape_list = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    args.layout_list = [x.strip().upper() for x in args.layouts.split(",")]
    for layout in args.layout_list:
        if layout not in OPERANDS:
            p.error(f"--layouts: unknown layout {layout!r} (TT, TN, NT, NN)")
    args.warp_tile = tuple(int(x) for x in args.warp_tile.split("x"))
    args.cta_tile_given = args.cta_tile is not None
    args.cta_tile = tuple(int(x) for x in args.cta_tile.split("x")) if args.cta_tile else \
        (32 * args.warps, 128, args.warp_tile[2])
    return args


def build(args, shape=None):
    """The seed's NT fusion scheduled with params_of(args, shape)."""
    params = params_of(args, shape)
    fusion = fuserir.parse(DEFINITION)
    schedule_matmul(fusion, params)
    return fusion, params


def params_of(args, shape=None):
    """The MatmulParams the arguments name (the heuristic's for `shape` with
    --heuristic)."""
    if args.heuristic:
        params = matmul_heuristic(*shape, layout="NT")
    elif args.hopper:
        cta = args.cta_tile if args.cta_tile_given else (128, 128, 64)
        params = MatmulParams(cta_tile=cta, warp_tile=(64, cta[1], cta[2]),
                              instruction_tile=(64, cta[1], 16), stages=args.stages,
                              splitk_factor=args.splitk, splitk_mode=args.splitk_mode,
                              splitk_interleaved=args.splitk_interleaved,
                              use_smem_epilogue=not args.no_smem_epilogue,
                              promote_prologue_smem_reuse=not args.no_smem_epilogue,
                              producer_registers=args.producer_registers,
                              swap_mn=args.swap_mn)
    else:
        params = MatmulParams(cta_tile=args.cta_tile, warp_tile=args.warp_tile,
                              stages=args.stages, splitk_factor=args.splitk,
                              splitk_mode=args.splitk_mode,
                              splitk_interleaved=args.splitk_interleaved,
                              use_smem_epilogue=not args.no_smem_epilogue,
                              promote_prologue_smem_reuse=not args.no_smem_epilogue)
    return params


def nt_reference(cp, a, b):
    """The float64 product of NT operands A[K, M], B[K, N]."""
    return a.astype(cp.float64).T @ b.astype(cp.float64)


def mismatches(cp, out, ref, k):
    """Elements outside rtol 2^-10, atol 1e-5 K of the float64 reference."""
    bad = cp.abs(out.astype(cp.float64) - ref) > 1e-5 * k + 2.0 ** -10 * cp.abs(ref)
    return int(bad.sum())


# -- the seed benchmark matrix ---------------------------------------------------------------

OPERANDS = {"TT": ("[M, K]", "[K, N]"), "TN": ("[M, K]", "[N, K]"),
            "NT": ("[K, M]", "[K, N]"), "NN": ("[K, M]", "[N, K]")}
MATRIX_SHAPES = "1024x2048x4096,1024x2048x50304,1024x1024x4096,1024x1024x50304," \
                "136x184x175704,128x128x262144"


def layout_fusion(layout):
    """The unscheduled f16 matmul of a layout, cast to f16."""
    a, b = OPERANDS[layout]
    return fuserir.parse(f"""
fusion mm_{layout}(A: f16{a}, B: f16{b}) {{
  acc = matmul(A, B, layout={layout})
  out = cast(acc, f16)
  output out
}}""")


def layout_inputs(cp, rng, layout, m, n, k):
    """Fresh uniform(-1, 1) f16 operands of a layout, and their float64 product."""
    dims = {"M": m, "N": n, "K": k}
    sa, sb = (tuple(dims[d] for d in spec.strip("[]").split(", "))
              for spec in OPERANDS[layout])
    a = rng.uniform(-1, 1, sa, dtype=cp.float32).astype(cp.float16)
    b = rng.uniform(-1, 1, sb, dtype=cp.float32).astype(cp.float16)
    return a, b


def layout_reference(cp, layout, a, b):
    a64 = a.astype(cp.float64) if layout[0] == "T" else a.astype(cp.float64).T
    b64 = b.astype(cp.float64) if layout[1] == "T" else b.astype(cp.float64).T
    return a64 @ b64


def as_row_major(torch, layout, a, b):
    """torch views of the operands as [M, K] and [K, N] (transposed views, no copies)."""
    ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
    return (ta if layout[0] == "T" else ta.t()), (tb if layout[1] == "T" else tb.t())


# the Hopper matrix's tiles: CTA tile and warp-group tile (two consumer warp groups)
HOPPER_TILES = {"128x128": ((128, 128, 64), (64, 128, 64)),
                "128x256": ((128, 256, 64), (64, 256, 64))}


def matrix_params(path, size, stages, smem):
    """A matrix configuration's MatmulParams: the mma.sync path with `size` warps, or the
    Hopper path with the CTA tile `size` (HOPPER_TILES)."""
    if path == "hopper":
        cta, group = HOPPER_TILES[size]
        tile = dict(cta_tile=cta, warp_tile=group, instruction_tile=(64, group[1], 16))
    else:
        tile = dict(cta_tile=(32 * size, 128, 32), warp_tile=(64, 64, 32))
    return MatmulParams(**tile, stages=stages, use_smem_epilogue=smem,
                        promote_prologue_smem_reuse=smem)


def matrix_configs(hopper):
    """(layout, path, size, stages, smem) of every matrix kernel: the mma.sync path's
    4 or 8 warps x 3-5 stages, or the Hopper path's two tiles x 3-4 stages; each with and
    without the shared-memory epilogue."""
    if hopper:
        grid = [("hopper", t, s) for t in HOPPER_TILES for s in (3, 4)]
    else:
        grid = [("mma.sync", w, s) for w in (4, 8) for s in (3, 4, 5)]
    return [(lay, *g, smem) for lay in OPERANDS for g in grid for smem in (False, True)]


def matrix_fusion(layout, path, size, stages, smem):
    f = layout_fusion(layout)
    schedule_matmul(f, matrix_params(path, size, stages, smem))
    return f


def _compile_ahead(config):
    """(In a worker process.) Lower and compile one configuration: NVRTC's disk cache
    keeps the cubin, so the parent's compile of the same source is a cache hit."""
    import codegen
    codegen.compile(matrix_fusion(*config), backend="cuda")
    return config


def run_matrix(args, bench):
    """Every layout x warps {4, 8} x stages {3, 4, 5} x smem epilogue {0, 1} kernel (with
    --hopper: the Hopper path's tiles {128x128, 128x256} x stages {3, 4} x smem epilogue),
    at every shape and split factor 2..6: checked against float64 and timed (median of
    --repeat) against cuBLAS. Prints counts and, per layout and shape, the best
    configuration."""
    import concurrent.futures
    import cupy as cp
    import codegen
    from codegen.launch import launch, new_workspaces
    torch = bench.torch
    configs = matrix_configs(args.hopper)
    started = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor() as pool:
        list(pool.map(_compile_ahead, configs))
    kernels = {c: codegen.compile(matrix_fusion(*c), backend="cuda").kernels[0]
               for c in configs}
    compile_s = time.perf_counter() - started
    rng = cp.random.default_rng(0)
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.matrix_shapes.split(",")]
    rows, counts = [], {"run": 0, "passed": 0, "failed": []}
    bar = progress("benchmark matrix", total=len(configs) * len(shapes) * 5,
                   unit="config")
    for layout in OPERANDS:
        for m, n, k in shapes:
            dims = {"M": m, "N": n, "K": k}
            a, b = layout_inputs(cp, rng, layout, m, n, k)
            ref = layout_reference(cp, layout, a, b)
            cublas = None
            if torch is not None:
                ta, tb = as_row_major(torch, layout, a, b)
                cublas = bench.time(lambda: torch.matmul(ta, tb))["median_us"]
            out = cp.empty((m, n), dtype=cp.float16)
            best = None
            for config in [c for c in configs if c[0] == layout]:
                kernel = kernels[config]
                for splitk in range(2, 7):
                    scalars = {**dims, "splitk": splitk}
                    bound = {"A": a, "B": b, "out": out, **scalars,
                             **new_workspaces(kernel.kir, scalars)}
                    out.fill(cp.nan)
                    launch(kernel.kir, kernel.cubin, bound)
                    bad = mismatches(cp, out, ref, k)
                    counts["run"] += 1
                    bar.update()
                    name = f"{layout} {config[1]} {config[2]} s{config[3]} " \
                           f"smem{int(config[4])} splitk{splitk} {m}x{n}x{k}"
                    if bad:
                        counts["failed"].append((name, bad))
                        continue
                    counts["passed"] += 1
                    us = bench.time(lambda: launch(kernel.kir, kernel.cubin, bound))[
                        "median_us"]
                    if best is None or us < best[0]:
                        best = (us, config, splitk)
            row = {"layout": layout, "shape": f"{m}x{n}x{k}", "cublas_us": cublas}
            if best:
                row.update(best_us=best[0], path=best[1][1], size=best[1][2],
                           stages=best[1][3], smem=best[1][4], splitk=best[2])
            rows.append(row)
            print(json.dumps(row), flush=True)
            del ref
    bar.close()
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"\n## seed benchmark matrix ({'Hopper' if args.hopper else 'mma.sync'} path), "
          f"{device}, {datetime.date.today()}: "
          f"{len(configs)} kernels compiled in {compile_s:.0f} s; {counts['run']} "
          f"configurations run, {counts['passed']} match float64, "
          f"{len(counts['failed'])} do not")
    for name, bad in counts["failed"][:20]:
        print(f"  MISMATCH {name}: {bad} elements")
    print("| layout | shape | best fuserir us | config (warps or tile, stages, smem, splitk) | "
          "cuBLAS us | fuserir/cuBLAS speed |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "best_us" not in r:
            print(f"| {r['layout']} | {r['shape']} | - | - | {r['cublas_us']:.1f} | - |")
            continue
        ratio = r["cublas_us"] / r["best_us"] if r["cublas_us"] else float("nan")
        print(f"| {r['layout']} | {r['shape']} | {r['best_us']:.1f} | {r['size']}, "
              f"{r['stages']}, {int(r['smem'])}, {r['splitk']} | {r['cublas_us']:.1f} | "
              f"{ratio:.2f}x |")
    return 0 if not counts["failed"] else 1


def kernels_alone(exe, steps, arrays, scalars):
    """A call launching `steps`' kernels with arguments bound once (intermediates such as
    the two-kernel split-K partials and the workspaces allocated once, which launches
    in order on one stream may share): the kernels' time alone. Each step
    launches the variant run() picks for these arrays (exe.kernels_for)."""
    from codegen.launch import launch, new_workspaces
    values, launches = dict(arrays), []
    for step, kernel in zip(steps, exe.kernels_for(arrays)):
        outs = {t.name: exe.allocate(t, scalars, False, intermediate=t.name != "out")
                for t in step.fusion.outputs}
        values.update(outs)
        bound = {**{n: values[n] for n in step.inputs}, **outs, **scalars,
                 **new_workspaces(kernel.kir, scalars)}
        launches.append((kernel, bound))
    return lambda: [launch(k.kir, k.cubin, a) for k, a in launches]


def run_user_path(args, bench):
    """Per layout and shape: the unscheduled fusion's compile().run() (scheduled at run()
    for the size class) against matmul_heuristic's explicit schedule, cuBLAS and Triton,
    each checked (fuserir) and timed in this process. Prints a JSON line per row and a
    Markdown table."""
    import cupy as cp
    import codegen
    from codegen.launch import device_model
    torch = bench.torch
    triton_matmul = None
    if torch is not None and not args.no_triton:
        try:
            from benchmarks import triton_matmul
        except ImportError as missing:
            print(f"no Triton baseline: {missing}", file=sys.stderr)
    device = device_model()
    rng = cp.random.default_rng(0)
    rows = []
    for layout in args.layout_list:
        auto = codegen.compile(layout_fusion(layout), backend="cuda")
        for m, n, k in args.shape_list:
            dims = {"M": m, "N": n, "K": k}
            a, b = layout_inputs(cp, rng, layout, m, n, k)
            ref = layout_reference(cp, layout, a, b)
            _, scalars, steps = auto.plan_for(dims)
            params = matmul_heuristic(m, n, k, layout=layout, device=device)
            explicit = layout_fusion(layout)
            schedule_matmul(explicit, params, device)
            told = codegen.compile(explicit, backend="cuda")
            # the mma.sync path: the heuristic for this device without Hopper's instructions
            mma_explicit = layout_fusion(layout)
            schedule_matmul(mma_explicit, matmul_heuristic(m, n, k, layout=layout,
                                                           device=device.with_(cc=(8, 0))),
                            device)
            mma = codegen.compile(mma_explicit, backend="cuda")
            r = {"layout": layout, "shape": f"{m}x{n}x{k}", "splitk": params.splitk_factor,
                 "mode": params.splitk_mode,
                 "tiles": "x".join(map(str, params.cta_tile)), "stages": params.stages,
                 "same_kernels": [s.kernel.source for s in steps]
                 == [c.source for c in told.kernels],
                 "mismatches_auto": mismatches(cp, auto.run({"A": a, "B": b})["out"], ref, k),
                 "path": "hopper" if params.hopper else "mma.sync",
                 "mismatches_told": mismatches(cp, told.run({"A": a, "B": b})["out"], ref, k),
                 "mismatches_mma": mismatches(cp, mma.run({"A": a, "B": b})["out"], ref, k)}
            arrays = {"A": a, "B": b}
            r["auto_us"] = bench.time(kernels_alone(auto, steps, arrays,
                                                    {**dims, **scalars}))["median_us"]
            r["told_us"] = bench.time(kernels_alone(told, told.steps, arrays,
                                                    {**dims, **explicit.scalars}))["median_us"]
            r["mma_us"] = bench.time(kernels_alone(mma, mma.steps, arrays,
                                                   {**dims, **mma_explicit.scalars}))["median_us"]
            r["caps"] = [k.caps for k in auto.kernels_for(arrays)]
            r["auto_run_us"] = bench.time(lambda: auto.run(arrays))["median_us"]
            r["told_run_us"] = bench.time(lambda: told.run(arrays))["median_us"]
            if torch is not None:
                ta, tb = as_row_major(torch, layout, a, b)
                r["cublas_us"] = bench.time(lambda: torch.matmul(ta, tb))["median_us"]
                if triton_matmul is not None:
                    try:
                        fn, holder = triton_matmul.matmul_fn(ta, tb, torch.float16,
                                                             device.sms)
                        fn()
                    except Exception as failed:     # noqa: BLE001 - report, go on
                        print(f"Triton baseline failed, left out: {failed}", file=sys.stderr)
                        triton_matmul = None
                    else:
                        got = cp.from_dlpack(holder[0])
                        r["mismatches_triton"] = mismatches(cp, got, ref, k)
                        r["triton_us"] = bench.time(fn)["median_us"]
            del ref
            rows.append(r)
            print(json.dumps(r), flush=True)
    print(f"\n## the user's path, {device.describe()}, {datetime.date.today()}")
    print("| layout | shape | plan (path, tile, stages, split-K) | compile().run() kernels us "
          "| heuristic told the sizes us | ratio | run() us | mma.sync path us | cuBLAS us | "
          "Triton us | fuserir/cuBLAS | mma.sync/cuBLAS | Triton/cuBLAS | "
          "mismatches (auto, told, mma.sync, Triton) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    nan = float("nan")
    for r in rows:
        cublas = r.get("cublas_us", nan)
        print(f"| {r['layout']} | {r['shape']} | {r['path']}, {r['tiles']}, {r['stages']}, "
              f"{r['splitk']} {r['mode']} | {r['auto_us']:.1f} | {r['told_us']:.1f} | "
              f"{r['auto_us'] / r['told_us']:.3f} | {r['auto_run_us']:.1f} | "
              f"{r['mma_us']:.1f} | {cublas:.1f} | "
              f"{r.get('triton_us', nan):.1f} | {cublas / r['auto_us']:.2f}x | "
              f"{cublas / r['mma_us']:.2f}x | "
              f"{cublas / r.get('triton_us', nan):.2f}x | {r['mismatches_auto']}, "
              f"{r['mismatches_told']}, {r['mismatches_mma']}, "
              f"{r.get('mismatches_triton', '-')} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))
    bad = [r for r in rows if r["mismatches_auto"] or r["mismatches_told"]
           or r["mismatches_mma"] or not r["same_kernels"]]
    return 1 if bad else 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--sweep"]:
        from benchmarks import matmul_sweep
        return matmul_sweep.main(argv[1:])
    args = parse_args(argv)
    common.require_gpu()
    import cupy as cp
    import codegen
    bench = common.Bench(args)
    torch = bench.torch
    if torch is not None:
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    if args.matrix:
        return run_matrix(args, bench)
    if args.user_path:
        return run_user_path(args, bench)
    drop = tuple(s for s in args.drop_syncs.split(",") if s)
    copy_gbps = None if args.once else bench.copy_bandwidth()["gbps"]
    rng = cp.random.default_rng(0)
    built, compile_s = {}, 0.0

    def compiled(shape):
        """(executable, params) for a shape: one for all shapes unless --heuristic."""
        nonlocal compile_s
        key = shape if args.heuristic else None
        if key not in built:
            fusion, params = build(args, shape)
            started = time.perf_counter()
            built[key] = (codegen.compile(fusion, backend="cuda", drop_syncs=drop,
                                          verify=not args.no_verify), params)
            compile_s += time.perf_counter() - started
        return built[key]

    def inputs(m, n, k):
        a = rng.uniform(-1, 1, (k, m), dtype=cp.float32).astype(cp.float16)
        b = rng.uniform(-1, 1, (k, n), dtype=cp.float32).astype(cp.float16)
        return a, b

    results = []
    for m, n, k in args.shape_list:
        exe, params = compiled((m, n, k))

        def run(a, b):
            return exe.run({"A": a, "B": b})["out"]      # splitk: the schedule's default

        a, b = inputs(m, n, k)
        out = run(a, b)
        r = {"shape": f"{m}x{n}x{k}", "splitk": params.splitk_factor,
             "tiles": "/".join("x".join(map(str, t)) for t in (params.cta_tile,
                                                                 params.warp_tile)),
             "mode": params.splitk_mode, "stages": params.stages,
             "warps": params.warps, "smem_epilogue": params.use_smem_epilogue,
             "dropped": list(drop),
             "mismatches": mismatches(cp, out, nt_reference(cp, a, b), k)}
        if args.once:
            cp.cuda.runtime.deviceSynchronize()
            print(json.dumps(r))
            return 0
        if args.stress:
            bad_runs = bad_elems = 0
            for _ in range(args.stress):
                a2, b2 = inputs(m, n, k)
                bad = mismatches(cp, run(a2, b2), nt_reference(cp, a2, b2), k)
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
        scalars = {"M": m, "N": n, "K": k, **exe.fusion.scalars}
        stats = bench.time(kernels_alone(exe, exe.steps, {"A": a, "B": b}, scalars))
        r["fuserir_us"] = stats["median_us"]
        r["tflops"] = 2 * m * n * k / stats["median_us"] / 1e6
        # the ideal traffic (operands read once, the f16 output written once) over the time
        ideal_bytes = 2 * (m * k + k * n + m * n)
        r["copy_fraction"] = ideal_bytes / stats["median_us"] / 1e3 / copy_gbps
        if torch is not None:
            ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
            cublas = bench.time(lambda: torch.matmul(ta.t(), tb))
            r["cublas_us"] = cublas["median_us"]
            r["speedup_vs_cublas"] = cublas["median_us"] / stats["median_us"]
        results.append(r)
        print(json.dumps(r), flush=True)
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"\n## fuserir matmul, {device}, {datetime.date.today()}, compile {compile_s:.2f} s, "
          f"copy bandwidth {copy_gbps:.0f} GB/s (cudaMemcpyAsync D2D, read + write)")
    print("| shape | splitk | mode | CTA/warp tile | stages | warps | smem epi | kernel us | "
          "run() us | cuBLAS us | fuserir/cuBLAS speed | TFLOP/s | % of copy | mismatches |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['shape']} | {r['splitk']} | {r['mode']} | {r['tiles']} | {r['stages']} | "
              f"{r['warps']} | "
              f"{int(r['smem_epilogue'])} | {r['fuserir_us']:.1f} | {r['run_us']:.1f} | "
              f"{r.get('cublas_us', float('nan')):.1f} | "
              f"{r.get('speedup_vs_cublas', float('nan')):.2f}x | {r['tflops']:.1f} | "
              f"{100 * r['copy_fraction']:.1f} | {r['mismatches']} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
