"""Kernel IR: what lowering produces and both backends consume.

A Kernel is a statement tree (loops, ifs, allocations, stores, barriers) over typed
scalar expressions (constants, variables, thread/block indices, loads, arithmetic). It is
explicitly typed: arithmetic nodes carry the dtype they compute in, and lowering inserts
every conversion as a Cast, so the CUDA emitter and the interpreter never guess a type.
Thread- and block-parallel axes are not loops: they are index expressions of
threadIdx/blockIdx, guarded by predicates where extents differ.

Shared-memory accesses carry an AccessInfo saying which tensor they touch and which
thread owns each element, so sync insertion and the hazard verifier can reason about
them; every Barrier carries the reasons it exists.

The text printer at the bottom is what `fuserir dump --stage kernel` shows.
"""

import itertools
from dataclasses import dataclass, field, fields, replace
from enum import Enum

import numpy as np

from fuserir import numerics, op_table
from fuserir.dtypes import DataType

# ---------------------------------------------------------------------------------------
# Scalar expressions (immutable)
# ---------------------------------------------------------------------------------------


class ScalarExpr:
    dtype: DataType

    def children(self):
        return ()


@dataclass(frozen=True, eq=False)
class Const(ScalarExpr):
    value: object
    dtype: DataType


@dataclass(frozen=True, eq=False)
class Var(ScalarExpr):
    """A named scalar: a loop index, a size or stride parameter, a named run-time scalar.

    `user`: the name is one the user wrote (a size or a run-time scalar), not one lowering
    generated (loop indices i0, j0, v0, e0, w_<tensor>; strides <tensor>_stride<k>). The two
    are separate namespaces: a size the user called `i0` is not the loop index `i0`. Dumps
    print both as written; backends tell them apart by `key` (see Names, below)."""

    name: str
    dtype: DataType
    user: bool = False

    @property
    def key(self):
        return name_key(self)


class SpecialKind(Enum):
    threadIdx = "threadIdx"
    blockIdx = "blockIdx"
    blockDim = "blockDim"
    gridDim = "gridDim"


@dataclass(frozen=True, eq=False)
class Special(ScalarExpr):
    """threadIdx.x, blockIdx.y, blockDim.z, ... (in the kernel's index dtype)."""

    kind: SpecialKind
    axis: str            # "x", "y" or "z"
    dtype: DataType

    @property
    def name(self):
        return f"{self.kind.value}.{self.axis}"


# Operators of BinOp and UnOp: fuserir.op_table is their meaning (C integer rules made
# total by fuserir.numerics; "ceildiv" is (a + b - 1) / b on non-negative operands; "xor"
# the bitwise xor of two integers of one int dtype, for XOR swizzles).
BINARY_OPS = tuple(op_table.BINARY)
COMPARISONS = op_table.COMPARISONS
UNARY_OPS = tuple(op_table.UNARY)


@dataclass(frozen=True, eq=False)
class BinOp(ScalarExpr):
    """`op` applied to a and b, both of `dtype` (comparisons, and/or yield bool)."""

    op: str
    a: ScalarExpr
    b: ScalarExpr
    dtype: DataType      # the result type

    def children(self):
        return (self.a, self.b)


@dataclass(frozen=True, eq=False)
class UnOp(ScalarExpr):
    op: str
    a: ScalarExpr
    dtype: DataType

    def children(self):
        return (self.a,)


@dataclass(frozen=True, eq=False)
class Select(ScalarExpr):
    cond: ScalarExpr
    a: ScalarExpr
    b: ScalarExpr
    dtype: DataType

    def children(self):
        return (self.cond, self.a, self.b)


@dataclass(frozen=True, eq=False)
class Cast(ScalarExpr):
    """Convert a to dtype: float->int truncates toward zero and saturates, NaN -> 0 (PTX
    cvt.rzi); int->int wraps; to bool is != 0; float narrowing rounds to nearest even
    (fuserir.numerics.convert)."""

    a: ScalarExpr
    dtype: DataType

    def children(self):
        return (self.a,)


