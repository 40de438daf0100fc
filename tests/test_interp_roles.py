"""Warp-specialized roles in the interpreter (codegen.interp.roles) and the order that
mbarriers and named barriers give its race detector (codegen.interp.ordering).

Kernels are hand-built kir: a TMA pipeline with a producer warp group and one or two
consumer warp groups over two stages, and named barriers between warp groups; each
runs under then-first, else-first and random interleavings."""

import numpy as np
import pytest

import hopper_probes as hp
from codegen.errors import RaceError
from codegen.interp import InterpError, run_interleavings, run_kernel
from fuserir.dtypes import DataType
from lowering import kir

I32, I64, F32 = DataType.i32, DataType.i64, DataType.f32
SHARED, GLOBAL = kir.Memory.shared, kir.Memory.global_
TX = kir.Special(kir.SpecialKind.threadIdx, "x", I32)
WG = 128                       # threads of a warp group
TILE = 128                     # f32 elements a stage holds (one TMA box)
ITERS = 6
SEEDS = (1, 2, 3)
INTERLEAVINGS = ("then-first", "else-first") + SEEDS


def c(value, dtype=I32):
    return kir.Const(value, dtype)


def op(name, a, b):
    b = b if isinstance(b, kir.ScalarExpr) else c(b)
    return kir.BinOp(name, a, b, DataType.bool if name in kir.COMPARISONS else a.dtype)


def kernel(name, tensors, maps, body, threads):
    k = kir.Kernel(name, list(tensors), [], list(body),
                   kir.LaunchConfig((c(1), c(1), c(1)), (c(threads), c(1), c(1))),
                   tensor_maps=list(maps))
    kir.relabel(k.body)
    return k


def tensor(name, rank, output=False):
    return kir.TensorParam(kir.Buffer(name, F32, GLOBAL),
                           [kir.Var(f"{name}_n{d}", I32) for d in range(rank)],
                           [kir.Var(f"{name}_s{d}", I32) for d in range(rank)],
                           is_output=output)


def hazards_of(k, args, how):
    try:
        run_kernel(k, args, interleaving=how)
    except RaceError as e:
        return e.hazards
    return []


# -- the pipeline ---------------------------------------------------------------------

def pipeline(consumers=1, producer_parity=1, wait_full=True, arrive_early=False):
    """Warp group 0 produces: thread 0 waits on empty[s] (parity (it / 2) % 2 ^
    producer_parity), arrives with expect_tx on full[s] and TMA-loads row `it` of x into
    stage s = it % 2. Each consumer warp group waits on full[s] (parity (it / 2) % 2),
    copies the stage to its rows of out and arrives on empty[s] (count: every consumer
    thread). With two consumers the consumer side is split again (a nested role branch)."""
    threads = WG * (1 + consumers)
    x, out = tensor("x", 2), tensor("out", 1, output=True)
    m = kir.TensorMap("map_x", x, [x.sizes[1], x.sizes[0]], [x.strides[0]], (TILE, 1))
    full = kir.Buffer("full", I64, SHARED, size=c(2), byte_offset=c(0))
    empty = kir.Buffer("empty", I64, SHARED, size=c(2), byte_offset=c(16))
    stage = kir.Buffer("stage", F32, SHARED, size=c(2 * TILE), byte_offset=c(128))
    it = kir.Var("it", I32)
    s = op("mod", it, 2)
    ph = op("mod", op("div", it, 2), 2)
    init = [kir.MbarrierInit(bar=b, index=c(i), count=c(n))
            for b, n in ((full, 1), (empty, WG * consumers)) for i in range(2)]
    produce = kir.IfThenElse(op("eq", TX, 0), [kir.ForLoop(it, c(ITERS), [
        kir.MbarrierWait(bar=empty, index=s, parity=op("xor", ph, producer_parity)),
        kir.MbarrierArrive(bar=full, index=s, tx_bytes=c(m.box_bytes)),
        kir.TmaLoad(dst=stage, dst_index=op("mul", s, TILE), map=m, bar=full, bar_index=s,
                    c0=c(0), c1=it)])])

    def consume():
        ct = op("mod", TX, WG)
        row = op("add", op("mul", op("sub", op("div", TX, WG), 1), ITERS * TILE),
                 op("mul", it, TILE))
        read = kir.Store(out.buffer, op("add", row, ct),
                         kir.Load(stage, op("add", op("mul", s, TILE), ct)))
        arrive = kir.MbarrierArrive(bar=empty, index=s)
        body = [arrive, read] if arrive_early else [read, arrive]
        if wait_full:
            body.insert(0, kir.MbarrierWait(bar=full, index=s, parity=ph))
        return [kir.ForLoop(it, c(ITERS), body)]

    consumer = consume() if consumers == 1 else [
        kir.IfThenElse(op("lt", TX, 2 * WG), consume(), consume())]
    body = [kir.Allocate(full), kir.Allocate(empty), kir.Allocate(stage),
            kir.IfThenElse(op("eq", TX, 0), init + [kir.FenceMbarrierInit()]),
            kir.Barrier(),
            kir.IfThenElse(op("lt", TX, WG), [produce], consumer)]
    return kernel("pipeline", [x, out], [m], body, threads)


