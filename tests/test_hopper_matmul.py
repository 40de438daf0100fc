"""The matmul scheduler's Hopper path on the CPU: wgmma on TMA-loaded tiles in a
warp-specialized pipeline, scheduled through the public transforms, lowered, its syncs
placed and proved by the async-protocol verifier, and run in the interpreter with its
race detector.

The Hopper seed configuration is the seed's (NT, split-K 5, shared-memory epilogue over
the operand stages) with the Hopper tiles (CTA 128x128x64, two consumer warp groups of
64x128, 4 stages). The CPU size keeps its split factor with a short last split: K =
64 * 13 split 5 ways is 3 K tiles per split and 1 in the last. Integer-valued inputs make
every product and f32 sum exact, so outputs must equal the reference bit for bit.
"""

import re

import numpy as np
import pytest

import codegen
from fuserir.device import H200
import fuserir
from codegen.errors import HazardError, RaceError
from codegen.interp import InterpError
from fuserir.errors import ScheduleError
from fuserir.scheduler import MatmulParams, schedule_matmul
from fuserir.scheduler.matmul_heuristic import matmul_heuristic
from lowering import kir

OPERANDS = {"TT": ("[M, K]", "[K, N]"), "TN": ("[M, K]", "[N, K]"),
            "NT": ("[K, M]", "[K, N]"), "NN": ("[K, M]", "[N, K]")}
HOPPER = dict(cta_tile=(128, 128, 64), warp_tile=(64, 128, 64), instruction_tile=(64, 128, 16),
              stages=4)
SEED = dict(HOPPER, splitk_factor=5, use_smem_epilogue=True, promote_prologue_smem_reuse=True)
PERSISTENT = dict(cta_tile=(64, 64, 64), warp_tile=(64, 64, 64),
                  instruction_tile=(64, 64, 16), stages=3, persistent=True)
M, N, K, SPLITK = 256, 128, 64 * 13, 5


def matmul_fusion(layout="NT", dtype="f16", epilogue=False):
    a, b = OPERANDS[layout]
    if epilogue:
        return fuserir.parse(f"""
fusion mm(A: {dtype}{a}, B: {dtype}{b}, bias: f32[N]) {{
  acc = matmul(A, B, layout={layout})
  out = cast(relu(acc + broadcast(bias, [true, false])), {dtype})
  output out
}}""")
    return fuserir.parse(f"""
fusion mm(A: {dtype}{a}, B: {dtype}{b}) {{
  acc = matmul(A, B, layout={layout})
  out = cast(acc, f16)
  output out
}}""")


def scheduled(params, **kw):
    f = matmul_fusion(**kw)
    schedule_matmul(f, MatmulParams(**params))
    return f


def integer_inputs(rng, layout, m, n, k, dtype="f16", epilogue=False):
    dims = {"M": m, "N": n, "K": k}
    shapes = [tuple(dims[d] for d in spec.strip("[]").split(", ")) for spec in OPERANDS[layout]]
    np_dtype = np.float16 if dtype == "f16" else fuserir.dtypes.DataType.bf16.numpy
    data = {name: rng.integers(-3, 4, shape).astype(np_dtype)
            for name, shape in zip("AB", shapes)}
    if epilogue:
        data["bias"] = rng.integers(-8, 9, (n,)).astype(np.float32)
    return data


def reference(layout, data):
    a, b = (data[x].astype(np.float64) for x in "AB")
    return (a if layout[0] == "T" else a.T) @ (b if layout[1] == "T" else b.T)


@pytest.fixture(scope="module")
def seed_exe():
    return codegen.compile(scheduled(SEED), backend="interp")


def test_the_hopper_seed_configuration_equals_float64_without_a_hazard(seed_exe, rng):
    data = integer_inputs(rng, "NT", M, N, K)
    out = seed_exe.run({**data, "splitk": SPLITK})["out"]
    assert np.array_equal(out, reference("NT", data).astype(np.float16))
    again = seed_exe.run({**data, "splitk": SPLITK})["out"]      # semaphores left reset
    assert np.array_equal(out, again)


def _syncs(kernel):
    return [s for s in kir.walk(kernel.body) if getattr(s, "sync_id", None)]


def _loops_with(kernel, kind):
    """The K-tile loops (each waits on an mbarrier) holding a statement of `kind`."""
    return [s for s in kir.walk(kernel.body) if isinstance(s, kir.ForLoop)
            and any(isinstance(x, kir.MbarrierWait) for x in s.body)
            and any(isinstance(x, kind) for x in kir.walk(s.body))]


def test_the_verifier_places_the_golden_sync_set_and_no_block_barrier_in_the_main_loop(
        seed_exe):
    kernel = seed_exe.kernels[0].kir
    placed = [(type(s).__name__, s.sync_id) for s in _syncs(kernel)]
    # wgmma.fence after the accumulators are zeroed, and a bar.sync of the 256 consumer
    # threads before the epilogue tile's rows are copied out by other threads (the
    # turnstile's bar.sync, a __syncthreads become the consumers' named barrier, already
    # orders every consumer's last wgmma before the tile overwrites the operand stages)
    assert placed == [("WgmmaFence", "sync1"), ("NamedBarrier", "sync2")]
    for s in _syncs(kernel):
        if isinstance(s, kir.NamedBarrier):
            assert s.count == 256 and s.reasons
    (consumer,) = _loops_with(kernel, kir.Wgmma)
    (producer,) = _loops_with(kernel, kir.TmaLoad)
    for loop in (consumer, producer):
        body = list(kir.walk(loop.body))
        assert not any(isinstance(s, (kir.Barrier, kir.NamedBarrier)) for s in body)
    assert [type(s).__name__ for s in consumer.body] == [
        "MbarrierWait", "ForLoop", "WgmmaCommit", "WgmmaWait", "MbarrierArrive"]
    assert kernel.launch.block[1].value == 3              # two consumers, one producer


# two of the eight cases in CI (each dtype, an operand of each major); the other six
# `slow`, for CI's budget (every layout also runs on the GPU and in the matrix)
LAYOUT_CASES = [pytest.param(lay, dt, marks=() if (lay, dt) in (
    ("TT", "f16"), ("NN", "bf16")) else pytest.mark.slow)
    for lay in ("TT", "TN", "NT", "NN") for dt in ("f16", "bf16")]


@pytest.mark.parametrize("layout, dtype", LAYOUT_CASES)
def test_every_layout_and_dtype_with_a_fused_epilogue(layout, dtype, rng):
    f = scheduled(dict(HOPPER, splitk_factor=2), layout=layout, dtype=dtype, epilogue=True)
    exe = codegen.compile(f, backend="interp")
    m, n, k = 136, 200, 64 * 3 + 8                      # ragged tiles, a partial K box
    data = integer_inputs(rng, layout, m, n, k, dtype, epilogue=True)
    out = exe.run({**data, "splitk": 2})["out"]
    expected = fuserir.evaluate(matmul_fusion(layout, dtype, True), data)["out"]
    assert np.array_equal(out.view(np.uint16), expected.view(np.uint16))


