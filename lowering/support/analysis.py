"""What lowering knows about a scheduled fusion before it builds anything.

* The exact map: which axes of different tensors always take the same index (mapped
  through an expression's root map, or produced by the same split/merge of exactly mapped
  axes), as nvFuser's ComputeAtMap. Sync analysis uses it to prove that the thread which
  writes an element of a shared tensor is the thread that reads it.
* What a tensor is to lowering: an async or vector copy, an mma operand or fragment, live
  or dead code.
* The schedules lowering refuses (check_supported, which pass validate runs), each with a
  ScheduleError naming the tensor, the axis and a way out.

lowering.context holds these facts of one fusion once computed (the exact map, the live
tensors, the parallel extents) and the index helpers; it sits between the fusion IR and the
passes so that no pass re-derives them.
"""

from fuserir.ir.exprs import LoadStoreOp, MatmulOp, row_chains
from fuserir.ir.graph import ancestors
from fuserir.ir.tensor import MemoryType, TensorView
from fuserir.errors import ScheduleError
from fuserir.instructions import (MMA_M16N8K16, SWIZZLE_ATOM_BYTES, TMA_STRIDE_ALIGN,
                                  WGMMA)
from fuserir.ir.iterdomain import ParallelType, Split, history

from .. import kir

THREAD_TYPES = (ParallelType.TIDx, ParallelType.TIDy, ParallelType.TIDz)
BLOCK_TYPES = (ParallelType.BIDx, ParallelType.BIDy, ParallelType.BIDz)
LOOP_TYPES = (ParallelType.serial, ParallelType.unroll, ParallelType.vectorize)
MMA = ParallelType.mma
WARP = 32            # lanes of a warp: the threads one mma instruction tile spans
WARP_GROUP = 128     # the threads one wgmma instruction tile spans


class UnionFind:
    def __init__(self):
        self.parent = {}

    def find(self, x):
        self.parent.setdefault(x, x)
        root = x
        while self.parent[root] is not root:
            root = self.parent[root]
        while self.parent[x] is not root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra is rb:
            return False
        self.parent[rb] = ra
        return True


def build_exact_map(fusion):
    """Union-find over every axis of the fusion's tensors (see module docstring)."""
    uf = UnionFind()
    transforms = []
    for tv in fusion.tensors:
        for a in tv.root + tv.logical + tv.loop:
            uf.find(a)
        transforms.extend(history(tv.loop + tv.logical))
    for expr in fusion.exprs:
        for producer in expr.tensor_inputs:
            shifted = expr.index_maps(producer)    # (a slice's axis: another index)
            for c_axis, p_axis in expr.root_map(producer).items():
                if c_axis.is_broadcast == p_axis.is_broadcast and p_axis not in shifted:
                    uf.union(c_axis, p_axis)
    changed = True
    while changed:
        changed = False
        seen = {}
        for t in transforms:
            params = (t.factor, t.inner_split) if isinstance(t, Split) else ()
            key = (type(t), params, tuple(id(uf.find(i)) for i in t.inputs))
            other = seen.setdefault(key, t)
            if other is not t:
                for a, b in zip(t.outputs, other.outputs):
                    changed |= uf.union(a, b)
    return uf


def is_async_copy(tv):
    """Is tv a cache_after(shared, async_copy=True) copy (lowered to cp.async)?"""
    return isinstance(tv.definition, LoadStoreOp) and tv.definition.async_copy


def is_tma_copy(tv):
    """Is tv a TMA copy: a cache_after(shared, tma=True) (lowered to TMA box loads), or a
    global tensor that its cache_before(shared, tma=True) is copied into (TMA box
    stores: is_tma_store)?"""
    return isinstance(tv.definition, LoadStoreOp) and tv.definition.tma


def is_tma_store(tv):
    """Is tv a global tensor stored by TMA from its shared cache (cache_before(shared,
    tma=True))?"""
    return is_tma_copy(tv) and tv.memory_type is MemoryType.global_


def tma_box_axes(tv):
    """The loop axes of a TMA copy that are no loops: a load's box (its two innermost); a
    store's boxes, every axis past its staged tile's compute-at position (one thread
    issues them all, a statement per box)."""
    if is_tma_store(tv):
        return tv.loop[tv.definition.inputs[0].compute_at_pos or 0:]
    return tv.loop[-2:]


