"""Vectorized copies: a copy between global and shared memory whose innermost axis is
vectorized becomes one vector load and store (kir Store/Load of width > 1), once lowering
has proved both sides contiguous and aligned (lowering.passes.indexing.vector_copy, with
the lane-aware folds of lowering.indexing.arith). Covered here: the folds, the lowering and its
refusal, the CUDA emission and its checks, the interpreter (values, alignment), the
executable's run-time check of global arrays, the bank-conflict report, and the matmul
epilogue that motivated it (16-byte rows from the shared tile to the output)."""

import numpy as np
import pytest

import codegen
import fuserir
from codegen import nvrtc
from codegen.cuda import CodegenError, emit_cuda
from codegen.interp import InterpError, run_kernel
from fuserir.errors import ScheduleError
from lowering import kir
from lowering.verify import bank_conflicts
from lowering.context import LoweringContext
from lowering.indexing.arith import Ranges, known_factor

from fuserir.dtypes import DataType

from kir_examples import add, binop, const, finish, launch, mul, tensor, tid
from test_async_copy import F16_VECTORS

I32, F32 = DataType.i32, DataType.f32

# global x [M, N] f16 -> shared tile, 8 elements (16 bytes) per thread, then computed on:
# test_async_copy's schedule with an ordinary (not async) cache
GLOBAL_TO_SHARED = F16_VECTORS.replace("cache_after(shared, async_copy=true)",
                                       "cache_after(shared)")

# computed into a shared tile, then stored to the global output 4 f32 (16 bytes) at a time
SHARED_TO_GLOBAL = """
fusion g(x: f32[M, N]) {
  y = x * 2
  output y
}
schedule g {
  ys = y.cache_before(shared)
  y.split(1, 4)
  y.split(1, 32)
  y.parallelize(0, BIDx)
  y.parallelize(2, TIDx)
  y.vectorize(3)
  ys.compute_at(y, 1)
}
"""

# the shared tile is laid out column-major: 4 consecutive columns are M elements apart
NOT_CONTIGUOUS = """
fusion g(x: f32[M, N]) {
  y = x * 2
  output y
}
schedule g {
  ys = y.cache_before(shared)
  y.split(1, 4)
  y.vectorize(2)
  ys.reorder({0: 1, 1: 0})
  ys.compute_at(y, 0)
}
"""


def vector_stores(kernel):
    return [s for s in kir.walk(kernel.body) if isinstance(s, kir.Store) and s.width > 1]


# -- the folds that keep a vector's lane out of divisions (and an xor in its low bits) --------

def ctx_with(**ranges):
    ctx = LoweringContext.__new__(LoweringContext)
    ctx.index_dtype, ctx.ranges = I32, Ranges()
    names = {}
    for name, (lo, hi) in ranges.items():
        names[name] = kir.Var(name, I32)
        ctx.ranges.vars[id(names[name])] = (lo, hi)
    return ctx, names


def test_known_factor():
    x = kir.Var("x", I32)
    assert known_factor(mul(x, 8)) == 8
    assert known_factor(add(mul(x, 8), const(24))) == 8
    assert known_factor(binop("mod", mul(x, 8), const(12))) == 4
    assert known_factor(const(0)) == 0 and known_factor(x) == 1


def test_lane_is_folded_out_of_splits():
    ctx, v = ctx_with(x=(0, 1000), lane=(0, 7))
    x, lane = v["x"], v["lane"]
    fmt = kir.format_expr
    # (8x + lane) / 128 == (8x) / 128; (8x + lane) % 128 == (8x) % 128 + lane
    assert fmt(ctx.binop("div", add(mul(x, 8), lane), const(128))) == "((x * 8) / 128)"
    assert fmt(ctx.binop("mod", add(mul(x, 8), lane), const(128))) == \
        "(((x * 8) % 128) + lane)"
    # nested: ((8x % 128) + lane) / 64 == (8x % 128) / 64
    inner = ctx.binop("mod", add(mul(x, 8), lane), const(128))
    assert fmt(ctx.binop("div", inner, const(64))) == "(((x * 8) % 128) / 64)"
    # not when the small part can reach the next multiple: (8x + lane) with lane < 9
    ctx2, v2 = ctx_with(x=(0, 1000), lane=(0, 8))
    e = ctx2.binop("div", add(mul(v2["x"], 8), v2["lane"]), const(128))
    assert "lane" in fmt(e)


def test_xor_touches_only_the_low_bits():
    ctx, v = ctx_with(row=(0, 1000), col=(0, 7), r=(0, 7))
    row, col, r = v["row"], v["col"], v["r"]
    e = ctx.binop("xor", add(mul(row, 8), col), r)
    assert kir.format_expr(e) == "((row * 8) + (col ^ r))"
    # not when the xor reaches the large part: r may be 8 or more
    ctx2, v2 = ctx_with(row=(0, 1000), col=(0, 7), r=(0, 8))
    e2 = ctx2.binop("xor", add(mul(v2["row"], 8), v2["col"]), v2["r"])
    assert kir.format_expr(e2) == "(((row * 8) + col) ^ r)"
    for x in range(0, 40, 3):
        for c in range(8):
            for rr in range(8):
                got = kir.evaluate_scalar(kir.substitute(e, {id(row): const(x),
                                                             id(col): const(c),
                                                             id(r): const(rr)}))
                assert got == (8 * x + c) ^ rr


