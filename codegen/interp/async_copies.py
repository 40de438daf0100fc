"""Asynchronous copies: cp.async issue, commit and wait groups, and landing.

  * cp.async: at issue the source bytes are read (src_size of them, the rest zeros;
    src_size 0 reads nothing) and the destination grains are checked like a write
    (pending conflicts, WAR/WAW against this epoch: the copy may land at once) and then
    marked *pending* in p_tid/p_ev (issuing thread, issue event) instead of written. Each
    issue is a _Copy (per element: thread, index, value, group = the thread's commit count
    at issue). Per thread `committed` / `retired` group counters: commit increments
    committed; wait_group n sets retired = max(retired, committed - n), so uncommitted
    copies (group == committed) never retire. Retired copies land: data written, pending
    marks cleared, and the shadow records an ordinary write by the issuing thread in the
    current epoch (event = the cp.async issue, so later RAW/WAR/WAW name the cp.async;
    other threads need a barrier after the wait). Any access (ordinary, ldmatrix, another
    cp.async, the issuing thread's own, across barriers) to a pending grain is an
    "async-pending" hazard (first = the cp.async at its issue iteration). Data: a read of
    pending bytes sees the old bytes; an ordinary write onto pending bytes is overwritten
    right after by the copy's bytes there (the late copy wins the write/write race, as
    on the H200), so a missing drain corrupts the output deterministically even when no
    later wait exists. Copies still pending when the block ends are reported
    ("async-pending", second = "end of the block": copy never waited for) and land then.

The pending marks are shadow state of race_detector.py (which checks accesses against
them); the group counters and the pending copies are made in _Block.__init__.
"""

import numpy as np

from codegen.errors import Hazard
from codegen.interp.base import _NONE, InterpError, _point
from fuserir.instructions import CP_ASYNC
from fuserir.numerics import ceil_div
from lowering import kir
from lowering.verify.accesses import instruction_access


class _Copy:
    """The pending part of one execution of a CpAsync: per destination element the issuing
    thread, the element index into the buffer, the value, the thread's group number (the
    count of its commits at issue), and whether the data has landed already."""

    def __init__(self, stmt, ev, lay, tid, idx, values, gid, landed=None):
        self.stmt, self.ev, self.lay = stmt, ev, lay
        self.tid, self.idx, self.values, self.gid = tid, idx, values, gid
        self.landed = np.zeros(len(tid), bool) if landed is None else landed

    def subset(self, m):
        return _Copy(self.stmt, self.ev, self.lay, self.tid[m], self.idx[m],
                     self.values[m], self.gid[m], self.landed[m])


