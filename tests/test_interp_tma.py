"""Interpreter semantics of Hopper's TMA loads and stores through tensor maps, mbarriers,
bulk groups and named barriers (codegen.interp.tma, codegen.interp.mbarriers).

Kernels are hand-built kir; the expected shared-memory images and outputs come from an
independent model written here (kir.hopper's header: box order with dimension 0
fastest, CUTLASS's Swizzle<b, 4, 3> as "16-byte chunk c of 128-byte line L is stored at
chunk c ^ (L mod 2^b)"), not from the interpreter's helpers or fuserir.instructions."""

import numpy as np
import pytest

from codegen.errors import RaceError
from codegen.interp import InterpError, run_kernel
from fuserir.dtypes import DataType
from lowering import kir

I32, I64, F16, F32 = DataType.i32, DataType.i64, DataType.f16, DataType.f32
SHARED, GLOBAL = kir.Memory.shared, kir.Memory.global_
TX = kir.Special(kir.SpecialKind.threadIdx, "x", I32)
T = 128
SM = 1024                       # the box buffer's pool byte offset (the mbarrier is at 0)


def c(v, dtype=I32):
    return kir.Const(v, dtype)


def op(name, a, b):
    b = b if isinstance(b, kir.ScalarExpr) else c(b)
    return kir.BinOp(name, a, b, DataType.bool if name in kir.COMPARISONS else a.dtype)


def v(name):
    return kir.Var(name, I32)


def tensor(name, dtype, rank, output=False):
    """A tensor parameter of `rank` axes (sizes bound from the array, strides x_s0..)."""
    return kir.TensorParam(kir.Buffer(name, dtype, GLOBAL),
                           [v(f"{name}_n{d}") for d in range(rank)],
                           [v(f"{name}_s{d}") for d in range(rank)], is_output=output)


def tmap(t, box, swizzle="none"):
    """A map over tensor parameter t, dimensions innermost first (numpy axes reversed)."""
    rank = len(t.sizes)
    return kir.TensorMap(f"map_{t.buffer.name}", t, list(reversed(t.sizes)),
                         [t.strides[rank - 1 - d] for d in range(1, rank)], tuple(box),
                         swizzle)


def kernel(name, tensors, maps, body, threads=T):
    k = kir.Kernel(name, list(tensors), [], list(body),
                   kir.LaunchConfig((c(1), c(1), c(1)), (c(threads), c(1), c(1))),
                   tensor_maps=list(maps))
    kir.relabel(k.body)
    return k


def one(*body):
    return kir.IfThenElse(op("eq", TX, 0), list(body))


