"""welford: the one-pass mean and variance. Its state type and merge (fuserir.numerics)
against Welford's sequential update and exact f64 statistics; the op against numpy in the
reference evaluator and in the interpreter under every plan the reduction scheduler gives
it (a warp a row, a block a row, a row split over CTAs and merged through the cross-CTA
protocol, columns, the whole tensor, a layer norm that broadcasts it back); the DSL round
trip; each refusal located (the DSL's with the statistics', tests/test_statistics.py); and
on the GPU, the 1000-run stress of a grid Welford."""

import numpy as np
import pytest

import codegen
import fuserir
from conftest import on_host
from fuserir import DataType, DslError, FusionError, numerics, ops
from fuserir.scheduler.reduction_plans import reduction_plan

WELFORD = DataType.welford


def states(values):
    return numerics.convert(np.asarray(values, np.float32), WELFORD)


# -- the state and its merge --------------------------------------------------------------

def test_merging_one_element_at_a_time_is_welfords_update(rng):
    x = (rng.standard_normal(200) * 2 + 50).astype(np.float32)
    acc = numerics.identity("welford_merge", WELFORD)
    mean = m2 = np.float32(0)
    for n, v in enumerate(x, 1):
        acc = numerics.welford_merge(acc, states(v))
        d = v - mean                                   # Welford (1962), in f32
        mean = np.float32(mean + d / np.float32(n))
        m2 = np.float32(m2 + d * (v - mean))
    assert acc["count"] == 200
    np.testing.assert_allclose(acc["mean"], mean, rtol=1e-6)
    np.testing.assert_allclose(acc["m2"], m2, rtol=1e-4)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(acc["m2"], ((x64 - x64.mean()) ** 2).sum(), rtol=1e-4)


def test_the_identity_merges_exactly_on_either_side():
    s = numerics.welford_merge(states([3.0, 5.0])[0], states([5.0])[()])
    empty = numerics.identity("welford_merge", WELFORD)
    assert numerics.welford_merge(empty, s).tolist() == s.tolist()
    assert numerics.welford_merge(s, empty).tolist() == s.tolist()
    assert numerics.welford_merge(empty, empty).tolist() == empty.tolist()


def test_one_pass_stays_accurate_where_the_sum_of_squares_cancels(rng):
    # mean 1e4, variance 1: E[x^2] - E[x]^2 in f32 loses every digit; Welford keeps them
    x = (rng.standard_normal(1 << 14) + 1e4).astype(np.float32)
    exact = x.astype(np.float64).var()
    naive = np.float32((x * x).sum(dtype=np.float32) / x.size
                       - (x.sum(dtype=np.float32) / x.size) ** 2)
    assert abs(naive - exact) > 0.5 * exact              # the formula it replaces fails
    merged = numerics.welford_reduce(states(x), [0])
    assert abs(merged["m2"] / x.size - exact) < 1e-5 * exact
    # in f32, pairwise (as threads, blocks and CTAs merge) as in sequence
    parts = states(x)
    while parts.size > 1:
        parts = numerics.welford_merge(parts[0::2], parts[1::2])
    assert abs(parts[0]["m2"] / x.size - exact) < 1e-4 * exact
    seq = numerics.identity("welford_merge", WELFORD)
    for s in states(x[:2048]):
        seq = numerics.welford_merge(seq, s)
    part = x[:2048].astype(np.float64)
    assert abs(seq["m2"] - ((part - part.mean()) ** 2).sum()) < 1e-3 * seq["m2"]


def test_an_infinity_or_a_nan_makes_the_mean_and_m2_nan():
    for bad in (np.inf, -np.inf, np.nan):
        s = numerics.welford_reduce(states([1.0, bad, 2.0]), [0])
        assert np.isnan(numerics.welford_mean(s)) and np.isnan(s["m2"])
        seq = numerics.identity("welford_merge", WELFORD)
        for v in (1.0, bad, 2.0):
            seq = numerics.welford_merge(seq, states(v))
        assert np.isnan(numerics.welford_mean(seq)) and np.isnan(seq["m2"])
    assert np.isnan(numerics.welford_mean(numerics.identity("welford_merge", WELFORD)))


