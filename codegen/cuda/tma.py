"""CUDA emission of TMA, the tensor memory accelerator's bulk copies (kir.hopper's TmaLoad,
TmaStore, BulkLoad, BulkCommit, BulkWait): TmaEmitter, a mixin of codegen.cuda.emitter's _Emitter,
with one rule s_<Stmt> per statement, and the PTX spelling of each beside its rule. One
instruction family's emission is one module, as its interpretation is one room of the
interpreter (codegen.interp.tma): a new bulk copy is a rule and a spelling here.

Each rule checks what it can see before it spells (the tensor map is the kernel's, the
coordinates' count, the dimension-0 coordinate's alignment where constant, the shared
box's memory, dtype and alignment) and refuses the rest with a CodegenError naming the
statement; a BulkLoad's size and constant offsets are checked against BULK_COPY_ALIGN,
its global source is passed by global address. A tensor map is passed by the generic
address of its `__grid_constant__` parameter (an "l" operand), coordinates as i32,
shared addresses as 32-bit shared-state-space addresses; every statement carries a
"memory" clobber (codegen.cuda.ptx_sm90.asm).
"""

from fuserir.instructions import (BULK_COPY_ALIGN, SWIZZLE_BYTES, TMA, TMA_COORD_ALIGN,
                                  TMA_SMEM_ALIGN)
from lowering import kir

from . import ptx_sm90


class TmaEmitter:
    """TMA's rules; the emitter's helpers (check_memory, shared_address, mbarrier,
    i32_operand, group_count, emit_synchronizing, ...) are _Emitter's and HopperEmitter's."""

    # -- rules --------------------------------------------------------------------------------
    def tma_operands(self, s, what, buffer, index, role):
        """The map's generic address, the coordinates (i32 C text) and the shared address
        of the box of TmaLoad / TmaStore `s`, checked."""
        m = s.map
        if not any(m is x for x in self.kernel.tensor_maps):
            raise self.error(f"{what} map {getattr(m, 'name', m)!r} is not one of the "
                             "kernel's tensor maps")
        coords = s.coords
        if len(coords) != m.rank:
            raise self.error(f"{what} gives {len(coords)} coordinates, map {m.name} has "
                             f"rank {m.rank}")
        if isinstance(coords[0], kir.Const) and \
                int(coords[0].value) * m.dtype.itemsize % TMA_COORD_ALIGN:
            raise self.error(f"{what} coordinate 0 = {coords[0].value} is "
                             f"{int(coords[0].value) * m.dtype.itemsize} bytes into a row of "
                             f"map {m.name}, not a multiple of {TMA_COORD_ALIGN} (the GPU "
                             "faults)")
        self.check_memory(buffer, kir.Memory.shared, f"{what} {role}")
        if buffer.dtype is not m.dtype:
            raise self.error(f"{what} {role} {buffer.name} is {buffer.dtype}, map {m.name} "
                             f"is {m.dtype}")
        align = TMA_SMEM_ALIGN if m.swizzle == "none" else 8 * SWIZZLE_BYTES[m.swizzle]
        if isinstance(buffer.byte_offset, kir.Const) and isinstance(index, kir.Const):
            byte = int(buffer.byte_offset.value) + int(index.value) * buffer.dtype.itemsize
            if byte % align:
                raise self.error(f"{what} {role} {buffer.name}[{index.value}] is at pool "
                                 f"byte {byte}, not aligned to {align}")
        address = self.shared_address(buffer, index, f"{what} {role}")
        coords = [self.i32_operand(c, f"{what} coordinate {i}") for i, c in enumerate(coords)]
        return f"reinterpret_cast<unsigned long long>(&{self.ident(m)})", coords, address

    def s_TmaLoad(self, s, depth):
        tensor_map, coords, dst = self.tma_operands(s, "tma load", s.dst, s.dst_index,
                                                    "destination")
        bar = self.mbarrier(s.bar, s.bar_index, "tma load")
        self.emit_lines(depth, tma_load(dst, tensor_map, coords, bar),
                        self.describe(s))

    def s_TmaStore(self, s, depth):
        tensor_map, coords, src = self.tma_operands(s, "tma store", s.src, s.src_index,
                                                    "source")
        self.emit_lines(depth, tma_store(tensor_map, coords, src), self.describe(s))

    def s_BulkLoad(self, s, depth):
        self.check_memory(s.dst, kir.Memory.shared, "bulk load destination")
        self.check_memory(s.src, kir.Memory.global_, "bulk load source")
        if s.src.dtype is not s.dst.dtype:
            raise self.error(f"bulk load from {s.src.dtype} {s.src.name} into {s.dst.dtype} "
                             f"{s.dst.name} (a copy does not convert)")
        nbytes, size = s.nbytes, s.dst.dtype.itemsize
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0 \
                or nbytes % BULK_COPY_ALIGN or nbytes % size:
            raise self.error(f"a bulk load copies a positive multiple of {BULK_COPY_ALIGN} "
                             f"bytes (whole {s.dst.dtype} elements), got {nbytes!r}")
        off = s.dst.byte_offset
        if isinstance(off, kir.Const) and int(off.value) % BULK_COPY_ALIGN:
            raise self.error(f"shared buffer {s.dst.name} at byte {off.value} is not aligned "
                             f"to {BULK_COPY_ALIGN} bytes (a bulk load's destination)")
        for role, index in (("destination", s.dst_index), ("source", s.src_index)):
            if isinstance(index, kir.Const) and int(index.value) * size % BULK_COPY_ALIGN:
                raise self.error(f"bulk load {role} element {index.value} is not aligned to "
                                 f"{BULK_COPY_ALIGN} bytes")
        dst = self.shared_address(s.dst, s.dst_index, "bulk load destination")
        src = f"gmem_addr(&{self.subscript(s.src, s.src_index)})"
        bar = self.mbarrier(s.bar, s.bar_index, "bulk load")
        self.emit_lines(depth, bulk_load(dst, src, nbytes, bar), self.describe(s))

    def s_BulkCommit(self, s, depth):
        self.emit(depth, bulk_commit(), s.label)

    def s_BulkWait(self, s, depth):
        n = self.group_count(s.n, "cp.async.bulk")
        self.emit_synchronizing(depth, s, bulk_wait(n, bool(s.read)), "wait")


