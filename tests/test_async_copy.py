"""cache_after(shared, async_copy=True): cp.async copies (a first piece of the tensor-core
matmul issue's pipeline). Out-of-bounds elements are zero-filled (src-size 0) rather than
skipped, each placement's copies are committed and waited for after its own loops, and
sync insertion adds the barriers that make them visible to other threads."""

import numpy as np
import pytest

import codegen
import fuserir
from codegen import HazardError, RaceError
from fuserir.errors import FuserirError, ScheduleError
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


def test_two_byte_elements_need_a_vector():
    text = F16_VECTORS.replace("  xs.vectorize(3)\n", "")
    with pytest.raises(ScheduleError, match="xs: an async copy moves 4, 8 or 16 bytes, but "
                                            "one element of xs is 2; vectorize its "
                                            "innermost axis"):
        codegen.compile(fuserir.parse(text), backend="interp")


@pytest.mark.parametrize("array, what", [
    (np.zeros((3, 250), np.float16), "shape (3, 250), strides (500, 2) bytes"),
    (np.zeros((3, 512), np.float16)[:, ::2], "shape (3, 256), strides (1024, 4) bytes"),
])
def test_vector_copies_refuse_inputs_they_cannot_read_whole(array, what):
    exe = codegen.compile(fuserir.parse(F16_VECTORS), backend="interp")
    with pytest.raises(FuserirError, match="input x: the kernel copies it 16 bytes \\(8 "
                                           "elements\\) at a time with cp.async") as refused:
        exe.run({"x": array})
    assert what in str(refused.value)
