"""Sizes as values: `sum(x, [1]) / N` (a size of the inputs named in the DSL), `size(x,
dim)` in the builder and the DSL. The builder's value, the printer's round trip, the
reference and the interpreter (the size a kernel parameter), a segment that reads a size
none of its own inputs has, the CUDA source compiling."""

import numpy as np
import pytest

import codegen
import fuserir
from fuserir import DataType, Fusion, FusionError, ops
from fuserir.errors import DslError
from fuserir.ir import Scalar
from fuserir.ir.equality import structurally_equal

MEAN = """
fusion rowmean(x: f32[M, N]) {
  s = sum(x, [1])
  mean = s / N
  centered = x - broadcast(mean, [false, true])
  output mean, centered
}
"""


def test_a_size_in_the_dsl_is_a_value_of_the_tensor_dtype_beside_it():
    f = fuserir.parse(MEAN)
    divisor = f.tensor("mean").definition.inputs[1]
    assert isinstance(divisor, Scalar) and divisor.is_size
    assert str(divisor.value) == "N" and divisor.dtype is DataType.f32
    text = fuserir.print_fusion(f)
    assert "mean = s / N" in text
    assert structurally_equal(fuserir.parse(text), f)


def test_size_of_an_axis_in_the_builder():
    f = Fusion("b")
    x = f.new_input("x", DataType.f16, ["M", 8])
    n = ops.size(x, -2)
    assert isinstance(n, Scalar) and str(n.value) == "M"
    assert ops.size(x, 1) == 8                  # a declared size is just a number
    y = ops.mul(x, n)
    assert y.definition.inputs[1].dtype is DataType.f16
    with pytest.raises(FusionError, match="size: dim 2 is out of range for x with 2 axes"):
        ops.size(x, 2)


def test_an_unknown_name_is_still_an_unknown_tensor():
    with pytest.raises(DslError, match="<string>:3:14: unknown tensor 'K'"):
        fuserir.parse("fusion f(x: f32[M, N]) {\n  s = sum(x, [1])\n  mean = s / K\n"
                      "  output mean\n}\n")


@pytest.mark.parametrize("m, n", [(5, 7), (3, 300)])
def test_row_mean_in_kernels_equals_the_reference_and_numpy(m, n, rng):
    """Two outputs of different shapes, two kernels: the mean's kernel reads x (N is its
    size); each takes N as a size parameter."""
    f = fuserir.parse(MEAN)
    x = rng.standard_normal((m, n)).astype(np.float32)
    out = codegen.compile(f, backend="interp").run({"x": x})
    ref = fuserir.evaluate(f, {"x": x})
    np.testing.assert_allclose(ref["mean"], x.astype(np.float64).mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(out["mean"], ref["mean"], rtol=1e-6)
    np.testing.assert_allclose(out["centered"], ref["centered"], rtol=1e-6, atol=1e-6)


def test_a_segment_takes_a_size_its_inputs_do_not_have(rng):
    """Outputs of two shapes, two kernels: the one that computes r reads only w, whose
    size is N, so M reaches it as a run-time scalar."""
    f = fuserir.parse("""
fusion f(x: f32[M, N], w: f32[N]) {
  t = permute(x, [1, 0])
  r = w / M
  output t, r
}
""")
    x = rng.standard_normal((6, 10)).astype(np.float32)
    w = rng.standard_normal((10,)).astype(np.float32)
    exe = codegen.compile(f, backend="interp")
    kernels = exe.kernels_for({"x": x, "w": w})
    assert [[p.var.name for p in k.kir.scalar_params] for k in kernels] == [["M", "N"],
                                                                             ["N", "M"]]
    out = exe.run({"x": x, "w": w})
    np.testing.assert_array_equal(out["r"], w / np.float32(6))
    np.testing.assert_array_equal(out["t"], x.T)


def test_a_size_rounds_to_a_16_bit_dtype_as_a_literal_would(rng):
    """2049 is not an f16: as a literal beside an f16 tensor it rounds to 2048 first, in
    the reference and in the kernel alike."""
    f = fuserir.parse("fusion f(x: f16[N]) {\n  y = x * N\n  output y\n}\n")
    x = np.ones(2049, np.float16)
    out = codegen.compile(f, backend="interp").run({"x": x})["y"]
    assert out[0] == 2048 and np.array_equal(out, fuserir.evaluate(f, {"x": x})["y"])


def test_a_size_compiles_to_cuda():
    f = fuserir.parse(MEAN)
    steps = codegen.compile(f, backend="cuda").plan_for({"M": 64, "N": 300}, device=None)[2]
    assert all(step.kernel.cubin for step in steps)
    assert any("N" in [p.var.name for p in step.kernel.kir.scalar_params] for step in steps)


# -- host scalars: rank-0 inputs, given Python numbers ----------------------------------------

HOST = "fusion f(x: f32[N], s: f32[], k: i32[], c: bool[]) {\n" \
       "  y = where(c, x * s + k, x)\n  output y\n}\n"


def test_a_rank_0_tensor_broadcasts_as_a_number_would():
    f = fuserir.parse(HOST)
    y = f.tensor("y")
    assert [str(e) for e in y.shape] == ["N"]
    assert structurally_equal(fuserir.parse(fuserir.print_fusion(f)), f)


def test_python_numbers_for_rank_0_inputs(rng):
    f = fuserir.parse(HOST)
    exe = codegen.compile(f, backend="interp")
    x = rng.standard_normal(5).astype(np.float32)
    want = x * np.float32(2.5) + np.float32(3)
    for got in (exe.run({"x": x, "s": 2.5, "k": 3, "c": True})["y"], exe(x, 2.5, 3, True),
                fuserir.evaluate(f, {"x": x, "s": 2.5, "k": 3, "c": True})["y"]):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(exe(x, 2.5, 3, False), x)


@pytest.mark.parametrize("given, message", [
    ({"s": 1j}, "input s: 1j is complex; fuserir has no complex dtype"),
    ({"k": 2.5}, "input k: 2.5 is not a value of its dtype i32"),
    ({"k": 2 ** 40}, "input k: 1099511627776 is not a value of its dtype i32"),
    ({"s": 1e39}, "input s: 1e+39 is not a value of its dtype f32"),
    ({"c": 2}, "input c: 2 is not a value of its dtype bool"),
])
def test_a_number_its_input_cannot_hold_is_refused(given, message):
    exe = codegen.compile(fuserir.parse(HOST), backend="interp")
    with pytest.raises(fuserir.errors.EvaluationError) as caught:
        exe.run({"x": np.zeros(3, np.float32), "s": 1.0, "k": 1, "c": True, **given})
    assert str(caught.value) == message


def test_on_the_gpu_a_number_is_refused_before_any_launch():
    """(No device needed: the call is refused before its plan.)"""
    exe = codegen.compile(fuserir.parse(HOST), backend="cuda")
    with pytest.raises(fuserir.FuserirError, match=r"input s: a Python number \(2.5\) for a "
                                                   r"rank-0 input is taken by the interpreter"):
        exe(np.zeros(3, np.float32), 2.5, 1, True)
