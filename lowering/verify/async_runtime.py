"""Run-time values in a Hopper kernel's async protocol: every outcome of its block-uniform
conditions and every trip count of its run-time loops, proved from finitely many
unrollings (lowering.verify.async_trace) each checked by lowering.verify.async_protocol.

Block-uniform conditions (lowering.verify.async_skeleton). All threads of a block take the same
branch of one, and ifs with the same condition take the same one, so the kernel is
proved when it is for each choice of their outcomes: each choice (at most 2^MAX_UNIFORM)
is verified as a kernel of its own, over every trip count.

Run-time loops. Loops whose extents are one run-time expression share a trip count τ and
run T = max(extent, 0) times, the same T in every role. Take one τ, the others fixed.
G_T is lowering.verify.async_order's graph for T. An iteration node is an event of iteration u
of a τ-loop, or a phase or barrier generation completed there (C1); its time is u, apart
per instance (the values of the loop variables around the loops). For a role r and an
mbarrier b, I_rb are r's waits on b in τ-loops and J_b the phases of b completed there.
P is the lcm of the periods (lowering.verify.async_periodic) of everything evaluated in τ-loops
but the waits' parities, doubled until C2 holds. W is the longest lag, in iterations,
from a phase of J to the wait of I matched to it and from a wgmma or TMA store to the
wait retiring it (at least 1). m1 (m2) is one more than the last iteration from the start
(before the end) holding an exception: a wait of I matched outside J, a phase of J matched
outside I or not by a role that has I, an async access retired outside its loop (m1 >=
max(1, s), m2 >= W). Checked on every unrolling (else refused, naming the loop):

  C1 each phase and generation with an arrival in a τ-loop has all its arrivals and the
     TMA loads it counts in that iteration;
  C2 I_rb and J_b each lie in one τ-loop instance; in P iterations r waits on b as often
     (w) as b completes (p); a wait's parity at u + P is its parity at u plus w (mod 2),
     and w is even if r waits on b after the loop;
  C3 at the start of every iteration u >= max(1, s) and after the loop (s: the
     iteration from which the loops' conditions repeat, 1 for `if (k > 0)`), each role
     has the same pending wgmma and bulk groups (by statement and iterations back), the
     same buffers stored since its last wgmma.fence and the same fence flag;
  C4 no path of G_T leads from an iteration node to one of an earlier time.

Claim: if G_T is proved for every T <= B = m1 + m2 + 2W + 3P - 1, it is for every T.
(1) Structure. Iterations u >= s and u + P make the same events (statements, roles,
bytes, indices, counts, conditions: periodicity). The passes that build G_T walk the events in
order with state that C1 (no phase or generation open across iterations), C3 (groups,
fences) and C2 (the matching counters of r and b advance together, w = p per P) make
repeat; so, for T >= T_s = m1 + m2 + 2W + 3P, G_T is G_{T-P} with P iterations spliced in
at any v0 in [m1 + W, T - P - m2 - W]: nodes before v0 stay, later ones shift by P, the
edges near v0 (span <= W) follow the pattern, and the first m1 iterations and the last m2
(relative to the end, with T mod P) are laid out as in the unrollings.
(2) Lifting. Cut G_{T-P} below the nodes that iteration nodes at times >= v0 reach; by C4
no path comes back below the cut, so a path crosses it once, on an edge that either has
span <= W and enters an event (C1: a phase's or generation's in-edges come from its own
iteration) or joins the first iterations or what precedes the loops to what follows them
(the same edge in G_T). In G_T the first kind exists unshifted, and its target reaches its
own image P iterations on by program order. So G_T orders every pair G_{T-P} orders
(images under the splice), through the same synchronization points.
(3) Obligations. lowering.verify.async_protocol checks properties of one node (parities, counts,
expect_tx, barrier arrivals, wgmma fences, what is pending at the end), orderings between
two nodes (conflicts, init visibility, the proved phase assignment, proxy fences), and
acyclicity. For T >= T_s there are 2P + 1 splice points, so some block avoids the (one or
two) nodes of a check: its preimage holds in G_{T-P}, so the check holds in G_T by (1) or
(2); what a check derives from a node follows the pattern (a TMA load's phase is in its
own iteration; the wait retiring a wgmma, falling in the block, reaches its image by
program order as in (2)). A proxy-fence finding (ordered, not fenced) needs an order
G_{T-P} has the other way round (its conflict check), which lifts and would close a
cycle. A cycle keeps one time (C4) and lies in some block's complement, so G_{T-P} would
have it. C1-C4 carry over to G_T by (1): its iteration nodes repeat those of the
unrollings, and paths between them leave the loops only in the first m1 and last m2
iterations, laid out as there.
So G_T is proved when G_{T-P} is, for T >= T_s = B + 1: induction from 0..B.

Several trip counts: the base cases are all combinations, and each τ is argued with the
others fixed. That needs no wait matched across trip counts (C2) and no mbarrier, wgmma
group or bulk group statement in a run-time loop nested in another one (refused), so the
conditions for one τ do not depend on the others; a nested count is reduced last.
"""

