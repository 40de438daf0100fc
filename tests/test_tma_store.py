"""The staged output tile stored by TMA (cache_before(shared, tma=True);
MatmulParams(tma_store=True) on the Hopper path): the tile laid out as boxes of 128-byte
rows, written by stmatrix (16-bit) or element stores (f32), then one thread's
cp.async.bulk.tensor stores, a box each, and their commit. The interpreter's results
against float64 at ragged sizes (the stores clipped at the output's edges), in a plain and
a persistent kernel; the syncs sync insertion places (a proxy fence, consumer barriers,
the bulk read wait) and what each prevents, dropped alone: the verifier's finding and the
interpreter's hazard; the CUDA text and NVRTC; the output's tensor map re-pointed at each
launch's output; every refusal's message. On the GPU (marked `gpu`) the kernels against
the interpreter, bit for bit."""

import re

import numpy as np
import pytest

import codegen
import fuserir
from codegen import launch as launching
from codegen.errors import HazardError, RaceError
from codegen.interp import InterpError
from fuserir.device import H200, INTERPRETER
from fuserir.errors import ScheduleError
from fuserir.scheduler import MatmulParams, schedule_matmul
from lowering import kir
from lowering.pipeline import lower

from test_hopper_matmul import (HOPPER, PERSISTENT, integer_inputs, matmul_fusion, reference,
                                scheduled)
from test_launch_cache import gpu  # noqa: F401 - the fixture
from test_tensor_maps import encodes, map_words  # noqa: F401 - the fixture

STAGED = dict(HOPPER, use_smem_epilogue=True, promote_prologue_smem_reuse=True,
              tma_store=True)
STAGED_PERSISTENT = dict(PERSISTENT, use_smem_epilogue=True, tma_store=True)
M, N, K = 200, 136, 64 * 3          # 2 x 2 tiles of 128 x 128, both ragged
PM, PN, PK = 150, 136, 64 * 2       # 3 x 3 tiles of 64 x 64, both ragged


def expected(data):
    """relu(A B + bias) in float64, rounded once to the operands' type."""
    return np.maximum(reference("TN", data) + data["bias"], 0).astype(data["A"].dtype)


def placed(kernel):
    """{(kind, buffer): sync id} of the syncs sync insertion placed, from the kernel IR."""
    return {(kind, buffer): sync for sync, kind, buffer in re.findall(
        r"\[(sync\d+)\]  // (\S+) on (\w+)", kir.format_kernel(kernel))}


@pytest.fixture(scope="module", params=["f16", "bf16"])
def staged(request):
    f = scheduled(STAGED, layout="TN", dtype=request.param, epilogue=True)
    return request.param, f, codegen.compile(f, backend="interp")


@pytest.fixture(scope="module")
def persistent():
    f = scheduled(STAGED_PERSISTENT, layout="TN", epilogue=True)
    return f, codegen.compile(f, backend="interp")


def test_the_staged_tile_stored_by_tma_equals_float64_at_ragged_sizes(staged, rng):
    dtype, _, exe = staged
    data = integer_inputs(rng, "TN", M, N, K, dtype=dtype, epilogue=True)
    out = exe.run(data)["out"]
    assert np.array_equal(out.view(np.uint16), expected(data).view(np.uint16))


def test_one_thread_stores_a_box_per_128_bytes_of_the_tiles_rows(staged):
    _, _, exe = staged
    kernel = exe.kernels[0].kir
    stores = [s for s in kir.walk(kernel.body) if isinstance(s, kir.TmaStore)]
    assert [kir.format_expr(s.src_index) for s in stores] == ["0", "8192"]  # box by box
    assert [m.name for m in kernel.tensor_maps] == ["A_map", "B_map", "out_map"]
    assert kernel.tensor_maps[-1].box == (64, 128) and stores[0].map.swizzle == "128B"
    (elected,) = [s for s in kir.walk(kernel.body) if isinstance(s, kir.IfThenElse)
                  and any(isinstance(x, kir.TmaStore) for x in s.then_body)]
    assert kir.format_expr(elected.cond) == "((threadIdx.x == 0) && (threadIdx.y == 0))"
    assert [type(x).__name__ for x in elected.then_body] == [
        "TmaStore", "TmaStore", "BulkCommit", "BulkWait"]
    assert any(isinstance(s, kir.StMatrix) for s in kir.walk(kernel.body))
    # the threads' copy by rows of 16 bytes is gone: no vector store into the output
    assert not any(isinstance(s, kir.Store) and s.buffer.name == "out"
                   for s in kir.walk(kernel.body))


