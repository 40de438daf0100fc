"""CUDA emission from kernel IR: every hand-built kernel compiles with NVRTC (no GPU
needed), and the text keeps the ABI, the labels and the barrier reasons."""

import re

import pytest

import kir_examples as ex
from codegen import nvrtc
from codegen.cuda import emit_cuda
from codegen.errors import CodegenError
from fuserir import op_table
from fuserir.dtypes import DataType
from lowering import kir

I32, I64, F32, F64, F16, BF16, BOOL = (DataType.i32, DataType.i64, DataType.f32,
                                       DataType.f64, DataType.f16, DataType.bf16,
                                       DataType.bool)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSERIR_CACHE_DIR", str(tmp_path / "cache"))


def compile_kernel(kernel):
    return nvrtc.compile_to_cubin(emit_cuda(kernel), kernel.name, arch="sm_90")


def signature_names(source, name):
    m = re.search(rf'extern "C" __global__ void {name}\((.*?)\)\s*(//[^\n]*)?\n\{{',
                  source, re.S)
    assert m, source
    decls = [re.sub(r"//.*", "", line).strip().rstrip(",)") for line in
             m.group(1).splitlines()]
    return [d.split()[-1] for d in decls if d]


# -- every kernel compiles ---------------------------------------------------------------

@pytest.mark.parametrize("which", sorted(ex.ALL_KERNELS))
def test_example_kernel_compiles_to_a_cubin(which):
    kernel = ex.ALL_KERNELS[which]()
    source = emit_cuda(kernel)
    assert "#include" not in source and not re.search(r"^\s*#\s*include", source, re.M)
    assert f'extern "C" __global__ void {kernel.name}(' in source
    cubin = compile_kernel(kernel)
    assert cubin[:4] == b"\x7fELF"


def test_every_statement_label_appears_as_a_trailing_comment():
    for make in ex.ALL_KERNELS.values():
        kernel = make()
        source = emit_cuda(kernel)
        for s in kir.walk(kernel.body):
            pattern = rf"\({s.label}\)$" if isinstance(s, kir.Comment) else \
                rf"// {s.label}\b"
            assert re.search(pattern, source, re.M), (kernel.name, s.label)


def test_abi_order_pointers_then_strides_then_scalars():
    kernel = ex.pointwise_kernel()
    source = emit_cuda(kernel)
    assert signature_names(source, "pointwise") == \
        ["x", "y", "x_s0", "x_s1", "y_s0", "y_s1", "M", "N"]
    assert "const f32* __restrict__ x," in source
    assert re.search(r"^\s+f32\* y,", source, re.M)
    assert re.search(r"^\s+i32 M,", source, re.M)


def test_i64_index_kernel_uses_i64_parameters_and_indices():
    source = emit_cuda(ex.pointwise_kernel(I64))
    assert re.search(r"^\s+i64 x_s0,", source, re.M)
    assert re.search(r"^\s+i64 N\)", source, re.M)
    assert "(i64)threadIdx.x" in source and "(i32)" not in source


def test_pointwise_text():
    source = emit_cuda(ex.pointwise_kernel())
    # the bounds predicate, signed index math, f32 literals
    assert ("  if (((((i32)blockIdx.y * 8) + (i32)threadIdx.y) < M) && "
            "((((i32)blockIdx.x * 32) + (i32)threadIdx.x) < N)) {  // S2\n") in source
    assert "* 2.0f) + 1.0f;  // S3" in source
    assert "  // y = x * 2 + 1: thread (i, j) computes element [i, j]  (S1)" in source
    # no f16/bf16 machinery where none is used
    assert "struct __align__(2)" not in source and "asm(" not in source


def test_shared_buffer_and_barrier_with_its_reason():
    kernel = ex.shared_reverse_kernel(pad_bytes=64)
    source = emit_cuda(kernel)
    lines = source.splitlines()
    assert "  extern __shared__ __align__(16) unsigned char smem[];" in lines
    assert "  f32* xs = reinterpret_cast<f32*>(smem + 64);  // S1: alloc shared f32 " \
           "xs[128] @ byte 64" in lines
    i = lines.index("  // sync1: RAW on xs: S3 -> S6")
    assert lines[i + 1] == "  __syncthreads();  // S4 sync1"
    assert source.count("__syncthreads()") == 1
    # the barrier sits between the shared write and the shared read
    assert source.index("xs[(i32)threadIdx.x] = ") < source.index("__syncthreads") < \
        source.index("= xs[127 - (i32)threadIdx.x]")


