"""Statement execution for one block: statement lists, control flow and lockstep active
sets, loads and stores of every memory, shuffles and the warp (or warp-group) check of
collective instructions, and the statement tables that send each kir statement to its room.

  * All threads of a block run in lockstep, vectorised over thread ids. A statement runs
    for an *active set* `act`: a sorted array of linear thread ids (x + y*bx + z*bx*by).
    Loop variables are uniform (a ForLoop's extent must be the same for every active
    thread), so no per-thread state lives outside memory.
  * IfThenElse with a thread-dependent condition that keeps every warp group on one side
    is a role branch, in a kernel with mbarriers or named barriers (what one role can
    wait on for another): its two sides run as interleaved coroutines (roles.py). Any
    other thread-dependent condition runs the then-branch for the threads that take it,
    then the else-branch for the others.
  * Statements that wait are generators (COMPOUND_STATEMENTS): SemWait, MbarrierWait and a
    NamedBarrier yield a Wait when they block; they, MbarrierArrive and TmaLoad first
    yield None, a switch point where another role may run (roles.py).

A load or store goes through the race detector (race_detector.py) for shared memory, the
cross-CTA checker (cross_cta.py) for global memory and async_proxy.py's register check
(wgmmas in flight, wgmma.fence) for local memory; the helpers at the end of
_Execution (indices, layouts and views, bounds checks) serve every room.
"""

import numpy as np

from codegen.errors import Hazard
from codegen.interp.async_copies import _AsyncCopies
from codegen.interp.base import _BF16, _BOOL, InterpError, _const, _point, _to, _truth
from codegen.interp.cluster import _Cluster
from codegen.interp.cross_cta import _CrossCta, _merge_view
from codegen.interp.expressions import _Evaluator
from codegen.interp.mbarriers import _Mbarriers
from codegen.interp.tensor_cores import _TensorCores
from codegen.interp.tma import _Tma
from codegen.interp.warpgroups import _Warpgroups
from lowering import kir


class _Execution(_Evaluator):
    """The mixin of _Block (machine.py) that runs statement lists: the evaluator of a
    block, whose helpers (at the end) the other rooms' mixins use too."""

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
        if self.interp.ordered and self._role_branch(act, c):
            yield from self._run_roles(s, [("then", s.then_body, act[c]),
                                           ("else", s.else_body, act[~c])])
        else:
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
            if self.interp.cluster_read_buffers:
                self._cluster_write(lay, act, idx)              # cluster.py
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
            self._register_access(b, act, idx, write=True)     # async_proxy.py
            arr[act, idx] = val
        else:
            g = self._global(b)
            pos, ok = g.positions(idx)
            ok = self._check(b.name, idx, ok, act, lambda: self._global_oob(g))
            if ok is not None:
                act, pos, val = act[ok], pos[ok], val[ok]
            self._global_access(g, act, pos, write=True)
            g.flat[pos] = val

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
                self._register_access(b, act, idx)              # async_proxy.py
                return arr[act, idx]
            self._register_access(b, act[ok], idx[ok])
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

    def _check_warps(self, act, kind, name, what, size=32):
        """Report `kind` if a warp (of `size` lanes: a warp group with size 128) that has
        an active lane does not have all of them active (a collective instruction under
        divergent control flow, or a block whose last warp is partial). Returns the mask
        over `act` of lanes in complete warps."""
        unit = "warp" if size == 32 else "warp group"
        warps = act // size
        counts = np.bincount(warps, minlength=int(warps[-1]) + 1)
        bad = counts[warps] != size
        if not bad.any():
            return None
        w = int(warps[np.flatnonzero(bad)[0]])
        lanes = np.arange(w * size, w * size + size)
        inactive = lanes[~np.isin(lanes, act)]
        cause = self.divergent[-1] if self.divergent else self.stmt
        it = dict(self.iters)
        absent = inactive[0] >= self.T
        missing = (f"lane {inactive[0] - w * size} does not exist (the block has "
                   f"{self.T} threads)" if absent else
                   f"thread {self.interp.coords(inactive[0])} is inactive")
        self.interp.add((kind, cause.label, self.stmt.label), lambda: Hazard(
            kind=kind, buffer=name, first=_point(cause), second=_point(self.stmt),
            threads=(self.interp.coords(act[np.flatnonzero(warps == w)[0]]),
                     None if absent else self.interp.coords(inactive[0])),
            iterations=(it, it), block=self.bidx,
            detail=f"{unit} {w} runs {what} with {int(counts[w])} of {size} lanes: "
                   f"{missing}"))
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

    # the statements this room runs: leaves run to completion; compound ones are
    # generators (they run bodies, yield a Wait, or offer a switch point)
    LEAF_STATEMENTS = {kir.Store: _store, kir.Barrier: _barrier, kir.Allocate: _allocate,
                       kir.Comment: _comment}
    COMPOUND_STATEMENTS = {kir.ForLoop: _for, kir.IfThenElse: _if}


# Statement handlers: each room (the mixins of _Block) declares the statements it runs; a
# new statement registers in its room.
_ROOMS = (_Execution, _TensorCores, _AsyncCopies, _CrossCta, _Mbarriers, _Tma, _Warpgroups,
          _Cluster)
_LEAF = {k: v for room in _ROOMS for k, v in room.LEAF_STATEMENTS.items()}
_COMPOUND = {k: v for room in _ROOMS for k, v in room.COMPOUND_STATEMENTS.items()}
