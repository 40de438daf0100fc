"""Launch limits and run()'s arguments: what a device cannot launch is refused with the
numbers, when the kernel is built where the limit does not depend on the sizes, and
before any launch (interpreter too) where it does; misused run() arguments get a clear
error instead of an AttributeError or TypeError from deep inside."""

import numpy as np
import pytest

import codegen
import fuserir
from codegen.launch import LaunchLimitError
from fuserir.errors import FuserirError
from test_matmul import integer_inputs, seed_fusion

POINTWISE = "fusion f(x: f32[M, N]) {\n  y = x + 1.0\n  output y\n}\n"


def scheduled(body, definition=POINTWISE):
    return fuserir.parse(f"{definition}schedule f {{\n{body}\n}}\n")


def test_65_threads_in_z_are_refused_when_the_kernel_is_built():
    f = fuserir.parse("fusion f(x: f32[M, N, 65]) {\n  y = x + 1.0\n  output y\n}\n"
                      "schedule f {\n  y.parallelize(2, TIDz)\n}\n")
    with pytest.raises(LaunchLimitError) as caught:
        codegen.compile(f, backend="interp")
    assert str(caught.value) == ("kernel f: 65 threads along block z (at most 64), over "
                                 "the limit of CPU interpreter (an H200's limits)")


def test_more_than_1024_threads_per_block_are_refused():
    f = scheduled("  y.split(1, 64)\n  y.parallelize(1, TIDy)\n  y.parallelize(2, TIDx)",
                  "fusion f(x: f32[M, 2048]) {\n  y = x + 1.0\n  output y\n}\n")
    with pytest.raises(LaunchLimitError, match=r"2048 threads per block \(64, 32, 1\) "
                                               r"\(at most 1024\)"):
        codegen.compile(f, backend="interp")


def test_a_grid_y_of_70000_is_refused_before_the_launch():
    exe = codegen.compile(scheduled("  y.parallelize(0, BIDy)"), backend="interp")
    with pytest.raises(LaunchLimitError) as caught:
        exe.run({"x": np.zeros((70000, 1), np.float32)})
    assert str(caught.value) == ("kernel f at M=70000, N=1: 70000 blocks along grid y (at "
                                 "most 65535), over the limit of CPU interpreter (an H200's "
                                 "limits)")


def test_a_4_mb_local_array_is_refused_when_the_kernel_is_built():
    f = scheduled("  xl = x.cache_after(local)\n  xl.compute_at(y, 0)",
                  "fusion f(x: f32[1024, 1024]) {\n  y = x + 1.0\n  output y\n}\n")
    with pytest.raises(LaunchLimitError, match=r"4194304 bytes of local arrays per thread "
                                               r"\(at most 524288\)"):
        codegen.compile(f, backend="interp")


def test_shared_memory_over_the_device_limit_is_refused_when_the_kernel_is_built():
    f = scheduled("  xs = x.cache_after(shared)\n  xs.compute_at(y, 0)",
                  "fusion f(x: f32[256, 256]) {\n  y = x + 1.0\n  output y\n}\n")
    with pytest.raises(LaunchLimitError, match=r"262144 bytes of shared memory per block "
                                               r"\(at most 232448\)"):
        codegen.compile(f, backend="interp")


@pytest.mark.parametrize("splitk", [70000, 2 ** 31])
def test_a_split_factor_past_the_grid_limit_is_refused_not_run(splitk, rng):
    exe = codegen.compile(seed_fusion(), backend="interp")
    with pytest.raises(FuserirError, match=r"(blocks along grid z \(at most 65535\)|does "
                                           r"not fit)"):
        exe.run({**integer_inputs(rng, 64, 64, 64), "splitk": splitk})