def layout_owner(tv):
    """The tensor whose loop axes lay out tv's buffer: tv itself, or, for the shared tile
    a TMA store copies out, the store (the tile holds its boxes box after box, as the
    hardware reads them; its own loops are the ones that write it: the accumulator's
    fragment layout)."""
    return next((c for c in tv.fusion.consumers(tv) if is_tma_store(c)
                 and c.definition.inputs[0] is tv), tv)


def shared_alignment(tv):
    """The byte alignment of tv's shared buffer: a swizzle atom (1024 bytes) for a tile
    TMA or wgmma reads or writes (their swizzle is a function of the pool offset, which
    repeats every atom), else 16."""
    wgmma_operand = any(mma_kind(c) == "wgmma" for c in tv.fusion.consumers(tv))
    return SWIZZLE_ATOM_BYTES if is_tma_copy(tv) or wgmma_operand or \
        layout_owner(tv) is not tv else 16


def vector_copy_width(tv):
    """Elements per access of a vectorized copy (a LoadStoreOp between two memories of
    global, shared and registers, same dtype, innermost loop axis vectorized to 4, 8 or
    16 bytes), lowered as one vector load and store; 0 where tv is not one (a vectorized
    compute op stays an unrolled loop of element accesses). A global side is what the
    executable checks at run time: a whole number of vectors per row, so no vector
    straddles the end of a row (a copy between shared memory and registers is narrowed
    with the global copy that filled its shared side: narrow_vectors)."""
    expr = tv.definition
    if not isinstance(expr, LoadStoreOp) or expr.async_copy or expr.ldmatrix or \
            not tv.loop or tv.loop[-1].parallel is not ParallelType.vectorize:
        return 0
    producer, width = expr.inputs[0], tv.loop[-1].extent
    memories = {tv.memory_type, producer.memory_type}
    if producer.dtype is not tv.dtype or len(memories) != 2:
        return 0
    return width if width > 1 and width * tv.dtype.itemsize in (4, 8, 16) else 0


def row_regions(tv):
    """fuserir.ir.exprs.row_chains of tv (a cat, pad or slice of the rows over view
    chains: unary ops, casts and slices down to a fusion input) where none of the chains'
    tensors has a schedule of its own; else None."""
    regions = row_chains(tv)
    if regions is None or any(c.loop != c.root for _, chain in regions if chain
                              for c in chain[:-1]):
        return None
    return regions


def vector_select_width(tv):
    """Elements per access of a vectorized cat, pad or slice along the innermost axis into
    registers (its output local, its innermost loop axis vectorized; row_regions), lowered
    as an if per boundary between regions and, in the region holding the vector, one
    vector load of the fusion input under it with the ops between computed in registers
    (or the pad value); 0 where tv is not one, or a vector of some fusion input is not 4,
    8 or 16 bytes. The fusion inputs are what the executable checks: each row a whole
    number of vectors, and the offsets lowering could not prove multiples of the width
    (a slice's start, a boundary) checked per call (kernel.vector_offsets), so no vector
    straddles a boundary."""
    if tv.memory_type is not MemoryType.local or not tv.loop or \
            tv.loop[-1].parallel is not ParallelType.vectorize:
        return 0
    regions = row_regions(tv)
    width = tv.loop[-1].extent
    if regions is None or width < 2 or any(
            chain is not None and width * chain[-1].dtype.itemsize not in (4, 8, 16)
            for _, chain in regions):
        return 0
    return width


def select_leaves(tv):
    """The fusion inputs a vectorized cat, pad or slice loads vectors of."""
    return [chain[-1] for _, chain in row_regions(tv) if chain is not None]


def absorbed_by_vector_selects(fusion):
    """The tensors vectorized cats, pads and slices compute themselves (their view chains
    but the fusion inputs): nothing else reads them, so nothing else computes them."""
    found = set()
    for tv in fusion.tensors:
        if vector_select_width(tv):
            found |= {t for _, chain in row_regions(tv) if chain for t in chain[:-1]}
    return found


def async_vector_bytes(tv):
    """Bytes one cp.async of tv moves: its vector (innermost vectorized axis) or one
    element."""
    last = tv.loop[-1] if tv.loop else None
    width = last.extent if last is not None and last.parallel is ParallelType.vectorize \
        else 1
    return width * tv.dtype.itemsize


