"""Split-K through a thread-block cluster (MatmulParams(splitk_mode="cluster")): the tile's
CTAs are one cluster and sum each other's partials through distributed shared memory.
The interpreter's results against float64, the static proof of the cluster protocol and
what each of its statements prevents (dropped alone: the verifier's finding and the
interpreter's hazard), the CUDA it emits and the launch's checks, and on the GPU the
results and their bits over repeats."""

import ctypes

import numpy as np
import pytest

import codegen
from codegen.errors import RaceError
from codegen.interp import run_kernel
from codegen.launch import LaunchLimitError, check_launch_limits
from fuserir.device import H200
from fuserir.errors import ScheduleError
from fuserir.scheduler import MatmulParams, schedule_matmul
from fuserir.scheduler.matmul_heuristic import matmul_heuristic
from lowering import kir
from lowering.pipeline import lower
from lowering.verify.cluster_protocol import check_cluster_protocol

from benchmarks import splitk_sweep
from test_hopper_matmul import HOPPER, integer_inputs, matmul_fusion, reference, scheduled

CLUSTER = dict(HOPPER, splitk_mode="cluster", splitk_factor=3, splitk_interleaved=True)
# one consumer warp group: the interpreter's cheapest Hopper plan
SMALL = dict(CLUSTER, cta_tile=(64, 64, 64), warp_tile=(64, 64, 64),
             instruction_tile=(64, 64, 16))


@pytest.mark.parametrize("layout, params, size, splits", [
    ("TN", CLUSTER, (72, 264, 64 * 5), (1, 3)),          # ragged tiles, 2 x 3 clusters
    ("TT", SMALL, (64, 72, 64 * 4 + 8), (2, 4)),         # a partial K box, 4 splits
])
def test_cluster_split_k_equals_float64(layout, params, size, splits, rng):
    """Bitwise equal to the float64 product of integer operands, without a hazard, for
    split factors the kernel was not scheduled at (one kernel serves every factor)."""
    exe = codegen.compile(scheduled(params, layout=layout), backend="interp")
    data = integer_inputs(rng, layout, *size)
    for splitk in splits:
        out = exe.run({**data, "splitk": splitk})["out"]
        assert np.array_equal(out, reference(layout, data).astype(np.float16)), splitk


def test_the_cluster_reduction_takes_no_workspace_and_launches_in_clusters():
    kernel, _ = lower(scheduled(SMALL, layout="TN"))
    assert kernel.workspaces == [] and not kernel.co_resident
    assert [kir.format_expr(e) for e in kernel.cluster] == ["1", "1", "splitk"]
    barriers = [s for s in kir.walk(kernel.body) if isinstance(s, kir.ClusterBarrier)]
    assert len(barriers) == 2
    assert check_cluster_protocol(kernel) == []


def _without(kernel, doomed):
    for s in kir.walk(kernel.body):
        for body in s.bodies():
            body[:] = [x for x in body if x is not doomed]


def _partials_write(kernel):
    return next(s for s in kir.walk(kernel.body) if isinstance(s, kir.ForLoop) and any(
        isinstance(x, kir.Store) and x.buffer.name == "acc_partials" for x in s.body))


# what each statement of the protocol prevents: (the statement, the verifier's finding,
# the interpreter's hazard)
DROPS = {
    "the first cluster barrier": (
        lambda k: [s for s in kir.walk(k.body) if isinstance(s, kir.ClusterBarrier)][0],
        "cluster", "in the same epoch 0: no cluster barrier orders them",
        "reads the shared memory of block \\(0, 0, 1\\), which has not started"),
    "the second cluster barrier": (
        lambda k: [s for s in kir.walk(k.body) if isinstance(s, kir.ClusterBarrier)][1],
        "cluster", "in epoch 1, the last: no cluster barrier keeps the read block's shared "
                   "memory alive", "which has exited"),
    "the partials' stores": (
        _partials_write, "uninitialized-read", "does not store to in an earlier epoch",
        "that no store of it wrote"),
}


@pytest.mark.parametrize("name", DROPS)
def test_each_statement_of_the_cluster_protocol_dropped_is_caught(name, rng):
    """The verifier refuses the kernel without it, naming what is unordered, and the
    interpreter shows the race it lets happen."""
    which, kind, finding, hazard = DROPS[name]
    kernel, _ = lower(scheduled(SMALL, layout="TN"), verify=False)
    _without(kernel, which(kernel))
    found = check_cluster_protocol(kernel)
    assert any(h.kind == kind and finding in h.detail for h in found), found
    data = integer_inputs(rng, "TN", 64, 64, 64 * 3)
    args = {**data, "out": np.zeros((64, 64), np.float16), "M": 64, "N": 64, "K": 192,
            "splitk": 3}
    with pytest.raises(RaceError, match=hazard) as raised:
        run_kernel(kernel, args)
    assert all(h.kind == "cluster" for h in raised.value.hazards)


