"""CUDA emission of the tensor-core and asynchronous-copy statements (LdMatrix, Mma, CpAsync,
CpAsyncCommit, CpAsyncWait) as inline PTX.

Without a GPU: every variant compiles to an sm_90 cubin with NVRTC, the text carries the
PTX the kir docstrings promise (and NVRTC's PTX keeps it), and malformed statements are
refused with a CodegenError naming the statement. On a GPU (marked `gpu`): probes compare
every lane's registers with the PTX ISA's fragment figures computed in numpy,
mma results with numpy's A @ B + C exactly, cp.async with zero fill; and the interpreter
(codegen.interp.run_kernel) with the GPU bit for bit, where it runs these statements.
"""

import re

import ml_dtypes
import numpy as np
import pytest

import kir_examples as ex
from codegen import nvrtc
from codegen.cuda import emit_cuda
from codegen.errors import CodegenError
from fuserir.dtypes import DataType
from lowering import kir

I32, F32, F16, BF16 = DataType.i32, DataType.f32, DataType.f16, DataType.bf16
HOST = {F16: np.float16, BF16: ml_dtypes.bfloat16, F32: np.float32}
NEW_NODES = ("LdMatrix", "Mma", "CpAsync", "CpAsyncCommit", "CpAsyncWait")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSERIR_CACHE_DIR", str(tmp_path / "cache"))


def compile_kernel(kernel):
    return nvrtc.compile_to_cubin(emit_cuda(kernel), kernel.name, arch="sm_90")


def stmt_of(kernel, cls):
    return next(s for s in kir.walk(kernel.body) if isinstance(s, cls))


def line_of(source, label):
    """The emitted line that ends with `// <label>` or `// <label>: ...`."""
    lines = [ln for ln in source.splitlines() if re.search(rf"// {label}(:|\s|$)", ln)]
    assert lines, (label, source)
    return lines


# -- every variant compiles (no GPU) ------------------------------------------------------

@pytest.mark.parametrize("which", sorted(ex.TENSORCORE_KERNELS))
def test_tensorcore_kernel_compiles_to_a_cubin(which):
    kernel = ex.TENSORCORE_KERNELS[which]()
    source = emit_cuda(kernel)
    assert not re.search(r"^\s*#\s*include", source, re.M)
    assert compile_kernel(kernel)[:4] == b"\x7fELF"
    for s in kir.walk(kernel.body):               # every statement keeps its label
        pattern = rf"\({s.label}\)$" if isinstance(s, kir.Comment) else rf"// {s.label}\b"
        assert re.search(pattern, source, re.M), (which, s.label)


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_text_and_ptx(num, trans):
    kernel = ex.ldmatrix_kernel(num, trans, F16)
    source = emit_cuda(kernel)
    s = stmt_of(kernel, kir.LdMatrix)
    t = ".trans" if trans else ""
    regs = ", ".join(f"%{i}" for i in range(num))
    instr = f"ldmatrix.sync.aligned.m8n8.x{num}{t}.shared.b16 {{{regs}}}, [%{num}];"
    asm = line_of(source, s.label)
    assert any(instr in ln for ln in asm), asm
    assert "smem_addr(&ts[" in source and "__cvta_generic_to_shared" in source
    # register i unpacks to dst elements 2i (low half) and 2i + 1 (high half)
    for i in range(num):
        assert f"frag[{2 * i}].x = lo_b16(ldm{i}); frag[{2 * i + 1}].x = hi_b16(ldm{i});" \
            in source
    assert f"ldm{num}" not in source
    ptx = nvrtc.ptx(source, kernel.name, arch="sm_90")
    assert f"ldmatrix.sync.aligned.m8n8.x{num}{t}.shared.b16" in ptx


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_mma_text_and_ptx(dtype):
    kernel = ex.mma_kernel(dtype)
    source = emit_cuda(kernel)
    t = dtype.value
    instr = f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32"
    assert f'asm volatile("{instr} {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, ' \
           '{%10, %11, %12, %13};"' in source
    # A: 4 registers of consecutive pairs, B: 2, C in and D out as 4 floats each
    for i in range(4):
        assert f'"r"(pack_b16(fa[{2 * i}].x, fa[{2 * i + 1}].x))' in source
        assert f'"f"(fc[{i}])' in source and f'"=f"(fd[{i}])' in source
    for i in range(2):
        assert f'"r"(pack_b16(fb[{2 * i}].x, fb[{2 * i + 1}].x))' in source
    assert instr in nvrtc.ptx(source, kernel.name, arch="sm_90")


