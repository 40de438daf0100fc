"""Interpreter semantics of ldmatrix, mma.sync m16n8k16 and cp.async (codegen.interp).

Kernels are hand-built here (independent of tests/kir_examples.py and of the lowering
passes); expected fragments are computed independently with numpy from the fragment
figures of the PTX ISA (lane l, g = l >> 2, t = l & 3)."""

import ml_dtypes
import numpy as np
import pytest

from codegen.errors import RaceError
from codegen.interp import run_kernel
from fuserir.dtypes import DataType
from lowering import kir

I32, F32, F16, BF16 = DataType.i32, DataType.f32, DataType.f16, DataType.bf16
SHARED, LOCAL, GLOBAL = kir.Memory.shared, kir.Memory.local, kir.Memory.global_
TX = kir.Special(kir.SpecialKind.threadIdx, "x", I32)


def c(v, dtype=I32):
    return kir.Const(v, dtype)


def op(name, a, b):
    if not isinstance(b, kir.ScalarExpr):
        b = c(b)
    dtype = DataType.bool if name in kir.COMPARISONS else a.dtype
    return kir.BinOp(name, a, b, dtype)


def add(a, b):
    return op("add", a, b)


def mul(a, b):
    return op("mul", a, b)


def loop(name, extent, body):
    return kir.ForLoop(kir.Var(name, I32), c(extent), list(body))


def v(name):
    return kir.Var(name, I32)


def shared(name, dtype, size, offset=0):
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


def point(k, stmt):
    return f"{stmt.label}: {kir.format_stmt(stmt)}"


def race(k, args):
    with pytest.raises(RaceError) as info:
        run_kernel(k, args)
    return info.value.hazards


def lane_gt():
    lane = np.arange(32)
    return lane, lane >> 2, lane & 3


# -- ldmatrix ----------------------------------------------------------------------------

WARPS = 2
ROW = 16                # row stride in elements (32 bytes; rows stay 16-byte aligned)
MAT = 8 * ROW           # elements per matrix


def ldmatrix_kernel(num, trans):
    """Two warps; warp w's matrix i starts at element w*4*MAT + i*MAT, rows ROW apart.
    Lanes past 8*num supply an address far out of bounds: they must not be read."""
    T = 32 * WARPS
    size = WARPS * 4 * MAT
    x = tensor("x", F16, size)
    out = tensor("out", F16, T * 2 * num, output=True)
    sm, frag = shared("sm", F16, size), local("frag", F16, 2 * num)
    lane, warp = op("mod", TX, 32), op("div", TX, 32)
    addr = add(add(mul(warp, 4 * MAT), mul(op("div", lane, 8), MAT)),
               mul(op("mod", lane, 8), ROW))
    addr = kir.Select(op("lt", lane, 8 * num), addr, c(1 << 20), I32)
    body = [kir.Allocate(sm), kir.Allocate(frag),
            loop("j", size // T, [st(sm, add(mul(v("j"), T), TX),
                                     ld(x.buffer, add(mul(v("j"), T), TX)))]),
            kir.Barrier(),
            kir.LdMatrix(frag, c(0), sm, addr, num=num, trans=trans),
            loop("r", 2 * num, [st(out.buffer, add(mul(TX, 2 * num), v("r")),
                                   ld(frag, v("r")))])]
    return kernel(f"ldmatrix_x{num}", [x, out], body, T), size


@pytest.mark.parametrize("trans", [False, True], ids=["plain", "trans"])
@pytest.mark.parametrize("num", [1, 2, 4])
def test_ldmatrix_fragments(rng, num, trans):
    k, size = ldmatrix_kernel(num, trans)
    bits = rng.permutation(np.arange(0x3C00, 0x3C00 + size)).astype(np.uint16)
    x = bits.view(np.float16)
    out = np.zeros(32 * WARPS * 2 * num, np.float16)
    run_kernel(k, {"x": x, "out": out})              # no hazard: unused lanes not read
    got = out.view(np.uint16).reshape(WARPS, 32, num, 2)
    lane, g, t = lane_gt()
    for w in range(WARPS):
        for i in range(num):
            m = bits[w * 4 * MAT + i * MAT:][:MAT].reshape(8, ROW)[:, :8]   # matrix i
            for j in range(2):
                want = m[2 * t + j, g] if trans else m[g, 2 * t + j]
                np.testing.assert_array_equal(got[w, :, i, j], want)


