"""Shared pieces of the GPU benchmarks: cases, timing, bandwidth, reporting.

A benchmark script lists Cases (an unscheduled fusion in the DSL, its sizes, a reference, the
same op in torch, a target) and hands them to main(), which compiles each with
codegen.compile(fusion, backend="cuda") (the automatic schedule), checks the result once
against the reference (max abs error), times it, and prints a Markdown table row per case.

Method (docs/perf.md explains it for readers):
* Device time between two CUDA events (cupy.cuda.Event) recorded around each timed call.
* Before every timed call, outside the events, a 256 MiB buffer is written (flush.fill(0)),
  so each call starts with a cold L2. The host does not wait between calls: it enqueues
  ahead, so the Python overhead of a call hides behind the flush unless it is longer.
* Warm-up calls first (default 5), then N timed calls (default 50, --repeat); median, with
  min/p10/p90 in the JSON.
* Copy bandwidth: cudaMemcpyAsync device to device of 1 GiB; bytes = read + written (2 GiB)
  over the median time. A kernel's bandwidth counts its ideal traffic: every input read once
  and every output written once.
* One stream for everything. With torch present, all work goes on
  torch.cuda.current_stream() and CuPy is pointed at it (cupy.cuda.ExternalStream, or
  CuPy's null stream when torch's current stream is the legacy default stream, as it is
  unless changed); without torch, CuPy's current stream. The torch baseline runs in the same
  process on the same data (torch.from_dlpack of the CuPy arrays); absent torch, its
  columns say n/a.
"""

import argparse
import datetime
import json
import pathlib
import shlex
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import fuserir  # noqa: E402
from fuserir.dtypes import DataType  # noqa: E402
from fuserir.ir import extent as ext  # noqa: E402

FLUSH_BYTES = 256 << 20
NO_GPU_EXIT = 2


# -- cases ----------------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    source: str                        # the fusion in the DSL, without a schedule
    sizes: dict                        # {size symbol: int}
    reference: Callable                # (xp, {input: float array}) -> {output: float array}
    torch_op: Callable = None          # (torch, {input: tensor}) -> tensor
    target: tuple = None               # ("copy", min fraction) or ("torch", max ratio)
    rtol: float = 1e-6
    atol: float = 1e-6
    atol_of_max: bool = False          # atol a fraction of each output's largest |value|
    fusion: object = field(init=False, repr=False)

    def __post_init__(self):
        self.fusion = fuserir.parse(self.source)

    def shape(self, tv):
        return [ext.evaluate(e, self.sizes) for e in tv.shape]

    @property
    def nbytes(self):
        """Ideal traffic: every input read once, every output written once."""
        return sum(int(np.prod(self.shape(t))) * t.dtype.itemsize
                   for t in self.fusion.inputs + self.fusion.outputs)

    @property
    def dtypes(self):
        return "/".join(sorted({str(t.dtype) for t in self.fusion.inputs}))


def select(cases, names):
    """The cases named in `names` (comma-separated; None: all)."""
    if not names:
        return cases
    by_name = {c.name: c for c in cases}
    unknown = [n for n in names.split(",") if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown case(s) {', '.join(unknown)}; expected some of "
                         f"{', '.join(by_name)}")
    return [by_name[n] for n in names.split(",")]


def bf16_bits(xp, values):
    """bf16 bit patterns (uint16) of float values, rounded to nearest even."""
    u = values.astype(xp.float32).view(xp.uint32)
    u = u + xp.uint32(0x7FFF) + ((u >> xp.uint32(16)) & xp.uint32(1))
    return (u >> xp.uint32(16)).astype(xp.uint16)


def bf16_values(xp, bits):
    """f32 values of bf16 bit patterns."""
    return (bits.astype(xp.uint32) << xp.uint32(16)).view(xp.float32)


def round_bf16(xp, values):
    return bf16_values(xp, bf16_bits(xp, values))


