"""cache_after(shared, async_copy=True): cp.async copies (a first piece of the tensor-core
matmul issue's pipeline). Out-of-bounds elements are zero-filled (src-size 0) rather than
skipped, each placement's copies are committed and waited for after its own loops, and
sync insertion adds the barriers that make them visible to other threads."""

import numpy as np
import pytest

import codegen
import fuserir
from codegen import HazardError, RaceError
from fuserir.dtypes import DataType
from lowering import kir

F32 = """
fusion f(x: f32[M, N], b: f32[N]) {
  y = relu(x + broadcast(b, [true, false]))
  output y
}
schedule f {
  xs = x.cache_after(shared, async_copy=true)
  y.split(1, 128)
  y.parallelize(0, BIDx)
  y.parallelize(2, TIDx)
  xs.compute_at(y, 2)
  xs.split(2, 32)
  xs.parallelize(2, TIDx)
}
"""

F16_VECTORS = """
fusion f(x: f16[M, N]) {
  y = cast(x, f32) * 2
  output y
}
schedule f {
  xs = x.cache_after(shared, async_copy=true)
  y.split(1, 128)
  y.parallelize(0, BIDx)
  y.parallelize(2, TIDx)
  xs.compute_at(y, 2)
  xs.split(2, 8)
  xs.parallelize(2, TIDx)
  xs.vectorize(3)
}
"""

CASES = {"f32": (F32, (3, 300)), "f16_vectors": (F16_VECTORS, (3, 256))}


def inputs_for(fusion, shape, rng):
    data = {}
    for tv in fusion.inputs:
        dims = shape if tv.rank == 2 else shape[1:]
        data[tv.name] = rng.integers(-5, 5, dims).astype(tv.dtype.numpy)
    return data


