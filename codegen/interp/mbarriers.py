"""Barriers other than __syncthreads: Hopper's mbarriers and named barriers (bar.sync /
bar.arrive id, count).

  * An mbarrier (kir.hopper's state model) is element `index` of an i64 shared buffer,
    8-byte aligned, keyed here by its pool byte offset: the phase number (phases
    completed so far), the arrivals pending in the current phase, the init count and the
    transaction bytes still expected (negative when TMA bytes completed before an
    expect_tx, as PTX allows). The state is kept beside the pool, not in its bytes: an
    mbarrier is only touched through these statements.
  * MbarrierInit: each active thread sets the state (phase 0, count pending, no bytes);
    threads of one statement naming one barrier must give one count. Init visibility
    ("mbarrier-init"): another thread's arrive or wait (or TMA load) on the barrier before
    a __syncthreads has passed since the init (the epoch is the init's) is reported, and
    a TMA load completing on it before its init thread ran FenceMbarrierInit after the
    init (the init's statement and thread are the report's first side).
  * MbarrierArrive: the active threads arrive one by one in thread order, each first
    adding its tx_bytes (expect_tx); the phase completes when no arrival and no byte is
    pending (then the arrivals reset to the count and the phase number advances). The
    arrivals of one statement execution that complete a phase and go on into the next
    are an "mbarrier" hazard (the count is not the number of threads arriving per phase:
    the phases drift, and one completes before its arrivals).
    Arriving on a barrier never initialised, or when no arrival is pending (the phase
    waits only for bytes), is an "mbarrier" hazard naming buffer[index] and the phase.
  * MbarrierWait(parity P) passes once the phase of parity P has completed: the current
    phase's parity differs from P (a fresh barrier passes parity 1 at once, parity 0
    after the first completion). It is a generator: a switch point first (roles.py);
    then, if the wait does not pass, it lands the TMA loads queued on that barrier
    (tma.py), in issue order, until it passes. If it still does not: inside a role
    branch it yields a Wait (ready once it could pass, counting the queued loads; the
    deadlock report names buffer[index], phase, parity, pending arrivals and bytes), and
    once resumed lands the loads and passes; in plain lockstep (no role branch around
    it) nothing could satisfy it any more (every thread of the block is here), so it is
    a "deadlock" hazard naming the same, and execution goes on past the wait. A passing
    wait acquires the phase's order (ordering.py): arrivals release into the current
    phase, a landing TMA load releases its issuing thread's write into it.
  * NamedBarrier: id in 1..15, count a positive multiple of 32; a generator (a switch
    point first). Its current generation counts the threads arrived by bar.arrive and
    bar.sync; bar.arrive does not block; bar.sync blocks (yields a Wait, inside a role
    branch) until `count` threads have arrived; the arrival that makes `count`
    completes the generation: every bar.sync thread of it acquires the join of all its
    participants' releases (ordering.py), and a completion by the whole block is a
    Barrier too (execution._barrier: a new epoch). More arrivals than `count`, a thread
    arriving twice, or (in plain lockstep, where no later arrival can come) a bar.sync
    short of its count is a "barrier-divergence" hazard and the barrier is reset.

It sits below execution.py, which names these handlers in its statement tables; the
state is made in _Block.__init__ (machine.py).
"""

import numpy as np

from codegen.errors import Hazard
from codegen.interp.base import switch_point, InterpError, _point
from codegen.interp.scheduler import Wait
from fuserir.dtypes import DataType
from fuserir.instructions import NAMED_BARRIER_IDS
from lowering import kir

_COUNT_MAX = (1 << 20) - 1      # mbarrier.init's count and expect_tx's bytes: below 2^20


class _Mbarrier:
    """One initialised mbarrier: its name (buffer[index]), the init count, the phase
    number, the arrivals pending and the transaction bytes expected in the current
    phase."""

    def __init__(self, name, count, init):
        self.name, self.count = name, count
        self.phase, self.pending, self.tx = 0, count, 0
        self.init_stmt, self.init_iters, self.init_tid, self.init_epoch = init
        self.fenced = False         # a FenceMbarrierInit of the init thread followed it

    def advance(self):
        """Complete the current phase if nothing is pending any more."""
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def passes(self, parity):
        return self.phase % 2 != parity

    def state(self):
        return (f"phase {self.phase} (parity {self.phase % 2}) is current with "
                f"{self.pending} of {self.count} arrivals pending and tx-count {self.tx} "
                f"bytes")


