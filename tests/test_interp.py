"""The CPU interpreter of kernel IR (codegen.interp) and its race detector.

Kernels are built by hand with the small helpers below (independent of the lowering
passes and of tests/kir_examples.py). Statements are relabelled S1, S2, ... in program
order, so hazards can be asserted by label.
"""

import dataclasses
import time

import ml_dtypes
import numpy as np
import pytest

from codegen.errors import RaceError
from codegen import interp
from codegen.interp import InterpError, Wait, convert, run_kernel, schedule
from fuserir.dtypes import DataType
from lowering import kir

I32, I64, F32, F16, BF16, F64, BOOL = (DataType.i32, DataType.i64, DataType.f32,
                                        DataType.f16, DataType.bf16, DataType.f64,
                                        DataType.bool)
SHARED, LOCAL, GLOBAL = kir.Memory.shared, kir.Memory.local, kir.Memory.global_

# -- building kernels -----------------------------------------------------------------


def c(value, dtype=I32):
    return kir.Const(value, dtype)


def var(name, dtype=I32):
    return kir.Var(name, dtype)


TX = kir.Special(kir.SpecialKind.threadIdx, "x", I32)
TY = kir.Special(kir.SpecialKind.threadIdx, "y", I32)
BX = kir.Special(kir.SpecialKind.blockIdx, "x", I32)
BDX = kir.Special(kir.SpecialKind.blockDim, "x", I32)


def op(name, a, b, dtype=None):
    if dtype is None:
        dtype = BOOL if name in kir.COMPARISONS or name in ("and", "or") else a.dtype
    return kir.BinOp(name, a, b, dtype)


def add(a, b):
    return op("add", a, b)


def sub(a, b):
    return op("sub", a, b)


def mul(a, b):
    return op("mul", a, b)


def lt(a, b):
    return op("lt", a, b)


def load(buf, index):
    return kir.Load(buf, index)


def store(buf, index, value):
    return kir.Store(buf, index, value)


def loop(name, extent, body):
    return kir.ForLoop(var(name), extent if isinstance(extent, kir.ScalarExpr) else c(extent),
                       body)


def if_(cond, then, else_=()):
    return kir.IfThenElse(cond, list(then), list(else_))


def shared(name, dtype, size, offset=0):
    return kir.Buffer(name, dtype, SHARED, size=c(size), byte_offset=c(offset))


def local(name, dtype, size):
    return kir.Buffer(name, dtype, LOCAL, size=c(size))


def tensor(name, dtype, sizes, output=False):
    """A global TensorParam; sizes are names (size variables) or ints."""
    buf = kir.Buffer(name, dtype, GLOBAL)
    size_exprs = [var(s) if isinstance(s, str) else c(s) for s in sizes]
    strides = [var(f"{name}_stride{i}") for i in range(len(sizes))]
    return kir.TensorParam(buf, size_exprs, strides, is_output=output)


def kernel(name, tensors, body, grid=(1, 1, 1), block=(128, 1, 1), scalars=()):
    wrap = lambda e: e if isinstance(e, kir.ScalarExpr) else c(e)  # noqa: E731
    k = kir.Kernel(name, list(tensors), [kir.ScalarParam(var(s)) for s in scalars],
                   list(body), kir.LaunchConfig(tuple(map(wrap, grid)),
                                                tuple(map(wrap, block))))
    kir.relabel(k.body)
    return k


def flat_index(t, *indices):
    """sum(index_i * stride_i) for TensorParam t."""
    e = mul(indices[0], t.strides[0])
    for i, s in zip(indices[1:], t.strides[1:]):
        e = add(e, mul(i, s))
    return e


def point(k, label):
    s = next(s for s in kir.walk(k.body) if s.label == label)
    return f"{label}: {kir.format_stmt(s)}"


def race(k, args, **kw):
    with pytest.raises(RaceError) as info:
        run_kernel(k, args, **kw)
    return info.value.hazards


def only(hazards, kind):
    found = [h for h in hazards if h.kind == kind]
    assert found, f"no {kind} in {[h.kind for h in hazards]}"
    return found


# -- pointwise, strides, predicates --------------------------------------------------------


def bias_relu_kernel():
    """y[i, j] = relu(x[i, j] + b[j]); one row per block.y, 32 threads over columns."""
    x, b, y = tensor("x", F32, ["M", "N"]), tensor("b", F32, ["N"]), \
        tensor("y", F32, ["M", "N"], output=True)
    row = kir.Special(kir.SpecialKind.blockIdx, "y", I32)
    col = add(mul(BX, c(32)), TX)
    value = kir.UnOp("relu", add(load(x.buffer, flat_index(x, row, col)),
                                 load(b.buffer, flat_index(b, col))), F32)
    body = [if_(lt(col, var("N")), [store(y.buffer, flat_index(y, row, col), value)])]
    grid = (op("ceildiv", var("N"), c(32)), var("M"), 1)
    return kernel("bias_relu", [x, b, y], body, grid=grid, block=(32, 1, 1),
                  scalars=["M", "N"])


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "reversed", "sliced"])
def test_pointwise_strided_inputs_and_predicate(rng, layout):
    M, N = 5, 70                     # 70 columns: the last block's threads 6..31 idle
    base = rng.integers(-8, 8, size=(N, 2 * M)).astype(np.float32)
    x = {"contiguous": np.ascontiguousarray(base[:, :M].T),
         "transposed": base[:, :M].T,                    # strides (1, 2M)
         "reversed": np.ascontiguousarray(base[:, :M].T)[::-1, ::-1],
         "sliced": base.T[::2]}[layout]
    assert x.shape == (M, N)
    b = rng.integers(-8, 8, size=N).astype(np.float32)
    y = np.full((M, N), -123.0, np.float32)
    k = bias_relu_kernel()
    run_kernel(k, {"x": x, "b": b, "y": y, "M": M, "N": N})
    np.testing.assert_array_equal(y, np.maximum(x + b, 0))


