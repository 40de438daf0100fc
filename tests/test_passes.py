"""Unit tests of each lowering pass: a small scheduled fusion, the kernel IR right after
the pass (expected text, as `fuserir dump --after PASS` prints it), and structural checks.

TINY: a cache of x in shared memory, computed at y's outer loop with its own 16-thread
split, read by y's 32-thread split: different thread mappings, so one barrier, placed
between the two loop nests (as far out as it can go). ROWSUM: a row sum whose inner
reduction axis is bound to TIDx, so a block reduction through warp shuffles and a shared
scratch.
"""

import numpy as np
import pytest

import codegen
import fuserir
from fuserir.errors import ScheduleError
from lowering import kir
from lowering.pipeline import PASS_NAMES, LoweringError, lower

TINY = """
fusion tiny(x: f32[M, N], b: f32[N]) {
  y = x * 2 + broadcast(b, [true, false])
  output y
}
schedule tiny {
  xs = x.cache_after(shared)
  y.split(1, 32)
  y.parallelize(0, BIDx)
  y.parallelize(2, TIDx)
  xs.compute_at(y, 1)
  xs.split(1, 16)
  xs.parallelize(2, TIDx)
}
"""

ROWSUM = """
fusion rowsum(x: f32[M, N]) {
  s = sum(x, axes=[1])
  output s
}
schedule rowsum {
  s.split(1, 64)
  s.parallelize(0, BIDx)
  s.parallelize(2, TIDx)
}
"""


def after(text, name):
    kernel, dumps = lower(fuserir.parse(text), dump_after=[name], stop_after=name)
    return kernel, dumps[name]


def test_pipeline_lists_every_pass_in_order():
    assert PASS_NAMES == ("narrow_vectors", "inline_defaults", "validate", "loop_nests",
                          "allocation", "indexing", "unroll_register_loops",
                          "block_reductions", "grid_reductions", "predicates",
                          "circular_buffer", "reuse_shared", "insert_syncs", "verify_hazards")


def test_inline_defaults_places_unplaced_intermediates_only():
    kernel, _ = after(TINY, "inline_defaults")
    fusion = fuserir.parse(TINY)
    assert fusion.tensor("xs").compute_at_pos == 1
    lowered, _ = lower(fusion, stop_after="inline_defaults")
    assert lowered is None    # no kernel yet: the pass works on the fusion


def test_loop_nests():
    _, text = after(TINY, "loop_nests")
    assert text == """kernel tiny(f32 x[M, N], f32 b[N], f32 y[M, N], i32 M, i32 N)
  grid=(M, 1, 1) block=(32, 1, 1) index=i32
   S1  for i0 in 0..ceildiv(N, 16)
   S2    compute xs = set(x)
   S3  for i1 in 0..ceildiv(N, 32)
   S4    compute t3 = broadcast(b, flags=[true, false])
   S5    compute t2 = mul(xs, 2.0)
   S6    compute y = add(t2, t3)
"""


def test_allocation():
    _, text = after(TINY, "allocation")
    assert text == """kernel tiny(f32 x[M, N], f32 b[N], f32 y[M, N], i32 M, i32 N)
  grid=(M, 1, 1) block=(32, 1, 1) index=i32
   S1  alloc local f32 t3[1]
   S2  alloc shared f32 xs[(ceildiv(N, 16) * 16)] @ byte 0
   S3  alloc local f32 t2[1]
   S4  for i0 in 0..ceildiv(N, 16)
   S5    compute xs = set(x)
   S6  for i1 in 0..ceildiv(N, 32)
   S7    compute t3 = broadcast(b, flags=[true, false])
   S8    compute t2 = mul(xs, 2.0)
   S9    compute y = add(t2, t3)
"""


