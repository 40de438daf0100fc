"""fuserir: a small fusion compiler for NVIDIA GPUs.

The front half lives here: the fusion IR (fuserir.ir), the operation builders
(fuserir.ops), the scheduling transforms (fuserir.transforms), the text DSL and its printer
(fuserir.dsl), the Python builder (FusionDefinition) and the numpy reference evaluator.
Lowering to kernel IR is in the `lowering` package, code generation in `codegen`.
"""

from . import dsl, ops
from .builder import FusionDefinition
from .dsl import parse, print_fusion
from .dtypes import DataType
from .errors import DslError, EvaluationError, FuserirError, FusionError, ScheduleError
from .ir import Fusion, IterKind, MemoryType, ParallelType, TensorView
from .reference import evaluate

__version__ = "0.1.0"

__all__ = [
    "DataType", "DslError", "FusionDefinition", "dsl", "EvaluationError", "FuserirError", "Fusion", "FusionError",
    "IterKind", "MemoryType", "ParallelType", "ScheduleError", "TensorView", "evaluate", "ops",
    "parse", "print_fusion",
]
