"""Split-K's stress run: the seed's skinny shapes, repeated and fresh, through the user's path.

    python3 benchmarks/splitk_stress.py [--shapes 128x128x262144,136x184x175704]
                                        [--layouts NT] [--dtypes f16] [--repeats 100]
                                        [--fresh 1000]

For each shape, layout and dtype: one unscheduled fusion (benchmarks/splitk_sweep.py's
`out = cast(matmul(A, B), dtype)`) compiled once and called with torch tensors, so it
runs the heuristic's plan in its default, deterministic mode. Two checks:

- repeatable: --repeats calls on the same inputs, every result bitwise equal to the
  first (the deterministic modes sum partials in a fixed order);
- fresh: --fresh calls, each on new uniform(-1, 1) inputs, each result compared with the
  float64 product (|out - ref| <= 1e-5 K + rtol |ref|, as in the sweep): a mismatch is a
  wrong element, counted.

Prints one line per check and exits 1 if any result differed or mismatched.
"""

import argparse
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import common, splitk_sweep  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="128x128x262144,136x184x175704")
    p.add_argument("--layouts", default="NT")
    p.add_argument("--dtypes", default="f16")
    p.add_argument("--repeats", type=int, default=100)
    p.add_argument("--fresh", type=int, default=1000)
    args = p.parse_args(argv)
    splitk_sweep.check_points(p, args)
    if args.repeats < 1 or args.fresh < 0:
        p.error("--repeats must be at least 1, --fresh at least 0")
    return args


def stress(args, torch, layout, dtype, shape):
    """(differing repeats, mismatched fresh elements, fresh runs with a mismatch)."""
    import codegen
    m, n, k = shape
    exe = codegen.compile(splitk_sweep.fusion(layout, dtype), backend="cuda")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    a, b, _, _ = splitk_sweep.operands(torch, layout, dtype, m, n, k, gen)
    first = exe.run({"A": a, "B": b})["out"].clone()
    differing = sum(not torch.equal(exe.run({"A": a, "B": b})["out"], first)
                    for _ in range(args.repeats - 1))
    wrong = runs_wrong = 0
    for _ in range(args.fresh):
        a, b, ta, tb = splitk_sweep.operands(torch, layout, dtype, m, n, k, gen)
        out = exe.run({"A": a, "B": b})["out"]
        ref = ta.double() @ tb.double()
        bad = int(((out.double() - ref).abs() >
                   1e-5 * k + splitk_sweep.RTOL[dtype] * ref.abs()).sum())
        wrong += bad
        runs_wrong += bad > 0
    return differing, wrong, runs_wrong


def main(argv=None):
    args = parse_args(argv)
    common.require_gpu()
    import torch
    failed = False
    for dtype in args.dtype_list:
        for layout in args.layout_list:
            for shape in args.shape_list:
                started = time.perf_counter()
                differing, wrong, runs_wrong = stress(args, torch, layout, dtype, shape)
                failed |= bool(differing or wrong)
                print(f"{layout} {dtype} {'x'.join(map(str, shape))} "
                      f"(the heuristic's plan): {args.repeats} repeats, {differing} "
                      f"differing from the first; {args.fresh} fresh inputs, {wrong} wrong "
                      f"elements in {runs_wrong} runs "
                      f"({time.perf_counter() - started:.0f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
