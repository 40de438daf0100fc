"""The static proof across CTAs (lowering.verify.grid_protocol): the split-K turnstile's
semaphores, fences and barriers, proved for every split factor and grid size, and each of
them, dropped alone, refused by name; separation of tiles refused where it cannot be shown.

The hand-built turnstile of tests/test_grid_sync.py (whose interpreter runs catch the same
drops) and the kernels the matmul scheduler lowers for both instruction sets.
"""

import copy

import numpy as np

import pytest

import codegen
import fuserir
import kir_examples as ex
from codegen.errors import HazardError
from fuserir.dtypes import DataType
from fuserir.errors import ScheduleError
from fuserir.dsl.parser import parse_file
from lowering import kir
from lowering.passes.verify_hazards import verify
from lowering.pipeline import lower
from lowering.verify.grid_protocol import check_grid_protocol, has_grid_protocol
from test_grid_sync import _relay, turnstile
from test_hopper_matmul import HOPPER, SEED, scheduled
from test_matmul import seed_fusion as sm80_seed

from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def kinds(findings):
    return sorted({h.kind for h in findings})


# -- the hand-built turnstile --------------------------------------------------------------

def test_the_turnstile_is_proved_for_every_split_factor():
    assert check_grid_protocol(turnstile()) == []


@pytest.mark.parametrize("piece", ["fence", "wait", "producer_barrier", "consumer_barrier"])
def test_a_turnstile_without_a_piece_of_its_handshake_races_across_ctas(piece):
    findings = check_grid_protocol(turnstile(**{piece: False}))
    races = [h for h in findings if h.kind == "cross-cta"]
    assert races and all(h.buffer == "ws" for h in races), findings
    (raw,) = [h for h in races if h.detail.startswith("RAW")]
    assert raw.first.endswith("= acc[0]") and "ws[" in raw.first     # the partials' write
    assert "ws[" in raw.second and "acc[0] = " in raw.second          # read by the next split
    assert "split factor 2" in raw.detail and "block z=1" in raw.detail \
        and "block z=0" in raw.detail


def test_a_turnstile_without_its_release_deadlocks_the_next_split():
    findings = check_grid_protocol(turnstile(release=False))
    (stuck,) = [h for h in findings if h.kind == "deadlock"]
    assert stuck.buffer == "sem" and "sem_wait" in stuck.first
    assert "block z=1 waits for sem == 1 and no block stores it" in stuck.detail


def test_a_turnstile_without_its_reset_leaves_the_semaphore_set():
    (left,) = check_grid_protocol(turnstile(reset=False))
    assert left.kind == "workspace" and left.buffer == "sem" and left.second == "END"
    assert "semaphore sem is left 1 after the launch" in left.detail


def test_a_turnstile_whose_first_launched_block_waits_for_later_ones_is_refused():
    # the interpreter runs it (every block resident); a GPU that dispatches in launch
    # order with fewer blocks resident than the turn would hang
    (h,) = check_grid_protocol(turnstile(reverse=True))
    assert h.kind == "deadlock" and h.buffer == "sem"
    assert "block z=0 waits for a release of block z=1, launched after it" in h.detail


def test_acquire_is_transitive_through_a_re_release():
    assert check_grid_protocol(_relay(second_waits=True)) == []
    findings = check_grid_protocol(_relay(second_waits=False))
    (h,) = [h for h in findings if h.kind == "cross-cta"]
    assert h.buffer == "ws" and "block z=2" in h.detail and "block z=0" in h.detail
    # and split 1's release, no longer after split 0's, can be overwritten by it: split 2
    # then waits forever, or the last value stays
    assert kinds(findings) == ["cross-cta", "deadlock", "workspace"]


# -- separation of tiles ---------------------------------------------------------------

def _rewrite(kernel, buffer, index):
    """`kernel` with every access of `buffer` at index(old index)."""
    kernel = copy.deepcopy(kernel)
    for s in kir.walk(kernel.body):
        for f in ("index", "value"):
            e = getattr(s, f, None)
            if isinstance(e, kir.ScalarExpr):
                setattr(s, f, _rewrite_expr(e, buffer, index))
        if getattr(s, "buffer", None) is not None and s.buffer.name == buffer:
            s.index = index(s.index)
        if getattr(s, "sem", None) is not None and s.sem.name == buffer:
            s.index = index(s.index)
    return kernel