def test_folds_agree_with_c_arithmetic():
    ctx, v = ctx_with(x=(0, 1000), lane=(0, 7))
    for op, d in (("div", 128), ("mod", 128), ("div", 8), ("mod", 64), ("div", 24)):
        e = ctx.binop(op, add(mul(v["x"], 8), v["lane"]), const(d))
        for x in range(0, 300, 7):
            for lane in range(8):
                value = kir.evaluate_scalar(kir.substitute(e, {id(v["x"]): const(x),
                                                               id(v["lane"]): const(lane)}))
                want = (8 * x + lane) // d if op == "div" else (8 * x + lane) % d
                assert value == want, (op, d, x, lane)


# -- lowering --------------------------------------------------------------------------------

@pytest.mark.parametrize("text, shape, nbytes", [(GLOBAL_TO_SHARED, (3, 256), 16),
                                                 (SHARED_TO_GLOBAL, (5, 256), 16)])
def test_vectorized_copies_lower_to_one_vector_access_and_run(text, shape, nbytes, rng):
    fusion = fuserir.parse(text)
    exe = codegen.compile(fusion, backend="interp")
    [copy] = vector_stores(exe.kernels[0].kir)
    assert copy.width * copy.buffer.dtype.itemsize == nbytes
    assert isinstance(copy.value, kir.Load) and copy.value.width == copy.width
    # the element loop is gone: the copy's own vector axis is no loop variable
    assert f" x{copy.width}]" in kir.format_stmt(copy)
    x = rng.integers(-5, 5, shape).astype(fusion.inputs[0].dtype.numpy)
    out = exe.run({"x": x})
    ref = fuserir.evaluate(fusion, {"x": x})
    assert all(np.array_equal(out[k], ref[k]) for k in ref)
    source = emit_cuda(exe.kernels[0].kir)
    assert "*reinterpret_cast<u32x4*>(&" in source and "u32x4 {" in source


@pytest.mark.parametrize("dtype, width, word", [("f16", 2, "unsigned int"),
                                                ("f16", 4, "u32x2"), ("f32", 2, "u32x2"),
                                                ("f16", 8, "u32x4")])
def test_every_vector_width_runs_and_compiles(dtype, width, word, rng):
    text = SHARED_TO_GLOBAL.replace("f32", dtype).replace("y.split(1, 4)",
                                                         f"y.split(1, {width})")
    fusion = fuserir.parse(text)
    exe = codegen.compile(fusion, backend="interp")
    [copy] = vector_stores(exe.kernels[0].kir)
    assert copy.width == width
    x = rng.integers(-5, 5, (3, 32 * width * 2)).astype(fusion.inputs[0].dtype.numpy)
    assert np.array_equal(exe.run({"x": x})["y"], fuserir.evaluate(fusion, {"x": x})["y"])
    source = emit_cuda(exe.kernels[0].kir)
    assert f"*reinterpret_cast<{word}*>(&y_[" in source       # y_: the user's tensor y
    assert nvrtc.compile_to_cubin(source, exe.kernels[0].kir.name, arch="sm_90")


def test_a_copy_not_contiguous_in_its_producer_is_refused():
    with pytest.raises(ScheduleError) as refused:
        codegen.compile(fuserir.parse(NOT_CONTIGUOUS), backend="interp")
    assert str(refused.value).startswith(
        "vectorize: y copies 4 elements at a time from ys, but lowering cannot prove them "
        "consecutive and 4-aligned in both (ys[")
    assert "vectorize an axis that is contiguous in the producer's layout too" in \
        str(refused.value)


def test_an_output_no_vector_fits_is_stored_by_narrower_copies(rng):
    # rows of 250 f32 (1000 bytes): 8-byte stores; the same schedule, another variant
    exe = codegen.compile(fuserir.parse(SHARED_TO_GLOBAL), backend="interp")
    x = rng.integers(-5, 5, (5, 250)).astype(np.float32)
    assert np.array_equal(exe.run({"x": x})["y"], 2 * x)
    (kernel,) = exe.kernels_for({"x": x})
    assert kernel.caps == {"y": 8}
    stores = [s for s in kir.walk(kernel.kir.body)
              if isinstance(s, kir.Store) and s.buffer.name == "y"]
    assert [s.width for s in stores] == [2]