def make_inputs(xp, case, seed=0):
    """({input: array as the fusion takes it, bf16 as uint16 bits}, {input: f32 values}),
    uniform in [-1, 1); `xp` is numpy or cupy."""
    rng = xp.random.default_rng(seed)
    arrays, values = {}, {}
    for tv in case.fusion.inputs:
        v = rng.random(tuple(case.shape(tv)), dtype=xp.float32) * 2 - 1
        if tv.dtype is DataType.bf16:
            arrays[tv.name] = bf16_bits(xp, v)
            values[tv.name] = bf16_values(xp, arrays[tv.name])
        else:
            arrays[tv.name] = v.astype(tv.dtype.numpy)
            values[tv.name] = v
    return arrays, values


# -- arguments ------------------------------------------------------------------------------

def parser(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true",
                   help="small sizes and few repeats (a smoke test)")
    p.add_argument("--repeat", type=int, help="timed runs per measurement (default 50; "
                   "5 with --quick)")
    p.add_argument("--warmup", type=int, help="untimed runs first (default 5; 1 with --quick)")
    p.add_argument("--copy-mib", type=int, help="size of the copy-bandwidth measurement "
                   "(default 1024 MiB; 64 with --quick)")
    p.add_argument("--cases", help="comma-separated case names (default: all)")
    p.add_argument("--no-torch", action="store_true", help="skip the torch baseline")
    p.add_argument("--torch-compile", action="store_true",
                   help="also time torch.compile of each case's torch op (its compile "
                        "happens in the warm-up, untimed)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    return p


def parse_args(p, argv=None, sizes=None):
    """Parse; fill the defaults that depend on --quick. `sizes` maps an option's dest to
    (full, quick) defaults."""
    args = p.parse_args(argv)
    defaults = dict(repeat=(50, 5), warmup=(5, 1), copy_mib=(1024, 64), **(sizes or {}))
    for dest, (full, quick) in defaults.items():
        if getattr(args, dest) is None:
            setattr(args, dest, quick if args.quick else full)
    if args.repeat < 1 or args.warmup < 0 or args.copy_mib < 1:
        p.error("--repeat and --copy-mib must be at least 1, --warmup at least 0")
    return args


def shapes_parser(description, quick_shape):
    """parser() with --shapes (R x D points) and --dtypes (bf16, f32): the options of the
    scripts that time ops over rows at several shapes and dtypes."""
    p = parser(description)
    p.add_argument("--shapes", help=f"RxD,... (default 8192x4096,32768x1024; {quick_shape} "
                                    "quick)")
    p.add_argument("--dtypes", default="bf16,f32")
    return p


def shape_points(args, multiple=1, why=""):
    """(dtypes, [(R, D)]) of --dtypes and --shapes, each D a multiple of `multiple` (for
    the reason `why`); ValueError names what is wrong."""
    dtypes = [d.strip() for d in args.dtypes.split(",")]
    if any(d not in ("bf16", "f32") for d in dtypes):
        raise ValueError(f"--dtypes: each of bf16 and f32, not {args.dtypes!r}")
    try:
        shapes = [tuple(int(x) for x in s.lower().split("x")) for s in args.shapes.split(",")]
    except ValueError:
        raise ValueError(f"--shapes: RxD points, comma-separated, not {args.shapes!r}") \
            from None
    if any(len(s) != 2 or min(s) < 1 or s[1] % multiple for s in shapes):
        raise ValueError("--shapes: each point is RxD, " + (
            f"positive, D a multiple of {multiple} ({why})" if multiple > 1 else
            "both positive"))
    return dtypes, shapes


def parse_shapes_args(p, argv, sizes, multiple=1, why=""):
    """parse_args, then shape_points' checks: a bad point exits with its message."""
    args = parse_args(p, argv, sizes)
    try:
        shape_points(args, multiple, why)
    except ValueError as error:
        p.error(str(error))
    return args


# -- arithmetic and formatting (no GPU) ----------------------------------------------------

def new_result(case, copy_gbps):
    """The result dict of `case` before it runs (the JSON holds these dicts)."""
    return {"case": case.name, "shape": str(case.shape(case.fusion.inputs[0])),
            "dtype": case.dtypes, "bytes": case.nbytes, "target": case.target,
            "copy_gbps": copy_gbps, "fuserir": None, "torch": None, "torch_compile": None}


def summarize(times_us):
    t = np.asarray(times_us, dtype=np.float64)
    p10, median, p90 = np.percentile(t, [10, 50, 90])
    return {"median_us": float(median), "min_us": float(t.min()), "p10_us": float(p10),
            "p90_us": float(p90), "runs": int(t.size)}


def gb_per_s(nbytes, us):
    """Bandwidth in GB/s (1e9 bytes per second) of `nbytes` moved in `us` microseconds."""
    return nbytes / us / 1e3


def derived(r):
    """Bandwidth, fraction of copy bandwidth, fuserir/torch ratio and target of result `r`."""
    out = {"gbps": None, "copy_fraction": None, "torch_ratio": None, "target_met": None}
    if r.get("fuserir"):
        out["gbps"] = gb_per_s(r["bytes"], r["fuserir"]["median_us"])
        out["copy_fraction"] = out["gbps"] / r["copy_gbps"]
        if r.get("torch"):
            out["torch_ratio"] = r["fuserir"]["median_us"] / r["torch"]["median_us"]
    target = r.get("target")
    if target:
        kind, bound = target
        value = out["copy_fraction"] if kind == "copy" else out["torch_ratio"]
        if value is not None:
            out["target_met"] = value >= bound if kind == "copy" else value <= bound
    return out


def target_text(target):
    if not target:
        return ""
    kind, bound = target
    return f">= {bound:.0%} of copy" if kind == "copy" else f"<= {bound:g}x torch"


COLUMNS = ["case", "shape", "dtype", "kernels", "fuserir (us)", "GB/s", "% of copy",
           "torch (us)", "fuserir/torch", "max abs err", "target"]
TABLE_HEADER = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS)


