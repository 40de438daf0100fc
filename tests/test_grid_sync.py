"""Grid synchronization: workspaces, Fence, SemWait, SemRelease and the "xor" BinOp.

A serial split-K reduction across CTAs (a "turnstile") is built by hand in kernel IR:
grid (T, 1, S) blocks of 32 x 4 threads; block (t, 0, z) is split z of output tile t. It
waits until the tile's semaphore holds z, adds its values x[z, tile] to the partial sums
of the workspace row (split 0 starts them), and either writes the row back, fences,
and releases z + 1, or (the last split) writes the output and resets the semaphore:

    if thread 0: sem_wait sem[t] == z ; barrier
    acc = z == 0 ? x[z, j] : ws[j] + x[z, j]
    not last: ws[j] = acc ; fence ; barrier ; if thread 0: sem_release sem[t] = z + 1
    last:     y[j] = acc ;                     if thread 0: sem_release sem[t] = 0

So y is the float32 sum in split order, ((x0 + x1) + x2) + ..., bit for bit. The
interpreter (codegen.interp) must run it without a hazard, leave the semaphores zero,
and report each dropped piece of the handshake as a "cross-cta" or "deadlock" hazard.
"""

import numpy as np
import pytest

import kir_examples as ex
from codegen import nvrtc
from codegen.cuda import emit_cuda
from codegen.errors import CodegenError, RaceError
from codegen.interp import InterpError, run_kernel
from fuserir.dtypes import DataType
from lowering import kir

I32, I64, F32, F64, BOOL = (DataType.i32, DataType.i64, DataType.f32, DataType.f64,
                            DataType.bool)
BX, BY = 32, 4
TILE = BX * BY


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSERIR_CACHE_DIR", str(tmp_path / "cache"))


def c(v, dtype=I32):
    return kir.Const(v, dtype)


def eq(a, b):
    return ex.binop("eq", a, b)


def turnstile(fence=True, wait=True, release=True, reset=True, producer_barrier=True,
              consumer_barrier=True, reverse=False, name="turnstile"):
    """The turnstile kernel; each flag set to False drops that piece. `reverse`: split
    z is block S - 1 - blockIdx.z, so the first block launched waits for all others."""
    N, S = ex.scalar("N"), ex.scalar("S")
    x = ex.tensor("x", F32, [S.var, N.var])
    y = ex.tensor("y", F32, [N.var], is_output=True)
    ws = kir.Buffer("ws", F32, kir.Memory.global_)
    sem = kir.Buffer("sem", I32, kir.Memory.global_)
    tiles = ex.ceildiv(N.var, c(TILE))
    workspaces = [kir.Workspace(ws, N.var), kir.Workspace(sem, tiles, zeroed=True)]
    acc = kir.Buffer("acc", F32, kir.Memory.local, size=c(1))
    tile = ex.bid("x")
    z = ex.sub(ex.sub(S.var, c(1)), ex.bid("z")) if reverse else ex.bid("z")
    j = ex.add(ex.mul(tile, c(TILE)), ex.add(ex.mul(ex.tid("y"), c(BX)), ex.tid("x")))
    thread0 = ex.land(ex.land(eq(ex.tid("x"), c(0)), eq(ex.tid("y"), c(0))),
                      eq(ex.tid("z"), c(0)))
    mine = ex.load(x, [z, j])
    total = kir.Select(eq(z, c(0)), mine, ex.add(kir.Load(ws, j), mine), F32)
    produce = [kir.IfThenElse(ex.lt(j, N.var), [kir.Store(ws, j, kir.Load(acc, c(0)))])]
    if fence:
        produce.append(kir.Fence())
    if producer_barrier:
        produce.append(kir.Barrier())
    if release:
        produce.append(kir.IfThenElse(thread0, [kir.SemRelease(sem, tile, ex.add(z, c(1)))]))
    finish = [kir.IfThenElse(ex.lt(j, N.var), [ex.store(y, [j], kir.Load(acc, c(0)))])]
    if reset:
        finish.append(kir.IfThenElse(thread0, [kir.SemRelease(sem, tile, c(0))]))
    body = [kir.Allocate(acc)]
    if wait:
        body.append(kir.IfThenElse(thread0, [kir.SemWait(sem, tile, z)]))
    if consumer_barrier:
        body.append(kir.Barrier())
    body += [
        kir.IfThenElse(ex.lt(j, N.var), [kir.Store(acc, c(0), total)]),
        kir.IfThenElse(ex.lt(z, ex.sub(S.var, c(1))), produce, finish),
    ]
    kernel = kir.Kernel(name, [x, y], [N, S], body,
                        ex.launch([tiles, c(1), S.var], [c(BX), c(BY)]),
                        workspaces=workspaces)
    return ex.finish(kernel)


