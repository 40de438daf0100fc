"""The DSL parser: text -> Fusion, with the file's schedule blocks applied.

lark turns the text into a syntax tree (grammar.lark, LALR; fuserir/dsl/syntax.py turns its
errors into located ones); this module then walks the tree and builds each fusion through
the same calls a Python user makes: Fusion.new_input, the builders of fuserir.ops,
Fusion.rename, Fusion.add_output and the TensorView scheduling methods. Building through
the public API is what makes a parsed fusion and a Python-built one identical, and lets the
IR's own checks (types, shapes, legal transforms) do the validating. The parser adds what
only it knows: where. Every problem, from a stray character to an illegal split, surfaces
as one DslError located at file:line:col with the offending line and a caret, never as a
traceback from lark or the IR.

Blocks and statements nest a fixed few levels and are visited directly. Expressions and
literal arguments nest as deep as the text does, so they are walked without recursion
(fuserir/dsl/walk.py): each step is a generator that yields its operands, innermost first
and left to right, which is the order in which the ops are created and structural equality
compares them.

The grammar knows no names; this module decides what a name means from where it stands:
a tensor in an expression, a dtype as cast's second argument, a parallel type as
parallelize's. Ops and scheduling methods are looked up by name and their parameters read
from the Python signatures, so the DSL offers exactly what fuserir.ops and TensorView
offer, under the same keyword names (fuserir/dsl/parameters.py: the ops by name, and the
kind of value each parameter takes).

Names of the form t<digits> (the names fuserir.ops gives unnamed intermediates) stay
unnamed when a fusion statement assigns them. The printer writes an unnamed intermediate
as a statement of its own under that name when nesting cannot express it, and reading the
text back must give the same fusion, with the intermediate still compared by position.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import math
import re
import os
import sys

from .. import dtypes, ops
from ..errors import FusionError, LiteralError, ScheduleError
from ..ir.fusion import Fusion
from ..ir import extent as ext
from ..ir.extent import Sym
from ..ir.tensor import Scalar, TensorView
from .parameters import (CHOICES, CONSTANT_KINDS, MATMUL_BOOL_FIELDS, MATMUL_INT_FIELDS,
                         MATMUL_PER_OPERAND_FIELDS, OPS, PARAMETER_KINDS, is_int, is_number)
from .syntax import Source, read_file, syntax_tree
from .walk import run, walk

# Arithmetic on sizes folds into a size (`D / 2`, `N - 1`: / rounds down), in bounds and
# wherever a size is a value
SIZE_ARITHMETIC = {"+": ext.add, "-": ext.sub, "*": None, "/": ext.floordiv}
INFIX = {"+": "add", "-": "sub", "*": "mul", "/": "div", "==": "eq", "!=": "ne",
         "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
SCHEDULE_METHODS = ("split", "merge", "reorder", "parallelize", "vectorize", "rfactor",
                    "cache_after", "cache_before", "set_memory_type", "compute_at",
                    "inline_most", "circular_buffer", "swizzle", "pad_rows", "promote_reuse",
                    "serial_grid_reduction", "parallel_grid_reduction",
                    "atomic_grid_reduction", "cluster_grid_reduction")
SCHEDULERS = ("matmul", "scalar")
ANONYMOUS_NAME = re.compile(r"t\d+")  # how fuserir.ops names unnamed tensors
# Words the grammar gives a meaning of its own: a tensor so named could never be read.
RESERVED_NAMES = frozenset({"true", "false", "inf", "nan", "output", "fusion", "schedule"})
INT64_MAX = 2 ** 63 - 1  # integers in a schedule or a shape: sizes, factors, axes



def parse(text: str, filename: str = "<string>") -> Fusion | dict[str, Fusion]:
    """Parse DSL text: the Fusion it defines, or {name: Fusion} when it defines several."""
    source = Source(text, filename)
    fusions = _Builder(source).build(syntax_tree(text, source))
    return next(iter(fusions.values())) if len(fusions) == 1 else fusions


def parse_file(path: str | os.PathLike[str]) -> Fusion | dict[str, Fusion]:
    """Parse the DSL file at `path` (UTF-8); errors name it as their file."""
    return parse(read_file(path), filename=str(path))


# -- literals ------------------------------------------------------------------------------

_F64_MAX_DIGITS = len(str(int(sys.float_info.max)))  # 309


def _shown(text, limit=40):
    """A literal's text as messages show it: a very long one shortened."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:20]}...{text[-8:]} ({len(text)} characters)"


