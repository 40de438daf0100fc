"""Static shared-memory bank-conflict report (lowering.verify.bank_conflicts).

Kernels are hand-built kernel IR. Every expected degree is derived by hand in a comment
and also recomputed here by `reference_degree`, a plain-Python count written from the
hardware model (32 banks of 4 bytes; 4-byte accesses: one phase of 32 lanes, 8-byte: two
of 16, 16-byte and ldmatrix rows: four of 8; a phase's degree is the largest number of
distinct 4-byte words in one bank), independent of the module's numpy code."""

import pytest

from fuserir.dtypes import DataType
from lowering.verify import bank_conflicts as bc
from lowering import kir

from kir_examples import add, mul, binop as op, const as c

I32, I64, F32, F16, F64 = DataType.i32, DataType.i64, DataType.f32, DataType.f16, \
    DataType.f64
SHARED, LOCAL, GLOBAL = kir.Memory.shared, kir.Memory.local, kir.Memory.global_
TX = kir.Special(kir.SpecialKind.threadIdx, "x", I32)
TY = kir.Special(kir.SpecialKind.threadIdx, "y", I32)


def div(a, b):
    return op("div", a, b)


def mod(a, b):
    return op("mod", a, b)


def v(name):
    return kir.Var(name, I32)


def loop(name, extent, body):
    return kir.ForLoop(v(name), extent if isinstance(extent, kir.ScalarExpr) else c(extent),
                       list(body))


def shared(name, dtype, size, offset=0):
    return kir.Buffer(name, dtype, SHARED, size=c(size), byte_offset=c(offset))


def tensor(name, dtype, n, output=False):
    return kir.TensorParam(kir.Buffer(name, dtype, GLOBAL), [c(n)], [v(f"{name}_s0")],
                           is_output=output)


def kernel(body, block, tensors=(), scalars=()):
    bx, by = block if isinstance(block, tuple) else (block, 1)
    k = kir.Kernel("k", list(tensors), [kir.ScalarParam(v(n)) for n in scalars], list(body),
                   kir.LaunchConfig((c(1), c(1), c(1)), (c(bx), c(by), c(1))))
    kir.relabel(k.body)
    return k


