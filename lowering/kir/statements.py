"""Kernel IR statements and what they refer to: buffers and parameters, the access
provenance (AccessInfo) that sync insertion and the hazard verifier reason with, the
reasons every inserted barrier or wait records, the statements (loops, ifs, allocations,
stores, barriers, tensor-core instructions and async copies, grid fences and
semaphores) and the Kernel. Statements are mutable: passes rewrite their bodies.
"""

import itertools
from dataclasses import dataclass, field
from enum import Enum

from fuserir.dtypes import DataType
from fuserir.instructions import CP_ASYNC, LDMATRIX, MMA_M16N8K16

from .effects import NONE, Access, Effects, Group, GroupOp, Order
from .expressions import Const, ScalarExpr, Select, Var, format_expr, name_key


# ---------------------------------------------------------------------------------------
# Buffers and parameters
# ---------------------------------------------------------------------------------------


class Memory(Enum):
    global_ = "global"
    shared = "shared"
    local = "local"


@dataclass(eq=False)
class Buffer:
    """A named array. Global buffers are kernel parameters; shared and local ones are
    allocated by an Allocate statement. `size` is in elements (an expression; shared
    buffers with a non-constant size live in dynamic shared memory). `byte_offset` places a
    shared buffer in the block's shared-memory pool (set by the allocation pass; buffers
    whose byte ranges overlap alias each other)."""

    name: str
    dtype: DataType
    memory: Memory
    size: ScalarExpr = None
    byte_offset: ScalarExpr = None
    tensor: str = None   # the fusion tensor it holds (None: scratch, e.g. for reductions)
    user: bool = False   # named after the user's tensor (as Var.user: a namespace apart)

    @property
    def key(self):
        return name_key(self)


@dataclass(eq=False)
class TensorParam:
    """A global tensor argument: its buffer, and one size and one stride variable per axis
    (strides in elements). Sizes that are fusion symbols reuse the symbol's ScalarParam."""

    buffer: Buffer
    sizes: list          # list[ScalarExpr]: Var of a ScalarParam or Const
    strides: list        # list[Var]
    is_output: bool = False


@dataclass(eq=False)
class ScalarParam:
    """A run-time integer argument: a size symbol (M) or a named scalar (splitk)."""

    var: Var


# ---------------------------------------------------------------------------------------
# Access provenance and sync reasons
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AccessInfo:
    """Who touches which element of a shared buffer.

    owner maps each parallel type the block uses ("TIDx", ...) to an identifier of the
    axis that selects the thread for an element (an exact-map class of the accessing
    tensor's domain), or None when the element's thread is not a function of the element
    (e.g. a write predicated to thread 0 of that axis, or a scratch buffer). Two accesses
    to the same tensor whose owners are equal and contain no None are made by the same
    thread for every element, so they need no barrier between them.
    """

    tensor: str
    owner: tuple         # tuple of (parallel type name, class id or None), sorted
    # A circular buffer's access touches one stage: (loop label, offset, stages), offset
    # counted in iterations of that loop from the current one (see lowering.verify.hazards).
    stage: tuple = None

    def same_thread_as(self, other):
        return (self.tensor == other.tensor and self.owner == other.owner
                and all(cls is not None for _, cls in self.owner))


class HazardKind(Enum):
    RAW = "RAW"              # read after another thread's write
    WAR = "WAR"              # write after another thread's read
    WAW = "WAW"              # write after another thread's write
    ASYNC = "async-pending"  # access to bytes an async copy may still be writing
    PROXY = "proxy-fence"    # generic writes the async proxy reads next, not fenced
    INIT = "mbarrier-init"   # an mbarrier used before its init is visible
    WGMMA_FENCE = "wgmma-fence"  # registers written before a wgmma, not fenced


@dataclass
class SyncReason:
    kind: HazardKind
    buffers: tuple           # names of the buffers (aliased buffers: all of them)
    first: "Stmt"            # the statement of the earlier access
    second: "Stmt"           # the statement of the later access
    loop_carried: bool = False

    def __str__(self):
        carried = ", loop-carried" if self.loop_carried else ""
        return (f"{self.kind.value} on {'/'.join(self.buffers)}: {self.first.label} -> "
                f"{self.second.label}{carried}")


