"""The interpreter's async-proxy hazards (codegen.interp.async_proxy and its callers in
warpgroups.py, tma.py, mbarriers.py and cross_cta.py): the bug class of Hopper kernels
(HOPPER.md, "The bug class on this path").

Each hazard has a positive case (the guilty fence or wait dropped: reported, the message
checked) and its negative control (the correct kernel: no report). Kernels are hand-built
kir with one warp group of 128 threads in lockstep; their data are incidental (the
semantics are tested in test_interp_wgmma.py and test_interp_tma.py)."""

import numpy as np
import pytest

from codegen.errors import RaceError
from codegen.interp import run_kernel
from fuserir.dtypes import DataType
from lowering import kir

I32, I64, F16, F32 = DataType.i32, DataType.i64, DataType.f16, DataType.f32
SHARED, LOCAL, GLOBAL = kir.Memory.shared, kir.Memory.local, kir.Memory.global_
TX = kir.Special(kir.SpecialKind.threadIdx, "x", I32)
BX = kir.Special(kir.SpecialKind.blockIdx, "x", I32)
T = 128
NONE_LAYOUT = kir.MatrixLayout(128, 256, "none")     # K-major, no swizzle
A_ELEMS, B_ELEMS = 1024, 128                          # A 64 x 16, B^T 8 x 16 (f16)


def c(value, dtype=I32):
    return kir.Const(value, dtype)


def op(name, a, b):
    b = b if isinstance(b, kir.ScalarExpr) else c(b)
    return kir.BinOp(name, a, b, DataType.bool if name in kir.COMPARISONS else a.dtype)


def v(name):
    return kir.Var(name, I32)


def shared(name, dtype, size, offset):
    return kir.Buffer(name, dtype, SHARED, size=c(size), byte_offset=c(offset))


def tensor(name, dtype, shape, output=False):
    """A tensor parameter (numpy axes outermost first; strides bound from the array)."""
    return kir.TensorParam(kir.Buffer(name, dtype, GLOBAL),
                           [v(f"{name}_n{d}") for d in range(len(shape))],
                           [v(f"{name}_s{d}") for d in range(len(shape))], is_output=output)


def tmap(t, box):
    """A no-swizzle map over the 2-D tensor parameter t (dimensions innermost first)."""
    return kir.TensorMap(f"map_{t.buffer.name}", t, list(reversed(t.sizes)),
                         [t.strides[0]], tuple(box))


def kernel(name, tensors, body, maps=(), blocks=1):
    k = kir.Kernel(name, list(tensors), [], list(body),
                   kir.LaunchConfig((c(blocks), c(1), c(1)), (c(T), c(1), c(1))),
                   tensor_maps=list(maps))
    kir.relabel(k.body)
    return k


def one(*body):
    return kir.IfThenElse(op("eq", TX, 0), list(body))


