"""Instruction descriptors: each tensor-core or copy instruction as data.

A descriptor is what every layer needs of one PTX instruction, written once:

    shape and types     the instruction tile (mma m16n8k16: 16 x 8 x 16, f16/bf16 in, f32
                        accumulate), the element and row sizes (ldmatrix: 8 x 8 b16, a row
                        of 16 bytes), the byte sizes (cp.async: 4, 8, 16)
    fragment maps       which tile element lane l holds in its register element j, as
                        `at(lane, j) -> (row, col)`, written with // % * + only so that the
                        same function serves integers, numpy arrays of lanes (the
                        interpreter) and kernel-IR expressions (lowering.indexing.fragments wraps
                        them in an object with those operators)
    arch                the oldest GPU that has it (sm_80 for mma.sync and cp.async)
    PTX                 the instruction's spelling (codegen.cuda emits it)
    access shape        how it touches shared memory per lane (ldmatrix: which lanes give
                        a row address and the row's bytes; cp.async: the bytes one thread
                        writes, pending until its wait), which lowering.verify.accesses turns into
                        the accesses the hazard analysis, the bank-conflict report and the
                        interpreter's race detector check

The matmul scheduler takes the instruction tile from here, lowering the fragment maps,
codegen the PTX and the arch check, the interpreter the semantics. A new instruction is a
new descriptor, consulted by the same code: Hopper's warp-group MMA (WGMMA, sm_90a: its
accumulator and register-A fragments over the 128 threads of a warp group, its PTX), the
shared-memory matrix descriptor and swizzle modes its operands are read through,
stmatrix, TMA (and what a tensor map may be), mbarriers, the proxy fence, named barriers
and setmaxnreg are here, issued by the statements of lowering/kir/hopper.py (each
statement names the descriptor it issues in its effects: lowering.kir.effects). The maps are the figures of the PTX ISA ("Matrix Fragments for
mma.m16n8k16", "ldmatrix", "wgmma"); tests/test_instructions.py and
tests/test_instructions_sm90.py check every lane against those figures spelled out
independently, and tests/test_hopper_probes.py checks them against the H200.
"""

import math
from dataclasses import dataclass

from .dtypes import DataType


@dataclass(frozen=True)
class Fragment:
    """A tile held in registers across a warp: lane l's element j (0 <= j < count) is
    tile element at(l, j) = (row, col) of a rows x cols tile."""

    rows: int
    cols: int
    count: int
    at: object


@dataclass(frozen=True)
class MmaInstruction:
    """A warp-wide D = A B + C on register fragments (no shared-memory access)."""

    name: str
    label: str            # how kernel IR and hazard reports name it, before the dtype
    shape: tuple          # (m, n, k)
    arch: int             # compute capability * 10
    inputs: tuple         # operand dtypes
    accumulator: DataType
    a: Fragment           # m x k
    b: Fragment           # k x n
    c: Fragment           # m x n (also D)
    ptx_format: str       # .format(t=input dtype)
    arch_specific: bool = False   # only on the `a` target of its arch (sm_90a)

    def ptx(self, dtype):
        return self.ptx_format.format(t=dtype.value)

    @property
    def shape_name(self):
        """The shape as PTX names it: m16n8k16."""
        return "m{}n{}k{}".format(*self.shape)


@dataclass(frozen=True)
class LdMatrixInstruction:
    """A warp-wide load of `num` 8x8 matrices of b16 from shared memory: lane l supplies
    the address of row address_row(l) of matrix address_matrix(l) (lanes below 8 * num
    only), each row `row_bytes` contiguous bytes; register i of lane l then holds two
    elements of matrix i: register(l) = (row, first col) (.trans: (first row, col)), the
    second at col + 1 (.trans: row + 1)."""

    name: str
    arch: int
    counts: tuple         # the legal num (matrices per instruction)
    matrix: int           # rows = cols of one matrix
    element_bytes: int
    row_bytes: int
    ptx_format: str       # .format(num=..., trans="" | ".trans")
    arch_specific: bool = False   # only on the `a` target of its arch (sm_90a)

    @staticmethod
    def address_matrix(lane):
        return lane // 8

    @staticmethod
    def address_row(lane):
        return lane % 8

    @staticmethod
    def register(lane, trans=False):
        """(row, col) in its matrix of the first of the two elements of a lane's register;
        the second is at col + 1 (trans: row + 1)."""
        if trans:
            return 2 * (lane % 4), lane // 4
        return lane // 4, 2 * (lane % 4)

    def address_lanes(self, num):
        """How many lanes (the first ones) supply a row address."""
        return self.matrix * num

    def ptx(self, num, trans):
        return self.ptx_format.format(num=num, trans=".trans" if trans else "")


