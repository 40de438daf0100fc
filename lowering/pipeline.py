"""The whole compiler back half, as one ordered list of passes.

    lower(fusion) copies the fusion (lowering never changes the user's), then runs:

    narrow_vectors    (only with vector_caps) narrow the vector copies of named globals
    inline_defaults   place every tensor no compute_at placed (inline as far as legal)
    validate          refuse what this lowering does not support, with a clear error
    loop_nests        kernel parameters, launch configuration, loop nests of placed exprs
    allocation        local/shared buffers and accumulators; shared byte offsets
    indexing          placed expressions -> stores of indexed loads
    block_reductions  TIDx reductions -> warp shuffles + shared scratch
    grid_reductions   serial grid reductions -> a semaphore turnstile across CTAs
    predicates        bounds, thread-extent and redundant-write guards
    circular_buffer   pipeline circular-buffered async copies (prologue, prefetch, waits)
    reuse_shared      let promote_reuse tensors alias dead shared buffers
    insert_syncs      barriers for every shared-memory hazard, each with its reasons
    drop_syncs        (only when asked) remove named barriers, to show what they prevent
    verify_hazards    refuse a kernel the hazard analysis cannot prove safe

Each pass is `run(ctx, kernel) -> kernel` in lowering/passes/<name>.py. `dump_after`
collects the kernel IR after any pass, as `fuserir dump --after PASS` shows it.
"""

import copy

from fuserir.dtypes import DataType

from . import kir
from .analysis import LoweringContext
from .errors import LoweringError
from .passes import (allocation, block_reductions, circular_buffer, grid_reductions, indexing,
                     inline_defaults, insert_syncs, loop_nests, narrow_vectors, predicates,
                     reuse_shared, validate, verify_hazards)
from .passes import drop_syncs as drop_syncs_pass

PASSES = (
    ("narrow_vectors", narrow_vectors.run),
    ("inline_defaults", inline_defaults.run),
    ("validate", validate.run),
    ("loop_nests", loop_nests.run),
    ("allocation", allocation.run),
    ("indexing", indexing.run),
    ("block_reductions", block_reductions.run),
    ("grid_reductions", grid_reductions.run),
    ("predicates", predicates.run),
    ("circular_buffer", circular_buffer.run),
    ("reuse_shared", reuse_shared.run),
    ("insert_syncs", insert_syncs.run),
    ("verify_hazards", verify_hazards.run),
)
PASS_NAMES = tuple(name for name, _ in PASSES)
OPTIONAL = ("insert_syncs", "verify_hazards")   # the passes a caller may disable


def lower(fusion, disable_passes=(), drop_syncs=(), verify=True, dump_after=(),
          stop_after=None, index_dtype=DataType.i32, vector_caps=None, instrument=None):
    """Lower a scheduled fusion to one kernel. Returns (kernel, dumps) where dumps maps
    each pass named in dump_after to the kernel IR text after it. `stop_after` ends the
    pipeline after the named pass (the kernel is then as that pass left it). Index
    arithmetic is in `index_dtype` (i32, or i64 for sizes past 2^31 elements).
    `instrument(pass_name, kernel, fusion)`, when given, is called after every pass that
    ran (kernel is None before loop_nests builds one; fusion is lowering's copy): the
    driver's FUSERIR_DUMP_AFTER uses it, as TVM's pass instruments are used.
    `vector_caps` ({global tensor name: bytes}) narrows the vector copies and cp.asyncs
    of those tensors to at most that many bytes per access (pass narrow_vectors): a
    variant of the kernel for arrays too short, strided or unaligned for the scheduled
    vectors."""
    names = list(disable_passes) + list(dump_after) + ([stop_after] if stop_after else [])
    for name in names:
        if name not in PASS_NAMES:
            raise LoweringError(f"unknown pass '{name}'; the passes are: "
                                f"{', '.join(PASS_NAMES)}")
    for name in disable_passes:
        if name not in OPTIONAL:
            raise LoweringError(f"pass '{name}' cannot be disabled (only "
                                f"{', '.join(OPTIONAL)} can)")
    ctx = LoweringContext(copy.deepcopy(fusion), index_dtype, vector_caps)
    kernel, dumps = None, {}
    for name, run in PASSES:
        if name == "verify_hazards" and drop_syncs:
            kernel = drop_syncs_pass.run(ctx, kernel, tuple(drop_syncs))
        if name in disable_passes or (name == "verify_hazards" and not verify):
            continue
        kernel = run(ctx, kernel)
        if kernel is not None:
            kir.relabel(kernel.body)
        if name in dump_after:
            dumps[name] = kir.format_kernel(kernel) if kernel is not None else str(ctx.fusion)
        if instrument is not None:
            instrument(name, kernel, ctx.fusion)
        if name == stop_after:
            break
    return kernel, dumps
