"""Run-time values in the async verifier (lowering.verify.async_runtime, lowering.verify.async_skeleton,
lowering.verify.async_periodic): tests/hopper_pipelines.py's sched_matmul, the kernel shape the
Hopper scheduler lowers (blockDim (128, 3, 1), a K loop of ceildiv(K, 64) iterations,
f16 stores to global memory under a bounds predicate, optionally split-K's turnstile), is
proved for every trip count; each fault is found as in the same kernel with a constant
trip count; what the argument does not cover is refused by name; insert_async_syncs puts
back what is stripped; the interpreter computes the exact product at several sizes."""

import numpy as np
import pytest

import hopper_pipelines as hp
import kir_examples as ex
from codegen.interp import run_kernel
from fuserir.dtypes import DataType
from lowering import kir
from lowering.verify import async_protocol
from lowering.verify import async_runtime
from lowering.verify.async_periodic import eventual_period, period
from lowering.verify.async_protocol import check_async_protocol, verify_async_protocol
from lowering.verify.async_skeleton import Skeleton
from lowering.verify.async_syncs import insert_async_syncs

I32, F32 = DataType.i32, DataType.f32
c = ex.const
SHAPES = {"two stages": dict(), "three stages": dict(stages=3),
          "four stages": dict(stages=4), "split-K": dict(split_k=True),
          "a wgmma group in flight": dict(overlap=True),
          "four stages, a group in flight, split-K": dict(stages=4, overlap=True,
                                                          split_k=True)}


def _loop(kernel, name):
    return next(s for s in kir.walk(kernel.body)
                if isinstance(s, kir.ForLoop) and s.var.name == name)


def _expected(args):
    return (args["A"].astype(np.float64) @ args["B"].astype(np.float64).T).astype(np.float16)


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES)
def test_the_scheduler_kernel_is_proved_for_every_trip_count(shape):
    verify_async_protocol(hp.sched_matmul(**shape))


@pytest.mark.parametrize("stages", (2, 3, 4))
def test_the_base_cases_are_every_trip_count_up_to_the_derived_bound(stages, monkeypatch):
    """With P = W = m1 = m2 = stages (stage period; the producer waits a stage's phase
    from `stages` iterations back; its first `stages` waits pass on fresh barriers; the
    consumers' last `stages` releases are never waited for), B = m1 + m2 + 2W + 3P - 1."""
    unrolled = []
    real = async_runtime.Trace

    def recording(kernel, known, skeleton, trips, outcomes):
        unrolled.append(tuple(trips.values()))
        return real(kernel, known, skeleton, trips, outcomes)
    monkeypatch.setattr(async_runtime, "Trace", recording)
    monkeypatch.setattr(async_protocol, "_VERDICTS", {})    # no verdict kept from before
    assert check_async_protocol(hp.sched_matmul(stages=stages)) == []
    bound = 7 * stages - 1
    assert sorted(set(unrolled)) == [(t,) for t in range(bound + 1)]


def test_the_producer_and_consumer_loops_share_one_trip_count():
    [(extent, loops)] = Skeleton(hp.sched_matmul()).trip_counts.values()
    assert kir.format_expr(extent) == "ceildiv(K, 64)"
    assert sorted(loop.var.name for loop in loops) == ["k", "pk"]


def _kinds(kernel):
    return {h.kind for h in check_async_protocol(kernel)}


@pytest.mark.parametrize("drop", hp.SCHED_DROPS)
def test_each_fault_is_found_as_with_a_constant_trip_count(drop):
    constant = _kinds(hp.sched_matmul(k_tiles=6, drop=(drop,)))
    hazards = check_async_protocol(hp.sched_matmul(drop=(drop,)))
    assert constant and {h.kind for h in hazards} == constant
    assert "cannot-prove" not in constant
    assert all("(when ceildiv(K, 64) = " in h.detail for h in hazards)


def test_releasing_the_stage_still_read_by_a_wgmma_in_flight_is_found():
    """With one group in flight the release of iteration k - 1 sits under `if (k > 0)`
    (an eventually constant guard, settled from iteration 1); releasing iteration k's
    stage instead is the WAR of the constant kernel."""
    assert check_async_protocol(hp.sched_matmul(overlap=True)) == []
    assert _kinds(hp.sched_matmul(overlap=True, drop=("release_early",))) == \
        _kinds(hp.sched_matmul(overlap=True, k_tiles=6, drop=("release_early",))) == {"WAR"}


