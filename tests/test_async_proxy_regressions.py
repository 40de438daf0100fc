"""The seed's bug class on Hopper, caught on a CPU: tests/hopper_pipelines.py's
warp-specialized matmul with one wait, fence, barrier or arrive dropped, each named after
the bug it reproduces, reported by the interpreter under the interleavings it explores
(producer first, consumer first, seeded random); and the negative controls: the correct
kernels run clean, with no proxy fence between a TMA load and the wgmma reading it, no
__syncthreads in the warp-specialized main loop, and consumers ordered after the
producer by mbarrier waits alone; lowering.verify.async_protocol proves the correct kernels and
finds each drop statically, under the same kind. On an H200 the correct kernels match
float64."""

import numpy as np
import pytest

import hopper_pipelines as hp
from codegen.errors import RaceError
from codegen.interp import run_interleavings
from lowering import kir
from lowering.verify.async_protocol import check_async_protocol

SEEDS = (0, 1, 2)
SHAPES = {"one tile": dict(), "persistent, two tiles": dict(tiles=2),
          "prefetching": dict(prefetch=True),
          "three stages, five k-tiles, prefetching, two tiles":
              dict(stages=3, k_tiles=5, tiles=2, prefetch=True)}


def _run(kernel, shape):
    args_seen = []

    def make_args():
        args = hp.inputs(tiles=shape.get("tiles", 1), k_tiles=shape.get("k_tiles", 4))
        args_seen.append(args)
        return args
    run_interleavings(kernel, make_args, seeds=SEEDS)
    return args_seen


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES)
def test_the_pipeline_is_correct_and_clean_under_every_interleaving(shape):
    kernel = hp.ws_matmul(**shape)
    assert check_async_protocol(kernel) == []            # and statically proved
    runs = _run(kernel, shape)
    assert len(runs) == 2 + len(SEEDS)
    for args in runs:
        np.testing.assert_array_equal(args["C"], hp.expected(args))


# (name of the bug, the kernel's shape, what is dropped, the hazard kind, words of its detail)
REGRESSIONS = [
    ("nvfuser-2000: the epilogue reuses operand stages while a TMA load is in flight",
     dict(prefetch=True), "drain", "async-pending", "TMA load"),
    ("nvfuser-3960: the TMA store reads the epilogue tile while stmatrix writes it",
     dict(), "epilogue_barrier", "RAW", ""),
    ("nvfuser-1552: an mbarrier used before its init is visible",
     dict(), "init_barrier", "mbarrier-init", ""),
    ("cudnn-frontend-784: a TMA store reads stmatrix's bytes without fence.proxy.async",
     dict(), "proxy_fence", "proxy-fence", "fence.proxy.async"),
    ("a stage released to the producer before the wgmma reading it retired",
     dict(), "release_early", "WAR", ""),
    ("a producer waiting on the wrong phase parity of a fresh barrier",
     dict(), "empty_parity", "deadlock", "parity"),
    ("a persistent kernel reuses its epilogue tile while the last TMA store still reads it",
     dict(tiles=2), "store_read_wait", "async-pending", "TMA store"),
]


@pytest.mark.parametrize("name, shape, drop, kind, words", REGRESSIONS,
                         ids=[r[0].split(":")[0] for r in REGRESSIONS])
def test_each_anchor_bug_is_caught(name, shape, drop, kind, words):
    kernel = hp.ws_matmul(drop=(drop,), **shape)
    with pytest.raises(RaceError) as caught:
        _run(kernel, shape)
    found = [h for h in caught.value.hazards if h.kind == kind]
    assert found, (name, [(h.kind, h.detail) for h in caught.value.hazards])
    assert any(words in h.detail for h in found), (name, [h.detail for h in found])
    static = check_async_protocol(kernel)                # the verifier catches it too
    assert kind in {h.kind for h in static}, (name, [(h.kind, h.detail) for h in static])


def _role_bodies(kernel):
    role = next(s for s in kernel.body if isinstance(s, kir.IfThenElse) and s.else_body)
    return role.then_body, role.else_body


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES)
def test_negative_controls_hold_in_the_kernels_that_run_clean(shape):
    """What a model that fences everything would demand, and these kernels lack (they run
    clean above): a proxy fence between a TMA load and a wgmma, a __syncthreads in the
    warp-specialized main loop, any whole-block barrier after the roles split."""
    kernel = hp.ws_matmul(**shape)
    producer, consumer = _role_bodies(kernel)
    mainloop = next(s for s in kir.walk(consumer)
                    if isinstance(s, kir.ForLoop) and s.var.name == "k")
    assert not any(isinstance(s, kir.FenceProxyAsync) for s in kir.walk(mainloop.body))
    assert not any(isinstance(s, kir.Barrier) for s in kir.walk(producer + consumer))
    named = [s for s in kir.walk(producer + consumer) if isinstance(s, kir.NamedBarrier)]
    assert all(s.count == 128 for s in named)            # the consumers' only, never 256


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES)
def test_the_pipeline_on_the_gpu_matches_float64_and_the_interpreter(shape):
    import cupy
    from codegen import nvrtc
    from codegen.cuda import emit_cuda
    from codegen.interp import run_kernel
    from codegen.launch import launch
    from driver.build import kernel_arch

    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("sm_90 instructions")
    kernel = hp.ws_matmul(**shape)
    cubin = nvrtc.compile_to_cubin(emit_cuda(kernel), kernel.name,
                                   kernel_arch(kernel, nvrtc.default_arch()))
    tiles = shape.get("tiles", 1)
    # two launches back to back on one stream, the second with its own output: the
    # launcher gives it a tensor map of its own (a map is a by-value parameter, never
    # re-pointed under a store in flight)
    runs = [hp.inputs(tiles=tiles, k_tiles=shape.get("k_tiles", 4), seed=s) for s in (0, 1)]
    on_gpu = [{k: cupy.asarray(v) for k, v in args.items()} for args in runs]
    for args in on_gpu:
        launch(kernel, cubin, args)
    cupy.cuda.Device().synchronize()
    for args, gpu in zip(runs, on_gpu):
        got = cupy.asnumpy(gpu["C"])
        np.testing.assert_array_equal(got, hp.expected(args))
        run_kernel(kernel, args)
        assert (got.view(np.uint16) == args["C"].view(np.uint16)).all()