def mma_positions(tv):
    return [i for i, a in enumerate(tv.loop) if a.parallel is MMA]


def mma_kind(tv):
    """How a tensor with mma axes is lowered: "mma" (the matmul: mma.sync on ldmatrix
    fragments), "wgmma" (the matmul on shared operands: wgmma), "ldmatrix" (an operand
    fragment cache), "fragment" (a tensor in the accumulator's fragment layout, e.g. the
    epilogue's cast), or None (no mma axes)."""
    if not mma_positions(tv):
        return None
    if isinstance(tv.definition, MatmulOp):
        shared = all(t.memory_type is MemoryType.shared for t in tv.definition.inputs)
        return "wgmma" if shared else "mma"
    if isinstance(tv.definition, LoadStoreOp) and tv.definition.ldmatrix:
        return "ldmatrix"
    return "fragment"


def is_a_operand(tv):
    """Is tv (an ldmatrix operand cache) the A operand of the matmul that reads it?"""
    return tv.fusion.consumers(tv)[0].definition.inputs[0] is tv


def is_warp_group_tile(tv):
    """Is tv's instruction tile a warp group's (wgmma: its first mma axis spans the 64
    rows of m64nNk16), not a warp's (mma.sync: 16 rows)?"""
    positions = mma_positions(tv)
    return bool(positions) and tv.loop[positions[0]].extent == WGMMA.m


def instruction_threads(tv):
    """The threads one instruction tile of tv spans: a warp group's or a warp's."""
    return WARP_GROUP if is_warp_group_tile(tv) else WARP


def fragment_size(tv):
    """Elements of one instruction tile each lane holds (16x8 f32 -> 4, 16x16 f16 -> 8,
    a wgmma 64 x n accumulator -> n / 2)."""
    size = 1
    for i in mma_positions(tv):
        if not tv.loop[i].is_reduction:
            size *= tv.loop[i].extent
    return size // instruction_threads(tv)


def live_tensors(fusion):
    """The tensors some output depends on (others are dead code: nothing computes them),
    less those a vectorized cat, pad or slice computes itself
    (absorbed_by_vector_selects)."""
    live = set(fusion.outputs)
    for out in fusion.outputs:
        live |= {n for n in ancestors(fusion.graph, out) if isinstance(n, TensorView)}
    return live - absorbed_by_vector_selects(fusion)


def _bound_class(ctx, tv, ptype, data_only):
    """(position, exact class of the loop) of tv's axis bound to ptype, or None. An axis
    shared with a consumer through compute-at is identified by the consumer's loop."""
    for i, axis in enumerate(tv.loop):
        if ctx.concrete_axis(tv, i).parallel is ptype and not axis.is_broadcast:
            if data_only and axis.is_reduction:
                continue
            return i, ctx.exact_class(ctx.concrete_axis(tv, i))
    return None


def _check_private_data(ctx, tv):
    """A local tensor lives in one thread's registers and a shared one in one block: a
    consumer must read each element on the thread (block) that holds it."""
    if tv.is_input:
        return
    if tv.is_output:
        _check_output_read_back(ctx, tv)
        return
    private = BLOCK_TYPES + (THREAD_TYPES if tv.memory_type.value == "local" else ())
    for c in ctx.fusion.consumers(tv):
        for ptype in private:
            held = _bound_class(ctx, tv, ptype, data_only=True)
            if held is None:
                continue
            read = _bound_class(ctx, c, ptype, data_only=False)
            if read is None or read[1] != held[1]:
                where = "shared memory of one block" if ptype in BLOCK_TYPES and \
                    tv.memory_type.value == "shared" else f"{tv.memory_type} memory"
                raise ScheduleError(
                    f"{c.name} reads {tv.name}, which lives in {where} with axis {held[0]} "
                    f"bound to {ptype}, but {c.name} does not bind the same axis to {ptype}: "
                    f"a {'thread' if ptype in THREAD_TYPES else 'block'} would read values "
                    f"another one holds; bind matching axes, or put {tv.name} in "
                    f"{'shared' if ptype in THREAD_TYPES else 'global'} memory")


