"""Tensor-core instructions: ldmatrix and mma.sync on per-lane register fragments, with
the lane maps of their descriptors (fuserir.instructions: LDMATRIX, MMA_M16N8K16) and
the shared-memory access of lowering.verify.accesses.

  * LdMatrix / Mma are warp-collective (warps = 32 consecutive linear ids, as shuffles):
    a warp with some but not all lanes active is a "warp-divergence" hazard (missing
    lanes' rows / fragments count as 0). ldmatrix: lanes < 8*num read their 16-byte row
    (through _shared_read, so RAW / pending / stale checks apply; other lanes' addresses
    are not evaluated), then register i of lane l gets row l>>2, cols 2(l&3), 2(l&3)+1 of
    matrix i (.trans: rows 2(l&3), 2(l&3)+1, col l>>2); values move as raw 16-bit bits.
    mma: per warp, A/B/C are gathered from the lanes' fragments (kir.Mma's layout), D =
    A @ B + C in f64 (products of halves are exact), rounded once to f32, scattered back.

Fragments are the block's local buffers (execution.py allocates them); the warp check is
execution's _check_warps, shared with shuffles; shared reads go through race_detector.py.
"""

import numpy as np

from codegen.interp.base import _F32, _F64, _HALF, InterpError
from fuserir.instructions import LDMATRIX, MMA_M16N8K16 as MMA
from lowering import kir
from lowering.verify.accesses import instruction_access