def test_indexing():
    _, text = after(TINY, "indexing")
    assert text == """kernel tiny(f32 x[M, N], f32 b[N], f32 y[M, N], i32 M, i32 N)
  grid=(M, 1, 1) block=(32, 1, 1) index=i32
   S1  alloc local f32 t3[1]
   S2  alloc shared f32 xs[(ceildiv(N, 16) * 16)] @ byte 0
   S3  alloc local f32 t2[1]
   S4  for i0 in 0..ceildiv(N, 16)
   S5    xs[((i0 * 16) + threadIdx.x)] = x[((blockIdx.x * x_stride0) + (((i0 * 16) + threadIdx.x) * x_stride1))]
   S6  for i1 in 0..ceildiv(N, 32)
   S7    t3[0] = b[(((i1 * 32) + threadIdx.x) * b_stride0)]
   S8    t2[0] = (xs[((((i1 * 2) + (threadIdx.x / 16)) * 16) + (threadIdx.x % 16))] * 2.0)
   S9    y[((blockIdx.x * y_stride0) + (((i1 * 32) + threadIdx.x) * y_stride1))] = (t2[0] + t3[0])
"""


def test_predicates():
    _, text = after(TINY, "predicates")
    assert text == """kernel tiny(f32 x[M, N], f32 b[N], f32 y[M, N], i32 M, i32 N)
  grid=(M, 1, 1) block=(32, 1, 1) index=i32
   S1  alloc local f32 t3[1]
   S2  alloc shared f32 xs[(ceildiv(N, 16) * 16)] @ byte 0
   S3  alloc local f32 t2[1]
   S4  for i0 in 0..ceildiv(N, 16)
   S5    if ((((i0 * 16) + threadIdx.x) < N) && (threadIdx.x < 16))
   S6      xs[((i0 * 16) + threadIdx.x)] = x[((blockIdx.x * x_stride0) + (((i0 * 16) + threadIdx.x) * x_stride1))]
   S7  for i1 in 0..ceildiv(N, 32)
   S8    if (((i1 * 32) + threadIdx.x) < N)
   S9      t3[0] = b[(((i1 * 32) + threadIdx.x) * b_stride0)]
  S10    if (((i1 * 32) + threadIdx.x) < N)
  S11      t2[0] = (xs[((((i1 * 2) + (threadIdx.x / 16)) * 16) + (threadIdx.x % 16))] * 2.0)
  S12    if (((i1 * 32) + threadIdx.x) < N)
  S13      y[((blockIdx.x * y_stride0) + (((i1 * 32) + threadIdx.x) * y_stride1))] = (t2[0] + t3[0])
"""


def test_insert_syncs_places_one_barrier_between_the_loop_nests():
    _, text = after(TINY, "insert_syncs")
    assert text == """kernel tiny(f32 x[M, N], f32 b[N], f32 y[M, N], i32 M, i32 N)
  grid=(M, 1, 1) block=(32, 1, 1) index=i32
   S1  alloc local f32 t3[1]
   S2  alloc shared f32 xs[(ceildiv(N, 16) * 16)] @ byte 0
   S3  alloc local f32 t2[1]
   S4  for i0 in 0..ceildiv(N, 16)
   S5    if ((((i0 * 16) + threadIdx.x) < N) && (threadIdx.x < 16))
   S6      xs[((i0 * 16) + threadIdx.x)] = x[((blockIdx.x * x_stride0) + (((i0 * 16) + threadIdx.x) * x_stride1))]
   S7  __syncthreads() [sync1]  // RAW on xs: S6 -> S12
   S8  for i1 in 0..ceildiv(N, 32)
   S9    if (((i1 * 32) + threadIdx.x) < N)
  S10      t3[0] = b[(((i1 * 32) + threadIdx.x) * b_stride0)]
  S11    if (((i1 * 32) + threadIdx.x) < N)
  S12      t2[0] = (xs[((((i1 * 2) + (threadIdx.x / 16)) * 16) + (threadIdx.x % 16))] * 2.0)
  S13    if (((i1 * 32) + threadIdx.x) < N)
  S14      y[((blockIdx.x * y_stride0) + (((i1 * 32) + threadIdx.x) * y_stride1))] = (t2[0] + t3[0])
"""


def test_reduction_loop_nests():
    _, text = after(ROWSUM, "loop_nests")
    assert text == """kernel rowsum(f32 x[M, N], f32 s[M], i32 M, i32 N)
  grid=(M, 1, 1) block=(64, 1, 1) index=i32
   S1  init s = sum(x, axes=[1])
   S2  for i0 in 0..ceildiv(N, 64)
   S3    accumulate s = sum(x, axes=[1])
   S4  block_reduce s = sum(x, axes=[1])
   S5  final s = sum(x, axes=[1])
"""


