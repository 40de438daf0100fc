"""print_fusion and parse are inverses: parse(print_fusion(f)) is structurally equal to f,
and printing that again gives the same text, for the DSL examples and for random fusions
with random schedules built through the Python API."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuserir
from fuserir import DataType, Fusion, ParallelType, ScheduleError, ops
from fuserir.errors import FusionError
from fuserir.ir.equality import first_difference
from fuserir.ir.exprs import LoadStoreOp

# the types a tensor holds (a welford state only lives between operations)
NUMBER_TYPES = [d for d in DataType if not d.is_state]

from conftest import random_array
from test_dsl import EVERY_METHOD

EXAMPLE = """
fusion splitk_nt(A: f16[K, M], B: f16[K, N]) {
  acc = matmul(A, B, layout=NT)
  out = cast(acc, f16)
  output out
}
fusion bias_relu(x: f32[M, N], b: f32[N]) {
  y = relu(x + broadcast(b, [true, false]))
  output y
}
fusion row_stats(x: f32[M, N]) {
  s = sum(x, axes=[1])
  m = max(x, axes=[1])
  output s, m
}
schedule splitk_nt {
  acc.split(2, splitk, inner=false)
  partial = acc.rfactor([3])
}
schedule bias_relu {
  xs = x.cache_after(shared)
  y.split(1, 128)
  y.parallelize(0, BIDx)
  y.parallelize(2, TIDx)
  xs.compute_at(y, 2)
  xs.parallelize(2, TIDx)
}
schedule row_stats {
  s.split(1, 32)
  s_rf = s.rfactor(-1)
  s.parallelize(0, BIDx)
  m.cache_before(local)
}
"""


def assert_round_trips(fusion):
    text = fuserir.print_fusion(fusion)
    again = fuserir.parse(text)
    assert first_difference(fusion, again) is None, text
    assert fuserir.print_fusion(again) == text
    return again


@pytest.mark.parametrize("name", ["splitk_nt", "bias_relu", "row_stats"])
def test_examples_round_trip(name):
    fusion = fuserir.parse(EXAMPLE)[name]
    assert fusion.trace, "every example is scheduled"
    assert_round_trips(fusion)


def test_printed_example_is_canonical():
    text = fuserir.print_fusion(fuserir.parse(EXAMPLE)["bias_relu"])
    assert text == (
        "fusion bias_relu(x: f32[M, N], b: f32[N]) {\n"
        "  y = relu(x + broadcast(b, [true, false]))\n"
        "  output y\n"
        "}\n"
        "\n"
        "schedule bias_relu {\n"
        "  xs = x.cache_after(shared)\n"
        "  y.split(1, 128)\n"
        "  y.parallelize(0, BIDx)\n"
        "  y.parallelize(2, TIDx)\n"
        "  xs.compute_at(y, 2)\n"
        "  xs.parallelize(2, TIDx)\n"
        "}\n")


def test_definition_is_printed_as_before_scheduling():
    # rfactor moved the matmul to `partial`, cache_before the max to m_cache; the printed
    # definition is still the one written, and the trace replays the rewrites.
    fusions = fuserir.parse(EXAMPLE)
    assert "acc = matmul(A, B, layout=NT)" in fuserir.print_fusion(fusions["splitk_nt"])
    assert "  m = max(x, axes=[1])\n" in fuserir.print_fusion(fusions["row_stats"])
    assert "  m_cache = m.cache_before(local)\n" in fuserir.print_fusion(fusions["row_stats"])


# -- deterministic printer cases -------------------------------------------------------------


def fusion_of(*dtypes):
    f = Fusion("p")
    return f, [f.new_input(name, d, ["N"]) for name, d in zip("xyz", dtypes)]


def printed_statement_text(f):
    """The right-hand side of the first statement of f's definition."""
    return fuserir.print_fusion(f).splitlines()[1].split(" = ", 1)[1]


