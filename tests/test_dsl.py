"""The DSL: the reference example parses, schedules and evaluates like plain numpy; every op
and scheduling method is callable by name; expression syntax, literals and names."""

import math

import numpy as np
import pytest

import fuserir
from fuserir.ir.equality import structurally_equal
from fuserir import DataType, DslError, Fusion, MemoryType, ParallelType, ops
from fuserir.dsl.parser import OPS
from fuserir.ir import Scalar
from fuserir.ir.equality import first_difference

from conftest import as_f64, assert_matches, random_array

DEFINITIONS = """\
# comments run to the end of the line
fusion splitk_nt(A: f16[K, M], B: f16[K, N]) {
  acc = matmul(A, B, layout=NT)          # f32[M, N]
  out = cast(acc, f16)
  output out
}
fusion bias_relu(x: f32[M, N], b: f32[N]) {
  y = relu(x + broadcast(b, [true, false]))   # infix + - * /, unary -, number literals
  output y
}
fusion row_stats(x: f32[M, N]) {
  s = sum(x, axes=[1])
  m = max(x, axes=[1])
  output s, m
}
"""
MATMUL_SCHEDULE = """\
schedule splitk_nt {
  matmul(cta_tile=[256, 128, 32], warp_tile=[64, 64, 32], stages=3, splitk=5, smem_epilogue=true)
}
"""
BIAS_RELU_SCHEDULE = """\
schedule bias_relu {
  xs = x.cache_after(shared)
  y.split(1, 128)
  y.parallelize(0, BIDx)
  y.parallelize(2, TIDx)
  xs.compute_at(y, 2)
  xs.parallelize(2, TIDx)
}
"""
EXAMPLE = DEFINITIONS + MATMUL_SCHEDULE + BIAS_RELU_SCHEDULE


@pytest.fixture
def example():
    return fuserir.parse(DEFINITIONS + BIAS_RELU_SCHEDULE)


def shape_of(tv):
    return [str(e) for e in tv.shape]


def test_example_defines_three_fusions(example):
    assert list(example) == ["splitk_nt", "bias_relu", "row_stats"]
    assert all(f.name == name for name, f in example.items())
    splitk, bias_relu, row_stats = example.values()
    assert [(t.name, t.dtype, shape_of(t)) for t in splitk.outputs] == \
        [("out", DataType.f16, ["M", "N"])]
    assert (splitk.tensor("acc").dtype, shape_of(splitk.tensor("acc"))) == \
        (DataType.f32, ["M", "N"])
    assert [(t.name, t.dtype, shape_of(t)) for t in bias_relu.outputs] == \
        [("y", DataType.f32, ["M", "N"])]
    assert [(t.name, t.dtype, shape_of(t)) for t in row_stats.outputs] == \
        [("s", DataType.f32, ["M"]), ("m", DataType.f32, ["M"])]
    assert [(t.name, t.dtype, shape_of(t)) for t in splitk.inputs] == \
        [("A", DataType.f16, ["K", "M"]), ("B", DataType.f16, ["K", "N"])]


def test_bias_relu_schedule_is_applied(example):
    f = example["bias_relu"]
    y, xs = f.tensor("y"), f.tensor("xs")
    assert [str(a.extent) for a in y.loop] == ["M", "ceildiv(N, 128)", "128"]
    assert [a.parallel for a in y.loop] == [ParallelType.BIDx, ParallelType.serial,
                                           ParallelType.TIDx]
    assert xs.memory_type is MemoryType.shared
    assert xs.compute_at_pos == 2
    assert [str(a.extent) for a in xs.loop] == ["M", "ceildiv(N, 128)", "128"]
    assert [a.parallel for a in xs.loop] == [ParallelType.BIDx, ParallelType.serial,
                                            ParallelType.TIDx]
    assert xs.loop[2].parallel is ParallelType.TIDx
    assert [(e.target.name, e.method) for e in f.trace] == [
        ("x", "cache_after"), ("y", "split"), ("y", "parallelize"), ("y", "parallelize"),
        ("xs", "compute_at"), ("xs", "parallelize")]