def test_inputs_no_vector_fits_are_loaded_by_element_copies():
    exe = codegen.compile(fuserir.parse(GLOBAL_TO_SHARED), backend="interp")
    x = np.arange(3 * 512).reshape(3, 512).astype(np.float16)[:, ::2]
    want = fuserir.evaluate(fuserir.parse(GLOBAL_TO_SHARED), {"x": x})["y"]
    assert np.array_equal(exe.run({"x": x})["y"], want)
    assert exe.kernels_for({"x": x})[0].caps == {"x": 2}


def test_an_automatic_matmul_with_an_unaligned_output_row(rng):
    text = """fusion mm(A: f16[M, K], B: f16[N, K]) {
  acc = matmul(A, B, layout=TN)
  out = cast(acc, f16)
  output out
}"""
    a = rng.integers(-2, 3, (64, 32)).astype(np.float16)
    b = rng.integers(-2, 3, (60, 32)).astype(np.float16)     # N = 60: rows of 120 bytes
    want = (a.astype(np.float32) @ b.astype(np.float32).T).astype(np.float16)
    out = codegen.compile(fuserir.parse(text), backend="interp").run({"A": a, "B": b})
    assert np.array_equal(out["out"], want)


# -- the matmul epilogue ---------------------------------------------------------------------

def test_matmul_epilogue_stores_16_byte_rows_without_bank_conflicts():
    from fuserir.scheduler import MatmulParams, schedule_matmul
    fusion = fuserir.parse(open("examples/splitk_matmul.fz").read().split("schedule")[0])
    schedule_matmul(fusion, MatmulParams(cta_tile=(256, 128, 32), warp_tile=(64, 64, 32),
                                         stages=3, splitk_factor=5, use_smem_epilogue=True,
                                         promote_prologue_smem_reuse=True))
    kernel = codegen.compile(fusion, backend="interp").kernels[0].kir
    [copy] = vector_stores(kernel)
    assert (copy.buffer.name, copy.value.buffer.name, copy.width) == ("out", "out_cache", 8)
    scalars = {"M": 256, "N": 128, "K": 416, "splitk": 5}
    reports = bank_conflicts.report(kernel, scalars)
    read = next(r for r in reports if r.stmt is copy)
    # only the last split runs the epilogue: examined in the grid's last block
    assert (read.width, read.worst) == (16, 1)
    assert read.notes == ["examined in block (0, 0, 4): no lane is active in the first "
                          "block"]
    assert all(r.worst == 1 for r in reports), [(r.label, r.worst) for r in reports]


# -- backends on hand-built kernels ----------------------------------------------------------

def vector_copy_kernel(shift=0, width=4, value_width=None):
    """y[t*width + shift ..] = x[t*width + shift ..] for 32 threads, `width` f32 at once."""
    x, y = tensor("x", F32, [const(256)]), tensor("y", F32, [const(256)], is_output=True)
    index = add(mul(tid(), width), shift)
    body = [kir.Store(y.buffer, index, kir.Load(x.buffer, index, None,
                                                value_width or width), width=width)]
    return finish(kir.Kernel("vcopy", [x, y], [], body, launch((const(1),), (const(32),))))


def test_interpreter_runs_vector_copies_and_refuses_misaligned_ones():
    x = np.arange(256, dtype=np.float32)
    y = np.zeros(256, np.float32)
    run_kernel(vector_copy_kernel(), {"x": x, "y": y})
    assert np.array_equal(y[:128], x[:128]) and not y[128:].any()
    with pytest.raises(InterpError, match=r"vector access x\[2\] of thread .* is not "
                                          r"aligned to 4 elements \(16 bytes\)"):
        run_kernel(vector_copy_kernel(shift=2), {"x": x, "y": y})


def test_cuda_emitter_refuses_vector_stores_it_cannot_emit():
    with pytest.raises(CodegenError, match="a vector store of 4 elements to y must store a "
                                           "load of 4 elements"):
        emit_cuda(vector_copy_kernel(value_width=1))
    with pytest.raises(CodegenError, match="a vector store moves 4, 8 or 16 bytes, got 3 x "
                                           "f32"):
        emit_cuda(vector_copy_kernel(width=3))
    with pytest.raises(CodegenError, match=r"vector access y\[2\] is not aligned to 4 "
                                           "elements"):
        k = vector_copy_kernel()
        k.body[0].index = const(2)
        emit_cuda(k)


@pytest.mark.gpu
@pytest.mark.parametrize("text, shape", [(GLOBAL_TO_SHARED, (3, 256)),
                                         (SHARED_TO_GLOBAL, (5, 256))])
def test_vectorized_copies_on_the_gpu(text, shape, rng):
    import cupy
    fusion = fuserir.parse(text)
    x = rng.integers(-5, 5, shape).astype(fusion.inputs[0].dtype.numpy)
    out = codegen.compile(fusion, backend="cuda").run({"x": cupy.asarray(x)})
    ref = fuserir.evaluate(fusion, {"x": x})
    assert all(np.array_equal(cupy.asnumpy(out[k]), ref[k]) for k in ref)
