"""Kernel IR for Hopper (sm_90): warp-group MMA (wgmma) on shared-memory matrix
descriptors or register A, TMA tensor copies through tensor maps, mbarriers, the async
proxy fence, stmatrix, named barriers and register reallocation.

Each statement has fixed PTX semantics (the instructions' names and fragment maps are
fuserir.instructions' WGMMA, STMATRIX; the rules are docs/hazards.md's "async proxy"), which
the CUDA emitter spells and the interpreter executes lane by lane. Expressions are
top-level fields (as in statements.py), so traversal, substitution and copies see them.

Addresses and layouts, shared by both backends:
  * Shared memory is one pool whose base is 1024-byte aligned in both backends; every
    swizzle is a function of the *pool* byte offset: fuserir.instructions.swizzle(offset,
    mode) maps the logical offset to the physical one (bits 4.. XOR bits 7..).
  * A TMA box lands in shared memory in box order, dimension 0 fastest: box element
    (b0, b1, b2) at logical byte dst + ((b2 * box1 + b1) * box0 + b0) * itemsize, then
    swizzled. Elements outside the tensor (any coordinate < 0 or >= its size) read as 0;
    a store writes only the elements inside.
  * A wgmma operand (A: 64 x 16, rows m; B: n x 16 as B^T, rows n; k = 0..15) is read
    from logical byte  start + f(row, k)  then swizzled, with T = span / 2 elements
    (span = SWIZZLE_BYTES[swizzle]):
      K-major  (trans False), none:     (r%8)*16 + (r//8)*SBO + (k%8)*2 + (k//8)*LBO
      K-major, swizzled:                (r%8)*span + (r//8)*SBO + k*2
      MN-major (trans True), none:      (r%8)*2 + (r//8)*SBO + (k%8)*16 + (k//8)*LBO
      MN-major, swizzled:               (r%T)*2 + (r//T)*LBO + (k%8)*span + (k//8)*SBO
    (LBO = layout.leading, SBO = layout.stride, in bytes; CUTLASS's canonical GMMA
    layouts, and the descriptor's fields of fuserir.instructions.MatrixDescriptor).
"""

from dataclasses import dataclass, field

import numpy as np

from fuserir.dtypes import DataType
from fuserir.instructions import (BULK_COPY_ALIGN, CLUSTER, MBARRIER, NAMED_BARRIER,
                                  PROXY_FENCE, SETMAXNREG, STMATRIX, SWIZZLE_BYTES, TMA, WGMMA)

from .effects import (Access, Effects, Group, GroupOp, MbarrierOp, Order, Phase,
                      joins_async_protocol)
from .expressions import BinOp, ScalarExpr, format_at, format_expr
from .statements import AccessInfo, Buffer, Stmt, TensorParam, sync_suffix
from .traversal import walk


__all__ = ["SWIZZLES", "TensorMap", "MatrixLayout", "WgmmaFence", "Wgmma", "WgmmaCommit",
           "WgmmaWait", "StMatrix", "SetMaxNReg", "NamedBarrier", "FenceProxyAsync",
           "MbarrierInit", "FenceMbarrierInit", "MbarrierArrive", "MbarrierWait", "TmaLoad",
           "TmaStore", "BulkLoad", "BulkCommit", "BulkWait", "ClusterBarrier", "ClusterLoad",
           "uses_async_protocol"]

SWIZZLES = ("none", "32B", "64B", "128B")


# ---------------------------------------------------------------------------------------
# Tensor maps: kernel parameters
# ---------------------------------------------------------------------------------------


@dataclass(eq=False)
class TensorMap:
    """A TMA tensor map (CUtensorMap, 128 opaque bytes) over the global tensor `tensor`,
    passed by value as a `const __grid_constant__` 64-byte-aligned kernel parameter (after
    the strides, before the workspaces). Its dimensions are listed innermost first:
    `sizes[d]` elements along dimension d, `strides[d - 1]` the element stride of
    dimension d >= 1 (dimension 0 is contiguous); both expressions over the kernel's
    size, stride and scalar parameters, evaluated at launch. `box`: the box extent per
    dimension (1..256 each). `swizzle`: how the box is laid out in shared memory (none, or
    the 32/64/128-byte XOR swizzle; a swizzled box's dimension 0 spans exactly the
    swizzle's bytes). Out-of-bounds elements of a load are zero-filled."""

    name: str
    tensor: TensorParam
    sizes: list
    strides: list
    box: tuple
    swizzle: str = "none"
    label: str = None
    user: bool = False

    @property
    def dtype(self):
        return self.tensor.buffer.dtype

    @property
    def rank(self):
        return len(self.box)

    @property
    def box_bytes(self):
        n = self.dtype.itemsize
        for b in self.box:
            n *= b
        return n

    @property
    def key(self):
        return ("tensor_map", self.name)


