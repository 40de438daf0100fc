"""Explicit Hopper plans for one layout and shape, timed side by side against cuBLAS: what
docs/perf.md's comparisons of tiles, stages, split modes and swap_mn ran.

    python3 benchmarks/matmul_plans.py LAYOUT MxNxK PLAN [PLAN ...] [--repeat 30]
                                       [--no-triton]

        PLAN  TILExSTAGES:SPLITS:MODE[:rREGISTERS][:swap][:persistent][:cCTAS][:gG][:smem]
              [:tmastore], or auto (the heuristic's plan for this device and shape), e.g.
              128x192x64x4:66:parallel:r40   (CTA tile 128x192x64, 4 stages, 66 parallel
                                               splits, the producer keeping 40 registers)
              192x136x64x3:132:parallel:r40:swap   (swap_mn: 192 rows of N x 136 of M)
              128x256x64x4:1:serial:persistent   (one CTA per SM walking the tiles)
              128x256x64x4:1:serial:persistent:c512   (512 CTAs walking them)
              128x256x64x4:1:serial:smem   (the output staged through shared memory,
                                            over the operand stages unless persistent)
              128x256x64x4:1:serial:smem:tmastore   (the staged output stored by TMA,
                                                     a box per 128 bytes of its rows)
              64x64x64x8:16:cluster   (16 splits, a tile's CTAs one cluster summing
                                       through each other's shared memory)
              128x256x64x4:1:serial:g8   (the tiles walked 8 rows of tiles down a
                                          column at a time: tile_group)

Each plan is benchmarks/matmul.py's layout fusion (`out = cast(matmul(A, B), f16)`)
scheduled with MatmulParams (one consumer warp group per 64 rows, the output from the
registers unless `smem`, stored by TMA with `tmastore`, a parallel, atomic or cluster
split interleaved), checked against the float64 product (benchmarks/matmul.py's
tolerance) and timed as its kernels alone (cold L2, median); torch.matmul (cuBLAS) on the
same arrays in the same process. A plan the scheduler or lowering refuses prints its error
and the others go on.

Under cuBLAS, a Triton row: benchmarks/triton_persistent.py (persistent TMA kernel,
autotuned for this shape and layout, the configuration it chose named) on the same arrays,
checked against the same float64 product and timed the same way (its call, the output's
allocation included, as torch.matmul's). --no-triton leaves it out; where Triton cannot be
imported, one line on stderr says so and the rest goes on.
"""

import argparse
import pathlib
import sys
import types

ROOT = pathlib.Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import matmul as bench_matmul  # noqa: E402


def parse_plan(text):
    """(MatmulParams, the CTAs walking the tiles or None) from a PLAN (see the module
    docstring), (None, None) for auto; ValueError says what is wrong."""
    from fuserir.scheduler.matmul_params import MatmulParams
    if text == "auto":
        return None, None
    fields = text.split(":")
    if len(fields) < 3:
        raise ValueError(f"plan {text!r}: expected TILExSTAGES:SPLITS:MODE[:rN][:swap]"
                         "[:persistent][:cN][:gN][:smem][:tmastore] or auto")
    try:
        tm, tn, tk, stages = (int(x) for x in fields[0].split("x"))
        splits = int(fields[1])
    except ValueError:
        raise ValueError(f"plan {text!r}: TILExSTAGES is four sizes (e.g. 128x64x64x6) "
                         "and SPLITS a number") from None
    registers, ctas, group, flags = None, None, 1, set()
    for extra in fields[3:]:
        if extra in ("swap", "persistent", "smem", "tmastore"):
            flags.add(extra)
        elif extra.startswith("r") and extra[1:].isdigit():
            registers = int(extra[1:])
        elif extra.startswith("c") and extra[1:].isdigit() and int(extra[1:]) > 0:
            ctas = int(extra[1:])
        elif extra.startswith("g") and extra[1:].isdigit() and int(extra[1:]) > 0:
            group = int(extra[1:])
        else:
            raise ValueError(f"plan {text!r}: unknown option {extra!r} (rN, swap, "
                             "persistent, cN, gN, smem or tmastore)")
    if ctas is not None and "persistent" not in flags:
        raise ValueError(f"plan {text!r}: cN (the CTAs walking the tiles) needs persistent")
    mode = fields[2]
    return MatmulParams(cta_tile=(tm, tn, tk), warp_tile=(64, tn, tk),
                        instruction_tile=(64, tn, 16), stages=stages, splitk_factor=splits,
                        splitk_mode=mode,
                        splitk_interleaved=mode in ("parallel", "atomic", "cluster"),
                        producer_registers=registers, swap_mn="swap" in flags,
                        persistent="persistent" in flags, use_smem_epilogue="smem" in flags,
                        tma_store="tmastore" in flags, tile_group=group,
                        promote_prologue_smem_reuse="smem" in flags
                        and "persistent" not in flags), ctas