def test_ldmatrix_divergent_warp_reported():
    T = 32
    sm, frag = shared("sm", F16, 64), local("frag", F16, 2)
    out = tensor("out", F16, 64, output=True)
    body = [kir.Allocate(sm), kir.Allocate(frag),
            st(sm, TX, c(1.0, F16)), st(sm, add(TX, 32), c(1.0, F16)), kir.Barrier(),
            kir.IfThenElse(op("lt", TX, 16), [kir.LdMatrix(frag, c(0), sm,
                                                            mul(op("mod", TX, 8), 8), num=1)])]
    k = kernel("ldm_div", [out], body, T)
    hazards = race(k, {"out": np.zeros(64, np.float16)})
    assert [h.kind for h in hazards] == ["warp-divergence"]
    assert "warp 0 runs ldmatrix.x1 with 16 of 32 lanes" in hazards[0].detail


def test_ldmatrix_reads_feed_the_race_detector():
    """Lane l's row is written by thread l + 1 with no barrier: RAW on the ldmatrix."""
    sm, frag = shared("sm", F16, 32 * 8), local("frag", F16, 8)
    out = tensor("out", F16, 32, output=True)
    ldm = kir.LdMatrix(frag, c(0), sm, mul(TX, 8), num=4)
    body = [kir.Allocate(sm), kir.Allocate(frag),
            loop("j", 8, [st(sm, add(mul(op("mod", add(TX, 31), 32), 8), v("j")),
                             c(2.0, F16))]),
            ldm]
    k = kernel("ldm_raw", [out], body, 32)
    hazards = race(k, {"out": np.zeros(32, np.float16)})
    h = [h for h in hazards if h.kind == "RAW"][0]
    assert h.second == point(k, ldm)


# -- mma.sync m16n8k16 -------------------------------------------------------------------


def fragments(A, B, C):
    """Per-lane fragments [32, 8] / [32, 4] / [32, 4] of one warp (the PTX ISA's figures)."""
    lane, g, t = lane_gt()
    a = np.stack([A[g, 2 * t], A[g, 2 * t + 1], A[g + 8, 2 * t], A[g + 8, 2 * t + 1],
                  A[g, 2 * t + 8], A[g, 2 * t + 9], A[g + 8, 2 * t + 8],
                  A[g + 8, 2 * t + 9]], axis=1)
    b = np.stack([B[2 * t, g], B[2 * t + 1, g], B[2 * t + 8, g], B[2 * t + 9, g]], axis=1)
    cc = np.stack([C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1]],
                  axis=1)
    return a, b, cc


@pytest.mark.parametrize("alias", [False, True], ids=["d", "d_is_c"])
@pytest.mark.parametrize("dt", [F16, BF16])
def test_mma_every_lane_exact(rng, dt, alias):
    T = 64
    host = np.float16 if dt is F16 else ml_dtypes.bfloat16
    fa, fb = tensor("fa", dt, T * 8), tensor("fb", dt, T * 4)
    fc, fd = tensor("fc", F32, T * 4), tensor("fd", F32, T * 4, output=True)
    a, b, cc = local("a", dt, 8), local("b", dt, 4), local("cc", F32, 4)
    d = cc if alias else local("d", F32, 4)
    body = [kir.Allocate(a), kir.Allocate(b), kir.Allocate(cc)] + \
        ([] if alias else [kir.Allocate(d)]) + [
        loop("k", 8, [st(a, v("k"), ld(fa.buffer, add(mul(TX, 8), v("k"))))]),
        loop("k", 4, [st(b, v("k"), ld(fb.buffer, add(mul(TX, 4), v("k")))),
                      st(cc, v("k"), ld(fc.buffer, add(mul(TX, 4), v("k"))))]),
        kir.Mma(d, c(0), a, c(0), b, c(0), cc, c(0), dtype=dt),
        loop("k", 4, [st(fd.buffer, add(mul(TX, 4), v("k")), ld(d, v("k")))])]
    k = kernel("mma", [fa, fb, fc, fd], body, T)
    A = rng.integers(-8, 9, size=(2, 16, 16)).astype(np.float64)
    B = rng.integers(-8, 9, size=(2, 16, 8)).astype(np.float64)
    C = rng.integers(-100, 101, size=(2, 16, 8)).astype(np.float64)
    frags = [fragments(A[w], B[w], C[w]) for w in range(2)]
    args = {"fa": np.concatenate([f[0] for f in frags]).astype(host).ravel(),
            "fb": np.concatenate([f[1] for f in frags]).astype(host).ravel(),
            "fc": np.concatenate([f[2] for f in frags]).astype(np.float32).ravel(),
            "fd": np.full(T * 4, np.nan, np.float32)}
    run_kernel(k, args)
    got = args["fd"].reshape(2, 32, 4)
    for w in range(2):
        D = A[w] @ B[w] + C[w]
        np.testing.assert_array_equal(got[w], fragments(A[w], B[w], D)[2])


