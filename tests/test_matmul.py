"""The tensor-core matmul of the seed report, end to end on the CPU (docs/story.md,
docs/hazards.md): scheduled by fuserir.scheduler.schedule_matmul through the public transforms,
lowered with its pipeline, shared-memory reuse and serial split-K, and run in the
interpreter with its race detector.

The CPU size keeps the seed's tiles and split factor but is small enough to run in
seconds, with a short last split: M=256, N=128, K=32*13 split 5 ways is 3 K tiles per
split and 1 in the last. Integer-valued inputs make every product and f32 sum exact, so
the output must equal the reference bit for bit.
"""

import numpy as np
import pytest

import codegen
import fuserir
from codegen.errors import HazardError, RaceError
from fuserir.errors import FuserirError, ScheduleError
from fuserir.scheduler import MatmulParams, schedule_matmul
from lowering import kir
from lowering.verify import bank_conflicts

DEFINITION = """
fusion splitk_nt(A: f16[K, M], B: f16[K, N]) {
  acc = matmul(A, B, layout=NT)
  out = cast(acc, f16)
  output out
}
"""
SEED = dict(cta_tile=(256, 128, 32), warp_tile=(64, 64, 32), stages=3, splitk_factor=5,
            use_smem_epilogue=True, promote_prologue_smem_reuse=True)
M, N, K, SPLITK = 256, 128, 32 * 13, 5


def seed_fusion(**changes):
    f = fuserir.parse(DEFINITION)
    schedule_matmul(f, MatmulParams(**{**SEED, **changes}))
    return f


def integer_inputs(rng, m=M, n=N, k=K):
    return {"A": rng.integers(-3, 4, (k, m)).astype(np.float16),
            "B": rng.integers(-3, 4, (k, n)).astype(np.float16)}


@pytest.fixture(scope="module")
def seed_exe():
    return codegen.compile(seed_fusion(), backend="interp")


def syncs(exe):
    return [s for s in kir.walk(exe.kernels[0].kir.body)
            if isinstance(s, (kir.Barrier, kir.CpAsyncWait)) and s.sync_id]


def test_seed_configuration_equals_the_reference_without_a_race(seed_exe, rng):
    inputs = integer_inputs(rng)
    out = seed_exe.run({**inputs, "splitk": SPLITK})["out"]
    ref = fuserir.evaluate(seed_fusion(), inputs)["out"]
    assert np.array_equal(out, ref)
    # run again: the semaphores were left reset, and the same inputs give the same bits
    assert np.array_equal(seed_exe.run({**inputs, "splitk": SPLITK})["out"], ref)


def test_one_kernel_serves_other_sizes_and_split_factors(seed_exe, rng):
    m, n, k = 104, 72, 32 * 4 + 7          # partial tiles in M, N and K (rows of 16 B)
    inputs = integer_inputs(rng, m, n, k)
    ref = fuserir.evaluate(seed_fusion(), inputs)["out"]
    for splitk in (1, 3, 6):               # 6 splits of 5 K tiles: the last has none
        out = seed_exe.run({**inputs, "splitk": splitk})["out"]
        assert np.array_equal(out, ref), splitk


@pytest.mark.parametrize("changes", [
    dict(use_smem_epilogue=False, promote_prologue_smem_reuse=False),   # registers -> global
    dict(cta_tile=(128, 128, 32), stages=2),                            # 4 warps, 2 stages
    dict(stages=1, splitk_factor=2),                                    # no pipeline
    dict(splitk_mode="parallel"),                                       # arrival counters
    dict(splitk_mode="parallel", splitk_interleaved=True),
    dict(splitk_mode="atomic"),                                         # red.global.add
    dict(cta_tile=(64, 64, 32), warp_tile=(32, 32, 32), tile_group=2),  # grouped order
])
def test_other_configurations_equal_the_reference_without_a_race(rng, changes):
    f = seed_fusion(**changes)
    inputs = integer_inputs(rng, 192, 136, 32 * 5 + 3)
    out = codegen.compile(f, backend="interp").run({**inputs, "splitk": 3})["out"]
    assert np.array_equal(out, fuserir.evaluate(f, inputs)["out"])


def test_the_kernel_has_the_pipeline_and_the_drain_with_their_reasons(seed_exe):
    body = seed_exe.kernels[0].kir.body
    text = "\n".join(kir.format_stmts(body))
    waits = [s for s in kir.walk(body) if isinstance(s, kir.CpAsyncWait)]
    # the pipeline's own wait (FIFO distance S-2, no id) and the drain (an inserted id)
    assert [(w.n, w.sync_id) for w in waits] == [(1, None), (0, "sync2")]
    drain = waits[1]
    reasons = {(r.kind.value, r.buffers) for r in drain.reasons}
    assert ("async-pending", ("A_cache", "out_cache")) in reasons
    assert ("async-pending", ("B_cache", "out_cache")) in reasons
    # exactly one barrier per main-loop iteration, right after the pipeline's wait
    loop = next(s for s in body if isinstance(s, kir.ForLoop)
                and any(isinstance(x, kir.CpAsyncWait) for x in s.body))
    assert [type(s).__name__ for s in loop.body[:2]] == ["CpAsyncWait", "Barrier"]
    assert sum(isinstance(s, kir.Barrier) for s in kir.walk(loop.body)) == 1
    assert "ldmatrix.x4.trans" in text and "mma.m16n8k16.f16" in text
    assert "sem_wait" in text and "sem_release" in text


@pytest.mark.parametrize("sync", ["sync1", "sync2", "sync3", "sync4"])
def test_every_inserted_sync_dropped_alone_is_a_race(rng, sync):
    exe = codegen.compile(seed_fusion(), backend="interp", drop_syncs=(sync,),
                          verify=False)
    with pytest.raises(RaceError) as caught:
        exe.run({**integer_inputs(rng), "splitk": SPLITK})
    kinds = {(h.kind, h.buffer) for h in caught.value.hazards}
    if sync == "sync2":       # the drain: a late copy lands on the epilogue's tile
        assert any(k == "async-pending" and "out_cache" in b for k, b in kinds)


