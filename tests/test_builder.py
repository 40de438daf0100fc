"""The Python builder builds the same fusion as the DSL."""

import numpy as np
import pytest

import fuserir
from fuserir.errors import FusionError
from fuserir.ir.equality import first_difference


BIAS_RELU = """
fusion bias_relu(x: f32[M, N], b: f32[N]) {
  y = relu(x + broadcast(b, [true, false]))
  output y
}
schedule bias_relu {
  xs = x.cache_after(shared)
  y.split(1, 128)
  y.parallelize(0, BIDx)
  y.parallelize(2, TIDx)
  xs.compute_at(y, 2)
  xs.parallelize(2, TIDx)
}
"""


def build_bias_relu():
    with fuserir.FusionDefinition("bias_relu") as fd:
        x = fd.define_tensor("x", "f32", ["M", "N"])
        b = fd.define_tensor("b", "f32", ["N"])
        y = fd.ops.relu(x + fd.ops.broadcast(b, [True, False]))
        fd.add_output(y, "y")
    xs = x.cache_after("shared")
    fd.name(xs, "xs")
    y.split(1, 128)
    y.parallelize(0, "BIDx")
    y.parallelize(2, "TIDx")
    xs.compute_at(y, 2)
    xs.parallelize(2, "TIDx")
    return fd.fusion


def test_builder_equals_dsl():
    built = build_bias_relu()
    parsed = fuserir.parse(BIAS_RELU)
    assert first_difference(built, parsed) is None


def test_builder_fusion_evaluates_and_prints():
    f = build_bias_relu()
    x = np.linspace(-2, 2, 3 * 130, dtype=np.float32).reshape(3, 130)
    b = np.linspace(-1, 1, 130, dtype=np.float32)
    out = fuserir.evaluate(f, {"x": x, "b": b})["y"]
    np.testing.assert_array_equal(out, np.maximum(x + b[None, :], 0))
    text = fuserir.print_fusion(f)
    assert "xs = x.cache_after(shared)" in text and "y.parallelize(0, BIDx)" in text


def test_builder_without_outputs_is_an_error():
    with pytest.raises(FusionError, match="fusion empty has no outputs"):
        with fuserir.FusionDefinition("empty") as fd:
            fd.define_tensor("x", "f32", ["N"])


def test_builder_unknown_dtype():
    with pytest.raises(FusionError, match="input x: unknown dtype 'f8'"):
        with fuserir.FusionDefinition() as fd:
            fd.define_tensor("x", "f8", ["N"])
