"""`fuserir run`: compile, run on random inputs, compare with the reference, time on a GPU.

Inputs are random and integer-valued (floats are integers in [-4, 4]), so sums and products
are exact in every dtype and the kernel must match the reference up to the output's
rounding (and transcendental functions' last bits). On the GPU the kernel is timed with
CUDA events: one warm-up launch, then the median of --repeat launches, each after a
write of twice the L2 size so that no launch finds its inputs in L2. A fusion with a matmul
is also compared with cuBLAS: the same-shape matmuls through torch (or CuPy), timed the same
way; on the interpreter there is no cuBLAS figure, and the report says why.
"""

import inspect
import json
import time

import numpy as np

from .. import evaluate
from ..dtypes import DataType
from ..ir.exprs import MatmulOp
from .common import (UsageError, add_file_arguments, format_sizes, gpu, named_scalars,
                     one_fusion, parse_sizes, random_inputs, sizes_for)

# Relative tolerance per output dtype: its rounding; f32 allows a
# few ulps for transcendental functions. Integer and bool outputs must be exact.
RTOL = {DataType.f16: 2.0 ** -10, DataType.bf16: 2.0 ** -7, DataType.f32: 2.0 ** -20,
        DataType.f64: 2.0 ** -40}
RTOL_TEXT = {DataType.f16: "2^-10", DataType.bf16: "2^-7", DataType.f32: "2^-20",
             DataType.f64: "2^-40"}
INDEX_LIMIT = 2 ** 31 - 1
CUBLAS_NEEDS_GPU = "not measured: the cuBLAS baseline needs the cuda backend on a GPU"


def add_parser(sub):
    p = sub.add_parser("run", help="run on random inputs, compare with the reference, time "
                                   "on the GPU",
                       description="Compile a fusion, run it on random integer-valued inputs "
                                   "and compare every output with the reference evaluator; "
                                   "on the GPU, time it with CUDA events.")
    add_file_arguments(p)
    p.add_argument("--backend", choices=("cuda", "interp"),
                   help="where to run (default: cuda when a GPU is present, else interp)")
    p.add_argument("--repeat", type=int, default=100, metavar="N",
                   help="timed launches on the GPU; the median is reported (default 100)")
    p.add_argument("--seed", type=int, default=0, help="random seed for the inputs")
    p.set_defaults(run=cmd_run)


def cublas_baseline(fusion, sizes, repeat):
    """cuBLAS's time for the matmuls of `fusion` at these sizes, for the ratio `run` reports:
    {"time_us", "library"} or {"note": why not}. Each matmul runs as a same-shape, same-layout
    product of f16/bf16 operands into an output of its dtype (cuBLAS accumulates in f32),
    through torch.matmul, or cupy.matmul where torch is absent (f16 only: CuPy has no bf16),
    timed as the fuserir kernel is (CUDA events, L2 flushed and the GPU kept busy before
    each of `repeat` runs, the median)."""
    from ..ir import extent as ext

    shapes = []
    for e in fusion.exprs:
        if isinstance(e, MatmulOp):
            a, b = e.inputs[0], e.inputs[1]
            shapes.append((e.layout, a.dtype,
                           [int(ext.evaluate(x, sizes)) for x in a.shape],
                           [int(ext.evaluate(x, sizes)) for x in b.shape]))
    try:
        import torch
        has_torch = torch.cuda.is_available()
    except ImportError:
        has_torch = False
    if has_torch:
        library = "torch"
        kinds = {DataType.f16: torch.float16, DataType.bf16: torch.bfloat16}

        def operands(layout, dtype, a_shape, b_shape):
            a, b = (torch.randint(-4, 5, tuple(s), device="cuda").to(kinds[dtype])
                    for s in (a_shape, b_shape))
            a_mk = a if layout[0] == "T" else a.t()
            b_kn = b if layout[1] == "T" else b.t()
            out = torch.empty((a_mk.shape[0], b_kn.shape[1]), device="cuda",
                              dtype=kinds[dtype])
            return lambda: torch.matmul(a_mk, b_kn, out=out)
    else:
        import cupy
        library = "cupy"
        kinds = {DataType.f16: cupy.float16}

        def operands(layout, dtype, a_shape, b_shape):
            a, b = (cupy.random.randint(-4, 5, tuple(s)).astype(kinds[dtype])
                    for s in (a_shape, b_shape))
            a_mk = a if layout[0] == "T" else a.T
            b_kn = b if layout[1] == "T" else b.T
            out = cupy.empty((a_mk.shape[0], b_kn.shape[1]), dtype=kinds[dtype])
            return lambda: cupy.matmul(a_mk, b_kn, out=out)
    missing = sorted({str(dtype) for _, dtype, _, _ in shapes if dtype not in kinds})
    if missing:
        return {"note": f"not measured: {library} has no cuBLAS matmul of "
                        f"{', '.join(missing)} operands here"
                        + ("" if has_torch else " (install torch for bf16)")}
    products = [operands(*shape) for shape in shapes]
    import cupy

    def once(marks):
        for product in products:
            product()
        marks.append(_record_event())

    once([])                                              # warm-up (cuBLAS picks its kernel)
    runs = _time_runs(once, repeat)
    totals = sorted(cupy.cuda.get_elapsed_time(m[0], m[-1]) * 1e3 for m in runs)
    return {"time_us": float(np.median(totals)), "library": library}


