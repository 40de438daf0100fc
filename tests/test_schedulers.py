"""Automatic schedules: fusions without a schedule compile and run, in the interpreter,
equal to the reference; the plan (how many kernels, which scheduler) is what we expect."""

import pathlib

import ml_dtypes
import numpy as np
import pytest

import codegen
import fuserir
from fuserir.errors import ScheduleError
from fuserir.scheduler.auto import schedule_auto
from lowering import kir

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"

CASES = {
    # name: (DSL text, sizes, number of kernels)
    "add": ("""fusion f(a: f32[N], b: f32[N]) {
  out = a + b
  output out
}""", {"N": 700}, 1),
    "bias_relu_bf16": ("""fusion f(x: bf16[M, N], b: bf16[N]) {
  y = relu(cast(x, f32) + cast(broadcast(b, [true, false]), f32))
  out = cast(y, bf16)
  output out
}""", {"M": 5, "N": 70}, 1),
    "two_outputs_sharing": ("""fusion f(x: f32[M, N]) {
  t = x * 2
  a = t + 1
  b = t - 1
  output a, b
}""", {"M": 4, "N": 33}, 1),
    "row_sum": ("""fusion f(x: f32[M, N]) {
  s = sum(x, axes=[1])
  output s
}""", {"M": 3, "N": 1100}, 1),
    "row_stats": ("""fusion f(x: f32[M, N]) {
  s = sum(x, axes=[1])
  m = max(x * 2, axes=[1])
  output s, m
}""", {"M": 3, "N": 600}, 1),
    "column_sum": ("""fusion f(x: f32[M, N]) {
  s = sum(x, axes=[0])
  output s
}""", {"M": 9, "N": 300}, 1),
    "sum_all": ("""fusion f(x: i32[M, N]) {
  s = sum(x, axes=[0, 1])
  output s
}""", {"M": 7, "N": 90}, 1),
    "reduce_then_pointwise": ("""fusion f(x: f32[M, N]) {
  s = sum(x, axes=[1])
  out = cast(s * 0.5, f16)
  output out
}""", {"M": 4, "N": 300}, 1),
    "softmax": ("""fusion f(x: f32[M, N]) {
  m = max(x, axes=[1])
  e = exp(x - broadcast(m, [false, true]))
  s = sum(e, axes=[1])
  out = e / broadcast(s, [false, true])
  output out
}""", {"M": 3, "N": 520}, 1),
    "layer_norm_like": ("""fusion f(x: f32[M, N], w: f32[N]) {
  mean = sum(x, axes=[1]) / 8
  d = x - broadcast(mean, [false, true])
  var = sum(d * d, axes=[1])
  out = d * broadcast(var, [false, true]) * broadcast(w, [true, false])
  output out, mean
}""", {"M": 3, "N": 8}, 1),
    "outputs_of_different_ranks": ("""fusion f(x: f32[M, N], b: f32[N]) {
  y = x + broadcast(b, [true, false])
  z = b * 3
  output y, z
}""", {"M": 3, "N": 40}, 2),
    "matmul_epilogue": ("""fusion f(A: f16[K, M], B: f16[K, N], bias: f32[N]) {
  acc = matmul(A, B, layout=NT)
  out = cast(relu(acc + broadcast(bias, [true, false])), f16)
  output out
}""", {"M": 20, "N": 12, "K": 37}, 1),
}


def inputs_for(fusion, sizes, rng):
    out = {}
    for tv in fusion.inputs:
        shape = [e if isinstance(e, int) else sizes[str(e)] for e in tv.shape]
        out[tv.name] = rng.integers(-4, 5, shape).astype(tv.dtype.numpy)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_unscheduled_fusion_runs_like_the_reference(case):
    text, sizes, kernels = CASES[case]
    fusion = fuserir.parse(text)
    exe = codegen.compile(fusion, backend="interp")
    assert len(exe.kernels) == kernels, [k.name for k in exe.kernels]
    data = inputs_for(fusion, sizes, np.random.default_rng(7))
    got = exe.run(data)
    want = fuserir.evaluate(fusion, data)
    for name, value in want.items():
        np.testing.assert_allclose(got[name].astype(np.float64), value.astype(np.float64),
                                   rtol=1e-6, atol=1e-6, err_msg=name)