from itertools import product
from math import lcm

from fuserir.progress import progress

from .. import kir
from .async_trace import Iteration, Refusal, Trace

MAX_UNIFORM = 3                  # block-uniform conditions (2^3 outcome choices)
MAX_ITERATIONS = 20000           # unrolled iterations over all base cases of one choice
PROBE = 8                        # the trip counts of the first unrolling
MAX_PROBES = 4                   # unrollings to measure the depths on


def check_every_case(kernel, skeleton, known, check, every=True):
    """For each choice of block-uniform outcomes, the findings of its first unrolling that
    has some (each naming the trip counts and outcomes it was found at; a finding of the
    same kind and statements as an earlier choice's is said once), [] when every case is
    proved. `check(trace)` gives a trace's (findings, closed
    lowering.verify.async_order.Ordering). Raises Refusal when the argument does not apply.

    Every choice is asked, not only until the first with findings: sync insertion places
    what all of them ask for in one round, instead of re-proving the choices found clean
    once per round. Choices that had findings in an earlier call sharing `known` (a caller
    asking again and again, as sync insertion's pruning does) are asked first: a kernel
    still wrong is usually wrong where it was. `every=False`: stop at the first choice
    with findings (whether there are any is all pruning asks)."""
    keys = list(skeleton.uniform)
    if len(keys) > MAX_UNIFORM:
        _, ifs = skeleton.uniform[keys[MAX_UNIFORM]]
        raise Refusal(ifs[0], f"cannot prove: more than {MAX_UNIFORM} block-uniform "
                              f"conditions (verified for each choice of their outcomes)")
    _refuse_nested_groups(skeleton)
    failed = known.setdefault("outcome choices with findings", [])
    choices = list(product((True, False), repeat=len(keys)))
    choices.sort(key=lambda c: failed.index(c) if c in failed else len(failed))
    bar = progress(f"proving {kernel.name}", unit="unrolling")
    cases = [(c, _counted(_TripCounts(kernel, skeleton, known, check,
                                      dict(zip(keys, c))).unrollings(), bar))
             for c in choices]
    with bar:
        return _every_case(cases, failed, every)


def _counted(unrollings, bar):
    for found in unrollings:
        bar.update()
        yield found


def _every_case(cases, failed, every):
    """check_every_case's walk over the outcome choices' unrollings (see there)."""
    findings, refusal, ended = {}, None, set()
    # breadth first: each choice's first unrolling (where most findings show) before the
    # others' base cases
    for first in (True, False):
        for choice, unrollings in cases:
            if choice in ended:
                continue
            try:
                found = next(unrollings, []) if first else next(
                    (f for f in unrollings if f), [])
            except Refusal as r:
                refusal = refusal or r
                found = None
            if found is None or found:
                ended.add(choice)
            if found and choice not in failed:
                failed.append(choice)
            for h in found or ():
                findings.setdefault((h.kind, h.buffer, h.first, h.second), h)
            if findings and not every:
                return list(findings.values())
    if refusal is not None and not findings:
        raise refusal
    return list(findings.values())


def covering_traces(kernel, skeleton, known):
    """Traces that execute every statement the kernel's unrollings can execute: one per
    choice of block-uniform outcomes, with each trip count two of its periods."""
    traces = []
    for choice in product((True, False), repeat=len(skeleton.uniform)):
        outcomes, trips = dict(zip(skeleton.uniform, choice)), {}
        while True:
            trace = Trace(kernel, known, skeleton, {k: trips.get(k, 1)
                                                    for k in skeleton.trip_counts},
                          outcomes)
            longer = {k: 2 * lcm(*trace.periods.get(k, {}).values())
                      for k in skeleton.trip_counts}
            if all(longer[k] <= trace.trips[k] for k in longer):
                break
            trips = longer
        traces.append(trace)
    return traces


