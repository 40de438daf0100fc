"""What a kernel-IR statement does to memory and to other threads, as the statement itself
declares it: the records of `Stmt.effects()`.

Each statement class defines `effects()` once, beside its fields (statements.py,
hopper.py); every checker reads these records instead of asking which class a statement
is. A new instruction is a new statement class with its effects (and its emission and
interpretation): the analyses below need no change unless it brings a new kind of
effect.

    Access     a memory access the instruction makes itself (the loads inside its
               expressions are lowering.verify.accesses' business, alike for every
               statement): buffer, element index, bytes per thread (per address row for
               the row shapes), read or write, its proxy (generic or async), when it
               completes (at issue, when a wait retires its group, when an mbarrier
               phase completes), which lanes of a warp supply addresses
    GroupOp    joining, committing or waiting on an asynchronous group (cp.async, bulk,
               wgmma): per thread or per warp group
    MbarrierOp init, arrive (with transaction bytes), wait (a parity), or the completion
               of transaction bytes by a TMA load, on mbarrier bar[index]
    Order      a barrier, fence, release or acquire: who takes part, what it orders,
               whether the thread waits at it
    Effects    all of one statement's, with who must execute it together (a thread, a
               warp, a warp group) and the instruction descriptor (fuserir.instructions)
               whose architecture it needs

The questions the analyses ask (is it part of the async protocol, does it carry group or
phase state across iterations, ...) are the predicates at the bottom: one definition
each, derived from the records.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Group:
    """Completes when a wait of `kind` retires the group the access joined; `part`
    "read": a wait that retires reads only (BulkWait.read) suffices."""

    kind: str                 # "cp.async", "bulk" or "wgmma"
    part: str = "all"


@dataclass(frozen=True)
class Phase:
    """Completes with the current phase of mbarrier bar[index] (its transaction bytes)."""

    bar: object
    index: object


@dataclass(frozen=True, eq=False)
class Access:
    """One access an instruction makes itself, per executing thread: `nbytes` from element
    `index` of `buffer` (rows shapes: each address lane's row; "box": a TMA box;
    "operand": a wgmma matrix operand, laid out by `layout`). `via` names the kind of
    access in reports and picks its shape."""

    buffer: object
    index: object
    nbytes: int
    write: bool
    via: str                  # "store", "ldmatrix", "stmatrix", "cp.async", "tma-load",
                              # "bulk-load", "tma-store", "wgmma", "fragment", "semaphore",
                              # "mbarrier", "atomic" (a relaxed read-modify-write add),
                              # "cluster" (a read of a cluster CTA's shared memory)
    proxy: str = "generic"    # "generic" or "async" (TMA, wgmma operands)
    until: object = None      # None: complete at issue; Group or Phase
    lanes: int = None         # only the first `lanes` lanes of each warp (None: all)
    matrices: int = 0         # ldmatrix / stmatrix: how many 8x8 matrices
    info: object = None       # the kir.AccessInfo lowering attached (owner, stage)
    layout: object = None     # "operand": (MatrixLayout, trans, rows)
    align: int = None         # the alignment its address needs, in bytes (None: nbytes,
                              # as a vector access's; a bulk copy's: 16 whatever its size)

    @property
    def memory(self):
        return self.buffer.memory


@dataclass(frozen=True)
class GroupOp:
    """`op` "join" (an async operation joins the open group), "commit" (the open group
    closes) or "wait" (all but the `n` newest committed groups retire; `read_only`: only
    their reads) on groups of `kind`, kept per `scope` ("thread" or "warpgroup")."""

    kind: str
    op: str
    scope: str = "thread"
    n: int = None
    read_only: bool = False


@dataclass(frozen=True)
class MbarrierOp:
    """`op` "init" (value: the arrival count), "arrive" (value: expect_tx bytes or None),
    "wait" (value: the parity) or "complete_tx" (value: the bytes a TMA load completes)
    on mbarrier `bar`[`index`]. A statement that completes transaction bytes says on
    which barrier through its `complete_on(bar, index)`."""

    op: str
    bar: object
    index: object
    value: object = None


@dataclass(frozen=True)
class Order:
    """`kind` "barrier" (threads wait for each other: `scope` "block" or "named", with
    the barrier's `id` and thread `count`, or "cluster": every thread of the cluster's
    CTAs that has not exited), "fence", "release" or "acquire"; `orders`
    what: "memory" (shared and global), "global", "proxy" (generic before async),
    "mbarrier-init" or "registers" (a warp group's, before its next wgmma); `scope` of a
    fence: "thread", "warpgroup" or "gpu"; `blocking`: the thread waits here; `value`, of
    a semaphore's release or acquire: the value it stores or waits for; `adds`, of a
    release: it adds `value` atomically (an arrival on a counter, joining the cell's
    release sequence) instead of storing it."""

    kind: str
    scope: str
    orders: str = "memory"
    blocking: bool = False
    id: int = None
    count: int = None
    value: object = None
    adds: bool = False


@dataclass(frozen=True)
class Effects:
    accesses: tuple = ()
    group: GroupOp = None
    mbarrier: MbarrierOp = None
    order: Order = None
    collective: str = "thread"    # who executes it together: "thread", "warp", "warpgroup"
    instruction: object = None    # its fuserir.instructions descriptor (arch), if any
    opaque: bool = False          # not lowered yet: its effects are unknown


NONE = Effects()


# -- the questions, one definition each --------------------------------------------------

def is_block_barrier(effects):
    """Is it a barrier of every thread of the block (__syncthreads)?"""
    order = effects.order
    return order is not None and order.kind == "barrier" and order.scope == "block"


def joins_group(effects, kind):
    """Does it join an asynchronous group of `kind` ("cp.async", "bulk", "wgmma")?"""
    group = effects.group
    return group is not None and group.op == "join" and group.kind == kind


def generic_shared(effects):
    """The instruction's generic-proxy shared-memory accesses (stores, ldmatrix and
    stmatrix rows, cp.async writes): what the sm_80 analysis, the bank report and the
    interpreter's race detector check. A read of a cluster's shared memory (via
    "cluster": any CTA's of the cluster) is the cluster protocol's, not the block's
    (lowering.verify.cluster_protocol, codegen.interp.cluster)."""
    return [a for a in effects.accesses
            if a.proxy == "generic" and a.memory.value == "shared" and a.via != "cluster"]


def async_shared(effects):
    """Its async-proxy shared-memory accesses (TMA boxes, wgmma operands)."""
    return [a for a in effects.accesses
            if a.proxy == "async" and a.memory.value == "shared"]


def joins_async_protocol(effects):
    """Does the kernel's async protocol (lowering.verify.async_protocol) have to prove
    it: an async-proxy access or an mbarrier operation?"""
    return effects.mbarrier is not None or any(a.proxy == "async" for a in effects.accesses)


def synchronizes(effects):
    """Does it synchronize or run asynchronously within the block (a barrier, a fence
    below gpu scope, a group or mbarrier operation), or is it not lowered yet? Such a
    statement may not sit under a condition the async protocol cannot decide."""
    return (effects.group is not None or effects.mbarrier is not None or effects.opaque
            or (effects.order is not None and effects.order.scope != "gpu"))


def only_adds_order(effects):
    """Does it only order (a barrier, a fence of the async proxy) or store by TMA (a bulk
    group's join, commit or wait: stores whose only shared access is their source), so
    that whether it runs changes no mbarrier phase, wgmma group or pending load that other
    statements see? What the async protocol allows under a condition that changes from
    iteration to iteration (lowering.verify.async_skeleton)."""
    order, group = effects.order, effects.group
    if effects.mbarrier is not None or effects.opaque or (
            group is not None and group.kind != "bulk"):
        return False
    if order is not None and not (order.kind == "barrier" or (
            order.kind == "fence" and order.orders == "proxy")):
        return False
    return order is not None or group is not None


def carries_phase_state(effects):
    """Does it carry mbarrier-phase or bulk/wgmma group state from one iteration to the
    next (what a run-time loop of the async protocol must not nest)?"""
    return effects.mbarrier is not None or (
        effects.group is not None and effects.group.kind in ("bulk", "wgmma"))


def orders_beyond_barriers(effects):
    """Does it order threads other than by __syncthreads (mbarriers, named barriers)?
    The interpreter then interleaves roles and keeps vector clocks."""
    return effects.mbarrier is not None or (
        effects.order is not None and effects.order.scope == "named")


def register_writes(effects):
    """Its generic writes of registers (local buffers), complete at issue."""
    return [a for a in effects.accesses
            if a.write and a.until is None and a.memory.value == "local"]


def async_register_uses(effects):
    """The registers (local buffers) it uses asynchronously: wgmma's accumulator and
    register A, in use until a wgmma wait retires the group."""
    return [a for a in effects.accesses
            if a.memory.value == "local" and isinstance(a.until, Group)]
