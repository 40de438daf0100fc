"""What lowering.verify.async_trace does with each loop and each if of a kernel, decided once
from the statement tree (with the names of the loop variables in scope), so that every
unrolling of one kernel agrees on it.

Loops, by their extent:
    constant      a function of the enclosing loop variables and blockDim: unrolled
                  value by value
    run-time      depends on scalar parameters, tensor sizes, blockIdx or gridDim and on
                  no loop variable (ceildiv(K, 64), a split-K slice): unrolled for a trip
                  count lowering.verify.async_runtime chooses; loops whose extents are the same
                  expression share one trip count (their `key`), so the producer's and
                  the consumer's K loops always run equally often
    refused       depends on threadIdx or data, on loop variables and run-time values at
                  once, or sits in a run-time loop of the same trip count
    skipped       whatever the extent, nothing in the body can take part in the
                  shared-memory protocol (as a skipped if below): e.g. a parallel split-K's
                  slice sums over global workspaces. Its iterations make no event, so
                  no trip count of it needs proving
Ifs, by their condition:
    skipped       neither the condition nor any statement under the if can take part in
                  the shared-memory protocol (no shared access, barrier, fence, mbarrier,
                  TMA, wgmma or bulk statement, no access of registers a later wgmma
                  uses): e.g. the epilogue's `if (row < M)` around global stores
    per thread    a function of threadIdx and the loop variables: evaluated per thread
    block-uniform depends on blockIdx, gridDim, scalar parameters or tensor sizes only
                  (`if (blockIdx.z < gridDim.z - 1)` of a split-K turnstile): every
                  thread of the block takes the same branch; lowering.verify.async_runtime
                  chooses the outcome (ifs with the same condition share one)
    iteration-uniform  depends on loop variables and run-time values, not on the thread
                  or data (a persistent kernel's epilogue, `if (w_k[0] == Kt - 1)`, the
                  last K tile of each output tile, its K tiles counted in a register that
                  iteration_counters shows is the same in every thread; or as
                  `w % Kt == Kt - 1`), with barriers under it: every thread
                  of an iteration takes the same branch, which changes from iteration
                  to iteration. Proved like a block-uniform if, in two runs: taken in
                  every iteration and in none. That covers the iterations' real mix
                  where what is under it is self-contained:
                    (a) the only synchronization under it is barriers, async-proxy
                        fences and TMA stores with their bulk groups' commits and
                        waits (no mbarrier, wgmma, TMA load or cp.async operation:
                        effects.only_adds_order), so whether it runs changes no
                        protocol state the rest of the kernel sees: a fence or a wait
                        only adds order, and a store reads only the if's own buffers
                        (b), whose pending reads the always-taken run follows from one
                        execution to the next and to the end of the kernel;
                    (b) the shared buffers it accesses (its own: an epilogue's staging
                        buffer), through either proxy, are accessed under its
                        then-branch and nowhere else;
                    (c) a barrier at the top level of that branch comes before its
                        first access of its own buffers, or after its last (a TMA
                        store's read lasting to the statement that holds its bulk
                        wait) (`reentries`: a finding otherwise, which sync insertion
                        fixes).
                  Then the rest of the kernel is proved in the run where the if is never
                  taken (its barriers only add order); registers are per thread, the
                  barriers reached by whole generations and the kernel free of
                  deadlock in the run where it always is (each run's barrier edges are
                  a subset of that run's); conflicts on its own buffers within one
                  execution are ordered by its barriers (the always-taken run), and
                  across two executions by the barrier of (c), which every thread
                  running the branch reaches between them
    either way    anything else (data, or threads mixed with run-time values: the
                  bounds predicate `if (row < M)` around a shared or register store of
                  the epilogue) where nothing under the if synchronizes or runs
                  asynchronously (no barrier, fence, mbarrier, TMA, wgmma or bulk
                  statement): every thread of the mask is taken to make the accesses of
                  both branches. More accesses can only ask for more synchronization, so
                  the proof holds whichever way each thread goes
    refused       the rest: a condition of that kind around synchronization
"""

from dataclasses import dataclass, fields

from .. import kir
from .accesses import register_accesses, shared_accesses

def _synchronizes(stmt):
    return kir.effects.synchronizes(stmt.effects())


def _shared_buffers(stmt):
    """The shared buffers `stmt` accesses itself, through either proxy."""
    return {a.buffer for a in shared_accesses(stmt)} | {
        a.buffer for a in kir.effects.async_shared(stmt.effects())}