def test_sync_insertion_fences_the_tile_meets_the_consumers_and_waits_for_the_reads(staged):
    _, _, exe = staged
    kernel = exe.kernels[0].kir
    assert set(placed(kernel)) == {("wgmma-fence", "acc_acc"), ("proxy-fence", "out_cache"),
                                   ("RAW", "out_cache"), ("async-pending", "out_cache")}
    text = kir.format_kernel(kernel)
    order = [text.index(x) for x in ("stmatrix", "fence.proxy.async", "bar.sync 2, 256",
                                     "tma.store", "bulk.commit_group",
                                     "wait_group.read 0")]
    assert order == sorted(order)


def test_a_persistent_kernel_stores_each_tile_by_tma_equal_to_float64(persistent, rng):
    """Several tiles per CTA (2 CTAs walking 9 tiles: one round past the last tile, whose
    boxes lie wholly outside the output and store nothing)."""
    _, exe = persistent
    data = integer_inputs(rng, "TN", PM, PN, PK, epilogue=True)
    for ctas in (2, 4):
        out = exe.run({**data, "ctas": ctas})["out"]
        assert np.array_equal(out.view(np.uint16), expected(data).view(np.uint16)), ctas


def test_a_persistent_kernel_waits_for_the_reads_before_the_next_tile_overwrites_them(
        persistent):
    _, exe = persistent
    kernel = exe.kernels[0].kir
    assert set(placed(kernel)) == {("wgmma-fence", "acc_acc"), ("WAR", "out_cache"),
                                   ("proxy-fence", "out_cache"), ("RAW", "out_cache"),
                                   ("async-pending", "out_cache")}
    (tail,) = [s for s in kir.walk(kernel.body) if isinstance(s, kir.IfThenElse)
               and any(isinstance(x, kir.StMatrix) for x in kir.walk(s.then_body))]
    kinds = [type(x).__name__ for x in tail.then_body]
    # the next tile's writes after the barrier that follows this one's bulk read wait
    assert kinds[0] == "NamedBarrier" and kinds[-1] == "IfThenElse"


SYNCS = [("plain", "proxy-fence"), ("plain", "RAW"), ("plain", "async-pending"),
         ("persistent", "proxy-fence"), ("persistent", "RAW"),
         ("persistent", "async-pending"), ("persistent", "WAR")]


@pytest.mark.parametrize("kind, sync", SYNCS, ids=[f"{k}-{s}" for k, s in SYNCS])
def test_each_placed_sync_dropped_alone_is_refused_and_caught(kind, sync, rng):
    if kind == "plain":
        f = scheduled(STAGED, layout="TN", epilogue=True)
        data, scalars = integer_inputs(rng, "TN", M, N, K, epilogue=True), {}
    else:
        f = scheduled(STAGED_PERSISTENT, layout="TN", epilogue=True)
        data, scalars = integer_inputs(rng, "TN", PM, PN, PK, epilogue=True), {"ctas": 2}
    kernel, _ = lower(f)
    dropped = placed(kernel)[sync, "out_cache"]
    with pytest.raises(HazardError, match=f"{sync} on out_cache"):
        lower(f, drop_syncs=[dropped])
    unsafe = codegen.compile(f, backend="interp", drop_syncs=[dropped], verify=False)
    with pytest.raises((RaceError, InterpError), match=sync):
        unsafe.run({**data, **scalars})


def test_an_f32_output_is_stored_in_boxes_of_32_elements(rng):
    f = fuserir.parse("""
fusion mm(A: f16[M, K], B: f16[N, K], bias: f32[N]) {
  acc = matmul(A, B, layout=TN)
  out = relu(acc + broadcast(bias, [true, false]))
  output out
}""")
    schedule_matmul(f, MatmulParams(**STAGED))
    exe = codegen.compile(f, backend="interp")
    kernel = exe.kernels[0].kir
    assert kernel.tensor_maps[-1].box == (32, 128)
    assert len([s for s in kir.walk(kernel.body) if isinstance(s, kir.TmaStore)]) == 4
    data = integer_inputs(rng, "TN", M, N, K, epilogue=True)
    out = exe.run(data)["out"]
    assert np.array_equal(out, np.maximum(reference("TN", data) + data["bias"], 0))


def test_the_cuda_stores_by_tma_and_compiles_for_sm_90a():
    from codegen import nvrtc
    from driver.build import kernel_arch
    exe = codegen.compile(scheduled(dict(STAGED, cta_tile=(128, 256, 64),
                                         warp_tile=(64, 256, 64),
                                         instruction_tile=(64, 256, 16)), layout="TN"),
                          backend="interp")
    kernel = exe.kernels[0]
    source = kernel.source
    for text in ("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group",
                 "cp.async.bulk.commit_group;", "cp.async.bulk.wait_group.read 0;",
                 "fence.proxy.async.shared::cta;", "stmatrix.sync.aligned.m8n8.x4",
                 "const __grid_constant__ TensorMap out_map"):
        assert text in source, text
    assert source.count("bulk_group [") == 4
    arch = kernel_arch(kernel.kir, "sm_90")
    assert arch == "sm_90a"
    assert nvrtc.compile_to_cubin(source, kernel.name, arch=arch)[:4] == b"\x7fELF"


