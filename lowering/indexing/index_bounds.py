"""How far a kernel's index arithmetic reaches at a run's sizes, and so which index type
(32 or 64 bits) the run needs.

A kernel is lowered with 32-bit index arithmetic (kir.Kernel.index_dtype); a run whose
sizes make any index or bound expression leave the i32 range needs the 64-bit build. The
extents alone do not say so: with N = 2^31 - 100, every tensor fits, but the grid's
`(N + 127) / 128` and a guard's `blockIdx.x * 128 + threadIdx.x < N` pass 2^31 and wrap;
a reduction over K = 2^31 + 1 elements of a broadcast (zero-stride) input has small
tensors and a scalar K that no i32 holds.

`reach(kernel, scalars, strides)` evaluates every integer expression of the kernel's index
arithmetic over intervals, exactly (Python integers do not wrap): the scalar parameters
and the tensors' strides at the run's values, loop variables over [0, extent), thread and
block indices over the launch configuration, a load of an integer over its type's range.
Every subexpression counts, as C computes it (ceildiv's `a + b - 1` too); how each
operator acts on intervals is lowering.indexing.intervals' (an end it leaves unknown is
the end of the expression's type). Index arithmetic is every expression in an index
position: launch extents, tensor sizes and strides, buffer and workspace sizes and
offsets, loop extents, guards, element indices of loads and stores (inside stored values
too), copy sizes, fragment and semaphore indices; the values a kernel computes and
stores are data, not indices. Guards are not used to narrow the intervals (an index
under `i < N` is bounded by i's own range), so the answer is an upper bound: a run near
the boundary may take 64 bits it does not strictly need, never the other way round.
"""

from dataclasses import fields

from fuserir.dtypes import DataType

from .. import kir
from . import intervals

__all__ = ["reach", "index_dtype_for", "IndexRangeError"]

_LIMITS = {DataType.i32: (-2 ** 31, 2 ** 31 - 1), DataType.i64: (-2 ** 63, 2 ** 63 - 1)}


class IndexRangeError(ValueError):
    """Index arithmetic that not even 64 bits hold."""


def reach(kernel, scalars, strides):
    """(lowest, highest) value of any index or bound expression of `kernel` when its scalar
    parameters have the values `scalars` ({name: int}) and its tensor parameters the
    strides `strides` ({tensor name: [stride in elements, per axis]})."""
    return _Reach(kernel, scalars, strides).run()


def index_dtype_for(kernel, scalars, strides, i32_limit=_LIMITS[DataType.i32][1]):
    """DataType.i32 if every index and bound expression of `kernel` stays in the i32 range
    at these values (see reach; `i32_limit` lowers the top of that range, for tests),
    else DataType.i64; IndexRangeError past 64 bits."""
    lo, hi = reach(kernel, scalars, strides)
    if -i32_limit - 1 <= lo and hi <= i32_limit:
        return DataType.i32
    low, high = _LIMITS[DataType.i64]
    if low <= lo and hi <= high:
        return DataType.i64
    raise IndexRangeError(f"kernel {kernel.name}: index arithmetic reaches "
                          f"{hi if hi > _LIMITS[DataType.i64][1] else lo} at these sizes, "
                          f"beyond 64 bits")


