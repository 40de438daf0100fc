"""The mutation test of the checkers on the Hopper kernels the matmul heuristics build
(TMA, wgmma and mbarrier pipelines: serial split-K with an epilogue, the parallel split-K
whose CTAs store what they sum, two-kernel split-K, the producer-copies path): every
mutant of their synchronization refused by the static verifier and caught by the
interpreter, or argued harmless (tests/mutation.py)."""

import codegen
import pytest

import mutation
import test_hopper_matmul as hopper

# name: (fusion builder, K per split at K tiles = stages, K of one tile, M)
CONFIGS = {
    "NT, serial split-K, bias relu": (lambda: hopper.scheduled(
        dict(hopper.HOPPER, splitk_factor=2), layout="NT", epilogue=True), 64 * 4, 64, 128),
    "NT, parallel split-K, 128x64 tiles": (lambda: hopper.scheduled(
        dict(hopper.HOPPER, cta_tile=(128, 64, 64), warp_tile=(64, 64, 64),
             instruction_tile=(64, 64, 16), splitk_mode="parallel", splitk_factor=2),
        layout="NT"), 64 * 4, 64, 128),
    "TT": (lambda: hopper.scheduled(dict(hopper.HOPPER), layout="TT"), 64 * 4, 64, 128),
    "TN, two kernels": (lambda: hopper.scheduled(
        dict(hopper.HOPPER, splitk_mode="two_kernel", splitk_factor=3), layout="TN"),
        64 * 4, 64, 128),
    "NT, producer copies": (lambda: hopper.scheduled(
        dict(hopper.COPIES, splitk_factor=2), layout="NT"), 64 * 4, 64, 128),
    # 4 tiles of 64x64 walked by 3 CTAs: 2 tiles (one of them past the end) a CTA
    "TT, persistent, bias relu": (lambda: hopper.scheduled(
        dict(hopper.PERSISTENT), layout="TT", epilogue=True), 64 * 3, 64, 128, {"ctas": 3}),
    # the same, the output staged through shared memory under the last K tile's condition
    "TN, persistent, staged output": (lambda: hopper.scheduled(
        dict(hopper.PERSISTENT, use_smem_epilogue=True), layout="TN"), 64 * 3, 64, 128,
        {"ctas": 3}),
}


# Behind -m slow, to keep the default suite under 15 minutes, each with what covers its
# protocol in the default run:
# - the parallel split-K (over two minutes): each of its syncs dropped alone is refused
#   (tests/test_grid_protocol.py), and the same grid reduction's mutants on the mma.sync
#   path are judged (tests/test_mutation_sm80.py);
# - the two kernels: their host-side order is the sm_80 seed's (judged there), their
#   pipeline the TT config's;
# - the producer copies: the fence between their stores and the arrival, dropped, is
#   refused and caught (tests/test_hopper_matmul.py), their pipeline the TT config's;
# - the persistent kernel with a bias-relu epilogue: its walk over the tiles (the stages
#   reused across tiles, the tile loop's mbarrier phases) is the staged-output persistent
#   config's, its epilogue from the registers the serial bias-relu config's.
SLOW = {"NT, parallel split-K, 128x64 tiles", "TN, two kernels", "NT, producer copies",
        "TT, persistent, bias relu"}


@pytest.mark.parametrize("config", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW
                                    else c for c in CONFIGS])
def test_every_mutant_is_refused_and_caught_or_argued_harmless(config):
    build, k_stages, k_tile, m, *scalars = CONFIGS[config]
    missed = mutation.missed(build(), k_stages, k_tile, m, *scalars)
    assert not missed, "\n".join(missed)


def test_the_operators_reach_every_kind_of_synchronization():
    """The mutants of the serial split-K kernel include each operator, on each kind of
    statement it applies to (a test of the mutation generator itself)."""
    build = CONFIGS["NT, serial split-K, bias relu"][0]
    kernel = codegen.compile(build(), backend="interp").kernels[0].kir
    names = [m.name for m in mutation.mutants(kernel)]
    for what in ("delete", "wait-down", "fence-up", "parity", "count +1", "count -1",
                 "expect-tx +16", "expect-tx -16", "wait-group +1"):
        assert any(n.startswith(what + " ") for n in names), what
    for line in ("sem_wait", "sem_release", "__threadfence", "mbarrier.wait",
                 "mbarrier.arrive", "wgmma.fence", "wgmma.wait_group", "bar.sync"):
        assert any(n.startswith("delete ") and line in n for n in names), line


def test_a_mutant_the_checkers_miss_is_reported():
    """The harness can fail: a "mutant" that changes nothing passes the verifier and the
    interpreter, and no harmless rule argues for it, so it is reported as missed."""
    kernel = codegen.compile(hopper.scheduled(dict(hopper.HOPPER), layout="TT"),
                             backend="interp").kernels[0].kir
    sizes = mutation.sizes_for(64 * 4, 64, 128)[:1]
    unchanged = mutation.Mutant("delete nothing", kernel, "delete", "S1")
    verdict = mutation.judge(kernel, unchanged, sizes, mutation.clean_outputs(kernel, sizes))
    assert verdict.missed == f"{kernel.name}: delete nothing: verifier None, interpreter None"
