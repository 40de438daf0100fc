"""Sync insertion for Hopper's asynchronous protocol: the fences, waits and barriers that
lowering.verify.async_protocol's findings ask for, each placed with the reasons it exists, until
the protocol is proved; what no placement of them can fix is refused.

The rules, one per kind of finding (first: the earlier statement, second: the later):
    proxy-fence        fence.proxy.async after the last of the generic writes a reader
                       meets, in the innermost statement list holding writers and reader;
                       where the reader is another role's (a producer's copies, read by
                       the consumers' wgmma after an mbarrier), in the writers' own list,
                       outside the constant loops and "either way" ifs around them
    wgmma-fence        wgmma.fence before the wgmma, in the innermost list holding it and
                       the register accesses (so before a main loop, not in it; an
                       access later in a loop around both, as a persistent kernel's
                       epilogue reading the accumulator, before the wgmma's ancestor)
    mbarrier-init      __syncthreads after the init (its ancestor in the list it shares
                       with the use); or, where the init is not fenced,
                       fence.mbarrier_init after the init inside the initialising
                       thread's branch
    async-pending      a TMA store's source written before its read wait, or the store
                       still pending at the end: cp.async.bulk.wait_group.read 0 after
                       the store's commit
    RAW, WAR, WAW      between threads of the one warp group (or block) that runs the
                       innermost list holding both: bar.sync on a fresh id for the threads
                       of that list (__syncthreads if they are the block) before the later
                       statement's ancestor there, or at the top of the list where that
                       ancestor comes first in it (a conflict carried by a loop around the
                       list, one execution's access before the next one's: what precedes
                       the access, as an epilogue's register copy, then follows the
                       barrier, next to its use); threads are counted by linear id
                       (x + bx * (y + by * z)), in every unrolling of the kernel's
                       run-time loops and block-uniform ifs
Refused (HazardError listing the findings): a deadlock, a wrong parity or an expect_tx
that does not match (the protocol itself is wrong); a TMA load's bytes touched before its
phase is waited for, and a stage handed between roles before its reads retired (only the
pipeline's own mbarrier protocol orders those: a barrier across roles would deadlock);
conflicts whose statements have one ancestor in the innermost list holding both (a
loop-carried conflict across roles, or within one statement);
anything the verifier cannot prove.

Placements are made a round at a time (a later round sees the earlier ones); at the end
each placed statement that a later one made redundant is taken out again, so every one
kept is needed. A correct kernel is returned unchanged, with nothing inserted. It sits above
lowering.verify.async_protocol (it asks it, between placements) and below the passes that will
run it on the kernels the Hopper scheduler lowers.
"""

from fuserir.instructions import NAMED_BARRIER_IDS

from .. import kir
from .async_protocol import check_async_protocol
from .async_runtime import covering_traces
from .async_skeleton import Skeleton
from ..errors import HazardError
from .hazards import path_to, thread_dependent

_KINDS = {"proxy-fence": kir.HazardKind.PROXY, "wgmma-fence": kir.HazardKind.WGMMA_FENCE,
          "mbarrier-init": kir.HazardKind.INIT, "async-pending": kir.HazardKind.ASYNC,
          "RAW": kir.HazardKind.RAW, "WAR": kir.HazardKind.WAR, "WAW": kir.HazardKind.WAW}
_ROUNDS = 16


def insert_async_syncs(kernel, memo=None):
    """Place what the kernel's async protocol needs (see the module header); returns the
    statements inserted, in the order placed. Raises HazardError where it cannot. `memo`:
    proofs remembered beyond this process (async_protocol.ProofMemo)."""
    inserted, known = [], {}
    for _ in range(_ROUNDS):
        findings = check_async_protocol(kernel, known, memo)
        if not findings:
            return _prune(kernel, inserted, known, memo)
        placements = _Placer(kernel, findings, known).placements()
        if not placements:
            raise HazardError(findings, kernel.name)
        for stmts, index, stmt in sorted(placements, key=lambda p: -p[1]):
            stmts.insert(index, stmt)
            inserted.append(stmt)
        kir.relabel(kernel.body)
    raise HazardError(check_async_protocol(kernel, known, memo), kernel.name)