@pytest.mark.parametrize("after", [False, True])
def test_a_role_that_waits_past_a_cluster_barrier_it_does_not_reach_is_a_deadlock(after):
    """The cluster barrier waits for the threads that reach none to exit: the producer
    warp group meeting the consumers at a named barrier before the consumers' first
    cluster barrier is proved; after it, the two wait for each other (a cycle)."""
    from lowering.errors import HazardError
    from lowering.verify.async_protocol import verify_async_protocol
    kernel, _ = lower(scheduled(SMALL, layout="TN"), verify=False)
    role = next(s for s in kir.walk(kernel.body) if isinstance(s, kir.IfThenElse)
                and s.else_body and any(isinstance(x, kir.TmaLoad)
                                        for x in kir.walk(s.then_body)))
    role.then_body.append(kir.NamedBarrier(id=5, count=256))
    first = next(i for i, x in enumerate(role.else_body) if isinstance(x, kir.IfThenElse)
                 and any(isinstance(y, kir.ClusterBarrier) for y in x.then_body))
    role.else_body.insert(first + after, kir.NamedBarrier(id=5, count=256))
    if not after:
        verify_async_protocol(kernel)
        return
    with pytest.raises(HazardError, match="wait for one another in a cycle") as raised:
        verify_async_protocol(kernel)
    assert [h.kind for h in raised.value.hazards] == ["deadlock"]


@pytest.mark.parametrize("changes, message", [
    (dict(splitk_factor=17), "the splits of a tile are one cluster of at most 16 CTAs, "
                             "not 17; use 'parallel' for more splits"),
    (dict(use_smem_epilogue=True), "each CTA stores the elements it sums from the registers "
                                   "\\(no use_smem_epilogue\\)"),
    (dict(cta_tile=(128, 128, 32), warp_tile=(64, 64, 32), instruction_tile=(16, 8, 16)),
     "only the Hopper path \\(sm_90\\) has thread-block clusters"),
])
def test_cluster_split_k_refuses_what_it_cannot_do(changes, message):
    with pytest.raises(ScheduleError, match=message):
        MatmulParams(**{**CLUSTER, **changes}).check()


def test_the_launch_refuses_a_cluster_past_16_ctas():
    kernel, _ = lower(scheduled(SMALL, layout="TN"))
    check_launch_limits(kernel, H200, {"M": 64, "N": 64, "K": 4096, "splitk": 16})
    with pytest.raises(LaunchLimitError, match="clusters of 17 CTAs \\(1, 1, 17\\) "
                                               "\\(at most 16\\)"):
        check_launch_limits(kernel, H200, {"M": 64, "N": 64, "K": 4096, "splitk": 17})


def test_the_cuda_of_the_cluster_reduction_compiles_for_sm90a():
    """NVRTC compiles it (no GPU needed): the barrier's arrival and wait in one statement,
    and each peer's element read through mapa and ld.shared::cluster."""
    exe = codegen.compile(scheduled(SMALL, layout="TN"), backend="cuda")
    (kernel,) = exe.kernels
    assert kernel.source.count("barrier.cluster.arrive.release; "
                               "barrier.cluster.wait.acquire;") == 2
    assert "mapa.shared::cluster.u32" in kernel.source
    assert "ld.shared::cluster.f32" in kernel.source


def test_the_cluster_launch_configuration_has_cuda_h_layout():
    """cuLaunchKernelEx reads CUlaunchConfig and CUlaunchAttribute as cuda.h lays them out
    (x86-64 and aarch64: the attribute's value a 64-byte union at offset 8)."""
    from codegen.kernel_params import _LaunchAttribute, _LaunchConfig
    assert ctypes.sizeof(_LaunchAttribute) == 72
    assert _LaunchAttribute.value.offset == 8
    assert ctypes.sizeof(_LaunchConfig) == 56
    assert (_LaunchConfig.stream.offset, _LaunchConfig.attrs.offset,
            _LaunchConfig.count.offset) == (32, 40, 48)