@pytest.mark.parametrize("per_sm, splitk, message", [
    (1, 133, r"kernel splitk_nt at K=64, M=64, N=64, splitk=133: its 133 blocks wait for "
             r"each other \(a parallel grid reduction's counters\) and must all be resident "
             r"at once, but NVIDIA H200 holds 1 per SM x 132 SMs = 132: use fewer splits"),
    (0, 2, r"kernel splitk_nt: one block of 256 threads and \d+ bytes of dynamic shared "
           r"memory does not fit on an SM of NVIDIA H200 \(its registers or shared "
           r"memory\): use smaller tiles or fewer stages"),
])
def test_the_co_residency_check_names_both_counts(per_sm, splitk, message, monkeypatch):
    """The launcher's check of a co-resident kernel (codegen.launch), with the driver's
    occupancy answer given: a grid past the resident blocks, or a block that fits no SM,
    is refused before any launch; a grid that fits passes."""
    from cupy.cuda import driver
    from codegen import launch
    from lowering.kir import evaluate_scalar
    kernel = codegen.compile(seed_fusion(splitk_mode="parallel"), backend="interp") \
        .kernels[0].kir
    asked = []
    monkeypatch.setattr(driver, "occupancyMaxActiveBlocksPerMultiprocessor",
                        lambda *key: asked.append(key) or per_sm)
    monkeypatch.setattr(launch, "_resident_per_sm", {})
    monkeypatch.setattr(launch, "device_model", lambda: fuserir.device.H200)

    class Function:
        ptr = 1
    scalars = {"M": 64, "N": 64, "K": 64, "splitk": splitk}
    config = launch.launch_config(kernel, scalars)
    assert config[0] == (1, 1, splitk) and evaluate_scalar(kernel.launch.block[0], {}) * \
        evaluate_scalar(kernel.launch.block[1], {}) == 256
    with pytest.raises(LaunchLimitError, match=message):
        launch._check_co_resident(kernel, Function(), config, scalars)
    if per_sm:
        launch._check_co_resident(kernel, Function(), launch.launch_config(
            kernel, {**scalars, "splitk": 132}), scalars)          # 132 blocks fit
        assert len(asked) == 1                                    # asked once, kept


@pytest.mark.gpu
def test_a_parallel_split_past_the_resident_blocks_is_refused_not_run(rng):
    """A parallel grid reduction's blocks wait for blocks launched after them: a grid the
    device cannot hold at once would hang, so the launch is refused with both counts."""
    import cupy
    exe = codegen.compile(seed_fusion(splitk_mode="parallel"), backend="cuda")
    inputs = integer_inputs(rng, 64, 64, 64)
    data = {k: cupy.asarray(v) for k, v in inputs.items()}
    with pytest.raises(LaunchLimitError, match=r"its 2000 blocks wait for each other .* must "
                                               r"all be resident at once, but .* holds \d+ per "
                                               r"SM x \d+ SMs = \d+: use fewer splits"):
        exe.run({**data, "splitk": 2000})
    out = exe.run({**data, "splitk": 2})["out"]       # a grid that fits still runs
    assert np.array_equal(cupy.asnumpy(out), fuserir.evaluate(seed_fusion(), inputs)["out"])


def test_run_takes_a_dict_of_inputs():
    exe = codegen.compile(scheduled("  y.parallelize(0, BIDx)"), backend="interp")
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(FuserirError, match=r"run\(\) takes a dict of inputs by name "
                                           r"\(\{name: array\} and \{name: int\}\), got a list"):
        exe.run([x])


@pytest.mark.parametrize("blocks", [[0], 0, [(0, 0, 0, 0)], [(-1,)], [(True,)], [("0",)]])
def test_run_blocks_must_be_tuples_of_block_indices(blocks):
    exe = codegen.compile(scheduled("  y.parallelize(0, BIDx)"), backend="interp")
    with pytest.raises(FuserirError, match=r"run\(blocks=...\): each block is a tuple \(x,\), "
                                           r"\(x, y\) or \(x, y, z\) of integers >= 0"):
        exe.run({"x": np.zeros((2, 3), np.float32)}, blocks=blocks)


def test_run_blocks_selects_blocks():
    exe = codegen.compile(scheduled("  y.parallelize(0, BIDx)"), backend="interp")
    out = exe.run({"x": np.zeros((2, 3), np.float32)}, blocks=[(1,)])["y"]
    assert np.isnan(out[0]).all() and (out[1] == 1).all()
