"""Generated kernels on the GPU (marked gpu; skipped where there is none).

Every lowered case of the CPU suite (ported sync cases, pass-test fusions, examples, a
batch of random schedules) runs on the GPU with fresh integer-valued inputs and must
equal both the reference evaluator and the interpreter bit for bit: the GPU checks the
generated code, and agreement checks the interpreter itself.
"""

import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codegen
import fuserir
from fuserir.errors import ScheduleError

import test_passes
import test_sync_cases
from test_lowering_property import scheduled

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"

CASES = dict(test_sync_cases.CASES, tiny=test_passes.TINY, rowsum=test_passes.ROWSUM)
SIZES = {"M": 37, "N": 300, "K": 200, "splitk": 3}


def integer_inputs(fusion, rng, sizes=SIZES):
    out = {}
    for tv in fusion.inputs:
        shape = [e if isinstance(e, int) else sizes[str(e)] for e in tv.shape]
        out[tv.name] = rng.integers(-8, 8, shape).astype(tv.dtype.numpy)
    out.update({n: sizes[n] for n in fusion.scalars})     # the declared run-time scalars
    return out


def check_on_gpu(fusion, inputs):
    gpu = codegen.compile(fusion, backend="cuda").run(inputs, poison=True)
    cpu = codegen.compile(fusion, backend="interp").run(inputs)
    want = fuserir.evaluate(fusion, inputs)
    for name, value in want.items():
        got = gpu[name].get()
        if value.dtype != got.dtype:          # bf16 comes back as its bits
            got = got.view(value.dtype)
        np.testing.assert_array_equal(got, cpu[name], err_msg=f"GPU vs interpreter: {name}")
        np.testing.assert_array_equal(got, value, err_msg=f"GPU vs reference: {name}")


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_lowered_case_on_gpu(case):
    fusion = fuserir.parse(CASES[case])
    check_on_gpu(fusion, integer_inputs(fusion, np.random.default_rng()))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["splitk_matmul.fz", "bias_relu_matmul.fz",
                                  "pointwise_chain.fz"])
def test_example_on_gpu(name):
    fusion = fuserir.dsl.parse_file(EXAMPLES / name)
    if name == "pointwise_chain.fz":       # transcendental: compare with a tolerance
        inputs = integer_inputs(fusion, np.random.default_rng())
        got = codegen.compile(fusion, backend="cuda").run(inputs, poison=True)["out"].get()
        want = fuserir.evaluate(fusion, inputs)["out"]
        np.testing.assert_allclose(got.view(want.dtype).astype(np.float64),
                                   want.astype(np.float64), rtol=2 ** -7, atol=1e-6)
        return
    check_on_gpu(fusion, integer_inputs(fusion, np.random.default_rng(),
                                        dict(SIZES, M=40, N=24, K=70)))


@pytest.mark.gpu
def test_random_schedules_on_gpu():
    @settings(max_examples=60, deadline=None, derandomize=True)
    @given(scheduled(), st.integers(0, 2 ** 16))
    def run(fusion, seed):
        try:
            codegen.compile(fusion, backend="interp")
        except ScheduleError:
            return
        inputs = {t.name: np.random.default_rng(seed).integers(-9, 10, [int(e) for e in
                                                                       t.shape]).astype(
            np.float32) for t in fusion.inputs}
        check_on_gpu(fusion, inputs)

    run()


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["add", "bias_relu_bf16", "row_stats", "column_sum",
                                  "softmax", "layer_norm_like", "matmul_epilogue",
                                  "two_outputs_sharing", "outputs_of_different_ranks"])
def test_automatic_schedules_on_gpu(case):
    import test_schedulers
    text, sizes, _ = test_schedulers.CASES[case]
    fusion = fuserir.parse(text)
    big = {k: v * 7 + 3 for k, v in sizes.items()}
    inputs = test_schedulers.inputs_for(fusion, big, np.random.default_rng())
    gpu = codegen.compile(fusion, backend="cuda").run(inputs, poison=True)
    want = fuserir.evaluate(fusion, inputs)
    for name, value in want.items():
        got = gpu[name].get()
        if value.dtype != got.dtype:
            got = got.view(value.dtype)
        np.testing.assert_allclose(got.astype(np.float64), value.astype(np.float64),
                                   rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.gpu
def test_torch_tensors_in_and_out_on_torchs_stream():
    torch = pytest.importorskip("torch")
    import test_schedulers
    fusion = fuserir.parse(test_schedulers.CASES["softmax"][0])
    exe = codegen.compile(fusion, backend="cuda")
    x = torch.randn(33, 1000, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        out = exe.run({"x": x})["out"]
        want = torch.softmax(x, dim=1)
    torch.cuda.synchronize()
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)
    bf16 = fuserir.parse(test_schedulers.CASES["bias_relu_bf16"][0])
    xb = torch.randn(9, 70, device="cuda").to(torch.bfloat16)
    bb = torch.randn(70, device="cuda").to(torch.bfloat16)
    got = codegen.compile(bf16, backend="cuda").run({"x": xb, "b": bb})["out"]
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, torch.relu(xb.float() + bb.float()).to(torch.bfloat16))


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["f32", "f16_vectors"])
def test_async_copies_on_gpu(case):
    import test_async_copy
    text, shape = test_async_copy.CASES[case]
    fusion = fuserir.parse(text)
    big = (37, shape[1] * 5 + (0 if case == "f16_vectors" else 3))
    check_on_gpu(fusion, test_async_copy.inputs_for(fusion, big, np.random.default_rng()))
