"""The interpreter's machine state. _Interp is the kernel's: arguments, launch
configuration, global buffers, the shared pool's layout, the hazards collected, the run
over blocks. _Block is one block's: its memories and the shadow state of every room; its
class is composed of the rooms' mixins.

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
  A shared buffer without a byte_offset (before the allocation pass) is placed after the
  placed ones, 16-byte aligned, so hand-built kernels need not place every buffer.

It sits at the top of the package: it composes _Block from every room and runs the blocks
through the scheduler.
"""

import math
from functools import reduce

import numpy as np

from codegen.errors import Hazard
from fuserir.progress import progress
from codegen.interp.async_copies import _AsyncCopies
from codegen.interp.async_proxy import _AsyncProxy
from codegen.interp.base import _NONE, InterpError, _const, _point
from codegen.interp.cluster import _Cluster
from codegen.interp.cross_cta import _CrossCta
from codegen.interp.execution import _Execution
from codegen.interp.expressions import _Evaluator
from codegen.interp.mbarriers import _Mbarriers
from codegen.interp.ordering import _Ordering, needs_ordering
from codegen.interp.race_detector import _RaceDetector
from codegen.interp.roles import Interleaving, _Roles
from codegen.interp.scheduler import schedule
from codegen.interp.tensor_cores import _TensorCores
from codegen.interp.tma import _Tma, bind_tensor_maps
from codegen.interp.warpgroups import _Warpgroups
from fuserir.device import MAX_THREADS_PER_BLOCK
from fuserir.instructions import WARPGROUP
from fuserir.numerics import ceil_div, round_up
from lowering import kir


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
        self.shadow = None   # cross_cta._GlobalShadow, made at the first write
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


BLOCK_ORDERS = ("earliest", "latest")   # which ready block the scheduler resumes


class _Interp:
    def __init__(self, kernel, args, workspaces=None, interleaving="then-first",
                 block_order="earliest"):
        if block_order not in BLOCK_ORDERS:
            raise InterpError(f"block_order {block_order!r}: expected one of "
                              f"{', '.join(BLOCK_ORDERS)}")
        self.kernel = kernel
        self.block_order = block_order
        self.interleaving = Interleaving(interleaving)
        self.hazards = []
        self.seen = set()
        self.consts = {}
        self.stmts = list(kir.walk(kernel.body))
        self.sid = {s: i for i, s in enumerate(self.stmts)}
        self.ordered = needs_ordering(self.stmts)     # vector clocks (ordering.py)
        # async_proxy.py: statements whose shared writes are the async proxy's (TMA
        # loads); whether local Stores are recorded for wgmma.fence (some statement uses
        # registers asynchronously)
        effects = [s.effects() for s in self.stmts]
        self.async_writer = np.array([any(a.write for a in kir.effects.async_shared(e))
                                      for e in effects] + [False], bool)
        self.has_wgmma = any(map(kir.effects.async_register_uses, effects))
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
        self.tensor_maps = bind_tensor_maps(kernel, self.globals, uniform)
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
        # thread-block clusters (cluster.py): their shape, the blocks by linear id, the
        # shared buffers cluster loads read
        self.cluster = None if kernel.cluster is None else tuple(
            self._extent(uniform, e, f"cluster.{a}") for e, a in zip(kernel.cluster, "xyz"))
        if self.cluster is not None and any(
                c < 1 or g % c for g, c in zip(self.grid, self.cluster)):
            raise InterpError(f"kernel {kernel.name}: grid {self.grid} is not made of "
                              f"clusters of {self.cluster}")
        self.blocks = {}
        self.cluster_read_buffers = {s.src.name for s in self.stmts
                                     if isinstance(s, kir.ClusterLoad)}
        self.nthreads = self.block[0] * self.block[1] * self.block[2]
        if not 1 <= self.nthreads <= MAX_THREADS_PER_BLOCK:
            raise InterpError(f"kernel {kernel.name}: block {self.block} has {self.nthreads} "
                              f"threads (1..{MAX_THREADS_PER_BLOCK} allowed)")
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
            end = round_up(end, 16)
            placed.append((s, end, size))
            end += size * s.buffer.dtype.itemsize
        self.pool_bytes = end
        self.grain = reduce(math.gcd, [v for s, off, _ in placed
                                       for v in (off, s.buffer.dtype.itemsize)], 0) or 1
        self.ngrains = ceil_div(self.pool_bytes, self.grain)
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
        with np.errstate(all="ignore"), progress(f"interpreting {self.kernel.name}",
                                                 total=len(order), unit="block") as bar:
            stuck = schedule([(b, self._block(b)) for b in order], done=bar.update,
                             latest=self.block_order == "latest")
        for block, wait in stuck:
            others = [b for b, _ in stuck]
            self.add(("deadlock", wait.stmt.label, wait.stmt.label), lambda: Hazard(
                kind="deadlock", buffer=wait.what or "grid", first=_point(wait.stmt),
                second=_point(wait.stmt), block=block,
                detail=f"blocks {others} wait forever: every block left is waiting"
                       + (f"; block {block}: {wait.describe()}" if wait.why else "")))
        if blocks is None and not stuck:
            self._check_zeroed_workspaces()

    def _check_zeroed_workspaces(self):
        """A workspace handed in zeroed (kir.Workspace.zeroed: the executor zeroes it once
        and keeps it across launches) must be left zero by a whole launch, or the next
        launch starts from what this one left (a semaphore never reset: the next
        turnstile waits forever, or lets a block through early)."""
        for w in self.kernel.workspaces:
            if not w.zeroed:
                continue
            data = self.globals[w.buffer].array
            left = np.flatnonzero(data != 0)
            if not len(left):
                continue
            at = int(left[0])
            self.add(("workspace", w.buffer.name, "end"), lambda: Hazard(
                kind="workspace", buffer=w.buffer.name, first="the end of the launch",
                second="the next launch", byte_range=(at * data.itemsize,
                                                      (at + 1) * data.itemsize),
                detail=f"the launch leaves {len(left)} element(s) of zeroed workspace "
                       f"{w.buffer.name} non-zero (first: element {at} = {data[at]}); "
                       "the executor zeroes it once and keeps it across launches, so the "
                       "next launch starts from them"))

    def _block(self, bidx):
        blk = _Block(self, bidx)
        self.blocks[blk.lin] = blk
        yield from blk.exec_list(self.kernel.body, blk.all)
        blk.finish()