class _Generation:
    """The current generation of a named barrier: the threads arrived (bar.sync's and
    bar.arrive's), the arrays of bar.sync threads waiting, whether it completed."""

    def __init__(self):
        self.arrived = np.zeros(0, np.int64)
        self.waiters = []
        self.done = False


class _Mbarriers:
    """The mixin of _Block (machine.py) that runs the mbarrier statements and named
    barriers (state: `mbarriers` by pool byte offset, `named` by barrier id)."""

    def _mbarrier_refs(self, buf, index, act, what):
        """(active threads, element indices, pool byte offsets, layout) of the mbarrier
        each active thread names; out-of-bounds ones are reported and dropped."""
        if buf is None or buf.memory is not kir.Memory.shared or buf.dtype is not DataType.i64:
            raise InterpError(f"{what} needs an i64 shared mbarrier buffer, not "
                              f"{getattr(buf, 'name', None)}{self.where()}")
        lay = self._layout(buf)
        idx = self._index(self.ev(index, act), len(act))
        ok = self._check(lay.name, idx, (idx >= 0) & (idx < lay.size), act,
                         lambda: f"outside {lay.name}[0, {lay.size})", lay)
        if ok is not None:
            act, idx = act[ok], idx[ok]
        off = lay.offset + idx * 8
        if (off % 8).any():
            raise InterpError(f"mbarrier {lay.name} at pool byte {lay.offset} is not 8-byte "
                              f"aligned{self.where()}")
        return act, idx, off, lay

    def _mbarrier_hazard(self, kind, lay, tid, detail):
        s, it = self.stmt, dict(self.iters)
        t = self.interp.coords(tid)
        self.interp.add((kind, s.label, s.label), lambda: Hazard(
            kind=kind, buffer=lay.name, first=_point(s), second=_point(s),
            threads=(t, t), iterations=(it, it), block=self.bidx, detail=detail))

    def _bounded(self, expr, act, low, what):
        """expr's values over act, each in low.._COUNT_MAX (what mbarrier.init's count and
        expect_tx's bytes may be), else an InterpError: `what` with the value and thread."""
        values = self._index(self.ev(expr, act), len(act))
        bad = (values < low) | (values > _COUNT_MAX)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InterpError(f"{what.format(int(values[i]), self.interp.coords(act[i]))} "
                              f"is not in {low}..{_COUNT_MAX}{self.where()}")
        return values

    def _mbarrier_init(self, s, act):
        act, idx, off, lay = self._mbarrier_refs(s.bar, s.index, act, "mbarrier.init")
        count = self._bounded(s.count, act, 1, "mbarrier.init count {} of thread {}")
        for o in np.unique(off).tolist():
            on = off == o
            counts = np.unique(count[on])
            name = f"{lay.name}[{int(idx[on][0])}]"
            if len(counts) > 1:
                raise InterpError(f"threads initialise mbarrier {name} with different "
                                  f"counts {counts.tolist()}{self.where()}")
            self.mbarriers[o] = _Mbarrier(name, int(counts[0]), (
                s, self.iters, int(act[on][0]), self.epoch))

    def _fence_mbarrier_init(self, s, act):
        """The active threads' earlier inits are fenced (visible to the async proxy)."""
        mine = set(act.tolist())
        for bar in self.mbarriers.values():
            if bar.init_tid in mine:
                bar.fenced = True

    def _init_visible(self, bar, lay, tids, what, async_proxy=False):
        """Threads `tids` use `bar` (`what`): an "mbarrier-init" hazard if one of them is
        not its init thread and no __syncthreads has passed since the init; with
        async_proxy (a TMA load completing on it), if its init thread has not executed
        fence.mbarrier_init since the init."""
        others = [t for t in tids if t != bar.init_tid]
        if others and self.epoch == bar.init_epoch:
            self._hazard(
                "mbarrier-init", lay.name, bar.init_stmt, bar.init_iters,
                (bar.init_tid, others[0]),
                detail=f"{len(others)} thread(s) {what} {bar.name} that thread "
                       f"{self.interp.coords(bar.init_tid)} initialised with no "
                       f"__syncthreads since the init (the init is not visible to other "
                       f"threads)")
        if async_proxy and not bar.fenced:
            self._hazard(
                "mbarrier-init", lay.name, bar.init_stmt, bar.init_iters,
                (bar.init_tid, tids[0]),
                key=("mbarrier-init", bar.init_stmt.label, self.stmt.label, "fence"),
                detail=f"a TMA load completes on {bar.name}: mbarrier init not fenced "
                       f"before the async proxy uses it (no fence.mbarrier_init by thread "
                       f"{self.interp.coords(bar.init_tid)} after the init)")

    def _mbarrier_arrive(self, s, act):
        act, idx, off, lay = self._mbarrier_refs(s.bar, s.index, act, "mbarrier.arrive")
        tx = None
        if s.tx_bytes is not None:
            tx = self._bounded(s.tx_bytes, act, 0,
                               "mbarrier.arrive.expect_tx of {} bytes by thread {}")
        for o in np.unique(off).tolist():
            if o in self.mbarriers:
                self._init_visible(self.mbarriers[o], lay, act[off == o].tolist(),
                                   "arrive on")
        arrived = {}                  # mbarrier -> threads arrived in its current phase
        first_phase = {}              # mbarrier -> the phase this statement first arrived in
        for i, (t, o) in enumerate(zip(act.tolist(), off.tolist())):
            bar = self.mbarriers.get(o)
            if bar is None:
                self._mbarrier_hazard("mbarrier", lay, t, (
                    f"thread {self.interp.coords(t)} arrives on {lay.name}[{int(idx[i])}], "
                    f"which no mbarrier.init has initialised"))
                continue
            if tx is not None:
                bar.tx += int(tx[i])
            if bar.pending == 0:
                self._mbarrier_hazard("mbarrier", lay, t, (
                    f"thread {self.interp.coords(t)} arrives on {bar.name} in phase "
                    f"{bar.phase} when no arrival is pending (more arrivals than its count "
                    f"{bar.count}; the phase waits for {bar.tx} transaction bytes)"))
                continue
            start = first_phase.setdefault(bar, bar.phase)
            if start is not None and bar.phase != start:
                first_phase[bar] = None       # reported once per statement execution
                self._mbarrier_hazard("mbarrier", lay, t, (
                    f"the arrivals of one execution of {s.label} on {bar.name} are split "
                    f"across phases {start} and {bar.phase}: thread "
                    f"{self.interp.coords(t)} arrives after the phase its statement began "
                    f"in completed (the count {bar.count} is not the number of threads "
                    "that arrive in a phase)"))
            bar.pending -= 1
            arrived.setdefault(bar, []).append(t)
            self._advance(bar, arrived)
        for bar, tids in arrived.items():
            self._release_clock(bar, tids)

    def _advance(self, bar, arrived=None):
        """Complete bar's phase if nothing is pending any more: the threads in
        arrived[bar] (this statement's arrivals in the phase) release into it first."""
        phase = bar.phase
        bar.advance()
        if bar.phase != phase:
            if arrived and bar in arrived:
                self._release_clock(bar, arrived.pop(bar))
            self._complete_phase(bar, phase % 2)

    def _complete_tx(self, off, nbytes, tid, ev):
        """A TMA load (access event ev of thread tid) on the mbarrier at pool byte `off`
        landed `nbytes` bytes: the landing is released into the phase."""
        bar = self.mbarriers.get(off)
        if bar is not None:
            self._release_event(bar, tid, ev)
            bar.tx -= nbytes
            self._advance(bar)

    def _could_pass(self, off, bar, parity):
        """Whether a wait on bar (at pool byte off) for `parity` passes now, or once the
        TMA loads queued on it land."""
        if bar.passes(parity):
            return True
        if bar.pending:
            return False
        tx = bar.tx
        for cp in self.tma_loads:
            if cp.bar == off:
                tx -= cp.nbytes
                if tx == 0:
                    return True
        return False

    def _mbarrier_wait(self, s, act):
        act, idx, off, lay = self._mbarrier_refs(s.bar, s.index, act, "mbarrier.wait")
        parity = self._index(self.ev(s.parity, act), len(act))
        if ((parity != 0) & (parity != 1)).any():
            i = int(np.flatnonzero((parity != 0) & (parity != 1))[0])
            raise InterpError(f"mbarrier.wait parity {int(parity[i])} of thread "
                              f"{self.interp.coords(act[i])} is not 0 or 1{self.where()}")
        yield None                                # a switch point (roles.py)
        for o, p in sorted(set(zip(off.tolist(), parity.tolist()))):
            on = np.flatnonzero((off == o) & (parity == p))
            t = int(act[on[0]])
            bar = self.mbarriers.get(o)
            if bar is None:
                self._mbarrier_hazard("mbarrier", lay, t, (
                    f"{len(on)} thread(s) wait on {lay.name}[{int(idx[on[0]])}], which no "
                    f"mbarrier.init has initialised"))
                continue
            self._init_visible(bar, lay, act[on].tolist(), "wait on")
            if not bar.passes(p):
                self._land_loads(o, lambda: bar.passes(p))
            while not bar.passes(p) and self.in_roles:
                yield Wait(s, lambda o=o, bar=bar, p=p: self._could_pass(o, bar, p),
                           what=lay.name, why=lambda n=len(on), bar=bar, p=p: (
                               f"{n} thread(s) wait on {bar.name} for parity {p}: "
                               f"{bar.state()}"))
                self._land_loads(o, lambda: bar.passes(p))
            if not bar.passes(p):
                self._mbarrier_hazard("deadlock", lay, t, (
                    f"{len(on)} thread(s) wait forever on {bar.name} for parity {p}: "
                    f"{bar.state()}, and no pending TMA load completes it"))
                self._acquire_released(bar, act[on])
                continue
            self._acquire_phase(bar, p, act[on])

    def _named_barrier(self, s, act):
        if s.id not in NAMED_BARRIER_IDS:
            raise InterpError(f"named barrier id {s.id} is not in "
                              f"{NAMED_BARRIER_IDS.start}..{NAMED_BARRIER_IDS.stop - 1} (0 "
                              f"is __syncthreads'){self.where()}")
        if s.count <= 0 or s.count % 32:
            raise InterpError(f"named barrier {s.id}: thread count {s.count} is not a "
                              f"positive multiple of 32{self.where()}")
        yield None                                # a switch point (roles.py)
        gen = self.named.setdefault(s.id, _Generation())
        before = gen.arrived
        arrived = np.concatenate([before, act])
        twice = np.intersect1d(before, act)
        lockstep_short = not s.arrive_only and not self.in_roles and len(arrived) < s.count
        if len(twice) or len(arrived) > s.count or lockstep_short:
            del self.named[s.id]
            self._barrier_divergence(s, act, before, arrived, twice)
            return
        gen.arrived = arrived
        self._release_clock(gen, act)
        if not s.arrive_only:
            gen.waiters.append(act)
        if len(arrived) == s.count:
            del self.named[s.id]
            gen.done = True
            if gen.waiters:
                self._acquire_released(gen, np.concatenate(gen.waiters))
                self._spread_acquisitions(np.concatenate(gen.waiters), arrived)
                if len(arrived) == self.T:
                    self._barrier(s, self.all)
            return
        if not s.arrive_only:
            yield Wait(s, lambda: gen.done, what=f"named barrier {s.id}", why=lambda: (
                f"{len(act)} thread(s) wait at named barrier {s.id}: {len(gen.arrived)} "
                f"of {s.count} threads have arrived in its current generation"))

    def _barrier_divergence(self, s, act, before, arrived, twice):
        cause = self.divergent[-1] if self.divergent else s
        it = dict(self.iters)
        t = self.interp.coords(act[0])
        why = (f"thread {self.interp.coords(twice[0])} arrives twice" if len(twice) else
               f"{len(arrived)} thread(s) arrive ({len(before)} by bar.arrive before it)")
        self.interp.add(("barrier-divergence", cause.label, s.label), lambda: Hazard(
            kind="barrier-divergence", buffer=f"named barrier {s.id}", first=_point(cause),
            second=_point(s), threads=(t, t), iterations=(it, it), block=self.bidx,
            detail=f"barrier {s.id} expects {s.count} threads but {why}: on the GPU it "
                   f"never completes or completes with the wrong threads (the "
                   f"interpreter resets it)"))

    # the statements this room runs: leaves run to completion; compound ones are
    # generators (they run bodies, yield a Wait, or offer a switch point)
    LEAF_STATEMENTS = {kir.MbarrierInit: _mbarrier_init,
                       kir.FenceMbarrierInit: _fence_mbarrier_init}
    COMPOUND_STATEMENTS = {kir.MbarrierWait: _mbarrier_wait,
                           kir.NamedBarrier: _named_barrier,
                           kir.MbarrierArrive: switch_point(_mbarrier_arrive)}