@dataclass(frozen=True)
class CpAsyncInstruction:
    """An asynchronous global -> shared copy of `nbytes` by one thread (src_size bytes
    read, the rest zero-filled), pending until a wait_group retires its group."""

    name: str
    arch: int
    sizes: tuple          # bytes one copy may move
    cache_only: dict      # cache operator -> the only size it takes (.cg: 16)
    ptx_format: str       # .format(cache=...)
    commit: str
    wait_format: str      # .format(n=...)
    arch_specific: bool = False   # only on the `a` target of its arch (sm_90a)

    def cache_for(self, nbytes):
        """The cache operator a copy of nbytes uses: .cg (L2 only) for 16, else .ca."""
        return "cg" if nbytes == self.cache_only["cg"] else "ca"

    def allows(self, cache, nbytes):
        return nbytes in self.sizes and self.cache_only.get(cache, nbytes) == nbytes

    def ptx(self, cache):
        return self.ptx_format.format(cache=cache)

    def wait(self, n):
        return self.wait_format.format(n=n)


def _mma_a(lane, j):
    # a0..a7: (g, 2t..2t+1), (g+8, 2t..2t+1), (g, 2t+8..2t+9), (g+8, 2t+8..2t+9)
    return lane // 4 + 8 * (j // 2 % 2), 2 * (lane % 4) + j % 2 + 8 * (j // 4)


