"""Kernel variants with narrower vector copies: `lower(fusion, vector_caps={global tensor:
bytes})` (pass narrow_vectors) narrows every vectorized copy and cp.async whose global
side is a named tensor, so that arrays whose rows are not a whole number of 16-byte
vectors (or not aligned) can run; driver.vector_widths.widest_access_bytes picks the
cap from an actual array. Covered here: the pass on small fusions (its loops, a no-op
without caps, its errors), the zero fill of element copies (an async cache, a tile the
tensor cores read) that replaces cp.async's, and the tensor-core matmul at sizes that
need every width (TT and NT operands, the shared-memory epilogue's output), run in the
interpreter on integer-valued inputs: bit for bit the reference, no race.
"""

import numpy as np
import pytest

import codegen
import fuserir
from codegen import nvrtc
from codegen.cuda import emit_cuda
from codegen.errors import RaceError
from codegen.interp import run_kernel
from driver.vector_widths import offset_access_bytes, widest_access_bytes
from fuserir.scheduler import MatmulParams, schedule_matmul
from lowering import kir
from lowering.verify import bank_conflicts
from lowering.context import LoweringContext
from lowering.errors import LoweringError
from lowering.pipeline import lower
from lowering.passes import narrow_vectors, predicates

from test_async_copy import F16_VECTORS
from test_vector_copy import SHARED_TO_GLOBAL


def after(text, name, caps):
    kernel, dumps = lower(fuserir.parse(text), vector_caps=caps, dump_after=[name],
                          stop_after=name)
    return dumps[name]


# -- the pass on a small fusion ------------------------------------------------------------

def narrowed(text, caps):
    """The fusion as pass narrow_vectors leaves lowering's copy of it."""
    ctx = LoweringContext(fuserir.parse(text), vector_caps=caps)
    narrow_vectors.run(ctx, None)
    return ctx.fusion


XS = "xs: f16[M, N] shared loop=[iBIDx{M} i{ceildiv(N, 128)} iTIDx{16} {}] compute_at=2"


Y = "y: f32[M, N] global loop=[iBIDx{M} i{ceildiv(ceildiv(N, 4), 32)} iTIDx{32} {}]"


@pytest.mark.parametrize("text, tensor, caps, expected", [
    (F16_VECTORS, "xs", None, XS.replace("{}", "ivectorize{8}")),        # 16 bytes
    (F16_VECTORS, "xs", {"x": 16}, XS.replace("{}", "ivectorize{8}")),
    (F16_VECTORS, "xs", {"x": 8}, XS.replace("{}", "iunroll{2} ivectorize{4}")),
    (F16_VECTORS, "xs", {"x": 4}, XS.replace("{}", "iunroll{4} ivectorize{2}")),
    (F16_VECTORS, "xs", {"x": 2}, XS.replace("{}", "iunroll{8} iunroll{1}")),   # elements
    (SHARED_TO_GLOBAL, "y", None, Y.replace("{}", "ivectorize{4}")),     # 16 bytes
    (SHARED_TO_GLOBAL, "y", {"y": 8}, Y.replace("{}", "iunroll{2} ivectorize{2}")),
    (SHARED_TO_GLOBAL, "y", {"y": 4}, Y.replace("{}", "iunroll{4} iunroll{1}")),    # elements
    (SHARED_TO_GLOBAL, "y", {"x": 4}, Y.replace("{}", "ivectorize{4}")),  # not y's copy
])
def test_narrow_vectors_splits_the_vector_axis(text, tensor, caps, expected):
    assert narrowed(text, caps).tensor(tensor).describe() == expected