def test_pointwise_output_strides_honoured(rng):
    M, N = 3, 40
    x = rng.integers(-8, 8, size=(M, N)).astype(np.float32)
    b = rng.integers(-8, 8, size=N).astype(np.float32)
    big = np.full((N, M), -1.0, np.float32)
    y = big.T                                        # an output with strides (1, M)
    run_kernel(bias_relu_kernel(), {"x": x, "b": b, "y": y, "M": M, "N": N})
    np.testing.assert_array_equal(big.T, np.maximum(x + b, 0))


def test_select_and_logical_operands_are_lazy():
    """`c ? a[i] : 0` and `c && a[i] > 0` load a[i] only where c holds, as C does."""
    a = tensor("a", F32, ["N"])
    out = tensor("out", F32, [64], output=True)
    cond = lt(TX, var("N"))
    sel = kir.Select(cond, load(a.buffer, TX), c(-1.0, F32), F32)
    both = op("and", cond, op("gt", load(a.buffer, TX), c(0.0, F32)))
    body = [store(out.buffer, TX, add(sel, kir.Cast(both, F32)))]
    k = kernel("lazy", [a, out], body, block=(64, 1, 1), scalars=["N"])
    av = np.arange(-5, 5, dtype=np.float32)
    o = np.zeros(64, np.float32)
    run_kernel(k, {"a": av, "out": o, "N": 10})          # no out-of-bounds hazard
    expect = np.full(64, -1.0, np.float32)
    expect[:10] = av + (av > 0)
    np.testing.assert_array_equal(o, expect)


def test_block_selection_runs_only_chosen_blocks(rng):
    M, N = 4, 96
    x = rng.integers(-8, 8, size=(M, N)).astype(np.float32)
    b = np.zeros(N, np.float32)
    y = np.full((M, N), -7.0, np.float32)
    run_kernel(bias_relu_kernel(), {"x": x, "b": b, "y": y, "M": M, "N": N},
               blocks=[(1, 2, 0), (2, 0)])
    expect = np.full((M, N), -7.0, np.float32)
    expect[2, 32:64] = np.maximum(x[2, 32:64], 0)
    expect[0, 64:96] = np.maximum(x[0, 64:96], 0)
    np.testing.assert_array_equal(y, expect)
    with pytest.raises(InterpError, match=r"block \(3, 0, 0\) is outside the grid"):
        run_kernel(bias_relu_kernel(), {"x": x, "b": b, "y": y, "M": M, "N": N},
                   blocks=[(3, 0, 0)])


def test_short_launch_tuples_and_unplaced_shared_buffers():
    """grid=(2,) means (2, 1, 1); shared buffers without a byte_offset are placed after
    the placed ones (16-byte aligned), so they do not alias."""
    dst = tensor("out", I32, [64], output=True)
    a = shared("a", I32, 32, offset=0)
    b = kir.Buffer("b", I32, SHARED, size=c(32))
    gidx = add(mul(BX, c(32)), TX)
    body = [kir.Allocate(a), kir.Allocate(b), store(a, TX, TX), store(b, TX, mul(TX, c(2))),
            kir.Barrier(), store(dst.buffer, gidx, add(load(a, TX), load(b, TX)))]
    k = kir.Kernel("short", [dst], [], body, kir.LaunchConfig((c(2),), (c(32),)))
    kir.relabel(k.body)
    out = np.zeros(64, np.int32)
    run_kernel(k, {"out": out}, blocks=[1])
    np.testing.assert_array_equal(out, np.r_[np.zeros(32), 3 * np.arange(32)])


# -- shared-memory staging: RAW ------------------------------------------------------------


def staging_kernel(with_barrier=True, nblocks=2):
    """out[b*128 + t] = in[b*128 + 127 - t] through a shared buffer."""
    src, dst = tensor("in", F32, ["N"]), tensor("out", F32, ["N"], output=True)
    xs = shared("xs", F32, 128)
    gidx = add(mul(BX, c(128)), TX)
    body = [kir.Allocate(xs),
            store(xs, TX, load(src.buffer, flat_index(src, gidx))),
            *([kir.Barrier()] if with_barrier else []),
            store(dst.buffer, flat_index(dst, gidx), load(xs, sub(c(127), TX)))]
    return kernel("staging", [src, dst], body, grid=(nblocks, 1, 1), block=(128, 1, 1))


def test_staging_with_barrier_is_race_free():
    x = np.arange(256, dtype=np.float32)
    out = np.zeros(256, np.float32)
    run_kernel(staging_kernel(True), {"in": x, "out": out})
    np.testing.assert_array_equal(out, np.concatenate([x[127::-1], x[:127:-1]]))


def test_staging_without_barrier_reports_raw():
    k = staging_kernel(False)
    x = np.arange(256, dtype=np.float32)
    out = np.zeros(256, np.float32)
    hazards = race(k, {"in": x, "out": out})
    assert [h.kind for h in hazards] == ["RAW"]     # deduplicated over threads and blocks
    h = hazards[0]
    assert h.first == point(k, "S2") == "S2: xs[threadIdx.x] = in[(((blockIdx.x * 128) " \
                                          "+ threadIdx.x) * in_stride0)]"
    assert h.second == point(k, "S3")
    assert h.buffer == "xs"
    assert h.threads == ((127, 0, 0), (0, 0, 0))    # thread 0 reads what 127 wrote
    assert h.byte_range == (508, 512)
    assert h.iterations == ({}, {})
    assert h.block == (0, 0, 0)
    assert "128 thread(s) read bytes another thread wrote" in h.detail
    # lockstep execution: the output is still what it would be (outputs are written)
    np.testing.assert_array_equal(out[:128], x[127::-1])


# -- loops: WAR loop-carried, own bytes ----------------------------------------------------


