"""A Hopper kernel's control skeleton unrolled into role traces: step 1 of
lowering.async_protocol (lowering.async_order builds the happens-before graph over them).

Unrolling. The body is walked as the block runs it, SIMT style: each statement with the
set of threads executing it (a bit mask over threadIdx.x) and every loop variable bound
to each of its values in turn. A loop extent must evaluate to a constant
(kir.evaluate_scalar, given the enclosing loop variables); a condition is evaluated for
each executing thread (threadIdx.x bound), so `if threadIdx.x < 128 ... else ...` splits
warp groups and `if threadIdx.x == 128` elects a thread. Anything else is refused
(Refusal): a run-time or data-dependent extent or condition, a block of more than one
dimension, cp.async (lowering.hazards' domain).

Roles. The threads are split into the coarsest classes that every executing set is a
union of: the threads of one role execute the same statements in the same order. Before
a warp-group split there is one trace for all; the producer's elected thread is a role of
one, the rest of its warp group another; a kernel with no split is one role of all its
threads. Each execution of a statement by a role is one Event; events of one role are in
program order (the walk's).

Accesses. Each event's shared-memory accesses, in pool bytes: the generic ones from
lowering.accesses (a shared Store, shared Loads in its expressions, stmatrix, ldmatrix),
a TMA load's box (written by the async proxy), a TMA store's box and a wgmma's shared
operands (read by it). An index is evaluated with the loop variables bound and, if it
depends on threadIdx.x, once per executing thread (stmatrix and ldmatrix: per address
lane), so an access is a list of spans, each with the threads that touch it; an index
that depends on data or run-time scalars stands for the whole buffer, touched by all.
"""

from dataclasses import dataclass, field, fields, replace

from fuserir.instructions import swizzle

from . import kir
from .accesses import shared_accesses
from .hazards import thread_dependent

_THREAD = "threadIdx.x"          # the variable a condition's threadIdx.x is bound to
_REFUSED = (kir.CpAsync, kir.CpAsyncCommit, kir.CpAsyncWait, kir.ExprStmt)


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


@dataclass(frozen=True)
class Role:
    """Threads (a bit mask over threadIdx.x) that execute the same statements."""

    index: int
    mask: int

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


@dataclass(eq=False)
class Event:
    """One execution of `stmt` by the threads of `role`. `step` numbers the walk's
    executions (program order); `env` binds the loop variables; `enter` and `leave` are
    its graph nodes (different for a wait: `leave` is after what it waits for)."""

    stmt: kir.Stmt
    role: Role
    step: int
    env: dict
    accesses: list = field(default_factory=list)
    enter: int = None
    leave: int = None

    def value(self, expr, what):
        return constant(expr, self.env, self.stmt, what)


@dataclass(eq=False)
class Access:
    """Bytes read or written by `event`: `spans`, [(lo, hi, threads)] in pool bytes, each
    touched by the threads of its mask; through the generic proxy or by an async
    operation ("tma-load", "wgmma", "tma-store"). `end`: what completes it
    (lowering.async_protocol sets it): the event itself for a generic access, the retiring
    wait's event for a wgmma or TMA store, the mbarrier phase for a TMA load; None:
    never retired."""

    event: Event
    buffer: kir.Buffer
    spans: list
    is_write: bool
    proxy: str = "generic"
    info: kir.AccessInfo = None
    end: object = None

    def __post_init__(self):
        self.lo = min(lo for lo, _, _ in self.spans)
        self.hi = max(hi for _, hi, _ in self.spans)

    def overlap(self, other):
        lo, hi = max(self.lo, other.lo), min(self.hi, other.hi)
        return (lo, hi) if lo < hi else None

    def threads_meet(self, other):
        """Do the two touch common bytes: "other" (by two different threads), "same" (by
        one thread only, in both), None (no)."""
        met = None
        for lo, hi, mask in self.spans:
            for lo2, hi2, mask2 in other.spans:
                if lo < hi2 and lo2 < hi:
                    if mask != mask2 or mask & (mask - 1):
                        return "other"
                    met = "same"
        return met