@pytest.mark.parametrize("layout, size, plan, counters", [
    ("TN", (16, 16, 16384), ((64, 16, 64), 8, 16, "cluster"), (64, 16, 64)),
    ("NT", (16, 256, 16384), ((64, 16, 64), 8, 16, "cluster"), (64, 16, 64)),  # 4 tiles
    # tiles halved in width while they are at most 4
    ("TN", (64, 64, 16384), ((64, 16, 64), 8, 16, "cluster"), (64, 64, 64)),
    ("TT", (32, 32, 16384), ((64, 16, 64), 8, 16, "cluster"), (64, 32, 64)),
    ("NN", (64, 128, 16384), ((64, 32, 64), 8, 16, "cluster"), (64, 64, 64)),
    ("TN", (64, 256, 16384), ((64, 64, 64), 8, 16, "cluster"), (64, 64, 64)),
    # over 64 rows: 64-row tiles where they are at most 4
    ("TN", (128, 128, 16384), ((64, 64, 64), 8, 16, "cluster"), (64, 64, 64)),
    ("TT", (256, 16, 16384), ((64, 16, 64), 8, 16, "cluster"), (64, 16, 64)),
    # a shorter K: all 16 splits, where the counters would take fewer or none
    ("NN", (64, 64, 4096), ((64, 16, 64), 8, 16, "cluster"), (64, 64, 64)),
    ("TN", (128, 128, 2048), ((64, 64, 64), 8, 16, "cluster"), None),
    ("TN", (64, 64, 512), ((64, 64, 64), 8, 2, "serial"), None),    # under 16 K tiles
    ("TN", (256, 256, 16384), ((128, 64, 64), 6, 16, "parallel"), None),     # 8 tiles
    ("TN", (256, 128, 16384), ((128, 64, 64), 6, 33, "parallel"), None),     # 8 tiles
    ("TN", (64, 64, 65536), ((64, 64, 64), 8, 64, "parallel"), None),        # long K
    # a longer K: at most 4 tiles of 64 rows through the counters
    ("TN", (128, 128, 17408), ((64, 64, 64), 8, 17, "parallel"), None),
    ("NT", (128, 64, 65536), ((64, 64, 64), 8, 64, "parallel"), None),
    ("TN", (128, 128, 262144), ((64, 64, 64), 8, 33, "parallel"), None),
    ("TT", (128, 256, 65536), ((128, 64, 64), 6, 33, "parallel"), None),     # 8 tiles
    ("TN", (136, 184, 175704), ((128, 192, 64), 4, 66, "parallel"), None),
])
def test_the_heuristic_sums_few_splits_of_few_tiles_through_a_cluster(layout, size, plan,
                                                                     counters):
    """A split-K over at most 4 tiles of 64 rows (not 128: narrowed while they stay that
    few where it sums through a cluster) sums through the cluster where K gives it at
    most 16 splits of 16 K tiles, the arrival counters where K is longer; more tiles,
    the counters on 128-row tiles. The device model's cluster_split off, or
    deterministic off, the counters or atomics on the counters' tiles instead."""
    tile, stages, splits, mode = plan
    p = matmul_heuristic(*size, layout=layout, device=H200)
    assert (p.cta_tile, p.stages, p.splitk_factor, p.splitk_mode) == plan
    assert p.splitk_interleaved == (mode != "serial")
    off = matmul_heuristic(*size, layout=layout, device=H200.with_(cluster_split=False))
    atomic = matmul_heuristic(*size, layout=layout, device=H200.with_(deterministic=False))
    if counters is not None:        # the cluster's plan gives way to the counters'
        assert (off.splitk_mode, off.cta_tile) == ("parallel", counters)
        assert (atomic.splitk_mode, atomic.cta_tile) == ("atomic", counters)
    elif mode != "cluster":
        assert off == p and atomic.splitk_mode == ("serial" if mode == "serial" else "atomic")
    reasons = []
    matmul_heuristic(*size, layout=layout, device=H200, reasons=reasons)
    assert (mode == "cluster") == any("split-K through thread-block clusters" in r
                                      for r in reasons), reasons


def test_the_sweep_measures_with_and_without_the_cluster_split():
    """The sweep plans as the GPU's device model does, and --no-cluster-split plans as
    one with cluster_split off."""
    assert not splitk_sweep.parse_args([]).no_cluster_split
    assert splitk_sweep.parse_args(["--no-cluster-split"]).no_cluster_split


def test_the_cluster_split_gives_way_where_its_partials_leave_no_stage():
    """64x64x16384 on 64x16 tiles: 4 KB of partials beside two 10 KB stages do not fit
    22 KB of shared memory, two stages alone do: the arrival counters."""
    small = H200.with_(shared_limit=22 * 1024)
    p = matmul_heuristic(64, 64, 16384, layout="TN", device=small)
    assert (p.cta_tile, p.stages, p.splitk_mode) == ((64, 16, 64), 2, "parallel")
    roomy = matmul_heuristic(64, 64, 16384, layout="TN",
                             device=small.with_(shared_limit=24 * 1024))
    assert (roomy.stages, roomy.splitk_mode) == (2, "cluster")


