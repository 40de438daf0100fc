"""The DSL printer: Fusion -> canonical DSL text that parses back to an equal fusion.

What is printed is the fusion as it was defined, followed by its schedule trace. The
definition cannot be read off the current graph, since rfactor, cache_after and
cache_before rewrite it (the matmul that defined `acc` may now define `acc_rf`), so the
Fusion keeps a copy of every expression as it was added outside a scheduling call
(`Fusion.definition_exprs`, in creation order). The printer prints those, then the trace
of recorded scheduling calls; parsing replays the definition and then the trace, which
rebuilds the same graph. A snapshot of the whole fusion would also do, but copying the
expressions alone keeps the live tensors, so the definition and the trace print the same
(current) names. The round trip is exact for fusions whose operations are all defined
before the first scheduling call, as in the DSL; an operation that reads a tensor the
schedule created cannot be printed at all.

Structural equality compares graphs in creation order (fuserir.ir.equality), and the
parser creates the expressions of a statement innermost first, left to right. So the
printer emits statements in creation order and nests an unnamed intermediate into its
only consumer only where that order comes out the same; where it would not, or where the
tensor is named, an output, used twice or referred to by the schedule, it becomes a
statement of its own. Unnamed ones keep their generated name (t3), which the parser
treats as unnamed again. Infix operators get the fewest parentheses that parse back to
the same tree. Nested expressions are printed by a walk that keeps no Python stack per
level (fuserir/dsl/walk.py), so a 1000-term sum prints as it parses.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import TYPE_CHECKING
from collections import Counter
from enum import Enum

from ..dtypes import DataType
from ..errors import FusionError
from ..ir import extent as ext
from ..ir.extent import Sym
from ..ir.exprs import (AxisIndexOp, BroadcastOp, CastOp, CatOp, ExpandOp, FullOp, MatmulOp,
                        PadOp, PermuteOp, ReductionOp, ReshapeOp, SliceOp, SqueezeOp,
                        UnaryOp)
from ..ir.tensor import Scalar, TensorView
from .walk import walk

if TYPE_CHECKING:
    from ..ir.fusion import Fusion

INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "==", "ne": "!=",
         "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
# Binding strength, loosest first, as in grammar.lark.
COMPARISON, SUM, PRODUCT, UNARY, ATOM = range(1, 6)
LEVEL = {"add": SUM, "sub": SUM, "mul": PRODUCT, "div": PRODUCT,
         **{op: COMPARISON for op in ("eq", "ne", "lt", "le", "gt", "ge")}}


def print_fusion(fusion: Fusion) -> str:
    """The fusion's definition and schedule as DSL text (ending in a newline)."""
    params = ", ".join(f"{t.name}: {t.dtype}[{', '.join(str(e) for e in t.shape)}]"
                       for t in fusion.inputs)
    lines = [f"fusion {fusion.name}({params}) {{"]
    lines += [f"  {statement}" for statement in _Definition(fusion).statements()]
    if fusion.outputs:
        lines.append(f"  output {', '.join(t.name for t in fusion.outputs)}")
    lines.append("}")
    if fusion.trace:
        lines += ["", f"schedule {fusion.name} {{"]
        lines += [f"  {_schedule_statement(entry)}" for entry in fusion.trace]
        lines.append("}")
    return "\n".join(lines) + "\n"


class _Definition:
    """Prints the expressions of a fusion as defined, as statements in creation order."""

    def __init__(self, fusion):
        self.exprs = fusion.definition_exprs
        self.producer = {e.output: e for e in self.exprs}
        for e in self.exprs:
            for v in e.tensor_inputs:
                if v not in self.producer and not v.is_input:
                    raise FusionError(f"fusion {fusion.name}: {e.op} defining {e.output.name} "
                                      f"reads {v.name}, which scheduling created; define "
                                      "every operation before scheduling to print it")
        uses = Counter(v for e in self.exprs for v in e.tensor_inputs)
        scheduled = _tensors_in(fusion.trace)
        required = {t for t in self.producer if t.is_named or t.is_output or uses[t] != 1
                    or t in scheduled}
        self.own_statement = _grow_until_in_order(self.exprs, required)
        # A size named like a tensor (an input `N: f32[M, N]`) reads back as the tensor:
        # such a size is written size(INPUT, AXIS) instead
        names = {t.name for t in fusion.inputs} | {e.output.name for e in self.exprs}
        self.shadowed = {}
        for t in reversed(fusion.inputs):
            for axis, extent in enumerate(t.shape):
                if isinstance(extent, Sym) and extent.name in names:
                    self.shadowed[extent.name] = f"size({t.name}, {axis})"

    def statements(self):
        return [f"{e.output.name} = {walk(e, self.expression)[0]}" for e in self.exprs
                if e.output in self.own_statement]

    def expression(self, expr):
        """A walk step (fuserir/dsl/walk.py: nesting may be deeper than Python's stack):
        (text, binding strength) of `expr` with its nested operands."""
        operands = expr.inputs
        if expr.op in INFIX:
            level = LEVEL[expr.op]
            left = yield from self.operand(operands[0],
                                           level + 1 if level == COMPARISON else level)
            right = yield from self.operand(operands[1], level + 1)
            return f"{left} {INFIX[expr.op]} {right}", level
        if expr.op == "neg":
            return f"-{(yield from self.operand(operands[0], ATOM))}", UNARY
        args = []
        if isinstance(expr, CatOp):          # cat([a, b], dim=1): the operands in a list
            for v in operands:
                args.append((yield from self.operand(v, COMPARISON)))
            return f"cat([{', '.join(args)}], dim={expr.dim})", ATOM
        if isinstance(expr, PadOp):          # pad(x, pad_widths=[...], value=v)
            x = yield from self.operand(operands[0], COMPARISON)
            value = yield from self.operand(operands[1], COMPARISON)
            return (f"pad({x}, pad_widths={_value(list(expr.pad_widths))}, value={value})",
                    ATOM)
        if isinstance(expr, FullOp):         # full(shape=[...], fill_value=v, dtype=d)
            value = yield from self.operand(operands[0], COMPARISON)
            shape = _value([a.extent for a in expr.output.root])
            return f"full(shape={shape}, fill_value={value}, dtype={expr.output.dtype})", ATOM
        for v in operands:
            args.append((yield from self.operand(v, COMPARISON)))
        return f"{expr.op}({', '.join(args + _attribute_arguments(expr))})", ATOM

    def operand(self, value, weakest):
        """An operand's text, parenthesized if it binds more loosely than `weakest`; a
        nested expression is yielded to the walk."""
        if isinstance(value, Scalar):
            text = _literal(value)
            if value.is_size:
                for name in ext.symbols(value.value) & set(self.shadowed):
                    text = re.sub(rf"\b{name}\b", self.shadowed[name], text)
            level = UNARY if text.startswith("-") else ATOM
        elif value.is_input or value in self.own_statement:
            text, level = value.name, ATOM
        else:
            text, level = yield self.producer[value]
        return f"({text})" if level < weakest else text