def test_regression_nvfuser_splitk_NT_smem_epilogue_pending_zero_fill(rng):
    """nvfuser_splitk_NT M=1024 N=2048 K=4096 warps=8 stages=3 splitk_factor=5
    smem_epilogue=1: zero-filling copies of the pipeline tail were still in flight when
    the epilogue wrote the tile that reuses their bytes. Without the drain the analysis
    refuses the kernel, and the interpreter reports the pending copy and shows the
    corruption it causes."""
    f = seed_fusion()
    exe = codegen.compile(f, backend="interp")
    drain = next(s for s in syncs(exe) if isinstance(s, kir.CpAsyncWait))
    with pytest.raises(HazardError) as refused:
        codegen.compile(f, backend="interp", drop_syncs=(drain.sync_id,))
    assert any(h.kind == "async-pending" for h in refused.value.hazards)
    unsafe = codegen.compile(f, backend="interp", drop_syncs=(drain.sync_id,),
                             verify=False)
    inputs = integer_inputs(rng)
    with pytest.raises(RaceError) as caught:
        unsafe.run({**inputs, "splitk": SPLITK})
    pending = [h for h in caught.value.hazards if h.kind == "async-pending"
               and "out_cache" in h.buffer]
    assert pending and "cp.async" in pending[0].first


def test_without_reuse_no_drain_before_the_epilogue(rng):
    exe = codegen.compile(seed_fusion(promote_prologue_smem_reuse=False), backend="interp")
    body = exe.kernels[0].kir.body
    drains = [s for s in kir.walk(body) if isinstance(s, kir.CpAsyncWait) and s.sync_id]
    # only the copies still in flight at the very end are drained, after the epilogue
    assert len(drains) == 1 and body[-1] is drains[0]
    assert {r.second.label for r in drains[0].reasons} == {"END"}
    inputs = integer_inputs(rng)
    out = exe.run({**inputs, "splitk": SPLITK})["out"]
    assert np.array_equal(out, fuserir.evaluate(seed_fusion(), inputs)["out"])
    allocs = {s.buffer.name: s.buffer.byte_offset.value for s in kir.walk(body)
              if isinstance(s, kir.Allocate) and s.buffer.memory is kir.Memory.shared}
    assert allocs["out_cache"] >= allocs["B_cache"] + 12288 * 2   # no aliasing


def test_reuse_puts_the_epilogue_tile_on_the_operand_bytes(seed_exe):
    k = seed_exe.kernels[0].kir
    shared = {s.buffer.name: s.buffer for s in kir.walk(k.body)
              if isinstance(s, kir.Allocate) and s.buffer.memory is kir.Memory.shared}
    assert shared["out_cache"].byte_offset.value == 0
    # 3 stages of A (256x32 f16) and B (32x128 f16): 72 KiB, the 64 KiB tile inside
    assert kir.shared_bytes(k, {"M": M, "N": N, "K": K, "splitk": SPLITK}) == 72 * 1024


def test_full_seed_size_for_the_ctas_of_one_output_tile(rng):
    """M=1024, N=2048, K=4096 split 5 ways, but only the 5 CTAs of output tile (1, 2)."""
    exe = codegen.compile(seed_fusion(), backend="interp")
    m, n, k = 1024, 2048, 4096
    inputs = integer_inputs(rng, m, n, k)
    blocks = [(1, 2, z) for z in range(SPLITK)]
    out = exe.run({**inputs, "splitk": SPLITK}, blocks=blocks)["out"]
    a = inputs["A"][:, 256:512].astype(np.float64)
    b = inputs["B"][:, 256:384].astype(np.float64)
    assert np.array_equal(out[256:512, 256:384], (a.T @ b).astype(np.float16))


def test_operand_loads_are_free_of_bank_conflicts(seed_exe):
    k = seed_exe.kernels[0].kir
    sizes = {"M": M, "N": N, "K": K, "splitk": SPLITK}
    # block z = 4 is the last split of its tile: it runs the epilogue too
    reports = bank_conflicts.report(k, sizes, block=(0, 0, SPLITK - 1))
    kinds = {r.kind for r in reports}
    assert {"cp.async", "ldmatrix"} <= kinds
    for r in reports:
        if r.kind in ("cp.async", "ldmatrix"):
            assert r.worst == 1, (r.label, r.buffer, r.example)


def test_the_kernel_compiles_to_a_cubin():
    exe = codegen.compile(seed_fusion(), backend="cuda")
    assert exe.kernels[0].cubin[:4] == b"\x7fELF"
    source = exe.kernels[0].source
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in source
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in source
    assert "cp.async.wait_group 1" in source and "cp.async.wait_group 0" in source


def test_the_schedule_prints_and_parses_back_to_the_same_kernel():
    f = seed_fusion()
    again = fuserir.parse(fuserir.print_fusion(f))
    a = codegen.compile(f, backend="interp").kernels[0].source
    b = codegen.compile(again, backend="interp").kernels[0].source
    assert a == b


