"""The CPU interpreter of kernel IR and its deterministic race detector (a second backend).

`run_kernel(kernel, args, blocks=None)` runs a kir.Kernel on numpy arrays, writing its
outputs in place, and raises RaceError (after the run, outputs written) listing every
hazard it saw. DESIGN.md sections 5 and 6 are the specification; this header says how
this file meets it.

Execution model
  * All threads of a block run in lockstep, vectorised over thread ids. A statement runs
    for an *active set* `act`: a sorted array of linear thread ids (x + y*bx + z*bx*by).
    Every scalar expression evaluates to a numpy array over `act` (or a numpy scalar when
    it is uniform). Loop variables are uniform (a ForLoop's extent must be the same for
    every active thread), so no per-thread state lives outside memory.
  * IfThenElse with a thread-dependent condition runs the then-branch for the threads
    that take it, then the else-branch for the others. Select and && / || evaluate their
    operands lazily, as the emitted C does (`c ? a[i] : 0` does not load a[i] where !c).
  * Blocks are generators run by `schedule` in launch order (x fastest). A block that must
    wait (SemWait on a grid semaphore) yields a `Wait`; the scheduler resumes the earliest
    block that can go on; if every remaining block waits, that is a "deadlock" hazard
    (naming the semaphore buffer). So a split-K turnstile where split z waits for z and
    releases z + 1 runs whatever the order of blockIdx.z in the launch.
  * Names: variables are bound by kir.name_key, so a user's size called i0 is not the loop
    index i0; arguments are taken by kir.arg_name (a size named like a tensor: scalar:N).
  * Memory: global buffers are the caller's arrays addressed through their strides (the
    kernel receives strides in elements, like the CUDA ABI); a Workspace is a 1-D array
    given in args, kept by the caller in run_kernel's `workspaces`, or fresh zeros (its
    first `size` elements are in bounds); shared memory is one byte
    array per block, every shared buffer a typed view of it at its byte offset, so aliased
    buffers really share bytes; local buffers are per-thread arrays [threads, size].
    Fresh shared bytes are 0xFF and fresh local arrays NaN (floats) / -1 (ints), so a read
    of never-written memory is visible in the output as well as reported.
  * Arithmetic: every BinOp/UnOp computes in its node's dtype. f16/bf16 arithmetic is done
    in f32 and rounded once (exact for + - * /); transcendental functions in f64, rounded
    to the node's dtype. min/max/relu are spelled as codegen.cuda's preamble spells them
    (NaN propagates). Integer math wraps like the GPU, / and % truncate toward zero
    (C), ceildiv is (a + b - 1) / b; by zero, a / 0 = 0 and a % 0 = a, and MIN / -1 wraps
    to MIN (fuserir.numerics, which the CUDA emitter spells out). Casts follow kir.Cast
    (fuserir.numerics.convert): float->int truncates (saturating, NaN -> 0, as cvt.rzi
    does), to bool is != 0, narrowing floats round to nearest even exactly once (f64->bf16
    by round-to-odd through f32). The interpreter is more lenient than
    the CUDA emitter about types: a stored value or operand of another dtype is converted
    with Cast semantics rather than refused.

Race detector (shared memory)
  Shadow state per *grain* of the pool (the gcd of the shared buffers' element sizes and
  byte offsets: 4 bytes for an f32-only kernel, 2 once an f16 buffer is there, 1 for a
  bool buffer or an odd offset; reports are in bytes):
    w_tid/w_ev/w_epoch  last writer thread, its access event, the epoch of the write
    w_buf               the buffer (by name) last written: persists across barriers
    r_tid1/r_tid2       up to two distinct reader threads of the current epoch (two are
    r_ev1/r_ev2/r_epoch  enough to know whether a reader other than any writer exists)
  An epoch is the time between two barriers; a Barrier executed by all threads starts a
  new one. Reads of a Store's index and value are processed (for every active thread)
  before its write. Reported: RAW, WAR, WAW (also two threads writing one byte in one
  statement), stale-read (bytes last written through a different buffer name, across
  barriers too), uninitialized-read (never written in this block), out-of-bounds (any
  memory), barrier-divergence, shuffle-divergence, warp-divergence, async-pending,
  deadlock. Hazards are deduplicated by
  (kind, first program point, second program point) over the whole run; each names the
  buffer, a byte range (physical pool bytes for shared memory), both program points as
  "<label>: <statement>", an example pair of threads, the loop iterations of both sides
  and the block. A Barrier under thread-dependent control flow does not start an epoch
  (it orders nothing reliably), so the accesses it was meant to order are reported too.
  Global memory is checked for bounds and for cross-CTA ordering (below).
  A shared buffer without a byte_offset (before the allocation pass) is placed after the
  placed ones, 16-byte aligned, so hand-built kernels need not place every buffer.

Tensor cores and asynchronous copies
  * LdMatrix / Mma are warp-collective (warps = 32 consecutive linear ids, as shuffles):
    a warp with some but not all lanes active is a "warp-divergence" hazard (missing
    lanes' rows / fragments count as 0). ldmatrix: lanes < 8*num read their 16-byte row
    (through _shared_read, so RAW / pending / stale checks apply; other lanes' addresses
    are not evaluated), then register i of lane l gets row l>>2, cols 2(l&3), 2(l&3)+1 of
    matrix i (.trans: rows 2(l&3), 2(l&3)+1, col l>>2); values move as raw 16-bit bits.
    mma: per warp, A/B/C are gathered from the lanes' fragments (kir.Mma's layout), D =
    A @ B + C in f64 (products of halves are exact), rounded once to f32, scattered back.
  * cp.async: at issue the source bytes are read (src_size of them, the rest zeros;
    src_size 0 reads nothing) and the destination grains are checked like a write
    (pending conflicts, WAR/WAW against this epoch: the copy may land at once) and then
    marked *pending* in p_tid/p_ev (issuing thread, issue event) instead of written. Each
    issue is a _Copy (per element: thread, index, value, group = the thread's commit count
    at issue). Per thread `committed` / `retired` group counters: commit increments
    committed; wait_group n sets retired = max(retired, committed - n), so uncommitted
    copies (group == committed) never retire. Retired copies land: data written, pending
    marks cleared, and the shadow records an ordinary write by the issuing thread in the
    current epoch (event = the cp.async issue, so later RAW/WAR/WAW name the cp.async;
    other threads need a barrier after the wait). Any access (ordinary, ldmatrix, another
    cp.async, the issuing thread's own, across barriers) to a pending grain is an
    "async-pending" hazard (first = the cp.async at its issue iteration). Data: a read of
    pending bytes sees the old bytes; an ordinary write onto pending bytes is overwritten
    right after by the copy's bytes there (the late copy wins the write/write race, as
    on the H200), so a missing drain corrupts the output deterministically even when no
    later wait exists. Copies still pending when the block ends are reported
    ("async-pending", second = "end of the block": copy never waited for) and land then.

Cross-CTA checker (global memory: outputs, workspaces, any written buffer)
  * Every execution of a statement that writes global memory is an event numbered in run
    order (its number is the write's sequence number; gev_* hold its statement, loop
    iterations and block). The shadow of a global buffer (made at its first write) holds
    per element the event and the thread of its last write (w_seq, w_tid).
  * Fence: each active thread's writes so far are fenced (per thread f_seq = the next
    sequence number; f_old keeps its latest fence from before the current epoch).
  * SemRelease by block X on cell (sem, index) (a fence of the releasing threads, then the
    store) publishes to the cell a *view* {block: per-writer-thread threshold}: X's own
    writes fenced by a releasing thread, or by any thread of X before X's last barrier
    (a fence the release is not ordered after does not count), merged with everything X
    had acquired (transitively: what X acquired and re-releases counts as published). A
    cell keeps the view of its last release; a plain Store to it ends that.
  * SemWait: spins (yields `Wait(stmt, ready, what=sem name)`) until sem[index] == value
    for every waiting thread, then acquires the cell's view: for the waiting threads at
    once, for the whole block at its next barrier (pending until then).
  * An access (read, write, cp.async source read) by block Y of an element whose last
    write was by another block X is checked: visible iff seq < the threshold of the
    writing thread in Y's view of X (plus Y's pending acquisitions, for waiting threads).
    Otherwise a "cross-cta" hazard: buffer, the example element's bytes, the writing and
    the accessing statement, threads, iterations, block Y (extra["blocks"] = (X, Y)), and
    why (the write was never fenced, or Y acquired no release that published it). Blocks
    that write disjoint elements and never read each other's are never reported. The
    semaphore operations themselves are synchronization, not data: they are not checked,
    and a SemRelease clears its cells' data shadow.
  Threads of a block still run in lockstep, so what the shadow cannot see is ordering
  inside a statement list that is not a Fence/Barrier/SemRelease/SemWait: e.g. a release
  is always after the releasing block's earlier statements.
"""

import math
from functools import reduce

import ml_dtypes
import numpy as np

from codegen.errors import Hazard, RaceError
from fuserir.dtypes import DataType
from fuserir.errors import FuserirError
from fuserir.numerics import convert, int_div, int_mod
from lowering import kir

__all__ = ["run_kernel", "InterpError", "Wait", "schedule", "convert"]


class InterpError(FuserirError):
    """A kernel or argument the interpreter cannot run (missing argument, wrong dtype or
    shape, thread-dependent loop extent, unknown statement)."""


# ---------------------------------------------------------------------------------------
# Conversions (kir.Cast semantics) and constants
# ---------------------------------------------------------------------------------------

# The conversions themselves are fuserir.numerics' (shared with the reference evaluator).
_F16 = np.dtype(np.float16)
_BF16 = np.dtype(ml_dtypes.bfloat16)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_BOOL = np.dtype(np.bool_)
_HALF = (_F16, _BF16)


def _const(value, dtype):
    if dtype is DataType.bool:
        return np.bool_(bool(value))
    if dtype.is_int:
        v = int(value)
        info = np.iinfo(dtype.numpy)
        if not info.min <= v <= info.max:
            raise InterpError(f"constant {value} does not fit {dtype}")
        return dtype.numpy.type(v)
    return convert(np.float64(value), dtype)