def _refuse_nested_groups(skeleton):
    for _, loops in skeleton.trip_counts.values():
        for loop in loops:
            for inner in kir.walk(loop.body):
                if isinstance(inner, kir.ForLoop) and skeleton.runs(inner) \
                        and skeleton.loop(inner).kind == "run-time":
                    bad = next((s for s in kir.walk(inner.body)
                                if kir.effects.carries_phase_state(s.effects())), None)
                    if bad is not None:
                        raise Refusal(bad, f"cannot prove every trip count: run-time loop "
                                           f"{inner.var.name} ({inner.label}), nested in "
                                           f"run-time loop {loop.var.name} ({loop.label}), "
                                           f"holds {type(bad).__name__}")


def _mbarrier_ops(body):
    """The mbarrier operations of the statements of `body`."""
    ops = (s.effects().mbarrier for s in kir.walk(body))
    return [op for op in ops if op is not None]


class _TripCounts:
    """The base cases of one choice of outcomes, and the argument over them."""

    def __init__(self, kernel, skeleton, known, check, outcomes):
        self.kernel, self.skeleton, self.known = kernel, skeleton, known
        self._check, self.outcomes = check, outcomes
        self.keys = list(skeleton.trip_counts)
        self.parities = {id(op.value) for op in _mbarrier_ops(kernel.body)
                         if op.op == "wait"}

    def unrollings(self):
        """Run the unrollings of the argument one by one, yielding the findings of each
        ([] where none); ends after the first with findings, or when every case is
        proved."""
        if not self.keys:
            yield self._run({})[0]
            return
        bounds, done = {k: PROBE for k in self.keys}, set()
        for _ in range(MAX_PROBES):
            findings, order = self._run(bounds)
            yield findings
            if findings:
                return
            done.add(tuple(bounds.values()))
            self._certify(order)
            need = {k: _Depths(self, order, k).bound() for k in self.keys}
            if all(need[k] <= bounds[k] for k in self.keys):
                break
            bounds = {k: max(bounds[k], need[k]) for k in self.keys}
        else:
            k = max(need, key=need.get)
            _Depths(self, order, k).refuse(None, f"its unrollings up to {bounds[k]} "
                                                 f"iterations do not settle into a repeating "
                                                 f"pattern (they ask for {need[k]})")
        ranges = [range(need[k] + 1) for k in self.keys]
        work = sum(_product(c) for c in product(*ranges))
        if work > MAX_ITERATIONS:
            _Depths(self, order, self.keys[0]).refuse(
                None, f"its base cases (trip counts up to {list(need.values())}) unroll "
                      f"{work} iterations, more than {MAX_ITERATIONS}")
        for counts in sorted(product(*ranges), key=lambda c: -sum(c)):
            if counts in done:
                continue
            findings, order = self._run(dict(zip(self.keys, counts)))
            yield findings
            if findings:
                return
            self._certify(order)

    def _run(self, trips):
        try:
            trace = Trace(self.kernel, self.known, self.skeleton, trips, self.outcomes)
            findings, order = self._check(trace)
        except Refusal as r:
            raise Refusal(r.stmt, r.why + self._when(trips)) from None
        for h in findings:
            h.detail += self._when(trips)
        return findings, order

    def _when(self, trips):
        said = [f"{kir.format_expr(self.skeleton.trip_counts[k][0])} = {t}"
                for k, t in trips.items()]
        said += [f"{kir.format_expr(self.skeleton.uniform[k][0])} is "
                 f"{'true' if v else 'false'}" for k, v in self.outcomes.items()]
        return f" (when {' and '.join(said)})" if said else ""

    # -- C1, C3, C4 on every base case ---------------------------------------------------

    def _certify(self, order):
        for k in self.keys:
            _Depths(self, order, k).certify()


def _product(counts):
    out = 1
    for c in counts:
        out *= max(c, 1)
    return out