@pytest.mark.parametrize("drop", ("init_barrier", "release_early", "wgmma_fence"))
def test_each_fault_is_found_in_the_split_k_kernel(drop):
    assert _kinds(hp.sched_matmul(split_k=True, drop=(drop,))) == \
        _kinds(hp.sched_matmul(k_tiles=6, drop=(drop,)))


def test_a_finding_names_threads_by_x_y_z_and_the_trip_count():
    hazards = check_async_protocol(hp.sched_matmul(drop=("release_early",)))
    h = next(h for h in hazards if h.buffer == "a_stages")
    assert h.kind == "WAR" and "wgmma" in h.first and "tma.load a_stages" in h.second
    assert h.threads == ((0, 0, 0), (0, 2, 0))        # a consumer, the producer's thread
    assert h.iterations == ({"k": 0}, {"pk": 2})      # the refill, two stages later
    assert h.detail.endswith("(when ceildiv(K, 64) = 8)")


def test_a_parity_that_does_not_repeat_is_refused_naming_the_loop():
    kernel = hp.sched_matmul()
    loop = _loop(kernel, "k")
    wait = next(s for s in kir.walk(loop.body) if isinstance(s, kir.MbarrierWait))
    wait.parity = ex.lt(loop.var, c(3))
    [h] = check_async_protocol(kernel)
    assert h.kind == "cannot-prove"
    assert h.first.startswith(f"{wait.label}: mbarrier.wait")
    assert h.detail.startswith(
        f"cannot prove: parity of the wait on bars[0]: (k < 3) is not periodic in k, the "
        f"variable of the run-time loop {loop.label} (for k in 0..ceildiv(K, 64))")


def test_a_shared_index_that_grows_with_the_loop_is_refused_naming_the_loop():
    buf = kir.Buffer("buf", F32, kir.Memory.shared, size=c(4096), byte_offset=c(0))
    i, n = kir.Var("i", I32), ex.scalar("n")
    loop = kir.ForLoop(i, n.var, [kir.Store(buf, ex.add(ex.mul(i, c(128)), ex.tid()),
                                            c(0.0, F32))])
    kernel = ex.finish(kir.Kernel("growing", [], [n], [kir.Allocate(buf), loop],
                                  ex.launch([c(1)], [c(128)])))
    [h] = check_async_protocol(kernel)
    assert h.kind == "cannot-prove" and h.first.startswith(f"{loop.body[0].label}: buf[")
    assert h.detail.startswith(f"cannot prove: the index into buf ((i * 128) + threadIdx.x) "
                               f"is not periodic in i, the variable of the run-time loop "
                               f"{loop.label} (for i in 0..n)")


def test_a_wait_for_a_phase_that_never_forms_in_a_cycle_of_waits_is_a_deadlock():
    """(Found by comparing mutated pipelines' verdicts with and without a run-time trip
    count; the verifier used to fail on it.) The consumers wait on full[(k + 1) % 3] and
    the producer on the wrong empty parity."""
    kernel = hp.sched_matmul(stages=3, k_tiles=2, drop=("empty_parity",))
    loop = _loop(kernel, "k")
    wait = next(s for s in loop.body if isinstance(s, kir.MbarrierWait))
    wait.index = ex.binop("mod", ex.add(loop.var, c(1)), c(3))
    hazards = check_async_protocol(kernel)
    assert {h.kind for h in hazards} == {"deadlock"}
    assert any("never passes" in h.detail for h in hazards)


def test_loops_of_equal_but_different_extents_are_refused_by_name():
    """The argument pairs waits with phases of one trip count: a producer loop of
    (K + 63) / 64 iterations and a consumer loop of ceildiv(K, 64) are two counts."""
    kernel = hp.sched_matmul()
    producer = _loop(kernel, "pk")
    K = next(p.var for p in kernel.scalar_params if p.var.name == "K")
    producer.extent = ex.binop("div", ex.add(K, c(63)), c(64))
    [h] = check_async_protocol(kernel)
    assert h.kind == "cannot-prove"
    assert "must have one extent expression" in h.detail
    assert f"({producer.label}: for pk in 0..((K + 63) / 64))" in h.detail


