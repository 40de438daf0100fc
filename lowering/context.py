"""The lowering context: what the passes of one lowering share, and who provides what.

Three kinds of state, kept apart:

* Facts, given when lowering starts and never rebound (FACTS): lowering's private copy of
  the fusion (which narrow_vectors and inline_defaults transform before validate analyses
  it; no later pass changes it), the index dtype, the vector caps, the barrier ids to drop,
  and the memo of proofs the caller keeps (lowering.verify.async_protocol.ProofMemo: the
  driver's on disk; lowering reads and writes no files).
* Pass products (PRODUCTS): what a pass leaves for later ones, each provided by exactly one
  pass (its PASS record says which; lowering.contract checks that the pipeline's order
  provides each before every pass that reads it). A product is written only by its pass
  and frozen once that pass has run (a dict becomes a read-only mapping, a set a frozenset,
  a list a tuple); reading it before then raises ProductError naming the reader, the
  product and the pass that provides it. validate provides the analysis of the placed
  fusion (the exact map, the live tensors, the parallel extents, the circular-buffer loops),
  loop_nests the tensor parameters, allocation the buffers and layouts, indexing what the
  predicates need to know about each store.
* The index arithmetic's own tables, which any pass building index expressions extends
  through the helpers below (loop_var, extent, and the ranges binop simplifies with): loop
  and size variables, value ranges, fragment-loop variables, and the per-lane scope
  (lane_index, frag_offset) indexing sets while it lowers a tensor-core fragment, and the
  register values a vectorized cat hands to the loads of its inputs' ops (inline_values).

The index helpers turn loop indices into root indices (replaying splits and merges
backwards) and logical indices into loop indices (forwards), with C integer semantics.
"""

from types import MappingProxyType

from fuserir.dtypes import DataType
from fuserir.errors import ScheduleError
from fuserir.ir import extent as ext
from fuserir.ir.exprs import ReshapeOp
from fuserir.ir.iterdomain import ParallelType, Split, history
from fuserir.transforms import concrete_loop

from . import kir
from .support.analysis import (BLOCK_TYPES, LOOP_TYPES, MMA, THREAD_TYPES, build_exact_map,
                               instruction_threads, is_async_copy, is_tma_copy,
                               live_tensors, mma_positions, tma_box_axes, vector_select_width,
                               vector_copy_width)
from .indexing.arith import Ranges, simplify_binop
from .errors import LoweringError

FACTS = ("fusion", "index_dtype", "vector_caps", "dropped_syncs", "proofs")

PRODUCTS = {
    "live": "the tensors some output depends on (the others are dead code)",
    "vector_axes": "the axes one instruction moves whole, which are no loops: the vector "
                   "axes of async and vector copies, the box axes of TMA copies (of a "
                   "TMA store: all its boxes, a statement each)",
    "exact": "the exact map (analysis.build_exact_map)",
    "bound": "{parallel type: the extents bound to it}; the launch spans the largest",
    "grid_reduced": "whether a grid reduction (serial or parallel) combines the CTAs of a tile",
    "circular": "{circular-buffered tensor: the concrete axis of the loop it rotates over}",
    "tensor_params": "{input or output tensor: kir.TensorParam}",
    "buffers": "{tensor: kir.Buffer}, the parameters' and the allocated ones",
    "accumulators": "{reduction tensor: its local accumulator kir.Buffer}",
    "scratch": "{block-reduced tensor: its shared kir.Buffer of partials}",
    "layouts": "{allocated kir.Buffer: ((loop position, stride), ...)}",
    "store_info": "{kir.Store or kir.CpAsync: analysis.StoreInfo}, what predicates need",
    "tensor_maps": "{(global tensor, box, swizzle): kir.TensorMap} of the TMA copies",
    "vector_offsets": "[(global tensor name, launch-time offset)] that vector accesses need "
                      "to be multiples of their width (kir.Kernel.vector_offsets)",
}


