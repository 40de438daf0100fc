"""The whole compiler back half, as one ordered list of passes.

    lower(fusion) copies the fusion (lowering never changes the user's), then runs:

     1  narrow_vectors         narrow the vector copies of the global tensors vector_caps names
     2  inline_defaults        place every tensor that no compute_at placed
     3  validate               refuse what this lowering cannot do, before anything is built
     4  loop_nests             the kernel skeleton — parameters, launch configuration, loop nests
     5  allocation             a buffer for every intermediate tensor and reduction accumulator
     6  indexing               every placed expression becomes stores of indexed loads
     7  unroll_register_loops  unroll loops that index registers, short tensor-core loops
     8  block_reductions       combine the partials of a reduction bound to TIDx or TIDy
     9  grid_reductions        split-K across CTAs: serial, parallel, atomic or cluster
    10  predicates             guard each store that could touch an element it must not
    11  circular_buffer        pipeline the async copies of circular-buffered shared tensors
    12  reuse_shared           a shared tensor marked promote_reuse takes the bytes of dead buffers
    13  insert_syncs           insert the barriers that order every shared-memory hazard
     -  drop_syncs             remove the syncs a caller names, to show what each prevents
    14  verify_hazards         refuse a kernel that the hazard analysis cannot prove safe

Each pass is lowering/passes/<name>.py: `run(ctx, kernel) -> kernel` and the module's PASS
record (lowering.contract.Pass), which names the products the pass reads and the ones it
provides. This module checks the order against the records when it is imported, and
lower() refuses to leave out a pass whose product a pass that runs needs. The list above
is written from the records by tools/gen_pass_docs.py (tests/test_pass_contract.py checks
that it agrees). `dump_after` collects the kernel IR after any pass, as `fuserir dump
--after PASS` shows it; an `instrument` sees every pass as it finishes.
"""

import copy

from fuserir.dtypes import DataType

from . import kir
from .context import LoweringContext
from .contract import check_order, check_skipped
from .errors import LoweringError
from .passes import (allocation, block_reductions, circular_buffer, drop_syncs as drop_step,
                     grid_reductions, indexing, inline_defaults, insert_syncs, loop_nests,
                     narrow_vectors, predicates, reuse_shared, unroll_register_loops,
                     validate, verify_hazards)

PIPELINE = tuple(module.PASS for module in (
    narrow_vectors, inline_defaults, validate, loop_nests, allocation, indexing,
    unroll_register_loops, block_reductions, grid_reductions, predicates, circular_buffer,
    reuse_shared, insert_syncs, drop_step, verify_hazards))
PROVIDERS = check_order(PIPELINE)        # {product: the pass that provides it}
PASSES = tuple(p for p in PIPELINE if not p.on_request)     # the numbered passes
PASS_NAMES = tuple(p.name for p in PASSES)
OPTIONAL = tuple(p.name for p in PASSES if p.optional)     # the passes a caller may disable


def check_pass(name, optional=False, verb="disabled"):
    """Raise LoweringError unless `name` names a pass (one a caller may disable, with
    `optional`; `verb` says how the message calls disabling)."""
    if name not in PASS_NAMES:
        raise LoweringError(f"unknown pass '{name}'; the passes are: {', '.join(PASS_NAMES)}")
    if optional and name not in OPTIONAL:
        raise LoweringError(f"pass '{name}' cannot be {verb} (only {', '.join(OPTIONAL)} can)")


def lower(fusion, disable_passes=(), drop_syncs=(), verify=True, dump_after=(),
          stop_after=None, index_dtype=DataType.i32, vector_caps=None, instrument=None,
          proofs=None):
    """Lower a scheduled fusion to one kernel. Returns (kernel, dumps) where dumps maps
    each pass named in dump_after to the kernel IR text after it. `stop_after` ends the
    pipeline after the named pass (the kernel is then as that pass left it). Index
    arithmetic is in `index_dtype` (i32, or i64 for sizes past 2^31 elements).
    `vector_caps` ({global tensor name: bytes}) narrows the vector copies and cp.asyncs
    of those tensors to at most that many bytes per access (pass narrow_vectors): a
    variant of the kernel for arrays too short, strided or unaligned for the scheduled
    vectors. `drop_syncs` names inserted barriers to remove (step drop_syncs) and
    `verify=False` leaves out verify_hazards, so that the interpreter or the GPU shows
    what a barrier prevents. `proofs` (a lowering.verify.async_protocol.ProofMemo) is
    where the async verifier finds and leaves proofs beyond this process (the driver's
    cache on disk); without it they are kept in this process only.

    `instrument(pass_name, kernel, fusion)`, when given, is called after every pass that
    ran, in order (kernel is None before loop_nests builds one; fusion is lowering's copy
    of it), as TVM's pass instruments are: the compile driver's FUSERIR_DUMP_AFTER is one."""
    for name in [*disable_passes, *dump_after, *([stop_after] if stop_after else [])]:
        check_pass(name)
    for name in disable_passes:
        check_pass(name, optional=True)
    skipped = set(disable_passes)
    if not verify:
        skipped.add(verify_hazards.PASS.name)
    if not drop_syncs:
        skipped.add(drop_step.PASS.name)       # a step runs only when asked
    check_skipped(PIPELINE, skipped, stop_after)
    ctx = LoweringContext(copy.deepcopy(fusion), index_dtype, vector_caps, drop_syncs,
                          providers=PROVIDERS, proofs=proofs)
    kernel, dumps = None, {}
    for p in PIPELINE:
        if p.name in skipped:
            continue
        kernel = ctx.run_pass(p, kernel)
        if p.on_request:
            continue             # a step is not one of the passes dumps and stops name
        if kernel is not None:
            kir.relabel(kernel.body)
        if p.name in dump_after:
            dumps[p.name] = kir.format_kernel(kernel) if kernel is not None else str(ctx.fusion)
        if instrument is not None:
            instrument(p.name, kernel, ctx.fusion)
        if p.name == stop_after:
            break
    return kernel, dumps
