"""The matmul heuristic: MatmulParams from the sizes, the layout and the device model.

`matmul_heuristic(m, n, k, layout, dtypes, device)` chooses the path (Hopper's wgmma,
TMA and a producer warp group, or mma.sync with cp.async), the CTA tile, the pipeline
depth, the split-K factor and mode (serial, parallel through arrival counters, atomic,
through a thread-block cluster, or two kernels), the epilogue's route and the tile order,
each choice with its reason in words (`reasons`, what `fuserir inspect` shows) and the
measurement behind it (docs/perf.md). It only returns parameters: schedule_matmul
(matmul.py) turns them into transforms, so a plan chosen here prints and parses back
as any user's schedule would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from .. import device as devices
from ..errors import ScheduleError
from ..instructions import (CLUSTER_MAX, CP_ASYNC, MMA_M16N8K16 as MMA, STMATRIX, WGMMA,
                            tma_stride_ok)
from ..numerics import ceil_div
from .matmul_params import HOPPER_K_TILE, MatmulParams

if TYPE_CHECKING:
    from ..dtypes import DataType

TWO_KERNEL_SPLITS = 8          # the heuristic's most serial splits
# Unsplit tiles: as many stages as fit, at most this (128x256: 4; 128x128: 6, where 4 left
# time on the table: H100, TN f16, us: 1024x2048x4096 36.3 -> 32.3, 1024x1536x4096 33.9 ->
# 30.4, 2048x2048x4096 66.6 -> 64.3; docs/perf.md)
HOPPER_STAGES = 6
COPIED_STAGES = 4     # ... where the producer copies an operand element-wise (as measured)
# Tiles of 128x256 where they give at least this share of the SMs one (H100, TN,
# 2048x2048x4096: 128 tiles of 128x256 57.4 us, 256 of 128x128 64.3-66.6; docs/perf.md)
WIDE_FILL = 7 / 8
# ... but tiles of 192x192 (three consumer warp groups of 64x192, the output staged) where
# their waves (tiles over the SMs, rounded up) times their work come to at most this share
# of 128x256's: 12.5% more work a tile, fewer tiles, so fewer waves where 128x256 leaves a
# partial last one (H100, TN f16, us: 3072^3, 3 waves of 128x256 113.4, 2 of 192x192 86.7
# (98.7 from the registers); 6144^3, 9 waves against 8, 627.6 / 621.9; 4096^3, 4 waves
# each, 196.3 / 212.9; docs/perf.md)
SQUARE_TILE, SQUARE_GAIN = (192, 192), 0.8
# The staged 16-bit output of unsplit, non-persistent 128x256 tiles is stored by TMA
# (tma_store) where its rows are a multiple of 16 bytes (H100, TN f16, 4096^3: 196.3 ->
# 191.4 us; docs/perf.md)
TMA_STORE_ROW_BYTES = 16
# Where 128x128 tiles would fill at most half the SMs (a serial split-K before): unsplit
# tiles of 64 rows in one consumer warp group, 8 stages, 128 wide where those give at
# least half the SMs one, else 64 (H100, TN f16, us, serial split -> 64-row tiles:
# 1024x1024x4096 29.0 -> 23.7, 768x1024x4096 26.9 -> 23.3, 1024x1024x2048 21.5 -> 15.8,
# 512x1024x4096 30.7 -> 18.8 on 64x64 (22.4 on 64x128), 1024x1024x8192 42.1 -> 41.4),
# where K is at most HALF_ROW_MAX_K: beyond, the serial split of 128x128 tiles again
# (1024x1024x8192 39.4 against 38.9, 1024x1024x16384 62.0 against 70.2, 1024x1024x50304
# 155.8 against 200.9)
HALF_ROW_STAGES, HALF_ROW_MAX_K = 8, 8192
PARALLEL_STAGES = 6   # the parallel split-K's streaming: more bytes in flight per SM
# ... and its fewest K tiles per split: 4 for 128-row tiles (128x128x16384 on the H100:
# 16 splits of 16 K tiles 20.1 us, 64 of 4 18.6 us; docs/perf.md), 16 for 64-row ones
PARALLEL_K_TILES = 4
NARROW_K_TILES = 16
NARROW_ROWS = 64      # M at most this: CTA tiles of 64 rows (a decode step's M of 1-64)
NARROW_STAGES = 8     # ... 64x64, 8 stages (docs/perf.md: H100 16x4096x4096 41.8 -> 25.5 us)
# The parallel split-K's tiles, most preferred first: partial sums of at most 48 KB a CTA
# (128x128 tiles' 64 KB cost more to sum than their fewer operand bytes saved: docs/perf.md)
PARALLEL_TILES = ((128, 64), (64, 128), (64, 192))
# ... and one more where N fills its 192 columns (at most a sixth of them past N) and it
# streams fewer bytes: 128x192, whose accumulator fits (and stays live through the sum)
# only with the producer's registers given to the consumers (H100 136x184x175704: 76.6 ->
# 69.5 us against 64x192; at 128x128x262144, a third of its columns absent, 70.6 against
# 128x64's 64.2: docs/perf.md)
FILLED_PARALLEL_TILE, FILLED_PRODUCER_REGISTERS = (128, 192), 40
# ... in 4 stages, not the 5 that fit (H100, 136x184x175704: 66.1-67.9 us against
# 67.6-68.9 in TT, TN and NT; docs/perf.md)
FILLED_STAGES = 4
# The output from the registers (a pair of elements a store) where K is at most this, else
# staged through shared memory (H100, TN, 128x128 tiles, us staged / registers, when the
# staged tile was written element by element: 1024x2048x4096 36.9 / 35.5; docs/perf.md);
# 128x256 tiles are staged at every K since the staged tile is written by stmatrix
# (H100, TN, us staged / registers: 4096^3 195.0 / 209.4, 4096x14336x4096 683.1 / 720.6,
# 8192x3072x768 persistent 86.6 / 98.3; docs/perf.md)
REGISTER_OUTPUT_MAX_K = 4096
# A persistent kernel (one CTA per SM walking the tiles) where K is at most this and the
# 128x256 tiles make at least this many waves (H100, TN, us: 8192x3072x768 106.3 -> 98.2,
# 8192x2048x2048 130.2 -> 122.5; with longer K it lost, 4096^3 213.2 -> 226.1,
# 4096x14336x4096 744.1 -> 886.6: docs/perf.md)
PERSISTENT_MAX_K, PERSISTENT_MIN_WAVES = 2048, 2
# M or N at most this: tiles of that side as narrow as the instruction allows (its N: a
# multiple of 8, or 8, 16 or 32 where the operand is stored with that side contiguous, A
# [K, M] or B [K, N]: the 32B and 64B swizzle modes; NT 16x4096x4096 25.7 -> 23.5 us,
# NT 16x16x16384 13.9 -> 11.1), the other side
# along the instruction's M (swap_mn where the small side is M). H100, TN, us: 16x16x16384
# 64x64 tiles 14.4, 64x16 10.6 (16 parallel splits); 16x4096x4096 64x64 24.0, 64 of N x 16
# of M 21.2; 16x4096x14336 64x64 65.6, swapped 55.5 (2 serial splits); docs/perf.md
FITTED_MAX = 32
# ... the decode step's swapped tiles: K tile 128 (two boxes a row), 6 stages (21.2 us at
# 16x4096x4096 against 22.5 with K tile 64 in 8), and 2 serial splits where they still fit
# two CTAs per SM and K is at least this
FITTED_K_TILE, FITTED_STAGES, FITTED_SPLIT_MIN_K = 128, 6, 8192
# An output of at most this many 64-row tiles (fitted to a small side) takes them, not
# 128-row ones, wherever K is split across a grid. H100, f16, us: 128x64x65536 128x64
# tiles in 132 parallel splits 23.7, 64x64 in 66 21.6; 128x128x65536 26.4 -> 25.3;
# 128x128x262144 64.8 -> 63.9; but 256x256x65536, 16 tiles, 42.5 -> 47.0 (docs/perf.md).
# Where K is short their deterministic split-K sums through a thread-block cluster's
# shared memory (splitk_mode "cluster": one cluster of at most CLUSTER_MAX CTAs a tile);
# with more tiles, more 16-CTA clusters than the GPCs hold at once run in waves (every
# layout, arrival counters -> cluster: 16x16x16384 10.4-10.9 -> 9.4-9.8, 64x256x16384
# 16.2-16.6 -> 13.9-15.0; 256x256x16384, 8 tiles of 128x64, 20.4-20.8 -> 29.0-30.0)
FEW_TILES = 4
# ... a cluster where K has at least this many K tiles (H100, TN f16, us: 64x64x1024 4
# serial splits 13.1, 16 in a cluster 9.3; 128x128x2048 8 serial 36.6, cluster 9.7), the
# tiles halved in width down to this while they stay at most FEW_TILES (64x64x16384: 64x64
# tiles 13.2, 64x32 10.8, 64x16 10.4; 32x32x16384: 64x32 10.8, 64x16 9.6), always
# CLUSTER_MAX splits where K has the K tiles (64x64x4096: 4 splits 12.3, 16 9.8;
# 128x128x4096: 16 parallel splits on 128x64 tiles 14.3, 16 in clusters of 64x64 10.1)
CLUSTER_MIN_K_TILES, CLUSTER_NARROWEST = 16, 16
# Unsplit, non-persistent tiles walked this many rows of tiles down a column at a time
# (tile_group) where the rows of tiles are a multiple of it, more than one group (H100,
# TN, us: 16384x4096x4096 920.7 -> 808.1, 8192^3 1599.8 -> 1521.0 (g16 1508.0), 4096^3
# 210.5 -> 207.9; docs/perf.md)
TILE_GROUP = 8


def _waves_work(m, n, tile, sms):
    """The waves of `tile`s an m x n output takes on `sms` SMs (rounded up) times a tile's
    elements: the time of an unsplit plan where the per-SM rate is the same."""
    return ceil_div(ceil_div(m, tile[0]) * ceil_div(n, tile[1]), sms) * tile[0] * tile[1]


def _persistent_shape(m, n, k, sms):
    """A short K loop and 128x256 tiles for PERSISTENT_MIN_WAVES waves or more: where a
    persistent kernel measured faster."""
    return k <= PERSISTENT_MAX_K and \
        ceil_div(m, 128) * ceil_div(n, 256) >= PERSISTENT_MIN_WAVES * sms


def _fills(size, tile):
    """Does `size` fill its tiles of `tile` (at most a sixth of the last one past it)?"""
    return 6 * (ceil_div(size, tile) * tile - size) <= tile


def _streamed_bytes(m, n, k, tile):
    """The operand bytes a tiling streams into shared memory, per element size: each
    column of tiles reads A's K x M, each row of tiles B's K x N (TMA reads no element
    past the arrays' ends)."""
    tm, tn = tile
    return k * (ceil_div(n, tn) * m + ceil_div(m, tm) * n)


def _rows_of(m, n, k, layout, elements):
    """Are both operands' rows (stored row-major per `layout`: their contiguous extents)
    a multiple of `elements`?"""
    a_row = k if layout[0] == "T" else m
    b_row = n if layout[1] == "T" else k
    return a_row % elements == 0 and b_row % elements == 0


def _along_k(m, n, layout):
    """(A, B): is the operand's stored row (its last axis) one element long while K is
    another axis (M = 1 with A stored K x M, N = 1 with B stored K x N)? Then K is its
    contiguous axis, and the Hopper path stages it along K (staged_along_k)."""
    return (layout[0] == "N" and m == 1, layout[1] == "T" and n == 1)


def _tma_readable(m, n, k, layout, itemsize=2):
    """(A, B): can TMA read each operand (row-major per `layout`, of `itemsize`-byte
    elements)? Its row stride must be one a tensor map may have; an operand staged along
    K steps no stride but K's (1): its other axis has one element."""
    a_row = k if layout[0] == "T" else m
    b_row = n if layout[1] == "T" else k
    along = _along_k(m, n, layout)
    return (along[0] or tma_stride_ok(a_row * itemsize),
            along[1] or tma_stride_ok(b_row * itemsize))


def _fitted_side(m, n, layout):
    """"M", "N" or None: the side of at most FITTED_MAX that the tiles fit (the smaller
    where both are, the one whose operand is stored with K contiguous on a tie, then N)."""
    sides = [(n, _small_side_contiguous("N", layout), "N")] if n <= FITTED_MAX else []
    sides += [(m, _small_side_contiguous("M", layout), "M")] if m <= FITTED_MAX else []
    return min(sides, key=lambda side: (side[0], side[1], side[2] == "M"))[2] \
        if sides else None


def _small_side_contiguous(side, layout):
    """Is the operand of `side` ("M": A, "N": B) stored with that side contiguous (A
    stored K x M, B stored K x N), not K?"""
    return layout[0] == "N" if side == "M" else layout[1] == "T"


def _as_staged(layout, along):
    """`layout` with an operand staged along K (_along_k: its stored rows one element
    long) as the layout that stores it with K contiguous, which is how its tiles are
    boxed: A stored K x 1 as "T", B stored K x 1 as "N"."""
    return ("T" if along[0] else layout[0]) + ("N" if along[1] else layout[1])


def _fitted_n(size, contiguous):
    """The tile width along a fitted side of `size` (the instruction's N): a multiple of 8
    where its operand is stored with K contiguous (TMA boxes of that many rows of 128
    bytes), else 8, 16 or 32 elements: the box rows are then that side, which a wgmma
    descriptor reads as rows of 16 bytes unswizzled or of 32 or 64 bytes swizzled (the
    32B and 64B modes)."""
    if not contiguous:
        return _instruction_n(size)
    return next(w for w in (8, 16, 32, 64) if size <= w)


def _narrow_tiling(m, n, fitted, staged):
    """(CTA tile width, swap_mn, tiles) of 64-row tiles, fitted to a small side."""
    swap = fitted == "M"
    tn = 64 if fitted is None else \
        _fitted_n(m if swap else n, _small_side_contiguous(fitted, staged))
    rows, columns = (n, m) if swap else (m, n)
    return tn, swap, ceil_div(rows, 64) * ceil_div(columns, tn)


def _cluster_tiling(m, n, k, fitted, staged, device):
    """(CTA tile width, swap_mn, tiles) of a split-K through thread-block clusters, or
    None. Where the device model allows it (cluster_split, deterministic), K has at least
    CLUSTER_MIN_K_TILES K tiles and at most CLUSTER_MAX splits' worth of NARROW_K_TILES
    (a longer K streams faster through the arrival counters' more splits), and 64-row
    tiles (fitted to a small side) number at most FEW_TILES, their CTAs all resident at
    once (at most one an SM): those tiles, halved in width down to CLUSTER_NARROWEST
    while they stay that few (more CTAs, each streaming fewer bytes)."""
    if not (device.cluster_split and device.deterministic):
        return None
    k_tiles = ceil_div(k, HOPPER_K_TILE)
    if k_tiles < CLUSTER_MIN_K_TILES or k_tiles // NARROW_K_TILES > CLUSTER_MAX:
        return None
    splits = min(CLUSTER_MAX, k_tiles)

    def few(tiles):
        return tiles <= FEW_TILES and tiles * splits <= device.sms
    tn, swap, tiles = _narrow_tiling(m, n, fitted, staged)
    rows, columns = (n, m) if swap else (m, n)
    while tn // 2 >= CLUSTER_NARROWEST and tn // 2 % 8 == 0:
        more = ceil_div(rows, 64) * ceil_div(columns, tn // 2)
        if not few(more) or more == tiles:
            break
        tn, tiles = tn // 2, more
    return (tn, swap, tiles) if few(tiles) else None


def _instruction_n(size):
    """The narrowest instruction N (a multiple of 8) that covers `size`."""
    return max(8, ceil_div(size, 8) * 8)


def _hopper_params(m, n, k, layout, device, why, out_itemsize=2):
    """The Hopper path's MatmulParams (wgmma, a producer warp group loading the tiles by
    TMA, or element-wise where the rows allow nothing wider), or None where the mma.sync
    path serves better:

    * TMA where it can read the operands (rows a multiple of 16 bytes, `device.tma`);
      where it cannot but the rows are a multiple of 4 bytes, the mma.sync path, whose
      cp.asyncs of 4 or 8 bytes stay pipelined (5x the producer's element copies at
      4096x4096x4100 on the H200); rows of an odd number of elements take the Hopper path
      with the producer warp group copying them (1.16x the mma.sync path's element
      copies at 4096x4096x4097: docs/perf.md), an operand TMA can read still by TMA;
      an operand whose stored rows are one element long (a decode matmul's M = 1 with
      A stored K x M) is contiguous along K: staged along K, read by TMA;
    * CTA tile 128x256 (two consumer warp groups of 64x256) when those tiles give at
      least WIDE_FILL of the SMs one (192x192 instead, three consumer warp groups of
      64x192, where its waves come to at most SQUARE_GAIN of 128x256's work and the
      plan would not be persistent: a partial last wave of 128x256 tiles saved, 3072^3
      113.4 -> 86.7 us on the H100), else 128x128 (two of 64x128); K tile 64; as many
      stages as fit, at most HOPPER_STAGES (4 of 128x256, 6 of 128x128; COPIED_STAGES
      where the producer copies element-wise); the output staged through shared memory
      over the operand stages on 128x256 tiles where it is 16-bit (its tile written by
      stmatrix; by TMA stores where the tiles are 128x256 and unsplit, the kernel not
      persistent, the output's rows a multiple of 16 bytes) and where K is over
      REGISTER_OUTPUT_MAX_K, else stored from the registers; persistent (one CTA per SM
      walking the tiles) where the 128x256 tiles
      make PERSISTENT_MIN_WAVES waves or more and K is at most PERSISTENT_MAX_K (a short K
      loop, whose pipeline fill and epilogue the walk overlaps with the next tile's loads,
      as measured), a 16-bit output staged through a tile of its own beside the stages;
      else, unsplit, the tiles
      walked TILE_GROUP rows of tiles down a column at a time where the rows of tiles are
      a multiple of it (L2 shares the operand panels: 12% at 16384x4096x4096 on the
      H100); for M of at most 64
      (a decode step) 64x64 tiles in one consumer warp group, 8 stages (the 128-row tile
      spent half its tensor-core time on absent rows: 41.8 -> 25.5 us at 16x4096x4096 on
      the H100, docs/perf.md);
    * for M or N of at most FITTED_MAX, tiles that narrow along it (the instruction's
      N: a multiple of 8 where its operand is stored with K contiguous or staged along
      K, else 8, 16 or 32, whose rows of 16, 32 or 64 bytes the 32B and 64B swizzle
      modes read), N along the rows and
      swap_mn where the small side is M; a decode step so swapped takes K tiles of 128
      in 6 stages, split in two serially where K is at least 8192 and two CTAs still fit
      an SM each;
    * a split-K through thread-block clusters (_cluster_tiling: a tile's CTAs one
      cluster summing the partials over each other's shared memory) where 64-row tiles
      number at most FEW_TILES and K is neither short (CLUSTER_MIN_K_TILES) nor
      long (over CLUSTER_MAX splits of NARROW_K_TILES): the tiles halved in width while
      they stay that few, as many splits as K tiles, at most CLUSTER_MAX, on a device
      model with cluster_split and deterministic (H100: 64x64x16384 13.2 -> 10.4 us,
      128x128x2048 36.6 -> 9.7, docs/perf.md);
    * where 128x128 tiles would fill at most half the SMs and K needs no more than 8
      splits to fill them, unsplit tiles of 64 rows (one consumer warp group), 128 wide
      where those still give half the SMs one, else 64, in HALF_ROW_STAGES stages, the
      output from the registers (both operands read by TMA; H100: 1024x1024x4096 29.0 ->
      23.7 us against two serial splits of 128x128 tiles), where K is at most
      HALF_ROW_MAX_K (past it the serial split below: 1024x1024x50304 200.9 -> 155.8);
    * else (a tile fitted to a small side, or the producer's copies) serial split-K where
      the tiles fill at most half the SMs: as many splits as fill them, at most 8;
    * where that would chain more than 8 serial splits (a skinny output and a long K:
      memory bound), the parallel split-K (arrival counters, the sum spread over the
      CTAs, deterministic): of the tiles 128x64, 64x128 and 64x192 the one that streams
      the fewest operand bytes into shared memory, the first on a tie (64x64 for M of
      at most 64; partial sums of at most 48 KB per CTA: those of 128x128 tiles cost
      more to sum than their fewer operand bytes save; the CTAs of neighbouring tiles
      share the operand bytes in L2; H100: 128x64 at 128x128x262144 measured fastest,
      docs/perf.md); 128x192 instead where N fills its columns (at most a sixth of them
      past N) and it streams fewer bytes still, the producer warp group keeping 40
      registers a thread so that the consumers' accumulators fit (H100: 136x184x175704
      9% faster than on 64x192 tiles) in 4 stages (1-3% faster than 5 there); not the
      instruction's M along N (swap_mn: one 192x136 tile at 136x184, each operand byte
      streamed once, measured no faster: docs/perf.md); as many splits as give every SM
      one CTA (the whole grid resident at once, as the protocol needs) keeping at least
      4 K tiles per split (16 for 64-row tiles), each split every splitk-th K tile
      (interleaved), 6 stages (as many as fit) but for 128x192, the output stored from
      the registers (one CTA per tile writes it); on a device model with
      deterministic=False the atomic split-K instead (the partials added by
      red.global.add: the last bits may differ run to run)."""
    sms, limit = device.sms, device.shared_limit
    if not device.tma:
        why("the operand arrays' strides are not what TMA reads (a contiguous last axis, "
            "the others multiples of 16 bytes): the mma.sync path")
        return None
    readable = _tma_readable(m, n, k, layout)
    tma = all(readable)
    along = _along_k(m, n, layout)
    if any(along):
        which = along.index(True)
        why(f"{m}x{n}x{k} {layout}: {'AB'[which]}'s stored rows are one element long "
            f"({'MN'[which]} = 1), so it is contiguous along K: staged along K, its K runs "
            "read by TMA")
    if not tma and _rows_of(m, n, k, layout, 2):
        why(f"{m}x{n}x{k} {layout}: an operand's rows are not a multiple of 16 bytes, which "
            "TMA needs, but of 4: the mma.sync path's narrower cp.asyncs")
        return None
    if not tma:
        rows = (k if layout[0] == "T" else m, n if layout[1] == "T" else k)
        odd = " and ".join(x for x, row in zip("AB", rows) if row % 2)
        copied = " and ".join(x for x, ok in zip("AB", readable) if not ok)
        why(f"{m}x{n}x{k} {layout}: {odd}'s rows are of an odd number of elements: the "
            f"producer warp group copies the tiles of {copied} element-wise, into the same "
            "swizzled layout" + (f", and loads {'AB'[readable.index(True)]}'s by TMA"
                                 if any(readable) else ""))
    tk = HOPPER_K_TILE
    staged = _as_staged(layout, along)
    fitted = _fitted_side(m, n, staged) if tma else None
    cluster = _cluster_tiling(m, n, k, fitted, staged, device)
    # few 64-row tiles and a K long enough for a grid split-K (the branch below)
    few = _narrow_tiling(m, n, fitted, staged)[2] <= FEW_TILES and \
        ceil_div(k, tk) // PARALLEL_K_TILES > TWO_KERNEL_SPLITS
    narrow = m <= NARROW_ROWS or cluster is not None or few
    swap = fitted == "M" and narrow
    wide = not narrow and ceil_div(m, 128) * ceil_div(n, 256) >= WIDE_FILL * sms
    stmatrix = out_itemsize == STMATRIX.element_bytes   # a 16-bit tile: staged by stmatrix
    square = wide and tma and stmatrix and not _persistent_shape(m, n, k, sms) and \
        _waves_work(m, n, SQUARE_TILE, sms) <= SQUARE_GAIN * _waves_work(m, n, (128, 256), sms)
    tm, tn = (64, 64) if narrow else SQUARE_TILE if square else (128, 256) if wide else \
        (128, 128)
    if narrow:                             # the tile's columns fitted to the small side
        tn = (cluster or _narrow_tiling(m, n, fitted, staged))[0]
    rows, columns = (n, m) if swap else (m, n)     # along the tile's rows, its columns
    tiles = ceil_div(rows, tm) * ceil_div(columns, tn)
    k_tiles = ceil_div(k, tk)
    splitk, mode, most = 1, "serial", NARROW_STAGES if narrow else \
        HOPPER_STAGES if tma else COPIED_STAGES
    producer, half_rows = None, False
    # split K where the tiles fill at most half the SMs; narrow tiles, a quarter (64 of
    # them streamed 16x4096x4096 unsplit as fast as split in two: docs/perf.md)
    fill = 4 if narrow else 2
    if cluster is not None:
        splitk, mode = min(CLUSTER_MAX, k_tiles), "cluster"
    elif fill * tiles <= sms:
        splitk = max(1, min(sms // tiles, k_tiles // 4))
        if splitk > TWO_KERNEL_SPLITS:
            if not narrow and fitted == "N":   # the tile's columns fitted to N
                tn = _fitted_n(n, _small_side_contiguous("N", staged))
            elif not narrow:   # the tiling that streams the fewest operand bytes
                tm, tn = min(PARALLEL_TILES, key=lambda t: _streamed_bytes(m, n, k, t))
                if _fills(n, FILLED_PARALLEL_TILE[1]) and _streamed_bytes(
                        m, n, k, FILLED_PARALLEL_TILE) < _streamed_bytes(m, n, k, (tm, tn)):
                    (tm, tn), producer = FILLED_PARALLEL_TILE, FILLED_PRODUCER_REGISTERS
            tiles = ceil_div(rows, tm) * ceil_div(columns, tn)
            fewest = NARROW_K_TILES if narrow else PARALLEL_K_TILES
            splitk = max(1, min(sms // tiles, k_tiles // fewest))
            mode = "parallel" if device.deterministic else "atomic"
            most = NARROW_STAGES if narrow else \
                FILLED_STAGES if producer is not None else PARALLEL_STAGES
        elif not narrow and fitted is None and tma and k <= HALF_ROW_MAX_K:
            # 64-row tiles, unsplit, not a serial split
            tm, splitk, most, half_rows = 64, 1, HALF_ROW_STAGES, True
            if 2 * ceil_div(rows, tm) * ceil_div(columns, tn) < sms:
                tn = 64
            tiles = ceil_div(rows, tm) * ceil_div(columns, tn)
    elif swap:             # a decode step: longer K tiles; split in two where K is long
        tk, most = FITTED_K_TILE, FITTED_STAGES
        k_tiles = ceil_div(k, tk)
        splitk = 2 if 2 * tiles <= sms and k >= FITTED_SPLIT_MIN_K else 1
    groups = tm // WGMMA.m
    stage_bytes = (tm + tn) * tk * 2
    # narrow tiles past one per SM: as many stages as let two CTAs share an SM (one wave)
    share = 2 if narrow and tiles * splitk > sms else 1

    def fitting(partials):
        return next((s for s in range(most, 1, -1)
                     if share * (s * stage_bytes + partials) <= limit), None)
    persistent = wide and not square and splitk == 1 and _persistent_shape(m, n, k, sms)
    # the cluster split-K's partials in shared memory: an f32 an accumulator element (the
    # consumers' registers); the arrival counters where they leave no stages. A persistent
    # kernel's staged output: a tile of its own (the next tile's stages load meanwhile)
    partials = tm * tn * 4 if mode == "cluster" else 0
    own_output = tm * tn * out_itemsize if persistent and stmatrix else 0
    stages = fitting(partials + own_output)
    if stages is None and partials:
        mode, partials = "parallel", 0
        stages = fitting(0)
    if stages is None:
        why(f"one Hopper pipeline stage needs {stage_bytes} bytes of shared memory, over "
            f"the limit of {limit}: the mma.sync path")
        return None
    why(f"{m}x{n}x{k} on {device.name} ({sms} SMs): the Hopper path (wgmma, "
        f"{'TMA, ' if any(readable) else ''}a producer warp group), CTA tile {tm}x{tn}x{tk} "
        f"in {groups} consumer warp group{'s' if groups > 1 else ''} of 64x{tn}, "
        + (f"{tiles} tiles of {tm}x{tn} in {ceil_div(tiles, sms)} waves, against "
           f"{ceil_div(ceil_div(m, 128) * ceil_div(n, 256), sms)} of 128x256 tiles: at most "
           f"{SQUARE_GAIN:g} of their waves' work" if square else
           f"tiles of 128x256 give at least {WIDE_FILL:g} of the SMs one" if wide else
           f"{tiles} tiles of {tm}x{tn} (at most {FEW_TILES} tiles of 64 rows, as "
           "narrow as keeps them that few, and K of fewer than "
           f"{(CLUSTER_MAX + 1) * NARROW_K_TILES} K tiles: a split-K through thread-block "
           "clusters)" if cluster is not None else
           f"{tiles} tiles of {tm}x{tn} (M of at most {NARROW_ROWS}: one warp group's rows, "
           "half the tensor-core work of 128-row tiles on rows that are not there)"
           if m <= NARROW_ROWS else
           f"{tiles} tiles of {tm}x{tn} (at most {FEW_TILES} tiles of 64 rows and K split "
           "across the grid: each CTA's partial sums half a 128-row tile's)" if narrow else
           f"{tiles} tiles of {tm}x{tn} (tiles of 128x128 would fill at most half the SMs: "
           f"64 rows, {tn} wide where those still give half the SMs one, unsplit)"
           if half_rows else
           f"{tiles} tiles of {tm}x{tn} (tiles of 128x256 would leave SMs idle)"))
    if fitted is not None and tn < 64:
        stored = (f"stored with {fitted} contiguous: boxes of rows of {tn * 2} bytes"
                  + (f", swizzled by them ({tn * 2}B mode)" if tn >= 16 else ", unswizzled")
                  if _small_side_contiguous(fitted, staged) else "stored with K contiguous")
        why(f"{fitted} = {m if fitted == 'M' else n}, its operand {stored}: "
            f"tiles {tn} wide along {fitted} (the instruction's N)"
            + (", N along the tiles' rows and the instruction's M (swap_mn)" if swap else ""))
    why(f"split-K {splitk} ({mode}): " + (
        f"the tiles fill more than {'a quarter' if narrow else 'half'} of the SMs"
        if splitk == 1 else f"{tiles} tiles x {splitk} splits, {k_tiles // splitk} K "
                            f"tiles of {tk} per split" + (
            f"; over {TWO_KERNEL_SPLITS} serial splits, so every CTA of a tile sums a slice "
            "of it at once (arrival counters), each split every splitk-th K tile"
            if mode == "parallel" else
            f"; over {TWO_KERNEL_SPLITS} serial splits, and the device model allows results "
            "whose last bits differ run to run (deterministic=False): the CTAs of a tile "
            "add their partials atomically, each split every splitk-th K tile"
            if mode == "atomic" else
            f"; as many splits as K tiles, at most {CLUSTER_MAX}: the CTAs of a tile are "
            "one thread-block cluster, each summing a run of the tile's elements over its "
            "peers' shared memory (cluster_split), each split every splitk-th K tile"
            if mode == "cluster" else "")))
    if producer is not None:
        why(f"tiles of {tm}x{tn}, whose columns N fills, stream the fewest operand bytes; "
            f"the producer warp group keeps {producer} registers a thread, the rest go to "
            "the consumers (setmaxnreg), so that their accumulators fit")
    # (narrow tiles: a few rows of output, stored from the registers as measured; a grid
    # split-K's tile, written by one CTA: at 128x128x262144 on the H100 the plan took
    # 70.4 us staged through shared memory, 68.3 us from the registers, docs/perf.md)
    grid_split = mode in ("parallel", "atomic", "cluster")
    smem_epilogue = persistent and stmatrix or tm in (128, SQUARE_TILE[0]) and \
        not grid_split and (wide and stmatrix or k > REGISTER_OUTPUT_MAX_K) and \
        tm * tn * out_itemsize <= stages * stage_bytes
    tma_store = smem_epilogue and wide and not square and not persistent and stmatrix and \
        n * out_itemsize % TMA_STORE_ROW_BYTES == 0
    why(f"{stages} stages of {stage_bytes} bytes"
        + (f" and {partials} bytes of partials" if partials else "")
        + (f" and a {own_output}-byte output tile" if own_output else "")
        + f" within {limit} bytes of shared memory; "
        + ("the output staged through shared memory of its own (persistent)" if own_output
           else "the output staged through shared memory over the operand stages ("
           + (f"16-bit tiles of {tm}x{tn}" if wide and stmatrix
              else f"K over {REGISTER_OUTPUT_MAX_K}")
           + ": faster than from the registers there, docs/perf.md)"
           + (f", stored by TMA (its rows of {n * out_itemsize} bytes a multiple of "
              f"{TMA_STORE_ROW_BYTES}: faster than the threads' copy, docs/perf.md)"
              if tma_store else "")
           if smem_epilogue else "the output stored from the accumulator registers"))
    if persistent:
        why(f"persistent: {sms} CTAs walk the {tiles} tiles (K of at most "
            f"{PERSISTENT_MAX_K}, {PERSISTENT_MIN_WAVES} waves or more: the producer loads "
            "the next tile while the consumers store this one)")
    tile_rows = ceil_div(rows, tm)
    group = TILE_GROUP if not persistent and splitk == 1 and tile_rows > TILE_GROUP and \
        tile_rows % TILE_GROUP == 0 else 1
    if group > 1:
        why(f"the tiles walked {group} rows of tiles down a column at a time (tile_group: "
            f"{tile_rows} rows of tiles), so the CTAs running at once share operand panels "
            "in L2")
    return MatmulParams(cta_tile=(tm, tn, tk), warp_tile=(64, tn, tk),
                        instruction_tile=WGMMA.shape(tn), stages=stages,
                        splitk_factor=splitk, splitk_mode=mode,
                        splitk_interleaved=grid_split,
                        use_smem_epilogue=smem_epilogue, tma_store=tma_store,
                        persistent=persistent,
                        tile_group=group,
                        promote_prologue_smem_reuse=smem_epilogue and not persistent,
                        async_gmem_load_operands=tma if tma or not any(readable)
                        else readable,
                        staged_along_k=along, producer_registers=producer,
                        swap_mn=swap)



def _fitted_params(m, n, k, why, out_itemsize):
    """The mma.sync path on the smallest tiles that cover the sizes (16 to 128 a side,
    warps of at most 64x64), K tile 32 (16 for K <= 16), two stages, no split-K: for the
    interpreter (fuserir.device.INTERPRETER), whose cost grows with every thread of a
    tile, used or not."""
    def side(size):
        return next((t for t in (16, 32, 64) if size <= t), 128)
    tm, tn, tk = side(m), side(n), 16 if k <= 16 else 32
    smem_epilogue = tm * tn * out_itemsize <= 2 * (tm + tn) * tk * 2
    why(f"{m}x{n}x{k} in the interpreter: CTA tile {tm}x{tn}x{tk}, the smallest that "
        f"covers the sizes; 2 stages; no split-K")
    return MatmulParams(cta_tile=(tm, tn, tk), warp_tile=(min(tm, 64), min(tn, 64), tk),
                        stages=2, splitk_factor=1, splitk_mode="serial",
                        use_smem_epilogue=smem_epilogue,
                        promote_prologue_smem_reuse=smem_epilogue)


def _k_tiles_per_split(k, tk, splitk):
    return ceil_div(ceil_div(k, tk), splitk)


def splitk_for(m, n, k, cta_tile, sms=devices.DEFAULT.sms):
    """The split-K factor for these sizes and tiles. Where the output tiles do not fill
    the SMs, as many splits as make two CTAs per SM (two 4-warp CTAs share an SM: twice
    the warps to hide latency), keeping at least 8 K tiles per split; the benchmark
    matrix's best configurations at 1024x2048x4096 and 1024x1024x4096 are exactly these
    (docs/perf.md). Where that means more splits than a serial turnstile should chain (a
    two-kernel split-K) and a split would keep fewer than 64 K tiles, one CTA per SM
    instead: the partial sums to write and add grow with the splits (128x128x262144: 132
    splits 60.9 us, 264 splits 71.8 us on the H200; 136x184x175704: 33 splits 98.8 us,
    66 splits 83.1 us)."""
    tm, tn, tk = cta_tile
    tiles = ceil_div(m, tm) * ceil_div(n, tn)
    if tiles >= sms:
        return 1
    k_tiles = ceil_div(k, tk)
    splits = min(2 * sms // tiles, k_tiles // 8)
    if splits > TWO_KERNEL_SPLITS and k_tiles // splits < 64:
        splits = min(sms // tiles, k_tiles // 8)
    return max(1, splits)


def matmul_heuristic(m: int, n: int, k: int, layout: str = "TT",
                     dtypes: Sequence[str | DataType] = ("f16", "f16", "f16"),
                     device: devices.Device | None = None,
                     reasons: list[str] | None = None, batch: int = 1) -> MatmulParams:
    """MatmulParams for an M x N x K matmul (any layout; dtypes: the operands' and
    optionally the output's), or `batch` of them (a batched matmul: the tiles of all the
    batch's matrices one grid, planned as one matmul of batch x M rows, without split-K:
    on Hopper the Hopper path's plan where it neither splits K nor swaps M and N, its
    TMA maps of three dimensions; else the mma.sync path's). On Hopper (sm_90) the
    Hopper path's (_hopper_params: wgmma on tiles a producer warp group loads, by TMA or,
    for rows of an odd number of elements, by element copies; a parallel split-K for
    skinny outputs with a long K), unless TMA cannot read rows that cp.async can;
    otherwise, and below sm_90, the
    mma.sync path's:

    * CTA tile 256x128 (8 warps of 64x64) when that still gives every SM a tile, else
      128x128 (4 warps, two CTAs per SM); K tile 32, instruction tile 16x8x16;
    * split-K when the output tiles give fewer than two CTAs per SM and K is long: as
      many splits as make two, keeping at least 8 K tiles per split (one CTA per SM for
      a two-kernel split-K whose splits would get fewer than 64: splitk_for); serial up
      to 8 splits, two kernels beyond;
    * the most stages (up to 4, 6 for two kernels) whose operand buffers fit the
      device's shared memory for the CTAs that share an SM, and the output staged
      through shared memory that reuses the operand bytes.

    `device`: a fuserir.device.Device (the H200 when None; one with fit_tiles, as the
    interpreter's, gets the mma.sync path on the smallest tiles that cover the sizes,
    _fitted_params). `reasons`: a list to which
    each choice's reason is appended, in words (what `fuserir inspect` shows). A device
    with tma=False (a run whose operand arrays TMA cannot read) gets the mma.sync path;
    one with deterministic=False, the atomic split-K where the parallel one would serve.
    Raises
    ScheduleError below the instructions' arch (sm_80: mma.sync and cp.async)."""
    why = reasons.append if reasons is not None else (lambda line: None)
    device = devices.resolve(device)
    sms, limit, cc = device.sms, device.shared_limit, tuple(device.cc)
    need = max(MMA.arch, CP_ASYNC.arch)
    if cc < divmod(need, 10):
        raise ScheduleError(f"matmul_heuristic: compute capability {cc[0]}.{cc[1]} has no "
                            f"tensor-core {MMA.name} with {CP_ASYNC.name}; sm_{need} or "
                            "newer is needed")
    if layout not in ("TT", "TN", "NT", "NN"):
        raise ScheduleError(f"matmul_heuristic: unknown layout {layout!r}")
    names = [str(d) for d in dtypes]
    if len(names) not in (2, 3) or names[0] != names[1] or names[0] not in ("f16",
                                                                                 "bf16"):
        raise ScheduleError(f"matmul_heuristic: operands {' x '.join(names[:2])}: tensor "
                            "cores take two f16 or two bf16 operands")
    out_itemsize = {"f16": 2, "bf16": 2, "f32": 4}.get(names[2] if len(names) == 3
                                                       else "f16")
    if out_itemsize is None:
        raise ScheduleError(f"matmul_heuristic: output {names[2]}: tensor cores produce "
                            "f32, cast to f16, bf16 or f32")
    if device.fit_tiles:
        return _fitted_params(m, n, k, why, out_itemsize)
    if cc >= divmod(WGMMA.arch, 10):
        hopper = _hopper_params(batch * m, n, k, layout, device, why, out_itemsize)
        if batch > 1 and hopper is not None and (
                hopper.splitk_factor > 1 or hopper.swap_mn or hopper.staged_along_k != (
                    False, False)):
            hopper = None
            why(f"a batch of {batch}: the Hopper path's plan for its {batch * m} rows "
                "would split K, swap M and N or stage an operand along K, which a "
                "batch's tiles do not: the mma.sync path")
        elif batch > 1 and hopper is not None:
            why(f"a batch of {batch} matmuls: the tiles of all of them one grid, as "
                f"{batch * m} rows of tiles (a tile never spans two matrices)")
        if hopper is not None:
            return hopper
    if batch > 1:
        why(f"a batch of {batch} matmuls: the mma.sync path, the batch's tiles one grid, "
            "no split-K")
    tk = 32
    # 8 warps of 64x64 on a 256x128 tile where those tiles alone give every SM one (and 3
    # stages of them fit); else 4 warps on 128x128, two CTAs per SM (splitk_for).
    wide_tiles = batch * ceil_div(m, 256) * ceil_div(n, 128)
    wide = wide_tiles >= sms and 3 * (256 + 128) * tk * 2 <= limit
    tm, tn = (256, 128) if wide else (128, 128)
    splitk = splitk_for(m, n, k, (tm, tn, tk), sms) if batch == 1 else 1
    # Many splits make the serial turnstile a long chain of CTAs: sum them in a second
    # kernel instead, where every split's partials are written in parallel.
    mode = "two_kernel" if splitk > TWO_KERNEL_SPLITS else "serial"
    stage_bytes = (tm + tn) * tk * 2
    # The most stages (up to 4; up to 6 for a two-kernel split-K's long splits, 6 measured
    # better there) whose buffers fit the CTAs that share an SM, else one CTA.
    tiles = batch * ceil_div(m, tm) * ceil_div(n, tn)
    per_sm = 2 if tiles < sms < tiles * splitk else 1
    most = 6 if mode == "two_kernel" else 4
    stages = next((s for share in (per_sm, 1) for s in range(most, 1, -1)
                   if share * s * stage_bytes <= limit), None)
    if stages is None:
        raise ScheduleError(f"matmul_heuristic: one pipeline stage needs {stage_bytes} "
                            f"bytes of shared memory, over the limit of {limit}")
    # The output tile staged through shared memory, reusing the operand stages' bytes.
    smem_epilogue = tm * tn * out_itemsize <= stages * stage_bytes
    smem_epilogue = smem_epilogue and mode == "serial"
    why(f"{m}x{n}x{k} on {device.name} ({sms} SMs): CTA tile {tm}x{tn}x{tk}, "
        + (f"{wide_tiles} tiles of 256x128 fill the SMs" if wide else
           f"{tiles} tiles of 128x128 (256x128 tiles would leave SMs idle: 4 warps, two "
           "CTAs per SM)"))
    why(f"split-K {splitk} ({mode}): " + ("the tiles alone fill the SMs" if splitk == 1
        else f"{tiles} tiles x {splitk} splits, {ceil_div(k, tk) // splitk} K tiles of {tk} per "
        "split" + (f"; over {TWO_KERNEL_SPLITS} serial splits, so partials are summed by "
                   "a second kernel" if mode == "two_kernel" else "")))
    why(f"{stages} stages of {stage_bytes} bytes for {per_sm} CTA(s) per SM within "
        f"{limit} bytes of shared memory; shared-memory epilogue "
        + ("reusing the operand bytes" if smem_epilogue else "off"))
    return MatmulParams(cta_tile=(tm, tn, tk), warp_tile=(64, 64, tk), stages=stages,
                        splitk_factor=splitk, splitk_mode=mode,
                        use_smem_epilogue=smem_epilogue,
                        promote_prologue_smem_reuse=smem_epilogue)