def test_fragment_indices_from_expressions():
    source = emit_cuda(ex.ldmatrix_mma_kernel(BF16))
    assert '"=f"(acc[j * 4]), "=f"(acc[(j * 4) + 1])' in source
    assert '"f"(acc[(j * 4) + 3]));' in source
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in source
    assert "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" in source


def test_cp_async_text_and_ptx():
    kernel = ex.cp_async_kernel()
    source = emit_cuda(kernel)
    copies = [s for s in kir.walk(kernel.body) if isinstance(s, kir.CpAsync)]
    want = {16: "cp.async.cg.shared.global [%0], [%1], 16, %2;",
            4: "cp.async.ca.shared.global [%0], [%1], 4, %2;",
            8: "cp.async.ca.shared.global [%0], [%1], 8, %2;"}
    for s in copies:
        (line,) = [ln for ln in line_of(source, s.label) if "asm" in ln]
        assert want[s.nbytes] in line, line
    assert '"r"(smem_addr(&ts[(i32)threadIdx.x * 4])), "l"(gmem_addr(&x[' in source
    assert '"r"((unsigned int)((((i32)threadIdx.x % 4) == 3) ? 0 :' in source
    assert source.count('asm volatile("cp.async.commit_group;" ::: "memory");') == 3
    for n in (0, 1, 2):
        assert f'asm volatile("cp.async.wait_group {n};" ::: "memory");' in source
    # an inserted wait carries its id and, a line above each, its reasons (as Barrier does)
    wait = [s for s in kir.walk(kernel.body) if isinstance(s, kir.CpAsyncWait) and s.sync_id]
    assert len(wait) == 1
    lines = source.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.endswith(f"// {wait[0].label} wait1"))
    assert [ln.strip() for ln in lines[at - 3:at]] == \
        [f"// wait1: {r}" for r in wait[0].reasons]
    ptx = nvrtc.ptx(source, kernel.name, arch="sm_90")
    for text in ("cp.async.cg.shared.global", "cp.async.ca.shared.global",
                 "cp.async.commit_group", "cp.async.wait_group 0", "cp.async.wait_group 1",
                 "cp.async.wait_group 2"):
        assert text in ptx, text


def test_cp_async_without_src_size_copies_everything():
    kernel = ex.cp_async_kernel(name="cp_async_full")
    for s in kir.walk(kernel.body):
        if isinstance(s, kir.CpAsync):
            s.src_size = None
    source = emit_cuda(kernel)
    assert "cp.async.cg.shared.global [%0], [%1], 16;" in source
    assert compile_kernel(kernel)[:4] == b"\x7fELF"


# -- refusals ------------------------------------------------------------------------------

def _refused(kernel, stmt, match):
    with pytest.raises(CodegenError, match=match) as info:
        emit_cuda(kernel)
    assert f"in {stmt.label}:" in str(info.value)
    return info.value


@pytest.mark.parametrize("nbytes", [4, 8])
def test_cg_copies_only_16_bytes(nbytes):
    kernel = ex.cp_async_kernel()
    s = next(s for s in kir.walk(kernel.body) if isinstance(s, kir.CpAsync)
             and s.nbytes == nbytes)
    s.cache = "cg"
    _refused(kernel, s, r"cp\.async\.cg copies 16 bytes only, got %d" % nbytes)


@pytest.mark.parametrize("change,match", [
    (dict(nbytes=12), "copies 4, 8 or 16 bytes"),
    (dict(cache="cs"), "cache operator"),
    (dict(src_size=kir.Const(32, I32)), r"src-size 32 is not in \[0, 16\]"),
    (dict(src_size=kir.Const(1.0, F32)), "not an integer"),
    (dict(dst_index=kir.Const(2, I32)), "not aligned to 16 bytes"),
])
def test_cp_async_refusals(change, match):
    kernel = ex.cp_async_kernel()
    s = stmt_of(kernel, kir.CpAsync)
    for k, v in change.items():
        setattr(s, k, v)
    _refused(kernel, s, match)


def test_cp_async_wrong_memories_are_refused():
    kernel = ex.cp_async_kernel()
    s = stmt_of(kernel, kir.CpAsync)
    s.dst, s.src = s.src, s.dst
    _refused(kernel, s, "destination x is in global memory, not shared")