@pytest.mark.parametrize("build, text", [
    (lambda x, y: (x + y) * 2, "(x + y) * 2.0"),
    (lambda x, y: x + y * 2, "x + y * 2.0"),
    (lambda x, y: x - (y - 1), "x - (y - 1.0)"),
    (lambda x, y: (x - y) - 1, "x - y - 1.0"),
    (lambda x, y: x / (y * x), "x / (y * x)"),
    (lambda x, y: -(x + y), "-(x + y)"),
    (lambda x, y: -x * y, "-x * y"),
    (lambda x, y: x * -1.5, "x * -1.5"),
    (lambda x, y: x + -y, "x + -y"),
    (lambda x, y: -(-x), "-(-x)"),
    (lambda x, y: 1e-5 - x, "1e-05 - x"),
    (lambda x, y: ops.lt(x + 1, y), "x + 1.0 < y"),
    (lambda x, y: ops.eq(ops.lt(x, y), ops.gt(y, x)), "(x < y) == (y > x)"),
    (lambda x, y: ops.maximum(x, ops.exp(y - x)), "maximum(x, exp(y - x))"),
    (lambda x, y: ops.gelu(x, approximate="tanh") + ops.gelu(y),
     'gelu(x, approximate="tanh") + gelu(y)'),
    (lambda x, y: ops.sum(ops.broadcast(x, [True, False]) * 2, axes=[0]),
     "sum(broadcast(x, [true, false]) * 2.0, axes=[0])"),
    (lambda x, y: ops.where(ops.ge(x, y), x, float("-inf")), "where(x >= y, x, -inf)"),
])
def test_infix_with_fewest_parentheses(build, text):
    f, (x, y) = fusion_of(DataType.f32, DataType.f32)
    f.add_output(build(x, y))
    assert printed_statement_text(f) == text
    assert_round_trips(f)


@pytest.mark.parametrize("dtype, build, text", [
    (DataType.i32, lambda x: x * -3, "x * -3"),
    (DataType.i64, lambda x: x + 2.0, "x + 2"),
    (DataType.bool, lambda x: ops.eq(x, True), "x == true"),
    (DataType.f16, lambda x: x * 3, "x * 3.0"),
    (DataType.f64, lambda x: x + float("nan"), "x + nan"),
])
def test_literals_reparse_to_the_same_value_and_dtype(dtype, build, text):
    f, (x,) = fusion_of(dtype)
    f.add_output(build(x))
    assert printed_statement_text(f) == text
    assert_round_trips(f)


def test_intermediates_used_twice_or_out_of_order_become_statements():
    f, (x, y) = fusion_of(DataType.f32, DataType.f32)
    b = ops.neg(y)            # created first, but nesting would create it second
    a = ops.exp(x)
    twice = ops.relu(a + b)
    f.add_output(twice * twice)
    text = fuserir.print_fusion(f)
    assert text.splitlines()[1:5] == [
        f"  {b.name} = -y",
        f"  {twice.name} = relu(exp(x) + {b.name})",
        f"  {f.outputs[0].name} = {twice.name} * {twice.name}",
        f"  output {f.outputs[0].name}",
    ]
    again = assert_round_trips(f)
    assert not again.tensor(b.name).is_named, "a printed t<n> name stays unnamed"


def test_scheduled_intermediates_are_printed_by_name():
    f, (x, y) = fusion_of(DataType.f32, DataType.f32)
    inner = x * y
    out = ops.relu(inner)
    f.add_output(out)
    out.split(0, 4)
    inner.compute_at(out, 1)
    text = fuserir.print_fusion(f)
    assert f"  {inner.name} = x * y\n" in text
    assert f"  {inner.name}.compute_at({out.name}, 1)\n" in text
    assert_round_trips(f)


def test_rename_after_scheduling_prints_the_current_name():
    f, (x,) = fusion_of(DataType.f32)
    out = ops.relu(x)
    f.add_output(out)
    cache = x.cache_after("shared")
    cache.split(0, 8)
    f.rename(cache, "xs")
    text = fuserir.print_fusion(f)
    assert "  xs = x.cache_after(shared)\n  xs.split(0, 8)\n" in text
    assert_round_trips(f)


