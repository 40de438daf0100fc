"""Kernel IR: what lowering produces and both backends consume.

A Kernel is a statement tree (loops, ifs, allocations, stores, barriers) over typed
scalar expressions (constants, variables, thread/block indices, loads, arithmetic). It is
explicitly typed: arithmetic nodes carry the dtype they compute in, and lowering inserts
every conversion as a Cast, so the CUDA emitter and the interpreter never guess a type.
Thread- and block-parallel axes are not loops: they are index expressions of
threadIdx/blockIdx, guarded by predicates where extents differ.

Shared-memory accesses carry an AccessInfo saying which tensor they touch and which
thread owns each element, so sync insertion and the hazard verifier can reason about
them; every Barrier carries the reasons it exists.

The package, one module per part, each name available as `kir.<name>`:

    expressions   scalar expressions (their operators' meaning: fuserir.op_table)
    statements    buffers, parameters, access provenance, sync reasons, statements, Kernel
    hopper        sm_90 statements: wgmma, TMA and tensor maps, mbarriers, stmatrix,
                  proxy fences, named barriers, setmaxnreg
    traversal     walk, expressions, walk_expr, relabel, substitute, copy_stmt,
                  retag_accesses, names and argument keys
    printer       the text `fuserir dump --stage kernel` shows
    evaluate      values of scalar expressions: one thread (launch time), many lanes
                  (LaneEvaluator: the interpreter, the verifiers); shared-memory bytes
    effects       what a statement does to memory and to other threads (Stmt.effects()
                  returns these records) and the questions the checkers ask of them
    visit         the visitors and mutators the passes subclass (imported as
                  lowering.kir.visit, not re-exported)
"""

from .expressions import (ScalarExpr, Const, Var, name_key, SpecialKind, Special,
                          BINARY_OPS, COMPARISONS, UNARY_OPS, BinOp, UnOp, Select, Cast,
                          Load, ShuffleXor)
from .statements import (Memory, Buffer, TensorParam, ScalarParam, AccessInfo, HazardKind,
                         SyncReason, Stmt, Allocate, Store, ForLoop, IfThenElse, Barrier,
                         Comment, LdMatrix, Mma, CpAsync, CpAsyncCommit, CpAsyncWait,
                         Workspace, Fence, SemWait, SemRelease, SemArrive, AtomicAdd, ExprStmt,
                         LaunchConfig,
                         Kernel)
from .hopper import *  # noqa: F401,F403 (hopper.__all__: an sm_90 statement is exported there)
from . import effects
from .traversal import (arg_name, scalar_args, walk, expressions, relabel, substitute,
                        copy_stmt, retag_accesses, walk_expr)
from .expressions import format_expr
from .printer import format_stmt, format_stmts, format_kernel
from .evaluate import (LaneEvaluator, evaluate_lanes, evaluate_scalar, lane_constant,
                       shared_bytes)