def split_order_sum(x):
    """The float32 sum over axis 0 in split order, each addition rounded to f32."""
    acc = x[0].copy()
    for row in x[1:]:
        acc = (acc + row).astype(np.float32)
    return acc


def data(rng, splits=5, n=300):
    # values of mixed magnitude: the f32 sum depends on the order of additions
    x = rng.standard_normal((splits, n)) * 10.0 ** rng.integers(-3, 4, (splits, n))
    return x.astype(np.float32)


def run(kernel, x, blocks=None, workspaces=None, y=None):
    y = np.full(x.shape[1], np.nan, np.float32) if y is None else y
    run_kernel(kernel, {"x": x, "y": y, "S": x.shape[0], "N": x.shape[1]}, blocks=blocks,
               workspaces=workspaces)
    return y


def hazards(kernel, x, **kw):
    with pytest.raises(RaceError) as info:
        run(kernel, x, **kw)
    return info.value


def read_and_write(err):
    """The two cross-cta hazards of a broken handshake on ws: the next split's read of the
    partial sums, and its write of them (both after the unacquired write)."""
    assert {h.kind for h in err.hazards} == {"cross-cta"}, err
    assert all(h.buffer == "ws" for h in err.hazards), err
    (read,) = [h for h in err.hazards if "acc[0] = " in h.second]
    (write,) = [h for h in err.hazards if h.second.endswith("= acc[0]")]
    assert len(err.hazards) == 2 and read.first == write.first == write.second
    assert "ws[" in read.first and read.first.endswith(" = acc[0]")   # the partials' write
    assert "ws[" in read.second                                        # ... read back
    assert "read" in read.detail and "wrote" in write.detail
    return read


# -- (a) (b) (c): the turnstile sums in split order, with no hazard, semaphores reset ---------

@pytest.mark.parametrize("reverse", [False, True])
def test_turnstile_sums_in_split_order_without_hazard(rng, reverse):
    x = data(rng)
    want = split_order_sum(x)
    assert not np.array_equal(want, split_order_sum(x[::-1])), "order must show"
    kept = {}
    y = run(turnstile(reverse=reverse), x, workspaces=kept)   # RaceError on any hazard
    assert y.tobytes() == want.tobytes()
    assert set(kept) == {"ws", "sem"}
    assert kept["sem"].dtype == np.int32 and kept["sem"].shape == (3,)   # ceil(300/128)
    np.testing.assert_array_equal(kept["sem"], 0)
    assert kept["ws"].dtype == np.float32 and kept["ws"].shape == (300,)


def test_second_launch_reuses_the_kept_workspaces_and_agrees(rng):
    x = data(rng)
    kernel = turnstile()
    kept = {}
    first = run(kernel, x, workspaces=kept)
    sem = kept["sem"]
    second = run(kernel, x, workspaces=kept)
    assert kept["sem"] is sem                         # kept, not reallocated
    np.testing.assert_array_equal(kept["sem"], 0)
    assert first.tobytes() == second.tobytes() == split_order_sum(x).tobytes()


def test_a_larger_launch_grows_the_kept_workspaces(rng):
    kernel = turnstile()
    kept = {}
    run(kernel, data(rng, n=100), workspaces=kept)
    assert kept["sem"].shape == (1,) and kept["ws"].shape == (100,)
    x = data(rng, n=520)
    y = run(kernel, x, workspaces=kept)
    assert kept["sem"].shape == (5,) and kept["ws"].shape == (520,)
    assert y.tobytes() == split_order_sum(x).tobytes()


def test_workspace_given_in_args_is_used():
    x = np.ones((3, 130), np.float32)
    sem = np.zeros(2, np.int32)
    ws = np.full(130, np.nan, np.float32)
    y = np.full(130, np.nan, np.float32)
    run_kernel(turnstile(), {"x": x, "y": y, "S": 3, "N": 130, "ws": ws, "sem": sem})
    np.testing.assert_array_equal(y, 3.0)
    np.testing.assert_array_equal(ws, 2.0)           # split 1's partial sums stay
    np.testing.assert_array_equal(sem, 0)


