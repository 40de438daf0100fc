"""The `fuserir` command: check, print and evaluate DSL files from the shell.

    fuserir parse FILE                      check FILE, print its canonical DSL text
    fuserir eval FILE [--size M=64,N=32]    run the reference evaluator on random inputs

Bad input (a missing file, a DSL error, an unknown size name) prints one clear message,
located as file:line:col where it has a place, and exits 1; never a traceback. The inspect
tool's other subcommands (dump, inspect, graph, check, run, bench) grow here as lowering and
code generation land.
"""

import argparse
import json
import sys

import numpy as np

from . import evaluate
from .dsl import parse_file, print_fusion
from .errors import FuserirError
from .ir import extent as ext
from .ir.iterdomain import Split, history

DEFAULT_SIZE = 19          # an odd size with no tile: exercises remainders
DEFAULT_SCALAR = 3         # a named split factor nobody bound


class UsageError(Exception):
    """Bad command-line input (reported like a DSL error: one line, exit 1)."""


def parse_sizes(text):
    """"M=64,N=32" -> {"M": 64, "N": 32}."""
    sizes = {}
    for item in filter(None, (text or "").split(",")):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise UsageError(f"--size: expected NAME=VALUE, got {item!r}")
        try:
            sizes[name] = int(value)
        except ValueError:
            raise UsageError(f"--size: {name} must be an integer, got {value.strip()!r}") \
                from None
        if sizes[name] < 1:
            raise UsageError(f"--size: {name} must be >= 1, got {sizes[name]}")
    return sizes


def default_sizes(fusion):
    """Sizes for every symbol of `fusion`: twice the largest constant tile split off an
    axis of that size plus a remainder, so defaults exercise both full and partial tiles."""
    dims, factors, tiles = set(), set(), {}
    for tv in fusion.inputs:
        for e in tv.shape:
            dims |= ext.symbols(e)
    for tv in fusion.tensors:
        for t in history(tv.loop + tv.logical):
            if isinstance(t, Split):
                factors |= ext.symbols(t.factor)
                if isinstance(t.factor, int):
                    for name in ext.symbols(t.input.extent):
                        tiles[name] = max(tiles.get(name, 1), t.factor)
    sizes = {name: 2 * tiles[name] + 3 if name in tiles else DEFAULT_SIZE for name in dims}
    sizes.update({name: DEFAULT_SCALAR for name in factors - dims})
    return sizes


def random_inputs(fusion, sizes, rng):
    inputs = {}
    for tv in fusion.inputs:
        shape = [ext.evaluate(e, sizes) for e in tv.shape]
        if tv.dtype.is_float:
            array = rng.standard_normal(shape).astype(tv.dtype.numpy)
        elif tv.dtype.is_int:
            array = rng.integers(-8, 8, shape).astype(tv.dtype.numpy)
        else:
            array = rng.integers(0, 2, shape).astype(bool)
        inputs[tv.name] = array
    return inputs


def _fusions(path, name=None):
    parsed = parse_file(path)
    fusions = parsed if isinstance(parsed, dict) else {parsed.name: parsed}
    if name is not None:
        if name not in fusions:
            raise UsageError(f"{path} has no fusion '{name}' (it has: {', '.join(fusions)})")
        return {name: fusions[name]}
    return fusions


def cmd_parse(args):
    fusions = _fusions(args.file)
    print("\n".join(print_fusion(f) for f in fusions.values()), end="")
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
    for name, fusion in _fusions(args.file, args.fusion).items():
        sizes = default_sizes(fusion)
        unknown = set(given) - set(sizes)
        if unknown:
            raise UsageError(f"--size: fusion {name} has no size named "
                             f"{', '.join(sorted(unknown))} (it has: "
                             f"{', '.join(sorted(sizes)) or 'none'})")
        sizes.update(given)
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


def build_parser():
    parser = argparse.ArgumentParser(prog="fuserir", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("parse", help="check a DSL file and print its canonical text")
    p.add_argument("file")
    p.set_defaults(run=cmd_parse)
    e = sub.add_parser("eval", help="evaluate a DSL file's fusions on random inputs")
    e.add_argument("file")
    e.add_argument("--size", help="bind sizes, e.g. M=64,N=32 (defaults exercise edges)")
    e.add_argument("--fusion", help="only this fusion of the file")
    e.add_argument("--seed", type=int, default=0, help="random seed for the inputs")
    e.add_argument("--json", action="store_true", help="print the summary as JSON")
    e.set_defaults(run=cmd_eval)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (FuserirError, UsageError) as error:
        print(f"fuserir: error: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"fuserir: error: cannot read {error.filename}: {error.strerror}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
