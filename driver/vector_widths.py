"""The widest vector access an actual array allows.

A kernel moves a global tensor by 16-, 8- or 4-byte vectors (a cp.async, or a vector load
or store): one access reads or writes `bytes / itemsize` consecutive elements of a row.
That is only right when the array's last axis is contiguous, its rows hold a whole
number of vectors (no vector straddles the end of a row), and every row starts aligned
to the vector's bytes. `widest_access_bytes` answers, for one array, the widest access
that is: the executable computes it for each global array at run time and lowers a
kernel variant whose copies of that tensor are no wider
(`lowering.pipeline.lower(..., vector_caps={name: bytes})`). A pure function of the
array's layout, so that choice is testable without a GPU.
"""

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