def test_every_scheduling_method_round_trips(rng):
    f = fuserir.parse(EVERY_METHOD)
    again = assert_round_trips(f)
    inputs = {"x": random_array(rng, DataType.f16, (9, 200)),
              "w": random_array(rng, DataType.f16, (200,)), "S": 2}
    np.testing.assert_array_equal(fuserir.evaluate(f, inputs)["out"],
                                  fuserir.evaluate(again, inputs)["out"])


def test_operations_defined_on_scheduled_tensors_cannot_be_printed():
    f, (x,) = fusion_of(DataType.f32)
    f.add_output(ops.relu(x))
    cache = x.cache_after("shared")
    f.add_output(ops.exp(cache))
    with pytest.raises(FusionError, match="exp defining t3 reads x_cache, which scheduling "
                                          "created; define every operation before "
                                          "scheduling to print it"):
        fuserir.print_fusion(f)


def test_scheduler_calls_print_as_fusion_level_statements():
    f, (x,) = fusion_of(DataType.f32)
    f.add_output(f.rename(ops.relu(x), "y"))
    with f.recording(None, "matmul", (), {"cta_tile": [128, 128, 32], "splitk": 5}):
        pass
    assert fuserir.print_fusion(f).endswith(
        "schedule p {\n  matmul(cta_tile=[128, 128, 32], splitk=5)\n}\n")


def test_evaluation_agrees_after_the_round_trip(rng):
    f = Fusion("norm")
    x = f.new_input("x", DataType.f16, ["M", "N"])
    w = f.new_input("w", DataType.f32, ["N"])
    centered = ops.cast(x, DataType.f32) - 0.5
    scaled = centered * ops.broadcast(w, [True, False])
    total = ops.sum(scaled, axes=[1])
    f.add_output(ops.sqrt(ops.abs(total)) + 1e-5)
    f.add_output(ops.where(ops.gt(scaled, 0), scaled, -scaled))
    total.split(1, "S", inner=False)
    total.rfactor([2])
    again = assert_round_trips(f)
    inputs = {"x": random_array(rng, DataType.f16, (5, 37)),
              "w": random_array(rng, DataType.f32, (37,)), "S": 3}
    expected, actual = fuserir.evaluate(f, inputs), fuserir.evaluate(again, inputs)
    assert list(expected) == list(actual)
    for name in expected:
        np.testing.assert_array_equal(expected[name], actual[name])


# -- random fusions and schedules ------------------------------------------------------------

INPUT_SHAPES = [["M", "N"], ["N"], ["M"], ["K", "M"], ["K", "N"], ["M", "K"], ["N", "K"],
                [8, "N"], ["M", 16], [4]]
LITERALS = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, -1.5, 1e-5, 2.0, 1e20]),
                     st.booleans())
MEMORY = ["global", "shared", "local"]


@st.composite
def random_fusions(draw):
    """A random DAG of ops over 1-3 inputs, some tensors named, then a random schedule.
    Operands and transform targets are drawn where they are likely to be legal, but the IR
    decides: ops and transforms it refuses are skipped."""
    f = draw(random_definitions())
    for _ in range(draw(st.integers(0, 10))):
        try:
            random_transform(draw, f)
        except ScheduleError:
            pass
    return f


@st.composite
def random_definitions(draw):
    """A random DAG of ops over 1-3 inputs, some tensors named, with no schedule."""
    f = Fusion("random")
    for i in range(draw(st.integers(1, 3))):
        if i < 2 and draw(st.booleans()):  # a matmul operand
            dtype = draw(st.sampled_from([DataType.f16, DataType.bf16]))
            shape = draw(st.sampled_from([["K", "M"], ["M", "K"], ["K", "N"], ["N", "K"]]))
        else:
            dtype = draw(st.sampled_from(NUMBER_TYPES))
            shape = draw(st.sampled_from(INPUT_SHAPES))
        f.new_input(f"in{i}", dtype, shape)
    for step in range(draw(st.integers(1, 8))):
        try:
            result = random_op(draw, f.tensors)
        except FusionError:
            continue
        if draw(st.integers(0, 3)) == 0:
            f.rename(result, f"v{step}")
    created = [t for t in f.tensors if not t.is_input and not t.dtype.is_state]
    if not created:
        created = [ops.set(f.inputs[0])]
    # in a fixed order (a set of tensors iterates in memory order, which differs from run
    # to run: which output is renamed, and so the kernels' text, would too)
    for out in dict.fromkeys([created[-1], draw(st.sampled_from(created))]):
        f.add_output(out)
        if draw(st.booleans()):
            f.rename(out, f"out{len(f.outputs)}")
    return f