# -- cp.async ----------------------------------------------------------------------------


def cp_kernel(nbytes, src_size, cache="ca"):
    """Thread t copies nbytes from x[t*ne] into sm[t*ne] (f16 elements, ne = nbytes/2),
    commit, wait_group 0, and reads back its own bytes (the shared pool starts 0xFF)."""
    T, ne = 32, nbytes // 2
    x = tensor("x", F16, T * ne)
    out = tensor("out", F16, T * ne, output=True)
    sm = shared("sm", F16, T * ne)
    body = [kir.Allocate(sm),
            kir.CpAsync(sm, mul(TX, ne), x.buffer, mul(TX, ne), nbytes, src_size, cache),
            kir.CpAsyncCommit(), kir.CpAsyncWait(0),
            loop("k", ne, [st(out.buffer, add(mul(TX, ne), v("k")),
                              ld(sm, add(mul(TX, ne), v("k"))))])]
    return kernel(f"cp{nbytes}", [x, out], body, T)


@pytest.mark.parametrize("nbytes", [4, 8, 16])
@pytest.mark.parametrize("size", ["full", "zero", "partial", "per_lane"])
def test_cp_async_sizes_and_zero_fill(rng, nbytes, size):
    T, ne = 32, nbytes // 2
    if size == "per_lane":                     # src-size = lane % (nbytes + 1)
        src_size, sizes = op("mod", TX, nbytes + 1), np.arange(T) % (nbytes + 1)
    else:
        n = {"full": nbytes, "zero": 0, "partial": nbytes - 3}[size]
        src_size, sizes = c(n), np.full(T, n)
    k = cp_kernel(nbytes, src_size, "cg" if nbytes == 16 else "ca")
    x = rng.integers(1, 1 << 15, size=T * ne).astype(np.uint16).view(np.float16)
    out = np.zeros(T * ne, np.float16)
    run_kernel(k, {"x": x, "out": out})
    want = x.view(np.uint8).reshape(T, nbytes).copy()
    want[np.arange(nbytes)[None, :] >= sizes[:, None]] = 0
    np.testing.assert_array_equal(out.view(np.uint8).reshape(T, nbytes), want)


def test_cp_async_zero_fill_reads_no_source():
    """src-size 0 with an out-of-range source address (a predicated-off tail): no read."""
    T = 32
    x = tensor("x", F16, 8)
    out = tensor("out", F16, T * 8, output=True)
    sm = shared("sm", F16, T * 8)
    body = [kir.Allocate(sm),
            kir.CpAsync(sm, mul(TX, 8), x.buffer, c(100000), 16, c(0)),
            kir.CpAsyncCommit(), kir.CpAsyncWait(0),
            loop("k", 8, [st(out.buffer, add(mul(TX, 8), v("k")),
                             ld(sm, add(mul(TX, 8), v("k"))))])]
    out_a = np.ones(T * 8, np.float16)
    run_kernel(kernel("zfill", [x, out], body, T), {"x": np.ones(8, np.float16),
                                                     "out": out_a})
    assert not out_a.any()


def groups_kernel(final_wait):
    """Each thread: copy A (group 0), commit, copy B (group 1), commit, wait_group 1,
    read A and B (B still pending), wait_group `final_wait`, read B again."""
    T = 32
    x = tensor("x", F32, 2 * T * 4)
    out = tensor("out", F32, 3 * T * 4, output=True)
    sm = shared("sm", F32, 2 * T * 4)

    def copy(s):
        return kir.CpAsync(sm, add(mul(TX, 4), s * T * 4), x.buffer,
                           add(mul(TX, 4), s * T * 4), 16, c(16))

    def read(s, o):
        return loop("k", 4, [st(out.buffer, add(add(mul(TX, 4), v("k")), o * T * 4),
                                ld(sm, add(add(mul(TX, 4), v("k")), s * T * 4)))])
    ca, cb = copy(0), copy(1)
    ra, rb, rb2 = read(0, 0), read(1, 1), read(1, 2)
    body = [kir.Allocate(sm),
            loop("k", 4, [st(sm, add(mul(TX, 4), v("k")), c(-1.0, F32)),
                          st(sm, add(add(mul(TX, 4), v("k")), T * 4), c(-1.0, F32))]),
            ca, kir.CpAsyncCommit(), cb, kir.CpAsyncCommit(), kir.CpAsyncWait(1),
            ra, rb, kir.CpAsyncWait(final_wait), rb2]
    return kernel("groups", [x, out], body, T), cb, rb, rb2


