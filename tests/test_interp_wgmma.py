"""Interpreter semantics of Hopper's wgmma (with fence, commit and wait groups), setmaxnreg
and stmatrix (codegen.interp.warpgroups).

Kernels are hand-built (one warp group of 128 threads for wgmma); shared operands are raw
byte images that plain Stores copy from a global input. The images and the expected
per-lane fragments come from an independent model of the PTX ISA's figures, spelled out
here (not the interpreter's nor fuserir.instructions' functions):

  * Canonical layouts ("Shared Memory Matrix Layout" of wgmma): an operand is M[row, k]
    of 16-bit elements (A: 64 x 16; B as B^T: n x 16). Without swizzle it is tiled into
    8 x 8 core matrices of 8 lines of 16 contiguous bytes; a line holds 8 consecutive k of
    one row (K-major) or 8 consecutive rows of one k (MN-major); core matrix (row // 8,
    k // 8) starts at (row // 8) * SBO + (k // 8) * LBO. With a swizzle of S = 32/64/128
    bytes it is tiled into atoms of 8 lines of S bytes (aligned to 8 * S): K-major, a line
    holds S/2 consecutive k of one row, atoms SBO apart along rows; MN-major, S/2
    consecutive rows of one k, atoms LBO apart along rows and SBO apart along k. Line j
    of an atom stores its 16-byte chunk c at chunk c ^ j (128B), c ^ (j // 2) (64B),
    c ^ (j // 4) (32B).
  * Accumulator D of m64nNk16: warp w of the group holds rows 16w..16w+15; with g = lane
    // 4, q = lane % 4, register 4c + i is row 16w + g + 8 (i // 2), column 8c + 2q + i % 2
    (each 8-column chunk is mma.m16n8's C fragment). Register A: warp w's rows as
    mma.m16n8k16's A fragment: a0, a1 (g, 2q..2q+1), a2, a3 (g+8, ..), a4, a5 (g, 2q+8..),
    a6, a7 (g+8, 2q+8..).
  * stmatrix: register i of lane l holds row l // 4, columns 2(l % 4), +1 of matrix i
    (.trans: rows 2(l % 4), +1, column l // 4); lane 8i + r's address receives row r of
    matrix i.
"""

import ml_dtypes
import numpy as np
import pytest

from codegen.errors import RaceError
from codegen.interp import InterpError, run_kernel
from fuserir.dtypes import DataType
from lowering import kir
from lowering.verify.accesses import instruction_access
from lowering.verify.hazards import find_hazards

I32, F32, F16, BF16, BOOL = (DataType.i32, DataType.f32, DataType.f16, DataType.bf16,
                             DataType.bool)
SHARED, LOCAL, GLOBAL = kir.Memory.shared, kir.Memory.local, kir.Memory.global_
TX = kir.Special(kir.SpecialKind.threadIdx, "x", I32)
HOST = {F16: np.float16, BF16: ml_dtypes.bfloat16}
SPAN = {"32B": 32, "64B": 64, "128B": 128}
PHASE = {"32B": lambda j: j // 4, "64B": lambda j: j // 2, "128B": lambda j: j}


def c(v, dtype=I32):
    return kir.Const(v, dtype)


def op(name, a, b):
    if not isinstance(b, kir.ScalarExpr):
        b = c(b)
    dtype = BOOL if name in kir.COMPARISONS else a.dtype
    return kir.BinOp(name, a, b, dtype)


def add(a, b):
    return op("add", a, b)


def mul(a, b):
    return op("mul", a, b)


def v(name):
    return kir.Var(name, I32)


def loop(name, extent, body):
    return kir.ForLoop(v(name), c(extent), list(body))


def shared(name, dtype, size, offset):
    return kir.Buffer(name, dtype, SHARED, size=c(size), byte_offset=c(offset))


def local(name, dtype, size):
    return kir.Buffer(name, dtype, LOCAL, size=c(size))


def tensor(name, dtype, n, output=False):
    return kir.TensorParam(kir.Buffer(name, dtype, GLOBAL), [c(n)], [v(f"{name}_s0")],
                           is_output=output)


def kernel(name, tensors, body, threads):
    k = kir.Kernel(name, list(tensors), [], list(body),
                   kir.LaunchConfig((c(1), c(1), c(1)), (c(threads), c(1), c(1))))
    kir.relabel(k.body)
    return k


def ld(buf, index):
    return kir.Load(buf, index)


def st(buf, index, value):
    return kir.Store(buf, index, value)


def point(stmt):
    return f"{stmt.label}: {kir.format_stmt(stmt)}"


def copy_in(dst, src, count, threads=128):
    """dst[e] = src[e] for e < count (a multiple of threads): thread e % threads."""
    return loop("j", count // threads, [st(dst, add(mul(v("j"), threads), TX),
                                           ld(src, add(mul(v("j"), threads), TX)))])


