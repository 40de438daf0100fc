"""`fuserir check`: the static verifier and the interpreter's race detector on one fusion.

Compiles for the interpreter with verify=True and reports the verifier's hazards
(HazardError); then, also when the verifier refuses, compiles with verify=False and runs
the interpreter at the chosen sizes on random integer-valued inputs, reporting every race
it observes (RaceError) and comparing the outputs with the reference evaluator. Exit 1 when
anything is found. `--without insert_syncs` and `--drop sync1,...` show what a pass or a
single barrier prevents; `--blocks` runs only some blocks (for big sizes).
"""

import json

import numpy as np

from .. import evaluate
from .common import (UsageError, add_file_arguments, add_sync_arguments, build, format_hazard,
                     format_sizes, hazard_dict, kernel_scalars, named_scalars, one_fusion,
                     parse_sizes, random_inputs, shared_ranges, sizes_for, sync_options,
                     with_plan_scalars)


def add_parser(sub):
    p = sub.add_parser("check", help="run the hazard verifier and the interpreter's race "
                                     "detector; exit 1 on any hazard",
                       description="Report every hazard the static verifier and the "
                                   "interpreter's race detector find: shared memory, the "
                                   "async protocol, global memory between blocks.")
    add_file_arguments(p)
    add_sync_arguments(p)
    p.add_argument("--blocks", metavar="X,Y,Z;...",
                   help="interpret only these blocks, e.g. '0,0,0;1,0,0' (default: all)")
    p.add_argument("--seed", type=int, default=0,
                   help="random seed for the inputs and for the random interleaving of a "
                        "warp-specialized kernel's roles")
    p.set_defaults(run=cmd_check)


def parse_blocks(text, grids):
    """"0,0,0;1,0" -> [(0, 0, 0), (1, 0, 0)], each inside every kernel's grid
    ({kernel name: grid})."""
    blocks = []
    for item in filter(None, (part.strip() for part in text.split(";"))):
        try:
            coords = tuple(int(v) for v in item.split(","))
        except ValueError:
            raise UsageError(f"--blocks: expected X,Y,Z;X,Y,Z;..., got {item!r}") from None
        if not 1 <= len(coords) <= 3:
            raise UsageError(f"--blocks: a block has 1 to 3 coordinates, got {item!r}")
        coords += (0,) * (3 - len(coords))
        for name, grid in grids.items():
            if any(not 0 <= c < g for c, g in zip(coords, grid)):
                what = f" of kernel {name}" if len(grids) > 1 else ""
                raise UsageError(f"--blocks: block {coords} is outside the grid "
                                 f"{tuple(grid)}{what}")
        blocks.append(coords)
    if not blocks:
        raise UsageError("--blocks: no block given")
    return blocks


