"""The turn of the cross-CTA proof (lowering.verify.grid_protocol): the blocks of one tile
for one split factor, their semaphore operations explored in every interleaving (deadlocks,
counters left set, which release each wait reads), then what each block's accesses see of
the others' (the releases that publish them, the waits that acquire them) and every
conflicting pair of two blocks' accesses checked for that order.

It sits beside grid_protocol, which walks each block into events and asks it per factor;
it reports through the proof's `report` and asks its `conflict` (separation and the
guarded stores' points).
"""

import itertools

import numpy as np

from .. import kir
from ..errors import Hazard

STATES = 200_000          # interleavings of a turn's semaphore operations explored at most


class Refused(Exception):
    """The proof cannot be made: at `stmt` (or None), `why`."""

    def __init__(self, stmt, why):
        super().__init__(why)
        self.stmt, self.why = stmt, why


def point(stmt):
    return f"{stmt.label}: {kir.format_stmt(stmt)}"


class Findings:
    """A proof's findings (`out`), one per kind, buffer and pair of statements; its
    `prove()` (the subclass's) raising Refused ends it as a cannot-prove finding."""

    def __init__(self):
        self.out, self.seen = [], set()

    def report(self, kind, buffer, first, second, detail):
        key = (kind, buffer, first, second)
        if key not in self.seen:
            self.seen.add(key)
            self.out.append(Hazard(kind, buffer, first, second, detail=detail))

    def findings(self):
        try:
            self.prove()
        except Refused as r:
            at = point(r.stmt) if r.stmt is not None else "-"
            self.report("cannot-prove", "-", at, at, r.why)
        return self.out


def subset(a, b):
    """Is every thread of mask `a` in mask `b`?"""
    return not (a & ~b).any()


