"""Rows read and written as 16-byte vectors: the copies through which the reduction
scheduler (fuserir.scheduler.auto) moves a row's elements w at a time, where its inner
reduction lays each thread's w neighbouring elements of a row side by side.

An input read once is copied into registers a vector at a time beside its reader; an
input several loop nests read (a normalization's) is copied into shared memory a vector
at a time, and each reader copies its vector out into registers (16 bytes a lane: a
warp's reads of a row are 512 contiguous bytes, no bank conflict, where two-byte reads
of a lane's 8 neighbours would conflict four ways); an output of the full rank is
computed into registers and stored a vector at a time. The copies are public transforms
(cache_after, cache_before, compute_at, vectorize); the executable takes a variant with
narrower copies where an array's rows are no whole number of vectors.

It sits beside auto, which calls it, and uses nothing above the IR.
"""

from ..ir.exprs import BroadcastOp, LoadStoreOp, ReductionOp
from ..ir.tensor import MemoryType

VECTOR_BYTES = 16        # the widest access: a vector of a row, of a pointwise fusion


def row_vector_width(fusion, rank):
    """Elements of a row one 16-byte vector of the fusion's widest row input holds (1
    where no input runs along the rows of the fusion's `rank`)."""
    rows = [x for x in fusion.inputs if runs_along_rows(fusion, x, rank)]
    if not rows:
        return 1
    return VECTOR_BYTES // max(x.dtype.itemsize for x in rows)


def runs_along_rows(fusion, x, rank):
    """Does input x run along the rows' innermost axis: of the full rank, or broadcast to
    it over the leading axes only (a layer norm's weight)?"""
    if not x.rank or x.shape_axes[-1].is_broadcast:
        return False
    if x.rank == rank:
        return True
    uses = fusion.uses(x)
    return len(uses) == 1 and isinstance(uses[0], BroadcastOp) and not uses[0].flags[-1] \
        and uses[0].output.rank == rank


def row_vectors(fusion, rank, width):
    """(the copies that move `width` elements of a row as one vector, [(a register copy,
    the tensor it is computed beside)]), made by the transforms of the module docstring.
    The caller lays every tensor of the rows out with the vector innermost, then
    computes each register copy beside its tensor and vectorizes the copies."""
    vectors, placed = [], []
    for x in fusion.inputs:
        if not runs_along_rows(fusion, x, rank):
            continue
        uses = fusion.uses(x)
        shared = [e.output for e in uses if isinstance(e, LoadStoreOp)
                  and e.output.memory_type is MemoryType.shared]
        if shared:
            vectors.append(shared[0])
            for use in list(fusion.uses(shared[0])):
                copy = shared[0].cache_after(MemoryType.local, consumers=[use.output])
                vectors.append(copy)
                placed.append((copy, use.output))
        elif len(uses) == 1:
            reader = uses[0].output
            copy = x.cache_after(MemoryType.local)
            vectors.append(copy)
            placed.append((copy, reader))
    for out in list(fusion.outputs):
        if out.rank == rank and len(out.logical) == rank and \
                not out.shape_axes[-1].is_broadcast and \
                not isinstance(out.definition, ReductionOp) and \
                width * out.dtype.itemsize <= VECTOR_BYTES:
            placed.append((out.cache_before(MemoryType.local), out))
            vectors.append(out)
    return vectors, placed
