"""The race detector of shared memory: the shadow state per grain and hazard recording.

Race detector (shared memory)
  Shadow state per *grain* of the pool (the gcd of the shared buffers' element sizes and
  byte offsets: 4 bytes for an f32-only kernel, 2 once an f16 buffer is there, 1 for a
  bool buffer or an odd offset; reports are in bytes):
    w_tid/w_ev/w_epoch  last writer thread, its access event, the epoch of the write
    w_buf               the buffer (by name) last written: persists across barriers
    r_tid1/r_tid2       up to two distinct reader threads of the current epoch (two are
    r_ev1/r_ev2/r_epoch  enough to know whether a reader other than any writer exists)
  An epoch is the time between two barriers; a Barrier executed by all threads starts a
  new one. In a kernel with mbarriers or named barriers, two accesses of one epoch are
  also ordered when the earlier one happens before the later thread's access through
  them (ordering.py's vector clocks; readers then keep their latest read's event). Reads
  of a Store's index and value are processed (for every active thread) before its
  write. Reported: RAW, WAR, WAW (also two threads writing one byte in one statement),
  stale-read (bytes last written through a different buffer name, across barriers
  too), uninitialized-read (never written in this block), out-of-bounds (any
  memory), barrier-divergence, shuffle-divergence, warp-divergence, async-pending (also
  a write to bytes a pending wgmma or TMA store still reads), proxy-fence,
  wgmma-registers, wgmma-fence, mbarrier, mbarrier-init, deadlock, cross-cta. Hazards
  are deduplicated by
  (kind, first program point, second program point) over the whole run; each names the
  buffer, a byte range (physical pool bytes for shared memory), both program points as
  "<label>: <statement>", an example pair of threads, the loop iterations of both sides
  and the block. A Barrier under thread-dependent control flow does not start an epoch
  (it orders nothing reliably), so the accesses it was meant to order are reported too.
  Global memory is checked for bounds and for cross-CTA ordering (cross_cta.py).

This module holds the shared-memory checks (RAW, WAR, WAW, stale-read,
uninitialized-read, async-pending on grains marked pending in p_tid/p_ev) and their
reports. The other kinds are reported where they arise: out-of-bounds and barrier-,
shuffle- and warp-divergence in execution.py (where a full Barrier also starts the next
epoch), copies never waited for in async_copies.py and tma.py, wgmmas never waited
for in warpgroups.py, mbarrier misuse, waits that never pass and named-barrier counts
in mbarriers.py, cross-cta in cross_cta.py, grid deadlocks in machine.py, the
async-proxy kinds (proxy-fence, wgmma-registers, wgmma-fence, writes to held bytes) in
async_proxy.py and mbarrier-init in mbarriers.py; all are
deduplicated by _Interp.add. The shadow arrays are made in
_Block.__init__ (machine.py).
"""

import numpy as np

from codegen.errors import Hazard
from codegen.interp.base import _NONE, _point
from lowering import kir