class _Reach:
    def __init__(self, kernel, scalars, strides):
        self.kernel = kernel
        self.env = {}                       # kir.name_key -> (lo, hi)
        for p in kernel.scalar_params:
            value = int(scalars[p.var.name])
            self.env[p.var.key] = (value, value)
        for p in kernel.tensor_params:
            given = strides.get(p.buffer.name)
            for axis, var in enumerate(p.strides):
                if given is not None:
                    self.env[var.key] = (int(given[axis]), int(given[axis]))
        self.lo = self.hi = 0
        self.specials = {}

    def note(self, interval):
        lo, hi = interval
        self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)
        return interval

    def run(self):
        k = self.kernel
        launch = k.launch
        for kind, dims in ((kir.SpecialKind.blockIdx, launch.grid),
                           (kir.SpecialKind.threadIdx, launch.block)):
            total = kir.SpecialKind.gridDim if kind is kir.SpecialKind.blockIdx \
                else kir.SpecialKind.blockDim
            for axis, e in zip("xyz", tuple(dims) + (kir.Const(1, k.index_dtype),) * 3):
                extent = max(self.index(e)[1], 1)
                self.specials[(kind, axis)] = (0, extent - 1)
                self.specials[(total, axis)] = (extent, extent)
        for p in k.tensor_params:
            for e in list(p.sizes) + list(p.strides):
                self.index(e)
        for w in k.workspaces:
            self.index(w.size)
        self.stmts(k.body)
        return self.lo, self.hi

    # -- statements -----------------------------------------------------------------------
    def stmts(self, body):
        for s in body:
            if isinstance(s, kir.Allocate):
                for e in (s.buffer.size, s.buffer.byte_offset):
                    if e is not None:
                        self.index(e)
            elif isinstance(s, kir.ForLoop):
                hi = self.index(s.extent)[1]
                saved = self.env.get(s.var.key)
                self.env[s.var.key] = self.note((0, max(hi - 1, 0)))
                self.stmts(s.body)
                if saved is None:
                    self.env.pop(s.var.key, None)
                else:
                    self.env[s.var.key] = saved
                continue
            else:
                for f in fields(s):
                    value = getattr(s, f.name)
                    if isinstance(value, kir.ScalarExpr):
                        if f.name in s.data_fields:    # what it computes, not where
                            self.data(value)
                        else:
                            self.index(value)
            for body_ in s.bodies():
                self.stmts(body_)

    def data(self, e):
        """A computed value: only the indices of the loads in it are index arithmetic."""
        for x in kir.walk_expr(e):
            if isinstance(x, kir.Load):
                self.index(x.index)

    # -- expressions ----------------------------------------------------------------------
    def index(self, e):
        """The interval of an index expression, every integer subexpression noted."""
        r = self.interval(e)
        if e.dtype.is_int or e.dtype is DataType.bool:
            self.note(r)
        return r

    def interval(self, e):
        if isinstance(e, kir.Const):
            if e.dtype.is_int or e.dtype is DataType.bool:
                return (int(e.value), int(e.value))
            return _full(DataType.i64)
        if isinstance(e, kir.Var):
            known = self.env.get(e.key)
            return known if known is not None else _full(e.dtype)
        if isinstance(e, kir.Special):
            return self.specials[(e.kind, e.axis)]
        if isinstance(e, kir.Load):
            self.index(e.index)
            return _full(e.dtype)
        if isinstance(e, kir.ShuffleXor):
            return self.index(e.value)
        if isinstance(e, kir.Cast):
            a = self.index(e.a)
            if e.dtype is DataType.bool:
                return (0, 1)
            return a if e.a.dtype.is_int or e.a.dtype is DataType.bool else _full(e.dtype)
        if isinstance(e, kir.Select):
            self.index(e.cond)
            return intervals.hull(self.index(e.a), self.index(e.b))
        if isinstance(e, kir.UnOp):
            a = self.index(e.a)
            if e.op == "neg":
                return intervals.neg(a)
            if e.op == "abs":
                return intervals.absolute(a)
            if e.op == "not":
                return intervals.BOOL
            return _full(e.dtype) if e.dtype.is_int else (0, 0)
        if isinstance(e, kir.BinOp):
            return self.binop(e)
        return _full(DataType.i64)

    def binop(self, e):
        a, b = self.index(e.a), self.index(e.b)
        op = e.op
        if op in kir.COMPARISONS or op in ("and", "or"):
            return intervals.BOOL
        if op == "ceildiv":               # as C computes it: (a + b - 1) / b
            a = self.note(intervals.sub(intervals.add(a, b), (1, 1)))
            op = "div"
        known = intervals.BINARY.get(op)
        lo, hi = known(a, b) if known is not None else (None, None)
        full = _full(e.dtype)
        return (full[0] if lo is None else lo, full[1] if hi is None else hi)


def _full(dtype):
    return _LIMITS.get(dtype, _LIMITS[DataType.i64]) if dtype.is_int else (0, 1)
