"""The reference evaluator: scheduling never changes what a fusion computes (including the
graph rewrites: rfactor, caches), and bad inputs are refused with a clear message."""

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import fuserir
from fuserir import DataType, EvaluationError, Fusion, ScheduleError, ops, transforms

from conftest import (HOST, as_f64, assert_loop_bijection, assert_matches,
                      assert_placements_consistent, random_array, rtol)

D = DataType


def known(f, inputs):
    """`inputs` without the run-time scalars `f` does not declare (yet): a split by a name
    declares it, and evaluate refuses a name that is neither an input nor declared."""
    names = {t.name for t in f.inputs} | set(f.scalars) | set(f.size_symbols())
    return {k: v for k, v in inputs.items() if k in names}


def evaluate_before_after(f, inputs, schedule):
    """Evaluate, apply `schedule(f)`, evaluate again: returns both results."""
    before = fuserir.evaluate(f, known(f, inputs))
    schedule(f)
    after = fuserir.evaluate(f, known(f, inputs))
    assert list(after) == list(before)
    return before, after


def check_loops(f, env):
    for t in f.tensors:
        if not t.is_input:
            assert_loop_bijection(t, env=env)


# -- pointwise --------------------------------------------------------------------------------


def pointwise_fusion():
    f = Fusion("pw")
    x = f.new_input("x", D.f32, ["M", "N"])
    y = f.new_input("y", D.f16, ["M", "N"])
    row = f.new_input("row", D.f32, ["N"])
    t = ops.add(ops.mul(x, ops.cast(y, D.f32)), ops.broadcast(row, [True, False]))
    out = ops.sub(ops.relu(t), ops.div(ops.exp(x), 2.0))
    f.add_output(out)
    f.rename(out, "out")
    f.rename(t, "t")
    return f


def _pw_tiles(f):
    out = f.tensor("out")
    out.split(1, 4)
    out.split(0, 2)
    out.parallelize(0, "BIDx")
    out.parallelize(1, "TIDy")
    out.parallelize(2, "TIDx")
    out.vectorize(3)


def _pw_cached(f):
    x, y, row, out = (f.tensor(n) for n in ("x", "y", "row", "out"))
    xs = x.cache_after("shared", async_copy=True)
    ys = y.cache_after("local")
    rs = row.cache_after("shared")
    oc = out.cache_before("local")
    out.merge(0)
    out.split(0, 8)
    out.parallelize(1, "TIDx")
    oc.compute_at(out, -1)
    for c in (xs, ys, rs):
        c.compute_at(oc, 1)
    transforms.inline_most(f)


def _pw_reordered(f):
    out, t = f.tensor("out"), f.tensor("t")
    out.reorder({0: 1})
    out.split(0, 3, inner=False)
    out.merge(1)
    t.inline_most()
    t.set_memory_type("shared")


@pytest.mark.parametrize("schedule", [_pw_tiles, _pw_cached, _pw_reordered])
@pytest.mark.parametrize("m,n", [(4, 8), (5, 7), (1, 1)])
def test_pointwise_schedules_keep_meaning(schedule, m, n, rng):
    f = pointwise_fusion()
    inputs = {"x": random_array(rng, D.f32, (m, n)), "y": random_array(rng, D.f16, (m, n)),
              "row": random_array(rng, D.f32, (n,))}
    before, after = evaluate_before_after(f, inputs, schedule)
    np.testing.assert_array_equal(after["out"], before["out"])
    assert after["out"].dtype == np.float32
    x, y, row = (as_f64(inputs[k]) for k in ("x", "y", "row"))
    expected = np.maximum(x * y + row[None, :], 0) - np.exp(x) / 2
    assert_matches(after["out"], expected, D.f32, rtol_=1e-5)
    check_loops(f, {"M": m, "N": n})


# -- reductions -------------------------------------------------------------------------------


def _rfactor_inner_outer(s):  # [.., rK] -> producer reduces the outer piece
    s.split(-1, 4)
    s.rfactor([-2])


def _rfactor_inner_inner(s):  # producer reduces the inner piece, keeps the outer
    s.split(-1, 4)
    s.rfactor([-1])


def _rfactor_outer_factor(s):
    s.split(-1, 3, inner=False)
    s.rfactor([-1])