def _mma_b(lane, j):
    # b0..b3: (k 2t..2t+1, n g), (k 2t+8..2t+9, n g)
    return 2 * (lane % 4) + j % 2 + 8 * (j // 2), lane // 4


def _mma_c(lane, j):
    # c0..c3: (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)
    return lane // 4 + 8 * (j // 2), 2 * (lane % 4) + j % 2


MMA_M16N8K16 = MmaInstruction(
    name="mma.sync m16n8k16", label="mma.m16n8k16", shape=(16, 8, 16), arch=80,
    inputs=(DataType.f16, DataType.bf16), accumulator=DataType.f32,
    a=Fragment(16, 16, 8, _mma_a), b=Fragment(16, 8, 4, _mma_b), c=Fragment(16, 8, 4, _mma_c),
    ptx_format="mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32")

LDMATRIX = LdMatrixInstruction(
    name="ldmatrix", arch=75, counts=(1, 2, 4), matrix=8, element_bytes=2, row_bytes=16,
    ptx_format="ldmatrix.sync.aligned.m8n8.x{num}{trans}.shared.b16")

CP_ASYNC = CpAsyncInstruction(
    name="cp.async", arch=80, sizes=(4, 8, 16), cache_only={"cg": 16},
    ptx_format="cp.async.{cache}.shared.global", commit="cp.async.commit_group",
    wait_format="cp.async.wait_group {n}")



# ---------------------------------------------------------------------------------------
# Hopper (sm_90a): warp-group MMA and its shared-memory operand descriptors
# ---------------------------------------------------------------------------------------

WARPGROUP = 128          # threads of a warp group: 4 consecutive warps, the first's index % 4 == 0

# The swizzle modes of a wgmma matrix descriptor and a TMA box: the descriptor's 2-bit
# code, and the row span the XOR pattern repeats over (bytes)
SWIZZLE_CODES = {"none": 0, "128B": 1, "64B": 2, "32B": 3}
SWIZZLE_BYTES = {"none": 16, "32B": 32, "64B": 64, "128B": 128}
# The mode whose rows a tile swizzled by rows of this many bytes has (transforms.swizzle)
SWIZZLE_MODE_OF_ROW_BYTES = {n: mode for mode, n in SWIZZLE_BYTES.items() if mode != "none"}
# The swizzle pattern repeats every 1024 bytes of shared memory (8 rows of 128 bytes): a
# tile swizzled by its pool offset, as TMA writes it and wgmma reads it, starts on this
# boundary, and so does the pool itself
SWIZZLE_ATOM_BYTES = 1024


def swizzle(offset, mode):
    """The byte offset `mode` stores byte `offset` at, within an atom of SWIZZLE_ATOM_BYTES
    (CUTLASS's Swizzle<b, 4, 3> on byte offsets): the 16-byte chunk index, bits 4 .. 4+b-1,
    is XORed with bits 7 .. 7+b-1, b = 3 for 128B, 2 for 64B, 1 for 32B, 0 for "none" (the
    identity). An involution; it keeps every 16-byte chunk whole. Works on ints and numpy
    integer arrays."""
    width = {"none": 0, "32B": 1, "64B": 2, "128B": 3}[mode]
    mask = (1 << width) - 1
    return offset ^ (((offset >> 7) & mask) << 4)


@dataclass(frozen=True)
class MatrixDescriptor:
    """A wgmma shared-memory matrix descriptor's fields, in bytes (the 64-bit word holds
    each >> 4): start address (bits 0-13), leading byte offset (16-29), stride byte offset
    (32-45), base offset (49-51), swizzle mode (62-63)."""

    start: int
    leading: int
    stride: int
    swizzle: str = "none"
    base_offset: int = 0

    _FIELDS = ((0, 14), (16, 14), (32, 14))     # (first bit, width) of start, LBO, SBO

    def encode(self):
        word = 0
        for value, (bit, width), what in zip((self.start, self.leading, self.stride),
                                             self._FIELDS, ("start", "leading", "stride")):
            if value % 16 or not 0 <= value >> 4 < 1 << width:
                raise ValueError(f"matrix descriptor {what} byte offset {value} is not a "
                                 f"multiple of 16 below {16 << width}")
            word |= (value >> 4) << bit
        if not 0 <= self.base_offset < 8:
            raise ValueError(f"matrix descriptor base offset {self.base_offset} is not 0..7")
        return word | self.base_offset << 49 | SWIZZLE_CODES[self.swizzle] << 62

    @classmethod
    def decode(cls, word):
        start, leading, stride = (((word >> bit) & ((1 << width) - 1)) << 4
                                  for bit, width in cls._FIELDS)
        mode = {code: name for name, code in SWIZZLE_CODES.items()}[(word >> 62) & 3]
        return cls(start, leading, stride, mode, (word >> 49) & 7)


def _wgmma_d(lane, j):
    # warp w (= lane // 32) holds rows 16w..16w+15; within them each 8-column chunk
    # (4 elements per lane) has mma.sync m16n8's C layout
    row, col = _mma_c(lane % 32, j % 4)
    return 16 * (lane // 32) + row, 8 * (j // 4) + col


def _wgmma_a(lane, j):
    # A from registers: warp w holds rows 16w..16w+15 as mma.sync m16n8k16's A fragment
    row, col = _mma_a(lane % 32, j)
    return 16 * (lane // 32) + row, col


@dataclass(frozen=True)
class WgmmaInstruction:
    """`wgmma.mma_async` m64nNk16 for one warp group: D (64 x n, f32, in registers) += A
    (64 x 16, from shared memory through a matrix descriptor, or from registers) x B (16 x
    n, from shared memory), asynchronous until the wait_group that retires its commit
    group. `arch_specific`: compiled only for the "a" target (sm_90a)."""

    name: str
    arch: int
    arch_specific: bool
    m: int
    k: int
    widths: tuple         # the legal n
    inputs: tuple
    accumulator: DataType
    ptx_format: str       # .format(n=..., t=...)
    fence: str
    commit: str
    wait_format: str

    def shape(self, n):
        if n not in self.widths:
            raise ValueError(f"{self.name}: n = {n} is not a multiple of 8 from 8 to 256")
        return (self.m, n, self.k)

    def d(self, n):
        """The accumulator fragment of a 64 x n tile: n / 2 f32 per thread."""
        self.shape(n)
        return Fragment(self.m, n, n // 2, _wgmma_d)

    def a(self):
        """A held in registers: 8 halves per thread, 4 packed registers."""
        return Fragment(self.m, self.k, 8, _wgmma_a)

    def ptx(self, n, dtype):
        self.shape(n)
        return self.ptx_format.format(n=n, t=dtype.value)

    def wait(self, n):
        return self.wait_format.format(n=n)


WGMMA = WgmmaInstruction(
    name="wgmma.mma_async m64nNk16", arch=90, arch_specific=True, m=64, k=16,
    widths=tuple(range(8, 257, 8)), inputs=(DataType.f16, DataType.bf16),
    accumulator=DataType.f32,
    ptx_format="wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t}",
    fence="wgmma.fence.sync.aligned", commit="wgmma.commit_group.sync.aligned",
    wait_format="wgmma.wait_group.sync.aligned {n}")


# ---------------------------------------------------------------------------------------
# Hopper (sm_90): stmatrix, TMA, mbarriers, fences, named barriers, register reallocation
# ---------------------------------------------------------------------------------------

STMATRIX = LdMatrixInstruction(
    name="stmatrix", arch=90, counts=(1, 2, 4), matrix=8, element_bytes=2, row_bytes=16,
    ptx_format="stmatrix.sync.aligned.m8n8.x{num}{trans}.shared.b16")


@dataclass(frozen=True)
class AsyncProxyInstruction:
    """An sm_90 instruction of the async proxy or its synchronization (TMA, mbarriers,
    fences, named barriers, setmaxnreg): its name, arch, and PTX spellings by role
    (`ptx[role]`, some with .format fields)."""

    name: str
    arch: int
    ptx: dict
    arch_specific: bool = False


TMA = AsyncProxyInstruction(
    name="cp.async.bulk.tensor (TMA)", arch=90, ptx={
        "load": "cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier"
                "::complete_tx::bytes",
        "store": "cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group",
        "bulk_load": "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
        "commit": "cp.async.bulk.commit_group",
        "wait": "cp.async.bulk.wait_group{read} {n}"})

# What a tensor map may be (cuTensorMapEncodeTiled's rules): ranks, box extents, global
# dimensions (1 .. 2^32 elements), the global address's alignment (bytes), global strides
# (bytes: multiples of 16 below 2^40), the shared destination's alignment
# the ranks kernel IR's TMA statements address (coordinates c0, c1[, c2]; the hardware
# takes 1 to 5)
TMA_RANKS = (2, 3)
TMA_BOX_MAX = 256
TMA_DIM_LIMIT = 1 << 32
TMA_ADDRESS_ALIGN = 16
TMA_STRIDE_ALIGN = 16
TMA_STRIDE_LIMIT = 1 << 40
TMA_SMEM_ALIGN = 128
# The box's dimension-0 coordinate, in bytes, is a multiple of this (checked on the H200:
# a box of 24 f16 at column 60 faults with an illegal instruction, at column 56 it loads)
TMA_COORD_ALIGN = 16
# A one-dimensional bulk copy (no tensor map): both addresses and the size are multiples
# of this many bytes
BULK_COPY_ALIGN = 16


def tma_stride_ok(nbytes):
    """May a tensor map have a global stride of `nbytes` bytes?"""
    return 0 < nbytes < TMA_STRIDE_LIMIT and nbytes % TMA_STRIDE_ALIGN == 0


def tma_map_strides(dims, strides, itemsize):
    """A tensor map's element strides of dimensions 1.. (`dims` its sizes innermost
    first), each dimension of one element given a nominal stride instead (the dense one,
    rounded up to TMA_STRIDE_ALIGN bytes): the map never steps along it, but the encoder
    checks every stride (a decode matmul's A stored K x 1 and boxed along K: its second
    dimension has one element and the array's stride 1 there)."""
    align = TMA_STRIDE_ALIGN // math.gcd(TMA_STRIDE_ALIGN, itemsize)
    out, dense = [], dims[0]
    for n, s in zip(dims[1:], strides):
        out.append(-(-dense // align) * align if n == 1 else s)
        dense *= n
    return tuple(out)


def element_runs(shape, strides):
    """The (element stride, extent) runs an array's elements form, canonical: extent-1
    axes dropped, sorted by stride, an axis merged into the previous one where it
    continues it (stride = the previous stride x extent). Two layouts with equal runs
    address the same elements (a tensor map checked against its array)."""
    runs = []
    for stride, n in sorted((s, n) for n, s in zip(shape, strides) if n != 1):
        if runs and runs[-1][0] * runs[-1][1] == stride:
            runs[-1] = (runs[-1][0], runs[-1][1] * n)
        else:
            runs.append((stride, n))
    return runs


MBARRIER = AsyncProxyInstruction(
    name="mbarrier", arch=90, ptx={
        "init": "mbarrier.init.shared::cta.b64",
        "init_fence": "fence.mbarrier_init.release.cluster",
        "arrive": "mbarrier.arrive.shared::cta.b64",
        "arrive_tx": "mbarrier.arrive.expect_tx.shared::cta.b64",
        "try_wait": "mbarrier.try_wait.parity.shared::cta.b64"})

PROXY_FENCE = AsyncProxyInstruction(
    name="fence.proxy.async", arch=90, ptx={"fence": "fence.proxy.async.shared::cta"})

NAMED_BARRIER = AsyncProxyInstruction(
    name="bar (named barrier)", arch=70, ptx={"sync": "bar.sync {id}, {count}",
                                              "arrive": "bar.arrive {id}, {count}"})
NAMED_BARRIER_IDS = range(1, 16)     # 0 is __syncthreads'

# Thread-block clusters (sm_90): the CTAs of a cluster are resident at once on one GPC
# and read each other's shared memory (distributed shared memory: an address of this CTA's
# pool mapped to a peer's by mapa) once a cluster barrier orders the reads after the
# peers' writes. The barrier waits for every thread of the cluster that has not exited.
CLUSTER = AsyncProxyInstruction(
    name="cluster (barrier.cluster, ld.shared::cluster)", arch=90, ptx={
        "arrive": "barrier.cluster.arrive.release",
        "wait": "barrier.cluster.wait.acquire",
        "map": "mapa.shared::cluster.u32",
        "load": "ld.shared::cluster.{type}"})
CLUSTER_PORTABLE = 8     # CTAs a cluster may have on any sm_90 device
CLUSTER_MAX = 16         # with the non-portable cluster size allowed (a function attribute)

SETMAXNREG = AsyncProxyInstruction(
    name="setmaxnreg", arch=90, arch_specific=True,
    ptx={"set": "setmaxnreg.{direction}.sync.aligned.u32 {count}"})
SETMAXNREG_COUNTS = range(24, 257, 8)