def _bulk_wait(stmt):
    """Is it a bulk wait (where the reads of earlier TMA stores end)?"""
    group = stmt.effects().group
    return group is not None and group.kind == "bulk" and group.op == "wait"


def _barrier(stmt):
    """Is it a barrier (__syncthreads, bar.sync) and nothing else that synchronizes?"""
    e = stmt.effects()
    return (e.order is not None and e.order.kind == "barrier" and e.group is None
            and e.mbarrier is None and not e.opaque)


def expr_key(e):
    """A structural identity of an expression: equal for two expressions that compute the
    same thing from the same variables (by their kir key) and buffers."""
    if isinstance(e, kir.Var):
        return ("var", e.key, e.dtype)
    if isinstance(e, kir.Const):
        return ("const", e.value, e.dtype)
    if isinstance(e, kir.Special):
        return ("special", e.kind, e.axis)
    parts = []
    for f in fields(e):
        value = getattr(e, f.name)
        if isinstance(value, kir.ScalarExpr):
            parts.append(expr_key(value))
        elif isinstance(value, kir.Buffer):
            parts.append(("buffer", id(value)))
        elif not isinstance(value, kir.AccessInfo):
            parts.append(value)
    return (type(e).__name__, *parts)


@dataclass(frozen=True)
class Loop:
    """How a ForLoop is unrolled: kind "constant", "run-time", "skipped" or "refused";
    `key` (run-time: the trip count's identity), `why` (refused: the Refusal's text)."""

    kind: str
    key: tuple = None
    why: str = None


@dataclass(frozen=True)
class Condition:
    """How an IfThenElse is walked: kind "skipped", "per thread", "block-uniform" or
    "iteration-uniform" (`key`: the outcome's identity), "either way" or "refused"
    (`why`)."""

    kind: str
    key: tuple = None
    why: str = None


