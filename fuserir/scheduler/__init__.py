"""Schedulers: the tensor-core matmul scheduler (matmul.py, the Hopper path in hopper.py)
and its heuristic (matmul_heuristic.py), and the automatic schedules for fusions without
one (auto.py: pointwise, reductions, normalizations)."""

from .matmul import MatmulParams, schedule_matmul
from .matmul_heuristic import matmul_heuristic

__all__ = ["MatmulParams", "matmul_heuristic", "schedule_matmul"]