def test_example_evaluates_like_numpy(example, rng):
    a = random_array(rng, DataType.f16, (40, 6))
    b = random_array(rng, DataType.f16, (40, 7))
    out = fuserir.evaluate(example["splitk_nt"], {"A": a, "B": b})["out"]
    assert_matches(out, as_f64(a).T @ as_f64(b), DataType.f16)

    x = random_array(rng, DataType.f32, (5, 130))
    bias = random_array(rng, DataType.f32, (130,))
    y = fuserir.evaluate(example["bias_relu"], {"x": x, "b": bias})["y"]
    np.testing.assert_array_equal(y, np.maximum(x + bias[None, :], 0))

    stats = fuserir.evaluate(example["row_stats"], {"x": x})
    assert_matches(stats["s"], as_f64(x).sum(axis=1), DataType.f32)
    np.testing.assert_array_equal(stats["m"], x.max(axis=1))


def test_matmul_scheduler_statement_schedules_through_the_transforms():
    fusions = fuserir.parse(EXAMPLE, "example.fz")
    splitk = fusions["splitk_nt"]
    # the statement expands into public transforms: they are the schedule trace
    methods = {e.method for e in splitk.trace}
    assert {"cache_after", "compute_at", "circular_buffer", "swizzle", "promote_reuse",
            "serial_grid_reduction", "parallelize"} <= methods
    acc, out_cache = splitk.tensor("acc"), splitk.tensor("out_cache")
    assert [a.parallel.value for a in acc.loop][-3:] == ["mma", "mma", "mma"]
    assert acc.grid_reduction == "serial" and out_cache.reuse_shared      # smem_epilogue implies reuse
    assert splitk.tensor("A_cache").circular_buffer_stages == 3
    # printed, it parses back to the same fusion (the statement is not needed to reparse)
    again = fuserir.parse(fuserir.print_fusion(splitk))
    assert structurally_equal(splitk, again)


def test_a_persistent_matmul_stages_its_output_without_reusing_the_operand_stages():
    """smem_epilogue implies promote_prologue_smem_reuse, but not in a persistent kernel
    (its operand stages hold the next tile during the epilogue); asked for, it is refused."""
    text = DEFINITIONS + MATMUL_SCHEDULE.replace(
        "cta_tile=[256, 128, 32], warp_tile=[64, 64, 32], stages=3, splitk=5",
        "cta_tile=[128, 128, 64], warp_tile=[64, 128, 64], instruction_tile=[64, 128, 16], "
        "stages=3, persistent=true")
    out_cache = fuserir.parse(text)["splitk_nt"].tensor("out_cache")
    assert not out_cache.reuse_shared
    with pytest.raises(fuserir.DslError, match="persistent: the staged output cannot "
                       "reuse the operand stages"):
        fuserir.parse(text.replace("persistent=true",
                                   "persistent=true, promote_prologue_smem_reuse=true"))


def test_one_fusion_is_returned_as_is_several_as_a_dict():
    one = fuserir.parse("fusion f(x: f32[N]) { y = exp(x) output y }")
    assert isinstance(one, Fusion) and one.name == "f"
    two = fuserir.parse("fusion f(x: f32[N]) { y = exp(x) output y }\n"
                        "fusion g(x: f32[N]) { y = log(x) output y }")
    assert list(two) == ["f", "g"]


def test_parse_file_names_the_file_in_errors(tmp_path):
    path = tmp_path / "bad.fz"
    path.write_text("fusion f(x: f32[N]) {\n  y = exp(q)\n  output y\n}\n")
    with pytest.raises(DslError, match=rf"^{path}:2:11: unknown tensor 'q'"):
        fuserir.dsl.parse_file(path)
    path.write_text(DEFINITIONS)
    assert list(fuserir.dsl.parse_file(path)) == ["splitk_nt", "bias_relu", "row_stats"]


def test_parser_builds_what_the_python_api_builds():
    built = Fusion("bias_relu")
    x = built.new_input("x", DataType.f32, ["M", "N"])
    b = built.new_input("b", DataType.f32, ["N"])
    built.add_output(built.rename(ops.relu(x + ops.broadcast(b, [True, False])), "y"))
    y = built.tensor("y")
    xs = built.rename(x.cache_after("shared"), "xs")
    y.split(1, 128)
    y.parallelize(0, ParallelType.BIDx)
    y.parallelize(2, "TIDx")
    xs.compute_at(y, 2)
    xs.parallelize(2, ParallelType.TIDx)
    parsed = fuserir.parse(DEFINITIONS + BIAS_RELU_SCHEDULE)["bias_relu"]
    assert first_difference(built, parsed) is None