def rotate_loop_kernel(barrier_at_end):
    """for i: xs[t] = in[i*128 + t]; sync; out[i*128 + t] = xs[127 - t]; [sync]."""
    src, dst = tensor("in", F32, ["N"]), tensor("out", F32, ["N"], output=True)
    xs = shared("xs", F32, 128)
    i = var("i")
    gidx = add(mul(i, c(128)), TX)
    body = [store(xs, TX, load(src.buffer, gidx)), kir.Barrier(),
            store(dst.buffer, gidx, load(xs, sub(c(127), TX)))]
    if barrier_at_end:
        body.append(kir.Barrier())
    return kernel("rotate", [src, dst], [kir.Allocate(xs), loop("i", 4, body)])


def test_loop_with_trailing_barrier_is_race_free():
    x = np.arange(512, dtype=np.float32)
    out = np.zeros(512, np.float32)
    run_kernel(rotate_loop_kernel(True), {"in": x, "out": out})
    np.testing.assert_array_equal(out, x.reshape(4, 128)[:, ::-1].ravel())


def test_loop_carried_war_reports_iterations():
    k = rotate_loop_kernel(False)
    x = np.arange(512, dtype=np.float32)
    hazards = race(k, {"in": x, "out": np.zeros(512, np.float32)})
    assert [h.kind for h in hazards] == ["WAR"]
    h = hazards[0]
    assert h.first == point(k, "S5")                 # the read of iteration i ...
    assert h.second == point(k, "S3")                # ... then the write of iteration i+1
    assert h.iterations == ({"i": 0}, {"i": 1})
    assert h.threads == ((127, 0, 0), (0, 0, 0))     # thread 127 read xs[0]; 0 rewrites it
    assert h.byte_range == (0, 4)


def test_loop_touching_only_own_bytes_is_race_free():
    """acc[t] += in[i*128 + t] in shared memory, no barrier: every thread its own bytes."""
    src, dst = tensor("in", F32, ["N"]), tensor("out", F32, [128], output=True)
    acc = shared("acc", F32, 128)
    body = [kir.Allocate(acc), store(acc, TX, c(0.0, F32)),
            loop("i", 8, [store(acc, TX, add(load(acc, TX),
                                               load(src.buffer, add(mul(var("i"), c(128)),
                                                                    TX))))]),
            store(dst.buffer, TX, load(acc, TX))]
    k = kernel("own_bytes", [src, dst], body)
    x = np.arange(1024, dtype=np.float32)
    out = np.zeros(128, np.float32)
    run_kernel(k, {"in": x, "out": out})
    np.testing.assert_array_equal(out, x.reshape(8, 128).sum(0))


def test_in_statement_neighbour_read_is_war():
    """xs[t] = xs[t + 1]: all threads read before any writes (lockstep), and thread t's
    write lands on bytes thread t - 1 read in the same statement: WAR."""
    xs = shared("xs", F32, 129)
    dst = tensor("out", F32, [128], output=True)
    body = [kir.Allocate(xs), store(xs, TX, kir.Cast(TX, F32)),
            if_(lt(TX, c(1)), [store(xs, c(128), c(128.0, F32))]), kir.Barrier(),
            store(xs, TX, load(xs, add(TX, c(1)))), kir.Barrier(),
            store(dst.buffer, TX, load(xs, TX))]
    k = kernel("shift", [dst], body)
    out = np.zeros(128, np.float32)
    hazards = race(k, {"out": out})
    assert [h.kind for h in hazards] == ["WAR"]
    assert hazards[0].first == hazards[0].second == point(k, "S6")
    assert hazards[0].threads == ((0, 0, 0), (1, 0, 0))
    np.testing.assert_array_equal(out, np.arange(1, 129, dtype=np.float32))


def test_war_after_a_broadcast_read_names_another_reader():
    """All threads read xs[0]; thread 0 then rewrites it with no barrier: the WAR names a
    reader other than the writer (the shadow keeps two distinct readers per byte)."""
    xs = shared("xs", F32, 32)
    dst = tensor("out", F32, [32], output=True)
    body = [kir.Allocate(xs), store(xs, TX, c(1.0, F32)), kir.Barrier(),
            store(dst.buffer, TX, load(xs, c(0))),
            if_(lt(TX, c(1)), [store(xs, c(0), c(2.0, F32))])]
    k = kernel("bcast", [dst], body, block=(32, 1, 1))
    (h,) = race(k, {"out": np.zeros(32, np.float32)})
    assert (h.kind, h.first, h.second) == ("WAR", point(k, "S4"), point(k, "S6"))
    assert h.threads[1] == (0, 0, 0) and h.threads[0] != (0, 0, 0)


def test_two_dimensional_block_reports_thread_coordinates():
    """A 16x8 tile transposed through shared memory, without the barrier."""
    src, dst = tensor("in", F32, [8, 16]), tensor("out", F32, [16, 8], output=True)
    tile = shared("tile", F32, 128)
    body = [kir.Allocate(tile),
            store(tile, add(mul(TY, c(16)), TX), load(src.buffer, flat_index(src, TY, TX))),
            store(dst.buffer, flat_index(dst, TX, TY),
                  load(tile, add(mul(op("mod", add(TY, c(1)), c(8)), c(16)), TX)))]
    k = kernel("tile2d", [src, dst], body, block=(16, 8, 1))
    x = np.arange(128, dtype=np.float32).reshape(8, 16)
    out = np.zeros((16, 8), np.float32)
    (h,) = race(k, {"in": x, "out": out})
    assert h.kind == "RAW"
    assert h.threads == ((0, 1, 0), (0, 0, 0))       # (x, y, z) of writer and reader
    assert h.byte_range == (64, 68)
    np.testing.assert_array_equal(out, np.roll(x, -1, axis=0).T)


