"""What the DSL offers and what each parameter takes: the ops by name (exactly those of
fuserir.ops), and the kind of value each parameter of an op or scheduling method takes
by its Python name (a dtype, a list of axes, a bool, ...), with the test of a literal of
each kind. The parser (fuserir.dsl.parser) reads its calls' arguments by these tables.
"""

from .. import dtypes, ops
from ..ir.exprs import LAYOUTS
from ..ir.iterdomain import ParallelType
from ..ir.tensor import MemoryType

OPS = {name: getattr(ops, name) for name in (*ops.UNARY, *ops.BINARY, *ops.TERNARY)
       + ("where", "cast", "set", "broadcast", "size") + tuple(ops.MATMULS)
       + tuple(ops.REDUCTIONS) + tuple(ops.STATISTICS) + tuple(ops.STATES) + tuple(ops.VIEWS)
       + tuple(ops.POSITIONS) + tuple(ops.SLICING) + tuple(ops.FACTORIES)}

# The kind of value each parameter of an op or scheduling method takes, by its Python
# name; a parameter not listed takes an expression (a tensor or a number).
PARAMETER_KINDS = {
    "dtype": "dtype", "layout": "layout", "flags": "flags", "axes": "axes",
    "approximate": "string", "axis": "int", "pos": "int", "stages": "int",
    "factor": "factor", "inner": "bool", "async_copy": "bool", "ldmatrix": "bool",
    "tma": "bool", "warp_specialize": "parallel type", "producer_registers": "int",
    "row": "int", "pad": "int", "mapping": "map",
    "ptype": "parallel type", "memory_type": "memory type", "consumer": "tensor",
    "dims": "axes", "dim": "int", "dim0": "int", "dim1": "int", "broadcast_dims": "axes",
    "shape": "shape", "diagonal": "int", "keepdim": "bool", "correction": "int",
    "start_indices": "sizes", "end_indices": "sizes", "strides": "ints",
    "pad_widths": "sizes", "tensors": "tensors", "length": "size",
    "consumers": "tensor names",
}
CHOICES = {
    "dtype": (dtypes.DTYPE_NAMES + ("welford",), dtypes.from_name),   # cast's, a reduction's
    "tensor dtype": (dtypes.DTYPE_NAMES, dtypes.from_name),           # an input's
    "layout": (LAYOUTS, str),
    "parallel type": (tuple(p.value for p in ParallelType), ParallelType),
    "memory type": (tuple(m.value for m in MemoryType), MemoryType),
}


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# The constant arguments: kind -> (what the value must be, a test of the value).
CONSTANT_KINDS = {
    "int": ("an integer", is_int),
    "factor": ("an integer or the name of a run-time scalar", is_int),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "string": ("a string", lambda v: isinstance(v, str)),
    "flags": ("a list of true/false",
              lambda v: isinstance(v, list) and all(isinstance(f, bool) for f in v)),
    "axes": ("an integer or a list of integers",
             lambda v: is_int(v) or (isinstance(v, list) and all(map(is_int, v)))),
    "ints": ("a list of integers",
             lambda v: isinstance(v, list) and all(map(is_int, v))),
    "map": ("a map {old: new} of axis numbers",
            lambda v: isinstance(v, dict) and all(map(is_int, [*v, *v.values()]))),
}
# MatmulParams fields whose value is true/false, and those that are integers.
MATMUL_BOOL_FIELDS = ("use_smem_epilogue", "promote_prologue_smem_reuse")
MATMUL_INT_FIELDS = ("stages", "splitk_factor")
MATMUL_PER_OPERAND_FIELDS = ("async_gmem_load_operands",)    # true/false, or [A, B]