def test_a_persistent_kernel_whose_parities_assume_four_k_tiles_is_not_proved():
    kernel = hp.ws_matmul(tiles=2)
    n = ex.scalar("n")
    kernel.scalar_params.append(n)
    for name in ("k", "pk"):
        _loop(kernel, name).extent = n.var
    hazards = check_async_protocol(kernel)
    assert hazards and {h.kind for h in hazards} <= {"mbarrier", "deadlock", "cannot-prove"}


def _shared_kernel(outer, inner, barriers=2, predicate=None):
    """128 threads: for i < outer: for j < inner: buf[t] = 1; sync; y[t] = buf[127 - t];
    sync (the second sync left out with barriers=1)."""
    buf = kir.Buffer("buf", F32, kir.Memory.shared, size=c(128), byte_offset=c(0))
    y = ex.tensor("y", F32, [c(128)], is_output=True)
    t = ex.tid()
    i, j = kir.Var("i", I32), kir.Var("j", I32)
    body = [kir.Store(buf, t, c(1.0, F32)), kir.Barrier(),
            ex.store(y, [t], kir.Load(buf, ex.sub(c(127), t)))]
    if barriers == 2:
        body.append(kir.Barrier())
    if predicate is not None:
        body = [kir.IfThenElse(predicate, body)]
    scalars = [p for p in (outer, inner) if isinstance(p, kir.ScalarParam)]
    extent = lambda e: e.var if isinstance(e, kir.ScalarParam) else c(e)  # noqa: E731
    loops = [kir.Allocate(buf), kir.ForLoop(i, extent(outer),
                                            [kir.ForLoop(j, extent(inner), body)])]
    return ex.finish(kir.Kernel("shared_loops", [y], scalars, loops,
                                ex.launch([c(1)], [c(128)])))


def test_nested_run_time_loops_are_proved_and_a_missing_barrier_found():
    assert check_async_protocol(_shared_kernel(ex.scalar("m"), ex.scalar("n"))) == []
    kinds = _kinds(_shared_kernel(ex.scalar("m"), ex.scalar("n"), barriers=1))
    assert kinds == _kinds(_shared_kernel(2, 3, barriers=1)) == {"WAR"}


def test_an_if_on_run_time_values_is_skipped_unless_it_touches_shared_memory():
    M = ex.scalar("M")
    row_ok = ex.lt(ex.tid(), M.var)                   # threads and a run-time size
    kernel = _shared_kernel(2, 2, predicate=row_ok)
    kernel.scalar_params.append(M)
    [h] = check_async_protocol(kernel)
    assert h.kind == "cannot-prove"
    assert h.detail == ("cannot prove: condition (threadIdx.x < M) is neither a function of "
                        "the thread index and the loop variables nor uniform over the block, "
                        "and synchronization runs under it")
    # the scheduler kernel's epilogue, `if (row < M && col < N)` around global stores,
    # is skipped: the kernel is proved (test_the_scheduler_kernel_is_proved...)


def test_plain_accesses_under_a_run_time_predicate_are_taken_to_happen_either_way():
    """`if (threadIdx.x < M)` around shared accesses with no synchronization under it
    (the epilogue's bounds predicate): every thread is taken to make them, so a race
    between two threads' guarded accesses is found, and a barrier between them proves it."""
    M = ex.scalar("M")
    buf = kir.Buffer("buf", F32, kir.Memory.shared, size=c(128), byte_offset=c(0))
    y = ex.tensor("y", F32, [c(128)], is_output=True)
    t = ex.tid()

    def kernel(barrier):
        guard = lambda stmt: kir.IfThenElse(ex.lt(t, M.var), [stmt])   # noqa: E731
        body = [kir.Allocate(buf), guard(kir.Store(buf, t, c(1.0, F32))),
                *([kir.Barrier()] if barrier else []),
                guard(ex.store(y, [t], kir.Load(buf, ex.sub(c(127), t))))]
        return ex.finish(kir.Kernel("guarded", [y], [M], body, ex.launch([c(1)], [c(128)])))
    assert _kinds(kernel(barrier=False)) == {"RAW"}
    assert check_async_protocol(kernel(barrier=True)) == []