def test_zero_dimensional_output_and_broadcast_input():
    src = tensor("x", F32, [4, 8])                  # passed as a stride-0 broadcast view
    dst = tensor("total", F32, [], output=True)
    acc = local("acc", F32, 1)
    body = [kir.Allocate(acc), store(acc, c(0), c(0.0, F32)),
            loop("i", 4, [loop("j", 8, [store(acc, c(0), add(
                load(acc, c(0)), load(src.buffer, flat_index(src, var("i"), var("j")))))])]),
            store(dst.buffer, c(0), load(acc, c(0)))]
    k = kernel("sum0d", [src, dst], body, block=(1, 1, 1))
    x = np.broadcast_to(np.arange(8, dtype=np.float32), (4, 8))
    total = np.zeros((), np.float32)
    run_kernel(k, {"x": x, "total": total})
    assert total == 4 * 28


# -- WAW -----------------------------------------------------------------------------------


def test_waw_two_threads_one_element_in_one_statement():
    xs = shared("xs", F32, 4)
    dst = tensor("out", F32, [1], output=True)
    body = [kir.Allocate(xs), if_(lt(TX, c(2)), [store(xs, c(0), kir.Cast(TX, F32))]),
            kir.Barrier(), if_(lt(TX, c(1)), [store(dst.buffer, c(0), load(xs, c(0)))])]
    k = kernel("waw", [dst], body, block=(32, 1, 1))
    out = np.zeros(1, np.float32)
    (h,) = race(k, {"out": out})
    assert h.kind == "WAW"
    assert h.first == h.second == point(k, "S3")
    assert h.threads == ((0, 0, 0), (1, 0, 0))
    assert h.byte_range == (0, 4)
    assert out[0] == 1.0                              # the highest thread's value lands


def test_waw_across_statements():
    xs = shared("xs", I32, 64)
    body = [kir.Allocate(xs), store(xs, TX, c(1)),
            store(xs, op("mod", add(TX, c(1)), c(64)), c(2))]
    k = kernel("waw2", [], body, block=(64, 1, 1))
    (h,) = race(k, {})
    assert (h.kind, h.first, h.second) == ("WAW", point(k, "S2"), point(k, "S3"))
    assert h.threads == ((1, 0, 0), (0, 0, 0))        # 0 writes xs[1], written by 1
    assert h.byte_range == (4, 8)


# -- aliasing, uninitialized, out of bounds --------------------------------------------------


def test_aliased_buffers_share_bytes_and_stale_read_is_reported():
    a = shared("a", F32, 64, offset=0)
    b = shared("b", F32, 64, offset=0)               # same bytes as a
    h16 = shared("h", F16, 128, offset=0)            # and as f16 halves
    dst = tensor("out", F32, [64], output=True)
    dst16 = tensor("out16", F16, [64], output=True)
    body = [kir.Allocate(a), kir.Allocate(b), kir.Allocate(h16),
            store(a, TX, kir.Cast(add(TX, c(1)), F32)), kir.Barrier(),
            store(dst.buffer, TX, load(b, TX)),
            store(dst16.buffer, TX, load(h16, add(mul(TX, c(2)), c(1))))]
    k = kernel("alias", [dst, dst16], body, block=(64, 1, 1))
    out = np.zeros(64, np.float32)
    out16 = np.zeros(64, np.float16)
    hazards = race(k, {"out": out, "out16": out16})
    assert [h.kind for h in hazards] == ["stale-read", "stale-read"]
    h = hazards[0]
    assert (h.first, h.second) == (point(k, "S4"), point(k, "S6"))
    assert h.buffer == "a/b"
    assert h.threads == ((0, 0, 0), (0, 0, 0))
    assert h.byte_range == (0, 4)
    assert "read through b bytes last written through a" in h.detail
    assert hazards[1].byte_range == (2, 4)           # the high half of a[0]: 2-byte grain
    expect = np.arange(1, 65, dtype=np.float32)
    np.testing.assert_array_equal(out, expect)       # the bytes really are shared
    np.testing.assert_array_equal(out16.view(np.uint16),
                                  (expect.view(np.uint32) >> 16).astype(np.uint16))


def test_uninitialized_shared_read():
    xs = shared("xs", F32, 128)
    dst = tensor("out", F32, [128], output=True)
    body = [kir.Allocate(xs), if_(lt(TX, c(64)), [store(xs, TX, c(1.0, F32))]),
            kir.Barrier(), store(dst.buffer, TX, load(xs, TX))]
    k = kernel("uninit", [dst], body)
    out = np.zeros(128, np.float32)
    (h,) = race(k, {"out": out})
    assert h.kind == "uninitialized-read"
    assert (h.first, h.second) == (point(k, "S1"), point(k, "S5"))
    assert h.threads == (None, (64, 0, 0))
    assert h.byte_range == (256, 260)
    assert "64 thread(s) read shared bytes no thread of the block wrote" in h.detail
    assert (out[:64] == 1).all() and np.isnan(out[64:]).all()    # poisoned, visible


def test_out_of_bounds_global_shared_local():
    src = tensor("in", F32, [100])
    dst = tensor("out", F32, [128], output=True)
    xs = shared("xs", F32, 100)
    r = local("r", F32, 2)
    body = [kir.Allocate(xs), kir.Allocate(r),
            store(r, c(0), load(src.buffer, TX)),                    # S3: in[100..127]
            store(xs, TX, load(r, c(0))),                            # S4: xs[100..127]
            store(r, op("mod", TX, c(3)), c(0.0, F32)),              # S5: r[2]
            store(dst.buffer, TX, c(1.0, F32))]
    k = kernel("oob", [src, dst], body)
    out = np.zeros(128, np.float32)
    hazards = race(k, {"in": np.ones(100, np.float32), "out": out})
    assert [(h.kind, h.buffer, h.first) for h in hazards] == [
        ("out-of-bounds", "in", point(k, "S3")), ("out-of-bounds", "xs", point(k, "S4")),
        ("out-of-bounds", "r", point(k, "S5"))]
    g, s, loc = hazards
    assert g.threads == ((100, 0, 0), (100, 0, 0)) and g.byte_range == (400, 404)
    assert "index 100 is not an element of in" in g.detail
    assert "28 thread(s) out of bounds" in g.detail
    assert s.byte_range == (400, 404) and "index 100 is outside xs[0, 100)" in s.detail
    assert loc.threads[0] == (2, 0, 0) and "index 2 is outside r[0, 2)" in loc.detail
    assert (out == 1).all()