def test_the_narrowed_copy_lowers_to_narrower_cp_async():
    fusion = fuserir.parse(F16_VECTORS)
    printed = fuserir.print_fusion(fusion)
    lower(fusion, vector_caps={"x": 8})
    assert fuserir.print_fusion(fusion) == printed          # the user's fusion: unchanged
    # the narrowing is in the schedule of lowering's copy, as the transforms wrote it
    assert "xs.vectorize(3)\n  xs.split(-1, 4)\n  xs.parallelize(-2, unroll)\n" \
           "  xs.vectorize(-1)\n}" in after(F16_VECTORS, "narrow_vectors", {"x": 8})
    assert after(F16_VECTORS, "predicates", {"x": 8}) == """\
kernel f(f16 x[M, N], f32 y[M, N], i32 M, i32 N)
  grid=(M, 1, 1) block=(128, 1, 1) index=i32
   S1  alloc shared f16 xs[128] @ byte 0
   S2  alloc local f32 t1[1]
   S3  for i0 in 0..ceildiv(N, 128)
   S4    unroll for i1 in 0..2
   S5      if (threadIdx.x < 16)
   S6        cp.async.ca xs[((threadIdx.x * 8) + (i1 * 4))] <- x[((blockIdx.x * x_stride0) + (((i0 * 128) + ((threadIdx.x * 8) + (i1 * 4))) * x_stride1))], 8 bytes, src-size ((((i0 * 128) + ((threadIdx.x * 8) + (i1 * 4))) < N) ? 8 : 0)
   S7    cp.async.commit_group
   S8    cp.async.wait_group 0
   S9    if (((i0 * 128) + threadIdx.x) < N)
  S10      t1[0] = (f32)xs[((((threadIdx.x / 8) * 8) + (((threadIdx.x % 8) / 4) * 4)) + (threadIdx.x % 4))]
  S11    if (((i0 * 128) + threadIdx.x) < N)
  S12      y[((blockIdx.x * y_stride0) + (((i0 * 128) + threadIdx.x) * y_stride1))] = (t1[0] * 2.0)
"""


def test_the_output_of_a_shared_tile_is_narrowed_too():
    # y = set(ys), 4 f32 (16 bytes) per thread -> 2 x 8 bytes; the shared side keeps its
    # layout (the allocation line is the same)
    wide = after(SHARED_TO_GLOBAL, "indexing", None)
    narrow = after(SHARED_TO_GLOBAL, "indexing", {"y": 8})
    alloc = [line for line in wide.splitlines() if "alloc shared" in line]
    assert alloc and alloc == [line for line in narrow.splitlines() if "alloc shared" in line]
    stores = [s for s in kir.walk(lower(fuserir.parse(SHARED_TO_GLOBAL),
                                        vector_caps={"y": 8})[0].body)
              if isinstance(s, kir.Store) and s.buffer.name == "y"]
    assert [s.width for s in stores] == [2]
    assert "unroll for" in narrow and " x2]" in narrow


def matmul_fusion(layout="NT", **changes):
    a, b = {"TT": ("[M, K]", "[K, N]"), "NT": ("[K, M]", "[K, N]")}[layout]
    f = fuserir.parse(f"""
fusion mm(A: f16{a}, B: f16{b}) {{
  acc = matmul(A, B, layout={layout})
  out = cast(acc, f16)
  output out
}}""")
    params = dict(cta_tile=(64, 64, 32), warp_tile=(32, 32, 32), stages=3, splitk_factor=2,
                  use_smem_epilogue=True, promote_prologue_smem_reuse=True)
    schedule_matmul(f, MatmulParams(**{**params, **changes}))
    return f


@pytest.mark.parametrize("text", [F16_VECTORS, SHARED_TO_GLOBAL, "matmul"])
def test_without_caps_or_with_wide_ones_nothing_changes(text):
    if text == "matmul":
        fusion = matmul_fusion()
        variants = [{}, {"A": 16, "B": 32, "out": 16}]
    else:
        fusion = fuserir.parse(text)
        name = {F16_VECTORS: "x", SHARED_TO_GLOBAL: "y"}[text]
        other = {F16_VECTORS: "y", SHARED_TO_GLOBAL: "x"}[text]   # no vector copy of it
        variants = [{}, {name: 16}, {name: 64}, {other: 4}]
    default = emit_cuda(lower(fusion)[0])
    for caps in variants:
        assert emit_cuda(lower(fusion, vector_caps=caps)[0]) == default, caps


@pytest.mark.parametrize("caps, message", [
    ([("x", 4)], "vector_caps must be a dict {global tensor name: bytes}, got list"),
    ({"xs": 4}, "vector_caps names 'xs', which is not a global tensor of fusion f (its "
                "inputs and outputs: x, y)"),
    ({"x": 1}, "vector_caps['x'] = 1: a cap is a whole number of bytes per access, at "
               "least one element of x (f16, 2 bytes)"),
    ({"x": 4.0}, "vector_caps['x'] = 4.0: a cap is a whole number of bytes"),
])