def random_op(draw, tensors):
    x = draw(st.sampled_from(tensors))
    like_x = st.sampled_from([t for t in tensors if t.rank == x.rank])
    kind = draw(st.sampled_from(["unary", "binary", "binary", "literal", "literal", "where",
                                 "cast", "set", "broadcast", "reduce", "welford",
                                 "matmul"]))
    if kind == "unary":
        return ops.UNARY[draw(st.sampled_from(sorted(ops.UNARY)))](x)
    if kind in ("binary", "literal"):
        operands = [x, draw(like_x if kind == "binary" else LITERALS)]
        if draw(st.booleans()):
            operands.reverse()
        return ops.BINARY[draw(st.sampled_from(sorted(ops.BINARY)))](*operands)
    if kind == "where":
        conditions = [t for t in tensors if t.dtype is DataType.bool] or [x]
        return ops.where(draw(st.sampled_from(conditions)), draw(st.one_of(like_x, LITERALS)),
                         draw(like_x))
    if kind == "cast":
        return ops.cast(x, draw(st.sampled_from(NUMBER_TYPES)))
    if kind == "set":
        return ops.set(x)
    if kind == "broadcast":
        flags = [False] * x.rank
        flags.insert(draw(st.integers(0, x.rank)), True)
        return ops.broadcast(x, flags)
    if kind == "welford" and x.rank and x.dtype in (DataType.f16, DataType.bf16,
                                                    DataType.f32):
        axes = draw(st.lists(st.integers(-x.rank, x.rank - 1), min_size=1, max_size=2,
                             unique=True))
        return ops.welford(x, axes, correction=0)[draw(st.integers(0, 1))]
    if kind in ("reduce", "welford"):
        axes = draw(st.lists(st.integers(-x.rank, max(x.rank - 1, 0)), min_size=1,
                             max_size=2))
        return ops.REDUCTIONS[draw(st.sampled_from(list(ops.REDUCTIONS)))](x, axes)
    operands = [t for t in tensors if t.rank == 2 and t.dtype in (DataType.f16,
                                                                   DataType.bf16)] or [x]
    return ops.matmul(draw(st.sampled_from(operands)), draw(st.sampled_from(operands)),
                      draw(st.sampled_from(["TT", "TN", "NT", "NN"])))