def _rewrite_expr(e, buffer, index):
    if isinstance(e, kir.Load) and e.buffer.name == buffer:
        return kir.Load(e.buffer, index(e.index), e.access, e.width)
    from dataclasses import fields, replace
    changes = {f.name: _rewrite_expr(getattr(e, f.name), buffer, index) for f in fields(e)
               if isinstance(getattr(e, f.name), kir.ScalarExpr)}
    return replace(e, **changes) if changes else e


def test_a_workspace_shared_by_the_tiles_cannot_be_proved():
    # the partials indexed by thread only: every tile's blocks would meet there
    kernel = _rewrite(turnstile(), "ws", lambda i: ex.add(ex.mul(ex.tid("y"), ex.const(32)),
                                                          ex.tid("x")))
    findings = check_grid_protocol(kernel)
    assert any(h.kind == "cannot-prove" and h.buffer == "ws" and
               "blocks of different tiles touch different elements" in h.detail
               for h in findings), findings


def test_a_semaphore_cell_that_depends_on_the_turn_cannot_be_proved():
    kernel = _rewrite(turnstile(), "sem", lambda i: ex.add(i, ex.bid("z")))
    findings = check_grid_protocol(kernel)
    assert any(h.kind == "cannot-prove" and h.buffer == "sem" and
               "depends on blockIdx.z" in h.detail for h in findings), findings


def test_a_semaphore_operation_in_a_loop_cannot_be_proved():
    kernel = turnstile()
    wait = next(s for s in kernel.body if isinstance(s, kir.IfThenElse))
    loop = kir.ForLoop(kir.Var("i", ex.I32), ex.const(2), [wait])
    kernel.body[kernel.body.index(wait)] = loop
    kir.relabel(kernel.body)
    (h,) = check_grid_protocol(kernel)
    assert h.kind == "cannot-prove" and "sem_wait" in h.first
    assert "a semaphore operation inside a loop" in h.detail


def test_kernels_without_workspaces_or_grid_synchronization_have_no_grid_protocol():
    kernel, _ = lower(parse_file(EXAMPLES / "bias_relu_matmul.fz"))
    assert not has_grid_protocol(kernel) and check_grid_protocol(kernel) == []


# -- the kernels the matmul scheduler lowers -------------------------------------------

def _seed():
    return lower(parse_file(EXAMPLES / "seed_matmul.fz"))[0]


def _hopper_seed():
    return lower(scheduled(SEED))[0]


def _hopper_epilogue():
    return lower(scheduled(dict(HOPPER, splitk_factor=2), layout="NT", epilogue=True))[0]


def _protocol_syncs(kernel):
    """The statements after the grid reduction's comment that order memory between
    blocks or hand it between the block's threads (the protocol's syncs)."""
    body = list(kir.walk(kernel.body))
    start = next(i for i, s in enumerate(body) if isinstance(s, kir.Comment)
                 and "grid reduction of" in s.line())
    syncs = []
    for s in body[start:]:
        order = s.effects().order
        if order is not None and (order.scope == "gpu" or (
                order.kind == "barrier" and not any(r for r in getattr(s, "reasons", ())))):
            syncs.append(s)
    return syncs


def _without(kernel, stmt):
    kernel = copy.deepcopy(kernel)
    label = stmt.label
    for s in [None] + list(kir.walk(kernel.body)):
        for body in ([kernel.body] if s is None else s.bodies()):
            for i, c in enumerate(body):
                if c.label == label:
                    del body[i]
                    return kernel
    raise AssertionError(label)


def _expected(stmt):
    """What dropping a protocol sync breaks: the handoff of the partials, a wait that
    never ends (the turnstile's forward release, an arrival), or the semaphore left set
    for the next launch."""
    line = stmt.line()
    if "sem_release" in line:
        return "workspace" if line.endswith("= 0  (release)") else "deadlock"
    if "sem_arrive" in line:
        return "deadlock"
    return "cross-cta"


@pytest.mark.parametrize("build", [_seed, _hopper_seed, _hopper_epilogue],
                         ids=["sm80 seed", "hopper seed", "hopper bias relu"])