@pytest.mark.parametrize("changes, message", [
    (dict(cta_tile=(256, 128, 32), warp_tile=(48, 64, 32)),
     "MatmulParams: cta_tile M (256) is not a multiple of warp_tile M (48)"),
    (dict(instruction_tile=(16, 8, 8)),
     "MatmulParams: instruction_tile (16, 8, 8): the tensor-core instructions are mma.sync "
     "m16n8k16 (16, 8, 16) and wgmma.mma_async m64nNk16 (64, n, 16), n a multiple of 8 up "
     "to 256"),
    (dict(cta_tile=(128, 128, 64), warp_tile=(64, 64, 64), instruction_tile=(64, 128, 16)),
     "MatmulParams: warp_tile N (64) is not a multiple of the instruction tile N (128)"),
    (dict(cta_tile=(128, 128, 64), warp_tile=(64, 128, 64), instruction_tile=(64, 64, 16)),
     "MatmulParams: warp_tile N (128) must equal the wgmma's n (64): one instruction spans "
     "a warp group's columns"),
    (dict(cta_tile=(128, 128, 32), warp_tile=(64, 128, 32), instruction_tile=(64, 128, 16)),
     "MatmulParams: cta_tile K (32) must be a multiple of 64 on the Hopper path (TMA boxes "
     "of 128-byte rows)"),
    (dict(cta_tile=(256, 256, 64), warp_tile=(64, 256, 64), instruction_tile=(64, 256, 16)),
     "MatmulParams: 4 consumer warp groups (cta_tile / warp_tile); the Hopper path has 1 to "
     "3, plus the producer"),

    (dict(warp_tile=(64, 64, 16)),
     "MatmulParams: cta_tile K (32) must equal warp_tile K (16): warps split M and N, not K"),
    (dict(stages=0), "MatmulParams: stages must be an integer >= 1, got 0"),
    (dict(splitk_mode="sorted"),
     "MatmulParams: splitk_mode 'sorted': expected 'serial' or 'parallel' or 'atomic' or "
     "'two_kernel' or 'cluster'"),
    (dict(cta_tile=5), "MatmulParams: cta_tile must be three positive integers (M, N, K), "
     "got 5"),
])
def test_bad_params_are_refused_with_their_reason(changes, message):
    with pytest.raises(ScheduleError) as caught:
        MatmulParams(**{**SEED, **changes})
    assert str(caught.value) == message


@pytest.mark.parametrize("definition, message", [
    (DEFINITION.replace("cast(acc, f16)", "cast(acc, i32)"),
     "schedule_matmul: the output out is i32; tensor cores produce f32, cast to f16, bf16 "
     "or f32"),
    (DEFINITION.replace("out = cast(acc, f16)", "out = sum(acc, axes=[1])"),
     "schedule_matmul: fusion splitk_nt must compute output = pointwise(matmul(A, B), ...) "
     "with its result cast to f16, bf16 or f32 (out is not pointwise)"),
    (DEFINITION.replace("output out", "output out, acc"),
     "schedule_matmul: fusion splitk_nt must compute output = pointwise(matmul(A, B), ...) "
     "with its result cast to f16, bf16 or f32 (the matmul must feed exactly one output "
     "through pointwise ops)"),
])
def test_unsupported_fusions_are_refused_clearly(definition, message):
    f = fuserir.parse(definition)
    with pytest.raises(ScheduleError) as caught:
        schedule_matmul(f, MatmulParams(**SEED))
    assert str(caught.value) == message


def test_a_scheduled_fusion_is_not_scheduled_twice():
    f = seed_fusion()
    with pytest.raises(ScheduleError, match="already scheduled"):
        schedule_matmul(f, MatmulParams(**SEED))


# -- on the GPU (marked gpu: skipped where there is none) ------------------------------------


def _reference_mismatches(cp, out, a, b):
    k = a.shape[0]
    ref = a.astype(cp.float64).T @ b.astype(cp.float64)
    return int((cp.abs(out.astype(cp.float64) - ref) > 1e-5 * k + 2.0 ** -10 * cp.abs(ref))
               .sum())


@pytest.mark.gpu
def test_gpu_equals_the_interpreter_bit_for_bit(seed_exe, rng):
    import cupy as cp
    inputs = integer_inputs(rng)
    cpu = seed_exe.run({**inputs, "splitk": SPLITK})["out"]
    gpu_exe = codegen.compile(seed_fusion(), backend="cuda")
    gpu = gpu_exe.run({"A": cp.asarray(inputs["A"]), "B": cp.asarray(inputs["B"]),
                       "splitk": SPLITK}, poison=True)["out"]
    assert np.array_equal(cp.asnumpy(gpu).view(np.uint16), cpu.view(np.uint16))


def test_parallel_split_k_sums_in_split_order_for_every_factor(rng):
    """Every CTA of a tile sums a slice of the tile over the splits: on inputs whose
    partial sums round (uniform floats) the result is the float64 product's to f16
    accuracy at every split factor, including more splits than K tiles (the last ones
    empty), and with one split (no reduction) the serial kernel's bits exactly."""
    m, n, k = 104, 72, 32 * 4 + 7
    data = {"A": rng.uniform(-1, 1, (k, m)).astype(np.float16),
            "B": rng.uniform(-1, 1, (k, n)).astype(np.float16)}
    parallel = codegen.compile(seed_fusion(splitk_mode="parallel"), backend="interp")
    serial = codegen.compile(seed_fusion(), backend="interp")
    exact = data["A"].astype(np.float64).T @ data["B"].astype(np.float64)
    for splitk in (1, 2, 3, 5, 6):
        got = parallel.run({**data, "splitk": splitk})["out"]
        np.testing.assert_allclose(got.astype(np.float64), exact, rtol=2e-3, atol=2e-3)
    assert np.array_equal(parallel.run({**data, "splitk": 1})["out"].view(np.uint16),
                          serial.run({**data, "splitk": 1})["out"].view(np.uint16))