@pytest.mark.parametrize("layout", ["TN", "NT"])
def test_the_heuristics_cluster_plan_equals_float64(layout, rng):
    """The plan taken at 64x64x16384 (one kernel for its size class: 64x16 tiles; B's
    boxes 16 rows of K in TN, rows of 16 elements of N in NT, 32B-swizzled) run at a
    smaller size with ragged tiles and 3 splits."""
    f = matmul_fusion(layout)
    params = matmul_heuristic(64, 64, 16384, layout=layout, device=H200)
    assert params.cta_tile == (64, 16, 64) and params.splitk_mode == "cluster"
    schedule_matmul(f, params)
    exe = codegen.compile(f, backend="interp")
    data = integer_inputs(rng, layout, 40, 56, 64 * 3 + 8)
    out = exe.run({**data, "splitk": 3})["out"]
    assert np.array_equal(out, reference(layout, data).astype(np.float16))


@pytest.mark.gpu
@pytest.mark.parametrize("layout, size, splits", [
    ("TN", (128, 128, 16384), 16),              # 16 CTAs a cluster: the non-portable size
    ("NT", (136, 184, 64 * 37 + 8), 5),
])
def test_cluster_split_k_on_the_gpu_equals_float64_and_repeats_its_bits(layout, size, splits):
    cupy = pytest.importorskip("cupy")
    exe = codegen.compile(scheduled(dict(SMALL, splitk_factor=splits), layout=layout),
                          backend="cuda")
    rng = np.random.default_rng(7)
    data = integer_inputs(rng, layout, *size)
    gpu = {k: cupy.asarray(v) for k, v in data.items()}
    first = cupy.asnumpy(exe.run({**gpu, "splitk": splits})["out"])
    assert np.array_equal(first, reference(layout, data).astype(np.float16))
    fresh = {k: cupy.asarray(rng.uniform(-1, 1, v.shape).astype(v.dtype))
             for k, v in data.items()}
    bits = cupy.asnumpy(exe.run({**fresh, "splitk": splits})["out"])
    for _ in range(20):
        again = cupy.asnumpy(exe.run({**fresh, "splitk": splits})["out"])
        assert np.array_equal(again.view(np.uint16), bits.view(np.uint16))


def test_no_split_through_clusters_where_the_launch_path_cannot_launch_them(monkeypatch):
    """Clusters launch only through the driver's cuLaunchKernelEx: with CuPy's launch
    (FUSERIR_LAUNCH=cupy) the GPU's device model plans no split-K through them."""
    from codegen import kernel_params
    from codegen.launch import cluster_launches
    monkeypatch.setenv("FUSERIR_LAUNCH", "cupy")
    kernel_params.cuda_driver.cache_clear()
    try:
        assert not cluster_launches()
    finally:
        monkeypatch.delenv("FUSERIR_LAUNCH")
        kernel_params.cuda_driver.cache_clear()


def test_a_cluster_split_keeps_its_ctas_resident_at_once():
    """As narrow as keeps every CTA of the clusters on an SM of its own: 64x16 tiles
    (4 x 16 CTAs) on 132 SMs, 64x32 (2 x 16) on 48, none on 8 SMs (the serial split)."""
    def plan(sms):
        p = matmul_heuristic(64, 64, 16384, layout="TN", device=H200.with_(sms=sms))
        return p.cta_tile, p.splitk_factor, p.splitk_mode
    assert plan(132) == ((64, 16, 64), 16, "cluster")
    assert plan(48) == ((64, 32, 64), 16, "cluster")
    assert plan(16) == ((64, 64, 64), 16, "cluster")
    assert plan(8)[2] == "serial"


def test_a_cluster_no_gpc_holds_is_refused_with_the_way_out(monkeypatch):
    """Where the driver says not even one cluster fits (cuOccupancyMaxActiveClusters 0: a
    GPU whose GPCs hold fewer CTAs), the launch is refused before it fails, the message
    naming the cluster and the device model that plans without clusters."""
    import types
    from codegen import kernel_params, launch
    monkeypatch.setattr(kernel_params, "cuda_driver", lambda: object())
    monkeypatch.setattr(kernel_params, "clusters_resident", lambda func, config, cluster: 0)
    kernel, func = types.SimpleNamespace(name="mm_TN"), types.SimpleNamespace(ptr=1)
    config = ((2, 1, 16), (128, 3, 1), 90112)
    with pytest.raises(LaunchLimitError, match=(
            r"kernel mm_TN: a cluster of 16 CTAs of 384 threads and 90112 bytes of shared "
            r"memory each does not fit on one GPC of .*device_model\(\)\.with_\("
            r"cluster_split=False\)")):
        launch._check_clusters_fit(kernel, func, config, (1, 1, 16))
    monkeypatch.setattr(kernel_params, "clusters_resident", lambda func, config, cluster: 1)
    launch._check_clusters_fit(kernel, func, config, (1, 1, 16))
