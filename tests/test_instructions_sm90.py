"""Hopper's warp-group MMA descriptor (fuserir.instructions.WGMMA), its shared-memory
matrix descriptor and the swizzle modes, against the PTX ISA's figures and field layout
spelled out here independently."""

import numpy as np
import pytest

from fuserir.dtypes import DataType
from fuserir.instructions import (SWIZZLE_BYTES, SWIZZLE_CODES, WARPGROUP, WGMMA,
                                  MatrixDescriptor, swizzle)


def isa_wgmma_d(thread, i):
    """PTX ISA, "wgmma .m64nNk16 register fragment layout for the accumulator": thread t
    of the warp group, warp w = t / 32, lane l = t % 32, groupID = l >> 2,
    threadID_in_group = l % 4; d[i] is at row 16 w + groupID (+ 8 when i % 4 >= 2) and
    column 8 (i / 4) + threadID_in_group * 2 + (i & 1)."""
    warp, lane = thread // 32, thread % 32
    row = 16 * warp + (lane >> 2) + (8 if i % 4 >= 2 else 0)
    col = 8 * (i // 4) + (lane % 4) * 2 + (i & 1)
    return row, col


def isa_wgmma_a(thread, i):
    """A from registers (.f16/.bf16): warp w's 16 rows as mma.m16n8k16's A fragment."""
    warp, lane = thread // 32, thread % 32
    row = 16 * warp + (lane >> 2) + (8 if i in (2, 3, 6, 7) else 0)
    col = (lane % 4) * 2 + (i & 1) + (8 if i >= 4 else 0)
    return row, col


@pytest.mark.parametrize("n", [8, 64, 128, 256])
def test_accumulator_fragment_is_the_isa_figure(n):
    fragment = WGMMA.d(n)
    assert (fragment.rows, fragment.cols, fragment.count) == (64, n, n // 2)
    seen = set()
    for thread in range(WARPGROUP):
        for i in range(fragment.count):
            assert fragment.at(thread, i) == isa_wgmma_d(thread, i), (thread, i)
            seen.add(fragment.at(thread, i))
    assert len(seen) == 64 * n                          # every element once


def test_register_a_fragment_is_the_isa_figure_and_works_on_arrays():
    fragment = WGMMA.a()
    threads = np.arange(WARPGROUP)
    for i in range(fragment.count):
        rows, cols = fragment.at(threads, i)
        assert [(int(r), int(c)) for r, c in zip(rows, cols)] == \
            [isa_wgmma_a(t, i) for t in range(WARPGROUP)]


def test_widths_ptx_and_arch():
    assert WGMMA.widths[0] == 8 and WGMMA.widths[-1] == 256 and len(WGMMA.widths) == 32
    assert WGMMA.ptx(256, DataType.bf16) == "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16"
    assert WGMMA.wait(1) == "wgmma.wait_group.sync.aligned 1"
    assert WGMMA.arch == 90 and WGMMA.arch_specific
    with pytest.raises(ValueError, match="n = 12 is not a multiple of 8"):
        WGMMA.d(12)


def test_matrix_descriptor_fields():
    """Bits 0-13 start >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte offset >> 4,
    49-51 base offset, 62-63 swizzle (0 none, 1 128B, 2 64B, 3 32B): a K-major 128B tile at
    0x400 has LBO 16 B (1) and SBO 1024 B (64)."""
    d = MatrixDescriptor(start=0x400, leading=16, stride=1024, swizzle="128B")
    assert d.encode() == (0x400 >> 4) | (1 << 16) | (64 << 32) | (1 << 62)
    assert MatrixDescriptor.decode(d.encode()) == d
    assert SWIZZLE_CODES == {"none": 0, "128B": 1, "64B": 2, "32B": 3}
    for mode in SWIZZLE_CODES:
        e = MatrixDescriptor(0x3ff0, 0x10, 0x3fff0, mode, 7)
        assert MatrixDescriptor.decode(e.encode()) == e
    with pytest.raises(ValueError, match="start byte offset 8 is not a multiple of 16"):
        MatrixDescriptor(8, 16, 1024).encode()
    with pytest.raises(ValueError, match="stride byte offset 262144"):
        MatrixDescriptor(0, 16, 1 << 18).encode()


@pytest.mark.parametrize("mode", ["none", "32B", "64B", "128B"])
def test_swizzle_permutes_16_byte_chunks_within_each_row_of_an_atom(mode):
    """The XOR only moves 16-byte chunks among the first SWIZZLE_BYTES[mode] bytes of each
    128-byte row, by the row's index in its 8-row atom; it is its own inverse."""
    offsets = np.arange(4096)
    out = swizzle(offsets, mode)
    assert sorted(out.tolist()) == offsets.tolist()          # a permutation
    assert np.array_equal(swizzle(out, mode), offsets)       # an involution
    assert np.array_equal(out % 16, offsets % 16)            # bytes of a chunk stay together
    span = SWIZZLE_BYTES[mode]
    assert np.array_equal(out // 128, offsets // 128)        # rows stay rows
    assert np.array_equal((out % 128) // span, (offsets % 128) // span)
    if mode == "128B":       # row r of the atom: chunk c is stored at chunk c ^ (r % 8)
        for r in range(8):
            for c in range(8):
                assert swizzle(128 * r + 16 * c, mode) == 128 * r + 16 * (c ^ r)
    if mode == "none":
        assert np.array_equal(out, offsets)