def test_both_outcomes_of_a_block_uniform_condition_are_verified():
    """A race only when blockIdx.z is the last split: found, naming the outcome."""
    buf = kir.Buffer("buf", F32, kir.Memory.shared, size=c(128), byte_offset=c(0))
    y = ex.tensor("y", F32, [c(128)], is_output=True)
    t, splits = ex.tid(), ex.scalar("splits")
    last = ex.lt(ex.bid("z"), ex.sub(splits.var, c(1)))
    racy = [kir.Store(buf, t, c(1.0, F32)),
            ex.store(y, [t], kir.Load(buf, ex.sub(c(127), t)))]

    def kernel(orelse):
        body = [kir.Allocate(buf), kir.IfThenElse(last, [kir.Barrier()], orelse)]
        return ex.finish(kir.Kernel("uniform", [y], [splits], body,
                                    ex.launch([c(1), c(1), splits.var], [c(128)])))
    [h] = check_async_protocol(kernel(racy))
    assert h.kind == "RAW"
    assert h.detail.endswith("(when (blockIdx.z < (splits - 1)) is false)")
    assert check_async_protocol(kernel(racy[:1] + [kir.Barrier()] + racy[1:])) == []


def test_more_block_uniform_conditions_than_the_bound_are_refused():
    buf = kir.Buffer("buf", F32, kir.Memory.shared, size=c(128), byte_offset=c(0))
    n = ex.scalar("n")
    ifs = [kir.IfThenElse(ex.lt(ex.bid("z"), ex.add(n.var, c(i))), [kir.Barrier()])
           for i in range(async_runtime.MAX_UNIFORM + 1)]
    kernel = ex.finish(kir.Kernel("uniforms", [], [n], [kir.Allocate(buf), *ifs],
                                  ex.launch([c(1)], [c(128)])))
    [h] = check_async_protocol(kernel)
    assert h.kind == "cannot-prove" and "more than 3 block-uniform conditions" in h.detail


PERIODS = [("k % 4", lambda k: ex.binop("mod", k, 4), 4),
           ("(k / 4) % 2 ^ 1", lambda k: ex.binop("xor", ex.binop("mod", ex.binop(
               "div", k, 4), 2), 1), 8),
           ("(tile * 5 + k) % 3 + 4", lambda k: ex.add(ex.binop("mod", ex.add(ex.mul(
               kir.Var("tile", I32), 5), k), 3), 4), 3),
           ("(k * 3 / 2) % 4", lambda k: ex.binop("mod", ex.binop("div", ex.mul(k, 3), 2),
                                                  4), 8),
           ("ceildiv(k, 2) % 2", lambda k: ex.binop("mod", ex.ceildiv(k, 2), 2), 4),
           ("7", lambda k: c(7), 1),
           ("k > 0 (from 1 on: conditions only)", lambda k: ex.binop("gt", k, 0), None),
           ("k", lambda k: k, None), ("k < 3", lambda k: ex.lt(k, 3), None),
           ("min(k, 2)", lambda k: ex.binop("min", k, 2), None),
           ("(k - 1) % 2", lambda k: ex.binop("mod", ex.sub(k, 1), 2), None),
           ("k * 64", lambda k: ex.mul(k, 64), None)]


@pytest.mark.parametrize("text, build, expected", PERIODS, ids=[p[0] for p in PERIODS])
def test_periods_of_expressions_in_a_loop_variable(text, build, expected):
    k = kir.Var("k", I32)
    assert period(build(k), "k", {"tile"}) == expected
    if expected:                                      # and it does repeat
        values = [kir.evaluate_scalar(build(k), {"k": v, "tile": 3}) for v in range(40)]
        assert values[:-expected] == values[expected:]


@pytest.mark.parametrize("text, build, settles", [
    ("k > 0", lambda k: ex.binop("gt", k, 0), 1),
    ("k + 2 >= 5", lambda k: ex.binop("ge", ex.add(k, 2), 5), 4),
    ("k > 0 && k % 2 == 0", lambda k: ex.land(ex.binop("gt", k, 0),
                                              ex.binop("eq", ex.binop("mod", k, 2), 0)), 1)],
    ids=lambda x: x if isinstance(x, str) else "")
def test_a_guard_is_periodic_from_where_it_settles(text, build, settles):
    k = kir.Var("k", I32)
    step, start = eventual_period(build(k), "k")
    assert start == settles
    values = [kir.evaluate_scalar(build(k), {"k": v}) for v in range(start, start + 40)]
    assert values[:-step] == values[step:]
    assert eventual_period(ex.lt(ex.binop("div", k, 2), 3), "k") is None


def _strip(stmts, kinds):
    out = []
    for s in stmts:
        if isinstance(s, kinds):
            continue
        for body in s.bodies():
            body[:] = _strip(body, kinds)
        out.append(s)
    return out