def _check_output_read_back(ctx, tv):
    """An output read again in the same kernel: no barrier orders global memory between
    threads, so each element must be read by the very thread that wrote it."""
    used = [p for p in THREAD_TYPES + BLOCK_TYPES if ctx.bound[p]]
    for c in ctx.fusion.consumers(tv):
        for ptype in used:
            held = _bound_class(ctx, tv, ptype, data_only=True)
            read = _bound_class(ctx, c, ptype, data_only=False)
            if held is None or read is None or read[1] != held[1]:
                raise ScheduleError(
                    f"{c.name} reads the output {tv.name} in the kernel that writes it, from "
                    f"other threads along {ptype} than wrote it; nothing orders global "
                    f"memory between them: compute {c.name} in another kernel (automatic "
                    f"schedules segment here) or bind matching axes")


def reduction_thread(ctx, tv):
    """The thread index tv's block reduction combines over (TIDx, TIDy), or None."""
    for i, axis in enumerate(tv.loop):
        parallel = ctx.concrete_axis(tv, i).parallel
        if axis.is_reduction and parallel in THREAD_TYPES:
            return parallel
    return None


def warp_reduces_alone(ctx, kernel, tv):
    """Does tv's block reduction combine one warp only (over TIDx, blockDim.x 32: a warp
    a row), so that its shuffles leave the result in every lane without a scratch?"""
    block_x = kernel.launch.block[0]
    return reduction_thread(ctx, tv) is ParallelType.TIDx and \
        isinstance(block_x, kir.Const) and block_x.value == WARP


class StoreInfo:
    """What the predicate pass needs to know about a Store: the tensor whose loop nest it
    sits in, which part of a reduction it is, and whether it writes shared/global memory."""

    def __init__(self, tv, role, root_index, memory):
        self.tv = tv
        self.role = role            # "compute", "init", "accumulate", "final"
        self.root_index = root_index
        self.memory = memory


def _check_index_maps(ctx, tv):
    """A tensor read through an index map (a slice, pad or cat reads another element than
    its own) is fully inlined into that reader or computed in loops of its own: a loop
    shared part way would run over the reader's indices, not the elements it reads."""
    pos = tv.compute_at_pos or 0
    for c in ctx.fusion.consumers(tv):
        if pos and c.definition.index_maps(tv) and not (
                pos == tv.ndim and tv.compute_at_consumer is c):
            raise ScheduleError(
                f"{tv.name} is computed at position {pos} of {tv.compute_at_consumer.name}, "
                f"but {c.name} reads it through a {c.definition.op} (other elements than its "
                f"own); inline {tv.name} fully into {c.name} (compute_at(-1)) or compute it "
                "at position 0")


def check_supported(ctx):
    """Refuse schedules this lowering does not support yet, with a clear ScheduleError."""
    for tv in ctx.fusion.tensors:
        if tv.is_input or tv not in ctx.live:
            continue
        for i, axis in enumerate(tv.loop):
            concrete = ctx.concrete_axis(tv, i)
            if axis.is_reduction and concrete.parallel in BLOCK_TYPES and not (
                    tv.grid_reduction and concrete.parallel is ParallelType.BIDz):
                hint = ("a grid reduction runs over BIDz" if tv.grid_reduction else
                        "or mark it serial_grid_reduction() and bind BIDz")
                raise ScheduleError(f"{tv.name}: reduction axis {i} is bound to "
                                    f"{concrete.parallel}; grid reductions need rfactor "
                                    f"({hint})")
            if axis.is_reduction and concrete.parallel is ParallelType.TIDz:
                raise ScheduleError(f"{tv.name}: reduction axis {i} is bound to TIDz; block "
                                    "reductions are supported over TIDx or TIDy")
        bound = [ctx.concrete_axis(tv, i).parallel for i, a in enumerate(tv.loop)
                 if a.is_reduction and ctx.concrete_axis(tv, i).parallel in THREAD_TYPES]
        if len(bound) > 1:
            raise ScheduleError(f"{tv.name}: reduction axes are bound to "
                                f"{' and '.join(map(str, bound))}; a block reduction combines "
                                "one thread index (merge the axes first)")
        if not tv.is_output and tv.memory_type.value == "global":
            raise ScheduleError(f"{tv.name}: a global intermediate ends a kernel, and "
                                "lower() builds one kernel; compile the fusion with "
                                "codegen.compile, which cuts it into a kernel per global "
                                "intermediate, or keep the tensor in local or shared memory")
        _check_private_data(ctx, tv)
        pos = tv.compute_at_pos or 0
        for c in ctx.fusion.consumers(tv):
            loops = {ctx.concrete(c, j) for j in range(c.ndim)}
            for i in range(pos):
                if ctx.concrete(tv, i) not in loops:
                    raise ScheduleError(
                        f"{tv.name} is computed at position {pos} of "
                        f"{tv.compute_at_consumer.name}, but its consumer {c.name} does not "
                        f"run inside loop {i} of it; compute {c.name} inside those loops too "
                        f"or compute {tv.name} at a lower position")
        _check_index_maps(ctx, tv)
        _check_mma(ctx, tv)
        _check_grid_reduction(ctx, tv)
        if tv.circular_buffer_stages is not None and not (
                is_async_copy(tv) or is_tma_copy(tv) or tv.warp_specialized is not None):
            raise ScheduleError(f"{tv.name}: only async copies (cache_after(shared, "
                                "async_copy=True) or tma=True) and warp-specialized copies "
                                "are circular-buffered")
        if is_tma_store(tv):
            _check_tma_store(ctx, tv)
        elif is_tma_copy(tv) and tv.circular_buffer_stages is None:
            raise ScheduleError(f"{tv.name}: a TMA copy is loaded by a producer warp group: "
                                "circular-buffer it (circular_buffer(stages, "
                                "warp_specialize=TIDy))")


