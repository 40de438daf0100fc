"""Batched matmuls (matmul with batch axes, bmm) and linear (x @ W^T + b, over any
leading axes of x): what they are made of and mean against numpy in f64 (the reference
evaluator), their kernels in the interpreter (a tile grid over every matrix of the
batch, several tiles a matrix), the heuristic's plan, each refusal named and located,
and each on the GPU where there is one."""

import ml_dtypes
import numpy as np
import pytest

import codegen
import fuserir
from conftest import on_host
from fuserir import DataType, DslError, FusionError, ops
from fuserir.ir.fusion import Fusion
from fuserir.scheduler import auto
from fuserir.scheduler.matmul_heuristic import matmul_heuristic

BF16 = ml_dtypes.bfloat16


def stored(matrix, major):
    """A batch of [.., rows, cols] matrices as a layout letter stores them: T as they
    are, N transposed (their last two axes swapped)."""
    return matrix if major == "T" else np.swapaxes(matrix, -1, -2).copy()


def batched_inputs(rng, layout, batch=(3,), m=40, n=24, k=32, b_batch=None):
    """Operands for matmul(a, b, layout): a [batch.., M, K] and b [b_batch.., K, N], each
    stored per its layout letter, and the product in f64."""
    a = rng.standard_normal((*batch, m, k)).astype(BF16)
    b = rng.standard_normal((*(batch if b_batch is None else b_batch), k, n)).astype(BF16)
    product = a.astype(np.float64) @ b.astype(np.float64)
    return stored(a, layout[0]), stored(b, layout[1]), product


def shape_text(names, layout_letter, rows, cols):
    return ", ".join([*names, *((rows, cols) if layout_letter == "T" else (cols, rows))])


def scores_text(layout, batch_names=("B",), b_batch=None):
    a = shape_text(batch_names, layout[0], "M", "K")
    b = shape_text(batch_names if b_batch is None else b_batch, layout[1], "K", "N")
    return (f"fusion f(a: bf16[{a}], b: bf16[{b}]) {{\n"
            f"  c = cast(matmul(a, b, layout={layout}), bf16)\n  output c\n}}")


def near(actual, expected, rtol):
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=rtol,
                               atol=rtol * np.abs(expected).max())


# -- meaning -----------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["TT", "TN", "NT", "NN"])
def test_a_batched_matmul_is_one_matmul_per_matrix_of_the_batch(rng, layout):
    a, b, product = batched_inputs(rng, layout)
    fusion = fuserir.parse(scores_text(layout))
    assert fuserir.print_fusion(fuserir.parse(fuserir.print_fusion(fusion))) == \
        fuserir.print_fusion(fusion)
    c = fuserir.evaluate(fusion, {"a": a, "b": b})["c"]
    assert c.shape == (3, 40, 24) and c.dtype == BF16
    near(c, product, 2 ** -8)


def test_batch_axes_broadcast_as_torch_matmul(rng):
    # B of two axes is shared by every matrix of A's batch; batch axes right-aligned
    a, b, product = batched_inputs(rng, "TT", batch=(2, 3), b_batch=(3,))
    c = fuserir.evaluate(fuserir.parse(scores_text("TT", ("P", "B"), ("B",))),
                         {"a": a, "b": b})["c"]
    assert c.shape == (2, 3, 40, 24)
    near(c, product, 2 ** -8)
    a, b, product = batched_inputs(rng, "TN", b_batch=())
    c = fuserir.evaluate(fuserir.parse(scores_text("TN", b_batch=())), {"a": a, "b": b})["c"]
    near(c, product, 2 ** -8)
    # a broadcast batch axis (extent 1) reads its one matrix for every batch index
    text = """fusion f(a: bf16[B, M, K], b: bf16[K, N]) {
  c = cast(matmul(a, broadcast(b, [true, false, false])), bf16)
  output c
}"""
    a, b, product = batched_inputs(rng, "TT", b_batch=())
    near(fuserir.evaluate(fuserir.parse(text), {"a": a, "b": b})["c"], product, 2 ** -8)


