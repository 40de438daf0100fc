"""The cross-CTA checker: fences, semaphores and the views that order global memory
between blocks.

Cross-CTA checker (global memory: outputs, workspaces, any written buffer)
  * Every execution of a statement that writes global memory is an event numbered in run
    order (its number is the write's sequence number; gev_* hold its statement, loop
    iterations and block). The shadow of a global buffer (made at its first write) holds
    per element the event and the thread of its last write (w_seq, w_tid).
  * Fence: each active thread's writes so far are fenced (per thread f_seq = the next
    sequence number; f_old keeps its latest fence from before the current epoch).
  * SemRelease by block X on cell (sem, index) (a fence of the releasing threads, then the
    store) publishes to the cell a *view* {block: per-writer-thread threshold}: X's own
    writes fenced by a releasing thread, or by any thread of X before X's last barrier
    (a fence the release is not ordered after does not count), merged with everything X
    had acquired (transitively: what X acquired and re-releases counts as published). A
    cell keeps the view of its last release; a plain Store to it ends that. SemArrive
    (an arrival on a counter: a release add) publishes the same view but merges it into
    the cell's, so a wait for the counter's total acquires every arrival's view.
  * SemWait: spins (yields `Wait(stmt, ready, what=sem name)`) until sem[index] == value
    for every waiting thread, then acquires the cell's view: for the waiting threads at
    once, for the whole block at its next barrier (pending until then).
  * An access (read, write, cp.async source read) by block Y of an element whose last
    write was by another block X is checked: visible iff seq < the threshold of the
    writing thread in Y's view of X (plus Y's pending acquisitions, for waiting threads).
    Otherwise a "cross-cta" hazard: buffer, the example element's bytes, the writing and
    the accessing statement, threads, iterations, block Y (extra["blocks"] = (X, Y)), and
    why (the write was never fenced, or Y acquired no release that published it). Blocks
    that write disjoint elements and never read each other's are never reported. The
    semaphore operations themselves are synchronization, not data: they are not checked,
    and a SemRelease clears its cells' data shadow.
  * AtomicAdd (red.global.add): adds of several blocks to one element do not race each
    other; each is checked against the element's last plain write and kept per block
    (gev event and thread); a plain read or write of the element by another block is
    checked against every block's adds as against a write, and a plain write clears
    them (the element's history starts again).
  * TMA stores (tma.py) write through the same path when a wait retires them; a store
    retired by a wait_group.read only gets a new write event when its thread's full
    BulkWait completes its writes (_complete_writes), so a Fence (or SemRelease) between
    the two does not cover it: a block acquiring it is reported "cross-cta".
  * In kernels with vector clocks (ordering.py: warp-specialized ones, whose consumers
    meet at named barriers, not __syncthreads), a fence by another thread also counts for
    a release when the releasing threads are ordered after it (the fence is an event of
    the race detector's sequence, at most their clocks' entry for its thread), and a named barrier's completion hands
    the pending acquisitions of its participants to every thread that waited at it.
  Threads of a block still run in lockstep, so what the shadow cannot see is ordering
  inside a statement list that is not a Fence/Barrier/SemRelease/SemWait: e.g. a release
  is always after the releasing block's earlier statements.

The kernel-level part (global write events, semaphore cells, every block's fences) lives
in _Interp, the per-block part (fences, view, pending acquisitions) in _Block.__init__
(machine.py); a Barrier hands the pending acquisitions to the whole block (execution.py).
"""

import numpy as np

from codegen.errors import Hazard
from codegen.interp.base import _NONE, InterpError, _point
from codegen.interp.scheduler import Wait
from fuserir.dtypes import DataType
from lowering import kir