@pytest.mark.parametrize("shape, stripped", [
    (dict(), (kir.WgmmaFence, kir.FenceMbarrierInit, kir.Barrier)),
    (dict(split_k=True), (kir.WgmmaFence, kir.FenceMbarrierInit))],
    ids=["one split", "split-K"])
def test_insert_async_syncs_puts_back_what_is_stripped(shape, stripped):
    assert insert_async_syncs(hp.sched_matmul(**shape)) == []
    kernel = hp.sched_matmul(**shape)
    kernel.body[:] = _strip(kernel.body, stripped)
    assert check_async_protocol(kernel)
    inserted = insert_async_syncs(kernel)
    assert {type(s) for s in inserted} == set(stripped)
    assert all(s.reasons for s in inserted)
    assert check_async_protocol(kernel) == []
    args = hp.sched_inputs(200, 100, 320, splitk=3 if shape else None)
    run_kernel(kernel, args)
    np.testing.assert_array_equal(args["C"], _expected(args))


@pytest.mark.parametrize("shape, sizes", [
    (dict(), (128, 64, 128)), (dict(stages=3), (200, 100, 320)),
    (dict(split_k=True), (130, 64, 448)), (dict(split_k=True), (64, 64, 320)),
    (dict(overlap=True, stages=3), (128, 128, 448))],
    ids=["one tile", "ragged edges", "split-K, uneven slices", "split-K, an empty slice",
         "a group in flight"])
def test_the_interpreter_computes_the_product(shape, sizes):
    splitk = None if not shape.get("split_k") else (3 if sizes[2] == 448 else 4)
    args = hp.sched_inputs(*sizes, splitk=splitk)
    run_kernel(hp.sched_matmul(**shape), args)
    np.testing.assert_array_equal(args["C"], _expected(args))


def test_a_loop_with_nothing_of_the_protocol_is_skipped_whatever_its_extent():
    """A parallel split-K's slice sums (a run-time loop over global workspaces and
    registers) make no event of the shared-memory protocol: the loop is skipped, so only
    the K loops' trip count is proved, and 8 stages prove within the budget."""
    import test_hopper_matmul as hopper
    from lowering.pipeline import lower
    kernel, _ = lower(hopper.scheduled(dict(
        hopper.HOPPER, cta_tile=(128, 64, 64), warp_tile=(64, 64, 64),
        instruction_tile=(64, 64, 16), splitk_mode="parallel", splitk_factor=2, stages=8),
        layout="NT"))
    skeleton = Skeleton(kernel)
    [(extent, loops)] = skeleton.trip_counts.values()
    assert kir.format_expr(extent) == "ceildiv(ceildiv(K, 64), splitk)" and len(loops) == 2
    rounds = next(s for s in kir.walk(kernel.body) if isinstance(s, kir.ForLoop)
                  and "splitk" in kir.format_expr(s.extent) and s not in loops)
    assert skeleton.loop(rounds).kind == "skipped"


def _tail_kernel(leading=True, middle=True, outside=False, under=None, counter=None):
    """128 threads: for w < n: [work]; if (w % m == m - 1) [sync]; buf[t] = w; sync;
    y[t] = buf[127 - t] (a persistent kernel's staged epilogue, once every m iterations:
    a condition that changes from iteration to iteration, uniform over the block in each).
    `outside`: buf also written after the loop; `under`: one more statement in the if;
    `counter` (an expression of threadIdx.x or 0): the condition on a register k counting
    the iterations from it, k = (k + 1 == m) ? 0 : k + 1 at the end of each."""
    buf = kir.Buffer("buf", F32, kir.Memory.shared, size=c(128), byte_offset=c(0))
    y = ex.tensor("y", F32, [c(128)], is_output=True)
    t, n, m = ex.tid(), ex.scalar("n"), ex.scalar("m")
    w = kir.Var("w", I32)
    last = ex.binop("eq", ex.binop("mod", w, m.var), ex.sub(m.var, c(1)))
    tail = [*([kir.Barrier()] if leading else []), kir.Store(buf, t, c(1.0, F32)),
            *([kir.Barrier()] if middle else []),
            ex.store(y, [t], kir.Load(buf, ex.sub(c(127), t))), *([under] if under else [])]
    body = [kir.Allocate(buf), kir.ForLoop(w, n.var, [kir.IfThenElse(last, tail)])]
    if counter is not None:
        k = kir.Buffer("k", I32, kir.Memory.local, size=c(1))
        at, following = kir.Load(k, c(0)), ex.add(kir.Load(k, c(0)), c(1))
        body[1].body[0].cond = ex.binop("eq", at, ex.sub(m.var, c(1)))
        body[1].body.append(kir.Store(k, c(0), kir.Select(
            ex.binop("eq", following, m.var), c(0), following, I32)))
        body[1:1] = [kir.Allocate(k), kir.Store(k, c(0), counter)]
    if outside:
        body.append(kir.Store(buf, t, c(2.0, F32)))
    return ex.finish(kir.Kernel("tail", [y], [n, m], body, ex.launch([c(1)], [c(128)])))


