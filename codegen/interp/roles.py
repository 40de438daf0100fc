"""Warp-specialized roles: role branches run as coroutines, interleaved inside the block.

  * An IfThenElse whose thread-dependent condition keeps every warp group (WARPGROUP = 128
    consecutive linear thread ids from a multiple of 128) wholly on one side is a *role
    branch* (execution._if asks `_role_branch`, in kernels with mbarriers, TMA loads or
    named barriers: ordering.needs_ordering; elsewhere no role could wait for another).
    Its then-branch's threads and its else-branch's threads become two roles:
    generators running their bodies, lockstep
    within each, interleaved by `_run_roles`. A role yields None at a switch point (it
    can go on: MbarrierArrive, MbarrierWait, NamedBarrier, TmaLoad offer one before they
    run) or a Wait when it blocks (mbarriers.py's waits, a bar.sync short of its count,
    a SemWait). Nested role branches run the same way inside their role.
  * Each role has its own loop variables, loop iterations, divergent-if stack and current
    statement: `_run_roles` restores a role's before resuming it and saves them when it
    yields (state = env, iters, divergent, stmt, in_roles). `in_roles` counts the role
    branches around the running code: where it is 0 (plain lockstep) a wait that cannot
    pass is a deadlock at once, since no other thread of the block can still act.
  * Interleaving (run_kernel's `interleaving`): "then-first" runs the then-role until it
    blocks, then the first role that can go on (then before else); "else-first" the same
    with else before then; an int seeds a random choice among the roles that can go on
    at every switch point and whenever a role blocks. Every switch point is also passed
    upward (a None yield), so an enclosing role branch or the block scheduler chooses
    too.
  * When every role blocks, the branch yields a Wait upward whose ready() is any role's
    and whose description names what each role waits on; the block scheduler runs other
    blocks, and reports a deadlock naming those waits when nothing can go on.

It sits under execution.py (whose _if calls `_run_roles` through the block) and over
scheduler.py (Wait); machine.py makes the Interleaving of a run.
"""

import random

import numpy as np

from codegen.interp.base import InterpError
from codegen.interp.scheduler import Wait
from fuserir.instructions import WARPGROUP

INTERLEAVINGS = ("then-first", "else-first")


class Interleaving:
    """How a run chooses among roles that can go on (see the module header)."""

    def __init__(self, how):
        if isinstance(how, bool) or not (how in INTERLEAVINGS or isinstance(how, int)):
            raise InterpError(f"interleaving {how!r} is not one of {list(INTERLEAVINGS)} "
                              f"or an int seed")
        self.how = how
        self.rng = random.Random(how) if isinstance(how, int) else None

    def order(self, roles):
        """roles (then, else) in priority order."""
        return roles[::-1] if self.how == "else-first" else roles

    def pick(self, runnable, current):
        if self.rng is not None:
            return runnable[self.rng.randrange(len(runnable))]
        return current if current in runnable else runnable[0]


class _Role:
    """One side of a role branch: its name, generator, saved state and latest yield."""

    def __init__(self, name, gen, state):
        self.name, self.gen, self.state, self.wait = name, gen, state, None

    def can_go_on(self):
        return self.wait is None or self.wait.ready()


class _Roles:
    """The mixin of _Block (machine.py) that runs role branches."""

    @staticmethod
    def _role_branch(act, c):
        """Whether condition values c (over act) keep each warp group on one side."""
        groups = act // WARPGROUP
        total = np.bincount(groups)
        taken = np.bincount(groups, weights=c, minlength=len(total))
        return not ((taken > 0) & (taken < total)).any()

    def _role_state(self):
        return self.env, self.iters, self.divergent, self.stmt, self.in_roles

    def _set_role_state(self, state):
        self.env, self.iters, self.divergent, self.stmt, self.in_roles = state

    def _run_roles(self, s, sides):
        """Run sides [(branch name, body, threads)] of role branch s as roles."""
        outer = self._role_state()
        roles = []
        for side, body, act in sides:
            if not body:
                continue
            coords = self.interp.coords
            name = (f"the {side}-branch of {s.label} (threads {coords(act[0])}.."
                    f"{coords(act[-1])})")
            state = (dict(self.env), self.iters, list(self.divergent), self.stmt,
                     self.in_roles + 1)
            roles.append(_Role(name, self.exec_list(body, act), state))
        policy = self.interp.interleaving
        roles = policy.order(roles)
        current = None
        while roles:
            runnable = [r for r in roles if r.can_go_on()]
            if not runnable:
                blocked = list(roles)
                yield Wait(blocked[0].wait.stmt,
                           lambda: any(r.can_go_on() for r in blocked),
                           what=blocked[0].wait.what,
                           why=lambda: "; ".join(f"{r.name}: {r.wait.describe()}"
                                                 for r in blocked))
                continue
            current = policy.pick(runnable, current)
            self._set_role_state(current.state)
            try:
                current.wait = next(current.gen)
            except StopIteration:
                roles.remove(current)
                current = None
                continue
            current.state = self._role_state()
            if current.wait is None:
                yield None                 # a switch point: let enclosing levels choose
        self._set_role_state(outer)
