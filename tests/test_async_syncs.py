"""Sync insertion for the async protocol (lowering.verify.async_syncs) on the warp-specialized
matmul of tests/hopper_pipelines.py: nothing is added to a correct kernel; with every
fence, init fence, barrier, named barrier and bulk read wait stripped, it places what the
verifier asks for, each with its reasons, until the kernel is proved, runs clean under
every interleaving and computes the exact result; and each statement it placed, dropped
alone, is caught by both the verifier and the interpreter (none is redundant). What only
the pipeline's own mbarrier protocol can order is refused, never patched."""

import numpy as np
import pytest

import hopper_pipelines as hp
from codegen.errors import RaceError
from codegen.interp import run_interleavings
from lowering import kir
from lowering.verify.async_protocol import check_async_protocol
from lowering.verify.async_syncs import insert_async_syncs
from lowering.errors import HazardError
from lowering.verify.hazards import path_to

SHAPES = {"one tile": dict(), "persistent, two tiles": dict(tiles=2),
          "prefetching": dict(prefetch=True)}
STRIPPED = (kir.FenceProxyAsync, kir.WgmmaFence, kir.FenceMbarrierInit, kir.Barrier,
            kir.NamedBarrier, kir.BulkWait)


def _strip(stmts):
    out = []
    for s in stmts:
        if isinstance(s, STRIPPED):
            continue
        for body in s.bodies():
            body[:] = _strip(body)
        out.append(s)
    return out


def _interpret(kernel, shape):
    runs = []

    def make_args():
        runs.append(hp.inputs(tiles=shape.get("tiles", 1)))
        return runs[-1]
    run_interleavings(kernel, make_args, seeds=(0,))
    return runs


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES)
def test_a_correct_kernel_gets_nothing(shape):
    assert insert_async_syncs(hp.ws_matmul(**shape)) == []


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES)
def test_stripped_kernels_get_exactly_what_they_need(shape):
    kernel = hp.ws_matmul(**shape)
    kernel.body[:] = _strip(kernel.body)
    inserted = insert_async_syncs(kernel)
    assert inserted and all(s.reasons for s in inserted)
    assert {type(s) for s in inserted} >= {kir.FenceProxyAsync, kir.WgmmaFence,
                                           kir.FenceMbarrierInit, kir.Barrier,
                                           kir.NamedBarrier}
    assert check_async_protocol(kernel) == []
    for args in _interpret(kernel, shape):
        np.testing.assert_array_equal(args["C"], hp.expected(args))
    # minimality: each placed statement, dropped alone, is caught by both
    known = {}                    # the verifier's spans, kept across the removals
    for stmt in inserted:
        stmts, index, _ = path_to(kernel.body, stmt)[-1]
        del stmts[index]
        kir.relabel(kernel.body)
        assert check_async_protocol(kernel, known), kir.format_stmt(stmt)
        with pytest.raises(RaceError):
            _interpret(kernel, shape)
        stmts.insert(index, stmt)
        kir.relabel(kernel.body)