@pytest.mark.parametrize("changes", [
    dict(splitk_mode="two_kernel", splitk_factor=3),
    dict(splitk_mode="parallel", splitk_factor=3),
    dict(splitk_mode="parallel", splitk_factor=3, splitk_interleaved=True),
    dict(splitk_mode="atomic", splitk_factor=3),
    pytest.param(dict(use_smem_epilogue=True, promote_prologue_smem_reuse=False,
                      splitk_factor=1), marks=pytest.mark.slow),   # half a minute to prove
    pytest.param(dict(cta_tile=(64, 256, 64), warp_tile=(64, 256, 64),
                      instruction_tile=(64, 256, 16), stages=2, splitk_factor=1),
                 marks=pytest.mark.slow),
])
def test_split_k_modes_epilogues_and_tiles(changes, rng):
    f = scheduled({**HOPPER, **changes}, layout="TN")
    exe = codegen.compile(f, backend="interp")
    data = integer_inputs(rng, "TN", 72, 264, 64 * 5)
    for splitk in sorted({1, changes.get("splitk_factor", 1)}):
        out = exe.run({**data, "splitk": splitk})["out"]
        assert np.array_equal(out, reference("TN", data).astype(np.float16))


@pytest.mark.parametrize("params, layout, run_at, scalars, loops", [
    (dict(HOPPER, tile_group=3), "TN", (600, 264, 64 * 2 + 8), {"splitk": 1},
     "[iBIDy{ceildiv(ceildiv(M, 128), 3)} iBIDx{3*ceildiv(N, 128)} "),
    (dict(HOPPER, tile_group=2, splitk_factor=2), "TT", (264, 392, 64 * 3), {"splitk": 2},
     "[iBIDy{ceildiv(ceildiv(M, 128), 2)} iBIDx{2*ceildiv(N, 128)} "),
    (dict(PERSISTENT, tile_group=2), "NT", (200, 136, 64 * 3 + 8), {"ctas": 5},
     "[i{ceildiv(2*ceildiv(ceildiv(M, 64), 2)*ceildiv(N, 64), ctas)} iBIDx{ctas} "),
])
def test_tiles_walked_in_groups_of_rows_equal_float64(params, layout, run_at, scalars, loops,
                                                      rng):
    """tile_group G: the output's tiles in G rows down one column, then the next column
    (blockIdx.x over N x G, blockIdx.y over the groups; a persistent kernel's tile loop in
    that order), a last group past M's tiles predicated off: bitwise equal to float64."""
    f = scheduled(params, layout=layout)
    assert f.tensor("out").describe().split("loop=")[1].startswith(loops)
    data = integer_inputs(rng, layout, *run_at)
    out = codegen.compile(f, backend="interp").run({**data, **scalars})["out"]
    assert np.array_equal(out, reference(layout, data).astype(np.float16))


def test_a_tile_group_that_is_no_positive_integer_is_refused():
    with pytest.raises(ScheduleError, match=r"tile_group must be an integer >= 1 \(rows of "
                       r"tiles a group walks\), got 0"):
        MatmulParams(**dict(HOPPER, tile_group=0))


@pytest.mark.parametrize("layout, planned_at, run_at, splits", [
    ("TN", (16, 4096, 4096), (12, 136, 128 * 3 + 8), (1, 2)),     # swapped, 64 x 16 x 128
    ("TT", (1, 4096, 4096), (1, 72, 128 * 2), (1,)),               # swapped, 64 x 8 x 128
    ("TT", (16, 256, 16384), (12, 136, 64 * 6), (3,)),             # swapped, parallel
    ("TN", (128, 24, 65536), (136, 20, 64 * 5), (2,)),             # 128 x 24, parallel
    # the small side stored contiguously: box rows of 32 bytes (32B swizzle), 16 bytes
    # (none), 64 bytes (64B swizzle)
    ("NT", (16, 4096, 4096), (16, 136, 128 * 3 + 8), (1, 2)),      # swapped, 64 x 16 x 128
    ("NT", (8, 4096, 4096), (8, 72, 128 * 2), (1,)),               # swapped, 64 x 8 x 128
    ("NN", (32, 4096, 4096), (32, 72, 128 * 2 + 16), (1,)),        # swapped, 64 x 32 x 128
    ("TT", (256, 16, 16384), (136, 16, 64 * 5), (3,)),             # 128 x 16, parallel
    # M = 1 with A stored K x 1, N = 1 with B stored K x 1: staged along K
    ("NT", (1, 4096, 4096), (1, 72, 128 * 2 + 8), (1,)),           # swapped, 64 x 8 x 128
    ("TT", (64, 1, 4096), (40, 1, 64 * 3 + 8), (4,)),              # 64 x 8, parallel
])
def test_the_heuristics_tiles_fitted_to_a_small_side_equal_float64(layout, planned_at, run_at,
                                                                    splits, rng):
    """The heuristic's plans with tiles as narrow as a small M or N (one kernel serves
    every size of its class), run at smaller sizes with ragged tiles: bitwise equal to the
    float64 product of integer operands, without a hazard."""
    params = matmul_heuristic(*planned_at, layout=layout)
    assert params.cta_tile[1] < 64
    f = matmul_fusion(layout)
    schedule_matmul(f, params)
    exe = codegen.compile(f, backend="interp")
    data = integer_inputs(rng, layout, *run_at)
    for splitk in splits:
        out = exe.run({**data, "splitk": splitk})["out"]
        assert np.array_equal(out, reference(layout, data).astype(np.float16)), splitk


def test_a_dropped_fence_in_the_warp_specialized_turnstile_is_a_cross_cta_race(rng):
    from lowering.pipeline import lower
    from codegen.interp import run_kernel
    kernel, _ = lower(scheduled(dict(HOPPER, splitk_factor=3), layout="TT"), verify=False)
    fences = [s for s in kir.walk(kernel.body) if isinstance(s, kir.Fence)]
    assert len(fences) == 1
    for s in kir.walk(kernel.body):
        for body in s.bodies():
            if fences[0] in body:
                body.remove(fences[0])
    data = integer_inputs(rng, "TT", 128, 128, 64 * 3)
    out = np.zeros((128, 128), np.float16)
    with pytest.raises(RaceError, match="cross-cta on acc_work"):
        run_kernel(kernel, {**data, "out": out, "M": 128, "N": 128, "K": 192, "splitk": 3})


def test_the_schedule_prints_and_parses_back():
    from fuserir.ir.equality import first_difference
    f = scheduled(SEED)
    text = str(f)
    assert "A_cache = A.cache_after(shared, tma=true)" in text
    assert "A_cache.circular_buffer(4, warp_specialize=TIDy)" in text
    assert first_difference(f, fuserir.parse(text)) is None