def test_user_fusion_is_not_modified_by_automatic_scheduling():
    fusion = fuserir.parse(CASES["softmax"][0])
    before = fuserir.print_fusion(fusion)
    codegen.compile(fusion, backend="interp")
    assert fuserir.print_fusion(fusion) == before and not fusion.trace


def test_inner_reduction_is_one_block_per_row_with_a_block_reduction():
    fusion = fuserir.parse(CASES["row_sum"][0])
    kernel = codegen.compile(fusion, backend="interp").kernels[0].kir
    assert kir.format_expr(kernel.launch.grid[0]) == "M"
    assert kernel.launch.block[0].value == 512
    assert any(isinstance(e, kir.ShuffleXor) for s in kir.walk(kernel.body)
               if isinstance(s, kir.Store) for e in kir.walk_expr(s.value))


def test_outer_reduction_spreads_rows_over_tidy_and_combines_through_shared_memory():
    fusion = fuserir.parse(CASES["column_sum"][0])
    kernel = codegen.compile(fusion, backend="interp").kernels[0].kir
    assert kir.format_expr(kernel.launch.grid[0]) == "ceildiv(N, 32)"
    assert [e.value for e in kernel.launch.block] == [32, 16, 1]
    (barrier,) = [s for s in kir.walk(kernel.body) if isinstance(s, kir.Barrier)]
    assert [(r.kind.value, r.buffers) for r in barrier.reasons] == [("RAW", ("s_scratch",))]


def test_softmax_reads_the_row_once_into_shared_memory():
    fusion = fuserir.parse(CASES["softmax"][0])
    kernel = codegen.compile(fusion, backend="interp").kernels[0].kir
    shared = [s.buffer.name for s in kir.walk(kernel.body)
              if isinstance(s, kir.Allocate) and s.buffer.memory is kir.Memory.shared]
    assert shared == ["x_cache", "m_scratch", "s_scratch"]
    global_reads = [e for s in kir.walk(kernel.body) if isinstance(s, kir.Store)
                    for e in kir.walk_expr(s.value)
                    if isinstance(e, kir.Load) and e.buffer.name == "x"]
    assert len(global_reads) == 1


def test_pointwise_accesses_are_16_byte_vectors_a_warp_apart():
    """Each thread loads one 16-byte vector of each input and stores one of the output
    (a warp: 32 consecutive vectors of a row), computing the 4 elements in an unrolled
    loop; blocks of 32 x 4 threads."""
    fusion = fuserir.parse(CASES["add"][0])
    kernel = codegen.compile(fusion, backend="interp").kernels[0].kir
    vectors = [s for s in kir.walk(kernel.body) if isinstance(s, kir.Store) and s.width != 1]
    assert sorted((s.buffer.name, s.value.buffer.name, s.width) for s in vectors) == [
        ("a_cache", "a", 4), ("b_cache", "b", 4), ("out", "out_cache", 4)]
    (loop,) = [s for s in kernel.body if isinstance(s, kir.ForLoop)]
    assert loop.kind == "unroll" and loop.extent.value == 4
    assert [d.value for d in kernel.launch.block] == [32, 4, 1]


@pytest.mark.parametrize("n", [700, 701, 6])
def test_pointwise_vectors_run_at_sizes_that_are_no_whole_number_of_them(n):
    """At 701 elements (and 6) the rows are no whole number of 4-element vectors: the
    executable runs the variant with element copies, and the result is the same."""
    fusion = fuserir.parse(CASES["add"][0])
    exe = codegen.compile(fusion, backend="interp")
    rng = np.random.default_rng(n)
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    np.testing.assert_array_equal(exe.run({"a": a, "b": b})["out"], a + b)


def test_a_fusion_that_already_has_a_schedule_is_not_rescheduled():
    fusion = fuserir.parse(CASES["add"][0] + "\nschedule f {\n  out.split(0, 64)\n}\n")
    with pytest.raises(ScheduleError, match="already has a schedule"):
        schedule_auto(fusion)