def plan_text(params, ctas=None):
    """The PLAN that names `params` and `ctas` (parse_plan's inverse for the fields it
    sets)."""
    text = "x".join(map(str, (*params.cta_tile, params.stages)))
    text += f":{params.splitk_factor}:{params.splitk_mode}"
    if params.producer_registers is not None:
        text += f":r{params.producer_registers}"
    for flag, on in (("swap", params.swap_mn), ("persistent", params.persistent),
                     (f"c{ctas}", ctas is not None), ("smem", params.use_smem_epilogue),
                     ("tmastore", params.tma_store),
                     (f"g{params.tile_group}", params.tile_group > 1)):
        text += f":{flag}" if on else ""
    return text


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("layout", choices=sorted(bench_matmul.OPERANDS))
    p.add_argument("shape", help="MxNxK")
    p.add_argument("plans", nargs="+", metavar="PLAN")
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--no-triton", action="store_true", help="leave out the Triton baseline")
    args = p.parse_args(argv)
    try:
        args.size = tuple(int(x) for x in args.shape.split("x"))
    except ValueError:
        args.size = ()
    if len(args.size) != 3 or min(args.size) < 1:
        p.error(f"shape {args.shape!r}: expected MxNxK, three positive sizes")
    try:
        args.params = [parse_plan(text) for text in args.plans]
    except Exception as error:  # noqa: BLE001 - ValueError or MatmulParams' ScheduleError
        p.error(str(error))
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    return args


def print_triton_row(bench, triton_persistent, ta, tb, ref, cublas, sms):
    """The Triton baseline's row: its time, cuBLAS/Triton and its mismatches against
    `ref`, or why it could not run."""
    try:
        run, holder = triton_persistent.matmul_fn(ta, tb, bench.torch.float16, sms)
        run()
    except Exception as error:  # noqa: BLE001 - report it, go on with the plans
        print(f"  Triton persistent: failed: {type(error).__name__}: {error}")
        return
    import cupy as cp
    bad = bench_matmul.mismatches(cp, cp.from_dlpack(holder[0]), ref, ta.shape[1])
    us = bench.time(run)["median_us"]
    print(f"  Triton persistent ({triton_persistent.tuned_text()}): {us:.1f} us, "
          f"cuBLAS/Triton {cublas / us:.2f}x, {bad} mismatches", flush=True)


def main(argv=None):
    args = parse_args(argv)
    from benchmarks import common
    common.require_gpu()
    triton_persistent = common.triton_module("triton_persistent", args.no_triton)
    import cupy as cp
    import codegen
    from codegen.launch import device_model
    from fuserir.scheduler.matmul import schedule_matmul
    from fuserir.scheduler.matmul_heuristic import matmul_heuristic
    from fuserir.scheduler.matmul_tiles import CTAS
    bench = common.Bench(types.SimpleNamespace(no_torch=False, repeat=args.repeat,
                                               warmup=3))
    layout, (m, n, k) = args.layout, args.size
    a, b = bench_matmul.layout_inputs(cp, cp.random.default_rng(0), layout, m, n, k)
    ref = bench_matmul.layout_reference(cp, layout, a, b)
    ta, tb = bench_matmul.as_row_major(bench.torch, layout, a, b)
    cublas = bench.time(lambda: bench.torch.matmul(ta, tb))["median_us"]
    print(f"{layout} {m}x{n}x{k}: cuBLAS {cublas:.1f} us")
    if triton_persistent is not None:
        print_triton_row(bench, triton_persistent, ta, tb, ref, cublas, device_model().sms)
    for text, (params, ctas) in zip(args.plans, args.params):
        if params is None:
            params = matmul_heuristic(m, n, k, layout=layout, device=device_model())
            text = f"auto ({plan_text(params)})"
        fusion = bench_matmul.layout_fusion(layout)
        try:
            schedule_matmul(fusion, params)
            if ctas is not None:
                fusion.declare_scalar(CTAS, ctas)
            exe = codegen.compile(fusion, backend="cuda")
        except Exception as error:  # noqa: BLE001 - report the refusal, go on
            print(f"  {text}: refused: {type(error).__name__}: {error}")
            continue
        bad = bench_matmul.mismatches(cp, exe.run({"A": a, "B": b})["out"], ref, k)
        launch = bench_matmul.kernels_alone(exe, exe.steps, {"A": a, "B": b},
                                            {"M": m, "N": n, "K": k, **fusion.scalars})
        us = bench.time(launch)["median_us"]
        print(f"  {text}: {us:.1f} us, cuBLAS/plan {cublas / us:.2f}x, {bad} mismatches",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
