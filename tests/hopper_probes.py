"""Hardware probes of the sm_90 instructions: small hand-built kernels whose inputs are raw
shared-memory byte images and whose outputs are raw images again (shared memory after a
TMA load or stmatrix, every lane's accumulator registers after wgmma, a global tensor
after a TMA store), so that the GPU and the interpreter can be compared bit for bit, and
each against this module's own model of the PTX ISA layouts (`expected_*`), written
independently of the interpreter.

    tma_load_probe(...)    a TMA box (2-D or 3-D, any swizzle, coordinates as scalars so
                           the box may lie over the tensor's edge) lands on an mbarrier
                           (init, fence, barrier, arrive.expect_tx, try_wait.parity 0),
                           then a second box on the same barrier's next phase (parity 1);
                           both shared images are copied out
    tma_store_probe(...)   a raw image copied into shared memory, proxy fence, barrier,
                           one TMA store of the box (partly over the edge), bulk commit and
                           wait; the output tensor is what the GPU wrote over its fill
    wgmma_probe(...)       raw A and B images in shared memory, wgmma over two k-steps
                           through matrix descriptors of a layout (K- or MN-major, any
                           swizzle), or A from registers; every lane's accumulators out
    stmatrix_probe(...)    every lane's fragment from global memory, stmatrix to permuted
                           row addresses, the shared image out
    roles_probe()          two warp groups: setmaxnreg dec / inc, bar.sync and bar.arrive
                           on named barriers, plain mbarrier arrivals of every thread
"""

import numpy as np

import kir_examples as ex
from fuserir.dtypes import DataType
from fuserir.instructions import SWIZZLE_BYTES, WGMMA, swizzle
from lowering import kir

I32, I64, F16, BF16, F32 = DataType.i32, DataType.i64, DataType.f16, DataType.bf16, DataType.f32
THREADS = 128
c = ex.const


def _tid0():
    return ex.binop("eq", ex.tid(), c(0))