def test_any_fusion_without_a_schedule_compiles_and_runs():
    """Random fusions of every op (matmul, reductions, broadcasts, casts, where, literals,
    every dtype) with no schedule: automatic schedules (segmenting where they must) run
    them in the interpreter like the reference."""
    from hypothesis import HealthCheck, given, settings

    from conftest import STATS
    from test_roundtrip import random_definitions

    sizes = {"M": 3, "N": 5, "K": 4}

    @settings(max_examples=60, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(random_definitions())
    def run(fusion):
        exe = codegen.compile(fusion, backend="interp")
        rng = np.random.default_rng(0)
        data = {}
        for tv in fusion.inputs:
            shape = [e if isinstance(e, int) else sizes[str(e)] for e in tv.shape]
            data[tv.name] = (rng.integers(1, 4, shape) * rng.choice([-1, 1], shape)).astype(
                tv.dtype.numpy)
        got = exe.run(data)
        want = fuserir.evaluate(fusion, data)
        for name, value in want.items():
            np.testing.assert_allclose(got[name].astype(np.float64),
                                       value.astype(np.float64), rtol=2 ** -6, atol=1e-3,
                                       equal_nan=True, err_msg=fuserir.print_fusion(fusion))
        STATS["automatic schedules: fusions run"] += 1
        STATS["automatic schedules: kernels"] += len(exe.kernels)

    run()


ROTARY_LIKE = """fusion f(x: f32[R, D], c: f32[R, D]) {
  x1 = slice(x, [0, 0], [R, D / 2])
  x2 = slice(x, [0, D / 2], [R, D])
  out = x * c + cat([-x2, x1], dim=1)
  output out
}"""


def test_an_input_also_read_shifted_is_cached_for_its_direct_reader_only():
    """x is read at out's element by x * c and shifted by the cat of its halves: the
    vector cache serves the product only, the slices keep reading x element by element,
    and every size (a whole number of vectors or not) gives the reference's values."""
    fusion = fuserir.parse(ROTARY_LIKE)
    schedule_auto(fusion)
    text = fuserir.print_fusion(fusion)
    (product,) = [e.output for e in fusion.exprs if e.op == "mul"]
    assert f"x_cache = x.cache_after(local, consumers=[{product.name}])" in text
    assert "c_cache = c.cache_after(local)" in text
    assert fuserir.print_fusion(fuserir.parse(text)) == text
    exe = codegen.compile(fuserir.parse(ROTARY_LIKE), backend="interp")
    rng = np.random.default_rng(3)
    for shape in [(3, 256), (2, 260), (5, 6)]:
        data = {n: rng.standard_normal(shape).astype(np.float32) for n in ("x", "c")}
        np.testing.assert_array_equal(exe.run(data)["out"],
                                      fuserir.evaluate(fusion, data)["out"])


def test_a_bias_broadcast_over_rows_is_read_as_vectors_of_the_output_row():
    """b [N] broadcast to [M, N] is read at the output's column: one vector load of b per
    thread, like x's; the result matches at sizes that are and are not whole vectors."""
    text = """fusion f(x: bf16[M, N], b: bf16[N]) {
  y = relu(x + broadcast(b, [true, false]))
  output y
}"""
    fusion = fuserir.parse(text)
    exe = codegen.compile(fusion, backend="interp")
    vectors = [s for s in kir.walk(exe.kernels[0].kir.body)
               if isinstance(s, kir.Store) and s.width != 1]
    assert sorted((s.buffer.name, s.width) for s in vectors) == [
        ("b_cache", 8), ("x_cache", 8), ("y", 8)]
    rng = np.random.default_rng(5)
    for m, n in [(3, 256), (2, 260), (4, 5)]:
        data = {"x": rng.standard_normal((m, n)).astype(ml_dtypes.bfloat16),
                "b": rng.standard_normal(n).astype(ml_dtypes.bfloat16)}
        np.testing.assert_array_equal(exe.run(data)["y"].astype(np.float32),
                                      fuserir.evaluate(fusion, data)["y"].astype(np.float32))


def test_a_broadcast_over_some_of_several_row_axes_is_read_as_vectors():
    """c [S, D] broadcast over B of [B, S, D]: out's rows are B and S merged, c's cache
    runs in that merged loop with B a loop-only broadcast; every row of every batch
    reads c's row (the loop's index modulo S), none is skipped."""
    text = """fusion f(x: f32[B, S, D], c: f32[S, D]) {
  y = x * broadcast(c, [true, false, false])
  output y
}"""
    fusion = fuserir.parse(text)
    exe = codegen.compile(fusion, backend="interp")
    assert "reinterpret_cast<const u32x4*>(&c_[" in exe.kernels[0].source
    rng = np.random.default_rng(2)
    for shape in [(2, 5, 8), (3, 3, 256), (2, 5, 6)]:
        x = rng.standard_normal(shape).astype(np.float32)
        c = rng.standard_normal(shape[1:]).astype(np.float32)
        np.testing.assert_array_equal(exe.run({"x": x, "c": c})["y"], x * c)


@pytest.mark.parametrize("body, want", [("x + x", lambda x: x + x),
                                        ("x + x * 2", lambda x: x + x * 2)])
def test_an_input_read_twice_by_one_tensor_is_one_vector_cache(body, want):
    fusion = fuserir.parse(f"fusion f(x: f32[N]) {{ y = {body}  output y }}")
    exe = codegen.compile(fusion, backend="interp")
    assert exe.kernels[0].source.count("reinterpret_cast<const u32x4*>(&x_[") == 1
    x = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(exe.run({"x": x})["y"], want(x))


def test_a_broadcast_along_a_middle_axis_is_read_as_vectors():
    """v [B, D] broadcast along axis 1 of [B, S, D]: in out's merged rows (B x S) the axis
    v lacks is the inner part of the merge, a loop-only broadcast whose loop runs over S:
    lowering divides the row by S (not by the broadcast's own extent of 1), so v gets a
    vector cache like x, and every element is right."""
    text = """fusion f(x: f32[B, S, D], v: f32[B, D]) {
  y = x + broadcast(v, [false, true, false])
  output y
}"""
    fusion = fuserir.parse(text)
    exe = codegen.compile(fusion, backend="interp")
    source = exe.kernels[0].source
    assert "v_cache" in source and "x_cache" in source
    rng = np.random.default_rng(6)
    for b, s, d in ((2, 3, 128), (3, 5, 256)):
        x = rng.standard_normal((b, s, d)).astype(np.float32)
        v = rng.standard_normal((b, d)).astype(np.float32)
        np.testing.assert_array_equal(exe.run({"x": x, "v": v})["y"], x + v[:, None, :])




# -- segmentation: kernels grown output cone by output cone --------------------------------------

def test_two_column_sums_of_one_product_compute_it_in_their_kernel():
    """dw and db of a layer norm's backward read the same cast of dy: each sum's loop nest
    computes it (no buffer of a row per thread), in one kernel."""
    text = """fusion f(dy: bf16[M, N], x: bf16[M, N], rstd: f32[M, 1]) {
  dyf = cast(dy, f32)
  dw = sum(dyf * (cast(x, f32) * rstd), axes=[0])
  db = sum(dyf, axes=[0])
  output dw, db
}"""
    exe = codegen.compile(fuserir.parse(text), backend="interp")
    assert len(exe.kernels) == 1
    rng = np.random.default_rng(3)
    dy = rng.standard_normal((37, 70)).astype(ml_dtypes.bfloat16)
    x = rng.standard_normal((37, 70)).astype(ml_dtypes.bfloat16)
    rstd = rng.random((37, 1)).astype(np.float32)
    out = exe.run({"dy": dy, "x": x, "rstd": rstd})
    dy64 = dy.astype(np.float64)
    np.testing.assert_allclose(out["dw"], (dy64 * x.astype(np.float64) * rstd).sum(0),
                               rtol=1e-5)
    np.testing.assert_allclose(out["db"], dy64.sum(0), rtol=1e-5)


def test_outputs_reducing_different_axes_each_get_a_kernel_that_recomputes_what_they_share():
    """A row normalization and a column sum of the same centred input: two kernels; the
    second reads the inputs and the first's row sums (one value a row), and recomputes
    the centred row, never stored."""
    text = """fusion f(x: f32[M, N], w: f32[N]) {
  c = x - broadcast(mean(x, axes=[1]), [false, true])
  y = c * rsqrt(mean(c * c, axes=[1], keepdim=true) + 0.001)
  cw = sum(c * broadcast(w, [true, false]), axes=[0])
  output y, cw
}"""
    exe = codegen.compile(fuserir.parse(text), backend="interp")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((9, 130)).astype(np.float32)
    w = rng.standard_normal(130).astype(np.float32)
    out = exe.run({"x": x, "w": w})
    reads = [{p.buffer.name: len(p.sizes) for p in k.kir.tensor_params if not p.is_output}
             for k in exe.kernels]
    assert len(reads) == 2 and reads[0] == {"x": 2}
    (sums,) = set(reads[1]) - {"x", "w"}
    assert reads[1] == {"x": 2, "w": 1, sums: 1}
    x64 = x.astype(np.float64)
    c = x64 - x64.mean(1, keepdims=True)
    np.testing.assert_allclose(out["y"], c / np.sqrt((c * c).mean(1, keepdims=True) + 1e-3),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["cw"], (c * w).sum(0), rtol=1e-4, atol=1e-5)


# -- rows split over CTAs where they are too few for the SMs ------------------------------------

def eight_sms():
    """An H200 of 8 SMs: few enough CTAs for the interpreter."""
    from fuserir.device import H200
    return H200.with_(sms=8)


@pytest.mark.parametrize("text, shape, splits", [
    ("s = sum(x, axes=[1])\n  output s", (2, 70000), 2),          # 8 // 2 = 4, 70000 // 2^15
    ("s = sum(x, axes=[0, 1])\n  output s", (3, 40000), 3),       # no rows: 120000 // 2^15
    ("s = sum(x * 2, axes=[1])\n  out = cast(s * 0.5, f16)\n  output s, out", (3, 99000),
     2),                                                          # 8 // 3 = 2
])
def test_an_inner_reduction_of_few_long_rows_splits_each_over_ctas(text, shape, splits):
    from fuserir.scheduler.auto import explain
    from fuserir.scheduler.reduction_plans import reduction_plan
    fusion = fuserir.parse(f"fusion f(x: f32[M, N]) {{\n  {text}\n}}")
    sizes = {"M": shape[0], "N": shape[1]}
    assert reduction_plan(fusion, sizes, eight_sms()).splits == splits
    assert explain(fusion, sizes, eight_sms()) == [
        f"the reduction scheduler: each row split over {splits} CTAs (too few rows to fill "
        "the SMs), combined by a parallel grid reduction"]
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    exe = codegen.compile(fusion, backend="interp", device=eight_sms())
    (kernel,) = exe.kernels_for({"x": x})
    assert kernel.kir.launch.grid[2].value == splits
    got, want = exe.run({"x": x}), fuserir.evaluate(fusion, {"x": x})
    for name in want:
        np.testing.assert_allclose(got[name].astype(np.float64), want[name].astype(np.float64),
                                   rtol=1e-5, atol=1e-3, err_msg=name)


@pytest.mark.parametrize("text, shape", [
    ("s = sum(x, axes=[1])", (8, 70000)),       # a row per SM already
    ("s = sum(x, axes=[1])", (2, 30000)),       # rows shorter than one CTA's share
    ("s = sum(x, axes=[0])", (2, 70000)),       # an outer reduction
    ("s = x - broadcast(max(x, axes=[1]), [false, true])", (2, 70000)),   # a normalization
    ("s = sum(x, axes=[1])\n  m = min(x, axes=[1])\n  output m", (2, 70000)),  # two
    ("s = sum(x, axes=[1])\n  y = x * 2\n  output y", (2, 70000)),  # y does not read s
])
def test_rows_are_not_split_where_the_sms_are_busy_or_the_rows_short(text, shape):
    from fuserir.scheduler.auto import explain
    from fuserir.scheduler.reduction_plans import reduction_plan
    fusion = fuserir.parse(f"fusion f(x: f32[M, N]) {{\n  {text}\n  output s\n}}")
    sizes = {"M": shape[0], "N": shape[1]}
    assert reduction_plan(fusion, sizes, eight_sms()).splits == 1
    assert explain(fusion, sizes, eight_sms())[0] == \
        "the reduction scheduler (no row split over CTAs at these sizes)"


# -- short rows: a warp a row -------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "p = softmax(x, dim=1)\n  output p",
    "s = sum(x, axes=[1])\n  output s",
    "v, m = var_mean(x, axes=[1], keepdim=true)\n  y = (x - m) * rsqrt(v + 0.001)\n"
    "  output y",
])
@pytest.mark.parametrize("rows, length", [(37, 300), (8, 1024), (3, 33)])
def test_short_rows_take_a_warp_each_and_reduce_by_shuffles_alone(text, rows, length):
    """Rows of at most 1024 elements: blocks of 8 warps, a warp a row; its shuffles
    combine the row, with no shared scratch and no barrier for the reduction."""
    from fuserir.scheduler.auto import explain
    fusion = fuserir.parse(f"fusion f(x: f32[M, N]) {{\n  {text}\n}}")
    sizes = {"M": rows, "N": length}
    assert explain(fusion, sizes) == ["the reduction scheduler: a warp a row, 8 rows a block "
                                      "(rows of at most 1024 elements)"]
    x = np.random.default_rng(rows).standard_normal((rows, length)).astype(np.float32)
    exe = codegen.compile(fusion, backend="interp")
    (kernel,) = exe.kernels_for({"x": x})
    assert [b.value for b in kernel.kir.launch.block] == [32, 8, 1]
    assert "_scratch" not in kernel.source and "__syncthreads" not in kernel.source
    got, want = exe.run({"x": x}), fuserir.evaluate(fusion, {"x": x})
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_rows_longer_than_1024_keep_a_block_each():
    from fuserir.scheduler.auto import explain
    from fuserir.scheduler.reduction_plans import reduction_plan
    fusion = fuserir.parse("fusion f(x: f32[M, N]) {\n  p = softmax(x, dim=1)\n"
                           "  output p\n}")
    assert not reduction_plan(fusion, {"M": 64, "N": 1025}).warp_rows
    assert not reduction_plan(fusion, {"M": 64}).warp_rows      # N unknown: large
    assert explain(fusion, {"M": 64, "N": 1025}) == [
        "the reduction scheduler (no row split over CTAs at these sizes)"]


