"""lowering.verify.async_protocol, the static verifier of Hopper kernels' async protocol: every
correct shape of tests/hopper_pipelines.py's warp-specialized matmul is proved (with no
proxy fence between a TMA load and its wgmma, no __syncthreads in the main loop), each
anchor bug (one sync dropped) is reported under the interpreter's kind for it
(tests/test_async_proxy_regressions.py), the lockstep probes of tests/hopper_probes.py
are proved, and what it cannot bound is refused, never passed."""

import pytest

import hopper_pipelines as hp
import hopper_probes as probes
import kir_examples as ex
import test_hopper_probes as probe_cases
from fuserir.dtypes import DataType
from lowering import kir
from lowering.verify.async_protocol import check_async_protocol, verify_async_protocol
from lowering.errors import HazardError

SHAPES = {"one tile": dict(), "persistent, two tiles": dict(tiles=2),
          "prefetching": dict(prefetch=True), "three stages, five k-tiles":
          dict(stages=3, k_tiles=5)}


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES)
def test_every_correct_pipeline_is_proved(shape):
    kernel = hp.ws_matmul(**shape)
    assert check_async_protocol(kernel) == []
    verify_async_protocol(kernel)


# (what is dropped, the shape test_async_proxy_regressions.py uses, kind, words of it)
DROPPED = [
    ("init_barrier", dict(), "mbarrier-init", "before its init is visible"),
    ("empty_parity", dict(), "deadlock", "parity 0 (phase 0) is in a cycle of waits"),
    ("release_early", dict(), "WAR", "the wgmma.wait_group retiring it does not happen"),
    ("drain", dict(prefetch=True), "async-pending", "a TMA load has not landed"),
    ("epilogue_barrier", dict(), "RAW", "the TMA store by thread 128"),
    ("proxy_fence", dict(), "proxy-fence", "no fence.proxy.async"),
    ("store_read_wait", dict(tiles=2), "async-pending", "a TMA store still reads"),
]


def test_every_drop_is_covered():
    assert sorted(d for d, *_ in DROPPED) == sorted(hp.DROPS)


@pytest.mark.parametrize("drop, shape, kind, words", DROPPED, ids=[d[0] for d in DROPPED])
def test_each_dropped_sync_is_found(drop, shape, kind, words):
    kernel = hp.ws_matmul(drop=(drop,), **shape)
    with pytest.raises(HazardError) as caught:
        verify_async_protocol(kernel)
    found = [h for h in caught.value.hazards if h.kind == kind]
    assert found, [(h.kind, h.detail) for h in caught.value.hazards]
    assert any(words in h.detail for h in found), [h.detail for h in found]
    assert {h.kind for h in caught.value.hazards} == {kind}


def test_a_finding_names_both_statements_the_buffer_and_what_is_missing():
    hazards = check_async_protocol(hp.ws_matmul(drop=("release_early",)))
    h = hazards[0]
    assert h.first.startswith("S") and "wgmma" in h.first
    assert "tma.load a_stages" in h.second
    assert h.buffer == "a_stages" and h.byte_range[0] >= 1024
    assert h.iterations[1]["pk"] == 2          # the refill two stages later


def test_the_drain_is_also_a_load_in_flight_at_the_end():
    hazards = check_async_protocol(hp.ws_matmul(prefetch=True, drop=("drain",)))
    assert any(h.second.startswith("END") and "no thread waits for bars[0] phase 2"
               in h.detail for h in hazards)


PROBES = ([probes.tma_load_probe(*c) for c in probe_cases.TMA_LOADS]
          + [probes.tma_store_probe(*c) for c in probe_cases.TMA_STORES]
          + [probes.wgmma_probe(**c)[0] for c in probe_cases.WGMMAS]
          + [probes.stmatrix_probe(num, trans) for num, trans in probe_cases.STMATRICES]
          + [probes.roles_probe()])


@pytest.mark.parametrize("kernel", PROBES, ids=[k.name for k in PROBES])
def test_the_lockstep_probes_are_proved(kernel):
    assert check_async_protocol(kernel) == []


