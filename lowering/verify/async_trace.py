"""A Hopper kernel's control skeleton unrolled into role traces: step 1 of
lowering.verify.async_protocol (lowering.verify.async_order builds the happens-before graph over them).

Unrolling. The body is walked as the block runs it, SIMT style: each statement with the
set of threads executing it (a bit mask over the block's linear thread ids t = x + bx *
(y + by * z), CUDA's numbering, so warps and warp groups are runs of consecutive ids)
and every loop variable bound to each of its values in turn. lowering.verify.async_skeleton
says how each loop and if is walked: a constant extent is evaluated given the enclosing
loop variables; a run-time loop runs the trip count the caller chose for its extent
(`trips`), its variable bound to an Iteration; a condition is evaluated for each
executing thread (threadIdx.x, .y and .z bound), so `if threadIdx.y == 2` splits warp
groups and `if threadIdx.x == 0` elects a thread; a block-uniform or iteration-uniform
one takes the outcome the caller chose (`outcomes`); an if that cannot touch the
protocol is skipped. Anything else is refused (Refusal), and so is cp.async
(lowering.verify.hazards' domain).

Run-time loops. Inside one, every value the protocol is computed from (mbarrier indices,
parities, counts, conditions, byte indices) must be periodic in the loop's variable
(lowering.verify.async_periodic): each evaluation checks it, refusing what is not, and records
the period in `periods` for lowering.verify.async_runtime's argument over every trip count.

Roles. The threads are split into the coarsest classes that every executing set is a
union of: the threads of one role execute the same statements in the same order. Before
a warp-group split there is one trace for all; the producer's elected thread is a role of
one, the rest of its warp group another; a kernel with no split is one role of all its
threads. Each execution of a statement by a role is one Event; events of one role are in
program order (the walk's).

Store runs. Consecutive executions of shared Stores by the same threads, at one iteration
of the run-time loops, with nothing between them (a producer's element copies, an
epilogue's register stores: tens of statements a tile) are one event whose accesses are
their spans, one per buffer: nothing between them orders anything, so the happens-before
graph and every finding are the same, with fewer pairs to compare. A run in which two
stores touch common bytes by different threads is not merged, so that conflict is found
between its own statements.

Repeats. Consecutive executions of one statement by a role, at one iteration of the
run-time loops, that touch no shared memory and neither synchronize nor use registers
asynchronously (an unrolled epilogue's register copies and global stores) are one event,
the first: such an event's only edges are its role's program order, so the graph
orders the others alike, and the one rule that reads it, the wgmma fence's, cites the
first register store after a fence, which is that event.

Accesses. Each event's shared-memory accesses, in pool bytes: the generic ones from
lowering.verify.accesses (a shared Store, shared Loads in its expressions, stmatrix, ldmatrix),
a TMA load's box (written by the async proxy), a TMA store's box and a wgmma's shared
operands (read by it). An index is evaluated with the loop variables bound and, if it
depends on the thread, once per executing thread (stmatrix and ldmatrix: per address
lane), so an access is a list of spans, each with the threads that touch it; an index
that depends on data or run-time scalars stands for the whole buffer, touched by all
(`exact` False: it may touch less, so it never counts as covering bytes).
"""

from bisect import bisect_left
from dataclasses import dataclass, field, fields, replace

import numpy as np

from fuserir.instructions import swizzle

from .. import kir
from .accesses import register_accesses, shared_accesses
from .async_periodic import eventual_period
from .async_skeleton import Skeleton

_AXES = "xyz"
_THREAD = {a: f"threadIdx.{a}" for a in _AXES}  # variables a condition's threadIdx binds to


def _refused(effects):
    """Outside the async protocol: cp.async groups (lowering.verify.hazards proves those)
    and statements not lowered yet."""
    return effects.opaque or (effects.group is not None and effects.group.kind == "cp.async")


class Refusal(Exception):
    """The kernel is outside what the verifier proves: `stmt` and why."""

    def __init__(self, stmt, why):
        super().__init__(why)
        self.stmt, self.why = stmt, why


