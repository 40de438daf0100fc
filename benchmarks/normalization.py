"""Normalizations and losses with automatic schedules against copy bandwidth, torch eager
and torch.compile.

    python3 benchmarks/normalization.py [--quick] [--shapes 8192x4096,32768x1024]
                                        [--dtypes bf16,f32] [--torch-compile] [--repeat 50]
                                        [--cases layer_norm_bf16_8192x4096,...] [--json F]

Cases, each at every R x D of --shapes and in every dtype of --dtypes (unscheduled
fusions written as a user writes them, compiled with codegen.compile(fusion,
backend="cuda")); arithmetic in f32, each output rounded once to its type:
  layer_norm_<dtype>_<R>x<D>           y = (x - mean) * rstd * w + b over the rows of x;
                                       also writes mean and rstd [R, 1] (f32)
  layer_norm_backward_<dtype>_...      dx, dw, db from dy, x, w, mean, rstd
  rms_norm_<dtype>_...                 y = x * rsqrt(mean(x^2) + eps) * w; also rstd
  rms_norm_backward_<dtype>_...        dx, dw from dy, x, w, rstd
  softmax_<dtype>_...                  softmax(x, dim=1)
  cross_entropy_<dtype>_...            the mean over the rows of -log_softmax(x)[label]
Target: at least 80% of the copy bandwidth, the bytes being every input read once and
every output written once; beside it torch eager and, with --torch-compile,
torch.compile of the same op on the same tensors, in the same process. The method
(events, L2 flush, median) is in benchmarks/common.py and docs/perf.md.
"""

import pathlib
import sys

if str(pathlib.Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks import common  # noqa: E402
from benchmarks.common import Case  # noqa: E402
from benchmarks.shape_ops import _rounding  # noqa: E402

TITLE = "fuserir normalization benchmarks"
SIZES = {"shapes": ("8192x4096,32768x1024", "256x512")}
TARGET = ("copy", 0.80)
EPS = 1e-5


def _f32(name, dtype):
    """The DSL for tensor `name` in f32 arithmetic."""
    return name if dtype == "f32" else f"cast({name}, f32)"


def _out(text, dtype):
    return text if dtype == "f32" else f"cast({text}, {dtype})"


# -- the references: f64 arithmetic on the inputs' values, outputs rounded once ------------

def _stats(xp, x):
    x = x.astype(xp.float64)
    mean = x.mean(axis=1, keepdims=True)
    return x, mean, 1 / xp.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + EPS)


def layer_norm_reference(dtype):
    def reference(xp, v):
        x, mean, rstd = _stats(xp, v["x"])
        y = (x - mean) * rstd * v["w"] + v["b"]
        return {"y": _rounding(xp, dtype)(y.astype(xp.float32)), "mean": mean, "rstd": rstd}
    return reference


def layer_norm_backward_reference(dtype):
    def reference(xp, v):
        r = _rounding(xp, dtype)
        dy, x = v["dy"].astype(xp.float64), v["x"].astype(xp.float64)
        xhat = (x - v["mean"]) * v["rstd"]
        g = dy * v["w"]
        dx = v["rstd"] * (g - g.mean(axis=1, keepdims=True)
                          - xhat * (g * xhat).mean(axis=1, keepdims=True))
        return {"dx": r(dx.astype(xp.float32)),
                "dw": r((dy * xhat).sum(axis=0).astype(xp.float32)),
                "db": r(dy.sum(axis=0).astype(xp.float32))}
    return reference


def rms_norm_reference(dtype):
    def reference(xp, v):
        x = v["x"].astype(xp.float64)
        rstd = 1 / xp.sqrt((x * x).mean(axis=1, keepdims=True) + EPS)
        return {"y": _rounding(xp, dtype)((x * rstd * v["w"]).astype(xp.float32)),
                "rstd": rstd}
    return reference


def rms_norm_backward_reference(dtype):
    def reference(xp, v):
        r = _rounding(xp, dtype)
        dy, x = v["dy"].astype(xp.float64), v["x"].astype(xp.float64)
        xhat, g = x * v["rstd"], dy * v["w"]
        dx = v["rstd"] * (g - xhat * (g * xhat).mean(axis=1, keepdims=True))
        return {"dx": r(dx.astype(xp.float32)),
                "dw": r((dy * xhat).sum(axis=0).astype(xp.float32))}
    return reference


def _log_softmax(xp, x):
    x = x.astype(xp.float64)
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))


def softmax_reference(dtype):
    def reference(xp, v):
        return {"p": _rounding(xp, dtype)(xp.exp(_log_softmax(xp, v["x"])).astype(
            xp.float32))}
    return reference


def cross_entropy_reference(xp, v):
    logp = _log_softmax(xp, v["x"])
    picked = xp.take_along_axis(logp, v["labels"].astype(xp.int64)[:, None], axis=1)
    return {"loss": -picked.mean()}


# -- the torch ops timed beside them ----------------------------------------------------------

def layer_norm_torch(torch, t):
    return torch.nn.functional.layer_norm(t["x"], t["x"].shape[1:], t["w"], t["b"], EPS)


def layer_norm_backward_torch(torch, t):
    d = t["x"].shape[1]
    w = t["w"]
    return torch.ops.aten.native_layer_norm_backward(
        t["dy"], t["x"], [d], t["mean"], t["rstd"], w, torch.zeros_like(w),
        [True, True, True])


