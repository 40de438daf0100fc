"""erf, added as one entry of the op table: its meaning in the reference, the DSL and the
builder, lowering, the interpreter and the CUDA emitter all come from that entry. The
expected values here are math.erf's, computed independently of fuserir."""

import math

import numpy as np
import pytest

import codegen
import fuserir
from fuserir import ops
from fuserir.dtypes import DataType

ERF = """
fusion erf_chain(x: f32[N], h: f16[N]) {
  y = erf(x)
  z = erf(h) * h
  output y
  output z
}
"""


def _erf(values):
    return np.array([math.erf(float(v)) for v in values], dtype=np.float64)


def _inputs(rng, n=37):
    x = np.concatenate([[0.0, -0.0, 1e-8, 6.0, -6.0, np.inf, -np.inf, np.nan],
                        rng.uniform(-3, 3, n - 8)]).astype(np.float32)
    return {"x": x, "h": rng.uniform(-3, 3, n).astype(np.float16)}


def test_reference_is_erf_rounded_once(rng):
    f = fuserir.parse(ERF)
    v = _inputs(rng)
    out = fuserir.evaluate(f, v)
    assert out["y"].dtype == np.float32 and out["z"].dtype == np.float16
    want = _erf(v["x"]).astype(np.float32)
    assert np.array_equal(out["y"], want, equal_nan=True)
    h = v["h"].astype(np.float64)
    assert np.array_equal(out["z"], (_erf(h).astype(np.float16).astype(np.float32)
                                     * v["h"].astype(np.float32)).astype(np.float16))


def test_dsl_builder_and_printer_know_erf():
    f = fuserir.parse(ERF)
    assert "y = erf(x)" in fuserir.print_fusion(f)
    g = fuserir.parse(fuserir.print_fusion(f))
    assert fuserir.print_fusion(g) == fuserir.print_fusion(f)
    assert ops.erf.__name__ == "erf"
    fd = fuserir.FusionDefinition("b")
    x = fd.define_tensor("x", DataType.i32, ["N"])
    fd.add_output(fd.ops.erf(x), "y")
    assert fd.fusion.outputs[0].dtype is DataType.f32     # an integer operand gives f32


def test_erf_of_a_bool_or_a_typo_is_an_error():
    with pytest.raises(fuserir.DslError, match="unknown operation 'erff'"):
        fuserir.parse("fusion f(x: f32[N]) {\n  y = erff(x)\n  output y\n}\n")


def _outputs(out):
    return {k: np.asarray(v.get() if hasattr(v, "get") else v) for k, v in out.items()}


def test_the_interpreter_computes_erf_to_the_bit(rng):
    """The lowered kernel in the interpreter: f32 erf computed in f64 and rounded once,
    equal to math.erf rounded to f32 (NaN, infinities and signed zeros too)."""
    exe = codegen.compile(fuserir.parse(ERF), backend="interp")
    v = _inputs(rng)
    got = _outputs(exe.run(v))
    assert np.array_equal(got["y"], _erf(v["x"]).astype(np.float32), equal_nan=True)
    assert np.array_equal(got["z"], fuserir.evaluate(fuserir.parse(ERF), v)["z"])


def test_the_cuda_kernel_calls_erff_and_compiles():
    exe = codegen.compile(fuserir.parse(ERF), backend="cuda")     # NVRTC: no GPU needed
    source = "\n".join(k.source for k in exe.kernels)
    assert "erff(" in source and all(k.cubin for k in exe.kernels)


@pytest.mark.gpu
def test_erf_on_the_gpu(rng):
    """CUDA's erff is within 2 ulp of the exact value (the f16 output within its rounding)."""
    exe = codegen.compile(fuserir.parse(ERF), backend="cuda")
    v = _inputs(rng)
    got = _outputs(exe.run(v))
    np.testing.assert_allclose(got["y"].astype(np.float64), _erf(v["x"]), rtol=3e-7,
                               atol=3e-7, equal_nan=True)
    np.testing.assert_allclose(got["z"].astype(np.float64),
                               _erf(v["h"]) * v["h"].astype(np.float64), rtol=2 ** -9,
                               atol=2 ** -12)