def test_out_of_bounds_in_a_strided_gap():
    """Element offsets between the rows of a sliced array belong to no element."""
    src = tensor("in", F32, [2, 3])
    dst = tensor("out", F32, [8], output=True)
    k = kernel("gap", [src, dst], [store(dst.buffer, TX, load(src.buffer, TX))],
               block=(8, 1, 1))
    base = np.arange(12, dtype=np.float32).reshape(2, 6)
    out = np.zeros(8, np.float32)
    (h,) = race(k, {"in": base[:, :3], "out": out})   # strides (6, 1): offsets 3..5 gaps
    assert h.kind == "out-of-bounds" and "index 3 is not an element of in" in h.detail
    np.testing.assert_array_equal(out, [0, 1, 2, 0, 0, 0, 6, 7])


# -- barrier and shuffle divergence --------------------------------------------------------


def test_barrier_divergence():
    xs = shared("xs", F32, 128)
    body = [kir.Allocate(xs), store(xs, TX, c(1.0, F32)),
            if_(lt(TX, c(16)), [kir.Barrier(sync_id="B1")])]
    k = kernel("bdiv", [], body)
    (h,) = race(k, {})
    assert h.kind == "barrier-divergence"
    assert (h.first, h.second) == ("S3: if (threadIdx.x < 16)", "S4: __syncthreads() [B1]")
    assert h.threads == ((0, 0, 0), (16, 0, 0))
    assert "16 of 128 threads reach the barrier" in h.detail


def butterfly_kernel(nthreads, guard=None):
    """out[t] = sum of in over t's warp: acc = in[t]; acc += shfl_xor(acc, m), m=16..1."""
    src, dst = tensor("in", F32, [nthreads]), tensor("out", F32, [nthreads], output=True)
    acc = local("acc", F32, 1)
    steps = [store(acc, c(0), add(load(acc, c(0)), kir.ShuffleXor(load(acc, c(0)), m)))
             for m in (16, 8, 4, 2, 1)]
    if guard is not None:
        steps = [if_(guard, steps)]
    body = [kir.Allocate(acc), store(acc, c(0), load(src.buffer, TX)), *steps,
            store(dst.buffer, TX, load(acc, c(0)))]
    return kernel("butterfly", [src, dst], body, block=(nthreads, 1, 1))


def test_shuffle_xor_butterfly_reduction_is_exact(rng):
    x = rng.integers(-1000, 1000, size=96).astype(np.float32)
    out = np.zeros(96, np.float32)
    run_kernel(butterfly_kernel(96), {"in": x, "out": out})
    np.testing.assert_array_equal(out, np.repeat(x.reshape(3, 32).sum(1), 32))


def test_shuffle_xor_with_2d_block_uses_linear_lanes():
    src, dst = tensor("in", I32, [64]), tensor("out", I32, [64], output=True)
    lin = add(TX, mul(TY, c(8)))
    k = kernel("shfl2d", [src, dst],
               [store(dst.buffer, lin, kir.ShuffleXor(load(src.buffer, lin), 9))],
               block=(8, 8, 1))
    x = np.arange(64, dtype=np.int32) * 10
    out = np.zeros(64, np.int32)
    run_kernel(k, {"in": x, "out": out})
    np.testing.assert_array_equal(out, x[np.arange(64) ^ 9])


def test_shuffle_divergence():
    k = butterfly_kernel(64, guard=lt(TX, c(48)))     # warp 1 half active
    hazards = race(k, {"in": np.ones(64, np.float32), "out": np.zeros(64, np.float32)})
    assert {h.kind for h in hazards} == {"shuffle-divergence"}
    h = hazards[0]
    assert h.first == point(k, "S3") and h.second == point(k, "S4")
    assert h.threads == ((32, 0, 0), (48, 0, 0))
    assert "warp 1 runs shfl_xor(.., 16) with 16 of 32 lanes" in h.detail
    # a block of 16 threads: lanes 16..31 of its warp do not exist
    hazards = race(butterfly_kernel(16), {"in": np.ones(16, np.float32),
                                          "out": np.zeros(16, np.float32)})
    assert "lane 16 does not exist (the block has 16 threads)" in hazards[0].detail


# -- arithmetic semantics ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [I32, I64])
def test_c_integer_division_and_modulo(dtype):
    a = tensor("a", dtype, ["N"])
    b = tensor("b", dtype, ["N"])
    outs = [tensor(n, dtype, ["N"], output=True) for n in ("q", "r", "cd")]
    la, lb = load(a.buffer, TX), load(b.buffer, TX)
    body = [if_(lt(TX, var("N")), [
        store(outs[0].buffer, TX, op("div", la, lb, dtype)),
        store(outs[1].buffer, TX, op("mod", la, lb, dtype)),
        store(outs[2].buffer, TX, op("ceildiv", la, lb, dtype))])]
    k = kernel("cdiv", [a, b, *outs], body, block=(64, 1, 1), scalars=["N"])
    pairs = [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (-6, 3), (0, 5), (-1, 7), (1, -7),
             (2 ** 30 + 1, 3), (-2 ** 31 + 1, 7), (13, 4)]
    av = np.array([p[0] for p in pairs], dtype.numpy)
    bv = np.array([p[1] for p in pairs], dtype.numpy)
    q, r, cd = (np.zeros(len(pairs), dtype.numpy) for _ in range(3))
    run_kernel(k, {"a": av, "b": bv, "q": q, "r": r, "cd": cd, "N": len(pairs)})

    def trunc_div(x, y):
        return abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)

    assert q.tolist() == [trunc_div(x, y) for x, y in pairs]
    assert r.tolist() == [x - trunc_div(x, y) * y for x, y in pairs]
    assert cd.tolist() == [trunc_div(x + y - 1, y) for x, y in pairs]
    assert q.tolist()[:4] == [3, -3, -3, 3] and r.tolist()[:4] == [1, -1, 1, -1]