# ---------------------------------------------------------------------------------------
# Statements
# ---------------------------------------------------------------------------------------

_labels = itertools.count()


def sync_suffix(s):
    """What a sync's line ends with: the id drop_syncs names it by, the hazards it
    orders."""
    sid = f" [{s.sync_id}]" if s.sync_id else ""
    why = "; ".join(str(r) for r in s.reasons)
    return sid + (f"  // {why}" if why else "")


class Stmt:
    """Every statement has a label (S<number>) that dumps and hazard reports cite, and
    declares its effects (lowering.kir.effects) in `effects()`: none, for a statement
    that only holds others or names a buffer. `data_fields` names its expression fields
    that compute values rather than addresses, counts or conditions (index arithmetic
    analyses, lowering.indexing.index_bounds, leave them to the data's own types).
    `overlaps_unrolled`: a short loop around it is unrolled, so that nvcc can overlap one
    instance's latency with the next's work (lowering.passes.unroll_register_loops)."""

    data_fields = ()
    overlaps_unrolled = False

    def __post_init__(self):
        if getattr(self, "label", None) is None:
            self.label = f"S{next(_labels)}"

    def bodies(self):
        """The statement lists nested in this one."""
        return ()

    def effects(self):
        return NONE

    def line(self):
        """Its line in kernel-IR dumps (lowering.kir.printer; loops and ifs: their
        header)."""
        raise NotImplementedError(type(self).__name__)

    def zero_filled_unless(self, inside, store_zeros, index_dtype):
        """The statement doing its work where `inside` holds and, where not, filling its
        destination with zeros instead, without reading: itself (changed in place) or
        what replaces it; None where the instruction has no such form (the caller skips
        it under a branch instead). A copy with a source size reads no bytes and
        zero-fills (a pipeline's tail, a tile's edge); a store writes zeros only where
        `store_zeros` asks (a tile the tensor cores read must hold them)."""
        return None

    def stores_zeros(self):
        """Does it write only zeros (a store of the constant 0: what leaves a zeroed
        workspace zero for the next launch, lowering.verify.grid_protocol)?"""
        return False

    def accumulate_only_where(self, cond):
        """Make the statement add into its accumulator only where `cond` holds and
        overwrite it elsewhere (changed in place; a wgmma's `accumulate`): True, or False
        where the instruction has no such form."""
        return False

    def element_store(self):
        """(buffer, index, value) where the statement stores one element computed by its
        own expression (buffer[index] = value), else None: what an analysis of a
        register's values reads (lowering.verify.async_skeleton's iteration counters)."""
        return None


@dataclass(eq=False)
class Allocate(Stmt):
    buffer: Buffer
    label: str = None

    def line(self):
        b = self.buffer
        where = f" @ byte {format_expr(b.byte_offset)}" if b.byte_offset is not None else ""
        return f"alloc {b.memory.value} {b.dtype} {b.name}[{format_expr(b.size)}]{where}"


@dataclass(eq=False)
class Store(Stmt):
    """buffer[index] = value. A vector store (width w > 1) copies w consecutive elements
    in one access: value is a Load of the same width and dtype, both indices multiples of
    w (lowering proves it; the executable checks global arrays' strides and alignment)."""

    buffer: Buffer
    index: ScalarExpr
    value: ScalarExpr
    access: AccessInfo = None
    label: str = None
    width: int = 1

    data_fields = ("value",)

    def effects(self):
        return Effects((Access(self.buffer, self.index,
                               self.width * self.buffer.dtype.itemsize, True, "store",
                               info=self.access),))

    def zero_filled_unless(self, inside, store_zeros, index_dtype):
        if not store_zeros:
            return None
        dtype = self.buffer.dtype
        zero = Const(0.0 if dtype.is_float else 0, dtype)
        if self.width == 1:
            self.value = Select(inside, self.value, zero, dtype)
            return self
        zeros = Store(self.buffer, self.index, zero, self.access, width=self.width)
        return IfThenElse(inside, [self], [zeros])         # C's ?: takes no vectors

    def stores_zeros(self):
        return isinstance(self.value, Const) and self.value.value == 0

    def element_store(self):
        return (self.buffer, self.index, self.value) if self.width == 1 else None

    def line(self):
        vector = f" x{self.width}" if self.width > 1 else ""
        return f"{self.buffer.name}[{format_expr(self.index)}{vector}] = {format_expr(self.value)}"


