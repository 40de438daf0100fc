"""CUDA emission of the sm_90 statements (kir.hopper) as inline PTX, without a GPU.

Two hand-built one-warp-group kernels (128 threads) use every statement: a TMA kernel
(mbarriers, TMA loads of a 2-D swizzled and a 3-D box, stmatrix, named barriers, proxy
fences, a TMA store and its bulk group), which builds for plain sm_90, and a wgmma kernel
(fence, wgmma with A in shared memory or registers, commit, wait, setmaxnreg), which
driver.build.kernel_arch sends to sm_90a. Each compiles with NVRTC; the text of every
statement is checked (the PTX line, the n / 2 accumulator operands, the matrix
descriptor, the pool's alignment, the tensor maps' place in the signature), and every
check of the emitter is shown refusing a malformed statement with a CodegenError.
"""

import re

import pytest

from kir_examples import BF16, F16, F32, I32, I64, binop, const, finish, launch, tensor, tid
from codegen import nvrtc
from codegen.cuda import emit_cuda
from codegen.errors import CodegenError
from driver.build import kernel_arch
from fuserir.instructions import MatrixDescriptor
from lowering import kir

THREADS = 128


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSERIR_CACHE_DIR", str(tmp_path / "cache"))


def stmt_of(kernel, cls, nth=0):
    return [s for s in kir.walk(kernel.body) if isinstance(s, cls)][nth]


def lines_of(source, label):
    """The emitted lines from the one ending with `// <label>...` to the end of its
    statement (the line ending with `;` or `{}`)."""
    lines = source.splitlines()
    at = next(i for i, ln in enumerate(lines) if re.search(rf"// {label}(:|\s|$)", ln))
    end = next(i for i in range(at, len(lines))
               if re.search(r"(;|\{\})(\s*//.*)?$", lines[i]))
    return "\n".join(lines[at:end + 1])


def asm_string(text):
    """The PTX string of an emitted asm statement: its literals (before the operands)
    joined, escapes kept."""
    head = []
    for line in text.splitlines():
        if line.strip().startswith(":"):
            break
        head.append(re.sub(r'(?<=")\s*//.*$', "", line))
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', "\n".join(head)))


def operands(text):
    """An emitted asm statement's text with its whitespace runs made single spaces."""
    return " ".join(text.split())


def if_first_thread(*body):
    return kir.IfThenElse(binop("eq", tid(), const(0)), list(body))


# -- the TMA kernel (sm_90) -----------------------------------------------------------------