# -- the op, in the reference and the interpreter ------------------------------------------

CASES = {
    "warp rows": ("f32", (96, 700), [1], 1, False),
    "block rows": ("f32", (16, 5000), [1], 0, False),
    "grid rows": ("f32", (1, 1 << 17), [1], 1, False),
    "columns": ("f32", (3000, 40), [0], 0, False),
    "whole, bf16": ("bf16", (64, 300), [0, 1], 1, True),
    "f16 rows": ("f16", (8, 2000), [-1], 1, True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_welford_matches_numpy_under_each_plan(rng, case):
    dtype, shape, axes, correction, keepdim = CASES[case]
    host = DataType(dtype).numpy
    x = (rng.standard_normal(shape) * 3 + 1000).astype(host)
    text = f"""fusion f(x: {dtype}[M, N]) {{
  v, m = welford(x, axes={axes}, correction={correction}, keepdim={str(keepdim).lower()})
  output v, m
}}"""
    fusion = fuserir.parse(text)
    sizes = dict(zip("MN", shape))
    if case == "grid rows":
        assert reduction_plan(fuserir.parse(text), sizes).splits > 1
    x64 = x.astype(np.float64)
    axes_t = tuple(axes)
    want = {"v": x64.var(axis=axes_t, ddof=correction, keepdims=keepdim),
            "m": x64.mean(axis=axes_t, keepdims=keepdim)}
    ref = fuserir.evaluate(fusion, {"x": x})
    exe = codegen.compile(fusion, backend="interp")
    out = on_host(exe.run({"x": x}), fusion)
    assert len(exe.kernels_for({"x": x})) == 1
    tol = {"f32": 1e-5, "bf16": 2 ** -7, "f16": 2 ** -10}[dtype]
    for name, expected in want.items():
        for got in (ref[name], out[name]):
            assert got.shape == expected.shape and got.dtype == host
            np.testing.assert_allclose(got.astype(np.float64), expected, rtol=tol,
                                       err_msg=f"{case}: {name}")


def test_a_layer_norm_of_welford_statistics_is_one_kernel(rng):
    x = (rng.standard_normal((24, 3000)) * 2 + 500).astype(np.float32)
    text = """fusion ln(x: f32[M, N], w: f32[N]) {
  v, m = welford(x, axes=[1], correction=0, keepdim=true)
  y = (x - m) * rsqrt(v + 1e-5) * broadcast(w, flags=[true, false])
  output y
}"""
    w = rng.uniform(0.5, 1.5, 3000).astype(np.float32)
    fusion = fuserir.parse(text)
    exe = codegen.compile(fusion, backend="interp")
    out = on_host(exe.run({"x": x, "w": w}), fusion)["y"]
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * w
    assert len(exe.kernels_for({"x": x, "w": w})) == 1
    np.testing.assert_allclose(out, want, atol=2e-3)


def test_welford_prints_as_its_state_ops_and_parses_back():
    text = """fusion f(x: f32[M, N]) {
  v, m = welford(x, axes=[1])
  output v, m
}"""
    fusion = fuserir.parse(text)
    printed = fuserir.print_fusion(fusion)
    assert "welford_merge(cast(x, welford), axes=[1])" in printed
    assert "welford_m2(" in printed and "welford_mean(" in printed
    again = fuserir.parse(printed)
    x = np.linspace(-3, 5, 40, dtype=np.float32).reshape(4, 10)
    a, b = fuserir.evaluate(fusion, {"x": x}), fuserir.evaluate(again, {"x": x})
    for name in ("v", "m"):
        np.testing.assert_array_equal(a[name], b[name])


def test_a_row_holding_an_infinity_gives_nan_on_the_interpreter():
    x = np.ones((4, 1000), np.float32)
    x[1, 500] = np.inf
    fusion = fuserir.parse("""fusion f(x: f32[M, N]) {
  v, m = welford(x, axes=[1])
  output v, m
}""")
    out = on_host(codegen.compile(fusion, backend="interp").run({"x": x}), fusion)
    assert np.isnan(out["v"][1]) and np.isnan(out["m"][1])
    np.testing.assert_array_equal(np.delete(out["m"], 1), 1.0)
    np.testing.assert_array_equal(np.delete(out["v"], 1), 0.0)


# -- located refusals ----------------------------------------------------------------------

def test_a_welford_state_is_no_output():
    with pytest.raises(DslError, match="output v: a welford state is not a tensor type; "
                       "read it with welford_mean or welford_m2") as caught:
        fuserir.parse("fusion f(x: f32[M, N]) {\n  v = cast(x, welford)\n  output v\n}")
    assert (caught.value.line, caught.value.column) == (3, 10)


def test_a_welford_state_is_no_input_type():
    with pytest.raises(DslError, match="unknown dtype 'welford'; expected one of f16") as e:
        fuserir.parse("fusion f(s: welford[N]) {\n  v = welford_mean(s)\n  output v\n}")
    assert (e.value.line, e.value.column) == (1, 13)
    with fuserir.FusionDefinition("f") as fd:
        with pytest.raises(FusionError, match="input s: a welford state"):
            fd.define_tensor("s", "welford", ["N"])
        x = fd.define_tensor("x", "f32", ["N"])
        with pytest.raises(FusionError, match="sum: operand t1 is a welford state"):
            ops.sum(ops.cast(x, DataType.welford), [0])
        fd.add_output(ops.welford(x, [0])[0])


# -- on the GPU ------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("case", ["warp rows", "block rows", "grid rows", "columns",
                                  "whole, bf16"])