def test_the_seed_turnstile_is_proved_and_each_of_its_syncs_dropped_alone_is_refused(build):
    kernel = build()
    assert has_grid_protocol(kernel) and check_grid_protocol(kernel) == []
    syncs = _protocol_syncs(kernel)
    lines = [s.line() for s in syncs]
    assert sum("sem_wait" in x for x in lines) == 1 and sum("sem_release" in x
                                                             for x in lines) == 2
    assert sum("__threadfence" in x for x in lines) == 1
    assert sum(x.startswith(("__syncthreads", "bar.sync")) for x in lines) == 2
    for s in syncs:
        dropped = _without(kernel, s)
        with pytest.raises(HazardError) as info:
            verify(dropped)
        found = {h.kind for h in info.value.hazards}
        # (a barrier of the turnstile may order shared memory too: in the Hopper seed the
        # one after the wait also orders the epilogue's writes over the operand stages)
        assert _expected(s) in found, (s.line(), info.value)


def _sm80_parallel():
    return lower(sm80_seed(splitk_mode="parallel"))[0]


def _hopper_parallel():
    """128x128 tiles: 64 accumulator elements a thread, too many to keep live through
    the sum beside 384 threads' registers: the gathered form."""
    return lower(scheduled(dict(HOPPER, splitk_mode="parallel", splitk_factor=2),
                           layout="NT", epilogue=True))[0]


NARROW = dict(HOPPER, cta_tile=(128, 64, 64), warp_tile=(64, 64, 64),
              instruction_tile=(64, 64, 16))


def _hopper_parallel_narrow():
    """128x64 tiles: 32 accumulator elements a thread: stored where summed."""
    return lower(scheduled(dict(NARROW, splitk_mode="parallel", splitk_factor=2),
                           layout="NT", epilogue=True))[0]


@pytest.mark.parametrize("build", [_sm80_parallel, _hopper_parallel],
                         ids=["sm80 seed", "hopper 128x128 bias relu"])
def test_the_gathered_parallel_reduction_is_proved_and_each_of_its_syncs_dropped_alone_is_refused(
        build):
    """The output staged through shared memory (the sm80 seed), or an accumulator too
    large to keep live through the sum: every CTA of a tile publishes its partials and
    arrives, waits for all, sums its slice, arrives again; the last waits for every slice
    and resets both counters. A co-resident kernel: waiting for CTAs launched later is no
    deadlock."""
    kernel = build()
    assert kernel.co_resident
    assert has_grid_protocol(kernel) and check_grid_protocol(kernel) == []
    lines = [s.line() for s in _protocol_syncs(kernel)]
    assert any("each summing a slice" in s.line() for s in kir.walk(kernel.body)
               if isinstance(s, kir.Comment))
    assert [x.split()[0] for x in lines if x.startswith("sem_")] == [
        "sem_arrive", "sem_wait", "sem_arrive", "sem_wait", "sem_release", "sem_release"]
    assert sum("__threadfence" in x for x in lines) == 2
    assert sum(x.startswith(("__syncthreads", "bar.sync")) for x in lines) == 4
    for s in _protocol_syncs(kernel):
        with pytest.raises(HazardError) as info:
            verify(_without(kernel, s))
        found = {h.kind for h in info.value.hazards}
        assert _expected(s) in found, (s.line(), info.value)


def _owned_store_guards(kernel):
    """The conditions that keep each CTA's output stores to the elements it summed."""
    return [s for s in kir.walk(kernel.body) if isinstance(s, kir.IfThenElse)
            and " >= " in s.line() and "blockIdx.z" in s.line()
            and any(isinstance(c, kir.Store) and c.buffer.name == "out"
                    for c in kir.walk(s.then_body))]