def test_the_automatic_schedule_takes_the_hopper_path_unless_tma_cannot_read(rng):
    f = matmul_fusion("TT")
    exe = codegen.compile(f, backend="interp", device=H200)
    data = integer_inputs(rng, "TT", 64, 48, 512)
    (kernel,) = exe.kernels_for(data)
    assert "wgmma" in kernel.kir_text and kernel.kir.tensor_maps
    assert np.array_equal(exe.run(data)["out"], reference("TT", data).astype(np.float16))
    # B's rows of 48 + 1 elements (98 bytes) are no TMA stride: the mma.sync path
    wide = np.zeros((512, 49), np.float16)
    wide[:, :48] = data["B"]
    strided = {"A": data["A"], "B": wide[:, :48]}
    (kernel,) = exe.kernels_for(strided)
    assert "mma.m16n8k16" in kernel.kir_text and not kernel.kir.tensor_maps
    assert np.array_equal(exe.run(strided)["out"], reference("TT", data).astype(np.float16))
    # B at an address 2 bytes past a 16-byte boundary, no TMA base: the mma.sync path
    raw = np.zeros(512 * 48 + 1, np.float16)
    shifted = raw[1:].reshape(512, 48)
    shifted[:] = data["B"]
    (kernel,) = exe.kernels_for({"A": data["A"], "B": shifted})
    assert "mma.m16n8k16" in kernel.kir_text and not kernel.kir.tensor_maps
    assert np.array_equal(exe.run({"A": data["A"], "B": shifted})["out"],
                          reference("TT", data).astype(np.float16))
    # A's rows of 63 elements: the producer warp group copies them, element by element;
    # B's rows of 96 bytes still come by TMA
    odd = integer_inputs(rng, "TT", 64, 48, 63)
    (kernel,) = exe.kernels_for(odd)
    assert "wgmma" in kernel.kir_text
    assert [t.tensor.buffer.name for t in kernel.kir.tensor_maps] == ["B"]
    assert "fence.proxy.async" in kernel.kir_text and kernel.caps == {"A": 2}
    assert np.array_equal(exe.run(odd)["out"], reference("TT", odd).astype(np.float16))


# -- operands TMA cannot read: the producer warp group copies them ------------------------------

COPIES = dict(HOPPER, async_gmem_load_operands=False)
MIXED = dict(HOPPER, async_gmem_load_operands=(False, True))     # A copied, B by TMA


@pytest.fixture(scope="module")
def copies_kernel():
    from lowering.pipeline import lower
    return lower(scheduled(dict(COPIES, splitk_factor=2), layout="NT"))[0]


def test_the_producer_copies_equal_float64_without_a_hazard(copies_kernel, rng):
    from codegen.interp import run_kernel
    m, n, k = 136, 200, 64 * 3 + 8                      # ragged tiles, a partial K tile
    data = integer_inputs(rng, "NT", m, n, k)
    out = np.zeros((m, n), np.float16)
    run_kernel(copies_kernel, {**data, "out": out, "M": m, "N": n, "K": k, "splitk": 2})
    assert np.array_equal(out, reference("NT", data).astype(np.float16))


@pytest.mark.parametrize("layout, width, run_at", [
    ("NT", 16, (16, 72, 128 * 2 + 8)),          # box rows of 32 bytes: the 32B mode
    ("NN", 32, (32, 72, 128 * 2)),              # 64 bytes: the 64B mode
])
def test_producer_copies_into_a_32b_or_64b_swizzled_tile_are_what_wgmma_reads(layout, width,
                                                                             run_at, rng):
    """The tile's swizzle (transforms.swizzle, rows of 32 or 64 bytes) as the generic
    stores of the producer's copies apply it (lowering's index) is the hardware's 32B or
    64B mode that the wgmma descriptor reads (instructions.swizzle of the byte offset):
    a tile fitted to a small M stored contiguously, copied element-wise, equals float64."""
    f = scheduled(dict(SWAPPED, cta_tile=(64, width, 128), warp_tile=(64, width, 128),
                       instruction_tile=(64, width, 16), stages=3, producer_registers=None,
                       async_gmem_load_operands=False), layout=layout)
    assert f.tensor("A_cache").swizzle_row == width
    data = integer_inputs(rng, layout, *run_at)
    out = codegen.compile(f, backend="interp").run({**data, "splitk": 1})["out"]
    assert np.array_equal(out, reference(layout, data).astype(np.float16))


def test_a_tile_swizzled_by_rows_of_no_hardware_mode_is_refused_by_name():
    f = scheduled(HOPPER, layout="TT")
    f.tensor("A_cache").swizzle(128)                    # rows of 256 bytes
    with pytest.raises(ScheduleError, match=r"A_cache: swizzled in rows of 256 bytes; TMA and "
                       r"wgmma read tiles swizzled in rows of 32, 64 or 128 bytes \(swizzle"
                       r"\(16\), swizzle\(32\), swizzle\(64\)\) or not swizzled"):
        codegen.compile(f, backend="interp")
    f = scheduled(dict(SWAPPED, cta_tile=(64, 16, 128), warp_tile=(64, 16, 128),
                       instruction_tile=(64, 16, 16), stages=6, producer_registers=None),
                  layout="NT")
    f.tensor("A_cache").swizzle(64)                     # 128-byte rows, 32-byte box rows
    with pytest.raises(ScheduleError, match=r"A_cache \(a TMA copy\): a box row of 32 bytes "
                       r"in a tile swizzled by 128-byte rows; make the innermost box axis 64 "
                       r"elements"):
        codegen.compile(f, backend="interp")


def test_the_producer_fences_its_copies_for_the_async_proxy(copies_kernel):
    """Golden: its 128 threads copy each tile (no thread 0 alone, no TMA), then
    fence.proxy.async, then arrive on the stage's full barrier (128 arrivals)."""
    assert not copies_kernel.tensor_maps
    (producer,) = [s for s in kir.walk(copies_kernel.body) if isinstance(s, kir.ForLoop)
                   and isinstance(s.body[0], kir.MbarrierWait) and
                   any(isinstance(x, kir.Store) for x in kir.walk(s.body))]
    kinds = [type(s).__name__ for s in producer.body]
    assert kinds == ["MbarrierWait", "ForLoop", "ForLoop", "FenceProxyAsync",
                     "MbarrierArrive"]
    assert producer.body[3].sync_id and producer.body[3].reasons
    inits = [s for s in kir.walk(copies_kernel.body) if isinstance(s, kir.MbarrierInit)]
    assert sorted(kir.format_expr(s.count) for s in inits) == ["128", "256"]
    assert not any(isinstance(s, (kir.Barrier, kir.NamedBarrier))
                   for s in kir.walk(producer.body))


@pytest.mark.parametrize("params, layout, m", [(COPIES, "TT", 128), (MIXED, "NT", 8)],
                         ids=["copies", "A copied, B by TMA"])
def test_a_dropped_proxy_fence_is_refused_and_caught(params, layout, m, rng):
    from lowering.pipeline import lower
    f = scheduled(params, layout=layout)
    kernel, _ = lower(f, verify=False)
    (fence,) = [s for s in kir.walk(kernel.body) if isinstance(s, kir.FenceProxyAsync)]
    with pytest.raises(HazardError, match="proxy-fence on A_cache"):
        lower(f, drop_syncs=[fence.sync_id])
    exe = codegen.compile(f, backend="interp", drop_syncs=[fence.sync_id], verify=False)
    data = integer_inputs(rng, layout, m, 128, 64 * 2)
    with pytest.raises(RaceError, match="proxy-fence"):
        exe.run({**data, "splitk": 1})


@pytest.fixture(scope="module")
def mixed_exe():
    return codegen.compile(scheduled(dict(MIXED, splitk_factor=2), layout="NT"),
                           backend="interp")


@pytest.mark.parametrize("m", [1, 136])
def test_one_operand_copied_the_other_by_tma_equals_float64(mixed_exe, m, rng):
    """A decode matmul's A with M = 1 stored K x M has rows of one element, which TMA
    cannot read: the producer copies A's tiles while B's still come by TMA."""
    n, k = 200, 64 * 3 + 8
    data = integer_inputs(rng, "NT", m, n, k)
    out = mixed_exe.run({**data, "splitk": 2})["out"]
    assert np.array_equal(out, reference("NT", data).astype(np.float16))


