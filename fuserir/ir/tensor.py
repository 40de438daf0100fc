"""Values of a fusion: TensorView (a tensor and its schedule) and Scalar (a literal).

A TensorView carries three domains, as in nvFuser:
  root     the axes the defining expression produces (a reduction's reduced axes
           included, as reduction axes);
  logical  the tensor's meaning: equal to root, except for an rfactor producer, whose
           logical domain holds the split pieces of the reduction (some reduced, some kept);
  loop     what the schedule made of the logical domain: split, merged, reordered,
           parallelized. Lowering generates one loop per loop axis.
The scheduling methods below are thin: the algorithms live in fuserir.transforms, and every
outermost call is recorded in the fusion's replayable schedule trace.
"""

from __future__ import annotations

import functools
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, TypeVar, cast

from ..dtypes import DataType

if TYPE_CHECKING:
    from .fusion import Fusion
    from .iterdomain import ParallelType

_Method = TypeVar("_Method", bound=Callable[..., Any])
Axis = int


class MemoryType(Enum):
    global_ = "global"
    shared = "shared"
    local = "local"

    def __str__(self):
        return self.value


def memory_type(value):
    """A MemoryType from an enum member or its name ("global", "shared", "local")."""
    if isinstance(value, MemoryType):
        return value
    for m in MemoryType:
        if m.value == value:
            return m
    raise ValueError(value)


class Val:
    """Anything an expression reads or writes."""


class Scalar(Val):
    """A literal number, or a size: an extent (a symbol such as N, bound from the inputs'
    shapes when the fusion runs) used as a value (`sum(x, [1]) / N`). Its dtype is the
    dtype of the tensor operand beside it."""

    def __init__(self, value, dtype):
        self.value = value
        self.dtype = dtype

    @property
    def is_size(self):
        """Is the value a size known only at run time (not a number)?"""
        return not isinstance(self.value, (bool, int, float))

    def __str__(self):
        if self.is_size:
            return str(self.value)
        if self.dtype is DataType.bool:
            return "true" if self.value else "false"
        if self.dtype.is_float:
            return repr(float(self.value))
        return str(int(self.value))