def _rfactor_symbolic(s):
    s.split(-1, "S")
    s.rfactor([-2])


def _rfactor_two_levels(s):
    s.split(-1, 2)
    s.split(-2, 3)  # [.., r ceildiv(ceildiv(K, 2), 3), r3, r2]
    s.rfactor([-3])
    s.rfactor([-2])


def _rfactor_reordered(s):
    s.split(-1, 4)
    s.reorder({-1: 0})
    s.parallelize(0, "TIDx")
    s.rfactor([-1])


REDUCTION_SCHEDULES = [_rfactor_inner_outer, _rfactor_inner_inner, _rfactor_outer_factor,
                       _rfactor_symbolic, _rfactor_two_levels, _rfactor_reordered]


def _reduce_reference(op, x, axes):
    ref = x.astype(np.int64) if x.dtype.kind == "i" else as_f64(x)
    return (np.sum if op == "sum" else np.max)(ref, axis=tuple(axes))


def _reduction_tolerance(op, dtype, x, axes):
    """Rounding slack of a reduction: the output's rounding, plus for a float sum the f32
    rounding of partial sums (relative to the sum of magnitudes)."""
    if op == "max" or not dtype.is_float:
        return 0.0, 0.0
    scale = float(np.max(np.sum(np.abs(as_f64(x)), axis=tuple(axes))))
    return rtol(dtype), 4 * 2.0 ** -24 * scale


@pytest.mark.parametrize("schedule", REDUCTION_SCHEDULES)
@pytest.mark.parametrize("op", ["sum", "max"])
@pytest.mark.parametrize("dtype", [D.f32, D.f16, D.i32])
@pytest.mark.parametrize("k", [37, 12])
def test_inner_reduction_rfactor(schedule, op, dtype, k, rng):
    f = Fusion("red")
    x = f.new_input("x", dtype, ["M", "K"])
    s = getattr(ops, op)(x, [1])
    f.add_output(s)
    xs = random_array(rng, dtype, (3, k), -20, 20)
    inputs = {"x": xs, "S": 5}
    before, after = evaluate_before_after(f, inputs, lambda _: schedule(s))
    assert len(f.exprs) > 1  # the schedule did rewrite the graph
    r, a = _reduction_tolerance(op, dtype, xs, [1])
    assert_matches(after[s.name], before[s.name], dtype, r, a)
    assert_matches(after[s.name], _reduce_reference(op, xs, [1]), dtype, r, a)
    check_loops(f, {"M": 3, "K": k, "S": 5})


@pytest.mark.parametrize("schedule", REDUCTION_SCHEDULES)
@pytest.mark.parametrize("op", ["sum", "max"])
def test_outer_reduction_rfactor(schedule, op, rng):
    f = Fusion("red")
    x = f.new_input("x", D.f32, ["K", "N"])
    s = getattr(ops, op)(x, [0])
    f.add_output(s)
    xs = random_array(rng, D.f32, (23, 4))

    def sched(_):
        s.reorder({0: 1})  # the reduction axis innermost
        schedule(s)

    before, after = evaluate_before_after(f, {"x": xs, "S": 4}, sched)
    r, a = _reduction_tolerance(op, D.f32, xs, [0])
    assert_matches(after[s.name], before[s.name], D.f32, r, a)
    assert_matches(after[s.name], _reduce_reference(op, xs, [0]), D.f32, r, a)


MULTI = {
    "split one, rfactor both pieces of the other": (
        [0, 2], lambda s: (s.split(2, 2), s.rfactor([0, 2]))),
    "untransformed root rfactored": ([1, 2], lambda s: s.rfactor([1])),
    "untransformed root kept": ([1, 2], lambda s: s.rfactor([2])),
    "untransformed root and a piece": ([1, 2], lambda s: (s.split(2, 2), s.rfactor([1, 2]))),
    "a piece, root kept": ([1, 2], lambda s: (s.split(2, 2), s.rfactor([3]))),
    "merged then split, outer": ([1, 2], lambda s: (s.merge(1), s.split(1, 3),
                                                    s.rfactor([1]))),
    "merged then split, inner": ([1, 2], lambda s: (s.merge(1), s.split(1, 3),
                                                    s.rfactor([2]))),
    "merged then split non-divisibly": ([1, 2], lambda s: (s.merge(1), s.split(1, 7),
                                                           s.rfactor([2]))),
    "outer and inner axes, reordered": ([0, 2], lambda s: (s.split(0, 2), s.reorder({0: 3}),
                                                           s.rfactor([3]))),
    "all three": ([0, 1, 2], lambda s: (s.split(0, 2), s.merge(1), s.rfactor([0, 2]))),
    "rfactor the rfactored tensor's consumer again": (
        [0, 1, 2], lambda s: (s.rfactor([0]), s.rfactor([0]))),
}


