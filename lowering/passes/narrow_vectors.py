"""Pass `narrow_vectors`: narrow the vector copies of the global tensors vector_caps names.

A copy between global and shared memory whose innermost loop axis is vectorized (w
elements) moves each vector in one access: a cp.async of an async cache (indexing's
async_copy), or a vector load and store (indexing's vector_copy), and so does a
vectorized cat, pad or slice (vector_select: a vector of the fusion input under the
region holding it). That needs the global array's rows to be a whole number of vectors,
contiguous and aligned, which the executable checks at run time (with the launch-time
offsets the vectors of a cat, pad or slice are read at). For arrays that are not,
`lower(..., vector_caps={name: bytes})` builds a variant of the kernel whose copies of
that global tensor move at most that many bytes per access (the executable picks the
caps from the actual arrays: driver.vector_widths.widest_access_bytes): every vectorized
copy or cp.async whose global side is the named tensor (a cache reading input X, or an
output written from a shared tile; a copy between shared memory and registers counts the
global tensor its shared side was copied from, so that a row's register vectors narrow
with the shared copy that filled them) has its vector axis of w elements split into
[w / c, c] (c = the widest of 16, 8, 4 bytes within the cap, in elements), the outer
part unrolled and the inner part vectorized; where no vector fits (c = 1, element
copies) both pieces are unrolled. A vectorized cat, pad or slice any of whose fusion
inputs is capped becomes element reads instead (both pieces unrolled, a select per
element, its inputs' ops inlined into it again): a narrower vector would lay its
register tensor out otherwise than the copy that reads it. Those are the public
transforms (TensorView.split / parallelize / vectorize), applied to lowering's private
copy of the fusion, never the user's.

Meaning is unchanged: the copy touches the same elements, by the same threads (its
thread axes are not touched, so the owner maps the hazard analysis reads are the same),
and the shared buffer keeps its layout: the allocation lays a buffer out row-major over
its loop axes, so [.., w/c, c] with strides (c, 1) is the same offsets as [.., w], and the
swizzle (16-byte chunks, a multiple of every narrower vector) and the ldmatrix reads that
follow address the same bytes (for ldmatrix's rows of 8 contiguous elements,
lowering.indexing.fragments takes the pieces [w/c, c] as the axis they split). A narrowed cp.async
of 4 or 8 bytes is `.ca`; an element copy of a 1- or 2-byte dtype has no cp.async and
becomes an ordinary load and shared store, which the predicates pass makes write zero out
of bounds as cp.async would.

It runs first, before inline_defaults, so that every later pass (placement included)
sees the narrowed loops as if the schedule had written them. Without vector_caps, or
where a cap is at least the scheduled width, it changes nothing.
"""

import numbers

from fuserir.ir.exprs import LoadStoreOp
from fuserir.ir.iterdomain import ParallelType
from fuserir.ir.tensor import MemoryType

from ..support.analysis import (is_async_copy, select_leaves, vector_copy_width,
                                vector_select_width)
from ..contract import Pass
from ..errors import LoweringError

ACCESS_BYTES = (16, 8, 4)     # the vector accesses a copy lowers to (cp.async, vector words)


def global_sides(tv):
    """The global tensors whose elements tv's copy moves by vectors (the input an async or
    vector cache reads, the output a vector copy writes, or the global input under each
    input of a vectorized cat, pad or slice), or []: tv is not such a copy."""
    if vector_select_width(tv):
        return select_leaves(tv)
    expr = tv.definition
    if not isinstance(expr, LoadStoreOp) or expr.ldmatrix or not tv.loop or \
            tv.loop[-1].parallel is not ParallelType.vectorize:
        return []
    producer = expr.inputs[0]
    if is_async_copy(tv):
        return [producer]
    if vector_copy_width(tv):
        if MemoryType.global_ in (tv.memory_type, producer.memory_type):
            return [tv if tv.memory_type is MemoryType.global_ else producer]
        # between shared memory and registers: the global tensor the shared side copies
        shared = producer if producer.memory_type is MemoryType.shared else tv
        source = shared.definition
        if isinstance(source, LoadStoreOp) and \
                source.inputs[0].memory_type is MemoryType.global_:
            return [source.inputs[0]]
        return []
    return []


def access_bytes(cap, itemsize):
    """Bytes per access under `cap`: the widest vector that fits, else one element."""
    return max((b for b in ACCESS_BYTES if itemsize <= b <= cap), default=itemsize)


def _check(fusion, caps):
    if not isinstance(caps, dict):
        raise LoweringError(f"vector_caps must be a dict {{global tensor name: bytes}}, "
                            f"got {type(caps).__name__}")
    globals_ = {t.name: t for t in fusion.inputs + fusion.outputs}
    for name, cap in caps.items():
        tv = globals_.get(name)
        if tv is None:
            raise LoweringError(f"vector_caps names {name!r}, which is not a global tensor "
                                f"of fusion {fusion.name} (its inputs and outputs: "
                                f"{', '.join(sorted(globals_))})")
        if isinstance(cap, bool) or not isinstance(cap, numbers.Integral) or \
                cap < tv.dtype.itemsize:
            raise LoweringError(f"vector_caps[{name!r}] = {cap!r}: a cap is a whole number "
                                f"of bytes per access, at least one element of {name} "
                                f"({tv.dtype}, {tv.dtype.itemsize} bytes)")


def narrow(tv, cap):
    """Split tv's vector axis so that one access moves at most `cap` bytes."""
    itemsize = tv.dtype.itemsize
    width = tv.loop[-1].extent
    nbytes = access_bytes(cap, itemsize)
    if nbytes >= width * itemsize:
        return
    lanes = nbytes // itemsize
    # split even for element copies (lanes 1): the pieces of a split are new axes, so they
    # take their parallel types here without rebinding the vectorized one (an axis keeps
    # the one parallel type the schedule gave it)
    tv.split(-1, lanes)
    tv.parallelize(-2, ParallelType.unroll)
    if lanes == 1:
        tv.parallelize(-1, ParallelType.unroll)       # element copies: [w, 1]
    else:
        tv.vectorize(-1)


def run(ctx, kernel):
    caps = ctx.vector_caps
    if not caps:
        return kernel
    _check(ctx.fusion, caps)
    for tv in list(ctx.fusion.tensors):
        capped = [caps[t.name] for t in global_sides(tv) if t.name in caps]
        if capped and vector_select_width(tv):
            narrow(tv, tv.dtype.itemsize)   # a cat, pad, slice: element reads
        elif capped:
            narrow(tv, capped[0])
    return kernel


PASS = Pass("narrow_vectors", run, __doc__,
            why="first, so that every later pass, placement included, sees the narrowed loops "
                "as if the schedule had written them")
