"""Fusion: a dataflow graph of tensor expressions, plus its schedule trace.

The graph is a fuserir.ir.graph.DiGraph whose nodes are tensors and expressions, with
edges tensor -> expression (read) and expression -> tensor (write); it gives topological
order, producers and consumers, paths and cycle checks. We keep a creation serial on each
node so every order we hand out is deterministic.

The schedule trace lists every outermost scheduling call made on the fusion's tensors
(`y.split(1, 128)`, `xs = x.cache_after(shared)`, a scheduler call), so that printing a
fusion prints its schedule and parsing that text replays it to a structurally equal fusion.
Scheduling rewrites the graph (rfactor, cache_after, cache_before move and insert
expressions), so the fusion also keeps `definition_exprs`: a copy of every expression
as it was defined, which is what the printer prints before the trace.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import FusionError
from . import graph
from .extent import Sym
from .tensor import TensorView

# The deepest expression a fusion may define: operations on the longest path from an input
# to a tensor. Deeper ones are refused when built (here) and, in DSL text, by a scan of the
# nesting before parsing (fuserir.dsl.syntax). Lowering at this depth takes about a second
# (docs/decisions.md, "Expressions are at most 1,000 deep").
MAX_EXPRESSION_DEPTH = 1000

if TYPE_CHECKING:
    from ..dtypes import DataType




@dataclass
class TraceEntry:
    """One recorded scheduling call: `result = target.method(*args, **kwargs)`."""

    target: object         # the TensorView, or None for a fusion-level call (a scheduler)
    method: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    result: object = None  # the TensorView a call returns (cache_after, rfactor), else None


class Fusion:
    def __init__(self, name: str = "fusion") -> None:
        self.name = name
        self.inputs: list[TensorView] = []
        self.outputs: list[TensorView] = []
        self.graph = graph.DiGraph()
        self.trace: list[TraceEntry] = []
        self.scalars: dict[str, int | None] = {}           # declared run-time scalars: name -> default (None: none)
        self.definition_exprs: list[Any] = []  # copies of the expressions as defined, in creation order
        self.requirements: list[Any] = []      # (lhs, rhs, what): extents lhs <= rhs when run
        self._next_serial = 0  # creation order of graph nodes (an int: fusions deep-copy)
        self._by_name: dict[str, TensorView] = {}     # tensor name -> TensorView, for every tensor in the graph
        self._recording_depth = 0
        self._order = None     # the topological order, until the graph changes
        self._depth: dict = {}       # defined tensor -> operations from an input (inputs: absent)

    def __deepcopy__(self, memo):
        """A copy of the whole fusion whose depth does not grow with the graph's: every node
        (tensor, expression) is first copied shallowly and entered in `memo`, then each
        copy's attributes are deep-copied, finding every node they name already in `memo`.
        (copy.deepcopy's own walk follows definition -> inputs -> definition ... and would
        recurse once per dependent op: a chain of a few hundred ops hit Python's limit.)"""
        new = object.__new__(type(self))
        memo[id(self)] = new
        copies = []
        for node in self.graph.nodes:
            twin = object.__new__(type(node))
            memo[id(node)] = twin
            copies.append((node, twin))
        for node, twin in copies:
            twin.__dict__.update(copy.deepcopy(node.__dict__, memo))
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return new

    # -- building ------------------------------------------------------------------------
    def _add_node(self, node):
        if node not in self.graph:
            self.graph.add_node(node, serial=self._next_serial)
            self._next_serial += 1
            self._order = None
            if isinstance(node, TensorView):
                self._by_name[node.name] = node

    def _named(self, name):
        """Is `name` the name of a tensor of the fusion? (A lookup: a fusion of n tensors
        is built in time linear in n, however long.)"""
        return name in self._by_name

    def temp_name(self):
        """A name for a new unnamed intermediate: t<n>, n the number of tensors so far (or
        the next number whose name is free)."""
        serial = len(self._by_name)
        while f"t{serial}" in self._by_name:
            serial += 1
        return f"t{serial}"

    def add_tensor(self, tv):
        if self._named(tv.name):
            raise FusionError(f"tensor name '{tv.name}' is already used in fusion {self.name}")
        self._add_node(tv)
        return tv

    def add_input(self, tv):
        self.add_tensor(tv)
        self.inputs.append(tv)
        return tv

    def new_input(self, name: str, dtype: DataType, dims: list[int | str]) -> TensorView:
        """Declare an input tensor `name` of `dtype` with `dims` (ints or symbol names). An
        axis declared of size 1 is a broadcast axis: it matches any extent in a pointwise
        op, as nvFuser's and numpy's size-1 axes do."""
        from .iterdomain import IterDomain, IterKind
        from .tensor import MemoryType
        if not name.isidentifier():
            raise FusionError(f"'{name}' is not a valid tensor name")
        if dtype.is_state:
            raise FusionError(f"input {name}: a welford state is not a tensor type; inputs "
                              "hold numbers")
        root = []
        for d in dims:
            if isinstance(d, bool) or not isinstance(d, (int, str)):
                raise FusionError(f"input {name}: dimension {d!r} must be an integer or a name")
            if isinstance(d, int) and d < 1:
                raise FusionError(f"input {name}: dimension {d} must be >= 1")
            root.append(IterDomain(d, IterKind.broadcast if d == 1 else IterKind.iteration))
        return self.add_input(TensorView(self, name, dtype, root, MemoryType.global_))

    def rename(self, tv: TensorView, name: str, named: bool = True) -> TensorView:
        """Give `tv` the user-visible name `name` (which no other tensor may have).

        named=False renames an intermediate but keeps it unnamed (compared by position, not
        by name); the DSL parser does so for the names it reads back from printed text.
        """
        if name != tv.name and self._named(name):
            raise FusionError(f"tensor name '{name}' is already used in fusion {self.name}")
        if self._by_name.get(tv.name) is tv:
            del self._by_name[tv.name]
            self._by_name[name] = tv
        tv.name = name
        tv.is_named = named
        return tv

    def add_output(self, tv: TensorView) -> TensorView:
        if tv.fusion is not self:
            raise FusionError(f"output {tv.name} belongs to another fusion")
        if tv in self.outputs:
            raise FusionError(f"{tv.name} is already an output of fusion {self.name}")
        if tv.is_input:
            raise FusionError(f"{tv.name} is a fusion input and cannot also be an output")
        if tv.dtype.is_state:
            raise FusionError(f"output {tv.name}: a welford state is not a tensor type; read "
                              "it with welford_mean or welford_m2")
        self.outputs.append(tv)
        from .tensor import MemoryType
        tv.memory_type = MemoryType.global_
        return tv

    def add_expr(self, expr):
        """Register `expr` as the definition of its output tensor.

        Outside scheduling calls this is part of the fusion's definition: a copy goes to
        `definition_exprs`, which later graph rewrites (rfactor, caches) leave untouched.
        """
        fresh_output = expr.output not in self.graph or not self.graph.out_degree(expr.output)
        if self._recording_depth == 0:
            self._check_depth(expr)
        self._add_node(expr)
        for v in expr.tensor_inputs:
            self.graph.add_edge(v, expr)
        self._add_node(expr.output)
        self.graph.add_edge(expr, expr.output)
        self._order = None
        expr.output.definition = expr
        # an output tensor without consumers has no path back to an input: no cycle
        if not fresh_output and not graph.is_acyclic(self.graph):
            raise FusionError(f"expression {expr} would create a cycle")
        if self._recording_depth == 0:
            as_defined = copy.copy(expr)
            as_defined.inputs = list(expr.inputs)
            self.definition_exprs.append(as_defined)
        return expr

    def _check_depth(self, expr):
        """Record the depth of the tensor `expr` defines; refuse one deeper than
        MAX_EXPRESSION_DEPTH (before the graph changes)."""
        deepest = max(expr.tensor_inputs, key=lambda t: self._depth.get(t, 0), default=None)
        depth = 1 + (self._depth.get(deepest, 0) if deepest is not None else 0)
        if depth > MAX_EXPRESSION_DEPTH:
            raise FusionError(
                f"{expr.output.name}: expression {depth} operations deep (its operand "
                f"{deepest.name} is {depth - 1} deep), over the supported depth of "
                f"{MAX_EXPRESSION_DEPTH} operations from an input; split the computation "
                "into several fusions")
        self._depth[expr.output] = depth

    def remove_expr(self, expr):
        self.remove_node(expr)

    def remove_node(self, node):
        """Take an expression or tensor (and its edges) out of the graph."""
        self.graph.remove_node(node)
        if isinstance(node, TensorView) and self._by_name.get(node.name) is node:
            del self._by_name[node.name]
        self._order = None

    def replace_input(self, expr, old, new):
        """Make `expr` read `new` where it read `old`."""
        expr.inputs = [new if v is old else v for v in expr.inputs]
        if self.graph.has_edge(old, expr):
            self.graph.remove_edge(old, expr)
        self.graph.add_edge(new, expr)
        self._order = None

    def fresh_name(self, base):
        """`base` if no tensor has that name yet, else base_1, base_2, ..."""
        names = self._by_name
        if base not in names:
            return base
        for i in itertools.count(1):
            if f"{base}_{i}" not in names:
                return f"{base}_{i}"

    def require(self, lhs, rhs, what):
        """Record that extent `lhs` must be at most extent `rhs` when the fusion runs (a
        slice bound inside its axis, say); binding the inputs checks it and refuses the
        sizes otherwise, with `what` (the op, tensor and axis) and both values."""
        if (lhs, rhs, what) not in self.requirements:
            self.requirements.append((lhs, rhs, what))

    # -- run-time scalars ----------------------------------------------------------------
    def declare_scalar(self, name: str, default: int | None = None) -> Any:
        """Declare `name` a run-time scalar of the scheduled fusion (a split factor that one
        compiled kernel takes as an argument), with `default` (an int >= 1) as the value
        run() uses when it is not passed; None keeps the current default. Recorded in the
        schedule trace (printed as `scalar(name, default=N)`). Splitting by a name declares
        it without a default; a schedule's literal (`matmul(splitk=5)`) declares it with
        one. A size symbol of the inputs is bound from their shapes and cannot be declared.
        """
        with self.recording(None, "scalar", (name,),
                            {} if default is None else {"default": default}):
            self.declare(name, default)

    def declare(self, name, default=None):
        """declare_scalar without the trace entry (for transforms that declare a name)."""
        if not isinstance(name, str) or not name.isidentifier():
            raise FusionError(f"run-time scalar {name!r} of fusion {self.name} is not a "
                              "valid name")
        if default is not None and (isinstance(default, bool) or not isinstance(default, int)
                                    or default < 1):
            raise FusionError(f"run-time scalar {name} of fusion {self.name}: the default "
                              f"must be an integer >= 1, got {default!r}")
        if name in self.size_symbols():
            if default is not None:
                raise FusionError(f"{name} is a size of fusion {self.name} (bound from the "
                                  "inputs' shapes); it cannot have a default")
            return
        if any(t.name == name for t in self.tensors):
            raise FusionError(f"run-time scalar {name} of fusion {self.name}: a tensor has "
                              "that name")
        if default is not None or name not in self.scalars:
            self.scalars[name] = default

    def size_symbols(self) -> list[str]:
        """The symbolic sizes of the inputs' shapes, in order of first appearance."""
        found = []
        for tv in self.inputs:
            for e in tv.shape:
                if isinstance(e, Sym) and e.name not in found:
                    found.append(e.name)
        return found

    def describe_run_time(self):
        """What run() takes, in words: inputs, declared scalars (with defaults), sizes."""
        scalars = [name if d is None else f"{name} (default {d})"
                   for name, d in self.scalars.items()]
        return (f"inputs: {', '.join(t.name for t in self.inputs) or 'none'}; run-time "
                f"scalars: {', '.join(scalars) or 'none'}; sizes: "
                f"{', '.join(self.size_symbols()) or 'none'}")

    # -- queries -------------------------------------------------------------------------
    def _topological(self):
        """Every node in a deterministic topological order (creation order among the
        ready), kept until the graph changes: queries are many, changes few. Change the
        graph only through the methods above."""
        if self._order is None:
            nodes = self.graph.nodes
            self._order = graph.topological_order(self.graph, key=lambda n: nodes[n]["serial"])
        return self._order

    @property
    def exprs(self) -> list[Any]:
        """Expressions in a deterministic topological order."""
        return [n for n in self._topological() if not isinstance(n, TensorView)]

    @property
    def tensors(self) -> list[TensorView]:
        """Tensors in a deterministic topological order (inputs first)."""
        order = self._topological()
        cached = self.__dict__.get("_tensors_of")
        if cached is None or cached[0] is not order:   # kept with the order it filters
            cached = (order, [n for n in order if isinstance(n, TensorView)])
            self._tensors_of = cached
        return list(cached[1])

    def tensor(self, name: str) -> TensorView:
        if name in self._by_name:
            return self._by_name[name]
        raise FusionError(f"fusion {self.name} has no tensor named '{name}'")

    def uses(self, tv: TensorView) -> list[Any]:
        """The expressions that read `tv`, in creation order."""
        nodes = self.graph.nodes
        return sorted(self.graph.successors(tv), key=lambda e: nodes[e]["serial"])

    def consumers(self, tv: TensorView) -> list[TensorView]:
        return [e.output for e in self.uses(tv)]

    def producers(self, tv: TensorView) -> list[TensorView]:
        return [] if tv.definition is None else tv.definition.tensor_inputs

    def depends_on(self, consumer: TensorView, producer: TensorView) -> bool:
        return consumer is not producer and graph.has_path(self.graph, producer, consumer)

    # -- schedule trace ------------------------------------------------------------------
    @contextlib.contextmanager
    def recording(self, target, method, args, kwargs):
        """Record `method` in the trace if it is the outermost call and succeeds."""
        entry = TraceEntry(target, method, tuple(args), dict(kwargs))
        self._recording_depth += 1
        try:
            yield entry
        finally:
            self._recording_depth -= 1
        if self._recording_depth == 0:
            self.trace.append(entry)

    def __repr__(self):
        return f"<Fusion {self.name}: {len(self.inputs)} inputs, {len(self.exprs)} exprs>"

    def __str__(self):
        from ..dsl.printer import print_fusion
        return print_fusion(self)