ALONG_K = dict(HOPPER, staged_along_k=(True, False))    # A [K, M] boxed along K


@pytest.fixture(scope="module")
def along_k_exe():
    return codegen.compile(scheduled(dict(ALONG_K, splitk_factor=2), layout="NT"),
                           backend="interp")


def test_an_operand_staged_along_k_equals_float64(along_k_exe, rng):
    """M = 1 with A stored K x M: A's K is contiguous, its tile is boxed along K (a
    K-major wgmma operand, as a row-major A's) and both operands come by TMA; A's tensor
    map runs along K, its second dimension of one element given a nominal stride."""
    n, k = 200, 64 * 3 + 8
    data = integer_inputs(rng, "NT", 1, n, k)
    out = along_k_exe.run({**data, "splitk": 2})["out"]
    assert np.array_equal(out, reference("NT", data).astype(np.float16))
    kernel = along_k_exe.kernels[0].kir
    (a_map,) = [t for t in kernel.tensor_maps if t.tensor.buffer.name == "A"]
    assert [kir.format_expr(x) for x in a_map.sizes] == ["K", "M"]


def test_b_staged_along_k_equals_float64(rng):
    """N = 1 with B stored K x N (TT, a matrix-vector product): B's K is contiguous, its
    tile boxed along K, a K-major wgmma operand like a transposed B's."""
    exe = codegen.compile(scheduled(dict(HOPPER, staged_along_k=(False, True)),
                                    layout="TT"), backend="interp")
    data = integer_inputs(rng, "TT", 136, 1, 64 * 2 + 8)
    out = exe.run({**data, "splitk": 1})["out"]
    assert np.array_equal(out, reference("TT", data).astype(np.float16))


def test_an_operand_staged_along_k_refuses_rows_longer_than_one(along_k_exe, rng):
    """The schedule assumed M = 1 (the heuristic's size class); at M = 2 K is not
    contiguous and A's tensor map would read the wrong elements: refused, naming why."""
    data = integer_inputs(rng, "NT", 2, 200, 64 * 3)
    with pytest.raises(InterpError, match=r"tensor map A_map has sizes \[192, 2\] and "
                       r"element strides \(1, 1\) \(innermost first\), which do not "
                       r"cover A of shape \(192, 2\) and element strides \(2, 1\)"):
        along_k_exe.run({**data, "splitk": 2})


def test_a_mixed_producer_copies_then_thread_0_expects_and_issues_the_boxes(mixed_exe):
    """Golden: the 128 producer threads copy A's tile and fence it for the async proxy;
    thread 0 then arrives with expect_tx of B's box bytes and issues B's TMA load, the
    other 127 arrive plainly: full[s] counts 128 arrivals."""
    kernel = mixed_exe.kernels[0].kir
    assert [t.tensor.buffer.name for t in kernel.tensor_maps] == ["B"]
    (producer,) = [s for s in kir.walk(kernel.body) if isinstance(s, kir.ForLoop)
                   and isinstance(s.body[0], kir.MbarrierWait) and
                   any(isinstance(x, kir.Store) for x in kir.walk(s.body))]
    assert [type(s).__name__ for s in producer.body] == [
        "MbarrierWait", "ForLoop", "FenceProxyAsync", "IfThenElse"]
    issue = producer.body[-1]
    assert kir.format_expr(issue.cond) == "(threadIdx.x == 0)"
    expect, boxes = issue.then_body
    assert kir.format_expr(expect.tx_bytes) == str(64 * 128 * 2)     # B's K x N tile
    assert any(isinstance(x, kir.TmaLoad) for x in kir.walk([boxes]))
    assert [type(s).__name__ for s in issue.else_body] == ["MbarrierArrive"]
    assert issue.else_body[0].tx_bytes is None
    inits = [s for s in kir.walk(kernel.body) if isinstance(s, kir.MbarrierInit)]
    assert sorted(kir.format_expr(s.count) for s in inits) == ["128", "256"]


def test_a_cp_async_copy_is_not_warp_specialized():
    f = _f()
    acc = f.tensor("acc")
    acc.split(2, 64)
    cache = f.tensor("A").cache_after("shared", async_copy=True)
    cache.compute_at(acc, 3)
    with pytest.raises(ScheduleError) as caught:
        cache.circular_buffer(3, warp_specialize="TIDy")
    assert "A_cache is not a TMA copy or a plain copy into shared memory" in str(caught.value)


# -- what the transforms and lowering refuse --------------------------------------------------

def _f():
    return matmul_fusion("TT")


@pytest.mark.parametrize("call, message", [
    (lambda f: f.tensor("A").cache_after("shared", tma=True, async_copy=True),
     "cache_after: async_copy and tma are different copies; ask for one (tensor A)"),
    (lambda f: f.tensor("A").cache_after("local", tma=True),
     "cache_after: tma copies global memory into shared memory, not global into local "
     "(tensor A)"),
])
def test_cache_after_tma_errors(call, message):
    with pytest.raises(ScheduleError) as caught:
        call(_f())
    assert str(caught.value) == message


def _placed_cache(f, tma=True):
    acc = f.tensor("acc")
    acc.split(2, 64)
    cache = f.tensor("A").cache_after("shared", tma=tma, async_copy=not tma)
    cache.compute_at(acc, 3)
    return cache


@pytest.mark.parametrize("tma, kwargs, message", [
    (True, dict(stages=3), "circular_buffer: A_cache is a TMA copy: its loads run in a "
     "producer warp group (give warp_specialize=TIDy)"),
    (True, dict(stages=3, warp_specialize="TIDx"), "circular_buffer: "
     "warp_specialize='TIDx': the producer warp group is added along TIDy (tensor A_cache)"),
    (False, dict(stages=3, warp_specialize="TIDy"), "circular_buffer: A_cache is not a TMA "
     "copy or a plain copy into shared memory; only those (cache_after(shared, tma=True), "
     "cache_after(shared)) are loaded by a producer warp group"),
])
def test_circular_buffer_warp_specialize_errors(tma, kwargs, message):
    cache = _placed_cache(_f(), tma)
    with pytest.raises(ScheduleError) as caught:
        cache.circular_buffer(**kwargs)
    assert str(caught.value) == message


@pytest.mark.parametrize("kwargs, message", [
    (dict(stages=3, producer_registers=40), "circular_buffer: producer_registers=40 needs a "
     "producer warp group (warp_specialize=TIDy) (tensor A_cache)"),
    (dict(stages=3, warp_specialize="TIDy", producer_registers=20), "circular_buffer: "
     "producer_registers=20 is not a multiple of 8 from 24 to 256 (setmaxnreg's register "
     "counts) (tensor A_cache)"),
    (dict(stages=3, warp_specialize="TIDy", producer_registers=44), "circular_buffer: "
     "producer_registers=44 is not a multiple of 8 from 24 to 256"),
    (dict(stages=3, warp_specialize="TIDy", producer_registers=True), "circular_buffer: "
     "producer_registers=True is not a multiple of 8 from 24 to 256"),
])
def test_circular_buffer_producer_registers_errors(kwargs, message):
    cache = _placed_cache(_f(), kwargs.get("warp_specialize") is not None)
    with pytest.raises(ScheduleError, match=re.escape(message)):
        cache.circular_buffer(**kwargs)