def test_linear_is_a_tn_matmul_with_the_bias_added_in_f32_and_rounded_once():
    fusion = fuserir.parse("fusion f(x: bf16[M, K], w: bf16[N, K], b: bf16[N]) {\n"
                           "  y = linear(x, w, b)\n  output y\n}")
    assert fuserir.print_fusion(fusion).splitlines()[1] == \
        "  y = cast(matmul(x, w, layout=TN) + broadcast(cast(b, f32), [true, false]), bf16)"
    fusion = fuserir.parse("fusion f(x: f16[M, K], w: f16[N, K]) {\n"
                           "  y = linear(x, w)\n  output y\n}")
    assert fuserir.print_fusion(fusion).splitlines()[1] == \
        "  y = cast(matmul(x, w, layout=TN), f16)"


def test_linear_takes_any_leading_axes_of_x(rng):
    x = rng.standard_normal((2, 5, 16)).astype(BF16)
    w = rng.standard_normal((8, 16)).astype(BF16)
    bias = rng.standard_normal(8).astype(np.float32)
    fusion = fuserir.parse("fusion f(x: bf16[B, S, K], w: bf16[N, K], b: f32[N]) {\n"
                           "  y = linear(x, w, b)\n  output y\n}")
    assert fuserir.print_fusion(fusion).splitlines()[1] == (
        "  y = cast(matmul(x, w, layout=TN) + broadcast(b, [true, true, false]), bf16)")
    expected = x.astype(np.float64) @ w.astype(np.float64).T + bias
    for out in (fuserir.evaluate(fusion, {"x": x, "w": w, "b": bias})["y"],
                codegen.compile(fusion, backend="interp").run({"x": x, "w": w, "b": bias})[
                    "y"]):
        assert out.shape == (2, 5, 8) and out.dtype == BF16
        near(out, expected, 2 ** -8)


# -- kernels -----------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["TN", "NT"])
def test_the_interpreter_runs_a_tile_grid_over_every_matrix_of_the_batch(rng, layout):
    # 300 rows: three M tiles a matrix, the last partial, so the tile index the grid
    # merges with the batch index is split back correctly (batch = tile / tiles-per-matrix)
    a, b, product = batched_inputs(rng, layout, m=300)
    exe = codegen.compile(fuserir.parse(scores_text(layout)), backend="interp")
    c = exe.run({"a": a, "b": b})["c"]
    assert len(exe.kernels) == 1
    near(c, product, 2 ** -8)


def test_the_heuristic_plans_a_batch_as_one_matmul_of_all_its_rows_without_split_k():
    params = matmul_heuristic(2048, 2048, 128, layout="TN", dtypes=("bf16", "bf16", "bf16"),
                              batch=32)
    assert params.hopper and params.splitk_factor == 1 and not params.swap_mn
    assert params.cta_tile[:2] == (128, 256)
    lines = auto.explain(fuserir.parse(scores_text("TN")), {"B": 32, "M": 2048, "N": 2048,
                                                            "K": 128})
    assert "a batch of 32 matmuls: the tiles of all of them one grid, as 65536 rows of " \
        "tiles (a tile never spans two matrices)" in lines
    # rows TMA cannot read (NT: A stored [B, K, M], M = 150: 300-byte rows): mma.sync
    reasons = []
    params = matmul_heuristic(150, 72, 128, layout="NT", dtypes=("bf16", "bf16", "bf16"),
                              batch=3, reasons=reasons)
    assert not params.hopper and params.splitk_factor == 1
    assert "a batch of 3 matmuls: the mma.sync path, the batch's tiles one grid, no " \
        "split-K" in reasons
    # below sm_90: the mma.sync path, unsplit
    from fuserir.device import H200
    params = matmul_heuristic(64, 64, 65536, layout="TN", dtypes=("bf16", "bf16"),
                              device=H200.with_(cc=(8, 0)), batch=2)
    assert not params.hopper and params.splitk_factor == 1