@pytest.mark.parametrize("name", sorted(MULTI))
@pytest.mark.parametrize("op", ["sum", "max"])
def test_multi_axis_reduction_rfactor(name, op, rng):
    axes, schedule = MULTI[name]
    f = Fusion("red")
    x = f.new_input("x", D.f32, [3, 4, 5])
    s = getattr(ops, op)(x, axes)
    f.add_output(s)
    xs = random_array(rng, D.f32, (3, 4, 5))
    before, after = evaluate_before_after(f, {"x": xs}, lambda _: schedule(s))
    assert len(f.exprs) > 1
    r, a = _reduction_tolerance(op, D.f32, xs, axes)
    assert_matches(after[s.name], before[s.name], D.f32, r, a)
    assert_matches(after[s.name], _reduce_reference(op, xs, axes), D.f32, r, a)
    check_loops(f, {})


def test_rfactor_partial_results_are_the_pieces():
    # the producer of a split-by-4 rfactor holds, for each inner index j, the sum over
    # k = 4 i + j: check the intermediate itself, not just the final result
    f = Fusion("red")
    x = f.new_input("x", D.f64, [2, 10])
    s = ops.sum(x, [1])
    f.add_output(s)
    s.split(1, 4)
    rf = s.rfactor([1])
    f.add_output(rf)
    xs = np.arange(20, dtype=np.float64).reshape(2, 10) ** 2
    got = fuserir.evaluate(f, {"x": xs})
    padded = np.concatenate([xs, np.zeros((2, 2))], axis=1).reshape(2, 3, 4)
    np.testing.assert_array_equal(got[rf.name], padded.sum(axis=1))
    np.testing.assert_array_equal(got[s.name], xs.sum(axis=1))


def test_rfactor_max_pads_with_the_identity():
    # non-divisible split of a max over negative values: the padding must not win
    f = Fusion("red")
    x = f.new_input("x", D.i32, [1, 5])
    s = ops.max(x, [1])
    f.add_output(s)
    s.split(1, 4)
    rf = s.rfactor([1])
    f.add_output(rf)
    got = fuserir.evaluate(f, {"x": np.array([[-9, -8, -7, -6, -5]], np.int32)})
    np.testing.assert_array_equal(got[rf.name], [[-5, -8, -7, -6]])
    np.testing.assert_array_equal(got[s.name], [-5])


def test_f16_sum_rfactor_accumulates_in_f32():
    f = Fusion("red")
    x = f.new_input("x", D.f16, [4096])
    s = ops.sum(x, [0])
    f.add_output(s)
    s.split(0, 2, inner=False)
    rf = s.rfactor([1])
    f.add_output(rf)
    xs = np.ones(4096, np.float16)
    got = fuserir.evaluate(f, {"x": xs})
    assert got[rf.name].dtype == np.float32 and got[s.name].dtype == np.float16
    np.testing.assert_array_equal(got[rf.name], [2048.0, 2048.0])
    assert float(got[s.name]) == 4096.0


# -- matmul -----------------------------------------------------------------------------------


def matmul(layout, dtype, m, n, k):
    f = Fusion("mm")
    a_dims = ["M", "K"] if layout[0] == "T" else ["K", "M"]
    b_dims = ["K", "N"] if layout[1] == "T" else ["N", "K"]
    a = f.new_input("a", dtype, a_dims)
    b = f.new_input("b", dtype, b_dims)
    out = ops.matmul(a, b, layout)
    f.add_output(out)
    f.rename(out, "out")
    size = {"M": m, "N": n, "K": k}
    return f, out, [size[d] for d in a_dims], [size[d] for d in b_dims]


def _split_k(out):
    out.split(2, 5, inner=False)
    out.rfactor([3])


