"""TMA: tensor maps, TmaLoad and BulkLoad onto mbarriers, TmaStore in bulk groups, the proxy
fence.

  * Tensor maps (bind_tensor_maps, called by _Interp once the arguments are bound): each
    kernel.tensor_maps entry's sizes and strides are evaluated (uniform) and checked
    against cuTensorMapEncodeTiled's rules (fuserir.instructions' TMA_* limits): rank =
    len(box) = len(sizes) = len(strides) + 1 in TMA_RANKS, box extents 1..256, sizes
    positive, sizes and strides covering exactly the array's elements (as the launcher
    checks; a dimension of one element takes the dense stride: tma_map_strides),
    strides * itemsize positive multiples of 16 below 2^40, box[0] * itemsize a
    multiple of 16 and, swizzled, exactly the swizzle's span; the tensor is a kernel
    tensor parameter. TMA coordinates (x0, x1, ...) name tensor element offset x0 + x1 *
    strides[0] + x2 * strides[1] ..., inside iff 0 <= x_d < sizes[d] for every d; x0 *
    itemsize must be a multiple of 16 bytes (TMA_COORD_ALIGN: else the GPU faults).
  * A box in shared memory (kir.hopper's header): box element e (box order, dimension 0
    fastest) at logical pool byte start + e * itemsize, physical byte swizzle(logical,
    mode) (fuserir.instructions.swizzle). The start is 128-byte aligned (a swizzled box:
    8 spans) and the box's bytes lie inside the buffer; a swizzle keeps them there.
  * TmaLoad, per active thread: the source is read at issue through the global access
    path (the cross-CTA checker sees it), elements outside the tensor are zeros; the
    destination is checked like a write and marked pending (p_tid/p_ev, as cp.async's,
    so any access to it before it lands is an "async-pending" report) and the copy is
    queued on its mbarrier (its init must be visible and fenced: mbarriers.py's
    "mbarrier-init"). It lands when an mbarrier wait needs it (mbarriers.py) or at
    the end of the block (reported: never waited for): the bytes are written, the marks
    cleared, and the shadow records the issuing thread's write, ordered (ordering.py)
    before the threads that wait on the phase its bytes complete (the wait makes it
    visible, not a barrier); then the barrier's transaction bytes drop by the box's
    bytes.
  * BulkLoad, per active thread: nbytes consecutive bytes of the global source (read at
    issue through the global access path; out of bounds is reported, as the GPU
    faults), both addresses and the size multiples of BULK_COPY_ALIGN; then as a
    TmaLoad: pending destination, queued on its mbarrier, landing there.
  * TmaStore, per active thread: its source bytes must be proxy-fenced by their writers
    ("proxy-fence") and are held until its group retires (a write to them is
    "async-pending"; async_proxy.py); it joins the thread's open bulk group
    (bulk_committed counts its commits, as cp.async's groups). Both BulkWait forms retire
    every group older than committed - n, in issue order: the store reads its shared
    source then (physical offsets; _shared_read, attributed to the issuing thread and the
    store) and writes the elements inside the tensor through the global write path. So a
    source overwritten before its wait_group.read also shows in the output. Stores no
    wait retires are reported at the end of the block and retire then. The global writes
    of a store retired by a wait_group.read complete at its thread's full BulkWait (or
    the end of the block): cross_cta._complete_writes gives them a new write event then,
    so that only a Fence after the full wait covers them.
  * FenceProxyAsync: each active thread's earlier generic-proxy shared writes are fenced
    for the async proxy (`proxy_fenced`, async_proxy.py).

It sits beside async_copies.py (its pending marks are the same); execution.py names the
handlers in its statement tables, machine.py binds the maps and makes the queues.
"""

import numpy as np

