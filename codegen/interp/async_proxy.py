"""Hopper's async-proxy hazards: proxy fences, bytes and registers in use by pending async
operations, and wgmma.fence (HOPPER.md, "The bug class on this path").

  * Proxy fences (kind "proxy-fence"). Shared bytes written through the generic proxy
    (st.shared, stmatrix, landed cp.async data) that the async proxy reads next (a
    wgmma's shared operands, a TMA store's source) need fence.proxy.async by the writing
    thread after the write (other threads then need a barrier, which the RAW check
    covers). Per thread `proxy_fenced` is the event count at its latest FenceProxyAsync:
    the last write of a grain (race_detector's w_ev / w_tid) is fenced iff its writer's
    fence came after it. Checked at the async read's issue (Wgmma, TmaStore); bytes a TMA
    load landed were written by the async proxy and need none.
  * Bytes in use (kind "async-pending"). A pending wgmma's shared operands and a TMA
    store's source until wait_group.read retires it are *held*: `held` counts the
    holders per grain; any write to a held grain (race_detector._shared_write calls
    _check_held) is reported, naming the holder (the data effect is unchanged: the
    holder reads the bytes when it retires).
  * Registers in flight (kind "wgmma-registers"). A local Load or Store (execution.py's
    hook) or a stmatrix source read, by a thread of a warp group whose pending wgmma
    writes that element (its accumulators) or reads it (register A), is reported.
  * wgmma.fence (kind "wgmma-fence"). In kernels with a Wgmma, every local Load and
    Store records its event per element (`reg_ev`); per warp group `wg_fence` is the
    event count at its latest WgmmaFence (-1: none yet). A Wgmma whose accumulator or
    register-A elements were accessed since that fence (a read too: the PTX ISA asks
    for a fence between any register access and a wgmma using the register), or that no
    fence precedes, is reported. Chained wgmmas (no access between) need no new fence;
    registers written by a wgmma, ldmatrix or mma are not recorded.

Not modelled: a fence.proxy.async between a cp.async's issue and its landing counts for
the landed bytes (they carry the issue's event); registers written by ldmatrix or mma do
not need a wgmma.fence here; ordering through mbarrier phases is the race detector's
(epochs), so proxy-fenced bytes handed over by an mbarrier alone are checked as RAW.

It sits beside race_detector.py, whose shadow (w_ev, w_tid, the events) it reads through
`self`; warpgroups.py, tma.py and execution.py call these checks, mbarriers.py its
_hazard; the state is made in _Block.__init__ (machine.py).
"""

import numpy as np

from codegen.errors import Hazard
from codegen.interp.base import _point


