"""Static verification of a Hopper kernel's asynchronous protocol: the mbarrier, TMA,
wgmma and bulk-store synchronization of a warp-specialized kernel, proved from the
control skeleton alone (no data, no interpreter), or the findings that say what is
missing (lowering.errors.Hazard, with the interpreter's kinds).

What it proves, for every interleaving of the block's threads:
  * mbarrier-init: each mbarrier is initialised by one thread, fence.mbarrier_init orders
    the init before any TMA load completing on it, and other threads use it only after a
    barrier that follows the init;
  * deadlock, mbarrier: each wait names the parity of the phase it is matched to, that
    phase completes (all its arrivals come; its expect_tx bytes equal the bytes of the TMA
    loads counted toward it), no arrival can count toward an earlier phase, no wait can
    miss its phase, no chain of waits is circular; each barrier generation (bar.sync id,
    count; __syncthreads) is reached by exactly its count of threads;
  * async-pending: a TMA load's bytes are touched only after the toucher's own wait on the
    phase that counts them (an async-proxy access: after that phase); a pending wgmma's
    operands and a TMA store's source are written only after the wgmma.wait_group /
    cp.async.bulk.wait_group(.read) retiring them; nothing asynchronous is left pending
    at the end of the kernel;
  * RAW, WAR, WAW: conflicting shared accesses (asynchronous ones over their whole
    flight) of different threads are ordered by happens-before;
  * proxy-fence: generic writes that the async proxy reads next (a wgmma operand, a TMA
    store's source) are followed by fence.proxy.async in the writing threads, ordered
    before the read (bytes a TMA load landed need none);
  * wgmma-fence: no wgmma's registers (accumulator, register A) were stored since its
    warp group's last wgmma.fence, and some fence precedes it.

How: a bounded, exact symbolic execution of the skeleton. lowering.async_trace unrolls
the kernel into role traces with their shared byte ranges and builds the graph. Here each
role's trace is scanned in program order (program-order edges; wgmma and bulk groups
retire at their waits; wgmma.fence), the arrivals on each mbarrier are assigned to
phases in order (each takes the init count), a TMA load to the phase of its thread's
latest arrive on its barrier, the j-th wait of a role to the next phase (a first wait of
parity 1 to the fresh barrier's phase -1, which passes at once); a phase's completion is
a synchronization point after its arrivals and loads and before its waits, a barrier
generation one after and before its participants. The assignment is then proved, not
assumed: every arrival of phase m is ordered after phase m - 1 completes, every wait
before the phase after its own. Each check is a question to the closed graph.

What it refuses (kind "cannot-prove", never a pass): a loop extent, condition, barrier
index, parity, count or expect_tx that is not a constant given the loop variables (a
condition may also depend on threadIdx.x), a block of more than one dimension, cp.async,
a shared buffer with no constant place, one statement's arrivals split across two
phases, a TMA load issued before its thread arrives on its barrier. What it does not
check: that the threads of one statement execution touch distinct bytes (lowering.hazards'
owner maps and the interpreter do), global memory, registers read while a wgmma is
pending. A whole wgmma is retired for its role at that role's wait (the instruction is
warp-group collective); a TMA load's bytes are visible to a thread only through a wait
of its own role.
"""

from dataclasses import dataclass, field

from . import kir
from .async_trace import Graph, Refusal, Trace
from .errors import Hazard, HazardError
from .hazards import END

_BLOCKING = (kir.MbarrierWait, kir.Barrier, kir.NamedBarrier)
_ASYNC_READ = {"wgmma": ("a pending wgmma still reads", "the wgmma.wait_group retiring it"),
               "tma-store": ("a TMA store still reads",
                             "the cp.async.bulk.wait_group.read retiring it")}


def check_async_protocol(kernel):
    """Every finding (lowering.errors.Hazard) of the kernel's async protocol; [] when it is
    proved."""
    try:
        return _Protocol(Trace(kernel)).check()
    except Refusal as r:
        return [Hazard("cannot-prove", "-", _point(r.stmt), _point(r.stmt), detail=r.why)]


def verify_async_protocol(kernel):
    """Raise HazardError listing the findings, unless the protocol is proved."""
    findings = check_async_protocol(kernel)
    if findings:
        raise HazardError(findings, kernel.name)