def _position(node):
    """(line, column) of a token, a tree or a tree's meta."""
    meta = getattr(node, "meta", node)
    return meta.line, meta.column


def _suggestion(name, candidates):
    close = difflib.get_close_matches(str(name), list(candidates), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


_NOT_CONSTANT = object()  # what `constant` makes of an expression that is not a literal


def _tensors(fusion):
    """The fusion's tensors in creation order (Fusion.tensors sorts them topologically,
    which costs a sort per call: too slow to call per statement of a long program)."""
    return [n for n in fusion.graph.nodes if isinstance(n, TensorView)]


class _Builder:
    """Builds every fusion of a file, then applies the file's schedule blocks in order.

    `statement` dispatches a block or statement node to the method named after its grammar
    rule. Expressions are walked by `value` (a TensorView or a Python number), literal
    arguments by `constant`; both run the generator steps named `_<rule>`.
    """

    def __init__(self, source):
        self.source = source
        self.fusions = {}       # name -> Fusion, in file order
        self.scopes = {}        # fusion name -> {name: tensor} its statements bound
        self.fusion = None      # the fusion being built or scheduled
        self.tuple_call = None  # the call node whose tensors a statement assigns to names
        self.scope = None       # its scope

    def error(self, message, node):
        return self.source.error(message, *_position(node))

    @contextlib.contextmanager
    def located(self, node, literals=None):
        """Re-raise the IR's FusionError/ScheduleError as a DslError located at `node`, or
        a bad literal's error at the literal (`literals`: operand name -> its node)."""
        try:
            yield
        except LiteralError as error:
            raise self.error(str(error), (literals or {}).get(error.argument, node)) from error
        except (FusionError, ScheduleError) as error:
            raise self.error(str(error), node) from error

    def statement(self, node):
        return getattr(self, node.data)(node.meta, *node.children)

    def build(self, tree):
        # Fusions first: a schedule block may come before the fusion it schedules.
        for kind, duplicate in (("fusion_block", "duplicate fusion"),
                                ("schedule_block", "duplicate schedule for")):
            first_lines = {}
            for item in tree.children:
                if item.data != kind:
                    continue
                name = item.children[0]
                if name in first_lines:
                    raise self.error(f"{duplicate} '{name}' (first at line "
                                     f"{first_lines[name]})", name)
                first_lines[name] = name.line
                self.statement(item)
        if not self.fusions:
            raise self.source.error("no fusion defined; expected `fusion NAME(...) { ... }`",
                                    1, 1)
        return self.fusions

    # -- fusion blocks ---------------------------------------------------------------------
    def fusion_block(self, meta, name, *items):
        self.fusion = self.fusions[str(name)] = Fusion(str(name))
        self.scope = self.scopes[str(name)] = {}
        for item in items:
            self.statement(item)
        if not self.fusion.outputs:
            raise self.error(f"fusion '{name}' has no outputs; add `output NAME`", name)

    def check_not_reserved(self, name):
        if str(name) in RESERVED_NAMES:
            raise self.error(f"'{name}' is a reserved word and cannot name a tensor", name)

    def param(self, meta, name, dtype_name, *dims):
        self.check_not_reserved(name)
        if name in self.scope:
            raise self.error(f"duplicate input '{name}'", name)
        dtype = self.choice("tensor dtype", dtype_name, "dtype")
        for d in dims:
            if d.type != "INT" and str(d) in RESERVED_NAMES:
                raise self.error(f"input {name}: '{d}' is a reserved word and cannot name a "
                                 "size", d)
        shape = [self.int64(d, f"input {name}: dimension") if d.type == "INT" else str(d)
                 for d in dims]
        with self.located(name):
            self.scope[str(name)] = self.fusion.new_input(str(name), dtype, shape)

    def assign(self, meta, *names_and_expr):
        *names, expr = names_and_expr
        for i, name in enumerate(names):
            if name in self.scope or name in names[:i]:
                if name in self.scope and self.scope[name].is_input:
                    raise self.error(f"'{name}' is an input of fusion {self.fusion.name} "
                                     "and cannot be redefined", name)
                raise self.error(f"duplicate name '{name}'", name)
        if expr.data == "name":
            other = expr.children[0]
            raise self.error(f"'{names[0]} = {other}' would only rename {other}; write "
                             f"'{names[0]} = set({other})' to copy it", expr)
        value = self.value(expr, several=len(names))
        values = value if isinstance(value, tuple) else (value,)
        for name, v in zip(names, values):
            if not isinstance(v, TensorView):
                raise self.error(f"'{name}' must be computed from a tensor, not a constant",
                                 expr)
            self.give_name(v, name, named=not ANONYMOUS_NAME.fullmatch(name))

    def output(self, meta, *names):
        for name in names:
            with self.located(name):
                self.fusion.add_output(self.scoped_tensor(name))

    def give_name(self, tv, name, named):
        """Rename `tv` and bind it in the scope. An unnamed intermediate nested in an
        expression that happens to hold the name (t3, say) yields it: its name is no one's."""
        self.check_not_reserved(name)
        for other in _tensors(self.fusion):
            if other.name == name and other is not tv:
                if other.is_named or other in self.scope.values():
                    raise self.error(f"duplicate name '{name}'", name)
                self.fusion.rename(other, self.anonymous_name(), named=False)
        with self.located(name):
            self.fusion.rename(tv, str(name), named=named)
        self.scope[str(name)] = tv

    def anonymous_name(self):
        taken = {t.name for t in _tensors(self.fusion)}
        serial = len(taken)
        while f"t{serial}" in taken:
            serial += 1
        return f"t{serial}"

    def scoped_tensor(self, name):
        """A tensor the fusion's inputs or statements named, by name."""
        if name not in self.scope:
            raise self.error(f"unknown tensor '{name}'{_suggestion(name, self.scope)}", name)
        return self.scope[name]

    # -- literals --------------------------------------------------------------------------
    def number(self, node):
        """The value of an integer or real literal node. One that every dtype would make
        infinite (1e400) or 0 (1e-400) is an error here; ops refuse one that the dtype it
        takes cannot hold (fuserir.ops._literal)."""
        token = node.children[0]
        text = str(token)
        if node.data == "integer":  # int() of a very long text is slow, so count first
            fits = len(text.lstrip("0")) <= _F64_MAX_DIGITS and int(text) <= sys.float_info.max
            value = int(text) if fits else math.inf
        else:
            value = float(text)
        if math.isinf(value):
            raise self.error(f"literal {_shown(text)} is out of range for every dtype (f64, "
                             f"the widest, holds at most {sys.float_info.max:.4g})", token)
        if value == 0 and re.split("[eE]", text)[0].strip("0.") != "":
            raise self.error(f"literal {_shown(text)} underflows to 0 in every dtype (the "
                             "smallest nonzero f64 is 5e-324)", token)
        return value

    def int64(self, token, what):
        """An integer token of a shape or a schedule: it must fit in 64 bits."""
        text = str(token)
        if len(text.lstrip("0")) > len(str(INT64_MAX)) or int(text) > INT64_MAX:
            raise self.error(f"{what} {_shown(text)} does not fit in 64 bits (at most "
                             f"{INT64_MAX})", token)
        return int(text)

    # -- expressions -----------------------------------------------------------------------
    def value(self, node, several=1):
        """The value of expression `node`: a TensorView or a Python number; where `several`
        names are assigned it, a call giving that many tensors (var_mean) and a tuple."""
        self.tuple_call = node if node.data == "call" else None
        value = walk(node, self.expression_step)
        count = len(value) if isinstance(value, tuple) else 1
        what = f"{node.children[0]}(...)" if node.data == "call" else "the expression"
        if count > several:
            raise self.error(f"{what} gives {count} tensors: assign them to as many names "
                             f"(`a, b = {what}`)", node)
        if count < several:
            raise self.error(f"{several} names are assigned but {what} gives one tensor",
                             node)
        return value

    def expression_step(self, node):
        return getattr(self, "_" + node.data)(node, *node.children)

    def _name(self, node, token):
        """A tensor by name, or else a size of the inputs (`N` of `x: f32[M, N]`) or a
        declared run-time scalar as a value (`sum(x, [1]) / N`)."""
        name = str(token)
        if name not in self.scope and (name in self.fusion.size_symbols()
                                       or name in self.fusion.scalars):
            return Scalar(Sym(name), dtypes.DataType.i64)
        return self.scoped_tensor(token)

    def _integer(self, node, token):
        return self.number(node)

    def _real(self, node, token):
        return self.number(node)

    def _inf(self, node, token):
        return math.inf

    def _nan(self, node, token):
        return math.nan

    def _true(self, node, token):
        return True

    def _false(self, node, token):
        return False

    def _string(self, node, token):
        raise self.error(f"a string ({_shown(token)}) is not a value; strings are arguments, "
                         "as in gelu(x, approximate=\"tanh\")", token)

    def _list_literal(self, node, *items):
        raise self.error("a list is not a value; lists are arguments, as in "
                         "sum(x, axes=[1])", node)

    def _dict_literal(self, node, *entries):
        raise self.error("a map is not a value; maps are arguments, as in "
                         "reorder({0: 1, 1: 0})", node)

    def _negate(self, node, minus, operand):
        value = yield operand
        if isinstance(value, TensorView):
            with self.located(minus):
                return ops.neg(value)
        if isinstance(value, bool):
            raise self.error("true and false cannot be negated", minus)
        return -value

    def _binary(self, node, lhs, operator, rhs):
        a = yield lhs
        b = yield rhs
        sizes = [v for v in (a, b) if isinstance(v, Scalar) and v.is_size]
        if sizes and operator in SIZE_ARITHMETIC and all(
                is_int(v) or (isinstance(v, Scalar) and v.is_size) for v in (a, b)):
            return Scalar(self.size_arithmetic(operator, a, b, node), dtypes.DataType.i64)
        with self.located(operator, {"a": lhs, "b": rhs}):
            return OPS[INFIX[operator]](a, b)

    def size_arithmetic(self, operator, a, b, node):
        """a OPERATOR b of sizes and integers, as a size (extent)."""
        a, b = (v.value if isinstance(v, Scalar) else v for v in (a, b))
        if operator == "*":
            return ext.mul(a, b)
        if operator == "/" and (b == 0 or (is_int(b) and b < 0)):
            raise self.error(f"size division by {b}: a size is divided by a positive "
                             "integer or a size", node)
        return SIZE_ARITHMETIC[operator](a, b)

    def _call(self, node, name, *args):
        if name not in OPS:
            raise self.error(f"unknown operation '{name}'{_suggestion(name, OPS)}", name)
        signature = inspect.signature(OPS[name])
        implicit = {}
        if "fusion" in signature.parameters:     # (full, iota: the fusion being built)
            implicit["fusion"] = self.fusion
            signature = signature.replace(parameters=[
                p for n, p in signature.parameters.items() if n != "fusion"])
        positional, keywords, nodes = yield from self.bind(name, signature, args)
        with self.located(name, nodes):
            result = OPS[name](*positional, **keywords, **implicit)
        if isinstance(result, tuple) and node is not self.tuple_call:
            raise self.error(f"{name}(...) gives {len(result)} tensors: assign them to "
                             f"as many names (`a, b = {name}(...)`) before using them", name)
        return result

    # -- arguments -------------------------------------------------------------------------
    def bind(self, what, signature, args):
        """Check the argument nodes `args` of `what` against `signature` and convert each
        to the kind of value its parameter takes. A walk step (expression arguments are
        walked): returns (positional, keyword values, {parameter: node})."""
        names = list(signature.parameters)
        positional = [a for a in args if a.data != "keyword"]
        keywords = [a for a in args if a.data == "keyword"]
        for arg in args[len(positional):]:
            if arg.data != "keyword":
                raise self.error(f"{what}: positional argument after keyword arguments", arg)
        if len(positional) > len(names):
            takes = f"{len(names)} argument{'' if len(names) == 1 else 's'}"
            listed = f" ({', '.join(names)})" if names else ""
            raise self.error(f"{what} takes {takes}{listed}, got {len(positional)}",
                             positional[len(names)])
        given = dict(zip(names, positional))
        for key, node in (k.children for k in keywords):
            if key not in names:
                raise self.error(f"{what} has no argument '{key}' (its arguments: "
                                 f"{', '.join(names) or 'none'})", key)
            if key in given:
                raise self.error(f"{what} got argument '{key}' twice", key)
            given[str(key)] = node
        missing = [f"'{n}'" for n, p in signature.parameters.items()
                   if n not in given and p.default is p.empty]
        if missing:
            plural = "s" if len(missing) > 1 else ""
            raise self.error(f"{what} is missing argument{plural} {', '.join(missing)}", what)
        values = {}
        for key, node in given.items():
            values[key] = yield from self.argument(what, key, node)
        return ([values[n] for n in names[:len(positional)]],
                {str(k.children[0]): values[str(k.children[0])] for k in keywords}, given)

    def argument(self, what, param, node):
        """A walk step: the value of argument `node` for parameter `param` of `what`."""
        kind = PARAMETER_KINDS.get(param, "value")
        if kind == "value":
            return (yield node)
        if kind == "tensor":
            return self.named_tensor(self.bare_name(what, param, node, "a tensor name"))
        if kind == "tensor names":
            if node.data != "list_literal":
                raise self.error(f"{what}: {param} must be a list of tensor names", node)
            return [self.named_tensor(self.bare_name(what, param, item, "a tensor name"))
                    for item in node.children]
        if kind in CHOICES:
            names = ", ".join(CHOICES[kind][0])
            return self.choice(kind, self.bare_name(what, param, node, f"a {kind} ({names})"))
        if kind == "factor" and node.data == "name":
            return str(node.children[0])  # a named run-time scalar
        if kind == "shape":
            return self.sizes(what, param, node)
        if kind in ("sizes", "size"):
            return self.size_values(what, param, node, kind == "sizes")
        if kind == "tensors":
            if node.data != "list_literal":
                raise self.error(f"{what}: {param} must be a list of tensors", node)
            tensors = []
            for item in node.children:
                value = yield item
                if not isinstance(value, TensorView):
                    raise self.error(f"{what}: {param} must be a list of tensors", item)
                tensors.append(value)
            return tensors
        description, accepts = CONSTANT_KINDS[kind]
        value = self.constant(node)
        if value is _NOT_CONSTANT or not accepts(value):
            raise self.error(f"{what}: {param} must be {description}", node)
        return value

    def sizes(self, what, param, node):
        """A list of sizes: integers (-1: keep the axis's own), names of sizes, or size
        expressions (`N - 2`, `D / 2`)."""
        def bad(at):
            return self.error(f"{what}: {param} must be a list of sizes (integers or names "
                              "of sizes)", at)
        if node.data != "list_literal":
            raise bad(node)
        sizes = []
        for item in node.children:
            if item.data in ("binary", "call"):
                value = self.size_expression(what, param, item)
            else:
                value = str(item.children[0]) if item.data == "name" else self.constant(item)
            if not (isinstance(value, (str, *ext.EXTENTS)) or is_int(value)):
                raise bad(item)
            sizes.append(value)
        return sizes

    def size_values(self, what, param, node, many):
        """A size expression (integers, names of sizes, + - * /), or a list of them."""
        if not many:
            return self.size_expression(what, param, node)
        if node.data != "list_literal":
            raise self.error(f"{what}: {param} must be a list of sizes (integers, names of "
                             "sizes or expressions of them: N - 2, D / 2)", node)
        return [self.size_expression(what, param, item) for item in node.children]

    def size_expression(self, what, param, node):
        """The extent a size expression denotes: integers and names of sizes or run-time
        scalars, under + - * / (a size divided rounds down) and unary -."""
        def step(n):
            if n.data == "integer":
                return self.int64(n.children[0], "integer")
            if n.data == "name":
                name = str(n.children[0])
                if name in self.fusion.size_symbols() or name in self.fusion.scalars:
                    return Sym(name)
                known = ", ".join(self.fusion.size_symbols()) or "none"
                raise self.error(f"{what}: '{name}' in {param} is not a size of the inputs of "
                                 f"{self.fusion.name} ({known}) nor a declared run-time "
                                 "scalar", n)
            if n.data == "negate":
                return self._size_negate(n.children[1])
            if n.data == "binary" and str(n.children[1]) in SIZE_ARITHMETIC:
                return self._size_binary(n)
            if n.data == "call" and n.children[0] == "ceildiv" and len(n.children) == 3 \
                    and all(a.data != "keyword" for a in n.children[1:]):
                return self._size_ceildiv(*n.children[1:])   # as split extents print
            raise self.error(f"{what}: {param} must be sizes: integers, names of sizes and "
                             "+ - * / of them", n)
        return walk(node, step)

    @staticmethod
    def _size_negate(operand):
        value = yield operand
        return ext.scale(value, -1)

    @staticmethod
    def _size_ceildiv(numerator, denominator):
        a = yield numerator
        b = yield denominator
        return ext.ceildiv(a, b)

    def _size_binary(self, node):
        lhs, operator, rhs = node.children
        a = yield lhs
        b = yield rhs
        return self.size_arithmetic(str(operator), a, b, node)

    def bare_name(self, what, param, node, description):
        if node.data != "name":
            raise self.error(f"{what}: {param} must be {description}", node)
        return node.children[0]

    def choice(self, kind, name, label=None):
        """The dtype, layout, parallel type or memory type called `name` (a token);
        `label` names the kind in the error (the kind's name by default)."""
        names, convert = CHOICES[kind]
        if name not in names:
            raise self.error(f"unknown {label or kind} '{_shown(name)}'; expected one of "
                             f"{', '.join(names)}", name)
        return convert(str(name))

    # -- constants: literal arguments (numbers, true/false, strings, lists, maps) ----------
    def constant(self, node):
        """The value of a literal (a number, true/false, a string, or a list or map of
        literals), or _NOT_CONSTANT. Integers must fit in 64 bits."""
        return walk(node, self.constant_step)

    def constant_step(self, node):
        kind = node.data
        if kind == "integer":
            return self.int64(node.children[0], "integer")
        if kind in ("real", "inf", "nan", "true", "false"):
            return self.expression_step(node)
        if kind == "string":
            return str(node.children[0])[1:-1]
        if kind == "negate":
            return self._constant_negate(node.children[1])
        if kind == "list_literal":
            return self._constant_list(node.children)
        if kind == "dict_literal":
            return self._constant_map(node.children)
        return _NOT_CONSTANT

    @staticmethod
    def _constant_negate(operand):
        value = yield operand
        return -value if is_number(value) else _NOT_CONSTANT

    @staticmethod
    def _constant_list(items):
        values = []
        for item in items:
            values.append((yield item))
        return _NOT_CONSTANT if any(v is _NOT_CONSTANT for v in values) else values

    @staticmethod
    def _constant_map(entries):
        pairs = []
        for entry in entries:
            key, value = entry.children
            pairs.append(((yield key), (yield value)))
        if any(k is _NOT_CONSTANT or v is _NOT_CONSTANT or isinstance(k, (list, dict))
               for k, v in pairs):
            return _NOT_CONSTANT
        return dict(pairs)

    # -- schedule blocks -------------------------------------------------------------------
    def schedule_block(self, meta, name, *statements):
        if name not in self.fusions:
            raise self.error(f"schedule for unknown fusion '{name}'"
                             f"{_suggestion(name, self.fusions)}", name)
        self.fusion, self.scope = self.fusions[name], self.scopes[name]
        for statement in statements:
            self.statement(statement)

    def method_call(self, meta, result_name, target, method, *args):
        tv = self.named_tensor(target)
        if method not in SCHEDULE_METHODS:
            raise self.error(f"unknown scheduling method '{method}'"
                             f"{_suggestion(method, SCHEDULE_METHODS)}", method)
        bound_method = getattr(tv, method)
        positional, keywords, _ = run(self.bind(method, inspect.signature(bound_method), args),
                                      self.expression_step)
        with self.located(target):
            result = bound_method(*positional, **keywords)
        if result_name is not None:
            if not isinstance(result, TensorView):
                raise self.error(f"{method} returns no tensor to name '{result_name}'",
                                 result_name)
            self.give_name(result, result_name, named=True)

    def named_tensor(self, name):
        """A tensor of the fusion, by its current name (schedules name tensors the IR
        created, such as x_cache, as well as those the fusion's statements named)."""
        tensors = _tensors(self.fusion)
        for t in tensors:
            if t.name == name:
                return t
        raise self.error(f"unknown tensor '{name}' in fusion {self.fusion.name}"
                         f"{_suggestion(name, [t.name for t in tensors])}", name)

    def scheduler_call(self, meta, name, *args):
        if name == "matmul":
            return self.matmul_scheduler(name, args)
        if name == "scalar":
            return self.scalar_declaration(name, args)
        raise self.error(f"unknown scheduler '{name}'; the schedulers are: "
                         f"{', '.join(SCHEDULERS)}", name)

    def matmul_scheduler(self, name, args):
        from ..scheduler.matmul import schedule_matmul
        from ..scheduler.matmul_params import SHORT_KEYS, params_from_keys
        keys = {}
        for arg in args:
            if arg.data != "keyword":
                raise self.error("matmul(...) takes keyword arguments only (cta_tile=, "
                                 "warp_tile=, stages=, splitk=, smem_epilogue=, or any "
                                 "MatmulParams field)", arg)
            key, node = arg.children
            value = self.constant(node)
            if value is _NOT_CONSTANT:
                raise self.error(f"matmul: {key} must be a literal (a number, true/false "
                                 "or a list)", node)
            if str(key) in keys:
                raise self.error(f"matmul got argument '{key}' twice", key)
            field = SHORT_KEYS.get(str(key), str(key))
            if field in MATMUL_BOOL_FIELDS and not isinstance(value, bool):
                raise self.error(f"matmul: {key} must be true or false", node)
            if field in MATMUL_INT_FIELDS and not is_int(value):
                raise self.error(f"matmul: {key} must be an integer", node)
            if field in MATMUL_PER_OPERAND_FIELDS and not (
                    isinstance(value, bool) or (isinstance(value, list) and len(value) == 2
                                                and all(isinstance(v, bool) for v in value))):
                raise self.error(f"matmul: {key} must be true or false, or a pair [A, B] of "
                                 "them (one per operand)", node)
            keys[str(key)] = (value, key)
        with self.located(name):
            params = params_from_keys({k: v for k, (v, _) in keys.items()},
                                      lambda k, why: self.error(why, keys[k][1]))
            schedule_matmul(self.fusion, params)

    def scalar_declaration(self, name, args):
        positional = [a for a in args if a.data != "keyword"]
        keywords = {str(a.children[0]): a.children[1] for a in args if a.data == "keyword"}
        if len(positional) != 1 or positional[0].data != "name" or \
                set(keywords) - {"default"} or len(keywords) + 1 != len(args):
            raise self.error("scalar(...) takes a name and optionally default=N, e.g. "
                             "scalar(splitk, default=4)", name)
        scalar_name = positional[0].children[0]
        default = None
        if "default" in keywords:
            default = self.constant(keywords["default"])
            if isinstance(default, bool) or not isinstance(default, int) or default < 1:
                raise self.error(f"scalar {scalar_name}: default must be an integer >= 1",
                                 keywords["default"])
        with self.located(scalar_name):
            self.fusion.declare_scalar(str(scalar_name), default)