@pytest.mark.parametrize("change,match", [
    (dict(num=3), "1, 2 or 4 matrices"),
    (dict(dst_index=kir.Const(4, I32)), r"frag\[4\.\.11\] is out of bounds of its 8"),
    (dict(address=kir.Const(0.0, F32)), "not an integer"),
])
def test_ldmatrix_refusals(change, match):
    kernel = ex.ldmatrix_kernel(4)
    s = stmt_of(kernel, kir.LdMatrix)
    for k, v in change.items():
        setattr(s, k, v)
    _refused(kernel, s, match)


def test_ldmatrix_needs_shared_source_and_16_bit_elements():
    kernel = ex.ldmatrix_kernel(4)
    s = stmt_of(kernel, kir.LdMatrix)
    s.src, s.address = s.dst, kir.Const(0, I32)
    _refused(kernel, s, "source frag is in local memory, not shared")
    kernel = ex.mma_kernel()
    fd = stmt_of(kernel, kir.Mma).d
    bad = kir.LdMatrix(fd, kir.Const(0, I32), stmt_of(kernel, kir.Mma).a, kir.Const(0, I32),
                       num=1, label="S99")
    kernel.body.append(bad)
    with pytest.raises(CodegenError, match="in S99: .*is in local memory, not shared"):
        emit_cuda(kernel)


@pytest.mark.parametrize("field,match", [
    ("a", "mma A fragment fc is f32, the instruction takes f16"),
    ("d", "mma D fragment fa is f16, the instruction takes f32"),
])
def test_mma_fragment_dtypes_are_checked(field, match):
    kernel = ex.mma_kernel(F16)
    s = stmt_of(kernel, kir.Mma)
    setattr(s, field, s.c if field == "a" else s.a)
    _refused(kernel, s, match)


def test_mma_input_dtype_and_bounds():
    kernel = ex.mma_kernel(F16)
    s = stmt_of(kernel, kir.Mma)
    s.dtype = F32
    _refused(kernel, s, "mma inputs must be f16 or bf16")
    kernel = ex.mma_kernel(BF16)
    s = stmt_of(kernel, kir.Mma)
    s.b_index = kir.Const(1, I32)
    _refused(kernel, s, r"fb\[1\.\.4\] is out of bounds")


def test_wait_count_must_be_a_non_negative_int():
    kernel = ex.cp_async_kernel()
    s = stmt_of(kernel, kir.CpAsyncWait)
    s.n = -1
    _refused(kernel, s, "non-negative int")


def test_temporaries_do_not_capture_kernel_ir_names():
    # a loop variable named like ldmatrix's result registers is renamed, not shadowed
    kernel = ex.ldmatrix_kernel(1)
    loop = next(s for s in kir.walk(kernel.body) if isinstance(s, kir.ForLoop))
    loop.var = kir.Var("ldm0", I32)
    source = emit_cuda(kernel)
    assert "for (i32 ldm0_ = 0;" in source


# -- on the GPU: probes ---------------------------------------------------------------------

@pytest.fixture
def cp():
    import cupy
    return cupy


def gpu_run(kernel, args):
    import cupy
    from codegen.launch import launch
    launch(kernel, compile_kernel(kernel), args)
    cupy.cuda.Device().synchronize()


def to_device(cp, array, dtype):
    """A host array of `dtype` on the device (bf16 as its bits: CuPy has no bfloat16)."""
    a = np.asarray(array, dtype=HOST[dtype])
    return cp.asarray(a.view(np.uint16) if dtype is BF16 else a)


def empty_device(cp, shape, dtype):
    if dtype is BF16:
        return cp.full(shape, 0xFFFF, dtype=np.uint16)          # NaN bits
    return cp.full(shape, np.nan, dtype=HOST[dtype])


def from_device(cp, array, dtype):
    host = cp.asnumpy(array)
    return host.view(ml_dtypes.bfloat16) if dtype is BF16 else host


def bits(array):
    a = np.ascontiguousarray(array)
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


def run_interp_or_skip(kernel, args):
    """Run the interpreter on host copies of args (outputs filled in place); skip the test,
    saying why, where the interpreter does not run one of the new statements yet."""
    from codegen import interp
    try:
        interp.run_kernel(kernel, args)
    except (interp.InterpError, NotImplementedError) as error:
        if any(n in str(error) for n in NEW_NODES):
            pytest.skip(f"interpreter comparison skipped: the interpreter does not run "
                        f"this kernel's tensor-core/cp.async statements yet ({error})")
        raise


def ldmatrix_tile(num, dtype):
    # distinct integers 0..num*64-1, exact in f16 and bf16 (<= 256), scrambled
    rng = np.random.default_rng(100 + num)
    return rng.permutation(num * 64).astype(HOST[dtype])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("num", [1, 2, 4])
