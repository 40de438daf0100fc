"""Static proof of what orders shared memory between the CTAs of a thread-block cluster:
the cluster barriers around reads of a peer's shared memory (kir.ClusterBarrier,
kir.ClusterLoad; the cluster grid reduction of lowering.passes.grid_reductions), for every
cluster size; or the findings that say what is missing (lowering.errors.Hazard, with the
interpreter's kinds).

Which kernels: those with a cluster barrier or a cluster load. What it proves:
  * launch: the kernel is launched in clusters (kir.Kernel.cluster), of CTAs along z only
    (the shape the cluster reduction makes: 1 x 1 x gridDim.z);
  * barriers: every block of a cluster reaches the same cluster barriers in the same
    order (else a block waits at a barrier its peers never reach, or two blocks count
    different barriers as one: "deadlock"), each reached by one set of the block's
    threads, and the block's other threads touch none of the cluster's shared buffers
    (they exit without the barrier, which waits only for threads that have not exited);
  * epochs: an access's epoch is the number of cluster barriers its block passed before
    it, the same count in every block of the cluster. A plain store to a buffer that
    cluster loads read and a cluster load of it are ordered only by a barrier between
    them, so no store and load of one buffer may share an epoch, in any two blocks of
    the cluster, the same block included ("cluster");
  * lifetime: a block's shared memory ends when it exits, at its last epoch; every
    cluster load must be in an earlier one, so that a barrier its owner waits at before
    exiting follows the read ("cluster");
  * initialisation: a cluster load reads a buffer every block of the cluster stores to in
    an earlier epoch, outside any loop whose trip count is not known to be positive
    ("uninitialized-read").

How: each block of a cluster (blockIdx.z = 0 .. g - 1, cluster size g = gridDim.z) is
walked in program order for g = 1 .. fuserir.instructions.CLUSTER_MAX, its block-uniform
conditions decided from blockIdx.z and gridDim.z (lowering.verify.grid_protocol's
evaluation), the threads a statement runs for from threadIdx. Accesses are compared by
buffer, not by element: two accesses of one buffer in one epoch conflict whatever their
indices (stricter than needed; the cluster reduction has none). Refused as cannot-prove:
a cluster barrier inside a loop or under a condition neither decided by the turn nor a
function of the thread. Not covered: a cluster load's rank and index bounds (the
interpreter checks them), and the cluster's co-residency, which the hardware guarantees.

It sits beside grid_protocol (the global-memory protocol between the blocks of a grid)
and below the pass that runs it on every kernel (lowering.passes.verify_hazards).
"""

from dataclasses import dataclass

import numpy as np

from fuserir.instructions import CLUSTER_MAX

from .. import kir
from .grid_protocol import _Threads, _values
from .grid_turn import Findings, Refused, point


def _cluster_barrier(effects):
    order = effects.order
    return order is not None and order.kind == "barrier" and order.scope == "cluster"


def _cluster_read(effects):
    """The buffer a cluster load reads (any CTA's of the cluster), or None."""
    return next((a.buffer for a in effects.accesses if a.via == "cluster"), None)


def _cluster_statements(kernel):
    return [s for s in kir.walk(kernel.body)
            if _cluster_barrier(s.effects()) or _cluster_read(s.effects()) is not None]


def uses_clusters(kernel):
    """Does the kernel have a cluster barrier or a cluster load?"""
    return bool(_cluster_statements(kernel))


def check_cluster_protocol(kernel):
    """The findings (lowering.errors.Hazard) of the cluster proof; [] when proved."""
    if not uses_clusters(kernel):
        return []
    return _Proof(kernel).findings()


@dataclass(eq=False)
class _Event:
    kind: str                 # "barrier", "store", "load"
    stmt: object
    threads: np.ndarray       # bool per thread: who executes it (an access: who may)
    epoch: int
    buffer: object = None
    definite: bool = True     # it runs whenever the walk reaches it


class _BlockWalk:
    """The cluster events of one block (blockIdx.z = z) when gridDim.z = g."""

    def __init__(self, kernel, threads, z, g, param, buffers):
        self.threads, self.buffers = threads, buffers
        self.env = threads.env(z, g, param)
        self.events, self.epoch = [], 0
        self.walk(kernel.body, np.ones(threads.count, bool), definite=True, in_loop=None)

    def walk(self, stmts, mask, definite, in_loop):
        for s in stmts:
            if not mask.any():
                return
            if isinstance(s, kir.ForLoop):
                extent = _values(s.extent, self.threads.names, self.env)
                if extent is not None and np.ndim(extent) == 0 and int(extent) <= 0:
                    continue
                known = extent is not None and np.ndim(extent) == 0
                self.walk(s.body, mask, definite and known, in_loop or s)
            elif isinstance(s, kir.IfThenElse):
                v = _values(s.cond, self.threads.names, self.env)
                if v is None:
                    for body in (s.then_body, s.else_body):
                        barrier = next((x for x in kir.walk(body)
                                        if _cluster_barrier(x.effects())), None)
                        if barrier is not None:
                            raise Refused(barrier, "cannot prove: a cluster barrier under "
                                                   f"condition {kir.format_expr(s.cond)}, "
                                                   "not decided by blockIdx.z, gridDim.z "
                                                   "and the thread")
                        self.walk(body, mask, False, in_loop)
                    continue
                taken = np.broadcast_to(np.asarray(v, bool), mask.shape)
                self.walk(s.then_body, mask & taken, definite, in_loop)
                self.walk(s.else_body, mask & ~taken, definite, in_loop)
            else:
                self.statement(s, mask, definite, in_loop)

    def statement(self, s, mask, definite, in_loop):
        effects = s.effects()
        read = _cluster_read(effects)
        if _cluster_barrier(effects):
            if in_loop is not None:
                raise Refused(s, f"cannot prove: a cluster barrier inside loop "
                                 f"{in_loop.var.name}")
            self.epoch += 1
            self.events.append(_Event("barrier", s, mask.copy(), self.epoch))
        elif read is not None:
            self.events.append(_Event("load", s, mask.copy(), self.epoch, read, definite))
        for a in effects.accesses:
            if a.write and a.memory is kir.Memory.shared and a.buffer.name in self.buffers:
                self.events.append(_Event("store", s, mask.copy(), self.epoch, a.buffer,
                                          definite))


