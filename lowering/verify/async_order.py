"""The happens-before graph of a Hopper kernel's role traces (lowering.verify.async_trace):
step 2 of lowering.verify.async_protocol.

The graph. Its nodes are role events (each meaning: every thread of the role, at this
point) and synchronization points (an mbarrier phase's completion, a barrier's
generation). An edge from an event to a later one of its role is program order, thread by
thread; an edge into or out of a synchronization point holds for every thread of the
role. So an event happens before another for every pair of their threads (`before`) when
a path through a synchronization point joins them, or, within a role of one thread, when
any path does.

Edges. Program order joins each role's consecutive events (a wait or bar.sync is two
nodes, `enter` and `leave`). The arrivals on an mbarrier are assigned to phases in walk
order, each phase taking the init count (one statement's arrivals never split); a TMA
load counts toward the phase of its thread's latest arrive on its barrier; a role's j-th
wait is matched to the phase after the one its previous wait matched (the first: parity
1, the fresh barrier's phase -1, which passes at once; parity 0, phase 0). A completed
phase is a synchronization point after its arrivals and its loads' issues and before its
matched waits' `leave`; a barrier generation (bar.sync id, count or __syncthreads, its
arrivals grouped in walk order until they reach the count) one after its participants'
`enter` and before their `leave` (bar.arrive does not wait). `_phase_order` then proves
the assignment, rather than assuming it: every arrival of a phase (or generation) is
ordered after the previous one completes, every wait before the phase after its own.
Findings made on the way: a wrong parity, a phase that never completes (deadlock), an
expect_tx that does not match its loads, a barrier reached by the wrong number of
threads, a wgmma issued over registers not wgmma.fenced since they were accessed.
"""

from dataclasses import dataclass, field

from .. import kir
from .async_trace import Refusal
from ..errors import Hazard
from .hazards import END


def point(stmt):
    """A statement as findings cite it: "S12: <its kernel IR>"."""
    return "-" if stmt is None else f"{stmt.label}: {kir.format_stmt(stmt)}"


class Graph:
    """Happens-before over role events and synchronization points (see the header)."""

    def __init__(self):
        self.succ, self.is_sync = [], []
        self.reach = self.through = None

    def node(self, sync=False):
        self.succ.append([])
        self.is_sync.append(sync)
        return len(self.succ) - 1

    def edge(self, a, b):
        self.succ[a].append(b)

    def close(self):
        """Computes reachability; returns the nodes on or behind a cycle (none: acyclic)."""
        n = len(self.succ)
        indegree = [0] * n
        for targets in self.succ:
            for b in targets:
                indegree[b] += 1
        order = [a for a in range(n) if indegree[a] == 0]
        for a in order:                                   # grows as it goes
            for b in self.succ[a]:
                indegree[b] -= 1
                if indegree[b] == 0:
                    order.append(b)
        if len(order) < n:
            return set(range(n)) - set(order)
        # reach[a]: nodes a path from a reaches (a included); through[a]: those reached
        # by a path that passes a synchronization point; both bit sets
        self.reach, self.through = [0] * n, [0] * n
        for a in reversed(order):
            reach, through = 1 << a, 0
            for b in self.succ[a]:
                reach |= self.reach[b]
                through |= self.through[b]
            self.reach[a] = reach
            self.through[a] = reach if self.is_sync[a] else through
        return set()

    def on_cycle(self, start, among):
        """Does a path within the node set `among` lead from `start` back to it?"""
        stack, seen = list(self.succ[start]), set()
        while stack:
            a = stack.pop()
            if a == start:
                return True
            if a in among and a not in seen:
                seen.add(a)
                stack.extend(self.succ[a])
        return False

    def reaches(self, a, b):
        return bool(self.reach[a] >> b & 1)

    def before(self, first, second):
        """Does event `first` end before event `second` begins, for all their threads?"""
        if first.role is second.role and first.role.size == 1:
            return self.reaches(first.leave, second.enter)
        return bool(self.through[first.leave] >> second.enter & 1)


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


@dataclass
class _RoleState:
    """A role's open wgmma and bulk groups (the last list uncommitted), the local buffers
    it accessed since its last wgmma.fence (buffer -> first access), whether one came."""

    wgmma: list = field(default_factory=lambda: [[]])
    bulk: list = field(default_factory=lambda: [[]])
    stored: dict = field(default_factory=dict)
    fenced: bool = False

    def snapshot(self):
        """(wgmma groups, bulk groups, names of the stored buffers, fenced), copied."""
        return (tuple(map(tuple, self.wgmma)), tuple(map(tuple, self.bulk)),
                frozenset(b.name for b in self.stored), self.fenced)


