"""Memory annotations: where a tensor lives and how its buffer is laid out and reused.

set_memory_type picks global, shared or local memory; circular_buffer keeps several
copies of a loaded tile so loads run ahead of their use; swizzle permutes a shared tile's
16-byte chunks against bank conflicts; promote_reuse lets a shared tile alias dead shared
bytes. They change no loop axis: lowering and codegen read the annotations.
"""

from ..errors import ScheduleError
from ..ir.exprs import LoadStoreOp
from ..ir.iterdomain import ParallelType
from ..ir.tensor import MemoryType
from .common import _memory, _not_input


def set_memory_type(tv, memory_type):
    mt = _memory("set_memory_type", memory_type)
    if (tv.is_input or tv.is_output) and mt is not MemoryType.global_:
        role = "input" if tv.is_input else "output"
        raise ScheduleError(f"set_memory_type: {tv.name} is a fusion {role} and stays in "
                            "global memory")
    tv.memory_type = mt


def circular_buffer(tv, stages):
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
    tv.circular_buffer_stages = stages


def swizzle(tv, row):
    _not_input("swizzle", tv)
    if tv.memory_type is not MemoryType.shared:
        raise ScheduleError(f"swizzle: {tv.name} is in {tv.memory_type} memory; only shared "
                            "tiles are swizzled (bank conflicts are a shared-memory matter)")
    if isinstance(row, bool) or not isinstance(row, int) or row < 1:
        raise ScheduleError(f"swizzle: row must be a positive number of elements, got "
                            f"{row!r} (tensor {tv.name})")
    if (row * tv.dtype.itemsize) % 128:
        raise ScheduleError(f"swizzle: a row of {row} x {tv.dtype} is "
                            f"{row * tv.dtype.itemsize} bytes; the XOR swizzle permutes 8 "
                            f"16-byte chunks, so a row must be a multiple of 128 bytes "
                            f"(tensor {tv.name})")
    tv.swizzle_row = row


def promote_reuse(tv):
    _not_input("promote_reuse", tv)
    if tv.memory_type is not MemoryType.shared:
        raise ScheduleError(f"promote_reuse: {tv.name} is in {tv.memory_type} memory; only "
                            "shared tensors reuse bytes")
    tv.reuse_shared = True
