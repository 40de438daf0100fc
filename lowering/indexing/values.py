"""Element values for the indexing pass: a producer read at the element its consumer is
computing (through the expression's root map and index maps; global tensors by their
strides, buffers by their layouts), the value of a pointwise expression (operands
converted to the op's compute type, the result rounded to the output's), and the store of
a value into a tensor's element with what sync insertion and the predicates need to know
of it (StoreInfo).

It sits under lowering.passes.indexing, which lowers every placed expression with it,
beside lowering.indexing.vectors (the vector accesses built from the same values).
"""

from fuserir import dtypes, op_table
from fuserir.dtypes import DataType
from fuserir.ir.exprs import (AxisIndexOp, BinaryOp, BroadcastOp, CastOp, CatOp, ExpandOp,
                              FullOp, LoadStoreOp, PadOp, PermuteOp, ReshapeOp, SliceOp,
                              SqueezeOp, UnaryOp, WhereOp)
from fuserir.ir.tensor import Scalar

from .. import kir
from ..support.analysis import StoreInfo
from .buffers import element_index, global_index, tile_index


def convert(value, dtype):
    """`value` as `dtype` (16-bit floats convert to each other through f32)."""
    if value.dtype is dtype:
        return value
    halves = (DataType.f16, DataType.bf16)
    if value.dtype in halves and dtype in halves:
        value = kir.Cast(value, DataType.f32)
    return kir.Cast(value, dtype)


def load(ctx, expr, producer, consumer_index):
    """Read `producer` at the element the consumer (expr's output) is computing."""
    consumer = expr.output
    if ctx.inline_values and producer in ctx.inline_values:
        return ctx.inline_values[producer]   # a value vector_select computed in registers
    logical = ctx.producer_indices(expr, producer, consumer_index)
    for axis in producer.shape_axes:
        if axis.is_broadcast or axis not in logical or axis.extent == 1:
            logical[axis] = ctx.const(0)       # (an expand reads an axis of extent 1 at 0)
    buffer = ctx.buffers[producer]
    if buffer.memory is kir.Memory.global_:
        return kir.Load(buffer, global_index(ctx, producer, logical))
    index = tile_index(ctx, producer, logical)
    access = None
    if buffer.memory is kir.Memory.shared:
        access = kir.AccessInfo(producer.name, ctx.owner(consumer, is_write=False))
    return kir.Load(buffer, index, access)


def operand_value(ctx, expr, v, index, dtype):
    """Operand `v` of expr (a tensor read at the element, or a scalar) as `dtype`."""
    if isinstance(v, Scalar):
        if v.is_size:    # a size parameter of the kernel, rounded as a literal would be
            return convert(convert(ctx.extent(v.value), v.dtype), dtype)
        return kir.Const(v.value, dtype)
    return convert(load(ctx, expr, v, index), dtype)


def pointwise_value(ctx, expr, index):
    out = expr.output
    if isinstance(expr, UnaryOp):
        # the op table's kernel op, on operands converted as its kind says
        entry = op_table.UNARY[op_table.kernel_unary(expr.op, expr.approximate)]
        compute = op_table.fusion_types(entry, expr.inputs[0].dtype)[0].compute
        x = operand_value(ctx, expr, expr.inputs[0], index, compute)
        return convert(kir.UnOp(entry.name, x, op_table.result_type(entry, compute)),
                       out.dtype)
    if isinstance(expr, BinaryOp):
        a, b = expr.inputs
        entry = op_table.FUSION_BINARY[expr.op]
        compute = op_table.fusion_types(entry, dtypes.promote(a.dtype, b.dtype))[0].compute
        x = operand_value(ctx, expr, a, index, compute)
        y = operand_value(ctx, expr, b, index, compute)
        return convert(kir.BinOp(entry.name, x, y, op_table.result_type(entry, compute)),
                       out.dtype)
    if isinstance(expr, WhereOp):
        cond, a, b = expr.inputs
        compute = out.dtype.compute
        value = kir.Select(operand_value(ctx, expr, cond, index, DataType.bool),
                           operand_value(ctx, expr, a, index, compute),
                           operand_value(ctx, expr, b, index, compute), compute)
        return convert(value, out.dtype)
    if isinstance(expr, CastOp):
        return convert(load(ctx, expr, expr.inputs[0], index), out.dtype)
    if isinstance(expr, AxisIndexOp):          # the element's own index, not x's value
        axis = out.root[expr.dim]
        return convert(index.get(axis, ctx.const(0)) if not axis.is_broadcast
                       else ctx.const(0), out.dtype)
    if isinstance(expr, (LoadStoreOp, BroadcastOp, PermuteOp, SqueezeOp, ExpandOp, SliceOp,
                         ReshapeOp)):
        return load(ctx, expr, expr.inputs[0], index)   # a copy or a view: root_map says where
    if isinstance(expr, PadOp):       # x's element where it lies in x, else the pad value
        x, fill = expr.inputs
        inside = None
        for axis, x_axis, (before, after) in zip(out.root, x.shape_axes, expr.widths):
            if before == 0 and after == 0:
                continue
            i, start = index.get(axis, ctx.const(0)), ctx.extent(before)
            end = ctx.binop("add", start, ctx.extent(x_axis.extent))
            here = ctx.binop("and", ctx.binop("ge", i, start), ctx.binop("lt", i, end))
            inside = here if inside is None else ctx.binop("and", inside, here)
        compute = out.dtype.compute
        value = convert(load(ctx, expr, x, index), compute)
        if inside is not None:
            value = kir.Select(inside, value, operand_value(ctx, expr, fill, index, compute), compute)
        return convert(value, out.dtype)
    if isinstance(expr, CatOp):       # the input whose range along dim holds the index
        i = index.get(out.root[expr.dim], ctx.const(0))
        value = load(ctx, expr, expr.inputs[-1], index)
        for k in range(len(expr.inputs) - 2, -1, -1):
            value = kir.Select(ctx.binop("lt", i, ctx.extent(expr.offsets[k + 1])),
                               load(ctx, expr, expr.inputs[k], index), value, out.dtype)
        return value
    if isinstance(expr, FullOp):
        return convert(operand_value(ctx, expr, expr.inputs[0], index, out.dtype.compute), out.dtype)
    raise NotImplementedError(type(expr).__name__)   # reductions: lower_part, by role


def store(ctx, tv, value, index, role):
    """Write `value` to tv's element named by the root/loop `index`."""
    buffer = ctx.buffers[tv]
    if buffer.memory is kir.Memory.global_:
        target = global_index(ctx, tv, index)
    else:
        target = element_index(ctx, tv)
    access = None
    if buffer.memory is kir.Memory.shared:
        access = kir.AccessInfo(tv.name, ctx.owner(tv, is_write=True))
    s = kir.Store(buffer, target, convert(value, buffer.dtype), access)
    ctx.store_info[s] = StoreInfo(tv, role, index, buffer.memory)
    return s