class Skeleton:
    """The classification of every loop and if of `kernel` (see the module header):
    `loop(stmt)`, `condition(stmt)`; `trip_counts`: {key: (extent, [loops])} of the
    run-time loops; `uniform`: {key: (condition, [ifs])} of the block-uniform and
    iteration-uniform ifs (each proved with its outcome fixed: taken or not)."""

    def __init__(self, kernel):
        self._loops, self._conds = {}, {}
        self.trip_counts, self.uniform = {}, {}
        self._register_accesses = _register_accesses_before_wgmmas(kernel.body)
        self._counters = iteration_counters(kernel.body)
        self._visit(kernel.body, (), ())
        self._check_own_buffers(kernel.body)

    def loop(self, stmt):
        return self._loops[id(stmt)]

    def runs(self, loop):
        """Is `loop` walked at all (not under a skipped if)?"""
        return id(loop) in self._loops

    def condition(self, stmt):
        return self._conds[id(stmt)]

    def _visit(self, stmts, loop_vars, runtime_keys):
        for s in stmts:
            if isinstance(s, kir.ForLoop):
                how = self._classify_loop(s, loop_vars, runtime_keys)
                self._loops[id(s)] = how
                if how.kind == "run-time":
                    self.trip_counts.setdefault(how.key, (s.extent, []))[1].append(s)
                inner = runtime_keys + ((how.key,) if how.kind == "run-time" else ())
                if how.kind != "skipped":
                    self._visit(s.body, loop_vars + (s.var.name,), inner)
            elif isinstance(s, kir.IfThenElse):
                how = self._classify_condition(s, loop_vars)
                self._conds[id(s)] = how
                if how.kind in ("block-uniform", "iteration-uniform"):
                    self.uniform.setdefault(how.key, (s.cond, []))[1].append(s)
                if how.kind != "skipped":
                    self._visit(s.then_body, loop_vars, runtime_keys)
                    self._visit(s.else_body, loop_vars, runtime_keys)

    def _classify_loop(self, s, loop_vars, runtime_keys):
        if not (shared_accesses(s) or any(self._relevant(x) for x in kir.walk(s.body))):
            return Loop("skipped")
        what = f"loop extent (of loop {s.var.name}) {kir.format_expr(s.extent)}"
        deps = _dependencies(s.extent, loop_vars)
        if deps["thread"] or deps["data"]:
            return Loop("refused", why=f"cannot prove: {what} is not a constant")
        if not deps["run-time"]:
            return Loop("constant")
        if deps["loop"]:
            return Loop("refused", why=f"cannot prove: {what} depends on loop variables "
                                       f"and on run-time values at once")
        key = expr_key(s.extent)
        if key in runtime_keys:
            return Loop("refused", why=f"cannot prove: run-time loop {s.var.name} is "
                                       f"nested in a loop of the same trip count "
                                       f"{kir.format_expr(s.extent)}")
        return Loop("run-time", key)

    def _classify_condition(self, s, loop_vars):
        if not (shared_accesses(s) or any(self._relevant(x)
                                            for x in kir.walk(s.then_body + s.else_body))):
            return Condition("skipped")
        deps = _dependencies(s.cond, loop_vars, self._counters)
        if not (deps["run-time"] or deps["data"]):
            return Condition("per thread")
        if deps["run-time"] and not (deps["thread"] or deps["data"] or deps["loop"]):
            return Condition("block-uniform", expr_key(s.cond))
        inside = list(kir.walk(s.then_body + s.else_body))
        if not any(map(_synchronizes, inside)):
            return Condition("either way")
        if not (deps["thread"] or deps["data"]):
            other = next((x for x in inside if _synchronizes(x)
                          and not kir.effects.only_adds_order(x.effects())), None)
            if other is None:
                return Condition("iteration-uniform", expr_key(s.cond))
            return Condition("refused", why=f"cannot prove: condition "
                             f"{kir.format_expr(s.cond)} changes from iteration to "
                             f"iteration, and {kir.format_stmt(other)} runs under it (only "
                             "barriers, proxy fences and TMA stores may: the protocol's "
                             "state must not depend on it)")
        return Condition("refused", why=f"cannot prove: condition {kir.format_expr(s.cond)} "
                                        f"is neither a function of the thread index and "
                                        f"the loop variables nor uniform over the block, "
                                        f"and synchronization runs under it")

    def _check_own_buffers(self, body):
        """(b) of the module header: the shared buffers an iteration-uniform if accesses
        are its then-branch's alone."""
        self.own = {}          # id(if) -> the shared buffers only its then-branch accesses
        ifs = [s for s in kir.walk(body) if isinstance(s, kir.IfThenElse)
               and id(s) in self._conds and self.condition(s).kind == "iteration-uniform"]
        for s in ifs:
            then = {id(x) for x in kir.walk(s.then_body)}
            mine = {b for x in kir.walk(s.then_body) for b in _shared_buffers(x)}
            outside = next(((x, b) for x in kir.walk(body) if id(x) not in then
                            for b in _shared_buffers(x) if b in mine), None)
            if outside is None:
                self.own[id(s)] = mine
                continue
            x, buffer = outside
            self._refuse(s, f"cannot prove: condition {kir.format_expr(s.cond)} changes "
                            f"from iteration to iteration and barriers run under it, but "
                            f"its shared buffer {buffer.name} is also accessed outside it "
                            f"({kir.format_stmt(x)})")

    def _refuse(self, s, why):
        key = self.condition(s).key
        self._conds[id(s)] = Condition("refused", why=why)
        self.uniform[key][1].remove(s)
        if not self.uniform[key][1]:
            del self.uniform[key]

    def reentries(self):
        """(c) of the module header, for each iteration-uniform if: (the last statement of
        its then-branch accessing its own buffers, the first, a buffer) where no barrier
        at the top level of the branch comes before that first one or after that last
        one: two executions of the branch would not be ordered."""
        found = []
        for key, (_, ifs) in self.uniform.items():
            for s in ifs:
                if self.condition(s).kind != "iteration-uniform" or not self.own.get(id(s)):
                    continue
                mine = self.own[id(s)]
                touching = [i for i, x in enumerate(s.then_body) if any(
                    _shared_buffers(y) & mine or _bulk_wait(y) for y in kir.walk([x]))]
                barriers = [i for i, x in enumerate(s.then_body) if _barrier(x)]
                if any(i < touching[0] or i > touching[-1] for i in barriers):
                    continue
                stmts = [y for x in s.then_body for y in kir.walk([x])
                         if _shared_buffers(y) & mine]
                buffer = next(b for b in _shared_buffers(stmts[0]) if b in mine)
                found.append((stmts[-1], stmts[0], buffer))
        return found

    def _relevant(self, stmt):
        """Can `stmt` take part in the shared-memory protocol?"""
        return (_synchronizes(stmt) or bool(shared_accesses(stmt))
                or id(stmt) in self._register_accesses)


