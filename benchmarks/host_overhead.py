"""Host time per call as a PyTorch caller sees it: torch tensors in, torch tensors out.

    python3 benchmarks/host_overhead.py [--calls 1000] [--sets 8] [--json]

Cases (each an unscheduled fusion, scheduled automatically for its sizes on this GPU):
* `hopper NT`: C = A^T B, NT 1024x2048x4096 f16 (the Hopper TMA plan: one kernel with
  tensor maps, re-pointed at each call's buffers);
* `split-K TN`: 128x128x262144 f16 (on Hopper the parallel split-K: one kernel with
  tensor maps, its partials in the call's scratch block and its arrival counters in the
  stream's block of zeros; before Hopper the two-kernel split-K: f32 partials, then the
  reduction);
* `pointwise`: out = bf16(gelu(x * 0.5 + y) - sigmoid(y) / 4), 1024x1024 f32.

Method. Inputs rotate over --sets freshly allocated buffer sets (so tensor maps meet new
addresses as a real loop's caching allocator gives them). Each call is timed alone with
time.perf_counter around it and nothing else: no synchronization inside the timed region.
Two regimes: "idle", the host waits for the GPU after every call (outside the timed
region), so each call meets an empty launch queue; "busy", it waits after every 50 calls,
so calls meet a queue of earlier kernels (the GPU falls behind when a kernel outlasts a
call, and a deeper queue makes the driver's launch slower on this host). Median (and
p10/p90) of --calls calls after 50 warm-up calls. Beside each case, in the same process and the same
way: torch's own op on the same tensors (torch.matmul, or the pointwise chain in eager
torch), and the launch of a Triton kernel taking arguments of the same kinds (three
tensors, six sizes and strides; it does almost nothing, so its time is Triton's launch
alone). The kernel time per call (CUDA events around 20 back-to-back calls) says when a
call's host time would hide behind the GPU.

A breakdown of the per-call steps of the hopper case follows (each step alone, timed as the
calls are in the idle regime:
the signature key, the plan lookup, reading torch's current stream, the output's
allocation, the scratch block's, one launch with its tensor maps at a known address and
at a new one, an empty kernel's launch through the driver: what the driver itself
costs on this host, and one tensor map moved by writing its address word and by the
driver's cuTensorMapReplaceAddress).
"""

import argparse
import functools
import json
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import common  # noqa: E402
from benchmarks.matmul import OPERANDS, layout_fusion  # noqa: E402

WARMUP, BATCH = 50, 50

POINTWISE = """
fusion chain(x: f32[M, N], y: f32[M, N]) {
  z = gelu(x * 0.5 + y) - sigmoid(y) / 4
  out = cast(z, bf16)
  output out
}"""