class _AsyncCopies:
    """The mixin of _Block (machine.py) that runs CpAsync, CpAsyncCommit and CpAsyncWait,
    and lands what is left at the end of the block."""

    def _cp_async(self, s, act):
        """Issue: read src_size bytes of global memory now (the rest of the nbytes are
        zeros), check the destination bytes against the race detector and mark them
        pending; the data lands when a wait retires the copy's group (_land_copies)."""
        if s.dst.memory is not kir.Memory.shared or s.src.memory is not kir.Memory.global_:
            raise InterpError(f"cp.async copies global {s.src.name} to shared {s.dst.name}"
                              f"{self.where()}")
        write = instruction_access(s)         # a pending write of nbytes per thread
        nb = int(write.nbytes)
        if not CP_ASYNC.allows(s.cache, nb):
            raise InterpError(f"cp.async.{s.cache} of {nb} bytes (4, 8 or 16; .cg: 16)"
                              f"{self.where()}")
        lay = self._layout(s.dst)
        item = lay.itemsize
        if nb % item:
            raise InterpError(f"cp.async of {nb} bytes into {lay.name} ({item}-byte "
                              f"elements){self.where()}")
        ne = nb // item
        n = len(act)
        di = self._index(self.ev(s.dst_index, act), n)
        si = self._index(self.ev(s.src_index, act), n)
        ss = (np.full(n, nb, np.int64) if s.src_size is None else
              self._index(self.ev(s.src_size, act), n))
        bad = (ss < 0) | (ss > nb)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InterpError(f"cp.async src-size {int(ss[i])} of thread "
                              f"{self.interp.coords(act[i])} is not in 0..{nb}{self.where()}")
        mis = (lay.offset + di * item) % nb != 0
        if mis.any():
            i = int(np.flatnonzero(mis)[0])
            raise InterpError(f"cp.async destination {lay.name}[{int(di[i])}] of thread "
                              f"{self.interp.coords(act[i])} is not {nb}-byte aligned"
                              f"{self.where()}")
        ok = self._check(lay.name, di, (di >= 0) & (di + ne <= lay.size), act,
                         lambda: f"outside {lay.name}[0, {lay.size}) (a {nb}-byte copy)",
                         lay)
        if ok is not None:
            act, di, si, ss, n = act[ok], di[ok], si[ok], ss[ok], int(ok.sum())
        if not n:
            return
        g = self._global(s.src)
        gi = g.dtype.itemsize
        nsrc = ceil_div(ss, gi)                      # source elements each thread reads
        mx = int(nsrc.max())
        data = np.zeros((n, max(nb, mx * gi)), np.uint8)
        if mx:
            need = (np.arange(mx) < nsrc[:, None]).ravel()
            sidx = (si[:, None] + np.arange(mx)).ravel()
            pos, okp = g.positions(sidx)
            okp |= ~need                          # only the bytes src_size names are read
            okc = self._check(g.name, sidx, okp, np.repeat(act, mx),
                              lambda: self._global_oob(g))
            take = need if okc is None else need & okc
            self._global_access(g, np.repeat(act, mx)[take], pos[take])
            vals = np.zeros(n * mx, g.dtype)
            vals[take] = g.flat[pos[take]]
            data[:, :mx * gi] = vals.view(np.uint8).reshape(n, mx * gi)
        data = data[:, :nb]
        data[np.arange(nb)[None, :] >= ss[:, None]] = 0       # zero fill
        values = np.ascontiguousarray(data).view(lay.dtype).ravel()
        tid = np.repeat(act, ne)
        idx = (di[:, None] + np.arange(ne)).ravel()
        ev = self._shared_write(lay, tid, idx, pending=True)
        self.copies.append(_Copy(s, ev, lay, tid, idx, values,
                                 np.repeat(self.committed[act], ne)))

    def _cp_commit(self, s, act):
        self.committed[act] += 1

    def _cp_wait(self, s, act):
        self.retired[act] = np.maximum(self.retired[act], self.committed[act] - int(s.n))
        self._land_copies()

    def _land_copies(self, events=None, end=False):
        """Retire the copies whose group their thread's waits have retired (all of them
        at the end of the block): write their data unless it has landed already, clear
        their pending marks and record them as ordinary writes of the issuing threads
        now. With `events` = (copy events, grains): an ordinary write just hit those
        pending grains; the copies' elements there land (again) on top of it, the late
        copy winning the write/write race as on the GPU, and stay pending."""
        keep = []
        for cp in self.copies:
            if events is not None:
                evs, hit = events
                if cp.ev in evs:
                    lay = cp.lay
                    gg, _ = self._grains(lay, cp.tid, cp.idx)
                    on = np.isin(gg.reshape(len(cp.idx), -1), hit).any(axis=1)
                    self._view(lay)[cp.idx[on]] = cp.values[on]
                    cp.landed |= on
                keep.append(cp)
                continue
            sel = np.ones(len(cp.tid), bool) if end else cp.gid < self.retired[cp.tid]
            if not sel.any():
                keep.append(cp)
                continue
            fresh = sel & ~cp.landed
            lay = cp.lay
            self._view(lay)[cp.idx[fresh]] = cp.values[fresh]
            g, t = self._grains(lay, cp.tid[sel], cp.idx[sel])
            mine = g[(self.p_ev[g] == cp.ev) & (self.p_tid[g] == t)]
            self.p_tid[mine] = _NONE
            self.p_ev[mine] = _NONE
            self.w_tid[g] = t
            self.w_ev[g] = cp.ev
            self.w_epoch[g] = self.epoch
            self.w_buf[g] = lay.bufid
            if not sel.all():
                keep.append(cp.subset(~sel))
        self.copies = keep

    def finish(self):
        """The end of the block: copies no wait retired are reported and land now."""
        for cp in self.copies:
            i = 0
            t = cp.tid[i]
            row = cp.idx[cp.tid == t]
            lay = cp.lay
            lo = lay.offset + int(row.min()) * lay.itemsize
            hi = lay.offset + (int(row.max()) + 1) * lay.itemsize
            fstmt, fiters, _ = self.events[cp.ev]
            nthreads = len(np.unique(cp.tid))
            self.interp.add(("async-pending", cp.stmt.label, "end"), lambda: Hazard(
                kind="async-pending", buffer=lay.name, first=_point(cp.stmt),
                second="end of the block", byte_range=(lo, hi),
                threads=(self.interp.coords(t), self.interp.coords(t)),
                iterations=(dict(fiters), {}), block=self.bidx,
                detail=f"copy never waited for: {nthreads} thread(s) end with this "
                       f"cp.async pending (no cp.async.wait_group retires it); it lands "
                       f"at the end of the block"))
        self._land_copies(end=True)

    # the statements this room runs: leaves run to completion; compound ones are
    # generators (they run bodies, yield a Wait, or offer a switch point)
    LEAF_STATEMENTS = {kir.CpAsync: _cp_async, kir.CpAsyncCommit: _cp_commit,
                       kir.CpAsyncWait: _cp_wait}
    COMPOUND_STATEMENTS = {}
