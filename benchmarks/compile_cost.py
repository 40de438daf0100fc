"""Compile cost of the seed kernel: Python time of lowering + CUDA emission, of NVRTC,
and of a second compile of the same fusion (the executable cache); and with --first-matmul
the cold cost of an unscheduled matmul's first plan (compile, then the plan of NT
1024x2048x4096: scheduling, lowering, the async protocol's proof, NVRTC), each repetition
in a fresh process with an empty cache directory. No GPU needed.

    python3 benchmarks/compile_cost.py [--repeat 5] [--first-matmul]

Each figure is the median of --repeat fresh processes' worth of work done in this one:
every repetition parses examples/seed_matmul.fz again and clears the in-memory caches
(compile cache and NVRTC's memory cache; NVRTC's disk cache is bypassed for the NVRTC
figure), so the first-compile numbers are not cache hits.
"""

import argparse
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import codegen  # noqa: E402
import fuserir  # noqa: E402
from codegen import nvrtc  # noqa: E402
from driver import compiler  # noqa: E402
from codegen.cuda import emit_cuda  # noqa: E402
from lowering.pipeline import lower  # noqa: E402

SEED = ROOT / "examples" / "seed_matmul.fz"


def measure(repeat):
    text = SEED.read_text()
    lowering, compiling, cached = [], [], []
    for _ in range(repeat):
        compiler._compiled.clear()
        fusion = fuserir.parse(text)
        started = time.perf_counter()
        kernel, _ = lower(fusion)
        source = emit_cuda(kernel)
        lowering.append(time.perf_counter() - started)
        nvrtc.clear_memory_cache()
        started = time.perf_counter()
        nvrtc.compile_to_cubin(source, kernel.name, cache=False)
        compiling.append(time.perf_counter() - started)
        codegen.compile(fusion, backend="cuda")
        again = fuserir.parse(text)
        started = time.perf_counter()
        codegen.compile(again, backend="cuda")
        cached.append(time.perf_counter() - started)
    ms = lambda xs: statistics.median(xs) * 1e3      # noqa: E731
    return {"lower_and_emit_ms": ms(lowering), "nvrtc_ms": ms(compiling),
            "cached_compile_ms": ms(cached)}


FIRST_MATMUL = r"""
import os, sys, tempfile, time
os.environ["FUSERIR_CACHE_DIR"] = tempfile.mkdtemp()
sys.path.insert(0, {root!r})
import codegen, fuserir
text = ("fusion mm(A: f16[K, M], B: f16[K, N]) {{\n  acc = matmul(A, B, layout=NT)\n"
        "  out = cast(acc, f16)\n  output out\n}}\n")
started = time.perf_counter()
exe = codegen.compile(fuserir.parse(text), backend="cuda")
compiled = time.perf_counter()
exe.plan_for({{"M": 1024, "N": 2048, "K": 4096}})
print(compiled - started, time.perf_counter() - compiled)
"""


def first_matmul(repeat):
    """(compile s, first plan s) medians of `repeat` fresh processes."""
    import subprocess
    runs = [subprocess.run([sys.executable, "-c", FIRST_MATMUL.format(root=str(ROOT))],
                           check=True, capture_output=True, text=True).stdout.split()
            for _ in range(repeat)]
    return tuple(statistics.median(float(r[i]) for r in runs) for i in (0, 1))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--first-matmul", action="store_true",
                   help="also the cold compile and first plan of an unscheduled matmul")
    args = p.parse_args(argv)
    if args.first_matmul:
        compiled, planned = first_matmul(args.repeat)
        print(f"unscheduled NT matmul, cold: compile {compiled:.2f} s, first plan at "
              f"1024x2048x4096 (schedule, lowering, proof, NVRTC) {planned:.2f} s")
    r = measure(args.repeat)
    print(f"seed kernel: lowering + emission {r['lower_and_emit_ms']:.1f} ms (target < 150), "
          f"NVRTC {r['nvrtc_ms']:.1f} ms, second compile of the same fusion "
          f"{r['cached_compile_ms']:.2f} ms (target < 5)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