# -- every op ----------------------------------------------------------------------------------

SIGNATURE = "x: f32[N], y: f32[N], c: bool[N], m: f32[M, N], A: f16[K, M], B: f16[K, N]"


def erf(v):
    return np.vectorize(math.erf)(v)


# op -> (DSL expression, numpy of the f64 inputs, result dtype)
EVERY_OP = {
    "neg": ("neg(x)", lambda i: -i["x"], DataType.f32),
    "abs": ("abs(x)", lambda i: np.abs(i["x"]), DataType.f32),
    "exp": ("exp(x)", lambda i: np.exp(i["x"]), DataType.f32),
    "log": ("log(x)", lambda i: np.log(i["x"]), DataType.f32),
    "sqrt": ("sqrt(x)", lambda i: np.sqrt(i["x"]), DataType.f32),
    "rsqrt": ("rsqrt(x)", lambda i: 1 / np.sqrt(i["x"]), DataType.f32),
    "tanh": ("tanh(x)", lambda i: np.tanh(i["x"]), DataType.f32),
    "erf": ("erf(x)", lambda i: np.vectorize(math.erf)(i["x"]), DataType.f32),
    "sigmoid": ("sigmoid(x)", lambda i: 1 / (1 + np.exp(-i["x"])), DataType.f32),
    "relu": ("relu(x - 2)", lambda i: np.maximum(i["x"] - 2, 0), DataType.f32),
    "gelu": ("gelu(x)", lambda i: 0.5 * i["x"] * (1 + erf(i["x"] / math.sqrt(2))),
             DataType.f32),
    "add": ("add(x, y)", lambda i: i["x"] + i["y"], DataType.f32),
    "sub": ("sub(x, y)", lambda i: i["x"] - i["y"], DataType.f32),
    "mul": ("mul(x, y)", lambda i: i["x"] * i["y"], DataType.f32),
    "div": ("div(x, y)", lambda i: i["x"] / i["y"], DataType.f32),
    "maximum": ("maximum(x, y)", lambda i: np.maximum(i["x"], i["y"]), DataType.f32),
    "minimum": ("minimum(x, 2.5)", lambda i: np.minimum(i["x"], 2.5), DataType.f32),
    "eq": ("eq(x, x)", lambda i: i["x"] == i["x"], DataType.bool),
    "ne": ("ne(x, y)", lambda i: i["x"] != i["y"], DataType.bool),
    "lt": ("lt(x, y)", lambda i: i["x"] < i["y"], DataType.bool),
    "le": ("le(x, 2)", lambda i: i["x"] <= 2, DataType.bool),
    "gt": ("gt(x, y)", lambda i: i["x"] > i["y"], DataType.bool),
    "ge": ("ge(x, y)", lambda i: i["x"] >= i["y"], DataType.bool),
    "where": ("where(c, x, -1)", lambda i: np.where(i["c"], i["x"], -1), DataType.f32),
    "cast": ("cast(x, f16)", lambda i: i["x"], DataType.f16),
    "set": ("set(x)", lambda i: i["x"], DataType.f32),
    "broadcast": ("broadcast(x, [true, false])", lambda i: i["x"][None, :], DataType.f32),
    "sum": ("sum(m, axes=[1])", lambda i: i["m"].sum(axis=1), DataType.f32),
    "max": ("max(m, axes=[0, 1])", lambda i: i["m"].max(), DataType.f32),
    "matmul": ("matmul(A, B, layout=NT)", lambda i: i["A"].T @ i["B"], DataType.f32),
    "permute": ("permute(m * 2, [1, 0])", lambda i: i["m"].T * 2, DataType.f32),
    "transpose": ("transpose(m, 0, -1)", lambda i: i["m"].T, DataType.f32),
    "squeeze": ("squeeze(broadcast(x, [true, false]), 0)", lambda i: i["x"], DataType.f32),
    "unsqueeze": ("unsqueeze(x, -1)", lambda i: i["x"][:, None], DataType.f32),
    "expand": ("expand(broadcast(x - 1, [true, false]), [M, -1])",
               lambda i: np.broadcast_to(i["x"] - 1, (3, 6)), DataType.f32),
    "broadcast_in_dim": ("broadcast_in_dim(x, [M, N], [1])",
                         lambda i: np.broadcast_to(i["x"], (3, 6)), DataType.f32),
}
EVERY_OP["size"] = ("x / size(m, 0)", lambda i: i["x"] / 3, DataType.f32)
EVERY_OP["axis_index"] = ("axis_index(m, -1)", lambda i: np.broadcast_to(np.arange(6), (3, 6)),
                          DataType.i64)