def test_wait_group_1_leaves_newest_group_pending_and_0_drains(rng):
    k, cb, rb, rb2 = groups_kernel(0)
    x = rng.integers(0, 100, size=256).astype(np.float32)
    out = np.zeros(3 * 128, np.float32)
    hazards = race(k, {"x": x, "out": out})
    np.testing.assert_array_equal(out[:128], x[:128])       # group 0 retired: visible
    np.testing.assert_array_equal(out[128:256], -1.0)       # group 1 pending: not yet
    np.testing.assert_array_equal(out[256:], x[128:])       # wait_group 0 drained it
    assert len(hazards) == 1
    h = hazards[0]
    assert h.kind == "async-pending"
    assert h.first == point(k, cb) and h.second == point(k, rb.body[0])
    assert h.buffer == "sm" and h.byte_range == (512, 516)
    assert h.threads == ((0, 0, 0), (0, 0, 0)) and h.iterations == ({}, {"k": 0})


def test_wait_never_retires_uncommitted_copies(rng):
    """A copy issued after the last commit stays pending through wait_group 0; it is read
    (async-pending), and the block ends with it pending ('copy never waited for')."""
    T = 32
    x = tensor("x", F32, T * 4)
    out = tensor("out", F32, T * 4, output=True)
    sm = shared("sm", F32, T * 4)
    cp = kir.CpAsync(sm, mul(TX, 4), x.buffer, mul(TX, 4), 16, c(16))
    rd = st(out.buffer, TX, ld(sm, mul(TX, 4)))
    body = [kir.Allocate(sm), st(sm, mul(TX, 4), c(7.0, F32)), kir.CpAsyncCommit(), cp,
            kir.CpAsyncWait(0), rd]
    k = kernel("uncommitted", [x, out], body, T)
    xv = np.arange(T * 4, dtype=np.float32)
    out_a = np.zeros(T * 4, np.float32)
    hazards = race(k, {"x": xv, "out": out_a})
    np.testing.assert_array_equal(out_a[:T], 7.0)            # the copy had not landed
    assert [(h.kind, h.second) for h in hazards] == [
        ("async-pending", point(k, rd)), ("async-pending", "end of the block")]
    assert "copy never waited for" in hazards[1].detail
    assert all(h.first == point(k, cp) for h in hazards)


def test_retired_copy_needs_a_barrier_for_other_threads(rng):
    """After the wait the copy is an ordinary write of its thread: another thread's read
    without a barrier is RAW; with a barrier, clean."""
    T = 32

    def build(barrier):
        x = tensor("x", F32, T * 4)
        out = tensor("out", F32, T, output=True)
        sm = shared("sm", F32, T * 4)
        body = [kir.Allocate(sm), kir.CpAsync(sm, mul(TX, 4), x.buffer, mul(TX, 4), 16,
                                              c(16)),
                kir.CpAsyncCommit(), kir.CpAsyncWait(0)] + ([kir.Barrier()] if barrier
                                                             else []) + [
            st(out.buffer, TX, ld(sm, mul(op("mod", add(TX, 1), T), 4)))]
        return kernel("visible", [x, out], body, T)
    xv = np.arange(T * 4, dtype=np.float32)
    hazards = race(build(False), {"x": xv, "out": np.zeros(T, np.float32)})
    assert [h.kind for h in hazards] == ["RAW"]
    out = np.zeros(T, np.float32)
    run_kernel(build(True), {"x": xv, "out": out})
    np.testing.assert_array_equal(out, xv.reshape(T, 4)[(np.arange(T) + 1) % T, 0])


# -- the regression (docs/story.md) ---------------------------------------------------------

KT, STAGES, TH = 3, 3, 64
STAGE = TH * 8                    # f16 elements per stage: 16 bytes per thread