def copy_out(out, sm, n, threads=T):
    """out[i] = sm[i] for i < n, thread t taking i = k * threads + t."""
    i = op("add", op("mul", v("k"), threads), TX)
    return kir.ForLoop(v("k"), c(n // threads),
                       [kir.Store(out.buffer, i, kir.Load(sm, i))])


def run(k, args):
    """The hazards of a run (outputs written either way)."""
    try:
        run_kernel(k, args)
    except RaceError as e:
        return e.hazards
    return []


def kinds(hazards):
    return sorted(h.kind for h in hazards)


# -- the independent model ------------------------------------------------------------

def swizzled(offset, mode):
    b = {"none": 0, "32B": 1, "64B": 2, "128B": 3}[mode]
    line, chunk = offset // 128, (offset % 128) // 16
    return line * 128 + (chunk ^ (line % (1 << b))) * 16 + offset % 16


def box_elements(box):
    """Box coordinates in box order (dimension 0 fastest)."""
    if len(box) == 2:
        return [(b0, b1) for b1 in range(box[1]) for b0 in range(box[0])]
    return [(b0, b1, b2) for b2 in range(box[2]) for b1 in range(box[1])
            for b0 in range(box[0])]


def model_load(x, coords, box, mode):
    """The shared bytes (from SM) of the box of x (numpy axes outermost first) at
    coords (innermost first), zeros outside the tensor."""
    item = x.itemsize
    image = np.zeros(int(np.prod(box)) * item, np.uint8)
    for e, b in enumerate(box_elements(box)):
        at = tuple(cd + bd for cd, bd in zip(coords, b))
        inside = all(0 <= a < n for a, n in zip(at, reversed(x.shape)))
        raw = np.array([x[tuple(reversed(at))] if inside else 0], x.dtype).view(np.uint8)
        for j in range(item):
            image[swizzled(SM + e * item + j, mode) - SM] = raw[j]
    return image


# -- the load protocol ----------------------------------------------------------------

BOXES = {"none": (8, 128), "32B": (16, 64), "64B": (32, 32), "128B": (64, 16)}   # f16


def load_kernel(box, swizzle, coords, rank=2, dtype=F16, threads=T, wait=(0,),
                arrive=True, extra_tx=0, read_early=False):
    x = tensor("x", dtype, rank)
    out = tensor("out", dtype, 1, output=True)
    early = tensor("early", dtype, 1, output=True)
    m = tmap(x, box, swizzle)
    n = int(np.prod(box))
    bar = kir.Buffer("bar", I64, SHARED, size=c(1), byte_offset=c(0))
    sm = kir.Buffer("sm", dtype, SHARED, size=c(n), byte_offset=c(SM))
    coord = dict(zip(("c0", "c1", "c2"), (c(v) for v in coords)))
    issue = [kir.TmaLoad(dst=sm, dst_index=c(0), map=m, bar=bar, bar_index=c(0), **coord)]
    if arrive:
        issue.insert(0, kir.MbarrierArrive(bar=bar, index=c(0),
                                           tx_bytes=c(m.box_bytes + extra_tx)))
    body = [kir.Allocate(bar), kir.Allocate(sm),
            one(kir.MbarrierInit(bar=bar, index=c(0), count=c(1)), kir.FenceMbarrierInit()),
            kir.Barrier(), one(*issue)]
    if read_early:
        body.append(copy_out(early, sm, n, threads))
    body += [kir.MbarrierWait(bar=bar, index=c(0), parity=c(p)) for p in wait]
    body.append(copy_out(out, sm, n, threads))
    return kernel(f"tma_load_{swizzle}", [x, out, early], [m], body, threads), n


def f16_tensor(rng, shape):
    return rng.permutation(np.arange(0x3C00, 0x3C00 + np.prod(shape))).astype(
        np.uint16).view(np.float16).reshape(shape)


@pytest.mark.parametrize("coords", [(0, 0), (56, -3), (-8, 30)], ids=["inside", "edge",
                                                                     "negative"])
@pytest.mark.parametrize("swizzle", sorted(BOXES))
def test_2d_box_lands_swizzled_with_zero_fill(rng, swizzle, coords):
    box = BOXES[swizzle]
    x = f16_tensor(rng, (40, 104))           # rows of 208 bytes: a multiple of 16
    k, n = load_kernel(box, swizzle, coords)
    out, early = np.zeros(n, np.float16), np.zeros(n, np.float16)
    assert run(k, {"x": x, "out": out, "early": early}) == []
    np.testing.assert_array_equal(out.view(np.uint8), model_load(x, coords, box, swizzle))


def test_3d_box(rng):
    x = rng.integers(-100, 100, (3, 5, 8)).astype(np.float32)
    box, coords = (8, 4, 2), (0, 2, 2)          # over the edge of dimensions 1 and 2
    k, n = load_kernel(box, "none", coords, rank=3, dtype=F32, threads=64)
    out, early = np.zeros(n, np.float32), np.zeros(n, np.float32)
    assert run(k, {"x": x, "out": out, "early": early}) == []
    np.testing.assert_array_equal(out.view(np.uint8), model_load(x, coords, box, "none"))


def load_args(rng, n):
    return {"x": f16_tensor(rng, (40, 104)), "out": np.zeros(n, np.float16),
            "early": np.zeros(n, np.float16)}


def test_fresh_barrier_passes_parity_1_at_once():
    bar = kir.Buffer("bar", I64, SHARED, size=c(1), byte_offset=c(0))
    body = [kir.Allocate(bar), one(kir.MbarrierInit(bar=bar, index=c(0), count=c(1))),
            kir.Barrier(), kir.MbarrierWait(bar=bar, index=c(0), parity=c(1))]
    assert run(kernel("fresh", [], [], body), {}) == []


def test_parity_1_on_a_fresh_barrier_does_not_wait_for_the_load(rng):
    box = BOXES["128B"]
    k, n = load_kernel(box, "128B", (0, 0), wait=(1,))
    args = load_args(rng, n)
    hazards = run(k, args)
    assert "async-pending" in kinds(hazards)
    assert np.all(args["out"].view(np.uint16) == 0xFFFF)     # the old (fresh) bytes


@pytest.mark.parametrize("case", ["wrong_parity", "missing_arrive", "tx_too_large"])
def test_unsatisfiable_waits_are_deadlocks_naming_the_barrier(rng, case):
    box = BOXES["64B"]
    opts = {"wrong_parity": dict(wait=(0, 1)), "missing_arrive": dict(arrive=False),
            "tx_too_large": dict(extra_tx=16)}[case]
    k, n = load_kernel(box, "64B", (0, 0), **opts)
    args = load_args(rng, n)
    hazards = run(k, args)
    (dead,) = [h for h in hazards if h.kind == "deadlock"]
    assert dead.buffer == "bar" and "bar[0]" in dead.detail
    want = {"wrong_parity": "for parity 1: phase 1 (parity 1) is current with 1 of 1 "
                            "arrivals pending and tx-count 0 bytes",
            "missing_arrive": "for parity 0: phase 0 (parity 0) is current with 1 of 1 "
                              "arrivals pending and tx-count -2048 bytes",
            "tx_too_large": "for parity 0: phase 0 (parity 0) is current with 0 of 1 "
                            "arrivals pending and tx-count 16 bytes"}[case]
    assert want in dead.detail, dead.detail
    # the load landed (execution went on past the wait)
    np.testing.assert_array_equal(args["out"].view(np.uint8),
                                  model_load(args["x"], (0, 0), box, "64B"))


def test_a_read_before_the_wait_sees_the_old_bytes_and_is_reported(rng):
    box = BOXES["32B"]
    k, n = load_kernel(box, "32B", (0, 0), read_early=True)
    args = load_args(rng, n)
    hazards = run(k, args)
    pend = [h for h in hazards if h.kind == "async-pending"]
    assert len(pend) == 1 and "tma.load" in pend[0].first
    assert "a TMA load has not landed yet" in pend[0].detail
    assert np.all(args["early"].view(np.uint16) == 0xFFFF)
    np.testing.assert_array_equal(args["out"].view(np.uint8),
                                  model_load(args["x"], (0, 0), box, "32B"))


def test_a_load_never_waited_for_is_reported_and_lands_at_the_end(rng):
    box = BOXES["none"]
    k, n = load_kernel(box, "none", (0, 0), wait=())
    hazards = run(k, load_args(rng, n))
    assert any(h.kind == "async-pending" and h.second == "end of the block"
               and "TMA load never waited for" in h.detail for h in hazards)


def test_arrivals_beyond_the_count_and_on_uninitialised_barriers():
    bar = kir.Buffer("bar", I64, SHARED, size=c(2), byte_offset=c(0))
    first2 = kir.IfThenElse(op("lt", TX, 2), [
        kir.MbarrierArrive(bar=bar, index=c(0), tx_bytes=c(16))])
    body = [kir.Allocate(bar), one(kir.MbarrierInit(bar=bar, index=c(0), count=c(1))),
            kir.Barrier(), first2, one(kir.MbarrierArrive(bar=bar, index=c(1)))]
    hazards = run(kernel("arrivals", [], [], body), {})
    details = sorted(h.detail for h in hazards if h.kind == "mbarrier")
    assert details == [
        "thread (0, 0, 0) arrives on bar[1], which no mbarrier.init has initialised",
        "thread (1, 0, 0) arrives on bar[0] in phase 0 when no arrival is pending (more "
        "arrivals than its count 1; the phase waits for 32 transaction bytes)"]


# -- stores ---------------------------------------------------------------------------

def store_kernel(box, swizzle, coords, overwrite=False):
    src = tensor("src", F16, 1)
    y = tensor("y", F16, 2, output=True)
    m = tmap(y, box, swizzle)
    n = int(np.prod(box))
    sm = kir.Buffer("sm", F16, SHARED, size=c(n), byte_offset=c(SM))
    i = op("add", op("mul", v("k"), T), TX)
    fill = kir.ForLoop(v("k"), c(n // T), [kir.Store(sm, i, kir.Load(src.buffer, i))])
    body = [kir.Allocate(sm), fill, kir.FenceProxyAsync(), kir.Barrier(),
            one(kir.TmaStore(src=sm, src_index=c(0), map=m, c0=c(coords[0]),
                             c1=c(coords[1])), kir.BulkCommit())]
    if overwrite:
        body.append(kir.ForLoop(v("k"), c(n // T), [kir.Store(sm, i, c(7.0, F16))]))
    body.append(one(kir.BulkWait(n=0, read=True)))
    return kernel(f"tma_store_{swizzle}", [src, y], [m], body), n


def model_store(y, image, coords, box, mode):
    """y after storing the box whose shared bytes (from SM) are `image`."""
    y = y.copy()
    item = y.itemsize
    for e, b in enumerate(box_elements(box)):
        at = tuple(cd + bd for cd, bd in zip(coords, b))
        if all(0 <= a < n for a, n in zip(at, reversed(y.shape))):
            p = swizzled(SM + e * item, mode) - SM
            y[tuple(reversed(at))] = image[p:p + item].view(y.dtype)[0]
    return y


@pytest.mark.parametrize("swizzle", sorted(BOXES))
def test_store_writes_the_swizzled_box_inside_the_tensor_only(rng, swizzle):
    box, coords = BOXES[swizzle], (88, -2)
    k, n = store_kernel(box, swizzle, coords)
    src = f16_tensor(rng, (n,))
    y = np.full((40, 104), -3.0, np.float16)
    want = model_store(y, src.view(np.uint8), coords, box, swizzle)
    assert run(k, {"src": src, "y": y}) == []
    np.testing.assert_array_equal(y, want)


def test_store_source_overwritten_before_wait_read_changes_the_output(rng):
    box = BOXES["128B"]
    k, n = store_kernel(box, "128B", (0, 0), overwrite=True)
    src = f16_tensor(rng, (n,))
    y = np.zeros((40, 104), np.float16)
    run(k, {"src": src, "y": y})
    assert np.all(y[:16, :64] == 7.0) and np.all(y[16:] == 0)


def test_a_store_never_waited_for_is_reported_and_written_at_the_end(rng):
    box = BOXES["none"]
    k, n = store_kernel(box, "none", (0, 0))
    k.body = [s for s in k.body if not (isinstance(s, kir.IfThenElse)
                                        and isinstance(s.then_body[0], kir.BulkWait))]
    src = f16_tensor(rng, (n,))
    y = np.zeros((40, 104), np.float16)
    hazards = run(k, {"src": src, "y": y})
    assert any(h.kind == "async-pending" and "TMA store never waited for" in h.detail
               for h in hazards)
    np.testing.assert_array_equal(y, model_store(np.zeros_like(y), src.view(np.uint8),
                                                 (0, 0), box, "none"))


# -- named barriers -------------------------------------------------------------------

def exchange(sync, threads=T, guard=None):
    """Each thread writes sm[t], `sync`, then reads its neighbour's sm[t ^ 1]."""
    sm = kir.Buffer("sm", F32, SHARED, size=c(threads), byte_offset=c(0))
    out = tensor("out", F32, 1, output=True)
    body = [kir.Store(sm, TX, c(1.0, F32))] + sync + [
        kir.Store(out.buffer, TX, kir.Load(sm, op("xor", TX, 1)))]
    if guard is not None:
        body = [kir.IfThenElse(op("lt", TX, guard), body)]
    return kernel("named", [out], [], [kir.Allocate(sm)] + body, threads)


def test_named_barrier_of_the_whole_block_orders_like_a_barrier():
    k = exchange([kir.NamedBarrier(id=1, count=T)])
    assert run(k, {"out": np.zeros(T, np.float32)}) == []


def test_named_barrier_of_a_subset_with_its_count():
    k = exchange([kir.NamedBarrier(id=2, count=64)], guard=64)
    assert run(k, {"out": np.zeros(T, np.float32)}) == []


def test_bar_arrive_counts_toward_bar_sync():
    split = kir.IfThenElse(op("lt", TX, 64),
                           [kir.NamedBarrier(id=3, count=T, arrive_only=True)],
                           [kir.NamedBarrier(id=3, count=T)])
    assert run(exchange([split]), {"out": np.zeros(T, np.float32)}) == []


def test_named_barrier_count_mismatch_is_barrier_divergence():
    k = exchange([kir.NamedBarrier(id=1, count=T)], guard=64)
    hazards = run(k, {"out": np.zeros(T, np.float32)})
    div = [h for h in hazards if h.kind == "barrier-divergence"]
    assert div and "barrier 1 expects 128 threads but 64 thread(s) arrive" in div[0].detail
    assert "RAW" in kinds(hazards)           # it ordered nothing


# -- what cannot run ------------------------------------------------------------------

def bad_map(**change):
    x = tensor("x", F16, 2)
    fields = dict(name="m", tensor=x, sizes=list(reversed(x.sizes)), strides=[x.strides[0]],
                  box=(64, 16), swizzle="128B")
    fields.update(change)
    return x, kir.TensorMap(**fields)


@pytest.mark.parametrize("change, message, shape", [(*case, (40, 104))[:3] for case in [
    (dict(box=(64, 16, 2)), "has a box of rank 3, 2 sizes and 1 strides"),
    (dict(box=(64, 0)), "has box (64, 0): extents must be 1..256"),
    (dict(box=(64, 257)), "has box (64, 257): extents must be 1..256"),
    (dict(swizzle="64B"), "has a box row of 64 x 2 = 128 bytes: with swizzle 64B it must "
                          "be exactly 64"),
    (dict(box=(4, 16), swizzle="none"), "has a box row of 4 x 2 = 8 bytes: with swizzle "
                                        "none it must be a multiple of 16"),
    (dict(), "has stride 100 elements (200 bytes) in dimension 1: a positive multiple of "
             "16 bytes below 2^40", (40, 100)),
    (dict(strides=[c(1 << 39, DataType.i64)]), "has sizes [104, 40] and element strides (1, "
     "549755813888) (innermost first), which do not cover x of shape (40, 104) and element "
     "strides (104, 1) exactly"),
    (dict(sizes=[c(104), c(0)]), "has sizes [104, 0]: each must be positive"),
    (dict(tensor=tensor("z", F16, 2)), "is over z, which is not a tensor parameter"),
]])
def test_tensor_map_rules(change, message, shape):
    x, m = bad_map(**change)
    k = kernel("maps", [x], [m], [])
    with pytest.raises(InterpError) as info:
        run_kernel(k, {"x": np.zeros(shape, np.float16)})
    assert f"kernel maps: tensor map m {message}" in str(info.value)


def tma_stmt_kernel(stmt_for, bar_dtype=I64):
    x, m = bad_map()
    bar = kir.Buffer("bar", bar_dtype, SHARED, size=c(1), byte_offset=c(0))
    sm = kir.Buffer("sm", F16, SHARED, size=c(2048), byte_offset=c(SM))
    return kernel("stmts", [x], [m], [kir.Allocate(bar), kir.Allocate(sm),
                                      stmt_for(m, bar, sm)])


@pytest.mark.parametrize("case, message", [
    ("misaligned", "TMA load: sm[64] (pool byte 1152) of thread (0, 0, 0) is not 1024-byte "
                   "aligned (map m, swizzle 128B)"),
    ("coords", "TMA load of rank-2 map m gives 3 coordinate(s)"),
    ("coord_align", "TMA load: the dimension-0 coordinate 60 of thread (0, 0, 0) is 120 bytes "
                    "into map m's rows, not a multiple of 16 (the GPU faults with an illegal "
                    "instruction)"),
    ("bar_dtype", "mbarrier.init needs an i64 shared mbarrier buffer, not bar"),
    ("count", "mbarrier.init count 0 of thread (0, 0, 0) is not in 1..1048575"),
    ("parity", "mbarrier.wait parity 2 of thread (0, 0, 0) is not 0 or 1"),
    ("named_id", "named barrier id 0 is not in 1..15 (0 is __syncthreads')"),
    ("named_count", "named barrier 1: thread count 48 is not a positive multiple of 32"),
])
def test_statement_errors(case, message):
    def load(m, bar, sm, index=0, c2=None, c0=0):
        return kir.TmaLoad(dst=sm, dst_index=c(index), map=m, c0=c(c0), c1=c(0), c2=c2,
                           bar=bar, bar_index=c(0))
    make = {
        "misaligned": lambda m, bar, sm: load(m, bar, sm, index=64),
        "coords": lambda m, bar, sm: load(m, bar, sm, c2=c(0)),
        "coord_align": lambda m, bar, sm: load(m, bar, sm, c0=60),
        "bar_dtype": lambda m, bar, sm: kir.MbarrierInit(bar=bar, index=c(0), count=c(1)),
        "count": lambda m, bar, sm: kir.MbarrierInit(bar=bar, index=c(0), count=c(0)),
        "parity": lambda m, bar, sm: kir.MbarrierWait(bar=bar, index=c(0), parity=c(2)),
        "named_id": lambda m, bar, sm: kir.NamedBarrier(id=0, count=128),
        "named_count": lambda m, bar, sm: kir.NamedBarrier(id=1, count=48),
    }[case]
    k = tma_stmt_kernel(make, F32 if case == "bar_dtype" else I64)
    with pytest.raises(InterpError) as info:
        run_kernel(k, {"x": np.zeros((40, 104), np.float16)})
    assert message in str(info.value)


def test_a_box_past_the_end_of_its_buffer_is_out_of_bounds():
    def make(m, bar, sm):
        return kir.TmaLoad(dst=sm, dst_index=c(1536), map=m, c0=c(0), c1=c(0), bar=bar,
                           bar_index=c(0))
    k = tma_stmt_kernel(make)
    with pytest.raises(RaceError) as info:
        run_kernel(k, {"x": np.zeros((40, 104), np.float16)})
    (oob,) = [h for h in info.value.hazards if h.kind == "out-of-bounds"]
    assert "the start of a 2048-byte box that does not fit in sm[0, 2048)" in oob.detail