class _Depths:
    """The argument's quantities and conditions for trip count `key` on one closed graph."""

    def __init__(self, plan, order, key):
        self.plan, self.order, self.key = plan, order, key
        self.trips = order.trace.trips[key]
        self.settled = order.trace.settled.get(key, 0)
        self.loop = plan.skeleton.trip_counts[key][1][0]

    def refuse(self, stmt, why):
        raise Refusal(stmt or self.loop, f"cannot prove every trip count of run-time loop "
                            f"{self.loop.var.name} ({self.loop.label}: for "
                            f"{self.loop.var.name} in 0.."
                            f"{kir.format_expr(self.loop.extent)}): {why}")

    def at(self, event):
        """(instance, time) of `event` in this trip count's loops, or None outside."""
        for v in event.iterations:
            if v.key == self.key:
                return (v.instance, int(v))
        return None

    def place(self, event):
        """(loop, instance, time) of `event` in this trip count's loops, or None."""
        for v in event.iterations:
            if v.key == self.key:
                return (v.loop.label, v.instance, int(v))
        return None

    def phase_at(self, phase):
        return self.at(phase.arrivals[0]) if phase.arrivals else None

    # -- the depths: P, W, m1, m2 and the bound ------------------------------------------

    def bound(self):
        """B, the largest base case the argument needs (0: the loops run nothing, T does
        not matter), measured on this unrolling; checks C2 once it is long enough to show
        the pattern."""
        periods = self.order.trace.periods.get(self.key, {})
        if not any(self.at(e) for e in self.order.trace.events):
            return 0
        base = lcm(*(p for i, p in periods.items() if i not in self.plan.parities))
        parity = lcm(*(p for i, p in periods.items() if i in self.plan.parities))
        lags, early, late = self._lags()
        W = max([1] + lags)
        m1 = max([1, self.settled] + [u + 1 for u in early])
        m2 = max([W] + [self.trips - u for u in late])

        def need(P):                     # B; long enough to see each depth and C2
            return max(m1 + m2 + 2 * W + 3 * P - 1, m1 + m2 + lcm(P, parity),
                       2 * max(m1, m2) + 1)
        P = base
        while self.trips >= need(P) and not self._matching(P, m1, parity):
            P *= 2
            if P > 2 * base * parity:
                self.refuse(None, "no period makes the waits' parities repeat with the "
                                  "phases they wait for")
        return need(P)

    def _lags(self):
        """(lags, times of exceptions in the first half, in the second half)."""
        lags, exceptions = [], []
        matchers = {}                        # phase -> [(role, wait event)]
        for bar in self.order.bars.values():
            waiting = {r for r, matched in bar.matched.items()
                       if any(self.at(e) for e, _ in matched)}
            for role, matched in bar.matched.items():
                for e, m in matched:
                    phase = bar.phase(m)
                    if phase is not None:
                        matchers.setdefault(id(phase), []).append((role, e))
                    here = self.at(e)
                    there = self.phase_at(phase) if phase is not None else None
                    if here is None:
                        if there is not None and e.iterations:
                            self.refuse(e.stmt, f"{role} waits on {bar.name} in a loop of "
                                                f"another trip count than the one "
                                                f"completing the phase it waits for: the "
                                                f"two loops must have one extent "
                                                f"expression")
                        continue
                    if there is None:
                        exceptions.append(here[1])
                    elif there[0] == here[0]:
                        lags.append(here[1] - there[1])
            for phase in bar.phases:
                there = self.phase_at(phase)
                if there is None:
                    continue
                got = matchers.get(id(phase), [])
                if any(self.at(e) is None for _, e in got) or \
                        waiting - {r for r, _ in got}:
                    exceptions.append(there[1])
        for a in self.order.async_pending:
            here = self.at(a.event)
            if here is None:
                continue
            there = self.at(a.end) if a.end is not None else None
            if there is None or there[0] != here[0]:
                exceptions.append(here[1])
            else:
                lags.append(there[1] - here[1])
        half = self.trips / 2
        return (lags, [u for u in exceptions if u < half],
                [u for u in exceptions if u >= half])

    def _matching(self, P, m1, parity):
        """C2 at period P, counted from iteration m1 (refusing what no period mends);
        False: a longer period may do."""
        for bar in self.order.bars.values():
            phases = [p for p in bar.phases if self.phase_at(p)]
            instances = {self.phase_at(p)[0] for p in phases}
            if len(instances) > 1:
                self.refuse(phases[0].arrivals[0].stmt,
                            f"{bar.name} completes phases in {len(instances)} instances of "
                            f"the loop (around it: {sorted(instances)})")
            p = sum(m1 <= self.phase_at(ph)[1] < m1 + P for ph in phases)
            for role, matched in bar.matched.items():
                inside = [(e, m) for e, m in matched if self.at(e)]
                if not inside:
                    continue
                if not phases:
                    self.refuse(inside[0][0].stmt, f"{role} waits on {bar.name} in the "
                                                   f"loop, which completes no phase of it")
                if {self.at(e)[0] for e, _ in inside} != instances:
                    self.refuse(inside[0][0].stmt,
                                f"the waits of {role} on {bar.name} in the loop and the "
                                f"phases of {bar.name} completed in it are not in one "
                                f"instance of the loop")
                w = sum(m1 <= self.at(e)[1] < m1 + P for e, _ in inside)
                if w != p:
                    self.refuse(inside[0][0].stmt,
                                f"in {P} iterations {role} waits {w} times on {bar.name}, "
                                f"which completes {p} phases")
                last = max(e.step for e, _ in inside)
                if w % 2 and any(e.step > last for e, _ in matched):
                    return False
                window = m1 + lcm(P, parity)
                if not all(self._parity_repeats(e, P, w) for e, _ in inside
                           if m1 <= self.at(e)[1] < window):
                    return False
        return True

    def _parity_repeats(self, e, P, w):
        name = next(n for n, v in e.env.items()
                    if isinstance(v, Iteration) and v.key == self.key)
        v = e.env[name]
        later = {**e.env, name: Iteration(int(v) + P, v.loop, v.key, v.instance)}
        wait = e.effects.mbarrier
        what = f"parity of the wait on {wait.bar.name}:"
        now = e.value(wait.value, what)
        then = e.trace.value(wait.value, later, e.stmt, what)
        return (then - now - w) % 2 == 0

    # -- C1, C3, C4 ----------------------------------------------------------------------

    def certify(self):
        self._local()
        self._bounded_memory()
        self._forward()

    def _local(self):
        groups = [(f"phase {p.number} of {bar.name}", p.arrivals + p.loads)
                  for bar in self.order.bars.values() for p in bar.phases]
        groups += [(f"a generation of {name}", events)
                   for name, _, events in self.order.generations]
        for what, events in groups:
            places = {self.place(e) for e in events}
            if len(places) > 1 and any(places):
                self.refuse(events[0].stmt, f"{what} gathers arrivals from different "
                                            f"iterations ({_places(places)}): each must "
                                            f"complete within one iteration")

    def _bounded_memory(self):
        first, last = {}, {}      # (role, instance) -> state at iteration 1; role -> place
        for role, e, state in self.order.role_states:
            here = self.at(e) if e is not None else None
            if here is not None:
                if last.get(role) == here:
                    continue                     # another loop's iteration, not this one
                last[role] = here
                if here[1] < max(1, self.settled):
                    continue                     # the first iterations may start apart
            elif role in last:
                here = (last.pop(role)[0], self.trips)       # after the loop
            else:
                continue
            now = self._relative(state, here)
            if first.setdefault((role, here[0]), now) != now:
                self.refuse(e.stmt if e is not None else None,
                            f"{role} enters iteration {here[1]} with other pending wgmma "
                            f"or bulk groups, or other unfenced register stores, than "
                            f"earlier ones: its state must repeat from iteration "
                            f"{max(1, self.settled)} on")

    def _relative(self, state, here):
        """A role state with each pending access as (statement, iterations back)."""
        wgmma, bulk, stored, fenced = state

        def back(a):
            there = self.at(a.event)
            if there is None or there[0] != here[0]:
                return (a.event.stmt.label, "outside")
            return (a.event.stmt.label, here[1] - there[1])
        groups = tuple(tuple(tuple(map(back, g)) for g in gs) for gs in (wgmma, bulk))
        return groups, stored, fenced

    def _forward(self):
        g, by_instance = self.order.graph, {}
        for e in self.order.trace.events:
            here = self.at(e)
            if here is not None:
                for n in {e.enter, e.leave}:
                    by_instance.setdefault(here[0], []).append((here[1], n))
        for bar in self.order.bars.values():
            for p in bar.phases:
                here = self.phase_at(p)
                if here is not None and p.node is not None:
                    by_instance.setdefault(here[0], []).append((here[1], p.node))
        for _, node, events in self.order.generations:
            here = self.at(events[0])
            if here is not None:
                by_instance.setdefault(here[0], []).append((here[1], node))
        for nodes in by_instance.values():
            nodes.sort()
            earlier, i = 0, 0
            for time, n in nodes:
                while nodes[i][0] < time:
                    earlier |= 1 << nodes[i][1]
                    i += 1
                if g.reach[n] & earlier:
                    self.refuse(self.loop, f"an iteration ({time}) is ordered before an "
                                           f"earlier one: the protocol must run forward")


def _places(places):
    return ", ".join("outside the loop" if p is None else f"iteration {p[2]} of {p[0]}"
                     for p in sorted(places, key=lambda p: (p is not None, p)))