def test_barrier_reasons_each_get_a_line():
    kernel = ex.shared_reverse_kernel()
    barrier = next(s for s in kir.walk(kernel.body) if isinstance(s, kir.Barrier))
    write, read = kernel.body[1].then_body[0], kernel.body[3].then_body[0]
    barrier.reasons.append(kir.SyncReason(kir.HazardKind.WAR, ("xs", "ys"), read, write,
                                          loop_carried=True))
    source = emit_cuda(kernel)
    assert "// sync1: RAW on xs: S3 -> S6\n" in source
    assert "// sync1: WAR on xs/ys: S6 -> S3, loop-carried\n" in source
    compile_kernel(kernel)


def test_half_and_bfloat16_conversions_go_through_the_preamble():
    source = emit_cuda(ex.half_kernel())
    assert "struct __align__(2) f16 { unsigned short x; };" in source
    assert "struct __align__(2) bf16 { unsigned short x; };" in source
    assert 'asm("cvt.rn.f16.f32 %0, %1;"' in source
    assert 'asm("cvt.rn.bf16.f32 %0, %1;"' in source
    assert "c[(((i32)blockIdx.x * 128) + (i32)threadIdx.x) * c_s0] = f32_to_f16((f16_to_f32(a[" \
        in source
    assert "f32_to_bf16(f16_to_f32(a[" in source       # f16 -> bf16 through f32
    assert "= f32_to_f16(0.5f);  // S6" in source
    assert "const f16* __restrict__ a," in source and "const bf16* __restrict__ b," in source


def test_half_conversions_compile_for_sm80():
    # bf16 from f64 / integers must not need sm_90's cvt.rn.bf16.{f64,s32,s64}
    kernel = ex.casts_kernel()
    cubin = nvrtc.compile_to_cubin(emit_cuda(kernel), kernel.name, arch="sm_80")
    assert cubin[:4] == b"\x7fELF"


def test_local_buffer_and_loops():
    source = emit_cuda(ex.local_reduction_kernel())
    lines = [line.strip() for line in source.splitlines()]
    assert "f32 acc[4];  // S1: alloc local f32 acc[4]" in lines
    i = lines.index("for (i32 u = 0; u < 4; ++u) {  // S2")
    assert lines[i - 1] == "#pragma unroll"
    assert "for (i32 k = 0; k < ((N + 4 - 1) / 4); ++k) {  // S5" in lines
    assert "smem" not in source


def test_shuffle_xor():
    source = emit_cuda(ex.warp_sum_kernel())
    for mask in (16, 8, 4, 2, 1):
        assert f"v[0] = v[0] + __shfl_xor_sync(0xffffffffu, v[0], {mask});" in source


@pytest.mark.parametrize("dtype", [F16, BF16, BOOL, I64, F64])
def test_shuffle_of_other_types_compiles(dtype):
    N = ex.scalar("N")
    x = ex.tensor("x", dtype, [N.var])
    y = ex.tensor("y", dtype, [N.var], is_output=True)
    body = [ex.store(y, [ex.tid()], kir.ShuffleXor(ex.load(x, [ex.tid()]), 1))]
    kernel = ex.finish(kir.Kernel("shfl", [x, y], [N], body,
                                  ex.launch([ex.const(1)], [ex.const(32)])))
    assert compile_kernel(kernel)[:4] == b"\x7fELF"


