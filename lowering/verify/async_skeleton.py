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
    """How an IfThenElse is walked: kind "skipped", "per thread", "block-uniform" (`key`:
    the outcome's identity), "either way" or "refused" (`why`)."""

    kind: str
    key: tuple = None
    why: str = None


class Skeleton:
    """The classification of every loop and if of `kernel` (see the module header):
    `loop(stmt)`, `condition(stmt)`; `trip_counts`: {key: (extent, [loops])} of the
    run-time loops; `uniform`: {key: (condition, [ifs])} of the block-uniform ifs."""

    def __init__(self, kernel):
        self._loops, self._conds = {}, {}
        self.trip_counts, self.uniform = {}, {}
        self._register_accesses = _register_accesses_before_wgmmas(kernel.body)
        self._visit(kernel.body, (), ())

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
                if how.kind == "block-uniform":
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
        deps = _dependencies(s.cond, loop_vars)
        if not (deps["run-time"] or deps["data"]):
            return Condition("per thread")
        if deps["run-time"] and not (deps["thread"] or deps["data"] or deps["loop"]):
            return Condition("block-uniform", expr_key(s.cond))
        if not any(map(_synchronizes, kir.walk(s.then_body + s.else_body))):
            return Condition("either way")
        return Condition("refused", why=f"cannot prove: condition {kir.format_expr(s.cond)} "
                                        f"is neither a function of the thread index and "
                                        f"the loop variables nor uniform over the block, "
                                        f"and synchronization runs under it")

    def _relevant(self, stmt):
        """Can `stmt` take part in the shared-memory protocol?"""
        return (_synchronizes(stmt) or bool(shared_accesses(stmt))
                or id(stmt) in self._register_accesses)


def _dependencies(expr, loop_vars):
    """What `expr` depends on: "thread" (threadIdx), "data" (loads, shuffles), "loop"
    (a variable of an enclosing loop), "run-time" (other variables, blockIdx, gridDim)."""
    deps = dict.fromkeys(("thread", "data", "loop", "run-time"), False)
    for e in kir.walk_expr(expr):
        if isinstance(e, (kir.Load, kir.ShuffleXor)):
            deps["data"] = True
        elif isinstance(e, kir.Special):
            if e.kind is kir.SpecialKind.threadIdx:
                deps["thread"] = True
            elif e.kind is not kir.SpecialKind.blockDim:
                deps["run-time"] = True
        elif isinstance(e, kir.Var):
            deps["loop" if e.name in loop_vars else "run-time"] = True
    return deps


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