def _copy(dst, dst_base, src, src_base, count, var):
    """Every thread copies elements t, t + 128, ... below `count`."""
    u = kir.Var(var, I32)
    i = ex.add(ex.mul(u, c(THREADS)), ex.tid())
    copy = kir.Store(dst, ex.add(i, c(dst_base)) if dst_base else i,
                     kir.Load(src, ex.add(i, c(src_base)) if src_base else i))
    if count % THREADS:
        copy = kir.IfThenElse(ex.lt(i, c(count)), [copy])
    return kir.ForLoop(u, c(-(-count // THREADS)), [copy])


def _shared(name, dtype, size, offset):
    return kir.Buffer(name, dtype, kir.Memory.shared, size=c(size), byte_offset=c(offset),
                      tensor=name)


def _kernel(name, tensors, scalars, body, maps=()):
    k = kir.Kernel(name, tensors, scalars, body, ex.launch([c(1)], [c(THREADS)]),
                   tensor_maps=list(maps))
    return ex.finish(k)


# ---------------------------------------------------------------------------------------
# TMA
# ---------------------------------------------------------------------------------------


def _map_over(t, rows, cols, box, mode, rank):
    """A tensor map over the row-major 2-D tensor `t` [rows, cols]: rank 2 is (cols, rows);
    rank 3 views it as (64 columns, rows, cols / 64 chunks)."""
    if rank == 2:
        return kir.TensorMap(f"{t.buffer.name}_map", t, [c(cols), c(rows)], [t.strides[0]],
                             tuple(box), mode)
    return kir.TensorMap(f"{t.buffer.name}_map", t, [c(64), c(rows), c(cols // 64)],
                         [t.strides[0], c(64)], tuple(box), mode)


def box_elements(box):
    return int(np.prod(box))


def tma_load_probe(rows, cols, box, mode, rank=2, dtype=F16):
    """out1 / out2: the shared images of the box at (c0, c1[, c2]) and at c0 + box[0]."""
    n = box_elements(box)
    x = ex.tensor("x", dtype, [c(rows), c(cols)])
    out1 = ex.tensor("out1", dtype, [c(n)], is_output=True)
    out2 = ex.tensor("out2", dtype, [c(n)], is_output=True)
    coords = [ex.scalar(f"c{d}") for d in range(rank)]
    tmap = _map_over(x, rows, cols, box, mode, rank)
    bar = _shared("bar", I64, 1, 0)
    tile = _shared("tile", dtype, n, 1024)
    at = [p.var for p in coords]

    def load(first):
        cs = list(at)
        if not first:
            cs[0] = ex.add(cs[0], c(box[0]))
        cs += [None] * (3 - rank)
        return kir.IfThenElse(_tid0(), [
            kir.MbarrierArrive(bar, c(0), tx_bytes=c(tmap.box_bytes)),
            kir.TmaLoad(tile, c(0), tmap, cs[0], cs[1], cs[2], bar, c(0))])

    body = [
        kir.Allocate(bar), kir.Allocate(tile),
        kir.IfThenElse(_tid0(), [kir.MbarrierInit(bar, c(0), c(1)), kir.FenceMbarrierInit()]),
        kir.Barrier(),
        load(True),
        kir.MbarrierWait(bar, c(0), c(0)),
        _copy(out1.buffer, 0, tile, 0, n, "u"),
        kir.Barrier(),
        load(False),
        kir.MbarrierWait(bar, c(0), c(1)),
        _copy(out2.buffer, 0, tile, 0, n, "v"),
    ]
    return _kernel(f"tma_load_{rank}d_{mode}", [x, out1, out2], coords, body, [tmap])


def _box_values(x, rows, cols, box, rank, at):
    """The box's elements in box order (dim 0 fastest), zeros outside the tensor."""
    if rank == 2:
        b0, b1 = box
        i = at[1] + np.arange(b1)[:, None]
        j = at[0] + np.arange(b0)[None, :]
        chunk = None
    else:
        b0, b1, b2 = box
        i = at[1] + np.arange(b1)[None, :, None]
        chunk = at[2] + np.arange(b2)[:, None, None]
        j = at[0] + np.arange(b0)[None, None, :]
    ok = (i >= 0) & (i < rows) & (j >= 0) & (j < (cols if rank == 2 else 64))
    if chunk is not None:
        ok = ok & (chunk >= 0) & (chunk < cols // 64)
        j = chunk * 64 + j
    vals = np.where(ok, x[np.clip(i, 0, rows - 1), np.clip(j, 0, cols - 1)], 0)
    return vals.astype(x.dtype).ravel(), ok


def swizzled_image(values, mode, base=1024):
    """The shared image of `values` (box order) written at pool byte `base` with `mode`."""
    raw = np.ascontiguousarray(values).view(np.uint8)
    out = np.zeros_like(raw)
    logical = base + np.arange(len(raw))
    out[swizzle(logical, mode) - base] = raw
    return out.view(values.dtype)


def expected_tma_load(x, box, mode, rank, at):
    rows, cols = x.shape
    first, _ = _box_values(x, rows, cols, box, rank, at)
    second_at = (at[0] + box[0],) + tuple(at[1:])
    second, _ = _box_values(x, rows, cols, box, rank, second_at)
    return swizzled_image(first, mode), swizzled_image(second, mode)


def tma_store_probe(rows, cols, box, mode, dtype=F16):
    """y (filled by the caller) after a TMA store of the shared image of `src` at (c0, c1)."""
    n = box_elements(box)
    src = ex.tensor("src", dtype, [c(n)])
    y = ex.tensor("y", dtype, [c(rows), c(cols)], is_output=True)
    c0, c1 = ex.scalar("c0"), ex.scalar("c1")
    tmap = _map_over(y, rows, cols, box, mode, 2)
    tile = _shared("tile", dtype, n, 1024)
    body = [
        kir.Allocate(tile),
        _copy(tile, 0, src.buffer, 0, n, "u"),
        kir.FenceProxyAsync(),
        kir.Barrier(),
        kir.IfThenElse(_tid0(), [kir.TmaStore(tile, c(0), tmap, c0.var, c1.var),
                                 kir.BulkCommit(), kir.BulkWait(0)]),
    ]
    return _kernel(f"tma_store_{mode}", [src, y], [c0, c1], body, [tmap])


def expected_tma_store(image, y, box, mode, at):
    """y after the store: the box's elements (unswizzled from `image`) where inside."""
    raw = np.ascontiguousarray(image).view(np.uint8)
    logical = 1024 + np.arange(len(raw))
    values = raw[swizzle(logical, mode) - 1024].view(image.dtype)
    out = y.copy()
    b0, b1 = box
    i = at[1] + np.arange(b1)[:, None]
    j = at[0] + np.arange(b0)[None, :]
    ok = (i >= 0) & (i < y.shape[0]) & (j >= 0) & (j < y.shape[1])
    ii, jj = np.broadcast_to(i, (b1, b0)), np.broadcast_to(j, (b1, b0))
    out[ii[ok], jj[ok]] = values.reshape(b1, b0)[ok]
    return out


# ---------------------------------------------------------------------------------------
# wgmma
# ---------------------------------------------------------------------------------------

K = 32       # two k-steps of 16


class OperandLayout:
    """A wgmma operand of `rows` rows (M for A, N for B) and K = 32 columns, laid out in a
    shared image of `elements` 16-bit values: `offset(r, k)` is the byte of element (r, k)
    before the swizzle, `start(step)` the element where k-step `step` begins (its
    descriptor's start), `layout` the descriptor's LBO / SBO / swizzle. The PTX ISA's
    canonical layouts (CUTLASS's GMMA layouts), written independently of the interpreter."""

    def __init__(self, major, mode, rows):
        self.major, self.mode, self.rows = major, mode, rows
        span = SWIZZLE_BYTES[mode]
        if major == "K" and mode == "none":
            lbo, sbo = 128, 128 * (K // 8)
            self.offset = lambda r, k: (r % 8) * 16 + (r // 8) * sbo + (k % 8) * 2 + (k // 8) * lbo
            self.nbytes = rows * K * 2
            self._start = lambda s: 2 * lbo * s
        elif major == "K":
            per = span // 2                         # k elements per swizzled row
            lbo, sbo = 16, 8 * span
            block = -(-rows // 8) * sbo             # bytes of one K block of `per` elements
            self.offset = lambda r, k: ((k // per) * block + (r // 8) * sbo + (r % 8) * span
                                        + (k % per) * 2)
            self.nbytes = -(-K // per) * block
            self._start = lambda s: (16 * s // per) * block + (16 * s % per) * 2
        elif mode == "none":
            sbo = 128
            lbo = 128 * -(-rows // 8)
            self.offset = lambda r, k: (r % 8) * 2 + (r // 8) * sbo + (k % 8) * 16 + (k // 8) * lbo
            self.nbytes = (K // 8) * lbo
            self._start = lambda s: 2 * lbo * s
        else:
            t = span // 2                            # MN elements per swizzled row
            lbo = 8 * span
            sbo = lbo * -(-rows // t)
            self.offset = lambda r, k: ((r % t) * 2 + (r // t) * lbo + (k % 8) * span
                                        + (k // 8) * sbo)
            self.nbytes = (K // 8) * sbo
            self._start = lambda s: 2 * sbo * s
        self.nbytes = -(-self.nbytes // 1024) * 1024
        self.elements = self.nbytes // 2
        self.layout = kir.MatrixLayout(lbo, sbo, mode)

    def start(self, step):
        return self._start(step) // 2

    def matrix(self, image, base):
        """The rows x K matrix the image holds at pool byte `base` (1024-aligned)."""
        raw = np.ascontiguousarray(image).view(np.uint16)
        r, k = np.meshgrid(np.arange(self.rows), np.arange(K), indexing="ij")
        physical = swizzle(base + self.offset(r, k), self.mode) - base
        return raw[physical // 2].view(image.dtype)


def wgmma_probe(n, dtype=F16, a_major="K", b_major="K", mode="128B", register_a=False,
                a_mode=None):
    """d[t, j]: thread t's accumulator element j after two k-steps of
    D = A (64 x 32) x B (32 x n), A and B from raw shared images (A from a[t, 0..15]:
    two steps of 8 registers each, when register_a)."""
    a_lay = OperandLayout(a_major, a_mode or mode, 64)
    b_lay = OperandLayout(b_major, mode, n)
    a_img = ex.tensor("a_img", dtype, [c(a_lay.elements)])
    b_img = ex.tensor("b_img", dtype, [c(b_lay.elements)])
    a_reg = ex.tensor("a_reg", dtype, [c(THREADS), c(16)])
    d_out = ex.tensor("d", F32, [c(THREADS), c(n // 2)], is_output=True)
    a_s = _shared("a_s", dtype, a_lay.elements, 0)
    b_s = _shared("b_s", dtype, b_lay.elements, a_lay.nbytes)
    acc = kir.Buffer("acc", F32, kir.Memory.local, size=c(n // 2))
    frag = kir.Buffer("afrag", dtype, kir.Memory.local, size=c(16))
    j = kir.Var("j", I32)
    body = [kir.Allocate(a_s), kir.Allocate(b_s), kir.Allocate(acc), kir.Allocate(frag),
            _copy(b_s, 0, b_img.buffer, 0, b_lay.elements, "ub")]
    if register_a:
        body.append(kir.ForLoop(j, c(16), [kir.Store(frag, j, ex.load(a_reg, [ex.tid(), j]))],
                                kind="unroll"))
    else:
        body.append(_copy(a_s, 0, a_img.buffer, 0, a_lay.elements, "ua"))
    body += [kir.FenceProxyAsync(), kir.Barrier(), kir.WgmmaFence()]
    for step in range(K // 16):
        a_src = (frag, c(8 * step), None, False) if register_a else \
            (a_s, c(a_lay.start(step)), a_lay.layout, a_major == "MN")
        body.append(kir.Wgmma(
            d=acc, d_index=c(0), a=a_src[0], a_index=a_src[1], b=b_s,
            b_index=c(b_lay.start(step)), n=n, dtype=dtype, a_layout=a_src[2],
            b_layout=b_lay.layout, trans_a=a_src[3], trans_b=b_major == "MN",
            accumulate=kir.Const(step > 0, DataType.bool)))
    j2 = kir.Var("j2", I32)
    body += [kir.WgmmaCommit(), kir.WgmmaWait(0),
             kir.ForLoop(j2, c(n // 2), [ex.store(d_out, [ex.tid(), j2], kir.Load(acc, j2))])]
    name = (f"wgmma_n{n}_{dtype}_{'reg' if register_a else a_major}"
            f"{(a_mode or mode) if not register_a else ''}_{b_major}{mode}")
    return _kernel(name, [a_img, b_img, a_reg, d_out], [], body), a_lay, b_lay


def expected_wgmma(n, a_lay, b_lay, a_img, b_img, a_reg=None):
    """d[t, j] from the images by this module's layouts and the PTX accumulator figure."""
    if a_reg is None:
        A = a_lay.matrix(a_img, 0).astype(np.float64)               # 64 x 32
    else:
        frag = WGMMA.a()
        A = np.zeros((64, K))
        lane = np.arange(THREADS)[:, None]
        for step in range(2):
            r, col = frag.at(lane, np.arange(8)[None, :])
            A[r, col + 16 * step] = a_reg[:, 8 * step:8 * step + 8].astype(np.float64)
    Bt = b_lay.matrix(b_img, a_lay.nbytes).astype(np.float64)        # n x 32
    D = (A @ Bt.T).astype(np.float32)
    r, col = WGMMA.d(n).at(np.arange(THREADS)[:, None], np.arange(n // 2)[None, :])
    return D[r, col]


# ---------------------------------------------------------------------------------------
# stmatrix
# ---------------------------------------------------------------------------------------


def stmatrix_row(num, matrix, row):
    """Where (in elements, per warp) row `row` of matrix `matrix` is stored: rows permuted
    by 3 * (8 * matrix + row) mod 8 * num, 8 elements (16 bytes) each."""
    return (3 * (8 * matrix + row)) % (8 * num) * 8


def stmatrix_probe(num, trans, dtype=F16):
    """out: the shared image after each warp w stmatrix'es its lanes' fragments src[t, :]
    to rows at w * 64 * num + stmatrix_row(num, l // 8 % num, l % 8)."""
    size = 4 * 64 * num
    src = ex.tensor("src", dtype, [c(THREADS), c(2 * num)])
    out = ex.tensor("out", dtype, [c(size)], is_output=True)
    ts = _shared("ts", dtype, size, 0)
    frag = kir.Buffer("frag", dtype, kir.Memory.local, size=c(2 * num))
    j = kir.Var("j", I32)
    lane = ex.binop("mod", ex.tid(), c(32))
    warp = ex.binop("div", ex.tid(), c(32))
    matrix = ex.binop("mod", ex.binop("div", lane, c(8)), c(num))
    row = ex.binop("mod", lane, c(8))
    place = ex.mul(ex.binop("mod", ex.mul(c(3), ex.add(ex.mul(c(8), matrix), row)),
                            c(8 * num)), c(8))
    address = ex.add(ex.mul(warp, c(64 * num)), place)
    body = [kir.Allocate(ts), kir.Allocate(frag),
            kir.ForLoop(j, c(2 * num), [kir.Store(frag, j, ex.load(src, [ex.tid(), j]))],
                        kind="unroll"),
            kir.StMatrix(ts, address, frag, c(0), num=num, trans=trans),
            kir.Barrier(),
            _copy(out.buffer, 0, ts, 0, size, "u")]
    return _kernel(f"stmatrix_x{num}{'_trans' if trans else ''}", [src, out], [], body)


def expected_stmatrix(src, num, trans):
    """The image by the PTX ISA's stmatrix figure: register i of lane l holds (row l >> 2,
    columns 2(l & 3), +1) of matrix i (.trans: rows 2(l & 3), +1 of column l >> 2)."""
    out = np.zeros(4 * 64 * num, src.dtype)
    for t in range(THREADS):
        w, lane = divmod(t, 32)
        for i in range(num):
            for h in range(2):
                if trans:
                    r, col = 2 * (lane % 4) + h, lane // 4
                else:
                    r, col = lane // 4, 2 * (lane % 4) + h
                out[w * 64 * num + stmatrix_row(num, i, r) + col] = src[t, 2 * i + h]
    return out


# ---------------------------------------------------------------------------------------
# warp-group roles: setmaxnreg, named barriers, plain mbarrier arrivals
# ---------------------------------------------------------------------------------------


def roles_probe():
    """Two warp groups (256 threads). Warp group 0 gives registers back (setmaxnreg.dec
    40), warp group 1 takes them (setmaxnreg.inc 232); every thread stores x[t] * 2, a
    bar.sync 1, 256 orders the stores before y[t] = buf[255 - t]; warp group 1 then stores
    x[t] + 1 and signals with bar.arrive 2, 256, on which warp group 0 waits (bar.sync 2,
    256) before z[t] = buf2[t]; at the end every thread arrives on an mbarrier of count
    256 and waits for its phase 0, then done[t] = 1."""
    n = 2 * THREADS
    x = ex.tensor("x", F32, [c(n)])
    y = ex.tensor("y", F32, [c(n)], is_output=True)
    z = ex.tensor("z", F32, [c(THREADS)], is_output=True)
    done = ex.tensor("done", I32, [c(n)], is_output=True)
    bar = _shared("bar", I64, 1, 0)
    buf = _shared("buf", F32, n, 16)
    buf2 = _shared("buf2", F32, THREADS, 16 + 4 * n)
    t = ex.tid()
    first = ex.lt(t, c(THREADS))
    second = ex.binop("ge", t, c(THREADS))
    body = [
        kir.Allocate(bar), kir.Allocate(buf), kir.Allocate(buf2),
        kir.IfThenElse(_tid0(), [kir.MbarrierInit(bar, c(0), c(n)), kir.FenceMbarrierInit()]),
        kir.Barrier(),
        kir.IfThenElse(first, [kir.SetMaxNReg(40, increase=False)],
                       [kir.SetMaxNReg(232, increase=True)]),
        kir.Store(buf, t, ex.mul(ex.load(x, [t]), c(2.0, F32))),
        kir.NamedBarrier(1, n),
        ex.store(y, [t], kir.Load(buf, ex.sub(c(n - 1), t))),
        kir.IfThenElse(second, [
            kir.Store(buf2, ex.sub(t, c(THREADS)), ex.add(ex.load(x, [t]), c(1.0, F32))),
            kir.NamedBarrier(2, n, arrive_only=True)]),
        kir.IfThenElse(first, [kir.NamedBarrier(2, n), ex.store(z, [t], kir.Load(buf2, t))]),
        kir.MbarrierArrive(bar, c(0)),
        kir.MbarrierWait(bar, c(0), c(0)),
        ex.store(done, [t], c(1)),
    ]
    k = kir.Kernel("roles", [x, y, z, done], [], body, ex.launch([c(1)], [c(n)]))
    return ex.finish(k)


def expected_roles(x):
    n = 2 * THREADS
    return {"y": (x * 2)[::-1].astype(np.float32), "z": (x[THREADS:] + 1).astype(np.float32),
            "done": np.ones(n, np.int32)}
