"""`fuserir parse` and `fuserir eval`: check and print a DSL file, evaluate its fusions."""

import json

import numpy as np

from .. import evaluate
from ..dsl import print_fusion
from .common import fusions, parse_sizes, random_inputs, sizes_for


def add_parsers(sub):
    p = sub.add_parser("parse", help="check a DSL file and print its canonical text",
                       description="Check FILE and print its canonical DSL text.")
    p.add_argument("file", help="a DSL file (.fz)")
    p.set_defaults(run=cmd_parse)
    e = sub.add_parser("eval", help="evaluate a DSL file's fusions on random inputs",
                       description="Evaluate each fusion of FILE with the numpy reference "
                                   "on random inputs and summarise every output.")
    e.add_argument("file", help="a DSL file (.fz)")
    e.add_argument("--size", metavar="NAME=VALUE,...",
                   help="bind sizes, e.g. M=64,N=32 (defaults exercise edges)")
    e.add_argument("--fusion", metavar="NAME", help="only this fusion of the file")
    e.add_argument("--seed", type=int, default=0, help="random seed for the inputs")
    e.add_argument("--json", action="store_true", help="print the summary as JSON")
    e.set_defaults(run=cmd_eval)


def cmd_parse(args):
    found = fusions(args.file)
    print("\n".join(print_fusion(f) for f in found.values()), end="")
    return 0


def _summary(array):
    values = array.astype(np.float64)
    return {"dtype": str(array.dtype), "shape": list(array.shape),
            "min": float(values.min()) if values.size else None,
            "max": float(values.max()) if values.size else None,
            "mean": float(values.mean()) if values.size else None}


def cmd_eval(args):
    given = parse_sizes(args.size)
    rng = np.random.default_rng(args.seed)
    report = {}
    for name, fusion in fusions(args.file, args.fusion).items():
        sizes = sizes_for(fusion, given)
        outputs = evaluate(fusion, {**random_inputs(fusion, sizes, rng), **sizes})
        report[name] = {"sizes": sizes,
                        "outputs": {k: _summary(v) for k, v in outputs.items()}}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for name, entry in report.items():
        sizes = ", ".join(f"{k}={v}" for k, v in sorted(entry["sizes"].items()))
        print(f"{name}: {sizes}")
        for out, s in entry["outputs"].items():
            dims = ", ".join(str(d) for d in s["shape"])
            print(f"  {out}: {s['dtype']}[{dims}]  min {s['min']:.6g}  max {s['max']:.6g}  "
                  f"mean {s['mean']:.6g}")
    return 0