@pytest.mark.parametrize("layout", ["TN", "TT"])
def test_the_hopper_path_reads_and_writes_a_batch_through_three_dimensional_maps(rng,
                                                                                  layout):
    from fuserir.device import H200
    a, b, product = batched_inputs(rng, layout, m=150, n=72, k=128)
    exe = codegen.compile(fuserir.parse(scores_text(layout)), backend="interp", device=H200)
    (kernel,) = exe.kernels_for({"a": a, "b": b})
    assert "wgmma" in kernel.kir_text
    assert [m.rank for m in kernel.kir.tensor_maps] == [3, 3]
    near(exe.run({"a": a, "b": b})["c"], product, 2 ** -8)


def test_two_batch_axes_take_the_mma_sync_path_on_hopper(rng):
    """A TMA map holds one axis past its box's two: a product over two batch axes is
    planned without TMA, and says so."""
    from fuserir.device import H200
    a, b, product = batched_inputs(rng, "TT", batch=(2, 3), b_batch=(3,), m=20, n=24, k=32)
    fusion = fuserir.parse(scores_text("TT", ("P", "B"), ("B",)))
    sizes = {"P": 2, "B": 3, "M": 20, "N": 24, "K": 32}
    assert "2 batch axes: more than TMA's maps hold, so no TMA" in auto.explain(
        fusion, sizes, H200)
    exe = codegen.compile(fusion, backend="interp", device=H200)
    (kernel,) = exe.kernels_for({"a": a, "b": b})
    assert "mma.m16n8k16" in kernel.kir_text and not kernel.kir.tensor_maps
    near(exe.run({"a": a, "b": b})["c"], product, 2 ** -8)


HOPPER_TILES = dict(cta_tile=(128, 128, 64), warp_tile=(64, 128, 64),
                    instruction_tile=(64, 128, 16), stages=3)


@pytest.mark.parametrize("params", [
    dict(HOPPER_TILES, use_smem_epilogue=True, tma_store=True),
    dict(cta_tile=(64, 64, 64), warp_tile=(64, 64, 64), instruction_tile=(64, 64, 16),
         stages=3, persistent=True),
], ids=["tma store", "persistent"])
def test_a_batch_stored_by_tma_or_walked_by_persistent_ctas_equals_float64(rng, params):
    """Integer-valued inputs (their products' sums exact in f32): the batch's 3-D output
    map and the persistent walk over the tiles of every matrix, each matrix's last M tile
    of its 150 rows partial."""
    from fuserir.scheduler import MatmulParams, schedule_matmul
    fusion = fuserir.parse(scores_text("TN"))
    schedule_matmul(fusion, MatmulParams(**params))
    a = rng.integers(-3, 4, (2, 150, 128)).astype(BF16)
    b = rng.integers(-3, 4, (2, 136, 128)).astype(BF16)
    out = codegen.compile(fusion, backend="interp").run({"a": a, "b": b})["c"]
    expected = a.astype(np.float64) @ np.swapaxes(b.astype(np.float64), 1, 2)
    # the exact f32 sums, rounded once to bf16
    np.testing.assert_array_equal(out, expected.astype(BF16))


# -- refusals ----------------------------------------------------------------------------------

