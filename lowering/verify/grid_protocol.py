"""Static proof of what orders global memory between the blocks of a grid: the semaphores,
fences and barriers of a cross-CTA protocol (the split-K grid reductions of
lowering.passes.grid_reductions: the serial turnstile, the parallel reduction's arrival
counters), for every split factor and every grid size; or the findings that say what is
missing (lowering.errors.Hazard, with the interpreter's kinds).

Which kernels: those with a grid protocol, i.e. a global workspace or a statement that
orders global memory between blocks (a fence, a semaphore wait or release: effects with
gpu scope: a fence, a semaphore wait, release or arrival). What it proves about them:
  * separation: two blocks of different tiles never touch the same element of a
    workspace, and a semaphore's cell belongs to one tile (a tile: the blocks that differ
    only in blockIdx.z, the turn; without semaphores every block is its own tile), for
    every grid: the index's blockIdx terms nest as mixed-radix digits above the range of
    the rest, taken over the threads and iterations that compute it
    (lowering.indexing.separation);
  * deadlock: every semaphore wait is satisfied in every interleaving of a tile's blocks,
    only by a release of a block launched before it (so blocks dispatched in launch
    order make progress whatever number of them is resident); in a kernel marked
    co_resident (the launcher refuses a grid the device cannot hold at once: codegen.launch)
    by any block's;
  * workspace: a zeroed semaphore workspace is zero again once every block has finished
    (the executor zeroes it once and keeps it across launches); a zeroed data workspace
    too: each write of it other than a store of zeros (the atomic grid reduction's adds)
    is undone by a store of zeros at the same index, loops and threads, in some block;
  * cross-cta: conflicting accesses (at least one a write) of two blocks of one tile to a
    workspace or an output are ordered by happens-before: the earlier block's access,
    fenced by its thread (__threadfence) and handed by a barrier to the releasing thread
    (or made by the releasing thread itself, whose release fences), is published by a
    SemRelease or a SemArrive; a SemWait that can only be satisfied by that release
    acquires it for the waiting thread, a barrier after the wait for the threads that pass
    it; what a block acquired it publishes again with its own release. An arrival (a
    release atomic add) joins the release sequence of the cell's last store, so a wait
    that reads the sum of several arrivals acquires every one of them; a store starts a
    new sequence. Atomic adds (kir.AtomicAdd) of two blocks to one element do not
    conflict; an atomic add and a plain access do.

How: each block of a tile is walked in program order for each split factor g (gridDim.z
and the scalar that sets it) and each of its g values of blockIdx.z; block-uniform
conditions are decided from those two, thread conditions give the executing threads.
Loops without protocol statements are skipped (they order nothing here) and their
accesses, in constant-extent loops, are one region. The semaphore operations of the
tile's blocks are then explored in every interleaving, and the publications computed
over the matched release-acquire pairs. Every split factor: a condition or a semaphore
value relates blockIdx.z to constants and to gridDim.z, so the blocks farther than the
largest such constant C from both ends of the turn all behave alike, as blockIdx.z + c;
factors 1 to 2C + 4 contain every arrangement of those behaviours, and a longer turn only
repeats its middle.

Refused as cannot-prove: a semaphore operation inside a loop, under a condition neither
block-uniform in the turn nor a function of the thread, or in a cell that depends on the
turn; an index whose blocks this cannot separate. Assumed: sizes are at least 1 (a zero
size launches nothing); an output element belongs to one tile by construction of the loop
nest (blocks of different tiles are not compared on outputs; the interpreter checks
them); the caller's outputs do not overlap each other or the workspaces. Not covered: TMA
stores' global writes (their statements declare no global access).

It sits beside the in-CTA verifiers (lowering.verify.hazards, async_protocol) and below the
pass that runs it on every kernel (lowering.passes.verify_hazards).
"""

import itertools
from dataclasses import dataclass, fields, replace

import numpy as np

from .. import kir
from ..indexing import separation
from .grid_turn import Findings, Refused as _Refused, Turn, point as _point, subset as _subset

_TURN = "z"
_TURN_VAR = f"block.{_TURN}"      # the turn as a loop of the rest, a tile's blocks folded in
_AXES = separation.AXES
_LARGEST_CONSTANT = 6      # split factors up to 16 blocks a turn


def has_grid_protocol(kernel):
    """Does the kernel order global memory between blocks (a workspace, a gpu-scope
    fence, a semaphore)?"""
    if kernel.workspaces:
        return True
    for s in kir.walk(kernel.body):
        order = s.effects().order
        if order is not None and order.scope == "gpu":
            return True
    return False


