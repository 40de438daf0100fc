"""Plan variants of the matmul heuristic timed side by side on the GPU: for shapes whose
rows TMA cannot read, the Hopper path's producer copies at 2, 3 and 4 stages against the
mma.sync path; for TMA shapes, the output from registers against staged through shared
memory. Each variant is checked against float64 (rtol 2^-10, atol 1e-5 K) and timed
through run() (median, cold L2), cuBLAS in the same process. What docs/perf.md's
predicted-and-measured entries for those two choices ran.

    python3 benchmarks/matmul_variants.py
"""

import argparse
import concurrent.futures
import json
import pathlib
import sys
import time
from dataclasses import replace

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

COPY_SHAPES = [(4096, 4096, 4100), (4096, 4096, 4097), (1024, 2048, 4100)]
EPILOGUE_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (1024, 2048, 4096)]
STAGES = (2, 3, 4)


def copies_params(m, n, k, stages):
    """The Hopper plan (tiles and split-K as for rows TMA reads, K rounded down to a
    multiple of 8) with the producer's copies at `stages` and the output from registers;
    or the mma.sync path's plan (stages "mma")."""
    from fuserir.device import H200
    from fuserir.scheduler.matmul_heuristic import matmul_heuristic
    if stages == "mma":
        return matmul_heuristic(m, n, k, layout="TT", device=H200.with_(cc=(8, 0)))
    return replace(matmul_heuristic(m, n, k // 8 * 8, layout="TT"), stages=stages,
                   async_gmem_load_operands=False, use_smem_epilogue=False,
                   promote_prologue_smem_reuse=False)


def fusion(params):
    from benchmarks.matmul import layout_fusion
    from fuserir.scheduler import schedule_matmul
    f = layout_fusion("TT")
    schedule_matmul(f, params)
    return f


def _prove(job):
    """(In a worker process.) Lower one copies variant with its narrowed copies, so that
    its proof is on disk (driver.proofs) before the timed run compiles it."""
    (m, n, k), stages = job
    from driver.proofs import PROOFS
    from lowering.pipeline import lower
    lower(fusion(copies_params(m, n, k, stages)), vector_caps={"A": 8 if k % 4 == 0 else 2},
          proofs=PROOFS)
    return job


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args(argv)
    args.no_torch = False
    from benchmarks import common
    common.require_gpu()
    with concurrent.futures.ProcessPoolExecutor() as pool:
        list(pool.map(_prove, [(s, st) for s in COPY_SHAPES for st in STAGES]))
    import cupy as cp
    import codegen
    from benchmarks.matmul import mismatches
    from fuserir.scheduler.matmul_heuristic import matmul_heuristic
    bench = common.Bench(args)
    torch = bench.torch
    rng = cp.random.default_rng(0)

    def row(m, n, k, variants):
        a = rng.uniform(-1, 1, (m, k), dtype=cp.float32).astype(cp.float16)
        b = rng.uniform(-1, 1, (k, n), dtype=cp.float32).astype(cp.float16)
        ref = a.astype(cp.float64) @ b.astype(cp.float64)
        r = {"shape": f"{m}x{n}x{k}"}
        inputs = {"A": a, "B": b}
        for name, params in variants:
            exe = codegen.compile(fusion(params), backend="cuda")
            bad = mismatches(cp, exe.run(inputs)["out"], ref, k)
            r[name] = {"us": round(bench.time(lambda: exe.run(inputs))["median_us"], 1),
                       "mismatches": bad, "caps": exe.kernels_for(inputs)[0].caps}
        if torch is not None:
            ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
            r["cublas_us"] = round(bench.time(lambda: torch.matmul(ta, tb))["median_us"], 1)
        print(json.dumps(r), flush=True)
        return r

    rows = [row(m, n, k, [(f"copies, {s} stages", copies_params(m, n, k, s))
                          for s in STAGES] + [("mma.sync", copies_params(m, n, k, "mma"))])
            for m, n, k in COPY_SHAPES]
    for m, n, k in EPILOGUE_SHAPES:
        plan = matmul_heuristic(m, n, k, layout="TT")
        rows.append(row(m, n, k, [
            ("registers", replace(plan, use_smem_epilogue=False,
                                  promote_prologue_smem_reuse=False)),
            ("staged", replace(plan, use_smem_epilogue=True,
                               promote_prologue_smem_reuse=True))]))
    bad = [r for r in rows for v in r.values() if isinstance(v, dict) and v["mismatches"]]
    return 1 if bad else 0


if __name__ == "__main__":
    started = time.perf_counter()
    code = main()
    print(f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
    sys.exit(code)
