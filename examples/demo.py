"""The main job: the split-K matmul whose epilogue race fuserir exists for (docs/story.md).

It parses examples/seed_matmul.fz: the seed fusion scheduled by the matmul scheduler
exactly as the original report configured it (tensor cores, CTA tile 256x128x32, warp
tile 64x64x32, a 3-stage cp.async pipeline, split-K 5 ways reduced serially across CTAs,
and the epilogue staged through shared memory that reuses the operand buffers). It lowers
it pass by pass and shows the kernel IR with every barrier and wait sync insertion placed
and why each exists, among them the drain before the epilogue that the original kernel
lacked. Then it runs the kernel: on the GPU when there is one (full seed size, checked
against a float64 matmul), otherwise in the CPU interpreter at a small size with a short
last split (checked the same way, with the race detector watching every shared-memory
byte). Then it drops each sync in turn and shows what the verifier and the interpreter
say without it, and ends with a short summary: what ran, which sync the original kernel
lacked, and what the checkers report when it is dropped.
"""

import pathlib
import sys
import textwrap
import time

import numpy as np

import codegen
import fuserir
from lowering import kir

HERE = pathlib.Path(__file__).resolve().parent


def gpu_available():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:      # no driver, no device: the interpreter runs instead
        return False


def explain(sync):
    what = kir.format_stmt(sync).split(" [")[0]      # the instruction, without its id
    lines = [f"  {sync.sync_id} ({sync.label}, {what}):"]
    for r in sync.reasons:
        story = {
            "RAW": "threads read bytes that other threads wrote",
            "WAR": "threads overwrite bytes that other threads read",
            "WAW": "threads overwrite bytes that other threads wrote",
            "async-pending": ("an async copy may still be writing these bytes"
                              if r.second.label != "END" else
                              "an async copy would still be in flight at the end"),
        }.get(r.kind.value, r.kind.value)
        carried = ", across loop iterations" if r.loop_carried else ""
        lines.append(f"    {r.kind.value} on {'/'.join(r.buffers)}: {story}{carried} "
                     f"({r.first.label} -> {r.second.label})")
    return "\n".join(lines)


def check(out, a, b, k):
    exact = a.astype(np.float64).T @ b.astype(np.float64)
    got = np.asarray(out).astype(np.float64)
    bad = ~np.isclose(got, exact, rtol=2.0 ** -10, atol=1e-5 * k)
    return int(bad.sum()), float(np.abs(got - exact).max())


