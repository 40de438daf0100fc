"""Batched matmuls, attention scores and linear layers through the user's path against
cuBLAS (torch), torch eager and torch.compile.

    python3 benchmarks/batched_matmul.py [--quick] [--dtypes bf16,f16] [--torch-compile]
                                         [--repeat 50] [--cases bmm_bf16,...] [--json F]

Cases, in every dtype of --dtypes (unscheduled fusions as a user writes them, compiled
with codegen.compile(fusion, backend="cuda"); f32 accumulation, each output rounded once):
  bmm_<dtype>                c = q @ k^T per batch: q, k [32, 2048, 128] (attention's
                             scores over 32 heads; the matmul of layout TN), against
                             torch.bmm (cuBLAS): target at least 0.9x its speed
  attention_scores_<dtype>   softmax(q @ k^T * scale) with the future masked out
                             (examples/attention_scores.fz), against torch eager
  linear_<dtype>             y = x @ w^T + b: x [8192, 4096], w [4096, 4096], against
                             torch.nn.functional.linear (cuBLAS): target at least 0.9x
--quick: 4 x 256 x 256 x 64 and 256 x 512 x 512. The method (events, L2 flush, median)
is in benchmarks/common.py and docs/perf.md.
"""

import pathlib
import sys

if str(pathlib.Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks import common  # noqa: E402
from benchmarks.common import Case  # noqa: E402

TITLE = "fuserir batched matmul benchmarks"
AT_CUBLAS_SPEED = ("torch", 1 / 0.9)     # fuserir's time at most 1/0.9 of cuBLAS's
EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "attention_scores.fz"


def _scores(xp, v):
    q, k = v["q"].astype(xp.float64), v["k"].astype(xp.float64)
    return q @ xp.swapaxes(k, 1, 2)


def _probabilities(xp, v, dtype):
    s = _scores(xp, v) * float(v["scale"])
    s = common.round_bf16(xp, s).astype(xp.float64) if dtype == "bf16" else \
        s.astype(xp.float16).astype(xp.float64)        # the scores rounded once
    n = s.shape[-1]
    future = xp.triu(xp.ones((n, n), dtype=bool), 1)[None]
    s = xp.where(future, -xp.inf, s)
    e = xp.exp(s - s.max(axis=2, keepdims=True))
    return e / e.sum(axis=2, keepdims=True)


def _torch_probabilities(torch, t):
    s = torch.bmm(t["q"], t["k"].transpose(1, 2)).float() * t["scale"]
    n = s.shape[-1]
    future = torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1)
    return torch.softmax(s.masked_fill(future, float("-inf")), dim=2).to(t["q"].dtype)


def _linear(xp, v):
    return v["x"].astype(xp.float64) @ v["w"].astype(xp.float64).T + v["b"]


def cases(args):
    heads, seq, dim = (4, 256, 64) if args.quick else (32, 2048, 128)
    rows, features = (256, 512) if args.quick else (8192, 4096)
    found = []
    for dtype in args.dtypes.split(","):
        scores = {"BH": heads, "S": seq, "D": dim}
        found += [
            Case(f"bmm_{dtype}", f"""
                fusion bmm(q: {dtype}[BH, S, D], k: {dtype}[BH, S, D]) {{
                  c = cast(bmm(q, k, layout=TN), {dtype})
                  output c
                }}""", scores, reference=lambda xp, v: {"c": _scores(xp, v)},
                 torch_op=lambda torch, t: torch.bmm(t["q"], t["k"].transpose(1, 2)),
                 target=AT_CUBLAS_SPEED, rtol=2 ** -7, atol=0.05),
            Case(f"attention_scores_{dtype}",
                 EXAMPLE.read_text().replace("bf16", dtype), scores,
                 reference=lambda xp, v, dtype=dtype: {"p": _probabilities(xp, v, dtype)},
                 torch_op=_torch_probabilities, rtol=2 ** -7, atol=2 ** -9),
            Case(f"linear_{dtype}", f"""
                fusion linear(x: {dtype}[M, K], w: {dtype}[N, K], b: f32[N]) {{
                  y = linear(x, w, b)
                  output y
                }}""", {"M": rows, "N": features, "K": features},
                 reference=lambda xp, v: {"y": _linear(xp, v)},
                 torch_op=lambda torch, t: torch.nn.functional.linear(
                     t["x"], t["w"], t["b"].to(t["x"].dtype)),
                 target=AT_CUBLAS_SPEED, rtol=2 ** -7, atol=0.25),
        ]
    return found


def parse_args(argv=None):
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--dtypes", default="bf16,f16")
    return common.parse_args(p, argv)


def main(argv=None):
    args = parse_args(argv)
    return common.main(TITLE, args, common.select(cases(args), args.cases))


if __name__ == "__main__":
    sys.exit(main())