def test_the_two_forms_of_the_parallel_reduction_give_the_same_bits(rng):
    """The output staged through shared memory makes the last CTA gather the sums; stored
    from the registers, each CTA stores the elements it summed. Both sum every element
    over the splits in the same order, so the outputs agree bit for bit at every split
    factor, on inputs whose partial sums round."""
    m, n, k = 64, 40, 32 * 67 + 7
    data = {"A": rng.uniform(-1, 1, (k, m)).astype(np.float16),
            "B": rng.uniform(-1, 1, (k, n)).astype(np.float16)}
    exact = data["A"].astype(np.float64).T @ data["B"].astype(np.float64)
    forms = {}
    for staged in (True, False):
        exe = codegen.compile(seed_fusion(splitk_mode="parallel", use_smem_epilogue=staged,
                                          promote_prologue_smem_reuse=staged,
                                          cta_tile=(64, 64, 32), warp_tile=(32, 32, 32)),
                              backend="interp")
        (kernel,) = exe.kernels
        (comment,) = [c.line() for c in kir.walk(kernel.kir.body)
                      if isinstance(c, kir.Comment) and "grid reduction" in c.line()]
        forms[staged] = (comment, exe)
    assert "each summing a slice" in forms[True][0]
    assert "each summing and storing a run" in forms[False][0]
    # the reads over the splits: whole batches of 8 iterations of the 8 lane groups, then
    # one checked batch of 1, 2, 4 or 8 iterations (3: 1 iteration; 13: 2; 21: 3 in a
    # batch of 4; 59: 8; 67: a whole batch, then 1)
    for splitk in (3, 13, 21, 59, 67):
        gathered, stored = (forms[staged][1].run({**data, "splitk": splitk})["out"]
                            for staged in (True, False))
        assert np.array_equal(gathered.view(np.uint16), stored.view(np.uint16)), splitk
        np.testing.assert_allclose(stored.astype(np.float64), exact, rtol=3e-3, atol=3e-3)


@pytest.mark.gpu
def test_gpu_seed_size_fresh_inputs_and_bitwise_repeatable():
    """The seed's split of 5 in turn; the modes whose CTAs wait for each other at 2 splits:
    the 64 tiles of 256x128 times 5 would be 320 CTAs, more than the device holds at once
    (one per SM), which the launcher refuses."""
    import cupy as cp
    _fresh_inputs_and_repeatable(cp, codegen.compile(seed_fusion(), backend="cuda"), SPLITK)
    _fresh_inputs_and_repeatable(cp, codegen.compile(seed_fusion(splitk_mode="parallel"),
                                                     backend="cuda"), 2)
    _fresh_inputs_and_repeatable(cp, codegen.compile(seed_fusion(splitk_mode="atomic"),
                                                     backend="cuda"), 2, repeatable=False)


def _fresh_inputs_and_repeatable(cp, exe, splitk, repeatable=True):
    """Ten fresh inputs each equal to the float64 product (to f16); with `repeatable`, the
    same inputs run five times more give the same bits (the atomic mode's need not)."""
    gen = cp.random.default_rng(1)
    m, n, k = 1024, 2048, 4096
    for _ in range(10):
        a = gen.uniform(-1, 1, (k, m), dtype=cp.float32).astype(cp.float16)
        b = gen.uniform(-1, 1, (k, n), dtype=cp.float32).astype(cp.float16)
        out = exe.run({"A": a, "B": b, "splitk": splitk}, poison=True)["out"]
        assert _reference_mismatches(cp, out, a, b) == 0
    first = out.copy()
    for _ in range(5):
        again = exe.run({"A": a, "B": b, "splitk": splitk}, poison=True)["out"]
        assert bool(cp.array_equal(again, first)) or not repeatable
        assert _reference_mismatches(cp, again, a, b) == 0


# -- the heuristic, and fusions without a schedule -------------------------------------------

from fuserir.device import H200  # noqa: E402
from fuserir.scheduler.matmul_heuristic import matmul_heuristic, splitk_for  # noqa: E402

# an H200 without Hopper's instructions: the mma.sync path's heuristic at the H200's sizes
SM80 = H200.with_(cc=(8, 0))


@pytest.mark.parametrize("size, tile, splitk, stages", [
    ((1024, 2048, 4096), (128, 128, 32), 2, 4),    # 128 tiles x 2 splits: 2 CTAs per SM
    ((4096, 4096, 4096), (256, 128, 32), 1, 4),    # 512 tiles even at 256x128
    ((1024, 1024, 4096), (128, 128, 32), 4, 4),    # 64 tiles x 4 splits
    ((128, 128, 262144), (128, 128, 32), 132, 6),  # 264 splits would keep 31 K tiles each
    ((136, 184, 175704), (128, 128, 32), 66, 6),   # 4 tiles, 83 K tiles per split: 2/SM
    ((128, 128, 1024), (128, 128, 32), 4, 4),      # 32 K tiles: at least 8 per split
    ((256, 128, 416), (128, 128, 32), 1, 4),       # 13 K tiles: no split
])
def test_heuristic_fills_the_sms_and_keeps_8_k_tiles_per_split(size, tile, splitk, stages):
    p = matmul_heuristic(*size, device=SM80)
    assert (p.cta_tile, p.splitk_factor, p.stages) == (tile, splitk, stages)
    assert splitk_for(*size, p.cta_tile) == splitk
    serial = splitk <= 8           # long chains of serial splits become two kernels
    assert p.splitk_mode == ("serial" if serial else "two_kernel")
    assert p.use_smem_epilogue == p.promote_prologue_smem_reuse == serial


def test_heuristic_fits_the_device_shared_memory():
    small = matmul_heuristic(1024, 1024, 4096, dtypes=("f16", "f16", "f32"),
                             device=SM80.with_(shared_limit=48 * 1024))
    assert small.stages == 3                        # 3 x 16 KiB of operand stages
    assert not small.use_smem_epilogue              # a 64 KiB f32 tile would not fit
    half = matmul_heuristic(1024, 1024, 4096, device=SM80.with_(shared_limit=48 * 1024))
    assert half.use_smem_epilogue                   # a 32 KiB f16 tile does
    with pytest.raises(ScheduleError, match="one pipeline stage needs 16384 bytes of "
                                            "shared memory, over the limit of 8192"):
        matmul_heuristic(1024, 1024, 4096, device=SM80.with_(shared_limit=8192))