class _Block(_Execution, _Roles, _TensorCores, _Warpgroups, _Mbarriers, _Cluster, _Tma,
             _AsyncCopies, _RaceDetector, _AsyncProxy, _Ordering, _CrossCta):
    """One block of the launch: its memories and the state of every room (the statements
    it runs, and how, come from the rooms' mixins)."""

    def __init__(self, interp, bidx):
        super().__init__(interp)
        self.env = dict(interp.env)
        self.bidx = bidx
        self.T = interp.nthreads
        self.all = np.arange(self.T, dtype=np.int64)
        self.iters = ()               # ((loop var, value), ...) of the enclosing loops
        self.divergent = []           # IfThenElse statements that split the active set
        self.in_roles = 0             # role branches around the running code (roles.py)
        self.epoch = 0
        # shared memory and its shadow (see race_detector.py)
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
        # cp.async (see async_copies.py): the pending (issued, not yet retired) write per
        # grain, and per thread the number of groups committed / retired; `copies` holds
        # the pending copies
        self.p_tid = np.full(n, _NONE, np.int32)
        self.p_ev = np.full(n, _NONE, np.int32)
        self.committed = np.zeros(self.T, np.int64)
        self.retired = np.zeros(self.T, np.int64)
        self.copies = []
        self.overlap = None
        # mbarriers (see mbarriers.py): pool byte offset -> state; named barrier id ->
        # its current generation (the threads arrived, the bar.sync threads waiting)
        self.mbarriers = {}
        self.named = {}
        self._init_ordering()         # vector clocks (see ordering.py)
        # TMA (see tma.py): loads queued on their mbarriers, stores not retired and
        # stores whose global writes are not complete, in issue order; per thread the
        # bulk groups committed, retired (source read) and done (writes complete)
        self.tma_loads = []
        self.bulk_stores = []
        self.bulk_writing = []
        self.bulk_committed = np.zeros(self.T, np.int64)
        self.bulk_retired = np.zeros(self.T, np.int64)
        self.bulk_done = np.zeros(self.T, np.int64)
        # wgmma (see warpgroups.py): per warp group the groups committed; the pending ops
        self.wgmma_committed = np.zeros(ceil_div(self.T, WARPGROUP), np.int64)
        self.wgmmas = []
        # async proxy (see async_proxy.py): per thread the event count at its latest
        # fence.proxy.async; per grain the pending async reads holding it; per warp group
        # the event count at its latest wgmma.fence; local buffer -> per element the event
        # of its latest Store
        self.proxy_fenced = np.full(self.T, _NONE, np.int64)
        self.held = np.zeros(n, np.int32)
        self.wg_fence = np.full(ceil_div(self.T, WARPGROUP), _NONE, np.int64)
        self.reg_ev = {}
        # access events: (statement, iterations, buffer name); ev_sid: statement ids
        self.events = []
        self.ev_sid = np.empty(256, np.int32)
        self.locals = {}
        self.specials = {}
        # cross-CTA (see cross_cta.py): per thread the write sequence number its
        # latest Fence covers (f_seq), the epoch of that Fence, and the latest one from an
        # earlier epoch (f_old), and in kernels with vector clocks the access event number
        # at that Fence (f_event); what the block has acquired ({block: thresholds}) for all
        # threads (view) and, until the next barrier, for the waiting threads only (pending)
        gx, gy, _ = interp.grid
        self.lin = bidx[0] + gx * (bidx[1] + gy * bidx[2])
        self.f_seq = np.zeros(self.T, np.int64)
        self.f_old = np.zeros(self.T, np.int64)
        self.f_epoch = np.full(self.T, _NONE, np.int64)
        self.f_event = np.full(self.T, _NONE, np.int64)
        interp.fences[self.lin] = self.f_seq     # (changed in place only)
        self.view = {}
        self.pending = []
        self._init_cluster()