@dataclass(frozen=True, eq=False)
class Load(ScalarExpr):
    """Element `index` of `buffer` (an element index, not bytes). A vector load (width
    w > 1: elements index .. index + w - 1 in one 4-, 8- or 16-byte access, index a
    multiple of w) is only ever the value of a vector Store of the same width."""

    buffer: "Buffer"
    index: ScalarExpr
    access: "AccessInfo" = None
    width: int = 1

    @property
    def dtype(self):
        return self.buffer.dtype

    def children(self):
        return (self.index,)


@dataclass(frozen=True, eq=False)
class ShuffleXor(ScalarExpr):
    """__shfl_xor_sync(0xffffffff, value, lane_mask): the value of lane (lane ^ lane_mask)
    of the same warp. Warp-collective: all 32 lanes of each warp must execute it."""

    value: ScalarExpr
    lane_mask: int

    @property
    def dtype(self):
        return self.value.dtype

    def children(self):
        return (self.value,)


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
    # counted in iterations of that loop from the current one (see lowering.hazards).
    stage: tuple = None

    def same_thread_as(self, other):
        return (self.tensor == other.tensor and self.owner == other.owner
                and all(cls is not None for _, cls in self.owner))


class HazardKind(Enum):
    RAW = "RAW"              # read after another thread's write
    WAR = "WAR"              # write after another thread's read
    WAW = "WAW"              # write after another thread's write
    ASYNC = "async-pending"  # access to bytes an async copy may still be writing


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


class Stmt:
    """Every statement has a label (S<number>) that dumps and hazard reports cite."""

    def __post_init__(self):
        if getattr(self, "label", None) is None:
            self.label = f"S{next(_labels)}"

    def bodies(self):
        """The statement lists nested in this one."""
        return ()


@dataclass(eq=False)
class Allocate(Stmt):
    buffer: Buffer
    label: str = None


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


@dataclass(eq=False)
class ForLoop(Stmt):
    """for (var = 0; var < extent; ++var) body. kind: "serial" or "unroll"."""

    var: Var
    extent: ScalarExpr
    body: list = field(default_factory=list)
    kind: str = "serial"
    label: str = None

    def bodies(self):
        return (self.body,)


@dataclass(eq=False)
class IfThenElse(Stmt):
    cond: ScalarExpr
    then_body: list = field(default_factory=list)
    else_body: list = field(default_factory=list)
    label: str = None

    def bodies(self):
        return (self.then_body, self.else_body)


@dataclass(eq=False)
class Barrier(Stmt):
    """__syncthreads(). `sync_id` is what drop_syncs names (inserted barriers only);
    `reasons` lists the hazards it orders."""

    sync_id: str = None
    reasons: list = field(default_factory=list)
    label: str = None


@dataclass(eq=False)
class Comment(Stmt):
    text: str = ""
    label: str = None


# -- tensor cores and asynchronous copies (sm_80+) -------------------------------------------
# Warp-collective or per-thread instructions with fixed PTX semantics (DESIGN.md sections 5,
# 6 and 10). Fragments live in local buffers: element `index + k` of a fragment buffer is the
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


@dataclass(eq=False)
class Mma(Stmt):
    """mma.sync.aligned.m16n8k16.row.col.f32.{f16|bf16}.{f16|bf16}.f32: D = A * B + C for
    one warp. Per lane (g = l >> 2, t = l & 3), from element *_index of each local buffer:
    A 8 halves a0..a7 = (g, 2t..2t+1), (g+8, 2t..2t+1), (g, 2t+8..2t+9), (g+8, 2t+8..2t+9);
    B 4 halves = (k 2t..2t+1, n g), (k 2t+8..2t+9, n g); C and D 4 floats =
    (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1). Inputs are `dtype` (f16 or bf16)."""

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


@dataclass(eq=False)
class CpAsyncCommit(Stmt):
    """cp.async.commit_group: the thread's copies issued since the last commit form a group
    (an empty group is legal, so commits can be unconditional and wait counts static)."""

    label: str = None