def cmd_run(args):
    import driver

    if args.repeat < 1:
        raise UsageError(f"--repeat: must be >= 1, got {args.repeat}")
    present, device = gpu()
    backend = args.backend or ("cuda" if present else "interp")
    if backend == "cuda" and not present:
        raise UsageError(f"--backend cuda needs an NVIDIA GPU, and none is available here "
                         f"({device}); use --backend interp")
    fusion = one_fusion(args.file, args.fusion)
    sizes = sizes_for(fusion, parse_sizes(args.size))
    rng = np.random.default_rng(args.seed)
    inputs = random_inputs(fusion, sizes, rng, integer_valued=True)
    scalars = named_scalars(fusion, sizes)

    exe = driver.compile(fusion, backend=backend)
    # Poison outputs first (NaN or a sentinel), so an element the kernel never writes shows.
    poison = {"poison": True} if "poison" in inspect.signature(exe.run).parameters else {}
    started = time.perf_counter()
    outputs = exe.run({**inputs, **scalars}, **poison)
    wall = time.perf_counter() - started
    reference = evaluate(fusion, {**inputs, **sizes})
    comparison = compare_outputs(fusion, reference, outputs)

    report = {"fusion": fusion.name, "sizes": sizes, "backend": backend,
              "device": device if backend == "cuda" else "CPU interpreter",
              "why_interp": None if present or args.backend else "no GPU here",
              "seed": args.seed, "outputs": comparison}
    if backend == "cuda":
        report["timing"] = time_on_gpu(exe, fusion, inputs, sizes, args.repeat)
    else:
        report["timing"] = {"interpreter_wall_s": wall}
    if any(isinstance(e, MatmulOp) for e in fusion.exprs):
        report["cublas"] = _cublas(fusion, sizes, args.repeat, backend, report["timing"])
    report["ok"] = not any(c["mismatches"] for c in comparison.values())
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(render(report)))
    return 0 if report["ok"] else 1


def _cublas(fusion, sizes, repeat, backend, timing):
    """The report's cuBLAS entry: the baseline and the ratio cuBLAS time / fuserir time (the
    speed as a fraction of cuBLAS's), or a note that says why there is none."""
    if backend != "cuda":
        return {"note": CUBLAS_NEEDS_GPU + " (this run used the CPU interpreter)"}
    median = timing.get("median_us")
    if not median:
        return {"note": "not measured: the fuserir kernel was not timed"}
    baseline = cublas_baseline(fusion, sizes, repeat)
    if "time_us" not in baseline:
        return baseline
    return {**baseline, "ratio": baseline["time_us"] / median}


# ---------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------

def _host(array, dtype):
    if type(array).__module__.startswith("cupy"):
        array = array.get()
    array = np.asarray(array)
    if dtype is DataType.bf16 and array.dtype != dtype.numpy:
        array = array.view(dtype.numpy)
    return array