REGISTER_SPLIT = dict(HOPPER, cta_tile=(128, 192, 64), warp_tile=(64, 192, 64),
                      instruction_tile=(64, 192, 16), producer_registers=40)


def test_the_producer_gives_its_registers_to_the_consumers(rng):
    """producer_registers: setmaxnreg.dec first in the producer, setmaxnreg.inc of the
    consumers' share first in theirs, the kernel bounded to its block; the interpreter runs
    it (setmaxnreg is a warp-group collective there) equal to float64."""
    f = scheduled(REGISTER_SPLIT, layout="TN")
    assert "A_cache.circular_buffer(4, warp_specialize=TIDy, producer_registers=40)" in str(f)
    exe = codegen.compile(f, backend="interp")
    kernel = exe.kernels[0].kir
    roles = [s for s in kernel.body if isinstance(s, kir.IfThenElse)][-1]
    producer = [s for s in roles.then_body if not isinstance(s, kir.Comment)]
    assert isinstance(producer[0], kir.SetMaxNReg) and \
        (producer[0].count, producer[0].increase) == (40, False)
    consumer = roles.else_body[0]
    # two consumer warp groups share 65536 - 128 x 40 registers: 236 each, 232 in 8s
    assert isinstance(consumer, kir.SetMaxNReg) and (consumer.count, consumer.increase) == \
        (232, True)
    data = integer_inputs(rng, "TN", 136, 184, 64 * 3)
    assert np.array_equal(exe.run(data)["out"], reference("TN", data).astype(np.float16))
    source = codegen.compile(f, backend="cuda").kernels[0].source
    assert '__global__ void __launch_bounds__(384, 1) ' in source


def test_a_128x192_split_k_tile_fits_its_block_only_with_the_register_split():
    """ptxas (NVRTC, no GPU): the parallel split-K kernel of 128x192 tiles needs 205
    registers a thread, more than 384 threads can have (170): under its launch bound it
    spills; with the producer's registers given to the consumers it compiles within the
    bound, without spills, and the accumulator stays live through the sum: each CTA
    stores what it sums."""
    from codegen import nvrtc
    split_k = dict(REGISTER_SPLIT, stages=5, splitk_factor=66, splitk_mode="parallel",
                   splitk_interleaved=True)
    for registers, fits in ((None, False), (40, True)):
        kernel = codegen.compile(scheduled(dict(split_k, producer_registers=registers)),
                                 backend="cuda").kernels[0]
        info = nvrtc.ptxas_info(kernel.source, kernel.name, arch="sm_90a")
        assert info["registers"] * 384 <= 65536, info["registers"]
        assert (info["spill_stores"] == 0) == fits, info["spill_stores"]
        assert ("each summing and storing a run" in kernel.source) == fits
        if fits:     # the round's sum written back by a select of one picked value per
            # element (a pick inside each select compiled to branches: docs/perf.md)
            assert re.search(r"acc_acc\[(j\d+)\] = \(\1 == [^?]*\) \? acc_own\[0\] : "
                             r"acc_acc\[\1\];", kernel.source)


def test_the_register_split_parallel_split_k_equals_float64(rng):
    """The heuristic's plan for skinny outputs whose N fills 192 columns: 128x192 tiles,
    the producer's registers given away, each CTA summing and storing a run of the
    elements; the interpreter runs it (3 splits, ragged tiles) equal to float64."""
    f = scheduled(dict(REGISTER_SPLIT, stages=5, splitk_factor=3, splitk_mode="parallel",
                       splitk_interleaved=True))
    exe = codegen.compile(f, backend="interp")
    assert "each summing and storing a run" in exe.kernels[0].kir_text
    data = integer_inputs(rng, "NT", 136, 184, 64 * 5 + 8)
    out = exe.run({**data, "splitk": 3})["out"]
    assert np.array_equal(out, reference("NT", data).astype(np.float16))


def test_a_producer_keeping_more_registers_than_a_thread_has_is_refused():
    f = scheduled(dict(REGISTER_SPLIT, cta_tile=(192, 128, 64), warp_tile=(64, 128, 64),
                       instruction_tile=(64, 128, 16), producer_registers=136))
    with pytest.raises(ScheduleError, match=re.escape(
            "producer_registers=136 is more than the 128 registers a thread of a block of "
            "512 threads has; the producer gives registers away")):
        codegen.compile(f, backend="interp")


def test_producer_registers_only_on_the_hopper_path():
    with pytest.raises(ScheduleError, match="producer_registers: only the Hopper path has "
                                            "a producer warp group"):
        MatmulParams(producer_registers=40)


SWAPPED = dict(cta_tile=(192, 40, 64), warp_tile=(64, 40, 64), instruction_tile=(64, 40, 16),
               stages=2, producer_registers=40, swap_mn=True)


@pytest.mark.parametrize("layout, changes", [
    ("TT", dict(splitk_mode="parallel", splitk_interleaved=True)),       # 3 warp groups
    ("TN", dict(cta_tile=(64, 136, 64), warp_tile=(64, 136, 64),         # 1 warp group
                instruction_tile=(64, 136, 16), producer_registers=None)),
    ("NN", dict(cta_tile=(128, 64, 64), warp_tile=(64, 64, 64),          # A M-major: its
                instruction_tile=(64, 64, 16), splitk_mode="atomic",     # 64 columns one
                splitk_interleaved=True, producer_registers=None)),      # TMA box
])
def test_swapped_m_and_n_equal_float64_with_a_fused_epilogue(layout, changes, rng):
    """swap_mn: the instruction's M runs along N (tiles of N x M), so the registers hold
    D^T = B^T A^T; the bias broadcast along N is added along the instruction's rows, the
    output stored transposed from the registers. Ragged tiles both ways, a partial K box,
    3 splits in the split-K modes, the interpreter bitwise equal to the reference."""
    f = scheduled({**SWAPPED, "splitk_factor": 3, **changes}, layout=layout, epilogue=True)
    exe = codegen.compile(f, backend="interp")
    m = 40 if layout[0] == "N" else 37          # A stored K x M: rows TMA can step
    data = integer_inputs(rng, layout, m, 200, 64 * 3 + 8, epilogue=True)
    expected = fuserir.evaluate(matmul_fusion(layout, "f16", True), data)["out"]
    for splitk in (1, 3):
        out = exe.run({**data, "splitk": splitk})["out"]
        assert np.array_equal(out.view(np.uint16), expected.view(np.uint16)), splitk


def test_swapped_m_and_n_give_b_tile_to_the_wgmmas_a_operand():
    """B's tile (TT: stored K x N, so MN-major) is the wgmma's A operand, A's (K-major)
    its B, and the instruction's n is M's tile (40)."""
    f = scheduled(dict(SWAPPED, splitk_factor=1), layout="TT")
    kernel = codegen.compile(f, backend="interp").kernels[0].kir
    (mma,) = {(s.a.name, s.b.name, s.n, s.trans_a, s.trans_b)
              for s in kir.walk(kernel.body) if isinstance(s, kir.Wgmma)}
    assert mma == ("B_cache", "A_cache", 40, True, False)