class _AsyncProxy:
    """The mixin of _Block (machine.py) holding the async-proxy checks."""

    def _hazard(self, kind, buffer, first, first_iters, threads, detail, byte_range=None,
                key=None):
        """Record one hazard whose second side is the current statement."""
        s, it = self.stmt, dict(self.iters)
        key = key or (kind, first.label, s.label)
        if key in self.interp.seen:
            return
        coords = self.interp.coords
        self.interp.add(key, lambda: Hazard(
            kind=kind, buffer=buffer, first=_point(first), second=_point(s),
            byte_range=byte_range, threads=(coords(threads[0]), coords(threads[1])),
            iterations=(dict(first_iters), it), block=self.bidx, detail=detail))

    def _bytes(self, g):
        grain = self.interp.grain
        return int(g.min()) * grain, (int(g.max()) + 1) * grain

    # -- proxy fences --------------------------------------------------------------------

    def _check_proxy_fenced(self, lay, readers, idx, what):
        """The async proxy (`what`, issued by `readers`, one per element) reads lay[idx]:
        report bytes last written through the generic proxy that their writer has not
        proxy-fenced since."""
        g, t = self._grains(lay, readers, idx)
        ev, wt = self.w_ev[g], self.w_tid[g]
        written = ev >= 0
        if not written.any():
            return
        sid = self.ev_sid[np.where(written, ev, 0)]
        generic = written & ~self.interp.async_writer[sid]
        bad = generic & (self.proxy_fenced[np.where(written, wt, 0)] <= ev)
        for s in np.unique(sid[bad]).tolist():
            sel = np.flatnonzero(bad & (sid == s))
            i = int(sel[0])
            wstmt, witers, wname = self.events[int(ev[i])]
            writers = len(np.unique(wt[sel]))
            lo, hi = self._bytes(g[sel])
            self._hazard(
                "proxy-fence", lay.name if wname == lay.name else f"{wname}/{lay.name}",
                wstmt, witers, (int(wt[i]), int(t[i])), byte_range=(lo, hi),
                detail=f"{writers} thread(s) wrote bytes through the generic proxy that "
                       f"{what} reads through the async proxy: no fence.proxy.async by the "
                       f"writing thread between the generic write and the async-proxy "
                       f"read; bytes [{lo}, {hi}) involved")

    # -- bytes held by pending async reads -----------------------------------------------

    def _hold(self, lay, readers, idx):
        """Hold lay[idx] for a pending async read; returns the grains to release."""
        g = np.unique(self._grains(lay, readers, idx)[0])
        self.held[g] += 1
        return g

    def _release(self, grains):
        self.held[grains] -= 1

    def _check_held(self, lay, g, t):
        """A write of grains g by threads t: report the pending async reads holding any."""
        if not (self.wgmmas or self.bulk_stores):
            return
        hit = self.held[g] > 0
        if not hit.any():
            return
        holders = [(op, "a pending wgmma still reads (before the wgmma.wait_group that "
                        "retires it)") for op in self.wgmmas]
        holders += [(cp, "a TMA store still reads (no cp.async.bulk.wait_group.read of "
                         "its thread has retired it)") for cp in self.bulk_stores]
        for op, why in holders:
            on = hit & np.isin(g, op.held)
            if not on.any():
                continue
            sel = np.flatnonzero(on)
            i = int(sel[0])
            lo, hi = self._bytes(g[sel])
            self._hazard(
                "async-pending", lay.name, op.stmt, op.iters, (op.tid, int(t[i])),
                byte_range=(lo, hi),
                detail=f"{len(np.unique(t[sel]))} thread(s) wrote bytes {why}; bytes "
                       f"[{lo}, {hi}) involved")

    # -- registers of pending wgmmas and wgmma.fence -------------------------------------

    def _register_access(self, b, act, idx, write=False):
        """A Load or Store of local buffer b's elements idx ([n] or [n, k]) by `act`."""
        if not self.interp.has_wgmma:
            return
        reg = self.reg_ev.get(b)              # reads too: a wgmma.fence must follow
        if reg is None:                        # any access of its registers (PTX ISA)
            reg = self.reg_ev[b] = np.full(self._local(b).shape, -1, np.int32)
        reg[act[:, None] if idx.ndim == 2 else act, idx] = self._event(b.name)
        if not self.wgmmas:
            return
        arr = self._local(b)
        idx2 = idx if idx.ndim == 2 else idx[:, None]
        for op in self.wgmmas:
            for part, what in ((op.d, "accumulator"), (op.a, "register-A")):
                if not isinstance(part, tuple) or part[0] is not arr:
                    continue
                r = np.searchsorted(op.tids, act)
                last = len(op.tids) - 1
                mine = (r <= last) & (op.tids[np.minimum(r, last)] == act)
                if not mine.any():
                    continue
                pos = part[1][r[mine]]
                hit = (pos[:, :, None] == idx2[mine][:, None, :]).any(axis=(1, 2))
                if not hit.any():
                    continue
                who = act[mine][hit]
                access = "wrote" if write else "read"
                uses = "writes" if what == "accumulator" else "reads"
                self._hazard(
                    "wgmma-registers", b.name, op.stmt, op.iters, (op.tid, int(who[0])),
                    detail=f"{len(who)} thread(s) of warp group {op.group} {access} "
                           f"elements of {b.name} before the wgmma.wait_group that retires "
                           f"the wgmma: {what} registers touched while a wgmma that "
                           f"{uses} them is pending")

    def _check_wgmma_fence(self, s, group, tids, parts):
        """At a Wgmma's issue by warp group `group` (threads tids): its register parts
        ((local buffer, positions [threads, k], in-bounds mask, what)) must not have been
        stored since the group's last wgmma.fence, and some fence must precede it."""
        fence = int(self.wg_fence[group])
        t0 = int(tids[0])
        if fence < 0:
            self._hazard("wgmma-fence", s.d.name, s, self.iters, (t0, t0),
                         key=("wgmma-fence", s.label, s.label),
                         detail=f"warp group {group} issues a wgmma with no wgmma.fence "
                                f"before it (missing wgmma.fence: its register accesses "
                                f"are not ordered before the wgmma)")
            return
        for buf, pos, ok, what in parts:
            reg = self.reg_ev.get(buf)
            if reg is None:
                continue
            ev = reg[tids[:, None], pos]
            late = ev >= fence
            if ok is not None:
                late &= ok
            if not late.any():
                continue
            e = int(ev[late].min())
            wstmt, witers, _ = self.events[e]
            who = tids[late.any(axis=1)]
            self._hazard("wgmma-fence", buf.name, wstmt, witers, (int(who[0]), t0),
                         detail=f"{len(who)} thread(s) of warp group {group} accessed "
                                f"{what} elements of {buf.name} since the last "
                                f"wgmma.fence, then the wgmma uses them (missing "
                                f"wgmma.fence between the register accesses and the wgmma)")
