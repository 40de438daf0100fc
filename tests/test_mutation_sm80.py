"""The mutation test of the checkers on the sm_80 kernels the matmul heuristics build (the
seed configuration: serial, atomic and two-kernel split-K; the parallel split-K on a
smaller tile): every mutant of
their synchronization refused by the static verifier and caught by the interpreter, or
argued harmless (tests/mutation.py; the Hopper kernels: tests/test_mutation_hopper.py)."""

import pytest

import mutation
import test_matmul as sm80

# name: (fusion builder, K per split at K tiles = stages, K of one tile, M)
CONFIGS = {
    "seed, serial split-K": (lambda: sm80.seed_fusion(), 32 * 3, 32, 256),
    # the seed's pipeline and staged output on a 64x128 tile (4 warps, not 8: the same
    # protocol at half the interpreter's time, inside the default suite's 15 minutes)
    "parallel split-K, 64x128 tiles": (lambda: sm80.seed_fusion(
        splitk_mode="parallel", cta_tile=(64, 128, 32), warp_tile=(32, 64, 32)), 32 * 3, 32,
        64),
    "seed, atomic split-K": (lambda: sm80.seed_fusion(splitk_mode="atomic"), 32 * 3, 32, 256),
    "seed, two kernels": (lambda: sm80.seed_fusion(splitk_mode="two_kernel"), 32 * 3, 32, 256),
}


# Behind -m slow, to keep the default suite under 15 minutes: the atomic reduction's syncs
# are each dropped and refused, and its missing zeros and fence caught by the interpreter,
# in tests/test_grid_protocol.py
SLOW = {"seed, atomic split-K"}


@pytest.mark.parametrize("config", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW
                                    else c for c in CONFIGS])
def test_every_mutant_is_refused_and_caught_or_argued_harmless(config):
    build, k_stages, k_tile, m = CONFIGS[config]
    missed = mutation.missed(build(), k_stages, k_tile, m)
    assert not missed, "\n".join(missed)