class _Proof(Findings):
    def __init__(self, kernel):
        super().__init__()
        self.kernel = kernel

    def prove(self):
        k = self.kernel
        if k.cluster is None:
            raise Refused(_cluster_statements(k)[0], "cannot prove: a cluster statement in "
                                                     "a kernel launched without clusters "
                                                     "(kir.Kernel.cluster)")
        grid_z = k.launch.grid[2]
        if not all(isinstance(c, kir.Const) and c.value == 1 for c in k.cluster[:2]) or \
                kir.format_expr(k.cluster[2]) != kir.format_expr(grid_z):
            raise Refused(None, "cannot prove: clusters other than the blocks along z "
                                f"(cluster {tuple(kir.format_expr(c) for c in k.cluster)}, "
                                f"grid.z {kir.format_expr(grid_z)})")
        param = grid_z.name if isinstance(grid_z, kir.Var) else None
        factors = [int(grid_z.value)] if isinstance(grid_z, kir.Const) else \
            range(1, CLUSTER_MAX + 1)
        buffers = {_cluster_read(s.effects()).name for s in _cluster_statements(k)
                   if _cluster_read(s.effects()) is not None}
        threads = _Threads(k)
        for g in factors:
            blocks = [_BlockWalk(k, threads, z, g, param, buffers) for z in range(g)]
            self.barriers(g, blocks)
            self.epochs(g, blocks)

    def barriers(self, g, blocks):
        first = [e.stmt for e in blocks[0].events if e.kind == "barrier"]
        for z, w in enumerate(blocks):
            mine = [e for e in w.events if e.kind == "barrier"]
            if [e.stmt for e in mine] != first:
                at = mine[0].stmt if mine else first[0]
                self.report("deadlock", "cluster barrier", point(at), point(at),
                            f"with {g} CTAs a cluster, block z={z} reaches cluster barriers "
                            f"{[e.stmt.label for e in mine]}, block z=0 "
                            f"{[s.label for s in first]}: every block of a cluster must "
                            "reach the same ones")
                return
            if not mine:
                continue
            takers = mine[0].threads
            for e in mine[1:]:
                if (e.threads != takers).any():
                    self.report("barrier-divergence", "cluster barrier",
                                point(mine[0].stmt), point(e.stmt),
                                f"block z={z}: {int(takers.sum())} threads reach the first "
                                f"cluster barrier, {int(e.threads.sum())} this one")
            for e in w.events:
                if e.kind != "barrier" and (e.threads & ~takers).any():
                    self.report("cluster", e.buffer.name, point(mine[0].stmt),
                                point(e.stmt),
                                f"block z={z}: threads that reach no cluster barrier access "
                                f"{e.buffer.name}, which the cluster's barriers order")

    def epochs(self, g, blocks):
        last = blocks[0].epoch                  # every block's (barriers checked above)
        accesses = [(z, e) for z, w in enumerate(blocks) for e in w.events
                    if e.kind != "barrier"]
        for z, load in accesses:
            if load.kind != "load":
                continue
            if load.epoch >= last:
                self.report("cluster", load.buffer.name, point(load.stmt), "the block's exit",
                            f"with {g} CTAs a cluster, a cluster load of block z={z} in "
                            f"epoch {load.epoch}, the last: no cluster barrier keeps the "
                            "read block's shared memory alive until it (a CTA may exit "
                            "while its peers read it)")
            for y, store in accesses:
                if store.kind == "store" and store.buffer.name == load.buffer.name and \
                        store.epoch == load.epoch:
                    self.report("cluster", load.buffer.name, point(store.stmt),
                                point(load.stmt),
                                f"with {g} CTAs a cluster, a store of block z={y} and a "
                                f"cluster load of block z={z} in the same epoch "
                                f"{load.epoch}: no cluster barrier orders them")
            for y, w in enumerate(blocks):
                if not any(e.kind == "store" and e.definite and e.epoch < load.epoch
                           and e.buffer.name == load.buffer.name for e in w.events):
                    self.report("uninitialized-read", load.buffer.name, point(load.stmt),
                                point(load.stmt),
                                f"with {g} CTAs a cluster, block z={z} reads "
                                f"{load.buffer.name} of its cluster's blocks, which block "
                                f"z={y} does not store to in an earlier epoch")
                    break