def _split_k_symbolic(out):
    out.split(2, "S", inner=False)
    out.rfactor([3])


def _keep_inner_piece(out):
    out.split(2, 4)
    out.rfactor([2])


def _tiled_split_k(out):
    """A matmul-scheduler-like schedule: tiles, shared operand caches, split-K."""
    f = out.fusion
    a, b = f.tensor("a"), f.tensor("b")
    ac = a.cache_after("shared", async_copy=True)
    bc = b.cache_after("shared", async_copy=True)
    out.split(2, 8)
    out.split(2, 3, inner=False)  # [M, N, 3 splits, K tiles, 8]
    out.split(1, 4)
    out.split(0, 4)  # [M/4, 4, N/4, 4, 3, tiles, 8]
    out.reorder({2: 1, 4: 2})  # [M/4, N/4, 3, 4, 4, tiles, 8]
    out.parallelize(0, "BIDx")
    out.parallelize(1, "BIDy")
    out.parallelize(2, "BIDz")
    out.parallelize(3, "TIDy")
    out.parallelize(4, "TIDx")
    rf = out.rfactor([5, 6])
    for c in (ac, bc):
        c.compute_at(rf, 6)
        c.circular_buffer(3)
    rf.set_memory_type("global")


MATMUL_SCHEDULES = [_split_k, _split_k_symbolic, _keep_inner_piece, _tiled_split_k]


@pytest.mark.parametrize("schedule", MATMUL_SCHEDULES)
@pytest.mark.parametrize("layout", ["TT", "TN", "NT", "NN"])
@pytest.mark.parametrize("dtype", [D.f16, D.bf16])
@pytest.mark.parametrize("k", [40, 37])
def test_matmul_schedules_keep_meaning(schedule, layout, dtype, k, rng):
    m, n = 6, 5
    f, out, a_shape, b_shape = matmul(layout, dtype, m, n, k)
    av, bv = random_array(rng, dtype, a_shape), random_array(rng, dtype, b_shape)
    before, after = evaluate_before_after(f, {"a": av, "b": bv, "S": 5}, lambda _: schedule(out))
    assert len(f.exprs) > 1
    a_mk = as_f64(av) if layout[0] == "T" else as_f64(av).T
    b_kn = as_f64(bv) if layout[1] == "T" else as_f64(bv).T
    expected = a_mk @ b_kn
    # partial sums are rounded to f32 once per piece: slack relative to sum |a| |b|
    slack = 4 * 2.0 ** -24 * (np.abs(a_mk) @ np.abs(b_kn))
    assert after["out"].dtype == np.float32 and after["out"].shape == (m, n)
    assert np.all(np.abs(as_f64(after["out"]) - as_f64(before["out"])) <= slack)
    assert np.all(np.abs(as_f64(after["out"]) - expected) <= slack)
    check_loops(f, {"M": m, "N": n, "K": k, "S": 5})