def test_block_reductions():
    _, text = after(ROWSUM, "block_reductions")
    assert text == """kernel rowsum(f32 x[M, N], f32 s[M], i32 M, i32 N)
  grid=(M, 1, 1) block=(64, 1, 1) index=i32
   S1  alloc local f32 s_acc[1]
   S2  alloc shared f32 s_scratch[32] @ byte 0
   S3  s_acc[0] = 0.0
   S4  for i0 in 0..ceildiv(N, 64)
   S5    s_acc[0] = (s_acc[0] + x[((blockIdx.x * x_stride0) + (((i0 * 64) + threadIdx.x) * x_stride1))])
   S6  // block reduction of s over threadIdx.x
   S7  s_acc[0] = (s_acc[0] + shfl_xor(s_acc[0], 16))
   S8  s_acc[0] = (s_acc[0] + shfl_xor(s_acc[0], 8))
   S9  s_acc[0] = (s_acc[0] + shfl_xor(s_acc[0], 4))
  S10  s_acc[0] = (s_acc[0] + shfl_xor(s_acc[0], 2))
  S11  s_acc[0] = (s_acc[0] + shfl_xor(s_acc[0], 1))
  S12  if ((threadIdx.x % 32) == 0)
  S13    s_scratch[((((threadIdx.z * blockDim.y) + threadIdx.y) * (blockDim.x / 32)) + (threadIdx.x / 32))] = s_acc[0]
  S14  s_acc[0] = 0.0
  S15  for w_s in 0..(blockDim.x / 32)
  S16    s_acc[0] = (s_acc[0] + s_scratch[((((threadIdx.z * blockDim.y) + threadIdx.y) * (blockDim.x / 32)) + w_s)])
  S17  s[(blockIdx.x * s_stride0)] = s_acc[0]
"""


def test_block_reduction_barrier_goes_before_the_gather_loop():
    _, text = after(ROWSUM, "insert_syncs")
    assert text == """kernel rowsum(f32 x[M, N], f32 s[M], i32 M, i32 N)
  grid=(M, 1, 1) block=(64, 1, 1) index=i32
   S1  alloc local f32 s_acc[1]
   S2  alloc shared f32 s_scratch[32] @ byte 0
   S3  s_acc[0] = 0.0
   S4  for i0 in 0..ceildiv(N, 64)
   S5    if (((i0 * 64) + threadIdx.x) < N)
   S6      s_acc[0] = (s_acc[0] + x[((blockIdx.x * x_stride0) + (((i0 * 64) + threadIdx.x) * x_stride1))])
   S7  // block reduction of s over threadIdx.x
   S8  s_acc[0] = (s_acc[0] + shfl_xor(s_acc[0], 16))
   S9  s_acc[0] = (s_acc[0] + shfl_xor(s_acc[0], 8))
  S10  s_acc[0] = (s_acc[0] + shfl_xor(s_acc[0], 4))
  S11  s_acc[0] = (s_acc[0] + shfl_xor(s_acc[0], 2))
  S12  s_acc[0] = (s_acc[0] + shfl_xor(s_acc[0], 1))
  S13  if ((threadIdx.x % 32) == 0)
  S14    s_scratch[((((threadIdx.z * blockDim.y) + threadIdx.y) * (blockDim.x / 32)) + (threadIdx.x / 32))] = s_acc[0]
  S15  s_acc[0] = 0.0
  S16  __syncthreads() [sync1]  // RAW on s_scratch: S14 -> S18
  S17  for w_s in 0..(blockDim.x / 32)
  S18    s_acc[0] = (s_acc[0] + s_scratch[((((threadIdx.z * blockDim.y) + threadIdx.y) * (blockDim.x / 32)) + w_s)])
  S19  if (threadIdx.x == 0)
  S20    s[(blockIdx.x * s_stride0)] = s_acc[0]
"""


def stores(kernel):
    return [s for s in kir.walk(kernel.body) if isinstance(s, kir.Store)]


def guarded(kernel):
    """{store buffer name: condition text} for stores under an if."""
    out = {}
    for s in kir.walk(kernel.body):
        if isinstance(s, kir.IfThenElse):
            for t in s.then_body:
                if isinstance(t, kir.Store):
                    out.setdefault(t.buffer.name, []).append(kir.format_expr(s.cond))
    return out