def test_barriers_under_a_condition_that_changes_with_the_iteration_are_proved():
    """`if (w % m == m - 1)`: uniform over the block in each iteration, taken in some:
    proved in the runs where it is taken every time and never, its buffer its own, a
    barrier before its first access ordering one execution after the one before."""
    assert check_async_protocol(_tail_kernel()) == []
    skeleton = Skeleton(_tail_kernel())
    (key,) = skeleton.uniform
    assert skeleton.condition(skeleton.uniform[key][1][0]).kind == "iteration-uniform"


def test_a_register_counting_the_iterations_alike_in_every_thread_is_iteration_uniform():
    """k = 0 before the loop, k = (k + 1 == m) ? 0 : k + 1 as its last statement: k is the
    same in every thread of an iteration (a persistent kernel's K tile, counted without a
    division), so barriers may run under `if (k == m - 1)`; started from threadIdx.x it
    is not, and the kernel is refused."""
    assert check_async_protocol(_tail_kernel(counter=c(0))) == []
    [h] = check_async_protocol(_tail_kernel(counter=ex.tid()))
    assert h.kind == "cannot-prove"
    assert h.detail == ("cannot prove: condition (k[0] == (m - 1)) is neither a function of "
                        "the thread index and the loop variables nor uniform over the "
                        "block, and synchronization runs under it (when n = 8)")


def test_two_executions_of_an_iteration_uniform_branch_unordered_are_found():
    """No barrier of the branch's own between one execution's read of its buffer and the
    next one's write: a WAR finding (from the structure, whatever the mix of
    iterations), and sync insertion puts the barrier at the top of the branch."""
    found = check_async_protocol(_tail_kernel(leading=False))
    reentry = [h for h in found if "runs in some iterations and not in others" in h.detail]
    assert [h.kind for h in reentry] == ["WAR"]
    assert reentry[0].detail == ("the if around them runs in some iterations and not in "
                                 "others: no barrier of its own orders one execution's "
                                 "read of buf before the next one's")
    assert {h.kind for h in found} == {"WAR"}
    kernel = _tail_kernel(leading=False)
    inserted = insert_async_syncs(kernel)
    assert [type(s).__name__ for s in inserted] == ["Barrier"]
    tail = kernel.body[1].body[0].then_body
    assert isinstance(tail[0], kir.Barrier)
    assert check_async_protocol(kernel) == []
    assert {h.kind for h in check_async_protocol(_tail_kernel(middle=False))} == {"RAW"}


@pytest.mark.parametrize("change, message", [
    (dict(outside=True), "cannot prove: condition ((w % m) == (m - 1)) changes from "
     "iteration to iteration and barriers run under it, but its shared buffer buf is also "
     "accessed outside it (buf[threadIdx.x] = 2.0) (when n = 8)"),
    (dict(under=kir.FenceMbarrierInit()), "cannot prove: condition ((w % m) == (m - 1)) "
     "changes from iteration to iteration, and fence.mbarrier_init runs under it (only "
     "barriers, proxy fences and TMA stores may: the protocol's state must not depend on "
     "it) (when n = 8)"),
])
def test_an_iteration_uniform_branch_that_is_not_self_contained_is_refused(change, message):
    [h] = check_async_protocol(_tail_kernel(**change))
    assert h.kind == "cannot-prove"
    assert h.detail == message


def test_a_proxy_fence_under_an_iteration_uniform_branch_only_adds_order():
    """A fence.proxy.async (as a staged epilogue's before its TMA store) changes no state
    the rest of the kernel sees, whether the branch runs or not: proved."""
    assert check_async_protocol(_tail_kernel(under=kir.FenceProxyAsync())) == []