@pytest.mark.parametrize("changes, message", [
    (dict(cta_tile=(128, 128, 32), warp_tile=(64, 64, 32), instruction_tile=(16, 8, 16)),
     "swap_mn: only the Hopper path (wgmma) swaps the instruction's M and N"),
    (dict(use_smem_epilogue=True), "swap_mn: the output is stored from the registers (no "
     "use_smem_epilogue) and split-K, if any, is serial, parallel or atomic (not two_kernel)"),
    (dict(splitk_mode="two_kernel"), "swap_mn: the output is stored from the registers"),
    (dict(swap_mn=1), "swap_mn must be true or false, got 1"),
])
def test_swapped_m_and_n_errors(changes, message):
    params = {**HOPPER, "swap_mn": True, **changes}
    with pytest.raises(ScheduleError, match=re.escape(message)):
        MatmulParams(**params)


@pytest.mark.parametrize("layout", ["TT", "NT", "TN"])
def test_a_persistent_kernel_walks_the_tiles_equal_to_float64(layout, rng):
    """A grid of `ctas` CTAs walks 3 x 4 tiles (ragged both ways, a partial K box), CTA b
    taking tiles b, b + ctas, ...: one CTA, a last round partly past the tiles, one tile
    a CTA, more CTAs than tiles; each bitwise equal to the reference with a fused bias and
    relu (the bias's tile reloaded per tile)."""
    f = scheduled(PERSISTENT, layout=layout, epilogue=True)
    exe = codegen.compile(f, backend="interp")
    data = integer_inputs(rng, layout, 136, 200, 64 * 3 + 8, epilogue=True)
    expected = fuserir.evaluate(matmul_fusion(layout, "f16", True), data)["out"]
    for ctas in (1, 5, 12, 20):
        out = exe.run({**data, "ctas": ctas})["out"]
        assert np.array_equal(out.view(np.uint16), expected.view(np.uint16)), ctas


@pytest.mark.parametrize("layout, changes, size", [
    ("NT", dict(async_gmem_load_operands=False), (136, 200, 200)),     # producer copies
    ("TT", dict(swap_mn=True), (37, 200, 200)),                        # M and N swapped
    ("TN", dict(cta_tile=(192, 64, 64), producer_registers=40), (200, 136, 200)),
])
def test_a_persistent_kernel_composes_with_the_other_hopper_options(layout, changes, size,
                                                                    rng):
    """Producer copies instead of TMA, the instruction's M along N, three consumer warp
    groups with the producer's registers given away: walked by 1 and 3 CTAs, bitwise equal
    to the reference."""
    f = scheduled({**PERSISTENT, **changes}, layout=layout, epilogue=True)
    exe = codegen.compile(f, backend="interp")
    data = integer_inputs(rng, layout, *size, epilogue=True)
    expected = fuserir.evaluate(matmul_fusion(layout, "f16", True), data)["out"]
    for ctas in (1, 3):
        out = exe.run({**data, "ctas": ctas})["out"]
        assert np.array_equal(out.view(np.uint16), expected.view(np.uint16)), ctas


@pytest.mark.parametrize("layout", ["TT", "NT", "TN"])
def test_a_persistent_kernel_stages_its_output_through_shared_memory_of_its_own(layout,
                                                                                rng):
    """use_smem_epilogue: each tile's output goes through a staging buffer of its own (the
    operand stages are loading the next tile), under the last K tile's condition with
    the consumers' barriers; walked by 1, 5 and 20 CTAs, bitwise equal to the reference
    with a fused bias and relu."""
    f = scheduled(dict(PERSISTENT, use_smem_epilogue=True), layout=layout, epilogue=True)
    exe = codegen.compile(f, backend="interp")
    kernel = exe.kernels[0].kir
    (tail,) = [s for s in kir.walk(kernel.body) if isinstance(s, kir.IfThenElse)
               and any(isinstance(x, kir.NamedBarrier) for x in s.then_body)]
    kinds = [type(x).__name__ for x in tail.then_body]
    staged = [i for i, x in enumerate(tail.then_body) if any(
        a.buffer.memory is kir.Memory.shared for y in kir.walk([x])
        for a in y.effects().accesses)]
    assert kinds.index("NamedBarrier") < staged[0]     # one tile's output after another's
    data = integer_inputs(rng, layout, 136, 200, 64 * 3 + 8, epilogue=True)
    expected = fuserir.evaluate(matmul_fusion(layout, "f16", True), data)["out"]
    for ctas in (1, 5, 20):
        out = exe.run({**data, "ctas": ctas})["out"]
        assert np.array_equal(out.view(np.uint16), expected.view(np.uint16)), ctas


def test_a_persistent_kernel_is_one_loop_over_tiles_and_k_tiles_in_each_role():
    """The tile loop and the K loop are coalesced: each role runs one loop of
    ceildiv(tiles, ctas) x K tiles iterations, whose stage (w % S) and phase rotate on
    across tiles; the consumers zero the accumulator before the first K tile's wait and
    run the epilogue after releasing the last K tile's stage, telling the two apart by a
    register counter of K tiles (no division by the run-time K tiles on the path from
    one stage's wgmmas to the next's)."""
    f = scheduled(PERSISTENT, layout="TT", epilogue=True)
    kernel = codegen.compile(f, backend="interp").kernels[0].kir
    assert kir.format_expr(kernel.launch.grid[0]) == "ctas"
    loops = [s for s in kir.walk(kernel.body) if isinstance(s, kir.ForLoop)
             and any(isinstance(x, kir.MbarrierWait) for x in s.body)]
    assert len(loops) == 2
    extent = "(ceildiv((ceildiv(M, 64) * ceildiv(N, 64)), ctas) * ceildiv(K, 64))"
    assert {kir.format_expr(s.extent) for s in loops} == {extent}
    consumer = loops[1].body
    kinds = [type(s).__name__ for s in consumer]
    first, wait = kinds.index("IfThenElse"), kinds.index("MbarrierWait")
    arrive = kinds.index("MbarrierArrive")
    assert first < wait < arrive < len(kinds) - 2 and kinds[-2:] == ["IfThenElse", "Store"]
    var = loops[1].var.name
    assert kir.format_expr(consumer[first].cond) == f"({var}_k[0] == 0)"
    assert kir.format_expr(consumer[-2].cond) == f"({var}_k[0] == (ceildiv(K, 64) - 1))"
    assert kir.format_stmt(consumer[-1]) == \
        f"{var}_k[0] = ((({var}_k[0] + 1) == ceildiv(K, 64)) ? 0 : ({var}_k[0] + 1))"
    assert kir.format_expr(consumer[wait].index) == f"({var} % 3)"


def test_the_output_is_stored_from_the_registers_a_pair_of_elements_at_a_time(rng):
    """A lane holds its fragment's elements 2j, 2j + 1 in neighbouring columns: stored in
    one 4-byte access where the output's rows allow it; an odd N takes the variant that
    stores element by element (its vector_caps), bitwise the same results. A split-K
    plan's output stays element by element (its CTAs store the elements they summed), as
    does a swapped one (its columns run along M)."""
    def out_widths(kernel):
        return {s.width for s in kir.walk(kernel.body)
                if isinstance(s, kir.Store) and s.buffer.name == "out"}

    exe = codegen.compile(scheduled(dict(HOPPER, splitk_factor=1), layout="TN"),
                          backend="interp")
    assert out_widths(exe.kernels[0].kir) == {2}
    for n in (200, 201):
        data = integer_inputs(rng, "TN", 72, n, 64 * 3)
        (variant,) = exe.kernels_for(data)
        assert out_widths(variant.kir) == ({2} if n % 2 == 0 else {1})
        out = exe.run(data)["out"]
        assert np.array_equal(out, reference("TN", data).astype(np.float16)), n
    for changes in (dict(splitk_mode="parallel", splitk_factor=3), dict(swap_mn=True)):
        f = scheduled({**HOPPER, **changes}, layout="TN")
        assert out_widths(codegen.compile(f, backend="interp").kernels[0].kir) == {1}


