"""lowering.indexing.separation: which block indices an index keeps apart, for every
grid size (the mixed-radix argument), and where it shows nothing."""

import kir_examples as ex
from lowering import kir
from lowering.indexing import separation

M, N = ex.scalar("M"), ex.scalar("N")
GX = ex.ceildiv(M.var, ex.const(256))
GY = ex.ceildiv(N.var, ex.const(128))


def grid_of(gx=GX, gy=GY, gz=ex.const(4)):
    kernel = kir.Kernel("k", [], [M, N], [], ex.launch([gx, gy, gz], [ex.const(256)]))
    return separation.Grid(kernel)


def span(index, lo, hi):
    linear = separation.linear_in_blocks(index)
    return separation.Span(linear.coeffs, lo, hi), linear.atoms


def tile_major(elements=128, threads=256, tile=None):
    """((bx + gx * by) * elements + e) * threads + t, with e and t in the rest."""
    tile = ex.add(ex.bid("x"), ex.mul(GX, ex.bid("y"))) if tile is None else tile
    e, t = kir.Var("e", ex.I32), ex.tid()
    return ex.add(ex.mul(ex.add(ex.mul(tile, ex.const(elements)), e), ex.const(threads)), t)


def test_a_tile_major_workspace_separates_its_tiles_for_every_grid():
    s, atoms = span(tile_major(), 0, 128 * 256 - 1)
    assert set(grid_of().separated(s, s, atoms)) == {"x", "y"}


def test_a_rest_reaching_past_the_smallest_coefficient_separates_nothing():
    s, atoms = span(tile_major(), 0, 128 * 256)           # one element too far
    assert grid_of().separated(s, s, atoms) == ()
    s, atoms = span(tile_major(), -1, 100)                # below zero
    assert grid_of().separated(s, s, atoms) == ()


def test_a_coefficient_smaller_than_the_tiles_below_it_separates_nothing():
    # by's coefficient M / 256 may be 0 (M < 256) or short of ceildiv(M, 256)
    tile = ex.add(ex.bid("x"), ex.mul(ex.binop("div", M.var, ex.const(256)), ex.bid("y")))
    s, atoms = span(tile_major(tile=tile), 0, 128 * 256 - 1)
    assert grid_of().separated(s, s, atoms) == ()


def test_a_coefficient_holding_a_thread_index_separates_nothing():
    tile = ex.add(ex.bid("x"), ex.mul(ex.tid("y"), ex.bid("y")))
    s, atoms = span(tile_major(tile=tile), 0, 128 * 256 - 1)
    assert grid_of().separated(s, s, atoms) == ()


def test_a_block_index_inside_a_division_is_not_linear():
    index = ex.binop("div", ex.add(ex.mul(ex.bid("x"), ex.const(128)), ex.tid()), N.var)
    assert separation.linear_in_blocks(index) is None


def test_two_indices_with_different_coefficients_separate_nothing():
    a, atoms = span(tile_major(), 0, 128 * 256 - 1)
    b, more = span(tile_major(elements=64), 0, 64 * 256 - 1)
    assert grid_of().separated(a, b, {**atoms, **more}) == ()


def test_a_block_index_inside_an_atom_is_allowed_only_for_the_axes_asked():
    """A clamp min(z L + i, E - 1) holds blockIdx.z: not linear in the blocks, unless the
    caller evaluates the turn's values itself (inside="z"); then x and y still separate
    tiles, the clamp an atom of the rest."""
    clamp = ex.binop("min", ex.add(ex.mul(ex.bid("z"), ex.const(4)), kir.Var("i", ex.I32)),
                     ex.const(31))
    tile = ex.add(ex.bid("x"), ex.mul(GX, ex.bid("y")))
    index = ex.add(ex.mul(tile, ex.const(32)), clamp)
    assert separation.linear_in_blocks(index) is None
    linear = separation.linear_in_blocks(index, inside="z")
    assert set(linear.coeffs) == {"x", "y"}
    assert any("blockIdx.z" in key for key in linear.atoms)
    # a block index of another axis inside an atom stays refused
    inside_x = ex.binop("min", ex.bid("x"), ex.const(3))
    assert separation.linear_in_blocks(inside_x, inside="z") is None