def _truth(v):
    a = np.asarray(v)
    if a.dtype != _BOOL:
        v = convert(v, DataType.bool)
    return v


def _to(v, dtype):
    return v if v.dtype == dtype.numpy else convert(v, dtype)


_erfc = np.frompyfunc(math.erfc, 1, 1)


def _gelu(x):
    # 1 + erf(x / sqrt 2) = erfc(-x / sqrt 2), without cancellation for x << 0
    return 0.5 * x * np.asarray(_erfc(-x / math.sqrt(2.0)), dtype=_F64)


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


_TRANSCENDENTAL = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "tanh": np.tanh, "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "gelu": _gelu, "gelu_tanh": _gelu_tanh,
}

_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
            "eq": np.equal, "ne": np.not_equal}


def _pick(cond, a, b):
    r = np.where(cond, a, b)
    return r[()] if r.ndim == 0 else r


# min/max as the CUDA preamble spells them: (a < b || a != a) ? a : b (NaN propagates;
# min(-0, +0) is the second operand), and relu as x < 0 ? 0 : x (NaN and -0 kept).
def _min(a, b):
    return _pick((a < b) | (a != a), a, b)


def _max(a, b):
    return _pick((a > b) | (a != a), a, b)


def _relu(x):
    return _pick(x < 0, x.dtype.type(0), x)


_FLOAT_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                 "div": np.true_divide, "mod": np.fmod, "min": _min, "max": _max}

_INT_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
               "min": _min, "max": _max, "xor": np.bitwise_xor}


# ---------------------------------------------------------------------------------------
# The block scheduler
# ---------------------------------------------------------------------------------------


class Wait:
    """What a block coroutine yields when it cannot go on (e.g. a semaphore wait): it is
    resumed once `ready()` is true. `stmt` is the waiting statement, `what` names what it
    waits on (a semaphore buffer) for a deadlock report."""

    def __init__(self, stmt, ready, what=""):
        self.stmt = stmt
        self.ready = ready
        self.what = what


def schedule(coroutines):
    """Run (block, generator) pairs, given in launch order, to completion: always resume
    the earliest block that is not waiting (or whose Wait is ready). With no waits this is
    block after block in launch order. Returns [(block, Wait)] of the blocks left waiting
    forever when every remaining block waits (a deadlock), else []."""
    live = [[block, gen, None] for block, gen in coroutines]
    while live:
        for i, entry in enumerate(live):
            wait = entry[2]
            if wait is not None and not wait.ready():
                continue
            try:
                entry[2] = next(entry[1])
            except StopIteration:
                del live[i]
            break
        else:
            return [(block, wait) for block, _, wait in live]
    return []


# ---------------------------------------------------------------------------------------
# Kernel-level state: arguments, global memory, shared layout, collected hazards
# ---------------------------------------------------------------------------------------


