"""codegen.compile and Executable.run: the contract (docs/architecture.md) on the CPU."""

import numpy as np
import pytest

import codegen
import driver.executable as executable
import fuserir
from fuserir.dtypes import DataType
from fuserir.errors import EvaluationError, FuserirError

from test_builder import BIAS_RELU  # the same scheduled fusion


@pytest.fixture
def fusion():
    return fuserir.parse(BIAS_RELU)


def inputs(m=3, n=300, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.integers(-9, 9, (m, n)).astype(np.float32),
            "b": rng.integers(-9, 9, n).astype(np.float32)}


def test_compile_needs_no_gpu_and_gives_cuda_source_and_cubin(fusion):
    exe = codegen.compile(fusion, backend="cuda")
    (kernel,) = exe.kernels
    assert "#include" not in kernel.source
    assert 'extern "C" __global__ void bias_relu_kernel(' in kernel.source  # mangled
    assert kernel.cubin[:4] == b"\x7fELF"


def test_interp_backend_runs_and_matches_reference(fusion):
    exe = codegen.compile(fusion, backend="interp")
    assert exe.kernels[0].source        # CUDA text on both backends
    data = inputs()
    got = exe.run(data)["y"]
    np.testing.assert_array_equal(got, fuserir.evaluate(fusion, data)["y"])


def test_block_selection_runs_only_chosen_blocks_and_leaves_others_poisoned(fusion):
    exe = codegen.compile(fusion, backend="interp")
    data = inputs(m=4)
    got = exe.run(data, blocks=[(2,)])["y"]
    want = fuserir.evaluate(fusion, data)["y"]
    np.testing.assert_array_equal(got[2], want[2])
    assert np.isnan(got[[0, 1, 3]]).all()


def test_sizes_past_32_bit_indexing_use_64_bit_kernels(fusion, monkeypatch):
    exe = codegen.compile(fusion, backend="interp")
    monkeypatch.setattr(executable, "INDEX_LIMIT", 100)
    data = inputs()
    got = exe.run(data)["y"]
    (wide,) = exe.kernels_for(data)                   # the kernel of this run: 64-bit
    assert wide.kir.index_dtype is DataType.i64
    assert "i64" in wide.kir_text.splitlines()[1]
    np.testing.assert_array_equal(got, fuserir.evaluate(fusion, data)["y"])


@pytest.mark.parametrize("bad, message", [
    ({"x": np.zeros((3, 4), np.float64), "b": np.zeros(4, np.float32)},
     "input x: expected f32, got float64"),
    ({"x": np.zeros((3, 4), np.float32), "b": np.zeros(5, np.float32)},
     "input b: axis 0 is N = 5, but N = 4 from input x axis 1"),
    ({"x": np.zeros((3, 4), np.float32)}, "missing input 'b'"),
])
def test_run_checks_inputs(fusion, bad, message):
    exe = codegen.compile(fusion, backend="interp")
    with pytest.raises(EvaluationError, match=message):
        exe.run(bad)


def test_named_scalar_must_be_given():
    f = fuserir.dsl.parse_file(str(__import__("pathlib").Path(__file__).parents[1]
                                   / "examples" / "splitk_matmul.fz"))
    exe = codegen.compile(f, backend="interp")
    a = np.ones((8, 4), np.float16)
    with pytest.raises(EvaluationError, match="needs a value for 'splitk'"):
        exe.run({"A": a, "B": a})


def test_unknown_backend(fusion):
    with pytest.raises(FuserirError, match="unknown backend 'metal'; expected one of cuda, "
                                           "interp"):
        codegen.compile(fusion, backend="metal")


def test_a_second_compile_of_the_same_fusion_reuses_its_kernels():
    import fuserir
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "examples" / "seed_matmul.fz").read_text()
    first = codegen.compile(fuserir.parse(text), backend="interp")
    again = codegen.compile(fuserir.parse(text), backend="interp")
    assert again.kernels[0] is first.kernels[0] and again is not first
    other = codegen.compile(fuserir.parse(text), backend="interp", verify=False)
    assert other.kernels[0] is not first.kernels[0]          # options are part of the key
    changed = fuserir.parse(text.replace("stages=3", "stages=2"))
    assert codegen.compile(changed, backend="interp").kernels[0] is not first.kernels[0]


def test_fusions_differing_only_in_an_output_name_do_not_share_an_executable():
    # t0 and t1 look like generated names, but an output's name is the fusion's interface
    x = np.arange(6, dtype=np.float32)
    first = codegen.compile(fuserir.parse(
        "fusion f(x: f32[N]) {\n  t0 = x + 1.0\n  output t0\n}\n"), backend="interp")
    second = codegen.compile(fuserir.parse(
        "fusion f(x: f32[N]) {\n  t1 = x + 1.0\n  output t1\n}\n"), backend="interp")
    assert list(first.run({"x": x})) == ["t0"]
    assert list(second.run({"x": x})) == ["t1"]
    np.testing.assert_array_equal(second.run({"x": x})["t1"], x + 1)


def test_interleavings_run_a_warp_specialized_kernel_under_each_role_order(monkeypatch, rng):
    """run(interleavings=seeds): a kernel whose roles order each other by mbarriers runs
    under both role orders and each seed, each on fresh outputs, and gives the first run's
    outputs; a kernel without roles runs once (its orders are all the same)."""
    import codegen.interp as interp
    from test_hopper_matmul import HOPPER, integer_inputs, reference, scheduled
    calls = []
    real = interp.run_kernel

    def counted(kernel, args, blocks=None, workspaces=None, interleaving="then-first"):
        calls.append(interleaving)
        return real(kernel, args, blocks, workspaces, interleaving)

    monkeypatch.setattr(interp, "run_kernel", counted)
    monkeypatch.setattr(executable, "run_kernel", counted)
    exe = codegen.compile(scheduled(dict(HOPPER), layout="TT"), backend="interp")
    data = integer_inputs(rng, "TT", 128, 128, 128)
    out = exe.run(data, interleavings=(7,))["out"]
    assert calls == ["then-first", "else-first", 7]
    assert np.array_equal(out, reference("TT", data).astype(np.float16))
    calls.clear()
    exe.run(data)
    assert calls == ["then-first"]
    calls.clear()
    plain = codegen.compile(fuserir.parse(BIAS_RELU), backend="interp")
    plain.run(inputs(), interleavings=(7,))
    assert calls == ["then-first"]


def test_interleavings_are_for_the_interpreter(fusion):
    exe = codegen.compile(fusion, backend="cuda")
    with pytest.raises(FuserirError, match="the interpreter's options only"):
        exe.run({}, interleavings=(0,))


def test_tma_reads_an_operand_whose_only_odd_strides_are_of_axes_of_one_element():
    """A matmul operand's arrays are read by TMA where laid out as row-major contiguous
    ones, the strides of its axes of one element aside (torch's `x.t()` of a 1 x K row:
    shape (K, 1), strides (1, K)); a transposed 2 x 2 (the same elements, not the same
    layout) or a strided column is not."""
    reads = executable._tma_reads_strides
    row = np.zeros((1, 4096), np.float16)
    assert reads({"A"}, {"A": row.T}) and reads({"A"}, {"A": row})
    assert not reads({"A"}, {"A": np.zeros((2, 2), np.float16).T})
    assert not reads({"A"}, {"A": np.zeros((4096, 4), np.float16)[:, :1]})
    assert reads({"A"}, {"B": np.zeros((2, 2), np.float16).T})     # not an operand