def pipeline_args(consumers=1):
    x = np.arange(ITERS * TILE, dtype=np.float32).reshape(ITERS, TILE) * 0.5 - 7
    return {"x": x, "out": np.full(consumers * ITERS * TILE, -1, np.float32)}


@pytest.mark.parametrize("consumers", [1, 2], ids=["one-consumer", "nested-consumers"])
@pytest.mark.parametrize("how", INTERLEAVINGS)
def test_pipeline_is_clean_and_correct(consumers, how):
    k = pipeline(consumers)
    args = pipeline_args(consumers)
    assert hazards_of(k, args, how) == []
    np.testing.assert_array_equal(args["out"], np.tile(args["x"].ravel(), consumers))


def test_run_interleavings_returns_the_first_runs_arguments():
    args = run_interleavings(pipeline(), pipeline_args, seeds=SEEDS)
    np.testing.assert_array_equal(args["out"], args["x"].ravel())


@pytest.mark.parametrize("how", ["then-first", "else-first", 1])
def test_producer_on_the_wrong_parity_deadlocks_naming_both_waits(how):
    hazards = hazards_of(pipeline(producer_parity=0), pipeline_args(), how)
    (dead,) = hazards
    assert dead.kind == "deadlock" and dead.buffer in ("empty", "full")
    assert ("1 thread(s) wait on empty[0] for parity 0: phase 0 (parity 0) is current "
            "with 128 of 128 arrivals pending and tx-count 0 bytes") in dead.detail
    assert ("128 thread(s) wait on full[0] for parity 0: phase 0 (parity 0) is current "
            "with 1 of 1 arrivals pending and tx-count 0 bytes") in dead.detail
    assert "the then-branch of" in dead.detail and "the else-branch of" in dead.detail


def test_a_consumer_that_does_not_wait_on_full_is_reported():
    with pytest.raises(RaceError) as e:
        run_interleavings(pipeline(wait_full=False), pipeline_args, seeds=SEEDS)
    assert {"RAW", "async-pending"} & {h.kind for h in e.value.hazards}


def test_a_consumer_that_releases_the_stage_before_reading_it_is_a_war():
    with pytest.raises(RaceError) as e:
        run_interleavings(pipeline(arrive_early=True), pipeline_args, seeds=SEEDS)
    war = [h for h in e.value.hazards if h.kind == "WAR"]
    assert war and all("tma.load" in h.second and "stage" in h.first for h in war)
    assert "(seen under interleaving(s) " in war[0].detail
    assert war[0].extra["interleavings"]