@dataclass(eq=False)
class CpAsyncWait(Stmt):
    """cp.async.wait_group n: wait until at most the n newest committed groups of this
    thread are pending (groups retire in commit order). Like Barrier, an inserted wait has
    an id and the reasons it exists."""

    n: int = 0
    sync_id: str = None
    reasons: list = field(default_factory=list)
    label: str = None


# -- grid synchronization: workspaces, fences and semaphores ---------------------------------
# The building blocks of a serial split-K reduction across CTAs (a "turnstile"; DESIGN.md
# section 5, "Between CTAs"). Split z of an output tile waits until the tile's semaphore
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


@dataclass(eq=False)
class SemRelease(Stmt):
    """Each active thread stores `sem[index] = value` (i32 global) with a release store
    (__threadfence(); st.release.gpu.global.b32): it publishes the global writes the
    block's threads fenced before it (after a Barrier; the releasing thread's own always)
    and what the block had acquired, to whoever waits for `value` on that cell."""

    sem: Buffer = None
    index: ScalarExpr = None
    value: ScalarExpr = None
    label: str = None


@dataclass(eq=False)
class ExprStmt(Stmt):
    """A fusion expression placed in its loop nest but not yet lowered to loads and stores.
    It exists only between the loop-nest pass and the indexing pass. `role` says which part
    of the expression it stands for: "compute" (a pointwise expression), or for a
    reduction "init", "accumulate", "block_reduce", "final"."""

    tv: object = None
    role: str = "compute"
    label: str = None


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

    @property
    def params(self):
        return list(self.tensor_params) + list(self.workspaces) + list(self.scalar_params)


# ---------------------------------------------------------------------------------------
# Names: the user's and lowering's namespaces
# ---------------------------------------------------------------------------------------
# A kernel holds names from two sources: the user's (tensors, sizes, run-time scalars, the
# fusion: `user=True` on Buffer, Var and Kernel) and lowering's (loop indices, strides,
# accumulators, scratch, workspaces). They are kept as written, in dumps and messages,
# and told apart by key: a user's size `i0` and the loop index `i0` are two variables. The
# CUDA emitter gives every key its own C identifier (codegen.cuda: user names mangled so
# that they meet neither generated names nor C/CUDA keywords and built-ins); the
# interpreter binds variables by key.


def name_key(x):
    """What identifies a Var or Buffer's name: the text itself for a generated name,
    ("tensor", text) for a user's tensor, ("scalar", text) for a user's size or scalar.
    Two names with one key are one variable (or buffer)."""
    if not x.user:
        return x.name
    return ("tensor" if isinstance(x, Buffer) else "scalar", x.name)


def arg_name(kernel, param):
    """The key under which run_kernel, launch and bind take the value of `param` (a
    TensorParam, Workspace or ScalarParam): its name, except for a scalar whose name a
    tensor or workspace of the kernel also has (a user may name a size like a tensor,
    `fusion f(N: f32[N])`): `scalar:<name>`."""
    if isinstance(param, ScalarParam):
        name = param.var.name
        taken = {p.buffer.name for p in kernel.tensor_params}
        taken.update(w.buffer.name for w in kernel.workspaces)
        return f"scalar:{name}" if name in taken else name
    return param.buffer.name


def scalar_args(kernel, values):
    """{argument name (arg_name): value} of the kernel's scalar parameters, from `values`
    ({scalar name: value})."""
    return {arg_name(kernel, p): values[p.var.name] for p in kernel.scalar_params}


def walk(stmts):
    """Every statement of a statement list, depth first, in program order."""
    for s in stmts:
        yield s
        for body in s.bodies():
            yield from walk(body)


def relabel(stmts, prefix="S"):
    """Number statements S1, S2, ... in program order (dumps read top to bottom)."""
    for i, s in enumerate(walk(stmts), 1):
        s.label = f"{prefix}{i}"


def substitute(expr, mapping):
    """`expr` with every Var whose id is in `mapping` replaced by mapping[id(var)]."""
    if isinstance(expr, Var):
        return mapping.get(id(expr), expr)
    if not isinstance(expr, ScalarExpr) or not expr.children():
        return expr
    changes = {}
    for f in fields(expr):
        value = getattr(expr, f.name)
        if isinstance(value, ScalarExpr):
            new = substitute(value, mapping)
            if new is not value:
                changes[f.name] = new
    return replace(expr, **changes) if changes else expr