def test_an_input_of_one_value_a_row_is_read_as_it_is_not_cached_in_shared_memory():
    """A normalization caches the inputs several loop nests read in shared memory, but
    not one of one value a row (a saved mean): its copy would need a barrier."""
    text = """fusion f(x: f32[M, N], mean: f32[M, 1]) {
  c = x - mean
  y = c / broadcast(sum(c * c, axes=[1]), [false, true])
  output y
}"""
    fusion = fuserir.parse(text)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((5, 300)).astype(np.float32)
    mean = rng.standard_normal((5, 1)).astype(np.float32)
    exe = codegen.compile(fusion, backend="interp")
    (kernel,) = exe.kernels_for({"x": x, "mean": mean})
    shared = {s.buffer.name for s in kir.walk(kernel.kir.body)
              if isinstance(s, kir.Allocate) and s.buffer.memory is kir.Memory.shared}
    assert shared == {"x_cache"}
    assert not any(isinstance(s, kir.Barrier) for s in kir.walk(kernel.kir.body))
    c = x.astype(np.float64) - mean
    np.testing.assert_allclose(exe.run({"x": x, "mean": mean})["y"],
                               c / (c * c).sum(1, keepdims=True), rtol=1e-5)


# -- rows as vectors ---------------------------------------------------------------------------

