"""CUDA emission of the sm_90 statements (kir.hopper): HopperEmitter, a mixin of
codegen.cuda.emitter's _Emitter, holds one rule s_<Stmt> per statement of kir.hopper
(TMA's are codegen.cuda.tma's), the
tensor-map kernel parameters and the shared pool's declaration when the kernel needs it
1024-byte aligned. It sits in its own module so that the emitter stays a readable frame
for the sm_80 statements; the PTX text is codegen.cuda.ptx_sm90's.

Each rule checks what it can see before it spells (memories, dtypes, the descriptors'
legal shapes and counts, the tensor maps' boxes and swizzles, constant alignment) and
refuses the rest with a CodegenError naming the statement:

    Wgmma           f32 local accumulators (n / 2 per thread), 16-bit B in shared memory
                    and A in shared memory or registers (4 registers packed from 8
                    halves); each shared operand's 64-bit matrix descriptor is built in
                    device code by the preamble's wgmma_desc from its first element's
                    address and the constant layout word MatrixDescriptor.encode gives
                    (start 0); `accumulate` is the scale-d predicate, set inside the asm
                    block from an i32 operand
    StMatrix        registers packed from consecutive pairs of the source fragment
    mbarriers       element `index` of an i64 shared buffer, at its shared address;
                    MbarrierWait spins in C on the preamble's mbar_try_wait
    waits, fences   their reasons above them, as Barrier's
"""

from fuserir.dtypes import DataType
from fuserir.instructions import (NAMED_BARRIER_IDS, SETMAXNREG_COUNTS, STMATRIX,
                                  SWIZZLE_ATOM_BYTES, SWIZZLE_BYTES, TMA_BOX_MAX, TMA_RANKS,
                                  WGMMA, MatrixDescriptor)
from lowering import kir

from . import ptx_sm90
from .expressions import _bare, _where
from .names import _HALF, _INT

# statements whose shared-memory addresses are swizzled by pool offset
_SWIZZLED = (kir.Wgmma, kir.TmaLoad, kir.TmaStore)
UNBOUNDED_THREADS = 256    # 65536 registers / 256 threads: the 255 a thread may use, fit


