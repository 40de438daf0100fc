"""Kernel IR scalar expressions (immutable, explicitly typed): constants, variables,
thread and block indices, arithmetic (BinOp, UnOp: their meaning is fuserir.op_table),
selects, casts, loads and warp shuffles. Arithmetic nodes carry the dtype they compute in,
and lowering inserts every conversion as a Cast, so the CUDA emitter and the interpreter
never guess a type.
"""

from dataclasses import dataclass
from enum import Enum

from fuserir import op_table
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


def name_key(x):
    """What identifies a Var or Buffer's name: the text itself for a generated name,
    ("tensor", text) for a user's tensor, ("scalar", text) for a user's size or scalar.
    Two names with one key are one variable (or buffer)."""
    if not x.user:
        return x.name
    return ("scalar" if isinstance(x, Var) else "tensor", x.name)


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
# the bitwise xor, of two integers of one int dtype in XOR swizzles).
BINARY_OPS = tuple(op_table.BINARY)
COMPARISONS = op_table.COMPARISONS
UNARY_OPS = tuple(op_table.UNARY)


@dataclass(frozen=True, eq=False)
class BinOp(ScalarExpr):
    """`op` applied to a and b, both of one dtype; `dtype` is the result's: theirs, or
    bool for comparisons and logical ops (fuserir.op_table.result_type)."""

    op: str
    a: ScalarExpr
    b: ScalarExpr
    dtype: DataType      # the result type

    def children(self):
        return (self.a, self.b)


@dataclass(frozen=True, eq=False)
class UnOp(ScalarExpr):
    """`op` applied to a; `dtype` is the result's: a's, or bool for `not` and the
    predicates (isnan, ...: fuserir.op_table.result_type)."""

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
# Text
# ---------------------------------------------------------------------------------------

def format_expr(e):
    """An expression's text in kernel-IR dumps (operators as C spells them)."""
    if isinstance(e, Const):
        if e.dtype is DataType.bool:
            return "true" if e.value else "false"
        return repr(float(e.value)) if e.dtype.is_float else str(int(e.value))
    if isinstance(e, (Var, Special)):
        return e.name
    if isinstance(e, BinOp):
        infix = op_table.BINARY[e.op].infix      # as C spells it
        if infix:
            return f"({format_expr(e.a)} {infix} {format_expr(e.b)})"
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


def format_at(buffer, index):
    """`buffer[index]` as dumps show an element."""
    return f"{buffer.name}[{format_expr(index)}]"
