"""Iteration domains (axes) and the split/merge transforms that derive one from another.

An IterDomain is one axis of a tensor: an extent, a kind (iteration, reduction,
broadcast) and a parallel type (serial, a block or thread index, vectorize, unroll, mma).
Splits and merges never change a tensor's meaning: they derive new axes from old ones and
remember how (`definition`), so lowering can replay them backwards from loop indices to
the indices of the tensor's root axes. Each tensor owns its IterDomain objects; the
transforms that copy axes between tensors (compute_at, rfactor) create new ones.
"""

import itertools
from enum import Enum

from . import extent as ext


class IterKind(Enum):
    iteration = "i"
    reduction = "r"
    broadcast = "b"


class ParallelType(Enum):
    serial = "serial"
    BIDx = "BIDx"
    BIDy = "BIDy"
    BIDz = "BIDz"
    TIDx = "TIDx"
    TIDy = "TIDy"
    TIDz = "TIDz"
    vectorize = "vectorize"
    unroll = "unroll"
    mma = "mma"

    def __str__(self):
        return self.value

    @property
    def is_block(self):
        return self in (ParallelType.BIDx, ParallelType.BIDy, ParallelType.BIDz)

    @property
    def is_thread(self):
        return self in (ParallelType.TIDx, ParallelType.TIDy, ParallelType.TIDz)

    @property
    def is_grid_mapped(self):
        """Bound to a block or thread index (at most one axis of a tensor each)."""
        return self.is_block or self.is_thread


_ids = itertools.count()


class IterDomain:
    """One axis: extent, kind, parallel type, and the transform that produced it."""

    def __init__(self, extent, kind=IterKind.iteration, parallel=ParallelType.serial,
                 definition=None):
        self.extent = ext.as_extent(extent)
        self.kind = kind
        self.parallel = parallel
        self.definition = definition  # Split or Merge that produced this axis, or None
        # a broadcast axis sharing a consumer's loops (compute_at): the extent of the
        # consumer axis it stands for there, which the shared loops' indices range over
        self.concrete_extent = None
        self.serial = next(_ids)

    @property
    def is_reduction(self):
        return self.kind is IterKind.reduction

    @property
    def is_broadcast(self):
        return self.kind is IterKind.broadcast

    def clone(self):
        """A fresh root axis with the same extent, kind and parallel type."""
        return IterDomain(self.extent, self.kind, self.parallel)

    def __str__(self):
        par = "" if self.parallel is ParallelType.serial else self.parallel.value
        return f"{self.kind.value}{par}{{{self.extent}}}"

    __repr__ = __str__


class Split:
    """`input` -> (`outer`, `inner`).

    inner=True: the inner axis has extent `factor` and the outer ceildiv(E, factor);
    inner=False: the outer axis has extent `factor`. The root index is
    outer * extent(inner) + inner, valid where it is below E (non-divisible splits are
    predicated by lowering).
    """

    def __init__(self, input, factor, inner_split=True):
        self.input = input
        self.factor = ext.as_extent(factor)
        self.inner_split = inner_split
        if inner_split:
            outer_extent, inner_extent = ext.ceildiv(input.extent, self.factor), self.factor
        else:
            outer_extent, inner_extent = self.factor, ext.ceildiv(input.extent, self.factor)
        self.outer = IterDomain(outer_extent, input.kind, definition=self)
        self.inner = IterDomain(inner_extent, input.kind, definition=self)

    @property
    def inputs(self):
        return (self.input,)

    @property
    def outputs(self):
        return (self.outer, self.inner)

    def __str__(self):
        how = "" if self.inner_split else ", inner=false"
        return f"split({self.input}, {self.factor}{how}) -> {self.outer}, {self.inner}"


class Merge:
    """(`outer`, `inner`) -> `output` with extent E_outer * E_inner; the output index o
    gives outer = o / E_inner and inner = o % E_inner."""

    def __init__(self, outer, inner):
        self.outer = outer
        self.inner = inner
        kinds = {outer.kind, inner.kind} - {IterKind.broadcast}
        kind = kinds.pop() if kinds else IterKind.broadcast
        self.output = IterDomain(ext.mul(outer.extent, inner.extent), kind, definition=self)

    @property
    def inputs(self):
        return (self.outer, self.inner)

    @property
    def outputs(self):
        return (self.output,)

    def __str__(self):
        return f"merge({self.outer}, {self.inner}) -> {self.output}"


def history(leaves):
    """The transforms that derive `leaves` from their root axes, in application order."""
    seen = set()
    order = []

    def visit(axis):
        t = axis.definition
        if t is None or id(t) in seen:
            return
        seen.add(id(t))
        for i in t.inputs:
            visit(i)
        order.append(t)

    for leaf in leaves:
        visit(leaf)
    return order


def roots_of(axis):
    """The root axes (those without a definition) that `axis` derives from."""
    if axis.definition is None:
        return [axis]
    out = []
    for i in axis.definition.inputs:
        for r in roots_of(i):
            if r not in out:
                out.append(r)
    return out


def replay(transforms, axis_map):
    """Apply `transforms` again to the axes `axis_map` maps their inputs to.

    Transforms whose inputs are not all mapped are skipped. Returns the map extended with
    each replayed output (old axis -> new axis).
    """
    axis_map = dict(axis_map)
    for t in transforms:
        if not all(i in axis_map for i in t.inputs):
            continue
        if isinstance(t, Split):
            new = Split(axis_map[t.input], t.factor, t.inner_split)
        else:
            new = Merge(axis_map[t.outer], axis_map[t.inner])
        for old, out in zip(t.outputs, new.outputs):
            axis_map[old] = out
    return axis_map