class HopperEmitter:
    """The sm_90 statements' rules; the emitter's helpers (check_memory, fragment,
    packed_registers, emit_synchronizing, ...) are _Emitter's."""

    # -- the frame: the pool, the tensor-map parameters -------------------------------------
    def pool_declaration(self):
        """The dynamic shared pool's lines: 1024-byte aligned where a statement's addresses
        are swizzled (TMA boxes, wgmma operands), else as sm_80 kernels have it."""
        lines = ["  // Shared buffers: one dynamic pool; each buffer sits at its byte offset "
                 "(buffers that overlap alias)."]
        if not any(isinstance(s, _SWIZZLED) for s in kir.walk(self.kernel.body)):
            return lines + ["  extern __shared__ __align__(16) unsigned char smem[];"]
        return lines + [f"  // {SWIZZLE_ATOM_BYTES}-byte aligned: TMA and wgmma swizzles "
                        "are functions of the pool offset.",
                        f"  extern __shared__ __align__({SWIZZLE_ATOM_BYTES}) "
                        "unsigned char smem[];"]

    def launch_bounds(self):
        """`__launch_bounds__(threads, 1) ` where the kernel reallocates registers
        (setmaxnreg is ignored without it: ptxas C7508; the block must be a constant size
        then); `__launch_bounds__(threads) ` where a constant block has more than
        UNBOUNDED_THREADS threads, so that ptxas keeps each thread's registers within what
        the block can have (65536 / threads: 170 for 384) instead of the launch failing
        (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES); else "" (a block of at most 256 threads
        can always have the 255 registers a thread may use)."""
        reallocates = any(isinstance(s, kir.SetMaxNReg) for s in kir.walk(self.kernel.body))
        block = self.kernel.launch.block if self.kernel.launch else None
        constant = bool(block) and all(isinstance(e, kir.Const) for e in block)
        if reallocates and not constant:
            raise self.error("a kernel that issues setmaxnreg needs a constant block size "
                             "(its __launch_bounds__)")
        if not constant:
            return ""
        threads = 1
        for e in block:
            threads *= int(e.value)
        if reallocates:
            return f"__launch_bounds__({threads}, 1) "
        return f"__launch_bounds__({threads}) " if threads > UNBOUNDED_THREADS else ""

    def tensor_map_params(self):
        """(declaration, comment) of each of kernel.tensor_maps, checked."""
        params = []
        for m in self.kernel.tensor_maps:
            if not isinstance(m, kir.TensorMap):
                raise self.error(f"tensor map {m!r} is not a kir.TensorMap")
            if not any(m.tensor is p for p in self.kernel.tensor_params):
                raise self.error(f"tensor map {m.name} is over {m.tensor.buffer.name}, not "
                                 "one of the kernel's tensor parameters")
            if m.rank not in TMA_RANKS:
                raise self.error(f"tensor map {m.name} has rank {m.rank}; TMA takes ranks "
                                 f"{TMA_RANKS[0]} to {TMA_RANKS[-1]} (coordinates c0, c1[, c2])")
            if len(m.sizes) != m.rank or len(m.strides) != m.rank - 1:
                raise self.error(f"tensor map {m.name} of rank {m.rank} has {len(m.sizes)} "
                                 f"sizes and {len(m.strides)} strides (rank and rank - 1)")
            for b in m.box:
                if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= TMA_BOX_MAX:
                    raise self.error(f"tensor map {m.name} box extent {b!r} is not 1.."
                                     f"{TMA_BOX_MAX}")
            if m.swizzle not in kir.SWIZZLES:
                raise self.error(f"tensor map {m.name} swizzle {m.swizzle!r} is not one of "
                                 f"{', '.join(kir.SWIZZLES)}")
            span = m.box[0] * m.dtype.itemsize
            if m.swizzle != "none" and span != SWIZZLE_BYTES[m.swizzle]:
                raise self.error(f"tensor map {m.name}: a {m.swizzle} swizzled box's "
                                 f"dimension 0 spans {SWIZZLE_BYTES[m.swizzle]} bytes, got "
                                 f"{m.box[0]} x {m.dtype} = {span}")
            self.need("tensor_map")
            box = "x".join(str(b) for b in m.box)
            params.append((f"const __grid_constant__ TensorMap {self.ident(m)}",
                           f"tensor map of {m.tensor.buffer.name}, box {box}, swizzle "
                           f"{m.swizzle}"))
        return params

    # -- operands --------------------------------------------------------------------------
    def i32_operand(self, expr, what):
        """C text of integer `expr` as an i32 (an "r" operand)."""
        if expr is None or expr.dtype not in _INT:
            raise self.error(f"{what} must be an integer expression, got "
                             f"{_where(expr) if expr is not None else None}")
        text = self.expr(expr)
        return _bare(text) if expr.dtype is DataType.i32 else f"(i32){text}"

    def shared_address(self, buffer, index, role):
        """The 32-bit shared address of `buffer[index]`."""
        if index is None:
            raise self.error(f"{role} {buffer.name} has no index")
        self.need("smem_addr")
        return f"smem_addr(&{self.subscript(buffer, index)})"

    def check_dtype(self, buffer, dtype, role):
        """The operand `buffer` holds `dtype`, the instruction's."""
        if buffer.dtype is not dtype:
            raise self.error(f"{role} {buffer.name} is {buffer.dtype}, the instruction "
                             f"takes {dtype}")

    def matrix_descriptor(self, buffer, index, layout, role):
        """C text of the u64 descriptor of a wgmma operand in shared memory."""
        if not isinstance(layout, kir.MatrixLayout):
            raise self.error(f"{role} {buffer.name} is in shared memory and needs a "
                             f"MatrixLayout, got {layout!r}")
        if layout.swizzle not in kir.SWIZZLES:
            raise self.error(f"{role} layout swizzle {layout.swizzle!r} is not one of "
                             f"{', '.join(kir.SWIZZLES)}")
        for value in (layout.leading, layout.stride):
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.error(f"{role} layout byte offsets must be ints, got {value!r}")
        try:
            word = MatrixDescriptor(0, layout.leading, layout.stride, layout.swizzle).encode()
        except ValueError as e:
            raise self.error(f"{role} layout: {e}") from None
        if index is None:
            raise self.error(f"{role} {buffer.name} has no index")
        self.need("wgmma_desc")
        return f"wgmma_desc(&{self.subscript(buffer, index)}, {word:#x}ull)"

    def mbarrier(self, buffer, index, what):
        """The shared address of the mbarrier buffer[index] (an i64 shared buffer)."""
        self.check_memory(buffer, kir.Memory.shared, f"{what} mbarrier")
        if buffer.dtype is not DataType.i64:
            raise self.error(f"{what} mbarrier {buffer.name} is {buffer.dtype}; an mbarrier "
                             "is an element of an i64 shared buffer")
        return self.shared_address(buffer, index, f"{what} mbarrier")

    # -- warp-group MMA ----------------------------------------------------------------------
    def s_Wgmma(self, s, depth):
        n = s.n
        if isinstance(n, bool) or n not in WGMMA.widths:
            raise self.error(f"wgmma n = {n!r} is not a multiple of 8 from "
                             f"{WGMMA.widths[0]} to {WGMMA.widths[-1]}")
        if s.dtype not in WGMMA.inputs:
            raise self.error(f"wgmma inputs must be {' or '.join(t.value for t in WGMMA.inputs)}"
                             f", got {s.dtype}")
        self.check_memory(s.d, kir.Memory.local, "wgmma accumulator")
        self.check_dtype(s.d, WGMMA.accumulator, "wgmma accumulator")
        self.check_memory(s.b, kir.Memory.shared, "wgmma B")
        self.check_dtype(s.b, s.dtype, "wgmma B")
        self.check_memory(s.a, (kir.Memory.shared, kir.Memory.local), "wgmma A")
        self.check_dtype(s.a, s.dtype, "wgmma A")
        if s.a.memory is kir.Memory.local:
            if s.trans_a or s.a_layout is not None:
                raise self.error(f"wgmma A {s.a.name} is in registers: it takes no a_layout "
                                 "and trans_a False")
            a = self.packed_registers(s.a, s.a_index, WGMMA.a().count, "wgmma A")
        else:
            a = self.matrix_descriptor(s.a, s.a_index, s.a_layout, "wgmma A")
        b = self.matrix_descriptor(s.b, s.b_index, s.b_layout, "wgmma B")
        if s.accumulate is None:
            scale_d = "1"
        elif s.accumulate.dtype is not DataType.bool:
            raise self.error(f"wgmma accumulate {_where(s.accumulate)} is "
                             f"{s.accumulate.dtype}, not bool")
        else:
            scale_d = f"(i32){self.expr(s.accumulate)}"
        count = WGMMA.d(n).count
        d = [self.fragment(s.d, s.d_index, j, count, "wgmma accumulator")
             for j in range(count)]
        self.emit_lines(depth, ptx_sm90.wgmma(n, s.dtype, d, a, b, scale_d, s.trans_a,
                                              s.trans_b), self.describe(s))

    def s_WgmmaFence(self, s, depth):
        self.emit(depth, ptx_sm90.wgmma_fence(), s.label)

    def s_WgmmaCommit(self, s, depth):
        self.emit(depth, ptx_sm90.wgmma_commit(), s.label)

    def s_WgmmaWait(self, s, depth):
        n = self.group_count(s.n, "wgmma")
        self.emit_synchronizing(depth, s, ptx_sm90.wgmma_wait(n), "wait")

    def group_count(self, n, what):
        """A wait's group count n, checked (a non-negative int)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise self.error(f"{what} wait_group takes a non-negative int, got {n!r}")
        return n

    # -- stmatrix, setmaxnreg, named barriers, proxy fences -------------------------------
    def s_StMatrix(self, s, depth):
        if isinstance(s.num, bool) or s.num not in STMATRIX.counts:
            raise self.error(f"stmatrix takes 1, 2 or 4 matrices, got {s.num!r}")
        if not isinstance(s.trans, bool):
            raise self.error(f"stmatrix trans must be a bool, got {s.trans!r}")
        self.check_memory(s.dst, kir.Memory.shared, "stmatrix destination")
        self.check_memory(s.src, kir.Memory.local, "stmatrix source")
        for role, b in (("destination", s.dst), ("source", s.src)):
            if b.dtype not in _HALF:
                raise self.error(f"stmatrix {role} {b.name} is {b.dtype}; stmatrix moves "
                                 "16-bit elements (f16 or bf16)")
        if s.src.dtype is not s.dst.dtype:
            raise self.error(f"stmatrix from {s.src.dtype} {s.src.name} into {s.dst.dtype} "
                             f"{s.dst.name} (lowering must keep one element type)")
        address = self.shared_address(s.dst, s.address, "stmatrix destination")
        registers = self.packed_registers(s.src, s.src_index, 2 * s.num, "stmatrix source")
        self.emit_lines(depth, ptx_sm90.stmatrix(s.num, s.trans, address, registers),
                        self.describe(s))

    # -- thread-block clusters ---------------------------------------------------------------
    def s_ClusterBarrier(self, s, depth):
        self.emit(depth, ptx_sm90.cluster_barrier(), self.describe(s))

    def s_ClusterLoad(self, s, depth):
        self.check_memory(s.src, kir.Memory.shared, "cluster load source")
        self.check_memory(s.dst, kir.Memory.local, "cluster load destination")
        self.check_dtype(s.dst, s.src.dtype, "cluster load destination")
        dtype = s.src.dtype.name
        if s.width != 1 or dtype not in ptx_sm90.CLUSTER_LOAD_TYPES:
            types = ", ".join(ptx_sm90.CLUSTER_LOAD_TYPES)
            raise self.error(f"a cluster load reads one {types} element, got {s.width} x "
                             f"{s.src.dtype}")
        address = self.shared_address(s.src, s.src_index, "cluster load source")
        rank = self.i32_operand(s.rank, "cluster load rank")
        self.need(f"cluster_ld_{dtype}")
        self.emit(depth, f"{self.subscript(s.dst, s.dst_index)} = cluster_ld_{dtype}("
                         f"{address}, {rank});", self.describe(s))

    def s_SetMaxNReg(self, s, depth):
        if isinstance(s.count, bool) or s.count not in SETMAXNREG_COUNTS:
            raise self.error(f"setmaxnreg count {s.count!r} is not a multiple of 8 from "
                             f"{SETMAXNREG_COUNTS[0]} to {SETMAXNREG_COUNTS[-1]}")
        self.emit(depth, ptx_sm90.setmaxnreg(bool(s.increase), s.count), self.describe(s))

    def s_NamedBarrier(self, s, depth):
        if isinstance(s.id, bool) or s.id not in NAMED_BARRIER_IDS:
            raise self.error(f"named barrier id {s.id!r} is not {NAMED_BARRIER_IDS[0]}.."
                             f"{NAMED_BARRIER_IDS[-1]} (0 is __syncthreads')")
        if isinstance(s.count, bool) or not isinstance(s.count, int) or s.count <= 0 or \
                s.count % 32:
            raise self.error(f"named barrier count {s.count!r} is not a positive multiple "
                             "of 32")
        self.emit_synchronizing(depth, s, ptx_sm90.named_barrier(s.id, s.count,
                                                                 s.arrive_only), "barrier")

    def s_FenceProxyAsync(self, s, depth):
        self.emit_synchronizing(depth, s, ptx_sm90.fence_proxy_async(), "fence")

    # -- mbarriers ------------------------------------------------------------------------
    def s_MbarrierInit(self, s, depth):
        bar = self.mbarrier(s.bar, s.index, "mbarrier.init")
        count = self.i32_operand(s.count, "mbarrier.init count")
        self.emit_lines(depth, ptx_sm90.mbarrier_init(bar, count), self.describe(s))

    def s_FenceMbarrierInit(self, s, depth):
        self.emit(depth, ptx_sm90.fence_mbarrier_init(), s.label)

    def s_MbarrierArrive(self, s, depth):
        bar = self.mbarrier(s.bar, s.index, "mbarrier.arrive")
        tx = None if s.tx_bytes is None else \
            self.i32_operand(s.tx_bytes, "mbarrier.arrive.expect_tx bytes")
        self.emit_lines(depth, ptx_sm90.mbarrier_arrive(bar, tx), self.describe(s))

    def s_MbarrierWait(self, s, depth):
        bar = self.mbarrier(s.bar, s.index, "mbarrier wait")
        parity = self.i32_operand(s.parity, "mbarrier wait parity")
        self.need("mbar_wait")
        self.emit_synchronizing(depth, s, f"while (!mbar_try_wait({bar}, {parity})) {{}}",
                                "wait")