def constant(expr, env, stmt, what):
    """The value of `expr` given the loop variables `env`, or a Refusal naming `what`."""
    try:
        return int(kir.evaluate_scalar(expr, env))
    except (TypeError, KeyError):
        raise Refusal(stmt, f"cannot prove: {what} {kir.format_expr(expr)} is not a "
                            f"constant") from None


class Iteration(int):
    """The value of a run-time loop's variable: an int that knows its `loop` (the
    ForLoop), its trip count's `key` and its `instance` (the values of the loop variables
    around the loop: instances of run-time loops with one key and one instance run side
    by side, in different roles)."""

    def __new__(cls, value, loop, key, instance):
        self = super().__new__(cls, value)
        self.loop, self.key, self.instance = loop, key, instance
        return self


@dataclass(frozen=True)
class Role:
    """Threads (a bit mask over linear thread ids) that execute the same statements."""

    index: int
    mask: int

    def __hash__(self):                  # its mask names it (roles key the graph's tables)
        return hash(self.mask)

    @property
    def size(self):
        return bin(self.mask).count("1")

    @property
    def first(self):
        return (self.mask & -self.mask).bit_length() - 1

    def __str__(self):
        spans = []
        for t in range(self.mask.bit_length()):
            if self.mask >> t & 1:
                if spans and spans[-1][1] == t - 1:
                    spans[-1][1] = t
                else:
                    spans.append([t, t])
        text = ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in spans)
        return ("thread " if self.size == 1 else "threads ") + text


@dataclass(eq=False, slots=True)
class Event:
    """One execution of `stmt` by the threads of `role`. `step` numbers the walk's
    executions (program order); `env` binds the loop variables, `iterations` are the
    Iterations among them (outermost first); `effects` are the statement's (kir.effects,
    made once per trace); `enter` and `leave` are its graph nodes (different for a wait:
    `leave` is after what it waits for)."""

    stmt: kir.Stmt
    role: Role
    step: int
    env: dict
    trace: "Trace" = None
    effects: kir.effects.Effects = None
    iterations: tuple = ()
    accesses: list = field(default_factory=list)
    enter: int = None
    leave: int = None

    def value(self, expr, what):
        return self.trace.value(expr, self.env, self.stmt, what)


@dataclass(eq=False, slots=True)
class Access:
    """Bytes read or written by `event`: `spans`, [(lo, hi, threads)] in pool bytes, each
    touched by the threads of its mask (`exact`: exactly these; else at most these);
    through the generic proxy or by an async operation ("tma-load", "wgmma",
    "tma-store"). `end`: what completes it (lowering.verify.async_protocol sets it): the event
    itself for a generic access, the retiring wait's event for a wgmma or TMA store, the
    mbarrier phase for a TMA load; None: never retired."""

    event: Event
    buffer: kir.Buffer
    spans: list
    is_write: bool
    proxy: str = "generic"
    info: kir.AccessInfo = None
    exact: bool = True
    end: object = None

    extent: tuple = None            # (lo, hi) of the spans, where the caller knows it
    lo: int = field(init=False)
    hi: int = field(init=False)
    _index: tuple = field(init=False, default=None)

    def __post_init__(self):
        self.lo, self.hi = self.extent or (min(lo for lo, _, _ in self.spans),
                                           max(hi for _, hi, _ in self.spans))

    def overlap(self, other):
        lo, hi = max(self.lo, other.lo), min(self.hi, other.hi)
        return (lo, hi) if lo < hi else None

    def threads_meet(self, other):
        """Do the two touch common bytes: "other" (by two different threads), "same" (by
        one thread only, in both), None (no)."""
        met = None
        theirs, starts, reach = other.index()
        for lo, hi, mask in self.spans:
            for lo2, hi2, mask2 in theirs[bisect_left(starts, lo - reach + 1):
                                          bisect_left(starts, hi)]:
                if lo < hi2:
                    if mask != mask2 or mask & (mask - 1):
                        return "other"
                    met = "same"
        return met

    def index(self):
        """(spans sorted, their starts, the longest span's length), for threads_meet."""
        if self._index is None:
            spans = sorted(self.spans)
            self._index = (spans, [lo for lo, _, _ in spans],
                           max(hi - lo for lo, hi, _ in spans))
        return self._index