def _traced(method: _Method) -> _Method:
    """Record the outermost scheduling call on a tensor in its fusion's schedule trace."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self.fusion.recording(self, method.__name__, args, kwargs) as entry:
            result = method(self, *args, **kwargs)
            entry.result = result
        return result

    return cast(_Method, wrapper)


class TensorView(Val):
    def __init__(self, fusion, name, dtype, root, memory=MemoryType.local, named=True):
        self.fusion = fusion
        self.name = name
        self.dtype = dtype
        self.root = list(root)
        self.logical = list(self.root)
        self.loop = list(self.root)
        self.memory_type = memory
        self.is_named = named
        self.definition = None          # the Expr that writes this tensor (None: input)
        self.compute_at_pos = None      # None: placed by nobody yet (inlined by default)
        self.circular_buffer_stages = None
        self.warp_specialized = None     # circular buffer loaded by a producer warp group
        self.producer_registers = None   # ... whose registers go to the consumers (setmaxnreg)
        self.swizzle_row = None          # XOR-swizzled shared tile: elements per row
        self.row_padding = None          # padded shared tile: (elements per row, padding)
        self.reuse_shared = False        # promote_reuse: may reuse dead operand bytes
        self.grid_reduction = None     # over a block index: "serial", "parallel", "atomic"
                                       # or "cluster"
        self.compute_at_consumer = None  # the tensor whose loops compute_at shares

    # -- shape ---------------------------------------------------------------------------
    @property
    def shape_axes(self) -> list[Any]:
        """The logical axes that remain in the tensor's shape (reduced axes dropped)."""
        return [a for a in self.logical if not a.is_reduction]

    @property
    def shape(self) -> list[Any]:
        return [a.extent for a in self.shape_axes]

    @property
    def rank(self) -> int:
        return len(self.shape_axes)

    @property
    def ndim(self) -> int:
        """The number of loop axes (what schedule axis numbers index)."""
        return len(self.loop)

    @property
    def is_input(self) -> bool:
        return self in self.fusion.inputs

    @property
    def is_output(self) -> bool:
        return self in self.fusion.outputs

    def __str__(self):
        return self.name

    def __repr__(self):
        dims = ", ".join(str(e) for e in self.shape)
        return f"<TensorView {self.name}: {self.dtype}[{dims}] {self.memory_type}>"

    def describe(self) -> str:
        """One line: name, type, memory, loop domain (and compute-at position if set)."""
        dims = ", ".join(str(e) for e in self.shape)
        loop = " ".join(str(a) for a in self.loop)
        text = f"{self.name}: {self.dtype}[{dims}] {self.memory_type} loop=[{loop}]"
        if self.compute_at_pos is not None:
            text += f" compute_at={self.compute_at_pos}"
        if self.circular_buffer_stages is not None:
            text += f" stages={self.circular_buffer_stages}"
        if self.warp_specialized is not None:
            text += f" warp-specialized={self.warp_specialized.value}"
        if self.producer_registers is not None:
            text += f" producer-registers={self.producer_registers}"
        if self.swizzle_row is not None:
            text += f" swizzle={self.swizzle_row}"
        if self.row_padding is not None:
            text += " pad={}+{}".format(*self.row_padding)
        if self.reuse_shared:
            text += " reuse"
        if self.grid_reduction:
            text += f" {self.grid_reduction}-grid"
        return text

    # -- arithmetic sugar for the Python builder -------------------------------------------
    def __add__(self, other: TensorView | float) -> TensorView:
        from .. import ops
        return ops.add(self, other)

    def __radd__(self, other: TensorView | float) -> TensorView:
        from .. import ops
        return ops.add(other, self)

    def __sub__(self, other: TensorView | float) -> TensorView:
        from .. import ops
        return ops.sub(self, other)

    def __rsub__(self, other: TensorView | float) -> TensorView:
        from .. import ops
        return ops.sub(other, self)

    def __mul__(self, other: TensorView | float) -> TensorView:
        from .. import ops
        return ops.mul(self, other)

    def __rmul__(self, other: TensorView | float) -> TensorView:
        from .. import ops
        return ops.mul(other, self)

    def __truediv__(self, other: TensorView | float) -> TensorView:
        from .. import ops
        return ops.div(self, other)

    def __rtruediv__(self, other: TensorView | float) -> TensorView:
        from .. import ops
        return ops.div(other, self)

    def __neg__(self) -> TensorView:
        from .. import ops
        return ops.neg(self)   # type: ignore[attr-defined]  # made from the op table

    # -- scheduling (see fuserir.transforms for the algorithms) ---------------------------
    @_traced
    def split(self, axis: Axis, factor: int | str, inner: bool = True) -> None:
        """Split loop axis `axis` by `factor` (an int or a named run-time scalar).

        [i{M}, i{N}].split(1, 128)  ->  [i{M}, i{ceildiv(N, 128)}, i{128}]
        inner=False makes `factor` the extent of the outer piece instead.
        """
        from .. import transforms
        transforms.split(self, axis, factor, inner)

    @_traced
    def merge(self, axis: Axis) -> None:
        """Merge loop axes `axis` and `axis`+1: [i{M}, i{N}].merge(0) -> [i{M*N}]."""
        from .. import transforms
        transforms.merge(self, axis)

    @_traced
    def reorder(self, mapping: Mapping[int, int]) -> None:
        """Move loop axes: {old: new}; unnamed axes keep their relative order."""
        from .. import transforms
        transforms.reorder(self, mapping)

    @_traced
    def parallelize(self, axis: Axis, ptype: ParallelType | str) -> None:
        """Bind loop axis `axis` to a block/thread index, or mark it unroll/vectorize/mma."""
        from .. import transforms
        transforms.parallelize(self, axis, ptype)

    @_traced
    def vectorize(self, axis: Axis) -> None:
        """Access the innermost, contiguous loop axis as one 1-16 byte vector."""
        from .. import transforms
        transforms.vectorize(self, axis)

    @_traced
    def rfactor(self, axes: Sequence[Axis]) -> TensorView:
        """Split a reduction in two: returns the producer that reduces `axes` (partially);
        this tensor then reduces the remaining reduction axes of the producer's result."""
        from .. import transforms
        return transforms.rfactor(self, axes)

    @_traced
    def cache_after(self, memory_type: MemoryType | str, async_copy: bool = False,
                    ldmatrix: bool = False, tma: bool = False,
                    consumers: Sequence[TensorView] | None = None) -> TensorView:
        """Insert a copy of this tensor in `memory_type` that its consumers (all, or those
        of `consumers`) then read. async_copy: global -> shared by cp.async. ldmatrix:
        shared -> register fragments of a tensor-core operand (its two innermost axes
        marked mma, lowered to ldmatrix). tma: global -> shared by TMA, its innermost two
        axes one box per instruction."""
        from .. import transforms
        return transforms.cache_after(self, memory_type, async_copy, ldmatrix, tma,
                                      consumers)

    @_traced
    def cache_before(self, memory_type: MemoryType | str, tma: bool = False) -> TensorView:
        """Compute this tensor into a new one in `memory_type`, then copy it here. tma:
        shared -> global by TMA stores, the loop axes past the cache's compute-at
        position the boxes (the two innermost one box per instruction)."""
        from .. import transforms
        return transforms.cache_before(self, memory_type, tma)

    @_traced
    def set_memory_type(self, memory_type: MemoryType | str) -> None:
        from .. import transforms
        transforms.set_memory_type(self, memory_type)

    @_traced
    def compute_at(self, consumer: TensorView, pos: int) -> None:
        """Compute this tensor inside the first `pos` loops of `consumer` (-1: all)."""
        from .. import transforms
        transforms.compute_at(self, consumer, pos)

    @_traced
    def inline_most(self) -> None:
        """Compute this tensor as deep inside its consumer's loops as is legal."""
        from .. import transforms
        transforms.inline_most(self)

    @_traced
    def circular_buffer(self, stages: int,
                        warp_specialize: ParallelType | str | None = None,
                        producer_registers: int | None = None) -> None:
        """Keep `stages` copies of this tensor so loads run ahead of their use.
        warp_specialize (TIDy, for a TMA cache): the loads run in a producer warp group
        of their own, one more along that thread index, handing stages over through
        mbarriers. producer_registers (with warp_specialize): the producer keeps that
        many registers a thread and gives the rest to the consumers (setmaxnreg)."""
        from .. import transforms
        transforms.circular_buffer(self, stages, warp_specialize, producer_registers)

    @_traced
    def swizzle(self, row: int) -> None:
        """XOR-swizzle this shared tile in 16-byte chunks: in each row of `row` elements of
        its buffer, chunk c is stored at chunk c ^ (row index % 8). Every access goes through
        the same map, so meaning is unchanged; 8 rows read column-wise hit 8 bank groups."""
        from .. import transforms
        transforms.swizzle(self, row)

    @_traced
    def pad_rows(self, row: int, pad: int = 1) -> None:
        """Pad this shared tile: after each row of `row` elements of its buffer, `pad`
        unused elements, so a column read by a warp spreads over the banks."""
        from .. import transforms
        transforms.pad_rows(self, row, pad)

    @_traced
    def promote_reuse(self) -> None:
        """Let this shared tensor's bytes alias shared tensors that are dead by the time it
        is first written (the matmul epilogue tile over the operand buffers)."""
        from .. import transforms
        transforms.promote_reuse(self)

    @_traced
    def serial_grid_reduction(self) -> None:
        """Reduce this tensor's reduction axis bound to a block index across CTAs in turn
        (serial split-K): a global semaphore orders them, partials live in a workspace."""
        from .. import transforms
        transforms.serial_grid_reduction(self)

    @_traced
    def parallel_grid_reduction(self) -> None:
        """Reduce this tensor's reduction axis bound to a block index across CTAs at once
        (split-K, the sum spread over the CTAs of a tile, in a fixed order): counters order
        them, partials and sums live in workspaces; the grid must be resident at once."""
        from .. import transforms
        transforms.parallel_grid_reduction(self)

    @_traced
    def atomic_grid_reduction(self) -> None:
        """Reduce this tensor's reduction axis bound to a block index across CTAs by atomic
        adds (split-K; opt-in: the sum's last bits may differ run to run): the CTAs add
        their partials into workspace sums, the last reads them; the grid must be resident
        at once."""
        from .. import transforms
        transforms.atomic_grid_reduction(self)

    @_traced
    def cluster_grid_reduction(self) -> None:
        """Reduce this tensor's reduction axis bound to blockIdx.z across the CTAs of a
        thread-block cluster (split-K on sm_90, at most 16 splits: a tile's CTAs are one
        cluster): partials in each CTA's shared memory, each CTA sums a run of the
        elements from its peers' in a fixed order and stores them; no workspace."""
        from .. import transforms
        transforms.cluster_grid_reduction(self)
