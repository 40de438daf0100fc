"""The block scheduler: every block of a launch is a coroutine, resumed in launch order.

  * Blocks are generators run by `schedule` in launch order (x fastest). A block that must
    wait (SemWait on a grid semaphore; every role of a role branch blocked, roles.py)
    yields a `Wait`; a block may also yield None (a switch point: it can go on). The
    scheduler resumes the earliest block that can go on; if every remaining block waits,
    that is a "deadlock" hazard (naming the semaphore buffer, or what each role waits
    on). So a split-K turnstile where split z waits for z and releases z + 1 runs
    whatever the order of blockIdx.z in the launch.

It knows nothing of kernels (the tests drive it with plain generators); it sits under the
rooms because cross_cta's SemWait yields a Wait, and machine.py reports the deadlocks.
"""


class Wait:
    """What a block coroutine yields when it cannot go on (e.g. a semaphore wait): it is
    resumed once `ready()` is true. `stmt` is the waiting statement, `what` names what it
    waits on (a semaphore or mbarrier buffer) for a deadlock report, `why` (a callable,
    optional) the state it waits in, as `describe()` gives it."""

    def __init__(self, stmt, ready, what="", why=None):
        self.stmt = stmt
        self.ready = ready
        self.what = what
        self.why = why

    def describe(self):
        return self.why() if self.why is not None else f"waits on {self.what}"


def schedule(coroutines, done=None, latest=False):
    """Run (block, generator) pairs, given in launch order, to completion: always resume
    the earliest block that is not waiting (or whose Wait is ready); with `latest`, the
    latest such block (a later block runs ahead of earlier ones, as it may where all are
    resident at once). With no waits this is block after block in launch order (reversed
    with `latest`). Returns [(block, Wait)] of the blocks left waiting forever when every
    remaining block waits (a deadlock), else []. `done()`, when given, is called as each
    block finishes (a progress bar)."""
    live = [[block, gen, None] for block, gen in coroutines]
    while live:
        order = range(len(live) - 1, -1, -1) if latest else range(len(live))
        for i in order:
            entry = live[i]
            wait = entry[2]
            if wait is not None and not wait.ready():
                continue
            try:
                entry[2] = next(entry[1])
            except StopIteration:
                del live[i]
                if done is not None:
                    done()
            break
        else:
            return [(block, wait) for block, _, wait in live]
    return []
