"""`fuserir precompile`: build a file's kernels ahead of the first calls, into the plan
cache, so that a later process's first call at those sizes loads them instead of
scheduling, lowering, proving and compiling (Executable.precompile)."""

import json
import time

from .common import UsageError, fusions, gpu, parse_sizes


def add_parser(sub):
    p = sub.add_parser("precompile", help="build the kernels of given sizes into the cache",
                       description="Build, for each --size, the kernels a call at those "
                                   "sizes takes (an unscheduled fusion's automatic schedule "
                                   "for them) and keep them in the plan cache, where later "
                                   "processes load them.")
    p.add_argument("file", help="a DSL file (.fz)")
    p.add_argument("--size", metavar="NAME=VALUE,...", action="append", default=[],
                   help="every size of the fusion, e.g. M=1024,N=2048,K=4096; repeat "
                        "for several size classes (an explicitly scheduled fusion needs "
                        "none: its kernels do not depend on the sizes)")
    p.add_argument("--fusion", metavar="NAME", help="only this fusion of the file")
    p.add_argument("--backend", choices=("cuda", "interp"), default="cuda",
                   help="the backend to build for (default cuda: NVRTC compiles without "
                        "a GPU, for the GPU present or sm_90)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=cmd_precompile)


def cmd_precompile(args):
    import driver
    sizes = [parse_sizes(text) for text in args.size]
    report = []
    for name, fusion in fusions(args.file, args.fusion).items():
        started = time.perf_counter()
        exe = driver.compile(fusion, backend=args.backend)
        if fusion.trace:
            built = [(None, exe.kernels)]
        elif not sizes:
            raise UsageError(f"fusion {name} has no schedule: its kernels depend on the "
                             f"sizes; give them with --size NAME=VALUE,...")
        else:
            built = list(zip(sizes, exe.precompile(*sizes)))
        report.append({"fusion": name, "seconds": round(time.perf_counter() - started, 3),
                       "plans": [{"sizes": s, "kernels": [k.name for k in kernels]}
                                 for s, kernels in built]})
    if args.json:
        print(json.dumps({"backend": args.backend, "fusions": report}, indent=2))
        return 0
    target = gpu()[1] if args.backend == "cuda" and gpu()[0] else args.backend
    for entry in report:
        print(f"{entry['fusion']}: built in {entry['seconds']:.2f} s for {target}")
        for plan in entry["plans"]:
            at = ("any sizes (explicit schedule)" if plan["sizes"] is None else
                  ", ".join(f"{k}={v}" for k, v in sorted(plan["sizes"].items())))
            print(f"  {at}: {', '.join(plan['kernels'])}")
    return 0
