"""The CPU interpreter of kernel IR and its deterministic race detector (a second backend).

`run_kernel(kernel, args, blocks=None, workspaces=None, interleaving="then-first")` runs
a kir.Kernel on numpy arrays, writing its outputs in place, and raises RaceError (after
the run, outputs written) listing every hazard it saw. `run_interleavings(kernel,
make_args, seeds=(0,))` runs it under several interleavings of its warp-specialized
roles (roles.py) and reports the hazards of all of them. The hazard model of docs/hazards.md is
the specification; the header of each module of this package says how its part meets it.

One module per part, each importing only modules listed above it:
  base.py            InterpError, program points in reports, the empty shadow mark,
                     values with kir.Cast semantics
  scheduler.py       blocks as coroutines in launch order: Wait, schedule (deadlocks)
  roles.py           role branches (warp-group-uniform ifs) as interleaved coroutines;
                     the interleavings (then-first, else-first, seeded random)
  expressions.py     scalar expressions over the active threads: the interpreter's leaves
                     of lowering.kir.LaneEvaluator, which evaluates the operators
  tensor_cores.py    ldmatrix and mma.sync by their descriptors (fuserir.instructions)
  async_copies.py    cp.async: issue, commit and wait groups, landing
  mbarriers.py       mbarriers (init, arrive, expect_tx, parity waits that block a role)
                     and named barriers (bar.sync blocks until its count arrives)
  tma.py             tensor maps, TMA loads onto mbarriers, TMA stores in bulk groups
  warpgroups.py      wgmma (pending until its wait group retires), its fence, commit and
                     wait, setmaxnreg, stmatrix (fuserir.instructions' WGMMA, STMATRIX)
  ordering.py        happens-before through mbarriers and named barriers: per-thread
                     vector clocks (only in kernels that use them)
  race_detector.py   shared memory: the shadow state per grain, hazard recording
  async_proxy.py     Hopper's async proxy: proxy fences, bytes held by pending wgmmas and
                     TMA stores, wgmma registers in flight, wgmma.fence
  cross_cta.py       global memory between blocks: fences, semaphores, views
  cluster.py         thread-block clusters: the cluster barrier, reads of a peer's
                     shared memory, their order (epochs) and lifetime
  execution.py       statements, control flow, lockstep active sets, loads, stores and
                     shuffles; the statement tables, merged from the rooms (a new statement
                     registers in its room: LEAF_STATEMENTS, COMPOUND_STATEMENTS)
  machine.py         the machine state: arguments, global and shared memory layout, the
                     run over blocks, and _Block, one block's memories and shadows
A block is one object, _Block, composed of one mixin per room (_Execution, _Roles,
_TensorCores, _Warpgroups, _Mbarriers, _Cluster, _Tma, _AsyncCopies, _RaceDetector,
_AsyncProxy, _Ordering, _CrossCta): a room reaches the others' methods and the block's
state through `self`, so the rooms import one another only where execution.py names
their statement handlers (and merges acquired views at a barrier). This entry holds
run_kernel and run_interleavings and re-exports what callers import.
"""

from dataclasses import replace

from codegen.errors import RaceError
from codegen.interp.base import InterpError
from codegen.interp.execution import _COMPOUND  # noqa: F401 (tests register statements)
from codegen.interp.machine import _Interp
from codegen.interp.scheduler import Wait, schedule
from fuserir.numerics import convert

__all__ = ["run_kernel", "run_interleavings", "InterpError", "Wait", "schedule", "convert"]


def run_kernel(kernel, args, blocks=None, workspaces=None, interleaving="then-first",
               block_order="earliest"):
    """Run `kernel` on the CPU.

    args: each TensorParam's buffer name -> numpy array (outputs written in place; any
    strides, passed to the kernel in elements), each ScalarParam's name -> int. Size
    variables of tensor parameters that are not scalar parameters are bound from the
    arrays' shapes. A Workspace may be given in args too (a 1-D array of its dtype with at
    least its size elements); one that is not is taken from `workspaces`, a dict
    {buffer name: array} the caller keeps across launches, or allocated as zeros (and
    stored into `workspaces` when given, so that a later launch reuses it, and a caller can
    check that semaphores are left reset). blocks: optional list of block indices
    (x, y, z) to run (others do not run). interleaving: how the roles of warp-specialized
    role branches interleave (roles.py): "then-first", "else-first", or an int seed of a
    random choice at every switch point. block_order: which block the scheduler resumes
    of those that can go on (scheduler.py): "earliest" launched, or "latest" (where all
    blocks are resident at once, a block waiting on others may fall behind them all).
    Raises RaceError listing every hazard after the run (outputs written), InterpError
    for what cannot be run at all.
    """
    interp = _Interp(kernel, args, workspaces, interleaving, block_order)
    interp.run(blocks)
    if interp.hazards:
        raise RaceError(interp.hazards, kernel.name)


def run_interleavings(kernel, make_args, seeds=(0,), blocks=None):
    """Run `kernel` under the interleavings "then-first", "else-first" and each seed of
    `seeds`, on fresh arguments from make_args() each time. Returns the arguments of the
    first run (outputs written) if no run saw a hazard; else raises RaceError listing
    each hazard (kind, first and second program point) once, with the interleavings it
    was seen under in its detail and in extra["interleavings"]."""
    found, first = {}, None
    for how in ("then-first", "else-first", *seeds):
        args = make_args()
        first = args if first is None else first
        try:
            run_kernel(kernel, args, blocks, interleaving=how)
        except RaceError as e:
            for h in e.hazards:
                found.setdefault((h.kind, h.first, h.second), (h, []))[1].append(how)
    if found:
        raise RaceError([replace(h, detail=f"{h.detail} (seen under interleaving(s) "
                                           f"{', '.join(map(str, hows))})",
                                 extra={**h.extra, "interleavings": hows})
                         for h, hows in found.values()], kernel.name)
    return first