def _vector_widths(kernel):
    """{(destination buffer, source buffer): access widths} of the kernel's copies."""
    widths = {}
    for s in kir.walk(kernel.kir.body):
        if isinstance(s, kir.Store) and isinstance(s.value, kir.Load):
            key = (s.buffer.name, s.value.buffer.name)
            widths.setdefault(key, set()).add(s.width)
    return widths


@pytest.mark.parametrize("length, width", [(1024, 8), (1000, 8), (1002, 2)])
def test_a_normalization_moves_its_rows_as_vectors(length, width):
    """A bf16 layer norm: x copied into shared memory 16 bytes a lane and out to each
    reader's registers 16 bytes a lane (no two-byte shared reads, which conflict four
    ways), w and b read and y written as vectors; rows of 1002 elements (no whole number
    of 16-byte vectors) take the variant of 4-byte accesses, with the same results."""
    fusion = fuserir.parse((EXAMPLES / "layer_norm.fz").read_text())
    rng = np.random.default_rng(length)
    bf16 = ml_dtypes.bfloat16
    inputs = {"x": rng.standard_normal((9, length)).astype(bf16),
              "w": rng.uniform(0.5, 1.5, length).astype(bf16),
              "b": rng.standard_normal(length).astype(bf16)}
    exe = codegen.compile(fusion, backend="interp")
    (kernel,) = exe.kernels_for(inputs)
    widths = _vector_widths(kernel)
    assert widths[("x_cache", "x")] == {width}
    readers = [key for key in widths if key[1] == "x_cache"]
    assert len(readers) == 3 and all(widths[key] == {width} for key in readers)
    weights = [key for key in widths if key[1] in ("w", "b")]
    assert len(weights) == 2 and all(widths[key] == {width} for key in weights)
    assert widths[("y", "y_cache")] == {width}
    got, want = exe.run(inputs), fuserir.evaluate(fusion, inputs)
    for name, rtol in (("y", 2 ** -7), ("mean", 1e-5), ("rstd", 1e-5)):
        np.testing.assert_allclose(np.asarray(got[name], np.float64),
                                   want[name].astype(np.float64), rtol=rtol, atol=1e-5,
                                   err_msg=name)