def reference_degree(addresses, width, lanes_per_phase):
    """The worst phase degree of one warp: `addresses` maps each active lane to the byte
    address it accesses (width bytes from there)."""
    worst = 0
    for phase in range(32 // lanes_per_phase):
        words_by_bank = {}
        for lane, a in addresses.items():
            if lane // lanes_per_phase == phase:
                for byte in range(a, a + width, 4):
                    words_by_bank.setdefault(byte // 4 % 32, set()).add(byte // 4)
        worst = max([worst] + [len(w) for w in words_by_bank.values()])
    return worst


def only(reports, kind=None):
    found = [r for r in reports if kind is None or r.kind == kind]
    assert len(found) == 1, [(r.label, r.kind) for r in reports]
    return found[0]


# -- f32 [32][32] tile read by a 32x32 block ------------------------------------------------

def tile_read(index, pitch=32):
    """Thread (x, y) reads tile[index(x, y)] of an f32 [32][pitch] tile into a global."""
    tile = shared("tile", F32, 32 * pitch)
    out = tensor("out", F32, 1024, output=True)
    body = [kir.Allocate(tile),
            kir.Store(out.buffer, add(mul(TY, 32), TX), kir.Load(tile, index))]
    return kernel(body, (32, 32), [out])


def warp_addresses(fn, itemsize=4):
    """{lane: byte address} of warp y (= threadIdx.y; blockDim.x is 32) for fn(x, y)."""
    return lambda y: {x: fn(x, y) * itemsize for x in range(32)}


def test_row_read_is_conflict_free():
    # tile[y][x]: the 32 lanes of warp y read one row, 32 consecutive words: 32 banks once.
    r = only(bc.report(tile_read(add(mul(TY, 32), TX)), {}))
    want = max(reference_degree(warp_addresses(lambda x, y: 32 * y + x)(y), 4, 32)
               for y in range(32))
    assert (r.kind, r.buffer, r.width, r.lanes_per_phase, r.phases) == ("load", "tile", 4,
                                                                      32, 1)
    assert r.worst == want == 1
    assert r.example.bank == 0 and len(r.example.words) == 1
    assert r.examined == 32 and r.iterations == 1       # every warp, no loop
    assert bc.conflicts(tile_read(add(mul(TY, 32), TX)), {}) == []


def test_column_read_is_32_way():
    # tile[x][y]: lane x reads word 32x + y, all in bank y: 32 distinct words, degree 32.
    k = tile_read(add(mul(TX, 32), TY))
    r = only(bc.report(k, {}))
    want = max(reference_degree(warp_addresses(lambda x, y: 32 * x + y)(y), 4, 32)
               for y in range(32))
    assert r.worst == want == 32
    ex = r.example
    assert (ex.warp, ex.phase, ex.bank) == (0, 0, 0)
    assert ex.words == [32 * x for x in range(32)] and ex.lanes == list(range(32))
    assert [x.label for x in bc.conflicts(k, {})] == [r.label]


def test_column_read_with_padding_33_is_conflict_free():
    # pitch 33: lane x reads word 33x + y, bank (x + y) % 32: a permutation of the banks.
    r = only(bc.report(tile_read(add(mul(TX, 33), TY), pitch=33), {}))
    want = max(reference_degree(warp_addresses(lambda x, y: 33 * x + y)(y), 4, 32)
               for y in range(32))
    assert r.worst == want == 1


def test_broadcast_is_not_a_conflict():
    # Every lane reads word 5: one word, a broadcast: degree 1.
    r = only(bc.report(tile_read(c(5)), {}))
    assert r.worst == reference_degree({x: 20 for x in range(32)}, 4, 32) == 1
    # Lanes read word 0 (even x) or word 32 (odd x): two distinct words of bank 0, each
    # broadcast to 16 lanes: degree 2, not 32.
    r = only(bc.report(tile_read(mul(mod(TX, 2), 32)), {}))
    assert r.worst == reference_degree({x: 128 * (x % 2) for x in range(32)}, 4, 32) == 2
    assert r.example.words == [0, 32]


def test_byte_offset_shifts_banks_and_f16_shares_words():
    # An f16 buffer at byte offset 4 + 4 (an expression): lane x reads element 2x, byte
    # 8 + 4x, word 2 + x: 32 distinct banks (degree 1); element 64x, byte 8 + 128x, word
    # 2 + 32x, all in bank 2: degree 32; element x, bytes 8 + 2x: lanes 2j and 2j + 1 share
    # a word (16 words in 16 banks): degree 1.
    tile = kir.Buffer("h", F16, SHARED, size=c(4096), byte_offset=add(c(4), c(4)))
    out = tensor("out", F16, 32, output=True)
    for index, fn, want in ((mul(TX, 2), lambda x: 2 * x, 1), (mul(TX, 64), lambda x: 64 * x, 32),
                            (TX, lambda x: x, 1)):
        k = kernel([kir.Allocate(tile), kir.Store(out.buffer, TX, kir.Load(tile, index))], 32,
                   [out])
        r = only(bc.report(k, {}))
        assert r.width == 2
        assert r.worst == reference_degree({x: 8 + 2 * fn(x) for x in range(32)}, 2, 32) == want


# -- guards, loops, Select arms ---------------------------------------------------------------

def test_guard_leaves_inactive_lanes_out():
    # Column read guarded by x % 4 == 0: only lanes 0, 4, ..., 28 read: 8 words of bank y.
    tile = shared("tile", F32, 1024)
    out = tensor("out", F32, 1024, output=True)
    body = [kir.Allocate(tile),
            kir.IfThenElse(op("eq", mod(TX, 4), 0),
                           [kir.Store(out.buffer, TX, kir.Load(tile, mul(TX, 32)))],
                           [kir.Store(out.buffer, TX, kir.Load(tile, TX))])]
    reports = bc.report(kernel(body, 32, [out]), {})
    then, other = reports
    assert then.worst == reference_degree({x: 128 * x for x in range(0, 32, 4)}, 4, 32) == 8
    assert then.example.lanes == list(range(0, 32, 4))
    # The else branch: the other 24 lanes read consecutive words.
    assert other.worst == 1


def test_select_arm_only_counts_lanes_that_take_it():
    # x < 8 ? tile[32x] : 0.0 — only lanes 0..7 load: degree 8 (not 32).
    tile = shared("tile", F32, 1024)
    out = tensor("out", F32, 32, output=True)
    value = kir.Select(op("lt", TX, 8), kir.Load(tile, mul(TX, 32)), c(0.0, F32), F32)
    r = only(bc.report(kernel([kir.Allocate(tile), kir.Store(out.buffer, TX, value)], 32,
                              [out]), {}))
    assert r.worst == reference_degree({x: 128 * x for x in range(8)}, 4, 32) == 8


def test_loop_iterations_first_values_and_last():
    # tile[x * (j + 1)] for j in 0..n: stride j + 1 words, degree gcd-based: j=0 -> 1,
    # j=1 -> 2, j=7 -> 8. The report examines j = 0, 1 (max_iterations) and the last, 7.
    tile = shared("tile", F32, 1024)
    out = tensor("out", F32, 32, output=True)
    body = [kir.Allocate(tile),
            loop("j", v("n"), [kir.Store(out.buffer, TX,
                                         kir.Load(tile, mul(TX, add(v("j"), 1))))])]
    k = kernel(body, 32, [out], scalars=["n"])
    r = only(bc.report(k, {"n": 8}))
    want = {j: reference_degree({x: 4 * x * (j + 1) for x in range(32)}, 4, 32)
            for j in range(8)}
    assert (want[0], want[1], want[7]) == (1, 2, 8)
    assert r.worst == want[7] and r.example.iteration == {"j": 7} and r.iterations == 3
    # Only the first iteration: worst is what j = 0 and the last give; n = 2: j = 0, 1.
    assert only(bc.report(k, {"n": 8}, max_iterations=1)).iterations == 2
    assert only(bc.report(k, {"n": 2})).worst == want[1] == 2
    # Without the size the report cannot say.
    r = only(bc.report(k, {}))
    assert r.worst is None and "no value for scalar n (the report needs sizes)" in r.notes[0]


def test_address_that_depends_on_a_load_is_unknown():
    tile = shared("tile", F32, 1024)
    idx = tensor("idx", I32, 32)
    out = tensor("out", F32, 32, output=True)
    body = [kir.Allocate(tile),
            kir.Store(out.buffer, TX, kir.Load(tile, kir.Load(idx.buffer, TX)))]
    r = only(bc.report(kernel(body, 32, [idx, out]), {}))
    assert r.buffer == "tile" and r.worst is None and r.example is None
    assert "depends on a load (idx[threadIdx.x])" in r.notes[0]
    assert bc.conflicts(kernel(body, 32, [idx, out]), {}) == []


# -- cp.async, 16 bytes: [rows][64] f16 tiles (128-byte rows) -----------------------------------

def test_cp_async_16_byte_row_copies():
    # Thread t copies 16-byte chunk t % 8 of row t / 8: a phase (8 lanes) writes one whole
    # 128-byte row, words 32r .. 32r + 31: every bank once: degree 1.
    tile = shared("tile", F16, 8 * 64)
    g = tensor("g", F16, 8 * 64)
    dst = add(mul(div(TX, 8), 64), mul(mod(TX, 8), 8))
    k = kernel([kir.Allocate(tile), kir.CpAsync(tile, dst, g.buffer, dst, 16, c(16))], 64,
               [g])
    r = only(bc.report(k, {}))
    assert (r.kind, r.width, r.lanes_per_phase, r.phases) == ("cp.async", 16, 8, 4)
    want = max(reference_degree({lane: 2 * ((w * 32 + lane) // 8 * 64 + (w * 32 + lane) % 8
                                            * 8) for lane in range(32)}, 16, 8)
               for w in range(2))
    assert r.worst == want == 1


def test_cp_async_16_byte_row_per_thread_is_8_way():
    # Thread t copies all of row t, chunk i at a time: the 8 lanes of a phase write chunk i
    # of 8 different rows, bytes 128r + 16i: words 32r + 4i .. 32r + 4i + 3, i.e. the same
    # 4 banks (4i..4i+3) for every row: 8 distinct words per bank, degree 8.
    tile = shared("tile", F16, 32 * 64)
    g = tensor("g", F16, 32 * 64)
    dst = add(mul(TX, 64), mul(v("i"), 8))
    k = kernel([kir.Allocate(tile),
                loop("i", 8, [kir.CpAsync(tile, dst, g.buffer, dst, 16, c(16))])], 32, [g])
    r = only(bc.report(k, {}))
    want = reference_degree({t: 128 * t for t in range(32)}, 16, 8)
    assert r.worst == want == 8
    assert r.example.iteration == {"i": 0} and r.example.words == [32 * t for t in range(8)]
    assert r.iterations == 3                                # i = 0, 1 and 7


# -- ldmatrix.x4 over a [64][32] f16 tile (64-byte rows) -----------------------------------------

def xor2(a, b):
    """a ^ b for a, b in 0..3 with + * / % only: bit 0 is (a + b) % 2, bit 1 is
    (a / 2 + b / 2) % 2."""
    return add(mod(add(mod(a, 2), mod(b, 2)), 2),
               mul(mod(add(mod(div(a, 2), 2), mod(div(b, 2), 2)), 2), 2))


def ldmatrix_kernel(swizzle):
    """4 warps; warp w loads the 16x16 A fragments at rows 16w.., columns 16kt.. (kt in
    0..2) with ldmatrix.x4: lane l supplies row 16w + 8((l/8) % 2) + l % 8, 16-byte chunk
    c = 2kt + (l/8)/2 of that row; `swizzle` (None, "arith" or "xor") stores chunk c of row
    r at chunk c ^ ((r / 2) % 4)."""
    tile = shared("tile", F16, 64 * 32)
    frag = kir.Buffer("frag", F16, LOCAL, size=c(8))
    lane, warp = mod(TX, 32), div(TX, 32)
    row = add(add(mul(warp, 16), mul(mod(div(lane, 8), 2), 8)), mod(lane, 8))
    chunk = add(mul(v("kt"), 2), div(div(lane, 8), 2))
    if swizzle == "arith":
        chunk = xor2(chunk, mod(div(row, 2), 4))
    elif swizzle == "xor":
        chunk = op("xor", chunk, mod(div(row, 2), 4))
    address = add(mul(row, 32), mul(chunk, 8))
    body = [kir.Allocate(tile), kir.Allocate(frag),
            loop("kt", 2, [kir.LdMatrix(frag, c(0), tile, address, num=4)])]
    return kernel(body, 128)


def ldmatrix_addresses(warp, kt, swizzle):
    out = {}
    for lane in range(32):
        row = 16 * warp + 8 * ((lane // 8) % 2) + lane % 8
        chunk = 2 * kt + (lane // 8) // 2
        if swizzle:
            chunk ^= (row // 2) % 4
        out[lane] = row * 64 + chunk * 16
    return out


def test_ldmatrix_x4_unswizzled_is_4_way():
    # A phase is one matrix: 8 rows r0..r0+7, one chunk c, bytes 64r + 16c, words
    # 16r + 4c .. +3, bank 16(r % 2) + 4c + j. Rows two apart (64 * 2 = 128 bytes) hit the
    # same banks, so the 4 even rows share 4 banks and the 4 odd rows 4 others: 4 distinct
    # words per bank, degree 4 (half the banks idle).
    r = only(bc.report(ldmatrix_kernel(None), {}))
    assert (r.kind, r.width, r.lanes_per_phase, r.phases) == ("ldmatrix", 16, 8, 4)
    want = max(reference_degree(ldmatrix_addresses(w, kt, False), 16, 8)
               for w in range(4) for kt in range(2))
    assert r.worst == want == 4
    ex = r.example
    assert (ex.warp, ex.iteration, ex.phase, ex.bank) == (0, {"kt": 0}, 0, 0)
    assert ex.words == [0, 32, 64, 96] and ex.lanes == [0, 2, 4, 6]


@pytest.mark.parametrize("how", ["arith", "xor"])
def test_ldmatrix_x4_xor_swizzle_is_conflict_free(how):
    # Chunk c of row r stored at c ^ ((r / 2) % 4): over the 4 even (or odd) rows of a
    # phase (r / 2) % 4 takes 4 distinct values, so the 8 rows land in 8 distinct 16-byte
    # slots of the 128-byte bank sweep: every bank once, degree 1. "arith" spells the XOR of
    # two 2-bit values with + * / % (kir had no "xor" operator when this was written).
    if how == "xor" and "xor" not in kir.BINARY_OPS:
        pytest.skip("kir has no 'xor' operator yet; the 'arith' case builds the same swizzle")
    r = only(bc.report(ldmatrix_kernel(how), {}))
    want = max(reference_degree(ldmatrix_addresses(w, kt, True), 16, 8)
               for w in range(4) for kt in range(2))
    assert r.worst == want == 1


def test_ldmatrix_x2_uses_only_lanes_0_to_15():
    # .x2: lanes 16..31 supply nothing (their address here would be a 32-way column).
    tile = shared("tile", F16, 64 * 64)
    frag = kir.Buffer("frag", F16, LOCAL, size=c(4))
    address = kir.Select(op("lt", TX, 16), mul(TX, 8), mul(TX, 64 * 64 // 32), I32)
    k = kernel([kir.Allocate(tile), kir.Allocate(frag),
                kir.LdMatrix(frag, c(0), tile, address, num=2)], 32)
    r = only(bc.report(k, {}))
    assert r.phases == 2
    assert r.worst == reference_degree({x: 16 * x for x in range(16)}, 16, 8) == 1


# -- 8-byte accesses: two phases of 16 lanes --------------------------------------------------

@pytest.mark.parametrize("dtype", [F64, I64])
def test_8_byte_accesses_have_16_lane_phases(dtype):
    # sm[x]: each half-warp writes 16 x 8 = 128 contiguous bytes: every bank once per
    # phase, degree 1 (a single 32-lane phase would have counted 2).
    # sm[2x]: bytes 16x, words 4x and 4x + 1: lanes x and x + 8 of a half-warp share banks:
    # degree 2.
    sm = shared("sm", dtype, 64)
    for index, stride, want in ((TX, 1, 1), (mul(TX, 2), 2, 2)):
        k = kernel([kir.Allocate(sm), kir.Store(sm, index, c(0, dtype))], 32)
        r = only(bc.report(k, {}))
        assert (r.width, r.lanes_per_phase, r.phases) == (8, 16, 2)
        assert r.worst == reference_degree({x: 8 * stride * x for x in range(32)}, 8, 16) \
            == want
    assert reference_degree({x: 8 * x for x in range(32)}, 8, 32) == 2   # the other model


def test_cp_async_8_bytes():
    # cp.async of 8 bytes to sm[4x] (f16): bytes 8x: half-warp 0 covers bytes 0..127:
    # degree 1.
    sm = shared("sm", F16, 128)
    g = tensor("g", F16, 128)
    k = kernel([kir.Allocate(sm),
                kir.CpAsync(sm, mul(TX, 4), g.buffer, mul(TX, 4), 8, c(8), "ca")], 32, [g])
    r = only(bc.report(k, {}))
    assert (r.lanes_per_phase, r.phases) == (16, 2)
    assert r.worst == reference_degree({x: 8 * x for x in range(32)}, 8, 16) == 1


# -- text ----------------------------------------------------------------------------------------

def test_format_report_lists_every_access_with_its_example():
    k = tile_read(add(mul(TX, 32), TY))
    lines = bc.format_report(bc.report(k, {}))
    assert lines[0].split() == ["S2", "load", "tile", "4", "B", "1x32", "lanes", "worst",
                                "32", "tile[((threadIdx.x", "*", "32)", "+", "threadIdx.y)]"]
    assert lines[1].startswith("    e.g. warp 0, phase 0, bank 0: words 0, 32, 64,")
    assert bc.format_report([]) == ["no shared-memory accesses"]
    assert bc.format_report(bc.report(tile_read(TX), {}), only_conflicts=True) == \
        ["no bank conflicts"]
    d = bc.report(k, {})[0].to_dict()
    assert d["worst"] == 32 and d["example"]["bank"] == 0 and "stmt" not in d