class ProductError(LoweringError):
    """A pass broke the context's contract: it read a product before the pass that provides
    it had run, or wrote one another pass provides, or rebound a fact."""


def _frozen(value):
    """`value` as a product is kept once its pass has run: read-only, one level deep."""
    if isinstance(value, dict):
        return MappingProxyType({k: _frozen_item(v) for k, v in value.items()})
    return _frozen_item(value)


def _frozen_item(value):
    if isinstance(value, set):
        return frozenset(value)
    if isinstance(value, list):
        return tuple(value)
    return value


# the operators index arithmetic folds when both operands are constants, computed as the
# kernel computes them (kir.evaluate_scalar: fuserir.op_table's meaning in the index type)
_FOLDED = ("add", "sub", "mul", "div", "mod", "ceildiv", "min", "max")


class LoweringContext:
    """What the passes of one lowering share (see the module docstring): facts, pass
    products (attributes once their pass has run) and the index arithmetic's tables."""

    def __init__(self, fusion, index_dtype=DataType.i32, vector_caps=None, dropped_syncs=(),
                 providers=None, proofs=None):
        object.__setattr__(self, "_providers", dict(providers or {}))   # product -> pass
        object.__setattr__(self, "_running", None)                      # the pass running
        self.fusion = fusion
        self.index_dtype = index_dtype
        self.vector_caps = vector_caps    # {global tensor name: most bytes per access}
        self.dropped_syncs = tuple(dropped_syncs)   # barrier ids drop_syncs removes
        self.proofs = proofs         # the async verifier's memo beyond this process, or None
        self.loop_vars = {}          # concrete axis -> kir.Var
        self.scalar_vars = {}        # symbol name -> kir.Var
        self.ranges = Ranges()       # value ranges of index variables (lowering.indexing.arith)
        self.fragment_vars = []      # the loop variables of fragment-element loops
        self.lane_index = {}         # mma axis -> per-lane index, while lowering a fragment
        self.inline_values = None    # {producer: kir value}, while a vector cat computes
                                     # its inputs' ops in registers (indexing.values.load)
        self.frag_offset = None      # element of the fragment being lowered (None: 0)
        # Memos of the placed fusion's loop structure, kept from `analyze` on (the fusion no
        # longer changes then): each walks a chain of compute-at consumers, which a long
        # chain of inlined ops would walk again from every tensor (quadratic).
        self._placed = False
        self._concrete_memo = {}     # (tv, position) -> (tensor, position) owning its loop
        self._inlined_memo = {}      # tv -> the consumer it is fully inlined into, or None
        self._root_memo = {}         # (tv, ranges known) -> root_indices(tv)
        self._inline_targets = {}    # tv -> inline_target(tv)

    # -- the contract -------------------------------------------------------------------
    def _reader(self):
        running = self.__dict__.get("_running")
        return f"pass '{running}'" if running else "lowering"

    def __getattr__(self, name):
        # Only reached for an attribute not set: a product whose pass has not run yet.
        if name in PRODUCTS:
            provider = self.__dict__.get("_providers", {}).get(name)
            by = f"pass '{provider}', which provides it," if provider else \
                "the pass that provides it"
            raise ProductError(f"{self._reader()} reads ctx.{name} before {by} has run")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name, value):
        if name in FACTS and name in self.__dict__:
            raise ProductError(f"{self._reader()} rebinds ctx.{name}, a fact: set once, "
                               "when lowering starts")
        if name in PRODUCTS:
            provider = self.__dict__.get("_providers", {}).get(name)
            running = self.__dict__.get("_running")
            if running and provider and running != provider:
                raise ProductError(f"pass '{running}' writes ctx.{name}, which pass "
                                   f"'{provider}' provides")
            if name in self.__dict__:
                raise ProductError(f"{self._reader()} provides ctx.{name} a second time")
        object.__setattr__(self, name, value)

    def run_pass(self, record, kernel):
        """`record.run(ctx, kernel)` as that pass (a lowering.contract.Pass): what it writes
        is checked against what it provides, and its products are frozen afterwards."""
        object.__setattr__(self, "_running", record.name)
        try:
            kernel = record.run(self, kernel)
        finally:
            object.__setattr__(self, "_running", None)
        for name in record.provides:
            if name in PRODUCTS:
                if name not in self.__dict__:
                    raise ProductError(f"pass '{record.name}' did not provide ctx.{name}, "
                                       "which its record says it provides")
                object.__setattr__(self, name, _frozen(self.__dict__[name]))
        return kernel

    # -- the analysis of the placed fusion (pass validate) --------------------------------
    def analyze(self):
        """The facts of the (now fully placed) fusion: live tensors, vector axes, exact map,
        parallel extents, serial grid reduction, circular-buffer loops."""
        object.__setattr__(self, "_placed", True)
        self.live = live_tensors(self.fusion)
        vector_axes = {tv.loop[-1] for tv in self.live
                       if (is_async_copy(tv) and tv.loop and
                           tv.loop[-1].parallel is ParallelType.vectorize)
                       or vector_copy_width(tv) or vector_select_width(tv)}
        self.vector_axes = vector_axes | {a for tv in self.live if is_tma_copy(tv)
                                          for a in tma_box_axes(tv)}
        self.exact = build_exact_map(self.fusion)
        self.bound = self._parallel_extents()
        self.grid_reduced = any(tv.grid_reduction for tv in self.live)
        self.circular = {tv: self._circular_loop(tv) for tv in self.live
                         if tv.circular_buffer_stages}

    def _circular_loop(self, tv):
        """The loop a circular buffer rotates over: the innermost loop inside its
        compute-at position."""
        loops = [self.concrete_axis(tv, i) for i in range(tv.compute_at_pos or 0)]
        loops = [a for a in loops if self.is_loop(a)]
        if not loops:
            raise ScheduleError(f"{tv.name}: circular buffering needs a loop inside its "
                                f"compute-at position to rotate over")
        return loops[-1]

    # -- loops ---------------------------------------------------------------------------
    def concrete(self, tv, i):
        """(tensor, position) owning the loop that tv.loop[i] runs in (memoized for every
        tensor the walk passes, once the fusion is placed: linear in a long chain)."""
        if not self._placed:
            return concrete_loop(tv, i)
        memo = self._concrete_memo
        found = memo.get((tv, i))
        if found is not None:
            return found
        passed = []
        while tv.compute_at_pos and i < tv.compute_at_pos:
            if (found := memo.get((tv, i))) is not None:
                break
            passed.append(tv)
            tv = tv.compute_at_consumer
        found = found or (tv, i)
        for t in passed:
            memo[t, i] = found
        memo[tv, i] = found
        return found

    def concrete_axis(self, tv, i):
        owner, j = self.concrete(tv, i)
        return owner.loop[j]

    def is_loop(self, axis):
        """Does this (concrete) axis become a for-loop in the kernel? (Not the vector axis
        of an async or vector copy: one instruction moves the whole vector.)"""
        if axis.parallel not in LOOP_TYPES or axis in self.vector_axes:
            return False
        return not (axis.is_broadcast or axis.extent == 1)

    def loop_var(self, axis):
        if axis not in self.loop_vars:
            var = kir.Var(f"i{len(self.loop_vars)}", self.index_dtype)
            self.loop_vars[axis] = var
            if isinstance(axis.extent, int):
                self.ranges.vars[id(var)] = (0, axis.extent - 1)
        return self.loop_vars[axis]

    def loop_index(self, tv, i):
        """The index of tv.loop[i] inside the kernel: a loop variable, a thread or block
        index, or 0 for an axis of extent 1."""
        axis = self.concrete_axis(tv, i)
        if axis in self.lane_index:
            return self.lane_index[axis]
        if axis.parallel in THREAD_TYPES or axis.parallel in BLOCK_TYPES:
            kind = (kir.SpecialKind.threadIdx if axis.parallel in THREAD_TYPES
                    else kir.SpecialKind.blockIdx)
            return kir.Special(kind, axis.parallel.value[-1], self.index_dtype)
        if not self.is_loop(axis):
            return self.const(0)
        return self.loop_var(axis)

    # -- index arithmetic ----------------------------------------------------------------
    def const(self, value):
        return kir.Const(value, self.index_dtype)

    def extent(self, e):
        """A fuserir extent as a kernel expression over the scalar parameters."""
        if isinstance(e, int):
            return self.const(e)
        if isinstance(e, ext.Sym):
            if e.name not in self.scalar_vars:
                self.scalar_vars[e.name] = kir.Var(e.name, self.index_dtype, user=True)
            return self.scalar_vars[e.name]
        if isinstance(e, ext.CeilDiv):
            return self.binop("ceildiv", self.extent(e.numerator), self.extent(e.denominator))
        if isinstance(e, ext.FloorDiv):      # of sizes, never negative: C's division
            return self.binop("div", self.extent(e.numerator), self.extent(e.denominator))
        if isinstance(e, ext.Linear):
            total = self.const(e.const)
            for term, c in e.terms:
                total = self.binop("add", total, self.binop("mul", self.const(c),
                                                            self.extent(term)))
            return total
        return self.binop("mul", self.extent(e.lhs), self.extent(e.rhs))

    def binop(self, op, a, b):
        """Index arithmetic with the obvious constant folding (x*1, x+0, 0*x, x/1)."""
        ca = a.value if isinstance(a, kir.Const) else None
        cb = b.value if isinstance(b, kir.Const) else None
        if ca is not None and cb is not None and op in _FOLDED:
            return self.const(kir.evaluate_scalar(kir.BinOp(op, a, b, self.index_dtype)))
        if op == "add" and ca == 0:
            return b
        if op in ("add", "sub") and cb == 0:
            return a
        if op == "mul" and (ca == 0 or cb == 0):
            return self.const(0)
        if op == "mul" and ca == 1:
            return b
        if op in ("mul", "div", "ceildiv") and cb == 1:
            return a
        if op == "mod" and cb == 1:
            return self.const(0)
        if op in ("div", "mod") and ca == 0:
            return self.const(0)
        simpler = simplify_binop(op, a, b, self.ranges, self.binop)
        if simpler is not None:
            return simpler
        dtype = DataType.bool if op in kir.COMPARISONS + ("and", "or") else self.index_dtype
        return kir.BinOp(op, a, b, dtype)

    def _inlined_into(self, tv):
        """The direct consumer tv is fully inlined into (every loop axis shared), or None."""
        if self._placed:
            memo = self._inlined_memo
            if tv not in memo:
                memo[tv] = self._direct_inline(tv)
            return memo[tv]
        return self._direct_inline(tv)

    @staticmethod
    def _direct_inline(tv):
        consumer = tv.compute_at_consumer
        if tv.compute_at_pos and tv.compute_at_pos == tv.ndim and \
                any(v is tv for v in consumer.definition.inputs):
            return consumer
        return None

    def inline_target(self, tv):
        """The tensor whose loops tv runs entirely inside (tv itself unless every loop axis
        of tv is shared through compute-at with a direct consumer)."""
        passed = []
        while (consumer := self._inlined_into(tv)) is not None:
            if self._placed and (target := self._inline_targets.get(tv)) is not None:
                tv = target
                break
            passed.append(tv)
            tv = consumer
        if self._placed:
            self._inline_targets.update((t, tv) for t in passed)
        return tv

    def root_indices(self, tv):
        """{axis: index} for tv's root and logical axes (and everything between them and
        the loop axes). A fully inlined tensor computes, in each iteration, the element its
        consumer reads: its consumer's root indices through the root map (so a broadcast
        merged into a larger loop never indexes past its own extent), down the chain of
        consumers it is inlined into (walked, not recursed: a chain can be long).
        Otherwise the loop indices are replayed backwards through tv's splits and merges.
        Broadcast axes always have index 0.

        Once the fusion is placed, each tensor's indices are memoized (outside a fragment's
        per-lane scope, and for the value ranges known when they were built): every tensor
        of a chain of n inlined ops reuses its consumer's, instead of walking the chain
        again (n^2 dictionary work). A copy is returned: callers may extend it."""
        memo = self._root_memo if self._placed and not self.lane_index and \
            self.frag_offset is None else None
        known = (len(self.ranges.vars), tuple(self.ranges.specials.items()))
        chain = [tv]
        index = None
        while True:
            if memo is not None and (chain[-1], known) in memo:
                index = memo[chain.pop(), known]
                break
            consumer = self._inlined_into(chain[-1])
            if consumer is None:
                break
            chain.append(consumer)
        if index is None:
            index = self._loop_root_indices(chain[-1])
            if memo is not None:
                memo[chain[-1], known] = index
            chain.pop()
        for producer in reversed(chain):
            consumer = self._inlined_into(producer)
            outer = index
            index = self.producer_indices(consumer.definition, producer, outer)
            if isinstance(producer.definition, ReshapeOp):
                index = self._reshaped_root(producer, index)
            for a in producer.root + producer.logical:
                if a.is_broadcast or a not in index:
                    index[a] = self.const(0)
            if memo is not None:
                memo[producer, known] = index
        return dict(index)

    def producer_indices(self, expr, producer, consumer_index):
        """{producer shape axis: index} of the element of `producer` that `expr` reads for
        the output element at `consumer_index` ({output root axis: index}): the same index
        along the root map, except where expr.index_maps gives an axis start + step * i
        (clamped into the producer's extent where the map says so)."""
        index = {p: consumer_index.get(c, self.const(0))   # (a root axis of extent 1 that
                 for c, p in expr.root_map(producer).items()}   # a reshape drops: at 0)
        for axis, m in expr.index_maps(producer).items():
            i = self.binop("add", self.extent(m.start),
                           self.binop("mul", self.const(m.step), index.get(axis, self.const(0))))
            if m.clamped:
                last = self.binop("sub", self.extent(axis.extent), self.const(1))
                i = self.binop("min", self.binop("max", i, self.const(0)), last)
            index[axis] = i
        return index

    def _reshaped_root(self, tv, index):
        """`index` (of a reshape's logical axes) extended to its root axes: the merges and
        splits that made the logical domain of the root, replayed backwards."""
        index = dict(index)
        for t in reversed(history(tv.logical)):
            if not all(o in index for o in t.outputs):
                continue
            inner = self.extent(t.inner.extent)
            if isinstance(t, Split):
                index[t.input] = self.binop("add", self.binop("mul", index[t.outer], inner),
                                            index[t.inner])
            else:
                index[t.outer] = self.binop("div", index[t.output], inner)
                index[t.inner] = self.binop("mod", index[t.output], inner)
        return index

    def _loop_root_indices(self, tv):
        """root_indices of a tensor that runs its own loops."""
        index = {a: self.loop_index(tv, i) for i, a in enumerate(tv.loop)}
        for t in reversed(history(tv.loop)):
            if isinstance(t, Split):
                inner = self.extent(_concrete_extent(t.inner))
                index[t.input] = self.binop("add", self.binop("mul", index[t.outer], inner),
                                            index[t.inner])
            else:
                inner = self.extent(_concrete_extent(t.inner))
                index[t.outer] = self.binop("div", index[t.output], inner)
                index[t.inner] = self.binop("mod", index[t.output], inner)
        for a in list(index):
            if a.is_broadcast:
                index[a] = self.const(0)
        return index

    def forward_indices(self, tv, logical_index):
        """{loop axis: index} of tv given the indices of its logical axes, replaying splits
        and merges forwards (axes not derived from the logical domain, such as loop-only
        broadcast axes, have index 0)."""
        index = dict(logical_index)
        transforms = history(tv.loop)
        known = set(tv.root) | set(tv.logical)
        for t in transforms:
            for i in t.inputs:
                if i.definition is None and i not in known:
                    index.setdefault(i, self.const(0))   # a loop-only broadcast axis
        for t in transforms:
            if not all(i in index for i in t.inputs) or all(o in index for o in t.outputs):
                continue
            if isinstance(t, Split):
                inner = self.extent(t.inner.extent)
                index[t.outer] = self.binop("div", index[t.input], inner)
                index[t.inner] = self.binop("mod", index[t.input], inner)
            else:
                inner = self.extent(t.inner.extent)
                index[t.output] = self.binop("add", self.binop("mul", index[t.outer], inner),
                                             index[t.inner])
        return index

    # -- parallelization -----------------------------------------------------------------
    def _parallel_extents(self):
        """{parallel type: the distinct extents bound to it}, in order of appearance."""
        bound = {p: [] for p in THREAD_TYPES + BLOCK_TYPES}
        for tv in self.fusion.tensors:
            if tv.is_input or tv not in self.live:
                continue
            for i in range(tv.ndim):
                axis = self.concrete_axis(tv, i)
                if axis.parallel in bound and axis.extent not in bound[axis.parallel]:
                    bound[axis.parallel].append(axis.extent)
                threads = instruction_threads(tv)
                if axis.parallel is MMA and threads not in bound[ParallelType.TIDx]:
                    bound[ParallelType.TIDx].append(threads)   # a warp's or warp group's
        return bound

    def launch_extent(self, ptype, round_to=1):
        extents = [self.extent(e) for e in self.bound[ptype]]
        if not extents:
            return self.const(1)
        dim = extents[0]
        for e in extents[1:]:
            dim = self.binop("max", dim, e)
        if round_to > 1:
            dim = self.binop("mul", self.binop("ceildiv", dim, self.const(round_to)),
                             self.const(round_to))
        return dim

    def exact_class(self, axis):
        """A stable identifier of axis's exact-map class."""
        return id(self.exact.find(axis))

    def threads_used(self):
        return [p for p in THREAD_TYPES if self.bound[p]]

    def owner(self, tv, is_write):
        """AccessInfo.owner of tv's accesses: for each thread type the block uses, the exact
        class of tv's axis bound to it, which selects the thread of each element. A write
        where no data axis of tv is bound to it is guarded to thread 0 along it (the
        predicate pass's redundant-write rule): "zero". A read with no such axis is made by
        every thread along it: None (owned by no single thread)."""
        owner = []
        for p in self.threads_used():
            cls = "zero" if is_write else None
            if p is ParallelType.TIDx and mma_positions(tv):
                # The lane of an element is fixed by the instruction's fragment map.
                cls = ("mma",) + tuple(self.exact_class(tv.loop[i])
                                       for i in mma_positions(tv))
            for i in range(tv.ndim):
                axis = tv.loop[i]
                if self.concrete_axis(tv, i).parallel is not p or axis.is_broadcast:
                    continue
                if axis.is_reduction and is_write:
                    continue
                # An axis inside the compute-at position runs in its consumer's loop: the
                # thread is that loop's, so the loop's axis identifies it.
                cls = self.exact_class(self.concrete_axis(tv, i))
            owner.append((p.value, cls))
        return tuple(owner)


def _concrete_extent(axis):
    """The extent a loop index of `axis` ranges over: its own, but where it derives from a
    broadcast axis that shares a consumer's loops (IterDomain.concrete_extent), the
    consumer's (a [B, D] input's loop-only S axis merged under B in a [B, S, D] output's
    rows: the merged index is the output's, b S + s, not b + 0)."""
    if axis.definition is None:
        return axis.concrete_extent if axis.is_broadcast and \
            axis.concrete_extent is not None else axis.extent
    t = axis.definition
    if isinstance(t, Split):
        fixed = t.inner if t.inner_split else t.outer          # the factor's side
        return axis.extent if axis is fixed else ext.ceildiv(_concrete_extent(t.input),
                                                              t.factor)
    return ext.mul(_concrete_extent(t.outer), _concrete_extent(t.inner))