def test_a_row_sum_reads_its_rows_as_vectors_and_merged_axes_element_by_element():
    rows = fuserir.parse("fusion f(x: f32[M, N]) {\n  s = sum(x, axes=[1])\n  output s\n}")
    both = fuserir.parse("fusion f(x: f32[M, N]) {\n  s = sum(x, axes=[0, 1])\n"
                         "  output s\n}")
    x = np.random.default_rng(3).standard_normal((6, 4096)).astype(np.float32)
    for fusion, width in ((rows, 4), (both, 1)):
        exe = codegen.compile(fusion, backend="interp")
        (kernel,) = exe.kernels_for({"x": x})
        reads = set().union(*(w for (_, src), w in _vector_widths(kernel).items()
                              if src == "x"))
        assert reads == ({width} if width > 1 else set())   # (summed where it is read)
        np.testing.assert_allclose(exe.run({"x": x})["s"],
                                   x.astype(np.float64).sum(axis=(1,) if width > 1 else None),
                                   rtol=1e-5)


def test_a_column_sum_has_8_rows_a_thread_in_flight():
    """An outer reduction's row loop is unrolled by 8: each thread's loads of 8 rows are
    in flight together (one, before: about 1 KB a block of bf16)."""
    fusion = fuserir.parse("fusion c(x: bf16[R, D]) {\n  y = sum(x, axes=[0], dtype=f32)\n"
                           "  output y\n}")
    x = np.random.default_rng(5).standard_normal((700, 96)).astype(ml_dtypes.bfloat16)
    exe = codegen.compile(fusion, backend="interp")
    first = exe.kernels_for({"x": x})[0]         # (the CTAs' partial sums, then their sum)
    unrolled = [s for s in kir.walk(first.kir.body) if isinstance(s, kir.ForLoop)
                and s.kind == "unroll" and isinstance(s.extent, kir.Const)
                and s.extent.value == 8 and any(
                    isinstance(e, kir.Load) and e.buffer.name == "x"
                    for t in kir.walk(s.body) for e in kir.expressions(t)
                    for e in kir.walk_expr(e))]
    assert unrolled
    np.testing.assert_allclose(exe.run({"x": x})["y"], x.astype(np.float64).sum(0),
                               rtol=1e-5, atol=1e-4)