def _dependencies(expr, loop_vars, counters=frozenset()):
    """What `expr` depends on: "thread" (threadIdx), "data" (loads, shuffles), "loop"
    (a variable of an enclosing loop, or a load of one of `counters`: iteration counters,
    the same in every thread of an iteration), "run-time" (other variables, blockIdx,
    gridDim)."""
    deps = dict.fromkeys(("thread", "data", "loop", "run-time"), False)
    for e in kir.walk_expr(expr):
        if isinstance(e, kir.Load) and e.buffer in counters:
            deps["loop"] = deps["run-time"] = True
        elif isinstance(e, (kir.Load, kir.ShuffleXor)):
            deps["data"] = True
        elif isinstance(e, kir.Special):
            if e.kind is kir.SpecialKind.threadIdx:
                deps["thread"] = True
            elif e.kind is not kir.SpecialKind.blockDim:
                deps["run-time"] = True
        elif isinstance(e, kir.Var):
            deps["loop" if e.name in loop_vars else "run-time"] = True
    return deps


def iteration_counters(body):
    """The registers that count a loop's iterations the same way in every thread: a
    one-element local buffer c whose only writes are `c[0] = <constant>` right before a
    loop (in the same statement list) and, as the last statement of that loop's body,
    `c[0] = <an expression of c[0] and run-time values>` (a persistent kernel's K tile,
    counted instead of computed as w % Kt: no division on the consumers' path). Every
    thread that runs an iteration ran the same writes, so c[0] is uniform over the
    threads in each iteration, as the loop variable is; conditions on it are
    iteration-uniform where barriers run under them."""
    writes, loop_vars = {}, set()
    for s in kir.walk(body):
        for a in kir.effects.register_writes(s.effects()):
            writes.setdefault(a.buffer, []).append(s)
        if isinstance(s, kir.ForLoop):
            loop_vars.add(s.var.key)
    found = set()

    def counts(before, loop):
        last = loop.body[-1] if isinstance(loop, kir.ForLoop) and loop.body else None
        init, step = before.element_store(), last and last.element_store()
        if init is None or step is None:
            return False
        c = init[0]
        return (c.memory is kir.Memory.local and isinstance(c.size, kir.Const)
                and c.size.value == 1 and step[0] is c
                and {id(x) for x in writes.get(c, ())} == {id(before), id(last)}
                and isinstance(init[2], kir.Const)
                and _of_itself(step[2], c, loop_vars)
                and all(_is_zero(i) for i in (init[1], step[1])))

    def visit(stmts):
        for before, loop in zip(stmts, stmts[1:]):
            if counts(before, loop):
                found.add(before.element_store()[0])
        for s in stmts:
            for b in s.bodies():
                visit(b)
    visit(body)
    return frozenset(found)


def _is_zero(e):
    return isinstance(e, kir.Const) and e.value == 0


def _of_itself(value, c, loop_vars):
    """Is `value` a function of c[0], constants and run-time values only (no thread
    index, other data or loop variable)?"""
    for e in kir.walk_expr(value):
        if isinstance(e, kir.Load):
            if e.buffer is not c or not _is_zero(e.index):
                return False
        elif isinstance(e, kir.ShuffleXor) or (isinstance(e, kir.Var)
                                                and e.key in loop_vars) or (
                isinstance(e, kir.Special) and e.kind is kir.SpecialKind.threadIdx):
            return False
    return True


def _register_accesses_before_wgmmas(body):
    """ids of the statements reading or writing registers an asynchronous instruction
    uses (a wgmma's accumulator or register A: effects.async_register_uses) that such an
    instruction can follow in program order: one later in the text, or sharing a loop
    with it (the wgmma-fence rule counts them)."""
    order, loops_of = [], {}

    def visit(stmts, loops):
        for s in stmts:
            order.append(s)
            loops_of[id(s)] = loops
            inner = loops + ((id(s),) if isinstance(s, kir.ForLoop) else ())
            for b in s.bodies():
                visit(b, inner)
    visit(body, ())
    users = [(i, s, {a.buffer for a in kir.effects.async_register_uses(s.effects())})
             for i, s in enumerate(order)]
    users = [(i, s, used) for i, s, used in users if used]
    found = set()
    for i, s in enumerate(order):
        written = set(register_accesses(s))
        if not written:
            continue
        for j, w, used in users:
            if written & used and (j > i or set(loops_of[id(s)]) & set(loops_of[id(w)])):
                found.add(id(s))
                break
    return found