@pytest.mark.parametrize("params, call, message", [
    ("a: bf16[B, M, K], b: bf16[C, K, N]", "matmul(a, b)",
     "matmul: batch axis 0 of the result: B (a [B, M, K]) vs C (b [C, K, N]); batch "
     "extents must be equal, or one a broadcast axis"),
    ("a: bf16[B, M, K], b: bf16[K, N]", "bmm(a, b)",
     "bmm: B (b) must have 3 axes [batch, rows, columns], has 2; matmul broadcasts batch "
     "axes"),
    ("a: bf16[B, M, K], b: bf16[C, K, N]", "bmm(a, b)",
     "bmm: batch extents differ: B (a) vs C (b)"),
    ("a: bf16[B, M, K], b: bf16[B, N, K]", "bmm(a, b)",
     "matmul: K extents differ: K (a) vs N (b) for layout TT"),
    ("x: bf16[M, K], w: bf16[N, K], b: bf16[M]", "linear(x, w, b)",
     "linear: bias (b) must be [N], one value per row of weight (w), is [M]"),
    ("x: bf16[M, K], w: bf16[N, K], b: i32[N]", "linear(x, w, b)",
     "linear: bias (b) is i32; it must be a float"),
    ("x: bf16[K], w: bf16[N, K]", "linear(x, w)",
     "linear: x (x) must have at least 2 axes, has 1"),
    ("x: bf16[M, K], w: bf16[K]", "linear(x, w)",
     "linear: weight (w) must have 2 axes, has 1"),
    ("x: bf16[B, M, K], w: bf16[B, N, K]", "linear(x, w)",
     "linear: weight (w) must have 2 axes, has 3"),
    ("x: bf16[M, K], w: bf16[N, J]", "linear(x, w)",
     "linear: x (x) has rows of K but weight (w) rows of J: they must be equal (K)"),
    ("x: f32[M, K], w: f32[N, K]", "linear(x, w)",
     "linear: x (x) must be f16 or bf16 (the tensor cores' operands), got f32"),
    ("x: bf16[M, K], w: f16[N, K]", "linear(x, w)",
     "matmul: A (x) is bf16 but B (w) is f16"),
])
def test_matmul_bmm_and_linear_refusals(params, call, message):
    with pytest.raises(DslError) as caught:
        fuserir.parse(f"fusion f({params}) {{\n  c = {call}\n  output c\n}}")
    assert message in str(caught.value)
    assert (caught.value.line, caught.value.column) == (2, 7)


def test_bmm_checks_its_operands_are_tensors():
    f = Fusion("f")
    a = f.new_input("a", DataType.bf16, ["B", "M", "K"])
    with pytest.raises(FusionError, match=r"bmm: B must be a tensor, got 2"):
        ops.bmm(a, 2)


# -- on the GPU --------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["TT", "TN", "NT", "NN"])
def test_batched_matmul_on_the_gpu(rng, layout):
    a, b, product = batched_inputs(rng, layout, batch=(6,), m=520, n=264, k=136)
    fusion = fuserir.parse(scores_text(layout))
    exe = codegen.compile(fusion, backend="cuda")
    near(on_host(exe.run({"a": a, "b": b}), fusion)["c"], product, 2 ** -8)


def test_a_persistent_matmul_segment_takes_its_own_scalars_default():
    """Attention's scores at 32 heads of 2048: the batched matmul segment is persistent,
    its CTAs a scalar the segment declares (the SMs), which no size of the whole fusion
    gives; inspect launches it at the device's 132 (as run() does)."""
    import pathlib
    from test_cli import fuserir as cli
    example = pathlib.Path(__file__).resolve().parents[1] / "examples" / "attention_scores.fz"
    result = cli("inspect", example, "--size", "BH=32,S=2048,D=128")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "grid   (ctas, 1, 1) = (132, 1, 1): 132 block(s)" in result.stdout


def test_an_automatic_persistent_plan_binds_its_ctas_default():
    """A batch planned persistent on the H200 (32 matrices of 2048 x 2048): its kernel
    takes the CTAs its schedule declared (the SMs), which no input gives."""
    from fuserir.device import H200
    fusion = fuserir.parse(scores_text("TN"))
    exe = codegen.compile(fusion, backend="interp", device=H200)
    a = np.zeros((32, 2048, 128), BF16)
    (kernel,) = exe.kernels_for({"a": a, "b": a.copy()})
    assert "ctas" in {p.var.name for p in kernel.kir.scalar_params}