def test_bad_caps_are_refused(caps, message):
    with pytest.raises(LoweringError) as refused:
        lower(fuserir.parse(F16_VECTORS), vector_caps=caps)
    assert str(refused.value).startswith(message)


def syncs(kernel):
    return [(s.sync_id, type(s).__name__,
             sorted({(r.kind.value, r.buffers) for r in s.reasons}))
            for s in kir.walk(kernel.body)
            if isinstance(s, (kir.Barrier, kir.CpAsyncWait)) and s.sync_id]


@pytest.mark.parametrize("cap", [8, 4])
def test_narrower_cp_async_needs_no_other_syncs_and_compiles(cap):
    f = matmul_fusion("NT")
    default, _ = lower(f)
    kernel, _ = lower(f, vector_caps={"A": cap, "B": cap, "out": cap})
    assert syncs(kernel) == syncs(default)
    copies = [s for s in kir.walk(kernel.body) if isinstance(s, kir.CpAsync)]
    assert {(s.nbytes, s.cache) for s in copies} == {(cap, "ca")}
    # the tiles keep their layout and swizzle: the ldmatrix reads hit the same banks
    sizes = {"M": 128, "N": 128, "K": 128, "splitk": 2}
    reads = [[(r.kind, r.width, r.worst, r.examined) for r in bank_conflicts.report(k, sizes)
              if r.kind == "ldmatrix"] for k in (default, kernel)]
    assert reads[0] == reads[1] and [worst for _, _, worst, _ in reads[0]] == [1, 1]
    assert nvrtc.compile_to_cubin(emit_cuda(kernel), kernel.name, arch="sm_90")


# -- the zero fill of element copies -------------------------------------------------------

def integer(rng, shape):
    return rng.integers(-3, 4, shape).astype(np.float16)


def operands(rng, layout, m, n, k):
    a, b = {"TT": ((m, k), (k, n)), "NT": ((k, m), (k, n))}[layout]
    return {"A": integer(rng, a), "B": integer(rng, b)}


def accesses(kernel):
    """{global tensor: {bytes per access}} of the copies between global and shared memory:
    cp.async sources, shared stores of global loads, global stores of shared loads."""
    found = {}
    for s in kir.walk(kernel.body):
        if isinstance(s, kir.CpAsync):
            found.setdefault(s.src.name, set()).add(s.nbytes)
            continue
        if not isinstance(s, kir.Store):
            continue
        other = kir.Memory.global_ if s.buffer.memory is kir.Memory.shared else \
            kir.Memory.shared if s.buffer.memory is kir.Memory.global_ else None
        loads = [e.buffer for e in kir.walk_expr(s.value)
                 if isinstance(e, kir.Load) and e.buffer.memory is other]
        if other is not None and loads:
            glob = s.buffer if other is kir.Memory.shared else loads[0]
            found.setdefault(glob.name, set()).add(s.width * s.buffer.dtype.itemsize)
    return found


def run(kernel, arrays, m, n, k, splitk):
    out = np.full((m, n), np.nan, np.float16)
    run_kernel(kernel, {**arrays, "out": out, "M": m, "N": n, "K": k, "splitk": splitk})
    return out


def test_element_copies_of_an_async_cache_store_zero_out_of_bounds():
    # caps at the element size: no cp.async moves 2 bytes, so ordinary loads and stores,
    # unrolled; out of bounds they store 0 (as cp.async's zero fill would), and only the
    # thread guard skips
    text = after(F16_VECTORS, "predicates", {"x": 2})
    assert "xs.parallelize(-1, unroll)\n}" in after(F16_VECTORS, "narrow_vectors", {"x": 2})
    assert """\
   S4    unroll for i1 in 0..8
   S5      if (threadIdx.x < 16)
   S6        xs[((threadIdx.x * 8) + i1)] = ((((i0 * 128) + ((threadIdx.x * 8) + i1)) < N) ? x[((blockIdx.x * x_stride0) + (((i0 * 128) + ((threadIdx.x * 8) + i1)) * x_stride1))] : 0.0)
""" in text


def enclosing_conditions(stmts, conds=()):
    """(statement, [the conditions of the ifs around it]) for every statement."""
    for s in stmts:
        yield s, list(conds)
        if isinstance(s, kir.IfThenElse):
            yield from enclosing_conditions(s.then_body, conds + (s.cond,))
            yield from enclosing_conditions(s.else_body, conds)
        else:
            for body in s.bodies():
                yield from enclosing_conditions(body, conds)