def test_the_stored_where_summed_parallel_reduction_is_proved_and_each_sync_dropped_is_refused():
    """The output stored from registers: every CTA of a tile publishes its partials,
    arrives and waits for all, then says it passed; it sums a run of the threads'
    elements over the splits in order and stores those elements itself. The last CTA
    waits until every CTA has passed the wait, then resets both counters. Each sync
    dropped alone is refused: the handoff of the partials as "cross-cta", an arrival
    as "deadlock", the wait for every CTA's passing as a "deadlock" (a CTA still waiting
    for the count the reset took away), a reset as "workspace"."""
    kernel = _hopper_parallel_narrow()
    assert kernel.co_resident
    assert has_grid_protocol(kernel) and check_grid_protocol(kernel) == []
    assert any("each summing and storing a run" in s.line() for s in kir.walk(kernel.body)
               if isinstance(s, kir.Comment))
    syncs = _protocol_syncs(kernel)
    lines = [s.line() for s in syncs]
    sems = [x for x in lines if x.startswith("sem_")]
    assert [x.split()[0] + " " + x.split()[1].split("[")[0] for x in sems] == [
        "sem_arrive acc_arrived", "sem_wait acc_arrived", "sem_arrive acc_passed",
        "sem_wait acc_passed", "sem_release acc_arrived", "sem_release acc_passed"]
    assert sum("__threadfence" in x for x in lines) == 1
    assert sum(x.startswith(("__syncthreads", "bar.sync")) for x in lines) == 2
    expected = {sems[0]: "deadlock", sems[1]: "cross-cta", sems[2]: "deadlock",
                sems[3]: "deadlock", sems[4]: "workspace", sems[5]: "workspace"}
    for s in syncs:
        with pytest.raises(HazardError) as info:
            verify(_without(kernel, s))
        found = {h.kind for h in info.value.hazards}
        assert expected.get(s.line(), "cross-cta") in found, (s.line(), info.value)
    assert len(_owned_store_guards(kernel)) == 1


def test_output_stores_not_kept_to_the_summed_elements_race_across_ctas():
    """Without the condition that keeps a CTA's stores to the elements it summed, every
    CTA of a tile stores every element: the proof refuses it as a cross-CTA write after
    write on the output, and the interpreter sees the race."""
    from codegen.errors import RaceError
    from codegen.interp import run_kernel
    import mutation
    kernel = copy.deepcopy(_hopper_parallel_narrow())
    (guard,) = _owned_store_guards(kernel)
    for s in [None] + list(kir.walk(kernel.body)):
        for body in ([kernel.body] if s is None else s.bodies()):
            if guard in body:
                at = body.index(guard)
                body[at:at + 1] = guard.then_body
    findings = check_grid_protocol(kernel)
    assert any(h.kind == "cross-cta" and h.buffer == "out" and "WAW" in str(h)
               for h in findings), findings
    with pytest.raises(RaceError) as info:
        run_kernel(kernel, mutation.arguments(kernel, {"M": 256, "N": 128, "K": 64 * 4,
                                                       "splitk": 2}))
    assert "cross-cta" in {h.kind for h in info.value.hazards}, info.value


def test_a_parallel_reduction_not_marked_co_resident_is_refused_as_a_deadlock():
    """Without the co-residency the launcher checks, a CTA waiting on the arrival of
    CTAs launched after it could wait forever: the verifier says so by name."""
    kernel = _sm80_parallel()
    kernel.co_resident = False
    findings = check_grid_protocol(kernel)
    assert "deadlock" in kinds(findings)
    assert any("launched after" in str(h) for h in findings), findings


def _sm80_atomic():
    return lower(sm80_seed(splitk_mode="atomic"))[0]


def _hopper_atomic():
    return lower(scheduled(dict(HOPPER, splitk_mode="atomic", splitk_factor=2),
                           layout="NT", epilogue=True))[0]


def _zero_stores(kernel):
    return [s for s in kir.walk(kernel.body) if isinstance(s, kir.Store)
            and s.buffer.name.endswith("_sums") and isinstance(s.value, kir.Const)]


@pytest.mark.parametrize("build", [_sm80_atomic, _hopper_atomic],
                         ids=["sm80 seed", "hopper bias relu"])
def test_the_atomic_reduction_is_proved_and_each_of_its_syncs_dropped_alone_is_refused(build):
    """Atomic adds into the tile's sums, an arrival each; the last CTA waits for all,
    reads the sums, stores zeros back and resets the counter. The adds of two CTAs do not
    conflict; each sync dropped, and the store of zeros dropped, is refused by name."""
    kernel = build()
    assert kernel.co_resident
    assert [w.zeroed for w in kernel.workspaces] == [True, True]
    assert has_grid_protocol(kernel) and check_grid_protocol(kernel) == []
    adds = [s for s in kir.walk(kernel.body) if isinstance(s, kir.AtomicAdd)]
    assert len(adds) == 1 and adds[0].line().startswith("atomic_add acc_sums[")
    syncs = _protocol_syncs(kernel)
    lines = [s.line() for s in syncs]
    assert [x.split()[0] for x in lines if x.startswith("sem_")] == [
        "sem_arrive", "sem_wait", "sem_release"]
    assert sum("__threadfence" in x for x in lines) == 1
    assert sum(x.startswith(("__syncthreads", "bar.sync")) for x in lines) == 2
    (zeros,) = _zero_stores(kernel)
    for s, expected in [(s, _expected(s)) for s in syncs] + [(zeros, "workspace")]:
        with pytest.raises(HazardError) as info:
            verify(_without(kernel, s))
        found = {h.kind for h in info.value.hazards}
        assert expected in found, (s.line(), info.value)


