"""Thread-block clusters: the cluster barrier, reads of a peer CTA's shared memory, and
the checker of what orders them.

  * A kernel with kir.Kernel.cluster runs its blocks in clusters of that shape (the
    interpreter's blocks are coroutines, so a cluster's blocks run together as the
    scheduler interleaves them). A block's rank in its cluster is x + cx (y + cy z) over
    its coordinates within the cluster, as %cluster_ctarank.
  * ClusterBarrier: the executing threads' block arrives (its count of cluster barriers
    reached goes up by one) and waits (yields a Wait) until every block of the cluster
    has arrived as often or has finished (a finished block's threads have exited, and
    the barrier waits only for threads that have not). Then the block's cluster epoch is
    that count. Within the block it is a barrier of the executing threads: with every
    thread, as __syncthreads (an epoch of the race detector); with fewer (the others
    exit without it), as a named barrier's generation in the vector clocks. Not
    modelled: that the barrier also waits for the block's other threads to exit (a role
    that waits past it for what follows is a deadlock the static verifier reports,
    lowering.verify.async_order; here it would pass).
  * ClusterLoad: each active thread reads `src[src_index]` of the cluster's block `rank`
    (its own included), into dst[dst_index].
  * The checker, per shared buffer a cluster load reads, per block and element: the
    cluster epoch and the thread of its last write (a plain store of the block), and of
    the reads of it by a ClusterLoad (the latest epoch, its block and thread). A read of
    block P's element written at P's epoch w, by block B at B's epoch r, is ordered iff
    r > w (a cluster barrier between: P arrived after the write, B waited after it) or
    B is P and the thread is the writer (program order); a write at P's epoch w after a
    read at epoch r by another block or thread is ordered iff w > r. A block's exit at
    epoch x ends its shared memory: every read of it must have r < x (the reader
    arrived at a later barrier the block waited at before exiting), and a read of a
    block that has finished, or not started, is a hazard. Findings are "cluster"
    hazards naming the buffer, both statements, the blocks and threads, and why.

It sits beside cross_cta.py (the global-memory ordering between blocks) as a room of
_Block (machine.py); machine.py keeps the blocks by linear id, which the loads and the
barrier look their peers up in.
"""

import numpy as np

from codegen.errors import Hazard
from codegen.interp.base import _NONE, InterpError, _point
from codegen.interp.scheduler import Wait
from lowering import kir


class _ClusterShadow:
    """Per element of one shared buffer in one block: the cluster epoch and thread of its
    last write, and of its latest read by a ClusterLoad (with the reading block)."""

    def __init__(self, size):
        self.w_epoch = np.full(size, _NONE, np.int64)
        self.w_tid = np.full(size, _NONE, np.int64)
        self.w_stmt = [None]
        self.w_sid = np.zeros(size, np.int64)          # index into w_stmt
        self.r_epoch = np.full(size, _NONE, np.int64)
        self.r_block = np.full(size, _NONE, np.int64)
        self.r_tid = np.full(size, _NONE, np.int64)
        self.r_stmt = None