def _without(kernel, kind):
    """The kernel with its statements of type `kind` removed (at any depth)."""
    def strip(stmts):
        out = []
        for s in stmts:
            if isinstance(s, kind):
                continue
            for body in s.bodies():
                body[:] = strip(body)
            out.append(s)
        return out
    kernel.body = strip(kernel.body)
    return kernel


@pytest.mark.parametrize("kernel, dropped, kind", [
    (probes.stmatrix_probe(4, False), kir.Barrier, "RAW"),
    (probes.tma_store_probe(40, 96, (64, 8), "128B"), kir.FenceProxyAsync, "proxy-fence"),
    (probes.tma_store_probe(40, 96, (64, 8), "128B"), kir.BulkWait, "async-pending"),
    (probes.wgmma_probe(64)[0], kir.WgmmaFence, "wgmma-fence"),
    (probes.wgmma_probe(64)[0], kir.WgmmaWait, "async-pending"),
    (probes.tma_load_probe(40, 96, (64, 8), "128B"), kir.FenceMbarrierInit, "mbarrier-init"),
    (probes.roles_probe(), kir.NamedBarrier, "RAW"),
], ids=["stmatrix-barrier", "store-fence", "store-wait", "wgmma-fence", "wgmma-wait",
        "init-fence", "named-barriers"])
def test_each_probe_with_a_sync_removed_is_not_proved(kernel, dropped, kind):
    kinds = {h.kind for h in check_async_protocol(_without(kernel, dropped))}
    assert kind in kinds, kinds


def test_the_second_box_of_the_load_probe_needs_its_own_wait():
    """The load probe's second wait (parity 1) removed: the copy of the second box reads
    bytes a TMA load may still be writing."""
    kernel = probes.tma_load_probe(40, 96, (64, 8), "128B")
    waits = [s for s in kernel.body if isinstance(s, kir.MbarrierWait)]
    kernel.body.remove(waits[1])
    kinds = {h.kind for h in check_async_protocol(kernel)}
    assert "async-pending" in kinds, kinds


def test_expect_tx_must_match_the_bytes_of_the_loads():
    kernel = probes.tma_load_probe(40, 96, (64, 8), "128B")
    arrive = next(s for s in kir.walk(kernel.body) if isinstance(s, kir.MbarrierArrive))
    arrive.tx_bytes = ex.const(2 * arrive.tx_bytes.value)
    hazards = check_async_protocol(kernel)
    assert any(h.kind == "mbarrier" and "expect_tx of 2048 bytes on bar[0] phase 0 does "
               "not match the 1024 bytes" in h.detail for h in hazards), hazards
    assert any(h.kind == "deadlock" for h in hazards)


def _loop_kernel(extent, scalars=()):
    buf = kir.Buffer("buf", DataType.f32, kir.Memory.shared, size=ex.const(128),
                     byte_offset=ex.const(0))
    i = kir.Var("i", DataType.i32)
    body = [kir.Allocate(buf),
            kir.ForLoop(i, extent, [kir.Store(buf, ex.tid(), ex.const(0.0, DataType.f32))])]
    return ex.finish(kir.Kernel("runtime_extent", [], list(scalars), body,
                                ex.launch([ex.const(1)], [ex.const(128)])))


def test_a_run_time_loop_extent_is_proved_for_every_trip_count():
    """(It was refused before lowering.verify.async_runtime; tests/test_async_runtime.py has the
    refusals that remain, each naming the loop.)"""
    n = ex.scalar("n")
    verify_async_protocol(_loop_kernel(n.var, [n]))


def test_a_thread_dependent_loop_extent_is_refused_by_name():
    kernel = _loop_kernel(ex.tid())
    with pytest.raises(HazardError) as caught:
        verify_async_protocol(kernel)
    [h] = caught.value.hazards
    assert h.kind == "cannot-prove"
    assert h.detail == "cannot prove: loop extent (of loop i) threadIdx.x is not a constant"
    assert h.first.startswith(f"{kernel.body[1].label}: for i in 0..threadIdx.x")
