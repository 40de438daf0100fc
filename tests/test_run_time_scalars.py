"""Run-time scalars are declared by the scheduled fusion, and automatic schedules are
chosen for the sizes and device a fusion runs at.

* A schedule's literal (`matmul(..., splitk=5)`) is the declared default: run() uses it
  when the caller passes nothing, may override it, and refuses a name nobody declared,
  listing what is declared. The declaration is part of the fusion: printed, parsed back,
  compared, shown by `fuserir inspect`.
* An unscheduled matmul is scheduled at its first run() of a size class with the
  parameters matmul_heuristic gives for exactly those sizes and that device: the same
  kernel (CUDA text) as an explicit schedule with those parameters; size classes whose
  parameters agree share one compiled kernel.
"""

import numpy as np
import pytest

import codegen
import fuserir
from driver import executable
from fuserir.device import H200
from fuserir.errors import DslError, EvaluationError, ScheduleError
from fuserir.ir.equality import structurally_equal
from fuserir.scheduler import schedule_matmul
from fuserir.scheduler import auto
from fuserir.scheduler.matmul_heuristic import matmul_heuristic
from test_cli import EXAMPLES, fuserir as run_cli
from test_matmul import AUTO, DEFINITION, integer_inputs

SEED_TEXT = (EXAMPLES / "seed_matmul.fz").read_text()


@pytest.fixture(scope="module")
def seed():
    f = fuserir.parse(SEED_TEXT)
    return f, codegen.compile(f, backend="interp")


def bound_env(exe, inputs):
    return exe._bound(inputs, poison=True).env


# -- declared scalars ----------------------------------------------------------------------

def test_the_schedule_literal_is_the_default_of_a_declared_scalar(seed, rng):
    f, exe = seed
    assert f.scalars == {"splitk": 5}
    inputs = integer_inputs(rng, 256, 128, 32 * 13)
    assert bound_env(exe, inputs)["splitk"] == 5        # nothing passed: the default
    out = exe.run(inputs)["out"]                        # no "splitk" in the inputs
    assert np.array_equal(out, fuserir.evaluate(f, inputs)["out"])


def test_run_overrides_a_declared_scalar(seed, rng):
    f, exe = seed
    inputs = integer_inputs(rng, 256, 128, 32 * 13)
    assert bound_env(exe, {**inputs, "splitk": 3})["splitk"] == 3
    out = exe.run({**inputs, "splitk": 3})["out"]
    assert np.array_equal(out, fuserir.evaluate(f, inputs)["out"])


def test_an_undeclared_scalar_is_refused_by_name(seed, rng):
    f, exe = seed
    inputs = integer_inputs(rng, 64, 64, 64)
    message = ("'splitK' is neither an input nor a run-time scalar of fusion splitk_nt "
               "(inputs: A, B; run-time scalars: splitk (default 5); sizes: K, M, N)")
    with pytest.raises(EvaluationError) as caught:
        exe.run({**inputs, "splitK": 4})
    assert str(caught.value) == message
    with pytest.raises(EvaluationError) as caught:
        fuserir.evaluate(f, {**inputs, "splitK": 4})
    assert str(caught.value) == message


def test_an_unscheduled_fusion_declares_nothing_to_override(rng):
    exe = codegen.compile(fuserir.parse(DEFINITION), backend="interp")
    with pytest.raises(EvaluationError, match="'splitk' is neither an input nor a run-time "
                                              "scalar .* run-time scalars: none"):
        exe.run({**integer_inputs(rng, 16, 16, 64), "splitk": 2})


def test_a_scalar_declared_without_a_default_must_be_passed(rng):
    f = fuserir.parse((EXAMPLES / "splitk_matmul.fz").read_text())
    assert f.scalars == {"splitk": None}            # split by a name: declared, no default
    exe = codegen.compile(f, backend="interp")
    with pytest.raises(EvaluationError, match="needs a value for 'splitk', which has no "
                                              r"default; pass it in the inputs \(inputs: A, "
                                              r"B; run-time scalars: splitk; sizes: K, M, N\)"):
        exe.run(integer_inputs(rng, 8, 8, 16))