@pytest.mark.parametrize("s", [1, 2, 3, 7, 37, 50])
def test_split_k_symbolic_factor_values(s, rng):
    f, out, a_shape, b_shape = matmul("TN", D.f16, 3, 4, 37)
    _split_k_symbolic(out)
    rf = f.tensor("out_rf")
    f.add_output(rf)
    av, bv = random_array(rng, D.f16, a_shape), random_array(rng, D.f16, b_shape)
    got = fuserir.evaluate(f, {"a": av, "b": bv, "S": s})
    assert got["out_rf"].shape == (3, 4, s)
    expected = as_f64(av) @ as_f64(bv).T
    np.testing.assert_allclose(got["out"], expected, rtol=1e-5, atol=1e-5 * 37)
    np.testing.assert_allclose(got["out_rf"].sum(axis=2), expected, rtol=1e-5, atol=1e-5 * 37)
    # each split covers ceildiv(37, s) consecutive k (the last fewer, or none)
    chunk = -(-37 // s)
    for j in range(s):
        ks = slice(j * chunk, min((j + 1) * chunk, 37))
        part = as_f64(av)[:, ks] @ as_f64(bv)[:, ks].T
        np.testing.assert_allclose(got["out_rf"][:, :, j], part, rtol=1e-5, atol=1e-5 * 37)


def test_matmul_two_level_split_k(rng):
    f, out, a_shape, b_shape = matmul("NT", D.bf16, 4, 3, 37)
    av, bv = random_array(rng, D.bf16, a_shape), random_array(rng, D.bf16, b_shape)

    def schedule(_):
        out.split(2, 8)
        out.split(2, 2)  # [M, N, r ceildiv(ceildiv(K, 8), 2), r2, r8]
        first = out.rfactor([2])  # reduces the outer piece, keeps [2, 8]
        second = out.rfactor([3])  # then the 8, keeping 2; out sums those
        assert [str(e) for e in first.shape] == ["M", "N", "2", "8"]
        assert [str(e) for e in second.shape] == ["M", "N", "2"]
        assert f.producers(out) == [second] and f.producers(second) == [first]

    before, after = evaluate_before_after(f, {"a": av, "b": bv}, schedule)
    a_mk, b_kn = as_f64(av).T, as_f64(bv)
    slack = 4 * 2.0 ** -24 * (np.abs(a_mk) @ np.abs(b_kn))
    assert np.all(np.abs(as_f64(after["out"]) - as_f64(before["out"])) <= slack)
    assert np.all(np.abs(as_f64(after["out"]) - a_mk @ b_kn) <= slack)


# -- a property: random fusions, random legal schedules ---------------------------------------

UNARY = ["relu", "neg", "abs", "tanh", "sigmoid"]
BINARY = ["add", "sub", "mul", "maximum", "minimum"]
PTYPES = ["BIDx", "BIDy", "TIDx", "TIDy", "unroll", "serial", "vectorize"]
MEMORY = ["shared", "local", "global"]


def _build_random_fusion(data, m, n, symbolic):
    f = Fusion("prop")
    dims = ["M", "N"] if symbolic else [m, n]
    x = f.new_input("x", D.f32, dims)
    y = f.new_input("y", D.f32, dims)
    row = f.new_input("row", D.f32, dims[1:])
    pool = [x, y]
    outputs = []
    for _ in range(data.draw(st.integers(1, 5), label="ops")):
        kind = data.draw(st.sampled_from(["unary", "binary", "literal", "row", "reduce",
                                          "reduce", "welford"]))
        a = data.draw(st.sampled_from(pool))
        if kind == "unary":
            t = getattr(ops, data.draw(st.sampled_from(UNARY)))(a)
        elif kind == "binary":
            t = getattr(ops, data.draw(st.sampled_from(BINARY)))(a, data.draw(
                st.sampled_from(pool)))
        elif kind == "literal":
            t = getattr(ops, data.draw(st.sampled_from(BINARY)))(a, 0.5)
        elif kind == "row":
            t = ops.add(a, ops.broadcast(row, [True, False]))
        elif kind == "welford":
            axes = data.draw(st.sampled_from([[0], [1], [0, 1]]))
            r = ops.welford(a, axes, correction=0)[data.draw(st.integers(0, 1))]
            t = ops.add(ops.broadcast(r, [i in axes for i in range(2)]), a)
        else:
            axes = data.draw(st.sampled_from([[0], [1], [0, 1]]))
            r = getattr(ops, data.draw(st.sampled_from(list(ops.REDUCTIONS))))(a, axes)
            if data.draw(st.booleans(), label="reduction is an output"):
                outputs.append(r)
            t = ops.add(ops.broadcast(r, [i in axes for i in range(2)]), a)
        pool.append(t)
    outputs.append(pool[-1])
    for t in outputs:
        if not t.is_input and not t.is_output:
            f.add_output(t)
    return f


def _random_step(data, f):
    """Attempt one random transform (some in the combinations that make them legal)."""
    tensors = f.tensors
    scheduled = [t for t in tensors if not t.is_input]
    what = data.draw(st.sampled_from(
        ["split", "split", "merge", "reorder", "parallelize", "vectorize", "rfactor",
         "rfactor", "cache_after", "cache_before", "compute_at", "compute_at", "inline_most",
         "set_memory_type", "circular_buffer", "pipeline"]), label="transform")
    pool = tensors if what == "cache_after" else scheduled
    if what == "rfactor":
        pool = [t for t in scheduled if any(a.is_reduction for a in t.loop)] or pool
    if what == "circular_buffer":
        pool = [t for t in scheduled if t.compute_at_pos] or pool
    if what == "pipeline":
        pool = [t for t in f.inputs if f.uses(t)]
    tv = data.draw(st.sampled_from(pool), label="tensor")
    axis = st.integers(-3, 3)
    if what == "split":
        tv.split(data.draw(axis), data.draw(st.sampled_from([1, 2, 3, 4, "S"])),
                 inner=data.draw(st.booleans()))
    elif what == "merge":
        tv.merge(data.draw(axis))
    elif what == "reorder":
        tv.reorder({data.draw(axis): data.draw(axis)})
    elif what == "parallelize":
        tv.parallelize(data.draw(axis), data.draw(st.sampled_from(PTYPES)))
    elif what == "vectorize":
        if data.draw(st.booleans(), label="split for a vector first"):
            tv.split(-1, data.draw(st.sampled_from([1, 2, 4])))
        tv.vectorize(data.draw(st.sampled_from([-1, -1, 0, 1])))
    elif what == "rfactor":
        reductions = [i for i, a in enumerate(tv.loop) if a.is_reduction]
        if len(reductions) == 1 or reductions and data.draw(st.booleans(),
                                                             label="split a reduction first"):
            tv.split(data.draw(st.sampled_from(reductions)),
                     data.draw(st.sampled_from([2, 3, "S"])), inner=data.draw(st.booleans()))
        candidates = [i for i, a in enumerate(tv.loop) if a.is_reduction] or [0]
        tv.rfactor(data.draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=2)))
    elif what == "cache_after":
        memory = data.draw(st.sampled_from(MEMORY))
        tv.cache_after(memory, async_copy=data.draw(st.booleans()) and memory == "shared")
    elif what == "cache_before":
        tv.cache_before(data.draw(st.sampled_from(MEMORY)))
    elif what == "compute_at":
        users = [t for t in tensors if f.depends_on(t, tv)]
        if users:
            tv.compute_at(data.draw(st.sampled_from(users)), data.draw(st.integers(-4, 5)))
    elif what == "inline_most":
        tv.inline_most()
    elif what == "set_memory_type":
        tv.set_memory_type(data.draw(st.sampled_from(MEMORY)))
    elif what == "circular_buffer":
        tv.circular_buffer(data.draw(st.integers(1, 4)))
    else:  # a shared cache, computed inside its consumer's loops, circular-buffered
        cache = tv.cache_after("shared", async_copy=True)
        consumer = data.draw(st.sampled_from(f.consumers(cache)))
        cache.compute_at(consumer, data.draw(st.integers(1, 4)))
        cache.circular_buffer(data.draw(st.integers(2, 4)))
    return what


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), m=st.integers(1, 5), n=st.integers(1, 6), symbolic=st.booleans(),
       s=st.integers(1, 4))