def test_a_workspace_too_small_is_refused():
    x = np.ones((2, 300), np.float32)
    with pytest.raises(InterpError, match=r"workspace sem: .* at least 3 elements"):
        run_kernel(turnstile(), {"x": x, "y": np.zeros(300, np.float32), "S": 2, "N": 300,
                                 "sem": np.zeros(2, np.int32)})


def test_blocks_that_never_communicate_are_not_reported(rng):
    # every block writes its own elements of y (and reads only inputs): no cross-cta
    kernel = ex.pointwise_kernel()
    x = rng.standard_normal((20, 70)).astype(np.float32)
    y = np.full_like(x, np.nan)
    run_kernel(kernel, {"x": x, "y": y, "M": 20, "N": 70})
    np.testing.assert_array_equal(y, x * 2 + 1)


# -- (d): each dropped piece of the handshake is reported, naming the buffer -----------------

def test_without_the_fence_the_partials_are_a_cross_cta_hazard(rng):
    err = hazards(turnstile(fence=False), data(rng))
    h = read_and_write(err)
    assert "cross-cta on ws" in str(err)
    assert "no Fence" in h.detail
    writer, reader = h.extra["blocks"]
    assert reader == h.block and writer[0] == reader[0] and writer[2] == reader[2] - 1
    assert h.threads[0] != (0, 0, 0)        # thread 0 is fenced by its own release
    k = h.byte_range[0] // 4
    assert h.byte_range == (4 * k, 4 * k + 4) and k % TILE != 0


def test_without_the_wait_the_partials_are_a_cross_cta_hazard(rng):
    err = hazards(turnstile(wait=False), data(rng))
    h = read_and_write(err)
    assert "acquired no SemRelease" in h.detail
    assert h.threads[0] == h.threads[1]     # same element, same thread of both blocks


def test_without_the_release_every_later_split_deadlocks(rng):
    x = data(rng)
    err = hazards(turnstile(release=False), x)
    assert {h.kind for h in err.hazards} == {"deadlock"}, err
    (h,) = err.hazards
    assert h.buffer == "sem" and "deadlock on sem" in str(err)
    assert "sem_wait sem[blockIdx.x] == blockIdx.z" in h.first
    assert "wait forever" in h.detail


def test_without_the_reset_the_launch_leaves_its_semaphores_set_and_the_next_deadlocks(rng):
    x = data(rng, splits=3)
    kernel = turnstile(reset=False)
    kept, y = {}, np.full(x.shape[1], np.nan, np.float32)
    err = hazards(kernel, x, workspaces=kept, y=y)  # the first launch sums right, but ...
    assert y.tobytes() == split_order_sum(x).tobytes()
    (h,) = err.hazards                               # ... leaves the semaphores set
    assert (h.kind, h.buffer, h.byte_range) == ("workspace", "sem", (0, 4))
    assert "leaves 3 element(s) of zeroed workspace sem non-zero (first: element 0 = 2)" \
        in h.detail
    np.testing.assert_array_equal(kept["sem"], 2)
    err = hazards(kernel, x, workspaces=kept)
    assert any(h.kind == "deadlock" and h.buffer == "sem" for h in err.hazards), err


def test_a_launch_of_some_blocks_only_is_not_held_to_the_workspace_rule(rng):
    x = data(rng, splits=3)
    kept = {}
    run(turnstile(), x, blocks=[(0, 0, 0)], workspaces=kept)   # the first split alone
    np.testing.assert_array_equal(kept["sem"][:1], 1)        # its turn passed on, no report


def test_without_the_producer_barrier_other_threads_fences_do_not_count(rng):
    # thread 0 may release before the other threads have fenced their writes
    h = read_and_write(hazards(turnstile(producer_barrier=False), data(rng)))
    assert h.threads[0] != (0, 0, 0)       # the releasing thread's own writes do count


def test_without_the_consumer_barrier_only_the_waiting_thread_has_acquired(rng):
    h = read_and_write(hazards(turnstile(consumer_barrier=False), data(rng)))
    assert h.threads[1] != (0, 0, 0)       # the waiting thread itself has acquired


