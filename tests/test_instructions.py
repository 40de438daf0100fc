"""The instruction descriptors (fuserir.instructions) against the PTX ISA's figures,
spelled out here independently lane by lane, and the descriptors' other facts."""

import numpy as np
import pytest

from fuserir.dtypes import DataType
from fuserir.instructions import CP_ASYNC, LDMATRIX, MMA_M16N8K16

LANES = range(32)


def isa_mma_a(lane, i):
    """PTX ISA, mma.m16n8k16 .f16/.bf16 A fragment: a0,a1,a4,a5 in row groupID, a2,a3,a6,a7
    in groupID + 8; columns threadID_in_group * 2 + (i & 1), plus 8 for a4..a7."""
    group, thread = lane >> 2, lane % 4
    row = group + (8 if i in (2, 3, 6, 7) else 0)
    col = thread * 2 + (i & 1) + (8 if i >= 4 else 0)
    return row, col


def isa_mma_b(lane, i):
    """B fragment: rows (k) threadID_in_group * 2 + (i & 1), plus 8 for b2, b3; column
    groupID."""
    return (lane % 4) * 2 + (i & 1) + (8 if i >= 2 else 0), lane >> 2


def isa_mma_c(lane, i):
    """C/D fragment: row groupID for c0, c1, groupID + 8 for c2, c3; column
    threadID_in_group * 2 + (i & 1)."""
    return (lane >> 2) + (8 if i >= 2 else 0), (lane % 4) * 2 + (i & 1)


@pytest.mark.parametrize("fragment, isa", [
    (MMA_M16N8K16.a, isa_mma_a), (MMA_M16N8K16.b, isa_mma_b), (MMA_M16N8K16.c, isa_mma_c)])
def test_mma_fragments_are_the_isa_figures(fragment, isa):
    seen = set()
    for lane in LANES:
        for i in range(fragment.count):
            where = fragment.at(lane, i)
            assert where == isa(lane, i), (lane, i)
            assert 0 <= where[0] < fragment.rows and 0 <= where[1] < fragment.cols
            seen.add(where)
    assert len(seen) == fragment.rows * fragment.cols      # every element held once


def test_fragment_maps_evaluate_on_arrays_of_lanes():
    """The interpreter evaluates the maps on numpy arrays of lane ids at once."""
    lanes = np.arange(32)
    for j in range(MMA_M16N8K16.a.count):
        rows, cols = MMA_M16N8K16.a.at(lanes, j)
        assert [(int(r), int(c)) for r, c in zip(rows, cols)] == \
            [isa_mma_a(lane, j) for lane in LANES]


def test_mma_shape_types_and_ptx():
    m, n, k = MMA_M16N8K16.shape
    assert (m, n, k) == (16, 8, 16) and MMA_M16N8K16.arch == 80
    assert (MMA_M16N8K16.a.rows, MMA_M16N8K16.a.cols) == (m, k)
    assert (MMA_M16N8K16.b.rows, MMA_M16N8K16.b.cols) == (k, n)
    assert MMA_M16N8K16.accumulator is DataType.f32
    assert MMA_M16N8K16.shape_name == "m16n8k16" and MMA_M16N8K16.label == "mma.m16n8k16"
    assert MMA_M16N8K16.ptx(DataType.bf16) == "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"


def test_ldmatrix_lanes_and_registers_are_the_isa_figures():
    """PTX ISA, ldmatrix: threads 8i..8i+7 give the row addresses of matrix i; in each
    matrix lane l receives row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 (.trans: the
    transposed matrix, so column l / 4 of rows 2 (l % 4), 2 (l % 4) + 1)."""
    for lane in LANES:
        assert (LDMATRIX.address_matrix(lane), LDMATRIX.address_row(lane)) == (lane // 8, lane % 8)
        assert LDMATRIX.register(lane) == (lane // 4, 2 * (lane % 4))
        assert LDMATRIX.register(lane, trans=True) == (2 * (lane % 4), lane // 4)
    assert [LDMATRIX.address_lanes(n) for n in LDMATRIX.counts] == [8, 16, 32]
    assert LDMATRIX.row_bytes == LDMATRIX.matrix * LDMATRIX.element_bytes
    assert LDMATRIX.ptx(4, True) == "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"


def test_cp_async_sizes_and_cache_operators():
    assert [CP_ASYNC.cache_for(n) for n in (4, 8, 16)] == ["ca", "ca", "cg"]
    assert CP_ASYNC.allows("cg", 16) and not CP_ASYNC.allows("cg", 8)
    assert CP_ASYNC.allows("ca", 4) and not CP_ASYNC.allows("ca", 2)
    assert CP_ASYNC.wait(1) == "cp.async.wait_group 1" and CP_ASYNC.arch == 80