def test_the_staged_output_tile_is_written_by_stmatrix_eight_elements_a_lane(rng):
    """A 16-bit output staged through shared memory: each lane writes its fragment's
    elements 8 at a time (stmatrix.x4, the rows of 8 proved consecutive through the tile's
    swizzle), with a fused bias and relu, at sizes that leave partial tiles: equal to
    float64 in the interpreter. A 32-bit staged output (no 16-bit stmatrix) stays
    element by element."""
    def writes(kernel):
        return {type(s).__name__ for s in kir.walk(kernel.body)
                if any(a.write and a.buffer.name == "out_cache" for a in s.effects().accesses)}

    staged = dict(HOPPER, use_smem_epilogue=True, promote_prologue_smem_reuse=False)
    for dtype in ("f16", "bf16"):
        exe = codegen.compile(scheduled(staged, layout="TN", dtype=dtype, epilogue=True),
                              backend="interp")
        assert writes(exe.kernels[0].kir) == {"StMatrix"}
        data = integer_inputs(rng, "TN", 200, 136, 64 * 3 + 8, dtype, epilogue=True)
        expected = np.maximum(reference("TN", data) + data["bias"][None, :], 0)
        assert np.array_equal(exe.run(data)["out"].astype(np.float64), expected), dtype
    f32 = fuserir.parse("""
fusion mm(A: f16[M, K], B: f16[N, K]) {
  acc = matmul(A, B, layout=TN)
  out = relu(acc)
  output out
}""")
    schedule_matmul(f32, MatmulParams(**staged))
    assert writes(codegen.compile(f32, backend="interp").kernels[0].kir) == {"Store"}


def test_the_heuristics_192x192_tile_in_three_consumer_warp_groups_equals_float64(rng):
    """The heuristic's square tile (3072^3: two waves of 192x192, not three of 128x256):
    three consumer warp groups of 64x192, 4 stages, the output staged and written by
    stmatrix, walked in groups of rows; at a size that leaves partial tiles and partial
    groups, with a fused bias and relu: equal to float64 in the interpreter."""
    params = matmul_heuristic(3072, 3072, 3072, layout="TN")
    assert (params.cta_tile, params.warp_tile, params.stages, params.use_smem_epilogue,
            params.tile_group) == ((192, 192, 64), (64, 192, 64), 4, True, 8)
    f = matmul_fusion("TN", "f16", True)
    schedule_matmul(f, params)
    exe = codegen.compile(f, backend="interp")
    (kernel,) = exe.kernels
    assert kernel.kir.launch.block[1].value == 4           # three consumers, one producer
    data = integer_inputs(rng, "TN", 200, 392, 64 * 3 + 8, "f16", epilogue=True)
    expected = np.maximum(reference("TN", data) + data["bias"][None, :], 0)
    assert np.array_equal(exe.run({**data, "splitk": 1})["out"].astype(np.float64), expected)


def _tile_loop(kernel):
    return next(s for s in kernel.body if isinstance(s, kir.ForLoop))


def _k_loop(kernel):
    return next(s for s in _tile_loop(kernel).body if isinstance(s, kir.ForLoop)
                and any(x.effects().mbarrier is not None for x in kir.walk(s.body)))


def _nest_the_tile_loop(kernel):
    tile = _tile_loop(kernel)
    kernel.body[kernel.body.index(tile)] = kir.ForLoop(
        kir.Var("extra", tile.var.dtype), kir.Const(2, tile.var.dtype), [tile])


def _k_tiles_of_the_tile(kernel):
    k, tile = _k_loop(kernel), _tile_loop(kernel)
    k.extent = kir.BinOp("add", k.extent, tile.var, tile.var.dtype)


def _load_outside_the_k_loop(kernel):
    load = next(s for s in kir.walk(_k_loop(kernel).body) if s.effects().mbarrier is not None)
    _tile_loop(kernel).body.insert(0, kir.copy_stmt(load, {}))


@pytest.mark.parametrize("change, message", [
    (_nest_the_tile_loop, "A_cache, B_cache: a warp-specialized circular buffer rotates over "
     "a loop of the kernel's outermost level, or over one nested directly in a top-level "
     "loop (a persistent kernel's tile loop), not one nested deeper or in a condition"),
    (_k_tiles_of_the_tile, "A_cache, B_cache: the K loop's extent (ceildiv(K, 64) + i0) "
     "depends on the tile loop's i0"),
    (_load_outside_the_k_loop, "in the tile loop around the pipeline, uses its buffers; "
     "only the K loop may"),
])
def test_a_tile_loop_the_pipeline_cannot_coalesce_with_is_refused(change, message):
    """The kernel before circular_buffer changed (lowering's instrument hook) into what the
    coalescing refuses, by name: a K loop nested deeper, a K extent that varies with the
    tile, the pipeline's buffers used outside the K loop."""
    from lowering.pipeline import lower

    def instrument(name, kernel, fusion):
        if name == "predicates":
            change(kernel)
    with pytest.raises(ScheduleError, match=re.escape(message)):
        lower(scheduled(PERSISTENT, layout="TT"), instrument=instrument)


@pytest.mark.parametrize("changes, message", [
    (dict(cta_tile=(128, 128, 32), warp_tile=(64, 64, 32), instruction_tile=(16, 8, 16)),
     "persistent: only the Hopper path (a producer warp group) walks tiles"),
    (dict(use_smem_epilogue=True, promote_prologue_smem_reuse=True), "persistent: the "
     "staged output cannot reuse the operand stages (promote_prologue_smem_reuse): the "
     "producer loads the next tile into them during this one's epilogue"),
    (dict(splitk_factor=2), "persistent: K is not split (splitk_factor 1)"),
    (dict(persistent="yes"), "persistent must be true or false, got 'yes'"),
])
def test_persistent_errors(changes, message):
    with pytest.raises(ScheduleError, match=re.escape(message)):
        MatmulParams(**{**HOPPER, "persistent": True, **changes})


def _lowering_error(f):
    from lowering.pipeline import lower
    with pytest.raises(ScheduleError) as caught:
        lower(f)
    return str(caught.value)


def test_a_tma_copy_without_a_circular_buffer_is_refused():
    f = scheduled(HOPPER, layout="TT")
    f.tensor("A_cache").circular_buffer_stages = None      # as if never circular-buffered
    f.tensor("A_cache").warp_specialized = None
    assert "A_cache: a TMA copy is loaded by a producer warp group: circular-buffer it" in \
        _lowering_error(f)


def test_a_tile_no_descriptor_describes_is_refused():
    f = scheduled(HOPPER, layout="TT")
    f.tensor("A_cache").swizzle_row = None                 # rows of 128 bytes, unswizzled
    assert _lowering_error(f).startswith(
        "acc: its operand A_cache: no wgmma matrix descriptor (none swizzle, K-major or "
        "MN-major) describes the tile's layout")