from codegen.errors import Hazard
from codegen.interp.base import switch_point, _NONE, InterpError, _point
from fuserir.instructions import (BULK_COPY_ALIGN, SWIZZLE_BYTES, TMA_BOX_MAX,
                                  TMA_COORD_ALIGN, TMA_RANKS, TMA_SMEM_ALIGN,
                                  TMA_STRIDE_ALIGN, element_runs, swizzle,
                                  tma_map_strides, tma_stride_ok)
from lowering import kir


class _BoundMap:
    """A tensor map with its launch values: the global argument, sizes and strides
    (ints), and the box's element coordinates (per dimension, box order)."""

    def __init__(self, m, g, sizes, strides):
        self.map, self.g, self.sizes, self.strides = m, g, sizes, strides
        self.item = g.dtype.itemsize
        self.box_bytes = m.box_bytes
        grid = np.indices(tuple(reversed(m.box))).reshape(m.rank, -1)
        self.grid = grid[::-1].astype(np.int64)

    def elements(self, coords):
        """(tensor element offsets, inside mask) of the box at `coords`, box order."""
        x = [c + b for c, b in zip(coords, self.grid)]
        inside = np.logical_and.reduce([(xd >= 0) & (xd < n)
                                        for xd, n in zip(x, self.sizes)])
        return x[0] + sum(xd * s for xd, s in zip(x[1:], self.strides)), inside

    def physical(self, start, elements):
        """The physical pool bytes of box elements `elements` of a box at `start`
        ([elements, itemsize])."""
        logical = start + elements[:, None] * self.item + np.arange(self.item)
        return swizzle(logical, self.map.swizzle)


def bind_tensor_maps(kernel, globals_, uniform):
    """{TensorMap: _BoundMap} of the kernel's maps, checked (InterpError names the map)."""
    bound = {}
    params = {p.buffer for p in kernel.tensor_params}
    for m in kernel.tensor_maps:
        def bad(why):
            return InterpError(f"kernel {kernel.name}: tensor map {m.name} {why}")
        if m.tensor.buffer not in params:
            raise bad(f"is over {m.tensor.buffer.name}, which is not a tensor parameter")
        if m.swizzle not in SWIZZLE_BYTES:
            raise bad(f"has swizzle {m.swizzle!r} (one of {sorted(SWIZZLE_BYTES)})")
        if m.rank not in TMA_RANKS or len(m.sizes) != m.rank or len(m.strides) != m.rank - 1:
            raise bad(f"has a box of rank {m.rank}, {len(m.sizes)} sizes and "
                      f"{len(m.strides)} strides (rank {TMA_RANKS[0]}..{TMA_RANKS[-1]}, "
                      f"sizes = rank, strides = rank - 1)")
        if not all(1 <= b <= TMA_BOX_MAX for b in m.box):
            raise bad(f"has box {tuple(m.box)}: extents must be 1..{TMA_BOX_MAX}")
        g = globals_[m.tensor.buffer]
        item = g.dtype.itemsize
        sizes = [int(uniform.uniform(e, f"size {d} of tensor map {m.name}"))
                 for d, e in enumerate(m.sizes)]
        strides = [int(uniform.uniform(e, f"stride {d + 1} of tensor map {m.name}"))
                   for d, e in enumerate(m.strides)]
        if any(n < 1 for n in sizes):
            raise bad(f"has sizes {sizes}: each must be positive")
        strides = list(tma_map_strides(sizes, strides, item))
        if element_runs(sizes, (1, *strides)) != element_runs(g.shape, g.strides):
            raise bad(f"has sizes {sizes} and element strides {(1, *strides)} (innermost "
                      f"first), which do not cover {m.tensor.buffer.name} of shape "
                      f"{tuple(g.shape)} and element strides {tuple(g.strides)} exactly")
        for d, s in enumerate(strides):
            nbytes = s * item
            if not tma_stride_ok(nbytes):
                raise bad(f"has stride {s} elements ({nbytes} bytes) in dimension {d + 1}: "
                          f"a positive multiple of {TMA_STRIDE_ALIGN} bytes below 2^40")
        row = m.box[0] * item
        span = SWIZZLE_BYTES[m.swizzle]
        if row % 16 or (m.swizzle != "none" and row != span):
            need = "a multiple of 16" if m.swizzle == "none" else f"exactly {span}"
            raise bad(f"has a box row of {m.box[0]} x {item} = {row} bytes: with swizzle "
                      f"{m.swizzle} it must be {need}")
        bound[m] = _BoundMap(m, g, sizes, strides)
    return bound