def tma_kernel(name="tma_roundtrip"):
    """x[M, N] f16 -> a 64 x 8 box (128B swizzle) by TMA into shared `tile`, z[K, M, N] -> an
    8 x 4 x 2 box into `tile3`, completing on bars[0]; stmatrix into `tile`; named
    barriers; tile -> y by a TMA store. A workspace and a scalar follow the maps."""
    M, N, K = (kir.ScalarParam(kir.Var(v, I32)) for v in ("M", "N", "K"))
    x = tensor("x", F16, [M.var, N.var])
    z = tensor("z", F16, [K.var, M.var, N.var])
    y = tensor("y", F16, [M.var, N.var], is_output=True)
    xmap = kir.TensorMap("xmap", x, [N.var, M.var], [x.strides[0]], (64, 8), "128B")
    zmap = kir.TensorMap("zmap", z, [N.var, M.var, K.var], [z.strides[1], z.strides[0]],
                         (8, 4, 2))
    ymap = kir.TensorMap("ymap", y, [N.var, M.var], [y.strides[0]], (64, 8), "128B")
    flags = kir.Buffer("flags", I32, kir.Memory.global_)
    bars = kir.Buffer("bars", I64, kir.Memory.shared, size=const(2), byte_offset=const(0))
    tile = kir.Buffer("tile", F16, kir.Memory.shared, size=const(512),
                      byte_offset=const(1024), tensor="tile")
    tile3 = kir.Buffer("tile3", F16, kir.Memory.shared, size=const(64),
                       byte_offset=const(2048), tensor="tile3")
    frag = kir.Buffer("frag", F16, kir.Memory.local, size=const(8))
    col = binop("mul", kir.Special(kir.SpecialKind.blockIdx, "x", I32), const(64))
    load = kir.TmaLoad(tile, const(0), xmap, col, const(0), bar=bars, bar_index=const(0))
    load3 = kir.TmaLoad(tile3, const(0), zmap, const(0), const(-1), const(3), bars, const(0))
    wait = kir.MbarrierWait(bars, const(0), const(0), sync_id="wait1")
    st = kir.StMatrix(tile, binop("mul", binop("mod", tid(), const(32)), const(8)), frag,
                      const(0), num=4, trans=True)
    fence = kir.FenceProxyAsync(sync_id="fence1")
    store = kir.TmaStore(tile, const(0), ymap, col, const(0))
    warp0 = binop("lt", tid(), const(32))
    body = [
        kir.Allocate(bars), kir.Allocate(tile), kir.Allocate(tile3), kir.Allocate(frag),
        if_first_thread(kir.MbarrierInit(bars, const(0), const(1)),
                        kir.MbarrierInit(bars, const(1), const(THREADS))),
        kir.FenceMbarrierInit(),
        kir.Barrier(),
        if_first_thread(kir.MbarrierArrive(bars, const(0), const(1024 + 128)), load, load3),
        wait,
        *[kir.Store(frag, const(j), kir.Load(tile, const(j))) for j in range(8)],
        kir.NamedBarrier(1, THREADS),
        st,
        kir.MbarrierArrive(bars, const(1)),
        kir.IfThenElse(warp0, [kir.NamedBarrier(2, THREADS, arrive_only=True)],
                       [kir.NamedBarrier(2, THREADS)]),
        fence,
        kir.Barrier(),
        if_first_thread(store, kir.BulkCommit(), kir.BulkWait(0, read=True), kir.BulkWait(0)),
    ]
    kernel = finish(kir.Kernel(name, [x, z, y], [M, N, K], body,
                               launch([const(4)], [const(THREADS)]),
                               workspaces=[kir.Workspace(flags, const(4))],
                               tensor_maps=[xmap, zmap, ymap]))
    wait.reasons.append(kir.SyncReason(kir.HazardKind.ASYNC, ("tile",), load, st))
    fence.reasons.append(kir.SyncReason(kir.HazardKind.ASYNC, ("tile",), st, store))
    return kernel


def test_the_tma_kernel_builds_for_plain_sm_90():
    kernel = tma_kernel()
    source = emit_cuda(kernel)
    assert kernel_arch(kernel, "sm_90") == "sm_90"
    assert nvrtc.compile_to_cubin(source, kernel.name, arch="sm_90")[:4] == b"\x7fELF"
    for s in kir.walk(kernel.body):
        assert re.search(rf"// {s.label}\b", source), s.label


def test_setmaxnreg_alone_sends_a_kernel_to_sm_90a():
    kernel = tma_kernel("tma_setmaxnreg")
    kernel.body.insert(0, kir.SetMaxNReg(232, increase=False, label="S0"))
    source = emit_cuda(kernel)
    assert 'asm volatile("setmaxnreg.dec.sync.aligned.u32 232;" ::: "memory");  // S0' in source
    assert kernel_arch(kernel, "sm_90") == "sm_90a"
    assert nvrtc.compile_to_cubin(source, kernel.name, arch="sm_90a")[:4] == b"\x7fELF"