# -- few columns: each strip of columns split over CTAs -----------------------------------------

COLUMN_SUMS = """fusion f(dy: f32[R, D], x: f32[R, D]) {
  dw = sum(dy * x, axes=[0])
  db = sum(dy, axes=[0])
  output dw, db
}"""


def test_few_column_strips_split_their_rows_over_ctas_and_sum_the_partials_after():
    """A weight gradient's column sums over many rows: too few strips of 32 columns to
    give every SM four blocks, so each strip's rows are split over CTAs writing f32
    partial sums (both sums' partials one kernel), which a second kernel adds in order."""
    from fuserir.scheduler.auto import explain, schedule_key
    from fuserir.scheduler.reduction_plans import reduction_plan
    fusion = fuserir.parse(COLUMN_SUMS)
    # 32 strips on 132 SMs: 17 CTAs a strip give 4 blocks an SM
    assert reduction_plan(fusion, {"R": 32768, "D": 1024}).column_splits == 17
    assert explain(fusion, {"R": 32768, "D": 1024}) == [
        "the reduction scheduler: each strip of 32 columns split over 17 CTAs (too few "
        "strips to fill the SMs), their f32 partial sums added by a second kernel"]
    # enough strips, or rows too few to share: one CTA a strip
    assert reduction_plan(fusion, {"R": 32768, "D": 32768}).column_splits == 1
    assert reduction_plan(fusion, {"R": 300, "D": 64}).column_splits == 1
    assert schedule_key(fusion, {"R": 32768, "D": 1024}) != \
        schedule_key(fusion, {"R": 8192, "D": 4096})
    rng = np.random.default_rng(17)
    inputs = {n: rng.standard_normal((1000, 40)).astype(np.float32) for n in ("dy", "x")}
    exe = codegen.compile(fusion, backend="interp")
    kernels = exe.kernels_for(inputs)
    assert len(kernels) == 2 and kernels[0].kir.launch.grid[1].value > 1
    got = exe.run(inputs)
    dy, x = (inputs[n].astype(np.float64) for n in ("dy", "x"))
    np.testing.assert_allclose(got["dw"], (dy * x).sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["db"], dy.sum(0), rtol=1e-5, atol=1e-5)