def test_no_predicate_where_splits_divide_and_extents_match():
    kernel, _ = after("""
fusion f(x: f32[8, 64]) {
  y = relu(x)
  output y
}
schedule f {
  y.split(1, 32)
  y.parallelize(0, BIDx)
  y.parallelize(2, TIDx)
}""", "predicates")
    assert guarded(kernel) == {}


def test_thread_extent_and_redundant_write_predicates():
    kernel, _ = after("""
fusion f(x: f32[8, 64], z: f32[8, 16]) {
  y = relu(x)
  w = neg(z)
  output y, w
}
schedule f {
  y.parallelize(0, BIDx)
  y.parallelize(1, TIDx)
  w.parallelize(1, TIDx)
}""", "predicates")
    assert guarded(kernel) == {"w": ["((threadIdx.x < 16) && (blockIdx.x == 0))"]}


def run_interp(text, inputs):
    fusion = fuserir.parse(text)
    exe = codegen.compile(fusion, backend="interp")
    got = exe.run(inputs)
    want = fuserir.evaluate(fusion, inputs)
    return exe, got, want


def test_block_reductions_with_several_rows_per_block_match_reference():
    text = """
fusion stats(x: f32[M, N]) {
  s = sum(x, axes=[1])
  m = max(x, axes=[1])
  output s, m
}
schedule stats {
  s.split(0, 2)
  s.split(2, 64)
  s.parallelize(0, BIDx)
  s.parallelize(1, TIDy)
  s.parallelize(3, TIDx)
  m.split(0, 2)
  m.split(2, 48)
  m.parallelize(0, BIDx)
  m.parallelize(1, TIDy)
  m.parallelize(3, TIDx)
}"""
    x = np.random.default_rng(3).integers(-20, 20, (5, 150)).astype(np.float32)
    exe, got, want = run_interp(text, {"x": x})
    np.testing.assert_array_equal(got["s"], want["s"])
    np.testing.assert_array_equal(got["m"], want["m"])
    assert exe.kernels[0].kir.launch.block[0].value == 64   # rounded to whole warps


def row_sums_by_threads(threads, n):
    """Row sums of integers (exact in f32) over M x n, a row's axis split by `threads`
    bound to TIDx and its rows a serial loop: (executable, kernel IR statements)."""
    text = f"""
fusion rows(x: f32[M, N]) {{
  s = sum(x, axes=[1])
  output s
}}
schedule rows {{
  s.split(1, {threads})
  s.parallelize(2, TIDx)
}}"""
    x = np.random.default_rng(4).integers(-20, 20, (3, n)).astype(np.float32)
    exe, got, want = run_interp(text, {"x": x})
    np.testing.assert_array_equal(got["s"], want["s"])
    return exe, list(kir.walk(exe.kernels[0].kir.body))


def test_block_reduction_inside_a_loop_needs_a_loop_carried_war():
    _, body = row_sums_by_threads(64, 150)
    reasons = [(r.kind.value, r.loop_carried) for s in body if isinstance(s, kir.Barrier)
               for r in s.reasons]
    assert reasons == [("RAW", False), ("WAR", True)]


def test_a_block_reduction_of_one_warp_is_its_shuffles_alone():
    """blockDim.x of 32: the shuffles leave the row's result in every lane; no scratch,
    no barrier (the rows loop above needs none either)."""
    exe, body = row_sums_by_threads(32, 70)
    assert not any(isinstance(s, kir.Barrier) for s in body)
    assert sum(isinstance(e, kir.ShuffleXor) for s in body if isinstance(s, kir.Store)
               for e in kir.walk_expr(s.value)) == 5
    assert "s_scratch" not in exe.kernels[0].source