def test_zeros_stored_by_other_threads_or_at_another_index_do_not_undo_the_adds():
    """The store of zeros must cover every element the adds touch: by the same threads
    at the same index. Stored by thread 0 only, or one element along, it is refused."""
    kernel = _sm80_atomic()
    (zeros,) = _zero_stores(kernel)
    narrowed = copy.deepcopy(kernel)
    (store,) = _zero_stores(narrowed)
    guard = kir.IfThenElse(kir.BinOp("eq", kir.Special(kir.SpecialKind.threadIdx, "x",
                                                        store.index.dtype),
                                     kir.Const(0, store.index.dtype), DataType.bool),
                           [kir.Store(store.buffer, store.index, store.value)])
    for s in kir.walk(narrowed.body):
        for body in s.bodies():
            if store in body:
                body[body.index(store)] = guard
    shifted = copy.deepcopy(kernel)
    (store,) = _zero_stores(shifted)
    store.index = kir.BinOp("add", store.index, kir.Const(1, store.index.dtype),
                            store.index.dtype)
    for changed in (narrowed, shifted):
        findings = check_grid_protocol(changed)
        assert "workspace" in kinds(findings), findings
        assert any("not stored back to zero" in str(h) for h in findings)


def test_an_atomic_max_reduction_is_refused_by_name():
    f = fuserir.parse("fusion f(h: f32[M, N]) { r = max(h, axes=[1])  output r }")
    r = f.tensor("r")
    r.split(1, 4, inner=False)
    r.parallelize(1, "BIDz")
    r.parallelize(0, "BIDx")
    r.atomic_grid_reduction()
    with pytest.raises(ScheduleError, match="an atomic grid reduction adds its partials"):
        codegen.compile(f, backend="interp")


def test_the_interpreter_catches_the_atomic_reductions_missing_zeros_and_fence():
    """The same drops run: without the store of zeros the launch leaves the sums non-zero
    (a "workspace" hazard); without the fence the last CTA reads adds it never acquired
    ("cross-cta"). The clean kernel runs without a hazard and gives the product."""
    from codegen.interp import run_kernel
    from codegen.errors import RaceError
    import mutation
    kernel = _sm80_atomic()
    sizes = {"M": 256, "N": 128, "K": 32 * 3 * 2, "splitk": 2}
    args = mutation.arguments(kernel, sizes)
    run_kernel(kernel, args)
    a, b = (args[n].astype(np.float64) for n in ("A", "B"))
    assert np.array_equal(args["out"].astype(np.float64), a.T @ b)
    (zeros,) = _zero_stores(kernel)
    (fence,) = [s for s in _protocol_syncs(kernel) if "__threadfence" in s.line()]
    for dropped, kind in ((zeros, "workspace"), (fence, "cross-cta")):
        with pytest.raises(RaceError) as info:
            run_kernel(_without(kernel, dropped), mutation.arguments(kernel, sizes))
        assert kind in {h.kind for h in info.value.hazards}, info.value


def test_zeros_stored_before_the_other_blocks_adds_do_not_undo_them():
    """The last CTA's store of zeros moved before its wait: other CTAs' adds may land
    after it, leaving the sums non-zero for the next launch: refused as "workspace" (and
    the unordered accesses as "cross-cta")."""
    kernel = copy.deepcopy(_sm80_atomic())
    (zeros,) = _zero_stores(kernel)
    for s in kir.walk(kernel.body):
        for body in s.bodies():
            loops = [c for c in body if isinstance(c, kir.ForLoop) and zeros in c.body]
            if loops:
                (take,) = loops
                body.remove(take)
                body.insert(0, take)       # before the thread-0 wait and its barrier
    findings = check_grid_protocol(kernel)
    assert {"workspace", "cross-cta"} <= set(kinds(findings)), findings
    assert any("not stored back to zero" in str(h) for h in findings)