@pytest.mark.parametrize("size, layout, tile, stages, staged, persistent, tma", [
    ((4096, 4096, 4096), "TT", (128, 256, 64), 4, True, False, True),  # 512 of 128x256
    ((8192, 8192, 8192), "NN", (128, 256, 64), 4, True, False, True),
    ((2048, 2048, 4096), "NT", (128, 256, 64), 4, True, False, True),  # 128: 7/8 SMs
    ((4096, 4100, 4096), "TN", (128, 256, 64), 4, True, False, False),  # rows of 8200 B
    ((3072, 3072, 3072), "TN", (192, 192, 64), 4, True, False, False),  # 2 waves, not 3
    ((1024, 2048, 4096), "NT", (128, 128, 64), 6, False, False, False),  # 64 wide; 128
    ((1024, 2048, 50304), "TT", (128, 128, 64), 6, True, False, False),  # K over 4096
    ((1024, 1024, 4096), "TN", (64, 128, 64), 8, False, False, False),  # 64 of 128x128
    ((512, 1024, 4096), "TN", (64, 64, 64), 8, False, False, False),    # 64 of 64x128
    ((8192, 3072, 768), "TN", (128, 256, 64), 3, True, True, False),    # 768 tiles
    ((8192, 2048, 2048), "TT", (128, 256, 64), 3, True, True, False),   # 32 K tiles
    ((4096, 4096, 2560), "NT", (128, 256, 64), 4, True, False, True),   # K over 2048
    ((2048, 4096, 2048), "TN", (128, 256, 64), 4, True, False, True),   # under 2 waves
])
def test_hopper_heuristic_takes_wgmma_and_tma(size, layout, tile, stages, staged,
                                              persistent, tma):
    """The tile and stages by the SMs, unsplit: 128x256 where those tiles give 7/8 of
    the SMs one (192x192 where their waves come to at most 0.8 of the work: fewer waves
    than a partial last one of 128x256), else 128x128, else (those filling at most half
    the SMs) 64 rows; the output staged through shared memory on 128x256 and 192x192
    tiles and where K is over 4096, else stored from the registers, by TMA from staged
    128x256 tiles whose rows are a multiple of 16 bytes; persistent where K is at most
    2048 and the 128x256 tiles make two waves or more, its staged tile its own (as
    measured: docs/perf.md)."""
    reasons = []
    p = matmul_heuristic(*size, layout=layout, reasons=reasons)
    assert p.hopper and p.instruction_tile == (64, tile[1], 16)
    assert (p.cta_tile, p.warp_tile, p.splitk_factor, p.splitk_mode, p.stages) == \
        (tile, (64, tile[1], 64), 1, "serial", stages)
    assert p.use_smem_epilogue == staged
    assert p.promote_prologue_smem_reuse == (staged and not persistent)
    assert p.persistent == persistent
    assert p.tma_store == tma
    assert "the Hopper path (wgmma, TMA, a producer warp group)" in reasons[0]
    assert ("the output staged through shared memory" if staged else
            "the output stored from the accumulator registers") in reasons[2]
    assert ("stored by TMA (its rows of" in reasons[2]) == tma
    assert any(r.startswith("persistent: 132 CTAs walk the") for r in reasons) == persistent
    if tile == (192, 192, 64):
        assert "256 tiles of 192x192 in 2 waves, against 3 of 128x256 tiles" in reasons[0]


@pytest.mark.parametrize("k, tile, splitk", [
    (4096, (64, 128, 64), 1), (8192, (64, 128, 64), 1),    # 64-row tiles, unsplit
    (16384, (128, 128, 64), 2), (50304, (128, 128, 64), 2),  # past 8192: 2 serial splits
])
def test_hopper_heuristic_splits_128x128_tiles_where_k_is_long(k, tile, splitk):
    """64 tiles of 128x128 fill half the SMs: 64-row tiles unsplit where K is at most
    8192, two serial splits of the 128x128 tiles beyond (as measured: docs/perf.md)."""
    p = matmul_heuristic(1024, 1024, k, layout="TN")
    assert (p.cta_tile, p.splitk_factor, p.splitk_mode) == (tile, splitk, "serial")