def _check_tma_store(ctx, tv):
    """A TMA store's loops past its staged tile's position are the tile's boxes, which one
    thread issues and the tile holds exactly, box after box: the tile is computed in the
    store's loops, and those axes are serial loops of constant extents that split the
    tile evenly. (Each box's own shape: lowering.indexing.hopper_operands.tma_box.)"""
    tile = tv.definition.inputs[0]
    pos = tile.compute_at_pos or 0
    row = tv.shape[-1]
    if tv.rank > 1 and isinstance(row, int) and row * tv.dtype.itemsize % TMA_STRIDE_ALIGN:
        raise ScheduleError(
            f"{tv.name}: its rows of {row} x {tv.dtype} lie {row * tv.dtype.itemsize} bytes "
            f"apart; a TMA store's tensor map needs rows a multiple of {TMA_STRIDE_ALIGN} "
            "bytes apart (store it by the threads' copy)")
    if tile.compute_at_consumer is not tv or tv.ndim - pos < 2:
        raise ScheduleError(
            f"{tv.name}: a TMA store copies out the tile it is cached in, box by box: "
            f"compute {tile.name} at {tv.name} (compute_at), two or more of {tv.name}'s "
            "loop axes past that position (the boxes, the two innermost one box)")
    for axis in tv.loop[pos:]:
        if axis.parallel not in (ParallelType.serial, ParallelType.unroll):
            raise ScheduleError(
                f"{tv.name}: its loop axis {axis} is one of the TMA boxes of {tile.name}, "
                f"which one thread stores; it cannot be bound to {axis.parallel}")
        if not isinstance(axis.extent, int):
            raise ScheduleError(f"{tv.name}: its loop axis {axis} is one of the TMA boxes "
                                f"of {tile.name}; their extents must be constants")
    shared = {id(t) for t in history(tv.loop[:pos])}
    for t in history(tv.loop):
        if isinstance(t, Split) and id(t) not in shared and not (
                isinstance(t.input.extent, int) and isinstance(t.factor, int)
                and t.input.extent % t.factor == 0):
            raise ScheduleError(
                f"{tv.name}: the TMA boxes of {tile.name} must cover it exactly, but "
                f"{t.input} is split by {t.factor}: the last box would store elements "
                "past the tile")




def _check_grid_reduction(ctx, tv):
    if not tv.grid_reduction:
        return
    bound = [i for i, a in enumerate(tv.loop) if a.is_reduction
             and ctx.concrete_axis(tv, i).parallel is ParallelType.BIDz]
    if not bound:
        raise ScheduleError(f"{tv.name}: serial_grid_reduction() needs a reduction axis "
                            "bound to BIDz (the split index of the CTAs that take turns)")
    for other in ctx.live:
        if other is tv or other.is_input:
            continue
        split_axes = {id(tv.loop[i]) for i in bound}
        if any(ctx.concrete_axis(other, i).parallel is ParallelType.BIDz
               and id(ctx.concrete_axis(other, i)) not in split_axes
               for i in range(other.ndim)):
            raise ScheduleError(f"{other.name} binds BIDz, which the {tv.grid_reduction} "
                                f"grid reduction of {tv.name} uses for its split index")
        if other.is_output and not ctx.fusion.depends_on(other, tv):
            raise ScheduleError(f"{other.name} does not depend on {tv.name}: in a kernel "
                                f"with a {tv.grid_reduction} grid reduction only the last "
                                "CTA of each tile computes what follows the reduction")