def copy_stmt(stmt, mapping, access=None):
    """A fresh copy of `stmt` (and its bodies) with `mapping` substituted in every
    expression (see substitute); `access(old AccessInfo) -> AccessInfo` may retag the
    shared-memory accesses of the copy."""
    changes = {"label": None}
    for f in fields(stmt):
        value = getattr(stmt, f.name)
        if isinstance(value, ScalarExpr):
            changes[f.name] = substitute(value, mapping)
        elif isinstance(value, list) and value and isinstance(value[0], Stmt):
            changes[f.name] = [copy_stmt(s, mapping, access) for s in value]
        elif isinstance(value, AccessInfo) and access is not None:
            changes[f.name] = access(value)
    return replace(stmt, **changes)


def walk_expr(expr):
    yield expr
    for c in expr.children():
        yield from walk_expr(c)


# ---------------------------------------------------------------------------------------
# Printer
# ---------------------------------------------------------------------------------------

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "lt": "<", "le": "<=",
          "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "and": "&&", "or": "||",
          "xor": "^"}


def format_expr(e):
    if isinstance(e, Const):
        if e.dtype is DataType.bool:
            return "true" if e.value else "false"
        return repr(float(e.value)) if e.dtype.is_float else str(int(e.value))
    if isinstance(e, (Var, Special)):
        return e.name
    if isinstance(e, BinOp):
        if e.op in _INFIX:
            return f"({format_expr(e.a)} {_INFIX[e.op]} {format_expr(e.b)})"
        return f"{e.op}({format_expr(e.a)}, {format_expr(e.b)})"
    if isinstance(e, UnOp):
        return f"{e.op}({format_expr(e.a)})"
    if isinstance(e, Select):
        return f"({format_expr(e.cond)} ? {format_expr(e.a)} : {format_expr(e.b)})"
    if isinstance(e, Cast):
        return f"({e.dtype}){format_expr(e.a)}"
    if isinstance(e, Load):
        vector = f" x{e.width}" if e.width > 1 else ""
        return f"{e.buffer.name}[{format_expr(e.index)}{vector}]"
    if isinstance(e, ShuffleXor):
        return f"shfl_xor({format_expr(e.value)}, {e.lane_mask})"
    raise TypeError(type(e).__name__)


def format_stmt(s):
    """One line for a statement (loops and ifs: their header)."""
    if isinstance(s, Allocate):
        b = s.buffer
        where = f" @ byte {format_expr(b.byte_offset)}" if b.byte_offset is not None else ""
        return f"alloc {b.memory.value} {b.dtype} {b.name}[{format_expr(b.size)}]{where}"
    if isinstance(s, Store):
        vector = f" x{s.width}" if s.width > 1 else ""
        return f"{s.buffer.name}[{format_expr(s.index)}{vector}] = {format_expr(s.value)}"
    if isinstance(s, ForLoop):
        unroll = "unroll " if s.kind == "unroll" else ""
        return f"{unroll}for {s.var.name} in 0..{format_expr(s.extent)}"
    if isinstance(s, IfThenElse):
        return f"if {format_expr(s.cond)}"
    if isinstance(s, Barrier):
        sid = f" [{s.sync_id}]" if s.sync_id else ""
        why = "; ".join(str(r) for r in s.reasons)
        return f"__syncthreads(){sid}" + (f"  // {why}" if why else "")
    if isinstance(s, Comment):
        return f"// {s.text}"
    if isinstance(s, ExprStmt):
        return f"{s.role} {s.tv.definition}"
    if isinstance(s, LdMatrix):
        trans = ".trans" if s.trans else ""
        return (f"ldmatrix.x{s.num}{trans} {s.dst.name}[{format_expr(s.dst_index)}..] <- "
                f"{s.src.name}[{format_expr(s.address)}]")
    if isinstance(s, Mma):
        def frag(buf, index):
            return f"{buf.name}[{format_expr(index)}..]"
        return (f"mma.m16n8k16.{s.dtype} {frag(s.d, s.d_index)} = {frag(s.a, s.a_index)} * "
                f"{frag(s.b, s.b_index)} + {frag(s.c, s.c_index)}")
    if isinstance(s, CpAsync):
        return (f"cp.async.{s.cache} {s.dst.name}[{format_expr(s.dst_index)}] <- "
                f"{s.src.name}[{format_expr(s.src_index)}], {s.nbytes} bytes, src-size "
                f"{format_expr(s.src_size)}")
    if isinstance(s, CpAsyncCommit):
        return "cp.async.commit_group"
    if isinstance(s, CpAsyncWait):
        sid = f" [{s.sync_id}]" if s.sync_id else ""
        why = "; ".join(str(r) for r in s.reasons)
        return f"cp.async.wait_group {s.n}{sid}" + (f"  // {why}" if why else "")
    if isinstance(s, Fence):
        return "__threadfence()"
    if isinstance(s, SemWait):
        return (f"sem_wait {s.sem.name}[{format_expr(s.index)}] == "
                f"{format_expr(s.value)}  (acquire)")
    if isinstance(s, SemRelease):
        return (f"sem_release {s.sem.name}[{format_expr(s.index)}] = "
                f"{format_expr(s.value)}  (release)")
    raise TypeError(type(s).__name__)


