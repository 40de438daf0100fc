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

How: a bounded, exact symbolic execution of the skeleton, in three steps.
lowering.verify.async_trace unrolls the kernel into role traces (threads that run the same
statements), each statement execution an event with its shared byte spans per thread;
lowering.verify.async_order builds the happens-before graph over them (program order, mbarrier
phases with their arrivals, TMA loads and matched waits, barrier generations), proves
its own assignment of arrivals and waits to phases, and closes it (a cycle is a
deadlock); here each rule is a question to the closed graph.

Run-time values: a loop whose extent is a run-time expression (ceildiv(K, 64)) is proved
for every trip count and a block-uniform condition (blockIdx.z < gridDim.z - 1) for both
outcomes, by lowering.verify.async_runtime's argument over finitely many unrollings; a finding
names the trip counts and outcomes it was made at.

What it refuses (kind "cannot-prove", never a pass): a barrier index, parity, count or
expect_tx that is not a constant given the loop variables, or, inside a run-time loop,
not periodic in its variable; a condition that is neither a function of the thread index
and the loop variables nor block-uniform (unless nothing under it touches the protocol:
then it is skipped); a loop extent that depends on the thread or on data; run-time loops
the argument does not cover (lowering.verify.async_runtime says which); cp.async; a shared
buffer with no constant place; one statement's arrivals split across two phases; a TMA
load issued before its thread arrives on its barrier. What it does not check: that the
threads of one statement execution touch distinct bytes (lowering.verify.hazards' owner maps and
the interpreter do), global memory (lowering.verify.grid_protocol does), registers read while a wgmma is pending. A whole
wgmma is retired for its role at that role's wait (the instruction is warp-group
collective); a TMA load's bytes are visible to a thread only through a wait of its own
role.
"""

import copy
import hashlib
import re
from typing import Protocol

import numpy as np

from .. import kir
from .async_order import Ordering, point
from .async_runtime import check_every_case
from .accesses import shared_accesses
from .async_skeleton import Skeleton
from .async_trace import Refusal
from ..errors import Hazard, HazardError

_ASYNC_READ = {"wgmma": ("a pending wgmma still reads", "the wgmma.wait_group retiring it"),
               "tma-store": ("a TMA store still reads",
                             "the cp.async.bulk.wait_group.read retiring it")}


_VERDICTS = {}        # sha256 of a kernel's text -> (its findings, whether all of them); the
_VERDICTS_KEPT = 512  # verdict is a function of the text: statements, labels, buffers,
                      # offsets, launch, maps
_SYNC_ID = re.compile(r" \[sync\d+\]")   # the names insert_syncs gives the syncs it placed,
                                         # for drop_syncs: not part of what is proved


class ProofMemo(Protocol):
    """Proofs remembered beyond this process, by the kernel's text as verified (sync ids
    left out). The caller of lowering supplies one (driver.proofs keeps them on disk, by
    the verifier's version too); lowering itself reads and writes no files."""

    def proved(self, text: str) -> bool:
        """Was a kernel of this text proved before?"""

    def remember(self, text: str) -> None:
        """A kernel of this text is proved."""


def check_async_protocol(kernel, known=None, memo=None, every=True):
    """Every finding (lowering.errors.Hazard) of the kernel's async protocol, for every
    trip count and block-uniform outcome; [] when it is proved. `known`: see
    async_trace.Trace (a caller asking again and again). `every=False`: some of the
    findings, [] only when proved (async_runtime.check_every_case stops at the first
    outcome choice with findings). A kernel whose text was verified before in this process
    gets the same verdict at once (sync insertion's last check is the verify pass's
    question; tests and benchmarks lower one schedule many times), and one that `memo` (a
    ProofMemo) says was proved is proved; a proof made here is remembered there."""
    text = _SYNC_ID.sub("", kir.format_kernel(kernel))
    key = hashlib.sha256(text.encode()).hexdigest()
    verdict, complete = _VERDICTS.get(key, (None, False))
    if verdict is None or (every and not complete):
        if memo is not None and memo.proved(text):
            verdict, complete = [], True
        else:
            verdict = _verdict(kernel, known, every)
            complete = every or not verdict
            if not verdict and memo is not None:
                memo.remember(text)
        if len(_VERDICTS) >= _VERDICTS_KEPT:
            _VERDICTS.pop(next(iter(_VERDICTS)))
        _VERDICTS[key] = (verdict, complete)
    return [copy.copy(h) for h in verdict]


def _verdict(kernel, known, every):
    known = {} if known is None else known       # shared by every unrolling checked
    try:
        skeleton = Skeleton(kernel)
        return _reentries(skeleton) + check_every_case(kernel, skeleton, known, _check,
                                                       every)
    except Refusal as r:
        return [Hazard("cannot-prove", "-", point(r.stmt), point(r.stmt), detail=r.why)]


def _reentries(skeleton):
    """A finding for each iteration-uniform if whose own buffers two of its executions
    could touch unordered (async_skeleton's condition (c)): the branch's last access of
    them, then its first, in the next execution."""
    found = []
    for last, first, buffer in skeleton.reentries():
        earlier = any(a.is_write for a in shared_accesses(last) if a.buffer is buffer)
        later = any(a.is_write for a in shared_accesses(first) if a.buffer is buffer)
        kind = ("WAW" if later else "RAW") if earlier else "WAR"
        found.append(Hazard(kind, buffer.name, point(last), point(first), detail=(
            f"the if around them runs in some iterations and not in others: no barrier of "
            f"its own orders one execution's {'write' if earlier else 'read'} of "
            f"{buffer.name} before the next one's")))
    return found


def verify_async_protocol(kernel, memo=None):
    """Raise HazardError listing the findings, unless the protocol is proved (`memo`: see
    check_async_protocol)."""
    findings = check_async_protocol(kernel, memo=memo)
    if findings:
        raise HazardError(findings, kernel.name)


def _check(trace):
    protocol = _Protocol(trace)
    return protocol.check(), protocol


class _Protocol(Ordering):
    """The checks, asked of the closed graph."""

    def __init__(self, trace):
        super().__init__(trace)
        self._found_pairs = None             # _pairs, computed once
        self._sorted = None                  # _accesses, computed once

    def check(self):
        if not self.order():                 # a cycle: its deadlocks are the findings
            self._init_visibility()
            self._conflicts()
            self._proxy_fences()
            self._pending_at_end()
        return list(self.found.values())

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
                                  f"{e.role} {'uses' if e.role.size == 1 else 'use'} "
                                  f"{bar.name} before its init is visible there: no barrier "
                                  f"after the mbarrier.init orders it before the use")
            for e, _ in bar.loads:
                if not any(self.graph.reaches(init.leave, f.enter) and self.graph.before(f, e)
                           for f in self.init_fences[init.role]):
                    self._finding("mbarrier-init", bar.name, init, e,
                                  f"a TMA load completes on {bar.name} with no "
                                  f"fence.mbarrier_init after its init")

    # -- shared accesses -----------------------------------------------------------------

    def _accesses(self):
        """Every access, by first byte then walk order (computed once)."""
        if self._sorted is None:
            self._sorted = sorted((a for e in self.trace.events for a in e.accesses),
                                  key=lambda a: (a.lo, a.event.step))
        return self._sorted

    def _pairs(self):
        """[(earlier, later, how their threads meet)] in walk order, for the accesses of
        different statement executions that touch common bytes, one of them a write (what
        every rule asks about)."""
        if self._found_pairs is None:
            accesses = self._accesses()
            i, j = _overlapping(accesses)
            # how their threads meet: asked once per pair of span lists (many accesses
            # share one: Trace keeps one list for equal spans), kept in the trace's
            # `meets` across traces
            lists, first = {}, {}
            code = np.fromiter((lists.setdefault(id(a.spans), len(lists)) for a in accesses),
                               np.int64, len(accesses))
            for c, a in zip(code.tolist(), accesses):
                first.setdefault(c, a)
            pairs, inverse = np.unique(code[i] * len(lists) + code[j], return_inverse=True)
            meets, answers = self.trace.meets, []
            for p in pairs.tolist():
                a, b = first[p // len(lists)], first[p % len(lists)]
                key = (id(a.spans), id(b.spans))
                if key not in meets:
                    meets[key] = a.threads_meet(b)
                answers.append(_MEETS.index(meets[key]))
            meet = np.array(answers, dtype=np.int64)[inverse]
            i, j, meet = i[meet > 0], j[meet > 0], meet[meet > 0]
            step = np.fromiter((a.event.step for a in accesses), np.int64, len(accesses))
            later = step[i] > step[j]                  # earlier statement execution first
            self._found_pairs = [
                (accesses[x], accesses[y], _MEETS[m]) for x, y, m in
                zip(np.where(later, j, i).tolist(), np.where(later, i, j).tolist(),
                    meet.tolist())]
        return self._found_pairs

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
            return self._waited(phase, e)
        if first.end is None:
            return False
        if meet == "same" or (first.proxy == "wgmma" and first.end.role is e.role):
            return g.reaches(first.end.leave, e.enter)
        return g.before(first.end, e)

    def _waited(self, phase, e):
        """Does a wait of e's role matched to `phase` or a later one happen before e? Its
        waits on the barrier are in program order and matched to consecutive phases, so
        the first one matched to `phase` or later is the one to ask (any later one comes
        after it)."""
        matched = phase.bar.matched.get(e.role)
        if not matched:
            return False
        i = max(phase.number - matched[0][1], 0)
        return i < len(matched) and self.graph.reaches(matched[i][0].leave, e.enter)

    def _conflicts(self):
        reach = self.graph.reach
        for a, b, meet in self._pairs():
            phase = a.end
            if a.proxy == "tma-load" and b.proxy != "generic" and phase is not None \
                    and phase.node is not None and phase.landed \
                    and reach[phase.node] >> b.event.enter & 1:
                continue       # _ordered(a, b)'s first case, asked inline: the most
                               # pairs, a TMA load and a later wgmma reading its bytes
            if (a.event.role is b.event.role and a.buffer is b.buffer and a.info is not None
                    and b.info is not None and a.info.same_thread_as(b.info)):
                meet = "same"
            # both questions are pure: a TMA load not landed before the later access is
            # most often the next stage's load after an earlier read, so that one first
            if not (self._ordered(b, a, meet) or self._ordered(a, b, meet)
                    if a.proxy == "tma-load" else
                    self._ordered(a, b, meet) or self._ordered(b, a, meet)):
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
        covering = _Covering(self._accesses)
        fenced = {}                 # id(event) -> the first proxy fence after it, or None
        for a, b, meet in self._pairs():
            for x, y in ((a, b), (b, a)):
                if x.is_write and x.proxy == "generic" and y.proxy in _ASYNC_READ \
                        and not self._found_already("proxy-fence", x.event, y.event) \
                        and self._ordered(x, y, meet) \
                        and not self._fenced(x, y, covering, fenced):
                    self._finding("proxy-fence", _names(x, y), x.event, y.event,
                                  f"{x.event.role} wrote bytes through the generic proxy "
                                  f"that {_op(y)} reads through the async proxy: no "
                                  f"fence.proxy.async by the writing threads between the "
                                  f"generic write and the async-proxy read", x.overlap(y))

    def _fenced(self, x, y, covering, fenced):
        """Is generic write x, ordered before async read y, proxy-fenced (or overwritten
        before y reads)? The first fence of x's threads after x is the one to ask about:
        any later one comes after it. `fenced` remembers it per event."""
        g, e = self.graph, x.event
        if id(e) not in fenced:
            fenced[id(e)] = next((f for f in self.fences[e.role]
                                  if g.reaches(e.leave, f.enter)), None)
        fence = fenced[id(e)]
        if fence is not None and g.before(fence, y.event):
            return True
        return any(z is not x and self._ordered(x, z) and self._ordered(z, y)
                   for z in covering.of(*x.overlap(y)))

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


_MEETS = (None, "same", "other")          # Access.threads_meet's answers, numbered


def _overlapping(accesses):
    """Arrays i, j (i < j, in order) of the pairs of accesses (sorted by first byte) whose
    byte ranges overlap, of different steps, one of them a write."""
    n = len(accesses)
    if n < 2:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    lo = np.fromiter((a.lo for a in accesses), np.int64, n)
    hi = np.fromiter((a.hi for a in accesses), np.int64, n)
    write = np.fromiter((a.is_write for a in accesses), bool, n)
    step = np.fromiter((a.event.step for a in accesses), np.int64, n)
    first = np.arange(n)
    counts = np.maximum(np.searchsorted(lo, hi, side="left") - first - 1, 0)
    i = np.repeat(first, counts)              # each access, once per later one it meets
    j = np.arange(len(i)) - np.repeat(np.cumsum(counts) - counts, counts) + i + 1
    keep = (write[i] | write[j]) & (step[i] != step[j])
    return i[keep], j[keep]


class _Covering:
    """Which exact writes among `accesses()` have a span covering bytes [lo, hi): one
    vectorized query over all their spans."""

    def __init__(self, accesses):
        self.accesses, self.writes = accesses, None

    def of(self, lo, hi):
        if self.writes is None:         # built at the first question (most runs ask none)
            self.writes = [a for a in self.accesses() if a.is_write and a.exact]
            rows = [(a, b, i) for i, w in enumerate(self.writes) for a, b, _ in w.spans]
            self.lo, self.hi, self.owner = (np.array(c, dtype=np.int64) for c in zip(*rows)) \
                if rows else (np.zeros(0, dtype=np.int64),) * 3
        hits = np.unique(self.owner[(self.lo <= lo) & (hi <= self.hi)])
        return [self.writes[i] for i in hits.tolist()]


_ASYNC_OPS = {"tma-load": "the TMA load", "wgmma": "the wgmma", "tma-store": "the TMA store"}


def _op(access):
    if access.proxy in _ASYNC_OPS:
        return _ASYNC_OPS[access.proxy]
    if any(a.via == "stmatrix" for a in access.event.effects.accesses):
        return "stmatrix"
    return f"the {'write' if access.is_write else 'read'} of {access.buffer.name}"


def _names(a, b):
    return "/".join(dict.fromkeys((a.buffer.name, b.buffer.name)))