# -- named barriers between warp groups -----------------------------------------------

def handoff(sync=True, producer_waits=False):
    """Three warp groups: warp group 0 stores sm[t] = x[t] and arrives on named barrier
    1 (bar.arrive, or bar.sync with producer_waits) of 256 threads; warp group 1 syncs
    on it and copies sm to out; warp group 2 does not take part. Without `sync` neither
    side uses the barrier."""
    x, out = tensor("x", 1), tensor("out", 1, output=True)
    sm = kir.Buffer("sm", F32, SHARED, size=c(WG), byte_offset=c(0))
    bar = [kir.NamedBarrier(id=1, count=2 * WG, arrive_only=not producer_waits)]
    producer = [kir.Store(sm, TX, kir.Load(x.buffer, TX))] + (bar if sync else [])
    ct = op("sub", TX, WG)
    consumer = ([kir.NamedBarrier(id=1, count=2 * WG)] if sync else []) + [
        kir.Store(out.buffer, ct, kir.Load(sm, ct))]
    body = [kir.Allocate(sm),
            kir.IfThenElse(op("lt", TX, WG), producer,
                           [kir.IfThenElse(op("lt", TX, 2 * WG), consumer)])]
    return kernel("handoff", [x, out], [], body, 3 * WG)


def handoff_args():
    return {"x": np.arange(WG, dtype=np.float32) + 3, "out": np.zeros(WG, np.float32)}


@pytest.mark.parametrize("producer_waits", [False, True], ids=["bar.arrive", "bar.sync"])
def test_a_named_barrier_orders_a_store_before_another_warp_groups_read(producer_waits):
    args = run_interleavings(handoff(producer_waits=producer_waits), handoff_args,
                             seeds=SEEDS)
    np.testing.assert_array_equal(args["out"], args["x"])


def test_without_the_named_barrier_the_read_is_a_raw():
    with pytest.raises(RaceError) as e:
        run_interleavings(handoff(sync=False), handoff_args, seeds=SEEDS)
    raw = [h for h in e.value.hazards if h.kind == "RAW"]
    assert raw and "then-first" in raw[0].extra["interleavings"]


def test_a_named_barrier_short_of_its_count_deadlocks_naming_it():
    k = handoff()
    k.body[1].then_body.pop()          # the producer never arrives
    hazards = hazards_of(k, handoff_args(), "then-first")
    dead = [h for h in hazards if h.kind == "deadlock"]
    assert dead and dead[0].buffer == "named barrier 1"
    assert ("128 thread(s) wait at named barrier 1: 128 of 256 threads have arrived"
            in dead[0].detail)


def test_a_thread_arriving_twice_on_a_named_barrier_is_barrier_divergence():
    k = handoff()
    k.body[1].then_body.append(kir.NamedBarrier(id=1, count=2 * WG, arrive_only=True))
    kir.relabel(k.body)
    hazards = hazards_of(k, handoff_args(), "then-first")
    div = [h for h in hazards if h.kind == "barrier-divergence"]
    assert div and "barrier 1 expects 256 threads but thread (0, 0, 0) arrives twice" in (
        div[0].detail)


def test_the_roles_probe_runs_clean_under_every_interleaving():
    x = np.arange(2 * hp.THREADS, dtype=np.float32) - 100

    def make_args():
        return {"x": x.copy(), "y": np.zeros(2 * hp.THREADS, np.float32),
                "z": np.zeros(hp.THREADS, np.float32),
                "done": np.zeros(2 * hp.THREADS, np.int32)}

    args = run_interleavings(hp.roles_probe(), make_args, seeds=SEEDS)
    for name, want in hp.expected_roles(x).items():
        np.testing.assert_array_equal(args[name], want)


def test_an_unknown_interleaving_is_refused():
    with pytest.raises(InterpError, match="interleaving 'random' is not one of"):
        run_kernel(handoff(), handoff_args(), interleaving="random")