def _point(event):
    """Which iteration of which run-time loops `event` is in."""
    return tuple((id(v.loop), v.instance, int(v)) for v in event.iterations)


def _finding_key(kind, first, second):
    return (kind, first.stmt.label, END.label if second is None else second.stmt.label)


class Ordering:
    """The graph of a Trace, built (`order`), and the findings made building it."""

    def __init__(self, trace):
        self.trace, self.graph, self.found = trace, Graph(), {}
        self.bars = {}                  # pool byte -> _Mbarrier
        self.generations = []           # [(name, completion node, events)], completed ones
        self.fences = {r: [] for r in trace.roles}          # FenceProxyAsync events
        self.init_fences = {r: [] for r in trace.roles}     # FenceMbarrierInit events
        self.async_pending = []         # wgmma / TMA store accesses, retired or not
        # with run-time loops: (role, event or None: the end, the role's state before
        # it) where the role enters another iteration (lowering.verify.async_runtime reads them)
        self.role_states = []

    def order(self):
        """Build the graph and close it; returns the nodes on or behind a cycle."""
        self._program_order()
        self._mbarrier_phases()
        self._barrier_generations()
        cycle = self.graph.close()
        if cycle:
            self._circular_waits(cycle)
        else:
            self._phase_order()
        return cycle

    def _found_already(self, kind, first, second):
        """Is there a finding of `kind` between these events' statements (_finding keeps
        one per pair of statements)?"""
        return _finding_key(kind, first, second) in self.found

    def _finding(self, kind, buffer, first, second, detail, byte_range=None):
        """second None: the end of the kernel."""
        key = _finding_key(kind, first, second)
        if key in self.found:
            return
        where = self.trace.coordinates
        later = (None, {}) if second is None else (where(second.role.first), second.env)
        self.found[key] = Hazard(
            kind, buffer, point(first.stmt), point(END if second is None else second.stmt),
            byte_range=byte_range, threads=(where(first.role.first), later[0]),
            iterations=(dict(first.env), dict(later[1])), detail=detail)


    # -- program order, wgmma and bulk groups, wgmma.fence -------------------------------

    def _program_order(self):
        last, state = {}, {r: _RoleState() for r in self.trace.roles}
        tracked = bool(self.trace.trips)
        registers = self.trace.register_effects
        node, edge = self.graph.node, self.graph.edge
        for e in self.trace.events:
            effects, st, before = e.effects, state[e.role], last.get(e.role)
            order, group = effects.order, effects.group
            if tracked and (before is None or before.iterations is not e.iterations
                            and _point(before) != _point(e)):
                self.role_states.append((e.role, e, st.snapshot()))
            e.enter = e.leave = node()
            if order is not None and order.blocking and order.scope != "gpu":
                e.leave = node()
                edge(e.enter, e.leave)
            if before is not None:
                edge(before.leave, e.enter)
            last[e.role] = e
            for a in e.accesses:
                if a.proxy == "generic":
                    a.end = e
                elif a.proxy != "tma-load":
                    self.async_pending.append(a)
                    (st.wgmma if a.proxy == "wgmma" else st.bulk)[-1].append(a)
            groups = {"wgmma": st.wgmma, "bulk": st.bulk}.get(group and group.kind)
            if groups is not None and group.op == "commit":
                groups.append([])
            elif groups is not None and group.op == "wait":
                retired = max(len(groups) - 1 - group.n, 0)  # the last list: uncommitted
                for retiring in groups[:retired]:
                    for a in retiring:
                        a.end = e
                del groups[:retired]
            elif order is not None and order.kind == "fence":
                if order.orders == "proxy":
                    self.fences[e.role].append(e)
                elif order.orders == "mbarrier-init":
                    self.init_fences[e.role].append(e)
                elif order.orders == "registers":
                    st.fenced, st.stored = True, {}
            accessed, used = registers(e.stmt)
            for buffer in accessed:
                st.stored.setdefault(buffer, e)
            if used:
                self._register_fence(e, st, used)
        if tracked:
            self.role_states += [(r, None, st.snapshot()) for r, st in state.items()]


    def _register_fence(self, e, st, used):
        """The wgmma.fence rule at an instruction using registers `used` asynchronously
        (a wgmma: its accumulator, then register A)."""
        buffers = list(dict.fromkeys([a.buffer for a in used if a.write]
                                     + [a.buffer for a in used if not a.write]))
        if not st.fenced:
            self._finding("wgmma-fence", buffers[0].name, e, e,
                          f"{e.role} issue a wgmma with no wgmma.fence before it (missing "
                          f"wgmma.fence: its register accesses are not ordered before it)")
        for i, buf in enumerate(buffers):
            if buf in st.stored:
                what = "accumulator" if i == 0 else "register-A"
                self._finding("wgmma-fence", buf.name, st.stored[buf], e,
                              f"{e.role} accessed {what} elements of {buf.name} since the "
                              f"last wgmma.fence, then the wgmma uses them (missing "
                              f"wgmma.fence between the register accesses and the wgmma)")


    # -- mbarriers: phases, their completions and the waits matched to them --------------

    def _bar(self, e, buf, index):
        i = e.value(index, f"mbarrier index of {buf.name}:")
        at = e.value(buf.byte_offset, f"byte offset of {buf.name}:") + 8 * i
        return self.bars.setdefault(at, _Mbarrier(f"{buf.name}[{i}]"))


    def _mbarrier_phases(self):
        latest = {}                                  # (role, barrier) -> its latest arrive
        for e in self.trace.events:
            op = e.effects.mbarrier
            if op is None:
                continue
            bar = self._bar(e, op.bar, op.index)
            if op.op == "init":
                bar.inits.append(e)
                bar.count = e.value(op.value, f"arrival count of {bar.name}:")
            elif op.op == "arrive":
                if bar.batches and bar.batches[-1][0].step == e.step:
                    bar.batches[-1].append(e)
                else:
                    bar.batches.append([e])
                latest[(e.role, id(bar))] = e
            elif op.op == "complete_tx":
                if (e.role, id(bar)) not in latest:
                    raise Refusal(e.stmt, f"cannot prove: the TMA load completes on "
                                          f"{bar.name} before its thread arrives there (no "
                                          f"phase to count it toward)")
                bar.loads.append((e, latest[(e.role, id(bar))]))
            elif op.op == "wait":
                parity = e.value(op.value, f"parity of the wait on {bar.name}:")
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
                tx_bytes = e.effects.mbarrier.value
                if tx_bytes is not None:
                    phase.tx += e.role.size * e.value(tx_bytes, "expect_tx bytes")
            if phase.arrived > bar.count:
                raise Refusal(batch[0].stmt, f"cannot prove: the arrivals of one statement "
                                             f"on {bar.name} split across two phases (count "
                                             f"{bar.count})")
        for load, arrive in bar.loads:
            phase_of[arrive].loads.append(load)
            for a in load.accesses:
                a.end = phase_of[arrive]
        for phase in bar.phases:
            landed = sum(e.role.size * e.effects.mbarrier.value for e in phase.loads)
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
        # a cluster barrier, within the block, orders the threads that execute it; it
        # waits for the others to exit (lowering.verify.cluster_protocol proves they reach
        # none), so each generation comes after their last events: a role that waits for
        # something done after it is a cycle (a deadlock)
        cluster_roles, last = {}, {}
        for e in self.trace.events:
            order = e.effects.order
            last[id(e.role)] = e
            if order is not None and order.kind == "barrier" and order.scope == "cluster":
                cluster_roles[id(e.role)] = e.role.size
        self.exits_first = [e for r, e in last.items() if r not in cluster_roles] \
            if cluster_roles else []
        for e in self.trace.events:
            order = e.effects.order
            if order is None or order.kind != "barrier":
                continue
            if order.scope == "block":
                name, count = "__syncthreads()", self.trace.threads
            elif order.scope == "cluster":
                name, count = "barrier.cluster", sum(cluster_roles.values())
            else:
                name, count = f"barrier {order.id}", order.count
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
                if e.effects.order.blocking:
                    self._finding("deadlock", name, events[0], e,
                                  f"deadlock: {name} waits for {count} threads, {reached} "
                                  f"reach it")


    def _generation(self, name, events):
        node = self.graph.node(sync=True)
        for e in events:
            self.graph.edge(e.enter, node)
            if e.leave != e.enter:
                self.graph.edge(node, e.leave)
        if name == "barrier.cluster":
            for e in self.exits_first:
                self.graph.edge(e.leave, node)
        self.generations.append((name, node, events))


    # -- the assignment of arrivals and waits to phases, proved --------------------------

    def _circular_waits(self, cycle):
        for bar in self.bars.values():
            for role, matched in bar.matched.items():
                for e, m in matched:
                    phase = bar.phase(m)              # None: reported as never passing
                    if phase is None or not self.graph.on_cycle(e.leave, cycle):
                        continue
                    self._finding("deadlock", bar.name, phase.arrivals[-1], e,
                                  f"deadlock: the wait of {role} on {bar.name} for parity "
                                  f"{m % 2} (phase {m}) is in a cycle of waits: phase {m} "
                                  f"completes only after arrivals that come after this "
                                  f"wait (a wrong parity, or a missing or late arrive)")
        if not self.found:
            e = self.trace.events[0]
            self._finding("deadlock", "-", e, e, "deadlock: the waits and barriers of the "
                                                 "kernel wait for one another in a cycle")


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