def test_all_ops_kernel_covers_every_op():
    kernel = ex.all_ops_kernel()
    ops = {op for _, op, _, _ in kernel.cases}
    # but the welford state's ops, whose operands no kernel parameter holds (a state
    # lives between operations): tests/test_welford.py runs them, on the GPU too
    states = {name for name, entry in {**op_table.UNARY, **op_table.BINARY}.items()
              if entry.kind == "state"}
    assert states and set(kir.UNARY_OPS) - states <= ops
    assert set(kir.BINARY_OPS) - states <= ops
    source = emit_cuda(kernel)
    assert "= fmodf(a_f32[" in source
    # integer / and % by a run-time divisor: the preamble's total versions (a / 0 = 0)
    assert "= div_i64(a_i64[" in source and "= mod_i64(a_i64[" in source
    assert "gelu_f32(f32 x) {\n  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));" \
        in source
    assert "tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x))" in source


# -- literals ------------------------------------------------------------------------------

def _store_const_kernel(value, dtype):
    out = ex.tensor("out", dtype, [ex.const(1)], is_output=True)
    body = [kir.Store(out.buffer, ex.const(0), kir.Const(value, dtype))]
    return ex.finish(kir.Kernel("lit", [out], [], body,
                                ex.launch([ex.const(1)], [ex.const(1)])))


@pytest.mark.parametrize("value,dtype,text", [
    (-2 ** 31, I32, "-2147483647 - 1"),
    (2 ** 31 - 1, I32, "2147483647"),
    (-2 ** 63, I64, "-9223372036854775807LL - 1LL"),
    (5, I64, "5LL"),
    (-3, I32, "-3"),
    (True, BOOL, "true"),
    (0.1, F32, "0.1f"),
    (1e-30, F32, "1.0e-30f"),
    (3e38, F32, "3.0e+38f"),
    (-2.5, F64, "-2.5"),
    (0.1, F64, "0.1"),
    (float("inf"), F32, "__int_as_float(0x7f800000)"),
    (float("-inf"), F64, "__longlong_as_double(0xfff0000000000000LL)"),
    (float("nan"), F32, "__int_as_float(0x7fffffff)"),
    (65504.0, F16, "f32_to_f16(65504.0f)"),
    (1.0 / 3.0, BF16, "f32_to_bf16(0.33398438f)"),
])
def test_literals(value, dtype, text):
    kernel = _store_const_kernel(value, dtype)
    source = emit_cuda(kernel)
    assert f"out[0] = {text};  // S1" in source
    assert compile_kernel(kernel)[:4] == b"\x7fELF"


def test_out_of_range_literal_is_refused():
    with pytest.raises(CodegenError, match="does not fit i32"):
        emit_cuda(_store_const_kernel(2 ** 31, I32))


# -- names ---------------------------------------------------------------------------------

def test_names_that_collide_with_cuda_or_the_preamble_are_renamed():
    N = ex.scalar("int")
    x = ex.tensor("f32_to_f16", F32, [N.var])
    y = ex.tensor("smem", F16, [N.var], is_output=True)
    body = [kir.IfThenElse(ex.lt(ex.tid(), N.var), [
        ex.store(y, [ex.tid()], kir.Cast(ex.load(x, [ex.tid()]), F16))])]
    kernel = ex.finish(kir.Kernel("renamed", [x, y], [N], body,
                                  ex.launch([ex.const(1)], [ex.const(32)])))
    source = emit_cuda(kernel)
    assert signature_names(source, "renamed") == \
        ["f32_to_f16_", "smem_", "f32_to_f16_s0", "smem_s0", "int_"]
    assert "smem_[(i32)threadIdx.x * smem_s0] = f32_to_f16(f32_to_f16_[" in source
    assert compile_kernel(kernel)[:4] == b"\x7fELF"


def test_comment_text_cannot_escape_the_comment():
    body = [kir.Comment("two\nlines ending in a backslash \\"), kir.Comment("*/ /* ok")]
    kernel = ex.finish(kir.Kernel("comments", [], [], body,
                                  ex.launch([ex.const(1)], [ex.const(1)])))
    source = emit_cuda(kernel)
    assert "  // two\n  // lines ending in a backslash \\.  (S1)\n" in source
    assert compile_kernel(kernel)[:4] == b"\x7fELF"


# -- contract violations are refused, naming the statement ---------------------------------

def _kernel_storing(value, dtype=F32, extra=()):
    out = ex.tensor("out", dtype, [ex.const(4)], is_output=True)
    body = list(extra) + [kir.Store(out.buffer, ex.const(0), value)]
    return ex.finish(kir.Kernel("bad", [out], [], body,
                                ex.launch([ex.const(1)], [ex.const(1)])))