def test_random_schedules_keep_meaning(data, m, n, symbolic, s):
    f = _build_random_fusion(data, m, n, symbolic)
    rng = np.random.default_rng(m * 100 + n * 10 + s)
    inputs = {"x": random_array(rng, D.f32, (m, n), -2, 2),
              "y": random_array(rng, D.f32, (m, n), -2, 2),
              "row": random_array(rng, D.f32, (n,), -2, 2), "S": s}
    before = fuserir.evaluate(f, known(f, inputs))
    for _ in range(data.draw(st.integers(0, 12), label="steps")):
        try:
            event(f"applied {_random_step(data, f)}")
        except ScheduleError as e:
            event(f"refused {str(e).split(':')[0]}")
    env = {"M": m, "N": n, "S": s}
    check_loops(f, env)
    assert_placements_consistent(f)
    after = fuserir.evaluate(f, known(f, inputs))
    assert list(after) == list(before)
    for name in before:
        scale = 1.0 + float(np.max(np.abs(before[name]), initial=0.0))
        np.testing.assert_allclose(after[name], before[name], rtol=1e-5, atol=1e-5 * scale)
        assert after[name].dtype == before[name].dtype


# -- evaluator input errors -------------------------------------------------------------------


def two_input_fusion():
    f = Fusion("ev")
    x = f.new_input("x", D.f32, ["M", 4])
    y = f.new_input("y", D.bf16, ["M", "N"])
    out = ops.add(ops.sum(x, [1]), ops.sum(y, [1]))
    f.add_output(out)
    f.rename(out, "out")
    return f