def _relay(second_waits):
    """Grid (1, 1, 3), 32 threads. Split 0 writes ws; split 1 (optionally) acquires it and
    re-releases without touching ws; split 2 reads what split 0 wrote."""
    ws = kir.Buffer("ws", F32, kir.Memory.global_)
    sem = kir.Buffer("sem", I32, kir.Memory.global_)
    y = ex.tensor("y", F32, [c(32)], is_output=True)
    z, t = ex.bid("z"), ex.tid()
    t0 = eq(t, c(0))

    def split(k, body):
        return kir.IfThenElse(eq(z, c(k)), body)

    body = [
        split(0, [kir.Store(ws, t, kir.Cast(t, F32)), kir.Fence(), kir.Barrier(),
                  kir.IfThenElse(t0, [kir.SemRelease(sem, c(0), c(1))])]),
        split(1, ([kir.IfThenElse(t0, [kir.SemWait(sem, c(0), c(1))]), kir.Barrier()]
                  if second_waits else [])
              + [kir.IfThenElse(t0, [kir.SemRelease(sem, c(0), c(2))])]),
        split(2, [kir.IfThenElse(t0, [kir.SemWait(sem, c(0), c(2))]), kir.Barrier(),
                  ex.store(y, [t], kir.Load(ws, t)),
                  kir.IfThenElse(t0, [kir.SemRelease(sem, c(0), c(0))])]),
    ]
    return ex.finish(kir.Kernel(
        "relay", [y], [], body, ex.launch([c(1), c(1), c(3)], [c(32)]),
        workspaces=[kir.Workspace(ws, c(32)), kir.Workspace(sem, c(1), zeroed=True)]))


def test_acquire_is_transitive_through_a_re_release():
    y = np.full(32, np.nan, np.float32)
    run_kernel(_relay(second_waits=True), {"y": y})
    np.testing.assert_array_equal(y, np.arange(32, dtype=np.float32))


def test_a_release_without_acquiring_first_publishes_nothing_of_others():
    with pytest.raises(RaceError) as info:
        run_kernel(_relay(second_waits=False), {"y": np.zeros(32, np.float32)})
    (h,) = info.value.hazards
    assert h.kind == "cross-cta" and h.buffer == "ws"
    assert h.extra["blocks"] == ((0, 0, 0), (0, 0, 2))


# -- (e): chosen blocks ------------------------------------------------------------------------

def test_the_blocks_of_one_output_tile_run_alone(rng):
    x = data(rng)
    kept = {}
    y = run(turnstile(), x, blocks=[(1, 0, z) for z in reversed(range(5))], workspaces=kept)
    want = split_order_sum(x)
    assert y[TILE:2 * TILE].tobytes() == want[TILE:2 * TILE].tobytes()
    assert np.isnan(y[:TILE]).all() and np.isnan(y[2 * TILE:]).all()
    np.testing.assert_array_equal(kept["sem"], 0)


def test_chosen_blocks_without_the_first_split_deadlock(rng):
    err = hazards(turnstile(), data(rng), blocks=[(0, 0, 1), (0, 0, 2)])
    (h,) = err.hazards
    assert h.kind == "deadlock" and h.buffer == "sem"
    assert "(0, 0, 1)" in h.detail and "(0, 0, 2)" in h.detail


# -- kernel IR text ------------------------------------------------------------------------

def test_kernel_ir_text_shows_workspaces_and_handshake():
    kernel = turnstile()
    text = kir.format_kernel(kernel)
    head = text.splitlines()[0]
    assert head == ("kernel turnstile(f32 x[S, N], f32 y[N], workspace f32 ws[N], "
                    "workspace i32 sem[ceildiv(N, 128)] zeroed, i32 N, i32 S)")
    assert "sem_wait sem[blockIdx.x] == blockIdx.z  (acquire)" in text
    assert "sem_release sem[blockIdx.x] = (blockIdx.z + 1)  (release)" in text
    assert "sem_release sem[blockIdx.x] = 0  (release)" in text
    assert "__threadfence()" in text
    assert [type(p).__name__ for p in kernel.params] == \
        ["TensorParam", "TensorParam", "Workspace", "Workspace", "ScalarParam", "ScalarParam"]


def test_existing_kernels_have_no_workspaces():
    kernel = ex.pointwise_kernel()
    assert kernel.workspaces == [] and kernel.params == kernel.tensor_params + \
        kernel.scalar_params


# -- (f): xor ------------------------------------------------------------------------------