def test_tensor_maps_follow_the_strides_and_precede_the_workspaces():
    source = emit_cuda(tma_kernel())
    head = source[source.index('extern "C"'):source.index("{\n", source.index('extern "C"'))]
    params = [ln.split("//")[0].strip().rstrip(",)") for ln in head.splitlines()[1:]]
    assert params[:3] == ["const f16* __restrict__ x", "const f16* __restrict__ z", "f16* y"]
    assert params[3:10] == ["i32 x_s0", "i32 x_s1", "i32 z_s0", "i32 z_s1", "i32 z_s2",
                            "i32 y_s0", "i32 y_s1"]
    assert params[10:] == ["const __grid_constant__ TensorMap xmap",
                           "const __grid_constant__ TensorMap zmap",
                           "const __grid_constant__ TensorMap ymap",
                           "i32* flags", "i32 M", "i32 N", "i32 K"]
    assert "// tensor map of x, box 64x8, swizzle 128B" in head
    assert "struct alignas(64) TensorMap { unsigned long long opaque[16]; };" in source
    assert "extern __shared__ __align__(1024) unsigned char smem[];" in source


def test_tma_and_mbarrier_text():
    kernel = tma_kernel()
    source = emit_cuda(kernel)
    def text(cls, nth=0):
        return operands(lines_of(source, stmt_of(kernel, cls, nth).label))

    load = text(kir.TmaLoad)
    assert ('"cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes '
            '[%0], [%1, {%2, %3}], [%4];"') in load
    assert ('"r"(smem_addr(&tile[0])), "l"(reinterpret_cast<unsigned long long>(&xmap)), '
            '"r"((i32)blockIdx.x * 64), "r"(0), "r"(smem_addr(&bars[0]))') in load
    assert '"memory"' in load
    assert "[%0], [%1, {%2, %3, %4}], [%5];" in text(kir.TmaLoad, 1)
    assert '"r"(0), "r"(-1), "r"(3)' in text(kir.TmaLoad, 1)
    store = text(kir.TmaStore)
    assert '"cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"' \
        in store
    assert '"l"(reinterpret_cast<unsigned long long>(&ymap)), "r"(smem_addr(&tile[0]))' in store
    assert 'asm volatile("cp.async.bulk.commit_group;" ::: "memory");' in source
    assert 'asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");' in source
    assert 'asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");' in source
    assert '"mbarrier.init.shared::cta.b64 [%0], %1;"' in text(kir.MbarrierInit)
    assert '"r"(smem_addr(&bars[1])), "r"(128)' in text(kir.MbarrierInit, 1)
    assert 'asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");' in source
    assert '"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"' in \
        text(kir.MbarrierArrive)
    assert '"r"(smem_addr(&bars[0])), "r"(1152)' in text(kir.MbarrierArrive)
    assert '"mbarrier.arrive.shared::cta.b64 _, [%0];"' in text(kir.MbarrierArrive, 1)
    # the wait spins in C on the preamble's try_wait; its reason above it, its id after
    wait = stmt_of(kernel, kir.MbarrierWait)
    lines = source.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.endswith(f"// {wait.label} wait1"))
    assert lines[at].strip().startswith(
        "while (!mbar_try_wait(smem_addr(&bars[0]), 0)) {}")
    assert lines[at - 1].strip() == f"// wait1: {wait.reasons[0]}"
    assert "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;" in source
    ptx = nvrtc.ptx(source, kernel.name, arch="sm_90")
    for instr in ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
                  "cp.async.bulk.tensor.3d.shared::cluster.global",
                  "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group",
                  "mbarrier.try_wait.parity.shared::cta.b64", "mbarrier.init.shared::cta.b64",
                  "mbarrier.arrive.expect_tx.shared::cta.b64",
                  "fence.mbarrier_init.release.cluster", "cp.async.bulk.wait_group.read 0",
                  "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "bar.arrive 2, 128",
                  "fence.proxy.async.shared::cta"):
        assert instr in ptx, instr