def _grow_until_in_order(exprs, required):
    """The tensors printed as statements of their own: `required`, plus as few others as
    it takes for nesting the rest to recreate `exprs` in their creation order."""
    own = set(required)
    while (tensor := _first_out_of_order(exprs, own)) is not None:
        own.add(tensor)
    return own


def _first_out_of_order(exprs, own):
    """Replay the order in which parsing creates the expressions, given which tensors are
    statements of their own; the oldest nested tensor that comes out of order, or None."""
    defined = {e.output for e in exprs}
    pending = []  # nested tensors created but not yet consumed, oldest first
    for e in exprs:
        nested = [v for v in e.tensor_inputs if v in defined and v not in own]
        if nested:
            if pending[-len(nested):] != nested:
                return pending[0]
            del pending[-len(nested):]
        if e.output not in own:
            pending.append(e.output)
        elif pending:  # a statement ends: nothing created before it may still be nested
            return pending[0]
    return None


def _attribute_arguments(expr):
    if isinstance(expr, CastOp):
        return [str(expr.output.dtype)]
    if isinstance(expr, BroadcastOp):
        return [_value(list(expr.flags))]
    if isinstance(expr, ReductionOp):
        return [f"axes={_value(list(expr.axes))}"]
    if isinstance(expr, MatmulOp):
        return [f"layout={expr.layout}"]
    if isinstance(expr, AxisIndexOp):
        return [f"dim={expr.dim}"]
    if isinstance(expr, (PermuteOp, SqueezeOp)):
        return [f"dims={_value(list(expr.dims))}"]
    if isinstance(expr, ExpandOp):
        return [f"shape=[{', '.join(str(a.extent) for a in expr.output.root)}]"]
    if isinstance(expr, (SliceOp, ReshapeOp)):
        return [f"{k}={_value(list(v))}" for k, v in expr.attributes()]
    if isinstance(expr, UnaryOp) and expr.op == "gelu" and expr.approximate != "none":
        return [f'approximate="{expr.approximate}"']
    return []


def _literal(scalar):
    """A literal's text (a size's: its name); its dtype comes back from the tensor
    operand beside it."""
    if scalar.is_size:     # a compound size in parentheses: (D / 2) reads back as one
        return str(scalar.value) if isinstance(scalar.value, Sym) else f"({scalar.value})"
    if scalar.dtype is DataType.bool:
        return "true" if scalar.value else "false"
    if not scalar.dtype.is_float:
        return str(int(scalar.value))
    value = float(scalar.value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


# -- the schedule --------------------------------------------------------------------------


def _schedule_statement(entry):
    args = [_value(a) for a in entry.args] + [f"{k}={_value(v)}"
                                              for k, v in entry.kwargs.items()]
    call = f"{entry.method}({', '.join(args)})"
    if entry.target is not None:
        call = f"{entry.target.name}.{call}"
    if isinstance(entry.result, TensorView):
        call = f"{entry.result.name} = {call}"
    return call


def _value(value):
    """An argument of a scheduling call (or an op attribute) as DSL text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, str):
        return value  # a name: a run-time scalar, a parallel or memory type
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (TensorView, Sym)):
        return value.name
    if isinstance(value, ext.EXTENTS):
        return str(value)      # a size expression: N - 2, D / 2
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_value(k)}: {_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"cannot print {value!r} as a DSL value")


def _tensors_in(trace):
    """Every tensor a schedule trace refers to: targets and tensor arguments."""
    found = set()

    def visit(value):
        if isinstance(value, TensorView):
            found.add(value)
        elif isinstance(value, dict):
            for item in (*value.keys(), *value.values()):
                visit(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)

    for entry in trace:
        visit([entry.target, *entry.args, *entry.kwargs.values()])
    return found
