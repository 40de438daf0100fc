"""Scheduling transforms: the domains they produce, the index algebra behind split and
merge, every ScheduleError (with the tensor and axis it names), and the schedule trace."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuserir import DataType, Fusion, IterKind, MemoryType, ParallelType, ScheduleError, ops
from fuserir import transforms
from fuserir.ir import CeilDiv, LoadStoreOp, Merge, ReductionOp, Split, Sym, UnaryOp
from fuserir.ir.iterdomain import IterDomain

from conftest import assert_loop_bijection, assert_placements_consistent, loop_to_domain

D = DataType
P = ParallelType


def extents(tv):
    return [str(a.extent) for a in tv.loop]


def kinds(tv):
    return "".join(a.kind.value for a in tv.loop)


def pointwise(dims=("M", "N"), dtype=D.f32):
    """x (input) -> y = relu(x) (output); y is schedulable."""
    f = Fusion("pw")
    x = f.new_input("x", dtype, list(dims))
    y = ops.relu(x)
    f.add_output(y)
    f.rename(y, "y")
    return f, x, y


def reduction(dims=("M", "K"), axes=(1,), dtype=D.f32, op="sum"):
    f = Fusion("red")
    x = f.new_input("x", dtype, list(dims))
    s = getattr(ops, op)(x, list(axes))
    f.add_output(s)
    f.rename(s, "s")
    return f, x, s


def matmul_fusion(m="M", n="N", k="K", dtype=D.f16):
    f = Fusion("mm")
    a = f.new_input("a", dtype, [m, k])
    b = f.new_input("b", dtype, [k, n])
    out = ops.matmul(a, b)
    f.add_output(out)
    f.rename(out, "out")
    return f, a, b, out


# -- split ----------------------------------------------------------------------------------


@pytest.mark.parametrize("e,factor,inner,expected", [
    (12, 4, True, ["3", "4"]),
    (12, 5, True, ["3", "5"]),
    (12, 4, False, ["4", "3"]),
    (12, 5, False, ["5", "3"]),
    (12, 1, True, ["12", "1"]),
    (12, 12, True, ["1", "12"]),
    (7, 16, True, ["1", "16"]),
    ("N", 128, True, ["ceildiv(N, 128)", "128"]),
    ("N", 4, False, ["4", "ceildiv(N, 4)"]),
    ("N", "S", True, ["ceildiv(N, S)", "S"]),
    ("N", "S", False, ["S", "ceildiv(N, S)"]),
    (10, "S", True, ["ceildiv(10, S)", "S"]),
    ("N", 1, True, ["N", "1"]),
])
def test_split_extents(e, factor, inner, expected):
    _, _, y = pointwise(("M", e))
    old = y.loop[1]
    y.split(1, factor, inner=inner)
    assert extents(y) == ["M"] + expected
    outer, inner_axis = y.loop[1], y.loop[2]
    s = outer.definition
    assert isinstance(s, Split) and inner_axis.definition is s
    assert s.input is old and s.outer is outer and s.inner is inner_axis
    assert s.inner_split is inner
    assert y.root == y.logical and y.root[1] is old  # the meaning is untouched


def test_split_symbolic_extent_types():
    _, _, y = pointwise(("M", "N"))
    y.split(1, "S")
    assert y.loop[1].extent == CeilDiv(Sym("N"), Sym("S"))
    assert y.loop[2].extent == Sym("S")
    y.split(0, Sym("T"), inner=False)
    assert y.loop[0].extent == Sym("T") and y.loop[1].extent == CeilDiv(Sym("M"), Sym("T"))


def test_split_negative_axis_counts_from_the_end():
    _, _, y = pointwise((6, 8, 10))
    y.split(-1, 5)
    assert extents(y) == ["6", "8", "2", "5"]
    y.split(-3, 2)
    assert extents(y) == ["6", "4", "2", "2", "5"]


def test_split_keeps_kind():
    _, _, s = reduction((6, 8))
    s.split(1, 2)
    assert kinds(s) == "irr"
    b = ops.broadcast(s, [False, True])
    b.split(1, 4)
    assert kinds(b) == "ibb" and extents(b) == ["6", "1", "4"]


@pytest.mark.parametrize("factor,message", [
    (0, r"split: factor must be >= 1, got 0 \(tensor y, axis 1\)"),
    (-4, r"split: factor must be >= 1, got -4 \(tensor y, axis 1\)"),
    (2.0, r"split: factor 2\.0 must be a positive integer or the name of a run-time scalar "
          r"\(tensor y, axis 1\)"),
    (True, r"split: factor True must be a positive integer"),
    (None, r"split: factor None must be a positive integer"),
    ("2x", r"split: factor '2x' is not a valid scalar name \(tensor y, axis 1\)"),
    ("", r"split: factor '' is not a valid scalar name \(tensor y, axis 1\)"),
])
def test_split_bad_factor(factor, message):
    f, _, y = pointwise()
    with pytest.raises(ScheduleError, match=message):
        y.split(1, factor)
    assert extents(y) == ["M", "N"]
    assert f.trace == []


@pytest.mark.parametrize("axis,shown", [(2, "2"), (-3, "-3"), (7, "7")])
def test_axis_out_of_range(axis, shown):
    _, _, y = pointwise()
    with pytest.raises(ScheduleError, match=rf"split: axis {shown} is out of range for tensor y "
                                            r"with 2 loop axes"):
        y.split(axis, 2)
    for call, name in [(lambda: y.merge(axis), "merge"),
                       (lambda: y.parallelize(axis, "TIDx"), "parallelize"),
                       (lambda: y.vectorize(axis), "vectorize"),
                       (lambda: y.reorder({axis: 0}), "reorder"),
                       (lambda: y.reorder({0: axis}), "reorder")]:
        with pytest.raises(ScheduleError, match=rf"{name}: axis {shown} is out of range for "
                                                r"tensor y with 2 loop axes"):
            call()


def test_axis_not_an_integer():
    _, _, y = pointwise()
    with pytest.raises(ScheduleError, match=r"split: axis '0' is not an integer \(tensor y\)"):
        y.split("0", 2)
    with pytest.raises(ScheduleError, match=r"merge: axis 0\.0 is not an integer \(tensor y\)"):
        y.merge(0.0)


# -- merge ----------------------------------------------------------------------------------


def test_merge_extents_and_definition():
    _, _, y = pointwise((4, 6, "N"))
    a0, a1 = y.loop[0], y.loop[1]
    y.merge(0)
    assert extents(y) == ["24", "N"]
    m = y.loop[0].definition
    assert isinstance(m, Merge) and m.outer is a0 and m.inner is a1 and m.output is y.loop[0]
    y.merge(-2)
    assert extents(y) == ["24*N"]
    _, _, z = pointwise(("M", "N"))
    z.merge(0)
    assert extents(z) == ["M*N"]


@pytest.mark.parametrize("a,b,expected", [
    (IterKind.iteration, IterKind.broadcast, "i"),
    (IterKind.broadcast, IterKind.iteration, "i"),
    (IterKind.broadcast, IterKind.broadcast, "b"),
    (IterKind.reduction, IterKind.broadcast, "r"),
    (IterKind.broadcast, IterKind.reduction, "r"),
    (IterKind.reduction, IterKind.reduction, "r"),
    (IterKind.iteration, IterKind.iteration, "i"),
])
def test_merge_kinds(a, b, expected):
    m = Merge(IterDomain(2, a), IterDomain(3, b))
    assert m.output.kind.value == expected and m.output.extent == 6


def test_merge_errors():
    f, _, y = pointwise()
    with pytest.raises(ScheduleError, match=r"merge: axis 1 is the last loop axis of y; there "
                                            r"is no next axis to merge it with"):
        y.merge(1)
    with pytest.raises(ScheduleError, match=r"merge: axis -1 is the last loop axis of y"):
        y.merge(-1)
    _, _, s = reduction(("M", "K"))
    with pytest.raises(ScheduleError, match=r"merge: cannot merge a reduction axis with an "
                                            r"iteration axis \(tensor s, axes 0 and 1: i\{M\} "
                                            r"and r\{K\}\)"):
        s.merge(0)
    _, _, s2 = reduction(("K", "M"), axes=(0,))
    with pytest.raises(ScheduleError, match=r"tensor s, axes 0 and 1: r\{K\} and i\{M\}"):
        s2.merge(0)
    assert f.trace == []


# -- reorder --------------------------------------------------------------------------------


@pytest.mark.parametrize("mapping,expected", [
    ({0: 2}, "bca"),
    ({2: 0}, "cab"),
    ({0: 1, 1: 0}, "bac"),
    ({-1: 0}, "cab"),
    ({0: -1}, "bca"),
    ({1: 1}, "abc"),
    ({}, "abc"),
    ({0: 2, 2: 0}, "cba"),
    ({0: 1, 1: 2, 2: 0}, "cab"),
])
def test_reorder_three_axes(mapping, expected):
    _, _, y = pointwise((2, 3, 5))
    named = dict(zip("abc", y.loop))
    y.reorder(mapping)
    assert y.loop == [named[c] for c in expected]


def test_reorder_unspecified_axes_keep_relative_order():
    _, _, y = pointwise((2, 3, 5, 7))
    a, b, c, d = y.loop
    y.reorder({3: 0, 0: 2})
    assert y.loop == [d, b, a, c]
    y.reorder({1: 3})
    assert y.loop == [d, a, c, b]


def test_reorder_errors():
    f, _, y = pointwise((2, 3, 5))
    with pytest.raises(ScheduleError, match=r"reorder: two axes of y are moved to position 1"):
        y.reorder({0: 1, 2: 1})
    with pytest.raises(ScheduleError, match=r"reorder: two axes of y are moved to position -2"):
        y.reorder({0: 1, 2: -2})
    with pytest.raises(ScheduleError, match=r"reorder: axis 0 of y is moved twice \(as -3\)"):
        y.reorder({0: 1, -3: 2})
    with pytest.raises(ScheduleError, match=r"reorder: expected a map \{old: new\}, got "
                                            r"\[1, 0\] \(tensor y\)"):
        y.reorder([1, 0])
    assert extents(y) == ["2", "3", "5"] and f.trace == []


# -- parallelize ----------------------------------------------------------------------------


def test_parallelize_sets_types():
    _, _, y = pointwise((8, 64, 4))
    y.parallelize(0, "BIDx")
    y.parallelize(1, P.TIDx)
    y.parallelize(2, "unroll")
    assert [a.parallel for a in y.loop] == [P.BIDx, P.TIDx, P.unroll]
    assert str(y.loop[0]) == "iBIDx{8}"
    y.parallelize(1, "TIDx")  # again on the same axis: fine
    y.parallelize(0, "BIDx")
    assert [a.parallel for a in y.loop] == [P.BIDx, P.TIDx, P.unroll]
    _, _, z = pointwise((8, 64, 4))
    z.parallelize(0, "unroll")
    z.parallelize(-1, "unroll")  # unroll is no index: two axes may have it
    assert [a.parallel for a in z.loop] == [P.unroll, P.serial, P.unroll]


@pytest.mark.parametrize("first, second", [("TIDx", "BIDx"), ("BIDx", "serial"),
                                           ("unroll", "TIDy"), ("TIDx", "vectorize")])
def test_parallelizing_an_axis_twice_is_an_error(first, second):
    # a regression: the second call used to override the first silently
    _, _, y = pointwise((8, 64, 4))
    y.parallelize(-1, first)
    with pytest.raises(ScheduleError) as caught:
        y.parallelize(-1, second)
    assert str(caught.value) == (f"parallelize: axis -1 of y is already parallelized as "
                                 f"{first}; it cannot also be {second}")
    assert y.loop[-1].parallel is P(first)


def test_vectorizing_a_bound_axis_is_an_error():
    _, _, y = pointwise((8, 64, 4))
    y.parallelize(2, "TIDx")
    with pytest.raises(ScheduleError, match=r"^vectorize: axis 2 of y is already parallelized "
                                            r"as TIDx; it cannot also be vectorize$"):
        y.vectorize(2)


def test_parallelize_errors():
    f, _, y = pointwise((8, 64, 4))
    y.parallelize(1, "TIDx")
    with pytest.raises(ScheduleError, match=r"parallelize: y already binds TIDx to axis 1; each "
                                            r"block/thread index binds one axis \(axis 2\)"):
        y.parallelize(2, "TIDx")
    y.parallelize(0, "BIDy")
    with pytest.raises(ScheduleError, match=r"y already binds BIDy to axis 0.*\(axis -1\)"):
        y.parallelize(-1, "BIDy")
    with pytest.raises(ScheduleError, match=r"parallelize: unknown parallel type 'TIDw'; "
                                            r"expected one of serial, BIDx, BIDy, BIDz, TIDx, "
                                            r"TIDy, TIDz, vectorize, unroll, mma"):
        y.parallelize(0, "TIDw")
    assert [a.parallel for a in y.loop] == [P.BIDy, P.TIDx, P.serial]
    assert [e.method for e in f.trace] == ["parallelize", "parallelize"]


# -- vectorize ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,width", [(D.f32, 4), (D.f32, 1), (D.f16, 8), (D.bf16, 2),
                                         (D.f64, 2), (D.i64, 1), (D.bool, 16), (D.i32, 2)])
def test_vectorize_ok(dtype, width):
    f = Fusion("v")
    x = f.new_input("x", dtype, ["M", 64])
    y = ops.set(x)
    y.split(1, width)
    y.vectorize(2)
    assert y.loop[2].parallel is P.vectorize


def test_vectorize_through_parallelize_and_merged_axes():
    _, _, y = pointwise((4, 8))
    y.merge(0)
    y.split(0, 4)
    y.parallelize(-1, "vectorize")
    assert y.loop[1].parallel is P.vectorize
    _, _, z = pointwise(("M", 16))
    z.split(1, 4, inner=False)  # inner piece of extent ceildiv(16, 4) = 4: contiguous
    z.vectorize(2)
    assert z.loop[2].parallel is P.vectorize


def test_vectorize_errors():
    f, _, y = pointwise(("M", 64))
    y.split(1, 4)
    with pytest.raises(ScheduleError, match=r"vectorize: axis 1 is not the innermost loop axis "
                                            r"of y \(3 loop axes\) \(tensor y, axis 1\)"):
        y.vectorize(1)
    with pytest.raises(ScheduleError, match=r"vectorize: axis 0 is not the innermost loop axis "
                                            r"of y \(3 loop axes\) \(tensor y, axis 0\)"):
        y.parallelize(-3, "vectorize")
    _, _, y3 = pointwise(("M", 63))
    y3.split(1, 3)
    with pytest.raises(ScheduleError, match=r"vectorize: 3 x f32 is 12 bytes; a vector access "
                                            r"is 1, 2, 4, 8 or 16 bytes \(tensor y, axis 2\)"):
        y3.vectorize(2)
    _, _, y8 = pointwise(("M", 64), dtype=D.f32)
    y8.split(1, 8)
    with pytest.raises(ScheduleError, match=r"8 x f32 is 32 bytes"):
        y8.vectorize(-1)
    _, _, ys = pointwise(("M", "N"))
    with pytest.raises(ScheduleError, match=r"vectorize: extent N is not a constant; split by a "
                                            r"constant first \(tensor y, axis 1\)"):
        ys.vectorize(1)
    ys.split(1, "S")
    with pytest.raises(ScheduleError, match=r"vectorize: extent S is not a constant"):
        ys.vectorize(2)
    _, _, r = reduction((4, 4))
    with pytest.raises(ScheduleError, match=r"vectorize: cannot vectorize a reduction axis "
                                            r"\(tensor s, axis 1\)"):
        r.vectorize(1)
    assert f.trace[-1].method == "split"


def test_vectorize_refuses_non_contiguous_axes():
    _, _, y = pointwise(("M", 16))
    y.split(1, 4)
    y.reorder({1: 2})  # [M, 4, ceildiv(16, 4)]: the outer piece is innermost now
    with pytest.raises(ScheduleError, match=r"vectorize: the axis is the outer piece of a split, "
                                            r"not contiguous in memory \(tensor y, axis 2\)"):
        y.vectorize(2)
    _, _, z = pointwise((4, 2))
    z.reorder({0: 1})  # M innermost: a stride-2 axis
    with pytest.raises(ScheduleError, match=r"vectorize: the axis is not contiguous in memory: "
                                            r"it does not come from the innermost axis of y "
                                            r"\(tensor y, axis 1\)"):
        z.vectorize(1)
    _, _, w = pointwise((4, 2), dtype=D.f16)
    w.reorder({0: 1})
    w.merge(0)  # [2*4] with M inner: not contiguous
    with pytest.raises(ScheduleError, match=r"does not come from the innermost axis of y"):
        w.vectorize(0)
    _, _, v = pointwise((4, 16))
    v.split(1, 8)
    v.split(2, 2)
    v.reorder({2: 3})  # [4, 2, 2(inner), 4(outer of the inner piece)]
    with pytest.raises(ScheduleError, match=r"outer piece of a split"):
        v.vectorize(3)


# -- rfactor --------------------------------------------------------------------------------


def test_rfactor_of_split_reduction():
    f, x, s = reduction(("M", "K"), dtype=D.f16)
    s.split(1, 4)
    rf = s.rfactor([1])
    assert rf.name == "s_rf" and rf.dtype is D.f32  # partial sums in the accumulate type
    assert s.dtype is D.f16
    assert [str(a) for a in rf.root] == ["i{M}", "r{K}"]
    assert [str(a) for a in rf.logical] == ["i{M}", "r{ceildiv(K, 4)}", "i{4}"]
    assert [str(a) for a in rf.loop] == ["i{M}", "r{ceildiv(K, 4)}", "i{4}"]
    assert rf.shape == [Sym("M"), 4]
    assert [str(a) for a in s.root] == ["i{M}", "r{4}"] and s.shape == [Sym("M")]
    assert s.root == s.logical == s.loop
    assert isinstance(s.definition, ReductionOp) and s.definition.inputs == [rf]
    assert s.definition.axes == (1,) and s.definition.op == "sum"
    assert isinstance(rf.definition, ReductionOp) and rf.definition.inputs == [x]
    assert f.producers(s) == [rf] and f.consumers(x) == [rf]
    assert f.trace[-1].method == "rfactor" and f.trace[-1].result is rf
    assert_loop_bijection(rf, env={"M": 3, "K": 10})
    assert_loop_bijection(rf, rf.root, {"M": 3, "K": 10})


def test_rfactor_keeps_schedule_and_parallel_types():
    _, _, s = reduction(("M", "K"), op="max")
    s.split(1, 32)
    s.split(1, 4)  # [M, K/32/4, 4, 32]
    s.parallelize(0, "BIDx")
    s.parallelize(3, "TIDx")
    rf = s.rfactor([1, 2])
    assert kinds(rf) == "irri" and [a.parallel for a in rf.loop] == [P.BIDx, P.serial,
                                                                        P.serial, P.TIDx]
    assert kinds(s) == "ir" and extents(s) == ["M", "32"]
    assert [a.parallel for a in s.loop] == [P.BIDx, P.TIDx]
    assert s.definition.op == "max" and rf.dtype is D.f32


def test_rfactor_split_k_matmul():
    _, a, b, out = matmul_fusion()
    out.split(2, 5, inner=False)
    assert extents(out) == ["M", "N", "5", "ceildiv(K, 5)"]
    rf = out.rfactor([3])
    assert rf.dtype is D.f32 and rf.shape == [Sym("M"), Sym("N"), 5]
    assert kinds(rf) == "iiir"
    assert [str(r) for r in out.root] == ["i{M}", "i{N}", "r{5}"]
    assert out.definition.op == "sum" and out.definition.inputs == [rf]
    assert rf.definition.inputs == [a, b] and rf.definition.layout == "TT"


def test_rfactor_errors():
    f, x, s = reduction(("M", "K"))
    s.split(1, 4)
    with pytest.raises(ScheduleError, match=r"rfactor: axis 0 of s is not a reduction axis "
                                            r"\(i\{M\}\)"):
        s.rfactor([0, 1])
    with pytest.raises(ScheduleError, match=r"rfactor: every reduction axis of s is listed; "
                                            r"leave at least one for it to reduce"):
        s.rfactor([1, 2])
    with pytest.raises(ScheduleError, match=r"rfactor: every reduction axis of s is listed"):
        s.rfactor([-1, -2])
    with pytest.raises(ScheduleError, match=r"rfactor: no axes given \(tensor s\)"):
        s.rfactor([])
    with pytest.raises(ScheduleError, match=r"rfactor: axis 3 is out of range for tensor s"):
        s.rfactor([3])
    with pytest.raises(ScheduleError, match=r"rfactor: x is a fusion input"):
        x.rfactor([0])
    y = ops.relu(s)
    with pytest.raises(ScheduleError, match=rf"rfactor: {y.name} is not defined by a reduction "
                                            r"or matmul"):
        y.rfactor([0])
    rf = s.rfactor(1)
    with pytest.raises(ScheduleError, match=r"rfactor: s_rf is already an rfactor producer"):
        rf.rfactor([1])
    _, _, s1 = reduction(("M", "K"))
    with pytest.raises(ScheduleError, match=r"every reduction axis of s is listed"):
        s1.rfactor([1])
    assert [e.method for e in f.trace] == ["split", "rfactor"]


# -- caches and memory types ------------------------------------------------------------------


def test_cache_after_repoints_every_consumer():
    f = Fusion("c")
    x = f.new_input("x", D.f32, ["M", "N"])
    y = ops.relu(x)
    z = ops.mul(x, x)
    f.add_output(y)
    f.add_output(z)
    xc = x.cache_after("shared")
    assert xc.name == "x_cache" and xc.memory_type is MemoryType.shared
    assert isinstance(xc.definition, LoadStoreOp) and xc.definition.inputs == [x]
    assert not xc.definition.async_copy
    assert f.consumers(x) == [xc]
    assert y.definition.inputs == [xc] and z.definition.inputs == [xc, xc]
    assert set(f.consumers(xc)) == {y, z}
    assert xc.shape == x.shape and xc.dtype is x.dtype
    assert xc.root[0] is not x.root[0]
    xl = xc.cache_after(MemoryType.local)
    assert xl.name == "x_cache_cache" and f.consumers(xc) == [xl]
    x2 = x.cache_after("global")
    assert x2.name == "x_cache_1" and f.consumers(x2) == [xc]
    assert f.trace[0].result is xc and f.trace[0].args == ("shared",)


def test_cache_after_async_copy_and_reduction_producer():
    f = Fusion("c")
    x = f.new_input("x", D.f16, ["M", "K"])
    s = ops.sum(x, [1])
    y = ops.exp(s)
    f.add_output(y)
    xc = x.cache_after("shared", async_copy=True)
    assert xc.definition.async_copy and xc.definition.attributes() == (("async_copy", True),)
    assert f.trace[-1].kwargs == {"async_copy": True}
    sc = s.cache_after("shared")  # the cache of a reduction has its shape: reduced axes dropped
    assert [str(a) for a in sc.root] == ["i{M}"]


def test_cache_after_errors():
    f = Fusion("c")
    x = f.new_input("x", D.f32, ["M"])
    with pytest.raises(ScheduleError, match=r"cache_after: x has no consumers to read the "
                                            r"cache"):
        x.cache_after("shared")
    y = ops.relu(x)
    z = ops.exp(y)
    f.add_output(z)
    with pytest.raises(ScheduleError, match=r"cache_after: unknown memory type 'texture'; "
                                            r"expected global, shared or local"):
        x.cache_after("texture")
    with pytest.raises(ScheduleError, match=r"cache_after: async_copy copies into shared memory, "
                                            r"not local \(tensor x\)"):
        x.cache_after("local", async_copy=True)
    with pytest.raises(ScheduleError, match=rf"cache_after: async_copy copies from global "
                                            rf"memory, but {y.name} is in local memory"):
        y.cache_after("shared", async_copy=True)
    with pytest.raises(ScheduleError, match=r"cache_after: .* has no consumers"):
        z.cache_after("shared")
    assert f.trace == [] and f.consumers(x) == [y]


def test_cache_before_moves_the_definition():
    f, x, y = pointwise((16, 32))
    y.split(1, 8)
    y.parallelize(2, "TIDx")
    c = y.cache_before("local")
    assert c.name == "y_cache" and c.memory_type is MemoryType.local
    assert isinstance(c.definition, UnaryOp) and c.definition.inputs == [x]
    assert isinstance(y.definition, LoadStoreOp) and y.definition.inputs == [c]
    assert y.is_output and y.memory_type is MemoryType.global_ and not c.is_output
    assert extents(c) == extents(y) == ["16", "4", "8"]
    assert [a.parallel for a in y.loop] == [P.serial, P.serial, P.TIDx]
    assert not set(map(id, c.loop)) & set(map(id, y.loop))
    assert_loop_bijection(c)
    assert_loop_bijection(y)


def test_cache_before_of_a_reduction_drops_reduction_loops():
    _, _, s = reduction((16, 32))
    s.split(1, 8)
    s.split(0, 4)
    c = s.cache_before("shared")
    assert kinds(c) == "iirr" and kinds(s) == "ii" and extents(s) == ["4", "4"]
    assert isinstance(c.definition, ReductionOp) and isinstance(s.definition, LoadStoreOp)
    assert_loop_bijection(s)


def test_cache_before_errors():
    f, x, y = pointwise()
    with pytest.raises(ScheduleError, match=r"cache_before: x is a fusion input with no "
                                            r"definition to cache; use cache_after"):
        x.cache_before("shared")
    with pytest.raises(ScheduleError, match=r"cache_before: unknown memory type 'smem'"):
        y.cache_before("smem")
    assert f.trace == []


def test_set_memory_type():
    f, x, y = pointwise()
    z = ops.exp(y)
    f.add_output(z)
    t = ops.relu(z)
    f.add_output(t)
    y.set_memory_type("global")  # an output may be (re)placed in global memory
    with pytest.raises(ScheduleError, match=r"set_memory_type: y is a fusion output and stays "
                                            r"in global memory"):
        y.set_memory_type("shared")
    with pytest.raises(ScheduleError, match=r"set_memory_type: x is a fusion input and stays in "
                                            r"global memory"):
        x.set_memory_type("local")
    with pytest.raises(ScheduleError, match=r"set_memory_type: unknown memory type 'register'"):
        y.set_memory_type("register")
    f2, x2, y2 = pointwise()
    w = ops.exp(x2)
    out = ops.add(w, y2)
    f2.add_output(out)
    w.set_memory_type("shared")
    assert w.memory_type is MemoryType.shared
    w.set_memory_type(MemoryType.global_)
    assert w.memory_type is MemoryType.global_
    assert [e.method for e in f.trace] == ["set_memory_type"]


# -- compute_at -------------------------------------------------------------------------------


def tiled():
    """x -> xc (shared cache) -> y = relu(xc), y tiled [ceildiv(M, 8)@BIDx, 8@TIDx,
    ceildiv(N, 4), 4]."""
    f = Fusion("ca")
    x = f.new_input("x", D.f32, ["M", "N"])
    y = ops.relu(x)
    f.add_output(y)
    f.rename(y, "y")
    xc = x.cache_after("shared")
    y.split(1, 4)
    y.split(0, 8)
    y.parallelize(0, "BIDx")
    y.parallelize(1, "TIDx")
    return f, x, xc, y


ENV = {"M": 19, "N": 10}


def name(target):
    """The tensor name a trace entry targets (an entry holds the tensor or its name)."""
    return target if isinstance(target, str) or target is None else target.name


@pytest.mark.parametrize("pos,depth,expected", [
    (0, 0, ["M", "N"]),
    (1, 1, ["ceildiv(M, 8)", "8", "N"]),
    (2, 2, ["ceildiv(M, 8)", "8", "N"]),
    (3, 3, ["ceildiv(M, 8)", "8", "ceildiv(N, 4)", "4"]),
    (4, 4, ["ceildiv(M, 8)", "8", "ceildiv(N, 4)", "4"]),
    (-1, 4, ["ceildiv(M, 8)", "8", "ceildiv(N, 4)", "4"]),
    (-2, 3, ["ceildiv(M, 8)", "8", "ceildiv(N, 4)", "4"]),
    (-3, 2, ["ceildiv(M, 8)", "8", "N"]),
    (-5, 0, ["M", "N"]),
])
def test_compute_at_positions(pos, depth, expected):
    _, _, xc, y = tiled()
    xc.compute_at(y, pos)
    assert xc.compute_at_pos == depth and xc.compute_at_consumer is y
    assert extents(xc) == expected
    assert extents(xc)[:depth] == extents(y)[:depth]
    # the shared loops carry the consumer's parallel types, the others none
    assert [a.parallel for a in xc.loop[:depth]] == [a.parallel for a in y.loop[:depth]]
    assert all(a.parallel is P.serial for a in xc.loop[depth:])
    # replayed, not aliased: each tensor owns its axes
    assert not set(map(id, xc.loop)) & set(map(id, y.loop))
    assert_loop_bijection(xc, env=ENV)
    assert_loop_bijection(y, env=ENV)


def test_compute_at_through_intermediates():
    f = Fusion("ca")
    x = f.new_input("x", D.f32, ["M", "N"])
    a = ops.exp(x)
    b = ops.mul(a, 2.0)
    y = ops.add(b, a)
    f.add_output(y)
    xc = x.cache_after("shared")
    y.merge(0)
    y.split(0, 32)
    y.parallelize(1, "TIDx")
    xc.compute_at(y, -1)
    # every tensor on the way to y replays y's loops (each inside its nearest consumer)
    for t in (xc, a, b):
        assert extents(t) == ["ceildiv(M*N, 32)", "32"], t.name
        assert [p.parallel for p in t.loop] == [P.serial, P.TIDx]
        assert_loop_bijection(t, env=ENV)
    assert xc.compute_at_pos == 2 and xc.compute_at_consumer is a
    # the intermediates are left unplaced, for lowering to inline as far as legal
    assert a.compute_at_pos is None and b.compute_at_pos is None


def test_compute_at_reduction_producer_keeps_reduction_loops():
    f = Fusion("ca")
    x = f.new_input("x", D.f32, ["M", "K"])
    s = ops.sum(x, [1])
    y = ops.exp(s)
    f.add_output(y)
    y.split(0, 4)
    s.split(1, 8)
    s.compute_at(y, 2)
    # the shared loops come first, then the producer's own reduction loops as scheduled
    assert kinds(s) == "iirr"
    assert extents(s) == ["ceildiv(M, 4)", "4", "ceildiv(K, 8)", "8"]
    assert_loop_bijection(s, env={"M": 9, "K": 5})


def test_compute_at_loop_only_broadcast_axis():
    f = Fusion("ca")
    x = f.new_input("x", D.f32, ["M"])
    z = f.new_input("z", D.f32, ["M", "N"])
    b = ops.broadcast(x, [False, True])
    y = ops.add(b, z)
    f.add_output(y)
    xc = x.cache_after("shared")
    xc.compute_at(y, 2)
    # b has its own broadcast axis; xc lacks the N axis: it gets a loop-only broadcast axis
    assert extents(b) == ["M", "1"] and kinds(b) == "ib" and b.loop[1] in b.logical
    assert extents(xc) == ["M", "1"] and kinds(xc) == "ib"
    extra = xc.loop[1]
    assert extra not in xc.logical and extra.definition is None
    assert xc.rank == 1 and xc.ndim == 2
    assert_loop_bijection(xc, env=ENV)
    # computed at a shallower position again, the loop-only axis goes away
    xc.compute_at(y, 1)
    assert extents(xc) == ["M"] and xc.compute_at_pos == 1
    assert_loop_bijection(xc, env=ENV)


def test_compute_at_matmul_operand_gets_loop_only_n_axis():
    f, a, b, out = matmul_fusion()
    ac = a.cache_after("shared")
    bc = b.cache_after("shared")
    out.split(2, 32)
    out.split(1, 16)
    out.split(0, 16)
    out.reorder({2: 1})  # [M/16, N/16, 16, 16, K/32, 32]
    out.parallelize(0, "BIDx")
    out.parallelize(1, "BIDy")
    ac.compute_at(out, 2)
    # N is not an axis of A: a loop-only broadcast axis (extent 1) shares out's N/16 loop
    assert extents(ac) == ["ceildiv(M, 16)", "1", "16", "16", "K"]
    assert kinds(ac) == "ibibi"
    assert [p.parallel for p in ac.loop[:2]] == [P.BIDx, P.BIDy]
    assert_loop_bijection(ac, env={"M": 33, "N": 20, "K": 40})
    bc.compute_at(out, 5)
    assert bc.loop[0].is_broadcast and not bc.loop[1].is_broadcast
    assert [str(a.kind.value) for a in bc.loop[:5]] == ["b", "i", "b", "i", "i"]
    assert_loop_bijection(bc, env={"M": 33, "N": 20, "K": 40})


def test_compute_at_errors():
    f, x, xc, y = tiled()
    other = ops.exp(x)
    f.add_output(other)
    with pytest.raises(ScheduleError, match=r"compute_at: position 5 is past the depth of "
                                            r"consumer y, which has 4 loop axes \(tensor "
                                            r"x_cache\)"):
        xc.compute_at(y, 5)
    with pytest.raises(ScheduleError, match=r"compute_at: position -6 is past the depth of "
                                            r"consumer y"):
        xc.compute_at(y, -6)
    with pytest.raises(ScheduleError, match=rf"compute_at: {other.name} does not use x_cache, "
                                            r"directly or indirectly"):
        xc.compute_at(other, 1)
    with pytest.raises(ScheduleError, match=r"compute_at: 'y' is not a tensor of x_cache's "
                                            r"fusion"):
        xc.compute_at("y", 1)
    with pytest.raises(ScheduleError, match=r"compute_at: position 1\.0 is not an integer "
                                            r"\(tensor x_cache\)"):
        xc.compute_at(y, 1.0)
    with pytest.raises(ScheduleError, match=r"compute_at: x is a fusion input"):
        x.compute_at(y, 1)
    _, _, xc2, y2 = tiled()
    y2.vectorize(3)
    with pytest.raises(ScheduleError, match=r"compute_at: position 4 would share y's vectorize "
                                            r"axis 3 with x_cache"):
        xc2.compute_at(y2, -1)
    xc2.compute_at(y2, 3)
    assert xc2.loop[3].parallel is P.serial


def test_compute_at_errors_consumer_is_itself_or_upstream():
    f, x, xc, y = tiled()
    with pytest.raises(ScheduleError, match=r"compute_at: x_cache does not use x_cache"):
        xc.compute_at(xc, 1)
    with pytest.raises(ScheduleError, match=r"compute_at: x_cache does not use y"):
        y.compute_at(xc, 1)
    assert [e.method for e in f.trace].count("compute_at") == 0


def test_transforming_shared_axes_is_refused():
    f, x, xc, y = tiled()
    xc.compute_at(y, 2)
    with pytest.raises(ScheduleError, match=r"split: axis 0 of x_cache is inside its compute-at "
                                            r"position 2 \(the loop is shared with y\); "
                                            r"transform y before compute_at instead"):
        xc.split(0, 2)
    with pytest.raises(ScheduleError, match=r"merge: axis 1 of x_cache is inside its compute-at "
                                            r"position 2"):
        xc.merge(1)
    with pytest.raises(ScheduleError, match=r"reorder: axis 0 of x_cache is inside"):
        xc.reorder({2: 0})
    with pytest.raises(ScheduleError, match=r"split: axis 1 of y is shared with a producer "
                                            r"computed at position 2; transform y before that "
                                            r"compute_at"):
        y.split(1, 2)
    with pytest.raises(ScheduleError, match=r"reorder: axis 0 of y is shared with a producer"):
        y.reorder({0: 3})
    # outside the shared loops everything is allowed
    xc.split(2, 2)
    y.merge(2)
    y.split(2, 2)
    y.reorder({2: 3})
    assert extents(xc) == ["ceildiv(M, 8)", "8", "ceildiv(N, 2)", "2"]
    assert extents(y) == ["ceildiv(M, 8)", "8", "2", "ceildiv(4*ceildiv(N, 4), 2)"]


# -- inline_most ------------------------------------------------------------------------------


def test_inline_most_is_fully_inlined():
    _, _, xc, y = tiled()
    xc.inline_most()
    assert xc.compute_at_pos == 4 and xc.compute_at_consumer is y
    assert extents(xc) == extents(y)
    assert_loop_bijection(xc, env=ENV)


def test_inline_most_stops_before_vectorized_axis():
    _, _, xc, y = tiled()
    y.vectorize(3)
    xc.inline_most()
    assert xc.compute_at_pos == 3
    assert extents(xc) == extents(y)


def test_inline_most_with_several_consumers_stops_at_their_common_loops():
    f = Fusion("two")
    x = f.new_input("x", D.f32, ["M", "N"])
    a, b = ops.relu(x), ops.exp(x)
    y = ops.add(a, b)
    f.add_output(y)
    xc = x.cache_after("local")
    y.split(1, 4)
    a.compute_at(y, 2)
    b.compute_at(y, 1)
    xc.inline_most()
    assert xc.compute_at_pos == 1  # a and b run inside y's first loop only both
    assert extents(xc) == ["M", "N"]
    # consumers in separate loop nests share no loop at all
    f2 = Fusion("apart")
    x2 = f2.new_input("x", D.f32, ["M", "N"])
    z1, z2 = ops.relu(x2), ops.exp(x2)
    f2.add_output(z1)
    f2.add_output(z2)
    c2 = x2.cache_after("local")
    c2.inline_most()
    assert c2.compute_at_pos == 0


def test_inline_most_keeps_a_reduction_out_of_broadcast_loops():
    f = Fusion("bcast")
    x = f.new_input("x", D.f32, ["M", "K"])
    z = f.new_input("z", D.f32, ["M", "K"])
    s = ops.sum(x, [1])
    y = ops.add(ops.broadcast(s, [False, True]), z)
    f.add_output(y)
    b = f.consumers(s)[0]
    s.inline_most()
    # b = broadcast(s) has loops [M, 1]; the second maps to no axis of s
    assert s.compute_at_pos == 1 and kinds(b) == "ib"


def test_inline_most_of_a_fusion_and_errors():
    f = Fusion("all")
    x = f.new_input("x", D.f32, ["M", "N"])
    a = ops.exp(x)
    b = ops.relu(a)
    y = ops.add(b, 1.0)
    f.add_output(y)
    xc = x.cache_after("shared")
    y.split(1, 4)
    transforms.inline_most(f)
    for t in (xc, a, b):
        assert t.compute_at_pos == 3 and extents(t) == extents(y)
    assert y.compute_at_pos is None and x.compute_at_pos is None
    with pytest.raises(ScheduleError, match=r"inline_most: y has no consumer to be inlined into"):
        f.rename(y, "y").inline_most()
    with pytest.raises(ScheduleError, match=r"inline_most: x is a fusion input"):
        x.inline_most()


# -- circular_buffer --------------------------------------------------------------------------


def pipelined():
    f = Fusion("cb")
    x = f.new_input("x", D.f16, ["M", "K"])
    s = ops.sum(x, [1])
    f.add_output(s)
    f.rename(s, "s")
    xc = x.cache_after("shared", async_copy=True)
    s.split(1, 32)  # [M, K/32, 32]
    s.parallelize(0, "BIDx")
    return f, x, xc, s


def test_circular_buffer():
    f, _, xc, s = pipelined()
    xc.compute_at(s, 2)
    xc.circular_buffer(3)
    assert xc.circular_buffer_stages == 3
    assert "stages=3" in xc.describe()
    assert f.trace[-1].method == "circular_buffer" and f.trace[-1].args == (3,)


def test_circular_buffer_errors():
    f, x, xc, s = pipelined()
    for bad in (1, 0, 2.0, True, "3"):
        with pytest.raises(ScheduleError, match=rf"circular_buffer: stages must be an integer "
                                                rf">= 2, got {bad!r} \(tensor x_cache\)"):
            xc.circular_buffer(bad)
    with pytest.raises(ScheduleError, match=r"circular_buffer: x_cache is not computed inside a "
                                            r"serial loop \(compute-at position 0\); compute_at "
                                            r"it inside one first"):
        xc.circular_buffer(2)
    xc.compute_at(s, 1)  # only the BIDx loop: not serial
    with pytest.raises(ScheduleError, match=r"x_cache is not computed inside a serial loop "
                                            r"\(compute-at position 1\)"):
        xc.circular_buffer(2)
    with pytest.raises(ScheduleError, match=r"circular_buffer: s is not a copy; only loads made "
                                            r"by cache_after/cache_before are circular-buffered"):
        s.circular_buffer(2)
    with pytest.raises(ScheduleError, match=r"circular_buffer: x is a fusion input"):
        x.circular_buffer(2)
    g = x.cache_after("global")
    with pytest.raises(ScheduleError, match=r"circular_buffer: x_cache_1 is in global memory; "
                                            r"circular buffers live in shared or local memory"):
        g.circular_buffer(2)
    # a serial loop of extent 1 is no pipeline either
    f2 = Fusion("one")
    x2 = f2.new_input("x", D.f32, [1, 8])
    y2 = ops.relu(x2)
    f2.add_output(y2)
    c2 = x2.cache_after("shared")
    c2.compute_at(y2, 1)
    with pytest.raises(ScheduleError, match=r"is not computed inside a serial loop"):
        c2.circular_buffer(2)
    assert xc.circular_buffer_stages is None


# -- transforms on fusion inputs --------------------------------------------------------------


@pytest.mark.parametrize("name,call", [
    ("split", lambda x, y: x.split(0, 2)),
    ("merge", lambda x, y: x.merge(0)),
    ("reorder", lambda x, y: x.reorder({0: 1})),
    ("parallelize", lambda x, y: x.parallelize(0, "TIDx")),
    ("vectorize", lambda x, y: x.vectorize(1)),
    ("rfactor", lambda x, y: x.rfactor([0])),
    ("compute_at", lambda x, y: x.compute_at(y, 1)),
    ("inline_most", lambda x, y: x.inline_most()),
    ("circular_buffer", lambda x, y: x.circular_buffer(2)),
])
def test_inputs_cannot_be_transformed(name, call):
    f, x, y = pointwise()
    with pytest.raises(ScheduleError, match=rf"^{name}: x is a fusion input; inputs are read, "
                                            r"not computed: schedule a cache of it "
                                            r"\(cache_after\) instead$"):
        call(x, y)
    assert f.trace == [] and extents(x) == ["M", "N"]


# -- the schedule trace -----------------------------------------------------------------------


def test_trace_records_each_successful_outermost_call_once():
    f, x, y = pointwise((16, 64))
    y.split(1, 4)
    y.split(1, 2, inner=False)
    with pytest.raises(ScheduleError):
        y.split(9, 2)
    y.parallelize(-1, "vectorize")  # one call, even though it vectorizes inside
    y.reorder({0: 1})
    y.merge(0)
    with pytest.raises(ScheduleError):
        y.merge(2)
    xc = x.cache_after("shared")
    xc.compute_at(y, 1)
    got = [(name(e.target), e.method, e.args, e.kwargs) for e in f.trace]
    assert got == [
        ("y", "split", (1, 4), {}),
        ("y", "split", (1, 2), {"inner": False}),
        ("y", "parallelize", (-1, "vectorize"), {}),
        ("y", "reorder", ({0: 1},), {}),
        ("y", "merge", (0,), {}),
        ("x", "cache_after", ("shared",), {}),
        ("x_cache", "compute_at", (y, 1), {}),
    ]
    assert f.trace[5].result is xc
    assert all(e.result is None for i, e in enumerate(f.trace) if i != 5)
    assert f._recording_depth == 0


def test_trace_of_every_method():
    f = Fusion("all")
    x = f.new_input("x", D.f32, ["M", "K"])
    s = ops.sum(ops.relu(x), [1])
    f.add_output(s)
    f.rename(s, "s")
    r = f.tensors[1]
    f.rename(r, "r")
    xc = x.cache_after("shared")
    sc = s.cache_before("local")
    s.split(0, 4)
    sc.split(1, 8)
    rf = sc.rfactor([1])
    r.set_memory_type("shared")
    xc.compute_at(r, 1)
    r.inline_most()
    assert [e.method for e in f.trace] == ["cache_after", "cache_before", "split", "split",
                                           "rfactor", "set_memory_type", "compute_at",
                                           "inline_most"]
    assert [name(e.target) for e in f.trace] == ["x", "s", "s", "s_cache", "s_cache", "r",
                                                 "x_cache", "r"]
    assert f.trace[1].result is sc and f.trace[4].result is rf


# -- index algebra: split/merge/reorder sequences are bijections ------------------------------


def test_index_model_catches_a_broken_split():
    # the model itself must be able to fail: a split whose inner extent was tampered with
    _, _, y = pointwise((6, 4))
    y.split(0, 4)
    assert_loop_bijection(y)
    y.loop[0].extent = 1  # 1 x 4 outer x inner tuples miss root indices 4 and 5 of axis 0
    with pytest.raises(AssertionError, match=r"8 root indices missed"):
        assert_loop_bijection(y)


def test_index_model_by_hand():
    _, _, y = pointwise((3, 5))
    y.split(1, 2)  # [3, 3, 2]
    y.merge(0)  # [9, 2]
    y.reorder({0: 1})  # [2, 9]
    extents_, (m, n) = loop_to_domain(y)
    assert extents_ == [3, 5]
    # loop tuple (i, o) with o = m * 3 + n_outer, n = n_outer * 2 + i, valid if n < 5
    expected = sorted((o // 3, (o % 3) * 2 + i) for i in range(2) for o in range(9)
                      if (o % 3) * 2 + i < 5)
    assert sorted(zip(m.tolist(), n.tolist())) == expected == \
        sorted(itertools.product(range(3), range(5)))


SHAPES = st.lists(st.integers(1, 5), min_size=2, max_size=3)
STEP = st.one_of(
    st.tuples(st.just("split"), st.integers(-4, 4), st.integers(1, 4), st.booleans()),
    st.tuples(st.just("merge"), st.integers(-4, 4)),
    st.tuples(st.just("reorder"), st.permutations(range(6)), st.permutations(range(6)),
              st.integers(1, 3)),
)


@settings(max_examples=150, deadline=None)
@given(shape=SHAPES, steps=st.lists(STEP, max_size=7))
def test_split_merge_reorder_are_bijections(shape, steps):
    f = Fusion("bij")
    x = f.new_input("x", D.f32, shape)
    y = f.rename(ops.set(x), "y")
    applied = 0
    for step in steps:
        try:
            if step[0] == "split":
                y.split(step[1], step[2], inner=step[3])
            elif step[0] == "merge":
                y.merge(step[1])
            else:
                olds = [p for p in step[1] if p < y.ndim][:step[3]]
                news = [p for p in step[2] if p < y.ndim][:step[3]]
                y.reorder(dict(zip(olds, news)))
            applied += 1
        except ScheduleError as e:
            assert "y" in str(e)
    assert len(f.trace) == applied
    assert_loop_bijection(y)
    assert_loop_bijection(y, y.root)


@settings(max_examples=60, deadline=None)
@given(shape=SHAPES, steps=st.lists(STEP, max_size=5), pos=st.integers(-6, 6),
       sym=st.booleans())
def test_compute_at_keeps_producer_loops_bijective(shape, steps, pos, sym):
    f = Fusion("bij")
    dims = [f"D{i}" for i in range(len(shape))] if sym else shape
    env = {f"D{i}": e for i, e in enumerate(shape)}
    x = f.new_input("x", D.f32, dims)
    a = ops.exp(x)
    y = ops.sum(a, [len(shape) - 1])
    f.add_output(y)
    xc = x.cache_after("shared")
    for step in steps:
        try:
            if step[0] == "split":
                y.split(step[1], step[2], inner=step[3])
            elif step[0] == "merge":
                y.merge(step[1])
            else:
                y.reorder({step[3] % y.ndim: 0})
        except ScheduleError:
            pass
    try:
        xc.compute_at(y, pos)
    except ScheduleError as e:
        assert "past the depth of consumer" in str(e)
        return
    depth = xc.compute_at_pos
    assert depth == (pos if pos >= 0 else y.ndim + 1 + pos)
    for t in (xc, a):
        assert [str(e.extent) for e in t.loop[:depth]] == extents(y)[:depth]
        assert_loop_bijection(t, env=env)
    assert_loop_bijection(y, env=env)


# -- placements survive later graph rewrites and re-placements --------------------------------


def test_rfactor_after_compute_at_is_refused():
    f = Fusion("r")
    x = f.new_input("x", D.f32, ["M", "K"])
    z = f.new_input("z", D.f32, ["M", "N"])
    s = ops.sum(x, [1])
    b = ops.broadcast(s, [False, True])
    y = ops.add(b, z)
    f.add_output(y)
    s.compute_at(b, 2)  # s gets a loop-only broadcast axis for N
    s.split(2, 2)
    with pytest.raises(ScheduleError, match=r"rfactor: t\d+ already shares loops with t\d+ "
                                            r"through compute_at; rfactor it before compute_at"):
        s.rfactor([2])
    f2, x2, s2 = reduction(("M", "K"))
    xc = x2.cache_after("shared")
    s2.split(1, 4)
    xc.compute_at(s2, 2)
    with pytest.raises(ScheduleError, match=r"rfactor: a producer is computed at position 2 of "
                                            r"s; rfactor s before that compute_at"):
        s2.rfactor([1])
    assert [e.method for e in f2.trace] == ["cache_after", "split", "compute_at"]
    # a reduction a compute_at of an input's copy gave a loop-only broadcast axis, then
    # cached: its cache holds the axis with no compute_at of its own (a KeyError before)
    f3 = Fusion("r3")
    y3 = f3.new_input("y", D.f32, [1, 1])
    r3 = ops.sum(ops.relu(y3), [0])
    out = ops.add(ops.broadcast(ops.relu(r3), [True, False]), y3)
    f3.add_output(out)
    y3.cache_after("shared", async_copy=True).compute_at(out, 1)
    r3.split(1, 2, inner=False)
    with pytest.raises(ScheduleError, match=r"rfactor: t\d+_cache has loop axes not made of "
                                            r"its root \(b\{1\}: broadcast axes a compute_at "
                                            r"added\); rfactor it before that compute_at"):
        r3.cache_before("shared").rfactor([1])


def test_cache_before_after_compute_at_is_refused():
    f, x, xc, y = tiled()
    xc.compute_at(y, 2)
    with pytest.raises(ScheduleError, match=r"cache_before: a producer is computed at position "
                                            r"2 of y; cache y before that compute_at"):
        y.cache_before("local")
    f2 = Fusion("cb")
    x2 = f2.new_input("x", D.f32, ["M", "N"])
    a = ops.exp(x2)
    y2 = ops.relu(a)
    f2.add_output(y2)
    a.compute_at(y2, 1)
    with pytest.raises(ScheduleError, match=rf"cache_before: {a.name} is computed at {y2.name} "
                                            r"\(position 1\); cache it before compute_at"):
        a.cache_before("local")


def test_caching_a_placed_tensor_keeps_its_consumer_loops_protected():
    # a is computed at y; caching a puts a copy between them, but a still shares y's loop
    f = Fusion("ca")
    x = f.new_input("x", D.f32, ["M", "N"])
    a = ops.exp(x)
    y = ops.relu(a)
    f.add_output(y)
    y.split(0, 4)
    a.compute_at(y, 2)
    ac = a.cache_after("local")
    assert f.producers(y) == [ac] and a.compute_at_consumer is y
    with pytest.raises(ScheduleError, match=r"split: axis 1 of t\d+ is shared with a producer "
                                            r"computed at position 2"):
        y.split(1, 2)
    ac.inline_most()
    assert ac.compute_at_pos == 3
    assert_placements_consistent(f)


@pytest.mark.parametrize("reshape,pos,expected", [
    (lambda y: y.split(1, 2), 2, ["M", "ceildiv(N, 2)", "2"]),
    (lambda y: y.merge(0), 1, ["M*N"]),
])
def test_replacing_a_tensor_keeps_the_producers_placed_at_it(reshape, pos, expected):
    # inner first: c2 is placed at c1, then c1 is placed at y, whose loops differ
    f = Fusion("re")
    x = f.new_input("x", D.f32, ["M", "N"])
    y = ops.relu(x)
    f.add_output(y)
    c1 = y.cache_before("shared")
    c2 = c1.cache_before("local")
    c1.split(1, 4)
    c2.compute_at(c1, 3)
    assert extents(c2) == ["M", "ceildiv(N, 4)", "4"]
    reshape(y)
    c1.compute_at(y, pos)
    assert extents(c1) == expected
    # c2 follows c1's new loops, at its position (or c1's depth, if that is less)
    assert extents(c2) == expected
    assert c2.compute_at_pos == min(3, len(expected)) and c2.compute_at_consumer is c1
    assert_placements_consistent(f)
    for t in (c1, c2):
        assert_loop_bijection(t, env=ENV)


def test_fusion_wide_inline_keeps_explicit_placements():
    # xs and ys are placed at the intermediate t; the fusion-wide inline_most (what lowering
    # runs first) then places t itself, and must keep both placements valid
    f = Fusion("fw")
    x = f.new_input("x", D.f32, ["M", "N"])
    y = f.new_input("y", D.f32, ["M", "N"])
    t = ops.mul(x, y)
    out = ops.exp(t)
    f.add_output(out)
    xs, ys = x.cache_after("shared"), y.cache_after("shared")
    t.split(1, 8)
    xs.compute_at(t, 3)
    ys.compute_at(t, 2)
    out.split(0, 2)
    transforms.inline_most(f)
    assert t.compute_at_pos == 3 and extents(t) == ["ceildiv(M, 2)", "2", "N"]
    assert (xs.compute_at_pos, ys.compute_at_pos) == (3, 2)
    assert xs.compute_at_consumer is t and ys.compute_at_consumer is t
    assert_placements_consistent(f)
    for u in (xs, ys, t):
        assert_loop_bijection(u, env=ENV)


def test_regression_merging_a_broadcast_into_a_reduction_is_refused():
    # found by the random-schedule property test: t3 = sum(x, [1]) placed in its broadcast
    # consumer gets that consumer's loop-only broadcast axes; merged with the reduction
    # axis, b{2} x r{1} made a loop of 2 that summed the one element twice
    f = Fusion("prop")
    x = f.new_input("x", DataType.f32, [1, 1])
    r = ops.sum(x, [1])
    f.add_output(ops.add(ops.broadcast(r, [False, True]), x))
    consumer = f.consumers(r)[0]
    consumer.split(1, 2)
    r.compute_at(consumer, 2)
    # (x's axes, declared of size 1, are broadcast axes)
    assert [str(a) for a in r.loop] == ["b{1}", "b{1}", "b{2}", "r{1}"]
    with pytest.raises(ScheduleError) as refused:
        r.merge(2)
    assert str(refused.value) == (
        f"merge: cannot merge a broadcast axis with a reduction axis (tensor {r.name}, axes "
        "2 and 3: b{2} and r{1}); the merged loop would reduce every element more than once")
