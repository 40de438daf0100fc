"""The automatic transpose schedule (fuserir.scheduler.transpose): a pointwise fusion whose
input is contiguous along another axis than its output is tiled on both innermost axes
and staged through a padded shared tile. Each case runs in the interpreter (race detector
on) equal to the reference; the global reads and writes are coalesced, the shared reads
across the tile free of bank conflicts, the barrier necessary, the kernel a cubin; fusions
without a transpose keep the pointwise schedule; where the transpose scheduler does not
apply the reasons say why."""

import ml_dtypes
import numpy as np
import pytest

import codegen
import fuserir
from codegen import HazardError, RaceError, nvrtc
from fuserir.errors import ScheduleError
from fuserir.scheduler.auto import explain, schedule_auto
from lowering import kir
from lowering.verify import bank_conflicts as bc

CASES = {
    # name: (DSL text, sizes: several, none a multiple of the 32-element tile)
    "transpose_add": ("""fusion f(x: f32[N, M], y: f32[M, N]) {
  t = transpose(x, 0, 1)
  z = t + y
  output z
}""", [{"N": 37, "M": 45}, {"N": 64, "M": 96}, {"N": 5, "M": 70}]),
    "batch_permute": ("""fusion f(x: f32[B, N, M]) {
  z = permute(x, [0, 2, 1]) * 2
  output z
}""", [{"B": 3, "N": 33, "M": 70}, {"B": 2, "N": 8, "M": 31}]),
    "transpose_cast": ("""fusion f(x: f32[N, M]) {
  z = cast(transpose(x, 0, 1), f16)
  output z
}""", [{"N": 40, "M": 50}, {"N": 1, "M": 33}]),
    "bias_transpose": ("""fusion f(x: f32[N, M], b: f32[N]) {
  z = transpose(x, 0, 1) + broadcast(b, [true, false])
  output z
}""", [{"N": 50, "M": 34}]),
    "transpose_of_a_cast": ("""fusion f(x: bf16[N, M]) {
  z = transpose(cast(x, f32), 0, 1) * 0.5
  output z
}""", [{"N": 33, "M": 64}]),
    "cast_f16_transpose": ("""fusion f(x: f16[N, M], y: f32[M, N]) {
  z = cast(transpose(x, 1, 0), f32) - y
  output z
}""", [{"N": 66, "M": 35}]),
    # every tensor 2 bytes: pairs of elements per access (odd sizes: the narrow variant)
    "transpose_add_bf16": ("""fusion f(x: bf16[N, M], y: bf16[M, N]) {
  z = transpose(x, 0, 1) + y
  output z
}""", [{"N": 64, "M": 96}, {"N": 37, "M": 45}, {"N": 6, "M": 70}]),
}
PAIRS = {"transpose_add_bf16"}      # cases whose accesses move 4-byte pairs of elements


def width_of(case):
    return 2 if case in PAIRS else 1


def inputs_for(fusion, sizes, rng):
    return {tv.name: rng.integers(-50, 50, [e if isinstance(e, int) else sizes[str(e)]
                                            for e in tv.shape]).astype(tv.dtype.numpy)
            for tv in fusion.inputs}


def compiled(case, **options):
    return codegen.compile(fuserir.parse(CASES[case][0]), backend="interp", **options)


def kernel_of(case, **options):
    (kernel,) = compiled(case, **options).kernels
    return kernel


def scalars_for(kernel, sizes):
    """The kernel's size arguments, and row-major strides of every global tensor."""
    found = dict(sizes)
    for p in kernel.kir.tensor_params:
        stride = 1
        for size, var in reversed(list(zip(p.sizes, p.strides))):
            found[var.name] = stride
            stride *= size.value if isinstance(size, kir.Const) else sizes[size.name]
    return found