class _GlobalShadow:
    """Per element of a global buffer's span: the event (index into _Interp's global write
    events: statement, iterations, block) and the thread of the last write, -1 / -1 when
    no block of this launch wrote it."""

    def __init__(self, span):
        self.span = span
        self.w_seq = np.full(span, _NONE, np.int32)
        self.w_tid = np.full(span, _NONE, np.int16)
        self.atomics = {}     # block -> (seq, tid) of its latest atomic add per element

    def atomic(self, block):
        """The (seq, tid) arrays of `block`'s atomic adds, made at its first."""
        if block not in self.atomics:
            self.atomics[block] = (np.full(self.span, _NONE, np.int32),
                                   np.full(self.span, _NONE, np.int16))
        return self.atomics[block]


def _merge_view(into, other):
    """Merge acquired view `other` ({block: per-writer-thread thresholds}) into `into`
    (elementwise max; threshold arrays are never changed in place, so views share them)."""
    for x, thr in other.items():
        cur = into.get(x)
        into[x] = thr if cur is None else np.maximum(cur, thr)


class _CrossCta:
    """The mixin of _Block (machine.py) that runs Fence, SemRelease, SemArrive and SemWait
    and checks every global access against the views the block acquired."""

    def _fence(self, s, act):
        """__threadfence(): each active thread's global writes so far are fenced (a later
        SemRelease of the block may publish them)."""
        newer = act[self.f_epoch[act] != self.epoch]
        self.f_old[newer] = self.f_seq[newer]     # the latest fence of an earlier epoch
        self.f_seq[act] = len(self.interp.gev_stmt)
        self.f_epoch[act] = self.epoch
        if self.clock is not None:       # the fence as an event the clocks can order
            self.f_event[act] = self._event("__threadfence")

    def _spread_acquisitions(self, waiters, participants):
        """A barrier generation of `participants` completed: what any of them acquired
        (pending) is acquired by the threads that waited at it."""
        for mask, _ in self.pending:
            if mask[participants].any():
                mask[waiters] = True

    def _semaphore(self, s, act, what):
        """(global arg, active threads, flat positions, i32 values) of a SemWait /
        SemRelease, out-of-bounds cells reported and dropped."""
        b = s.sem
        if b is None or b.memory is not kir.Memory.global_ or b.dtype is not DataType.i32:
            raise InterpError(f"{what} needs an i32 global semaphore buffer{self.where()}")
        g = self._global(b)
        n = len(act)
        idx = self._index(self.ev(s.index, act), n)
        val = self._index(self.ev(s.value, act), n).astype(np.int32)
        pos, ok = g.positions(idx)
        ok = self._check(b.name, idx, ok, act, lambda: self._global_oob(g))
        if ok is not None:
            act, pos, val = act[ok], pos[ok], val[ok]
        return g, act, pos, val

    def _sem_release(self, s, act):
        """Release store: fence the active threads (a release orders the thread's own
        earlier accesses before it), store the values, and publish to each cell the
        block's view: what it acquired
        (pending acquisitions too, where a releasing thread made them) and its own writes
        fenced by a releasing thread, or by any thread before the last barrier."""
        g, act, pos, val = self._semaphore(s, act, "sem_release")
        if not len(act):
            return
        published = self._publication(s, act)
        g.flat[pos] = val
        self._sync_store(g, pos)
        for p in np.unique(pos).tolist():
            self.interp.cells[(g.name, p)] = published

    def _sem_arrive(self, s, act):
        """Release add (an arrival on a counter): fence the active threads, add their
        values, and merge the block's view into each cell's (a read-modify-write joins
        the release sequence, so a wait that reads the sum acquires every arrival's)."""
        g, act, pos, val = self._semaphore(s, act, "sem_arrive")
        if not len(act):
            return
        published = self._publication(s, act)
        np.add.at(g.flat, pos, val)
        self._sync_store(g, pos)
        for p in np.unique(pos).tolist():
            view = dict(self.interp.cells.get((g.name, p), {}))
            _merge_view(view, published)
            self.interp.cells[(g.name, p)] = view

    def _publication(self, s, act):
        """Fence the releasing threads `act` and return the view they publish: what the
        block acquired and its own writes fenced by a releasing thread, or by any thread
        before the last barrier."""
        self._fence(s, act)
        own = np.where(self.f_epoch < self.epoch, self.f_seq, self.f_old)
        if self.clock is not None:      # fences the releasing threads are ordered after
            seen = self.clock[act].max(axis=0)
            own = np.where((self.f_event >= 0) & (self.f_event <= seen), self.f_seq, own)
        own[act] = self.f_seq[act]
        published = dict(self.view)
        for mask, acquired in self.pending:
            if mask[act].any():
                _merge_view(published, acquired)
        _merge_view(published, {self.lin: own})
        return published

    def _sync_store(self, g, pos):
        """A semaphore's store: synchronization, not data (its cells leave the shadow)."""
        if g.shadow is not None:
            g.shadow.w_seq[pos] = _NONE
            g.shadow.w_tid[pos] = _NONE
        self.interp.cell_buffers.add(g.name)

    def _sem_wait(self, s, act):
        """Spin (yield a Wait to the scheduler) until every active thread's cell holds its
        value, then acquire what the cell's last SemRelease published: for the waiting
        threads now, for the whole block after its next barrier."""
        g, act, pos, val = self._semaphore(s, act, "sem_wait")
        if not len(act):
            return

        def ready():
            return bool((g.flat[pos] == val).all())

        while not ready():
            yield Wait(s, ready, what=g.name)
        for p in np.unique(pos).tolist():
            acquired = self.interp.cells.get((g.name, p))
            if not acquired:
                continue
            waiters = act[pos == p]
            if len(waiters) == self.T:
                _merge_view(self.view, acquired)
            else:
                mask = np.zeros(self.T, bool)
                mask[waiters] = True
                self.pending.append((mask, acquired))

    def _global_access(self, g, act, pos, write=False, atomic=False):
        """Check a read or write of global elements `pos` by threads `act` against the
        cross-CTA shadow (another block's write this block has not acquired); a write
        then becomes the elements' last write. An atomic add is checked against the last
        plain write only (adds do not race each other) and kept per block beside it; a
        plain access is checked against every other block's adds too, and a plain write
        starts the elements' history again."""
        sh = g.shadow
        if sh is None:
            if not write or not len(pos):
                return
            sh = g.shadow = _GlobalShadow(g.span)
        seq = sh.w_seq[pos]
        written = seq >= 0
        if written.any():
            wb = self.interp.gev_block[np.where(written, seq, 0)]
            foreign = written & (wb != self.lin)
            if foreign.any():
                self._cross_cta(g, act, pos, seq, wb, foreign, write, sh.w_tid[pos])
        if not atomic:
            for block, (a_seq, a_tid) in list(sh.atomics.items()):
                if block == self.lin:
                    continue
                seq = a_seq[pos]
                added = seq >= 0
                if added.any():
                    self._cross_cta(g, act, pos, seq, np.full(len(pos), block), added,
                                    write, a_tid[pos])
        if not write:
            return
        event = self.interp.global_event(self.stmt, self.iters, self.lin)
        if atomic:
            a_seq, a_tid = sh.atomic(self.lin)
            a_seq[pos], a_tid[pos] = event, act
            return
        if g.name in self.interp.cell_buffers:   # a plain store ends a release sequence
            for p in np.unique(pos).tolist():
                self.interp.cells.pop((g.name, p), None)
        for a_seq, a_tid in sh.atomics.values():
            a_seq[pos], a_tid[pos] = _NONE, _NONE
        sh.w_seq[pos] = event
        sh.w_tid[pos] = act

    def _atomic_add(self, s, act):
        """buffer[index] += value per active thread (kir.AtomicAdd), the adds of threads
        that share an element all applied; checked as _global_access(atomic=True)."""
        b = s.buffer
        if b.memory is not kir.Memory.global_:
            raise InterpError(f"atomic_add needs a global buffer, not {b.name}"
                              f"{self.where()}")
        g = self._global(b)
        n = len(act)
        idx = self._index(self.ev(s.index, act), n)
        val = self.ev(s.value, act)
        val = np.broadcast_to(np.asarray(val, dtype=b.dtype.numpy), (n,))
        pos, ok = g.positions(idx)
        ok = self._check(b.name, idx, ok, act, lambda: self._global_oob(g))
        if ok is not None:
            act, pos, val = act[ok], pos[ok], val[ok]
        self._global_access(g, act, pos, write=True, atomic=True)
        np.add.at(g.flat, pos, val)

    def _complete_writes(self, g, pos, seq):
        """The global writes of event `seq` to positions `pos` (a TMA store retired by a
        wait_group.read) complete now: the elements it still holds get a new event of
        the current statement, which only a later Fence covers."""
        still = pos[g.shadow.w_seq[pos] == seq]
        if len(still):
            g.shadow.w_seq[still] = self.interp.global_event(self.stmt, self.iters,
                                                             self.lin)

    def _cross_cta(self, g, act, pos, seq, wb, foreign, write, writers):
        """Report the accesses of `pos` (where `foreign`) that block `wb` wrote (event
        `seq`, thread `writers`) and this block has not acquired."""
        sel = np.flatnonzero(foreign)
        wtid = writers[sel].astype(np.int64)
        bad = np.zeros(len(sel), bool)
        for x in np.unique(wb[sel]).tolist():
            on = wb[sel] == x
            wt = wtid[on]
            thr = self.view[x][wt] if x in self.view else np.zeros(len(wt), np.int64)
            readers = act[sel[on]]
            for mask, acquired in self.pending:
                if x in acquired:
                    thr = np.where(mask[readers], np.maximum(thr, acquired[x][wt]), thr)
            bad[on] = seq[sel[on]] >= thr
        if not bad.any():
            return
        sel, wtid = sel[bad], wtid[bad]
        interp = self.interp
        item = g.dtype.itemsize
        wsid = interp.gev_sid[seq[sel]]
        for sid in np.unique(wsid).tolist():
            on = np.flatnonzero(wsid == sid)
            i = int(on[0])
            e = int(seq[sel[i]])
            wstmt, witers = interp.gev_stmt[e], interp.gev_iters[e]
            key = ("cross-cta", wstmt.label, self.stmt.label)
            if key in interp.seen:
                continue
            x = int(interp.gev_block[e])
            elems = pos[sel[on]] + g.lo                  # kernel element indices
            k = int(elems[0])
            writer, reader = interp.block_coords(x), self.bidx
            fenced = interp.fences[x][int(wtid[i])] > e
            why = ("the writing thread has executed no Fence (__threadfence) since the "
                   "write" + (" completed (a TMA store's writes complete at its thread's "
                              "full cp.async.bulk.wait_group, not at .read)"
                              if isinstance(wstmt, kir.TmaStore) else "")
                   if not fenced else
                   f"block {reader} has acquired no SemRelease that published it (one by "
                   f"block {writer} after the fence, after a Barrier where another "
                   "thread releases, or by a block that acquired that; then SemWait on "
                   "the same cell, and a Barrier for the threads that did not wait)")
            access = "wrote" if write else "read"
            detail = (f"block {reader} {access} {len(on)} element(s) of {g.name} that block "
                      f"{writer} wrote, without acquiring the write: {why}; elements "
                      f"[{int(elems.min())}, {int(elems.max()) + 1}) involved")
            interp.add(key, lambda: Hazard(
                kind="cross-cta", buffer=g.name, first=_point(wstmt),
                second=_point(self.stmt), byte_range=(k * item, (k + 1) * item),
                threads=(interp.coords(wtid[i]), interp.coords(act[sel[i]])),
                iterations=(dict(witers), dict(self.iters)), block=reader,
                detail=detail, extra={"blocks": (writer, reader)}))

    # the statements this room runs: leaves run to completion; compound ones are
    # generators (they run bodies, yield a Wait, or offer a switch point)
    LEAF_STATEMENTS = {kir.Fence: _fence, kir.SemRelease: _sem_release,
                       kir.SemArrive: _sem_arrive, kir.AtomicAdd: _atomic_add}
    COMPOUND_STATEMENTS = {kir.SemWait: _sem_wait}