@pytest.mark.parametrize("schedule, message", [
    ("s.parallelize(1, BIDy)", "s: reduction axis 1 is bound to BIDy; grid reductions need "
                               "rfactor (or mark it serial_grid_reduction() and bind BIDz)"),
    ("s.parallelize(1, TIDz)", "s: reduction axis 1 is bound to TIDz; block reductions are "
                               "supported over TIDx or TIDy"),
    ("s.split(1, 4)\n  s.parallelize(1, TIDy)\n  s.parallelize(2, TIDx)",
     "s: reduction axes are bound to TIDy and TIDx; a block reduction combines one thread "
     "index"),
    ("xc = x.cache_after(local)\n  xc.parallelize(1, TIDx)\n  xc.compute_at(s, 0)",
     "s reads xc, which lives in local memory with axis 1 bound to TIDx, but s does not "
     "bind the same axis to TIDx"),
    ("xc = x.cache_after(global)\n  xc.compute_at(s, 0)",
     "xc: a global intermediate ends a kernel, and lower() builds one kernel; compile the "
     "fusion with codegen.compile, which cuts it into a kernel per global intermediate, or "
     "keep the tensor in local or shared memory"),
])
def test_validate_refuses_unsupported_schedules(schedule, message):
    text = f"""
fusion f(x: f32[4, 8]) {{
  s = sum(x, axes=[1])
  output s
}}
schedule f {{
  {schedule}
}}"""
    with pytest.raises(ScheduleError) as refused:
        lower(fuserir.parse(text))
    assert message in str(refused.value)


def test_a_global_intermediate_lower_refuses_compiles_as_two_kernels():
    """What the refusal above advises works: codegen.compile cuts at the global tensor."""
    text = """
fusion f(x: f32[4, 8]) {
  s = sum(x, axes=[1])
  output s
}
schedule f {
  xc = x.cache_after(global)
  xc.compute_at(s, 0)
}"""
    exe = codegen.compile(fuserir.parse(text), backend="interp")
    assert len(exe.kernels) == 2
    x = np.random.default_rng(5).integers(-20, 20, (4, 8)).astype(np.float32)
    want = fuserir.evaluate(fuserir.parse(text), {"x": x})["s"]
    np.testing.assert_array_equal(exe.run({"x": x})["s"], want)


def test_local_buffer_with_a_symbolic_size_is_refused_with_advice():
    text = """
fusion f(x: f32[M, N]) {
  y = relu(x)
  output y
}
schedule f {
  xc = x.cache_after(local)
  xc.compute_at(y, 0)
}"""
    with pytest.raises(ScheduleError, match=r"xc: a local buffer needs a constant size, but "
                                            r"this one holds \(M \* N\) elements"):
        lower(fuserir.parse(text))


@pytest.mark.parametrize("kwargs, message", [
    ({"disable_passes": ("indexing",)}, "pass 'indexing' cannot be disabled"),
    ({"disable_passes": ("nope",)}, "unknown pass 'nope'"),
    ({"dump_after": ("nope",)}, "unknown pass 'nope'"),
])
def test_bad_pipeline_arguments(kwargs, message):
    with pytest.raises(LoweringError, match=message):
        lower(fuserir.parse(TINY), **kwargs)


def test_lowering_leaves_the_users_fusion_untouched():
    fusion = fuserir.parse(TINY)
    before = fuserir.print_fusion(fusion)
    lower(fusion)
    assert fuserir.print_fusion(fusion) == before
    assert [t.compute_at_pos for t in fusion.tensors] == [None, None, None, 1, None, None]


def test_regression_uneven_split_of_an_inner_piece_is_predicated():
    # Found by the lowering property under another hypothesis version: rows split 2 ways,
    # the inner piece (2 rows) split 3 ways unevenly. Guarding only the root index let
    # thread 0 compute row 2, which thread 1 owns: a RAW race on the shared cache and a
    # wrong answer. Every uneven split now guards its own input.
    text = """
fusion prop(in0: f32[4, 6]) {
  t1 = in0 + in0
  output t1
}
schedule prop {
  in0_cache = in0.cache_after(shared)
  t1.split(0, 2, inner=false)
  t1.split(1, 3, inner=false)
  t1.split(0, 2, inner=false)
  t1.split(0, 2, inner=false)
  t1.parallelize(0, TIDx)
  in0_cache.compute_at(t1, 1)
}"""
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    exe, got, want = run_interp(text, {"in0": x})
    np.testing.assert_array_equal(got["t1"], want["t1"])
    assert list(guarded(exe.kernels[0].kir).values()) == [["(i2 < 2)"]]


