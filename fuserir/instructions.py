"""Instruction descriptors: each tensor-core or copy instruction as data.

A descriptor is what every layer needs of one PTX instruction, written once:

    shape and types     the instruction tile (mma m16n8k16: 16 x 8 x 16, f16/bf16 in, f32
                        accumulate), the element and row sizes (ldmatrix: 8 x 8 b16, a row
                        of 16 bytes), the byte sizes (cp.async: 4, 8, 16)
    fragment maps       which tile element lane l holds in its register element j, as
                        `at(lane, j) -> (row, col)`, written with // % * + only so that the
                        same function serves integers, numpy arrays of lanes (the
                        interpreter) and kernel-IR expressions (lowering.fragments wraps
                        them in an object with those operators)
    arch                the oldest GPU that has it (sm_80 for mma.sync and cp.async)
    PTX                 the instruction's spelling (codegen.cuda emits it)
    access shape        how it touches shared memory per lane (ldmatrix: which lanes give
                        a row address and the row's bytes; cp.async: the bytes one thread
                        writes, pending until its wait), which lowering.accesses turns into
                        the accesses the hazard analysis, the bank-conflict report and the
                        interpreter's race detector check

The matmul scheduler takes the instruction tile from here, lowering the fragment maps,
codegen the PTX and the arch check, the interpreter the semantics. A new instruction
(wgmma, TMA) is a new descriptor, consulted by the same code. The maps are the figures
of the PTX ISA ("Matrix Fragments for mma.m16n8k16", "ldmatrix"); tests/test_instructions.py
checks every lane against those figures spelled out independently.
"""

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

# every descriptor, by the kernel-IR statement that issues it
BY_STATEMENT = {"Mma": MMA_M16N8K16, "LdMatrix": LDMATRIX, "CpAsync": CP_ASYNC}
