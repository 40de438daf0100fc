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


@pytest.mark.parametrize("backend", ["interp", "cuda"])
def test_lowered_kernel_computes_erf(backend, rng):
    """The interpreter runs the lowered kernel (equal to the reference to the bit on f32,
    which it computes in f64 and rounds once); for the CUDA backend the kernel calls
    erff and compiles (NVRTC), and runs where a GPU is."""
    exe = codegen.compile(fuserir.parse(ERF), backend=backend)
    source = "\n".join(k.source for k in exe.kernels)
    assert "erff(" in source
    if backend == "cuda":
        pytest.importorskip("cupy")
        try:
            import cupy
            if cupy.cuda.runtime.getDeviceCount() == 0:
                pytest.skip("no GPU")
        except Exception:     # noqa: BLE001 - no driver: compiled only
            pytest.skip("no GPU")
    v = _inputs(rng)
    out = exe.run(v)
    got = {k: np.asarray(out[k].get() if hasattr(out[k], "get") else out[k]) for k in out}
    want = _erf(v["x"])
    if backend == "interp":
        assert np.array_equal(got["y"], want.astype(np.float32), equal_nan=True)
    else:     # CUDA's erff: within 2 ulp of the exact value
        np.testing.assert_allclose(got["y"].astype(np.float64), want, rtol=3e-7, atol=3e-7,
                                   equal_nan=True)
    np.testing.assert_allclose(got["z"].astype(np.float64),
                               _erf(v["h"]) * v["h"].astype(np.float64), rtol=2 ** -9,
                               atol=2 ** -12)