def test_ldmatrix_probe_on_gpu(cp, num, trans, dtype):
    kernel = ex.ldmatrix_kernel(num, trans, dtype)
    tile = ldmatrix_tile(num, dtype)
    y = empty_device(cp, (32, 2 * num), dtype)
    gpu_run(kernel, {"x": to_device(cp, tile, dtype), "y": y})
    got = from_device(cp, y, dtype)
    want = ex.ldmatrix_expected(tile, num, trans)
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.gpu
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("num", [1, 4])
def test_ldmatrix_interpreter_matches_gpu(cp, num, trans):
    kernel = ex.ldmatrix_kernel(num, trans, F16)
    tile = ldmatrix_tile(num, F16)
    y = empty_device(cp, (32, 2 * num), F16)
    gpu_run(kernel, {"x": to_device(cp, tile, F16), "y": y})
    host_y = np.full((32, 2 * num), np.nan, dtype=np.float16)
    run_interp_or_skip(ex.ldmatrix_kernel(num, trans, F16), {"x": tile, "y": host_y})
    np.testing.assert_array_equal(bits(host_y), bits(from_device(cp, y, F16)))


def mma_inputs(dtype, seed):
    rng = np.random.default_rng(seed)
    A = rng.integers(-4, 5, (16, 16)).astype(HOST[dtype])
    B = rng.integers(-4, 5, (16, 8)).astype(HOST[dtype])
    C = rng.integers(-64, 65, (16, 8)).astype(np.float32)
    return A, B, C


def mma_expected(A, B, C):
    return (A.astype(np.float64) @ B.astype(np.float64) + C).astype(np.float32)


def lane_registers(D):
    """regs[l, k] per the C/D fragment figure."""
    regs = np.empty((32, 4), dtype=np.float32)
    for lane in range(32):
        for k, (r, c) in enumerate(ex._cd_coords(lane >> 2, lane & 3)):
            regs[lane, k] = D[r, c]
    return regs


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [F16, BF16])
def test_mma_probe_on_gpu(cp, dtype):
    kernel = ex.mma_kernel(dtype)
    A, B, C = mma_inputs(dtype, 7)
    D = cp.full((16, 8), np.nan, dtype=np.float32)
    regs = cp.full((32, 4), np.nan, dtype=np.float32)
    gpu_run(kernel, {"A": to_device(cp, A, dtype), "B": to_device(cp, B, dtype),
                     "C": cp.asarray(C), "D": D, "regs": regs})
    want = mma_expected(A, B, C)
    np.testing.assert_array_equal(cp.asnumpy(D), want)
    np.testing.assert_array_equal(cp.asnumpy(regs), lane_registers(want))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [F16, BF16])