def test_an_outer_piece_bound_implied_by_its_split_input_is_left_out():
    # N -> [ceildiv(N, 4), 4] -> [ceildiv(ceildiv(N, 4), 3), 3, 4]: both splits are
    # uneven, but (i0 * 3 + i1) * 4 + i2 < N implies i0 * 3 + i1 < ceildiv(N, 4).
    text = """
fusion f(x: f32[N]) {
  y = x * 2
  output y
}
schedule f {
  y.split(0, 4)
  y.split(0, 3)
}"""
    for n in (1, 11, 12, 13, 25):
        x = np.arange(n, dtype=np.float32)
        exe, got, want = run_interp(text, {"x": x})
        np.testing.assert_array_equal(got["y"], want["y"])
    assert list(guarded(exe.kernels[0].kir).values()) == [
        ["(((((i0 * 3) + i1) * 4) + i2) < N)"]]


def test_dead_code_is_not_computed():
    text = """
fusion f(x: f32[M, N]) {
  unused = exp(x)
  y = relu(x)
  output y
}"""
    kernel, _ = lower(fuserir.parse(text))
    assert "unused" not in kir.format_kernel(kernel) and "exp(" not in kir.format_kernel(kernel)


def _async_epilogue_kernel(final_wait):
    """The seed report's shape at kernel-IR level: three pipeline stages of cp.async
    copies (the circular-buffering pass gives each stage its own bytes), the last one
    zero-filling, a final `wait_group final_wait`, a barrier, then an epilogue tile `Ep`
    aliasing the stages' bytes, written and read back by other threads."""
    from fuserir.dtypes import DataType as D

    def c(v):
        return kir.Const(v, D.i32)

    def add(x, y):
        return kir.BinOp("add", x, y, D.i32)

    tid = kir.Special(kir.SpecialKind.threadIdx, "x", D.i32)
    a = kir.Buffer("A", D.f32, kir.Memory.global_, tensor="A")
    out = kir.Buffer("out", D.f32, kir.Memory.global_, tensor="out")
    stages = [kir.Buffer(f"As{i}", D.f32, kir.Memory.shared, c(32), c(128 * i), tensor="As")
              for i in range(3)]
    Ep = kir.Buffer("Ep", D.f32, kir.Memory.shared, c(96), c(0), tensor="Ep")
    body = [kir.Allocate(b) for b in stages + [Ep]]
    for i, stage in enumerate(stages):
        body += [kir.CpAsync(stage, tid, a, add(c(32 * i), tid), 4, c(4 if i < 2 else 0),
                             "ca", kir.AccessInfo("As", (("TIDx", "lane"),))),
                 kir.CpAsyncCommit()]
    body += [
        kir.CpAsyncWait(final_wait),
        kir.Barrier(),
        kir.Store(Ep, add(tid, c(64)), kir.Const(1.0, D.f32),
                  kir.AccessInfo("Ep", (("TIDx", "e"),))),
        kir.Store(out, tid, kir.Load(Ep, add(kir.BinOp("mod", add(tid, c(1)), c(32), D.i32),
                                             c(64)),
                                     kir.AccessInfo("Ep", (("TIDx", None),)))),
    ]
    params = [kir.TensorParam(a, [c(96)], [kir.Var("A_stride0", D.i32)]),
              kir.TensorParam(out, [c(32)], [kir.Var("out_stride0", D.i32)], is_output=True)]
    return kir.Kernel("epilogue", params, [], body,
                      kir.LaunchConfig((c(1), c(1), c(1)), (c(32), c(1), c(1))))


