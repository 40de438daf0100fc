"""The static shared-memory hazard analysis that sync insertion and the verifier share.

An abstract interpretation of kernel IR in program order. The state is the set of
shared-memory accesses not yet ordered by a barrier ("pending"). Each new access is
checked against every pending one: two accesses conflict when their bytes may overlap, at
least one writes, and they are not provably made by the same thread (same tensor, same
owner map: lowering.kir.AccessInfo). A barrier clears the state. A loop body is analysed
twice: the second time, accesses left pending by the end of the first iteration are marked
as having come around the back edge, so a conflict with them is loop-carried. Branches
are analysed separately and their states joined; a loop may also run zero times.

Bytes may overlap when two accesses use the same buffer, or buffers whose constant byte
ranges in the shared pool intersect (aliasing). (Async copies, pending until the wait that
retires them, join this model with the pipelining pass.)
"""

from dataclasses import dataclass, replace

from . import kir


@dataclass(frozen=True)
class Access:
    stmt: kir.Stmt
    buffer: kir.Buffer
    is_write: bool
    info: kir.AccessInfo
    carried: kir.ForLoop = None   # the loop whose back edge this access came around


@dataclass(frozen=True)
class Found:
    first: Access
    second: Access
    kind: kir.HazardKind

    @property
    def loop(self):
        return self.first.carried

    def key(self):
        return (id(self.first.stmt), id(self.second.stmt), self.kind, id(self.loop))

    def reason(self):
        buffers = tuple(dict.fromkeys((self.first.buffer.name, self.second.buffer.name)))
        return kir.SyncReason(self.kind, buffers, self.first.stmt, self.second.stmt,
                              self.loop is not None)


def shared_loads(expr):
    return [e for e in kir.walk_expr(expr)
            if isinstance(e, kir.Load) and e.buffer.memory is kir.Memory.shared]


def accesses_of(stmt):
    """The shared-memory accesses one statement makes itself (reads before the write)."""
    if isinstance(stmt, kir.Store):
        loads = shared_loads(stmt.index) + shared_loads(stmt.value)
        reads = [Access(stmt, ld.buffer, False, ld.access) for ld in loads]
        if stmt.buffer.memory is kir.Memory.shared:
            return reads + [Access(stmt, stmt.buffer, True, stmt.access)]
        return reads
    if isinstance(stmt, kir.IfThenElse):
        return [Access(stmt, ld.buffer, False, ld.access) for ld in shared_loads(stmt.cond)]
    if isinstance(stmt, kir.ForLoop):
        return [Access(stmt, ld.buffer, False, ld.access) for ld in shared_loads(stmt.extent)]
    return []


def _byte_range(buffer):
    if isinstance(buffer.byte_offset, kir.Const) and isinstance(buffer.size, kir.Const):
        start = buffer.byte_offset.value
        return start, start + buffer.size.value * buffer.dtype.itemsize
    return None


def may_overlap(a, b):
    if a is b:
        return True
    ra, rb = _byte_range(a), _byte_range(b)
    return ra is not None and rb is not None and ra[0] < rb[1] and rb[0] < ra[1]


def conflict(earlier, later):
    if not (earlier.is_write or later.is_write):
        return None
    if not may_overlap(earlier.buffer, later.buffer):
        return None
    if (earlier.buffer is later.buffer and earlier.info is not None and later.info is not None
            and earlier.info.same_thread_as(later.info)):
        return None
    if earlier.is_write and later.is_write:
        return kir.HazardKind.WAW
    return kir.HazardKind.WAR if later.is_write else kir.HazardKind.RAW


def _key(a):
    return (id(a.stmt), id(a.buffer), a.is_write, id(a.carried))


def _dedupe(accesses):
    return list({_key(a): a for a in accesses}.values())


def _may_repeat(loop):
    return not (isinstance(loop.extent, kir.Const) and loop.extent.value <= 1)


def find_hazards(body):
    """Every unordered conflicting pair of shared-memory accesses, in discovery order."""
    found = {}

    def check(accesses, state):
        for access in accesses:
            for pending in state:
                kind = conflict(pending, access)
                if kind is not None:
                    f = Found(pending, access, kind)
                    found.setdefault(f.key(), f)
            state = state + [access]
        return state

    def visit(stmts, state):
        for s in stmts:
            if isinstance(s, kir.Barrier):
                state = []
            elif isinstance(s, kir.ForLoop):
                state = check(accesses_of(s), state)
                inside = {id(x) for x in kir.walk(s.body)}
                first = visit(s.body, state)
                after = first
                if _may_repeat(s):
                    around = [replace(a, carried=s) if id(a.stmt) in inside and a.carried is None
                              else a for a in first]
                    after = [replace(a, carried=None) if a.carried is s else a
                             for a in visit(s.body, around)]
                state = _dedupe(state + first + after)
            elif isinstance(s, kir.IfThenElse):
                state = check(accesses_of(s), state)
                state = _dedupe(visit(s.then_body, state) + visit(s.else_body, state))
            else:
                state = _dedupe(check(accesses_of(s), state))
        return state

    visit(body, [])
    return list(found.values())


def thread_dependent(expr):
    """Might `expr` differ between the threads of a block?"""
    return any((isinstance(e, kir.Special) and e.kind is kir.SpecialKind.threadIdx)
               or isinstance(e, (kir.Load, kir.ShuffleXor)) for e in kir.walk_expr(expr))


def divergent_barriers(body):
    """Barriers inside control flow whose condition may differ between threads."""
    out = []

    def visit(stmts, divergent):
        for s in stmts:
            if isinstance(s, kir.Barrier) and divergent:
                out.append(s)
            if isinstance(s, kir.IfThenElse):
                d = divergent or thread_dependent(s.cond)
                visit(s.then_body, d)
                visit(s.else_body, d)
            elif isinstance(s, kir.ForLoop):
                visit(s.body, divergent or thread_dependent(s.extent))

    visit(body, False)
    return out


def path_to(body, target):
    """[(statement list, index, owning statement or None), ...] from `body` down to target."""
    def search(stmts, owner):
        for i, s in enumerate(stmts):
            if s is target:
                return [(stmts, i, owner)]
            for nested in s.bodies():
                rest = search(nested, s)
                if rest is not None:
                    return [(stmts, i, owner)] + rest
        return None

    return search(body, None)