def compare_outputs(fusion, reference, outputs, only_written=False):
    """{output: {compared, mismatches, max_abs_error, max_rel_error, rtol, ...}} of the
    kernel's outputs against the reference's. only_written: compare only the elements a
    partial run wrote (floats: not NaN, ints: not the poison value); bool outputs cannot be
    told apart from their poison and are then not compared."""
    report = {}
    for t in fusion.outputs:
        got = _host(outputs[t.name], t.dtype).astype(np.float64)
        want = np.asarray(reference[t.name]).astype(np.float64)
        mask = np.ones(got.shape, dtype=bool)
        if only_written:
            if t.dtype.is_float:
                mask = ~np.isnan(got)
            elif t.dtype.is_int:
                mask = got != np.iinfo(t.dtype.numpy).min
            else:
                mask = np.zeros(got.shape, dtype=bool)
        rtol = RTOL.get(t.dtype, 0.0)
        g, w = got[mask], want[mask]
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(g - w)
            same = (g == w) | (np.isnan(g) & np.isnan(w)) | (diff <= rtol + rtol * np.abs(w))
            finite = np.isfinite(g) & np.isfinite(w)
            rel = diff[finite & (w != 0)] / np.abs(w[finite & (w != 0)])
        bad = np.flatnonzero(~same)
        first = None
        if bad.size:
            index = tuple(int(i) for i in np.argwhere(mask)[bad[0]])
            first = {"index": list(index), "got": float(got[index]),
                     "want": float(want[index])}
        report[t.name] = {
            "dtype": str(t.dtype), "shape": list(got.shape), "compared": int(mask.sum()),
            "mismatches": int(bad.size),
            "unwritten": int(np.isnan(g).sum() - (np.isnan(g) & np.isnan(w)).sum()),
            "max_abs_error": float(diff[finite].max()) if finite.any() else 0.0,
            "max_rel_error": float(rel.max()) if rel.size else 0.0,
            "rtol": rtol, "rtol_text": RTOL_TEXT.get(t.dtype, "exact"),
            "first_mismatch": first}
    return report


# ---------------------------------------------------------------------------------------
# GPU timing
# ---------------------------------------------------------------------------------------

def time_on_gpu(exe, fusion, inputs, sizes, repeat):
    """Median/min/max of `repeat` runs (microseconds, CUDA events), after a warm-up, with
    L2 flushed before each. What is timed is exactly the launches exe.run() makes: one
    run with device-resident inputs records them (codegen.launch.launch), then they are
    replayed back to back, so host-side binding and allocation are not in the time; a
    spinning one-thread kernel after each flush keeps the GPU busy while Python enqueues
    them, so that launch overhead is not in the time either."""
    import cupy

    import codegen.launch as launch_module
    from ..ir import extent as ext

    spans = [int(np.prod([ext.evaluate(e, sizes) for e in t.shape]))
             for t in fusion.tensors if not t.is_input] + [a.size for a in inputs.values()]
    if max(spans, default=1) > INDEX_LIMIT:
        return {"note": "not timed: sizes past 2^31 elements need the 64-bit-index kernel"}

    def device(array):
        if array.dtype == DataType.bf16.numpy:
            array = array.view(np.uint16)
        return cupy.asarray(array)

    args = {name: device(a) for name, a in inputs.items()}
    moved = sum(a.nbytes for a in args.values())
    moved += sum(int(np.prod([ext.evaluate(e, sizes) for e in t.shape])) * t.dtype.itemsize
                 for t in fusion.outputs)
    scalars = named_scalars(fusion, sizes)

    real = launch_module.launch
    recorded = []

    def spy(*call, **options):
        recorded.append((call, options))
        return real(*call, **options)

    launch_module.launch = spy
    try:
        exe.run({**args, **scalars})                      # warm-up; records the launches
    finally:
        launch_module.launch = real
    cupy.cuda.get_current_stream().synchronize()
    if recorded:
        names = [call[0].name for call, _ in recorded]

        def once(marks):
            for call, options in recorded:
                real(*call, **options)
                marks.append(_record_event())
    else:                                                 # the executor launches otherwise
        names = ["(whole run, host overhead included)"]

        def once(marks):
            exe.run({**args, **scalars})
            marks.append(_record_event())

    runs = _time_runs(once, repeat)
    per_kernel = [[cupy.cuda.get_elapsed_time(m[i], m[i + 1]) * 1e3 for m in runs]
                  for i in range(len(names))]
    totals = sorted(cupy.cuda.get_elapsed_time(m[0], m[-1]) * 1e3 for m in runs)
    median = float(np.median(totals))
    return {"median_us": median, "min_us": totals[0], "max_us": totals[-1], "runs": repeat,
            "warmup": 1, "l2_flushed": True, "bytes_moved": int(moved),
            "kernels": [{"name": n, "median_us": float(np.median(t))}
                        for n, t in zip(names, per_kernel)],
            "effective_gb_s": moved / (median * 1e-6) / 1e9 if median > 0 else None}