class _RaceDetector:
    """The mixin of _Block (machine.py) that checks and records every shared-memory
    access (its shadow arrays are made in _Block.__init__)."""

    def _event(self, name):
        n = len(self.events)
        if n == len(self.ev_sid):
            self.ev_sid = np.concatenate([self.ev_sid, np.empty_like(self.ev_sid)])
        self.ev_sid[n] = self.interp.sid.get(self.stmt, -1)
        self.events.append((self.stmt, self.iters, name))
        return n

    def _grains(self, lay, act, idx):
        """Expand per-thread element accesses into (grain, thread) pairs."""
        g0 = (lay.offset + idx * lay.itemsize) // self.interp.grain
        if lay.k == 1:
            return g0, act
        g = (g0[:, None] + np.arange(lay.k)).ravel()
        return g, np.repeat(act, lay.k)

    def _duplicates(self, g):
        m = len(g)
        ar = self.interp.arange[:m] if m <= len(self.interp.arange) else np.arange(m)
        self.stamp[g] = ar
        return bool((self.stamp[g] != ar).any())

    def _shared_read(self, lay, act, idx):
        if not len(act):
            return
        g, t = self._grains(lay, act, idx)
        e = self._event(lay.name)
        pend = self.p_tid[g] >= 0
        if pend.any():
            self._report("async-pending", pend, g, t, lay, self.p_ev[g], self.p_tid[g],
                         access="read")
        wb = self.w_buf[g]
        bad = wb != lay.bufid
        if bad.any():
            un = bad & (wb < 0)
            if un.any():
                self._report_uninit(lay, un, g, t)
            st = bad & (wb >= 0)
            if st.any():
                self._report("stale-read", st, g, t, lay, self.w_ev[g], self.w_tid[g])
        raw = (self.w_epoch[g] == self.epoch) & (self.w_tid[g] != t)
        if raw.any() and self.clock is not None:
            raw = self._unordered(raw, self.w_ev[g], self.w_tid[g], t)
        if raw.any():
            self._report("RAW", raw, g, t, lay, self.w_ev[g], self.w_tid[g])
        # merge the readers of this access into the (at most two) readers per grain
        if self._duplicates(g):
            order = np.lexsort((t, g))
            gs, ts = g[order], t[order]
            start = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
            end = np.r_[start[1:], len(gs)] - 1
            ug, tmin, tmax = gs[start], ts[start], ts[end]
        else:
            ug, tmin, tmax = g, t, t
        cur = self.r_epoch[ug] == self.epoch
        o1 = np.where(cur, self.r_tid1[ug], _NONE)
        o2 = np.where(cur, self.r_tid2[ug], _NONE)
        n1 = np.where(o1 >= 0, o1, tmin)
        n2 = np.where(o2 >= 0, o2, np.where(tmin != n1, tmin, np.where(tmax != n1, tmax,
                                                                         _NONE)))
        self.r_ev1[ug] = np.where(o1 >= 0, self.r_ev1[ug], e)
        self.r_ev2[ug] = np.where(o2 >= 0, self.r_ev2[ug], np.where(n2 >= 0, e, _NONE))
        self.r_tid1[ug] = n1
        self.r_tid2[ug] = n2
        self.r_epoch[ug] = self.epoch
        if self.clock is not None:      # ordering needs a reader's latest read
            self.r_ev1[g[self.r_tid1[g] == t]] = e
            self.r_ev2[g[self.r_tid2[g] == t]] = e

    def _shared_write(self, lay, act, idx, pending=False):
        """An ordinary write; with `pending` (a cp.async issue) the same checks against
        the accesses so far (the copy may land at once), but the grains are marked
        pending instead of written: _land_copies writes them when a wait retires them.
        Returns the access event."""
        self.overlap = None
        if not len(act):
            return None
        g, t = self._grains(lay, act, idx)
        e = self._event(lay.name)
        self._check_held(lay, g, t)               # async_proxy.py: bytes in use
        pend = self.p_tid[g] >= 0
        self.overlap = None
        if pend.any():
            self._report("async-pending", pend, g, t, lay, self.p_ev[g], self.p_tid[g],
                         access="wrote")
            if not pending:
                self.overlap = (set(np.unique(self.p_ev[g][pend]).tolist()), g[pend])
        cur = self.r_epoch[g] == self.epoch
        if cur.any():
            r1, r2 = self.r_tid1[g], self.r_tid2[g]
            c1 = cur & (r1 >= 0) & (r1 != t)
            if self.clock is not None and c1.any():
                c1 = self._unordered(c1, self.r_ev1[g], r1, t)
            c2 = cur & (r2 >= 0) & (r2 != t) & ~c1
            if self.clock is not None and c2.any():
                c2 = self._unordered(c2, self.r_ev2[g], r2, t)
            war = c1 | c2
            if war.any():
                self._report("WAR", war, g, t, lay,
                             np.where(c1, self.r_ev1[g], self.r_ev2[g]), np.where(c1, r1, r2))
        waw = (self.w_epoch[g] == self.epoch) & (self.w_tid[g] != t)
        if waw.any() and self.clock is not None:
            waw = self._unordered(waw, self.w_ev[g], self.w_tid[g], t)
        if waw.any():
            self._report("WAW", waw, g, t, lay, self.w_ev[g], self.w_tid[g])
        if self._duplicates(g):      # two threads writing one grain in this statement
            order = np.lexsort((t, g))
            gs, ts = g[order], t[order]
            same = (gs[1:] == gs[:-1]) & (ts[1:] != ts[:-1])
            if same.any():
                second = order[1:][same]
                mask = np.zeros(len(g), dtype=bool)
                mask[second] = True
                ftid = np.full(len(g), _NONE, dtype=np.int64)
                ftid[second] = ts[:-1][same]
                self._report("WAW", mask, g, t, lay, np.full(len(g), e), ftid)
        if pending:
            self.p_tid[g] = t
            self.p_ev[g] = e
            return e
        self.w_tid[g] = t           # repeated grains: the highest thread wins, as the data
        self.w_ev[g] = e
        self.w_epoch[g] = self.epoch
        self.w_buf[g] = lay.bufid
        return e

    def _report(self, kind, mask, g, t, lay, fev, ftid, access=None):
        """One hazard per first statement among the flagged (grain, thread) pairs."""
        grain = self.interp.grain
        sel_all = np.flatnonzero(mask)
        fe = fev[sel_all]
        fsid = self.ev_sid[fe]
        for sid in np.unique(fsid):
            sel = sel_all[fsid == sid]
            i = int(sel[0])
            fstmt, fiters, fname = self.events[int(fev[i])]
            key = (kind, fstmt.label, self.stmt.label)
            if key in self.interp.seen:
                continue
            row = sel[sel // lay.k == i // lay.k]     # the example element's grains
            lo, hi = int(g[row].min()) * grain, (int(g[row].max()) + 1) * grain
            span = (int(g[sel].min()) * grain, (int(g[sel].max()) + 1) * grain)
            nthreads = len(np.unique(t[sel]))
            buffer = lay.name if fname == lay.name else f"{fname}/{lay.name}"
            copy, retire = (("a TMA load", "no mbarrier wait has needed it")
                            if isinstance(fstmt, kir.TmaLoad) else
                            ("a cp.async", "no cp.async.wait_group of the issuing thread "
                                           "has retired it"))
            what = {"RAW": "read bytes another thread wrote",
                    "WAR": "wrote bytes another thread read",
                    "WAW": "wrote bytes another thread wrote",
                    "stale-read": f"read through {lay.name} bytes last written through "
                                  f"{fname}",
                    "async-pending": f"{access} bytes {copy} has not landed yet "
                                     f"(issued by thread {self.interp.coords(ftid[i])})"
                    }[kind]
            since = {"stale-read": "", "async-pending": f": {retire} (a barrier does "
                     "not)"}.get(kind, " since the last barrier")
            detail = (f"{nthreads} thread(s) {what}{since}; bytes [{span[0]}, {span[1]}) "
                      f"involved")
            self.interp.add(key, lambda: Hazard(
                kind=kind, buffer=buffer, first=_point(fstmt), second=_point(self.stmt),
                byte_range=(lo, hi),
                threads=(self.interp.coords(ftid[i]), self.interp.coords(t[i])),
                iterations=(dict(fiters), dict(self.iters)), block=self.bidx,
                detail=detail))

    def _report_uninit(self, lay, mask, g, t):
        key = ("uninitialized-read", lay.alloc.label, self.stmt.label)
        if key in self.interp.seen:
            return
        grain = self.interp.grain
        sel = np.flatnonzero(mask)
        i = int(sel[0])
        row = sel[sel // lay.k == i // lay.k]
        lo, hi = int(g[row].min()) * grain, (int(g[row].max()) + 1) * grain
        nthreads = len(np.unique(t[sel]))
        self.interp.add(key, lambda: Hazard(
            kind="uninitialized-read", buffer=lay.name, first=_point(lay.alloc),
            second=_point(self.stmt), byte_range=(lo, hi),
            threads=(None, self.interp.coords(t[i])), iterations=({}, dict(self.iters)),
            block=self.bidx,
            detail=f"{nthreads} thread(s) read shared bytes no thread of the block wrote"))