def table_row(r):
    """One Markdown row of result `r` (a dict as in the JSON)."""
    d = derived(r)
    na = "n/a"

    def num(value, fmt):
        return na if value is None else format(value, fmt)

    target = target_text(r.get("target"))
    if target:
        met = {True: "met", False: "missed", None: "n/a"}[d["target_met"]]
        target = f"{target}: {met}"
    if r.get("error"):
        target = f"error: {r['error']}"
    err = num(r.get("max_abs_error"), ".3g")
    if r.get("ok") is False:
        err += " (FAIL)"
    cells = [r["case"], r["shape"], r["dtype"], str(r.get("kernels") or na),
             num(r["fuserir"] and r["fuserir"]["median_us"], ".1f"), num(d["gbps"], ".0f"),
             num(d["copy_fraction"] and 100 * d["copy_fraction"], ".1f"),
             num(r["torch"] and r["torch"]["median_us"], ".1f"),
             num(d["torch_ratio"], ".2f"), err, target]
    return "| " + " | ".join(cells) + " |"


# -- the GPU side ---------------------------------------------------------------------------

def triton_module(name, leave_out):
    """The Triton baseline module benchmarks/`name`.py, or None: where `leave_out`
    (--no-triton), or where it cannot be imported (one line on stderr says why)."""
    if leave_out:
        return None
    import importlib
    try:
        return importlib.import_module(f"benchmarks.{name}")
    except ImportError as missing:
        print(f"no Triton baseline: {missing}", file=sys.stderr)
        return None


def require_gpu():
    """Exit with a clear message (status 2) where no GPU answers."""
    why = "cupy.cuda.runtime.getDeviceCount() found none"
    try:
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # noqa: BLE001 - no cupy, no driver, no device
        count, why = 0, f"{type(error).__name__}: {error}"
    if not count:
        print(f"{pathlib.Path(sys.argv[0]).name}: needs an NVIDIA GPU ({why})",
              file=sys.stderr)
        raise SystemExit(NO_GPU_EXIT)


