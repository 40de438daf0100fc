"""Pointwise fusions with automatic schedules against copy bandwidth and torch.

    python3 benchmarks/pointwise.py [--quick] [--elements N] [--rows M --cols N]
                                    [--repeat 50] [--cases add,...] [--json out.json]

Cases (unscheduled fusions, compiled with codegen.compile(fusion, backend="cuda")):
  add        out = a + b over f32[N], N = 2^28         target: >= 85% of copy bandwidth
  bias_relu  relu(x + broadcast(b)) over f32[M, N] with b f32[N]
  gelu_bf16  gelu(x + broadcast(b), tanh) * x over bf16[M, N] (rounded after each op)
The method (events, L2 flush, median) is in benchmarks/common.py and docs/perf.md.
"""

import pathlib
import sys

if str(pathlib.Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks import common  # noqa: E402
from benchmarks.common import Case  # noqa: E402

TITLE = "fuserir pointwise benchmarks"
SIZES = {"elements": (1 << 28, 1 << 20), "rows": (16384, 1024), "cols": (16384, 1024)}


def gelu_tanh(xp, h):
    return 0.5 * h * (1 + xp.tanh(xp.float32(0.7978845608028654) * (h + 0.044715 * h ** 3)))


def gelu_chain(xp, v):
    r = lambda t: common.round_bf16(xp, t)  # noqa: E731 - bf16 rounds after each op
    h = r(v["x"] + v["b"][None, :])
    return {"y": r(r(gelu_tanh(xp, h)) * v["x"])}


def cases(args):
    m, n = args.rows, args.cols
    return [
        Case("add", """
            fusion add(a: f32[N], b: f32[N]) {
              out = a + b
              output out
            }""", {"N": args.elements},
             reference=lambda xp, v: {"out": v["a"] + v["b"]},
             torch_op=lambda torch, t: t["a"] + t["b"],
             target=("copy", 0.85)),
        Case("bias_relu", """
            fusion bias_relu(x: f32[M, N], b: f32[N]) {
              y = relu(x + broadcast(b, [true, false]))
              output y
            }""", {"M": m, "N": n},
             reference=lambda xp, v: {"y": xp.maximum(v["x"] + v["b"][None, :], 0)},
             torch_op=lambda torch, t: torch.relu(t["x"] + t["b"])),
        Case("gelu_bf16", """
            fusion gelu_bf16(x: bf16[M, N], b: bf16[N]) {
              y = gelu(x + broadcast(b, [true, false]), approximate="tanh") * x
              output y
            }""", {"M": m, "N": n},
             reference=gelu_chain,
             torch_op=lambda torch, t: torch.nn.functional.gelu(
                 t["x"] + t["b"], approximate="tanh") * t["x"],
             rtol=2 ** -6),
    ]


def parser():
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--elements", type=int, help="N of add (default 2^28; 2^20 with --quick)")
    p.add_argument("--rows", type=int, help="M of the 2-D cases (default 16384; 1024 quick)")
    p.add_argument("--cols", type=int, help="N of the 2-D cases (default 16384; 1024 quick)")
    return p


def main(argv=None):
    args = common.parse_args(parser(), argv, SIZES)
    return common.main(TITLE, args, common.select(cases(args), args.cases))


if __name__ == "__main__":
    sys.exit(main())
