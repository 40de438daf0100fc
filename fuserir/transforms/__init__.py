"""Scheduling transforms: the algorithms behind TensorView's scheduling methods.

They follow nvFuser's meaning (docs/dsl.md). Transforms reshape a tensor's loop
domain (split, merge, reorder), annotate it (parallelize, vectorize, circular_buffer,
memory type), or rewrite the graph without changing what it computes (rfactor,
cache_after, cache_before). compute_at makes a producer replay its consumer's transforms
so that the two share their outer loops.

Every illegal request raises ScheduleError naming the transform, the tensor and the axis,
so that a schedule that cannot be lowered is refused here rather than miscompiled later.

The package holds one module per kind of transform, over the shared checks in `common`:
  domain     split, merge, reorder
  parallel   parallelize, vectorize, serial_grid_reduction,
             parallel_grid_reduction, atomic_grid_reduction, cluster_grid_reduction
  rewrites   rfactor, cache_after, cache_before
  placement  compute_at, inline_most, max_inline_position
  memory     set_memory_type, circular_buffer, swizzle, pad_rows, promote_reuse
Every public transform is importable from here (`fuserir.transforms.split`), and its
docstring shows a loop domain before and after it, as a doctest.
"""

from .common import concrete_loop
from .domain import merge, reorder, split
from .memory import circular_buffer, pad_rows, promote_reuse, set_memory_type, swizzle
from .parallel import (atomic_grid_reduction, cluster_grid_reduction,
                       parallel_grid_reduction, parallelize, serial_grid_reduction, vectorize)
from .placement import compute_at, inline_most, max_inline_position
from .rewrites import cache_after, cache_before, rfactor

__all__ = [
    "cache_after", "cache_before", "circular_buffer", "compute_at", "concrete_loop",
    "inline_most", "max_inline_position", "merge", "pad_rows", "parallelize", "promote_reuse",
    "reorder",
    "parallel_grid_reduction", "atomic_grid_reduction", "cluster_grid_reduction", "rfactor",
    "serial_grid_reduction",
    "set_memory_type", "split", "swizzle", "vectorize",
]
