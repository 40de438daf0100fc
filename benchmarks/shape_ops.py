"""Shape ops with automatic schedules against copy bandwidth, torch eager and torch.compile.

    python3 benchmarks/shape_ops.py [--quick] [--shapes 8192x4096,32768x1024]
                                    [--dtypes bf16,f32] [--torch-compile] [--repeat 50]
                                    [--cases rotary_bf16_8192x4096,...] [--json out.json]

Cases, each at every R x D of --shapes and in every dtype of --dtypes (unscheduled
fusions, compiled with codegen.compile(fusion, backend="cuda")); every op in the case's
dtype, rounded after each as torch eager rounds:
  rotary_<dtype>_<R>x<D>     out = x * cos + cat([-x2, x1], dim=1) * sin, x1 and x2 the
                             halves of x's rows (slices); x, cos, sin [R, D]
  transpose_add_<dtype>_...  out = transpose(x, 0, 1) + y, x [D, R], y and out [R, D]
  cat3_<dtype>_...           out = cat([a, b, c], dim=1), a and b [R, D/4], c [R, D/2]
  swiglu_<dtype>_...         out = a * sigmoid(a) * b, a and b the halves of x's rows
                             (a gated MLP's activation); x [R, D], out [R, D/2]
Target: at least 80% of the copy bandwidth, the bytes being every input read once and
the output written once; beside it torch eager and, with --torch-compile, torch.compile
of the same op on the same tensors, in the same process. The method (events, L2 flush,
median) is in benchmarks/common.py and docs/perf.md.
"""

import pathlib
import sys

if str(pathlib.Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks import common  # noqa: E402
from benchmarks.common import Case  # noqa: E402

TITLE = "fuserir shape-op benchmarks"
SIZES = {"shapes": ("8192x4096,32768x1024", "256x512")}
TARGET = ("copy", 0.80)


def _rounding(xp, dtype):
    """The rounding after each op: bf16's, or none for f32."""
    return (lambda t: common.round_bf16(xp, t)) if dtype == "bf16" else (lambda t: t)


def rotary_reference(dtype):
    def reference(xp, v):
        r = _rounding(xp, dtype)
        x = v["x"]
        half = x.shape[1] // 2
        rotated = xp.concatenate([-x[:, half:], x[:, :half]], axis=1)
        return {"out": r(r(x * v["cos"]) + r(rotated * v["sin"]))}
    return reference


def rotary_torch(torch, t):
    x = t["x"]
    half = x.shape[1] // 2
    return x * t["cos"] + torch.cat([-x[:, half:], x[:, :half]], dim=1) * t["sin"]


def swiglu_reference(dtype):
    def reference(xp, v):
        r = _rounding(xp, dtype)
        x = v["x"]
        a, b = x[:, :x.shape[1] // 2], x[:, x.shape[1] // 2:]
        return {"out": r(r(a * r(1 / (1 + xp.exp(-a)))) * b)}
    return reference


def swiglu_torch(torch, t):
    a, b = t["x"].chunk(2, dim=1)
    return a * torch.sigmoid(a) * b


def transpose_add_reference(dtype):
    return lambda xp, v: {"out": _rounding(xp, dtype)(v["x"].T + v["y"])}


def points(args):
    """(dtypes, [(R, D)]) of --dtypes and --shapes (D a multiple of 4: cat3's parts)."""
    return common.shape_points(args, 4, "cat3's parts")


def cases(args):
    made = []
    dtypes, shapes = points(args)
    for dtype in dtypes:
        for rows, cols in shapes:
            tag = f"{dtype}_{rows}x{cols}"
            made += [
                Case(f"rotary_{tag}", f"""
                    fusion rotary(x: {dtype}[R, D], cos: {dtype}[R, D], sin: {dtype}[R, D]) {{
                      x1 = slice(x, [0, 0], [R, D / 2])
                      x2 = slice(x, [0, D / 2], [R, D])
                      out = x * cos + cat([-x2, x1], dim=1) * sin
                      output out
                    }}""", {"R": rows, "D": cols},
                     reference=rotary_reference(dtype), torch_op=rotary_torch,
                     target=TARGET, rtol=2 ** -7 if dtype == "bf16" else 1e-6),
                Case(f"transpose_add_{tag}", f"""
                    fusion transpose_add(x: {dtype}[D, R], y: {dtype}[R, D]) {{
                      out = transpose(x, 0, 1) + y
                      output out
                    }}""", {"R": rows, "D": cols},
                     reference=transpose_add_reference(dtype),
                     torch_op=lambda torch, t: t["x"].t() + t["y"], target=TARGET),
                Case(f"cat3_{tag}", f"""
                    fusion cat3(a: {dtype}[R, Q], b: {dtype}[R, Q], c: {dtype}[R, H]) {{
                      out = cat([a, b, c], dim=1)
                      output out
                    }}""", {"R": rows, "Q": cols // 4, "H": cols // 2},
                     reference=lambda xp, v: {"out": xp.concatenate(
                         [v["a"], v["b"], v["c"]], axis=1)},
                     torch_op=lambda torch, t: torch.cat([t["a"], t["b"], t["c"]], dim=1),
                     target=TARGET),
                Case(f"swiglu_{tag}", f"""
                    fusion swiglu(x: {dtype}[R, D]) {{
                      a = slice(x, [0, 0], [R, D / 2])
                      b = slice(x, [0, D / 2], [R, 2 * (D / 2)])
                      out = a * sigmoid(a) * b
                      output out
                    }}""", {"R": rows, "D": cols},
                     reference=swiglu_reference(dtype), torch_op=swiglu_torch,
                     target=TARGET, rtol=2 ** -7 if dtype == "bf16" else 1e-6),
            ]
    return made


def parser():
    return common.shapes_parser(__doc__.splitlines()[0], "256x512")


def parse_args(argv=None):
    return common.parse_shapes_args(parser(), argv, SIZES, 4, "cat3's parts")


def main(argv=None):
    args = parse_args(argv)
    return common.main(TITLE, args, common.select(cases(args), args.cases))


if __name__ == "__main__":
    sys.exit(main())