def test_prefetches_past_the_loop_end_still_skip_element_stores():
    """circular_buffer's prefetch of tile i+S-1 past the loop's end is skipped, not
    zero-filled: those stages are never read (and the interpreter runs clean above)."""
    kernel, _ = lower(matmul_fusion("TT"), vector_caps={"A": 2})
    loop = next(s for s in kir.walk(kernel.body) if isinstance(s, kir.ForLoop)
                and any(isinstance(x, kir.CpAsyncWait) for x in s.body))
    stores = [(s, conds) for s, conds in enclosing_conditions(loop.body)
              if isinstance(s, kir.Store) and s.buffer.name == "A_cache"]
    assert stores
    for s, conds in stores:
        assert isinstance(s.value, kir.Select) and kir.format_expr(s.value.b) == "0.0"
        assert f"(({loop.var.name} + 2) < " in kir.format_expr(conds[0])


def test_without_the_zero_fill_the_k_tail_reads_stale_bytes(rng, monkeypatch):
    """What the zero fill prevents: an element copy that skips out-of-bounds elements
    leaves the K tail of the last tile unwritten, and the tensor cores read it."""
    f = matmul_fusion("TT")
    arrays = operands(rng, "TT", 64, 64, 67)
    monkeypatch.setattr(predicates, "zero_filled", lambda tv: False)
    kernel, _ = lower(f, vector_caps={"A": 2})
    with pytest.raises(RaceError) as caught:
        run(kernel, arrays, 64, 64, 67, splitk=1)
    assert any(h.kind == "uninitialized-read" and h.buffer == "A_cache"
               for h in caught.value.hazards)


def test_element_copies_of_ordinary_operand_caches_are_zero_filled_too(rng):
    """Operands staged without cp.async (async_gmem_load_operands=False): their element
    copies store 0 out of bounds as well, since the tensor cores read the whole tile."""
    f = matmul_fusion("TT", stages=1, async_gmem_load_operands=False)
    arrays = operands(rng, "TT", 64, 64, 67)
    kernel, _ = lower(f, vector_caps={"A": 2, "B": 2})
    assert accesses(kernel) == {"A": {2}, "B": {2}, "out": {16}}
    out = run(kernel, arrays, 64, 64, 67, splitk=2)
    assert np.array_equal(out, fuserir.evaluate(f, arrays)["out"])


@pytest.mark.parametrize("m, n, k", [(64, 64, 72), (128, 128, 72), (72, 40, 104)])
def test_regression_wide_ordinary_operand_copies_zero_the_k_tail(rng, m, n, k):
    # an ordinary (not async) operand cache copied by 16-byte vectors skipped the vectors
    # past K, so the tensor cores read stale bytes in the last tile's K tail: it now
    # stores a vector of zeros there (CUDA and the interpreter)
    f = matmul_fusion("TT", stages=1, async_gmem_load_operands=False)
    kernel = lower(f)[0]
    zeros = [s for s in kir.walk(kernel.body) if isinstance(s, kir.Store) and s.width > 1
             and isinstance(s.value, kir.Const)]
    assert {s.buffer.name for s in zeros} == {"A_cache", "B_cache"}
    source = emit_cuda(kernel)
    assert "= u32x4{};" in source
    assert nvrtc.compile_to_cubin(source, kernel.name, arch="sm_90")
    arrays = operands(rng, "TT", m, n, k)
    out = run(kernel, arrays, m, n, k, splitk=1)
    assert np.array_equal(out, fuserir.evaluate(f, arrays)["out"])


# -- widest_access_bytes -------------------------------------------------------------------

def widest(array, most=16, shift=0):
    return widest_access_bytes(array.shape, array.strides, array.itemsize,
                               array.__array_interface__["data"][0] + shift, most)