class _Cluster:
    """The mixin of _Block (machine.py) for thread-block clusters (see the module
    docstring). State: `cluster_epoch` (cluster barriers passed), `cluster_reached`
    (cluster barriers arrived at), `cluster_shadows` ({shared layout: _ClusterShadow}),
    `finished`."""

    def _init_cluster(self):
        self.cluster_epoch = 0
        self.cluster_reached = 0
        self.cluster_shadows = {}
        self.finished = False

    # -- where the cluster's blocks are ---------------------------------------------------

    def cluster_peers(self):
        """The linear ids of the blocks of this block's cluster, by rank."""
        cx, cy, cz = self.interp.cluster
        gx, gy, _ = self.interp.grid
        x0, y0, z0 = (v - v % c for v, c in zip(self.bidx, (cx, cy, cz)))
        return [(x0 + r % cx) + gx * ((y0 + (r // cx) % cy) + gy * (z0 + r // (cx * cy)))
                for r in range(cx * cy * cz)]

    # -- the barrier ----------------------------------------------------------------------

    def _cluster_barrier(self, s, act):
        if self.interp.cluster is None:
            raise InterpError(f"{_point(s)}: a cluster barrier in a kernel launched without "
                              "clusters (kir.Kernel.cluster)")
        self.cluster_reached += 1
        reached = self.cluster_reached
        blocks = self.interp.blocks
        peers = self.cluster_peers()
        if self.clock is not None and len(act) != self.T:
            self._release_clock(("cluster", reached), act)

        def ready():
            return all(lin in blocks and (blocks[lin].finished
                                          or blocks[lin].cluster_reached >= reached)
                       for lin in peers)

        def why():
            behind = [self.interp.block_coords(lin) for lin in peers
                      if lin not in blocks or not (blocks[lin].finished or
                                                   blocks[lin].cluster_reached >= reached)]
            return (f"cluster barrier {reached} ({s.label}) waits for blocks {behind} of "
                    f"its cluster")
        if not ready():
            yield Wait(s, ready, what="cluster barrier", why=why)
        self.cluster_epoch = reached
        if len(act) == self.T:
            self._barrier(s, act)
        elif self.clock is not None:
            self._acquire_released(("cluster", reached), act)

    # -- writes and reads of the cluster's shared memory ---------------------------------

    def _cluster_shadow(self, lay):
        shadow = self.cluster_shadows.get(lay)
        if shadow is None:
            shadow = self.cluster_shadows[lay] = _ClusterShadow(lay.size)
        return shadow

    def _cluster_write(self, lay, act, idx):
        """A plain store of this block to elements `idx` of shared buffer `lay`: recorded
        for the cluster's reads, and checked against them (write after read)."""
        if lay.name not in self.interp.cluster_read_buffers:
            return
        shadow = self._cluster_shadow(lay)
        late = (shadow.r_epoch[idx] == self.cluster_epoch) & (
            (shadow.r_block[idx] != self.lin) | (shadow.r_tid[idx] != act))
        if late.any():
            i = int(np.flatnonzero(late)[0])
            self._cluster_hazard(
                lay, shadow.r_stmt, self.stmt, int(idx[i]),
                (int(shadow.r_block[idx[i]]), int(shadow.r_tid[idx[i]])),
                (self.lin, int(act[i])),
                f"block {self.bidx} overwrites an element block "
                f"{self.interp.block_coords(shadow.r_block[idx[i]])} reads in the same "
                f"cluster epoch {self.cluster_epoch}: no cluster barrier orders the write "
                "after the read")
        shadow.w_stmt.append(self.stmt)
        shadow.w_sid[idx] = len(shadow.w_stmt) - 1
        shadow.w_epoch[idx] = self.cluster_epoch
        shadow.w_tid[idx] = act

    def _cluster_load(self, s, act):
        if self.interp.cluster is None:
            raise InterpError(f"{_point(s)}: a cluster load in a kernel launched without "
                              "clusters (kir.Kernel.cluster)")
        if s.width != 1:
            raise InterpError(f"{_point(s)}: a cluster load reads one element a thread")
        n = len(act)
        rank = self._index(self.ev(s.rank, act), n)
        idx = self._index(self.ev(s.src_index, act), n)
        lay = self._layout(s.src)
        peers = self.cluster_peers()
        values = np.zeros(n, dtype=lay.dtype)
        ok = (rank >= 0) & (rank < len(peers)) & (idx >= 0) & (idx < lay.size)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            self._cluster_hazard(lay, s, s, int(idx[i]), (self.lin, int(act[i])),
                                 (self.lin, int(act[i])),
                                 f"rank {int(rank[i])} of a cluster of {len(peers)} CTAs, "
                                 f"element {int(idx[i])} of {lay.name}[0, {lay.size}): out "
                                 "of bounds (skipped, read as 0)", kind="out-of-bounds")
        for r in np.unique(rank[ok]):
            sel = np.flatnonzero(ok & (rank == r))
            peer = self.interp.blocks.get(peers[int(r)])
            if peer is None or peer.finished:
                state = "has not started" if peer is None else "has exited"
                self._cluster_hazard(lay, s, s, int(idx[sel[0]]), (peers[int(r)], _NONE),
                                     (self.lin, int(act[sel[0]])),
                                     f"block {self.bidx} reads the shared memory of block "
                                     f"{self.interp.block_coords(peers[int(r)])}, which "
                                     f"{state}: no cluster barrier keeps it alive")
                continue
            self._cluster_read(s, lay, peer, act[sel], idx[sel])
            values[sel] = peer._view(lay)[idx[sel]]
        self._write(s.dst, act, self._index(self.ev(s.dst_index, act), n), values)

    def _cluster_read(self, s, lay, peer, tids, idx):
        """Block `peer`'s elements `idx` read by this block's threads `tids`: checked
        against the peer's writes (read after write) and recorded."""
        shadow = peer._cluster_shadow(lay)
        w = shadow.w_epoch[idx]
        own = (peer is self) & (shadow.w_tid[idx] == tids)
        bad = ~own & ((w == _NONE) | (w >= self.cluster_epoch))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            never = w[i] == _NONE
            writer = shadow.w_stmt[shadow.w_sid[idx[i]]] if not never else s
            self._cluster_hazard(
                lay, writer, s, int(idx[i]), (peer.lin, int(shadow.w_tid[idx[i]])),
                (self.lin, int(tids[i])),
                f"block {self.bidx} reads an element of block {peer.bidx} "
                + ("that no store of it wrote" if never else
                   f"written in cluster epoch {int(w[i])}, itself in epoch "
                   f"{self.cluster_epoch}: no cluster barrier orders the read after the "
                   "write"))
        later = self.cluster_epoch >= shadow.r_epoch[idx]
        shadow.r_epoch[idx[later]] = self.cluster_epoch
        shadow.r_block[idx[later]] = self.lin
        shadow.r_tid[idx[later]] = tids[later]
        shadow.r_stmt = s

    def finish(self):
        """The end of the block: its shared memory ends, so every cluster read of it
        must have been ordered before (an epoch before its last)."""
        self.finished = True
        for lay, shadow in self.cluster_shadows.items():
            late = (shadow.r_epoch >= self.cluster_epoch) & (shadow.r_block != self.lin)
            if late.any():
                i = int(np.flatnonzero(late)[0])
                self._cluster_hazard(
                    lay, shadow.r_stmt, "the end of the block", i,
                    (int(shadow.r_block[i]), int(shadow.r_tid[i])), (self.lin, _NONE),
                    f"block {self.bidx} exits in cluster epoch {self.cluster_epoch} while "
                    f"block {self.interp.block_coords(shadow.r_block[i])} reads its shared "
                    f"memory in epoch {int(shadow.r_epoch[i])}: no cluster barrier keeps "
                    "it alive until the read")
        super().finish()

    def _cluster_hazard(self, lay, first, second, element, a, b, detail, kind="cluster"):
        def where(x):
            return x if isinstance(x, str) else _point(x)
        blocks = tuple(self.interp.block_coords(lin) for lin, _ in (a, b))
        threads = tuple(None if t == _NONE else self.interp.coords(t) for _, t in (a, b))
        start = lay.offset + element * lay.itemsize
        self.interp.add((kind, where(first), where(second)), lambda: Hazard(
            kind=kind, buffer=lay.name, first=where(first), second=where(second),
            byte_range=(start, start + lay.itemsize), threads=threads, block=self.bidx,
            detail=detail, extra={"blocks": blocks}))

    # the statements this room runs (see execution.py)
    LEAF_STATEMENTS = {kir.ClusterLoad: _cluster_load}
    COMPOUND_STATEMENTS = {kir.ClusterBarrier: _cluster_barrier}