def format_stmts(stmts, indent=0):
    lines = []
    for s in stmts:
        lines.append(f"{s.label:>5}  {'  ' * indent}{format_stmt(s)}")
        if isinstance(s, ForLoop):
            lines.extend(format_stmts(s.body, indent + 1))
        elif isinstance(s, IfThenElse):
            lines.extend(format_stmts(s.then_body, indent + 1))
            if s.else_body:
                lines.append(f"{'':>5}  {'  ' * indent}else")
                lines.extend(format_stmts(s.else_body, indent + 1))
    return lines


def format_kernel(kernel):
    params = [f"{p.buffer.dtype} {p.buffer.name}[{', '.join(format_expr(s) for s in p.sizes)}]"
              for p in kernel.tensor_params]
    params += [f"workspace {w.buffer.dtype} {w.buffer.name}[{format_expr(w.size)}]"
               + (" zeroed" if w.zeroed else "") for w in kernel.workspaces]
    params += [f"{p.var.dtype} {p.var.name}" for p in kernel.scalar_params]
    launch = kernel.launch
    grid = ", ".join(format_expr(e) for e in launch.grid) if launch.grid else "?"
    block = ", ".join(format_expr(e) for e in launch.block) if launch.block else "?"
    head = [f"kernel {kernel.name}({', '.join(params)})",
            f"  grid=({grid}) block=({block}) index={kernel.index_dtype}"]
    return "\n".join(head + format_stmts(kernel.body)) + "\n"


# ---------------------------------------------------------------------------------------
# Launch-time evaluation (shared by the CUDA launcher and the interpreter)
# ---------------------------------------------------------------------------------------

_INT_BITS = {DataType.i32: 32, DataType.i64: 64}


def _wrap_int(value, dtype):
    """`value` reduced to the two's-complement range of `dtype` (C on the GPU wraps)."""
    if dtype is DataType.bool:
        return bool(value)
    bits = _INT_BITS[dtype]
    value = int(value) & ((1 << bits) - 1)
    return value - (1 << bits) if value >> (bits - 1) else value


