"""fuserir: a small fusion compiler for NVIDIA GPUs.

The front half lives here: the fusion IR (fuserir.ir), the operation builders
(fuserir.ops), the scheduling transforms (fuserir.transforms), the text DSL and its printer
(fuserir.dsl), the Python builder (FusionDefinition) and the numpy reference evaluator.
Lowering to kernel IR is in the `lowering` package, code generation in `codegen`.

`fuserir.compile(fusion, backend="cuda" | "interp")` is the documented entry point, the
same function as `codegen.compile`: it lives in the driver, above every layer, so it is
re-exported lazily (PEP 562) and importing fuserir loads none of the layers above it
(docs/decisions.md; tests/test_layers.py lets only this `__getattr__` import upward).
So is GpuUnavailableError (codegen.errors, through the driver), what the cuda backend raises where the GPU
stack, the driver or a GPU is missing.
"""

from typing import Any

from . import dsl, ops
from .builder import FusionDefinition
from .dsl import parse, print_fusion
from .dtypes import DataType
from .errors import DslError, EvaluationError, FuserirError, FusionError, ScheduleError
from .ir import Fusion, IterKind, MemoryType, ParallelType, TensorView
from .reference import evaluate

__version__ = "0.1.0"

_FROM_DRIVER = ("compile", "GpuUnavailableError")

__all__ = [
    "DataType", "DslError", "FusionDefinition", "dsl", "EvaluationError", "FuserirError", "Fusion", "FusionError",
    "GpuUnavailableError", "IterKind", "MemoryType", "ParallelType", "ScheduleError", "TensorView", "compile", "evaluate",
    "ops", "parse", "print_fusion",
]


def __getattr__(name: str) -> Any:
    if name in _FROM_DRIVER:
        import driver           # the contract sits above the driver (see the header)
        return getattr(driver, name)
    raise AttributeError(f"module 'fuserir' has no attribute {name!r}")