# ---------------------------------------------------------------------------------------
# Warp-group MMA
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MatrixLayout:
    """The layout fields of a wgmma shared-memory matrix descriptor: leading and stride
    byte offsets (multiples of 16 below 2^18) and the swizzle mode (see the module
    header for the addresses they give)."""

    leading: int
    stride: int
    swizzle: str = "none"

    def offsets(self, trans, rows):
        """Logical byte offsets [rows, k] of an operand's elements from its start (the
        module header's formulas: K-major, or MN-major with trans), before the swizzle."""
        r = np.arange(rows)[:, None]
        k = np.arange(WGMMA.k)[None, :]
        lead, stride = self.leading, self.stride
        span = SWIZZLE_BYTES[self.swizzle]
        if self.swizzle == "none":
            if trans:
                return (r % 8) * 2 + (r // 8) * stride + (k % 8) * 16 + (k // 8) * lead
            return (r % 8) * 16 + (r // 8) * stride + (k % 8) * 2 + (k // 8) * lead
        if trans:
            t = span // 2
            return (r % t) * 2 + (r // t) * lead + (k % 8) * span + (k // 8) * stride
        return (r % 8) * span + (r // 8) * stride + k * 2


@dataclass(eq=False)
class WgmmaFence(Stmt):
    """wgmma.fence.sync.aligned: orders the warp group's earlier register accesses
    (accumulators, register A) before its next wgmma.mma_async (warp-group collective)."""

    sync_id: str = None
    reasons: list = field(default_factory=list)
    label: str = None

    def effects(self):
        return Effects(order=Order("fence", "warpgroup", orders="registers"),
                       collective="warpgroup", instruction=WGMMA)

    def line(self):
        return f"wgmma.fence{sync_suffix(self)}"


@dataclass(eq=False)
class Wgmma(Stmt):
    """wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{dtype}.{dtype}, warp-group collective:
    D (64 x n f32: element d_index + j of each thread, WGMMA.d(n)'s map) = A (64 x 16) x
    B (16 x n) + (D if `accumulate` else 0).

    B is in shared memory: `b` (a 16-bit shared buffer), its descriptor's start address
    the byte of element `b_index`, laid out by `b_layout`; trans_b: N-major (else
    K-major). A likewise from shared memory (`a` shared, `a_layout`, trans_a: M-major),
    or from registers (`a` a local 16-bit buffer: elements a_index .. + 7 of each thread,
    WGMMA.a()'s map; a_layout None, trans_a False). `accumulate`: a bool expression,
    uniform over the warp group (None: true).

    Asynchronous: the instruction is pending from issue until a WgmmaWait retires its
    commit group; its operand reads and accumulator writes happen then."""

    d: Buffer = None
    d_index: ScalarExpr = None
    a: Buffer = None
    a_index: ScalarExpr = None
    b: Buffer = None
    b_index: ScalarExpr = None
    n: int = 64
    dtype: DataType = DataType.f16
    a_layout: MatrixLayout = None
    b_layout: MatrixLayout = None
    trans_a: bool = False
    trans_b: bool = False
    accumulate: ScalarExpr = None
    access: AccessInfo = None
    label: str = None

    def effects(self):
        """Its shared operands, read through the async proxy until a wgmma wait retires
        its group (A only where it is in shared memory), and its registers: the
        accumulator (read unless `accumulate` is false, written) and register A."""
        pending = Group("wgmma")
        operands = [(self.b, self.b_index, self.b_layout, self.trans_b, self.n)]
        if self.a.memory.value == "shared":
            operands.insert(0, (self.a, self.a_index, self.a_layout, self.trans_a, 64))
        accesses = [Access(buf, index, rows * 32, False, "wgmma", proxy="async",
                           until=pending, info=self.access, layout=(layout, trans, rows))
                    for buf, index, layout, trans, rows in operands]
        if self.a.memory.value == "local":
            accesses.append(Access(self.a, self.a_index, 16, False, "fragment",
                                   until=pending))
        accesses += [Access(self.d, self.d_index, 2 * self.n, False, "fragment",
                            until=pending),
                     Access(self.d, self.d_index, 2 * self.n, True, "fragment",
                            until=pending)]
        return Effects(tuple(accesses), group=GroupOp("wgmma", "join", "warpgroup"),
                       collective="warpgroup", instruction=WGMMA)

    def accumulate_only_where(self, cond):
        self.accumulate = cond if self.accumulate is None else \
            BinOp("and", self.accumulate, cond, DataType.bool)
        return True

    def line(self):
        def operand(buf, index, layout, trans):
            if layout is None:
                return f"{buf.name}[{format_expr(index)}..]"
            major = "MN" if trans else "K"
            return (f"desc({format_at(buf, index)}, {major}-major, LBO {layout.leading}, SBO "
                    f"{layout.stride}, swizzle {layout.swizzle})")
        acc = ("" if self.accumulate is None
               else f" (accumulate if {format_expr(self.accumulate)})")
        return (f"wgmma.m64n{self.n}k16.{self.dtype} {self.d.name}"
                f"[{format_expr(self.d_index)}..] += "
                f"{operand(self.a, self.a_index, self.a_layout, self.trans_a)} * "
                f"{operand(self.b, self.b_index, self.b_layout, self.trans_b)}{acc}")


@dataclass(eq=False)
class WgmmaCommit(Stmt):
    """wgmma.commit_group.sync.aligned: the warp group's wgmmas issued since the last
    commit form a group (possibly empty)."""

    label: str = None

    def effects(self):
        return Effects(group=GroupOp("wgmma", "commit", "warpgroup"), collective="warpgroup",
                       instruction=WGMMA)

    def line(self):
        return "wgmma.commit_group"


@dataclass(eq=False)
class WgmmaWait(Stmt):
    """wgmma.wait_group.sync.aligned n: wait until at most the n newest committed wgmma
    groups of the warp group are pending; the older ones retire (in commit order)."""

    n: int = 0
    sync_id: str = None
    reasons: list = field(default_factory=list)
    label: str = None

    def effects(self):
        return Effects(group=GroupOp("wgmma", "wait", "warpgroup", n=self.n),
                       collective="warpgroup", instruction=WGMMA)

    def line(self):
        return f"wgmma.wait_group {self.n}{sync_suffix(self)}"


# ---------------------------------------------------------------------------------------
# stmatrix, register reallocation, named barriers, proxy fences
# ---------------------------------------------------------------------------------------


@dataclass(eq=False)
class StMatrix(Stmt):
    """stmatrix.sync.aligned.m8n8.x{num}{.trans}.shared.b16 (warp collective), ldmatrix's
    inverse: register i of lane l (elements src_index + 2i, + 2i + 1 of `src`, low half
    first) holds row l >> 2, columns 2(l & 3), 2(l & 3) + 1 of matrix i (with trans: rows
    2(l & 3), 2(l & 3) + 1, column l >> 2); lane l supplies, through `address` (an element
    index into `dst`, 16-byte aligned), the start of row (l % 8) of matrix (l / 8)."""

    dst: Buffer = None
    address: ScalarExpr = None
    src: Buffer = None
    src_index: ScalarExpr = None
    num: int = 4
    trans: bool = False
    access: AccessInfo = None
    label: str = None

    def effects(self):
        return Effects((Access(self.src, self.src_index, 4 * self.num, False, "fragment"),
                        Access(self.dst, self.address, STMATRIX.row_bytes, True, "stmatrix",
                               lanes=STMATRIX.address_lanes(self.num), matrices=self.num,
                               info=self.access)),
                       collective="warp", instruction=STMATRIX)

    def line(self):
        trans = ".trans" if self.trans else ""
        return (f"stmatrix.x{self.num}{trans} {format_at(self.dst, self.address)} <- "
                f"{self.src.name}[{format_expr(self.src_index)}..]")


@dataclass(eq=False)
class SetMaxNReg(Stmt):
    """setmaxnreg.{inc|dec}.sync.aligned.u32 count (warp-group collective, sm_90a): the
    warp group's per-thread register budget becomes `count` (24..256, a multiple of 8)."""

    count: int = 240
    increase: bool = True
    label: str = None

    def effects(self):
        return Effects(collective="warpgroup", instruction=SETMAXNREG)

    def line(self):
        return f"setmaxnreg.{'inc' if self.increase else 'dec'} {self.count}"


@dataclass(eq=False)
class NamedBarrier(Stmt):
    """bar.sync id, count (or bar.arrive id, count with `arrive_only`): barrier `id`
    (1..15; 0 is __syncthreads') completes when `count` threads (a multiple of 32) have
    arrived; bar.sync waits for that, bar.arrive does not."""

    id: int = 1
    count: int = 128
    arrive_only: bool = False
    sync_id: str = None
    reasons: list = field(default_factory=list)
    label: str = None

    def effects(self):
        return Effects(order=Order("barrier", "named", blocking=not self.arrive_only,
                                   id=self.id, count=self.count),
                       instruction=NAMED_BARRIER)

    def line(self):
        return (f"bar.{'arrive' if self.arrive_only else 'sync'} {self.id}, {self.count}"
                f"{sync_suffix(self)}")


@dataclass(eq=False)
class FenceProxyAsync(Stmt):
    """fence.proxy.async.shared::cta: the thread's earlier generic-proxy shared-memory
    accesses (st.shared, stmatrix, cp.async results) are ordered before its later
    async-proxy ones (TMA store, wgmma operand reads), and after a barrier, other
    threads'."""

    sync_id: str = None
    reasons: list = field(default_factory=list)
    label: str = None

    def effects(self):
        return Effects(order=Order("fence", "thread", orders="proxy"),
                       instruction=PROXY_FENCE)

    def line(self):
        return f"fence.proxy.async.shared::cta{sync_suffix(self)}"


# ---------------------------------------------------------------------------------------
# Thread-block clusters: a barrier of the cluster's CTAs, reads of a peer's shared memory
# ---------------------------------------------------------------------------------------
# The CTAs of a cluster (kir.Kernel.cluster) are resident at once. Shared memory written
# by one CTA before a ClusterBarrier is visible to ClusterLoads of every CTA of the
# cluster after it; a CTA's shared memory ends when it exits, so a peer's reads of it
# must be ordered before the CTA's exit by a later ClusterBarrier
# (lowering.verify.cluster_protocol proves both; docs/hazards.md, "clusters").


@dataclass(eq=False)
class ClusterBarrier(Stmt):
    """barrier.cluster.arrive.release then barrier.cluster.wait.acquire: each executing
    thread waits until every thread of the cluster that has not exited has arrived; its
    earlier shared (and global) writes are visible to the cluster's threads after the
    barrier, and the barrier orders all the block's threads as __syncthreads does. Every
    thread of every CTA of the cluster executes the same ClusterBarriers, or exits."""

    label: str = None

    def effects(self):
        return Effects(order=Order("barrier", "cluster", blocking=True),
                       instruction=CLUSTER)

    def line(self):
        return "barrier.cluster (arrive.release, wait.acquire)"


@dataclass(eq=False)
class ClusterLoad(Stmt):
    """dst[dst_index ..] = src[src_index ..] of the cluster's CTA `rank` (its rank in
    the cluster, %cluster_ctarank: this CTA's own too), `width` consecutive elements of
    the shared buffer `src` at the same pool offset as in this CTA (mapa then
    ld.shared::cluster), into the local buffer `dst`."""

    dst: Buffer = None
    dst_index: ScalarExpr = None
    src: Buffer = None
    src_index: ScalarExpr = None
    rank: ScalarExpr = None
    width: int = 1
    label: str = None

    def effects(self):
        nbytes = self.width * self.src.dtype.itemsize
        return Effects((Access(self.src, self.src_index, nbytes, False, "cluster"),
                        Access(self.dst, self.dst_index, nbytes, True, "store")),
                       instruction=CLUSTER)

    def line(self):
        vector = f" x{self.width}" if self.width > 1 else ""
        return (f"{self.dst.name}[{format_expr(self.dst_index)}{vector}] = cluster CTA "
                f"{format_expr(self.rank)}: {self.src.name}[{format_expr(self.src_index)}]")


# ---------------------------------------------------------------------------------------
# mbarriers
# ---------------------------------------------------------------------------------------
# An mbarrier is 8 bytes of shared memory (element `index` of an i64 shared buffer) with
# state: the phase (0, 1, 2, ...; its parity is what waits name), the arrivals still
# pending in the current phase (from the init count), and the transaction bytes still
# expected. The current phase completes when both reach 0; then arrivals reset to the init
# count and the phase advances. try_wait.parity P succeeds once the phase of parity P has
# completed: on a fresh barrier (phase 0 current) parity 1 succeeds at once, parity 0
# after the first completion.


@dataclass(eq=False)
class MbarrierInit(Stmt):
    """mbarrier.init.shared::cta.b64 [bar], count, by each active thread (one, usually):
    phase 0, `count` arrivals pending, no transaction bytes."""

    bar: Buffer = None
    index: ScalarExpr = None
    count: ScalarExpr = None
    label: str = None

    def effects(self):
        return Effects(mbarrier=MbarrierOp("init", self.bar, self.index, self.count),
                       instruction=MBARRIER)

    def line(self):
        return f"mbarrier.init {format_at(self.bar, self.index)}, count {format_expr(self.count)}"


@dataclass(eq=False)
class FenceMbarrierInit(Stmt):
    """fence.mbarrier_init.release.cluster: the thread's earlier mbarrier inits are
    visible to the async proxy and, after a barrier, to other threads."""

    sync_id: str = None
    reasons: list = field(default_factory=list)
    label: str = None

    def effects(self):
        return Effects(order=Order("fence", "thread", orders="mbarrier-init"),
                       instruction=MBARRIER)

    def line(self):
        return f"fence.mbarrier_init{sync_suffix(self)}"


@dataclass(eq=False)
class MbarrierArrive(Stmt):
    """Each active thread arrives once on the barrier: mbarrier.arrive.shared::cta.b64, or
    with `tx_bytes` (an expression) mbarrier.arrive.expect_tx.shared::cta.b64, which first
    adds tx_bytes to the transaction bytes the current phase expects."""

    bar: Buffer = None
    index: ScalarExpr = None
    tx_bytes: ScalarExpr = None
    label: str = None

    def effects(self):
        return Effects(mbarrier=MbarrierOp("arrive", self.bar, self.index, self.tx_bytes),
                       instruction=MBARRIER)

    def line(self):
        tx = "" if self.tx_bytes is None else f".expect_tx {format_expr(self.tx_bytes)} bytes"
        return f"mbarrier.arrive{tx} {format_at(self.bar, self.index)}"


@dataclass(eq=False)
class MbarrierWait(Stmt):
    """Each active thread spins on mbarrier.try_wait.parity.shared::cta.b64 [bar], parity
    until the phase of that parity (an expression, 0 or 1) has completed."""

    bar: Buffer = None
    index: ScalarExpr = None
    parity: ScalarExpr = None
    sync_id: str = None
    reasons: list = field(default_factory=list)
    label: str = None

    def effects(self):
        return Effects(mbarrier=MbarrierOp("wait", self.bar, self.index, self.parity),
                       order=Order("acquire", "thread", blocking=True),
                       instruction=MBARRIER)

    def line(self):
        return (f"mbarrier.wait {format_at(self.bar, self.index)}, parity "
                f"{format_expr(self.parity)}{sync_suffix(self)}")


# ---------------------------------------------------------------------------------------
# TMA
# ---------------------------------------------------------------------------------------


def _box_coords(stmt):
    """A TMA statement's coordinates (c0, c1[, c2]), innermost first."""
    return tuple(c for c in (stmt.c0, stmt.c1, stmt.c2) if c is not None)


@dataclass(eq=False)
class TmaLoad(Stmt):
    """cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes,
    by each active thread (one, usually): the box of `map` at coordinates (c0, c1[, c2])
    (elements, innermost first, may be negative; c0 * itemsize a multiple of 16 bytes,
    else the GPU faults) into shared `dst` from element
    `dst_index` (the pool byte 128-byte aligned; a swizzled box: aligned to 8 swizzle
    spans), completing map.box_bytes transaction bytes on mbarrier bar[bar_index] when
    it lands (see the module header for the layout and the zero fill)."""

    dst: Buffer = None
    dst_index: ScalarExpr = None
    map: TensorMap = None
    c0: ScalarExpr = None
    c1: ScalarExpr = None
    c2: ScalarExpr = None
    bar: Buffer = None
    bar_index: ScalarExpr = None
    access: AccessInfo = None
    label: str = None

    coords = property(lambda self: _box_coords(self))

    def effects(self):
        return Effects((Access(self.dst, self.dst_index, self.map.box_bytes, True,
                               "tma-load", proxy="async",
                               until=Phase(self.bar, self.bar_index), info=self.access),),
                       mbarrier=MbarrierOp("complete_tx", self.bar, self.bar_index,
                                           self.map.box_bytes),
                       instruction=TMA)

    def complete_on(self, bar, index):
        """Complete the transaction bytes on mbarrier bar[index]."""
        self.bar, self.bar_index = bar, index

    def line(self):
        box = "x".join(str(b) for b in self.map.box)
        at = ", ".join(format_expr(c) for c in self.coords)
        bar = "(its mbarrier not chosen yet)" if self.bar is None else \
            format_at(self.bar, self.bar_index)
        return (f"tma.load {format_at(self.dst, self.dst_index)} <- {self.map.name}({at}) "
                f"box {box}, complete_tx {bar}")


@dataclass(eq=False)
class TmaStore(Stmt):
    """cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group, by each active thread:
    the box of `map` at (c0, c1[, c2]) from shared `src` (element `src_index`, laid out
    as a TmaLoad's box), writing only the elements inside the tensor. It joins the
    thread's open bulk group; its shared source is in use until a BulkWait(read=True)
    retires the group, its global writes until a BulkWait."""

    src: Buffer = None
    src_index: ScalarExpr = None
    map: TensorMap = None
    c0: ScalarExpr = None
    c1: ScalarExpr = None
    c2: ScalarExpr = None
    access: AccessInfo = None
    label: str = None

    coords = property(lambda self: _box_coords(self))

    def effects(self):
        return Effects((Access(self.src, self.src_index, self.map.box_bytes, False,
                               "tma-store", proxy="async", until=Group("bulk", "read"),
                               info=self.access),),
                       group=GroupOp("bulk", "join"), instruction=TMA)

    def line(self):
        box = "x".join(str(b) for b in self.map.box)
        at = ", ".join(format_expr(c) for c in self.coords)
        return f"tma.store {self.map.name}({at}) box {box} <- {format_at(self.src, self.src_index)}"


@dataclass(eq=False)
class BulkLoad(Stmt):
    """cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes, by each active
    thread: TMA's one-dimensional copy of `nbytes` consecutive bytes (a multiple of
    fuserir.instructions.BULK_COPY_ALIGN) from element `src_index` of global `src` into
    shared `dst` from element `dst_index` (both addresses aligned to it), completing
    nbytes transaction bytes on mbarrier bar[bar_index] when they land. No tensor map, no
    bounds and no zero fill: every byte lies inside `src`."""

    dst: Buffer = None
    dst_index: ScalarExpr = None
    src: Buffer = None
    src_index: ScalarExpr = None
    nbytes: int = 16
    bar: Buffer = None
    bar_index: ScalarExpr = None
    access: AccessInfo = None
    label: str = None

    def effects(self):
        return Effects((Access(self.src, self.src_index, self.nbytes, False, "bulk-load",
                               proxy="async", align=BULK_COPY_ALIGN),
                        Access(self.dst, self.dst_index, self.nbytes, True, "bulk-load",
                               proxy="async", until=Phase(self.bar, self.bar_index),
                               info=self.access, align=BULK_COPY_ALIGN)),
                       mbarrier=MbarrierOp("complete_tx", self.bar, self.bar_index,
                                           self.nbytes),
                       instruction=TMA)

    def complete_on(self, bar, index):
        """Complete the transaction bytes on mbarrier bar[index]."""
        self.bar, self.bar_index = bar, index

    def line(self):
        return (f"bulk.load {format_at(self.dst, self.dst_index)} <- "
                f"{format_at(self.src, self.src_index)}, {self.nbytes} bytes, complete_tx "
                f"{format_at(self.bar, self.bar_index)}")


@dataclass(eq=False)
class BulkCommit(Stmt):
    """cp.async.bulk.commit_group: the thread's bulk stores since the last commit form a
    group."""

    label: str = None

    def effects(self):
        return Effects(group=GroupOp("bulk", "commit"), instruction=TMA)

    def line(self):
        return "cp.async.bulk.commit_group"


@dataclass(eq=False)
class BulkWait(Stmt):
    """cp.async.bulk.wait_group[.read] n: wait until at most the n newest committed bulk
    groups of the thread are pending (with `read`: have not finished reading shared
    memory)."""

    n: int = 0
    read: bool = False
    sync_id: str = None
    reasons: list = field(default_factory=list)
    label: str = None

    def effects(self):
        return Effects(group=GroupOp("bulk", "wait", n=self.n, read_only=self.read),
                       instruction=TMA)

    def line(self):
        return f"cp.async.bulk.wait_group{'.read' if self.read else ''} {self.n}{sync_suffix(self)}"


def uses_async_protocol(kernel):
    """Does `kernel` issue a statement whose shared-memory effects are asynchronous or
    ordered by mbarriers (effects.joins_async_protocol)? Such a kernel is verified by
    lowering.verify.async_protocol (which sees TMA boxes and wgmma operands), not by the
    sm_80 analysis (lowering.verify.hazards, which does not)."""
    return any(joins_async_protocol(s.effects()) for s in walk(kernel.body))