@pytest.mark.parametrize("dtype", [I32, I64])
def test_integer_division_by_zero_and_min_by_minus_one_are_defined(dtype):
    # fuserir.numerics: a / 0 = 0, a % 0 = a, MIN / -1 = MIN, MIN % -1 = 0 (C: undefined;
    # the interpreter used to raise on a zero divisor)
    low = int(np.iinfo(dtype.numpy).min)
    a = tensor("a", dtype, [6])
    b = tensor("b", dtype, [6])
    q, r = tensor("q", dtype, [6], output=True), tensor("r", dtype, [6], output=True)
    la, lb = load(a.buffer, TX), load(b.buffer, TX)
    k = kernel("div0", [a, b, q, r], [store(q.buffer, TX, op("div", la, lb, dtype)),
                                      store(r.buffer, TX, op("mod", la, lb, dtype))],
               block=(6, 1, 1))
    av = np.array([7, -7, 0, low, low, low + 1], dtype.numpy)
    bv = np.array([0, 0, 0, -1, 0, -1], dtype.numpy)
    qv, rv = np.ones(6, dtype.numpy), np.ones(6, dtype.numpy)
    run_kernel(k, {"a": av, "b": bv, "q": qv, "r": rv})
    assert qv.tolist() == [0, 0, 0, low, 0, -(low + 1)]
    assert rv.tolist() == [7, -7, 0, 0, low, 0]


def edge_floats():
    specials = [0.0, -0.0, 1.0, 65504.0, 65520.0, 65519.99, 6e-8, 3e-8, 2.0 ** -24,
                2.0 ** -25, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -8,
                1 + 3 * 2.0 ** -8, 3.3e38, 1e-40, np.inf, -np.inf, np.nan]
    rng = np.random.default_rng(0)
    rand = rng.standard_normal(500) * 10.0 ** rng.integers(-8, 8, 500)
    bits = rng.integers(0, 2 ** 32, 500, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([np.array(specials, np.float32), rand.astype(np.float32), bits])


@pytest.mark.parametrize("target", [F16, BF16])
def test_narrowing_casts_are_bit_exact(target):
    x = edge_floats()
    n = len(x)
    src, dst = tensor("x", F32, [n]), tensor("y", target, [n], output=True)
    i = add(mul(BX, c(128)), TX)
    body = [if_(lt(i, c(n)), [store(dst.buffer, i, kir.Cast(load(src.buffer, i), target))])]
    k = kernel("narrow", [src, dst], body, grid=((n + 127) // 128, 1, 1))
    y = np.zeros(n, target.numpy)
    run_kernel(k, {"x": x, "y": y})
    with np.errstate(all="ignore"):
        expect = x.astype(target.numpy)
    nan = np.isnan(expect)
    assert np.isnan(y[nan]).all()
    np.testing.assert_array_equal(y[~nan].view(np.uint16), expect[~nan].view(np.uint16))


def test_conversions_follow_kir_cast():
    # f64 -> bf16 rounds once (ml_dtypes' own cast rounds twice through f32)
    assert float(convert(np.float64(1 + 2 ** -8 + 2 ** -40), BF16)) == 1 + 2 ** -7
    assert float(convert(np.float64(1 + 2 ** -8), BF16)) == 1.0              # tie to even
    assert float(convert(np.float64(-(1 + 3 * 2 ** -8 - 2 ** -40)), BF16)) == -(1 + 2 ** -7)
    assert float(convert(np.float64(1 + 2 ** -11 + 2 ** -40), F16)) == 1 + 2 ** -10
    # float -> int truncates toward zero, saturating, NaN -> 0 (cvt.rzi)
    f = np.array([2.7, -2.7, 0.5, -0.5, 3e9, -3e9, np.nan, np.inf], np.float32)
    assert convert(f, I32).tolist() == [2, -2, 0, 0, 2 ** 31 - 1, -2 ** 31, 0, 2 ** 31 - 1]
    assert convert(np.float64(1e19), I64) == 2 ** 63 - 1
    # to bool is != 0; bool -> number is 0/1; int -> bf16 rounds to nearest even once
    assert convert(np.array([0.0, -0.0, 0.1, np.nan], np.float32), BOOL).tolist() == \
        [False, False, True, True]
    assert convert(np.array([True, False]), F16).tolist() == [1.0, 0.0]
    assert float(convert(np.int32(2 ** 24 + 2 ** 16 + 1), BF16)) == 2 ** 24 + 2 ** 17
    assert convert(np.int64(2 ** 32 + 5), I32) == 5                       # wraps


def test_f64_to_bf16_rounds_once_near_ties():
    """Against exact rational rounding, on values a hair off bf16 ties."""
    from fractions import Fraction
    rng = np.random.default_rng(2)
    q = rng.integers(128, 256, 300)                        # 8 significant bits
    e = rng.integers(-100, 100, 300)
    ties = (q * 2 + 1).astype(np.float64) * 2.0 ** (e - 9)  # midpoints of bf16 numbers
    x = np.concatenate([ties, ties * (1 + 2.0 ** -40), ties * (1 - 2.0 ** -40), -ties])
    got = convert(x, BF16).astype(np.float64)

    def exact(v):
        m, k = np.frexp(v)
        scaled = Fraction(float(m)) * 256              # [128, 256)
        n = round(scaled)                              # Python rounds half to even
        return float(n) * 2.0 ** (int(k) - 8)

    np.testing.assert_array_equal(got, [exact(v) for v in x])


def test_min_max_relu_match_the_cuda_preamble():
    """min/max propagate NaN ((a < b || a != a) ? a : b); relu is x < 0 ? 0 : x."""
    a, b = tensor("a", F32, [4]), tensor("b", F32, [4])
    outs = [tensor(n, F32, [4], output=True) for n in ("lo", "hi", "r")]
    la, lb = load(a.buffer, TX), load(b.buffer, TX)
    body = [store(outs[0].buffer, TX, op("min", la, lb)),
            store(outs[1].buffer, TX, op("max", la, lb)),
            store(outs[2].buffer, TX, kir.UnOp("relu", la, F32))]
    k = kernel("minmax", [a, b, *outs], body, block=(4, 1, 1))
    av = np.array([np.nan, 1.0, -0.0, -2.0], np.float32)
    bv = np.array([1.0, np.nan, 0.0, 3.0], np.float32)
    lo, hi, r = (np.zeros(4, np.float32) for _ in range(3))
    run_kernel(k, {"a": av, "b": bv, "lo": lo, "hi": hi, "r": r})
    assert np.isnan(lo[:2]).all() and np.isnan(hi[:2]).all()
    assert lo[2] == 0 and not np.signbit(lo[2]) and lo[3] == -2 and hi[3] == 3
    assert np.isnan(r[0]) and r[1] == 1 and np.signbit(r[2]) and r[3] == 0


def test_f16_arithmetic_rounds_each_operation():
    """BinOps in f16 round every result to f16 (like numpy's f16 arithmetic)."""
    a, b = tensor("a", F16, [64]), tensor("b", F16, [64])
    dst = tensor("y", F16, [64], output=True)
    la, lb = load(a.buffer, TX), load(b.buffer, TX)
    value = op("div", op("mul", add(la, lb), lb), sub(la, c(0.5, F16)))
    k = kernel("f16ops", [a, b, dst], [store(dst.buffer, TX, value)], block=(64, 1, 1))
    rng = np.random.default_rng(1)
    av = rng.standard_normal(64).astype(np.float16)
    bv = rng.standard_normal(64).astype(np.float16)
    y = np.zeros(64, np.float16)
    run_kernel(k, {"a": av, "b": bv, "y": y})
    np.testing.assert_array_equal(y, ((av + bv) * bv) / (av - np.float16(0.5)))


def test_transcendental_unary_ops():
    ops = ["exp", "tanh", "sigmoid", "gelu", "gelu_tanh", "sqrt", "relu", "abs", "neg"]
    src = tensor("x", F32, [64])
    outs = [tensor(o, F32, [64], output=True) for o in ops]
    body = [store(t.buffer, TX, kir.UnOp(o, load(src.buffer, TX), F32))
            for o, t in zip(ops, outs)]
    k = kernel("unary", [src, *outs], body, block=(64, 1, 1))
    x = np.linspace(-4, 4, 64).astype(np.float32)
    args = {"x": x, **{o: np.zeros(64, np.float32) for o in ops}}
    run_kernel(k, args)
    x64 = x.astype(np.float64)
    from math import erf, sqrt
    ref = {"exp": np.exp(x64), "tanh": np.tanh(x64), "sigmoid": 1 / (1 + np.exp(-x64)),
           "gelu": np.array([0.5 * v * (1 + erf(v / sqrt(2))) for v in x64]),
           "gelu_tanh": 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi)
                                                  * (x64 + 0.044715 * x64 ** 3))),
           "sqrt": np.sqrt(np.where(x64 < 0, np.nan, x64)), "relu": np.maximum(x64, 0),
           "abs": np.abs(x64), "neg": -x64}
    for o in ops:
        np.testing.assert_allclose(args[o], ref[o].astype(np.float32), rtol=1e-6,
                                   atol=1e-7, equal_nan=True, err_msg=o)