def per_thread(dst, src, count, to_global=False):
    """dst[j] = src[TX * count + j] (or the reverse, to global)."""
    flat = add(mul(TX, count), v("j"))
    return loop("j", count, [st(src, flat, ld(dst, v("j"))) if to_global
                             else st(dst, v("j"), ld(src, flat))])


# -- the independent model ---------------------------------------------------------------


def byte_of(row, k, trans, swz, lbo, sbo):
    """The byte of M[row, k] from the tile's start (the canonical layouts above)."""
    if swz == "none":
        line, e = (k % 8, row % 8) if trans else (row % 8, k % 8)
        return (row // 8) * sbo + (k // 8) * lbo + 16 * line + 2 * e
    span = SPAN[swz]
    per = span // 2                                   # elements per line
    if trans:
        atom, line, e = (row // per) * lbo + (k // 8) * sbo, k % 8, row % per
    else:
        atom, line, e = (row // 8) * sbo, row % 8, k
    chunk, within = divmod(2 * e, 16)
    return atom + span * line + 16 * (chunk ^ PHASE[swz](line)) + within


def place(image, base, tile, trans, swz, lbo, sbo):
    """Write the 16-bit tile (rows x cols) into the byte image from byte `base`."""
    rows, cols = tile.shape
    bits = tile.view(np.uint16)
    for r in range(rows):
        for k in range(cols):
            at = base + byte_of(r, k, trans, swz, lbo, sbo)
            image[at:at + 2] = np.frombuffer(bits[r, k].tobytes(), np.uint8)


def extent(rows, cols, trans, swz, lbo, sbo):
    return max(byte_of(r, k, trans, swz, lbo, sbo)
               for r in range(rows) for k in range(cols)) + 2


def layout_for(rows, trans, swz):
    """(tile columns, LBO, SBO) of a tile of `rows` rows: K-major swizzled tiles are S/2
    columns wide (one line), the operand taking their last 16 columns; their LBO is not
    used (the 16 k of one operand lie in one line), so it is junk here."""
    if swz == "none":
        cores = rows // 8 if rows >= 8 else 1
        return (16, 128, 256) if not trans else (16, 128 * cores, 128)
    span = SPAN[swz]
    if trans:
        return 16, 2 * 8 * span, 8 * span
    return span // 2, 5 * 1024, 8 * span


def accumulator(D):
    """[128, n/2]: each thread's registers of D (the PTX figure)."""
    n = D.shape[1]
    t = np.arange(128)[:, None]
    j = np.arange(n // 2)[None, :]
    w, g, q = t // 32, t % 32 // 4, t % 4
    chunk, i = j // 4, j % 4
    return D[16 * w + g + 8 * (i // 2), 8 * chunk + 2 * q + i % 2]


def register_a(A):
    """[128, 8]: each thread's register-A elements (the PTX figure)."""
    t = np.arange(128)[:, None]
    j = np.arange(8)[None, :]
    w, g, q = t // 32, t % 32 // 4, t % 4
    return A[16 * w + g + 8 * (j // 2 % 2), 2 * q + j % 2 + 8 * (j // 4)]


# -- wgmma kernels -----------------------------------------------------------------------


class Case:
    """One wgmma m64n{n}k16 on integer-valued data: the tiles, the images, the kernel."""

    def __init__(self, rng, n, dt, swz_a, swz_b, trans_a, trans_b, reg_a=False,
                 accumulate=True):
        self.n, self.dt, self.reg_a, self.accumulate = n, dt, reg_a, accumulate
        host = HOST[dt]
        self.ops = {}
        offset = 0
        for name, rows, trans, swz in (("a", 64, trans_a, swz_a), ("b", n, trans_b, swz_b)):
            if name == "a" and reg_a:
                continue
            cols, lbo, sbo = layout_for(rows, trans, swz)
            tile = rng.integers(-4, 5, size=(rows, cols)).astype(host)
            nbytes = -(-extent(rows, cols, trans, swz, lbo, sbo) // 256) * 256
            image = rng.integers(-4, 5, size=nbytes // 2).astype(host).view(np.uint8)
            place(image, 0, tile, trans, swz, lbo, sbo)
            koff = cols - 16                         # the operand's first k in the tile
            self.ops[name] = dict(
                tile=tile, image=image.view(host), offset=offset, start=koff,
                operand=tile[:, koff:].astype(np.float64),
                layout=kir.MatrixLayout(lbo, sbo, swz), trans=trans)
            offset += -(-nbytes // 1024) * 1024
        self.A = (rng.integers(-4, 5, size=(64, 16)).astype(np.float64) if reg_a
                  else self.ops["a"]["operand"])
        self.B = self.ops["b"]["operand"].T
        self.C = rng.integers(-50, 51, size=(64, n)).astype(np.float64)
        self.D = self.A @ self.B + (self.C if accumulate else 0)

    def statements(self, d, ra=None):
        """The Wgmma into d (A from the registers ra when reg_a) on the kernel's buffers."""
        a = self.ops.get("a")
        b = self.ops["b"]
        return kir.Wgmma(
            d=d, d_index=c(0), a=ra if self.reg_a else self.buf["a"],
            a_index=c(0 if self.reg_a else a["start"]), b=self.buf["b"],
            b_index=c(b["start"]), n=self.n, dtype=self.dt,
            a_layout=None if self.reg_a else a["layout"], b_layout=b["layout"],
            trans_a=False if self.reg_a else a["trans"], trans_b=b["trans"],
            accumulate=None if self.accumulate else c(False, BOOL))

    def kernel(self, between=None, wait=True, before_wait=False):
        """Fill the operands and D, proxy fence, barrier, wgmma.fence, wgmma, commit,
        between(self)'s statements, wait (unless not), write D to `out`; `before_wait`:
        D to `early` before the wait."""
        n, dt = self.n, self.dt
        h = n // 2
        self.buf, params, body = {}, [], []
        for name, o in self.ops.items():
            x = tensor(f"x{name}", dt, o["image"].size)
            s = shared(f"s{name}", dt, o["image"].size, o["offset"])
            self.buf[name] = s
            params.append(x)
            body += [kir.Allocate(s), copy_in(s, x.buffer, o["image"].size)]
        xc, out = tensor("xc", F32, 128 * h), tensor("out", F32, 128 * h, output=True)
        d = local("d", F32, h)
        params += [xc, out]
        body += [kir.Allocate(d), per_thread(d, xc.buffer, h)]
        ra = None
        if self.reg_a:
            xr = tensor("xr", dt, 128 * 8)
            ra = local("ra", dt, 8)
            params.append(xr)
            body += [kir.Allocate(ra), per_thread(ra, xr.buffer, 8)]
        self.wgmma = self.statements(d, ra)
        self.d = d
        body += [kir.FenceProxyAsync(), kir.Barrier(), kir.WgmmaFence(), self.wgmma,
                 kir.WgmmaCommit(),
                 *(between(self) if between else [])]
        if before_wait:
            early = tensor("early", F32, 128 * h, output=True)
            params.append(early)
            body.append(per_thread(d, early.buffer, h, to_global=True))
        if wait:
            body.append(kir.WgmmaWait(0))
        body.append(per_thread(d, out.buffer, h, to_global=True))
        return kernel(f"wgmma_n{n}", params, body, 128)

    def args(self):
        h = self.n // 2
        args = {f"x{name}": o["image"] for name, o in self.ops.items()}
        args["xc"] = accumulator(self.C).astype(np.float32).ravel()
        args["out"] = np.full(128 * h, np.nan, np.float32)
        args["early"] = np.full(128 * h, np.nan, np.float32)
        if self.reg_a:
            args["xr"] = register_a(self.A).astype(HOST[self.dt]).ravel()
        return args


SWIZZLES = ("none", "32B", "64B", "128B")
TRANS = ((False, False), (True, True), (False, True), (True, False))
WIDTHS = (8, 64, 128, 256)
SHARED_CASES = [(WIDTHS[(i + j) % 4], (F16, BF16)[(i + j) % 2], swz, ta, tb)
                for i, swz in enumerate(SWIZZLES) for j, (ta, tb) in enumerate(TRANS)]


@pytest.mark.parametrize("n, dt, swz, trans_a, trans_b", SHARED_CASES,
                         ids=[f"n{n}-{dt.value}-{s}-{'MK'[ta]}{'NK'[tb]}"
                              for n, dt, s, ta, tb in SHARED_CASES])
def test_wgmma_shared_operands_every_lane_exact(rng, n, dt, swz, trans_a, trans_b):
    case = Case(rng, n, dt, swz, swz, trans_a, trans_b)
    k = case.kernel()
    args = case.args()
    run_kernel(k, args)
    np.testing.assert_array_equal(args["out"].reshape(128, n // 2), accumulator(case.D))


@pytest.mark.parametrize("n, dt, trans_b, swz_b, accumulate", [
    (8, F16, False, "none", True), (256, BF16, True, "128B", True),
    (64, F16, True, "64B", False), (128, BF16, False, "32B", False)])
def test_wgmma_register_a_and_accumulate(rng, n, dt, trans_b, swz_b, accumulate):
    case = Case(rng, n, dt, None, swz_b, False, trans_b, reg_a=True, accumulate=accumulate)
    args = case.args()
    run_kernel(case.kernel(), args)
    np.testing.assert_array_equal(args["out"].reshape(128, n // 2), accumulator(case.D))


def test_wgmma_mixed_swizzles(rng):
    case = Case(rng, 64, F16, "128B", "none", False, True, accumulate=False)
    args = case.args()
    run_kernel(case.kernel(), args)
    np.testing.assert_array_equal(args["out"].reshape(128, 32), accumulator(case.D))


def test_accumulator_layout_is_the_ptx_figure():
    """D = A (row m has a 1 in column m % 16) x B (B[k, col] = 16 k + col) puts
    16 (m % 16) + col at (m, col): lane l's register j names its own element."""
    rng = np.random.default_rng(0)
    case = Case(rng, 16, F16, "none", "none", False, False, accumulate=False)
    rows = np.arange(64)
    case.ops["a"]["image"][:] = 0
    A = np.zeros((64, 16), np.float16)
    A[rows, rows % 16] = 1
    B = (np.arange(16)[:, None] * 16 + np.arange(16)[None, :]).astype(np.float16)  # k, n
    for name, tile in (("a", A), ("b", B.T.copy())):
        o = case.ops[name]
        image = o["image"].view(np.uint8)
        place(image, 0, tile, o["trans"], "none", o["layout"].leading, o["layout"].stride)
    args = case.args()
    run_kernel(case.kernel(), args)
    got = args["out"].reshape(4, 32, 8)                # warp, lane, register
    lane = np.arange(32)[:, None]
    j = np.arange(8)[None, :]
    row = 16 * np.arange(4)[:, None, None] + lane // 4 + 8 * (j % 4 // 2)
    col = 8 * (j // 4) + 2 * (lane % 4) + j % 2
    np.testing.assert_array_equal(got, (row % 16) * 16 + col)


# -- pending semantics --------------------------------------------------------------------


def race(k, args):
    with pytest.raises(RaceError) as info:
        run_kernel(k, args)
    return info.value.hazards


def test_d_read_before_the_wait_has_the_old_values(rng):
    """(and is reported: accumulator registers read while the wgmma is pending)"""
    case = Case(rng, 64, F16, "128B", "128B", False, False)
    args = case.args()
    k = case.kernel(before_wait=True)
    hazards = race(k, args)
    assert [(h.kind, h.first) for h in hazards] == [("wgmma-registers", point(case.wgmma))]
    assert "early[" in hazards[0].second
    np.testing.assert_array_equal(args["early"].reshape(128, 32), accumulator(case.C))
    np.testing.assert_array_equal(args["out"].reshape(128, 32), accumulator(case.D))


def test_missing_wait_is_reported_and_retires_at_the_end(rng):
    case = Case(rng, 32, BF16, "64B", "none", True, False)
    args = case.args()
    k = case.kernel(wait=False)
    hazards = race(k, args)
    np.testing.assert_array_equal(args["out"].reshape(128, 16), accumulator(case.C))
    assert [(h.kind, h.first) for h in hazards] == [
        ("wgmma-registers", point(case.wgmma)), ("async-pending", point(case.wgmma))]
    assert hazards[1].second == "end of the block"
    assert "wgmma never waited for" in hazards[1].detail


def test_writes_between_issue_and_wait_change_the_result(rng):
    """B overwritten in shared memory (after a barrier) and D zeroed in registers between
    issue and wait: both reported (async_proxy's checks), and the op reads both at the
    wait."""
    case = Case(rng, 64, F16, "32B", "32B", False, True)
    size = case.ops["b"]["image"].size

    def between(case):
        return [kir.Barrier(), loop("j", size // 128, [
                    st(case.buf["b"], add(mul(v("j"), 128), TX), c(1.0, F16))]),
                loop("j", 32, [st(case.d, v("j"), c(0.0, F32))]), kir.Barrier()]
    args = case.args()
    hazards = race(case.kernel(between=between), args)
    assert [(h.kind, h.buffer) for h in hazards] == [("async-pending", "sb"),
                                                      ("wgmma-registers", "d")]
    np.testing.assert_array_equal(args["out"].reshape(128, 32),
                                  accumulator(case.A @ np.ones((16, 64))))


def test_wait_group_1_leaves_the_newest_group_pending(rng):
    """Two wgmmas into d and e, committed separately: wait_group 1 retires the first only,
    wait_group 0 the second (reading e between is reported)."""
    case = Case(rng, 8, F16, "none", "none", False, False)
    k = case.kernel()
    e = local("e", F32, 4)
    second = case.statements(e)
    body = k.body
    w = body.index(case.wgmma)
    xe, early = tensor("xe", F32, 512), tensor("early", F32, 512, output=True)
    late = tensor("late", F32, 512, output=True)
    body[w - 1:w + 3] = [kir.Allocate(e), per_thread(e, xe.buffer, 4), kir.Barrier(),
                         kir.WgmmaFence(), case.wgmma, kir.WgmmaCommit(), second,
                         kir.WgmmaCommit(), kir.WgmmaWait(1),
                         per_thread(e, early.buffer, 4, to_global=True), kir.WgmmaWait(0),
                         per_thread(e, late.buffer, 4, to_global=True)]
    k.tensor_params += [xe, early, late]
    kir.relabel(k.body)
    args = case.args()
    old_e = rng.integers(-9, 10, size=512).astype(np.float32)
    args.update(xe=old_e, early=np.zeros(512, np.float32), late=np.zeros(512, np.float32))
    hazards = race(k, args)
    assert [(h.kind, h.first) for h in hazards] == [("wgmma-registers", point(second))]
    np.testing.assert_array_equal(args["out"].reshape(128, 4), accumulator(case.D))
    np.testing.assert_array_equal(args["early"], old_e)                # still pending
    np.testing.assert_array_equal(args["late"].reshape(128, 4),    # retired onto old e
                                  accumulator(case.A @ case.B) + old_e.reshape(128, 4))


def test_operand_reads_feed_the_race_detector(rng):
    """No barrier between filling the shared operands and the wgmma: its reads (at the
    wait) are RAW on other threads' stores, reported at the Wgmma."""
    case = Case(rng, 8, F16, "64B", "none", True, False)
    k = case.kernel()
    k.body.remove(next(s for s in k.body if isinstance(s, kir.Barrier)))
    kir.relabel(k.body)
    hazards = race(k, case.args())
    assert {h.kind for h in hazards} == {"RAW"}
    assert {h.second for h in hazards} == {point(case.wgmma)}
    fills = {point(k.body[1].body[0]), point(k.body[3].body[0])}   # the two copy_in stores
    assert {h.first for h in hazards} == fills


def test_wgmmas_on_one_accumulator_retire_in_issue_order(rng):
    """Two wgmmas accumulating into d in one commit group: D = A B + A B + C."""
    case = Case(rng, 16, BF16, "32B", "64B", False, True)
    k = case.kernel()
    k.body.insert(k.body.index(case.wgmma) + 1, case.statements(case.d))
    kir.relabel(k.body)
    args = case.args()
    run_kernel(k, args)
    np.testing.assert_array_equal(args["out"].reshape(128, 8),
                                  accumulator(2 * case.A @ case.B + case.C))


def test_divergent_warp_group_reported(rng):
    case = Case(rng, 8, F16, "none", "none", False, False)
    k = case.kernel()
    w = k.body.index(case.wgmma)
    k.body[w] = kir.IfThenElse(op("lt", TX, 96), [case.wgmma])
    kir.relabel(k.body)
    hazards = race(k, case.args())
    assert [h.kind for h in hazards] == ["warp-divergence"]
    assert "warp group 0 runs wgmma m64n8k16.f16 with 96 of 128 lanes" in hazards[0].detail


def test_partial_warp_group_and_setmaxnreg(rng):
    body = [kir.SetMaxNReg(count=240), kir.SetMaxNReg(count=40, increase=False)]
    hazards = race(kernel("regs", [], body, 160), {})
    assert [h.kind for h in hazards] == ["warp-divergence"] * 2
    assert "warp group 1 runs setmaxnreg 240 with 32 of 128 lanes: lane 32 does not " \
           "exist" in hazards[0].detail
    run_kernel(kernel("regs", [], body, 256), {})
    with pytest.raises(InterpError, match="setmaxnreg count 20"):
        run_kernel(kernel("regs", [], [kir.SetMaxNReg(count=20)], 128), {})


@pytest.mark.parametrize("change, message", [
    (dict(dtype=F32), "input dtype f32"),
    (dict(n=12), "n must be a multiple of 8"),
    (dict(b_index=c(4)), "not 16-byte aligned"),
    (dict(b_index=c(64)), "row phase"),
    (dict(b_layout=kir.MatrixLayout(8, 1024, "128B")), "leading byte offset 8"),
])
def test_wgmma_checks(rng, change, message):
    case = Case(rng, 8, F16, "128B", "128B", False, False)
    k = case.kernel()
    for name, value in change.items():
        setattr(case.wgmma, name, value)
    with pytest.raises(InterpError, match=message):
        run_kernel(k, case.args())


def test_out_of_bounds_operand_reported(rng):
    case = Case(rng, 8, F16, "none", "none", False, False)
    k = case.kernel()
    case.wgmma.b_index = c(case.ops["b"]["image"].size - 64)
    hazards = race(k, case.args())
    assert {h.kind for h in hazards} == {"out-of-bounds"}
    assert "a wgmma B element" in hazards[0].detail


# -- stmatrix -----------------------------------------------------------------------------

ROW = 16                 # elements between rows (32 bytes)
MAT = 8 * ROW            # elements per matrix


@pytest.mark.parametrize("trans", [False, True], ids=["plain", "trans"])
@pytest.mark.parametrize("num", [1, 2, 4])
def test_stmatrix(rng, num, trans):
    """Two warps; warp w's matrix i goes to element w*4*MAT + i*MAT, rows ROW apart; lanes
    past 8*num give an address far out of bounds (not used). Then the image is read."""
    T, size = 64, 2 * 4 * MAT
    xr = tensor("xr", F16, T * 2 * num)
    out = tensor("out", F16, size, output=True)
    sm, regs = shared("sm", F16, size, 0), local("regs", F16, 2 * num)
    lane, warp = op("mod", TX, 32), op("div", TX, 32)
    addr = add(add(mul(warp, 4 * MAT), mul(op("div", lane, 8), MAT)),
               mul(op("mod", lane, 8), ROW))
    addr = kir.Select(op("lt", lane, 8 * num), addr, c(1 << 20), I32)
    body = [kir.Allocate(sm), kir.Allocate(regs),
            loop("j", size // T, [st(sm, add(mul(v("j"), T), TX), c(0.0, F16))]),
            per_thread(regs, xr.buffer, 2 * num), kir.Barrier(),
            kir.StMatrix(sm, addr, regs, c(0), num=num, trans=trans), kir.Barrier(),
            loop("j", size // T, [st(out.buffer, add(mul(v("j"), T), TX),
                                     ld(sm, add(mul(v("j"), T), TX)))])]
    k = kernel(f"stmatrix_x{num}", [xr, out], body, T)
    bits = rng.permutation(np.arange(0x3C00, 0x3C00 + T * 2 * num)).astype(np.uint16)
    got = np.zeros(size, np.float16)
    run_kernel(k, {"xr": bits.view(np.float16), "out": got})
    want = np.zeros((2, 4, 8, ROW), np.uint16)                # warp, matrix, row, col
    reg = bits.reshape(2, 32, num, 2)
    for w in range(2):
        for ln in range(32):
            g, q = ln // 4, ln % 4
            for i in range(num):
                for j in range(2):
                    r, col = (2 * q + j, g) if trans else (g, 2 * q + j)
                    want[w, i, r, col] = reg[w, ln, i, j]
    np.testing.assert_array_equal(got.view(np.uint16).reshape(2, 4, 8, ROW), want)


def test_stmatrix_divergence_and_access():
    sm, regs = shared("sm", F16, 64, 0), local("regs", F16, 2)
    stm = kir.StMatrix(sm, mul(op("mod", TX, 8), 8), regs, c(0), num=1)
    body = [kir.Allocate(sm), kir.Allocate(regs), kir.IfThenElse(op("lt", TX, 16), [stm])]
    hazards = race(kernel("stm_div", [], body, 32), {})
    assert [h.kind for h in hazards] == ["warp-divergence"]
    assert "warp 0 runs stmatrix.x1 with 16 of 32 lanes" in hazards[0].detail
    a = instruction_access(stm)
    assert (a.via, a.is_write, a.nbytes, a.lanes, a.matrices) == (
        "stmatrix", True, 16, 8, 1)
    read = st(regs, c(0), ld(sm, TX))              # the static analysis sees the write
    found = find_hazards([kir.Allocate(sm), kir.Allocate(regs), stm, read])
    assert [(f.kind.value, f.first.stmt, f.second.stmt) for f in found] == [
        ("RAW", stm, read)]