def rms_norm_torch(torch, t):
    x = t["x"].float()
    return (x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + EPS) * t["w"]).to(t["x"].dtype)


def rms_norm_backward_torch(torch, t):
    dy, x = t["dy"].float(), t["x"].float()
    xhat, g = x * t["rstd"], dy * t["w"]
    dx = t["rstd"] * (g - xhat * (g * xhat).mean(1, keepdim=True))
    return dx.to(t["x"].dtype), (dy * xhat).sum(0).to(t["x"].dtype)


def cross_entropy_torch(torch, t):
    return torch.nn.functional.cross_entropy(t["x"].float(), t["labels"])


# -- the cases ---------------------------------------------------------------------------------

def _cases_at(dtype, rows, cols):
    tag = f"{dtype}_{rows}x{cols}"
    sizes = {"R": rows, "D": cols}
    x, dy, w, b = (_f32(n, dtype) for n in ("x", "dy", "w", "b"))
    # each element within the rounding of its type, or within that of the output's
    # largest value (a sum over thousands of rows cancels to near 0, with the rounding
    # of its terms' size: f32 sums in another order than the f64 reference's)
    rtol = 2 ** -7 if dtype == "bf16" else 1e-5
    common_args = {"target": TARGET, "rtol": rtol, "atol": rtol / 2, "atol_of_max": True}
    row = "[true, false]"
    return [
        Case(f"layer_norm_{tag}", f"""
            fusion layer_norm(x: {dtype}[R, D], w: {dtype}[D], b: {dtype}[D]) {{
              v, mean = var_mean({x}, axes=[1], correction=0, keepdim=true)
              rstd = rsqrt(v + {EPS})
              y = {_out(f"({x} - mean) * rstd * broadcast({w}, {row})"
                        f" + broadcast({b}, {row})", dtype)}
              output y, mean, rstd
            }}""", sizes, reference=layer_norm_reference(dtype), torch_op=layer_norm_torch,
             **common_args),
        Case(f"layer_norm_backward_{tag}", f"""
            fusion layer_norm_backward(dy: {dtype}[R, D], x: {dtype}[R, D], w: {dtype}[D],
                                       mean: f32[R, 1], rstd: f32[R, 1]) {{
              xhat = ({x} - mean) * rstd
              g = {dy} * broadcast({w}, {row})
              dx = {_out("rstd * (g - mean(g, axes=[1], keepdim=true)"
                         " - xhat * mean(g * xhat, axes=[1], keepdim=true))", dtype)}
              dw = {_out(f"sum({dy} * xhat, axes=[0])", dtype)}
              db = {_out(f"sum({dy}, axes=[0])", dtype)}
              output dx, dw, db
            }}""", sizes, reference=layer_norm_backward_reference(dtype),
             torch_op=layer_norm_backward_torch, **common_args),
        Case(f"rms_norm_{tag}", f"""
            fusion rms_norm(x: {dtype}[R, D], w: {dtype}[D]) {{
              rstd = rsqrt(mean({x} * {x}, axes=[1], keepdim=true) + {EPS})
              y = {_out(f"{x} * rstd * broadcast({w}, {row})", dtype)}
              output y, rstd
            }}""", sizes, reference=rms_norm_reference(dtype), torch_op=rms_norm_torch,
             **common_args),
        Case(f"rms_norm_backward_{tag}", f"""
            fusion rms_norm_backward(dy: {dtype}[R, D], x: {dtype}[R, D], w: {dtype}[D],
                                     rstd: f32[R, 1]) {{
              xhat = {x} * rstd
              g = {dy} * broadcast({w}, {row})
              dx = {_out("rstd * (g - xhat * mean(g * xhat, axes=[1], keepdim=true))", dtype)}
              dw = {_out(f"sum({dy} * xhat, axes=[0])", dtype)}
              output dx, dw
            }}""", sizes, reference=rms_norm_backward_reference(dtype),
             torch_op=rms_norm_backward_torch, **common_args),
        Case(f"softmax_{tag}", f"""
            fusion softmax(x: {dtype}[R, D]) {{
              p = softmax(x, dim=1)
              output p
            }}""", sizes, reference=softmax_reference(dtype),
             torch_op=lambda torch, t: torch.softmax(t["x"], dim=1), **common_args),
        Case(f"cross_entropy_{tag}", f"""
            fusion cross_entropy(x: {dtype}[R, D], labels: i64[R]) {{
              picked = axis_index(x, 1) == broadcast(labels, [false, true])
              loss = mean(-sum(where(picked, log_softmax({x}, dim=1), 0.0), axes=[1]),
                          axes=[0])
              output loss
            }}""", sizes, reference=cross_entropy_reference, torch_op=cross_entropy_torch,
             **common_args),
    ]


def cases(args):
    dtypes, shapes = common.shape_points(args)
    return [case for dtype in dtypes for rows, cols in shapes
            for case in _cases_at(dtype, rows, cols)]


def parser():
    return common.shapes_parser(__doc__.splitlines()[0], "256x512")


def parse_args(argv=None):
    return common.parse_shapes_args(parser(), argv, SIZES)


def main(argv=None):
    args = parse_args(argv)
    return common.main(TITLE, args, common.select(cases(args), args.cases))


if __name__ == "__main__":
    sys.exit(main())