@pytest.mark.parametrize("a,b,dtype,want", [
    (12, 10, I32, 6), (-1, 5, I32, -6), (-2 ** 31, -1, I32, 2 ** 31 - 1),
    (2 ** 40 + 3, 1, I64, 2 ** 40 + 2), (-7, 2 ** 62, I64, -7 ^ 2 ** 62),
])
def test_xor_evaluates_at_launch_time(a, b, dtype, want):
    assert kir.evaluate_scalar(kir.BinOp("xor", c(a, dtype), c(b, dtype), dtype)) == want


def test_xor_has_no_float_launch_time_value():
    with pytest.raises(TypeError, match="xor"):
        kir.evaluate_scalar(kir.BinOp("xor", c(1.0, F32), c(2.0, F32), F32))


def _xor_kernel(dtype):
    N = ex.scalar("N")
    a, b = ex.tensor("a", dtype, [N.var]), ex.tensor("b", dtype, [N.var])
    out = ex.tensor("out", dtype, [N.var], is_output=True)
    g = ex.add(ex.mul(ex.bid(), c(128)), ex.tid())
    value = kir.BinOp("xor", ex.load(a, [g]), ex.load(b, [g]), dtype)
    body = [kir.IfThenElse(ex.lt(g, N.var), [ex.store(out, [g], value)])]
    return ex.finish(kir.Kernel(f"xor_{dtype}", [a, b, out], [N], body,
                                ex.launch([ex.ceildiv(N.var, c(128))], [c(128)])))


@pytest.mark.parametrize("dtype", [I32, I64])
def test_xor_in_the_interpreter_and_cuda(rng, dtype):
    kernel = _xor_kernel(dtype)
    info = np.iinfo(dtype.numpy)
    a = rng.integers(info.min, info.max, 200, dtype=dtype.numpy, endpoint=True)
    b = rng.integers(info.min, info.max, 200, dtype=dtype.numpy, endpoint=True)
    out = np.zeros(200, dtype.numpy)
    run_kernel(kernel, {"a": a, "b": b, "out": out, "N": 200})
    np.testing.assert_array_equal(out, np.bitwise_xor(a, b))
    assert "* out_s0)] = (a[(((blockIdx.x * 128) + threadIdx.x) * a_s0)] ^ b[" in \
        kir.format_kernel(kernel)
    source = emit_cuda(kernel)
    assert "] = a[" in source and "] ^ b[" in source
    assert nvrtc.compile_to_cubin(source, kernel.name, arch="sm_90")[:4] == b"\x7fELF"


def test_xor_swizzle_index_in_the_interpreter():
    # out[t ^ 5] = t: a permutation of 0..31 (an XOR swizzle of a 32-element row)
    out = ex.tensor("out", I32, [c(32)], is_output=True)
    t = ex.tid()
    body = [ex.store(out, [kir.BinOp("xor", t, c(5), I32)], t)]
    kernel = ex.finish(kir.Kernel("swz", [out], [], body, ex.launch([c(1)], [c(32)])))
    got = np.full(32, -1, np.int32)
    run_kernel(kernel, {"out": got})
    np.testing.assert_array_equal(got, np.arange(32) ^ 5)


def _xor_of_constants(dtype):
    value = kir.BinOp("xor", c(1, dtype), c(0, dtype), dtype)
    out = ex.tensor("out", dtype, [c(1)], is_output=True)
    return ex.finish(kir.Kernel("bad", [out], [], [kir.Store(out.buffer, c(0), value)],
                                ex.launch([c(1)], [c(1)])))


def test_xor_of_floats_is_refused_by_cuda():
    with pytest.raises(CodegenError, match=f"xor on {F32}"):
        emit_cuda(_xor_of_constants(F32))


def test_xor_of_bools_is_c_bitwise_xor():
    """bitwise_xor takes bool operands (their logical xor), as torch's does."""
    assert "out[0] = true ^ false;" in emit_cuda(_xor_of_constants(BOOL))


# -- (g): CUDA text and NVRTC ------------------------------------------------------------------

VARIANTS = {
    "turnstile": {}, "turnstile_reverse": {"reverse": True},
    "turnstile_no_fence": {"fence": False}, "turnstile_no_wait": {"wait": False},
    "turnstile_no_release": {"release": False},
}