def lane_offsets(kernel, buffer_name, sizes, store):
    """The element index that lanes 0..31 of the first warp access in `buffer_name`'s
    global load (or store), less lane 0's."""
    block = tuple(d.value for d in kernel.kir.launch.block)
    ev = bc._Evaluator(scalars_for(kernel, sizes), block, (0, 0, 0), None)
    found = []
    for s in kir.walk(kernel.kir.body):
        if store and isinstance(s, kir.Store) and s.buffer.name == buffer_name:
            found.append(s.index)
        elif not store:
            found += [e.index for e in kir.expressions(s) for e in kir.walk_expr(e)
                      if isinstance(e, kir.Load) and e.buffer.name == buffer_name]
    assert found, f"no global {'store to' if store else 'load of'} {buffer_name}"
    loops = {s.var.name: 0 for s in kir.walk(kernel.kir.body) if isinstance(s, kir.ForLoop)}
    lanes = np.arange(32)
    return [ev.value(index, lanes, loops) - ev.value(index, lanes, loops)[0]
            for index in found]


# -- correctness ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_kernel_runs_like_the_reference_at_every_size(case):
    exe = compiled(case)
    rng = np.random.default_rng(3)
    kernels = set()
    for sizes in CASES[case][1]:
        data = inputs_for(exe.fusion, sizes, rng)
        (kernel,) = exe.kernels_for(data)
        kernels.add(id(kernel))
        got = exe.run(data)             # the interpreter's race detector is on: no race
        want = fuserir.evaluate(exe.fusion, data)
        np.testing.assert_array_equal(got["z"], want["z"])
    # run-time sizes: one kernel serves every size (with pairs, rows of an odd length take
    # the variant whose copies move single elements)
    assert len(kernels) == (2 if case in PAIRS else 1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_transpose_scheduler_tiles_and_stages_through_padded_shared_memory(case):
    kernel = kernel_of(case)
    assert [d.value for d in kernel.kir.launch.block] == [32 // width_of(case), 8, 1]
    (tile,) = [s.buffer for s in kir.walk(kernel.kir.body)
               if isinstance(s, kir.Allocate) and s.buffer.memory is kir.Memory.shared]
    pad = {"f32": 1, "f16": 2, "bf16": 2}[tile.dtype.value]      # a row padded by one 4-byte bank
    assert tile.name == "x_cache" and tile.size.value == 32 * (32 + pad)
    assert "the transpose scheduler" in explain(fuserir.parse(CASES[case][0]))[0]


# -- coalescing and bank conflicts ---------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_global_reads_and_writes_are_coalesced_on_both_sides(case):
    """Lane l of a warp reads x and writes z at element l past lane 0's: threadIdx.x runs
    along the contiguous axis of both (the pointwise schedule read x 32 rows apart). With
    pairs, lane l of each half warp accesses the pair 2 l past lane 0's: 32 consecutive
    elements a row."""
    kernel = kernel_of(case)
    sizes = CASES[case][1][0]
    fusion = fuserir.parse(CASES[case][0])
    w = width_of(case)
    lanes = 32 // w
    for name in [x.name for x in fusion.inputs]:
        for offsets in lane_offsets(kernel, name, sizes, store=False):
            np.testing.assert_array_equal(offsets[:lanes], np.arange(lanes) * w,
                                          err_msg=f"load of {name}")
    for offsets in lane_offsets(kernel, "z", sizes, store=True):
        np.testing.assert_array_equal(offsets[:lanes], np.arange(lanes) * w,
                                      err_msg="store of z")


def test_the_pointwise_schedule_read_the_transposed_input_strided():
    """The control for the coalescing check: the same fusion scheduled pointwise (as
    before the transpose scheduler) reads x a row apart per lane."""
    fusion = fuserir.parse(CASES["transpose_add"][0])
    z = fusion.tensor("z")
    z.merge(0)
    z.split(0, 128)
    z.parallelize(0, "BIDx")
    z.parallelize(1, "TIDx")
    (kernel,) = codegen.compile(fusion, backend="interp").kernels
    sizes = {"N": 64, "M": 96}
    (offsets,) = lane_offsets(kernel, "x", sizes, store=False)
    np.testing.assert_array_equal(offsets, np.arange(32) * 96)


@pytest.mark.parametrize("case", sorted(CASES))
def test_shared_tile_accesses_are_free_of_bank_conflicts(case):
    """The transposed reads are conflict free. With pairs, a warp stores two rows of 16
    pairs into the tile, and with rows of 17 words (odd, so that the reads down a column
    are free) the second row's last pair wraps onto the first row's bank 0: at most 2
    ways."""
    kernel = kernel_of(case)
    entries = bc.report(kernel.kir, CASES[case][1][0])
    assert {e.kind for e in entries} == {"store", "load"}
    allowed = {"load": 1, "store": 2 if case in PAIRS else 1}
    assert all(e.worst <= allowed[e.kind] for e in entries), bc.format_report(entries)


def test_without_the_padding_the_transposed_read_is_32_way():
    fusion = fuserir.parse(CASES["transpose_add"][0])
    schedule_auto(fusion)
    fusion.tensor("x_cache").row_padding = None
    (kernel,) = codegen.compile(fusion, backend="interp").kernels
    worst = {e.kind: e.worst for e in bc.report(kernel.kir, {"N": 64, "M": 96})}
    assert worst == {"store": 1, "load": 32}


# -- barriers and compilation --------------------------------------------------------------


@pytest.mark.parametrize("case", ["transpose_add", "batch_permute"])
def test_the_barrier_is_inserted_and_dropping_it_is_caught(case):
    kernel = kernel_of(case)
    barriers = [s for s in kir.walk(kernel.kir.body) if isinstance(s, kir.Barrier)]
    assert [b.sync_id for b in barriers] == ["sync1"]
    assert any("RAW on x_cache" in str(r) for r in barriers[0].reasons), barriers[0].reasons
    with pytest.raises(HazardError) as refused:      # (an automatic schedule is lowered
        compiled(case, drop_syncs=("sync1",)).kernels  # when its kernels are first asked)
    assert {h.kind for h in refused.value.hazards} == {"RAW"}
    exe = compiled(case, drop_syncs=("sync1",), verify=False)
    data = inputs_for(exe.fusion, CASES[case][1][0], np.random.default_rng(0))
    with pytest.raises(RaceError) as raced:
        exe.run(data)
    assert {h.kind for h in raced.value.hazards} == {"RAW"}
    assert {h.buffer for h in raced.value.hazards} == {"x_cache"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_kernel_compiles_to_a_cubin(case):
    kernel = kernel_of(case)
    assert nvrtc.compile_to_cubin(kernel.source, kernel.name)[:4] == b"\x7fELF"


# -- where the transpose scheduler does not apply ------------------------------------------


POINTWISE_SCHEDULE = """schedule f {
  z_cache = z.cache_before(local)
  z.split(-1, 4)
  z.split(-2, 32)
  z.merge(0)
  z.split(0, 4)
  z.reorder({1: 2})
  z.merge(0)
  z.parallelize(0, BIDx)
  z.parallelize(1, TIDy)
  z.parallelize(2, TIDx)
  z.vectorize(3)
  y_cache = y.cache_after(local)
  y_cache.compute_at(z, 3)
  y_cache.vectorize(-1)
  z_cache.compute_at(z, 3)
  z_cache.parallelize(-1, unroll)
}"""   # x, read through the permute, is read element by element; y by vectors


def test_a_permute_that_keeps_the_innermost_axis_keeps_the_pointwise_schedule():
    fusion = fuserir.parse("""fusion f(x: f32[A, B, C], y: f32[B, A, C]) {
  z = permute(x, [1, 0, 2]) + y
  output z
}""")
    assert explain(fusion) == ["the pointwise scheduler (16-byte vectors of z's rows)"]
    assert explain(fusion, {"A": 3, "B": 5, "C": 40}) == [
        "the pointwise scheduler (flattened: several outputs, or rows too short for a warp "
        "of vectors)"]
    schedule_auto(fusion)
    assert fuserir.print_fusion(fusion).endswith(POINTWISE_SCHEDULE + "\n")
    exe = codegen.compile(fusion, backend="interp")
    for c in (40, 256):      # rows shorter than 32 vectors of 4, and long enough
        data = inputs_for(fusion, {"A": 3, "B": 5, "C": c}, np.random.default_rng(1))
        np.testing.assert_array_equal(exe.run(data)["z"], fuserir.evaluate(fusion, data)["z"])


def test_a_reduction_with_a_transpose_keeps_the_reduction_scheduler_and_says_why():
    text = """fusion f(x: f32[N, M]) {
  t = transpose(x, 0, 1)
  s = sum(t * 2, axes=[1])
  output s
}"""
    assert explain(fuserir.parse(text)) == [
        "the reduction scheduler (no row split over CTAs at these sizes)",
        "the transpose t is not staged through shared memory: the transpose scheduler "
        "takes no reduction"]
    exe = codegen.compile(fuserir.parse(text), backend="interp")
    data = {"x": np.random.default_rng(2).integers(-9, 9, (33, 20)).astype(np.float32)}
    np.testing.assert_array_equal(exe.run(data)["s"], fuserir.evaluate(exe.fusion, data)["s"])


def test_two_outputs_fall_back_to_the_pointwise_schedule_with_the_reason():
    text = """fusion f(x: f32[N, M], y: f32[M, N]) {
  z = transpose(x, 0, 1) + y
  w = y * 3
  output z, w
}"""
    lines = explain(fuserir.parse(text))
    assert lines == ["the pointwise scheduler (flattened: several outputs, or rows too short "
                     "for a warp of vectors)",
                     "not staged through shared memory: f has 2 outputs (one is tiled)"]
    exe = codegen.compile(fuserir.parse(text), backend="interp")
    data = inputs_for(exe.fusion, {"N": 20, "M": 36}, np.random.default_rng(4))
    got, want = exe.run(data), fuserir.evaluate(exe.fusion, data)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_a_slice_on_the_way_falls_back_with_the_reason():
    text = """fusion f(x: f32[N, M], y: f32[M, N]) {
  t = transpose(x, 0, 1) + y
  z = slice(t, [0, 1], [M, N])
  output z
}"""
    assert explain(fuserir.parse(text))[1:] == [
        "not staged through shared memory: z is a slice; the transpose scheduler follows "
        "only pointwise ops, casts, broadcasts and permutes"]
    exe = codegen.compile(fuserir.parse(text), backend="interp")
    data = inputs_for(exe.fusion, {"N": 20, "M": 36}, np.random.default_rng(5))
    np.testing.assert_array_equal(exe.run(data)["z"], fuserir.evaluate(exe.fusion, data)["z"])


# -- pad_rows ------------------------------------------------------------------------------


@pytest.mark.parametrize("setup, call, message", [
    ("", lambda xs: xs.pad_rows(32), "x_cache is in local memory; only shared tiles are "
                                     "padded"),
    ("shared", lambda xs: xs.pad_rows(True), "row must be a positive number of elements, "
                                             "got True"),
    ("shared", lambda xs: (xs.swizzle(32), xs.pad_rows(32)), "x_cache is swizzled; a tile "
                                                             "is either padded or swizzled"),
    ("shared", lambda xs: (xs.pad_rows(32), xs.swizzle(32)), "x_cache is padded \\(pad_rows\\)"
                                                             "; a tile is either padded"),
])
def test_pad_rows_refuses_with_its_reason(setup, call, message):
    f = fuserir.parse("fusion f(x: f32[N, 32]) { y = relu(x)  output y }")
    xs = f.tensor("x").cache_after(setup or "local")
    with pytest.raises(ScheduleError, match=message):
        call(xs)


def test_a_padded_schedule_prints_and_parses_back():
    fusion = fuserir.parse(CASES["transpose_add"][0])
    schedule_auto(fusion)
    text = fuserir.print_fusion(fusion)
    assert "x_cache.pad_rows(32, 1)" in text
    again = fuserir.parse(text)
    from fuserir.ir.equality import structurally_equal
    assert structurally_equal(fusion, again)


# -- on the device -------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_transpose_schedules_on_the_gpu(case):
    import cupy as cp
    exe = codegen.compile(fuserir.parse(CASES[case][0]), backend="cuda")
    rng = np.random.default_rng(11)
    large = {s: 4 if s == "B" else 1000 + 7 * i
             for i, s in enumerate(sorted(exe.fusion.size_symbols()))}
    def device(v):      # bf16 travels as its bits (CuPy has no bf16)
        return cp.asarray(v.view(np.uint16) if v.dtype == ml_dtypes.bfloat16 else v)

    for sizes in CASES[case][1] + [large]:
        data = inputs_for(exe.fusion, sizes, rng)
        got = cp.asnumpy(exe.run({k: device(v) for k, v in data.items()})["z"])
        want = fuserir.evaluate(exe.fusion, data)["z"]
        np.testing.assert_array_equal(got.view(want.dtype) if got.dtype == np.uint16 else got,
                                      want)
