"""Property: random warp-specialized pipelines (tests/hopper_pipelines.py's matmul at
random stage counts, k-tile counts, output tiles and prefetch depth) compute the float64
result exactly and run clean under the producer-first, consumer-first and a random
interleaving, and the static verifier proves them; the same pipeline with one of its
synchronizations dropped (any that matters at that configuration) is refused by the
verifier and reported by the interpreter under at least one of the interleavings. Inputs are small
integers, so every result is exact and the comparison is bitwise."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import hopper_pipelines as hp
from codegen.errors import RaceError
from codegen.interp import run_interleavings
from lowering.verify.async_protocol import check_async_protocol

from conftest import STATS


@st.composite
def pipelines(draw):
    shape = dict(stages=draw(st.integers(2, 4)), k_tiles=draw(st.integers(1, 6)),
                 tiles=draw(st.integers(1, 2)), prefetch=draw(st.booleans()))
    loads = shape["tiles"] * (shape["k_tiles"] + shape["prefetch"])
    # what each drop needs to matter: the drain a prefetch; an early release a stage
    # that is refilled
    drops = [d for d in hp.DROPS
             if (d != "drain" or shape["prefetch"])
             and (d != "release_early" or loads > shape["stages"])]
    return shape, draw(st.sampled_from(drops)), draw(st.integers(0, 2**16))


def _run(kernel, shape, seed):
    runs = []

    def make_args():
        runs.append(hp.inputs(tiles=shape["tiles"], k_tiles=shape["k_tiles"], seed=seed))
        return runs[-1]
    run_interleavings(kernel, make_args, seeds=(seed,))
    return runs


@settings(max_examples=8, deadline=None, derandomize=True)
@given(pipelines())
def test_random_pipelines_are_exact_and_clean_and_each_dropped_sync_is_caught(case):
    shape, drop, seed = case
    kernel = hp.ws_matmul(**shape)
    assert check_async_protocol(kernel) == []
    for args in _run(kernel, shape, seed):
        np.testing.assert_array_equal(args["C"], hp.expected(args))
    dropped = hp.ws_matmul(drop=(drop,), **shape)
    assert check_async_protocol(dropped), f"the verifier proved {shape} without {drop}"
    try:
        _run(dropped, shape, seed)
    except RaceError as caught:
        STATS["warp-specialized property: drops caught"] += 1
        assert caught.hazards
    else:
        raise AssertionError(f"dropping {drop} from {shape} went unreported")