def test_the_declaration_prints_parses_back_and_compares():
    f = fuserir.parse(SEED_TEXT)
    text = fuserir.print_fusion(f)
    assert "  scalar(splitk, default=5)\n" in text
    g = fuserir.parse(text)
    assert g.scalars == {"splitk": 5} and structurally_equal(f, g)
    other = fuserir.parse(SEED_TEXT.replace("splitk=5", "splitk=4"))
    assert not structurally_equal(f, other)          # the default is part of the fusion
    assert codegen.compile(g, backend="interp").kernels[0].source == \
        codegen.compile(f, backend="interp").kernels[0].source


def test_the_scalar_statement_declares_a_default_for_a_named_split(rng):
    text = (EXAMPLES / "splitk_matmul.fz").read_text().replace(
        "schedule splitk_nt {", "schedule splitk_nt {\n  scalar(splitk, default=2)")
    f = fuserir.parse(text)
    assert f.scalars == {"splitk": 2}
    inputs = integer_inputs(rng, 8, 8, 16)
    exe = codegen.compile(f, backend="interp")
    assert bound_env(exe, inputs)["splitk"] == 2
    assert np.array_equal(exe.run(inputs)["out"], fuserir.evaluate(f, inputs)["out"])


USAGE = "scalar(...) takes a name and optionally default=N, e.g. scalar(splitk, default=4)"


@pytest.mark.parametrize("statement, column, message", [
    ("scalar(5)", 3, USAGE),
    ("scalar(s, 4)", 3, USAGE),
    ("scalar(s, default=0)", 21, "scalar s: default must be an integer >= 1"),
    ("scalar(s, default=2.5)", 21, "scalar s: default must be an integer >= 1"),
    ("scalar(s, level=2)", 3, USAGE),
    ("scalar(y, default=2)", 10, "run-time scalar y of fusion f: a tensor has that name"),
    ("scalar(N, default=2)", 10, "N is a size of fusion f (bound from the inputs' shapes); "
                                 "it cannot have a default"),
])
def test_bad_scalar_statements_are_located(statement, column, message):
    text = (f"fusion f(x: f32[N]) {{\n  y = x + 1.0\n  output y\n}}\n"
            f"schedule f {{\n  {statement}\n}}\n")
    with pytest.raises(DslError) as caught:
        fuserir.parse(text)
    assert (caught.value.line, caught.value.column) == (6, column)
    assert caught.value.message == message


def test_a_split_by_a_tensors_name_is_refused():
    f = fuserir.parse("fusion f(x: f32[N]) {\n  y = x + 1.0\n  output y\n}\n")
    with pytest.raises(ScheduleError, match="split: run-time scalar x of fusion f: a tensor "
                                            r"has that name \(tensor y, axis 0\)"):
        f.tensor("y").split(0, "x")


# -- automatic schedules per size class ------------------------------------------------------

SIZES = [(1024, 2048, 4096), (128, 128, 262144), (136, 184, 175704), (4096, 4096, 4096),
         (64, 48, 512)]


@pytest.mark.parametrize("m, n, k", SIZES)
def test_an_unscheduled_matmul_takes_the_heuristics_schedule_for_its_sizes(m, n, k):
    exe = codegen.compile(fuserir.parse(AUTO), backend="interp", device=H200)
    schedule, scalars, steps = exe.plan_for({"M": m, "N": n, "K": k})
    params = matmul_heuristic(m, n, k, layout="TN", dtypes=("f16", "f16", "f16"))
    assert scalars == {"splitk": params.splitk_factor}
    explicit = fuserir.parse(AUTO)
    schedule_matmul(explicit, params)
    want = codegen.compile(explicit, backend="interp", device=H200)
    # the very kernels the heuristic's parameters give when told the sizes
    assert [s.kernel.source for s in steps] == [k.source for k in want.kernels]