class Trace:
    """A kernel unrolled: `threads` of its block, `roles`, `events` in walk order."""

    def __init__(self, kernel, known=None):
        """`known`: a dict a caller keeps across traces of one kernel whose statements it
        only adds to (sync insertion): the byte spans computed so far, by index
        expression, buffer, size, threads and loop values."""
        self._known = {} if known is None else known
        self.threads = _block_threads(kernel)
        full = (1 << self.threads) - 1
        self._bindings = {}                      # id(expression) -> _bind_thread of it
        steps = []
        self._walk(kernel.body, full, {}, steps)
        self.roles = _roles((mask for _, mask, _ in steps), full)
        self.events = []
        for number, (stmt, mask, env) in enumerate(steps):
            found = self._step_accesses(stmt, mask, env)
            for role in self.roles:
                if role.mask & mask:
                    e = Event(stmt, role, number, env)
                    for buffer, spans, *rest in found:
                        mine = [(lo, hi, m & role.mask) for lo, hi, m in spans
                                if m & role.mask]
                        if mine:
                            e.accesses.append(Access(e, buffer, mine, *rest))
                    self.events.append(e)

    def _walk(self, stmts, mask, env, steps):
        for s in stmts:
            if not mask:
                return
            if isinstance(s, kir.ForLoop):
                what = f"loop extent (of loop {s.var.name})"
                if thread_dependent(s.extent):
                    raise Refusal(s, f"cannot prove: {what} {kir.format_expr(s.extent)} "
                                     f"is not a constant")
                for v in range(constant(s.extent, env, s, what)):
                    self._walk(s.body, mask, {**env, s.var.name: v}, steps)
            elif isinstance(s, kir.IfThenElse):
                taken = self._taken(s, mask, env)
                self._walk(s.then_body, taken, env, steps)
                self._walk(s.else_body, mask & ~taken, env, steps)
            elif isinstance(s, _REFUSED):
                raise Refusal(s, f"cannot prove: {type(s).__name__} is not part of the "
                                 f"async protocol (lowering.hazards checks cp.async)")
            else:
                steps.append((s, mask, env))

    def _taken(self, s, mask, env):
        """The threads of `mask` for which the condition of `s` holds."""
        try:
            return mask if kir.evaluate_scalar(s.cond, env) else 0
        except (TypeError, KeyError):
            pass
        cond, taken = self._bound(s.cond), 0
        try:
            for t in range(self.threads):
                if mask >> t & 1 and kir.evaluate_scalar(cond, {**env, _THREAD: t}):
                    taken |= 1 << t
        except (TypeError, KeyError):
            raise Refusal(s, f"cannot prove: condition {kir.format_expr(s.cond)} is not a "
                             f"function of threadIdx.x and the loop variables") from None
        return taken

    def _bound(self, expr):
        if id(expr) not in self._bindings:
            self._bindings[id(expr)] = _bind_thread(expr)
        return self._bindings[id(expr)]

    def _spans(self, buffer, index, nbytes, mask, env, stmt, lanes=32):
        """[(lo, hi, threads)]: the bytes from element `index` each thread of `mask` (the
        first `lanes` of each warp) touches."""
        key = (id(index), id(buffer), nbytes, mask, lanes, tuple(sorted(env.items())))
        if key not in self._known:
            self._known[key] = self._compute_spans(buffer, index, nbytes, mask, env, stmt,
                                                   lanes)
        return self._known[key]

    def _compute_spans(self, buffer, index, nbytes, mask, env, stmt, lanes):
        whole = [(*_buffer_bytes(buffer, stmt), mask)]
        try:
            at = kir.evaluate_scalar(index, env)
            if lanes == 32:
                start = _element_byte(buffer, at, stmt)
                return [(start, start + nbytes, mask)]
        except (TypeError, KeyError):
            pass
        bound, spans = self._bound(index), {}
        try:
            for t in range(self.threads):
                if mask >> t & 1 and t % 32 < lanes:
                    start = _element_byte(
                        buffer, kir.evaluate_scalar(bound, {**env, _THREAD: t}), stmt)
                    key = (start, start + nbytes)
                    spans[key] = spans.get(key, 0) | 1 << t
        except (TypeError, KeyError):
            return whole
        return [(lo, hi, m) for (lo, hi), m in spans.items()]

    def _step_accesses(self, stmt, mask, env):
        """(buffer, spans, is_write, proxy, info) of each shared access of one execution by
        the threads of `mask`."""
        found = []
        for a in shared_accesses(stmt):
            found.append((a.buffer, self._spans(a.buffer, a.index, a.nbytes, mask, env, stmt,
                                                a.lanes or 32), a.is_write, "generic",
                          a.info))
        if isinstance(stmt, kir.TmaLoad):
            found.append((stmt.dst, self._spans(stmt.dst, stmt.dst_index,
                                                stmt.map.box_bytes, mask, env, stmt),
                          True, "tma-load", stmt.access))
        elif isinstance(stmt, kir.TmaStore):
            found.append((stmt.src, self._spans(stmt.src, stmt.src_index,
                                                stmt.map.box_bytes, mask, env, stmt),
                          False, "tma-store", stmt.access))
        elif isinstance(stmt, kir.Wgmma):
            operands = [(stmt.b, stmt.b_index, stmt.b_layout, stmt.trans_b, stmt.n)]
            if stmt.a.memory is kir.Memory.shared:
                operands.insert(0, (stmt.a, stmt.a_index, stmt.a_layout, stmt.trans_a, 64))
            for buf, index, layout, trans, rows in operands:
                found.append((buf, [(*_operand_bytes(buf, index, layout, trans, rows, env,
                                                     stmt), mask)],
                              False, "wgmma", stmt.access))
        return found


def _block_threads(kernel):
    x, *rest = [constant(e, {}, None, "the block extent") for e in kernel.launch.block]
    if any(n != 1 for n in rest):
        raise Refusal(None, "cannot prove: a block of more than one dimension")
    return x


def _bind_thread(expr):
    """`expr` with threadIdx.x a variable named _THREAD."""
    if isinstance(expr, kir.Special):
        if expr.kind is kir.SpecialKind.threadIdx and expr.axis == "x":
            return kir.Var(_THREAD, expr.dtype)
        return expr
    changes = {f.name: _bind_thread(getattr(expr, f.name)) for f in fields(expr)
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


def _operand_bytes(buffer, index, layout, trans, rows, env, stmt):
    """[lo, hi) around a wgmma operand's bytes (all of the buffer: a data-dependent
    start)."""
    try:
        start = _element_byte(buffer, kir.evaluate_scalar(index, env), stmt)
    except (TypeError, KeyError):
        return _buffer_bytes(buffer, stmt)
    physical = swizzle(start + layout.offsets(trans, rows), layout.swizzle)
    return int(physical.min()), int(physical.max()) + buffer.dtype.itemsize