# -- errors --------------------------------------------------------------------------------


def test_thread_dependent_loop_extent_is_an_error():
    k = kernel("badloop", [], [loop("i", TX, [kir.Comment("nothing")])], block=(4, 1, 1))
    with pytest.raises(InterpError, match=r"loop S1: for i in 0..threadIdx.x has a "
                                          r"thread-dependent extent: thread \(0, 0, 0\) "
                                          r"runs 0 iterations, thread \(1, 0, 0\) runs 1"):
        run_kernel(k, {})


def test_argument_errors():
    k = staging_kernel()
    x, out = np.zeros(256, np.float32), np.zeros(256, np.float32)
    with pytest.raises(InterpError, match="missing tensor argument out"):
        run_kernel(k, {"in": x})
    with pytest.raises(InterpError, match="argument in: dtype float64 but the kernel "
                                          "expects f32"):
        run_kernel(k, {"in": x.astype(np.float64), "out": out})
    with pytest.raises(InterpError, match="argument out: axis 0 has extent 100 but N = 256"):
        run_kernel(k, {"in": x, "out": out[:100]})
    with pytest.raises(InterpError, match="missing scalar argument M"):
        run_kernel(bias_relu_kernel(), {"x": np.zeros((2, 3), np.float32)})


# -- hazard messages -----------------------------------------------------------------------


def test_hazard_message_formats():
    k = staging_kernel(False)
    with pytest.raises(RaceError) as info:
        run_kernel(k, {"in": np.zeros(256, np.float32), "out": np.zeros(256, np.float32)})
    text = str(info.value)
    assert text.startswith("1 shared-memory hazard(s) in kernel staging:\n  1. RAW on xs "
                           "bytes [508, 512)\n")
    assert str(info.value.hazards[0]) == (
        "RAW on xs bytes [508, 512)\n"
        "    first:  S2: xs[threadIdx.x] = in[(((blockIdx.x * 128) + threadIdx.x) * "
        "in_stride0)]\n"
        "    second: S3: out[(((blockIdx.x * 128) + threadIdx.x) * out_stride0)] = "
        "xs[(127 - threadIdx.x)]\n"
        "    threads (127, 0, 0) and (0, 0, 0); iterations {} and {}; block (0, 0, 0)\n"
        "    128 thread(s) read bytes another thread wrote since the last barrier; "
        "bytes [0, 512) involved")