class _TensorCores:
    """The mixin of _Block (machine.py) that runs LdMatrix and Mma."""

    def _span(self, buf, start, act, count, size, what):
        """Positions [n, count] = start + 0..count-1 per active thread, clipped into
        [0, size), and the in-bounds mask (None when all are in bounds; else reported)."""
        n = len(act)
        pos = start[:, None] + np.arange(count)
        flat = pos.ravel()
        ok = self._check(buf, flat, (flat >= 0) & (flat < size), np.repeat(act, count),
                         what)
        if ok is None:
            return pos, None
        return np.clip(pos, 0, size - 1), ok.reshape(n, count)

    def _fragment(self, buf, index, act, count, itemsize, what):
        """The local fragment buffer `buf` and each active lane's `count` element positions
        from `index`; out-of-bounds positions are reported (their values read as 0)."""
        arr = self._local(buf)
        if buf.memory is not kir.Memory.local or arr.itemsize != itemsize:
            raise InterpError(f"{what} fragment {buf.name} must be a local buffer of "
                              f"{8 * itemsize}-bit elements{self.where()}")
        start = self._index(self.ev(index, act), len(act))
        size = arr.shape[1]
        pos, ok = self._span(buf.name, start, act, count, size,
                             f"outside {buf.name}[0, {size}) (a {count}-element fragment)")
        return arr, pos, ok

    def _matrix_buffer(self, s, act, instruction, buffer, role):
        """(num, layout) of an ldmatrix or stmatrix `s` (`instruction`: LDMATRIX or
        STMATRIX) and its shared 16-bit `buffer`, checked; the warps are checked whole."""
        name, num = instruction.name, int(s.num)
        if num not in instruction.counts:
            raise InterpError(f"{name} .x{num}: num must be 1, 2 or 4{self.where()}")
        if buffer.memory is not kir.Memory.shared:
            raise InterpError(f"{name} {role} {buffer.name} is not shared{self.where()}")
        lay = self._layout(buffer)
        if lay.itemsize != 2:
            raise InterpError(f"{name} {role} {buffer.name} is not a 16-bit buffer"
                              f"{self.where()}")
        trans = ".trans" if s.trans else ""
        self._check_warps(act, "warp-divergence", name, f"{name}.x{num}{trans}")
        return num, lay

    def _row_sites(self, s, lay, act, name, row):
        """The lanes of `act` that give a row address to an ldmatrix or stmatrix `s` (the
        first 8 * num of each warp: lowering.verify.accesses.instruction_access), and each
        one's row as element positions [lanes, 8] into `lay` (clipped) with the in-bounds
        mask (None: all in bounds; else reported). A row not 16-byte aligned is refused."""
        rows = instruction_access(s)
        sa = act[(act & 31) < rows.lanes]
        if not len(sa):
            return sa, None, None
        addr = self._index(self.ev(s.address, sa), len(sa))
        mis = (lay.offset + addr * lay.itemsize) % rows.nbytes != 0
        if mis.any():
            i = int(np.flatnonzero(mis)[0])
            raise InterpError(f"{name} row address {lay.name}[{int(addr[i])}] "
                              f"of thread {self.interp.coords(sa[i])} is not 16-byte "
                              f"aligned{self.where()}")
        pos, ok = self._span(lay.name, addr, sa, LDMATRIX.matrix, lay.size,
                             f"outside {lay.name}[0, {lay.size}) ({row})")
        return sa, pos, ok

    def _ldmatrix(self, s, act):
        """Per lane: lanes 0..8*num-1 read the 8 b16 values (16 bytes) of the row their
        address names (shared reads, through the race detector); register i of lane l is
        then row l>>2, columns 2(l&3), 2(l&3)+1 of matrix i (.trans: rows 2(l&3),
        2(l&3)+1, column l>>2). Rows of lanes missing from a divergent warp read as 0."""
        num, lay = self._matrix_buffer(s, act, LDMATRIX, s.src, "source")
        n = len(act)
        lane = act & 31
        width = LDMATRIX.matrix                              # elements of one row
        rows = np.zeros(((int(act[-1]) >> 5) * 32 + 32, width), np.uint16)  # by thread id
        sa, pos, ok = self._row_sites(s, lay, act, "ldmatrix", "an ldmatrix row")
        if len(sa):
            t8 = np.repeat(sa, width)
            flat = pos.ravel()
            vals = self._view(lay).view(np.uint16)[flat]
            if ok is None:
                self._shared_read(lay, t8, flat)
            else:
                okf = ok.ravel()
                self._shared_read(lay, t8[okf], flat[okf])
                vals = np.where(okf, vals, 0)
            rows[sa] = vals.reshape(len(sa), width)
        # register i of a lane: matrix i's elements (row, col) and (row, col + 1), or
        # (row, col) and (row + 1, col) with .trans; matrix i's row r is lane 8i + r's
        row, col = LDMATRIX.register(lane[:, None, None], trans=s.trans)
        base = (act - lane)[:, None, None]
        i = np.arange(num)[None, :, None]
        two = np.arange(2)[None, None, :]
        if s.trans:
            regs = rows[base + width * i + row + two, col]
        else:
            regs = rows[base + width * i + row, col + two]        # [n, num, 2]
        arr, pos, ok = self._fragment(s.dst, s.dst_index, act, 2 * num, 2, "ldmatrix")
        regs = regs.reshape(n, 2 * num)
        rows_t = np.broadcast_to(act[:, None], pos.shape)
        if ok is not None:
            rows_t, pos, regs = rows_t[ok], pos[ok], regs[ok]
        arr.view(np.uint16)[rows_t, pos] = regs

    def _mma(self, s, act):
        """MMA (fuserir.instructions) per warp: gather A (16x16), B (16x8) and C (16x8, f32)
        from every lane's fragment by the descriptor's maps, D = A @ B + C, scatter D.
        Products of f16/bf16 values are exact in f64; the 16 products and C are summed in
        f64 and rounded once to f32 (exact on integer-valued data, as the GPU is; on
        other data it may differ from the GPU's truncating adder in the last bit).
        Fragments of lanes missing from a divergent warp count as 0."""
        if s.dtype.numpy not in _HALF:
            raise InterpError(f"mma input dtype {s.dtype} is not f16 or bf16{self.where()}")
        self._check_warps(act, "warp-divergence", "mma", f"{MMA.label}.{s.dtype}")
        lane = (act & 31)[:, None]
        w = act >> 5
        W = int(w[-1]) + 1
        wi = w[:, None]

        def gather(buf, index, count, itemsize, view):
            arr, pos, ok = self._fragment(buf, index, act, count, itemsize, "mma")
            v = arr.view(view)[act[:, None], pos].astype(_F64)
            return v if ok is None else np.where(ok, v, 0.0)

        tiles = {}
        for name, fragment, buf, index, itemsize, view in (
                ("A", MMA.a, s.a, s.a_index, 2, s.dtype.numpy),
                ("B", MMA.b, s.b, s.b_index, 2, s.dtype.numpy),
                ("C", MMA.c, s.c, s.c_index, 4, _F32)):
            tile = np.zeros((W, fragment.rows, fragment.cols), _F64)
            row, col = fragment.at(lane, np.arange(fragment.count))
            tile[wi, row, col] = gather(buf, index, fragment.count, itemsize, view)
            tiles[name] = tile
        D = (np.matmul(tiles["A"], tiles["B"]) + tiles["C"]).astype(_F32)
        crow, ccol = MMA.c.at(lane, np.arange(MMA.c.count))
        arr, pos, ok = self._fragment(s.d, s.d_index, act, MMA.c.count, 4, "mma")
        vals = D[wi, crow, ccol]
        rows_t = np.broadcast_to(act[:, None], pos.shape)
        if ok is not None:
            rows_t, pos, vals = rows_t[ok], pos[ok], vals[ok]
        arr.view(_F32)[rows_t, pos] = vals

    # the statements this room runs: leaves run to completion; compound ones are
    # generators (they run bodies, yield a Wait, or offer a switch point)
    LEAF_STATEMENTS = {kir.LdMatrix: _ldmatrix, kir.Mma: _mma}
    COMPOUND_STATEMENTS = {}
