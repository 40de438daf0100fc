"""The widest vector access an actual array allows.

A kernel moves a global tensor by 16-, 8- or 4-byte vectors (a cp.async, or a vector load
or store): one access reads or writes `bytes / itemsize` consecutive elements of a row.
That is only right when the array's last axis is contiguous, its rows hold a whole
number of vectors (no vector straddles the end of a row), and every row starts aligned
to the vector's bytes. `widest_access_bytes` answers, for one array, the widest access
that is: the executable computes it for each global array at run time and lowers a
kernel variant whose copies of that tensor are no wider
(`lowering.pipeline.lower(..., vector_caps={name: bytes})`). A pure function of the
array's layout, so that choice is testable without a GPU. `vector_caps` asks it of every
tensor a step's kernel moves in vectors, for the arrays of one call.
"""

import types

import numpy as np

from fuserir.ir import extent as ext
from lowering import kir
from lowering.kir.evaluate import evaluate_scalar
from lowering.passes.narrow_vectors import ACCESS_BYTES   # 16, 8, 4: what copies move


def widest_access_bytes(shape, strides_bytes, itemsize, address, most=16):
    """The largest of 16, 8 and 4 bytes that is <= `most` and that every row of the array
    allows: its last axis contiguous (stride == itemsize, or extent 1), that extent a
    multiple of bytes / itemsize, every other stride (of an axis with extent > 1) a
    multiple of the bytes, and `address` (of the first element) a multiple of the
    bytes. Else `itemsize`: element copies. A 0-d array has one element: `itemsize`."""
    shape, strides = tuple(shape), tuple(strides_bytes)
    if len(shape) != len(strides):
        raise ValueError(f"widest_access_bytes: shape {shape} and strides {strides} have "
                         "different ranks")
    if not shape:
        return itemsize
    if shape[-1] != 1 and strides[-1] != itemsize:
        return itemsize                       # the last axis is not contiguous
    for nbytes in ACCESS_BYTES:
        if nbytes > most or nbytes < itemsize or nbytes % itemsize:
            continue
        if shape[-1] % (nbytes // itemsize) or address % nbytes:
            continue
        if all(s % nbytes == 0 for s, d in zip(strides[:-1], shape[:-1]) if d > 1):
            return nbytes
    return itemsize


# The widest cp.async copy (kir.CpAsync copies 4, 8 or 16 bytes): an input's address
# modulo 16 decides every alignment vector_caps asks of it.
VECTOR_ALIGNMENT = 16


def address_of(array):
    """The device or host address of an array's first element (0 when it has none)."""
    if type(array).__module__ == "cupy":                      # cupy.ndarray
        return array.data.ptr
    if hasattr(array, "data_ptr"):                            # torch
        return array.data_ptr()
    if type(array).__module__.startswith("cupy"):
        return array.data.ptr
    interface = getattr(array, "__array_interface__", None)   # numpy (ml_dtypes too)
    return interface["data"][0] if interface else 0


def _vector_accesses(kernel):
    """{global buffer name: (bytes, how)} of every access of a kernel whose global address
    must be aligned to more than an element: cp.async and bulk copy sources (their
    effects' alignment) and vector copies (kir Store/Load of width > 1)."""
    found = {}
    for s in kir.walk(kernel.body):
        for a in s.effects().accesses:        # the statement's own: cp.async, stores
            align = a.align or a.nbytes
            if a.memory is kir.Memory.global_ and align > a.buffer.dtype.itemsize:
                found[a.buffer.name] = ((align, "stores it", "in a vectorized copy")
                                        if a.write else
                                        (align, "copies it", f"with {a.via}"))
        for load in _vector_loads(s):
            nbytes = load.width * load.buffer.dtype.itemsize
            found[load.buffer.name] = (nbytes, "loads it", "in a vectorized copy")
    return found


def _vector_loads(stmt):
    """The global loads of more than one element in a statement's own expressions."""
    return [x for e in kir.expressions(stmt) for x in kir.walk_expr(e)
            if isinstance(x, kir.Load) and x.width > 1
            and x.buffer.memory is kir.Memory.global_]


def _contiguous_layout(tv, env):
    """Shape, dtype and strides of the contiguous array run() will allocate for tv."""
    shape = tuple(ext.evaluate(e, env) for e in tv.shape)
    itemsize = tv.dtype.itemsize
    strides = [itemsize * int(np.prod(shape[i + 1:], dtype=np.int64))
               for i in range(len(shape))]
    return types.SimpleNamespace(shape=shape, dtype=np.dtype(tv.dtype.numpy),
                                 strides=tuple(strides))


def vector_caps(step, values, env):
    """{global tensor name: bytes} for each tensor the step's kernel moves in vectors (a
    cp.async, or a vector load or store) wider than its array allows: its last axis must be
    contiguous with a whole number of vectors per row, and every row start aligned to the
    vector (driver.vector_widths); and each launch-time offset lowering recorded for it
    (kernel.vector_offsets: a slice's start, a cat's boundary) a multiple of the vector.
    The kernel variant for these caps copies those tensors no wider (down to element
    copies), so every size, stride and alignment runs on the same schedule. An output not allocated yet is taken as run() allocates it: contiguous
    and aligned."""
    if step.vectors is None:
        step.vectors = _vector_accesses(step.kernel.kir)
    outputs = {t.name: t for t in step.fusion.outputs}
    offsets = {}
    for name, offset in step.kernel.kir.vector_offsets:
        offsets.setdefault(name, []).append(evaluate_scalar(offset, env))
    caps = {}
    for name, (nbytes, _, _) in step.vectors.items():
        array = values.get(name)
        if array is None and name in outputs:
            array = _contiguous_layout(outputs[name], env)
        if array is None or not getattr(array, "shape", None):
            continue
        itemsize = array.dtype.itemsize
        allowed = widest_access_bytes(array.shape, array.strides, itemsize,
                                      address_of(array), most=nbytes)
        for offset in offsets.get(name, ()):
            allowed = min(allowed, offset_access_bytes(offset, itemsize, nbytes))
        if allowed < nbytes:
            caps[name] = allowed
    return caps


def offset_access_bytes(offset, itemsize, most=16):
    """The largest of 16, 8 and 4 bytes (at most `most`) that an access at `offset`
    elements past an aligned one stays aligned to, else `itemsize`."""
    return max((b for b in ACCESS_BYTES if itemsize <= b <= most and
                (offset * itemsize) % b == 0), default=itemsize)