def test_cuda_signature_and_handshake_text():
    kernel = turnstile()
    source = emit_cuda(kernel)
    assert "#include" not in source
    sig = source[source.index('extern "C"'):source.index("{", source.index('extern "C"'))]
    names = [ln.split("//")[0].strip().rstrip(",)").split()[-1].lstrip("*")
             for ln in sig.splitlines()[1:]]
    assert names == ["x", "y", "x_s0", "x_s1", "y_s0", "ws", "sem", "N", "S"]
    assert "f32* ws," in sig and "// workspace f32[N]" in sig
    assert "i32* sem," in sig and "// workspace i32[ceildiv(N, 128)], zeroed" in sig
    assert 'asm volatile("ld.acquire.gpu.global.b32 %0, [%1];"' in source
    assert 'asm volatile("st.release.gpu.global.b32 [%0], %1;"' in source
    waits = [ln for ln in source.splitlines() if "sem_wait(&" in ln]
    releases = [ln for ln in source.splitlines() if "sem_release(&" in ln]
    assert [w.split("//")[0].strip() for w in waits] == \
        ["sem_wait(&sem[(i32)blockIdx.x], (i32)blockIdx.z);"]
    assert [r.split("//")[0].strip() for r in releases] == \
        ["sem_release(&sem[(i32)blockIdx.x], (i32)blockIdx.z + 1);",
         "sem_release(&sem[(i32)blockIdx.x], 0);"]
    fence = kir.walk(kernel.body)
    (f,) = [s for s in fence if isinstance(s, kir.Fence)]
    assert any(ln.strip() == f"__threadfence();  // {f.label}: __threadfence()"
               for ln in source.splitlines())
    # the release helpers are the release instructions alone: the fence that publishes the
    # other threads' writes is the protocol's own Fence, before the barrier
    for name, instruction in (("sem_release", "st.release.gpu.global.b32"),
                              ("sem_arrive", "red.release.gpu.global.add.s32")):
        helper = source[source.index(f"void {name}"):]
        helper = helper[:helper.index("\n}")]
        assert instruction in helper and "__threadfence" not in helper


@pytest.mark.parametrize("which", sorted(VARIANTS))
def test_turnstile_compiles_to_a_cubin(which):
    kernel = turnstile(name=which, **VARIANTS[which])
    source = emit_cuda(kernel)
    assert nvrtc.compile_to_cubin(source, kernel.name, arch="sm_90")[:4] == b"\x7fELF"
    ptx = nvrtc.ptx(source, kernel.name, arch="sm_90")
    if VARIANTS[which].get("wait", True):
        assert "ld.acquire.gpu.global.b32" in ptx
    assert "st.release.gpu.global.b32" in ptx


def test_semaphores_must_be_global_i32():
    kernel = turnstile()
    bad = kir.Buffer("sem64", I64, kir.Memory.global_)
    kernel.workspaces.append(kir.Workspace(bad, c(1)))
    for s in kir.walk(kernel.body):
        if isinstance(s, kir.SemWait):
            s.sem = bad
    with pytest.raises(CodegenError, match=r"sem_wait semaphore sem64 is i64, not i32"):
        emit_cuda(kernel)


def test_shared_workspace_is_refused():
    kernel = turnstile()
    kernel.workspaces[0].buffer.memory = kir.Memory.shared
    with pytest.raises(CodegenError, match="workspace ws is in shared memory"):
        emit_cuda(kernel)


# -- the executor ------------------------------------------------------------------------------

SPLIT_SUM = """
fusion split_sum(x: f32[S, N]) {
  y = sum(x, axes=[0])
  output y
}
"""


def _executable(backend):
    """An Executable whose one step is the hand-built turnstile kernel (what split-K
    lowering will produce for sum over axis 0)."""
    import fuserir
    from driver import executable
    fusion = fuserir.parse(SPLIT_SUM)
    kernel = turnstile()
    compiled = executable.CompiledKernel(kernel.name, kernel, emit_cuda(kernel))
    if backend == "cuda":
        compiled.cubin = nvrtc.compile_to_cubin(compiled.source, kernel.name)
    step = executable.Step(fusion, ["x"], ["y"], compiled)
    return executable.Executable(fusion, backend, {},
                                 lambda persistent, schedule, sizes, device: [step])