def test_the_schedule_prints_and_parses_back():
    from fuserir.ir.equality import first_difference
    f = scheduled(STAGED, layout="TN")
    text = str(f)
    assert "out_cache = out.cache_before(shared, tma=true)" in text
    assert first_difference(f, fuserir.parse(text)) is None
    dsl = fuserir.parse(str(matmul_fusion("TN")) + """
schedule mm {
  matmul(cta_tile=[128, 128, 64], warp_tile=[64, 128, 64], instruction_tile=[64, 128, 16],
         stages=4, smem_epilogue=true, tma_store=true)
}""")
    assert first_difference(f, dsl) is None


# -- a pointwise tile stored by TMA: the transform on its own ------------------------------

def pointwise(schedule=None, x="f16[M, N]"):
    """y = relu(x) staged through a shared tile of 32 x 64 that TMA stores (or the
    `schedule(y, y_cache)` given)."""
    f = fuserir.parse(f"fusion f(x: {x}) {{ y = relu(x) output y }}")
    y = f.tensor("y")
    tile = y.cache_before("shared", tma=True)
    (schedule or tiles)(y, tile)
    return f


def tiles(y, tile, box=64, swizzle=64):
    y.split(0, 32)
    y.split(2, box)
    y.reorder({1: 2, 2: 1})
    y.parallelize(0, "BIDx")
    y.parallelize(1, "BIDy")
    tile.compute_at(y, 2)
    tile.merge(2)
    tile.split(2, 128)
    tile.parallelize(3, "TIDx")
    if swizzle:
        tile.swizzle(swizzle)


def test_a_pointwise_tile_is_stored_by_tma_clipped_at_the_edges(rng):
    exe = codegen.compile(pointwise(), backend="interp")
    x = rng.integers(-6, 7, (70, 200)).astype(np.float16)
    assert np.array_equal(exe.run({"x": x})["y"], np.maximum(x, 0))


def test_the_outputs_tensor_map_is_re_pointed_at_each_launchs_output(gpu, encodes):  # noqa: F811
    kernel = codegen.compile(pointwise(), backend="interp").kernels[0].kir
    (tmap,) = kernel.tensor_maps
    assert tmap.tensor.buffer.name == "y" and tmap.tensor.is_output
    outputs = []
    for _ in range(3):
        args = {"x": gpu.array((64, 128), np.float16), "y": gpu.array((64, 128), np.float16),
                "M": 64, "N": 128}
        launching.launch(kernel, b"cubin", args)
        *_, launched_map, _, _ = gpu.function.last_args
        assert map_words(launched_map)[0] == args["y"].data.ptr
        outputs.append(args["y"].data.ptr)
    assert [f.address for f in encodes] == outputs


# -- what is refused -----------------------------------------------------------------------

def test_tma_asked_between_the_wrong_memories_is_refused():
    f = fuserir.parse("fusion f(x: f32[M, N]) { t = exp(x)  y = t * 2  output y }")
    with pytest.raises(ScheduleError, match=r"cache_before: tma stores a shared cache into "
                                            r"global memory, not local into global"):
        f.tensor("y").cache_before("local", tma=True)
    with pytest.raises(ScheduleError, match=r"not shared into local \(tensor t\)"):
        f.tensor("t").cache_before("shared", tma=True)


@pytest.mark.parametrize("changes, message", [
    (dict(use_smem_epilogue=False, promote_prologue_smem_reuse=False),
     "tma_store: TMA stores the Hopper path's staged output tile"),
    (dict(splitk_mode="two_kernel"), "split-K not two_kernel"),
    (dict(tma_store="yes"), "tma_store must be true or false, got 'yes'"),
    (dict(cta_tile=(128, 128, 32), warp_tile=(64, 64, 32), instruction_tile=(16, 8, 16),
          stages=3), "tma_store: TMA stores the Hopper path's staged output tile"),
])
def test_tma_store_params_errors(changes, message):
    with pytest.raises(ScheduleError, match=re.escape(message)):
        MatmulParams(**{**STAGED, **changes})


@pytest.mark.parametrize("device", [H200.with_(tma=False), INTERPRETER])
def test_a_device_without_tma_is_refused(device):
    with pytest.raises(ScheduleError, match="tma_store: .* has no TMA .* leave tma_store off"):
        schedule_matmul(matmul_fusion("TN"), MatmulParams(**STAGED), device)


