"""Schedulers: the tensor-core matmul scheduler (matmul.py) and the automatic schedules
for fusions without one (auto.py: pointwise, reductions, normalizations)."""

from .matmul import MatmulParams, matmul_heuristic, schedule_matmul

__all__ = ["MatmulParams", "matmul_heuristic", "schedule_matmul"]
