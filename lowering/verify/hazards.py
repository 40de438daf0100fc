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
ranges in the shared pool intersect (aliasing).

Async copies (docs/hazards.md): a cp.async is a write by its thread that stays pending
until a cp.async.wait_group retires its group. The state also holds the thread's copies
not yet committed and the committed groups, oldest first; a commit closes a group, a
`wait_group n` retires all but the n newest (never the uncommitted), and a retired copy
becomes an ordinary write (visible to other threads after a barrier). A barrier does not
retire copies. A pending copy conflicts with every other access to its bytes, by any
thread, the issuing one included: an async-pending hazard. Copies still pending at the end
of the kernel are a hazard too (second access: END), which a drain at the end orders.

Circular buffers: an access tagged with a stage (AccessInfo.stage = (loop, offset, S))
touches only the bytes of stage (iteration + offset) % S of that loop. Two accesses tagged
for the same loop overlap only when their offsets agree modulo S; each time the state goes
around that loop's back edge, the offsets of every access tagged for it (the prologue's
pending copies included) drop by one. An untagged access overlaps every stage.

Sync insertion asks about one body many times, adding and removing synchronization
statements in between. A HazardAnalysis answers all of its questions: it keeps each
statement's accesses and the analysis after every prefix of the top-level statement list
it has seen, so a call analyses only what follows the first change (find_hazards is one
fresh analysis).
"""

from dataclasses import dataclass, field, replace

from .. import kir
from .accesses import shared_accesses


@dataclass(frozen=True)
class Access:
    stmt: kir.Stmt
    buffer: kir.Buffer
    is_write: bool
    info: kir.AccessInfo
    carried: kir.ForLoop = None   # the loop whose back edge this access came around
    pending: bool = False         # an async copy not yet retired by a wait
    # Identifies the access within a state; states are deduplicated and compared by it
    # over and over, so it is computed once.
    key: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "key", (id(self.stmt), id(self.buffer), self.is_write,
                                         id(self.carried), self.pending, _stage(self)))


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


def accesses_of(stmt):
    """The shared-memory accesses one statement makes itself (reads before the write:
    lowering.verify.accesses), as the analysis tracks them."""
    return [Access(stmt, a.buffer, a.is_write, a.info, pending=a.pending)
            for a in shared_accesses(stmt)]


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


def _stage(access):
    return access.info.stage if access.info is not None else None


def accesses_overlap(a, b):
    """May two accesses touch the same bytes (buffers overlap, and not two different
    stages of one circular buffer)?"""
    if not may_overlap(a.buffer, b.buffer):
        return False
    sa, sb = _stage(a), _stage(b)
    if a.buffer is b.buffer and sa is not None and sb is not None and sa[0] == sb[0]:
        return (sa[1] - sb[1]) % sa[2] == 0
    return True


def conflict(earlier, later):
    if not (earlier.is_write or later.is_write):
        return None
    if not accesses_overlap(earlier, later):
        return None
    if (earlier.buffer is later.buffer and earlier.info is not None and later.info is not None
            and earlier.info.same_thread_as(later.info)):
        return None
    if earlier.is_write and later.is_write:
        return kir.HazardKind.WAW
    return kir.HazardKind.WAR if later.is_write else kir.HazardKind.RAW


def _dedupe(accesses):
    return list({a.key: a for a in accesses}.values())


def _may_repeat(loop):
    return not (isinstance(loop.extent, kir.Const) and loop.extent.value <= 1)


@dataclass(frozen=True)
class State:
    """Accesses not ordered by a barrier, copies not yet committed, committed groups."""

    plain: tuple = ()
    uncommitted: tuple = ()
    groups: tuple = ()            # oldest first; each a tuple of Access

    def pending(self):
        return list(self.uncommitted) + [a for g in self.groups for a in g]

    def map(self, f):
        return State(tuple(map(f, self.plain)), tuple(map(f, self.uncommitted)),
                     tuple(tuple(map(f, g)) for g in self.groups))

    def join(self, other):
        """Either path may have been taken: the union, groups aligned newest to newest."""
        n = max(len(self.groups), len(other.groups))
        a = ((),) * (n - len(self.groups)) + self.groups
        b = ((),) * (n - len(other.groups)) + other.groups
        return State(tuple(_dedupe(self.plain + other.plain)),
                     tuple(_dedupe(self.uncommitted + other.uncommitted)),
                     tuple(tuple(_dedupe(x + y)) for x, y in zip(a, b)))

    def key(self):
        return (frozenset(a.key for a in self.plain),
                frozenset(a.key for a in self.uncommitted),
                tuple(frozenset(a.key for a in g) for g in self.groups))


def find_hazards(body):
    """Every unordered conflicting pair of shared-memory accesses, in discovery order."""
    return HazardAnalysis().find(body)


class HazardAnalysis:
    """find_hazards for a caller that analyses a kernel body again and again, adding,
    removing or moving statements in between (sync insertion) but changing no statement's
    own fields (expressions, buffers, wait counts) and no buffer's byte range. It keeps:
    * each statement's accesses;
    * the analysis after every prefix of the top-level statement list it has seen. The
      state, the findings so far and the loop memo after a prefix depend on nothing but
      the statements in it, so a body that starts with the same statements (the same
      objects, nested the same way) resumes after them: a barrier placed in the epilogue
      does not send the analysis through the main loop again.
    Each call returns what a fresh find_hazards returns, in the same order."""

    def __init__(self):
        self._accesses = {}                     # statement -> its accesses
        self._effects = {}                      # statement -> its effects
        self._prefixes = {}                     # first statement's shape -> _Prefix

    def find(self, body):
        shapes = [_shape(s) for s in body]
        done, children = 0, self._prefixes
        after = _Prefix(State(), {}, {})
        for shape in shapes:
            if shape not in children:
                break
            after = children[shape]
            done, children = done + 1, after.children
        run = _Interpretation(self._accesses_of, self._effects_of, dict(after.found),
                              dict(after.memo))
        state = after.state
        for stmt, shape in zip(body[done:], shapes[done:]):
            state = run.visit((stmt,), state)
            after = children[shape] = _Prefix(state, dict(run.found), dict(run.memo))
            children = after.children
        for copy in state.pending():
            run.record(copy, Access(END, copy.buffer, False, None), kir.HazardKind.ASYNC)
        return list(run.found.values())

    def _accesses_of(self, stmt):
        if stmt not in self._accesses:
            self._accesses[stmt] = tuple(accesses_of(stmt))
        return self._accesses[stmt]

    def _effects_of(self, stmt):
        if stmt not in self._effects:
            self._effects[stmt] = stmt.effects()
        return self._effects[stmt]


def _shape(stmt):
    """A statement and the statements nested in it, as a hashable value that is equal only
    for the same objects nested the same way."""
    return (stmt, tuple(tuple(map(_shape, body)) for body in stmt.bodies()))


class _Prefix:
    """The analysis after a prefix of a top-level statement list, and the longer prefixes
    analysed so far (keyed by the shape of their next statement)."""

    def __init__(self, state, found, memo):
        self.state, self.found, self.memo = state, found, memo
        self.children = {}


class _Interpretation:
    """One run of the analysis in program order: `found` maps each finding's key to the
    first finding with it, `memo` each (loop, entry state key) to the loop's exit state."""

    def __init__(self, accesses_of, effects_of, found, memo):
        self.accesses_of, self.effects_of = accesses_of, effects_of
        self.found, self.memo = found, memo

    def record(self, first, second, kind):
        f = Found(first, second, kind)
        self.found.setdefault(f.key(), f)

    def check(self, accesses, state):
        for access in accesses:
            for earlier in state.plain:
                kind = conflict(earlier, access)
                if kind is not None:
                    self.record(earlier, access, kind)
            for copy in state.pending():
                # One copy statement writes each element of its tensor once per placement
                # (its own loops and threads enumerate the elements), so its executions do
                # not overlap one another; everything else meeting a pending copy does.
                if access.pending and copy.stmt is access.stmt:
                    continue
                if accesses_overlap(copy, access):
                    self.record(copy, access, kir.HazardKind.ASYNC)
            if access.pending:
                state = replace(state, uncommitted=state.uncommitted + (access,))
            else:
                state = replace(state, plain=tuple(_dedupe(state.plain + (access,))))
        return state

    @staticmethod
    def wait(state, n):
        keep = len(state.groups) - n if n else len(state.groups)
        retired = [replace(a, pending=False) for g in state.groups[:max(keep, 0)] for a in g]
        return State(tuple(_dedupe(state.plain + tuple(retired))), state.uncommitted,
                     state.groups[max(keep, 0):])

    def visit(self, stmts, state):
        for s in stmts:
            effects = self.effects_of(s)
            group = effects.group
            if kir.effects.is_block_barrier(effects):
                state = replace(state, plain=())
            elif group is not None and group.kind == "cp.async" and group.op == "commit":
                state = State(state.plain, (), state.groups + (state.uncommitted,))
            elif group is not None and group.kind == "cp.async" and group.op == "wait":
                state = self.wait(state, group.n)
            elif isinstance(s, kir.ForLoop):
                state = self.check(self.accesses_of(s), state)
                state = state.join(self.loop(s, state))
            elif isinstance(s, kir.IfThenElse):
                state = self.check(self.accesses_of(s), state)
                state = self.visit(s.then_body, state).join(self.visit(s.else_body, state))
            else:
                state = self.check(self.accesses_of(s), state)
        return state

    def loop(self, loop, entry):
        """The state after some number (>= 1) of iterations."""
        # The same entry state gives the same exit state and findings: analysing an inner
        # loop once per distinct entry keeps nested loops from multiplying the work.
        memo_key = (loop, entry.key())
        if memo_key not in self.memo:
            self.memo[memo_key] = self.iterate(loop, entry)
        return self.memo[memo_key]

    def iterate(self, loop, entry):
        """Accesses coming around the back edge are marked as carried by this loop while
        the body is analysed again, until the state repeats."""
        state = self.visit(loop.body, entry)
        if not _may_repeat(loop):
            return state
        inside = {id(x) for x in kir.walk(loop.body)}
        name = loop.var.name

        def around(a):
            stage = _stage(a)
            if stage is not None and stage[0] == name:
                a = replace(a, info=replace(a.info, stage=(name, (stage[1] - 1) % stage[2],
                                                           stage[2])))
            return replace(a, carried=loop) if id(a.stmt) in inside and a.carried is None \
                else a

        seen = set()
        key = state.key()
        while key not in seen and len(seen) < 16:
            seen.add(key)
            state = state.join(self.visit(loop.body, state.map(around)))
            key = state.key()
        return state.map(lambda a: replace(a, carried=None) if a.carried is loop else a)


# The second access of a copy still pending when the kernel ends.
END = kir.Comment("end of the kernel", label="END")


def thread_dependent(expr):
    """Might `expr` differ between the threads of a block?"""
    return any((isinstance(e, kir.Special) and e.kind is kir.SpecialKind.threadIdx)
               or isinstance(e, (kir.Load, kir.ShuffleXor)) for e in kir.walk_expr(expr))


def divergent_barriers(body):
    """Barriers inside control flow whose condition may differ between threads."""
    out = []

    def visit(stmts, divergent):
        for s in stmts:
            if divergent and kir.effects.is_block_barrier(s.effects()):
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
