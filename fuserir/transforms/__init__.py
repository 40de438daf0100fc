"""Scheduling transforms (a package: the module is being split along its seams)."""

from .placement import (cache_after, cache_before, circular_buffer, compute_at, concrete_loop,
                        inline_most, max_inline_position, merge, parallelize, promote_reuse,
                        reorder, rfactor, serial_grid_reduction, set_memory_type, split,
                        swizzle, vectorize)