def evaluate_scalar(expr, env=None):
    """The value of a launch-time scalar expression (grid/block extents, shared-memory
    sizes and offsets, tensor sizes) given `env`, a {name: value} map of the kernel's
    scalar parameters.

    Integer arithmetic follows C in the node's dtype, exactly as the emitted CUDA computes
    it: / and % truncate toward zero, ceildiv is (a + b - 1) / b, results wrap to 32 or 64
    bits; where C leaves a result undefined, fuserir.numerics defines it (a / 0 = 0,
    a % 0 = a; a cast float -> integer saturates, NaN -> 0), as every backend does. Float
    nodes compute in their numpy type (f16/bf16 have no arithmetic). Returns a
    Python int, bool or numpy float. Thread indices, loads and shuffles have no launch-time
    value: they raise TypeError; a variable missing from `env` raises KeyError.
    """
    env = {} if env is None else env
    if isinstance(expr, Const):
        if expr.dtype is DataType.bool:
            return bool(expr.value)
        if expr.dtype.is_int:
            return _wrap_int(expr.value, expr.dtype)
        return expr.dtype.numpy.type(expr.value)
    if isinstance(expr, Var):
        if expr.name not in env:
            raise KeyError(f"no value for scalar {expr.name!r} (have: {sorted(env)})")
        value = env[expr.name]
        if expr.dtype.is_int:
            return _wrap_int(value, expr.dtype)
        return bool(value) if expr.dtype is DataType.bool else expr.dtype.numpy.type(value)
    if isinstance(expr, Select):
        chosen = expr.a if evaluate_scalar(expr.cond, env) else expr.b
        return evaluate_scalar(chosen, env)
    if isinstance(expr, Cast):
        return _eval_cast(evaluate_scalar(expr.a, env), expr.a.dtype, expr.dtype)
    if isinstance(expr, UnOp):
        return _eval_unop(expr.op, evaluate_scalar(expr.a, env), expr.dtype)
    if isinstance(expr, BinOp):
        if expr.op in ("and", "or"):         # C short-circuits
            a = bool(evaluate_scalar(expr.a, env))
            if a == (expr.op == "or"):
                return a
            return bool(evaluate_scalar(expr.b, env))
        return _eval_binop(expr.op, evaluate_scalar(expr.a, env),
                           evaluate_scalar(expr.b, env), expr.a.dtype, expr.dtype)
    raise TypeError(f"{type(expr).__name__} {format_expr(expr)} has no launch-time value")


def _eval_cast(value, src, dst):
    if dst is DataType.bool:
        return bool(value != 0)
    if dst.is_int:
        if src.is_float:
            return int(numerics.convert(src.numpy.type(value), dst))   # saturating
        return _wrap_int(value, dst)
    return dst.numpy.type(value)


def _eval_unop(op, a, dtype):
    entry = op_table.UNARY[op]
    if entry.kind == "logical":
        return bool(entry.meaning(a))
    if dtype.is_int:
        if entry.kind != "exact":
            raise TypeError(f"unary {op} on {dtype} has no launch-time value")
        return _wrap_int(entry.meaning(np.asarray(a, dtype=dtype.numpy)), dtype)
    t = dtype.numpy.type
    if entry.kind == "exact":
        return t(entry.meaning(t(a)))
    return t(op_table.math_unary(op, a))


def _eval_binop(op, a, b, operand_dtype, dtype):
    entry = op_table.BINARY[op]
    if entry.kind == "compare":
        return bool(entry.meaning(a, b))
    if dtype.is_int:
        if entry.integer is None:
            raise TypeError(f"binary {op} on {dtype} has no launch-time value")
        x, y = np.asarray(a, dtype=dtype.numpy), np.asarray(b, dtype=dtype.numpy)
        with np.errstate(over="ignore"):
            return _wrap_int(entry.integer(x, y), dtype)
    if entry.meaning is None or entry.kind != "arith":
        raise TypeError(f"binary {op} on {dtype} has no launch-time value")
    t = dtype.numpy.type
    with np.errstate(all="ignore"):
        return t(entry.meaning(t(a), t(b)))


def shared_bytes(kernel, env=None):
    """Bytes of dynamic shared memory the kernel needs: the end of the furthest shared
    buffer (byte_offset + size * itemsize, evaluated with the scalar values in `env`),
    0 when it has none."""
    end = 0
    for s in walk(kernel.body):
        if isinstance(s, Allocate) and s.buffer.memory is Memory.shared:
            b = s.buffer
            if b.byte_offset is None:
                raise ValueError(f"shared buffer {b.name} ({s.label}) has no byte_offset: "
                                 "the allocation pass places shared buffers")
            start = evaluate_scalar(b.byte_offset, env)
            end = max(end, start + evaluate_scalar(b.size, env) * b.dtype.itemsize)
    return end