class Turn:
    """The blocks of one tile for split factor g: their semaphore operations in every
    interleaving, then what each block's accesses see of the others'."""

    def __init__(self, proof, g, blocks):
        self.proof, self.g, self.blocks = proof, g, blocks
        self.ops = [[(i, e) for i, e in enumerate(w.events)
                     if e.kind in ("wait", "release", "arrive")] for w in blocks]

    def check(self):
        matches = self.explore()
        self.seen = self.publish(matches)

    def explore(self):
        """Every interleaving of the blocks' semaphore operations: deadlocks, the values
        left behind, and which release each wait can read."""
        proof, g = self.proof, self.g
        start = (tuple([0] * g), (), ())
        todo, visited, matches = [start], {start}, {}
        while todo:
            pcs, values, last = todo.pop()
            values, last = dict(values), dict(last)
            moved = False
            for z in range(g):
                if pcs[z] == len(self.ops[z]):
                    continue
                i, op = self.ops[z][pcs[z]]
                cell = id(op.buffer)
                if op.kind == "wait" and values.get(cell, 0) != op.value:
                    continue
                moved = True
                v2, l2 = dict(values), dict(last)
                if op.kind == "wait":
                    matches.setdefault((z, i), set()).add(last.get(cell))
                elif op.kind == "release":     # a store: a new release sequence
                    v2[cell], l2[cell] = op.value, frozenset([(z, i)])
                else:                          # an arrival: joins the sequence
                    v2[cell] = values.get(cell, 0) + op.value
                    l2[cell] = last.get(cell, frozenset()) | {(z, i)}
                nxt = (pcs[:z] + (pcs[z] + 1,) + pcs[z + 1:], tuple(sorted(v2.items())),
                       tuple(sorted(l2.items())))
                if nxt not in visited:
                    visited.add(nxt)
                    todo.append(nxt)
            if len(visited) > STATES:
                raise Refused(None, f"cannot prove: more than {STATES} interleavings of "
                                     f"the semaphore operations at split factor {g}")
            if moved:
                continue
            stuck = [(z, self.ops[z][pcs[z]][1]) for z in range(g)
                     if pcs[z] < len(self.ops[z])]
            for z, op in stuck:
                proof.report("deadlock", op.buffer.name, point(op.stmt), point(op.stmt),
                             f"split factor {g}: block z={z} waits for "
                             f"{op.buffer.name} == {op.value} and no block stores it")
            if not stuck:
                for cell, value in values.items():
                    if value:
                        sem = next(e for ops in self.ops for _, e in ops
                                   if id(e.buffer) == cell)
                        releases = [e for ops in self.ops for _, e in ops
                                    if id(e.buffer) == cell and e.kind != "wait"]
                        proof.report("workspace", sem.buffer.name, point(releases[-1].stmt),
                                     "END", f"split factor {g}: semaphore "
                                     f"{sem.buffer.name} is left {value} after the launch "
                                     "(it must be left zero for the next one)")
        for (z, i), sources in matches.items():
            later = sorted(s for group in sources if group is not None for s in group
                           if s[0] > z)
            if later and not self.proof.kernel.co_resident:
                e = self.blocks[z].events[i]
                proof.report("deadlock", e.buffer.name, point(e.stmt),
                             point(self.blocks[later[0][0]].events[later[0][1]].stmt),
                             f"split factor {g}: block z={z} waits for a release of block "
                             f"z={later[0][0]}, launched after it (progress would need "
                             "both resident)")
        return {k: next(iter(v)) for k, v in matches.items()
                if len(v) == 1 and None not in v}

    def publish(self, matches):
        """What each block's accesses see of other blocks' (a fixpoint over the turn), then
        every conflicting pair of accesses of two blocks checked for an order; returns
        what each access sees ({(block, event): {(block, event): threads that see it}})."""
        g, proof = self.g, self.proof
        published, seen = {}, {}
        for _ in range(g + 1):
            changed = False
            for z, w in enumerate(self.blocks):
                visible, own = {}, {}
                for i, e in enumerate(w.events):
                    if e.kind == "access":
                        seen[(z, i)] = {k: m.copy() for k, m in visible.items()}
                        own[(z, i)] = [e.threads, np.zeros_like(e.threads),
                                       np.zeros_like(e.threads)]
                    elif e.kind == "fence":
                        for o in own.values():
                            o[1] = o[1] | (e.threads & o[0])
                    elif e.kind == "barrier":
                        for o in own.values():
                            if subset(o[0], o[1]) and subset(o[0], e.threads):
                                o[2] = o[2] | e.threads
                        for k, m in visible.items():
                            if (m & e.threads).any():
                                visible[k] = m | e.threads
                    elif e.kind == "wait" and (z, i) in matches:
                        for source in matches[(z, i)]:
                            for k in published.get(source, ()):
                                visible[k] = visible.get(k, False) | e.threads
                    elif e.kind in ("release", "arrive"):
                        pub = {k for k, o in own.items()
                               if subset(o[0], e.threads) or subset(e.threads, o[2])}
                        pub |= {k for k, m in visible.items() if subset(e.threads, m)}
                        if published.get((z, i)) != pub:
                            published[(z, i)], changed = pub, True
            if not changed:
                break
        accesses = [(z, i, e) for z, w in enumerate(self.blocks)
                    for i, e in enumerate(w.events) if e.kind == "access"]
        for (za, ia, a), (zb, ib, b) in itertools.combinations(accesses, 2):
            if za == zb or not proof.conflict(a, b):
                continue
            if subset(b.threads, seen[(zb, ib)].get((za, ia), np.zeros_like(b.threads))) or \
                    subset(a.threads, seen[(za, ia)].get((zb, ib), np.zeros_like(a.threads))):
                continue
            (za, a), (zb, b) = sorted(((za, a), (zb, b)), key=lambda p: p[0])
            kind = "RAW" if a.write and not b.write else "WAR" if b.write and not a.write \
                else "WAW"
            verb = lambda e: "write" if e.write else "read"        # noqa: E731
            proof.report("cross-cta", a.buffer.name, point(a.stmt), point(b.stmt),
                         f"{kind}, split factor {g}: the {verb(b)} of {b.buffer.name} by "
                         f"block z={zb} is not ordered after the {verb(a)} by block z={za} "
                         "(no release publishing it, fenced and handed to the releasing "
                         "thread, that the later block acquires before it)")
        return seen