def test_welford_on_the_gpu_matches_the_interpreter(rng, case):
    dtype, shape, axes, correction, keepdim = CASES[case]
    x = (rng.standard_normal(shape) * 3 + 1000).astype(DataType(dtype).numpy)
    text = f"""fusion f(x: {dtype}[M, N]) {{
  v, m = welford(x, axes={axes}, correction={correction}, keepdim={str(keepdim).lower()})
  output v, m
}}"""
    fusion = fuserir.parse(text)
    gpu = on_host(codegen.compile(fusion, backend="cuda").run({"x": x}), fusion)
    interp = on_host(codegen.compile(fusion, backend="interp").run({"x": x}), fusion)
    for name in ("v", "m"):
        # the same merges in the same order, each rounded on its own: the same bits
        np.testing.assert_array_equal(gpu[name], interp[name], err_msg=name)


@pytest.mark.gpu
def test_a_grid_welford_gives_the_same_bits_in_1000_runs(rng):
    """Rows split over 8 CTAs each (merged through the cross-CTA protocol): 10 inputs,
    each run 100 times; every run's bits equal that input's first run's, and close to
    the f64 statistics."""
    text = """fusion f(x: f32[M, N]) {
  v, m = welford(x, axes=[1])
  output v, m
}"""
    shape = (4, 1 << 20)
    assert reduction_plan(fuserir.parse(text), dict(zip("MN", shape))).splits == 8
    fusion = fuserir.parse(text)
    exe = codegen.compile(fusion, backend="cuda")
    mismatches = 0
    for _ in range(10):
        x = (rng.standard_normal(shape) * rng.uniform(0.1, 10) + rng.uniform(-1e3, 1e3))
        x = x.astype(np.float32)
        x64 = x.astype(np.float64)
        first = on_host(exe.run({"x": x}), fusion)
        np.testing.assert_allclose(first["v"], x64.var(1, ddof=1), rtol=1e-5)
        np.testing.assert_allclose(first["m"], x64.mean(1), rtol=1e-5, atol=1e-5)
        for _ in range(99):
            out = on_host(exe.run({"x": x}), fusion)
            mismatches += sum(not np.array_equal(out[k], first[k]) for k in ("v", "m"))
    assert mismatches == 0