def cmd_check(args):
    from codegen.errors import RaceError
    from codegen.launch import launch_config

    fusion = one_fusion(args.file, args.fusion)
    sizes = sizes_for(fusion, parse_sizes(args.size))
    options = sync_options(args)

    verified = "verify_hazards" not in options["disable_passes"]
    exe, units, refused = build(fusion, options, sizes=sizes)
    at = with_plan_scalars(exe, sizes)      # what the kernels take (an automatic split-K)
    verifier = refused.hazards if refused is not None else []
    grids = {}
    for unit in units:
        try:
            grids[unit.kernel.name] = launch_config(unit.kernel,
                                                    kernel_scalars(unit.kernel, at, unit.fusion))[0]
        except (ValueError, KeyError) as error:
            raise UsageError(f"kernel {unit.kernel.name}: launch configuration at "
                             f"{format_sizes(sizes)}: {error}") from None
    blocks = parse_blocks(args.blocks, grids) if args.blocks else None
    # The verifier names no bytes: each hazard's buffers, whole, in the refused kernel.
    ranges = {}
    for unit in units:
        if refused is None or unit.kernel.name == refused.kernel_name:
            scalars = kernel_scalars(unit.kernel, at, unit.fusion)
            for stmt, start, end in shared_ranges(unit.kernel, scalars):
                ranges.setdefault(stmt.buffer.name, (start, end))

    rng = np.random.default_rng(args.seed)
    inputs = random_inputs(fusion, sizes, rng, integer_valued=True)
    interp, outputs = [], None
    try:
        outputs = exe.run({**inputs, **named_scalars(fusion, sizes)}, blocks=blocks,
                          interleavings=(args.seed,))
    except RaceError as race:
        interp = race.hazards
    comparison = _compare(fusion, inputs, sizes, outputs, blocks) if outputs else None

    total = sum(int(np.prod(g)) for g in grids.values())
    n_blocks = len(blocks) * len(grids) if blocks else total
    report = {
        "fusion": fusion.name, "sizes": sizes,
        "options": {"without": list(options["disable_passes"]),
                    "drop": list(options["drop_syncs"]), "blocks": blocks},
        "verifier": {"ran": verified,
                     "hazards": [hazard_dict(h, "verifier", ranges) for h in verifier]},
        "interpreter": {"blocks": n_blocks, "of_blocks": total, "kernels": len(units),
                        "grids": {k: list(g) for k, g in grids.items()}, "seed": args.seed,
                        "hazards": [hazard_dict(h, "interpreter") for h in interp],
                        "outputs": comparison},
    }
    mismatched = [k for k, v in (comparison or {}).items() if v["mismatches"]]
    report["hazards"] = len(verifier) + len(interp)
    report["ok"] = report["hazards"] == 0 and not mismatched
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(render(report)))
    return 0 if report["ok"] else 1


def _compare(fusion, inputs, sizes, outputs, blocks):
    """Per output: elements compared and how many differ from the reference (exactly, on
    integer-valued inputs, up to transcendental rounding). With --blocks only the elements
    the chosen blocks wrote (those no longer poisoned) are compared."""
    from .run import compare_outputs
    reference = evaluate(fusion, {**inputs, **sizes})
    return compare_outputs(fusion, reference, outputs, only_written=blocks is not None)


def render(report):
    opts = report["options"]
    what = []
    if opts["without"]:
        what.append(f"without {', '.join(opts['without'])}")
    if opts["drop"]:
        what.append(f"dropped {', '.join(opts['drop'])}")
    lines = [f"check {report['fusion']} at {format_sizes(report['sizes'])}"
             + (f" ({'; '.join(what)})" if what else "")]
    v = report["verifier"]
    if not v["ran"]:
        lines.append("verifier: not run (--without verify_hazards)")
    elif v["hazards"]:
        lines.append(f"verifier (pass verify_hazards) refuses the kernel: "
                     f"{len(v['hazards'])} hazard(s)")
        for i, h in enumerate(v["hazards"], 1):
            lines += format_hazard(i, h)
    else:
        lines.append("verifier (pass verify_hazards): no hazards")
    it = report["interpreter"]
    blocks = (f"{it['blocks']} of {it['of_blocks']} block(s)"
              if opts["blocks"] else f"all {it['blocks']} block(s)")
    if it["kernels"] > 1:
        blocks += f" of {it['kernels']} kernels"
    where = f"interpreter ({blocks}, integer-valued inputs, seed {it['seed']})"
    if it["hazards"]:
        lines.append(f"{where}: {len(it['hazards'])} hazard(s)")
        for i, h in enumerate(it["hazards"], 1):
            lines += format_hazard(i, h)
        lines.append("  (outputs not compared: the run raced)")
    else:
        lines.append(f"{where}: no hazards")
        for name, c in (it["outputs"] or {}).items():
            state = ("equal to the reference" if not c["mismatches"]
                     else f"{c['mismatches']} of {c['compared']} element(s) differ from the "
                          "reference")
            lines.append(f"  output {name}: {c['compared']} element(s) compared, {state} "
                         f"(max abs error {c['max_abs_error']:.3g})")
    if report["hazards"]:
        lines.append(f"{report['hazards']} hazard(s)")
    elif report["ok"]:
        lines.append("no hazards")
    else:
        lines.append("no hazards, but outputs differ from the reference")
    return lines
