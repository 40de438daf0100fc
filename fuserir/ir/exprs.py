"""Expressions: the operations of a fusion, each writing one tensor.

Every expression knows how its output's root axes correspond to each tensor input's shape
axes (`root_map`). That correspondence is what compute_at replays transforms along and what
lowering will index producers by: the same index on both sides, unless `index_maps` gives
an axis an affine map (a slice reads x at start + step * i, a pad at i - left, clamped into
x's extent where the pad value stands instead). Matmul is one expression whose output domain is
[batch.., M, N, rK]: a multiply fused with a sum over K, so split-K is an ordinary split + rfactor.
"""

from dataclasses import dataclass

from .. import numerics, op_table
from .tensor import TensorView

# The elementwise ops a fusion can hold, by name (fuserir.op_table defines them)
UNARY_OPS = tuple(op_table.FUSION_UNARY)
BINARY_OPS = tuple(op_table.FUSION_BINARY)
REDUCTION_OPS = tuple(numerics.REDUCTIONS)
LAYOUTS = ("TT", "TN", "NT", "NN")


@dataclass(frozen=True)
class AxisMap:
    """How an expression reads a producer axis: at start + step * (the output's index),
    clamped into [0, extent) when `clamped` (a pad or cat reads there a valid element whose
    value it does not use: the read stays inside the producer). `start` is an extent (an
    integer, possibly negative, or a size expression); `step` a positive integer."""

    start: object = 0
    step: int = 1
    clamped: bool = False


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

    def index_maps(self, producer):
        """{producer shape axis: AxisMap} for the axes of `producer` (a tensor input) that
        are not read at the output's own index along the root map (see AxisMap)."""
        return {}

    def extents(self):
        """The extents the expression reads beyond its output's root (index-map starts,
        sizes as values): sizes a kernel computing it takes as parameters."""
        found = [v.value for v in self.inputs if getattr(v, "is_size", False)]
        for producer in self.tensor_inputs:
            found += [m.start for m in self.index_maps(producer).values()]
            found += [a.extent for a in producer.shape_axes]
        return found

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
    for TMA tensor copies (global -> shared, or shared -> global: a TMA store; a box per
    instruction)."""

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
    """out[.., m, n] = sum_k A[.., m, k] * B[.., k, n] in f32, with A's and B's last two
    axes stored per `layout`: TT A[M,K] B[K,N]; TN A[M,K] B[N,K]; NT A[K,M] B[K,N];
    NN A[K,M] B[N,K]. Axes before those are batch axes: the output's root is
    [batch.., M, N, rK], an operand's batch axes right-aligned with the output's (one
    with fewer is shared across the rest; fuserir.matmuls builds it)."""

    op = "matmul"

    def __init__(self, a, b, output, layout):
        super().__init__([a, b], output)
        self.layout = layout

    @property
    def batch_rank(self):
        """The number of batch axes of the output (0: a plain matmul)."""
        return len(self.output.root) - 3

    def _input_positions(self, index):
        # output root is [batch.., M, N, K]; the operand's own batch axes come first
        operand = self.inputs[index]
        own = operand.rank - 2
        skipped = self.batch_rank - own
        batch = [i - skipped if i >= skipped else None for i in range(self.batch_rank)]
        if index == 0:
            return batch + ([own, None, own + 1] if self.layout[0] == "T"
                            else [own + 1, None, own])
        return batch + ([None, own + 1, own] if self.layout[1] == "T"
                        else [None, own, own + 1])

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


class SliceOp(Expr):
    """out[.., i, ..] = x[.., start + step * i, ..] along each axis: the elements of x from
    start (included) to end (excluded) every step-th (torch's x[start:end:step], nvFuser's
    slice). Bounds are extents (integers or size expressions), each checked to lie in x's
    axis when the sizes are known (fuserir.ops.slice)."""

    op = "slice"

    def __init__(self, x, output, starts, ends, steps):
        super().__init__([x], output)
        self.starts, self.ends, self.steps = tuple(starts), tuple(ends), tuple(steps)

    def index_maps(self, producer):
        return {axis: AxisMap(start, step) for axis, start, step
                in zip(producer.shape_axes, self.starts, self.steps)
                if start != 0 or step != 1}

    def attributes(self):
        return (("start_indices", self.starts), ("end_indices", self.ends),
                ("strides", self.steps))


class PadOp(Expr):
    """x with `widths[d] = (before, after)` elements of `value` added around each axis d:
    out[.., i, ..] = x[.., i - before, ..] where that lies in x, else value (torch's
    F.pad with a constant). `pad_widths` is the flat list as given (pairs for the last axis
    first, as torch and nvFuser take them)."""

    op = "pad"

    def __init__(self, x, value, output, pad_widths, widths):
        super().__init__([x, value], output)
        self.pad_widths = tuple(pad_widths)
        self.widths = tuple(widths)

    def index_maps(self, producer):
        if producer is not self.inputs[0]:
            return {}
        return {axis: AxisMap(_negated(before), 1, True) for axis, (before, after)
                in zip(producer.shape_axes, self.widths) if before != 0 or after != 0}

    def regions(self):
        """[(start along the last axis, x or None: the pad value)], in order, where only the
        last axis is padded (else None): the vectorized pad's branches
        (lowering.indexing.vectors)."""
        if any(w != (0, 0) for w in self.widths[:-1]):
            return None
        from . import extent as ext
        before = self.widths[-1][0]
        x = self.inputs[0]
        return [(0, None), (before, x), (ext.add(before, x.shape_axes[-1].extent), None)]

    def attributes(self):
        return (("pad_widths", self.pad_widths),)


class CatOp(Expr):
    """The inputs joined along axis `dim` (torch.cat): out[.., i, ..] is input k's element
    at i - offsets[k] for the k with offsets[k] <= i < offsets[k + 1] (offsets: the sums of
    the extents before input k along dim). Each input is read clamped into its own extent,
    so computing every input at every element reads only elements that exist; the value
    of the one whose range holds i is kept."""

    op = "cat"

    def __init__(self, tensors, output, dim, offsets):
        super().__init__(tensors, output)
        self.dim = dim
        self.offsets = tuple(offsets)     # one per input, then the total

    def index_maps(self, producer):
        k = self.inputs.index(producer)
        return {producer.shape_axes[self.dim]: AxisMap(_negated(self.offsets[k]), 1, True)}

    def regions(self):
        """[(start along dim, the input read from there)], in order: where each input's
        range begins (the vectorized cat's branches, lowering.indexing.vectors)."""
        return list(zip(self.offsets, self.inputs))

    def attributes(self):
        return (("dim", self.dim),)


def view_chain(producer, dim):
    """[producer, .., a fusion input]: the unary ops, casts and slices (of step 1 along
    axis `dim`) from `producer` down to one fusion input, each tensor the only use of the
    one before and no output; None where `producer` is made otherwise. A cat, pad or
    slice along `dim` can compute such a chain on a vector of that fusion input loaded at
    once (the vectorized pointwise schedule does: row_chains)."""
    chain = [producer]
    while not chain[-1].is_input:
        t = chain[-1]
        e = t.definition
        if not isinstance(e, (UnaryOp, CastOp, SliceOp)) or t.is_output or \
                len(t.fusion.uses(t)) != 1 or len(e.tensor_inputs) != 1 or \
                (isinstance(e, SliceOp) and e.steps[dim] != 1):
            return None
        chain.append(e.tensor_inputs[0])
    return chain


def row_chains(tv):
    """[(start along tv's innermost axis, the view chain read from there, or None: a pad's
    value)] where tv is a cat or a pad along its innermost axis (CatOp.regions,
    PadOp.regions), or a slice of step 1 along the rows (one region), whose inputs are
    all view chains; else None. What a vectorized cat, pad or slice computes:
    the pointwise schedule's choice and lowering's (vector_select)."""
    e = tv.definition
    last = tv.rank - 1
    if isinstance(e, SliceOp) and tv.rank and e.steps[last] == 1:
        regions = [(0, e.inputs[0])]        # a slice of the rows: one region
    elif isinstance(e, PadOp) or (isinstance(e, CatOp) and e.dim == last):
        regions = e.regions()
    else:
        return None
    if regions is None:
        return None
    found = [(start, None if t is None else view_chain(t, last)) for start, t in regions]
    if any(t is not None and chain is None for (_, t), (_, chain) in zip(regions, found)):
        return None
    return found


class FullOp(Expr):
    """A tensor of `value` everywhere, of the output's shape and dtype (nvFuser's full): an
    expression with no tensor input."""

    op = "full"

    def __init__(self, value, output):
        super().__init__([value], output)

    def attributes(self):
        return (("shape", tuple(a.extent for a in self.output.root)),
                ("dtype", self.output.dtype))


def _negated(e):
    from . import extent as ext
    return ext.scale(e, -1)


class ReshapeOp(Expr):
    """x's elements, in row-major order, in another shape (torch.reshape, nvFuser's
    reshape): the output's root axes are x's axes, and its logical domain (its shape) is
    made of them by merges and splits, each group of root axes whose extents multiply to
    the product of a group of result extents merged into one axis, then split into those
    (fuserir.reshaping). Lowering replays them as it replays a schedule's."""

    op = "reshape"

    def __init__(self, x, output, shape):
        super().__init__([x], output)
        self.shape = tuple(shape)

    def attributes(self):
        return (("shape", self.shape),)