def test_size_classes_with_the_same_parameters_share_one_kernel():
    exe = codegen.compile(fuserir.parse(AUTO), backend="interp", device=H200)
    a = exe.plan_for({"M": 1024, "N": 2048, "K": 4096})
    b = exe.plan_for({"M": 1000, "N": 2000, "K": 4000})     # the same tiles and stages
    c = exe.plan_for({"M": 128, "N": 128, "K": 262144})     # the parallel split-K
    assert a[0] == b[0] and a[2][0] is b[2][0]
    assert a[0] != c[0] and len(c[2]) == 1 and dict(c[0])["splitk_mode"] == "parallel"
    sm80 = codegen.compile(fuserir.parse(AUTO), backend="interp", device=H200.with_(cc=(8, 0)))
    assert len(sm80.plan_for({"M": 128, "N": 128, "K": 262144})[2]) == 2   # two kernels


def test_the_first_run_of_a_size_class_schedules_for_those_sizes(rng, monkeypatch):
    exe = codegen.compile(fuserir.parse(AUTO), backend="interp", device=H200)
    asked = []
    monkeypatch.setattr(executable, "schedule_key",
                        lambda f, sizes, device: asked.append(dict(sizes)) or
                        auto.schedule_key(f, sizes, device))
    m, n, k = 64, 48, 512
    data = {"A": rng.integers(-3, 4, (m, k)).astype(np.float16),
            "B": rng.integers(-3, 4, (n, k)).astype(np.float16),
            "bias": rng.integers(-3, 4, (n,)).astype(np.float16)}
    want = fuserir.evaluate(fuserir.parse(AUTO), data)["out"]
    for _ in range(2):
        assert np.array_equal(exe.run(data)["out"], want)
    assert asked == [{"M": m, "N": n, "K": k}]          # once per size class
    assert bound_env(exe, data)["splitk"] == 2           # the heuristic's, for these sizes


def test_the_device_model_changes_the_schedule():
    f = fuserir.parse(AUTO)
    sizes = {"M": 1024, "N": 2048, "K": 4096}
    full, few = auto.schedule_key(f, sizes, H200), auto.schedule_key(f, sizes,
                                                                    H200.with_(sms=16))
    assert dict(full[0])["instruction_tile"] == (64, 128, 16)    # the Hopper path
    assert full[1] == {"splitk": 1} and dict(few[0])["cta_tile"] == (128, 256, 64)
    sm80 = auto.schedule_key(f, sizes, H200.with_(cc=(8, 0)))
    assert sm80[1] == {"splitk": 2} and dict(sm80[0])["instruction_tile"] == (16, 8, 16)
    small = auto.schedule_key(f, sizes, H200.with_(shared_limit=48 * 1024))
    assert dict(small[0])["stages"] < dict(full[0])["stages"]


def test_the_heuristic_refuses_a_device_that_is_not_a_device_model():
    with pytest.raises(ScheduleError, match="device must be a fuserir.device.Device"):
        matmul_heuristic(64, 64, 64, device={"sms": 132})


def test_inspect_shows_the_declared_scalars_and_the_plan_a_size_takes(tmp_path):
    seed = run_cli("inspect", EXAMPLES / "seed_matmul.fz", "--size", "M=256,N=128,K=416")
    assert seed.returncode == 0, seed.stderr
    assert "run-time scalars: splitk (default 5); sizes: K, M, N" in seed.stdout
    assert "grid   (ceildiv(M, 256), ceildiv(N, 128), splitk) = (1, 1, 5)" in seed.stdout
    path = tmp_path / "auto.fz"
    path.write_text(AUTO)
    skinny = run_cli("inspect", path, "--size", "M=128,N=128,K=262144")
    assert skinny.returncode == 0, skinny.stderr
    assert "automatic schedule for these sizes on NVIDIA H200" in skinny.stdout
    assert "(run() passes splitk=33)" in skinny.stdout
    assert "split-K 33 (parallel): 4 tiles x 33 splits" in skinny.stdout
    square = run_cli("inspect", path, "--size", "M=4096,N=4096,K=4096")
    assert "the Hopper path (wgmma, TMA, a producer warp group), CTA tile 128x256x64" in \
        square.stdout