class Trace:
    """A kernel unrolled: `block` (its extents), `threads` of its block, `roles`,
    `events` in walk order; `trips` and `outcomes` as chosen; `periods`: {trip-count key:
    {id(expression): its period}} of what the run-time loops evaluated, `settled`: {key:
    the first iteration from which their conditions repeat (k > 0: 1)}."""

    def __init__(self, kernel, known=None, skeleton=None, trips=None, outcomes=None):
        """`known`: a dict a caller keeps across traces of one kernel whose statements it
        only adds to (sync insertion, every trip count): the values computed so far, by
        expression, buffer, threads and loop values. `skeleton`: the kernel's
        lowering.verify.async_skeleton.Skeleton (computed when not given); `trips`: {key: trip
        count} of its run-time loops; `outcomes`: {key: bool} of its block-uniform ifs."""
        self._known = {} if known is None else known
        self.skeleton = Skeleton(kernel) if skeleton is None else skeleton
        self.trips, self.outcomes = dict(trips or {}), dict(outcomes or {})
        self.periods = {}
        self.settled = {}            # trip-count key -> the iteration its conditions settle
        self._periodic = set()       # (expression, loop, settling) checked in this trace
        # how two accesses' spans (lists `known` keeps) meet: (id, id) -> threads_meet
        self.meets = self._known.setdefault("meets", {})
        self.block = _block_extents(kernel)
        bx, by, bz = self.block
        self.threads = bx * by * bz
        ids = np.arange(self.threads, dtype=np.int64)
        self._thread_arrays = {_THREAD["x"]: ids % bx, _THREAD["y"]: ids // bx % by,
                               _THREAD["z"]: ids // (bx * by)}
        full = (1 << self.threads) - 1
        self._bindings = {}                      # id(expression) -> _bind_thread of it
        steps = []
        self._walk(kernel.body, full, _Env(), steps)
        self.roles = _roles((mask for _, mask, _ in steps), full)
        self.events, last = [], {}            # role -> its latest event
        for number, stmt, mask, env, its, found in self._store_runs(steps):
            effects = self.effects_of(stmt)
            repeats = not found and self._inert(stmt)
            for role in self.roles:
                if role.mask & mask:
                    before = last.get(role)
                    if repeats and before is not None and before.stmt is stmt \
                            and before.iterations is its:
                        continue                  # see the module header: Repeats
                    e = last[role] = Event(stmt, role, number, env, self, effects, its)
                    for buffer, spans, is_write, proxy, info, exact, _ in found:
                        mine = self._role_spans(spans, role)
                        if mine:
                            e.accesses.append(Access(e, buffer, mine, is_write, proxy,
                                                     info, exact,
                                                     extent=self._extent(mine)))
                    self.events.append(e)

    def _store_runs(self, steps):
        """(number, stmt, mask, env, its Iterations, accesses) of each step, a run of
        shared stores made one (see the module header: Store runs)."""
        runs, its = [], None
        for number, (stmt, mask, env) in enumerate(steps):
            found = self._step_accesses(stmt, mask, env)
            plain = len(found) == 1 and found[0][6] == "store" and found[0][2] \
                and found[0][5]
            if env.iterations is not its:     # one tuple for one run-time iteration
                its = env.iterations
                when = tuple((v.key, v.instance, int(v)) for v in its)
            last = runs[-1] if runs else None
            if plain and last and last[5] and last[2] == mask and last[6] == when:
                last[4].append((found, its))
            else:
                runs.append([number, stmt, mask, env, [(found, its)], plain, when])
        for number, stmt, mask, env, parts, _, _ in runs:
            merged = self._merged([found for found, _ in parts]) if len(parts) > 1 else None
            if merged is not None:
                yield number, stmt, mask, env, parts[0][1], merged
            else:                              # one step, or stores that meet: each alone
                for i, (found, its) in enumerate(parts):
                    yield number + i, stmt if i == 0 else steps[number + i][0], mask, \
                        steps[number + i][2], its, found

    def _merged(self, parts):
        """The accesses of a run of shared stores as one per buffer, or None where two of
        them touch common bytes by different threads (a conflict to be found alone)."""
        by_buffer = {}
        for ((buffer, spans, *_),) in parts:
            by_buffer.setdefault(buffer, []).append(spans)
        found = []
        for buffer, lists in by_buffer.items():
            key = ("merged", id(buffer), tuple(id(s) for s in lists))
            if key not in self._known:
                spans = [s for lst in lists for s in lst]
                self._known[key] = None if _threads_overlap(spans) else spans
            if self._known[key] is None:
                return None
            found.append((buffer, self._known[key], True, "generic", None, True, "store"))
        return found

    def _role_spans(self, spans, role):
        """The part of `spans` (a list `known` keeps) that `role`'s threads touch, kept
        there too (lowering.verify.async_protocol memoizes how span lists meet, by identity)."""
        key = ("role spans", id(spans), role.mask)
        if key not in self._known:
            self._known[key] = spans if all(m & role.mask == m for _, _, m in spans) \
                else [(lo, hi, m & role.mask) for lo, hi, m in spans if m & role.mask]
        return self._known[key]

    def _extent(self, spans):
        """(lo, hi) of `spans` (a list `known` keeps), remembered there."""
        key = ("extent", id(spans))
        if key not in self._known:
            self._known[key] = (min(lo for lo, _, _ in spans), max(hi for _, hi, _ in spans))
        return self._known[key]

    def coordinates(self, t):
        """Linear thread id t as (x, y, z)."""
        return tuple(int(self._thread_arrays[_THREAD[a]][t]) for a in _AXES)

    # -- the walk ---------------------------------------------------------------------

    def effects_of(self, stmt):
        """`stmt.effects()`, kept (statements do not change while a kernel is checked)."""
        key = ("effects", id(stmt))
        if key not in self._known:
            self._known[key] = stmt.effects()
        return self._known[key]

    def register_effects(self, stmt):
        """(the registers `stmt` accesses itself, complete at issue:
        accesses.register_accesses; kir.effects.async_register_uses of its effects), kept
        as effects_of keeps those."""
        key = ("registers", id(stmt))
        if key not in self._known:
            effects = self.effects_of(stmt)
            self._known[key] = (register_accesses(stmt),
                                kir.effects.async_register_uses(effects))
        return self._known[key]

    def _inert(self, stmt):
        """Does `stmt` neither synchronize (barrier, fence, group or mbarrier operation)
        nor use registers asynchronously (see the module header: Repeats)?"""
        effects = self.effects_of(stmt)
        return effects.order is None and effects.group is None and \
            effects.mbarrier is None and not self.register_effects(stmt)[1]

    def _walk(self, stmts, mask, env, steps):
        for s in stmts:
            if not mask:
                return
            if isinstance(s, kir.ForLoop):
                if self.skeleton.loop(s).kind == "skipped":
                    continue
                for v in self._iterations(s, env):
                    self._walk(s.body, mask, env.bind(s.var.name, v), steps)
            elif isinstance(s, kir.IfThenElse):
                how = self.skeleton.condition(s)
                if how.kind == "refused":
                    raise Refusal(s, how.why)
                if how.kind == "skipped":
                    continue
                if how.kind == "either way":     # both branches' accesses, by all
                    self._walk(s.then_body, mask, env, steps)
                    self._walk(s.else_body, mask, env, steps)
                    continue
                taken = self._taken(s, mask, env, how)
                self._walk(s.then_body, taken, env, steps)
                self._walk(s.else_body, mask & ~taken, env, steps)
            elif _refused(self.effects_of(s)):
                raise Refusal(s, f"cannot prove: {type(s).__name__} is not part of the "
                                 f"async protocol (lowering.verify.hazards checks cp.async)")
            else:
                steps.append((s, mask, env))

    def _iterations(self, s, env):
        how = self.skeleton.loop(s)
        if how.kind == "refused":
            raise Refusal(s, how.why)
        if how.kind == "constant":
            return range(self.value(s.extent, env, s, f"loop extent (of loop {s.var.name})"))
        instance = tuple((k, int(v)) for k, v in env.items())
        return [Iteration(u, s, how.key, instance) for u in range(self.trips[how.key])]

    def _taken(self, s, mask, env, how):
        """The threads of `mask` for which the condition of `s` holds."""
        if how.kind in ("block-uniform", "iteration-uniform"):
            return mask if self.outcomes[how.key] else 0
        self._check_periodic(s.cond, env, s, "condition", settling=True)
        key = ("taken", id(s.cond), mask, _env_key(env))
        if key not in self._known:
            self._known[key] = self._compute_taken(s, mask, env)
        return self._known[key]

    def _compute_taken(self, s, mask, env):
        taken = 0
        try:
            for value, threads in self._per_thread(s.cond, mask, env):
                if value:
                    taken |= threads
        except (TypeError, KeyError):
            raise Refusal(s, f"cannot prove: condition {kir.format_expr(s.cond)} is not a "
                             f"function of the thread index and the loop variables") from None
        return taken

    def _per_thread(self, expr, mask, env):
        """[(value, the threads of `mask` for which `expr` has it)] given the loop
        variables `env`, evaluated for all of them at once (kir.evaluate_lanes), in the
        order of each value's first thread."""
        key = ("threads", mask)
        if key not in self._known:
            self._known[key] = np.array([t for t in range(self.threads) if mask >> t & 1],
                                        dtype=np.int64)
        threads = self._known[key]
        lanes = {name: ids[threads] for name, ids in self._thread_arrays.items()}
        values = np.broadcast_to(kir.evaluate_lanes(self._bound(expr), {**env, **lanes}),
                                 threads.shape)
        found = {}
        for t, v in zip(threads.tolist(), values.tolist()):
            found[v] = found.get(v, 0) | 1 << t
        return list(found.items())

    # -- values -----------------------------------------------------------------------

    def value(self, expr, env, stmt, what):
        """The value of `expr` (no thread index in it) given the loop variables `env`,
        periodic in its run-time loops' variables; else a Refusal naming `what`."""
        self._check_periodic(expr, env, stmt, what)
        key = ("value", id(expr), _env_key(env))
        if key not in self._known:
            self._known[key] = constant(self._bound(expr), env, stmt, what)
        return self._known[key]

    def _check_periodic(self, expr, env, stmt, what, settling=False):
        """Refuse `expr` unless periodic in each run-time loop variable of `env` (a
        condition, `settling`, from some iteration on); record the periods and where a
        condition settles."""
        bound = env.iterations if type(env) is _Env else \
            [v for v in env.values() if isinstance(v, Iteration)]
        for v in bound:
            checked = (id(expr), id(v.loop), settling)
            if checked in self._periodic:        # checked and recorded in this trace
                continue
            name = v.loop.var.name               # the walk binds a loop's variable
            key = ("period", id(expr), name)
            if key not in self._known:
                self._known[key] = eventual_period(self._bound(expr), name,
                                                   set(env) | set(_THREAD.values()))
            found = self._known[key]
            if found is None or (found[1] and not settling):
                raise Refusal(stmt, f"cannot prove: {what} {kir.format_expr(expr)} is not "
                                    f"periodic in {name}, the variable of the run-time loop "
                                    f"{v.loop.label} (for {name} in 0.."
                                    f"{kir.format_expr(v.loop.extent)}): the protocol must "
                                    f"repeat with the iteration, depending on {name} only "
                                    f"through {name} % m or ({name} / d) % m")
            self.periods.setdefault(v.key, {})[id(expr)] = found[0]
            self.settled[v.key] = max(self.settled.get(v.key, 0), found[1])
            self._periodic.add(checked)

    def _bound(self, expr):
        if id(expr) not in self._bindings:
            self._bindings[id(expr)] = _bind_thread(expr, self.block)
        return self._bindings[id(expr)]

    # -- shared bytes -----------------------------------------------------------------

    def _spans(self, buffer, index, nbytes, mask, env, stmt, lanes=32):
        """([(lo, hi, threads)], exact): the bytes from element `index` each thread of
        `mask` (the first `lanes` of each warp) touches."""
        self._check_periodic(index, env, stmt, f"the index into {buffer.name}")
        key = (id(index), id(buffer), nbytes, mask, lanes, _env_key(env))
        if key not in self._known:
            spans, exact = self._compute_spans(buffer, index, nbytes, mask, env, stmt, lanes)
            self._known[key] = self._one_list(spans), exact
        return self._known[key]

    def _one_list(self, spans):
        """One list object for equal span lists (the identity what `known` keeps about
        spans goes by: how two lists meet, a role's part): the bytes a stage's accesses
        touch recur at every iteration that uses the stage."""
        key = ("spans", tuple(spans))
        return self._known.setdefault(key, spans)

    def _compute_spans(self, buffer, index, nbytes, mask, env, stmt, lanes):
        lo, hi = _buffer_bytes(buffer, stmt)
        spans, touching = {}, mask & self._lanes(lanes) if lanes < 32 else mask
        size = buffer.dtype.itemsize
        try:
            for at, threads in self._per_thread(index, touching, env):
                spans[lo + at * size] = threads
        except (TypeError, KeyError):
            return [(lo, hi, mask)], False
        return [(start, start + nbytes, m) for start, m in spans.items()], True

    def _lanes(self, lanes):
        """The threads that are among the first `lanes` of their warp."""
        key = ("lanes", lanes, self.threads)
        if key not in self._known:
            self._known[key] = sum(1 << t for t in range(self.threads) if t % 32 < lanes)
        return self._known[key]

    def _step_accesses(self, stmt, mask, env):
        """(buffer, spans, is_write, proxy, info, exact, via) of each shared access of one
        execution by the threads of `mask`: the generic ones (lowering.verify.accesses),
        then the async-proxy ones its effects declare (TMA boxes, bulk copies, wgmma
        operands), whose proxy is their kind by what completes them (async_kind). Kept in
        `known` by the statement, threads and loop values; where kept, only the periodicity
        of its indices is recorded again (it held when they were found: it holds now)."""
        key = ("shared accesses", id(stmt))
        if key not in self._known:
            generic = shared_accesses(stmt)
            asynchronous = kir.effects.async_shared(stmt.effects())
            self._known[key] = (generic, asynchronous,
                                [a.index for a in generic] + [a.index for a in asynchronous])
        step = ("step accesses", id(stmt), mask, _env_key(env))
        if step in self._known:
            for index in self._known[key][2]:
                self._check_periodic(index, env, stmt, "an index")
            return self._known[step]
        found = self._known[step] = self._found_accesses(stmt, mask, env,
                                                         *self._known[key][:2])
        return found

    def _found_accesses(self, stmt, mask, env, generic, asynchronous):
        found = []
        for a in generic:
            spans, exact = self._spans(a.buffer, a.index, a.nbytes, mask, env, stmt,
                                       a.lanes or 32)
            found.append((a.buffer, spans, a.is_write, "generic", a.info, exact, a.via))
        for a in asynchronous:
            if a.layout is None:                         # a TMA box or bulk copy's bytes
                spans, exact = self._spans(a.buffer, a.index, a.nbytes, mask, env, stmt)
                found.append((a.buffer, spans, a.write, async_kind(a), a.info, exact,
                              a.via))
                continue
            layout, trans, rows = a.layout                # a wgmma operand
            self._check_periodic(a.index, env, stmt, f"the wgmma operand index into "
                                                     f"{a.buffer.name}")
            key = ("operand", id(a.index), id(a.buffer), id(layout), trans, rows, mask,
                   _env_key(env))
            if key not in self._known:
                self._known[key] = self._one_list(self._operand_spans(
                    a.buffer, a.index, layout, trans, rows, mask, env, stmt))
            found.append((a.buffer, self._known[key], False, async_kind(a), a.info, False,
                          a.via))
        return found



    def _operand_spans(self, buffer, index, layout, trans, rows, mask, env, stmt):
        """[(lo, hi, threads)] around a wgmma operand's bytes for the threads of `mask`,
        by the operand's start each computes (all of the buffer where it depends on
        data)."""
        try:
            starts = dict(self._per_thread(index, mask, env))
        except (TypeError, KeyError):
            return [(*_buffer_bytes(buffer, stmt), mask)]
        return [(*_operand_bytes(buffer, at, layout, trans, rows, stmt), m)
                for at, m in starts.items()]


def _threads_overlap(spans):
    """Do two of `spans` [(lo, hi, threads)] touch common bytes by different threads (or
    one of them by several)?"""
    open_spans = []
    for lo, hi, mask in sorted(spans):
        open_spans = [(h, m) for h, m in open_spans if h > lo]
        if any(m != mask or mask & (mask - 1) for _, m in open_spans):
            return True
        open_spans.append((hi, mask))
    return False


class _Env(dict):
    """The loop variables bound at a point of the walk, never changed once made: with
    the Iterations among them (`iterations`, outermost first: one tuple for the envs of a
    constant loop's iterations inside one iteration of the run-time loops) and their
    sorted items (`key`, how the values kept in `known` name them; made at the first
    question)."""

    __slots__ = ("key", "iterations")

    def __init__(self, items=(), iterations=None):
        super().__init__(items)
        self.key = None
        self.iterations = tuple(v for v in self.values() if isinstance(v, Iteration)) \
            if iterations is None else iterations

    def bind(self, name, value):
        """A new env with `name` bound to `value`."""
        if name in self or isinstance(value, Iteration):
            return _Env({**self, name: value})
        return _Env({**self, name: value}, self.iterations)


def _env_key(env):
    if type(env) is not _Env:
        return tuple(sorted(env.items()))
    if env.key is None:
        env.key = tuple(sorted(env.items()))
    return env.key


def _block_extents(kernel):
    dims = [constant(e, {}, None, "the block extent") for e in kernel.launch.block]
    return tuple(dims + [1] * (3 - len(dims)))


def _bind_thread(expr, block):
    """`expr` with threadIdx.x, .y, .z variables named _THREAD[axis] and blockDim the
    block's extents."""
    if isinstance(expr, kir.Special):
        if expr.kind is kir.SpecialKind.threadIdx:
            return kir.Var(_THREAD[expr.axis], expr.dtype)
        if expr.kind is kir.SpecialKind.blockDim:
            return kir.Const(block[_AXES.index(expr.axis)], expr.dtype)
        return expr
    changes = {f.name: _bind_thread(getattr(expr, f.name), block) for f in fields(expr)
               if isinstance(getattr(expr, f.name), kir.ScalarExpr)}
    return replace(expr, **changes) if changes else expr


def _roles(masks, full):
    parts = [full]
    for m in dict.fromkeys(masks):
        parts = [p for c in parts for p in (c & m, c & ~m) if p]
    return [Role(i, m) for i, m in enumerate(sorted(parts, key=lambda m: m & -m))]


# ---------------------------------------------------------------------------------------
# Shared bytes
# ---------------------------------------------------------------------------------------


def _buffer_bytes(buffer, stmt):
    if buffer.byte_offset is None:
        raise Refusal(stmt, f"cannot prove: shared buffer {buffer.name} has no byte_offset")
    start = constant(buffer.byte_offset, {}, stmt, f"the byte offset of {buffer.name}")
    size = constant(buffer.size, {}, stmt, f"the size of {buffer.name}")
    return start, start + size * buffer.dtype.itemsize


def _element_byte(buffer, index, stmt):
    """The pool byte of element `index` (a value) of `buffer`."""
    return _buffer_bytes(buffer, stmt)[0] + int(index) * buffer.dtype.itemsize


def _operand_bytes(buffer, index, layout, trans, rows, stmt):
    """[lo, hi) around the bytes of a wgmma operand starting at element `index` (a
    value)."""
    start = _element_byte(buffer, index, stmt)
    physical = swizzle(start + layout.offsets(trans, rows), layout.swizzle)
    return int(physical.min()), int(physical.max()) + buffer.dtype.itemsize


def async_kind(access):
    """An async-proxy access's kind for the protocol's rules, by what completes it (its
    effects' `until`), whatever instruction makes it: "tma-load" (a write that lands with
    an mbarrier phase: a TMA box, a bulk copy), "wgmma" (a read retired by
    wgmma.wait_group), "tma-store" (a read retired by cp.async.bulk.wait_group.read)."""
    until = access.until
    if isinstance(until, kir.effects.Phase):
        return "tma-load"
    return {"wgmma": "wgmma", "bulk": "tma-store"}[until.kind]