EVERY_OP["triu"] = ("triu(m, 1)", lambda i: np.triu(i["m"], 1), DataType.f32)
EVERY_OP["tril"] = ("tril(m, diagonal=-1)", lambda i: np.tril(i["m"], -1), DataType.f32)
# ops the builders write with others: the expression they leave
EVERY_OP["slice"] = ("slice(m, [1, 0], [M, N], [1, 2])", lambda i: i["m"][1:, ::2], DataType.f32)
EVERY_OP["pad"] = ("pad(x, [1, 2], value=-1)",
                   lambda i: np.pad(i["x"], (1, 2), constant_values=-1), DataType.f32)
EVERY_OP["cat"] = ("cat([x, y * 2], 0)", lambda i: np.concatenate([i["x"], 2 * i["y"]]),
                   DataType.f32)
EVERY_OP["full"] = ("full([M, N], 1.5, f32)", lambda i: np.full((3, 6), 1.5), DataType.f32)
EVERY_OP["iota"] = ("iota(N, 1, 2, f32)", lambda i: 1 + 2 * np.arange(6), DataType.f32)
EVERY_OP["reshape"] = ("reshape(m, [N, M])", lambda i: i["m"].reshape(6, 3), DataType.f32)
EVERY_OP["arange"] = ("arange(2, N)", lambda i: np.arange(2, 6), DataType.i64)


