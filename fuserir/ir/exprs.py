"""Expressions: the operations of a fusion, each writing one tensor.

Every expression knows how its output's root axes correspond to each tensor input's shape
axes (`root_map`). That correspondence is what compute_at replays transforms along and what
lowering will index producers by. Matmul is one expression whose output domain is
[M, N, rK]: a multiply fused with a sum over K, so split-K is an ordinary split + rfactor.
"""

from .. import op_table
from .tensor import TensorView

# The elementwise ops a fusion can hold, by name (fuserir.op_table defines them)
UNARY_OPS = tuple(op_table.FUSION_UNARY)
BINARY_OPS = tuple(op_table.FUSION_BINARY)
REDUCTION_OPS = ("sum", "max")
LAYOUTS = ("TT", "TN", "NT", "NN")


class Expr:
    op = None

    def __init__(self, inputs, output):
        self.inputs = list(inputs)
        self.output = output

    @property
    def outputs(self):
        return [self.output]

    @property
    def tensor_inputs(self):
        return [v for v in self.inputs if isinstance(v, TensorView)]

    def root_map(self, producer):
        """{output root axis: producer shape axis} for a tensor input `producer`."""
        positions = self._input_positions(self.inputs.index(producer))
        axes = producer.shape_axes
        return {out_axis: axes[p] for out_axis, p in zip(self.output.root, positions)
                if p is not None}

    def _input_positions(self, index):
        """For each output root axis, the position in input `index`'s shape axes (or None)."""
        return list(range(len(self.output.root)))

    def attributes(self):
        """The non-operand parameters, as (name, value) pairs, for printing and equality."""
        return ()

    def __str__(self):
        args = [str(v) for v in self.inputs]
        args += [f"{k}={_format_attribute(v)}" for k, v in self.attributes()]
        return f"{self.output} = {self.op}({', '.join(args)})"


def _format_attribute(value):
    """An attribute as the DSL writes it: [1, 2], true, f16."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_format_attribute(v) for v in value) + "]"
    return str(value)


class UnaryOp(Expr):
    def __init__(self, op, x, output, approximate="none"):
        super().__init__([x], output)
        self.op = op
        self.approximate = approximate

    def attributes(self):
        return (("approximate", self.approximate),) if self.op == "gelu" else ()


class BinaryOp(Expr):
    def __init__(self, op, a, b, output):
        super().__init__([a, b], output)
        self.op = op


class WhereOp(Expr):
    op = "where"

    def __init__(self, cond, a, b, output):
        super().__init__([cond, a, b], output)


class CastOp(Expr):
    op = "cast"

    def __init__(self, x, output):
        super().__init__([x], output)

    def attributes(self):
        return (("dtype", self.output.dtype),)


class LoadStoreOp(Expr):
    """A copy (`set`); caches are copies into another memory type. `async_copy` asks for
    cp.async (global -> shared), `ldmatrix` for ldmatrix (shared -> mma fragments), `tma`
    for TMA tensor copies (global -> shared, a box per instruction)."""

    op = "set"

    def __init__(self, x, output, async_copy=False, ldmatrix=False, tma=False):
        super().__init__([x], output)
        self.async_copy = async_copy
        self.ldmatrix = ldmatrix
        self.tma = tma

    def attributes(self):
        return tuple((name, True) for name in ("async_copy", "ldmatrix", "tma")
                     if getattr(self, name))


class BroadcastOp(Expr):
    op = "broadcast"

    def __init__(self, x, output, flags):
        super().__init__([x], output)
        self.flags = tuple(flags)

    def _input_positions(self, index):
        positions, p = [], 0
        for is_new in self.flags:
            positions.append(None if is_new else p)
            p += 0 if is_new else 1
        return positions

    def attributes(self):
        return (("flags", self.flags),)


class ReductionOp(Expr):
    """Reduce `x` over `axes` (positions in x's shape). The output's root keeps the reduced
    axes as reduction axes; its shape drops them. Accumulates in `accumulate_dtype`."""

    def __init__(self, op, x, output, axes):
        super().__init__([x], output)
        self.op = op
        self.axes = tuple(axes)

    def attributes(self):
        return (("axes", self.axes),)


class MatmulOp(Expr):
    """out[m, n] = sum_k A[m, k] * B[k, n] in f32, with A and B stored per `layout`:
    TT A[M,K] B[K,N]; TN A[M,K] B[N,K]; NT A[K,M] B[K,N]; NN A[K,M] B[N,K]."""

    op = "matmul"

    def __init__(self, a, b, output, layout):
        super().__init__([a, b], output)
        self.layout = layout

    def _input_positions(self, index):
        # output root is [M, N, K]
        if index == 0:
            return [0, None, 1] if self.layout[0] == "T" else [1, None, 0]
        return [None, 1, 0] if self.layout[1] == "T" else [None, 0, 1]

    def attributes(self):
        return (("layout", self.layout),)


class PermuteOp(Expr):
    """out's axis i is x's axis dims[i] (permute, transpose): the same elements, read in
    another axis order. A view: no copy of its own, indexing reads x where out's element
    lies."""

    op = "permute"

    def __init__(self, x, output, dims):
        super().__init__([x], output)
        self.dims = tuple(dims)

    def _input_positions(self, index):
        return list(self.dims)

    def attributes(self):
        return (("dims", self.dims),)


class SqueezeOp(Expr):
    """x without its axes `dims` (positions in x's shape), each of extent 1: out's axes
    are x's others, in order; the dropped ones are read at index 0."""

    op = "squeeze"

    def __init__(self, x, output, dims):
        super().__init__([x], output)
        self.dims = tuple(dims)

    def _input_positions(self, index):
        return [p for p in range(len(self.dims) + len(self.output.root))
                if p not in self.dims]

    def attributes(self):
        return (("dims", self.dims),)


class ExpandOp(Expr):
    """x with each axis of extent 1 (or broadcast) named in `expanded` stretched to out's
    extent there: out[.., i, ..] = x[.., 0, ..]. The other axes keep their extents. Axis
    for axis, as a pointwise op maps onto a broadcast operand (an axis of extent 1 is
    read at index 0)."""

    op = "expand"

    def __init__(self, x, output, expanded):
        super().__init__([x], output)
        self.expanded = tuple(expanded)

    def attributes(self):
        return (("shape", tuple(a.extent for a in self.output.root)),)


class AxisIndexOp(Expr):
    """Each element's index along x's axis `dim`, as an integer tensor of x's shape (x's
    values are not read: x gives the shape). What triu, tril and masks by position are
    made of."""

    op = "axis_index"

    def __init__(self, x, output, dim):
        super().__init__([x], output)
        self.dim = dim

    def attributes(self):
        return (("dim", self.dim),)