def test_stmatrix_barriers_and_fences_text():
    kernel = tma_kernel()
    source = emit_cuda(kernel)
    st = operands(lines_of(source, stmt_of(kernel, kir.StMatrix).label))
    assert '"stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"' in st
    assert '"r"(smem_addr(&tile[((i32)threadIdx.x % 32) * 8]))' in st
    for i in range(4):          # register i: elements 2i (low half) and 2i + 1
        assert f'"r"(pack_b16(frag[{2 * i}].x, frag[{2 * i + 1}].x))' in st
    assert 'asm volatile("bar.sync 1, 128;" ::: "memory");' in source
    assert 'asm volatile("bar.arrive 2, 128;" ::: "memory");' in source
    fence = stmt_of(kernel, kir.FenceProxyAsync)
    lines = source.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.endswith(f"// {fence.label} fence1"))
    assert lines[at].strip().startswith(
        'asm volatile("fence.proxy.async.shared::cta;" ::: "memory");')
    assert lines[at - 1].strip() == f"// fence1: {fence.reasons[0]}"


# -- the wgmma kernel (sm_90a) --------------------------------------------------------------

A_LAYOUT = kir.MatrixLayout(128, 256)                  # K-major, no swizzle
B_LAYOUT = kir.MatrixLayout(16, 1024, "128B")          # K-major, 128-byte swizzle