class _TmaCopy:
    """A TMA load or store issued by one thread: its statement and loop iterations, the
    issuing thread, the shared layout, and more: a box's map, start byte and coordinates;
    a load's access event, destination elements, physical bytes, data, mbarrier byte
    offset and transaction bytes; a store's bulk group number."""

    def __init__(self, stmt, iters, tid, lay, **more):
        self.stmt, self.iters, self.tid, self.lay = stmt, iters, tid, lay
        self.__dict__.update(more)


class _Tma:
    """The mixin of _Block (machine.py) that runs TmaLoad, TmaStore, BulkCommit, BulkWait
    and FenceProxyAsync (state: `tma_loads`, `bulk_stores`, `bulk_committed`,
    `bulk_retired`); `finish` lands and retires what is left, then the rooms after it
    finish."""

    def _box_sites(self, s, buf, index, act, what):
        """(bound map, layout, active threads, start bytes, coordinates [threads, rank])
        of a TMA statement; out-of-bounds boxes are reported and dropped."""
        bmap = self.interp.tensor_maps.get(s.map)
        if bmap is None:
            raise InterpError(f"{what}: tensor map {getattr(s.map, 'name', None)} is not "
                              f"one of the kernel's{self.where()}")
        m = s.map
        if len(s.coords) != m.rank:
            raise InterpError(f"{what} of rank-{m.rank} map {m.name} gives "
                              f"{len(s.coords)} coordinate(s){self.where()}")
        if buf is None or buf.memory is not kir.Memory.shared:
            raise InterpError(f"{what} needs a shared buffer, not "
                              f"{getattr(buf, 'name', None)}{self.where()}")
        lay = self._layout(buf)
        n = len(act)
        idx = self._index(self.ev(index, act), n)
        start = lay.offset + idx * lay.itemsize
        align = TMA_SMEM_ALIGN if m.swizzle == "none" else 8 * SWIZZLE_BYTES[m.swizzle]
        mis = start % align != 0
        if mis.any():
            i = int(np.flatnonzero(mis)[0])
            raise InterpError(f"{what}: {lay.name}[{int(idx[i])}] (pool byte "
                              f"{int(start[i])}) of thread {self.interp.coords(act[i])} is "
                              f"not {align}-byte aligned (map {m.name}, swizzle "
                              f"{m.swizzle}){self.where()}")
        end = lay.offset + lay.size * lay.itemsize
        ok = self._check(lay.name, idx, (idx >= 0) & (start + m.box_bytes <= end), act,
                         lambda: f"the start of a {m.box_bytes}-byte box that does not fit "
                                 f"in {lay.name}[0, {lay.size})", lay)
        coords = np.stack([self._index(self.ev(c, act), n) for c in s.coords], axis=1)
        item = m.dtype.itemsize
        mis = (coords[:, 0] * item) % TMA_COORD_ALIGN != 0
        if mis.any():
            i = int(np.flatnonzero(mis)[0])
            raise InterpError(f"{what}: the dimension-0 coordinate {int(coords[i, 0])} of "
                              f"thread {self.interp.coords(act[i])} is "
                              f"{int(coords[i, 0]) * item} bytes into map {m.name}'s rows, "
                              f"not a multiple of {TMA_COORD_ALIGN} (the GPU faults with an "
                              f"illegal instruction){self.where()}")
        if ok is not None:
            act, start, coords = act[ok], start[ok], coords[ok]
        return bmap, lay, act, start, coords

    def _tma_load(self, s, act):
        bars, blay = self._load_barriers(s, act, "TMA load")
        bmap, lay, act, start, coords = self._box_sites(s, s.dst, s.dst_index, act,
                                                        "TMA load")
        g = bmap.g
        ne = bmap.box_bytes // lay.itemsize
        for t, st, xs in zip(act.tolist(), start.tolist(), coords.tolist()):
            if t not in bars:           # its mbarrier is out of bounds: reported
                continue
            off, inside = bmap.elements(xs)
            vals = np.zeros(len(off), g.dtype)
            sel = np.flatnonzero(inside)
            vals[sel] = self._global_read(g, off[sel], t)
            idx = (st - lay.offset) // lay.itemsize + np.arange(ne)
            phys = bmap.physical(st, np.arange(len(off))).ravel()
            self._queue_load(s, t, bars[t], blay, lay, idx, phys, vals, bmap.box_bytes,
                             "a TMA load", bmap=bmap, start=st, coords=xs)

    def _bulk_load(self, s, act):
        nb = s.nbytes
        if isinstance(nb, bool) or not isinstance(nb, int) or nb <= 0 or nb % BULK_COPY_ALIGN:
            raise InterpError(f"a bulk load copies a positive multiple of {BULK_COPY_ALIGN} "
                              f"bytes, not {nb!r}{self.where()}")
        if s.dst is None or s.dst.memory is not kir.Memory.shared or s.src is None \
                or s.src.memory is not kir.Memory.global_ or s.src.dtype is not s.dst.dtype:
            raise InterpError(f"a bulk load copies a global buffer into a shared one of its "
                              f"dtype, not {getattr(s.src, 'name', None)} into "
                              f"{getattr(s.dst, 'name', None)}{self.where()}")
        bars, blay = self._load_barriers(s, act, "bulk load")
        lay = self._layout(s.dst)
        if nb % lay.itemsize:
            raise InterpError(f"a bulk load of {nb} bytes into {lay.name} ({lay.itemsize}-byte "
                              f"elements){self.where()}")
        ne, n = nb // lay.itemsize, len(act)
        di = self._index(self.ev(s.dst_index, act), n)
        si = self._index(self.ev(s.src_index, act), n)
        start = lay.offset + di * lay.itemsize
        for where, byte, index in (("destination", start, di),
                                   ("source", si * lay.itemsize, si)):
            mis = byte % BULK_COPY_ALIGN != 0
            if mis.any():
                i = int(np.flatnonzero(mis)[0])
                raise InterpError(f"bulk load {where} element {int(index[i])} of thread "
                                  f"{self.interp.coords(act[i])} is not {BULK_COPY_ALIGN}-byte "
                                  f"aligned{self.where()}")
        ok = self._check(lay.name, di, (di >= 0) & (di + ne <= lay.size), act,
                         lambda: f"outside {lay.name}[0, {lay.size}) (a {nb}-byte bulk load)",
                         lay)
        if ok is not None:
            act, di, si, start = act[ok], di[ok], si[ok], start[ok]
        g = self._global(s.src)
        for t, d, src, st in zip(act.tolist(), di.tolist(), si.tolist(), start.tolist()):
            if t not in bars:           # its mbarrier is out of bounds: reported
                continue
            vals = self._global_read(g, src + np.arange(ne), t)
            self._queue_load(s, t, bars[t], blay, lay, d + np.arange(ne), st + np.arange(nb),
                             vals, nb, "a bulk load", start=st)

    def _load_barriers(self, s, act, what):
        """({thread: (its mbarrier's pool byte, index)} of the active threads whose
        mbarrier is in bounds (the others are reported), the mbarriers' layout)."""
        bact, bidx, boff, blay = self._mbarrier_refs(s.bar, s.bar_index, act, what)
        return dict(zip(bact.tolist(), zip(boff.tolist(), bidx.tolist()))), blay

    def _global_read(self, g, off, t):
        """Thread t's reads of global `g`'s elements `off` through the global access
        path (zeros where out of bounds, reported)."""
        vals = np.zeros(len(off), g.dtype)
        sel = np.arange(len(off))
        pos, okp = g.positions(off)
        tids = np.full(len(off), t, np.int64)
        okc = self._check(g.name, off, okp, tids, lambda: self._global_oob(g))
        if okc is not None:
            sel, pos, tids = sel[okc], pos[okc], tids[okc]
        self._global_access(g, tids, pos)
        vals[sel] = g.flat[pos]
        return vals

    def _queue_load(self, s, t, bar, blay, lay, idx, phys, vals, nbytes, what, **more):
        """Thread t's load of `vals` into elements `idx` of `lay` (pool bytes `phys`),
        completing `nbytes` on the mbarrier `bar` = (pool byte, index) of layout `blay`:
        its init must be visible and fenced; the destination is checked like a write and
        marked pending until the load lands (_land_loads)."""
        o, bi = bar
        if o not in self.mbarriers:
            self._mbarrier_hazard("mbarrier", blay, t, (
                f"thread {self.interp.coords(t)} issues {what} completing on "
                f"{blay.name}[{bi}], which no mbarrier.init has initialised"))
        else:
            self._init_visible(self.mbarriers[o], blay, [t],
                               f"issue {what} completing on", async_proxy=True)
        ev = self._shared_write(lay, np.full(len(idx), t, np.int64), idx, pending=True)
        self.tma_loads.append(_TmaCopy(s, self.iters, t, lay, ev=ev, idx=idx, phys=phys,
                                       data=vals.view(np.uint8).ravel(), bar=o,
                                       nbytes=nbytes, **more))

    def _land_loads(self, bar=None, done=None):
        """Land the queued loads on the mbarrier at pool byte `bar` in issue order until
        done() (every queued load when bar is None)."""
        keep = []
        for cp in self.tma_loads:
            if bar is not None and (cp.bar != bar or done()):
                keep.append(cp)
                continue
            self.pool[cp.phys] = cp.data
            tid = np.full(len(cp.idx), cp.tid, np.int64)
            g, t = self._grains(cp.lay, tid, cp.idx)
            mine = g[(self.p_ev[g] == cp.ev) & (self.p_tid[g] == t)]
            self.p_tid[mine] = _NONE
            self.p_ev[mine] = _NONE
            self.w_tid[g] = t
            self.w_ev[g] = cp.ev
            self.w_epoch[g] = self.epoch       # ordered by the phase's waits (ordering.py)
            self.w_buf[g] = cp.lay.bufid
            self._complete_tx(cp.bar, cp.nbytes, cp.tid, cp.ev)
        self.tma_loads = keep

    def _tma_store(self, s, act):
        """Per active thread: the source box's bytes must be proxy-fenced; they are held
        (async_proxy.py) until a wait retires the store's group."""
        bmap, lay, act, start, coords = self._box_sites(s, s.src, s.src_index, act,
                                                        "TMA store")
        for t, st, xs in zip(act.tolist(), start.tolist(), coords.tolist()):
            off, inside = bmap.elements(xs)
            sel = np.flatnonzero(inside)
            phys = bmap.physical(st, sel).ravel()
            idx = np.unique((phys - lay.offset) // lay.itemsize)
            tid = np.full(len(idx), t, np.int64)
            self._check_proxy_fenced(lay, tid, idx, "the TMA store")
            self.bulk_stores.append(_TmaCopy(
                s, self.iters, t, lay, bmap=bmap, start=st, coords=xs,
                nbytes=bmap.box_bytes, gid=int(self.bulk_committed[t]),
                off=off[sel], phys=phys, idx=idx, held=self._hold(lay, tid, idx)))

    def _bulk_commit(self, s, act):
        self.bulk_committed[act] += 1

    def _bulk_wait(self, s, act):
        older = self.bulk_committed[act] - int(s.n)
        self.bulk_retired[act] = np.maximum(self.bulk_retired[act], older)
        if not s.read:
            self.bulk_done[act] = np.maximum(self.bulk_done[act], older)
        self._retire_stores()

    def _retire_stores(self, end=False):
        """Retire the stores whose bulk group their thread's waits have retired (all of
        them at the end of the block), in issue order: read the shared box, write the
        elements inside the tensor; the writes of a store retired by a wait_group.read
        complete at its thread's full wait (cross_cta.py: a fence covers them only
        then)."""
        keep = []
        saved = self.stmt, self.iters
        for cp in self.bulk_stores:
            if not end and cp.gid >= self.bulk_retired[cp.tid]:
                keep.append(cp)
                continue
            self.stmt, self.iters = cp.stmt, cp.iters    # the accesses are the store's
            lay, g = cp.lay, cp.bmap.g
            self._release(cp.held)
            self._shared_read(lay, np.full(len(cp.idx), cp.tid, np.int64), cp.idx)
            vals = self.pool[cp.phys].view(g.dtype)
            pos, ok = g.positions(cp.off)
            tids = np.full(len(cp.off), cp.tid, np.int64)
            ok = self._check(g.name, cp.off, ok, tids, lambda: self._global_oob(g))
            if ok is not None:
                tids, pos, vals = tids[ok], pos[ok], vals[ok]
            self._global_access(g, tids, pos, write=True)
            g.flat[pos] = vals
            if len(pos) and not end and cp.gid >= self.bulk_done[cp.tid]:
                cp.pos, cp.seq = pos, int(g.shadow.w_seq[pos[0]])
                self.bulk_writing.append(cp)
        writing = []
        for cp in self.bulk_writing:
            if not end and cp.gid >= self.bulk_done[cp.tid]:
                writing.append(cp)
                continue
            self.stmt, self.iters = cp.stmt, cp.iters
            self._complete_writes(cp.bmap.g, cp.pos, cp.seq)
        self.stmt, self.iters = saved
        self.bulk_stores, self.bulk_writing = keep, writing

    def _fence_proxy_async(self, s, act):
        """Each active thread's earlier generic-proxy writes are fenced (async_proxy.py)."""
        self.proxy_fenced[act] = len(self.events)

    def finish(self):
        """The end of the block: loads no wait needed and stores no wait retired are
        reported, then land and retire; then the other rooms finish."""
        for what, copies in (("load", self.tma_loads), ("store", self.bulk_stores)):
            for cp in copies:
                lay = cp.lay
                why = ("no mbarrier wait needed it" if what == "load" else
                       "no cp.async.bulk.wait_group retired its bulk group")
                self.interp.add(("async-pending", cp.stmt.label, "end"), lambda: Hazard(
                    kind="async-pending", buffer=lay.name, first=_point(cp.stmt),
                    second="end of the block", byte_range=(cp.start, cp.start + cp.nbytes),
                    threads=(self.interp.coords(cp.tid), self.interp.coords(cp.tid)),
                    iterations=(dict(cp.iters), {}), block=self.bidx,
                    detail=f"TMA {what} never waited for: {why}; it "
                           f"{'lands' if what == 'load' else 'retires'} at the end of "
                           f"the block"))
        self._land_loads()
        self._retire_stores(end=True)
        super().finish()

    # the statements this room runs: leaves run to completion; compound ones are
    # generators (they run bodies, yield a Wait, or offer a switch point)
    LEAF_STATEMENTS = {kir.TmaStore: _tma_store, kir.BulkCommit: _bulk_commit,
                       kir.BulkWait: _bulk_wait, kir.FenceProxyAsync: _fence_proxy_async}
    COMPOUND_STATEMENTS = {kir.TmaLoad: switch_point(_tma_load),
                           kir.BulkLoad: switch_point(_bulk_load)}