# -- spellings ------------------------------------------------------------------------------------

def _box(first, count):
    return "{" + ", ".join(f"%{first + i}" for i in range(count)) + "}"


def tma_load(dst, tensor_map, coords, bar):
    """TMA's load of the box at `coords` (C text of i32s) of the tensor map at generic
    address `tensor_map` into the shared address `dst`, completing its bytes on the
    mbarrier at shared address `bar`."""
    rank = len(coords)
    op = TMA.ptx["load"].format(rank=rank)
    return ptx_sm90.asm([f'"{op} [%0], [%1, {_box(2, rank)}], [%{2 + rank}];"'], [],
                [f'"r"({dst})', f'"l"({tensor_map})'] + [f'"r"({c})' for c in coords]
                + [f'"r"({bar})'])


def tma_store(tensor_map, coords, src):
    """TMA's store of the box at `coords` of the tensor map at generic address
    `tensor_map` from the shared address `src`, in the thread's open bulk group."""
    rank = len(coords)
    op = TMA.ptx["store"].format(rank=rank)
    return ptx_sm90.asm([f'"{op} [%0, {_box(2, rank)}], [%1];"'], [],
                [f'"l"({tensor_map})', f'"r"({src})'] + [f'"r"({c})' for c in coords])


def bulk_load(dst, src, nbytes, bar):
    """TMA's one-dimensional copy of `nbytes` bytes from the global address `src` into the
    shared address `dst`, completing its bytes on the mbarrier at shared address `bar`."""
    return ptx_sm90.asm([f'"{TMA.ptx["bulk_load"]} [%0], [%1], %2, [%3];"'], [],
                        [f'"r"({dst})', f'"l"({src})', f'"r"({nbytes})', f'"r"({bar})'])


def bulk_commit():
    """`cp.async.bulk.commit_group`."""
    return ptx_sm90.statement(TMA.ptx["commit"])


def bulk_wait(n, read):
    """`cp.async.bulk.wait_group{.read} n`."""
    return ptx_sm90.statement(TMA.ptx["wait"].format(read=".read" if read else "", n=n))