def check_grid_protocol(kernel):
    """The findings (lowering.errors.Hazard) of the cross-CTA proof; [] when proved."""
    if not has_grid_protocol(kernel):
        return []
    return _Proof(kernel).findings()


# ---------------------------------------------------------------------------------------
# One block, one case: its events in program order
# ---------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Event:
    kind: str                 # "access", "fence", "barrier", "wait", "release", "arrive"
    stmt: object
    threads: np.ndarray       # bool per thread: who executes it (an access: who may)
    buffer: object = None
    index: object = None      # the element index (an access), the cell (wait, release)
    write: bool = False
    value: int = None         # wait, release: the semaphore value
    loops: tuple = ()         # an access in a region: ((var, extent), ...) around it
    nbytes: int = 0
    atomic: bool = False      # an atomic add: adds of several blocks do not conflict
    executes: object = None   # an access in a region under conditions on its loops: bool
                              # per (thread, iteration), where those conditions decide it


def _is_sem_op(effects):
    """Is it a semaphore wait or release between blocks (gpu scope)?"""
    order = effects.order
    return order is not None and order.scope == "gpu" and order.kind in ("acquire", "release")


def _bind(expr, names):
    """`expr` with the thread indices, blockDim, blockIdx.z and gridDim.z as variables of
    `names` (the others stay: evaluating them fails, so a condition on them is undecided)."""
    if isinstance(expr, kir.Special):
        key = (expr.kind, expr.axis)
        return kir.Var(names[key], expr.dtype) if key in names else expr
    if not expr.children():
        return expr
    changes = {f.name: _bind(getattr(expr, f.name), names) for f in fields(expr)
               if isinstance(getattr(expr, f.name), kir.ScalarExpr)}
    return replace(expr, **changes)


