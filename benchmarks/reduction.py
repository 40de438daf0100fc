"""Reductions and softmax with automatic schedules against copy bandwidth and torch.

    python3 benchmarks/reduction.py [--quick] [--rows M --cols N]
                                    [--softmax-rows M --softmax-cols N]
                                    [--repeat 50] [--cases sum_rows,...] [--json out.json]

Cases (unscheduled fusions, compiled with codegen.compile(fusion, backend="cuda")); bytes
counted are the input read once and the output written once:
  sum_rows  sum(x, axes=[1]) over f32[16384, 16384]   target: >= 75% of copy bandwidth
  sum_cols  sum(x, axes=[0]) of the same
  max_rows  max(x, axes=[1]) of the same
  sum_few_rows  sum(x, axes=[1]) over f32[8, 16384 * 16384 / 8]: too few rows for the
            SMs, each row split over CTAs     target: >= 75% of copy bandwidth
  softmax   over the last axis of f32[8192, 8192], written with max/exp/sum/div
                                                     target: within 1.5x of torch.softmax
The method (events, L2 flush, median) is in benchmarks/common.py and docs/perf.md.
"""

import pathlib
import sys

if str(pathlib.Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks import common  # noqa: E402
from benchmarks.common import Case  # noqa: E402

TITLE = "fuserir reduction benchmarks"
FEW_ROWS = 8
SIZES = {"rows": (16384, 1024), "cols": (16384, 1024),
         "softmax_rows": (8192, 512), "softmax_cols": (8192, 512)}


def softmax(xp, v):
    x = v["x"].astype(xp.float64)
    e = xp.exp(x - x.max(axis=1, keepdims=True))
    return {"out": e / e.sum(axis=1, keepdims=True)}


def reduction(name, op, axis, sizes, torch_op, target=None):
    """`s = op(x, axes=[axis])` over f32[M, N]; f32 sums get slack for their order."""
    ref = {"sum": lambda xp, x: xp.sum(x, axis=axis, dtype=xp.float64),
           "max": lambda xp, x: xp.max(x, axis=axis)}[op]
    reduced = sizes["MN"[axis]]
    return Case(name, f"""
        fusion {name}(x: f32[M, N]) {{
          s = {op}(x, axes=[{axis}])
          output s
        }}""", sizes, reference=lambda xp, v: {"s": ref(xp, v["x"])}, torch_op=torch_op,
        target=target, rtol=1e-5 if op == "sum" else 0,
        atol=1e-6 * reduced if op == "sum" else 0)


def cases(args):
    sizes = {"M": args.rows, "N": args.cols}
    return [
        reduction("sum_rows", "sum", 1, sizes, lambda torch, t: t["x"].sum(dim=1),
                  target=("copy", 0.75)),
        reduction("sum_cols", "sum", 0, sizes, lambda torch, t: t["x"].sum(dim=0)),
        reduction("max_rows", "max", 1, sizes, lambda torch, t: t["x"].amax(dim=1)),
        reduction("sum_few_rows", "sum", 1, {"M": FEW_ROWS,
                                             "N": args.rows * args.cols // FEW_ROWS},
                  lambda torch, t: t["x"].sum(dim=1), target=("copy", 0.75)),
        Case("softmax", """
            fusion softmax(x: f32[M, N]) {
              m = max(x, axes=[1])
              e = exp(x - broadcast(m, [false, true]))
              s = sum(e, axes=[1])
              out = e / broadcast(s, [false, true])
              output out
            }""", {"M": args.softmax_rows, "N": args.softmax_cols},
             reference=softmax, torch_op=lambda torch, t: torch.softmax(t["x"], dim=1),
             target=("torch", 1.5), rtol=1e-4, atol=1e-7),
    ]


def parser():
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, help="M of sum/max (default 16384; 1024 quick)")
    p.add_argument("--cols", type=int, help="N of sum/max (default 16384; 1024 quick)")
    p.add_argument("--softmax-rows", type=int, help="M of softmax (default 8192; 512 quick)")
    p.add_argument("--softmax-cols", type=int, help="N of softmax (default 8192; 512 quick)")
    return p


def main(argv=None):
    args = common.parse_args(parser(), argv, SIZES)
    return common.main(TITLE, args, common.select(cases(args), args.cases))


if __name__ == "__main__":
    sys.exit(main())