@pytest.mark.parametrize("size, tile, splitk, stages", [
    ((128, 128, 262144), (64, 64, 64), 33, 8),      # four tiles of 64x64 x 33 splits:
                                                    # at most 4 of 64 rows, not 128
    ((136, 184, 175704), (128, 192, 64), 66, 4),    # two tiles of 128x192 x 66: N fills
                                                    # their columns; B streamed twice, not
                                                    # three times as by 64x192 tiles
    ((136, 128, 175704), (64, 128, 64), 44, 6),     # 128x192 would be a third empty
    ((64, 64, 65536), (64, 64, 64), 64, 8),         # 1024 K tiles: at least 16 per split;
    ((256, 256, 65536), (128, 64, 64), 16, 6),      # (M <= 64: 64-row tiles)
])
def test_hopper_heuristic_takes_the_parallel_split_k_where_serial_splits_would_chain(
        size, tile, splitk, stages):
    """Skinny outputs with a long K: more than 8 serial splits would chain, so every CTA
    of a tile sums a slice at once, one CTA per SM (the grid resident at once)."""
    reasons = []
    p = matmul_heuristic(*size, layout="NT", reasons=reasons)
    assert p.hopper and (p.cta_tile, p.splitk_factor, p.splitk_mode, p.stages) == \
        (tile, splitk, "parallel", stages)
    assert p.splitk_interleaved and not p.use_smem_epilogue
    # the 128x192 accumulator fits only with the producer's registers given away
    assert p.producer_registers == (40 if tile[:2] == (128, 192) else None)
    tiles = -(-size[0] // tile[0]) * -(-size[1] // tile[1])
    assert tiles * splitk <= H200.sms
    assert reasons[1].startswith(f"split-K {splitk} (parallel): {tiles} tiles x {splitk} "
                                 "splits") and "arrival counters" in reasons[1]
    # below sm_90, the mma.sync path's two-kernel split-K as before
    assert matmul_heuristic(*size, layout="NT", device=SM80).splitk_mode == "two_kernel"
    # a device model that allows results whose last bits differ: the same plan, atomic
    reasons = []
    q = matmul_heuristic(*size, layout="NT", reasons=reasons,
                         device=H200.with_(deterministic=False))
    assert (q.cta_tile, q.splitk_factor, q.splitk_mode, q.splitk_interleaved) == \
        (tile, splitk, "atomic", True)
    assert "deterministic=False" in reasons[1] and "atomically" in reasons[1]


def test_compile_deterministic_false_lets_the_automatic_split_k_add_atomically():
    """compile(deterministic=False): the automatic schedule's skinny split-K adds its
    partials (kir AtomicAdd); by default it sums them in a fixed order. Refused: a
    deterministic that is not a bool."""
    fusion = fuserir.parse(DEFINITION)
    sizes = {"M": 128, "N": 128, "K": 262144}

    def adds(exe):
        (step,) = exe.plan_for(sizes, device=None)[2]
        return sum(isinstance(s, kir.AtomicAdd) for s in kir.walk(step.kernel.kir.body))

    assert adds(codegen.compile(fusion, backend="cuda", device=H200)) == 0
    assert adds(codegen.compile(fusion, backend="cuda", device=H200,
                                deterministic=False)) == 1
    with pytest.raises(FuserirError, match="deterministic must be True or False, got 'no'"):
        codegen.compile(fusion, deterministic="no")


@pytest.mark.parametrize("size, device, why", [
    ((1000, 900, 1000), H200, "1000x900x1000 TT: an operand's rows are not a multiple of "
     "16 bytes, which TMA needs, but of 4: the mma.sync path's narrower cp.asyncs"),
    ((1024, 1024, 1024), H200.with_(tma=False), "the operand arrays' strides are not what "
     "TMA reads (a contiguous last axis, the others multiples of 16 bytes): the mma.sync "
     "path"),
])
def test_hopper_heuristic_leaves_rows_cp_async_reads_to_mma_sync(size, device, why):
    reasons = []
    p = matmul_heuristic(*size, layout="TT", device=device, reasons=reasons)
    assert not p.hopper and reasons[0] == why


def test_hopper_heuristic_stages_only_a_16_bit_output_on_short_k():
    """stmatrix writes 16-bit tiles: an f32 output keeps the registers where K is at most
    4096, a persistent kernel's too (no tile of its own: 4 stages), and is staged over
    the operand stages past that K as before."""
    f32 = ("f16", "f16", "f32")
    for size, persistent, staged, stages in (((4096, 4096, 4096), False, False, 4),
                                             ((8192, 3072, 768), True, False, 4),
                                             ((8192, 8192, 8192), False, True, 4)):
        p = matmul_heuristic(*size, layout="TN", dtypes=f32)
        assert (p.persistent, p.use_smem_epilogue, p.stages) == (persistent, staged, stages)
        assert p.promote_prologue_smem_reuse == staged


def test_hopper_heuristic_copies_rows_of_an_odd_number_of_elements():
    reasons = []
    p = matmul_heuristic(1000, 900, 1001, layout="TT", reasons=reasons)
    assert p.hopper and not p.async_gmem_load_operands and p.stages == 4
    assert reasons[0] == ("1000x900x1001 TT: A's rows are of an odd number of elements: "
                          "the producer warp group copies the tiles of A and B "
                          "element-wise, into the same swizzled layout")
    assert "the Hopper path (wgmma, a producer warp group)" in reasons[1]


@pytest.mark.parametrize("size, tiles, splitk, stages", [
    ((48, 4096, 4096), 64, 1, 8),       # 64 tiles: more than a quarter of the SMs
    ((64, 14336, 4096), 224, 1, 7),     # past one per SM: two CTAs share an SM
    ((40, 8192, 4096), 128, 1, 8),
    ((64, 2048, 4096), 32, 4, 8),       # 32 tiles x 4 serial splits
])
def test_hopper_heuristic_gives_a_decode_step_64_row_tiles(size, tiles, splitk, stages):
    """M of at most 64, over the 32 that tiles are fitted to: one consumer warp group of
    64 rows, not two of which most rows are absent; the output stored from the
    registers."""
    reasons = []
    p = matmul_heuristic(*size, layout="NT", reasons=reasons)
    assert (p.cta_tile, p.warp_tile, p.splitk_factor, p.splitk_mode, p.stages) == \
        ((64, 64, 64), (64, 64, 64), splitk, "serial", stages)
    assert p.warps == 1 and not p.use_smem_epilogue
    assert any(f"CTA tile 64x64x64 in 1 consumer warp group of 64x64, {tiles} tiles of "
               "64x64 (M of at most 64" in r for r in reasons)


@pytest.mark.parametrize("layout, size, plan", [
    # a decode step: N along the tiles' rows, M along the instruction's N (swap_mn)
    ("TN", (16, 4096, 4096), ((64, 16, 128), 1, "serial", 6, True)),
    ("TT", (1, 4096, 4096), ((64, 8, 128), 1, "serial", 6, True)),
    ("TN", (16, 4096, 14336), ((64, 16, 128), 2, "serial", 6, True)),   # K long: 2 splits
    ("TN", (32, 14336, 4096), ((64, 32, 128), 1, "serial", 4, True)),   # two CTAs an SM
    # skinny outputs: a split-K on tiles as narrow as the small side, 64 rows where
    # they are at most 4 (through clusters where K is short, else the counters)
    ("TN", (16, 16, 16384), ((64, 16, 64), 16, "cluster", 8, False)),   # N on a tie
    ("TT", (16, 256, 16384), ((64, 16, 64), 16, "cluster", 8, True)),
    ("NN", (256, 16, 16384), ((64, 16, 64), 16, "cluster", 8, False)),
    ("TN", (128, 24, 65536), ((64, 24, 64), 64, "parallel", 8, False)),
    ("TN", (512, 24, 65536), ((128, 24, 64), 33, "parallel", 6, False)),    # 8 tiles
    # the small side's operand stored with it contiguous: 8, 16 or 32 wide (box rows of
    # 16 bytes unswizzled, or of 32 or 64 bytes in the 32B or 64B swizzle mode)
    ("NN", (16, 256, 16384), ((64, 16, 64), 16, "cluster", 8, True)),
    ("TT", (256, 16, 16384), ((64, 16, 64), 16, "cluster", 8, False)),
    ("NT", (16, 16, 16384), ((64, 16, 64), 16, "cluster", 8, False)),   # N on a tie
    ("NT", (16, 4096, 4096), ((64, 16, 128), 1, "serial", 6, True)),
    ("NT", (8, 4096, 4096), ((64, 8, 128), 1, "serial", 6, True)),
    ("NN", (32, 4096, 4096), ((64, 32, 128), 1, "serial", 6, True)),
    # both small: the side whose operand is stored with K contiguous
    ("TT", (16, 16, 16384), ((64, 16, 64), 16, "cluster", 8, True)),
    # M = 1 with A stored K x 1, N = 1 with B stored K x 1: staged along K, K contiguous
    ("NT", (1, 4096, 4096), ((64, 8, 128), 1, "serial", 6, True)),
    ("NN", (1, 4096, 4096), ((64, 8, 128), 1, "serial", 6, True)),
    ("TT", (64, 1, 4096), ((64, 8, 64), 16, "cluster", 8, False)),
    # M of 33-64 (64x8192x4096: no faster swapped, docs/perf.md)
    ("TN", (64, 4096, 4096), ((64, 64, 64), 1, "serial", 8, False)),
])
def test_hopper_heuristic_fits_the_tiles_to_a_small_side(layout, size, plan):
    """M or N of at most 32: tiles that narrow along it (the instruction's N: a multiple
    of 8 where its operand is stored with K contiguous, else a power of two whose box
    rows a swizzle mode reads), M along the instruction's N where M is the small side
    (swap_mn); the decode step's K tile 128 in 6 stages."""
    reasons = []
    p = matmul_heuristic(*size, layout=layout, reasons=reasons)
    assert (p.cta_tile, p.splitk_factor, p.splitk_mode, p.stages, p.swap_mn) == plan
    assert p.instruction_tile == (64, plan[0][1], 16) and not p.use_smem_epilogue
    fitted = [r for r in reasons if "its operand stored with" in r]
    if plan[0][1] < 64:
        side = "M" if plan[4] else "N"
        small = size[0] if plan[4] else size[1]
        width = plan[0][1]
        contiguous = small > 1 and (layout[0] == "N" if side == "M" else layout[1] == "T")
        stored = (f"{side} contiguous: boxes of rows of {2 * width} bytes, " + (
            f"swizzled by them ({2 * width}B mode)" if width > 8 else "unswizzled")
            if contiguous else "K contiguous")
        assert fitted == [f"{side} = {small}, its operand stored with {stored}: tiles "
                          f"{width} wide along {side} (the instruction's N)"
                          + (", N along the tiles' rows and the instruction's M (swap_mn)"
                             if plan[4] else "")]
    else:
        assert fitted == []


@pytest.mark.parametrize("layout", ["NT", "NN"])
def test_hopper_heuristic_stages_a_one_element_row_operand_along_k(layout):
    """M = 1 with A stored K x M (a decode step): A's rows are one element long, so A is
    contiguous along K: staged along K and read by TMA like a row-major A, not copied
    element by element."""
    reasons = []
    p = matmul_heuristic(1, 4096, 4096, layout=layout, reasons=reasons)
    assert p.hopper and p.async_loads == (True, True) and p.staged_along_k == (True, False)
    assert reasons[0] == (f"1x4096x4096 {layout}: A's stored rows are one element long "
                          "(M = 1), so it is contiguous along K: staged along K, its K runs "
                          "read by TMA")
    assert matmul_heuristic(2, 4096, 4096, layout=layout).staged_along_k == (False, False)
    assert matmul_heuristic(1, 4096, 4096, layout="T" + layout[1]).staged_along_k == \
        (False, False)
    assert matmul_heuristic(64, 1, 4096, layout="TT").staged_along_k == (False, True)


@pytest.mark.parametrize("kwargs, message", [
    (dict(device=H200.with_(cc=(7, 5))), "compute capability 7.5 has no tensor-core mma.sync "
     "m16n8k16 with cp.async; sm_80 or newer is needed"),
    (dict(dtypes=("f16", "bf16")), "operands f16 x bf16: tensor cores take two f16 or two "
     "bf16 operands"),
    (dict(dtypes=("f32", "f32")), "operands f32 x f32: tensor cores take two f16 or two "
     "bf16 operands"),
    (dict(dtypes=("f16", "f16", "i32")), "output i32: tensor cores produce f32, cast to "
     "f16, bf16 or f32"),
    (dict(layout="XX"), "unknown layout 'XX'"),
])
def test_heuristic_errors(kwargs, message):
    with pytest.raises(ScheduleError) as caught:
        matmul_heuristic(1024, 1024, 4096, **kwargs)
    assert str(caught.value) == "matmul_heuristic: " + message


AUTO = """
fusion mm(A: f16[M, K], B: f16[N, K], bias: f16[N]) {
  acc = matmul(A, B, layout=TN)
  out = cast(relu(acc + cast(broadcast(bias, [true, false]), f32)), f16)
  output out
}
"""


def test_a_matmul_without_a_schedule_uses_tensor_cores_and_the_heuristics_split(rng):
    f = fuserir.parse(AUTO)
    exe = codegen.compile(f, backend="interp", device=H200)
    assert "wgmma" in exe.kernels[0].kir_text       # the Hopper path, on the H200
    m, n, k = 64, 48, 512                           # 1 tile, 8 K tiles of 64: split 2
    data = {"A": rng.integers(-3, 4, (m, k)).astype(np.float16),
            "B": rng.integers(-3, 4, (n, k)).astype(np.float16),
            "bias": rng.integers(-3, 4, (n,)).astype(np.float16)}
    schedule, scalars, steps = exe.plan_for({"M": m, "N": n, "K": k})
    # the split factor is a run-time scalar of the kernel, passed by each run (the plan
    # may have been built by another size class of the same schedule, another default)
    assert scalars == {"splitk": 2} and set(steps[0].fusion.scalars) == {"splitk"}
    assert np.array_equal(exe.run(data)["out"], fuserir.evaluate(f, data)["out"])


def test_rows_too_narrow_for_16_byte_copies_stay_on_tensor_cores(rng):
    f = fuserir.parse(AUTO)
    exe = codegen.compile(f, backend="interp")
    m, n, k = 30, 20, 50                            # K rows of 100 bytes: 4-byte copies
    data = {"A": rng.integers(-3, 4, (m, k)).astype(np.float16),
            "B": rng.integers(-3, 4, (n, k)).astype(np.float16),
            "bias": rng.integers(-3, 4, (n,)).astype(np.float16)}
    assert np.array_equal(exe.run(data)["out"], fuserir.evaluate(f, data)["out"])
    (kernel,) = exe.kernels_for(data)
    assert kernel.caps == {"A": 4, "B": 4, "out": 8}   # out's rows: 40 bytes
    text = kernel.kir_text
    assert "mma.m16n8k16.f16" in text and "4 bytes, src-size" in text and "cp.async.cg" not in text


def test_a_schedule_over_the_shared_memory_limit_is_refused_with_both_numbers():
    f = fuserir.parse(DEFINITION)
    with pytest.raises(ScheduleError) as caught:
        schedule_matmul(f, MatmulParams(**{**SEED, "stages": 10}))
    assert str(caught.value) == (
        "schedule_matmul: the schedule needs 245760 bytes of shared memory (10 stages of "
        "256x32 + 32x128 operand tiles, and a 256x128 epilogue tile), over the limit of "
        "232448 bytes per block; use fewer stages or smaller tiles")
    f = fuserir.parse(DEFINITION)
    with pytest.raises(ScheduleError, match="needs 73728 bytes .* over the limit of 49152"):
        schedule_matmul(f, MatmulParams(**SEED), device=H200.with_(shared_limit=48 * 1024))


def test_two_kernel_split_k_runs_two_checked_kernels(rng):
    f = seed_fusion(splitk_mode="two_kernel")
    exe = codegen.compile(f, backend="interp")
    first, second = (k.kir for k in exe.kernels)
    text = "\n".join(kir.format_stmts(first.body))
    # kernel 1: tensor cores, each CTA of a tile writes its own split's f32 partial sums
    assert "mma.m16n8k16" in text and "sem_wait" not in text and not first.workspaces
    assert [p.buffer.name for p in first.tensor_params if p.is_output] == ["acc_rf"]
    # kernel 2 reads them and sums the splits in order, one thread per output element
    assert "acc_rf" in [p.buffer.name for p in second.tensor_params if not p.is_output]
    inputs = integer_inputs(rng)
    for splitk in (1, 5, 13):
        out = exe.run({**inputs, "splitk": splitk})["out"]
        assert np.array_equal(out, fuserir.evaluate(f, {**inputs, "splitk": splitk})["out"])


def test_a_gpu_below_sm80_is_refused_clearly(monkeypatch):
    from codegen import nvrtc
    monkeypatch.setattr(nvrtc, "default_arch", lambda: "sm_75")
    with pytest.raises(nvrtc.CompileError) as caught:
        codegen.compile(seed_fusion(), backend="cuda")
    assert str(caught.value) == (
        "kernel splitk_nt uses CpAsync (cp.async, sm_80), CpAsyncCommit (cp.async, sm_80), "
        "CpAsyncWait (cp.async, sm_80), Mma (mma.sync m16n8k16, sm_80), which need sm_80 or "
        "newer; this GPU is sm_75")


def test_divisions_by_the_run_time_split_factor_are_computed_once():
    # the total division (a / 0 = 0) must stay one the compiler can share: written with
    # the division under a condition, the seed kernel's PTX divided by splitk 25 times in
    # its main loop (16% slower on the H200)
    from codegen import nvrtc
    kernel = codegen.compile(seed_fusion(), backend="interp").kernels[0]
    name = kernel.source.split('extern "C" __global__ void ')[1].split("(")[0]
    assert nvrtc.ptx(kernel.source, name, arch="sm_90").count("div.s32") <= 2


def test_a_matmul_of_a_tensor_with_itself_reads_it_through_a_copy():
    """x^T x: the two operands are cached and laid out differently (A and B fragments), so
    one tensor cannot be both: before, the second operand's cache wrapped the first's and
    the automatic schedule computed out[i, j] = out[i, i]. B is now a copy of A (`set`),
    which prints, parses back, and runs like the reference."""
    f = fuserir.parse("fusion gram(x: f16[K, M]) {\n  y = matmul(x, x, layout=NT)\n"
                      "  output y\n}\n")
    assert "y = matmul(x, set(x), layout=NT)" in fuserir.print_fusion(f)
    x = np.random.default_rng(3).integers(-3, 4, (37, 19)).astype(np.float16)
    got = codegen.compile(f, backend="interp").run({"x": x})["y"]
    want = x.astype(np.float64).T @ x.astype(np.float64)
    assert np.array_equal(got, want)
    assert np.array_equal(fuserir.evaluate(f, {"x": x})["y"], want)
