"""Schedulers: the matmul scheduler and heuristics (and later pointwise/reduction ones).

Empty until the tensor-core matmul issue lands; the DSL's `matmul(...)` schedule statement
raises a clear "not implemented yet" error until then.
"""