def test_a_tile_whose_rows_are_no_whole_number_of_boxes_is_refused():
    params = dict(STAGED, cta_tile=(128, 136, 64), warp_tile=(64, 136, 64),
                  instruction_tile=(64, 136, 16))
    with pytest.raises(ScheduleError, match=r"tma_store: the tile's rows of 136 x f16 are "
                                            r"no whole number of TMA boxes of 128 bytes"):
        schedule_matmul(matmul_fusion("TN"), MatmulParams(**params))


def _threads_on_the_box(y, tile):
    tiles(y, tile)
    y.parallelize(3, "TIDy")


def _not_at_the_store(y, tile):
    y.split(0, 32)
    y.split(2, 64)
    y.reorder({1: 2, 2: 1})
    y.parallelize(0, "BIDx")
    y.parallelize(1, "BIDy")


def _padded(y, tile):
    tiles(y, tile, swizzle=None)
    tile.pad_rows(64)


@pytest.mark.parametrize("schedule, x, message", [
    (_threads_on_the_box, "f16[M, N]",
     "y: its loop axis .* is one of the TMA boxes of y_cache, which one thread stores; it "
     "cannot be bound to TIDy"),
    (_not_at_the_store, "f16[M, N]",
     "y: a TMA store copies out the tile it is cached in, box by box: compute y_cache at y"),
    (lambda y, tile: tiles(y, tile, box=48), "f16[M, N]",
     r"y \(a TMA store\): a box row of 96 bytes in a tile swizzled by 128-byte rows"),
    (_padded, "f16[M, N]", r"y_cache: padded \(pad_rows\); TMA and wgmma"),
    (None, "f16[M, 100]",
     "y: its rows of 100 x f16 lie 200 bytes apart; a TMA store's tensor map needs rows a "
     "multiple of 16 bytes apart"),
])
def test_a_tile_that_is_not_tma_boxes_is_refused(schedule, x, message):
    with pytest.raises(ScheduleError, match=message):
        lower(pointwise(schedule, x))


def test_a_box_split_unevenly_is_refused():
    def uneven(y, tile):
        tiles(y, tile, box=96, swizzle=0)
        y.split(3, 64)
        y.reorder({2: 3, 3: 2})
        tile.swizzle(64)
    with pytest.raises(ScheduleError, match=r"y: the TMA boxes of y_cache must cover it "
                                            r"exactly, but .* is split by 64"):
        lower(pointwise(uneven))


def test_an_output_whose_rows_tma_cannot_address_is_refused_at_the_run(rng):
    exe = codegen.compile(pointwise(), backend="interp")
    x = rng.integers(-6, 7, (64, 100)).astype(np.float16)
    with pytest.raises(InterpError, match=r"tensor map y_map has stride 100 elements \(200 "
                                          r"bytes\) in dimension 1: a positive multiple of "
                                          r"16 bytes"):
        exe.run({"x": x})


# -- on the GPU ------------------------------------------------------------------------------

GPU_CASES = {
    "TN f16 128x256 bias relu": (dict(STAGED, cta_tile=(128, 256, 64), warp_tile=(64, 256, 64),
                                      instruction_tile=(64, 256, 16)), "f16",
                                 (264, 520, 64 * 5), {}),
    "TN bf16 128x128 bias relu": (STAGED, "bf16", (200, 136, 64 * 3 + 8), {}),
    "TN f16 persistent, 5 CTAs walking 12 tiles": (STAGED_PERSISTENT, "f16",
                                                   (136, 200, 64 * 3 + 8), {"ctas": 5}),
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES.values(), ids=GPU_CASES)
def test_tma_stored_kernels_on_the_gpu_equal_the_interpreter_bit_for_bit(case, rng):
    import cupy
    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("Hopper (sm_90) instructions")
    params, dtype, (m, n, k), scalars = case
    f = scheduled(params, layout="TN", dtype=dtype, epilogue=True)
    exe = codegen.compile(f, backend="cuda")
    runs = [integer_inputs(rng, "TN", m, n, k, dtype, True) for _ in range(2)]
    # two calls whose outputs are both alive: each at its own address, which the
    # output's tensor map must be re-pointed at
    outs = [exe.run({**{x: cupy.asarray(v) for x, v in data.items()}, **scalars})["out"]
            for data in runs]
    interp = codegen.compile(f, backend="interp")
    for data, out in zip(runs, outs):
        got = cupy.asnumpy(out).view(np.uint16)
        assert (got == interp.run({**data, **scalars})["out"].view(np.uint16)).all()
        assert (got == expected(data).view(np.uint16)).all()
