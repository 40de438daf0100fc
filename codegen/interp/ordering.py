"""Happens-before between threads of a block through mbarriers and named barriers.

  * Only for kernels that use mbarriers, TMA loads or named barriers (`needs_ordering`):
    each thread has a vector clock, `clock[t, u]` (an int32 array [T, T]) = the latest
    access event of thread u (race_detector's event numbers, one sequence per block)
    that thread t is ordered after, -1 for none. Other kernels have `clock` None and the
    race detector's epochs alone (its old path, unchanged).
  * Release: an arriving thread u contributes its clock, with its own entry raised to the
    newest event number so far (every access of u up to now), to the accumulating clock
    of what it arrives on: an mbarrier's current phase, or a named barrier's current
    generation. A TMA load's landing releases its issuing thread's event for the load
    (the entry alone) into the phase its bytes count toward.
  * Completion freezes an mbarrier phase's clock under the phase's parity; a passing
    MbarrierWait for parity P acquires the latest completed phase of parity P (the
    waiting threads' clocks take the max with it). A named barrier's completion: each
    bar.sync thread acquires the join of all its participants' releases (a bar.arrive
    thread does not wait, so acquires nothing). A wait reported as a deadlock, which
    execution goes on past, acquires what the phase has accumulated so far (so its
    consequences are not reported again as races). A __syncthreads still starts an
    epoch (race_detector.py): the clocks need not record it.
  * The race detector asks `_unordered`: RAW, WAR and WAW between two threads in one epoch
    are not hazards when the earlier access's event <= clock[later thread, earlier
    thread]. What is not modelled: the reader slots keep two readers per grain (their
    latest reads), so a third reader's order is not checked; the acquire is per
    statement (all waiting threads of one MbarrierWait acquire the same phase).

It sits under race_detector.py and mbarriers.py, which call it through the block;
_Block.__init__ (machine.py) calls `_init_ordering`.
"""

import numpy as np

from codegen.interp.base import _NONE
from lowering import kir

def needs_ordering(stmts):
    """Whether statements `stmts` use anything that orders threads besides barriers
    (mbarriers, named barriers: kir.effects.orders_beyond_barriers)."""
    return any(kir.effects.orders_beyond_barriers(s.effects()) for s in stmts)


class _Ordering:
    """The mixin of _Block (machine.py) holding the vector clocks (state: `clock`, and
    `released`: barrier key -> the clock its current phase or generation accumulates,
    `completed`: (mbarrier, parity) -> the clock of its latest phase of that parity)."""

    def _init_ordering(self):
        self.clock = (np.full((self.T, self.T), _NONE, np.int32)
                      if self.interp.ordered else None)
        self.released = {}
        self.completed = {}

    def _release_clock(self, key, tids):
        """Threads `tids` release into `key`'s accumulating clock."""
        tids = np.asarray(tids, np.int64)
        rel = self.clock[tids].max(axis=0)
        rel[tids] = len(self.events) - 1
        acc = self.released.get(key)
        self.released[key] = rel if acc is None else np.maximum(acc, rel)

    def _release_event(self, key, tid, ev):
        """Thread `tid`'s access event `ev` alone (a landing TMA load) into `key`."""
        acc = self.released.get(key)
        if acc is None:
            acc = self.released[key] = np.full(self.T, _NONE, np.int32)
        acc[tid] = max(int(acc[tid]), ev)

    def _complete_phase(self, key, parity):
        """An mbarrier phase of `parity` completed: its clock is frozen for the waits."""
        self.completed[(key, parity)] = self.released.pop(key, None)

    def _acquire(self, tids, clk):
        if clk is not None:
            self.clock[tids] = np.maximum(self.clock[tids], clk)

    def _acquire_phase(self, key, parity, tids):
        self._acquire(tids, self.completed.get((key, parity)))

    def _acquire_released(self, key, tids):
        """Threads `tids` acquire what `key` accumulated so far (a completed named barrier
        generation, or a phase a deadlocked wait goes on past)."""
        self._acquire(tids, self.released.get(key))

    def _unordered(self, mask, ev, earlier, later):
        """`mask` over accesses less those whose earlier access (event ev, thread
        `earlier`) is ordered before the later thread."""
        sel = np.flatnonzero(mask)
        ordered = ev[sel] <= self.clock[later[sel], earlier[sel]]
        if not ordered.any():
            return mask
        mask = mask.copy()
        mask[sel[ordered]] = False
        return mask