@dataclass(eq=False)
class ForLoop(Stmt):
    """for (var = 0; var < extent; ++var) body. kind: "serial" or "unroll" (all of it, or
    by `factor` iterations at a time: a loop of run-time extent whose iterations' loads
    should be in flight together)."""

    var: Var
    extent: ScalarExpr
    body: list = field(default_factory=list)
    kind: str = "serial"
    label: str = None
    factor: int = None

    def bodies(self):
        return (self.body,)

    def line(self):
        unroll = "" if self.kind != "unroll" else "unroll " if self.factor is None else \
            f"unroll by {self.factor} "
        return f"{unroll}for {self.var.name} in 0..{format_expr(self.extent)}"


@dataclass(eq=False)
class IfThenElse(Stmt):
    cond: ScalarExpr
    then_body: list = field(default_factory=list)
    else_body: list = field(default_factory=list)
    label: str = None

    def bodies(self):
        return (self.then_body, self.else_body)

    def line(self):
        return f"if {format_expr(self.cond)}"


@dataclass(eq=False)
class Barrier(Stmt):
    """__syncthreads(). `sync_id` is what drop_syncs names (inserted barriers only);
    `reasons` lists the hazards it orders."""

    sync_id: str = None
    reasons: list = field(default_factory=list)
    label: str = None

    def effects(self):
        return Effects(order=Order("barrier", "block", blocking=True))

    def line(self):
        return f"__syncthreads(){sync_suffix(self)}"


@dataclass(eq=False)
class Comment(Stmt):
    text: str = ""
    label: str = None

    def line(self):
        return f"// {self.text}"


# -- tensor cores and asynchronous copies (sm_80+) -------------------------------------------
# Warp-collective or per-thread instructions with fixed PTX semantics (the PTX ISA's; the
# hazard model is docs/hazards.md's). Fragments live in local buffers: element `index + k` of a fragment buffer is the
# k-th 16-bit (or 32-bit for f32 accumulators) value the lane holds, registers packed low
# half first.


@dataclass(eq=False)
class LdMatrix(Stmt):
    """ldmatrix.sync.aligned.m8n8.x{num}{.trans}.shared.b16: a warp loads `num` 8x8 b16
    matrices from shared memory. Lane l supplies, through `address` (an element index into
    `src`, evaluated per lane), the start of row (l % 8) of matrix (l / 8); lanes past
    8*num supply nothing. Afterwards register i of lane l (elements dst_index + 2i and
    + 2i + 1 of `dst`) holds row l >> 2, columns 2(l & 3) and 2(l & 3) + 1 of matrix i
    (with trans: rows 2(l & 3) and 2(l & 3) + 1, column l >> 2)."""

    dst: "Buffer" = None
    dst_index: ScalarExpr = None
    src: "Buffer" = None
    address: ScalarExpr = None
    num: int = 4
    trans: bool = False
    access: AccessInfo = None
    label: str = None

    overlaps_unrolled = True

    def effects(self):
        return Effects((Access(self.src, self.address, LDMATRIX.row_bytes, False,
                               "ldmatrix", lanes=LDMATRIX.address_lanes(self.num),
                               matrices=self.num, info=self.access),
                        Access(self.dst, self.dst_index, 4 * self.num, True, "fragment")),
                       collective="warp", instruction=LDMATRIX)

    def line(self):
        trans = ".trans" if self.trans else ""
        return (f"ldmatrix.x{self.num}{trans} {self.dst.name}[{format_expr(self.dst_index)}..] <- "
                f"{self.src.name}[{format_expr(self.address)}]")