class _Threads:
    """The block's threads, by linear id, and the environment that evaluates thread- and
    turn-dependent expressions for all of them at once."""

    def __init__(self, kernel):
        dims = []
        for e in kernel.launch.block:
            try:
                dims.append(int(kir.evaluate_scalar(e, {})))
            except (KeyError, TypeError):
                raise _Refused(None, "cannot prove: the block extent is not a constant")
        dims += [1] * (3 - len(dims))
        self.dims, self.count = dims, dims[0] * dims[1] * dims[2]
        t = np.arange(self.count)
        self.tid = {"x": t % dims[0], "y": (t // dims[0]) % dims[1],
                    "z": t // (dims[0] * dims[1])}
        S = kir.SpecialKind
        self.names = {(S.threadIdx, a): f"%tid.{a}" for a in _AXES}
        self.names.update({(S.blockIdx, _TURN): "%ctaid.z", (S.gridDim, _TURN): "%nctaid.z"})
        self.consts = {f"%ntid.{a}": d for a, d in zip(_AXES, dims)}
        self.names.update({(S.blockDim, a): f"%ntid.{a}" for a in _AXES})

    def env(self, z, g, grid_param):
        env = {f"%tid.{a}": self.tid[a] for a in _AXES}
        env.update(self.consts)
        env.update({"%ctaid.z": z, "%nctaid.z": g})
        if grid_param is not None:
            env[grid_param] = g
        return env


def _values(expr, names, env):
    """expr's value per thread (an array or a scalar), or None where it is undecided (it
    reads data, another block index, a size or a loop variable)."""
    try:
        return kir.evaluate_lanes(_bind(expr, names), env)
    except (KeyError, TypeError):
        return None


class _BlockWalk:
    """The events of one block (blockIdx.z = z) when gridDim.z = g."""

    def __init__(self, kernel, threads, z, g, grid_param, relevant):
        self.threads, self.relevant = threads, relevant
        self.env = threads.env(z, g, grid_param)
        self.events = []            # in program order; a loop's accesses are one region
        self.walk(kernel.body, np.ones(threads.count, bool), definite=True, loops=(),
                  guards=())

    def value(self, expr, stmt, what):
        v = _values(expr, self.threads.names, self.env)
        if v is None or np.ndim(v) != 0:
            raise _Refused(stmt, f"cannot prove: {what} {kir.format_expr(expr)} is not "
                                 "decided by blockIdx.z and gridDim.z")
        return int(v)

    def walk(self, stmts, mask, definite, loops, guards):
        for s in stmts:
            if not mask.any() or id(s) not in self.relevant:
                continue
            if isinstance(s, kir.ForLoop):
                self.loop(s, mask, definite, loops, guards)
            elif isinstance(s, kir.IfThenElse):
                self.branch(s, mask, definite, loops, guards)
            else:
                self.statement(s, mask, definite, loops, guards)

    def loop(self, s, mask, definite, loops, guards):
        """Its accesses, one region in program order (iterated over `loops` where every
        extent is known); the fences and barriers inside it order nothing here."""
        extent = _values(s.extent, self.threads.names, self.env)
        known = extent is not None and np.ndim(extent) == 0
        first = len(self.events)
        inner = loops + ((s.var, int(extent)),) if known else loops
        self.walk(s.body, mask, definite and known and extent > 0, inner, guards)
        region = [e for e in self.events[first:] if e.kind == "access"
                  and not (known and extent == 0)]          # a loop run no time: nothing
        for e in region:
            if not known:
                e.loops = None                  # iterations not enumerable
        self.events[first:] = region

    def branch(self, s, mask, definite, loops, guards):
        v = _values(s.cond, self.threads.names, self.env)
        if v is None:       # undecided here; on the loops' variables, decided per iteration
            self.walk(s.then_body, mask, False, loops, guards + ((s.cond, True),))
            self.walk(s.else_body, mask, False, loops, guards + ((s.cond, False),))
            return
        taken = np.broadcast_to(np.asarray(v, bool), mask.shape)
        self.walk(s.then_body, mask & taken, definite, loops, guards)
        self.walk(s.else_body, mask & ~taken, definite, loops, guards)

    def executes(self, guards, loops):
        """bool per (thread, iteration of `loops`): where the conditions `guards` (cond,
        taken) hold, over those of their conjuncts that the thread, the turn and the loop
        variables decide (the others may hold: a superset of the iterations that run);
        None where none decides anything."""
        n = len(loops)
        env = dict(self.env)
        env.update({f"%tid.{a}": self.threads.tid[a].reshape((-1,) + (1,) * n)
                    for a in _AXES})
        for i, (var, extent) in enumerate(loops):
            axes = [1] * (n + 1)
            axes[i + 1] = extent
            env[var.name] = np.arange(extent).reshape(axes)
        runs, decided = np.ones((self.threads.count,) + tuple(e for _, e in loops), bool), False
        for cond, taken in guards:
            for part in (_conjuncts(cond) if taken else [cond]):
                v = _values(part, self.threads.names, env)
                if v is not None:
                    runs, decided = runs & (np.asarray(v, bool) == taken), True
        return runs if decided else None

    def add(self, kind, s, mask, **kw):
        self.events.append(_Event(kind, s, mask.copy(), **kw))

    def statement(self, s, mask, definite, loops, guards):
        effects = s.effects()
        for buffer, index, nbytes, write, atomic in _global_accesses(s, effects):
            self.add("access", s, mask, buffer=buffer, index=index, write=write,
                     loops=loops, nbytes=nbytes, atomic=atomic,
                     executes=self.executes(guards, loops) if guards else None)
        order = effects.order
        if _is_sem_op(effects):
            if not definite or loops:
                raise _Refused(s, "cannot prove: a semaphore operation inside a loop or "
                                  "under a condition not decided by the turn and the thread")
            (sem,) = [a for a in effects.accesses if a.via == "semaphore"]
            kind = "wait" if order.kind == "acquire" else "arrive" if order.adds \
                else "release"
            self.add(kind, s, mask, buffer=sem.buffer, index=sem.index,
                     value=self.value(order.value, s, "the semaphore value"))
        elif order is not None and order.kind == "fence" and order.scope == "gpu":
            if definite:
                self.add("fence", s, mask)
        elif order is not None and order.kind == "barrier":
            if definite and (order.count is None or order.count == mask.sum()):
                self.add("barrier", s, mask)


def _conjuncts(cond):
    """The terms of a conjunction (a && b && ...)."""
    if isinstance(cond, kir.BinOp) and cond.op == "and":
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _global_accesses(stmt, effects):
    """(buffer, index, bytes, write, atomic) of the global memory `stmt` touches itself:
    the loads in its expressions, then its instruction's own accesses (semaphores
    apart)."""
    out = []
    for e in kir.expressions(stmt):
        for x in kir.walk_expr(e):
            if isinstance(x, kir.Load) and x.buffer.memory is kir.Memory.global_:
                out.append((x.buffer, x.index, x.width * x.buffer.dtype.itemsize, False,
                            False))
    out += [(a.buffer, a.index, a.nbytes, a.write, a.via == "atomic")
            for a in effects.accesses
            if a.memory is kir.Memory.global_ and a.via != "semaphore"]
    return out


# ---------------------------------------------------------------------------------------
# Separation: which blocks can never touch the same element (lowering.indexing.separation)
# ---------------------------------------------------------------------------------------


class _Separation:
    """Which block axes keep two accesses' elements apart, for every grid whose split
    factor (gridDim.z, and the scalar `param` that sets it) is `g`."""

    def __init__(self, kernel, threads, g, param):
        fixed = {"%nctaid.z": g} | ({param: g} if param is not None else {})
        self.threads, self.grid = threads, separation.Grid(kernel, fixed)
        self.g, self.fixed = g, fixed
        self.spans, self.atoms = {}, {}

    def span(self, event, mask, fold_turn=False):
        """The event's Span; with `fold_turn`, blockIdx.z counted in the rest (over its
        g values) instead of as a block axis: the span a tile's blocks reach together."""
        key = (id(event.stmt), id(event.index), fold_turn)
        if key not in self.spans:
            self.spans[key] = self._span(event, mask, fold_turn)
        return self.spans[key]

    def _span(self, event, mask, fold_turn):
        linear = separation.linear_in_blocks(event.index, inside=_TURN if fold_turn else "")
        if linear is None or event.loops is None:
            return None
        coeffs, rest, atoms, loops = linear.coeffs, linear.rest, linear.atoms, event.loops
        # (the turn may also sit inside an atom of the rest, such as a clamp: min(z L + i, E))
        if fold_turn and (_TURN in coeffs or any(_mentions_turn(x, None)
                                                 for x in atoms.values())):
            coeffs = {a: c for a, c in coeffs.items() if a != _TURN}
            turn = kir.Var(_TURN_VAR, event.index.dtype)
            rest = separation.plus(rest, separation.times({(turn.name,): 1},
                                                          linear.coeffs.get(_TURN, {})))
            atoms = {**atoms, turn.name: turn}
            loops = loops + ((turn, self.g),)
        values = self._rest_values(rest, atoms, mask, loops)
        if values is None:
            return None
        self.atoms.update(linear.atoms)
        width = max(1, event.nbytes // event.buffer.dtype.itemsize)
        return separation.Span(coeffs, int(values.min()), int(values.max()) + width - 1)

    def _rest_values(self, rest, atoms, mask, loops):
        n = len(loops)
        shape = (int(mask.sum()),) + (1,) * n
        env = {f"%tid.{a}": self.threads.tid[a][mask].reshape(shape) for a in _AXES}
        env.update(self.threads.consts)
        env.update(self.fixed)
        for i, (var, extent) in enumerate(loops):
            axes = [1] * (n + 1)
            axes[i + 1] = extent
            env[var.name] = np.arange(extent).reshape(axes)
            if var.name == _TURN_VAR:              # the turn folded in: blockIdx.z too
                env["%ctaid.z"] = env[var.name]
        total = np.zeros((1,) * (n + 1), np.int64)
        for m, c in rest.items():
            term = np.int64(c)
            for a in m:
                v = _values(atoms[a], self.threads.names, env)
                if v is None:
                    return None
                term = term * np.asarray(v, np.int64)
            total = total + term
        return total

    def axes(self, a, b):
        """The block axes that separate two accesses (their spans), or ()."""
        return self.grid.separated(a, b, self.atoms)


# ---------------------------------------------------------------------------------------
# The proof: every split factor, every block of a tile
# ---------------------------------------------------------------------------------------


def _mentions_turn(expr, grid_param):
    """Does expr read blockIdx.z, gridDim.z or the scalar that sets it?"""
    for x in kir.walk_expr(expr):
        if isinstance(x, kir.Special) and x.axis == _TURN and \
                x.kind in (kir.SpecialKind.blockIdx, kir.SpecialKind.gridDim):
            return True
        if isinstance(x, kir.Var) and x.name == grid_param:
            return True
    return False


def _orders_under(stmt):
    """Is there a semaphore operation, a gpu fence or a barrier under `stmt`? (A condition
    over none decides which elements a block touches, not when: the proof of each factor
    walks it like any condition, and it does not change the turn's protocol.)"""
    for s in kir.walk([stmt]):
        order = s.effects().order
        if order is not None and (order.scope == "gpu" or order.kind == "barrier"):
            return True
    return False


class _Proof(Findings):
    """The proof of one kernel: what it has (survey), the split factors to walk, the
    separation of tiles, then each factor's turn; findings collected in `out`."""

    def __init__(self, kernel):
        super().__init__()
        self.kernel = kernel

    # -- what the kernel has ----------------------------------------------------------
    def survey(self):
        k = self.kernel
        self.workspaces = {id(w.buffer): w for w in k.workspaces}
        self.written, self.sems, self.relevant = set(), {}, set()
        for s in kir.walk(k.body):
            effects = s.effects()
            if _is_sem_op(effects):
                (sem,) = [a for a in effects.accesses if a.via == "semaphore"]
                self.sems.setdefault(id(sem.buffer), set()).add(kir.format_expr(sem.index))
                w = self.workspaces.get(id(sem.buffer))
                if w is None or not w.zeroed:
                    raise _Refused(s, f"cannot prove: semaphore {sem.buffer.name} is not a "
                                      "workspace handed in zeroed")
            self.written |= {id(b) for b, _, _, write, _ in _global_accesses(s, effects)
                             if write}
        for sem, cells in self.sems.items():
            if len(cells) > 1:
                raise _Refused(None, "cannot prove: a semaphore used at two cells of a "
                                     f"tile ({', '.join(sorted(cells))})")
        self.relevant = self._relevant(k.body)

    def _relevant(self, stmts):
        """ids of the statements to walk: those with a protocol statement (a semaphore
        operation, a gpu fence, a tracked access) under them, and the leaves."""
        keep = set()

        def visit(s):
            inside = False
            for body in s.bodies():
                for c in body:
                    inside |= visit(c)
            if not s.bodies():
                keep.add(id(s))
                effects = s.effects()
                order = effects.order
                return bool(_is_sem_op(effects) or (order is not None and order.scope == "gpu")
                            or any(id(b) in self.written
                                   for b, _, _, _, _ in _global_accesses(s, effects)))
            if inside:
                keep.add(id(s))
            return inside

        for s in stmts:
            visit(s)
        return keep

    def split_factors(self):
        grid_z = self.kernel.launch.grid[2]
        if isinstance(grid_z, kir.Const):
            return None, [int(grid_z.value)]
        param = grid_z.name if isinstance(grid_z, kir.Var) else None
        largest = 0                           # the largest constant the turn meets
        for s in kir.walk(self.kernel.body):
            if id(s) not in self.relevant:
                continue                      # no protocol statement under it
            if _is_sem_op(s.effects()):
                e = s.effects().order.value
            elif isinstance(s, kir.IfThenElse) and _mentions_turn(s.cond, param) \
                    and _orders_under(s):
                e = s.cond
            else:
                continue
            largest = max([largest] + [abs(int(c.value)) for c in kir.walk_expr(e)
                                       if isinstance(c, kir.Const) and c.dtype.is_int])
        if largest > _LARGEST_CONSTANT:
            raise _Refused(None, f"cannot prove: the turn's conditions compare blockIdx.z "
                                 f"with {largest}, past the {_LARGEST_CONSTANT} this "
                                 "enumerates split factors for")
        return param, list(range(1, 2 * largest + 5))

    # -- the proof --------------------------------------------------------------------
    def prove(self):
        self.survey()
        threads = _Threads(self.kernel)
        param, factors = self.split_factors()
        self.param = param
        self.group_axes = [a for a, ext in zip(_AXES, self.kernel.launch.grid)
                           if not (isinstance(ext, kir.Const) and ext.value == 1)
                           and (a != _TURN or not self.sems)]
        for g in factors:
            blocks = [_BlockWalk(self.kernel, threads, z, g, param, self.relevant)
                      for z in range(g)]
            masks, first_event = {}, {}
            for w in blocks:
                for e in w.events:
                    key = (id(e.stmt), id(e.index))
                    masks[key] = masks.get(key, False) | e.threads
                    first_event.setdefault(key, e)
            self.separation = _Separation(self.kernel, threads, g, param)
            self.shape = lambda e, fold=False, first=first_event, masks=masks: \
                self.separation.span(first[(id(e.stmt), id(e.index))],
                                     masks[(id(e.stmt), id(e.index))], fold)
            self.separate(first_event.values())
            turn = Turn(self, g, blocks)
            turn.check()
            self.zeroed_again(g, blocks, param, turn.seen)

    def separate(self, events):
        """Blocks of different tiles: a semaphore cell and a workspace element each
        belong to one tile."""
        need = set(self.group_axes)
        fold = self.sems and _TURN not in need     # a tile's blocks reach one span
        events = [e for e in events if e.kind != "barrier" and e.kind != "fence"]
        cells = [e for e in events if e.kind in ("wait", "release", "arrive")]
        data = [e for e in events if e.kind == "access" and id(e.buffer) in self.workspaces
                and id(e.buffer) in self.written]
        for a in cells:
            shape = self.shape(a)
            if shape is not None and _TURN in shape.coeffs:
                self.report("cannot-prove", a.buffer.name, _point(a.stmt), _point(a.stmt),
                            "the semaphore's cell depends on blockIdx.z, the turn")
            elif not need <= set(self.separation.axes(shape, shape)):
                self.report("cannot-prove", a.buffer.name, _point(a.stmt), _point(a.stmt),
                            "cannot show that each tile has a cell of its own (blockIdx "
                            f"{', '.join(sorted(need))} do not separate its index)")
        for a, b in itertools.combinations_with_replacement(data, 2):
            if a.buffer is not b.buffer or not (a.write or b.write):
                continue
            if not need <= set(self.separation.axes(self.shape(a, fold),
                                                    self.shape(b, fold))):
                self.report("cannot-prove", a.buffer.name, _point(a.stmt), _point(b.stmt),
                            "cannot show that blocks of different tiles touch different "
                            f"elements (blockIdx {', '.join(sorted(need))} do not separate "
                            "the indices)")

    def zeroed_again(self, g, blocks, param, seen):
        """A zeroed data workspace (not a semaphore) is zero again after the launch: each
        write of it other than a store of zeros (an atomic add of partial sums) is undone
        by a store of zeros at the same index, in the same loops, by at least the same
        threads, after it (in program order in its own block; in another block, by
        threads that acquired the write: `seen`, Turn.publish's), the index not
        depending on the turn: so every element it wrote is stored zero last."""
        for w in self.kernel.workspaces:
            if not w.zeroed or id(w.buffer) in self.sems or id(w.buffer) not in self.written:
                continue
            writes = [(z, i, e) for z, walk in enumerate(blocks)
                      for i, e in enumerate(walk.events)
                      if e.kind == "access" and e.buffer is w.buffer and e.write]
            zeros = [(z, i, e) for z, i, e in writes if e.stmt.stores_zeros()]
            for z, i, e in writes:
                if e.stmt.stores_zeros():
                    continue
                text = kir.format_expr(e.index)
                undone = not _mentions_turn(e.index, param) and e.loops is not None and any(
                    kir.format_expr(r.index) == text and r.loops is not None
                    and [(v.name, n) for v, n in r.loops] == [(v.name, n) for v, n in e.loops]
                    and _subset(e.threads, r.threads)
                    and (ir > i if zr == z else _subset(e.threads, seen[(zr, ir)].get(
                        (z, i), np.zeros_like(e.threads))))
                    for zr, ir, r in zeros)
                if not undone:
                    self.report("workspace", w.buffer.name, _point(e.stmt), "END",
                                f"split factor {g}: zeroed workspace {w.buffer.name}: what "
                                f"block z={z} writes here is not stored back to zero (a "
                                "store of 0 at the same index, in the same loops, by the "
                                "same threads, after it) before the launch ends; the next "
                                "launch would start from it")

    def conflict(self, a, b):
        """May accesses a and b of two blocks of one tile touch the same element?"""
        if a.buffer is not b.buffer or not (a.write or b.write) or \
                id(a.buffer) not in self.written or (a.atomic and b.atomic):
            return False
        if self.apart(a, b):
            return False
        return _TURN not in self.separation.axes(self.shape(a), self.shape(b))

    def apart(self, a, b):
        """Are a and b (two blocks') the same store of an output at points (thread,
        iteration) that no two blocks share, under conditions on the iterations (the
        parallel grid reduction's: each CTA stores the elements it summed)? Its index
        does not read the turn, so a point names one element, a different point another
        (the loop nest gives each element of a tile one thread and iteration, as it gives
        each its tile)."""
        if a.stmt is not b.stmt or id(a.buffer) in self.workspaces or a.executes is None \
                or b.executes is None or a.executes.shape != b.executes.shape \
                or _mentions_turn(a.index, self.param):
            return False
        shape = (-1,) + (1,) * (a.executes.ndim - 1)
        return not (a.executes & a.threads.reshape(shape) & b.executes
                    & b.threads.reshape(shape)).any()
