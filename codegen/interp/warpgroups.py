"""Hopper's register-fragment instructions: wgmma.mma_async with its fence, commit and
wait groups, setmaxnreg, and stmatrix, by their descriptors (fuserir.instructions: WGMMA,
STMATRIX, SETMAXNREG_COUNTS) and the operand addresses of lowering/kir/hopper.py's header.

  * Warp groups are WARPGROUP = 128 consecutive linear ids from a multiple of 128. Wgmma,
    WgmmaFence, WgmmaCommit, WgmmaWait and SetMaxNReg are warp-group collective: a group
    with some but not all threads active is a "warp-divergence" hazard (execution's
    _check_warps with the group size; missing threads' fragments count as 0).
  * Wgmma issue: the operand start indices and `accumulate` are evaluated (uniform over
    the warp group, else InterpError), the shared operands' element addresses computed
    and bounds-checked (out-of-bounds elements reported, read as 0), and one pending op
    per warp group recorded with the group's commit count as its group; at issue
    async_proxy.py checks the wgmma.fence ("wgmma-fence"), that the shared operands'
    generic writes are proxy-fenced ("proxy-fence"), and holds the operands' bytes (a
    write to them before the wait is "async-pending"), and while the op is pending the
    group's Loads and Stores of its accumulator and register-A elements (and stmatrix
    sources) are "wgmma-registers". WgmmaCommit
    increments the count; WgmmaWait n retires, in issue order, every pending op of the
    waiting groups whose group < committed - n. Only then are its operands read (shared
    A / B through _shared_read, element i of an operand attributed to the i % 128-th
    thread of the warp group; register A and the accumulators from the registers as they
    are now) and D written, so a read of D before the wait sees the old values and a
    write to the operands between issue and wait changes the result. Reports of the
    retiring reads name the Wgmma and its issue iterations. Ops still pending when the
    block ends are "async-pending" (second = "end of the block") and retire then.
  * Math per warp group: A (64 x 16), B (16 x n, from B^T's n x 16 rows) and C gathered
    by WGMMA.a() / WGMMA.d(n) over the group's 128 lanes, D = A @ B (+ C) in f64 rounded
    once to f32 (exact on integer-valued data), scattered by WGMMA.d(n).
  * Shared operands: element (row, k) at pool byte swizzle(start + f(row, k), mode) (f:
    the header's formulas; the pool base is 1024-aligned, the interpreter's is 0), read
    as raw 16-bit bits then taken as the instruction's dtype. Required of the start's
    pool byte: 16-byte aligned, and for a swizzled layout its bits 7 .. 7+b-1 (the row
    phase of the XOR pattern, which repeats every 8 spans) zero, since kir.Wgmma carries
    no descriptor base offset (0), which PTX needs otherwise; a start inside a swizzled
    row (K-major: + 32 bytes per k block) is allowed. The descriptor's fields are checked
    by MatrixDescriptor.encode.
  * WgmmaFence has no data effect (a collective check; it records the group's fence for
    async_proxy.py); SetMaxNReg checks its count against SETMAXNREG_COUNTS and has no
    data effect.
  * StMatrix (warp collective, _check_warps) is ldmatrix's inverse: register i of lane l
    holds row l>>2, columns 2(l&3), 2(l&3)+1 of matrix i (.trans: rows 2(l&3), 2(l&3)+1,
    column l>>2); lanes < 8*num give 16-byte-aligned row addresses (lane 8i+r: row r of
    matrix i) and write their rows through _shared_write (missing lanes' registers as 0).

It sits beside tensor_cores.py (whose _span, _fragment and _row_sites it uses through
`self`), above
race_detector.py, whose shadow checks every shared access here; the pending ops and the
commit counts are made in _Block.__init__.
"""

import numpy as np

from codegen.errors import Hazard
from codegen.interp.base import _F32, _F64, InterpError, _point, _truth
from fuserir.instructions import (SETMAXNREG_COUNTS, STMATRIX, SWIZZLE_BYTES, WARPGROUP,
                                  WGMMA, MatrixDescriptor, swizzle)
from lowering import kir


class _Operand:
    """A shared operand of one pending wgmma: its layout, element indices [rows, k] into
    the buffer, the in-bounds mask (None: all) and the reading thread of each element."""

    def __init__(self, lay, elem, ok, readers):
        self.lay, self.elem, self.ok, self.readers = lay, elem, ok, readers