def good_inputs(m=3, n=5):
    return {"x": np.zeros((m, 4), np.float32), "y": np.ones((m, n), HOST[D.bf16])}


def test_evaluate_good_inputs():
    f = two_input_fusion()
    got = fuserir.evaluate(f, good_inputs())
    assert list(got) == ["out"]
    assert got["out"].dtype == np.float32
    np.testing.assert_array_equal(got["out"], [5.0, 5.0, 5.0])


@pytest.mark.parametrize("change,message", [
    (lambda d: d.pop("y"), r"^missing input 'y' of fusion ev$"),
    (lambda d: d.update(z=np.zeros(3)), r"^'z' is not an input of fusion ev \(inputs: x, y\)$"),
    (lambda d: d.update(x=np.zeros((3, 4))),
     r"^input x: expected f32, got float64$"),
    (lambda d: d.update(y=np.ones((3, 5), np.float32)),
     r"^input y: expected bf16, got float32$"),
    (lambda d: d.update(x=np.zeros((3, 4), np.int32)), r"^input x: expected f32, got int32$"),
    (lambda d: d.update(x=np.zeros(4, np.float32)),
     r"^input x: expected 2 dimensions, got 1$"),
    (lambda d: d.update(y=np.ones((1, 3, 5), "bfloat16")),
     r"^input y: expected 2 dimensions, got 3$"),
    (lambda d: d.update(x=np.zeros((3, 5), np.float32)),
     r"^input x: axis 1 must have size 4, got 5$"),
    (lambda d: d.update(y=np.ones((2, 5), "bfloat16")),
     r"^input y: axis 0 is M = 2, but M = 3 from input x axis 0$"),
    (lambda d: d.update(M=7),
     r"^input x: axis 0 is M = 3, but M = 7 from the value passed for M$"),
    (lambda d: d.update(S=0), r"^run-time scalar 'S' must be >= 1, got 0$"),
    (lambda d: d.update(S=-2), r"^run-time scalar 'S' must be >= 1, got -2$"),
    (lambda d: d.update(S=True), r"^run-time scalar 'S' must be an integer, got True$"),
    (lambda d: d.update(T=4), r"^'T' is neither an input nor a run-time scalar of fusion ev "
     r"\(inputs: x, y; run-time scalars: S; sizes: M, N\)$"),
])
def test_evaluate_input_errors(change, message):
    f = two_input_fusion()
    f.declare_scalar("S")
    inputs = good_inputs()
    change(inputs)
    with pytest.raises(EvaluationError, match=message):
        fuserir.evaluate(f, inputs)


def test_evaluate_missing_split_factor():
    f, out, a_shape, b_shape = matmul("TT", D.f16, 2, 3, 10)
    _split_k_symbolic(out)
    inputs = {"a": np.zeros(a_shape, np.float16), "b": np.zeros(b_shape, np.float16)}
    with pytest.raises(EvaluationError, match=r"^tensor out_rf: extent S needs a "
                                              r"value for 'S'; pass it in the inputs$"):
        fuserir.evaluate(f, inputs)
    inputs["S"] = np.int64(3)  # numpy integers are fine
    assert fuserir.evaluate(f, inputs)["out"].shape == (2, 3)


def test_evaluate_binds_symbols_across_inputs():
    f = Fusion("sym")
    x = f.new_input("x", D.i64, ["A", "B"])
    y = f.new_input("y", D.i64, ["B", "A"])
    out = ops.add(ops.sum(x, [1]), ops.sum(y, [0]))  # both [A]
    f.add_output(out)
    with pytest.raises(EvaluationError, match=r"input y: axis 0 is B = 2, but B = 3 from input "
                                              r"x axis 1"):
        fuserir.evaluate(f, {"x": np.zeros((2, 3), np.int64), "y": np.zeros((2, 3), np.int64)})
    xs = np.arange(6, dtype=np.int64).reshape(2, 3)
    ys = np.arange(6, dtype=np.int64).reshape(3, 2) * 10
    got = fuserir.evaluate(f, {"x": xs, "y": ys})
    np.testing.assert_array_equal(got[out.name], xs.sum(axis=1) + ys.sum(axis=0))
