"""64-bit indexing is chosen from the largest value any index or bound expression of a
kernel reaches at the run's sizes and strides (lowering.indexing.index_bounds), not from the
extents alone. A regression: extents from 2^31 - 127 to 2^31 - 1 kept 32-bit
indexing while `(N + 127) / 128` wrapped (nothing written, or writes out of bounds); a
reduction over more than 2^31 elements of a zero-stride input failed ("does not fit i32").
Nothing here allocates more than a few kilobytes: large inputs are zero-stride views, and
runs in the interpreter execute a few blocks of a large grid."""

import numpy as np
import pytest

import codegen
import fuserir
from fuserir.dtypes import DataType
from lowering import kir
from lowering.indexing.index_bounds import IndexRangeError, index_dtype_for, reach

import kir_examples as ex

I32, I64 = DataType.i32, DataType.i64

POINTWISE = """fusion p(x: f32[N]) {
  y = x + 1
  output y
}
schedule p {
  y.split(0, 128)
  y.parallelize(0, BIDx)
  y.parallelize(1, TIDx)
}"""


def _pointwise_kernel():
    return codegen.compile(fuserir.parse(POINTWISE), backend="interp").kernels[0].kir


@pytest.mark.parametrize("n", [2 ** 31 - 127, 2 ** 31 - 100, 2 ** 31 - 2, 2 ** 31 - 1])
def test_extents_just_below_2_31_whose_grid_arithmetic_wraps_take_64_bits(n):
    kernel = _pointwise_kernel()
    # every tensor fits an i32 (the old rule kept 32 bits), but the grid's ceildiv(N, 128)
    # computes N + 127, past 2^31 - 1
    assert n <= 2 ** 31 - 1
    lo, hi = reach(kernel, {"N": n}, {"x": [1], "y": [1]})
    assert hi == n + 127 and lo == 0
    assert index_dtype_for(kernel, {"N": n}, {"x": [1], "y": [1]}) is I64


def test_the_largest_extent_whose_arithmetic_fits_keeps_32_bits():
    kernel = _pointwise_kernel()
    n = 2 ** 31 - 128          # N + 127 = 2^31 - 1; the last guard reaches 2^31 - 129
    assert reach(kernel, {"N": n}, {"x": [1], "y": [1]}) == (0, 2 ** 31 - 1)
    assert index_dtype_for(kernel, {"N": n}, {"x": [1], "y": [1]}) is I32


def test_the_executable_picks_the_kernel_from_the_reach_of_its_expressions():
    exe = codegen.compile(fuserir.parse(POINTWISE), backend="interp")
    (step,) = exe.steps
    for n, want in ((2 ** 31 - 128, I32), (2 ** 31 - 127, I64)):
        x = np.broadcast_to(np.float32(0), (n,))           # zero strides: no memory
        chosen = exe._kernel_for(step, {"N": n}, {"x": x})
        assert chosen.kir.index_dtype is want
    assert I64 in [v.kir.index_dtype for v in step.variants.values()]
    assert step.kernel.kir.index_dtype is I32


def test_strides_count_not_only_extents():
    kernel = _pointwise_kernel()
    # 1000 elements, but x a view with stride 2^22: offsets reach 999 * 2^22 > 2^31 (the
    # bound taken is the last block's 1023 * 2^22: guards do not narrow the intervals)
    assert index_dtype_for(kernel, {"N": 1000}, {"x": [2 ** 20], "y": [1]}) is I32
    assert index_dtype_for(kernel, {"N": 1000}, {"x": [2 ** 22], "y": [1]}) is I64
    assert index_dtype_for(kernel, {"N": 1000}, {"x": [-2 ** 22], "y": [1]}) is I64


def test_a_guard_that_wraps_takes_64_bits():
    # blockIdx.x * 3 + threadIdx.x < N with blocks of 32 threads: the guard reaches
    # (grid - 1) * 3 + 31 while N and the grid fit
    n = ex.scalar("N")
    y = ex.tensor("y", DataType.f32, [n.var], is_output=True)
    i = ex.add(ex.mul(ex.bid(), ex.const(3)), ex.tid())
    body = [kir.IfThenElse(ex.lt(i, n.var), [ex.store(y, [i], ex.const(1.0, DataType.f32))])]
    grid = ex.binop("div", n.var, ex.const(3))
    kernel = ex.finish(kir.Kernel("guard", [y], [n], body, ex.launch([grid], [ex.const(32)])))
    big = 2 ** 31 - 10
    assert reach(kernel, {"N": big}, {"y": [1]})[1] == (big // 3 - 1) * 3 + 31
    assert index_dtype_for(kernel, {"N": big}, {"y": [1]}) is I64
    assert index_dtype_for(kernel, {"N": 2 ** 31 - 40}, {"y": [1]}) is I32


def test_a_reduction_past_2_31_on_a_zero_stride_input_takes_64_bits():
    fusion = fuserir.parse("fusion r(x: f32[M, K]) {\n  y = sum(x, axes=[1])\n  output y\n}")
    exe = codegen.compile(fusion, backend="interp")
    k = 2 ** 31 + 1
    x = np.broadcast_to(np.float32(1), (4, k))             # zero strides: no memory
    (step,) = exe.plan_for({"M": 4, "K": k})[2]
    assert exe._kernel_for(step, {"M": 4, "K": k}, {"x": x}).kir.index_dtype is I64
    assert exe._kernel_for(step, {"M": 4, "K": 1000}, {"x": x[:, :1000]}).kir.index_dtype \
        is I32


SPLIT_BY_A_SCALAR = """fusion p(x: f32[N]) {
  y = x + 1
  output y
}
schedule p {
  y.split(0, F)
  y.split(1, 128)
  y.parallelize(0, BIDy)
  y.parallelize(1, BIDx)
  y.parallelize(2, TIDx)
}"""


def test_a_small_run_whose_index_arithmetic_passes_2_31_runs_in_64_bits():
    # 300 elements, split by a run-time F = 2^31 - 64: grid.x = ceildiv(F, 128) computes
    # F + 127, past 2^31; blocks 0..2 of the 2^24 in x hold every element
    fusion = fuserir.parse(SPLIT_BY_A_SCALAR)
    exe = codegen.compile(fusion, backend="interp")
    x = np.arange(300, dtype=np.float32)
    inputs = {"x": x, "F": 2 ** 31 - 64}
    got = exe.run(inputs, blocks=[(0,), (1,), (2,)])["y"]
    assert np.array_equal(got, fuserir.evaluate(fusion, inputs)["y"])
    assert exe.kernels_for(inputs)[0].kir.index_dtype is I64
    # the 32-bit kernel computes a wrapped grid there
    grid_x = exe.steps[0].kernel.kir.launch.grid[0]
    assert kir.evaluate_scalar(grid_x, {"N": 300, "F": 2 ** 31 - 64}) < 0


def test_index_arithmetic_past_64_bits_is_an_error():
    kernel = _pointwise_kernel()
    with pytest.raises(IndexRangeError, match=r"kernel p: index arithmetic reaches "
                                              r"9223372036854775934 at these sizes"):
        index_dtype_for(kernel, {"N": 2 ** 63 - 1}, {"x": [1], "y": [1]})
