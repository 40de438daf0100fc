"""GPU benchmarks of generated kernels (pointwise.py, reduction.py); method in docs/perf.md."""