class Bench:
    """Stream, flush buffer and timing on the current GPU; torch when wanted and present."""

    def __init__(self, args):
        import cupy
        self.cupy, self.args = cupy, args
        self.torch = None
        if not args.no_torch:
            try:
                import torch
                self.torch = torch
            except ImportError:
                pass
        if self.torch:
            ptr = self.torch.cuda.current_stream().cuda_stream
            self.stream = cupy.cuda.ExternalStream(ptr) if ptr else cupy.cuda.Stream.null
        else:
            self.stream = cupy.cuda.get_current_stream()
        self.stream.use()
        self.flush = cupy.empty(FLUSH_BYTES, dtype=cupy.uint8)

    def time(self, fn):
        """summarize() of `args.repeat` timed calls of fn, after `args.warmup` untimed."""
        cupy = self.cupy
        for _ in range(self.args.warmup):
            fn()
        events = []
        for _ in range(self.args.repeat):
            self.flush.fill(0)
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(self.stream)
            fn()
            end.record(self.stream)
            events.append((start, end))
        events[-1][1].synchronize()
        return summarize([cupy.cuda.get_elapsed_time(s, e) * 1e3 for s, e in events])

    def copy_bandwidth(self):
        cupy, rt = self.cupy, self.cupy.cuda.runtime
        src = cupy.ones(self.args.copy_mib << 18, dtype=cupy.float32)
        dst = cupy.empty_like(src)
        stats = self.time(lambda: rt.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes,
                                                 rt.memcpyDeviceToDevice, self.stream.ptr))
        nbytes = 2 * src.nbytes
        return {"bytes": nbytes, "gbps": gb_per_s(nbytes, stats["median_us"]), **stats}

    def to_torch(self, case, arrays):
        tensors = {}
        for tv in case.fusion.inputs:
            a = arrays[tv.name]
            if tv.dtype is DataType.bf16:
                tensors[tv.name] = self.torch.from_dlpack(a.view(self.cupy.int16)) \
                    .view(self.torch.bfloat16)
            else:
                tensors[tv.name] = self.torch.from_dlpack(a)
        return tensors

    def as_values(self, array, dtype):
        """f64 CuPy values of an output (a CuPy array, bf16 as bits, or a torch tensor)."""
        cupy = self.cupy
        if type(array).__module__.startswith("torch"):
            return cupy.from_dlpack(array.double())
        if dtype is DataType.bf16 and array.dtype.itemsize == 2 and array.dtype.kind in "ui":
            array = bf16_values(cupy, array.view(cupy.uint16))
        return array.astype(cupy.float64)

    def run_case(self, case, copy_gbps):
        """Compile, check once, time fuserir and torch: a result dict."""
        import codegen
        cupy = self.cupy
        r = new_result(case, copy_gbps)
        arrays, values = make_inputs(cupy, case)
        forms = [arrays]          # bf16 goes in as bits, or as torch bf16 tensors
        if self.torch and any(t.dtype is DataType.bf16 for t in case.fusion.inputs):
            forms.append(self.to_torch(case, arrays))
        started = time.perf_counter()
        exe = codegen.compile(case.fusion, backend="cuda")
        errors = []
        for inputs in forms:
            try:
                outs = exe.run(inputs)
                break
            except Exception as error:  # noqa: BLE001 - try the next form, report all
                if len(forms) == 1:
                    raise
                errors.append(f"{type(error).__name__}: {error}")
        else:
            raise RuntimeError("no input form runs: " + "; ".join(errors))
        self.stream.synchronize()
        r["compile_and_first_run_s"] = time.perf_counter() - started
        r["kernels"] = len(exe.kernels)
        r["kernel_names"] = [k.name for k in exe.kernels]
        want = case.reference(cupy, values)
        worst, r["ok"] = [], True
        for tv in case.fusion.outputs:
            got = self.as_values(outs[tv.name], tv.dtype)
            ref = want[tv.name].astype(cupy.float64)
            if got.shape != ref.shape:
                raise RuntimeError(f"output {tv.name} has shape {got.shape}, expected "
                                   f"{ref.shape}")
            diff = cupy.abs(got - ref)
            worst.append(float(diff.max()))          # NaN where an output holds NaN
            atol = case.atol * (float(cupy.abs(ref).max()) if case.atol_of_max else 1)
            r["ok"] &= bool(cupy.all(diff <= atol + case.rtol * cupy.abs(ref)))
        r["max_abs_error"] = max(worst, key=lambda e: (e != e, e))
        del outs, want
        r["fuserir"] = self.time(lambda: exe.run(inputs))
        if self.torch and case.torch_op:
            tensors = self.to_torch(case, arrays)
            r["torch"] = self.time(lambda: case.torch_op(self.torch, tensors))
            if getattr(self.args, "torch_compile", False):
                # Dynamo caches by code object: every case's lambda shares one, and past
                # its recompile limit it would silently run eager. A reset per case keeps
                # each measurement a compiled one.
                self.torch._dynamo.reset()
                compiled = self.torch.compile(lambda t: case.torch_op(self.torch, t))
                r["torch_compile"] = self.time(lambda: compiled(tensors))
        return r