# Instruction tiles by kind, from the descriptors: the mma's (m, n, k), its A operand
# (m x k), its B operand (n x k, or two n tiles in one ldmatrix.x4), its accumulator (m x n);
# a wgmma's m64nNk16 (any n of WGMMA.widths) and its accumulator 64 x n
_I = MMA_M16N8K16
_M, _N, _K = _I.shape
_MMA_SHAPES = {"mma": [(_M, _N, _K)], "ldmatrix_a": [(_I.a.rows, _I.a.cols)],
               "ldmatrix_b": [(_N, _K), (2 * _N, _K)], "fragment": [(_I.c.rows, _I.c.cols)],
               "wgmma": [WGMMA.shape(n) for n in WGMMA.widths],
               "wgmma fragment": [WGMMA.shape(n)[:2] for n in WGMMA.widths]}


def _check_mma(ctx, tv):
    """The fixed instruction tiles lowering knows: mma axes innermost, in this order."""
    kind = mma_kind(tv)
    if kind is None:
        return
    positions = mma_positions(tv)
    extents = tuple(tv.loop[i].extent for i in positions)
    if kind == "ldmatrix":
        kind = "ldmatrix_a" if is_a_operand(tv) else "ldmatrix_b"
    if kind == "fragment" and is_warp_group_tile(tv):
        kind = "wgmma fragment"
    expected = _MMA_SHAPES[kind]
    where = f"{tv.name}: mma axes {positions} with extents {list(extents)}"
    if positions != list(range(tv.ndim - len(positions), tv.ndim)):
        raise ScheduleError(f"{where} must be the innermost loop axes")
    if extents not in expected:
        if kind.startswith("wgmma"):
            shape = "[64, n, 16]" if kind == "wgmma" else "[64, n]"
            raise ScheduleError(f"{where}; the {WGMMA.name} instruction tile needs {shape} "
                                f"here, n a multiple of 8 up to 256 ({kind})")
        shapes = " or ".join(str(list(e)) for e in expected)
        raise ScheduleError(f"{where}; the {_I.shape_name} instruction tile needs {shapes} here "
                            f"({kind.replace('_', ' ')})")
    threads = instruction_threads(tv)
    if tuple(ctx.bound[ParallelType.TIDx]) != (threads,):
        unit = "a warp group (128)" if threads == WARP_GROUP else "a warp (32)"
        raise ScheduleError(f"{tv.name}: with {'wgmma' if threads == WARP_GROUP else 'tensor cores'} "
                            f"TIDx is the thread of {unit}: bind "
                            f"{'warp groups' if threads == WARP_GROUP else 'warps'} to TIDy/TIDz, "
                            f"not TIDx")
    if tv.memory_type.value == "global" and kind.startswith("ldmatrix"):
        raise ScheduleError(f"{tv.name}: {kind.replace('_', ' ')} results live in "
                            "registers; compute them into a local tensor")
    if kind in ("fragment", "wgmma fragment"):
        mine = [ctx.exact_class(tv.loop[i]) for i in positions]
        for p in tv.definition.tensor_inputs:
            if mma_kind(p) in ("mma", "wgmma", "fragment") and \
                    p.memory_type.value == "local":
                theirs = [ctx.exact_class(p.loop[i]) for i in mma_positions(p)
                          if not p.loop[i].is_reduction]
                if theirs != mine:
                    raise ScheduleError(f"{where} do not map to the mma axes of "
                                        f"{p.name}, whose registers it reads: schedule "
                                        "both with the same transforms")
    if kind == "mma":
        a, b = tv.definition.inputs
        for operand in (a, b):
            if mma_kind(operand) != "ldmatrix":
                raise ScheduleError(f"{tv.name}: an mma reads its operands from ldmatrix "
                                    f"caches, but {operand.name} is not one (use "
                                    f"cache_after(local, ldmatrix=True))")