def aligned(shape, dtype=np.float16):
    """A C-contiguous array whose first element is 64-byte aligned."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    raw = np.zeros(n * dtype.itemsize + 64, np.uint8)
    start = -raw.__array_interface__["data"][0] % 64
    return raw[start:start + n * dtype.itemsize].view(dtype).reshape(shape)


@pytest.mark.parametrize("shape, expected", [((3, 72), 16), ((3, 68), 8), ((3, 66), 4),
                                             ((3, 67), 2), ((72,), 16), ((5, 1), 2)])


def test_widest_access_of_contiguous_f16_rows(shape, expected):
    assert widest(aligned(shape)) == expected


def test_widest_access_checks_strides_address_and_the_cap():
    x = aligned((4, 80))
    assert widest(x) == 16
    assert widest(x, most=8) == 8 and widest(x, most=6) == 4 and widest(x, most=3) == 2
    assert widest(x[:, ::2]) == 2                  # last axis not contiguous
    assert widest(x.T) == 2                        # transposed: columns are 160 bytes apart
    assert widest(x[:, 4:76]) == 8                 # starts 8 bytes in, rows of 72
    assert widest(x[:, 1:]) == 2                   # starts 2 bytes in
    assert widest(x[:, :72]) == 16                 # 72 of every 80: rows 160 bytes apart
    assert widest(x, shift=4) == 4                 # the address alone decides
    assert widest(aligned((4, 80))[::3]) == 16     # every third row: 480-byte stride
    assert widest(aligned((2, 3, 8))[:, 1:2]) == 16
    assert widest(aligned((3, 4), np.float32)) == 16
    assert widest(aligned((3, 6), np.float32)) == 8       # rows of 24 bytes
    assert widest(aligned((3, 5), np.float32)) == 4       # element copies of f32
    assert widest(aligned((3, 2), np.float64)) == 16
    assert widest(aligned((3, 3), np.float64)) == 8
    # an axis of extent 1 has no stride to respect; a 0-d array is one element
    assert widest_access_bytes((1, 8), (3, 2), 2, 0, 16) == 16
    assert widest_access_bytes((8, 1), (2, 7), 2, 0, 16) == 2
    assert widest_access_bytes((), (), 2, 0, 16) == 2


def test_an_offset_allows_the_vectors_it_is_a_multiple_of():
    """An access at a launch-time offset (kernel.vector_offsets: a slice's start, a cat's
    boundary) past an aligned one keeps the alignment its bytes are a multiple of."""
    assert offset_access_bytes(256, 2) == 16 and offset_access_bytes(260, 2) == 8
    assert offset_access_bytes(258, 2) == 4 and offset_access_bytes(257, 2) == 2
    assert offset_access_bytes(-256, 2) == 16 and offset_access_bytes(0, 4) == 16
    assert offset_access_bytes(6, 4) == 8 and offset_access_bytes(6, 4, most=4) == 4
    assert offset_access_bytes(3, 4) == 4 and offset_access_bytes(1, 8) == 8


# -- the tensor-core matmul at sizes that need every width ---------------------------------

def caps_for(arrays):
    return {name: widest(array) for name, array in arrays.items()}


def test_nt_matmul_515x259x67_runs_with_element_copies(rng):
    """The motivating size: A f16[67, 515], B f16[67, 259], out f16[515, 259]: no row is
    a whole number of 4-byte words, so every operand row and output row is copied an
    element at a time (the operands' K tail zero-filled), bit for bit the reference."""
    m, n, k = 515, 259, 67
    f = matmul_fusion("NT", cta_tile=(128, 128, 32), warp_tile=(64, 64, 32))
    arrays = operands(rng, "NT", m, n, k)
    caps = caps_for({**arrays, "out": aligned((m, n))})
    assert caps == {"A": 2, "B": 2, "out": 2}
    # through the user's path: run() picks the variant with element copies of all three
    exe = codegen.compile(f, backend="interp")
    out = exe.run(arrays)["out"]                        # splitk: the schedule's default 2
    assert np.array_equal(out, fuserir.evaluate(f, arrays)["out"])
    (compiled,) = exe.kernels_for(arrays)
    assert compiled.caps == {"A": 2, "B": 2, "out": 2}
    kernel = compiled.kir
    assert accesses(kernel) == {"A": {2}, "B": {2}, "out": {2}}
    assert "mma.m16n8k16.f16" in compiled.kir_text
    assert nvrtc.compile_to_cubin(emit_cuda(kernel), kernel.name, arch="sm_90")


def test_seed_tiles_at_515x259x67(rng):
    m, n, k = 515, 259, 67
    f = matmul_fusion("NT", cta_tile=(256, 128, 32), warp_tile=(64, 64, 32))
    arrays = operands(rng, "NT", m, n, k)
    kernel, _ = lower(f, vector_caps={"A": 2, "B": 2, "out": 2})
    out = run(kernel, arrays, m, n, k, splitk=2)
    assert np.array_equal(out, fuserir.evaluate(f, arrays)["out"])


# (layout, M, N, K): the narrowed tensors' rows are 72, 68, 66 or 67 elements: 16, 8, 4
# bytes or elements
WIDTHS = {72: 16, 68: 8, 66: 4, 67: 2}


CASES = ([("TT", 64, 64, e) for e in WIDTHS] +          # A[M, K]: rows along K
         [("NT", e, 64, 40) for e in WIDTHS] +          # A[K, M]: rows along M
         [("NT", 64, e, 40) for e in WIDTHS])           # B[K, N] and out[M, N]: along N


@pytest.mark.parametrize("layout, m, n, k", CASES,
                         ids=[f"{c[0]}-{c[1]}x{c[2]}x{c[3]}" for c in CASES])
def test_every_width_equals_the_reference(rng, layout, m, n, k):
    f = matmul_fusion(layout)
    arrays = operands(rng, layout, m, n, k)
    caps = caps_for({**arrays, "out": aligned((m, n))})
    row = {"TT": k, "NT": m}[layout] if n == 64 else n
    narrowed = {"A"} if n == 64 else {"B", "out"}
    assert caps == {name: WIDTHS[row] if name in narrowed else 16
                    for name in ("A", "B", "out")}
    kernel, _ = lower(f, vector_caps=caps)
    assert accesses(kernel) == {name: {caps[name]} for name in ("A", "B", "out")}
    out = run(kernel, arrays, m, n, k, splitk=2)
    assert np.array_equal(out, fuserir.evaluate(f, arrays)["out"])


# -- on the GPU -----------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["TT", "NT"])
def test_gpu_an_unscheduled_matmul_of_odd_sizes_runs_on_tensor_cores(layout):
    """1023x2047x4095: no operand or output row fits a 16-byte copy; the automatic plan
    keeps a tensor-core schedule with element copies and matches float64 (rtol 2^-10,
    atol 1e-5 K) on fresh uniform inputs, outputs poisoned first."""
    import cupy as cp
    m, n, k = 1023, 2047, 4095
    f = matmul_fusion(layout)
    unscheduled = fuserir.parse(fuserir.print_fusion(f).split("schedule")[0])
    exe = codegen.compile(unscheduled, backend="cuda")
    rng = cp.random.default_rng()
    shapes = {"TT": ((m, k), (k, n)), "NT": ((k, m), (k, n))}[layout]
    a, b = (rng.uniform(-1, 1, s, dtype=cp.float32).astype(cp.float16) for s in shapes)
    out = exe.run({"A": a, "B": b}, poison=True)["out"]
    a64, b64 = a.astype(cp.float64), b.astype(cp.float64)
    ref = (a64 if layout[0] == "T" else a64.T) @ b64
    bad = cp.abs(out.astype(cp.float64) - ref) > 1e-5 * k + 2.0 ** -10 * cp.abs(ref)
    assert int(bad.sum()) == 0
    kernels = exe.kernels_for({"A": a, "B": b})
    assert kernels[0].caps == {"A": 2, "B": 2, "out": 2}
    # sm_90: the Hopper path, its producer warp group copying rows of odd length
    hopper = int(cp.cuda.Device().compute_capability) >= 90
    assert ("wgmma" if hopper else "mma.m16n8k16.f16") in kernels[0].kir_text


@pytest.mark.gpu
def test_gpu_the_seed_schedule_at_515x259x67_equals_the_interpreter(rng):
    m, n, k = 515, 259, 67
    f = matmul_fusion("NT", cta_tile=(256, 128, 32), warp_tile=(64, 64, 32), splitk_factor=5)
    arrays = operands(rng, "NT", m, n, k)
    cpu = codegen.compile(f, backend="interp").run(arrays)["out"]
    gpu = codegen.compile(f, backend="cuda").run(arrays, poison=True)["out"].get()
    assert np.array_equal(gpu, cpu) and np.array_equal(cpu, fuserir.evaluate(f, arrays)["out"])