def _softmax(m):
    e = np.exp(m - m.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


EVERY_OP.update({
    "prod": ("prod(m, axes=[1])", lambda i: i["m"].prod(axis=1), DataType.f32),
    "min": ("min(m, axes=[0])", lambda i: i["m"].min(axis=0), DataType.f32),
    "mean": ("mean(m, axes=[1])", lambda i: i["m"].mean(axis=1), DataType.f32),
    "var": ("var(m, axes=[1])", lambda i: i["m"].var(axis=1, ddof=1), DataType.f32),
    "std": ("std(m, 1, correction=0)", lambda i: i["m"].std(axis=1), DataType.f32),
    # two tensors: `r, r2 = var_mean(...)`, r the variance
    "var_mean": ("var_mean(m, axes=[0])", lambda i: i["m"].var(axis=0, ddof=1), DataType.f32),
    "softmax": ("softmax(m, dim=1)", lambda i: _softmax(i["m"]), DataType.f32),
    "log_softmax": ("log_softmax(m, -1)", lambda i: np.log(_softmax(i["m"])), DataType.f32),
    "argmax": ("argmax(m, dim=1)", lambda i: i["m"].argmax(axis=1), DataType.i64),
    "argmin": ("argmin(m, 0)", lambda i: i["m"].argmin(axis=0), DataType.i64),
})
EVERY_OP["linear"] = ("linear(A, A)", lambda i: i["A"] @ i["A"].T, DataType.f16)
EVERY_OP["bmm"] = ("bmm(broadcast(A, [true, false, false]), broadcast(B, [true, false, false]),"
                   " layout=NT)", lambda i: (i["A"].T @ i["B"])[None], DataType.f32)
EVERY_OP.update({
    # r, r2 = welford(...): r the variance
    "welford": ("welford(m, axes=[1], correction=0)", lambda i: i["m"].var(axis=1),
                DataType.f32),
    "welford_merge": ("welford_mean(welford_merge(cast(m, welford), axes=[1]))",
                      lambda i: i["m"].mean(axis=1), DataType.f32),
    "welford_mean": ("welford_mean(welford_merge(cast(m, welford), [0]))",
                     lambda i: i["m"].mean(axis=0), DataType.f32),
    "welford_m2": ("welford_m2(welford_merge(cast(m, welford), [0]))",
                   lambda i: ((i["m"] - i["m"].mean(axis=0)) ** 2).sum(axis=0), DataType.f32),
})
TWO_TENSORS = ("var_mean", "welford")
COMPOSED = {"transpose": "permute", "unsqueeze": "broadcast", "broadcast_in_dim": "expand",
            "size": "div", "triu": "where", "tril": "where", "iota": "add", "arange": "add",
            "mean": "div", "var": "div", "std": "sqrt", "var_mean": "div", "softmax": "div",
            "log_softmax": "sub", "linear": "cast", "bmm": "matmul", "argmax": "min",
            "argmin": "min", "welford": "div", "welford_merge": "welford_mean"}
# The elementwise ops after the first few (tests/test_ops_elementwise.py tests each in
# depth); x and y are in [0.5, 4]
EVERY_OP.update({
    **{op: (f"{op}(x)", lambda i, fn=fn: fn(i["x"]), DataType.f32) for op, fn in {
        "exp2": np.exp2, "expm1": np.expm1, "log2": np.log2, "log10": np.log10,
        "log1p": np.log1p, "reciprocal": lambda v: 1 / v, "sin": np.sin, "cos": np.cos,
        "tan": np.tan, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
        "asinh": np.arcsinh, "erfc": np.vectorize(math.erfc),
        "lgamma": np.vectorize(math.lgamma), "round": np.rint}.items()},
    **{op: (f"{op}(x - 2)", lambda i, fn=fn: fn(i["x"] - 2), DataType.f32) for op, fn in {
        "ceil": np.ceil, "floor": np.floor, "trunc": np.trunc,
        "frac": lambda v: v - np.trunc(v), "sign": np.sign,
        "silu": lambda v: v / (1 + np.exp(-v))}.items()},
    "asin": ("asin(x / 4)", lambda i: np.arcsin(i["x"] / 4), DataType.f32),
    "acos": ("acos(x / 4)", lambda i: np.arccos(i["x"] / 4), DataType.f32),
    "atanh": ("atanh(x / 5)", lambda i: np.arctanh(i["x"] / 5), DataType.f32),
    "acosh": ("acosh(x + 1)", lambda i: np.arccosh(i["x"] + 1), DataType.f32),
    "erfinv": ("erfinv(erf(x / 5))", lambda i: i["x"] / 5, DataType.f32),
    "erfcinv": ("erfcinv(erfc(x / 5))", lambda i: i["x"] / 5, DataType.f32),
    "isfinite": ("isfinite(x)", lambda i: np.isfinite(i["x"]), DataType.bool),
    "isinf": ("isinf(x / 0)", lambda i: np.ones(6, bool), DataType.bool),
    "isnan": ("isnan(log(x - 2))", lambda i: i["x"] < 2, DataType.bool),
    "isneginf": ("isneginf(-x / 0)", lambda i: np.ones(6, bool), DataType.bool),
    "isposinf": ("isposinf(-x / 0)", lambda i: np.zeros(6, bool), DataType.bool),
    "signbit": ("signbit(x - 2)", lambda i: i["x"] < 2, DataType.bool),
    "logical_not": ("logical_not(c)", lambda i: ~i["c"].astype(bool), DataType.bool),
    "bitwise_not": ("bitwise_not(c)", lambda i: ~i["c"].astype(bool), DataType.bool),
    "fmod": ("fmod(x, y)", lambda i: np.fmod(i["x"], i["y"]), DataType.f32),
    "remainder": ("remainder(x - 2, y)", lambda i: np.remainder(i["x"] - 2, i["y"]),
                  DataType.f32),
    "atan2": ("atan2(x - 2, y)", lambda i: np.arctan2(i["x"] - 2, i["y"]), DataType.f32),
    "pow": ("pow(x, y)", lambda i: i["x"] ** i["y"], DataType.f32),
    "nextafter": ("nextafter(x, y)", lambda i: np.nextafter(i["x"], i["y"]), DataType.f32),
    "truediv": ("truediv(x, y)", lambda i: i["x"] / i["y"], DataType.f32),
    **{op: (f"{op}(c, x > 2)", lambda i, fn=fn: fn(i["c"].astype(bool), i["x"] > 2),
            DataType.bool) for op, fn in {
        "logical_and": np.logical_and, "logical_or": np.logical_or,
        "logical_xor": np.logical_xor, "bitwise_and": np.bitwise_and,
        "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}.items()},
    "bitwise_left_shift": ("bitwise_left_shift(cast(x, i32), 2)",
                           lambda i: np.trunc(i["x"]) * 4, DataType.i32),
    "bitwise_right_shift": ("bitwise_right_shift(cast(x * 10, i32), 1)",
                            lambda i: np.trunc(i["x"] * 10) // 2, DataType.i32),
    "clamp": ("clamp(x, 1, max=3)", lambda i: np.clip(i["x"], 1, 3), DataType.f32),
    "lerp": ("lerp(x, y, 0.25)", lambda i: i["x"] + 0.25 * (i["y"] - i["x"]), DataType.f32),
    "addcmul": ("addcmul(x, y, x, value=0.5)", lambda i: i["x"] + 0.5 * i["y"] * i["x"],
                DataType.f32),
    "threshold": ("threshold(x, 2, 0)", lambda i: np.where(i["x"] <= 2, 0, i["x"]),
                  DataType.f32),
})
COMPOSED.update({"truediv": "div", "clamp": "minimum", "lerp": "add", "addcmul": "add",
                 "threshold": "where"})
EXTRA_FORMS = [
    ("gelu(x, approximate=\"tanh\")",
     lambda i: 0.5 * i["x"] * (1 + np.tanh(math.sqrt(2 / math.pi)
                                           * (i["x"] + 0.044715 * i["x"] ** 3))), DataType.f32),
    ("cast(x=x, dtype=bf16)", lambda i: i["x"], DataType.bf16),
    ("sum(m, 0)", lambda i: i["m"].sum(axis=0), DataType.f32),
    ("max(m, axes=-1)", lambda i: i["m"].max(axis=-1), DataType.f32),
    ("x + y * 2 / x", lambda i: i["x"] + i["y"] * 2 / i["x"], DataType.f32),
    ("-x", lambda i: -i["x"], DataType.f32),
    ("x == y", lambda i: i["x"] == i["y"], DataType.bool),
    ("x != y", lambda i: i["x"] != i["y"], DataType.bool),
    ("x < y", lambda i: i["x"] < i["y"], DataType.bool),
    ("x <= y", lambda i: i["x"] <= i["y"], DataType.bool),
    ("x > y", lambda i: i["x"] > i["y"], DataType.bool),
    ("x >= y", lambda i: i["x"] >= i["y"], DataType.bool),
]


def test_every_op_is_callable_from_the_dsl():
    assert set(EVERY_OP) == set(OPS)
    assert set(ops.UNARY) | set(ops.BINARY) | set(ops.TERNARY) | set(ops.VIEWS) | \
        set(ops.POSITIONS) | set(ops.SLICING) | set(ops.FACTORIES) | set(ops.REDUCTIONS) | \
        set(ops.STATISTICS) | set(ops.STATES) | {"where", "cast", "set", "broadcast",
                                                 "matmul", "bmm", "linear", "size"} == set(OPS)


def evaluate_expression(expression, rng):
    names = "r, r2" if expression.split("(")[0] in TWO_TENSORS else "r"
    f = fuserir.parse(f"fusion f({SIGNATURE}) {{\n  {names} = {expression}\n  output r\n}}\n")
    inputs = {"x": random_array(rng, DataType.f32, (6,), 0.5, 4.0),
              "y": random_array(rng, DataType.f32, (6,), 0.5, 4.0),
              "c": random_array(rng, DataType.bool, (6,)),
              "m": random_array(rng, DataType.f32, (3, 6)),
              "A": random_array(rng, DataType.f16, (4, 3)),
              "B": random_array(rng, DataType.f16, (4, 6))}
    return f, fuserir.evaluate(f, inputs)["r"], {k: as_f64(v) for k, v in inputs.items()}


@pytest.mark.parametrize("op", sorted(EVERY_OP))
def test_op_evaluates_like_numpy(op, rng):
    expression, expected, dtype = EVERY_OP[op]
    f, result, inputs = evaluate_expression(expression, rng)
    assert f.tensor("r").definition.op == COMPOSED.get(op, op)
    assert_matches(result, expected(inputs), dtype)


@pytest.mark.parametrize("expression, expected, dtype", EXTRA_FORMS)
def test_keyword_infix_and_default_forms(expression, expected, dtype, rng):
    _, result, inputs = evaluate_expression(expression, rng)
    assert_matches(result, expected(inputs), dtype)


def test_default_layout_is_tt():
    with pytest.raises(DslError, match="matmul: K extents differ: M .* for layout TT"):
        fuserir.parse(f"fusion f({SIGNATURE}) {{ r = matmul(A, A) output r }}")


# -- expressions -----------------------------------------------------------------------------


def structure(tv):
    """The expression tree of tv as nested tuples (op, operands...); names at the leaves."""
    if tv.is_input:
        return tv.name
    expr = tv.definition
    return (expr.op, *[repr(v.value) if isinstance(v, Scalar) else
                       (v.name if v.is_input else structure(v)) for v in expr.inputs])


@pytest.mark.parametrize("expression, tree", [
    ("x + y * 2", ("add", "x", ("mul", "y", "2.0"))),
    ("(x + y) * 2", ("mul", ("add", "x", "y"), "2.0")),
    ("x - y - 1", ("sub", ("sub", "x", "y"), "1.0")),
    ("x / y / 2", ("div", ("div", "x", "y"), "2.0")),
    ("-x * y", ("mul", ("neg", "x"), "y")),
    ("x * -y", ("mul", "x", ("neg", "y"))),
    ("-(x + y)", ("neg", ("add", "x", "y"))),
    ("--x", ("neg", ("neg", "x"))),
    ("x - -1", ("sub", "x", "-1.0")),
    ("x + 1 < y * 2", ("lt", ("add", "x", "1.0"), ("mul", "y", "2.0"))),
    ("(x < y) == c", ("eq", ("lt", "x", "y"), "c")),
    ("x * 1e-5", ("mul", "x", "1e-05")),
    ("x * 2.5E+3", ("mul", "x", "2500.0")),
    ("x * .5", ("mul", "x", "0.5")),
    ("x * 3.", ("mul", "x", "3.0")),
    ("x + inf", ("add", "x", "inf")),
    ("x + -inf", ("add", "x", "-inf")),
    ("x + nan", ("add", "x", "nan")),
    ("where(c, true, c == false)", ("where", "c", "True", ("eq", "c", "False"))),
    ("relu(exp(x) - 1)", ("relu", ("sub", ("exp", "x"), "1.0"))),
])
def test_expression_syntax(expression, tree):
    f = fuserir.parse(f"fusion f({SIGNATURE}) {{ r = {expression} output r }}")
    assert structure(f.tensor("r")) == tree


def test_literal_takes_the_dtype_of_the_tensor_beside_it():
    f = fuserir.parse("fusion f(i: i32[N], h: f16[N]) { a = i * 2 b = h + 2 output a, b }")
    a, b = f.tensor("a").definition.inputs[1], f.tensor("b").definition.inputs[1]
    assert (a.value, a.dtype) == (2, DataType.i32)
    assert (b.value, b.dtype) == (2.0, DataType.f16)


def test_dimensions_are_names_or_integers():
    f = fuserir.parse("fusion f(x: f32[M, 128], s: f64[]) { y = x * 2 output y }")
    assert f.tensor("x").shape == [f.tensor("x").shape[0], 128]
    assert str(f.tensor("x").shape[0]) == "M" and f.tensor("s").rank == 0


def test_statements_need_no_newlines_and_outputs_may_be_split():
    f = fuserir.parse("fusion f(x: f32[N]) { a = exp(x) output a b = log(x) output b }")
    assert [t.name for t in f.outputs] == ["a", "b"]


def test_t_digit_names_stay_unnamed():
    # `t1` is the form of the names ops give unnamed intermediates; the nested exp(x) got
    # that name first and yields it.
    f = fuserir.parse("fusion f(x: f32[N]) {\n  y = relu(exp(x))\n  t1 = neg(y)\n"
                      "  output t1\n}\n")
    t1 = f.tensor("t1")
    assert t1.definition.op == "neg" and not t1.is_named
    assert f.tensor("y").is_named
    assert f.tensor("y").definition.inputs[0].definition.op == "exp"


# -- schedules -----------------------------------------------------------------------------

EVERY_METHOD = """\
fusion every_method(x: f16[M, K], w: f16[K]) {
  p = x * broadcast(w, [true, false])
  s = sum(p, axes=[1])
  out = cast(s, f16)
  output out
}
schedule every_method {
  xs = x.cache_after(shared, async_copy=true)
  s.split(1, 64)
  s.split(1, S, inner=false)        # S: a named run-time scalar
  s_rf = s.rfactor([2, 3])
  s.split(0, 128)
  s.parallelize(0, BIDx)
  s.parallelize(-2, TIDx)
  s_rf.reorder({1: 0, 0: 1})
  s_rf.split(1, 4)
  s_rf.merge(1)
  s_rf.parallelize(0, BIDy)
  xs.compute_at(s_rf, 3)
  xs.circular_buffer(3)
  xs.pad_rows(64, pad=8)            # rows of 128 bytes + 16: copies stay 16-byte aligned
  xl = xs.cache_after(local)
  xl.inline_most()
  c = out.cache_before(local)
  c.set_memory_type(shared)
  c.swizzle(64)                     # 64 f16 = 128 bytes: 8 chunks of 16
  c.promote_reuse()
  s.parallel_grid_reduction()
  s.atomic_grid_reduction()
  s.cluster_grid_reduction()
  s.serial_grid_reduction()         # the last of the four decides
  out.split(0, 2)
  out.vectorize(-1)
}
"""


def test_every_scheduling_method(rng):
    f = fuserir.parse(EVERY_METHOD)
    methods = [e.method for e in f.trace]
    assert set(methods) == set(fuserir.dsl.parser.SCHEDULE_METHODS)
    s, s_rf, xs = f.tensor("s"), f.tensor("s_rf"), f.tensor("xs")
    assert [(str(a.extent), a.kind.value) for a in s_rf.logical] == [
        ("M", "i"), ("S", "i"), ("ceildiv(ceildiv(K, 64), S)", "r"), ("64", "r")]
    assert [a.parallel for a in s.loop] == [ParallelType.BIDx, ParallelType.TIDx,
                                           ParallelType.serial]
    assert s_rf.loop[0].parallel is ParallelType.BIDy
    assert (xs.memory_type, xs.compute_at_pos, xs.circular_buffer_stages) == \
        (MemoryType.shared, 3, 3)
    assert xs.definition.async_copy and xs.row_padding == (64, 8)
    assert f.tensor("c").memory_type is MemoryType.shared
    assert f.tensor("out").loop[-1].parallel is ParallelType.vectorize
    x = random_array(rng, DataType.f16, (5, 300))
    w = random_array(rng, DataType.f16, (300,))
    out = fuserir.evaluate(f, {"x": x, "w": w, "S": 3})["out"]
    assert_matches(out, (as_f64(x) * as_f64(w)).sum(axis=1), DataType.f16,
                   rtol_=2 ** -9, atol_=1e-2)


def test_schedule_may_precede_its_fusion_and_name_ir_created_tensors():
    f = fuserir.parse("schedule f {\n  x.cache_after(shared)\n  y.split(1, 32)\n"
                      "  c = y.rfactor(2)\n  x_cache.compute_at(c, -1)\n}\n"
                      "fusion f(x: f32[M, N]) {\n  y = sum(x, axes=[1])\n  output y\n}\n")
    cache, c = f.tensor("x_cache"), f.tensor("c")
    assert cache.memory_type is MemoryType.shared
    assert (cache.compute_at_consumer, cache.compute_at_pos) == (c, 3)
    assert [(e.method, e.args) for e in f.trace] == [
        ("cache_after", (MemoryType.shared,)), ("split", (1, 32)), ("rfactor", (2,)),
        ("compute_at", (c, -1))]