@dataclass(eq=False)
class Mma(Stmt):
    """The warp-wide tensor-core instruction of fuserir.instructions.MMA_M16N8K16: D = A * B
    + C for one warp, each operand the lanes' fragments from element *_index of a local
    buffer, laid out by the descriptor's fragment maps. Inputs are `dtype` (f16 or bf16),
    C and D f32."""

    d: "Buffer" = None
    d_index: ScalarExpr = None
    a: "Buffer" = None
    a_index: ScalarExpr = None
    b: "Buffer" = None
    b_index: ScalarExpr = None
    c: "Buffer" = None
    c_index: ScalarExpr = None
    dtype: DataType = DataType.f16
    label: str = None

    overlaps_unrolled = True

    def effects(self):
        return Effects((Access(self.a, self.a_index, 16, False, "fragment"),
                        Access(self.b, self.b_index, 8, False, "fragment"),
                        Access(self.c, self.c_index, 16, False, "fragment"),
                        Access(self.d, self.d_index, 16, True, "fragment")),
                       collective="warp", instruction=MMA_M16N8K16)

    def line(self):
        def frag(buf, index):
            return f"{buf.name}[{format_expr(index)}..]"
        return (f"{MMA_M16N8K16.label}.{self.dtype} {frag(self.d, self.d_index)} = "
                f"{frag(self.a, self.a_index)} * {frag(self.b, self.b_index)} + "
                f"{frag(self.c, self.c_index)}")


@dataclass(eq=False)
class CpAsync(Stmt):
    """cp.async.{ca|cg}.shared.global [dst + dst_index], [src + src_index], nbytes, src_size:
    copies nbytes (4, 8 or 16; .cg takes 16 only) from global to shared memory, reading
    src_size bytes (an expression: 0 zero-fills the whole destination, as a predicated-off
    copy of a pipeline tail does) and filling the rest with zeros. The write stays pending
    until the issuing thread executes a CpAsyncWait that retires its group."""

    dst: "Buffer" = None
    dst_index: ScalarExpr = None
    src: "Buffer" = None
    src_index: ScalarExpr = None
    nbytes: int = 16
    src_size: ScalarExpr = None
    cache: str = "cg"
    access: AccessInfo = None
    label: str = None

    overlaps_unrolled = True

    def effects(self):
        return Effects((Access(self.src, self.src_index, self.nbytes, False, "cp.async"),
                        Access(self.dst, self.dst_index, self.nbytes, True, "cp.async",
                               until=Group("cp.async"), info=self.access)),
                       group=GroupOp("cp.async", "join"), instruction=CP_ASYNC)


    def zero_filled_unless(self, inside, store_zeros, index_dtype):
        self.src_size = Select(inside, self.src_size, Const(0, index_dtype), index_dtype)
        return self

    def line(self):
        return (f"cp.async.{self.cache} {self.dst.name}[{format_expr(self.dst_index)}] <- "
                f"{self.src.name}[{format_expr(self.src_index)}], {self.nbytes} bytes, src-size "
                f"{format_expr(self.src_size)}")


@dataclass(eq=False)
class CpAsyncCommit(Stmt):
    """cp.async.commit_group: the thread's copies issued since the last commit form a group
    (an empty group is legal, so commits can be unconditional and wait counts static)."""

    label: str = None

    def effects(self):
        return Effects(group=GroupOp("cp.async", "commit"), instruction=CP_ASYNC)

    def line(self):
        return "cp.async.commit_group"


@dataclass(eq=False)
class CpAsyncWait(Stmt):
    """cp.async.wait_group n: wait until at most the n newest committed groups of this
    thread are pending (groups retire in commit order). Like Barrier, an inserted wait has
    an id and the reasons it exists."""

    n: int = 0
    sync_id: str = None
    reasons: list = field(default_factory=list)
    label: str = None

    def effects(self):
        return Effects(group=GroupOp("cp.async", "wait", n=self.n), instruction=CP_ASYNC)

    def line(self):
        return f"cp.async.wait_group {self.n}{sync_suffix(self)}"