class _Pending:
    """One warp group's issued wgmma: statement, issue iterations, the group's active
    threads, its commit group, accumulate, and its operands: D's (local array, positions
    [threads, n/2], in-bounds mask), A as registers (the same triple) or an _Operand, B
    an _Operand."""

    def __init__(self, stmt, iters, group, tids, gid, accumulate, d, a, b):
        self.stmt, self.iters, self.group, self.tids = stmt, iters, group, tids
        self.gid, self.accumulate, self.d, self.a, self.b = gid, accumulate, d, a, b
        self.tid = int(tids[0])
        self.held = None          # the shared grains it holds (async_proxy.py)


class _Warpgroups:
    """The mixin of _Block (machine.py) that runs Wgmma, WgmmaFence, WgmmaCommit,
    WgmmaWait, SetMaxNReg and StMatrix, and retires what is pending at the block's end."""

    def _collective(self, act, what):
        self._check_warps(act, "warp-divergence", "wgmma", what, size=WARPGROUP)

    def _wgmma(self, s, act):
        """Issue: check, evaluate the starts and `accumulate`, record a _Pending per warp
        group; the reads, the math and the write happen when it retires (_retire)."""
        n = int(s.n)
        if s.dtype not in WGMMA.inputs:
            raise InterpError(f"wgmma input dtype {s.dtype} is not f16 or bf16"
                              f"{self.where()}")
        if n not in WGMMA.widths:
            raise InterpError(f"wgmma m64n{n}k16: n must be a multiple of 8 from 8 to 256"
                              f"{self.where()}")
        if s.d.memory is not kir.Memory.local or s.d.dtype is not WGMMA.accumulator:
            raise InterpError(f"wgmma accumulator {s.d.name} must be a local f32 buffer"
                              f"{self.where()}")
        register_a = s.a.memory is kir.Memory.local
        if register_a and (s.a_layout is not None or s.trans_a):
            raise InterpError(f"wgmma register A {s.a.name} takes no layout and no "
                              f"trans_a{self.where()}")
        self._collective(act, f"wgmma m64n{n}k16.{s.dtype}")
        d = self._fragment(s.d, s.d_index, act, n // 2, 4, "wgmma")
        a = (self._fragment(s.a, s.a_index, act, WGMMA.a().count, 2, "wgmma") if register_a
             else self._starts(s.a, s.a_index, s.a_layout, act, "A"))
        b = self._starts(s.b, s.b_index, s.b_layout, act, "B")
        acc = (np.ones(len(act), bool) if s.accumulate is None else
               np.broadcast_to(_truth(self.ev(s.accumulate, act)), act.shape))
        groups = act // WARPGROUP
        for g in np.unique(groups):
            sel = groups == g
            tids = act[sel]
            accumulate = self._uniform(acc, sel, g, "accumulate")

            def part(triple):
                arr, pos, ok = triple
                return arr, pos[sel], None if ok is None else ok[sel]
            a_g = (part(a) if register_a else
                   self._operand(s.a, s.a_layout, s.trans_a, WGMMA.m, tids, a, sel, g, "A"))
            b_g = self._operand(s.b, s.b_layout, s.trans_b, n, tids, b, sel, g, "B")
            op = _Pending(s, self.iters, int(g), tids, int(self.wgmma_committed[g]),
                          bool(accumulate), part(d), a_g, b_g)
            regs = [(s.d, op.d[1], op.d[2], "accumulator")]
            if register_a:
                regs.append((s.a, op.a[1], op.a[2], "register-A"))
            self._check_wgmma_fence(s, int(g), tids, regs)
            held = []
            for o, w in ((a_g, "A"), (b_g, "B")):
                if not isinstance(o, _Operand):
                    continue
                flat, readers = o.elem.ravel(), o.readers
                if o.ok is not None:
                    okf = o.ok.ravel()
                    flat, readers = flat[okf], readers[okf]
                self._check_proxy_fenced(o.lay, readers, flat, f"the wgmma's {w} operand")
                held.append(self._hold(o.lay, readers, flat))
            op.held = np.unique(np.concatenate(held))
            self.wgmmas.append(op)

    def _starts(self, buf, index, layout, act, what):
        if buf.memory is not kir.Memory.shared or buf.dtype.itemsize != 2 or layout is None:
            raise InterpError(f"wgmma {what} operand {buf.name} must be a 16-bit shared "
                              f"buffer with a layout (A may be a local one){self.where()}")
        if layout.swizzle not in SWIZZLE_BYTES:
            raise InterpError(f"wgmma {what} swizzle {layout.swizzle!r} is not one of "
                              f"{', '.join(SWIZZLE_BYTES)}{self.where()}")
        return self._index(self.ev(index, act), len(act))

    def _uniform(self, values, sel, g, what):
        v = values[sel]
        if not (v == v[0]).all():
            raise InterpError(f"wgmma {what} is not uniform over warp group {int(g)}"
                              f"{self.where()}")
        return v[0]

    def _operand(self, buf, layout, trans, rows, tids, starts, sel, g, what):
        """The _Operand of one warp group: its start checked (see the module header), the
        element indices of the header's addresses, the out-of-bounds ones reported."""
        lay = self._layout(buf)
        start = int(self._uniform(starts, sel, g, f"{what} start index"))
        byte = lay.offset + start * 2
        span = SWIZZLE_BYTES[layout.swizzle]
        if byte % 16 or (byte // 128) % (span // 16):
            need = ("16-byte aligned" if layout.swizzle == "none" else
                    f"16-byte aligned in the first 128 bytes of a {8 * span}-byte "
                    f"{layout.swizzle} pattern (its row phase must be 0: no base offset)")
            raise InterpError(f"wgmma {what} start {buf.name}[{start}] (pool byte {byte}) "
                              f"is not {need}{self.where()}")
        try:
            MatrixDescriptor(byte, layout.leading, layout.stride, layout.swizzle).encode()
        except ValueError as e:
            raise InterpError(f"wgmma {what} operand {buf.name}: {e}"
                              f"{self.where()}") from None
        phys = swizzle(byte + layout.offsets(trans, rows), layout.swizzle)
        elem = (phys - lay.offset) // 2
        readers = tids[np.arange(elem.size) % len(tids)]
        ok = self._check(lay.name, elem.ravel(), ((elem >= 0) & (elem < lay.size)).ravel(),
                         readers, lambda: f"outside {lay.name}[0, {lay.size}) (a wgmma "
                                          f"{what} element)", lay)
        if ok is not None:
            elem = np.clip(elem, 0, lay.size - 1)
            ok = ok.reshape(elem.shape)
        return _Operand(lay, elem, ok, readers)

    def _wgmma_fence(self, s, act):
        self._collective(act, "wgmma.fence")
        self.wg_fence[np.unique(act // WARPGROUP)] = len(self.events)

    def _wgmma_commit(self, s, act):
        self._collective(act, "wgmma.commit_group")
        self.wgmma_committed[np.unique(act // WARPGROUP)] += 1

    def _wgmma_wait(self, s, act):
        """Retire, in issue order, the waiting groups' ops older than the n newest
        committed groups."""
        self._collective(act, f"wgmma.wait_group {int(s.n)}")
        groups = np.unique(act // WARPGROUP)
        limit = self.wgmma_committed - int(s.n)
        keep = []
        for op in self.wgmmas:
            if op.group in groups and op.gid < limit[op.group]:
                self._retire(op)
            else:
                keep.append(op)
        self.wgmmas = keep

    def _registers(self, triple, tids, view):
        arr, pos, ok = triple
        v = arr.view(view)[tids[:, None], pos].astype(_F64)
        return v if ok is None else np.where(ok, v, 0.0)

    def _read(self, opnd, dtype):
        """An _Operand's values now (f64), its reads through the race detector."""
        lay, flat = opnd.lay, opnd.elem.ravel()
        vals = self._view(lay).view(np.uint16)[flat]
        if opnd.ok is None:
            self._shared_read(lay, opnd.readers, flat)
        else:
            okf = opnd.ok.ravel()
            self._shared_read(lay, opnd.readers[okf], flat[okf])
            vals = np.where(okf, vals, 0).astype(np.uint16)
        return vals.view(dtype).astype(_F64).reshape(opnd.elem.shape)

    def _retire(self, op):
        """Read the operands, D = A @ B (+ C), write D: as the op's statement."""
        s = op.stmt
        saved = self.stmt, self.iters
        self.stmt, self.iters = s, op.iters
        self._release(op.held)
        dt = s.dtype.numpy
        lane = (op.tids % WARPGROUP)[:, None]
        if isinstance(op.a, _Operand):
            A = self._read(op.a, dt)
        else:
            A = np.zeros((WGMMA.m, WGMMA.k), _F64)
            row, col = WGMMA.a().at(lane, np.arange(WGMMA.a().count))
            A[row, col] = self._registers(op.a, op.tids, dt)
        B = self._read(op.b, dt).T
        frag = WGMMA.d(int(s.n))
        row, col = frag.at(lane, np.arange(frag.count))
        C = np.zeros((WGMMA.m, int(s.n)), _F64)
        if op.accumulate:
            C[row, col] = self._registers(op.d, op.tids, _F32)
        D = (A @ B + C).astype(_F32)[row, col]
        arr, pos, ok = op.d
        rows_t = np.broadcast_to(op.tids[:, None], pos.shape)
        if ok is not None:
            rows_t, pos, D = rows_t[ok], pos[ok], D[ok]
        arr.view(_F32)[rows_t, pos] = D
        self.stmt, self.iters = saved

    def finish(self):
        """The end of the block: wgmmas no wait retired are reported and retire now; then
        the next room's end (cp.async's, through the mixin order of _Block)."""
        for op in self.wgmmas:
            t = self.interp.coords(op.tids[0])
            self.interp.add(("async-pending", op.stmt.label, "end"), lambda: Hazard(
                kind="async-pending", buffer=op.stmt.d.name, first=_point(op.stmt),
                second="end of the block", threads=(t, t),
                iterations=(dict(op.iters), {}), block=self.bidx,
                detail=f"wgmma never waited for: warp group {op.group} ends with this "
                       f"wgmma pending (no wgmma.wait_group retires it); it retires at "
                       f"the end of the block"))
        for op in self.wgmmas:
            self._retire(op)
        self.wgmmas = []
        super().finish()

    def _setmaxnreg(self, s, act):
        self._collective(act, f"setmaxnreg {int(s.count)}")
        if int(s.count) not in SETMAXNREG_COUNTS:
            raise InterpError(f"setmaxnreg count {int(s.count)} is not a multiple of 8 "
                              f"from 24 to 256{self.where()}")

    def _stmatrix(self, s, act):
        """Per warp: the lanes' registers make num 8x8 matrices (ldmatrix's map, read
        backwards); lanes 0..8*num-1 write the 16-byte row their address names."""
        num, lay = self._matrix_buffer(s, act, STMATRIX, s.dst, "destination")
        n = len(act)
        lane = act & 31
        width = STMATRIX.matrix
        arr, pos, ok = self._fragment(s.src, s.src_index, act, 2 * num, 2, "stmatrix")
        self._register_access(s.src, act, pos)        # registers of a pending wgmma?
        regs = arr.view(np.uint16)[act[:, None], pos]
        if ok is not None:
            regs = np.where(ok, regs, 0).astype(np.uint16)
        # matrix i's row r is to be written by lane 8i + r: rows by thread id
        rows = np.zeros(((int(act[-1]) >> 5) * 32 + 32, width), np.uint16)
        row, col = STMATRIX.register(lane[:, None, None], trans=s.trans)
        base = (act - lane)[:, None, None]
        i = np.arange(num)[None, :, None]
        two = np.arange(2)[None, None, :]
        regs = regs.reshape(n, num, 2)
        if s.trans:
            rows[base + width * i + row + two, col] = regs
        else:
            rows[base + width * i + row, col + two] = regs
        sa, pos, ok = self._row_sites(s, lay, act, "stmatrix", "a stmatrix row")
        if not len(sa):
            return
        t8 = np.repeat(sa, width)
        flat = pos.ravel()
        vals = rows[sa].ravel()
        if ok is not None:
            okf = ok.ravel()
            t8, flat, vals = t8[okf], flat[okf], vals[okf]
        self._shared_write(lay, t8, flat)
        self._view(lay).view(np.uint16)[flat] = vals
        if self.overlap:                          # a pending cp.async lands on top of it
            self._land_copies(events=self.overlap)
            self.overlap = None

    # the statements this room runs: leaves run to completion; compound ones are
    # generators (they run bodies, yield a Wait, or offer a switch point)
    LEAF_STATEMENTS = {kir.Wgmma: _wgmma, kir.WgmmaFence: _wgmma_fence,
                       kir.WgmmaCommit: _wgmma_commit, kir.WgmmaWait: _wgmma_wait,
                       kir.SetMaxNReg: _setmaxnreg, kir.StMatrix: _stmatrix}
    COMPOUND_STATEMENTS = {}