def test_mixed_operand_types_are_refused():
    value = kir.BinOp("add", kir.Const(1.0, F32), kir.Const(1, I32), F32)
    with pytest.raises(CodegenError, match=r"S1: out\[0\] = .*add of f32 and i32 operands"):
        emit_cuda(_kernel_storing(value))


def test_i32_index_math_must_not_widen_silently():
    value = kir.BinOp("mul", kir.Var("n", I32), kir.Const(4, I64), I64)
    with pytest.raises(CodegenError, match="mul of i32 and i64 operands"):
        emit_cuda(_kernel_storing(value, I64))


def test_store_of_the_wrong_type_is_refused():
    with pytest.raises(CodegenError, match="storing a f64 value into f32 buffer out"):
        emit_cuda(_kernel_storing(kir.Const(1.0, F64)))


def test_arithmetic_on_f16_is_refused():
    h = kir.Const(1.0, F16)
    with pytest.raises(CodegenError, match="add on f16"):
        emit_cuda(_kernel_storing(kir.BinOp("add", h, h, F16), F16))
    with pytest.raises(CodegenError, match="exp on f16"):
        emit_cuda(_kernel_storing(kir.UnOp("exp", h, F16), F16))


def test_float_ops_on_integers_are_refused():
    with pytest.raises(CodegenError, match="exp on i32"):
        emit_cuda(_kernel_storing(kir.UnOp("exp", kir.Const(1, I32), I32), I32))
    with pytest.raises(CodegenError, match="ceildiv on f32"):
        one = kir.Const(1.0, F32)
        emit_cuda(_kernel_storing(kir.BinOp("ceildiv", one, one, F32)))


def test_shared_buffer_without_offset_is_refused():
    xs = kir.Buffer("xs", F32, kir.Memory.shared, size=ex.const(4))
    with pytest.raises(CodegenError, match="shared buffer xs has no byte_offset"):
        emit_cuda(_kernel_storing(kir.Const(1.0, F32), extra=[kir.Allocate(xs)]))


def test_misaligned_shared_buffer_is_refused():
    xs = kir.Buffer("xs", F64, kir.Memory.shared, size=ex.const(4), byte_offset=ex.const(4))
    with pytest.raises(CodegenError, match="not aligned to its 8-byte elements"):
        emit_cuda(_kernel_storing(kir.Const(1.0, F32), extra=[kir.Allocate(xs)]))


def test_local_buffer_needs_constant_size():
    acc = kir.Buffer("acc", F32, kir.Memory.local, size=kir.Var("n", I32))
    with pytest.raises(CodegenError, match="local buffer acc needs a positive constant size"):
        emit_cuda(_kernel_storing(kir.Const(1.0, F32), extra=[kir.Allocate(acc)]))


def test_non_bool_condition_is_refused():
    out = ex.tensor("out", F32, [ex.const(4)], is_output=True)
    body = [kir.IfThenElse(ex.tid(), [kir.Store(out.buffer, ex.const(0),
                                                kir.Const(1.0, F32))])]
    kernel = ex.finish(kir.Kernel("bad", [out], [], body,
                                  ex.launch([ex.const(1)], [ex.const(1)])))
    with pytest.raises(CodegenError, match=r"S1: if threadIdx.x: if condition .* not bool"):
        emit_cuda(kernel)


def test_stride_of_the_wrong_index_type_is_refused():
    kernel = ex.pointwise_kernel()
    kernel.tensor_params[0].strides[0] = kir.Var("x_s0", I64)
    with pytest.raises(CodegenError, match="stride 0 of x x_s0 is i64, the kernel's index "
                                           "dtype is i32"):
        emit_cuda(kernel)


def test_unlowered_statement_is_refused():
    class Mystery(kir.Stmt):
        label = "S9"

        def bodies(self):
            return ()

    kernel = _kernel_storing(kir.Const(1.0, F32))
    kernel.body.append(Mystery())
    with pytest.raises(CodegenError, match="no rule for Mystery"):
        emit_cuda(kernel)
