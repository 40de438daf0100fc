"""`fuserir dump`: the IR of one fusion at any stage, and the pass list."""

import json
import sys

from driver import stages
from driver.proofs import PROOFS
from .common import (UsageError, add_sync_arguments, build, normalize_arch, one_fusion,
                     parse_sizes, sizes_for, sync_options)


def add_parser(sub):
    p = sub.add_parser(
        "dump", help="print the IR at a stage: fusion, scheduled, kernel, cuda, ptx",
        description="Print one fusion's IR at a stage. kernel IR shows every barrier with "
                    "its id and reasons; --after shows it after any pass.")
    p.add_argument("file", nargs="?", help="a DSL file (.fz)")
    p.add_argument("--stage", choices=stages.STAGES, default="kernel",
                   help="what to print (default: kernel)")
    p.add_argument("--after", metavar="PASS",
                   help="with --stage kernel: the kernel IR after this pass (default: the "
                        "last); see --list-passes")
    p.add_argument("--list-passes", action="store_true",
                   help="list the lowering passes in order and exit")
    p.add_argument("--fusion", metavar="NAME", help="the fusion to use (a file of several "
                   "needs it)")
    p.add_argument("--arch", help="with --stage ptx: the target, e.g. sm_90 (default: this "
                   "machine's GPU, else sm_90)")
    p.add_argument("--json", action="store_true", help="with --list-passes: print JSON")
    p.add_argument("--size", metavar="NAME=VALUE,...",
                   help="show the kernels planned for these sizes, e.g. M=64,N=32 (an "
                        "unscheduled fusion: the automatic schedule chosen at them; the "
                        "sizes not given take check's defaults)")
    add_sync_arguments(p)
    p.set_defaults(run=cmd_dump)


def pass_table():
    """[(number or '-', name, one-line summary, note)] of the pipeline in order (from the
    passes' records, lowering.contract.Pass)."""
    from lowering import pipeline
    rows, number = [], 0
    for p in pipeline.PIPELINE:
        if p.on_request:
            rows.append(("-", p.name, p.summary, "only with --drop ID,..."))
            continue
        number += 1
        note = "optional: --without " + p.name if p.optional else ""
        rows.append((str(number), p.name, p.summary, note))
    return rows


def format_pass_table(rows, notes=True):
    """The lines `dump --list-passes` prints for `rows` (pass_table's)."""
    width = max(len(r[1]) for r in rows)
    return [f"{number:>2}  {name:<{width}}  {summary}"
            + (f"  ({note})" if note and notes else "")
            for number, name, summary, note in rows]


def cmd_dump(args):
    if args.list_passes:
        return list_passes(args)
    if args.file is None:
        raise UsageError("dump: FILE is required (or --list-passes)")
    if args.json:
        raise UsageError("dump: --json goes with --list-passes; dumps are text")
    from lowering.errors import LoweringError
    from lowering.pipeline import PASS_NAMES, check_pass, lower
    if args.after is not None:
        if args.stage != "kernel":
            raise UsageError(f"--after goes with --stage kernel, not --stage {args.stage}")
        try:
            check_pass(args.after)
        except LoweringError as error:
            raise UsageError(f"--after: {error}") from None
    if args.arch is not None and args.stage != "ptx":
        raise UsageError(f"--arch goes with --stage ptx, not --stage {args.stage}")
    options = sync_options(args)
    fusion = one_fusion(args.file, args.fusion)
    arch = normalize_arch(args.arch) if args.stage == "ptx" else None
    if args.stage == "fusion":
        text = stages.fusion_text(fusion)
    elif args.stage == "scheduled" and fusion.trace:
        text = stages.scheduled_text(fusion)
    elif args.after in ("inline_defaults", "validate") and fusion.trace:
        if args.after == "validate":
            lower(fusion, stop_after="validate",      # what validate refuses, it says
                  instrument=stages.env_instrument(PASS_NAMES))
        text = _before_kernel(fusion, args.after)
    else:
        sizes = sizes_for(fusion, parse_sizes(args.size)) if args.size else None
        _, units, refused = build(fusion, options, sizes=sizes)
        if refused is not None:
            print(f"fuserir: note: the verifier refuses kernel {refused.kernel_name} "
                  f"({len(refused.hazards)} hazard(s)); it is shown as lowered without "
                  "verify_hazards. `fuserir check` lists the hazards.", file=sys.stderr)
        comment = "//" if args.stage in ("cuda", "ptx") else "#"
        parts = []
        for unit in units:
            text = _unit_text(unit, args.stage, args.after or PASS_NAMES[-1], options, arch)
            if args.stage == "scheduled":
                text = f"# automatic schedule ({fusion.name} has none of its own)\n" + text
            if unit.count > 1:
                text = f"{comment} ===== {unit.title} =====\n" + text
            parts.append(text)
        text = "\n".join(parts)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def _unit_text(unit, stage, after, options, arch):
    from lowering.pipeline import PASS_NAMES, lower
    if stage == "scheduled":
        return stages.scheduled_text(unit.fusion)
    if stage == "cuda":
        return unit.compiled.source
    if stage == "ptx":
        return stages.ptx_text(unit.compiled.source, unit.compiled.name, arch)
    if after == PASS_NAMES[-1]:
        return stages.kernel_text(unit.kernel)
    if after in ("inline_defaults", "validate"):
        return _before_kernel(unit.fusion, after)
    _, dumps = lower(unit.fusion, dump_after=[after], stop_after=after, verify=False,
                     instrument=stages.env_instrument(PASS_NAMES), proofs=PROOFS, **options)
    return dumps[after]


def _before_kernel(fusion, after):
    """Before loop_nests there is no kernel IR: the tensors as lowering placed them."""
    placed = stages.placed_by_lowering(fusion)
    lines = [f"# no kernel IR before loop_nests: {fusion.name}'s tensors after pass {after}"]
    lines += [t.describe() for t in placed.tensors]
    return "\n".join(lines) + "\n"


def list_passes(args):
    if args.file is not None:
        raise UsageError("dump --list-passes takes no FILE")
    rows = pass_table()
    if args.json:
        print(json.dumps([{"number": int(n) if n != "-" else None, "name": name,
                           "summary": summary, "note": note}
                          for n, name, summary, note in rows], indent=2))
        return 0
    print("\n".join(format_pass_table(rows)))
    return 0