def random_transform(draw, f):
    """One scheduling call on a random tensor; raises ScheduleError where it is illegal."""
    computed = [t for t in f.tensors if not t.is_input]
    tv = draw(st.sampled_from(computed if computed and draw(st.integers(0, 5)) else f.tensors))
    axis = draw(st.integers(-tv.ndim, max(tv.ndim - 1, 0)))
    method = draw(st.sampled_from([
        "split", "split", "merge", "reorder", "parallelize", "parallelize", "vectorize",
        "rfactor", "rfactor", "cache_after", "cache_before", "set_memory_type",
        "compute_at", "compute_at", "compute_at", "inline_most", "circular_buffer"]))
    if method == "split":
        factor = draw(st.sampled_from([1, 2, 4, 32, "S"]))
        if draw(st.booleans()):
            tv.split(axis, factor, inner=draw(st.booleans()))
        else:
            tv.split(axis, factor)
    elif method == "merge":
        tv.merge(axis)
    elif method == "reorder":
        moved = draw(st.permutations(range(tv.ndim)))
        tv.reorder({i: p for i, p in enumerate(moved) if draw(st.booleans())})
    elif method == "parallelize":
        tv.parallelize(axis, draw(st.sampled_from(list(ParallelType))))
    elif method == "vectorize":
        tv.vectorize(axis)
    elif method == "rfactor":
        reductions = [t for t in computed if any(a.is_reduction for a in t.loop)] or [tv]
        tv = draw(st.sampled_from(reductions))
        if sum(a.is_reduction for a in tv.loop) == 1:
            tv.split(next(i for i, a in enumerate(tv.loop) if a.is_reduction),
                     draw(st.sampled_from([2, 8, "S"])), inner=draw(st.booleans()))
        positions = [i for i, a in enumerate(tv.loop) if a.is_reduction] or [0]
        axes = draw(st.lists(st.sampled_from(positions), min_size=1, max_size=2, unique=True))
        tv.rfactor(axes[0] if len(axes) == 1 and draw(st.booleans()) else axes)
    elif method == "cache_after":
        if draw(st.booleans()):
            tv.cache_after(draw(st.sampled_from(MEMORY)), async_copy=draw(st.booleans()))
        else:
            tv.cache_after(draw(st.sampled_from(MEMORY)))
    elif method == "cache_before":
        tv.cache_before(draw(st.sampled_from(MEMORY)))
    elif method == "set_memory_type":
        tv.set_memory_type(draw(st.sampled_from(MEMORY)))
    elif method == "compute_at":
        consumers = [c for c in f.tensors if f.depends_on(c, tv)] or f.tensors
        consumer = draw(st.sampled_from(consumers))
        tv.compute_at(consumer, draw(st.integers(-2, consumer.ndim)))
    elif method == "inline_most":
        tv.inline_most()
    else:  # a pipelined load: a copy computed inside a serial loop of a consumer
        copies = [t for t in computed if isinstance(t.definition, LoadStoreOp)]
        copy = draw(st.sampled_from(copies)) if copies else tv.cache_after("shared")
        consumer = draw(st.sampled_from([c for c in f.tensors if f.depends_on(c, copy)]
                                        or [copy]))
        if copy.compute_at_pos is None and consumer.ndim:
            consumer.split(0, 4)
            copy.compute_at(consumer, draw(st.integers(1, consumer.ndim)))
        copy.circular_buffer(draw(st.integers(1, 4)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_fusions())
def test_random_fusions_round_trip(fusion):
    assert_round_trips(fusion)


@pytest.mark.parametrize("name", ["splitk_tiled.fz", "pointwise_chain.fz", "splitk_matmul.fz"])
def test_reparsed_fusion_lowers_to_the_same_kernel(name):
    """The contract: parse(print_fusion(f)) lowers to the same kernels as f."""
    import pathlib

    import codegen
    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / name
    fusion = fuserir.dsl.parse_file(path)
    again = fuserir.parse(fuserir.print_fusion(fusion))
    first = codegen.compile(fusion, backend="interp").kernels
    second = codegen.compile(again, backend="interp").kernels
    assert [k.source for k in first] == [k.source for k in second]


@pytest.mark.parametrize("text, printed", [
    # an input named like one of its sizes: the size is written through that input
    ("fusion f(N: f32[M, N]) {\n  y = mean(N, axes=[1])\n  output y\n}",
     "  y = sum(N, axes=[1]) / size(N, 1)"),
    # a tensor defined later under a size's name: the size is written through the input
    ("fusion f(x: f32[M, N]) {\n  a = sum(x, axes=[0, 1]) / (M*N)\n  M = x * 2\n"
     "  output a, M\n}", "  a = sum(x, axes=[0, 1]) / (size(x, 0)*N)"),
])
def test_a_size_named_like_a_tensor_prints_as_size_of_an_input(text, printed):
    fusion = fuserir.parse(text)
    again = fuserir.print_fusion(fusion)
    assert again.splitlines()[1] == printed
    assert first_difference(fusion, fuserir.parse(again)) is None


@pytest.mark.parametrize("statistic", ["var_mean", "welford"])
def test_a_count_of_a_constant_times_a_size_round_trips(statistic):
    """The count a variance divides by over [8, N] is 8 * N: built by the statistic and
    parsed from its printed `8*N`, one extent (a Mul before, a Linear form after)."""
    fusion = fuserir.parse(f"fusion f(x: f16[8, N]) {{\n  v, m = {statistic}(x, axes=[0, 1], "
                           "correction=0)\n  output v, m\n}")
    assert_round_trips(fusion)
