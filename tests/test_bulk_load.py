"""BulkLoad, TMA's one-dimensional copy (cp.async.bulk.shared::cluster.global.mbarrier::
complete_tx::bytes), added as a statement class with its effects, its line, its CUDA rule
and spelling (codegen.cuda.tma) and its interpretation (codegen.interp.tma): the
verifier, sync insertion and the race detector read its effects and know nothing else
of it.

The kernel, built by hand: `rounds` times, thread 0 loads two chunks of x (CHUNK bytes
each) into one shared buffer through one mbarrier, every thread waits for the round's
phase and copies the buffer out, and a barrier keeps the next round's loads from
overwriting bytes a slow thread still reads. Each synchronization it rests on, dropped
alone, must be refused by the static verifier and reported by the interpreter."""

import numpy as np
import pytest

from codegen import nvrtc
from codegen.cuda import CodegenError, emit_cuda
from codegen.errors import RaceError
from codegen.interp import InterpError, run_kernel
from fuserir.dtypes import DataType
from fuserir.instructions import TMA
from lowering import kir
from lowering.verify.async_protocol import check_async_protocol

I32, I64, F32 = DataType.i32, DataType.i64, DataType.f32
SHARED, GLOBAL = kir.Memory.shared, kir.Memory.global_
TX = kir.Special(kir.SpecialKind.threadIdx, "x", I32)
THREADS = 64
CHUNK = 256                     # bytes per bulk load: 64 f32
N = 2 * CHUNK // 4              # f32 elements per round

# each synchronization, and what the verifier and the interpreter report without it
SYNCS = {"init_fence": ("mbarrier-init", "mbarrier-init"),
         "init_barrier": ("mbarrier-init", "mbarrier-init"),
         "arrive": ("cannot-prove", "deadlock"),        # its bytes count toward no phase
         "wait": ("async-pending", "async-pending"),
         "reuse_barrier": ("WAR", "WAR")}


def c(v, dtype=I32):
    return kir.Const(v, dtype)


def op(name, a, b):
    b = b if isinstance(b, kir.ScalarExpr) else c(b)
    return kir.BinOp(name, a, b, DataType.bool if name in kir.COMPARISONS else a.dtype)