def per_call_us(fn, sets, calls, sync, every=BATCH):
    """Median, p10 and p90 of the host time of `fn(*set)` (us), sets taken in turn, the
    host waiting for the GPU after every `every` calls (outside the timed region)."""
    for i in range(WARMUP):
        fn(*sets[i % len(sets)])
    sync()
    times = []
    for i in range(calls):
        args = sets[i % len(sets)]
        started = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - started)
        if (i + 1) % every == 0:
            sync()
    times = sorted(t * 1e6 for t in times)
    return {"median": statistics.median(times), "p10": times[len(times) // 10],
            "p90": times[len(times) * 9 // 10]}


def kernel_us(torch, fn, args, calls=20):
    """Device time per call of `fn(*args)`, back to back (CUDA events around `calls`)."""
    fn(*args)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn(*args)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def triton_launch():
    """A Triton kernel with arguments of a matmul's kinds that stores one element: the
    host time of its launch is Triton's launch overhead."""
    import triton
    import triton.language as tl

    @triton.jit
    def touch(a, b, c, m, n, k, sa, sb, sc, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        x = tl.load(a + i * sa) + tl.load(b + i * sb)
        tl.store(c + i * sc, x, mask=i < m + n + k)

    return lambda a, b, c: touch[(1,)](a, b, c, 1, 1, 1, 1, 1, 1, BLOCK=16)


def cases(torch):
    """(name, fusion, input sets, torch op, output shape) of each case."""
    import fuserir
    made = []
    for name, layout, (m, n, k) in (("hopper NT 1024x2048x4096", "NT", (1024, 2048, 4096)),
                                    ("split-K TN 128x128x262144", "TN", (128, 128, 262144))):
        a_shape, b_shape = OPERANDS[layout]
        shape = {"M": m, "N": n, "K": k}
        sa, sb = ([shape[d] for d in text.strip("[]").split(", ")] for text in (a_shape, b_shape))

        def one_set(sa=sa, sb=sb):
            return (torch.randn(sa, device="cuda", dtype=torch.float16),
                    torch.randn(sb, device="cuda", dtype=torch.float16))
        op = ((lambda a, b: torch.matmul(a.t(), b)) if layout == "NT"
              else (lambda a, b: torch.matmul(a, b.t())))
        made.append((name, layout_fusion(layout), one_set, op, (m, n)))

    def pointwise_set():
        return (torch.randn(1024, 1024, device="cuda"), torch.randn(1024, 1024, device="cuda"))

    def pointwise_op(x, y):
        z = torch.nn.functional.gelu(x * 0.5 + y) - torch.sigmoid(y) / 4
        return z.to(torch.bfloat16)
    made.append(("pointwise 1024x1024", fuserir.parse(POINTWISE), pointwise_set, pointwise_op,
                 (1024, 1024)))
    return made


def steps_breakdown(torch, exe, sets, calls):
    """Each per-call step of `exe` (driver.calls.CallPlan) alone, in a loop: ns per step."""
    from codegen import kernel_params
    from driver.calls import call_key
    a, b = sets[0]
    plan = exe._calls[False][call_key((a, b), (), None)]
    arrays = plan.arrays
    (shape, strides, dtype, _), = plan.outputs
    launch, sources = plan.launches[0]
    out = arrays.empty(shape, strides, dtype)
    stream = arrays.stream(plan.device)
    scratch = arrays.empty_bytes(max(plan.scratch, 1))
    zeroed = max(plan.zeroed, 256)
    zeros = arrays.empty_bytes(zeroed)
    tables = [[s.data_ptr() for s in pair] + [out.data_ptr(), scratch.data_ptr(),
                                              zeros.data_ptr()] for pair in sets]

    def timed(fn):
        return per_call_us(fn, [()], calls, torch.cuda.synchronize, every=1)["median"] * 1e3

    turn = iter(range(1 << 62))
    return {
        "signature key": timed(lambda: call_key((a, b), (), None)),
        "plan lookup": timed(lambda: exe._calls[False][call_key((a, b), (), None)]),
        "current stream": timed(lambda: arrays.stream(plan.device)),
        "output allocation": timed(lambda: arrays.empty(shape, strides, dtype)),
        "torch.empty of the output's shape": timed(
            lambda: torch.empty(shape, dtype=dtype, device=arrays.device)),
        f"scratch block ({plan.scratch} bytes)": timed(
            lambda: arrays.empty_bytes(max(plan.scratch, 1))),
        f"memset of {zeroed} bytes (semaphores, in a graph capture only)": timed(
            lambda: kernel_params.memset_async(zeros.data_ptr(), zeroed, stream)),
        "launch, maps at known addresses": timed(
            lambda: launch([tables[0][i] + o for i, o in sources], stream)),
        "launch, maps re-pointed": timed(
            lambda: launch([t[i] + o for t in (tables[next(turn) % len(tables)],)
                            for i, o in sources], stream)),
        "empty kernel launch through the driver": timed(lambda: _empty_launch(stream)),
        **map_moves(plan, sources, tables, timed),
        "whole call": timed(lambda: exe(a, b)),
    }


def map_moves(plan, sources, tables, timed):
    """One tensor map of the plan moved among the operand sets' addresses: through its
    learned address word, and through the driver's cuTensorMapReplaceAddress."""
    from codegen import kernel_params
    driver = kernel_params.cuda_driver()
    first = next((m for p in plan.parameters for m in p.maps), None)
    if first is None or driver is None:
        return {}
    table, offset = sources[first.pointer]
    addresses = [t[table] + offset for t in tables]
    found = {}
    for how in ("its address word", "the driver"):
        moved = kernel_params._Map(first.pointer, first.fields)
        moved.point_at(addresses[1 % len(addresses)], driver)    # the first move learns
        if how == "the driver":
            moved.word = None
        elif moved.word is None:
            how += " (not found: the driver)"
        turn = iter(range(1 << 62))
        found[f"one map moved, by {how}"] = timed(
            lambda: moved.point_at(addresses[next(turn) % len(addresses)], driver))
    return found


@functools.cache
def _empty_kernel():
    import cupy
    return cupy.RawKernel('extern "C" __global__ void nothing() {}', "nothing")


def _empty_launch(stream):
    """cuLaunchKernel of a kernel with no parameters: the driver's own cost of a launch."""
    from codegen import kernel_params
    driver = kernel_params.cuda_driver()
    driver.launch(_empty_kernel().kernel.ptr, 1, 1, 1, 32, 1, 1, 0, stream, None, None)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--sets", type=int, default=8)
    p.add_argument("--json", action="store_true", help="a JSON line per case too")
    args = p.parse_args(argv)
    common.require_gpu()
    import torch
    import codegen
    sync = torch.cuda.synchronize
    launch_triton = triton_launch()
    print("| case | plan | kernel us | queue | fuserir host us | torch host us | "
          "Triton launch us |")
    print("|---|---|---|---|---|---|---|")
    hopper = None
    for name, fusion, one_set, op, (m, n) in cases(torch):
        exe = codegen.compile(fusion, backend="cuda")
        sets = [one_set() for _ in range(args.sets)]
        got = exe(*sets[0])
        want = op(*sets[0])
        error = (got.float() - want.float()).abs().max().item()
        plan = exe._calls[False][next(iter(exe._calls[False]))]
        kinds = f"{len(plan.launches)} kernel(s), " + \
            ("tensor maps" if any(p.maps for p in plan.parameters) else "no maps")
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        device_us = kernel_us(torch, exe, sets[0])
        for queue, every in (("idle", 1), ("busy", BATCH)):
            fuserir_us = per_call_us(exe, sets, args.calls, sync, every)
            torch_us = per_call_us(op, sets, args.calls, sync, every)
            triton_us = per_call_us(lambda x, y: launch_triton(x, y, c), sets, args.calls,
                                    sync, every)
            row = {"case": name, "plan": kinds, "kernel_us": device_us, "queue": queue,
                   "fuserir": fuserir_us, "torch": torch_us, "triton_launch": triton_us,
                   "max_abs_error": error}
            if args.json:
                print(json.dumps(row))
            print(f"| {name} | {kinds} | {device_us:.1f} | {queue} | "
                  f"{fuserir_us['median']:.1f} (p90 {fuserir_us['p90']:.1f}) | "
                  f"{torch_us['median']:.1f} | {triton_us['median']:.1f} |")
        if name.startswith("hopper"):
            hopper = (exe, sets)
    print("\nPer-call steps of the hopper case (ns, each alone in a loop):")
    for step, ns in steps_breakdown(torch, *hopper, args.calls).items():
        print(f"  {step:34s} {ns:8.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
