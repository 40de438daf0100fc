"""Classic sync-placement cases, ported as fusions with explicit schedules.

For each: the interpreter's result equals the reference and it sees no race; without the
sync-insertion pass the verifier refuses the kernel (HazardError) and, with verification
off too, the interpreter reports the race; and dropping any single inserted barrier alone
makes the interpreter find a race (so every barrier the pass inserts is needed).
"""

import numpy as np
import pytest

import codegen
import fuserir
from codegen import HazardError, RaceError
from lowering import kir

# Two shared tensors written by producers whose TIDx/TIDy bindings are swapped relative
# to their one consumer: one barrier after both writes, none between them.
SWAPPED = """
fusion swapped(a: f32[8, 8], b: f32[8, 8]) {
  z = a + b
  output z
}
schedule swapped {
  as = a.cache_after(shared)
  bs = b.cache_after(shared)
  z.parallelize(0, TIDy)
  z.parallelize(1, TIDx)
  as.compute_at(z, 0)
  bs.compute_at(z, 0)
  as.parallelize(0, TIDx)
  as.parallelize(1, TIDy)
  bs.parallelize(0, TIDx)
  bs.parallelize(1, TIDy)
}
"""

# A serial write then a parallel read of a shared tensor: the axes map exactly, but the
# write is made by thread 0 alone, so the readers need a barrier.
SERIAL_WRITE = """
fusion serial_write(x: f32[64]) {
  y = x * 2
  output y
}
schedule serial_write {
  xs = x.cache_after(shared)
  xs.compute_at(y, 0)
  y.parallelize(0, TIDx)
}
"""

# A loop that rewrites a shared buffer each iteration, read back under another thread
# mapping: a RAW barrier before the read and a loop-carried WAR barrier at the loop end.
REWRITE_LOOP = """
fusion rewrite_loop(x: f32[M, 32]) {
  y = x + 1
  output y
}
schedule rewrite_loop {
  xs = x.cache_after(shared)
  y.split(1, 8)
  y.parallelize(1, TIDy)
  y.parallelize(2, TIDx)
  xs.compute_at(y, 1)
  xs.split(1, 4)
  xs.parallelize(1, TIDx)
  xs.parallelize(2, TIDy)
}
"""

# The same loop where every thread only touches its own bytes: no barrier at all.
OWN_BYTES = """
fusion own_bytes(x: f32[M, 32]) {
  y = x + 1
  output y
}
schedule own_bytes {
  xs = x.cache_after(shared)
  y.split(1, 8)
  y.parallelize(1, TIDy)
  y.parallelize(2, TIDx)
  xs.compute_at(y, 1)
  xs.split(1, 8)
  xs.parallelize(1, TIDy)
  xs.parallelize(2, TIDx)
}
"""

CASES = {"swapped": SWAPPED, "serial_write": SERIAL_WRITE, "rewrite_loop": REWRITE_LOOP,
         "own_bytes": OWN_BYTES}


def inputs_for(fusion, rng):
    sizes = {"M": 5}
    out = {}
    for tv in fusion.inputs:
        shape = [e if isinstance(e, int) else sizes[str(e)] for e in tv.shape]
        out[tv.name] = rng.integers(-50, 50, shape).astype(np.float32)
    return out


def barriers(exe):
    return [s for s in kir.walk(exe.kernels[0].kir.body) if isinstance(s, kir.Barrier)]


def run_checked(fusion, rng, **options):
    exe = codegen.compile(fusion, backend="interp", **options)
    inputs = inputs_for(fusion, rng)
    got = exe.run(inputs)
    want = fuserir.evaluate(fusion, inputs)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    return exe


@pytest.fixture
def rng():
    return np.random.default_rng(1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_result_matches_reference_without_race(case, rng):
    run_checked(fuserir.parse(CASES[case]), rng)


def _top_level_kinds(exe):
    return [type(s).__name__ for s in exe.kernels[0].kir.body
            if not isinstance(s, kir.Allocate)]


def test_swapped_bindings_need_one_barrier_after_both_writes(rng):
    exe = run_checked(fuserir.parse(SWAPPED), rng)
    (barrier,) = barriers(exe)
    body = [s for s in exe.kernels[0].kir.body if not isinstance(s, kir.Allocate)]
    position = body.index(barrier)
    writes = [s for s in body[:position] for t in kir.walk([s])
              if isinstance(t, kir.Store) and t.buffer.memory is kir.Memory.shared]
    assert {w.buffer.name for w in writes} == {"as", "bs"}
    assert [r.kind.value for r in barrier.reasons] == ["RAW", "RAW"]
    assert {r.buffers for r in barrier.reasons} == {("as",), ("bs",)}


def test_serial_write_then_parallel_read_needs_a_barrier(rng):
    exe = run_checked(fuserir.parse(SERIAL_WRITE), rng)
    (barrier,) = barriers(exe)
    (reason,) = barrier.reasons
    assert reason.kind is kir.HazardKind.RAW and reason.buffers == ("xs",)
    assert "(threadIdx.x == 0)" in exe.kernels[0].kir_text   # the redundant-write guard


def test_rewrite_loop_needs_raw_and_loop_carried_war(rng):
    exe = run_checked(fuserir.parse(REWRITE_LOOP), rng)
    raw, war = barriers(exe)
    (loop,) = [s for s in exe.kernels[0].kir.body if isinstance(s, kir.ForLoop)]
    assert loop.body[-1] is war
    assert [(r.kind.value, r.loop_carried) for r in raw.reasons] == [("RAW", False)]
    assert [(r.kind.value, r.loop_carried) for r in war.reasons] == [("WAR", True)]


def test_own_bytes_needs_no_barrier(rng):
    exe = run_checked(fuserir.parse(OWN_BYTES), rng)
    assert barriers(exe) == []


@pytest.mark.parametrize("case", ["swapped", "serial_write", "rewrite_loop"])
def test_without_sync_insertion_verifier_refuses_and_interpreter_sees_race(case, rng):
    fusion = fuserir.parse(CASES[case])
    with pytest.raises(HazardError) as refused:
        codegen.compile(fusion, backend="interp", disable_passes=("insert_syncs",))
    assert refused.value.hazards
    exe = codegen.compile(fusion, backend="interp", disable_passes=("insert_syncs",),
                          verify=False)
    with pytest.raises(RaceError) as raced:
        exe.run(inputs_for(fusion, rng))
    kinds = {h.kind for h in raced.value.hazards}
    assert kinds & {"RAW", "WAR", "WAW"}
    assert all(h.buffer in ("xs", "as", "bs") for h in raced.value.hazards)


@pytest.mark.parametrize("case", ["swapped", "serial_write", "rewrite_loop"])
def test_every_inserted_barrier_is_necessary(case, rng):
    fusion = fuserir.parse(CASES[case])
    ids = [b.sync_id for b in barriers(codegen.compile(fusion, backend="interp"))]
    assert ids
    for sync_id in ids:
        with pytest.raises(HazardError):
            codegen.compile(fusion, backend="interp", drop_syncs=(sync_id,))
        exe = codegen.compile(fusion, backend="interp", drop_syncs=(sync_id,), verify=False)
        with pytest.raises(RaceError):
            exe.run(inputs_for(fusion, rng))


def test_drop_syncs_names_an_unknown_barrier():
    fusion = fuserir.parse(SERIAL_WRITE)
    with pytest.raises(fuserir.FuserirError, match=r"drop_syncs: kernel serial_write has no "
                                                   r"barrier sync7 \(it has: sync1\)"):
        codegen.compile(fusion, backend="interp", drop_syncs=("sync7",))