def wgmma_kernel(n=64, register_a=False, dtype=F16, accumulate=True, name=None):
    """D (64 x n f32, n / 2 per thread) = A (64 x 16) x B (16 x n), A and B staged through
    shared memory (A from registers with register_a), two k-steps the first of which does
    not accumulate (accumulate=False: the wgmma's accumulate is None, always);
    setmaxnreg raises the budget first. regs[t, j] = thread t's element j."""
    name = name or f"wgmma_n{n}{'_rs' if register_a else ''}_{dtype}"
    A = tensor("A", dtype, [const(64), const(16)])
    B = tensor("B", dtype, [const(n), const(16)])
    regs = tensor("regs", F32, [const(THREADS), const(n // 2)], is_output=True)
    As = kir.Buffer("As", dtype, kir.Memory.shared, size=const(1024), byte_offset=const(0),
                    tensor="As")
    Bs = kir.Buffer("Bs", dtype, kir.Memory.shared, size=const(16 * n),
                    byte_offset=const(2048), tensor="Bs")
    fa = kir.Buffer("fa", dtype, kir.Memory.local, size=const(8))
    acc = kir.Buffer("acc", F32, kir.Memory.local, size=const(n // 2))
    u, j, k = kir.Var("u", I32), kir.Var("j", I32), kir.Var("k", I32)
    e = binop("add", binop("mul", u, const(THREADS)), tid())
    a = fa if register_a else As
    mma = kir.Wgmma(acc, const(0), a, const(0), Bs, const(0), n=n, dtype=dtype,
                    a_layout=None if register_a else A_LAYOUT, b_layout=B_LAYOUT,
                    accumulate=binop("ne", k, const(0)) if accumulate else None)
    body = [
        kir.SetMaxNReg(240, increase=True),
        kir.Allocate(As), kir.Allocate(Bs), kir.Allocate(fa), kir.Allocate(acc),
        kir.ForLoop(u, const(8), [kir.Store(As, e, kir.Load(A.buffer, e))], kind="unroll"),
        kir.ForLoop(u, const(n // 8), [kir.Store(Bs, e, kir.Load(B.buffer, e))],
                    kind="unroll"),
        kir.ForLoop(j, const(8), [kir.Store(fa, j, kir.Load(A.buffer, j))], kind="unroll"),
        kir.ForLoop(j, const(n // 2), [kir.Store(acc, j, const(0.0, F32))], kind="unroll"),
        kir.FenceProxyAsync(),
        kir.Barrier(),
        kir.ForLoop(k, const(2), [kir.WgmmaFence(), mma, kir.WgmmaCommit()], kind="unroll"),
        kir.WgmmaWait(0, sync_id="wait1"),
        kir.ForLoop(j, const(n // 2), [
            kir.Store(regs.buffer, binop("add", binop("mul", tid(), const(n // 2)), j),
                      kir.Load(acc, j))], kind="unroll"),
    ]
    return finish(kir.Kernel(name, [A, B, regs], [], body, launch([const(1)], [const(THREADS)])))


def accumulator_operands(text):
    return re.findall(r'"\+f"\(acc\[(\d+)\]\)', text)


@pytest.mark.parametrize("n, register_a", [(8, False), (64, True), (128, False),
                                           (256, False)])
def test_wgmma_text_and_cubin(n, register_a):
    kernel = wgmma_kernel(n, register_a)
    source = emit_cuda(kernel)
    mma = lines_of(source, stmt_of(kernel, kir.Wgmma).label)
    assert accumulator_operands(mma) == [str(j) for j in range(n // 2)]
    d = ", ".join(f"%{j}" for j in range(n // 2))
    flat = asm_string(mma)
    after = n // 2 + (4 if register_a else 1)   # B's descriptor, then scale-d
    assert f"setp.ne.b32 p, %{after + 1}, 0;\\n" in flat
    a = "{" + ", ".join(f"%{n // 2 + i}" for i in range(4)) + "}" if register_a \
        else f"%{n // 2}"
    imm = "p, 1, 1, 0" if register_a else "p, 1, 1, 0, 0"
    assert f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{d}}}, {a}, %{after}, " \
           f"{imm};" in flat
    b_word = MatrixDescriptor(0, 16, 1024, "128B").encode()
    assert f'"l"(wgmma_desc(&Bs[0], {b_word:#x}ull))' in mma
    if register_a:
        assert '"r"(pack_b16(fa[0].x, fa[1].x))' in mma and "wgmma_desc(&As" not in mma
    else:
        a_word = MatrixDescriptor(0, 128, 256).encode()
        assert f'"l"(wgmma_desc(&As[0], {a_word:#x}ull))' in mma
    mma = operands(mma)
    assert '"r"((i32)(k != 0))' in mma and mma.rstrip().endswith(': "memory");')
    assert "extern __shared__ __align__(1024) unsigned char smem[];" in source
    assert kernel_arch(kernel, "sm_90") == "sm_90a"
    assert nvrtc.compile_to_cubin(source, kernel.name, arch="sm_90a")[:4] == b"\x7fELF"


def test_wgmma_helpers_fences_and_setmaxnreg_text():
    kernel = wgmma_kernel(16, dtype=BF16, accumulate=False)
    source = emit_cuda(kernel)
    assert "return layout | (unsigned long long)((smem_addr(start) >> 4) & 0x3FFFu);" in source
    assert "m64n16k16.f32.bf16.bf16" in source
    assert '"r"(1)' in lines_of(source, stmt_of(kernel, kir.Wgmma).label)
    assert 'asm volatile("wgmma.fence.sync.aligned;" ::: "memory");' in source
    assert 'asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");' in source
    wait = stmt_of(kernel, kir.WgmmaWait)
    assert re.search(r'asm volatile\("wgmma.wait_group.sync.aligned 0;" ::: "memory"\);'
                     rf"  // {wait.label} wait1$", source, re.M)
    assert 'asm volatile("setmaxnreg.inc.sync.aligned.u32 240;" ::: "memory");' in source
    # setmaxnreg is ignored (ptxas C7508) unless the kernel bounds its block
    assert re.search(r'extern "C" __global__ void __launch_bounds__\(128, 1\) \w+\(', source)
    assert "__launch_bounds__" not in emit_cuda(tma_kernel())     # no setmaxnreg there
    ptx = nvrtc.ptx(source, kernel.name, arch="sm_90a")
    for instr in ("wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16", "wgmma.fence",
                  "wgmma.commit_group", "wgmma.wait_group.sync.aligned 0",
                  "setmaxnreg.inc.sync.aligned.u32 240"):
        assert instr in ptx, instr


def test_a_block_of_more_than_256_threads_bounds_its_registers():
    """A block that cannot give each thread the 255 registers it may use is compiled under
    __launch_bounds__(threads): ptxas keeps within the block (170 a thread for 384)
    instead of the launch failing; at 256 threads or fewer, or a run-time block, none."""
    kernel = tma_kernel()
    for threads, bounded in ((384, True), (256, False)):
        kernel.launch.block = (kir.Const(threads, I32),) + tuple(kernel.launch.block[1:])
        source = emit_cuda(kernel)
        assert (f"__global__ void __launch_bounds__({threads}) " in source) == bounded
    kernel.launch.block = (kir.Var("threads", I32),) + tuple(kernel.launch.block[1:])
    assert "__launch_bounds__" not in emit_cuda(kernel)


def test_setmaxnreg_needs_a_constant_block():
    kernel = wgmma_kernel(16, dtype=BF16, accumulate=False)
    kernel.launch.block = (kir.Var("threads", I32),) + tuple(kernel.launch.block[1:])
    with pytest.raises(CodegenError, match="a kernel that issues setmaxnreg needs a constant "
                                           r"block size \(its __launch_bounds__\)"):
        emit_cuda(kernel)


def test_the_descriptor_helper_encodes_as_matrix_descriptor():
    # the device helper ORs address >> 4 into bits 0-13 of the constant layout word
    for start, leading, stride, mode in ((2048, 16, 1024, "128B"), (0x3FFF0, 128, 256, "none"),
                                         (4096, 256, 512, "32B")):
        layout = MatrixDescriptor(0, leading, stride, mode).encode()
        assert layout | ((start >> 4) & 0x3FFF) == \
            MatrixDescriptor(start, leading, stride, mode).encode()


def test_kernels_without_sm90_statements_keep_their_pool():
    import kir_examples as ex
    source = emit_cuda(ex.ldmatrix_mma_kernel())
    assert "extern __shared__ __align__(16) unsigned char smem[];" in source
    assert "TensorMap" not in source and "__align__(1024)" not in source


# -- the emitter's checks -------------------------------------------------------------------

def _set(cls, nth=0, **fields):
    def mutate(kernel):
        s = stmt_of(kernel, cls, nth)
        for key, value in fields.items():
            setattr(s, key, value(kernel) if callable(value) else value)
    return mutate


def _set_map(index, **fields):
    def mutate(kernel):
        for key, value in fields.items():
            setattr(kernel.tensor_maps[index], key, value)
    return mutate


def _local(dtype, size=8):
    return lambda kernel: kir.Buffer("loc", dtype, kir.Memory.local, size=const(size))


def _shared(dtype, size=64):
    return lambda kernel: kir.Buffer("sh", dtype, kir.Memory.shared, size=const(size),
                                     byte_offset=const(4096))


WGMMA_ERRORS = [
    (_set(kir.Wgmma, n=12), r"wgmma n = 12 is not a multiple of 8 from 8 to 256"),
    (_set(kir.Wgmma, n=264), r"wgmma n = 264 is not a multiple of 8"),
    (_set(kir.Wgmma, dtype=F32), r"wgmma inputs must be f16 or bf16, got f32"),
    (_set(kir.Wgmma, d=_shared(F32)), r"wgmma accumulator sh is in shared memory, not local"),
    (_set(kir.Wgmma, d=_local(F16, 32)), r"wgmma accumulator loc is f16, the instruction "
                                        r"takes f32"),
    (_set(kir.Wgmma, b=_local(F16)), r"wgmma B loc is in local memory, not shared"),
    (_set(kir.Wgmma, b=_shared(BF16)), r"wgmma B sh is bf16, the instruction takes f16"),
    (_set(kir.Wgmma, a=_shared(BF16)), r"wgmma A sh is bf16, the instruction takes f16"),
    (_set(kir.Wgmma, a=_local(F16), a_layout=None, trans_a=True),
     r"wgmma A loc is in registers: it takes no a_layout and trans_a False"),
    (_set(kir.Wgmma, a=_local(F16)), r"wgmma A loc is in registers: it takes no a_layout"),
    (_set(kir.Wgmma, a=_local(F16, 4), a_layout=None),
     r"wgmma A loc\[0..7\] is out of bounds of its 4 elements"),
    (_set(kir.Wgmma, b_layout=None), r"wgmma B Bs is in shared memory and needs a "
                                     r"MatrixLayout, got None"),
    (_set(kir.Wgmma, b_layout=kir.MatrixLayout(24, 1024)),
     r"wgmma B layout: matrix descriptor leading byte offset 24 is not a multiple of 16 "
     r"below 262144"),
    (_set(kir.Wgmma, a_layout=kir.MatrixLayout(16, 1 << 18)),
     r"wgmma A layout: matrix descriptor stride byte offset 262144 is not a multiple of 16"),
    (_set(kir.Wgmma, b_layout=kir.MatrixLayout(16, 1024, "256B")),
     r"wgmma B layout swizzle '256B' is not one of none, 32B, 64B, 128B"),
    (_set(kir.Wgmma, b_layout=kir.MatrixLayout("16", 1024)),
     r"wgmma B layout byte offsets must be ints, got '16'"),
    (_set(kir.Wgmma, b_index=None), r"wgmma B Bs has no index"),
    (_set(kir.Wgmma, accumulate=const(1)), r"wgmma accumulate 1 is i32, not bool"),
    (_set(kir.Wgmma, d=_local(F32, 16)),
     r"wgmma accumulator loc\[0..31\] is out of bounds of its 16 elements"),
    (_set(kir.WgmmaWait, n=-1), r"wgmma wait_group takes a non-negative int, got -1"),
    (_set(kir.SetMaxNReg, count=20), r"setmaxnreg count 20 is not a multiple of 8 from 24 "
                                     r"to 256"),
    (_set(kir.SetMaxNReg, count=244), r"setmaxnreg count 244 is not a multiple of 8"),
]


@pytest.mark.parametrize("mutate, message", WGMMA_ERRORS)
def test_wgmma_kernel_errors(mutate, message):
    kernel = wgmma_kernel()
    mutate(kernel)
    with pytest.raises(CodegenError, match=message) as caught:
        emit_cuda(kernel)
    assert f"kernel {kernel.name} in S" in str(caught.value)     # names the statement


def _other_map(kernel):
    x = kernel.tensor_params[0]
    return kir.TensorMap("stray", x, list(kernel.tensor_maps[0].sizes),
                         list(kernel.tensor_maps[0].strides), (64, 8), "128B")


TMA_ERRORS = [
    (_set(kir.StMatrix, num=3), r"stmatrix takes 1, 2 or 4 matrices, got 3"),
    (_set(kir.StMatrix, trans=1), r"stmatrix trans must be a bool, got 1"),
    (_set(kir.StMatrix, dst=_local(F16, 512)), r"stmatrix destination loc is in local memory"),
    (_set(kir.StMatrix, src=_local(F32)), r"stmatrix source loc is f32; stmatrix moves "
                                          r"16-bit elements"),
    (_set(kir.StMatrix, src=_local(BF16)), r"stmatrix from bf16 loc into f16 tile"),
    (_set(kir.NamedBarrier, id=0), r"named barrier id 0 is not 1..15 \(0 is __syncthreads'\)"),
    (_set(kir.NamedBarrier, id=16), r"named barrier id 16 is not 1..15"),
    (_set(kir.NamedBarrier, count=100), r"named barrier count 100 is not a positive multiple "
                                        r"of 32"),
    (_set(kir.NamedBarrier, count=0), r"named barrier count 0 is not a positive multiple"),
    (_set(kir.MbarrierInit, bar=_shared(I32)), r"mbarrier.init mbarrier sh is i32; an "
                                               r"mbarrier is an element of an i64 shared"),
    (_set(kir.MbarrierInit, bar=_local(I64)), r"mbarrier.init mbarrier loc is in local memory"),
    (_set(kir.MbarrierInit, index=None), r"mbarrier.init mbarrier bars has no index"),
    (_set(kir.MbarrierInit, count=const(1.0, F32)),
     r"mbarrier.init count must be an integer expression, got 1.0"),
    (_set(kir.MbarrierArrive, tx_bytes=const(1.0, F32)),
     r"mbarrier.arrive.expect_tx bytes must be an integer expression"),
    (_set(kir.MbarrierWait, bar=_shared(F32)), r"mbarrier wait mbarrier sh is f32"),
    (_set(kir.MbarrierWait, parity=None), r"mbarrier wait parity must be an integer "
                                          r"expression, got None"),
    (_set(kir.TmaLoad, map=_other_map), r"tma load map 'stray' is not one of the kernel's "
                                        r"tensor maps"),
    (_set(kir.TmaLoad, c1=None), r"tma load gives 1 coordinates, map xmap has rank 2"),
    (_set(kir.TmaStore, c2=const(0)), r"tma store gives 3 coordinates, map ymap has rank 2"),
    (_set(kir.TmaLoad, dst=_shared(BF16, 512)), r"tma load destination sh is bf16, map xmap "
                                                r"is f16"),
    (_set(kir.TmaLoad, dst_index=const(64)), r"tma load destination tile\[64\] is at pool "
                                             r"byte 1152, not aligned to 1024"),
    (_set(kir.TmaLoad, 1, dst_index=const(8)), r"tma load destination tile3\[8\] is at pool "
                                               r"byte 2064, not aligned to 128"),
    (_set(kir.TmaLoad, bar=_shared(I32)), r"tma load mbarrier sh is i32"),
    (_set(kir.TmaStore, src=_local(F16, 512)), r"tma store source loc is in local memory"),
    (_set(kir.TmaLoad, c1=const(0.5, F32)), r"tma load coordinate 1 must be an integer"),
    (_set(kir.TmaLoad, c0=const(12)), r"tma load coordinate 0 = 12 is 24 bytes into a row of "
                                      r"map xmap, not a multiple of 16 \(the GPU faults\)"),
    (_set(kir.BulkWait, n=True), r"cp.async.bulk wait_group takes a non-negative int, "
                                 r"got True"),
    (_set_map(0, box=(64, 0)), r"tensor map xmap box extent 0 is not 1..256"),
    (_set_map(1, box=(8, 4, 257)), r"tensor map zmap box extent 257 is not 1..256"),
    (_set_map(0, box=(32, 8)), r"tensor map xmap: a 128B swizzled box's dimension 0 spans "
                               r"128 bytes, got 32 x f16 = 64"),
    (_set_map(0, swizzle="16B"), r"tensor map xmap swizzle '16B' is not one of none, 32B"),
    (_set_map(0, box=(64, 8, 1, 1, 1, 1), sizes=[], strides=[]),
     r"tensor map xmap has rank 6; TMA takes ranks 2 to 3 \(coordinates c0, c1\[, c2\]\)"),
    (_set_map(0, strides=[]), r"tensor map xmap of rank 2 has 2 sizes and 0 strides"),
    (lambda k: k.tensor_maps.append("xmap"), r"tensor map 'xmap' is not a kir.TensorMap"),
    (lambda k: setattr(k.tensor_maps[0], "tensor", tensor("w", F16, [const(4)])),
     r"tensor map xmap is over w, not one of the kernel's tensor parameters"),
]


@pytest.mark.parametrize("mutate, message", TMA_ERRORS)
def test_tma_kernel_errors(mutate, message):
    kernel = tma_kernel()
    mutate(kernel)
    with pytest.raises(CodegenError, match=message):
        emit_cuda(kernel)


def test_a_rank_1_map_is_refused_by_the_statement():
    kernel = tma_kernel()
    xmap = kernel.tensor_maps[0]
    xmap.box, xmap.sizes, xmap.strides = (64,), xmap.sizes[:1], []
    stmt_of(kernel, kir.TmaLoad).c1 = None
    with pytest.raises(CodegenError, match=r"tensor map xmap has rank 1; TMA takes ranks 2 "
                                           r"to 3"):
        emit_cuda(kernel)