class _GlobalArg:
    """A global buffer: a 1-D view over the caller's array memory, from its lowest to its
    highest element; kernel indices are element offsets from element [0, ..., 0]."""

    def __init__(self, name, array):
        self.name = name
        self.array = array
        self.dtype = array.dtype
        item = array.itemsize
        if any(s % item for s in array.strides):
            raise InterpError(f"argument {name}: strides {array.strides} (bytes) are not "
                              f"multiples of the element size {item}")
        self.strides = tuple(s // item for s in array.strides)
        self.shape = array.shape
        self.shadow = None   # cross-CTA shadow (_GlobalShadow), made at the first write
        if array.size == 0:
            self.lo, self.span, self.flat, self.valid = 0, 0, np.zeros(0, self.dtype), None
            return
        self.lo = sum(min(0, (n - 1) * s) for n, s in zip(self.shape, self.strides))
        hi = sum(max(0, (n - 1) * s) for n, s in zip(self.shape, self.strides))
        self.span = hi - self.lo + 1
        corner = tuple(slice(n - 1, n) if s < 0 else slice(0, 1)
                       for n, s in zip(self.shape, self.strides))
        first = array[corner] if corner else array[np.newaxis]   # a view, never a copy
        self.flat = np.lib.stride_tricks.as_strided(first, shape=(self.span,),
                                                    strides=(item,))
        self.valid = None
        if self.span != array.size:    # gaps (or overlaps): mark the real elements
            self.valid = np.zeros(self.span, dtype=bool)
            offsets = sum(np.arange(n)[(slice(None),) + (None,) * (len(self.shape) - i - 1)]
                          * s for i, (n, s) in enumerate(zip(self.shape, self.strides)))
            self.valid[np.asarray(offsets).ravel() - self.lo] = True

    def positions(self, idx):
        """Flat positions of element offsets idx (int64 array) and which are in bounds."""
        pos = idx - self.lo
        ok = (pos >= 0) & (pos < self.span)
        if self.valid is not None:
            ok &= self.valid[np.where(ok, pos, 0)] if self.span else ok
        return pos, ok


class _GlobalShadow:
    """Per element of a global buffer's span: the event (index into _Interp's global write
    events: statement, iterations, block) and the thread of the last write, -1 / -1 when
    no block of this launch wrote it."""

    def __init__(self, span):
        self.w_seq = np.full(span, _NONE, np.int32)
        self.w_tid = np.full(span, _NONE, np.int16)


class _SharedLayout:
    """Where a shared buffer lives in the pool (bytes) and its shadow grains."""

    def __init__(self, buffer, offset, size, alloc, bufid, grain):
        self.buffer = buffer
        self.name = buffer.name
        self.dtype = buffer.dtype.numpy
        self.itemsize = self.dtype.itemsize
        self.offset = offset
        self.size = size
        self.alloc = alloc
        self.bufid = bufid
        self.k = max(1, self.itemsize // grain)      # grains per element


def _point(stmt):
    return f"{stmt.label}: {kir.format_stmt(stmt)}"


class _Interp:
    def __init__(self, kernel, args, workspaces=None):
        self.kernel = kernel
        self.hazards = []
        self.seen = set()
        self.consts = {}
        self.stmts = list(kir.walk(kernel.body))
        self.sid = {s: i for i, s in enumerate(self.stmts)}
        self.env = {}
        # cross-CTA checker: one event per execution of a statement that writes global
        # memory (its statement, loop iterations and linear block id); semaphore cells
        # -> what their last SemRelease published; each block's fence state
        self.gev_stmt, self.gev_iters = [], []
        self.gev_block = np.empty(256, np.int32)
        self.gev_sid = np.empty(256, np.int32)
        self.cells = {}
        self.cell_buffers = set()
        self.fences = {}
        self._bind_args(args, workspaces)
        uniform = _Evaluator(self)
        launch = kernel.launch
        if launch is None or launch.grid is None or launch.block is None:
            raise InterpError(f"kernel {kernel.name} has no launch configuration")
        if len(launch.grid) > 3 or len(launch.block) > 3:
            raise InterpError(f"kernel {kernel.name}: grid and block have at most 3 extents")
        # missing trailing extents are 1, as in CUDA's dim3
        self.grid = tuple(self._extent(uniform, e, f"grid.{a}")
                          for e, a in zip(launch.grid, "xyz")) + (1,) * (3 - len(launch.grid))
        self.block = tuple(self._extent(uniform, e, f"block.{a}")
                           for e, a in zip(launch.block, "xyz")) + (1,) * (3 - len(launch.block))
        self.nthreads = self.block[0] * self.block[1] * self.block[2]
        if not 1 <= self.nthreads <= 1024:
            raise InterpError(f"kernel {kernel.name}: block {self.block} has "
                              f"{self.nthreads} threads (1..1024 allowed)")
        self._layout_shared(uniform)
        self._layout_local(uniform)
        lin = np.arange(self.nthreads, dtype=np.int64)
        bx, by = self.block[0], self.block[1]
        self.tid = {"x": lin % bx, "y": (lin // bx) % by, "z": lin // (bx * by)}
        self.arange = np.arange(self.nthreads * 8, dtype=np.int64)

    # -- arguments ------------------------------------------------------------------

    def _bind_args(self, args, workspaces=None):
        k = self.kernel
        for p in k.scalar_params:
            name = kir.arg_name(k, p)
            if name not in args:
                raise InterpError(f"kernel {k.name}: missing scalar argument {name}")
            self.env[p.var.key] = self._scalar(name, args[name], p.var.dtype)
        self.globals = {}
        self.globals_by_name = {}
        for p in k.tensor_params:
            b = p.buffer
            if b.name not in args:
                raise InterpError(f"kernel {k.name}: missing tensor argument {b.name}")
            arr = args[b.name]
            if not isinstance(arr, np.ndarray):
                raise InterpError(f"argument {b.name}: expected a numpy array, got "
                                  f"{type(arr).__name__}")
            if arr.dtype != b.dtype.numpy:
                raise InterpError(f"argument {b.name}: dtype {arr.dtype} but the kernel "
                                  f"expects {b.dtype}")
            if arr.ndim != len(p.sizes):
                raise InterpError(f"argument {b.name}: {arr.ndim} dimension(s) but the "
                                  f"kernel expects {len(p.sizes)}")
            for axis, (size, n) in enumerate(zip(p.sizes, arr.shape)):
                if isinstance(size, kir.Var):
                    if size.key not in self.env:
                        self.env[size.key] = self._scalar(size.name, n, size.dtype)
                    elif int(self.env[size.key]) != n:
                        raise InterpError(
                            f"argument {b.name}: axis {axis} has extent {n} but "
                            f"{size.name} = {int(self.env[size.key])}")
                elif isinstance(size, kir.Const) and int(size.value) != n:
                    raise InterpError(f"argument {b.name}: axis {axis} has extent {n}, "
                                      f"the kernel expects {int(size.value)}")
            g = _GlobalArg(b.name, arr)
            for var, s in zip(p.strides, g.strides):
                self.env[var.key] = self._scalar(var.name, s, var.dtype)
            self.globals[b] = g
            self.globals_by_name[b.name] = g
        self._bind_workspaces(args, workspaces)

    def _bind_workspaces(self, args, kept):
        """Each Workspace: the array given in `args` under its buffer name, else the one
        kept in `kept` ({name: array}, when given and large enough), else fresh zeros (put
        into `kept`). Only its first `size` elements are the kernel's."""
        uniform = _Evaluator(self)
        for w in self.kernel.workspaces:
            b = w.buffer
            if b.memory is not kir.Memory.global_:
                raise InterpError(f"workspace {b.name} is in {b.memory.value} memory, not "
                                  "global")
            size = int(uniform.uniform(w.size, f"the size of workspace {b.name}"))
            if size < 0:
                raise InterpError(f"workspace {b.name} has a negative size {size}")
            arr = args.get(b.name)
            if arr is None and kept is not None:
                arr = kept.get(b.name)
                if arr is not None and (arr.ndim != 1 or len(arr) < size
                                        or arr.dtype != b.dtype.numpy):
                    arr = None                  # too small: grow (zeros again)
            if arr is None:
                arr = np.zeros(size, dtype=b.dtype.numpy)
                if kept is not None:
                    kept[b.name] = arr
            if not isinstance(arr, np.ndarray):
                raise InterpError(f"workspace {b.name}: expected a numpy array, got "
                                  f"{type(arr).__name__}")
            if arr.dtype != b.dtype.numpy or arr.ndim != 1 or len(arr) < size:
                raise InterpError(f"workspace {b.name}: expected a 1-D {b.dtype} array of "
                                  f"at least {size} elements, got {arr.dtype} "
                                  f"{arr.shape}")
            g = _GlobalArg(b.name, arr[:size])
            self.globals[b] = g
            self.globals_by_name[b.name] = g

    @staticmethod
    def _scalar(name, value, dtype):
        try:
            v = int(value)
            ok = v == value
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise InterpError(f"scalar argument {name} must be an integer, got {value!r}")
        return _const(v, dtype)

    def _extent(self, uniform, expr, what):
        v = uniform.uniform(expr, what)
        if v < 0:
            raise InterpError(f"kernel {self.kernel.name}: {what} = {v} is negative")
        return int(v)

    # -- memory layout --------------------------------------------------------------

    def _layout_shared(self, uniform):
        """The pool: every shared Allocate at its byte offset (unplaced buffers after the
        placed ones, 16-byte aligned); size = max of offset + bytes."""
        allocs = [s for s in self.stmts
                  if isinstance(s, kir.Allocate) and s.buffer.memory is kir.Memory.shared]
        placed, unplaced = [], []
        for s in allocs:
            b = s.buffer
            size = int(uniform.uniform(b.size, f"the size of {b.name}"))
            if b.byte_offset is None:
                unplaced.append((s, size))
            else:
                placed.append((s, int(uniform.uniform(b.byte_offset,
                                                      f"the byte offset of {b.name}")), size))
        end = max((off + size * s.buffer.dtype.itemsize for s, off, size in placed),
                  default=0)
        for s, size in unplaced:
            end = -(-end // 16) * 16
            placed.append((s, end, size))
            end += size * s.buffer.dtype.itemsize
        self.pool_bytes = end
        self.grain = reduce(math.gcd, [v for s, off, _ in placed
                                       for v in (off, s.buffer.dtype.itemsize)], 0) or 1
        self.ngrains = -(-self.pool_bytes // self.grain)
        bufids = {}
        self.shared = {}
        self.shared_by_name = {}
        for s, off, size in placed:
            lay = _SharedLayout(s.buffer, off, size, s,
                                bufids.setdefault(s.buffer.key, len(bufids)), self.grain)
            self.shared[s.buffer] = lay
            self.shared_by_name.setdefault(s.buffer.name, lay)
        self.bufnames = {lay.bufid: lay.name for lay in self.shared.values()}

    def _layout_local(self, uniform):
        self.local_sizes = {}
        for s in self.stmts:
            if isinstance(s, kir.Allocate) and s.buffer.memory is kir.Memory.local:
                b = s.buffer
                self.local_sizes[b] = int(uniform.uniform(b.size, f"the size of {b.name}"))

    # -- hazards --------------------------------------------------------------------

    def add(self, key, make):
        """Record a hazard unless (kind, first, second) was seen; `make` builds it."""
        if key in self.seen:
            return
        self.seen.add(key)
        self.hazards.append(make())

    def coords(self, lin):
        lin = int(lin)
        bx, by, _ = self.block
        return (lin % bx, (lin // bx) % by, lin // (bx * by))

    def block_coords(self, lin):
        lin = int(lin)
        gx, gy, _ = self.grid
        return (lin % gx, (lin // gx) % gy, lin // (gx * gy))

    def global_event(self, stmt, iters, lin):
        """A new global write event (its number is also the write's sequence number)."""
        n = len(self.gev_stmt)
        if n == len(self.gev_block):
            self.gev_block = np.concatenate([self.gev_block, np.empty_like(self.gev_block)])
            self.gev_sid = np.concatenate([self.gev_sid, np.empty_like(self.gev_sid)])
        self.gev_block[n] = lin
        self.gev_sid[n] = self.sid.get(stmt, -1)
        self.gev_stmt.append(stmt)
        self.gev_iters.append(iters)
        return n

    # -- running --------------------------------------------------------------------

    def run(self, blocks=None):
        gx, gy, gz = self.grid
        if blocks is None:
            order = [(x, y, z) for z in range(gz) for y in range(gy) for x in range(gx)]
        else:
            chosen = set()
            for b in blocks:
                b = tuple(int(v) for v in (b if isinstance(b, (tuple, list)) else (b,)))
                b = b + (0,) * (3 - len(b))
                if len(b) != 3 or not all(0 <= v < n for v, n in zip(b, self.grid)):
                    raise InterpError(f"block {b} is outside the grid {self.grid}")
                chosen.add(b)
            order = sorted(chosen, key=lambda b: (b[2], b[1], b[0]))
        with np.errstate(all="ignore"):
            stuck = schedule([(b, self._block(b)) for b in order])
        for block, wait in stuck:
            others = [b for b, _ in stuck]
            self.add(("deadlock", wait.stmt.label, wait.stmt.label), lambda: Hazard(
                kind="deadlock", buffer=wait.what or "grid", first=_point(wait.stmt),
                second=_point(wait.stmt), block=block,
                detail=f"blocks {others} wait forever: every block left is waiting"))

    def _block(self, bidx):
        blk = _Block(self, bidx)
        yield from blk.exec_list(self.kernel.body, blk.all)
        blk.finish()


# ---------------------------------------------------------------------------------------
# Expression evaluation (vectorised over the active threads)
# ---------------------------------------------------------------------------------------


class _Evaluator:
    """Evaluates scalar expressions; without a block (launch configuration, allocation
    sizes) only constants, parameters and arithmetic are allowed."""

    def __init__(self, interp):
        self.interp = interp
        self.env = interp.env
        self.stmt = None

    def where(self):
        return f" in {_point(self.stmt)}" if self.stmt is not None else ""

    def ev(self, e, act):
        try:
            f = _EVAL[type(e)]
        except KeyError:
            raise InterpError(f"the interpreter cannot evaluate {type(e).__name__}"
                              f"{self.where()}") from None
        return f(self, e, act)

    def uniform(self, e, what):
        if e is None:
            raise InterpError(f"{what} is not set")
        v = self.ev(e, None)
        if np.ndim(v) != 0:
            raise InterpError(f"{what} is not uniform")
        return v

    def _const(self, e, act):
        c = self.interp.consts.get(e)
        if c is None:
            c = self.interp.consts[e] = _const(e.value, e.dtype)
        return c

    def _var(self, e, act):
        try:
            return self.env[e.key]
        except KeyError:
            raise InterpError(f"unbound variable {e.name}{self.where()}") from None

    def _special(self, e, act):
        if e.kind is kir.SpecialKind.blockDim:
            return _const(self.interp.block["xyz".index(e.axis)], e.dtype)
        if e.kind is kir.SpecialKind.gridDim:
            return _const(self.interp.grid["xyz".index(e.axis)], e.dtype)
        raise InterpError(f"{e.name} used outside a block{self.where()}")

    def _binop(self, e, act):
        op = e.op
        if op == "and" or op == "or":
            return self._logical(e, act)
        a = self.ev(e.a, act)
        b = self.ev(e.b, act)
        if op in _COMPARE:
            if a.dtype in _HALF:
                a = a.astype(_F32)
            if b.dtype in _HALF:
                b = b.astype(_F32)
            return _COMPARE[op](a, b)
        dt = e.dtype
        if dt.is_float:
            work = DataType.f32 if dt.numpy in _HALF else dt
            a, b = _to(a, work), _to(b, work)
            if op not in _FLOAT_BINARY:
                raise InterpError(f"operator {op} on {dt}{self.where()}")
            r = _FLOAT_BINARY[op](a, b)
            return r if work is dt else convert(r, dt)
        if dt is DataType.bool:
            if op == "xor":
                raise InterpError(f"xor on bool (integers only){self.where()}")
            ai, bi = _to(a, DataType.i32), _to(b, DataType.i32)
            return convert(self._int_op(op, ai, bi), dt)
        return self._int_op(op, _to(a, dt), _to(b, dt))

    def _int_op(self, op, a, b):
        f = _INT_BINARY.get(op)
        if f is not None:
            return f(a, b)
        if op == "div":                 # fuserir.numerics: a / 0 = 0, MIN / -1 = MIN
            return int_div(a, b)
        if op == "mod":                 # a % 0 = a, MIN % -1 = 0
            return int_mod(a, b)
        if op == "ceildiv":
            return int_div(a + b - b.dtype.type(1), b)
        raise InterpError(f"unknown operator {op}{self.where()}")

    def _logical(self, e, act):
        a = _truth(self.ev(e.a, act))
        is_and = e.op == "and"
        if np.ndim(a) == 0:
            if bool(a) != is_and:         # false && ..., true || ...
                return a
            return _truth(self.ev(e.b, act))
        need = a if is_and else ~a        # where the right operand decides
        if not need.any():
            return a
        if need.all():
            return _truth(self.ev(e.b, act))
        r = a.copy()
        r[need] = _truth(self.ev(e.b, act[need]))
        return r

    def _unop(self, e, act):
        a = self.ev(e.a, act)
        op, dt = e.op, e.dtype
        if op == "not":
            return convert(np.logical_not(_truth(a)), dt)
        if op in ("neg", "abs", "relu"):
            if dt.is_float:
                work = DataType.f32 if dt.numpy in _HALF else dt
                x = _to(a, work)
                if op == "neg":
                    r = np.negative(x)
                elif op == "abs":
                    r = np.abs(x)
                else:
                    r = _relu(x)
                return r if work is dt else convert(r, dt)
            x = _to(a, dt)
            if op == "neg":
                return np.negative(x)
            if op == "abs":
                return np.abs(x)
            return _relu(x)
        f = _TRANSCENDENTAL.get(op)
        if f is None:
            raise InterpError(f"unknown operator {op}{self.where()}")
        if not dt.is_float:
            raise InterpError(f"{op} on {dt}{self.where()}")
        r = f(np.asarray(convert(a, DataType.f64), dtype=_F64))
        return convert(r, dt)

    def _select(self, e, act):
        c = _truth(self.ev(e.cond, act))
        dt = e.dtype
        if np.ndim(c) == 0:
            return _to(self.ev(e.a if c else e.b, act), dt)
        if c.all():
            return _to(self.ev(e.a, act), dt)
        if not c.any():
            return _to(self.ev(e.b, act), dt)
        out = np.empty(len(act), dtype=dt.numpy)
        out[c] = _to(self.ev(e.a, act[c]), dt)          # only where taken, as C's ?:
        out[~c] = _to(self.ev(e.b, act[~c]), dt)
        return out

    def _cast(self, e, act):
        return convert(self.ev(e.a, act), e.dtype)

    def _load(self, e, act):
        raise InterpError(f"load of {e.buffer.name} outside a block{self.where()}")

    def _shuffle(self, e, act):
        raise InterpError(f"shuffle outside a block{self.where()}")


# ---------------------------------------------------------------------------------------
# A block: its memories, shadow state and statement execution
# ---------------------------------------------------------------------------------------

_NONE = -1


class _Copy:
    """The pending part of one execution of a CpAsync: per destination element the issuing
    thread, the element index into the buffer, the value, the thread's group number (the
    count of its commits at issue), and whether the data has landed already."""

    def __init__(self, stmt, ev, lay, tid, idx, values, gid, landed=None):
        self.stmt, self.ev, self.lay = stmt, ev, lay
        self.tid, self.idx, self.values, self.gid = tid, idx, values, gid
        self.landed = np.zeros(len(tid), bool) if landed is None else landed

    def subset(self, m):
        return _Copy(self.stmt, self.ev, self.lay, self.tid[m], self.idx[m],
                     self.values[m], self.gid[m], self.landed[m])


class _Block(_Evaluator):
    def __init__(self, interp, bidx):
        super().__init__(interp)
        self.env = dict(interp.env)
        self.bidx = bidx
        self.T = interp.nthreads
        self.all = np.arange(self.T, dtype=np.int64)
        self.iters = ()               # ((loop var, value), ...) of the enclosing loops
        self.divergent = []           # IfThenElse statements that split the active set
        self.epoch = 0
        # shared memory and its shadow (see the module docstring)
        self.pool = np.full(interp.pool_bytes, 0xFF, dtype=np.uint8)
        self.views = {}
        n = interp.ngrains
        self.w_tid = np.full(n, _NONE, np.int32)
        self.w_ev = np.full(n, _NONE, np.int32)
        self.w_epoch = np.full(n, _NONE, np.int32)
        self.w_buf = np.full(n, _NONE, np.int32)
        self.r_epoch = np.full(n, _NONE, np.int32)
        self.r_tid1 = np.full(n, _NONE, np.int32)
        self.r_ev1 = np.full(n, _NONE, np.int32)
        self.r_tid2 = np.full(n, _NONE, np.int32)
        self.r_ev2 = np.full(n, _NONE, np.int32)
        self.stamp = np.zeros(n, np.int64)
        # cp.async: the pending (issued, not yet retired) write per grain, and per thread
        # the number of groups committed / retired; `copies` holds the pending copies
        self.p_tid = np.full(n, _NONE, np.int32)
        self.p_ev = np.full(n, _NONE, np.int32)
        self.committed = np.zeros(self.T, np.int64)
        self.retired = np.zeros(self.T, np.int64)
        self.copies = []
        self.overlap = None
        # access events: (statement, iterations, buffer name); ev_sid: statement ids
        self.events = []
        self.ev_sid = np.empty(256, np.int32)
        self.locals = {}
        self.specials = {}
        # cross-CTA (see the module docstring): per thread the write sequence number its
        # latest Fence covers (f_seq), the epoch of that Fence, and the latest one from an
        # earlier epoch (f_old); what the block has acquired ({block: thresholds}) for all
        # threads (view) and, until the next barrier, for the waiting threads only (pending)
        gx, gy, _ = interp.grid
        self.lin = bidx[0] + gx * (bidx[1] + gy * bidx[2])
        self.f_seq = np.zeros(self.T, np.int64)
        self.f_old = np.zeros(self.T, np.int64)
        self.f_epoch = np.full(self.T, _NONE, np.int64)
        interp.fences[self.lin] = self.f_seq     # (changed in place only)
        self.view = {}
        self.pending = []

    # -- statements -----------------------------------------------------------------

    def exec_list(self, stmts, act):
        for s in stmts:
            h = _LEAF.get(type(s))
            if h is not None:
                self.stmt = s
                h(self, s, act)
                continue
            h = _COMPOUND.get(type(s))
            if h is None:
                raise InterpError(f"the interpreter cannot execute {type(s).__name__} "
                                  f"({s.label})")
            self.stmt = s
            yield from h(self, s, act)

    def _for(self, s, act):
        ext = self.ev(s.extent, act)
        if np.ndim(ext) != 0:
            if not (ext == ext[0]).all():
                i = int(np.flatnonzero(ext != ext[0])[0])
                raise InterpError(
                    f"loop {_point(s)} has a thread-dependent extent: thread "
                    f"{self.interp.coords(act[0])} runs {int(ext[0])} iterations, thread "
                    f"{self.interp.coords(act[i])} runs {int(ext[i])} (block {self.bidx})")
            ext = ext[0]
        name, key = s.var.name, s.var.key
        typ = s.var.dtype.numpy.type
        saved_env, saved_iters = self.env.get(key), self.iters
        for i in range(int(ext)):
            self.env[key] = typ(i)
            self.iters = saved_iters + ((name, i),)
            yield from self.exec_list(s.body, act)
        self.iters = saved_iters
        if saved_env is None:
            self.env.pop(key, None)
        else:
            self.env[key] = saved_env

    def _if(self, s, act):
        c = _truth(self.ev(s.cond, act))
        if np.ndim(c) == 0 or c.all() or not c.any():
            taken = bool(c) if np.ndim(c) == 0 else bool(c[0])
            body = s.then_body if taken else s.else_body
            if body:
                yield from self.exec_list(body, act)
            return
        self.divergent.append(s)
        if s.then_body:
            yield from self.exec_list(s.then_body, act[c])
        if s.else_body:
            yield from self.exec_list(s.else_body, act[~c])
        self.divergent.pop()

    def _barrier(self, s, act):
        if len(act) == self.T:
            self.epoch += 1
            for _, acquired in self.pending:    # the waiters' acquisitions reach everyone
                _merge_view(self.view, acquired)
            self.pending = []
            return
        # Thread-dependent control flow: report, and do not start an epoch.
        cause = self.divergent[-1] if self.divergent else s
        missing = np.setdiff1d(self.all, act)
        it = dict(self.iters)
        self.interp.add(("barrier-divergence", cause.label, s.label), lambda: Hazard(
            kind="barrier-divergence", buffer="__syncthreads", first=_point(cause),
            second=_point(s), threads=(self.interp.coords(act[0]),
                                       self.interp.coords(missing[0])),
            iterations=(it, it), block=self.bidx,
            detail=f"{len(act)} of {self.T} threads reach the barrier (thread "
                   f"{self.interp.coords(missing[0])} does not)"))

    def _allocate(self, s, act):
        b = s.buffer
        if b.memory is kir.Memory.local and b not in self.locals:
            size = self.interp.local_sizes[b]
            dt = b.dtype.numpy
            fill = np.nan if dt.kind == "f" or dt == _BF16 else (False if dt == _BOOL else -1)
            self.locals[b] = np.full((self.T, size), fill, dtype=dt)

    def _comment(self, s, act):
        pass

    def _store(self, s, act):
        if s.width != 1:
            return self._vector_store(s, act)
        idx = self.ev(s.index, act)              # every read of the statement first,
        val = self.ev(s.value, act)              # then the write
        self._write(s.buffer, act, self._index(idx, len(act)), val)

    def _vector_store(self, s, act):
        """A copy of s.width consecutive elements (kir.Store of a kir.Load of that width):
        both first elements aligned to the vector (in the shared pool's bytes; as element
        offsets in a global array, whose strides the executable checks), every element
        read through the race detector before any is written."""
        w, src = s.width, s.value
        zeros = isinstance(src, kir.Const) and src.value == 0     # a vector of zeros
        if not zeros and (not isinstance(src, kir.Load) or src.width != w):
            raise InterpError(f"a vector store of {w} elements to {s.buffer.name} must "
                              f"store a load of {w} elements (or zeros){self.where()}")
        n = len(act)
        starts = {}
        sides = ([] if zeros else [(src.buffer, src.index)]) + [(s.buffer, s.index)]
        for buffer, index in sides:
            idx = self._index(self.ev(index, act), n)
            nbytes = w * buffer.dtype.itemsize
            if buffer.memory is kir.Memory.shared:
                bad = (self._layout(buffer).offset + idx * buffer.dtype.itemsize) % nbytes
            else:
                bad = idx % w
            if np.any(bad != 0):
                i = int(np.flatnonzero(bad)[0])
                raise InterpError(f"vector access {buffer.name}[{int(idx[i])}] of thread "
                                  f"{self.interp.coords(act[i])} is not aligned to {w} "
                                  f"elements ({nbytes} bytes){self.where()}")
            starts[id(buffer)] = idx
        if zeros:
            loads = [self.ev(src, act)] * w
        else:
            loads = [self._load(src, act, starts[id(src.buffer)] + j) for j in range(w)]
        for j, val in enumerate(loads):
            self._write(s.buffer, act, starts[id(s.buffer)] + j, val)

    def _write(self, b, act, idx, val):
        """buffer b[idx] = val for the active threads (idx: per thread element indices)."""
        val = _to(val, b.dtype) if val.dtype != b.dtype.numpy else val
        n = len(act)
        if np.ndim(val) == 0:
            val = np.full(n, val, dtype=b.dtype.numpy)
        if b.memory is kir.Memory.shared:
            lay = self._layout(b)
            ok = self._check(lay.name, idx, (idx >= 0) & (idx < lay.size), act,
                             lambda: f"outside {lay.name}[0, {lay.size})", lay)
            if ok is not None:
                act, idx, val = act[ok], idx[ok], val[ok]
            self._shared_write(lay, act, idx)
            self._view(lay)[idx] = val
            if self.overlap:                      # a pending cp.async lands on top of it
                self._land_copies(events=self.overlap)
                self.overlap = None
        elif b.memory is kir.Memory.local:
            arr = self._local(b)
            ok = self._check(b.name, idx, (idx >= 0) & (idx < arr.shape[1]), act,
                             f"outside {b.name}[0, {arr.shape[1]})")
            if ok is not None:
                act, idx, val = act[ok], idx[ok], val[ok]
            arr[act, idx] = val
        else:
            g = self._global(b)
            pos, ok = g.positions(idx)
            ok = self._check(b.name, idx, ok, act, lambda: self._global_oob(g))
            if ok is not None:
                act, pos, val = act[ok], pos[ok], val[ok]
            self._global_access(g, act, pos, write=True)
            g.flat[pos] = val

    # -- tensor cores and asynchronous copies ---------------------------------------

    def _span(self, buf, start, act, count, size, what):
        """Positions [n, count] = start + 0..count-1 per active thread, clipped into
        [0, size), and the in-bounds mask (None when all are in bounds; else reported)."""
        n = len(act)
        pos = start[:, None] + np.arange(count)
        flat = pos.ravel()
        ok = self._check(buf, flat, (flat >= 0) & (flat < size), np.repeat(act, count),
                         what)
        if ok is None:
            return pos, None
        return np.clip(pos, 0, size - 1), ok.reshape(n, count)

    def _fragment(self, buf, index, act, count, itemsize, what):
        """The local fragment buffer `buf` and each active lane's `count` element positions
        from `index`; out-of-bounds positions are reported (their values read as 0)."""
        arr = self._local(buf)
        if buf.memory is not kir.Memory.local or arr.itemsize != itemsize:
            raise InterpError(f"{what} fragment {buf.name} must be a local buffer of "
                              f"{8 * itemsize}-bit elements{self.where()}")
        start = self._index(self.ev(index, act), len(act))
        size = arr.shape[1]
        pos, ok = self._span(buf.name, start, act, count, size,
                             f"outside {buf.name}[0, {size}) (a {count}-element fragment)")
        return arr, pos, ok

    def _ldmatrix(self, s, act):
        """Per lane: lanes 0..8*num-1 read the 8 b16 values (16 bytes) of the row their
        address names (shared reads, through the race detector); register i of lane l is
        then row l>>2, columns 2(l&3), 2(l&3)+1 of matrix i (.trans: rows 2(l&3),
        2(l&3)+1, column l>>2). Rows of lanes missing from a divergent warp read as 0."""
        num = int(s.num)
        if num not in (1, 2, 4):
            raise InterpError(f"ldmatrix .x{num}: num must be 1, 2 or 4{self.where()}")
        if s.src.memory is not kir.Memory.shared:
            raise InterpError(f"ldmatrix source {s.src.name} is not shared{self.where()}")
        lay = self._layout(s.src)
        if lay.itemsize != 2:
            raise InterpError(f"ldmatrix source {s.src.name} is not a 16-bit buffer"
                              f"{self.where()}")
        trans = ".trans" if s.trans else ""
        self._check_warps(act, "warp-divergence", "ldmatrix", f"ldmatrix.x{num}{trans}")
        n = len(act)
        lane = act & 31
        rows = np.zeros(((int(act[-1]) >> 5) * 32 + 32, 8), np.uint16)  # by thread id
        sa = act[lane < 8 * num]
        if len(sa):
            addr = self._index(self.ev(s.address, sa), len(sa))
            mis = (lay.offset + addr * 2) % 16 != 0
            if mis.any():
                i = int(np.flatnonzero(mis)[0])
                raise InterpError(f"ldmatrix row address {s.src.name}[{int(addr[i])}] of "
                                  f"thread {self.interp.coords(sa[i])} is not 16-byte "
                                  f"aligned{self.where()}")
            pos, ok = self._span(lay.name, addr, sa, 8, lay.size,
                                 f"outside {lay.name}[0, {lay.size}) (an ldmatrix row)")
            t8 = np.repeat(sa, 8)
            flat = pos.ravel()
            vals = self._view(lay).view(np.uint16)[flat]
            if ok is None:
                self._shared_read(lay, t8, flat)
            else:
                okf = ok.ravel()
                self._shared_read(lay, t8[okf], flat[okf])
                vals = np.where(okf, vals, 0)
            rows[sa] = vals.reshape(len(sa), 8)
        g, t = (lane >> 2)[:, None, None], (lane & 3)[:, None, None]
        base = (act - lane)[:, None, None]
        i = np.arange(num)[None, :, None]
        two = np.arange(2)[None, None, :]
        if s.trans:
            regs = rows[base + 8 * i + 2 * t + two, g]
        else:
            regs = rows[base + 8 * i + g, 2 * t + two]            # [n, num, 2]
        arr, pos, ok = self._fragment(s.dst, s.dst_index, act, 2 * num, 2, "ldmatrix")
        regs = regs.reshape(n, 2 * num)
        rows_t = np.broadcast_to(act[:, None], pos.shape)
        if ok is not None:
            rows_t, pos, regs = rows_t[ok], pos[ok], regs[ok]
        arr.view(np.uint16)[rows_t, pos] = regs

    def _mma(self, s, act):
        """mma.sync m16n8k16 per warp: gather A (16x16), B (16x8) and C (16x8, f32) from
        every lane's fragment (kir.Mma's layout), D = A @ B + C, scatter D per lane.
        Products of f16/bf16 values are exact in f64; the 16 products and C are summed in
        f64 and rounded once to f32 (exact on integer-valued data, as the GPU is; on
        other data it may differ from the GPU's truncating adder in the last bit).
        Fragments of lanes missing from a divergent warp count as 0."""
        if s.dtype.numpy not in _HALF:
            raise InterpError(f"mma input dtype {s.dtype} is not f16 or bf16{self.where()}")
        self._check_warps(act, "warp-divergence", "mma", f"mma.m16n8k16.{s.dtype}")
        lane = act & 31
        g, t = (lane >> 2)[:, None], (lane & 3)[:, None]
        w = act >> 5
        W = int(w[-1]) + 1
        wi = w[:, None]

        def gather(buf, index, count, itemsize, view):
            arr, pos, ok = self._fragment(buf, index, act, count, itemsize, "mma")
            v = arr.view(view)[act[:, None], pos].astype(_F64)
            return v if ok is None else np.where(ok, v, 0.0)

        k8, k4 = np.arange(8), np.arange(4)
        A = np.zeros((W, 16, 16), _F64)
        B = np.zeros((W, 16, 8), _F64)
        C = np.zeros((W, 16, 8), _F64)
        A[wi, g + 8 * ((k8 >> 1) & 1), 2 * t + (k8 & 1) + 8 * (k8 >> 2)] = gather(
            s.a, s.a_index, 8, 2, s.dtype.numpy)
        B[wi, 2 * t + (k4 & 1) + 8 * (k4 >> 1), g] = gather(s.b, s.b_index, 4, 2,
                                                            s.dtype.numpy)
        crow, ccol = g + 8 * (k4 >> 1), 2 * t + (k4 & 1)
        C[wi, crow, ccol] = gather(s.c, s.c_index, 4, 4, _F32)
        D = (np.matmul(A, B) + C).astype(_F32)
        arr, pos, ok = self._fragment(s.d, s.d_index, act, 4, 4, "mma")
        vals = D[wi, crow, ccol]
        rows_t = np.broadcast_to(act[:, None], pos.shape)
        if ok is not None:
            rows_t, pos, vals = rows_t[ok], pos[ok], vals[ok]
        arr.view(_F32)[rows_t, pos] = vals

    def _cp_async(self, s, act):
        """Issue: read src_size bytes of global memory now (the rest of the nbytes are
        zeros), check the destination bytes against the race detector and mark them
        pending; the data lands when a wait retires the copy's group (_land_copies)."""
        nb = int(s.nbytes)
        if nb not in (4, 8, 16) or (s.cache == "cg" and nb != 16):
            raise InterpError(f"cp.async.{s.cache} of {nb} bytes (4, 8 or 16; .cg: 16)"
                              f"{self.where()}")
        if s.dst.memory is not kir.Memory.shared or s.src.memory is not kir.Memory.global_:
            raise InterpError(f"cp.async copies global {s.src.name} to shared {s.dst.name}"
                              f"{self.where()}")
        lay = self._layout(s.dst)
        item = lay.itemsize
        if nb % item:
            raise InterpError(f"cp.async of {nb} bytes into {lay.name} ({item}-byte "
                              f"elements){self.where()}")
        ne = nb // item
        n = len(act)
        di = self._index(self.ev(s.dst_index, act), n)
        si = self._index(self.ev(s.src_index, act), n)
        ss = (np.full(n, nb, np.int64) if s.src_size is None else
              self._index(self.ev(s.src_size, act), n))
        bad = (ss < 0) | (ss > nb)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InterpError(f"cp.async src-size {int(ss[i])} of thread "
                              f"{self.interp.coords(act[i])} is not in 0..{nb}{self.where()}")
        mis = (lay.offset + di * item) % nb != 0
        if mis.any():
            i = int(np.flatnonzero(mis)[0])
            raise InterpError(f"cp.async destination {lay.name}[{int(di[i])}] of thread "
                              f"{self.interp.coords(act[i])} is not {nb}-byte aligned"
                              f"{self.where()}")
        ok = self._check(lay.name, di, (di >= 0) & (di + ne <= lay.size), act,
                         lambda: f"outside {lay.name}[0, {lay.size}) (a {nb}-byte copy)",
                         lay)
        if ok is not None:
            act, di, si, ss, n = act[ok], di[ok], si[ok], ss[ok], int(ok.sum())
        if not n:
            return
        g = self._global(s.src)
        gi = g.dtype.itemsize
        nsrc = -(-ss // gi)                      # source elements each thread reads
        mx = int(nsrc.max())
        data = np.zeros((n, max(nb, mx * gi)), np.uint8)
        if mx:
            need = (np.arange(mx) < nsrc[:, None]).ravel()
            sidx = (si[:, None] + np.arange(mx)).ravel()
            pos, okp = g.positions(sidx)
            okp |= ~need                          # only the bytes src_size names are read
            okc = self._check(g.name, sidx, okp, np.repeat(act, mx),
                              lambda: self._global_oob(g))
            take = need if okc is None else need & okc
            self._global_access(g, np.repeat(act, mx)[take], pos[take])
            vals = np.zeros(n * mx, g.dtype)
            vals[take] = g.flat[pos[take]]
            data[:, :mx * gi] = vals.view(np.uint8).reshape(n, mx * gi)
        data = data[:, :nb]
        data[np.arange(nb)[None, :] >= ss[:, None]] = 0       # zero fill
        values = np.ascontiguousarray(data).view(lay.dtype).ravel()
        tid = np.repeat(act, ne)
        idx = (di[:, None] + np.arange(ne)).ravel()
        ev = self._shared_write(lay, tid, idx, pending=True)
        self.copies.append(_Copy(s, ev, lay, tid, idx, values,
                                 np.repeat(self.committed[act], ne)))

    def _cp_commit(self, s, act):
        self.committed[act] += 1

    def _cp_wait(self, s, act):
        self.retired[act] = np.maximum(self.retired[act], self.committed[act] - int(s.n))
        self._land_copies()

    def _land_copies(self, events=None, end=False):
        """Retire the copies whose group their thread's waits have retired (all of them
        at the end of the block): write their data unless it has landed already, clear
        their pending marks and record them as ordinary writes of the issuing threads
        now. With `events` = (copy events, grains): an ordinary write just hit those
        pending grains; the copies' elements there land (again) on top of it, the late
        copy winning the write/write race as on the GPU, and stay pending."""
        keep = []
        for cp in self.copies:
            if events is not None:
                evs, hit = events
                if cp.ev in evs:
                    lay = cp.lay
                    gg, _ = self._grains(lay, cp.tid, cp.idx)
                    on = np.isin(gg.reshape(len(cp.idx), -1), hit).any(axis=1)
                    self._view(lay)[cp.idx[on]] = cp.values[on]
                    cp.landed |= on
                keep.append(cp)
                continue
            sel = np.ones(len(cp.tid), bool) if end else cp.gid < self.retired[cp.tid]
            if not sel.any():
                keep.append(cp)
                continue
            fresh = sel & ~cp.landed
            lay = cp.lay
            self._view(lay)[cp.idx[fresh]] = cp.values[fresh]
            g, t = self._grains(lay, cp.tid[sel], cp.idx[sel])
            mine = g[(self.p_ev[g] == cp.ev) & (self.p_tid[g] == t)]
            self.p_tid[mine] = _NONE
            self.p_ev[mine] = _NONE
            self.w_tid[g] = t
            self.w_ev[g] = cp.ev
            self.w_epoch[g] = self.epoch
            self.w_buf[g] = lay.bufid
            if not sel.all():
                keep.append(cp.subset(~sel))
        self.copies = keep

    def finish(self):
        """The end of the block: copies no wait retired are reported and land now."""
        for cp in self.copies:
            i = 0
            t = cp.tid[i]
            row = cp.idx[cp.tid == t]
            lay = cp.lay
            lo = lay.offset + int(row.min()) * lay.itemsize
            hi = lay.offset + (int(row.max()) + 1) * lay.itemsize
            fstmt, fiters, _ = self.events[cp.ev]
            nthreads = len(np.unique(cp.tid))
            self.interp.add(("async-pending", cp.stmt.label, "end"), lambda: Hazard(
                kind="async-pending", buffer=lay.name, first=_point(cp.stmt),
                second="end of the block", byte_range=(lo, hi),
                threads=(self.interp.coords(t), self.interp.coords(t)),
                iterations=(dict(fiters), {}), block=self.bidx,
                detail=f"copy never waited for: {nthreads} thread(s) end with this "
                       f"cp.async pending (no cp.async.wait_group retires it); it lands "
                       f"at the end of the block"))
        self._land_copies(end=True)

    # -- loads and ShuffleXor -------------------------------------------------------

    def _special(self, e, act):
        key = (e.kind, e.axis, e.dtype)
        v = self.specials.get(key)
        if v is None:
            if e.kind is kir.SpecialKind.threadIdx:
                v = self.interp.tid[e.axis].astype(e.dtype.numpy)
            elif e.kind is kir.SpecialKind.blockIdx:
                v = _const(self.bidx["xyz".index(e.axis)], e.dtype)
            else:
                v = super()._special(e, act)
            self.specials[key] = v
        if e.kind is kir.SpecialKind.threadIdx and len(act) != self.T:
            return v[act]
        return v

    def _load(self, e, act, idx=None):
        """e's values for the active threads (at element indices `idx` instead of
        e.index's where given: one element of a vector load)."""
        b = e.buffer
        n = len(act)
        if idx is None:
            if e.width != 1:
                raise InterpError(f"a vector load of {b.name} outside a vector store"
                                  f"{self.where()}")
            idx = self._index(self.ev(e.index, act), n)
        if b.memory is kir.Memory.shared:
            lay = self._layout(b)
            ok = self._check(lay.name, idx, (idx >= 0) & (idx < lay.size), act,
                             lambda: f"outside {lay.name}[0, {lay.size})", lay)
            view = self._view(lay)
            if ok is None:
                self._shared_read(lay, act, idx)
                return view[idx]
            out = np.zeros(n, dtype=lay.dtype)
            self._shared_read(lay, act[ok], idx[ok])
            out[ok] = view[idx[ok]]
            return out
        if b.memory is kir.Memory.local:
            arr = self._local(b)
            ok = self._check(b.name, idx, (idx >= 0) & (idx < arr.shape[1]), act,
                             f"outside {b.name}[0, {arr.shape[1]})")
            if ok is None:
                return arr[act, idx]
            out = np.zeros(n, dtype=arr.dtype)
            out[ok] = arr[act[ok], idx[ok]]
            return out
        g = self._global(b)
        pos, ok = g.positions(idx)
        ok = self._check(b.name, idx, ok, act, lambda: self._global_oob(g))
        if ok is None:
            self._global_access(g, act, pos)
            return g.flat[pos]
        out = np.zeros(n, dtype=g.dtype)
        self._global_access(g, act[ok], pos[ok])
        out[ok] = g.flat[pos[ok]]
        return out

    def _shuffle(self, e, act):
        """__shfl_xor_sync(0xffffffff, v, m): lane l gets lane l ^ m's value. Warps are
        32 consecutive linear ids; every lane of each participating warp must be active
        (ldmatrix and mma.sync share this warp grouping through _check_warps)."""
        v = self.ev(e.value, act)
        m = int(e.lane_mask)
        if not 0 <= m < 32:
            raise InterpError(f"shuffle lane mask {m} is not in 0..31{self.where()}")
        n = len(act)
        v = np.full(n, v) if np.ndim(v) == 0 else v
        full = np.zeros(self.T, dtype=v.dtype)
        full[act] = v
        self._check_warps(act, "shuffle-divergence", "shfl_xor", f"shfl_xor(.., {m})")
        partner = act ^ m
        out = full[np.minimum(partner, self.T - 1)]
        if (partner >= self.T).any():
            out[partner >= self.T] = 0
        return out

    def _check_warps(self, act, kind, name, what):
        """Report `kind` if a warp that has an active lane does not have all 32 active
        (a warp-collective instruction under divergent control flow, or a block whose
        last warp is partial). Returns the mask over `act` of lanes in complete warps."""
        warps = act >> 5
        counts = np.bincount(warps, minlength=int(warps[-1]) + 1)
        bad = counts[warps] != 32
        if not bad.any():
            return None
        w = int(warps[np.flatnonzero(bad)[0]])
        lanes = np.arange(w * 32, w * 32 + 32)
        inactive = lanes[~np.isin(lanes, act)]
        cause = self.divergent[-1] if self.divergent else self.stmt
        it = dict(self.iters)
        absent = inactive[0] >= self.T
        missing = (f"lane {inactive[0] - w * 32} does not exist (the block has "
                   f"{self.T} threads)" if absent else
                   f"thread {self.interp.coords(inactive[0])} is inactive")
        self.interp.add((kind, cause.label, self.stmt.label), lambda: Hazard(
            kind=kind, buffer=name, first=_point(cause), second=_point(self.stmt),
            threads=(self.interp.coords(act[np.flatnonzero(warps == w)[0]]),
                     None if absent else self.interp.coords(inactive[0])),
            iterations=(it, it), block=self.bidx,
            detail=f"warp {w} runs {what} with {int(counts[w])} of 32 lanes: {missing}"))
        return ~bad

    # -- helpers --------------------------------------------------------------------

    @staticmethod
    def _index(idx, n):
        a = np.asarray(idx)
        if a.ndim == 0:
            return np.full(n, int(a), dtype=np.int64)
        return a.astype(np.int64, copy=False)

    def _layout(self, b):
        lay = self.interp.shared.get(b) or self.interp.shared_by_name.get(b.name)
        if lay is None:
            raise InterpError(f"shared buffer {b.name} has no Allocate{self.where()}")
        return lay

    def _view(self, lay):
        v = self.views.get(lay)
        if v is None:
            v = self.views[lay] = self.pool[
                lay.offset:lay.offset + lay.size * lay.itemsize].view(lay.dtype)
        return v

    def _local(self, b):
        arr = self.locals.get(b)
        if arr is None:
            raise InterpError(f"local buffer {b.name} is used before its Allocate"
                              f"{self.where()}")
        return arr

    def _global(self, b):
        g = self.interp.globals.get(b) or self.interp.globals_by_name.get(b.name)
        if g is None:
            raise InterpError(f"global buffer {b.name} is not a kernel parameter"
                              f"{self.where()}")
        return g

    @staticmethod
    def _global_oob(g):
        return f"not an element of {g.name} (shape {g.shape}, strides {g.strides})"

    def _check(self, name, idx, ok, act, why, lay=None):
        """None if every index is in bounds; else report the first one out of bounds
        and return the mask of those in bounds."""
        if ok.all():
            return None
        i = int(np.flatnonzero(~ok)[0])
        s, it = self.stmt, dict(self.iters)
        t = self.interp.coords(act[i])
        bad = int(idx[i])
        if lay is not None:
            item = lay.itemsize
            rng = (lay.offset + bad * item, lay.offset + (bad + 1) * item)
        else:
            item = self._buffer_itemsize(name)
            rng = (bad * item, (bad + 1) * item)
        nbad = int((~ok).sum())
        self.interp.add(("out-of-bounds", s.label, s.label), lambda: Hazard(
            kind="out-of-bounds", buffer=name, first=_point(s), second=_point(s),
            byte_range=rng, threads=(t, t), iterations=(it, it), block=self.bidx,
            detail=f"index {bad} is {why() if callable(why) else why} ({nbad} thread(s) "
                   f"out of bounds: skipped, their loads read 0)"))
        return ok

    def _buffer_itemsize(self, name):
        g = self.interp.globals_by_name.get(name)
        if g is not None:
            return g.dtype.itemsize
        for b, arr in self.locals.items():
            if b.name == name:
                return arr.itemsize
        return 1

    # -- grid synchronization and the cross-CTA checker -----------------------------

    def _fence(self, s, act):
        """__threadfence(): each active thread's global writes so far are fenced (a later
        SemRelease of the block may publish them)."""
        newer = act[self.f_epoch[act] != self.epoch]
        self.f_old[newer] = self.f_seq[newer]     # the latest fence of an earlier epoch
        self.f_seq[act] = len(self.interp.gev_stmt)
        self.f_epoch[act] = self.epoch

    def _semaphore(self, s, act, what):
        """(global arg, active threads, flat positions, i32 values) of a SemWait /
        SemRelease, out-of-bounds cells reported and dropped."""
        b = s.sem
        if b is None or b.memory is not kir.Memory.global_ or b.dtype is not DataType.i32:
            raise InterpError(f"{what} needs an i32 global semaphore buffer{self.where()}")
        g = self._global(b)
        n = len(act)
        idx = self._index(self.ev(s.index, act), n)
        val = self._index(self.ev(s.value, act), n).astype(np.int32)
        pos, ok = g.positions(idx)
        ok = self._check(b.name, idx, ok, act, lambda: self._global_oob(g))
        if ok is not None:
            act, pos, val = act[ok], pos[ok], val[ok]
        return g, act, pos, val

    def _sem_release(self, s, act):
        """Release store: fence the active threads (SemRelease emits __threadfence()),
        store the values, and publish to each cell the block's view: what it acquired
        (pending acquisitions too, where a releasing thread made them) and its own writes
        fenced by a releasing thread, or by any thread before the last barrier."""
        g, act, pos, val = self._semaphore(s, act, "sem_release")
        if not len(act):
            return
        self._fence(s, act)
        own = np.where(self.f_epoch < self.epoch, self.f_seq, self.f_old)
        own[act] = self.f_seq[act]
        published = dict(self.view)
        for mask, acquired in self.pending:
            if mask[act].any():
                _merge_view(published, acquired)
        _merge_view(published, {self.lin: own})
        g.flat[pos] = val
        if g.shadow is not None:         # a synchronization store, not data
            g.shadow.w_seq[pos] = _NONE
            g.shadow.w_tid[pos] = _NONE
        self.interp.cell_buffers.add(g.name)
        for p in np.unique(pos).tolist():
            self.interp.cells[(g.name, p)] = published

    def _sem_wait(self, s, act):
        """Spin (yield a Wait to the scheduler) until every active thread's cell holds its
        value, then acquire what the cell's last SemRelease published: for the waiting
        threads now, for the whole block after its next barrier."""
        g, act, pos, val = self._semaphore(s, act, "sem_wait")
        if not len(act):
            return

        def ready():
            return bool((g.flat[pos] == val).all())

        while not ready():
            yield Wait(s, ready, what=g.name)
        for p in np.unique(pos).tolist():
            acquired = self.interp.cells.get((g.name, p))
            if not acquired:
                continue
            waiters = act[pos == p]
            if len(waiters) == self.T:
                _merge_view(self.view, acquired)
            else:
                mask = np.zeros(self.T, bool)
                mask[waiters] = True
                self.pending.append((mask, acquired))

    def _global_access(self, g, act, pos, write=False):
        """Check a read or write of global elements `pos` by threads `act` against the
        cross-CTA shadow (another block's write this block has not acquired); a write
        then becomes the elements' last write."""
        sh = g.shadow
        if sh is None:
            if not write or not len(pos):
                return
            sh = g.shadow = _GlobalShadow(g.span)
        seq = sh.w_seq[pos]
        written = seq >= 0
        if written.any():
            wb = self.interp.gev_block[np.where(written, seq, 0)]
            foreign = written & (wb != self.lin)
            if foreign.any():
                self._cross_cta(g, act, pos, seq, wb, foreign, write)
        if write:
            if g.name in self.interp.cell_buffers:   # a plain store ends a release sequence
                for p in np.unique(pos).tolist():
                    self.interp.cells.pop((g.name, p), None)
            sh.w_seq[pos] = self.interp.global_event(self.stmt, self.iters, self.lin)
            sh.w_tid[pos] = act

    def _cross_cta(self, g, act, pos, seq, wb, foreign, write):
        sel = np.flatnonzero(foreign)
        wtid = g.shadow.w_tid[pos[sel]].astype(np.int64)
        bad = np.zeros(len(sel), bool)
        for x in np.unique(wb[sel]).tolist():
            on = wb[sel] == x
            wt = wtid[on]
            thr = self.view[x][wt] if x in self.view else np.zeros(len(wt), np.int64)
            readers = act[sel[on]]
            for mask, acquired in self.pending:
                if x in acquired:
                    thr = np.where(mask[readers], np.maximum(thr, acquired[x][wt]), thr)
            bad[on] = seq[sel[on]] >= thr
        if not bad.any():
            return
        sel, wtid = sel[bad], wtid[bad]
        interp = self.interp
        item = g.dtype.itemsize
        wsid = interp.gev_sid[seq[sel]]
        for sid in np.unique(wsid).tolist():
            on = np.flatnonzero(wsid == sid)
            i = int(on[0])
            e = int(seq[sel[i]])
            wstmt, witers = interp.gev_stmt[e], interp.gev_iters[e]
            key = ("cross-cta", wstmt.label, self.stmt.label)
            if key in interp.seen:
                continue
            x = int(interp.gev_block[e])
            elems = pos[sel[on]] + g.lo                  # kernel element indices
            k = int(elems[0])
            writer, reader = interp.block_coords(x), self.bidx
            fenced = interp.fences[x][int(wtid[i])] > e
            why = ("the writing thread has executed no Fence (__threadfence) since the "
                   "write" if not fenced else
                   f"block {reader} has acquired no SemRelease that published it (one by "
                   f"block {writer} after the fence, after a Barrier where another "
                   "thread releases, or by a block that acquired that; then SemWait on "
                   "the same cell, and a Barrier for the threads that did not wait)")
            access = "wrote" if write else "read"
            detail = (f"block {reader} {access} {len(on)} element(s) of {g.name} that block "
                      f"{writer} wrote, without acquiring the write: {why}; elements "
                      f"[{int(elems.min())}, {int(elems.max()) + 1}) involved")
            interp.add(key, lambda: Hazard(
                kind="cross-cta", buffer=g.name, first=_point(wstmt),
                second=_point(self.stmt), byte_range=(k * item, (k + 1) * item),
                threads=(interp.coords(wtid[i]), interp.coords(act[sel[i]])),
                iterations=(dict(witers), dict(self.iters)), block=reader,
                detail=detail, extra={"blocks": (writer, reader)}))

    # -- the race detector ----------------------------------------------------------

    def _event(self, name):
        n = len(self.events)
        if n == len(self.ev_sid):
            self.ev_sid = np.concatenate([self.ev_sid, np.empty_like(self.ev_sid)])
        self.ev_sid[n] = self.interp.sid.get(self.stmt, -1)
        self.events.append((self.stmt, self.iters, name))
        return n

    def _grains(self, lay, act, idx):
        """Expand per-thread element accesses into (grain, thread) pairs."""
        g0 = (lay.offset + idx * lay.itemsize) // self.interp.grain
        if lay.k == 1:
            return g0, act
        g = (g0[:, None] + np.arange(lay.k)).ravel()
        return g, np.repeat(act, lay.k)

    def _duplicates(self, g):
        m = len(g)
        ar = self.interp.arange[:m] if m <= len(self.interp.arange) else np.arange(m)
        self.stamp[g] = ar
        return bool((self.stamp[g] != ar).any())

    def _shared_read(self, lay, act, idx):
        if not len(act):
            return
        g, t = self._grains(lay, act, idx)
        e = self._event(lay.name)
        pend = self.p_tid[g] >= 0
        if pend.any():
            self._report("async-pending", pend, g, t, lay, self.p_ev[g], self.p_tid[g],
                         access="read")
        wb = self.w_buf[g]
        bad = wb != lay.bufid
        if bad.any():
            un = bad & (wb < 0)
            if un.any():
                self._report_uninit(lay, un, g, t)
            st = bad & (wb >= 0)
            if st.any():
                self._report("stale-read", st, g, t, lay, self.w_ev[g], self.w_tid[g])
        raw = (self.w_epoch[g] == self.epoch) & (self.w_tid[g] != t)
        if raw.any():
            self._report("RAW", raw, g, t, lay, self.w_ev[g], self.w_tid[g])
        # merge the readers of this access into the (at most two) readers per grain
        if self._duplicates(g):
            order = np.lexsort((t, g))
            gs, ts = g[order], t[order]
            start = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
            end = np.r_[start[1:], len(gs)] - 1
            ug, tmin, tmax = gs[start], ts[start], ts[end]
        else:
            ug, tmin, tmax = g, t, t
        cur = self.r_epoch[ug] == self.epoch
        o1 = np.where(cur, self.r_tid1[ug], _NONE)
        o2 = np.where(cur, self.r_tid2[ug], _NONE)
        n1 = np.where(o1 >= 0, o1, tmin)
        n2 = np.where(o2 >= 0, o2, np.where(tmin != n1, tmin, np.where(tmax != n1, tmax,
                                                                         _NONE)))
        self.r_ev1[ug] = np.where(o1 >= 0, self.r_ev1[ug], e)
        self.r_ev2[ug] = np.where(o2 >= 0, self.r_ev2[ug], np.where(n2 >= 0, e, _NONE))
        self.r_tid1[ug] = n1
        self.r_tid2[ug] = n2
        self.r_epoch[ug] = self.epoch

    def _shared_write(self, lay, act, idx, pending=False):
        """An ordinary write; with `pending` (a cp.async issue) the same checks against
        the accesses so far (the copy may land at once), but the grains are marked
        pending instead of written: _land_copies writes them when a wait retires them.
        Returns the access event."""
        self.overlap = None
        if not len(act):
            return None
        g, t = self._grains(lay, act, idx)
        e = self._event(lay.name)
        pend = self.p_tid[g] >= 0
        self.overlap = None
        if pend.any():
            self._report("async-pending", pend, g, t, lay, self.p_ev[g], self.p_tid[g],
                         access="wrote")
            if not pending:
                self.overlap = (set(np.unique(self.p_ev[g][pend]).tolist()), g[pend])
        cur = self.r_epoch[g] == self.epoch
        if cur.any():
            r1, r2 = self.r_tid1[g], self.r_tid2[g]
            c1 = cur & (r1 >= 0) & (r1 != t)
            c2 = cur & (r2 >= 0) & (r2 != t) & ~c1
            war = c1 | c2
            if war.any():
                self._report("WAR", war, g, t, lay,
                             np.where(c1, self.r_ev1[g], self.r_ev2[g]), np.where(c1, r1, r2))
        waw = (self.w_epoch[g] == self.epoch) & (self.w_tid[g] != t)
        if waw.any():
            self._report("WAW", waw, g, t, lay, self.w_ev[g], self.w_tid[g])
        if self._duplicates(g):      # two threads writing one grain in this statement
            order = np.lexsort((t, g))
            gs, ts = g[order], t[order]
            same = (gs[1:] == gs[:-1]) & (ts[1:] != ts[:-1])
            if same.any():
                second = order[1:][same]
                mask = np.zeros(len(g), dtype=bool)
                mask[second] = True
                ftid = np.full(len(g), _NONE, dtype=np.int64)
                ftid[second] = ts[:-1][same]
                self._report("WAW", mask, g, t, lay, np.full(len(g), e), ftid)
        if pending:
            self.p_tid[g] = t
            self.p_ev[g] = e
            return e
        self.w_tid[g] = t           # repeated grains: the highest thread wins, as the data
        self.w_ev[g] = e
        self.w_epoch[g] = self.epoch
        self.w_buf[g] = lay.bufid
        return e

    def _report(self, kind, mask, g, t, lay, fev, ftid, access=None):
        """One hazard per first statement among the flagged (grain, thread) pairs."""
        grain = self.interp.grain
        sel_all = np.flatnonzero(mask)
        fe = fev[sel_all]
        fsid = self.ev_sid[fe]
        for sid in np.unique(fsid):
            sel = sel_all[fsid == sid]
            i = int(sel[0])
            fstmt, fiters, fname = self.events[int(fev[i])]
            key = (kind, fstmt.label, self.stmt.label)
            if key in self.interp.seen:
                continue
            row = sel[sel // lay.k == i // lay.k]     # the example element's grains
            lo, hi = int(g[row].min()) * grain, (int(g[row].max()) + 1) * grain
            span = (int(g[sel].min()) * grain, (int(g[sel].max()) + 1) * grain)
            nthreads = len(np.unique(t[sel]))
            buffer = lay.name if fname == lay.name else f"{fname}/{lay.name}"
            what = {"RAW": "read bytes another thread wrote",
                    "WAR": "wrote bytes another thread read",
                    "WAW": "wrote bytes another thread wrote",
                    "stale-read": f"read through {lay.name} bytes last written through "
                                  f"{fname}",
                    "async-pending": f"{access} bytes a cp.async has not landed yet "
                                     f"(issued by thread {self.interp.coords(ftid[i])})"
                    }[kind]
            since = {"stale-read": "", "async-pending": ": no cp.async.wait_group of the "
                     "issuing thread has retired it (a barrier does not)"}.get(
                         kind, " since the last barrier")
            detail = (f"{nthreads} thread(s) {what}{since}; bytes [{span[0]}, {span[1]}) "
                      f"involved")
            self.interp.add(key, lambda: Hazard(
                kind=kind, buffer=buffer, first=_point(fstmt), second=_point(self.stmt),
                byte_range=(lo, hi),
                threads=(self.interp.coords(ftid[i]), self.interp.coords(t[i])),
                iterations=(dict(fiters), dict(self.iters)), block=self.bidx,
                detail=detail))

    def _report_uninit(self, lay, mask, g, t):
        key = ("uninitialized-read", lay.alloc.label, self.stmt.label)
        if key in self.interp.seen:
            return
        grain = self.interp.grain
        sel = np.flatnonzero(mask)
        i = int(sel[0])
        row = sel[sel // lay.k == i // lay.k]
        lo, hi = int(g[row].min()) * grain, (int(g[row].max()) + 1) * grain
        nthreads = len(np.unique(t[sel]))
        self.interp.add(key, lambda: Hazard(
            kind="uninitialized-read", buffer=lay.name, first=_point(lay.alloc),
            second=_point(self.stmt), byte_range=(lo, hi),
            threads=(None, self.interp.coords(t[i])), iterations=({}, dict(self.iters)),
            block=self.bidx,
            detail=f"{nthreads} thread(s) read shared bytes no thread of the block wrote"))


def _merge_view(into, other):
    """Merge acquired view `other` ({block: per-writer-thread thresholds}) into `into`
    (elementwise max; threshold arrays are never changed in place, so views share them)."""
    for x, thr in other.items():
        cur = into.get(x)
        into[x] = thr if cur is None else np.maximum(cur, thr)


_EVAL = {
    kir.Const: _Evaluator._const, kir.Var: _Evaluator._var,
    kir.Special: lambda self, e, act: self._special(e, act),
    kir.BinOp: _Evaluator._binop, kir.UnOp: _Evaluator._unop,
    kir.Select: _Evaluator._select, kir.Cast: _Evaluator._cast,
    kir.Load: lambda self, e, act: self._load(e, act),
    kir.ShuffleXor: lambda self, e, act: self._shuffle(e, act),
}

# Statement handlers. Leaf statements run to completion; compound ones are generators
# (they run bodies, or, as SemWait, yield a Wait to the scheduler). New statements
# register here.
_LEAF = {
    kir.Store: _Block._store, kir.Barrier: _Block._barrier,
    kir.Allocate: _Block._allocate, kir.Comment: _Block._comment,
    kir.LdMatrix: _Block._ldmatrix, kir.Mma: _Block._mma, kir.CpAsync: _Block._cp_async,
    kir.CpAsyncCommit: _Block._cp_commit, kir.CpAsyncWait: _Block._cp_wait,
    kir.Fence: _Block._fence, kir.SemRelease: _Block._sem_release,
}
_COMPOUND = {kir.ForLoop: _Block._for, kir.IfThenElse: _Block._if,
             kir.SemWait: _Block._sem_wait}


# ---------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------


def run_kernel(kernel, args, blocks=None, workspaces=None):
    """Run `kernel` on the CPU.

    args: each TensorParam's buffer name -> numpy array (outputs written in place; any
    strides, passed to the kernel in elements), each ScalarParam's name -> int. Size
    variables of tensor parameters that are not scalar parameters are bound from the
    arrays' shapes. A Workspace may be given in args too (a 1-D array of its dtype with at
    least its size elements); one that is not is taken from `workspaces`, a dict
    {buffer name: array} the caller keeps across launches, or allocated as zeros (and
    stored into `workspaces` when given, so that a later launch reuses it, and a caller can
    check that semaphores are left reset). blocks: optional list of block indices
    (x, y, z) to run (others do not run). Raises RaceError listing every hazard after the
    run (outputs written), InterpError for what cannot be run at all.
    """
    interp = _Interp(kernel, args, workspaces)
    interp.run(blocks)
    if interp.hazards:
        raise RaceError(interp.hazards, kernel.name)