def _point(stmt):
    return "-" if stmt is None else f"{stmt.label}: {kir.format_stmt(stmt)}"


@dataclass(eq=False)
class _Phase:
    bar: "_Mbarrier"
    number: int
    arrivals: list = field(default_factory=list)    # arrive events
    arrived: int = 0
    tx: int = 0
    loads: list = field(default_factory=list)       # TMA load events
    node: int = None                                # its completion; None: never
    landed: bool = True                             # the loads land before completion


@dataclass(eq=False)
class _Mbarrier:
    name: str
    inits: list = field(default_factory=list)
    count: int = None
    batches: list = field(default_factory=list)     # arrive events, one list per step
    loads: list = field(default_factory=list)       # (load event, its latest arrive)
    waits: dict = field(default_factory=dict)       # role -> [(wait event, parity)]
    matched: dict = field(default_factory=dict)     # role -> [(wait event, phase number)]
    phases: list = field(default_factory=list)

    def phase(self, m):
        return self.phases[m] if 0 <= m < len(self.phases) else None


class _Protocol:
    def __init__(self, trace):
        self.trace, self.graph, self.found = trace, Graph(), {}
        self.bars = {}                  # pool byte -> _Mbarrier
        self.generations = []           # [(name, count, [events])], completed or not
        self.fences = {r: [] for r in trace.roles}          # FenceProxyAsync events
        self.init_fences = {r: [] for r in trace.roles}     # FenceMbarrierInit events
        self.async_pending = []         # wgmma / TMA store accesses, retired or not

    def check(self):
        self._program_order()
        self._mbarrier_phases()
        self._barrier_generations()
        cycle = self.graph.close()
        if cycle:
            self._circular_waits(cycle)
        else:
            self._phase_order()
            self._init_visibility()
            self._conflicts()
            self._proxy_fences()
            self._pending_at_end()
        return list(self.found.values())

    def _finding(self, kind, buffer, first, second, detail, byte_range=None):
        """second None: the end of the kernel."""
        key = (kind, first.stmt.label, END.label if second is None else second.stmt.label)
        if key in self.found:
            return
        later = (None, {}) if second is None else ((second.role.first, 0, 0), second.env)
        self.found[key] = Hazard(
            kind, buffer, _point(first.stmt), _point(END if second is None else second.stmt),
            byte_range=byte_range, threads=((first.role.first, 0, 0), later[0]),
            iterations=(dict(first.env), dict(later[1])), detail=detail)

    # -- program order, wgmma and bulk groups, wgmma.fence -------------------------------

    def _program_order(self):
        last, state = {}, {r: _RoleState() for r in self.trace.roles}
        for e in self.trace.events:
            s, st = e.stmt, state[e.role]
            e.enter = self.graph.node()
            e.leave = e.enter
            if isinstance(s, _BLOCKING) and not getattr(s, "arrive_only", False):
                e.leave = self.graph.node()
                self.graph.edge(e.enter, e.leave)
            if e.role in last:
                self.graph.edge(last[e.role].leave, e.enter)
            last[e.role] = e
            for a in e.accesses:
                if a.proxy == "generic":
                    a.end = e
                elif a.proxy != "tma-load":
                    self.async_pending.append(a)
                    (st.wgmma if a.proxy == "wgmma" else st.bulk)[-1].append(a)
            if isinstance(s, kir.WgmmaCommit):
                st.wgmma.append([])
            elif isinstance(s, kir.BulkCommit):
                st.bulk.append([])
            elif isinstance(s, (kir.WgmmaWait, kir.BulkWait)):
                groups = st.wgmma if isinstance(s, kir.WgmmaWait) else st.bulk
                retired = max(len(groups) - 1 - s.n, 0)  # the last list is uncommitted
                for group in groups[:retired]:
                    for a in group:
                        a.end = e
                del groups[:retired]
            elif isinstance(s, kir.FenceProxyAsync):
                self.fences[e.role].append(e)
            elif isinstance(s, kir.FenceMbarrierInit):
                self.init_fences[e.role].append(e)
            elif isinstance(s, kir.Store) and s.buffer.memory is kir.Memory.local:
                st.stored.setdefault(s.buffer, e)
            elif isinstance(s, kir.WgmmaFence):
                st.fenced, st.stored = True, {}
            elif isinstance(s, kir.Wgmma):
                self._wgmma_fence(e, st)

    def _wgmma_fence(self, e, st):
        s = e.stmt
        if not st.fenced:
            self._finding("wgmma-fence", s.d.name, e, e,
                          f"{e.role} issue a wgmma with no wgmma.fence before it (missing "
                          f"wgmma.fence: its register accesses are not ordered before it)")
        for buf, what in ((s.d, "accumulator"), (s.a, "register-A")):
            if buf in st.stored:
                self._finding("wgmma-fence", buf.name, st.stored[buf], e,
                              f"{e.role} stored {what} elements of {buf.name} since the "
                              f"last wgmma.fence, then the wgmma reads them (missing "
                              f"wgmma.fence between the register writes and the wgmma)")

    # -- mbarriers: phases, their completions and the waits matched to them --------------

    def _bar(self, e, buf, index):
        i = e.value(index, f"mbarrier index of {buf.name}:")
        at = e.value(buf.byte_offset, f"byte offset of {buf.name}:") + 8 * i
        return self.bars.setdefault(at, _Mbarrier(f"{buf.name}[{i}]"))

    def _mbarrier_phases(self):
        latest = {}                                  # (role, barrier) -> its latest arrive
        for e in self.trace.events:
            s = e.stmt
            if isinstance(s, kir.MbarrierInit):
                bar = self._bar(e, s.bar, s.index)
                bar.inits.append(e)
                bar.count = e.value(s.count, f"arrival count of {bar.name}:")
            elif isinstance(s, kir.MbarrierArrive):
                bar = self._bar(e, s.bar, s.index)
                if bar.batches and bar.batches[-1][0].step == e.step:
                    bar.batches[-1].append(e)
                else:
                    bar.batches.append([e])
                latest[(e.role, id(bar))] = e
            elif isinstance(s, kir.TmaLoad):
                bar = self._bar(e, s.bar, s.bar_index)
                if (e.role, id(bar)) not in latest:
                    raise Refusal(s, f"cannot prove: the TMA load completes on {bar.name} "
                                     f"before its thread arrives there (no phase to count "
                                     f"it toward)")
                bar.loads.append((e, latest[(e.role, id(bar))]))
            elif isinstance(s, kir.MbarrierWait):
                bar = self._bar(e, s.bar, s.index)
                parity = e.value(s.parity, f"parity of the wait on {bar.name}:")
                bar.waits.setdefault(e.role, []).append((e, parity))
        for bar in self.bars.values():
            if bar.count is None:
                e = (bar.batches[0][0] if bar.batches else bar.loads[0][0] if bar.loads
                     else next(iter(bar.waits.values()))[0][0])
                self._finding("mbarrier-init", bar.name, e, e,
                              f"{bar.name} is used but never initialised (mbarrier.init)")
                continue
            self._phases(bar)
            self._match_waits(bar)

    def _phases(self, bar):
        phase_of = {}
        for batch in bar.batches:
            if not bar.phases or bar.phases[-1].arrived == bar.count:
                bar.phases.append(_Phase(bar, len(bar.phases)))
            phase = bar.phases[-1]
            for e in batch:
                phase.arrivals.append(e)
                phase.arrived += e.role.size
                phase_of[e] = phase
                if e.stmt.tx_bytes is not None:
                    phase.tx += e.role.size * e.value(e.stmt.tx_bytes, "expect_tx bytes")
            if phase.arrived > bar.count:
                raise Refusal(batch[0].stmt, f"cannot prove: the arrivals of one statement "
                                             f"on {bar.name} split across two phases (count "
                                             f"{bar.count})")
        for load, arrive in bar.loads:
            phase_of[arrive].loads.append(load)
            for a in load.accesses:
                a.end = phase_of[arrive]
        for phase in bar.phases:
            landed = sum(e.role.size * e.stmt.map.box_bytes for e in phase.loads)
            if phase.tx != landed:
                e = phase.loads[0] if phase.loads else phase.arrivals[-1]
                self._finding("mbarrier", bar.name, phase.arrivals[-1], e,
                              f"expect_tx of {phase.tx} bytes on {bar.name} phase "
                              f"{phase.number} does not match the {landed} bytes of the TMA "
                              f"loads completing it")
                phase.landed = False
            if phase.arrived < bar.count or phase.tx > landed:
                continue                                 # it never completes
            phase.node = self.graph.node(sync=True)
            for e in phase.arrivals + phase.loads:
                self.graph.edge(e.enter, phase.node)

    def _match_waits(self, bar):
        for role, waits in bar.waits.items():
            matched, m = [], None
            for e, parity in waits:
                m = (-1 if parity == 1 else 0) if m is None else m + 1
                matched.append((e, m))
                if parity != m % 2:
                    self._finding("mbarrier", bar.name, e, e,
                                  f"wrong parity: the wait of {role} on {bar.name} names "
                                  f"parity {parity}, but the phase after the one it waited "
                                  f"for last is phase {m} (parity {m % 2})")
                if m < 0:
                    continue
                phase = bar.phase(m)
                if phase is not None and phase.node is not None:
                    self.graph.edge(phase.node, e.leave)
                    continue
                arrived = phase.arrived if phase is not None else 0
                first = phase.arrivals[-1] if arrived else (bar.inits or [e])[0]
                self._finding("deadlock", bar.name, first, e,
                              f"deadlock: the wait of {role} on {bar.name} for parity "
                              f"{parity} (phase {m}) never passes: phase {m} gets "
                              f"{arrived} of {bar.count} arrivals"
                              + ("" if phase is None or phase.landed else
                                 f" and not its {phase.tx} expected bytes"))
            bar.matched[role] = matched

    # -- named barriers and __syncthreads ------------------------------------------------

    def _barrier_generations(self):
        batches = {}                                 # name -> (count, [events of a step])
        for e in self.trace.events:
            s = e.stmt
            if isinstance(s, kir.Barrier):
                name, count = "__syncthreads()", self.trace.threads
            elif isinstance(s, kir.NamedBarrier):
                name, count = f"barrier {s.id}", s.count
            else:
                continue
            steps = batches.setdefault(name, (count, []))[1]
            if steps and steps[-1][0].step == e.step:
                steps[-1].append(e)
            else:
                steps.append([e])
        for name, (count, steps) in batches.items():
            events, reached = [], 0
            for batch in steps:
                threads = sum(e.role.size for e in batch)
                if name == "__syncthreads()" and threads != count:
                    self._finding("barrier-divergence", name, batch[0], batch[0],
                                  f"{name} is reached by {threads} of the block's {count} "
                                  f"threads (a barrier under thread-dependent control flow)")
                events += batch
                reached += threads
                if reached > count:
                    self._finding("barrier-divergence", name, events[0], batch[0],
                                  f"{name}, {count} is reached by {reached} threads: its "
                                  f"count must equal the threads that reach it")
                    return
                if reached == count:
                    self._generation(name, events)
                    events, reached = [], 0
            for e in events:
                if not getattr(e.stmt, "arrive_only", False):
                    self._finding("deadlock", name, events[0], e,
                                  f"deadlock: {name} waits for {count} threads, {reached} "
                                  f"reach it")

    def _generation(self, name, events):
        node = self.graph.node(sync=True)
        for e in events:
            self.graph.edge(e.enter, node)
            if e.leave != e.enter:
                self.graph.edge(node, e.leave)
        self.generations.append((name, node, events))

    def _circular_waits(self, cycle):
        for bar in self.bars.values():
            for role, matched in bar.matched.items():
                for e, m in matched:
                    if m < 0 or not self.graph.on_cycle(e.leave, cycle):
                        continue
                    self._finding("deadlock", bar.name, bar.phase(m).arrivals[-1], e,
                                  f"deadlock: the wait of {role} on {bar.name} for parity "
                                  f"{m % 2} (phase {m}) is in a cycle of waits: phase {m} "
                                  f"completes only after arrivals that come after this "
                                  f"wait (a wrong parity, or a missing or late arrive)")
        if not self.found:
            e = self.trace.events[0]
            self._finding("deadlock", "-", e, e, "deadlock: the waits and barriers of the "
                                                 "kernel wait for one another in a cycle")

    # -- the assignment of arrivals and waits to phases, proved --------------------------

    def _phase_order(self):
        g = self.graph
        for bar in self.bars.values():
            for earlier, phase in zip(bar.phases, bar.phases[1:]):
                if earlier.node is None:
                    continue
                for e in phase.arrivals:
                    if not g.reaches(earlier.node, e.enter):
                        self._finding("mbarrier", bar.name, earlier.arrivals[-1], e,
                                      f"cannot prove the arrival counts toward phase "
                                      f"{phase.number} of {bar.name}: it is not ordered "
                                      f"after phase {earlier.number} completes")
            for role, matched in bar.matched.items():
                for e, m in matched:
                    after = bar.phase(m + 1)
                    if after is not None and after.node is not None \
                            and not g.reaches(e.leave, after.node):
                        self._finding("mbarrier", bar.name, after.arrivals[-1], e,
                                      f"the wait of {role} on {bar.name} for phase {m} is "
                                      f"not ordered before phase {m + 1} completes: it may "
                                      f"miss its phase")
        previous = {}
        for name, node, events in self.generations:
            if name in previous:
                for e in events:
                    if not g.reaches(previous[name], e.enter):
                        self._finding("barrier-divergence", name, events[0], e,
                                      f"cannot prove {name} counts this arrival in its "
                                      f"next generation: it is not ordered after the "
                                      f"previous one completes")
            previous[name] = node

    def _init_visibility(self):
        for bar in self.bars.values():
            if not bar.inits:
                continue
            init = bar.inits[0]
            if len(bar.inits) > 1 or init.role.size > 1:
                self._finding("mbarrier-init", bar.name, init, bar.inits[-1],
                              f"{bar.name} is initialised more than once")
            uses = [e for batch in bar.batches for e in batch]
            uses += [e for e, _ in bar.loads]
            uses += [e for waits in bar.waits.values() for e, _ in waits]
            for e in uses:
                if not self.graph.before(init, e):
                    self._finding("mbarrier-init", bar.name, init, e,
                                  f"{e.role} use {bar.name} before its init is visible to "
                                  f"them: no barrier after the mbarrier.init orders it "
                                  f"before the use")
            for e, _ in bar.loads:
                if not any(self.graph.reaches(init.leave, f.enter) and self.graph.before(f, e)
                           for f in self.init_fences[init.role]):
                    self._finding("mbarrier-init", bar.name, init, e,
                                  f"a TMA load completes on {bar.name} with no "
                                  f"fence.mbarrier_init after its init")

    # -- shared accesses -----------------------------------------------------------------

    def _accesses(self):
        return sorted((a for e in self.trace.events for a in e.accesses),
                      key=lambda a: (a.lo, a.event.step))

    def _pairs(self):
        """(earlier, later, how their threads meet) in walk order, for the accesses of
        different statement executions that touch common bytes."""
        accesses = self._accesses()
        for i, a in enumerate(accesses):
            for b in accesses[i + 1:]:
                if b.lo >= a.hi:
                    break
                if a.event.step != b.event.step:
                    meet = a.threads_meet(b)
                    if meet:
                        yield ((a, b) if a.event.step < b.event.step else (b, a)) + (meet,)

    def _ordered(self, first, second, meet="other"):
        """Is access `first` complete before access `second` begins, for the threads that
        touch their common bytes (`meet`: Access.threads_meet)?"""
        g, e = self.graph, second.event
        if first.proxy == "tma-load":
            phase = first.end
            if phase is None or phase.node is None or not phase.landed:
                return False
            if second.proxy != "generic" and g.reaches(phase.node, e.enter):
                return True
            return any(m >= phase.number and g.reaches(w.leave, e.enter)
                       for w, m in phase.bar.matched.get(e.role, ()))
        if first.end is None:
            return False
        if meet == "same" or (first.proxy == "wgmma" and first.end.role is e.role):
            return g.reaches(first.end.leave, e.enter)
        return g.before(first.end, e)

    def _conflicts(self):
        for a, b, meet in self._pairs():
            if not (a.is_write or b.is_write):
                continue
            if (a.event.role is b.event.role and a.buffer is b.buffer and a.info is not None
                    and b.info is not None and a.info.same_thread_as(b.info)):
                meet = "same"
            if not (self._ordered(a, b, meet) or self._ordered(b, a, meet)):
                self._conflict(a, b)

    def _conflict(self, a, b):
        first, second = (b, a) if self.graph.before(b.event, a.event) else (a, b)
        fe, se = first.event, second.event
        what = f"{_op(second)} by {se.role} ({se.stmt.label})"
        if first.proxy == "tma-load":
            kind = "async-pending"
            phase = first.end
            where = f"{phase.bar.name} phase {phase.number}" if phase else "its phase"
            detail = (f"a TMA load has not landed: {what} is not ordered after {where} "
                      f"completes through a wait of its threads")
        elif first.proxy in _ASYNC_READ and second.proxy == "generic" \
                and self.graph.before(fe, se):
            held, retire = _ASYNC_READ[first.proxy]
            kind = "async-pending"
            detail = f"{what} writes bytes {held}: {retire} does not happen before it"
        else:
            kind = ("WAW" if second.is_write else "RAW") if first.is_write else "WAR"
            detail = f"{what} is not ordered after {_op(first)} by {fe.role} ({fe.stmt.label})"
            if first.proxy in _ASYNC_READ:
                detail += f": {_ASYNC_READ[first.proxy][1]} does not happen before it"
            else:
                detail += ": no barrier, mbarrier phase or program order joins them"
        self._finding(kind, _names(first, second), fe, se, detail, first.overlap(second))

    def _proxy_fences(self):
        writes = [a for a in self._accesses() if a.is_write]
        for a, b, meet in self._pairs():
            for x, y in ((a, b), (b, a)):
                if x.is_write and x.proxy == "generic" and y.proxy in _ASYNC_READ \
                        and self._ordered(x, y, meet) and not self._fenced(x, y, writes):
                    self._finding("proxy-fence", _names(x, y), x.event, y.event,
                                  f"{x.event.role} wrote bytes through the generic proxy "
                                  f"that {_op(y)} reads through the async proxy: no "
                                  f"fence.proxy.async by the writing threads between the "
                                  f"generic write and the async-proxy read", x.overlap(y))

    def _fenced(self, x, y, writes):
        """Is generic write x, ordered before async read y, proxy-fenced (or overwritten
        before y reads)?"""
        g = self.graph
        if any(g.reaches(x.event.leave, f.enter) and g.before(f, y.event)
               for f in self.fences[x.event.role]):
            return True
        lo, hi = x.overlap(y)
        return any(z is not x and any(a <= lo and hi <= b for a, b, _ in z.spans)
                   and self._ordered(x, z) and self._ordered(z, y) for z in writes)

    def _pending_at_end(self):
        for a in self.async_pending:
            if a.end is None:
                self._finding("async-pending", a.buffer.name, a.event, None,
                              f"{_op(a)} is still pending when the kernel ends: "
                              f"{_ASYNC_READ[a.proxy][1]} never runs")
        for bar in self.bars.values():
            for phase in bar.phases:
                waited = any(m >= phase.number for matched in bar.matched.values()
                             for _, m in matched)
                for e in phase.loads if not waited else ():
                    self._finding("async-pending", e.stmt.dst.name, e, None,
                                  f"a TMA load has not landed when the kernel ends: no "
                                  f"thread waits for {bar.name} phase {phase.number}")


@dataclass
class _RoleState:
    """A role's open wgmma and bulk groups (the last list uncommitted), the local buffers
    it stored since its last wgmma.fence (buffer -> first store), whether one came."""

    wgmma: list = field(default_factory=lambda: [[]])
    bulk: list = field(default_factory=lambda: [[]])
    stored: dict = field(default_factory=dict)
    fenced: bool = False


_ASYNC_OPS = {"tma-load": "the TMA load", "wgmma": "the wgmma", "tma-store": "the TMA store"}


def _op(access):
    if access.proxy in _ASYNC_OPS:
        return _ASYNC_OPS[access.proxy]
    if isinstance(access.event.stmt, kir.StMatrix):
        return "stmatrix"
    return f"the {'write' if access.is_write else 'read'} of {access.buffer.name}"


def _names(a, b):
    return "/".join(dict.fromkeys((a.buffer.name, b.buffer.name)))