# -- grid synchronization: workspaces, fences and semaphores ---------------------------------
# The building blocks of a serial split-K reduction across CTAs (a "turnstile"; docs/hazards.md,
# "Across blocks"). Split z of an output tile waits until the tile's semaphore
# holds z, adds its partial sums to the workspace, and releases z + 1; the last split
# writes the output and resets the semaphore to 0 for the next launch:
#
#     if thread 0: SemWait(sem, tile, blockIdx.z)      // acquire what split z-1 released
#     Barrier                                           // ... for every thread of the block
#     <read partials from the workspace, add this split's values>
#     not last:  <write partials> ; Fence ; Barrier ; if thread 0: SemRelease(sem, tile, z+1)
#     last:      <write the output> ;                    if thread 0: SemRelease(sem, tile, 0)
#
# A block's global writes are visible to another block only through this chain: Fence by
# the writing thread, (Barrier,) SemRelease by its block, SemWait by the reading block on
# the same semaphore cell, (Barrier). The interpreter checks exactly that (codegen.interp,
# "cross-cta" hazards).


@dataclass(eq=False)
class Workspace:
    """A global scratch buffer the executor allocates for the kernel (a kernel parameter
    after the tensors, before the scalars: Kernel.params): e.g. f32 partial sums of a
    split-K reduction, or i32 semaphores. `size` is in elements, an expression over the
    kernel's scalar parameters. `zeroed`: the buffer must be all zeros before the first
    launch; a kernel that uses it as semaphores leaves it zero again after each launch,
    so the executor zeroes it once, when it allocates it, and keeps it across launches."""

    buffer: Buffer
    size: ScalarExpr
    zeroed: bool = False


@dataclass(eq=False)
class Fence(Stmt):
    """__threadfence() by each active thread: its earlier global writes are ordered before
    its later global writes (the release half of the handshake: the writes a later
    SemRelease of the block publishes)."""

    label: str = None

    def effects(self):
        return Effects(order=Order("fence", "gpu", orders="global"))

    def line(self):
        return "__threadfence()"


@dataclass(eq=False)
class SemWait(Stmt):
    """Each active thread spins until the i32 global `sem[index] == value`, reading it with
    an acquire load (ld.acquire.gpu.global.b32 in a loop); afterwards (acquire) its later
    reads see what the block that stored `value` with SemRelease had published. Other
    threads of the block see it after a Barrier."""

    sem: Buffer = None
    index: ScalarExpr = None
    value: ScalarExpr = None
    label: str = None

    def effects(self):
        return Effects((Access(self.sem, self.index, 4, False, "semaphore"),),
                       order=Order("acquire", "gpu", orders="global", blocking=True,
                                   value=self.value))

    def line(self):
        return (f"sem_wait {self.sem.name}[{format_expr(self.index)}] == "
                f"{format_expr(self.value)}  (acquire)")


@dataclass(eq=False)
class SemRelease(Stmt):
    """Each active thread stores `sem[index] = value` (i32 global) with a release store
    (st.release.gpu.global.b32): it publishes the global writes the
    block's threads fenced before it (after a Barrier; the releasing thread's own always)
    and what the block had acquired, to whoever waits for `value` on that cell."""

    sem: Buffer = None
    index: ScalarExpr = None
    value: ScalarExpr = None
    label: str = None

    def effects(self):
        return Effects((Access(self.sem, self.index, 4, True, "semaphore"),),
                       order=Order("release", "gpu", orders="global", value=self.value))

    def line(self):
        return (f"sem_release {self.sem.name}[{format_expr(self.index)}] = "
                f"{format_expr(self.value)}  (release)")


