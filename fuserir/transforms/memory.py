"""Memory annotations: where a tensor lives and how its buffer is laid out and reused.

set_memory_type picks global, shared or local memory; circular_buffer keeps several
copies of a loaded tile so loads run ahead of their use; swizzle permutes a shared tile's
16-byte chunks and pad_rows pads its rows, both against bank conflicts; promote_reuse lets
a shared tile alias dead shared bytes. They change no loop axis: lowering and codegen read the annotations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ScheduleError
from ..instructions import SWIZZLE_MODE_OF_ROW_BYTES
from ..ir.exprs import LoadStoreOp
from ..ir.iterdomain import ParallelType
from ..ir.tensor import MemoryType
from .common import _memory, _not_input

if TYPE_CHECKING:
    from ..ir.tensor import TensorView


def set_memory_type(tv: TensorView, memory_type: MemoryType | str) -> None:
    """Put `tv` in `memory_type` (TensorView.set_memory_type).

    Intermediates default to local. A local buffer drops the thread and block axes, a shared
    one keeps the thread axes, a global one keeps them all.

      memory_type  a MemoryType or its name: "global", "shared" or "local"

    Raises ScheduleError if the memory type is unknown, or tv is a fusion input or output
    and the memory type is not global.

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(x: f32[M, N]) { t = exp(x)  y = t * 2  output y }")
    >>> t = f.tensor("t")
    >>> print(t.describe())
    t: f32[M, N] local loop=[i{M} i{N}]
    >>> t.set_memory_type("shared")
    >>> print(t.describe())
    t: f32[M, N] shared loop=[i{M} i{N}]
    >>> f.tensor("y").set_memory_type("shared")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: set_memory_type: y is a fusion output and stays in global
        memory
    """
    mt = _memory("set_memory_type", memory_type)
    if (tv.is_input or tv.is_output) and mt is not MemoryType.global_:
        role = "input" if tv.is_input else "output"
        raise ScheduleError(f"set_memory_type: {tv.name} is a fusion {role} and stays in "
                            "global memory")
    tv.memory_type = mt


def circular_buffer(tv: TensorView, stages: int,
                    warp_specialize: ParallelType | str | None = None,
                    producer_registers: int | None = None) -> None:
    """Keep `stages` copies of the loaded tensor `tv` so loads run ahead of their use.

    TensorView.circular_buffer. Lowering pipelines a circular buffer of async copies
    (cache_after(shared, async_copy=True); the circular_buffer pass): a prologue of stages-1
    tiles, then in the loop a wait and the prefetch of the tile stages-1 iterations ahead.
    A TMA cache (cache_after(shared, tma=True)) is warp-specialized instead: a producer
    warp group of its own loads every tile, stages ahead, and hands each stage to the
    consumers and back through a pair of mbarriers. So may a plain shared copy be (its
    128 threads copy each tile element by element: the path for operands TMA cannot
    read).

      stages           an integer >= 2
      warp_specialize  for a TMA cache or a plain shared copy, the thread index (TIDy)
                       along which the producer warp group is added, after the
                       consumers' (TIDx: the 128 threads of a warp group)
      producer_registers  with warp_specialize: the producer's registers a thread
                       (a multiple of 8 from 24 to 256); the kernel is bounded to its
                       block (__launch_bounds__) and the producer gives its other
                       registers to the consumer warp groups (setmaxnreg): lowering
                       computes their share

    Raises ScheduleError if tv is a fusion input, stages is not an integer >= 2, tv is not
    defined by a copy (set, or a cache_after/cache_before cache), lives in global memory, or
    is not computed inside a serial or unrolled loop of extent other than 1; or if
    warp_specialize is given for a cp.async copy or one outside shared memory, or is not
    TIDy, or a TMA cache has no warp_specialize; or if producer_registers is given
    without warp_specialize or is not a multiple of 8 from 24 to 256.

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(A: f16[M, K], B: f16[K, N]) {"
    ...                   "  acc = matmul(A, B)  output acc }")
    >>> acc = f.tensor("acc")
    >>> acc.split(2, 32)
    >>> As = f.tensor("A").cache_after("shared", async_copy=True)
    >>> As.circular_buffer(3)  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: circular_buffer: A_cache is not computed inside a serial loop
        (compute-at position 0); compute_at it inside one first
    >>> As.compute_at(acc, 3)
    >>> print(As.describe())
    A_cache: f16[M, K] shared loop=[i{M} b{1} i{ceildiv(K, 32)} i{32}] compute_at=3
    >>> As.circular_buffer(3)
    >>> print(As.describe())
    A_cache: f16[M, K] shared loop=[i{M} b{1} i{ceildiv(K, 32)} i{32}] compute_at=3 stages=3
    """
    _not_input("circular_buffer", tv)
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 2:
        raise ScheduleError(f"circular_buffer: stages must be an integer >= 2, got {stages!r} "
                            f"(tensor {tv.name})")
    if not isinstance(tv.definition, LoadStoreOp):
        raise ScheduleError(f"circular_buffer: {tv.name} is not a copy; only loads made by "
                            "cache_after/cache_before are circular-buffered")
    if tv.memory_type is MemoryType.global_:
        raise ScheduleError(f"circular_buffer: {tv.name} is in global memory; circular "
                            "buffers live in shared or local memory")
    pos = tv.compute_at_pos or 0
    serial = [a for a in tv.loop[:pos] if a.parallel in (ParallelType.serial,
                                                         ParallelType.unroll)
              and a.extent != 1]
    if not serial:
        raise ScheduleError(f"circular_buffer: {tv.name} is not computed inside a serial loop "
                            f"(compute-at position {pos}); compute_at it inside one first")
    tma = tv.definition.tma
    if warp_specialize is not None:
        try:
            ptype = ParallelType(warp_specialize)
        except ValueError:
            ptype = None
        if ptype is not ParallelType.TIDy:
            raise ScheduleError(f"circular_buffer: warp_specialize={warp_specialize!r}: the "
                                "producer warp group is added along TIDy (tensor "
                                f"{tv.name})")
        if tv.definition.async_copy or tv.memory_type is not MemoryType.shared:
            raise ScheduleError(f"circular_buffer: {tv.name} is not a TMA copy or a plain "
                                "copy into shared memory; only those (cache_after(shared, "
                                "tma=True), cache_after(shared)) are loaded by a producer "
                                "warp group")
        warp_specialize = ptype
    elif tma:
        raise ScheduleError(f"circular_buffer: {tv.name} is a TMA copy: its loads run in a "
                            "producer warp group (give warp_specialize=TIDy)")
    if producer_registers is not None:
        if warp_specialize is None:
            raise ScheduleError(f"circular_buffer: producer_registers={producer_registers!r} "
                                "needs a producer warp group (warp_specialize=TIDy) "
                                f"(tensor {tv.name})")
        if isinstance(producer_registers, bool) or not isinstance(producer_registers, int) \
                or not 24 <= producer_registers <= 256 or producer_registers % 8:
            raise ScheduleError(f"circular_buffer: producer_registers={producer_registers!r}"
                                " is not a multiple of 8 from 24 to 256 (setmaxnreg's "
                                f"register counts) (tensor {tv.name})")
    tv.circular_buffer_stages = stages
    tv.warp_specialized = warp_specialize
    tv.producer_registers = producer_registers


def swizzle(tv: TensorView, row: int) -> None:
    """XOR-swizzle the shared tile `tv` in 16-byte chunks (TensorView.swizzle).

    In each row of `row` elements of tv's buffer, chunk c is stored at chunk
    c ^ ((row index / p) % n), n the row's chunks (at most 8) and p = 128 / the row's
    bytes (1 for rows of 128 bytes or more): 8 rows of 128 bytes, 4 pairs of rows of 64
    bytes, 2 quads of rows of 32 bytes. Every access goes through the same map, so the
    meaning is unchanged; 8 rows read down a column (ldmatrix) hit different bank groups.
    On a tile that starts on a 1024-byte boundary, rows of 128, 64 or 32 bytes are
    exactly Hopper's 128B, 64B and 32B swizzle modes (TMA boxes, wgmma descriptors).

      row     elements per row of the buffer: 32 or 64 bytes, or a multiple of 128

    Raises ScheduleError if tv is a fusion input or not in shared memory, or row is not a
    positive integer of 32 or 64 bytes or a multiple of 128.

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(x: f16[M, 64]) { y = relu(x)  output y }")
    >>> xs = f.tensor("x").cache_after("shared")
    >>> print(xs.describe())
    x_cache: f16[M, 64] shared loop=[i{M} i{64}]
    >>> xs.swizzle(64)
    >>> print(xs.describe())
    x_cache: f16[M, 64] shared loop=[i{M} i{64}] swizzle=64
    >>> xs.swizzle(16)
    >>> print(xs.describe())
    x_cache: f16[M, 64] shared loop=[i{M} i{64}] swizzle=16
    >>> xs.swizzle(24)  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: swizzle: a row of 24 x f16 is 48 bytes; the XOR swizzle
        permutes the 16-byte chunks of rows of 32 or 64 bytes or a multiple of 128 (tensor
        x_cache)
    """
    _not_input("swizzle", tv)
    if tv.memory_type is not MemoryType.shared:
        raise ScheduleError(f"swizzle: {tv.name} is in {tv.memory_type} memory; only shared "
                            "tiles are swizzled (bank conflicts are a shared-memory matter)")
    if isinstance(row, bool) or not isinstance(row, int) or row < 1:
        raise ScheduleError(f"swizzle: row must be a positive number of elements, got "
                            f"{row!r} (tensor {tv.name})")
    if tv.row_padding is not None:
        raise ScheduleError(f"swizzle: {tv.name} is padded (pad_rows); a tile is either "
                            "padded or swizzled")
    row_bytes = row * tv.dtype.itemsize
    if row_bytes not in SWIZZLE_MODE_OF_ROW_BYTES and row_bytes % 128:
        raise ScheduleError(f"swizzle: a row of {row} x {tv.dtype} is {row_bytes} bytes; the "
                            f"XOR swizzle permutes the 16-byte chunks of rows of 32 or 64 "
                            f"bytes or a multiple of 128 (tensor {tv.name})")
    tv.swizzle_row = row


def pad_rows(tv: TensorView, row: int, pad: int = 1) -> None:
    """Pad the shared tile `tv`: after each row of `row` elements, `pad` unused elements.

    TensorView.pad_rows. Element i of tv's buffer is stored at i + (i / row) * pad (the
    buffer grows by as much). Every access goes through the same map, so the meaning is
    unchanged; with rows of 32 4-byte elements and pad 1, a warp reading down a column of
    32 rows (a transpose through shared memory) hits 32 different banks.

      row     elements per row of the buffer: a positive integer
      pad     elements of padding after each row: a positive integer

    Raises ScheduleError if tv is a fusion input, not in shared memory, swizzled, a TMA
    copy (the hardware lays out its box), or row or pad is not a positive integer.

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(x: f32[32, M]) { y = relu(x)  output y }")
    >>> xs = f.tensor("x").cache_after("shared")
    >>> print(xs.describe())
    x_cache: f32[32, M] shared loop=[i{32} i{M}]
    >>> xs.pad_rows(32)
    >>> print(xs.describe())
    x_cache: f32[32, M] shared loop=[i{32} i{M}] pad=32+1
    >>> xs.pad_rows(32, 0)  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: pad_rows: pad must be a positive number of elements, got
        0 (tensor x_cache)
    """
    _not_input("pad_rows", tv)
    if tv.memory_type is not MemoryType.shared:
        raise ScheduleError(f"pad_rows: {tv.name} is in {tv.memory_type} memory; only shared "
                            "tiles are padded (bank conflicts are a shared-memory matter)")
    if tv.swizzle_row is not None:
        raise ScheduleError(f"pad_rows: {tv.name} is swizzled; a tile is either padded or "
                            "swizzled")
    if isinstance(tv.definition, LoadStoreOp) and tv.definition.tma:
        raise ScheduleError(f"pad_rows: {tv.name} is a TMA copy; the hardware lays out its "
                            "box, unpadded")
    for name, value in (("row", row), ("pad", pad)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ScheduleError(f"pad_rows: {name} must be a positive number of elements, "
                                f"got {value!r} (tensor {tv.name})")
    tv.row_padding = (row, pad)


def promote_reuse(tv: TensorView) -> None:
    """Let the shared tensor `tv` reuse the bytes of shared tensors dead by its first write.

    TensorView.promote_reuse: the matmul epilogue tile over the operand buffers (the
    reuse_shared pass). Sync insertion sees the aliasing: copies that may still be in flight
    into those bytes are drained before the first write.

    Raises ScheduleError if tv is a fusion input or not in shared memory.

    >>> import fuserir
    >>> f = fuserir.parse("fusion f(x: f16[M, 64]) { y = relu(x)  output y }")
    >>> xs = f.tensor("x").cache_after("shared")
    >>> print(xs.describe())
    x_cache: f16[M, 64] shared loop=[i{M} i{64}]
    >>> xs.promote_reuse()
    >>> print(xs.describe())
    x_cache: f16[M, 64] shared loop=[i{M} i{64}] reuse
    >>> f.tensor("y").promote_reuse()  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
        ...
    fuserir.errors.ScheduleError: promote_reuse: y is in global memory; only shared tensors
        reuse bytes
    """
    _not_input("promote_reuse", tv)
    if tv.memory_type is not MemoryType.shared:
        raise ScheduleError(f"promote_reuse: {tv.name} is in {tv.memory_type} memory; only "
                            "shared tensors reuse bytes")
    tv.reuse_shared = True