def bulk_kernel(rounds=2, drop=(), nbytes=CHUNK):
    x = kir.TensorParam(kir.Buffer("x", F32, GLOBAL), [c(rounds * N)], [kir.Var("x_s0", I32)])
    out = kir.TensorParam(kir.Buffer("out", F32, GLOBAL), [c(rounds * N)], [kir.Var("out_s0", I32)],
                          is_output=True)
    bar = kir.Buffer("bar", I64, SHARED, size=c(1), byte_offset=c(0))
    sm = kir.Buffer("sm", F32, SHARED, size=c(N), byte_offset=c(128))
    r = kir.Var("r", I32)
    base = op("mul", r, N)
    loads = [kir.BulkLoad(dst=sm, dst_index=c(half * N // 2), src=x.buffer,
                          src_index=op("add", base, half * N // 2), nbytes=nbytes, bar=bar,
                          bar_index=c(0)) for half in (0, 1)]
    arrive = [] if "arrive" in drop else [
        kir.MbarrierArrive(bar=bar, index=c(0), tx_bytes=c(2 * nbytes))]
    k = kir.Var("k", I32)
    element = op("add", op("mul", k, THREADS), TX)
    body = [kir.IfThenElse(op("eq", TX, 0), arrive + loads)]
    if "wait" not in drop:
        body.append(kir.MbarrierWait(bar=bar, index=c(0), parity=op("mod", r, 2)))
    body.append(kir.ForLoop(k, c(N // THREADS), [
        kir.Store(out.buffer, op("add", base, element), kir.Load(sm, element))]))
    if "reuse_barrier" not in drop:
        body.append(kir.Barrier())
    init = [kir.MbarrierInit(bar=bar, index=c(0), count=c(1))]
    if "init_fence" not in drop:
        init.append(kir.FenceMbarrierInit())
    stmts = [kir.Allocate(bar), kir.Allocate(sm), kir.IfThenElse(op("eq", TX, 0), init)]
    if "init_barrier" not in drop:
        stmts.append(kir.Barrier())
    stmts.append(kir.ForLoop(r, c(rounds), body))
    kernel = kir.Kernel("bulk_load", [x, out], [], stmts,
                        kir.LaunchConfig((c(1), c(1), c(1)), (c(THREADS), c(1), c(1))))
    kir.relabel(kernel.body)
    return kernel


def inputs(rounds=2):
    x = np.arange(rounds * N, dtype=np.float32) * 3 - 100
    return {"x": x, "out": np.full(rounds * N, -1, np.float32)}


def first_load(kernel):
    return next(s for s in kir.walk(kernel.body) if s.effects().mbarrier is not None
                and s.effects().mbarrier.op == "complete_tx")


def hazards_of(kernel, args):
    try:
        run_kernel(kernel, args)
    except RaceError as e:
        return e.hazards
    return []


# -- what it states ------------------------------------------------------------------------

def test_its_effects_are_a_tma_load_of_consecutive_bytes():
    load = first_load(bulk_kernel())
    effects = load.effects()
    read, write = effects.accesses
    assert (read.buffer.name, read.write, read.proxy, read.nbytes) == ("x", False, "async", 256)
    assert read.align == write.align == 16        # whatever the size: what arrays must meet
    assert (write.buffer.name, write.write, write.proxy) == ("sm", True, "async")
    assert write.until == kir.effects.Phase(load.bar, load.bar_index)
    assert effects.mbarrier.value == 256 and effects.instruction is TMA
    assert kir.format_stmt(load) == ("bulk.load sm[0] <- x[((r * 128) + 0)], 256 bytes, "
                                     "complete_tx bar[0]")


def test_the_driver_asks_the_source_array_for_16_bytes_of_alignment_not_the_size():
    from driver.vector_widths import _vector_accesses
    assert _vector_accesses(bulk_kernel())["x"] == (16, "copies it", "with bulk-load")


def test_the_protocol_knows_its_bytes_by_what_completes_them():
    from lowering.verify.async_trace import async_kind
    (_, write) = first_load(bulk_kernel()).effects().accesses
    assert write.via == "bulk-load" and async_kind(write) == "tma-load"


def test_its_cuda_is_the_bulk_copy_onto_the_mbarrier_and_compiles():
    kernel = bulk_kernel()
    source = emit_cuda(kernel)
    assert source.count(TMA.ptx["bulk_load"] + " [%0], [%1], %2, [%3];") == 2
    assert "gmem_addr(&x[" in source
    assert nvrtc.compile_to_cubin(source, kernel.name, arch="sm_90a")[:4] == b"\x7fELF"


@pytest.mark.parametrize("nbytes, words", [(24, "a positive multiple of 16 bytes"),
                                           (0, "a positive multiple of 16 bytes")])
def test_a_size_the_instruction_cannot_copy_is_refused(nbytes, words):
    with pytest.raises(CodegenError, match=words):
        emit_cuda(bulk_kernel(nbytes=nbytes))
    with pytest.raises(InterpError, match=words):
        run_kernel(bulk_kernel(nbytes=nbytes), inputs())


def test_a_misaligned_source_is_refused_by_both_backends():
    kernel = bulk_kernel()
    first_load(kernel).src_index = c(2)                                    # 8 bytes in
    with pytest.raises(CodegenError, match="source element 2 is not aligned to 16 bytes"):
        emit_cuda(kernel)
    with pytest.raises(InterpError, match="source element 2 of thread .* is not 16-byte"):
        run_kernel(kernel, inputs())


# -- the protocol: proved whole, each sync missed when dropped -----------------------------

def test_the_whole_kernel_is_proved_and_runs_exactly():
    kernel = bulk_kernel()
    assert check_async_protocol(kernel) == []
    args = inputs()
    assert hazards_of(kernel, args) == []
    np.testing.assert_array_equal(args["out"], args["x"])


@pytest.mark.parametrize("drop", SYNCS)
def test_each_sync_dropped_is_refused_by_the_verifier_and_seen_by_the_interpreter(drop):
    static, dynamic = SYNCS[drop]
    found = check_async_protocol(bulk_kernel(drop=(drop,)))
    assert static in {h.kind for h in found}, [(h.kind, h.detail) for h in found]
    seen = hazards_of(bulk_kernel(drop=(drop,)), inputs())
    assert dynamic in {h.kind for h in seen}, [(h.kind, h.detail) for h in seen]


# -- on the GPU ----------------------------------------------------------------------------

@pytest.mark.gpu
def test_the_gpu_copies_what_the_interpreter_copies():
    import cupy
    from codegen.launch import launch
    from driver.build import kernel_arch

    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("cp.async.bulk is an sm_90 instruction")
    kernel = bulk_kernel(rounds=3)
    cubin = nvrtc.compile_to_cubin(emit_cuda(kernel), kernel.name,
                                   kernel_arch(kernel, nvrtc.default_arch()))
    args = inputs(rounds=3)
    gpu = {k: cupy.asarray(v) for k, v in args.items()}
    launch(kernel, cubin, gpu)
    cupy.cuda.Device().synchronize()
    run_kernel(kernel, args)
    np.testing.assert_array_equal(cupy.asnumpy(gpu["out"]), args["out"])
    np.testing.assert_array_equal(args["out"], args["x"])