def test_the_key_of_a_segmented_fusion_tells_its_reductions_size_classes_apart():
    """A fusion no one plan fits is segmented, each reduction planned in its own kernel:
    its schedule key changes where one of those plans would (a row for a warp or a block,
    column strips split or not), so one size class never reuses another's kernels."""
    from fuserir.scheduler.auto import schedule_key
    fusion = fuserir.parse((EXAMPLES / "layer_norm_backward.fz").read_text())
    keys = {schedule_key(fusion, {"M": m, "N": n})[0]
            for m, n in ((32768, 1024), (8192, 4096), (8192, 2048), (64, 4096))}
    assert len(keys) == 4


def test_few_long_rows_take_at_most_the_splits_the_cross_cta_proof_enumerates():
    """Eight rows of 2^25 on 132 SMs would take 16 CTAs a row; the proof of the parallel
    grid reduction enumerates a constant split factor's interleavings within its bound
    up to 8: the plan takes 8, and its kernel is built, proved."""
    from fuserir.device import H200
    from fuserir.scheduler.reduction_plans import GRID_SPLITS_MAX, reduction_plan
    fusion = fuserir.parse("fusion f(x: f32[M, N]) {\n  s = sum(x, axes=[1])\n"
                           "  output s\n}")
    sizes = {"M": 8, "N": 1 << 25}
    assert reduction_plan(fusion, sizes, H200).splits == GRID_SPLITS_MAX == 8
    (kernels,) = codegen.compile(fusion, backend="interp", device=H200).precompile(sizes)
    assert kernels[0].kir.launch.grid[2].value == 8


def test_a_weight_cast_before_its_broadcast_keeps_the_normalization_one_kernel():
    """A layer norm backward as users write it, the weight cast before its broadcast over
    the rows: the scheduler moves the cast after the broadcast (the same values), so the
    cast weight is of the full shape and dx is one kernel, not one per row mean."""
    text = """fusion f(dy: bf16[R, D], x: bf16[R, D], w: bf16[D], mean: f32[R, 1],
                       rstd: f32[R, 1]) {
  xhat = (cast(x, f32) - mean) * rstd
  g = cast(dy, f32) * broadcast(cast(w, f32), [true, false])
  dx = cast(rstd * (g - mean(g, axes=[1], keepdim=true)
                    - xhat * mean(g * xhat, axes=[1], keepdim=true)), bf16)
  db = cast(sum(cast(dy, f32), axes=[0]), bf16)
  output dx, db
}"""
    fusion = fuserir.parse(text)
    rng = np.random.default_rng(21)
    bf16 = ml_dtypes.bfloat16
    inputs = {"dy": rng.standard_normal((6, 300)).astype(bf16),
              "x": rng.standard_normal((6, 300)).astype(bf16),
              "w": rng.standard_normal(300).astype(bf16),
              "mean": rng.standard_normal((6, 1)).astype(np.float32),
              "rstd": rng.uniform(0.5, 2, (6, 1)).astype(np.float32)}
    exe = codegen.compile(fusion, backend="interp")
    assert len(exe.kernels_for(inputs)) == 2          # dx along the rows; db down them
    got, want = exe.run(inputs), fuserir.evaluate(fusion, inputs)
    for name in ("dx", "db"):
        np.testing.assert_allclose(got[name].astype(np.float64),
                                   want[name].astype(np.float64), rtol=2 ** -7, atol=1e-2,
                                   err_msg=name)