def test_insert_syncs_drains_pending_async_copies_before_the_aliased_epilogue():
    from lowering.passes import insert_syncs, verify_hazards
    from lowering.errors import HazardError

    kernel = _async_epilogue_kernel(final_wait=1)
    with pytest.raises(HazardError) as refused:
        verify_hazards.run(None, kernel)
    assert "async-pending" in {h.kind for h in refused.value.hazards}
    insert_syncs.run(None, kernel)
    kir.relabel(kernel.body)
    kinds = [type(s).__name__ for s in kernel.body]
    drain = next(i for i, s in enumerate(kernel.body)
                 if isinstance(s, kir.CpAsyncWait) and s.sync_id)
    # the report's kernel had a barrier already (S12); it does not retire copies
    assert kinds[drain - 3:drain + 3] == ["CpAsyncWait", "Barrier", "CpAsyncCommit",
                                          "CpAsyncWait", "Barrier", "Store"]
    assert kernel.body[drain].n == 0
    wait, barrier = kernel.body[drain], kernel.body[drain + 1]
    # the pending zero-fill of the last stage conflicts with the epilogue write and read
    # (and would still be in flight when the kernel ends)
    assert [(r.kind.value, r.second.label) for r in wait.reasons] == [
        ("async-pending", "S16"), ("async-pending", "S18"), ("async-pending", "END")]
    assert wait.reasons[0].buffers == ("As2", "Ep")
    # the wait does not make the landed bytes visible to other threads: the barrier does
    assert {r.kind.value for r in barrier.reasons} == {"WAW"}
    assert kernel.body.index(barrier) == kernel.body.index(wait) + 1
    verify_hazards.run(None, kernel)          # now proved safe


def test_no_drain_where_the_pipeline_already_drained():
    from lowering.passes import insert_syncs

    kernel = _async_epilogue_kernel(final_wait=0)
    insert_syncs.run(None, kernel)
    assert not any(isinstance(s, kir.CpAsyncWait) and s.sync_id for s in kir.walk(kernel.body))


GRID_SUM = """
fusion gsum(x: f32[M, K]) {
  s = sum(x, axes=[1])
  output s
}
schedule gsum {
  s.split(1, S, inner=false)        # [M, r{S}, r{ceildiv(K, S)}]
  s.split(0, 32)
  s.parallelize(0, BIDx)
  s.parallelize(1, TIDx)
  s.parallelize(2, BIDz)
  s.serial_grid_reduction()
}
"""


def test_grid_reductions_builds_the_turnstile_and_the_last_split_stores():
    kernel, text = after(GRID_SUM, "grid_reductions")
    top = [type(s).__name__ for s in kernel.body]
    # wait for this split's turn, add the earlier splits' partials, then either pass the
    # partials on (not last) or store the result and reset the semaphore (last)
    assert top[-5:] == ["Comment", "IfThenElse", "Barrier", "IfThenElse", "IfThenElse"]
    branch = kernel.body[-1]
    assert [type(s).__name__ for s in branch.then_body] == ["ForLoop", "Fence", "Barrier",
                                                           "IfThenElse"]
    assert isinstance(branch.then_body[3].then_body[0], kir.SemRelease)
    # the first split waits for nobody and resets nothing: with one split (S = 1) neither
    # workspace is touched, and both take no bytes
    wait, reset = kernel.body[-4], branch.else_body[0]
    assert kir.format_expr(wait.cond) == kir.format_expr(reset.cond) == "(blockIdx.z > 0)"
    assert isinstance(wait.then_body[0].then_body[0], kir.SemWait)
    assert isinstance(reset.then_body[0].then_body[0], kir.SemRelease)
    assert "sem_wait s_sem[(blockIdx.x + (ceildiv(M, 32) * blockIdx.y))] == blockIdx.z" in text
    assert [w.buffer.name for w in kernel.workspaces] == ["s_work", "s_sem"]
    assert kernel.workspaces[1].zeroed
    for splits, want in ((1, [0, 0]), (3, [2 * 32, 2])):      # 2 tiles of 32 threads
        sizes = {"M": 45, "K": 37, "S": splits}
        assert [kir.evaluate_scalar(w.size, sizes) for w in kernel.workspaces] == want