def main():
    fusion = fuserir.dsl.parse_file(HERE / "seed_matmul.fz")
    print("== the fusion and its schedule ==")
    print(fuserir.print_fusion(fusion))

    exe_cpu = codegen.compile(fusion, backend="interp")
    kernel = exe_cpu.kernels[0].kir
    print("== kernel IR after all passes (fuserir.lowering.pipeline) ==")
    print(exe_cpu.kernels[0].kir_text)
    barriers = [s for s in kir.walk(kernel.body) if getattr(s, "sync_id", None)]
    print("== why each inserted barrier and wait exists ==")
    for barrier in barriers:
        print(explain(barrier))

    rng = np.random.default_rng()
    if gpu_available():
        m, n, k, splitk = 1024, 2048, 4096, 5
        a = rng.standard_normal((k, m)).astype(np.float16)
        b = rng.standard_normal((k, n)).astype(np.float16)
        exe = codegen.compile(fusion, backend="cuda")
        exe.run({"A": a, "B": b, "splitk": splitk})                 # warm-up
        start = time.perf_counter()
        out = exe.run({"A": a, "B": b, "splitk": splitk})["out"].get()
        elapsed = time.perf_counter() - start
        where = f"GPU, M={m} N={n} K={k} splitk={splitk}, {elapsed * 1e3:.1f} ms incl. copies"
    else:
        m, n, k, splitk = 256, 128, 32 * 13, 5   # 13 K tiles: 3 per split, 1 in the last
        a = rng.integers(-4, 4, (k, m)).astype(np.float16)
        b = rng.integers(-4, 4, (k, n)).astype(np.float16)
        out = exe_cpu.run({"A": a, "B": b, "splitk": splitk})["out"]
        where = f"CPU interpreter (no GPU), M={m} N={n} K={k} splitk={splitk}, no race"
    mismatches, error = check(out, a, b, k)
    print(f"\n== run: {where} ==")
    print(f"  mismatches vs float64 (rtol 2^-10, atol 1e-5*K): {mismatches}; "
          f"max |error| {error:.3g}")

    print("\n== without each inserted sync ==")
    refusals, races = {}, {}
    small = {"A": rng.integers(-4, 4, (32 * 5, 256)).astype(np.float16),
             "B": rng.integers(-4, 4, (32 * 5, 128)).astype(np.float16), "splitk": 2}
    for barrier in barriers:
        try:
            codegen.compile(fusion, backend="interp", drop_syncs=(barrier.sync_id,))
        except codegen.HazardError as refused:
            refusals[barrier.sync_id] = refused.hazards
            print(f"  drop {barrier.sync_id}: the verifier refuses the kernel "
                  f"({len(refused.hazards)} hazard(s), e.g. {refused.hazards[0].kind} on "
                  f"{refused.hazards[0].buffer})")
        unsafe = codegen.compile(fusion, backend="interp", drop_syncs=(barrier.sync_id,),
                                 verify=False)
        try:
            unsafe.run(small)
            print("    ... and the interpreter saw no race (this would be a bug)")
            return 1
        except codegen.RaceError as race:
            first = race.hazards[0]
            kinds = sorted({f"{h.kind} on {h.buffer}" for h in race.hazards})
            races[barrier.sync_id] = kinds
            print(f"    the interpreter sees it: {', '.join(kinds[:3])} (threads "
                  f"{first.threads[0]} and {first.threads[1]}, ...)")
    print(summary(barriers, where, mismatches, refusals, races))
    return 0 if mismatches == 0 else 1


def _drains_cp_async(group):
    """Does a statement with this group operation (its effects) retire every cp.async?"""
    return group is not None and (group.kind, group.op, group.n) == ("cp.async", "wait", 0)


def summary(barriers, where, mismatches, refusals, races):
    """A few plain lines for a newcomer: what ran, the sync the original kernel lacked (the
    cp.async drain before the epilogue reuses the operand buffers), and what the checkers
    say without it."""
    drain = next(b for b in barriers if _drains_cp_async(b.effects().group))
    reused = sorted({r.buffers[-1] for r in drain.reasons if len(r.buffers) > 1})
    lines = [
        "\n== summary ==",
        f"What ran: the split-K matmul of the original report (examples/seed_matmul.fz), "
        f"lowered with {len(barriers)} inserted syncs, run on the {where.rsplit(', ', 1)[0]}; "
        f"{mismatches} mismatches against a float64 matmul.",
        f"The original kernel lacked {drain.sync_id}, the cp.async drain "
        f"(cp.async.wait_group 0) before the epilogue writes {', '.join(reused)} over the "
        "operand buffers' shared memory: its __syncthreads() alone does not retire the "
        "zero-filling copies of the pipeline's tail, which land on the epilogue's tile.",
        f"With {drain.sync_id} dropped, the static verifier refuses to emit the kernel "
        f"({len(refusals.get(drain.sync_id, []))} hazards, "
        f"{refusals[drain.sync_id][0].kind} on {refusals[drain.sync_id][0].buffer}), and "
        f"the interpreter, run anyway, reports {', '.join(races[drain.sync_id])}.",
        "The story and the hazard model: docs/story.md, docs/hazards.md."]
    return "\n".join([lines[0]] + [textwrap.fill(line, 92, subsequent_indent="  ",
                                                  break_on_hyphens=False)
                                    for line in lines[1:]])


if __name__ == "__main__":
    sys.exit(main())
