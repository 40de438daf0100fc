"""The first call of a process: how long a PyTorch caller waits for a new kernel.

    python3 benchmarks/first_call.py [--repeat 3] [--json]

Cases (unscheduled fusions, scheduled automatically for the sizes of their first call):
* `matmul`: out = f16(A^T B), NT 1024x2048x4096 f16;
* `softmax`: out = bf16(softmax(x)) over the last axis of [8192, 4096] bf16.

Each measurement is a fresh Python process. The clock starts after its imports (torch,
CuPy, fuserir, and the modules fuserir imports on their first use: lark for the DSL, the
driver, lowering and codegen for a compile; their import time is printed apart) and
after a CUDA context exists; it covers
parsing the fusion's text, `fuserir.compile` and the first call `exe(a, b)` with torch
tensors, until the output is ready (torch.cuda.synchronize). "cold": the process has an
empty cache directory (FUSERIR_CACHE_DIR: no plans, proofs or cubins on disk); "warm": a
second process on the cache the cold one left. The result is checked against torch.

The breakdown times the steps inside the call by wrapping them in the child process:
schedule (the automatic schedulers), lowering (the passes but sync insertion and the
verifier), syncs+proof (the insert_syncs pass, which proves what it places, and the
verify_hazards pass), NVRTC, plan cache (loading a plan from disk), load (cuModuleLoad),
and the rest (parsing, binding the inputs, launch checks, tensor maps, the launch and
the kernel itself). Medians of --repeat processes per row.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

CASES = {
    "matmul": ("fusion mm(A: f16[K, M], B: f16[K, N]) {\n"
               "  acc = matmul(A, B, layout=NT)\n  out = cast(acc, f16)\n  output out\n}\n"),
    "softmax": ("fusion softmax(x: bf16[M, N]) {\n"
                "  m = max(x, axes=[1])\n  e = exp(x - broadcast(m, [false, true]))\n"
                "  s = sum(e, axes=[1])\n  out = cast(e / broadcast(s, [false, true]), bf16)\n"
                "  output out\n}\n"),
}
STEPS = ("schedule", "lowering", "syncs+proof", "NVRTC", "plan cache", "load", "rest")

CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
import torch
import cupy
import fuserir
started = time.perf_counter()
import lark, driver, driver.plans, driver.segmentation, lowering.context
import codegen.launch, codegen.nvrtc
lazy_imports = time.perf_counter() - started
torch.cuda.init()
torch.ones(1, device="cuda").sum().item()
cupy.cuda.runtime.getDeviceCount()
case = {case!r}
if case == "matmul":
    a = torch.randn(4096, 1024, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 2048, device="cuda", dtype=torch.float16)
    args = (a, b)
else:
    args = (torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16),)
torch.cuda.synchronize()

spent = dict.fromkeys({steps!r}, 0.0)
depth = []


def timed(step, fn):
    def wrapper(*a, **k):
        started = time.perf_counter()
        depth.append(step)
        try:
            return fn(*a, **k)
        finally:
            depth.pop()
            took = time.perf_counter() - started
            spent[step] += took
            if depth:                     # an inner step: not its caller's own time
                spent[depth[-1]] -= took
    return wrapper


seg = driver.segmentation
seg.schedule_auto = timed("schedule", seg.schedule_auto)
run_pass = lowering.context.LoweringContext.run_pass


def by_pass(self, record, kernel):
    step = "syncs+proof" if record.name in ("insert_syncs", "verify_hazards") else "lowering"
    return timed(step, run_pass)(self, record, kernel)


lowering.context.LoweringContext.run_pass = by_pass
codegen.nvrtc._compile = timed("NVRTC", codegen.nvrtc._compile)
driver.plans.PlanCache.load = timed("plan cache", driver.plans.PlanCache.load)
codegen.launch.load_function = timed("load", codegen.launch.load_function)

started = time.perf_counter()
exe = fuserir.compile(fuserir.parse({text!r}))
out = exe(*args)
torch.cuda.synchronize()
total = time.perf_counter() - started
spent["rest"] = total - sum(spent.values())
if case == "matmul":
    want = (a.float().t() @ b.float())
else:
    want = torch.softmax(args[0].float(), dim=-1)
error = ((out.float() - want).abs().max() / want.abs().max()).item()
print(json.dumps({{"total": total, "steps": spent, "error": error,
                  "plan_hits": driver.plans.stats["hits"], "lazy_imports": lazy_imports}}))
"""


def measure(case, cache_dir):
    """One fresh process's first call of `case` with `cache_dir` as its cache."""
    env = {**os.environ, "FUSERIR_CACHE_DIR": str(cache_dir)}
    code = CHILD.format(root=str(ROOT), case=case, steps=STEPS, text=CASES[case])
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"first_call: the {case} process failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    rows = []
    for case in args.cases.split(","):
        runs = {"cold": [], "warm": []}
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="fuserir-first-call-") as cache:
                runs["cold"].append(measure(case, cache))
                runs["warm"].append(measure(case, cache))
        for state, results in runs.items():
            worst = max(r["error"] for r in results)
            if worst > 2e-2:
                raise SystemExit(f"first_call: {case} {state}: relative error {worst:.3g}")
            row = {"case": case, "state": state,
                   "total": statistics.median(r["total"] for r in results),
                   "lazy_imports": statistics.median(r["lazy_imports"] for r in results),
                   "plan_hits": min(r["plan_hits"] for r in results), "error": worst}
            row.update({s: statistics.median(r["steps"][s] for r in results) for s in STEPS})
            rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print("| case | caches | first call | " + " | ".join(STEPS) + " |")
    print("|---|---|---|" + "---|" * len(STEPS))
    for r in rows:
        print(f"| {r['case']} | {r['state']} | {r['total'] * 1e3:.0f} ms | " +
              " | ".join(f"{r[s] * 1e3:.0f}" for s in STEPS) + " |")
    print(f"(ms, medians of {args.repeat} processes; the steps are in ms too)")
    imports = statistics.median(r["lazy_imports"] for r in rows)
    print(f"before the clock, the modules fuserir imports on first use (lark, driver, "
          f"lowering, codegen): {imports * 1e3:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