@pytest.mark.parametrize("splits", [1, 2, 5, 40])
def test_a_serial_grid_sum_equals_the_reference_in_split_order(splits):
    fusion = fuserir.parse(GRID_SUM)
    exe = codegen.compile(fusion, backend="interp")
    x = np.random.default_rng(splits).standard_normal((45, 37)).astype(np.float32)
    got = exe.run({"x": x, "S": splits})["s"]
    # splits add in order, each its own slice first: the same f32 sums, in the same order
    per = -(-37 // splits)
    expect = np.zeros(45, np.float32)
    for z in range(splits):
        part = np.zeros(45, np.float32)
        for k in range(z * per, min(37, (z + 1) * per)):
            part += x[:, k]
        expect = part if z == 0 else expect + part
    assert np.array_equal(got, expect)


def test_serial_grid_reduction_needs_bidz():
    text = GRID_SUM.replace("s.parallelize(2, BIDz)", "s.parallelize(2, BIDy)")
    with pytest.raises(ScheduleError, match="reduction axis 2 is bound to BIDy; grid reductions "
                                            "need rfactor \\(a grid reduction runs over BIDz\\)"):
        lower(fuserir.parse(text))


REUSE = """
fusion reuse(x: f32[N]) {
  y = x * 2
  z = y + 1
  output z
}
schedule reuse {
  z.split(0, 128)
  z.parallelize(0, BIDx)
  z.parallelize(1, TIDx)
  xs = x.cache_after(shared)
  ys = y.cache_after(shared)
  y.compute_at(z, 1)
  xs.compute_at(z, 1)
  ys.compute_at(z, 1)
  xs.parallelize(1, TIDx)
  y.parallelize(1, TIDx)
  ys.parallelize(1, TIDx)
  PROMOTE
}
"""


@pytest.mark.parametrize("promote", [False, True])
def test_reuse_shared_aliases_only_dead_buffers_when_asked(promote):
    text = REUSE.replace("PROMOTE", "ys.promote_reuse()" if promote else "")
    kernel, _ = after(text, "reuse_shared")
    offsets = {s.buffer.name: s.buffer.byte_offset.value for s in kir.walk(kernel.body)
               if isinstance(s, kir.Allocate) and s.buffer.memory is kir.Memory.shared}
    # xs is read (by y) before ys is first written: its bytes are free for ys
    assert offsets == ({"xs": 0, "ys": 0} if promote else {"xs": 0, "ys": 512})
    exe = codegen.compile(fuserir.parse(text), backend="interp")
    x = np.arange(300, dtype=np.float32)
    assert np.array_equal(exe.run({"x": x})["z"], x * 2 + 1)


def _in_merged_rows(program, cached, vectorized=False):
    """`program`'s y in rows of its merged outer axes, split in two (BIDx, TIDx), by
    vectors of 4 of its last axis, the inputs `cached` in registers at those loops."""
    from fuserir.ir.tensor import MemoryType
    f = fuserir.parse(program)
    y = f.tensor("y")
    computed = y.cache_before(MemoryType.local)
    y.split(-1, 4)
    y.merge(0)
    y.split(0, 2)
    for i, ptype in enumerate(("BIDx", "TIDx")):
        y.parallelize(i, ptype)
    for name in cached:
        cache = f.tensor(name).cache_after(MemoryType.local)
        cache.compute_at(y, 3)
        if vectorized:
            cache.vectorize(-1)
    computed.compute_at(y, 3)
    return codegen.compile(f, backend="interp")


def test_a_cache_in_a_merged_loop_with_a_broadcast_is_bounded_by_its_real_axes():
    """c's cache computed at y's loops, whose rows merge B (which c lacks: a loop-only
    broadcast) with S: the rows loop runs over B * S, so the bound of the rows split is
    the S index (rows % S) against S, not rows against S, which skipped every batch
    after the first (their y read an unloaded cache)."""
    exe = _in_merged_rows("fusion f(x: f32[B, S, D], c: f32[S, D]) {\n"
                          "  y = x * broadcast(c, [true, false, false])\n  output y\n}", ["c"])
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 5, 8)).astype(np.float32)
    cv = rng.standard_normal((5, 8)).astype(np.float32)
    np.testing.assert_array_equal(exe.run({"x": x, "c": cv})["y"], x * cv)


def test_a_loop_only_broadcast_inside_a_merge_is_indexed_by_the_consumers_extent():
    """v [B, D] cached in registers at y's loops, whose rows merge B with S (which v
    lacks: a loop-only broadcast, the merge's inner part). The row index is b S + s, so
    v's batch is row / S: dividing by the broadcast's own extent of 1 read batch `row`,
    out of bounds or another batch's row, for every row but the first S."""
    exe = _in_merged_rows("fusion f(x: f32[B, S, D], v: f32[B, D]) {\n"
                          "  y = x + broadcast(v, [false, true, false])\n  output y\n}",
                          ["x", "v"], vectorized=True)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 5, 8)).astype(np.float32)
    v = rng.standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_array_equal(exe.run({"x": x, "v": v})["y"], x + v[:, None, :])
