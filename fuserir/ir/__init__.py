"""The fusion IR: values, axes, expressions and the Fusion graph that holds them."""

from .extent import CeilDiv, Mul, Sym
from .exprs import (BinaryOp, BroadcastOp, CastOp, Expr, LoadStoreOp, MatmulOp, ReductionOp,
                    UnaryOp, WhereOp)
from .fusion import Fusion, TraceEntry
from .iterdomain import IterDomain, IterKind, Merge, ParallelType, Split
from .tensor import MemoryType, Scalar, TensorView, Val

__all__ = [
    "BinaryOp", "BroadcastOp", "CastOp", "CeilDiv", "Expr", "Fusion", "IterDomain",
    "IterKind", "LoadStoreOp", "MatmulOp", "MemoryType", "Merge", "Mul", "ParallelType",
    "ReductionOp", "Scalar", "Split", "Sym", "TensorView", "TraceEntry", "UnaryOp", "Val",
    "WhereOp",
]