def fill(sm, src, count, var="j", base=0):
    """sm[i] = src[base + i] for i < count, thread i % T."""
    i = op("add", op("mul", v(var), T), TX)
    at = op("add", i, base) if base else i
    return kir.ForLoop(v(var), c(count // T), [kir.Store(sm, i, kir.Load(src, at))])


def point(stmt):
    return f"{stmt.label}: {kir.format_stmt(stmt)}"


def hazards(k, args):
    try:
        run_kernel(k, args)
    except RaceError as e:
        return e.hazards
    return []


def only(found, kind):
    """The one hazard of `kind` (and no other kind)."""
    assert [h.kind for h in found] == [kind], [str(h) for h in found]
    return found[0]


# -- wgmma: proxy fences, registers in flight, wgmma.fence, operands in use ------------

class Mma:
    """sa (A) and sb (B) filled from xa / xb by st.shared (or A by a TMA load), d[0..4)
    the accumulator, out the accumulators after the wait."""

    def __init__(self):
        self.xa = tensor("xa", F16, (128, 8))           # rows of 16 bytes: A's 2048 bytes
        self.xb = tensor("xb", F16, (B_ELEMS,))
        self.out = tensor("out", F32, (T * 4,), output=True)
        self.bar = shared("bar", I64, 1, 0)
        self.sa = shared("sa", F16, A_ELEMS, 1024)
        self.sb = shared("sb", F16, B_ELEMS, 3072)
        self.d = kir.Buffer("d", F32, LOCAL, size=c(4))
        self.map = tmap(self.xa, (8, 128))

    def wgmma(self, accumulate=True):
        return kir.Wgmma(d=self.d, d_index=c(0), a=self.sa, a_index=c(0), b=self.sb,
                         b_index=c(0), n=8, dtype=F16, a_layout=NONE_LAYOUT,
                         b_layout=NONE_LAYOUT,
                         accumulate=None if accumulate else c(False, DataType.bool))

    def zero_d(self):
        return kir.ForLoop(v("z"), c(4), [kir.Store(self.d, v("z"), c(0.0, F32))])

    def d_out(self):
        at = op("add", op("mul", TX, 4), v("o"))
        return kir.ForLoop(v("o"), c(4), [kir.Store(self.out.buffer, at,
                                                    kir.Load(self.d, v("o")))])

    def kernel(self, proxy_fence=True, tma_a=False, prologue=None, between=(), after=()):
        """Fill (A by TMA when tma_a), [fence.proxy.async], barrier, `prologue` (default:
        zero d, wgmma.fence), wgmma, commit, `between`, wait, `after`, d out."""
        self.mma = self.wgmma()
        body = [kir.Allocate(self.bar), kir.Allocate(self.sa), kir.Allocate(self.sb),
                kir.Allocate(self.d), fill(self.sb, self.xb.buffer, B_ELEMS, "jb")]
        if tma_a:
            body += [one(kir.MbarrierInit(self.bar, c(0), c(1)), kir.FenceMbarrierInit()),
                     kir.Barrier(),
                     one(kir.MbarrierArrive(self.bar, c(0), tx_bytes=c(2048)),
                         kir.TmaLoad(self.sa, c(0), self.map, c(0), c(0), bar=self.bar,
                                     bar_index=c(0)))]
        else:
            body.append(fill(self.sa, self.xa.buffer, A_ELEMS, "ja"))
        if proxy_fence:
            body.append(kir.FenceProxyAsync())
        body.append(kir.Barrier())
        if tma_a:
            body.append(kir.MbarrierWait(self.bar, c(0), c(0)))
        body += (prologue if prologue is not None else [self.zero_d(), kir.WgmmaFence()])
        body += [self.mma, kir.WgmmaCommit(), *between, kir.WgmmaWait(0), *after,
                 self.d_out()]
        return kernel("mma", [self.xa, self.xb, self.out], body, [self.map])

    def args(self, rng):
        return {"xa": rng.integers(-3, 4, (128, 8)).astype(np.float16),
                "xb": rng.integers(-3, 4, B_ELEMS).astype(np.float16),
                "out": np.zeros(T * 4, np.float32)}


def test_st_shared_then_wgmma_needs_fence_proxy_async(rng):
    m = Mma()
    assert hazards(m.kernel(), m.args(rng)) == []
    k = m.kernel(proxy_fence=False)
    found = hazards(k, m.args(rng))
    assert sorted((h.kind, h.buffer) for h in found) == [("proxy-fence", "sa"),
                                                         ("proxy-fence", "sb")]
    h = next(h for h in found if h.buffer == "sb")
    assert h.first == point(k.body[4].body[0]) and h.second == point(m.mma)
    assert ("128 thread(s) wrote bytes through the generic proxy that the wgmma's B "
            "operand reads through the async proxy: no fence.proxy.async by the writing "
            "thread between the generic write and the async-proxy read") in h.detail
    assert h.byte_range == (3072, 3328) and h.iterations == ({"jb": 0}, {})


def test_tma_loaded_operand_needs_no_proxy_fence(rng):
    """A written by a TMA load (the async proxy) and B by st.shared: only B needs the
    fence."""
    m = Mma()
    assert hazards(m.kernel(tma_a=True), m.args(rng)) == []
    found = hazards(m.kernel(tma_a=True, proxy_fence=False), m.args(rng))
    assert only(found, "proxy-fence").buffer == "sb"


@pytest.mark.parametrize("access", ["write", "read"])
def test_accumulator_touched_between_wgmma_and_wait(rng, access):
    m = Mma()
    touch = (m.zero_d() if access == "write" else
             kir.ForLoop(v("o"), c(4), [kir.Store(m.out.buffer, op("mul", TX, 4),
                                                  kir.Load(m.d, v("o")))]))
    k = m.kernel(between=[touch])
    h = only(hazards(k, m.args(rng)), "wgmma-registers")
    assert (h.buffer, h.first, h.second) == ("d", point(m.mma), point(touch.body[0]))
    verb = "wrote" if access == "write" else "read"
    assert (f"128 thread(s) of warp group 0 {verb} elements of d before the "
            f"wgmma.wait_group that retires the wgmma: accumulator registers touched while "
            f"a wgmma that writes them is pending") in h.detail
    assert hazards(m.kernel(after=[touch]), m.args(rng)) == []     # after the wait


def test_missing_wgmma_fence_after_zeroing_the_accumulator(rng):
    m = Mma()
    zero = m.zero_d()
    k = m.kernel(prologue=[kir.WgmmaFence(), zero])                 # fence, then Stores
    h = only(hazards(k, m.args(rng)), "wgmma-fence")
    assert (h.first, h.second) == (point(zero.body[0]), point(m.mma))
    assert ("128 thread(s) of warp group 0 accessed accumulator elements of d since the last "
            "wgmma.fence, then the wgmma uses them (missing wgmma.fence") in h.detail
    h = only(hazards(m.kernel(prologue=[m.zero_d()]), m.args(rng)), "wgmma-fence")
    assert "issues a wgmma with no wgmma.fence before it" in h.detail
    assert hazards(m.kernel(prologue=[m.zero_d(), kir.WgmmaFence()]), m.args(rng)) == []


def test_chained_wgmmas_need_no_new_fence(rng):
    m = Mma()
    k = m.kernel()
    k.body.insert(k.body.index(m.mma) + 1, m.wgmma())
    kir.relabel(k.body)
    assert hazards(k, m.args(rng)) == []


def test_stage_overwritten_while_a_wgmma_reads_it(rng):
    m = Mma()
    refill = fill(m.sb, m.xb.buffer, B_ELEMS, "r")
    k = m.kernel(between=[kir.Barrier(), refill])
    found = hazards(k, m.args(rng))
    assert sorted(h.kind for h in found) == ["RAW", "async-pending"]   # and its reads at
    h = found[0]                                 # the wait see the refill's bytes (RAW)
    assert (h.buffer, h.first, h.second) == ("sb", point(m.mma), point(refill.body[0]))
    assert ("128 thread(s) wrote bytes a pending wgmma still reads (before the "
            "wgmma.wait_group that retires it)") in h.detail
    refill = fill(m.sb, m.xb.buffer, B_ELEMS, "r")
    assert hazards(m.kernel(after=[kir.Barrier(), refill]), m.args(rng)) == []


# -- TMA stores -------------------------------------------------------------------------

ROWS = 16                       # a tile: 16 rows of 8 f16 (16 bytes): 256 bytes


class Store:
    """`tiles` tiles of src, each filled into sm by st.shared, fenced, TMA-stored to y's
    rows [tile * ROWS, ..) by thread 0 (persistent: sm is reused by the next tile)."""

    def __init__(self, tiles=1):
        self.tiles = tiles
        self.src = tensor("src", F16, (tiles * ROWS * 8,))
        self.y = tensor("y", F16, (tiles * ROWS, 8), output=True)
        self.sm = shared("sm", F16, ROWS * 8, 1024)
        self.map = tmap(self.y, (8, ROWS))

    def kernel(self, proxy_fence=True, wait_read=True):
        n = ROWS * 8
        tile = v("tile")
        self.fill = fill(self.sm, self.src.buffer, n, base=op("mul", tile, n))
        self.store = kir.TmaStore(self.sm, c(0), self.map, c(0), op("mul", tile, ROWS))
        retire = [kir.BulkWait(n=0, read=True)] if wait_read else []
        body = [kir.Barrier(), self.fill] + ([kir.FenceProxyAsync()] if proxy_fence else [])
        body += [kir.Barrier(), one(self.store, kir.BulkCommit(), *retire)]
        return kernel("store", [self.src, self.y], [
            kir.Allocate(self.sm), kir.ForLoop(tile, c(self.tiles), body),
            one(kir.BulkWait(n=0))], [self.map])

    def args(self, rng):
        src = rng.integers(-9, 10, self.tiles * ROWS * 8).astype(np.float16)
        return {"src": src, "y": np.zeros((self.tiles * ROWS, 8), np.float16)}


def test_st_shared_then_tma_store_needs_fence_proxy_async(rng):
    """cudnn-frontend #784: the TMA store reads partly written shared memory."""
    s = Store()
    args = s.args(rng)
    assert hazards(s.kernel(), args) == []
    np.testing.assert_array_equal(args["y"].ravel(), args["src"])
    k = s.kernel(proxy_fence=False)
    h = only(hazards(k, s.args(rng)), "proxy-fence")
    assert (h.buffer, h.first, h.second) == ("sm", point(s.fill.body[0]), point(s.store))
    assert ("the TMA store reads through the async proxy: no fence.proxy.async by the "
            "writing thread between the generic write and the async-proxy read") in h.detail


def test_persistent_tile_reuses_smem_before_the_store_read_it(rng):
    """The next tile's epilogue overwrites sm while the previous tile's TMA store still
    reads it: no wait_group.read before the barrier that hands sm back."""
    s = Store(tiles=2)
    args = s.args(rng)
    assert hazards(s.kernel(), args) == []
    np.testing.assert_array_equal(args["y"].ravel(), args["src"])
    k = s.kernel(wait_read=False)
    args = s.args(rng)
    h = only(hazards(k, args), "async-pending")
    assert (h.buffer, h.first, h.second) == ("sm", point(s.store), point(s.fill.body[0]))
    assert h.iterations == ({"tile": 0}, {"tile": 1, "j": 0})
    assert ("128 thread(s) wrote bytes a TMA store still reads (no "
            "cp.async.bulk.wait_group.read of its thread has retired it)") in h.detail
    # the data effect: tile 0's store read the bytes at its (late) wait: tile 1's
    np.testing.assert_array_equal(args["y"][:ROWS], args["y"][ROWS:])


# -- mbarrier init ----------------------------------------------------------------------

def test_mbarrier_used_by_other_threads_before_a_barrier_after_init():
    """nvFuser #1552: every thread arrives on (and waits for) a barrier thread 0 has just
    initialised, with no __syncthreads between."""
    bar = shared("bar", I64, 1, 0)

    def make(sync):
        init = kir.MbarrierInit(bar, c(0), c(T))
        body = [kir.Allocate(bar), one(init, kir.FenceMbarrierInit()),
                *([kir.Barrier()] if sync else []), kir.MbarrierArrive(bar, c(0)),
                kir.MbarrierWait(bar, c(0), c(0))]
        return kernel("init", [], body), init
    assert hazards(make(True)[0], {}) == []
    k, init = make(False)
    found = hazards(k, {})
    assert [h.kind for h in found] == ["mbarrier-init"] * 2
    arrive = found[0]
    assert arrive.first == point(init) and arrive.threads == ((0, 0, 0), (1, 0, 0))
    assert ("127 thread(s) arrive on bar[0] that thread (0, 0, 0) initialised with no "
            "__syncthreads since the init") in arrive.detail
    assert "wait on bar[0]" in found[1].detail


def test_tma_load_completing_on_an_unfenced_init(rng):
    m = Mma()
    k = m.kernel(tma_a=True)
    init_if = next(s for s in k.body if isinstance(s, kir.IfThenElse))
    init_if.then_body = init_if.then_body[:1]                   # no fence.mbarrier_init
    found = hazards(k, m.args(rng))
    h = only(found, "mbarrier-init")
    assert h.first == point(init_if.then_body[0]) and "tma" in h.second.lower()
    assert ("a TMA load completes on bar[0]: mbarrier init not fenced before the async "
            "proxy uses it (no fence.mbarrier_init by thread (0, 0, 0) after the init)"
            ) in h.detail


# -- cross-CTA hand-off of TMA-stored data ----------------------------------------------

def test_tma_stored_workspace_read_by_another_block(rng):
    """Block 0 TMA-stores a tile to ws and releases a semaphore; block 1 acquires it and
    reads ws. With only wait_group.read the store's writes may still be in flight when
    the fence and the release run: reported; with the full wait: clean."""
    n = ROWS * 8
    src = tensor("src", F16, (n,))
    ws = tensor("ws", F16, (ROWS, 8), output=True)
    sem = tensor("sem", I32, (1,), output=True)
    out = tensor("out", F16, (n,), output=True)
    sm = shared("sm", F16, n, 1024)
    m = tmap(ws, (8, ROWS))
    i = op("add", op("mul", v("k"), T), TX)

    def make(full):
        store = kir.TmaStore(sm, c(0), m, c(0), c(0))
        read = kir.Store(out.buffer, i, kir.Load(ws.buffer, i))
        producer = [fill(sm, src.buffer, n), kir.FenceProxyAsync(), kir.Barrier(),
                    one(store, kir.BulkCommit(), kir.BulkWait(n=0, read=not full),
                        kir.Fence(), kir.SemRelease(sem.buffer, c(0), c(1)))]
        consumer = [one(kir.SemWait(sem.buffer, c(0), c(1))), kir.Barrier(),
                    kir.ForLoop(v("k"), c(n // T), [read])]
        body = [kir.Allocate(sm), kir.IfThenElse(op("eq", BX, 0), producer, consumer)]
        return kernel("handoff", [src, ws, sem, out], body, [m], blocks=2), store, read

    def args():
        return {"src": rng.integers(-9, 10, n).astype(np.float16),
                "ws": np.zeros((ROWS, 8), np.float16), "sem": np.zeros(1, np.int32),
                "out": np.zeros(n, np.float16)}
    k, store, read = make(full=True)
    a = args()
    assert hazards(k, a) == []
    np.testing.assert_array_equal(a["out"], a["src"])
    k, store, read = make(full=False)
    h = only(hazards(k, args()), "cross-cta")
    assert (h.buffer, h.first, h.second) == ("ws", point(store), point(read))
    assert h.extra["blocks"] == ((0, 0, 0), (1, 0, 0))
    assert ("the writing thread has executed no Fence (__threadfence) since the write "
            "completed (a TMA store's writes complete at its thread's full "
            "cp.async.bulk.wait_group, not at .read)") in h.detail


def test_a_wgmma_after_a_read_of_its_accumulator_needs_a_fence(rng):
    """A thread's read of the accumulator (a persistent kernel's epilogue) and then a
    wgmma overwriting it: the PTX ISA asks for a wgmma.fence between any register access
    and a wgmma using the register. Both checkers count the read: the interpreter reports
    it, the static verifier refuses the kernel; a fence after the read clears both."""
    from codegen.errors import HazardError
    from lowering.verify.async_protocol import verify_async_protocol
    m = Mma()
    read = m.d_out()
    k = m.kernel(prologue=[m.zero_d(), kir.WgmmaFence(), read])
    h = only(hazards(k, m.args(rng)), "wgmma-fence")
    assert (h.first, h.second) == (point(read.body[0]), point(m.mma))
    assert ("128 thread(s) of warp group 0 accessed accumulator elements of d since the "
            "last wgmma.fence, then the wgmma uses them") in h.detail
    kir.relabel(k.body)
    with pytest.raises(HazardError) as caught:
        verify_async_protocol(k)
    assert {x.kind for x in caught.value.hazards} == {"wgmma-fence"}
    fenced = m.kernel(prologue=[m.zero_d(), kir.WgmmaFence(), m.d_out(), kir.WgmmaFence()])
    assert hazards(fenced, m.args(rng)) == []
    kir.relabel(fenced.body)
    verify_async_protocol(fenced)