def splitk_epilogue_kernel(drain):
    """A 3-stage cp.async pipeline over KT = 3 K tiles: the prologue issues tiles 0 and 1,
    iteration i computes on tile i and issues tile i + 2 (zero-filled, src-size 0, past
    the end), commits, and ends with wait_group 1 and a barrier. The epilogue writes the
    f32 accumulator tile to shared memory aliasing the operand stages (byte offset 0),
    and reads it back into global. Tile KT + 1's zero fill (stage 1, bytes 1024..2048)
    is still pending unless `drain` adds wait_group 0 before the epilogue's barrier."""
    x = tensor("x", F16, KT * STAGE)
    out = tensor("out", F32, TH * 8, output=True)
    stage = shared("stage", F16, STAGES * STAGE, offset=0)
    tile = shared("tile", F32, TH * 8, offset=0)               # aliases stages 0 and 1
    acc = local("acc", F32, 8)

    def issue(tile_no):
        real = op("lt", tile_no, KT)
        return kir.CpAsync(stage, add(mul(op("mod", tile_no, STAGES), STAGE), mul(TX, 8)),
                           x.buffer, add(mul(op("min", tile_no, c(KT - 1)), STAGE),
                                         mul(TX, 8)),
                           16, kir.Select(real, c(16), c(0), I32), "cg")
    neighbour = mul(op("mod", add(TX, 1), TH), 8)
    cp_loop = issue(add(v("i"), 2))
    body = [kir.Allocate(stage), kir.Allocate(tile), kir.Allocate(acc),
            loop("k", 8, [st(acc, v("k"), c(0.0, F32))]),
            issue(c(0)), kir.CpAsyncCommit(), issue(c(1)), kir.CpAsyncCommit(),
            kir.CpAsyncWait(1), kir.Barrier(),
            loop("i", KT, [
                loop("k", 8, [st(acc, v("k"), add(ld(acc, v("k")), kir.Cast(ld(
                    stage, add(add(mul(op("mod", v("i"), STAGES), STAGE), neighbour),
                               v("k"))), F32)))]),
                kir.Barrier(),
                cp_loop, kir.CpAsyncCommit(), kir.CpAsyncWait(1), kir.Barrier()])]
    if drain:
        body.append(kir.CpAsyncWait(0))
    epilogue_write = st(tile, add(mul(TX, 8), v("k")), ld(acc, v("k")))
    body += [kir.Barrier(),
             loop("k", 8, [epilogue_write]),
             kir.Barrier(),
             loop("k", 8, [st(out.buffer, add(mul(TX, 8), v("k")),
                              ld(tile, add(mul(TX, 8), v("k"))))])]
    return kernel("splitk_epilogue", [x, out], body, TH), cp_loop, epilogue_write


def splitk_reference(x):
    xs = x.astype(np.float32).reshape(KT, TH, 8)
    return xs[:, (np.arange(TH) + 1) % TH].sum(axis=0).ravel()


def test_regression_nvfuser_splitk_epilogue_hazard_kir(rng):
    x = rng.integers(-8, 9, size=KT * STAGE).astype(np.float16)
    want = splitk_reference(x)
    # the drain dropped: the hazard is reported and the late zero fill lands on the tile
    k, cp_loop, epi = splitk_epilogue_kernel(drain=False)
    outs = []
    for _ in range(2):                                  # deterministic
        out = np.full(TH * 8, np.nan, np.float32)
        hazards = race(k, {"x": x, "out": out})
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    assert {h.kind for h in hazards} == {"async-pending"}
    h = next(h for h in hazards if h.second == point(k, epi))
    assert h.first == point(k, cp_loop)
    assert h.buffer == "stage/tile" and 1024 <= h.byte_range[0] < 2048
    assert h.iterations == ({"i": KT - 1}, {"k": 0})
    assert h.threads == ((0, 0, 0), (32, 0, 0))      # the issuing and the epilogue thread
    bad = np.zeros(TH * 8, bool)
    bad[(1024 // 4):] = True                           # stage 1 = tile floats 256..511
    np.testing.assert_array_equal(outs[0][~bad], want[~bad])
    assert not outs[0][bad].any() and want[bad].any()  # zeros from the late zero fill
    # with wait_group 0 before the barrier: clean and correct
    k, _, _ = splitk_epilogue_kernel(drain=True)
    out = np.full(TH * 8, np.nan, np.float32)
    run_kernel(k, {"x": x, "out": out})
    np.testing.assert_array_equal(out, want)