def test_interp_executor_runs_each_call_on_fresh_workspaces(rng, monkeypatch):
    from driver import executable
    exe = _executable("interp")
    given = []
    interpret = executable.run_kernel

    def recording(kernel, args, blocks=None):
        given.append(sorted(args))
        return interpret(kernel, args, blocks=blocks)
    monkeypatch.setattr(executable, "run_kernel", recording)
    x = data(rng)
    first = exe.run({"x": x})["y"]
    second = exe.run({"x": x})["y"]
    assert first.tobytes() == second.tobytes() == split_order_sum(x).tobytes()
    assert all("sem" not in names and "ws" not in names for names in given)  # made fresh
    bigger = data(rng, n=700)
    assert exe.run({"x": bigger})["y"].tobytes() == split_order_sum(bigger).tobytes()


def test_interp_executor_starts_clean_after_a_failed_run(rng):
    exe = _executable("interp")
    x = data(rng, splits=3)
    with pytest.raises(RaceError, match="deadlock on sem"):
        exe.run({"x": x}, blocks=[(0, 0, 0), (0, 0, 2)])    # split 1 missing: 2 waits
    assert exe.run({"x": x})["y"].tobytes() == split_order_sum(x).tobytes()


# -- on a GPU ----------------------------------------------------------------------------------

@pytest.mark.gpu
def test_turnstile_on_the_gpu_matches_the_interpreter(rng):
    import cupy as cp

    from codegen import launch
    kernel = turnstile()
    cubin = nvrtc.compile_to_cubin(emit_cuda(kernel), kernel.name)
    x = data(rng, splits=7, n=1000)
    want = run(kernel, x)                     # the interpreter
    assert want.tobytes() == split_order_sum(x).tobytes()
    xd = cp.asarray(x)
    for _ in range(3):                        # semaphores are left reset between launches
        y = cp.full(1000, np.nan, np.float32)
        launch.launch(kernel, cubin, {"x": xd, "y": y, "N": 1000, "S": 7})
        assert cp.asnumpy(y).tobytes() == want.tobytes()
    sem = cp.zeros(8, np.int32)
    ws = cp.full(1000, np.nan, np.float32)
    y = cp.full(1000, np.nan, np.float32)
    launch.launch(kernel, cubin, {"x": xd, "y": y, "N": 1000, "S": 7, "sem": sem, "ws": ws})
    assert cp.asnumpy(y).tobytes() == want.tobytes()
    assert int(cp.count_nonzero(sem)) == 0


@pytest.mark.gpu
def test_cuda_executor_gives_each_run_zeroed_semaphores(rng):
    import cupy as cp
    exe = _executable("cuda")
    x = data(rng, splits=4, n=5000)
    want = split_order_sum(x)
    for _ in range(3):
        y = exe.run({"x": x})["y"]
        assert cp.asnumpy(y).tobytes() == want.tobytes()


# -- the block scheduler's two orders ----------------------------------------------------------

def test_the_scheduler_resumes_the_earliest_or_the_latest_ready_block():
    """Two blocks share a counter: each adds 1 and waits for 2; block 1 then resets it
    without waiting for block 0 to pass (the bug). Resuming the earliest ready block lets
    block 0 through as soon as the count is 2; resuming the latest runs block 1 to its
    reset first, and block 0 waits forever: the deadlock the second order exposes."""
    from codegen.interp.scheduler import Wait, schedule
    for latest, stuck_blocks in ((False, []), (True, [0])):
        cell, trace = {"n": 0}, []

        def block(z):
            cell["n"] += 1
            yield None
            yield Wait(None, lambda: cell["n"] == 2, "n")
            trace.append(z)
            if z == 1:
                cell["n"] = 0

        stuck = schedule([(z, block(z)) for z in (0, 1)], latest=latest)
        assert [b for b, _ in stuck] == stuck_blocks
        assert trace == ([0, 1] if not latest else [1])


def test_the_turnstile_runs_in_the_latest_first_order_too(rng):
    """Split z waits for z: resumed latest first, every later split waits until the
    earlier ones release it, and the sum is the same, bit for bit."""
    x = data(rng)
    y = np.zeros(x.shape[1], np.float32)
    run_kernel(turnstile(), {"x": x, "y": y, "S": x.shape[0], "N": x.shape[1]},
               block_order="latest")
    assert np.array_equal(y, split_order_sum(x))


def test_run_kernel_refuses_an_unknown_block_order(rng):
    x = data(rng)
    with pytest.raises(InterpError, match="block_order 'random': expected one of earliest, "
                                          "latest"):
        run_kernel(turnstile(), {"x": x, "y": np.zeros(x.shape[1], np.float32),
                                 "S": x.shape[0], "N": x.shape[1]}, block_order="random")