def _record_event():
    import cupy
    event = cupy.cuda.Event()
    event.record()
    return event


def _time_runs(once, repeat):
    """`repeat` runs of once(marks), each after an L2 flush and a spin; once appends an
    event recorded after each launch it makes. Returns each run's events, the first recorded
    just before the run."""
    import cupy

    l2 = int(cupy.cuda.Device().attributes.get("L2CacheSize", 64 << 20))
    scratch = cupy.empty(2 * l2, dtype=cupy.uint8)
    # Enqueueing from Python takes longer than a small kernel runs: keep the GPU busy
    # (spinning) for three times that after each flush, so that the start event is not
    # reached before the launches are queued and host time stays out of the measurement.
    started = time.perf_counter()
    once([])
    enqueue_ns = int((time.perf_counter() - started) * 1e9)
    spin = _spin_kernel()
    runs = []
    for _ in range(repeat):
        scratch.fill(0)                                   # flush L2
        spin((1,), (1,), (np.uint64(3 * enqueue_ns + 20_000),))
        marks = [_record_event()]
        once(marks)
        runs.append(marks)
    runs[-1][-1].synchronize()
    return runs


_SPIN = r"""
extern "C" __global__ void fuserir_spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
"""


def _spin_kernel():
    """A one-thread kernel that keeps the GPU busy for `ns` nanoseconds."""
    import cupy
    return cupy.RawKernel(_SPIN, "fuserir_spin")


# ---------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------

def render(report):
    on = (f"the GPU, {report['device']}" if report["backend"] == "cuda"
          else "the CPU interpreter")
    if report.get("why_interp"):
        on += f" ({report['why_interp']})"
    lines = [f"run {report['fusion']} on {on} at {format_sizes(report['sizes'])}",
             f"  inputs: random integer-valued, seed {report['seed']}"]
    for name, c in report["outputs"].items():
        verdict = "ok" if not c["mismatches"] else (
            f"MISMATCH: {c['mismatches']} of {c['compared']} element(s) beyond tolerance")
        lines.append(f"  {name}: {c['dtype']}[{', '.join(map(str, c['shape']))}]  max abs "
                     f"error {c['max_abs_error']:.3g}  max rel error {c['max_rel_error']:.3g}"
                     f"  (rtol {c['rtol_text']})  {verdict}")
        if c["first_mismatch"]:
            m = c["first_mismatch"]
            lines.append(f"    first at {tuple(m['index'])}: got {m['got']:.6g}, reference "
                         f"{m['want']:.6g}")
        if c["unwritten"]:
            lines.append(f"    {c['unwritten']} element(s) never written (still poisoned)")
    timing = report["timing"]
    if "median_us" in timing:
        lines.append(f"  time: median {timing['median_us']:.2f} us over {timing['runs']} "
                     f"runs (min {timing['min_us']:.2f}, max {timing['max_us']:.2f}; "
                     "CUDA events, 1 warm-up, L2 flushed before each)")
        if len(timing["kernels"]) > 1:
            lines += [f"    {k['name']}: median {k['median_us']:.2f} us"
                      for k in timing["kernels"]]
        if timing.get("effective_gb_s"):
            lines.append(f"  bandwidth: {timing['effective_gb_s']:.1f} GB/s effective "
                         f"({timing['bytes_moved']} bytes: inputs read and outputs written "
                         "once)")
    elif "interpreter_wall_s" in timing:
        lines.append(f"  time: {timing['interpreter_wall_s']:.2f} s in the interpreter (wall "
                     "clock, not a GPU time)")
    else:
        lines.append(f"  time: {timing['note']}")
    if "cublas" in report:
        c = report["cublas"]
        lines.append(f"  cuBLAS ratio: {c['note']}" if "note" in c else
                     f"  cuBLAS ratio: {c['ratio']:.2f}x cuBLAS's speed (cuBLAS median "
                     f"{c['time_us']:.2f} us through {c['library']}.matmul, timed the same "
                     "way)")
    lines.append("ok" if report["ok"] else "outputs differ from the reference")
    return lines