@dataclass(eq=False)
class SemArrive(Stmt):
    """Each active thread adds `value` to the i32 global `sem[index]` with a release
    read-modify-write (red.release.gpu.global.add.s32): like SemRelease
    it publishes the global writes the block's threads fenced before it and what the
    block had acquired; unlike a store it joins the cell's release sequence instead of
    ending it, so a SemWait that reads the sum of several arrivals acquires what each of
    them published (an arrival counter)."""

    sem: Buffer = None
    index: ScalarExpr = None
    value: ScalarExpr = None
    label: str = None

    def effects(self):
        return Effects((Access(self.sem, self.index, 4, True, "semaphore"),),
                       order=Order("release", "gpu", orders="global", value=self.value,
                                   adds=True))

    def line(self):
        return (f"sem_arrive {self.sem.name}[{format_expr(self.index)}] += "
                f"{format_expr(self.value)}  (release)")


@dataclass(eq=False)
class AtomicAdd(Stmt):
    """`buffer[index] += value` for each active thread, one relaxed atomic
    read-modify-write per thread (red.global.add): the adds of several threads and blocks
    to one element do not race each other, in an order the hardware picks (a float sum's
    last bits may differ run to run); a plain access of the element races with them unless
    ordered after them (a fence, a release, a wait), as a store's would."""

    buffer: Buffer = None
    index: ScalarExpr = None
    value: ScalarExpr = None
    label: str = None

    data_fields = ("value",)

    def effects(self):
        return Effects((Access(self.buffer, self.index, self.buffer.dtype.itemsize, True,
                               "atomic"),))

    def line(self):
        return (f"atomic_add {self.buffer.name}[{format_expr(self.index)}] += "
                f"{format_expr(self.value)}  (relaxed)")


_OPAQUE = Effects(opaque=True)


@dataclass(eq=False)
class ExprStmt(Stmt):
    """A fusion expression placed in its loop nest but not yet lowered to loads and stores.
    It exists only between the loop-nest pass and the indexing pass. `role` says which part
    of the expression it stands for: "compute" (a pointwise expression), or for a
    reduction "init", "accumulate", "block_reduce", "final"."""

    tv: object = None
    role: str = "compute"
    label: str = None

    def effects(self):
        return _OPAQUE

    def line(self):
        return f"{self.role} {self.tv.definition}"


# ---------------------------------------------------------------------------------------
# Kernel
# ---------------------------------------------------------------------------------------


@dataclass(eq=False)
class LaunchConfig:
    """Grid and block extents as expressions over the kernel's scalar parameters."""

    grid: tuple = None       # (x, y, z) ScalarExprs
    block: tuple = None      # (x, y, z) ScalarExprs


@dataclass(eq=False)
class Kernel:
    name: str
    tensor_params: list      # list[TensorParam], inputs first then outputs
    scalar_params: list      # list[ScalarParam]
    body: list
    launch: LaunchConfig
    index_dtype: DataType = DataType.i32
    workspaces: list = field(default_factory=list)   # list[Workspace]
    user: bool = False       # named after the user's fusion (codegen.cuda mangles it)
    tensor_maps: list = field(default_factory=list)  # list[kir.hopper.TensorMap]
    # its blocks wait for blocks launched after them (a parallel grid reduction's
    # counters): every block of the grid must be resident at once, which the launcher
    # checks against the device's occupancy before each new grid size and asks of the
    # driver with a cooperative launch (cuLaunchCooperativeKernel)
    co_resident: bool = False
    # (x, y, z) ScalarExprs: the grid's CTAs in clusters of that shape (a launch
    # attribute); None: no clusters. The CTAs of a cluster are resident at once and read
    # each other's shared memory (kir.hopper's ClusterBarrier, ClusterLoad)
    cluster: tuple = None
    # [(global buffer name, ScalarExpr)]: launch-time offsets that vector accesses of the
    # buffer need to be multiples of their width (a slice's start, a cat's boundary), which
    # lowering could not prove: the executable checks them per call and runs a variant
    # reading the buffer by narrower accesses where they are not (driver.vector_widths)
    vector_offsets: list = field(default_factory=list)

    @property
    def params(self):
        return (list(self.tensor_params) + list(self.tensor_maps) + list(self.workspaces)
                + list(self.scalar_params))