def environment(bench):
    cupy, rt = bench.cupy, bench.cupy.cuda.runtime
    device = cupy.cuda.Device().id
    props = rt.getDeviceProperties(device)

    def version(v):
        return f"{v // 1000}.{v % 1000 // 10}"

    return {
        "device": props["name"].decode(), "sms": props["multiProcessorCount"],
        "l2_bytes": props["l2CacheSize"], "memory_bytes": props["totalGlobalMem"],
        "driver": _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader",
                        "-i", str(device)]),
        "cuda_driver_api": version(rt.driverGetVersion()),
        "cuda_runtime": version(rt.runtimeGetVersion()),
        "cupy": cupy.__version__, "torch": bench.torch.__version__ if bench.torch else None,
        "fuserir": fuserir.__version__,
        "commit": _run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]),
        "dirty": bool(_run(["git", "-C", str(ROOT), "status", "--porcelain"])),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([pathlib.Path(sys.executable).name, *sys.argv]),
    }


def _run(command):
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=30,
                              check=True).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def compile_table(results):
    """Markdown rows of fuserir against torch.compile, for the results that timed it."""
    lines = ["| case | shape | dtype | fuserir (us) | torch.compile (us) | "
             "fuserir/torch.compile | % of copy |", "|---|---|---|---|---|---|---|"]
    for r in results:
        if r.get("fuserir") and r.get("torch_compile"):
            fz, tc = r["fuserir"]["median_us"], r["torch_compile"]["median_us"]
            lines.append(f"| {r['case']} | {r['shape']} | {r['dtype']} | {fz:.1f} | "
                         f"{tc:.1f} | {fz / tc:.2f} | "
                         f"{100 * derived(r)['copy_fraction']:.1f} |")
    return "\n".join(lines)


def main(title, args, cases):
    """Run `cases` and print the report; exit status 0, or 1 where a check or case failed."""
    require_gpu()
    bench = Bench(args)
    env = environment(bench)
    print(f"# {title}\n")
    print(f"device: {env['device']} ({env['sms']} SMs, L2 {env['l2_bytes'] >> 20} MiB), "
          f"driver {env['driver'] or 'unknown'} (CUDA {env['cuda_driver_api']}), "
          f"runtime {env['cuda_runtime']}, cupy {env['cupy']}, torch {env['torch'] or 'n/a'}")
    print(f"date: {env['date']}, commit {env['commit']}{'+dirty' if env['dirty'] else ''}, "
          f"command: {env['command']}")
    print(f"method: CUDA events, {args.warmup} warm-up, median of {args.repeat}, "
          f"L2 flushed ({FLUSH_BYTES >> 20} MiB write) before each timed run")
    copy = bench.copy_bandwidth()
    print(f"copy bandwidth (cudaMemcpyAsync D2D, {args.copy_mib} MiB, read + write): "
          f"{copy['gbps']:.0f} GB/s (median {copy['median_us']:.1f} us)\n")
    print(TABLE_HEADER, flush=True)
    results, status = [], 0
    for case in cases:
        try:
            r = bench.run_case(case, copy["gbps"])
        except Exception as error:  # noqa: BLE001 - report the case, go on with the rest
            traceback.print_exc()
            r = new_result(case, copy["gbps"])
            first_line = (str(error).splitlines() or [""])[0][:200]
            r["error"] = f"{type(error).__name__}: {first_line}"
        r.update(derived(r))
        status |= bool(r.get("error")) or r.get("ok") is False
        results.append(r)
        print(table_row(r), flush=True)
    if any(r.get("torch_compile") for r in results):
        print("\n" + compile_table(results), flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"title": title, "environment": env, "copy": copy, "results": results,
             "method": {"warmup": args.warmup, "repeat": args.repeat,
                        "flush_bytes": FLUSH_BYTES}}, indent=2) + "\n")
    return int(status)