def test_mma_interpreter_matches_gpu(cp, dtype):
    A, B, C = mma_inputs(dtype, 8)
    D = cp.full((16, 8), np.nan, dtype=np.float32)
    regs = cp.full((32, 4), np.nan, dtype=np.float32)
    gpu_run(ex.mma_kernel(dtype), {"A": to_device(cp, A, dtype), "B": to_device(cp, B, dtype),
                                   "C": cp.asarray(C), "D": D, "regs": regs})
    host = {"A": A, "B": B, "C": C, "D": np.full((16, 8), np.nan, np.float32),
            "regs": np.full((32, 4), np.nan, np.float32)}
    run_interp_or_skip(ex.mma_kernel(dtype), host)
    np.testing.assert_array_equal(bits(host["D"]), bits(cp.asnumpy(D)))
    np.testing.assert_array_equal(bits(host["regs"]), bits(cp.asnumpy(regs)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [F16, BF16])
def test_ldmatrix_then_mma_on_gpu(cp, dtype):
    A, B, _ = mma_inputs(dtype, 9)
    D = cp.full((16, 8), np.nan, dtype=np.float32)
    kernel = ex.ldmatrix_mma_kernel(dtype)
    gpu_run(kernel, {"A": to_device(cp, A, dtype), "B": to_device(cp, B, dtype), "D": D})
    want = mma_expected(A, B, np.zeros((16, 8), np.float32))
    np.testing.assert_array_equal(cp.asnumpy(D), want)
    host = {"A": A, "B": B, "D": np.full((16, 8), np.nan, np.float32)}
    run_interp_or_skip(ex.ldmatrix_mma_kernel(dtype), host)
    np.testing.assert_array_equal(bits(host["D"]), bits(cp.asnumpy(D)))


def cp_async_input():
    # nonzero everywhere, so a zero in the output can only be a zero fill
    return (np.arange(ex.CP_ASYNC_ELEMENTS, dtype=np.float32) + 1) * np.float32(1.5)


@pytest.mark.gpu
def test_cp_async_on_gpu(cp):
    x = cp_async_input()
    y = cp.full(ex.CP_ASYNC_ELEMENTS, np.nan, dtype=np.float32)
    gpu_run(ex.cp_async_kernel(), {"x": cp.asarray(x), "y": y})
    want = ex.cp_async_expected(x)
    assert (want == 0).sum() > 40                 # the zero fills are exercised
    np.testing.assert_array_equal(cp.asnumpy(y), want)


@pytest.mark.gpu
def test_cp_async_interpreter_matches_gpu(cp):
    x = cp_async_input()
    y = cp.full(ex.CP_ASYNC_ELEMENTS, np.nan, dtype=np.float32)
    gpu_run(ex.cp_async_kernel(), {"x": cp.asarray(x), "y": y})
    host_y = np.full(ex.CP_ASYNC_ELEMENTS, np.nan, dtype=np.float32)
    run_interp_or_skip(ex.cp_async_kernel(), {"x": x, "y": host_y})
    np.testing.assert_array_equal(bits(host_y), bits(cp.asnumpy(y)))


# -- the numpy oracles themselves (no GPU) -------------------------------------------------

def test_ldmatrix_oracle_matches_the_design_figure():
    tile = np.arange(256)
    y = ex.ldmatrix_expected(tile, 4, False)
    # lane 5: g = 1, t = 1: register i holds row 1, columns 2 and 3 of matrix i
    assert list(y[5]) == [10, 11, 74, 75, 138, 139, 202, 203]
    yt = ex.ldmatrix_expected(tile, 4, True)
    # with .trans: rows 2 and 3, column 1 of matrix i
    assert list(yt[5]) == [17, 25, 81, 89, 145, 153, 209, 217]


def test_mma_fragment_coordinates_cover_each_matrix_once():
    seen_a, seen_b, seen_c = set(), set(), set()
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        seen_a.update(ex._a_coords(g, t))
        seen_b.update(ex._b_coords(g, t))
        seen_c.update(ex._cd_coords(g, t))
    assert len(seen_a) == 256 and len(seen_b) == 128 and len(seen_c) == 128
    assert ex._a_coords(1, 2)[:4] == [(1, 4), (1, 5), (9, 4), (9, 5)]
    assert ex._b_coords(1, 2) == [(4, 1), (5, 1), (12, 1), (13, 1)]


# -- the probe kernels on the interpreter, against the same oracles (no GPU) ---------------
# These check the hand-built kernels and the oracles the GPU probes use, before a GPU sees
# them; they skip where the interpreter does not run the new statements.

@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("num", [1, 2, 4])
def test_ldmatrix_kernel_on_interpreter(num, trans):
    tile = ldmatrix_tile(num, BF16)
    y = np.full((32, 2 * num), np.nan, dtype=ml_dtypes.bfloat16)
    run_interp_or_skip(ex.ldmatrix_kernel(num, trans, BF16), {"x": tile, "y": y})
    np.testing.assert_array_equal(bits(y), bits(ex.ldmatrix_expected(tile, num, trans)))


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_mma_kernels_on_interpreter(dtype):
    A, B, C = mma_inputs(dtype, 10)
    host = {"A": A, "B": B, "C": C, "D": np.full((16, 8), np.nan, np.float32),
            "regs": np.full((32, 4), np.nan, np.float32)}
    run_interp_or_skip(ex.mma_kernel(dtype), host)
    want = mma_expected(A, B, C)
    np.testing.assert_array_equal(host["D"], want)
    np.testing.assert_array_equal(host["regs"], lane_registers(want))
    host = {"A": A, "B": B, "D": np.full((16, 8), np.nan, np.float32)}
    run_interp_or_skip(ex.ldmatrix_mma_kernel(dtype), host)
    np.testing.assert_array_equal(host["D"], mma_expected(A, B, np.zeros_like(C)))


def test_cp_async_kernel_on_interpreter():
    x = cp_async_input()
    y = np.full(ex.CP_ASYNC_ELEMENTS, np.nan, dtype=np.float32)
    run_interp_or_skip(ex.cp_async_kernel(), {"x": x, "y": y})
    np.testing.assert_array_equal(y, ex.cp_async_expected(x))