def _prune(kernel, inserted, known, memo):
    """Drop, newest first, each placed statement that a later placement made redundant
    (the kernel stays proved without it), so each one kept is needed."""
    kept = list(inserted)
    for stmt in reversed(inserted):
        stmts, index, _ = path_to(kernel.body, stmt)[-1]
        del stmts[index]
        kir.relabel(kernel.body)
        if check_async_protocol(kernel, known, memo, every=False):
            stmts.insert(index, stmt)
            kir.relabel(kernel.body)
        else:
            kept.remove(stmt)
    return kept


def _commits(stmt, kind):
    """Does `stmt` commit the open group of `kind`?"""
    group = stmt.effects().group
    return group is not None and group.kind == kind and group.op == "commit"

class _Placer:
    """One round: the placements the findings ask for (at most one per place)."""

    def __init__(self, kernel, findings, known):
        self.kernel, self.findings, self.known = kernel, findings, known
        self.by_label = {s.label: s for s in kir.walk(kernel.body)}
        self._traces = None
        self._skeleton = None
        self.seen = set()
        orders = (s.effects().order for s in kir.walk(kernel.body))
        self.used_ids = {o.id for o in orders if o is not None and o.scope == "named"}

    def stmt(self, point):
        return self.by_label.get(point.split(":", 1)[0])

    def reason(self, h, first, second):
        return kir.SyncReason(_KINDS[h.kind], tuple(h.buffer.split("/")), first, second)

    def placements(self):
        out = []
        readers = {}
        fenced_after_writes = {id(self.stmt(h.second)) for h in self.findings
                               if h.kind == "wgmma-fence" and h.first != h.second}
        for h in self.findings:
            first, second = self.stmt(h.first), self.stmt(h.second)
            if first is not None and second is None and h.second.startswith("END"):
                second = first                # still pending when the kernel ends
            if first is None or second is None:
                continue
            if h.kind == "wgmma-fence" and first is second and \
                    id(second) in fenced_after_writes:
                continue    # the fence after its register writes is a fence before it too
            if h.kind == "proxy-fence":
                readers.setdefault(second, []).append((h, first))
                continue
            rule = {"wgmma-fence": self.wgmma_fence, "mbarrier-init": self.init,
                    "async-pending": self.store_read_wait, "RAW": self.barrier,
                    "WAR": self.barrier, "WAW": self.barrier}.get(h.kind)
            place = rule(h, first, second) if rule else None
            if place is not None:
                self.add(out, place)
        for reader, writers in readers.items():
            self.add(out, self.proxy_fence(reader, writers))
        return out

    def add(self, out, place):
        stmts, index, stmt = place
        key = (id(stmts), index, type(stmt))
        if key not in self.seen:
            self.seen.add(key)
            out.append(place)

    # -- where: the innermost statement list holding both, and their ancestors in it ------
    def common(self, *stmts):
        """(list, [index of each statement's ancestor in it]) of the innermost statement
        list that holds all of `stmts` (each through one of its statements)."""
        paths = [path_to(self.kernel.body, s) for s in stmts]
        depth = 0
        while all(len(p) > depth + 1 for p in paths) and \
                all(p[depth + 1][0] is paths[0][depth + 1][0] for p in paths):
            depth += 1
        return paths[0][depth][0], [p[depth][1] for p in paths]

    def traces(self):
        if self._traces is None:
            self._traces = covering_traces(self.kernel, self.skeleton(), self.known)
        return self._traces

    def threads(self, *stmts):
        """The bit mask of the threads that execute any statement in or under `stmts`."""
        inside = {id(x) for x in kir.walk(list(stmts))}
        mask = 0
        for trace in self.traces():
            for e in trace.events:
                if id(e.stmt) in inside:
                    mask |= e.role.mask
        return mask

    # -- the rules ----------------------------------------------------------------------
    def proxy_fence(self, reader, writers):
        """After the last of the writes, where the reader comes later in the same list;
        else (the reader in another role's branch, ordered by an mbarrier the writers
        arrive on next) after the last write in the writers' own innermost list, outside
        the copy loops and bounds guards around it (constant loops, "either way" ifs)."""
        fence = kir.FenceProxyAsync(reasons=[self.reason(h, w, reader) for h, w in writers])
        stmts, at = self.common(reader, *(w for _, w in writers))
        last = max(at[1:])
        if last < at[0]:
            return stmts, last + 1, fence
        stmts, at = self.common(*(w for _, w in writers))
        path = path_to(self.kernel.body, stmts[max(at)])
        while len(path) > 1 and self._inside_copies(path[-1][2]):
            path.pop()
        stmts, index, _ = path[-1]
        return stmts, index + 1, fence

    def _inside_copies(self, owner):
        """Is `owner` a loop of constant extent or an "either way" if (the loops and
        guards of a tile's copies, which a fence after the copies goes outside of)?"""
        skeleton = self.skeleton()
        if isinstance(owner, kir.ForLoop):
            return skeleton.loop(owner).kind == "constant"
        return isinstance(owner, kir.IfThenElse) and \
            skeleton.condition(owner).kind == "either way"

    def skeleton(self):
        if self._skeleton is None:
            self._skeleton = Skeleton(self.kernel)
        return self._skeleton

    def wgmma_fence(self, h, first, second):
        fence = kir.WgmmaFence(reasons=[self.reason(h, first, second)])
        if first is not second:             # after the register accesses, before the
            stmts, (a, b) = self.common(first, second)      # wgmma (or, an access late
            if a != b:                                      # in the loop around both,
                return stmts, b, fence                      # before it the next time)
        stmts, index, _ = path_to(self.kernel.body, second)[-1]
        return stmts, index, fence

    def init(self, h, first, second):
        if "fence.mbarrier_init" in h.detail:
            path = path_to(self.kernel.body, first)
            inside = next((i for i, (_, _, owner) in enumerate(path)
                           if isinstance(owner, kir.IfThenElse)
                           and thread_dependent(owner.cond)), 0)
            stmts, index, _ = path[inside]
            return stmts, index + 1, kir.FenceMbarrierInit(
                reasons=[self.reason(h, first, second)])
        stmts, (a, b) = self.common(first, second)
        if a >= b:
            return None
        return stmts, a + 1, kir.Barrier(reasons=[self.reason(h, first, second)])

    def store_read_wait(self, h, first, second):
        if not any(a.until == kir.effects.Group("bulk", "read")
                   for a in first.effects().accesses):
            return None                  # not a read a bulk wait .read retires
        stmts, index, _ = path_to(self.kernel.body, first)[-1]
        commit = next((i for i in range(index + 1, len(stmts))
                       if _commits(stmts[i], "bulk")), None)
        if commit is None:
            return None
        return stmts, commit + 1, kir.BulkWait(0, read=True,
                                               reasons=[self.reason(h, first, second)])

    def barrier(self, h, first, second):
        stmts, (a, b) = self.common(first, second)
        if a == b:
            return None             # one ancestor holds both: nowhere between them here
        mask = self.threads(*stmts)
        sides = self.threads(first) | self.threads(second)
        if mask & sides != sides:
            return None
        count = bin(mask).count("1")
        reason = self.reason(h, first, second)
        if a > b:     # carried by a loop around the list: at its top, so that what comes
            b = 0     # before the later access (a staged epilogue's register copy) runs
                      # after the barrier, next to its use, not held in registers across
        if count == self.threads_in_block():
            return stmts, b, kir.Barrier(reasons=[reason])
        if count % 32:
            return None
        free = [i for i in NAMED_BARRIER_IDS if i not in self.used_ids]
        if not free:
            return None
        self.used_ids.add(free[0])
        return stmts, b, kir.NamedBarrier(free[0], count, reasons=[reason])

    def threads_in_block(self):
        return self.traces()[0].threads