@pytest.mark.parametrize("kind, build, first_line", [
    ("WAR", lambda: rotate_loop_kernel(False),
     "WAR on xs bytes [0, 4)"),
    ("barrier-divergence", None, "barrier-divergence on __syncthreads"),
    ("shuffle-divergence", None, "shuffle-divergence on shfl_xor"),
    ("uninitialized-read", None, "uninitialized-read on xs bytes [0, 4)"),
    ("stale-read", None, "stale-read on a/b bytes [0, 4)"),
    ("out-of-bounds", None, "out-of-bounds on out bytes [128, 132)"),
    ("WAW", None, "WAW on xs bytes [0, 4)"),
])
def test_every_hazard_kind_message(kind, build, first_line):
    xs = shared("xs", F32, 32)
    a, b = shared("a", F32, 32), shared("b", F32, 32)
    out = tensor("out", F32, [32], output=True)
    bodies = {
        "barrier-divergence": [if_(lt(TX, c(3)), [kir.Barrier()])],
        "shuffle-divergence": [if_(lt(TX, c(3)), [store(out.buffer, TX, kir.ShuffleXor(
            c(1.0, F32), 1))])],
        "uninitialized-read": [kir.Allocate(xs), store(out.buffer, TX, load(xs, TX))],
        "stale-read": [kir.Allocate(a), kir.Allocate(b), store(a, TX, c(1.0, F32)),
                       store(out.buffer, TX, load(b, TX))],
        "out-of-bounds": [store(out.buffer, add(TX, c(32)), c(1.0, F32))],
        "WAW": [kir.Allocate(xs), store(xs, c(0), c(1.0, F32))],
    }
    if build is not None:
        k, args = build(), {"in": np.zeros(512, np.float32), "out": np.zeros(512, np.float32)}
    else:
        k, args = kernel(kind, [out], bodies[kind], block=(32, 1, 1)), \
            {"out": np.zeros(32, np.float32)}
    with pytest.raises(RaceError) as info:
        run_kernel(k, args)
    h = info.value.hazards[0]
    assert h.kind == kind
    lines = str(h).split("\n")
    assert lines[0] == first_line
    assert lines[1].startswith("    first:  S") and lines[2].startswith("    second: S")
    assert "block (0, 0, 0)" in lines[3]
    assert h.detail and lines[-1] == "    " + h.detail


# -- the scheduler ------------------------------------------------------------------------


def test_scheduler_resumes_waiting_blocks_and_reports_deadlock():
    log, flags = [], {}

    def block(name, wait_for=None, sets=None):
        log.append(f"{name} start")
        if wait_for is not None:
            yield Wait(name, lambda: flags.get(wait_for, False))
            log.append(f"{name} resumed")
        if sets is not None:
            flags[sets] = True
        log.append(f"{name} end")

    stuck = schedule([("b0", block("b0", wait_for="one")), ("b1", block("b1", sets="one")),
                      ("b2", block("b2"))])
    assert stuck == []
    assert log == ["b0 start", "b1 start", "b1 end", "b0 resumed", "b0 end",
                   "b2 start", "b2 end"]
    stuck = schedule([("b0", block("b0", wait_for="never")), ("b1", block("b1"))])
    assert [b for b, _ in stuck] == ["b0"]


@dataclasses.dataclass(eq=False)
class SpinWait(kir.Comment):
    """A stand-in for a future semaphore wait: it waits for a flag no block sets."""


def test_a_wait_no_block_satisfies_is_a_deadlock(monkeypatch):
    def spin(block, s, act):
        yield Wait(s, lambda: False, what="sem")
    monkeypatch.setitem(interp._COMPOUND, SpinWait, spin)
    k = kernel("spin", [], [SpinWait("wait for the semaphore")], grid=(2, 1, 1),
               block=(32, 1, 1))
    (h,) = race(k, {})
    assert h.kind == "deadlock" and h.buffer == "sem"
    assert h.first == h.second == "S1: // wait for the semaphore"
    assert h.block == (0, 0, 0)
    assert "blocks [(0, 0, 0), (1, 0, 0)] wait forever" in h.detail
    assert str(h).startswith("deadlock on sem\n    first:  S1:")


# -- speed ---------------------------------------------------------------------------------


def test_interpreting_eight_blocks_is_fast():
    """8 blocks x 128 threads, a staged tile reduction: ~2600 statement executions."""
    src, dst = tensor("in", F32, ["N"]), tensor("out", F32, ["N"], output=True)
    xs = shared("xs", F32, 128)
    acc = local("acc", F32, 1)
    i = var("i")
    base = add(mul(BX, c(128 * 32)), mul(i, c(128)))
    body = [kir.Allocate(xs), kir.Allocate(acc), store(acc, c(0), c(0.0, F32)),
            loop("i", 32, [
                store(xs, TX, load(src.buffer, add(base, TX))), kir.Barrier(),
                store(acc, c(0), add(load(acc, c(0)), load(xs, sub(c(127), TX)))),
                if_(lt(TX, c(64)), [store(acc, c(0), add(load(acc, c(0)),
                                                         load(xs, add(TX, c(64)))))]),
                kir.Barrier()]),
            store(dst.buffer, add(mul(BX, c(128)), TX), load(acc, c(0)))]
    k = kernel("speed", [src, dst], body, grid=(8, 1, 1))
    x = np.arange(8 * 128 * 32, dtype=np.float32) % 7
    out = np.zeros(8 * 128 * 32, np.float32)
    t0 = time.perf_counter()
    run_kernel(k, {"in": x, "out": out})
    elapsed = time.perf_counter() - t0
    tiles = x.reshape(8, 32, 128)
    expect = tiles[:, :, ::-1].sum(1) + np.concatenate(
        [tiles[:, :, 64:].sum(1), np.zeros((8, 64), np.float32)], axis=1)
    np.testing.assert_array_equal(out[:1024].reshape(8, 128), expect)
    assert elapsed < 1.0, f"{elapsed:.2f} s"