def test_a_box_axis_bound_to_a_thread_is_refused():
    f = scheduled(HOPPER, layout="TT")
    cache = f.tensor("A_cache")
    cache.loop[-2].parallel = fuserir.ParallelType.TIDx
    assert "A_cache (a TMA copy): its second innermost loop axis" in _lowering_error(f)


# -- on the GPU ---------------------------------------------------------------------------------

GPU_CASES = {
    "seed NT split 5": (SEED, "NT", "f16", False, (256, 128, 64 * 13), {"splitk": 5}),
    "TT bias relu bf16": (dict(HOPPER, splitk_factor=2), "TT", "bf16", True, (136, 200, 200),
                          {"splitk": 2}),
    "TN two kernels": (dict(HOPPER, splitk_mode="two_kernel", splitk_factor=3), "TN", "f16",
                       False, (72, 264, 64 * 5), {"splitk": 3}),
    "NT parallel split 5": (dict(HOPPER, splitk_mode="parallel", splitk_factor=5), "NT", "f16",
                            False, (200, 136, 64 * 13 + 8), {"splitk": 5}),
    "TN parallel interleaved bias relu": (dict(HOPPER, splitk_mode="parallel", splitk_factor=3,
                                               splitk_interleaved=True), "TN", "bf16", True,
                                          (72, 264, 64 * 7), {"splitk": 3}),
    "NT atomic split 5": (dict(HOPPER, splitk_mode="atomic", splitk_factor=5), "NT", "f16",
                          False, (200, 136, 64 * 13 + 8), {"splitk": 5}),
    "NN 128x256": (dict(HOPPER, cta_tile=(128, 256, 64), warp_tile=(64, 256, 64),
                        instruction_tile=(64, 256, 16), use_smem_epilogue=True,
                        promote_prologue_smem_reuse=True), "NN", "f16", False,
                   (264, 520, 136), {"splitk": 1}),
    "NT producer copies split 2": (dict(COPIES, splitk_factor=2), "NT", "f16", False,
                                   (136, 200, 64 * 3 + 8), {"splitk": 2}),
    "NT M=1 A copied B by TMA split 2": (dict(MIXED, splitk_factor=2), "NT", "f16", False,
                                         (1, 200, 64 * 3 + 8), {"splitk": 2}),
    "TT M and N swapped, parallel split 3": (
        dict(SWAPPED, splitk_factor=3, splitk_mode="parallel", splitk_interleaved=True),
        "TT", "f16", True, (37, 200, 64 * 3 + 8), {"splitk": 3}),
    "TN persistent bias relu, 5 CTAs walking 12 tiles": (
        dict(PERSISTENT, producer_registers=40), "TN", "bf16", True, (136, 200, 64 * 3 + 8),
        {"ctas": 5}),
    "TT persistent 128x256, 3 CTAs walking 8 tiles": (
        dict(HOPPER, cta_tile=(128, 256, 64), warp_tile=(64, 256, 64),
             instruction_tile=(64, 256, 16), persistent=True), "TT", "f16", False,
        (264, 520, 64 * 9), {"ctas": 3}),
    "NT persistent staged output bias relu, 5 CTAs walking 12 tiles": (
        dict(PERSISTENT, use_smem_epilogue=True), "NT", "f16", True,
        (136, 200, 64 * 3 + 8), {"ctas": 5}),
    # tiles fitted to a small M stored contiguously: box rows of 32 bytes (32B swizzle),
    # 64 bytes (64B) and 16 bytes (none), swapped (M along the instruction's N)
    "NT swapped 64x16x128, 32B swizzle, split 2": (
        dict(SWAPPED, cta_tile=(64, 16, 128), warp_tile=(64, 16, 128),
             instruction_tile=(64, 16, 16), stages=6, producer_registers=None), "NT", "f16",
        False, (16, 136, 128 * 3 + 8), {"splitk": 2}),
    "NN swapped 64x32x128, 64B swizzle": (
        dict(SWAPPED, cta_tile=(64, 32, 128), warp_tile=(64, 32, 128),
             instruction_tile=(64, 32, 16), stages=6, producer_registers=None), "NN", "bf16",
        True, (32, 200, 128 * 2 + 16), {"splitk": 1}),
    "NT M=1 swapped 64x8x128, A staged along K": (
        dict(SWAPPED, cta_tile=(64, 8, 128), warp_tile=(64, 8, 128),
             instruction_tile=(64, 8, 16), stages=6, producer_registers=None,
             staged_along_k=(True, False)), "NT", "f16", False, (1, 200, 128 * 2 + 8),
        {"splitk": 1}),
    "NT swapped 64x8x128, unswizzled": (
        dict(SWAPPED, cta_tile=(64, 8, 128), warp_tile=(64, 8, 128),
             instruction_tile=(64, 8, 16), stages=6, producer_registers=None), "NT", "f16",
        False, (8, 72, 128 * 2), {"splitk": 1}),
}


def _sm90():
    import cupy
    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("Hopper (sm_90) instructions")


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES.values(), ids=GPU_CASES)
def test_hopper_kernels_on_the_gpu_equal_the_interpreter_bit_for_bit(case, rng):
    import cupy
    _sm90()
    params, layout, dtype, epilogue, (m, n, k), scalars = case
    f = scheduled(params, layout=layout, dtype=dtype, epilogue=epilogue)
    data = integer_inputs(rng, layout, m, n, k, dtype, epilogue)
    on_gpu = codegen.compile(f, backend="cuda").run(
        {**{x: cupy.asarray(v) for x, v in data.items()}, **scalars})["out"]
    on_cpu = codegen.compile(f, backend="interp").run({**data, **scalars})["out"]
    got = cupy.asnumpy(on_gpu)
    assert (got.view(np.uint16) == on_cpu.view(np.uint16)).all()
    expected = fuserir.evaluate(matmul_fusion(layout, dtype, epilogue), data)["out"]
    assert (got.view(np.uint16) == expected.view(np.uint16)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["TT", "TN", "NT", "NN"])
def test_the_automatic_hopper_path_on_the_gpu_matches_float64(layout):
    import cupy
    _sm90()
    exe = codegen.compile(matmul_fusion(layout), backend="cuda")
    rng = cupy.random.default_rng(3)
    # (1000, 904, 1001): rows of an odd number of elements, which TMA cannot read: the
    # producer warp group copies them, element by element
    for m, n, k in ((1024, 2048, 4096), (1000, 904, 1032), (64, 48, 512), (1000, 904, 1001)):
        dims = {"M": m, "N": n, "K": k}
        shapes = [tuple(dims[d] for d in s.strip("[]").split(", "))
                  for s in OPERANDS[layout]]
        a, b = (rng.uniform(-1, 1, s, dtype=cupy.float32).astype(cupy.float16)
                for s in shapes)
        (kernel,) = exe.kernels_for({"A": a, "B": b})
        assert "wgmma" in kernel.kir_text
        out = exe.run({"A": a, "B": b})["out"].astype(cupy.float64)
        a64 = a.astype(cupy.float64) if layout[0] == "T" else a.astype(cupy.float64).T
        b64 = b.astype(cupy.float64) if layout[1] == "T" else b.astype(cupy.float64).T
        ref = a64 @ b64
        bad = cupy.abs(out - ref) > 1e-5 * k + 2.0 ** -10 * cupy.abs(ref)
        assert int(bad.sum()) == 0, (m, n, k)