def copies(kernel):
    return [s for s in kir.walk(kernel.body) if isinstance(s, kir.CpAsync)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_async_cache_runs_like_the_reference(case):
    text, shape = CASES[case]
    fusion = fuserir.parse(text)
    exe = codegen.compile(fusion, backend="interp")
    data = inputs_for(fusion, shape, np.random.default_rng(2))
    got = exe.run(data)
    for name, want in fuserir.evaluate(fusion, data).items():
        np.testing.assert_array_equal(got[name], want)


def test_f32_copies_are_4_byte_ca_zero_filled_past_the_end():
    kernel = codegen.compile(fuserir.parse(F32), backend="interp").kernels[0].kir
    (copy,) = copies(kernel)
    assert (copy.nbytes, copy.cache) == (4, "ca")
    assert kir.format_expr(copy.src_size) == \
        "((((i0 * 128) + ((threadIdx.x * 32) + i1)) < N) ? 4 : 0)"
    kinds = [type(s).__name__ for s in kir.walk(kernel.body)]
    assert kinds.count("CpAsyncCommit") == 1 and kinds.count("CpAsyncWait") == 1
    barriers = [s for s in kir.walk(kernel.body) if isinstance(s, kir.Barrier)]
    assert [(r.kind.value, r.loop_carried) for b in barriers for r in b.reasons] == [
        ("RAW", False), ("WAR", True)]


def test_vectorized_f16_copies_are_16_byte_cg():
    exe = codegen.compile(fuserir.parse(F16_VECTORS), backend="cuda")
    (copy,) = copies(exe.kernels[0].kir)
    assert (copy.nbytes, copy.cache) == (16, "cg")
    assert "cp.async.cg.shared.global [%0], [%1], 16, %2;" in exe.kernels[0].source
    assert exe.kernels[0].cubin[:4] == b"\x7fELF"


def test_without_sync_insertion_the_race_is_refused_and_seen():
    fusion = fuserir.parse(F32)
    with pytest.raises(HazardError):
        codegen.compile(fusion, backend="interp", disable_passes=("insert_syncs",))
    exe = codegen.compile(fusion, backend="interp", disable_passes=("insert_syncs",),
                          verify=False)
    with pytest.raises(RaceError) as raced:
        exe.run(inputs_for(fusion, (3, 300), np.random.default_rng(3)))
    assert {h.kind for h in raced.value.hazards} & {"RAW", "WAR"}


def test_two_byte_elements_without_a_vector_fall_back_to_ordinary_copies():
    # no cp.async moves 2 bytes: an ordinary load and shared store
    fusion = fuserir.parse(F16_VECTORS.replace("  xs.vectorize(3)\n", ""))
    exe = codegen.compile(fusion, backend="interp")
    kernel = exe.kernels[0].kir
    assert not copies(kernel)
    stores = [s for s in kir.walk(kernel.body) if isinstance(s, kir.Store)
              and s.buffer.name == "xs"]
    assert len(stores) == 1
    inputs = inputs_for(fusion, (3, 256), np.random.default_rng(5))
    assert np.array_equal(exe.run(inputs)["y"], fuserir.evaluate(fusion, inputs)["y"])


CIRCULAR = """
fusion f(x: f32[M, K]) {
  s = sum(x, axes=[1])
  output s
}
schedule f {
  s.split(1, 32)
  s.split(0, 4)
  s.parallelize(0, BIDx)
  s.parallelize(1, TIDy)
  s.parallelize(3, TIDx)              # s: [BIDx, TIDy 4, r{ceildiv(K, 32)}, rTIDx 32]
  xs = x.cache_after(shared, async_copy=true)
  xs.compute_at(s, 3)                 # one 4x32 tile per iteration of the K loop
  xs.split(-1, 8)
  xs.reorder({-1: -2})
  xs.merge(-2)                        # element 8a + b is copied by thread 4b + a:
  xs.parallelize(-1, TIDx)            # not the thread that reads it
  xs.circular_buffer(STAGES)
}
"""


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_circular_buffer_pipelines_with_one_barrier_per_iteration(stages, dtype):
    text = CIRCULAR.replace("STAGES", str(stages)).replace("f32[M, K]", f"{dtype}[M, K]")
    fusion = fuserir.parse(text)
    exe = codegen.compile(fusion, backend="interp")
    body = exe.kernels[0].kir.body
    loop = next(s for s in kir.walk(body) if isinstance(s, kir.ForLoop)
                and s.body and isinstance(s.body[0], kir.CpAsyncWait))
    assert loop.body[0].n == stages - 2 and loop.body[0].sync_id is None
    assert isinstance(loop.body[1], kir.Barrier)      # after the wait: RAW and WAR both
    assert sum(isinstance(s, kir.Barrier) for s in kir.walk(loop.body)) == 1
    commits = [s for s in body if isinstance(s, kir.CpAsyncCommit)]
    assert len(commits) >= stages - 1                 # the prologue's groups
    # 2-byte elements cannot be copied by cp.async: ordinary stores, pipelined the same
    assert bool(copies(exe.kernels[0].kir)) == (dtype == "f32")
    rng = np.random.default_rng(stages)
    for k in (32 * 7, 32 * 2 + 5, 20):                # loop shorter than the pipeline too
        x = rng.integers(-5, 5, (9, k)).astype(np.float32 if dtype == "f32" else np.float16)
        out = exe.run({"x": x})["s"]
        assert np.array_equal(out, fuserir.evaluate(fusion, {"x": x})["s"]), k


@pytest.mark.parametrize("shape, step, cap", [
    ((3, 250), 1, 4),       # rows of 500 bytes: 4-byte copies
    ((3, 512), 2, 2),       # every other element: element copies
])
def test_inputs_no_16_byte_copy_reads_whole_take_narrower_copies(shape, step, cap):
    exe = codegen.compile(fuserir.parse(F16_VECTORS), backend="interp")
    x = np.arange(np.prod(shape)).reshape(shape).astype(np.float16)[:, ::step]
    out = exe.run({"x": x})["y"]
    assert np.array_equal(out, fuserir.evaluate(fuserir.parse(F16_VECTORS), {"x": x})["y"])
    (kernel,) = exe.kernels_for({"x": x})
    assert kernel.caps == {"x": cap} and kernel.kir.index_dtype is DataType.i32
