"""TMA tensor maps on the host: the fields codegen.tensor_maps computes from a kir.TensorMap
and its array (dimensions innermost first, byte strides, box) and every check on them;
the encoding's call into cuda.bindings (with its cuuint wrappers, on a fake driver); the
launcher's cache of encoded maps and the maps' place in the kernel ABI (after the
strides, before the workspaces). On the CPU the GPU and the driver
are fakes; on a GPU (marked `gpu`) a map is encoded for real and a hand-written kernel of
the ABI reads it back."""

import ctypes
import struct
import types

import numpy as np
import pytest

import kir_examples as ex
from codegen import kernel_params, launch as launching
from codegen import tensor_maps
from codegen.tensor_maps import encode_tensor_map, tensor_map_fields
from fuserir.dtypes import DataType
from lowering import kir

from test_launch_cache import FakeArray, gpu  # noqa: F401 - the fixture

F16, F32 = DataType.f16, DataType.f32
I32 = np.int32
ADDRESS = 1 << 24


def div(a, b):
    return ex.binop("div", a, b)


def tma_kernel(sizes=None, strides=None, box=(64, 64), swizzle="128B", dtype=F16, rank=2,
               index=DataType.i32):
    """tma(a dtype[M, K] (rank 2) or [B, M, K] (rank 3), y f32[M]; workspace ws f32[M];
    scalars M, K (, B)) with one tensor map a_map over a: by default innermost first
    (K, M[, B]) with the row-major strides (a_s0[, a_s1 then a_s0])."""
    M, K, B = ex.scalar("M", index), ex.scalar("K", index), ex.scalar("B", index)
    shape = [M.var, K.var] if rank == 2 else [B.var, M.var, K.var]
    a = ex.tensor("a", dtype, shape, index_dtype=index)
    y = ex.tensor("y", F32, [M.var], is_output=True, index_dtype=index)
    ws = kir.Buffer("ws", F32, kir.Memory.global_)
    sizes = list(reversed(shape)) if sizes is None else sizes
    strides = list(reversed(a.strides[:-1])) if strides is None else strides
    amap = kir.TensorMap("a_map", a, sizes(a) if callable(sizes) else sizes,
                         strides(a) if callable(strides) else strides, box, swizzle)
    scalars = [M, K] if rank == 2 else [M, K, B]
    return kir.Kernel("tma", [a, y], scalars, [], ex.launch([ex.const(1)], [ex.const(128)]),
                      index, workspaces=[kir.Workspace(ws, M.var)], tensor_maps=[amap])


def fields_of(kernel, array, **scalars):
    return tensor_map_fields(kernel, kernel.tensor_maps[0], array, scalars)


def fake(shape, strides=None, dtype=np.float16, address=ADDRESS):
    """A FakeArray; `strides` in elements (None: row-major)."""
    itemsize = np.dtype(dtype).itemsize
    byte_strides = None if strides is None else [s * itemsize for s in strides]
    return FakeArray(shape, dtype, byte_strides, address)


# -- the fields ----------------------------------------------------------------------------

def test_a_2d_map_of_a_row_major_array():
    f = fields_of(tma_kernel(), fake((128, 256)), M=128, K=256)
    assert (f.dtype, f.rank, f.address) == ("FLOAT16", 2, ADDRESS)
    assert f.dims == (256, 128) and f.strides == (512,) and f.box == (64, 64)
    assert f.element_strides == (1, 1) and f.swizzle == "128B"
    assert (f.interleave, f.l2_promotion, f.oob_fill) == ("NONE", "L2_128B", "NONE")


def test_a_2d_map_of_a_transposed_array():
    """a[M, K] stored K-major (column-major: strides (1, M)): dimension 0 is M."""
    kernel = tma_kernel(sizes=lambda a: [a.sizes[0], a.sizes[1]],
                        strides=lambda a: [a.strides[1]], box=(64, 32))
    f = fields_of(kernel, fake((96, 40), strides=(1, 96)), M=96, K=40)
    assert f.dims == (96, 40) and f.strides == (192,) and f.box == (64, 32)


def test_a_dimension_of_one_element_takes_a_nominal_stride():
    """a[M, K] with M = 1 mapped along K (a decode matmul's A stored K x 1, boxed along
    its contiguous K): the array's stride along M (one element: 2 bytes) is no tensor
    map stride, but the map never steps along M, so it gets the dense one rounded up to
    16 bytes; at M = 2 the same map would read the wrong elements: refused."""
    kernel = tma_kernel(sizes=lambda a: [a.sizes[0], a.sizes[1]],
                        strides=lambda a: [a.strides[1]], box=(64, 64))
    f = fields_of(kernel, fake((4097, 1)), M=4097, K=1)
    assert f.dims == (4097, 1) and f.strides == (8208,)
    with pytest.raises(ValueError, match=r"dimensions \(4097, 2\) with element strides "
                                         r"\(1, 1\) \(innermost first\) do not cover"):
        fields_of(kernel, fake((4097, 2)), M=4097, K=2)


def test_a_3d_map_of_a_row_major_and_a_transposed_array():
    f = fields_of(tma_kernel(box=(64, 16, 2), rank=3), fake((3, 48, 128)), M=48, K=128, B=3)
    assert f.dims == (128, 48, 3) and f.strides == (256, 48 * 256) and f.box == (64, 16, 2)
    # [B, M, K] with M contiguous, then K, then B
    kernel = tma_kernel(sizes=lambda a: [a.sizes[1], a.sizes[2], a.sizes[0]],
                        strides=lambda a: [a.strides[2], a.strides[0]], box=(64, 8, 1),
                        rank=3)
    f = fields_of(kernel, fake((3, 64, 40), strides=(64 * 40, 1, 64)), M=64, K=40, B=3)
    assert f.dims == (64, 40, 3) and f.strides == (128, 64 * 40 * 2)


def test_a_3d_map_may_split_a_2d_arrays_rows():
    """K = 256 f16 as (64, K / 64) with stride 64: a 128-byte swizzled box of 64 x 4 x 8."""
    kernel = tma_kernel(sizes=lambda a: [ex.const(64), div(a.sizes[1], 64), a.sizes[0]],
                        strides=lambda a: [ex.const(64), a.strides[0]], box=(64, 4, 8))
    f = fields_of(kernel, fake((32, 256)), M=32, K=256)
    assert f.dims == (64, 4, 32) and f.strides == (128, 512)
    with pytest.raises(ValueError, match="do not cover the array"):      # K = 200: no
        fields_of(kernel, fake((32, 200)), M=32, K=200)


def test_equal_maps_elsewhere_compare_equal():
    kernel = tma_kernel()
    here = fields_of(kernel, fake((128, 256)), M=128, K=256)
    there = tensor_maps.at_address(here, ADDRESS + 4096)
    assert there == here and there.address == ADDRESS + 4096 and hash(there) == hash(here)
    assert fields_of(kernel, fake((64, 256)), M=64, K=256) != here


WHERE = "kernel tma: tensor map a_map of a: "


@pytest.mark.parametrize("kernel, array, scalars, message", [
    (tma_kernel(), fake((8, 64), address=ADDRESS + 8), dict(M=8, K=64),
     "the tensor's address 0x1000008 is not 16-byte aligned"),
    (tma_kernel(box=(64, 8)), fake((8, 72)), dict(M=8, K=72), None),       # 144 bytes: fine
    (tma_kernel(box=(64, 8)), fake((8, 68)), dict(M=8, K=68),
     "stride 1 is 136 bytes; a tensor map's strides are positive multiples of 16"),
    (tma_kernel(sizes=lambda a: [a.sizes[2], a.sizes[1], a.sizes[0]],
                strides=lambda a: [a.strides[1], a.strides[0]], box=(64, 2, 2), rank=3,
                index=DataType.i64),
     fake((2, 2, 64), strides=(1 << 39, 64, 1)), dict(M=2, K=64, B=2),
     "stride 2 is 1099511627776 bytes; .* below 2\\^40"),
    (tma_kernel(box=(64, 300)), fake((8, 64)), dict(M=8, K=64),
     r"box \(64, 300\): each extent is 1..256"),
    (tma_kernel(box=(64, 0)), fake((8, 64)), dict(M=8, K=64), r"box \(64, 0\): each extent"),
    (tma_kernel(box=(32, 8)), fake((8, 64)), dict(M=8, K=64),
     "the box's dimension 0 spans 64 bytes; swizzle 128B needs exactly 128"),
    (tma_kernel(box=(16, 8), swizzle="64B"), fake((8, 64)), dict(M=8, K=64),
     "the box's dimension 0 spans 32 bytes; swizzle 64B needs exactly 64"),
    (tma_kernel(box=(4, 8), swizzle="none"), fake((8, 64)), dict(M=8, K=64),
     "the box's dimension 0 spans 8 bytes, not a multiple of 16"),
    (tma_kernel(swizzle="256B"), fake((8, 64)), dict(M=8, K=64), "unknown swizzle '256B'"),
    (tma_kernel(box=(64,) * 6, sizes=[], strides=[]), fake((8, 64)), dict(M=8, K=64),
     "rank 6 .*; a tensor map has rank 2..3"),
    (tma_kernel(box=(64, 8, 2)), fake((8, 64)), dict(M=8, K=64),
     "a rank-3 box needs 3 sizes and 2 strides, the map has 2 and 1"),
    (tma_kernel(dtype=DataType.bool, box=(64, 8)), fake((8, 64), dtype=np.bool_),
     dict(M=8, K=64), "dtype bool has no tensor map .*f16, bf16, f32, f64, i32, i64"),
    (tma_kernel(), fake((0, 64)), dict(M=0, K=64), r"size 1 \(M\) is 0; .* 1..2\^32"),
    (tma_kernel(), fake((8, 64), strides=(1, 8)), dict(M=8, K=64),
     r"dimensions \(64, 8\) with element strides \(1, 1\) .* do not cover the array of "
     r"shape \(8, 64\) and element strides \(1, 8\) exactly"),
    (tma_kernel(sizes=lambda a: [kir.Var("P", DataType.i32), a.sizes[0]]), fake((8, 64)),
     dict(M=8, K=64), "size 0 P has no launch-time value"),
])
def test_what_no_tensor_map_can_be_is_refused_by_name(kernel, array, scalars, message):
    if message is None:
        fields_of(kernel, array, **scalars)
        return
    with pytest.raises(ValueError, match=WHERE + message):
        fields_of(kernel, array, **scalars)


def test_a_bf16_map_takes_the_bits_array():
    f = fields_of(tma_kernel(dtype=DataType.bf16), fake((8, 64), dtype=np.uint16), M=8, K=64)
    assert f.dtype == "BFLOAT16" and f.strides == (128,)


# -- the encoding, on a fake driver --------------------------------------------------------

@pytest.fixture
def fake_encoder(monkeypatch):
    """cuTensorMapEncodeTiled recording its arguments, answering 128 known bytes (or the
    status `answer["status"]`)."""
    from cuda.bindings import driver
    calls, answer = [], {"status": driver.CUresult.CUDA_SUCCESS}
    raw = ctypes.create_string_buffer(bytes(range(128)), 128)

    def encode(*args):
        calls.append(args)
        if answer["status"] != driver.CUresult.CUDA_SUCCESS:
            return answer["status"], None
        return answer["status"], types.SimpleNamespace(getPtr=lambda: ctypes.addressof(raw))

    monkeypatch.setattr(driver, "cuTensorMapEncodeTiled", encode)
    return driver, calls, answer


def test_encoding_wraps_every_extent_and_returns_128_bytes_by_value(fake_encoder):
    driver, calls, _ = fake_encoder
    fields = fields_of(tma_kernel(), fake((128, 256)), M=128, K=256)
    value = encode_tensor_map(fields)
    assert value.dtype == np.dtype("V128") and value.tobytes() == bytes(range(128))
    (dtype, rank, address, dims, strides, box, steps, interleave, swizzle, l2, oob), = calls
    assert dtype == driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16
    assert isinstance(rank, driver.cuuint32_t) and int(rank) == 2 and address == ADDRESS
    for wrapped, kind, want in ((dims, driver.cuuint64_t, (256, 128)),
                                (strides, driver.cuuint64_t, (512,)),
                                (box, driver.cuuint32_t, (64, 64)),
                                (steps, driver.cuuint32_t, (1, 1))):
        assert all(isinstance(w, kind) for w in wrapped)
        assert tuple(int(w) for w in wrapped) == want
    assert interleave == driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE
    assert swizzle == driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B
    assert l2 == driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B
    assert oob == driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE


def test_a_failed_encoding_names_the_map_and_the_driver_status(fake_encoder):
    driver, _, answer = fake_encoder
    answer["status"] = driver.CUresult.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(RuntimeError, match=r"kernel tma: tensor map a_map of a: "
                                           r"cuTensorMapEncodeTiled failed with "
                                           r"CUDA_ERROR_INVALID_VALUE .*dims \(256, 128\)"):
        encode_tensor_map(fields_of(tma_kernel(), fake((128, 256)), M=128, K=256))


# -- the launcher --------------------------------------------------------------------------

@pytest.fixture
def encodes(monkeypatch):
    """encode_tensor_map replaced: 128 bytes holding the address and the dims; the fields
    it was asked for, in order."""
    asked = []

    def encode(fields):
        asked.append(fields)
        words = [fields.address, *fields.dims] + [0] * (15 - fields.rank)
        return np.frombuffer(struct.pack("<16Q", *words), dtype="V128")[0]

    monkeypatch.setattr(tensor_maps, "encode_tensor_map", encode)
    return asked


def launch_args(gpu, m=64, k=128, **given):
    return {"a": gpu.array((m, k), np.float16), "y": gpu.array((m,)), "M": m, "K": k,
            **given}


def map_words(value):
    return struct.unpack("<16Q", value.tobytes())


def test_the_launch_passes_the_map_after_the_strides_before_the_workspaces(gpu, encodes):
    kernel = tma_kernel()
    args = launch_args(gpu, ws=gpu.array((64,)))
    launching.launch(kernel, b"cubin", args)
    a, y, *strides, tmap, ws, m, k = gpu.function.last_args
    assert (a, y, ws) == tuple(np.uint64(args[n].data.ptr) for n in ("a", "y", "ws"))
    assert strides == [I32(128), I32(1), I32(1)] and (m, k) == (I32(64), I32(128))
    assert tmap.dtype == np.dtype("V128") and map_words(tmap)[:3] == (int(a), 128, 64)


def recording_driver(replace, launched, replaced):
    """A driver whose cuTensorMapReplaceAddress is `replace(at, address)` (recorded in
    `replaced`) and whose launches record the map's words in `launched`."""
    def replace_address(at, address):
        replaced.append(address)
        return replace(at, address)

    def launch(*head_and_params):
        params = head_and_params[9]
        launched.append(map_words(np.frombuffer(ctypes.string_at(params[5], 128), "V128")[0]))
        return 0
    return types.SimpleNamespace(launch=launch, replace_address=replace_address, memset=None)


def writes_word(word, also=None):
    """A re-pointing that writes the address into 8-byte word `word` (the fake encoding
    keeps it in word 0) and, where `also(address)` is true, adds 1 to word 15 as well, as
    a layout keeping more than the address would."""
    def replace(at, address):
        ctypes.c_uint64.from_address(at + 8 * word).value = address
        if also is not None and also(address):
            ctypes.c_uint64.from_address(at + 8 * 15).value += 1
        return 0
    return replace


def test_a_map_is_encoded_once_per_layout_then_re_pointed_by_writing_its_address(
        gpu, encodes, monkeypatch):
    kernel = tma_kernel()
    first = launch_args(gpu)
    for _ in range(3):
        launching.launch(kernel, b"cubin", first)
    assert len(encodes) == 1 and gpu.loads == 1
    launched, replaced = [], []
    monkeypatch.setattr(kernel_params, "cuda_driver",
                        lambda: recording_driver(writes_word(0), launched, replaced))
    other, third = launch_args(gpu), launch_args(gpu)     # same signature, other addresses
    for args in (other, other, first, third):
        launching.launch(kernel, b"cubin", args)
    assert len(encodes) == 1                       # never encoded again
    # the first move asks the driver to re-point at the new address and at the probes;
    # each changed word 0 alone, so later moves write word 0 themselves
    assert replaced == [other["a"].data.ptr, *kernel_params._PROBES]
    assert [words[:3] for words in launched] == [
        (args["a"].data.ptr, 128, 64) for args in (other, other, first, third)]
    monkeypatch.setattr(kernel_params, "cuda_driver", lambda: None)
    launching.launch(kernel, b"cubin", launch_args(gpu, m=32))    # another layout
    assert len(encodes) == 2 and encodes[-1].dims == (128, 32)


@pytest.mark.parametrize("replace, why", [
    (writes_word(0, also=lambda address: address % 4096 == 0), "a flag of 4 KiB alignment"),
    (writes_word(0, also=lambda address: address >= 1 << 40), "a flag of high addresses"),
    (lambda at, address: ctypes.c_uint64.from_address(at).__setattr__("value", address >> 4),
     "the address stored shifted"),
    (lambda at, address: int(address >= 1 << 47), "high addresses refused"),
])
def test_a_map_whose_re_pointing_is_not_one_word_write_asks_the_driver_each_move(
        gpu, encodes, monkeypatch, replace, why):
    kernel = tma_kernel()
    launching.launch(kernel, b"cubin", launch_args(gpu))
    launched, replaced = [], []
    monkeypatch.setattr(kernel_params, "cuda_driver",
                        lambda: recording_driver(replace, launched, replaced))
    moves = [launch_args(gpu) for _ in range(3)]
    launching.launch(kernel, b"cubin", moves[0])
    learned = len(replaced)
    assert learned > 1, why                        # the probes ran, and found no one word
    for args in moves[1:]:
        launching.launch(kernel, b"cubin", args)
    assert replaced[learned:] == [args["a"].data.ptr for args in moves[1:]], why


def test_probing_restores_the_maps_bytes():
    storage = ctypes.create_string_buffer(128)
    at = ctypes.addressof(storage)
    ctypes.memmove(at, struct.pack("<16Q", 0x1000, *range(1, 16)), 128)
    assert kernel_params.address_word(at, 0x1000, 0x2000, writes_word(0)) == 0
    assert storage.raw == struct.pack("<16Q", 0x1000, *range(1, 16))
    assert kernel_params.address_word(at, 0x1000, 0x2000, writes_word(3)) is None
    assert storage.raw == struct.pack("<16Q", 0x1000, *range(1, 16))


def test_without_the_driver_a_moved_map_is_encoded_again(gpu, encodes):
    kernel = tma_kernel()
    first, other = launch_args(gpu), launch_args(gpu)
    for args in (first, other, other, first):
        launching.launch(kernel, b"cubin", args)
        assert map_words(gpu.function.last_args[5])[0] == args["a"].data.ptr
    assert [f.address for f in encodes] == [first["a"].data.ptr, other["a"].data.ptr,
                                            first["a"].data.ptr]


def test_a_launch_at_a_misaligned_address_is_refused(gpu, encodes):
    kernel = tma_kernel()
    launching.launch(kernel, b"cubin", launch_args(gpu))
    odd = launch_args(gpu)
    odd["a"].data.ptr += 8
    with pytest.raises(ValueError, match="tensor map a_map of a: the tensor's address .* "
                                         "is not 16-byte aligned"):
        launching.launch(kernel, b"cubin", odd)
    assert len(encodes) == 1


def test_a_map_over_a_tensor_the_kernel_lacks_is_refused(gpu, encodes):
    kernel = tma_kernel()
    kernel.tensor_maps[0].tensor = ex.tensor("b", F16, [ex.const(8), ex.const(64)])
    with pytest.raises(ValueError, match="tensor map a_map is over b, which is not a tensor "
                                         "parameter of the kernel"):
        launching.launch(kernel, b"cubin", launch_args(gpu))


# -- on the GPU ----------------------------------------------------------------------------

@pytest.mark.gpu
def test_a_map_of_a_cupy_array_encodes():
    import cupy
    kernel = tma_kernel()
    a = cupy.zeros((128, 256), dtype=cupy.float16)
    fields = fields_of(kernel, a, M=128, K=256)
    value = encode_tensor_map(fields)
    assert value.dtype == np.dtype("V128") and any(value.tobytes())
    assert encode_tensor_map(fields).tobytes() == value.tobytes()
    b = cupy.zeros((128, 256), dtype=cupy.float16)
    assert encode_tensor_map(tensor_maps.at_address(fields, b.data.ptr)).tobytes() != \
        value.tobytes()


ECHO = r"""
struct alignas(64) TensorMap { unsigned long long opaque[16]; };
extern "C" __global__ void tma(const unsigned short* a, float* y, int a_s0, int a_s1,
                               int y_s0, const __grid_constant__ TensorMap a_map,
                               float* ws, int M, int K)
{
  // y[0..15]: the map's words as pairs of floats' bits; then the strides and scalars
  unsigned long long* out = reinterpret_cast<unsigned long long*>(y);
  int t = threadIdx.x;
  if (t < 16) out[t] = a_map.opaque[t];
  if (t == 0) {
    out[16] = reinterpret_cast<unsigned long long>(a);
    out[17] = reinterpret_cast<unsigned long long>(ws);
    int* ints = reinterpret_cast<int*>(out + 18);
    ints[0] = a_s0; ints[1] = a_s1; ints[2] = y_s0; ints[3] = M; ints[4] = K;
  }
}
"""


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["driver", "cupy"])
def test_a_kernel_of_the_abi_receives_the_map_and_the_parameters_after_it(path, monkeypatch):
    import cupy
    from codegen import nvrtc
    if path == "cupy":
        monkeypatch.setattr(kernel_params, "cuda_driver", lambda: None)
    monkeypatch.setattr(launching, "_launchers", {})
    kernel = tma_kernel()
    cubin = nvrtc.compile_to_cubin(ECHO, "tma", arch="sm_90")
    a = cupy.zeros((64, 128), dtype=cupy.float16)
    y = cupy.zeros(64, dtype=cupy.float32)
    ws = cupy.zeros(64, dtype=cupy.float32)
    launching.launch(kernel, cubin, {"a": a, "y": y, "ws": ws, "M": 64, "K": 128})
    out = y.view(cupy.uint64).get()
    want = encode_tensor_map(fields_of(kernel, a, M=64, K=128))
    assert out[:16].tobytes() == want.tobytes()
    assert tuple(out[16:18]) == (a.data.ptr, ws.data.ptr)
    assert tuple(out[18:21].view(np.int32)[:5]) == (128, 1, 1, 64, 128)


@pytest.mark.gpu
@pytest.mark.parametrize("box, swizzle, dtype", [
    ((64, 64), "128B", F16), ((32, 64), "64B", F16), ((8, 16), "none", F32)])
def test_a_map_re_pointed_by_its_address_word_is_the_drivers_map(box, swizzle, dtype):
    """Moves to addresses of every alignment from 16 bytes to 64 KiB, and high ones: the
    map's bytes are those of the driver's re-pointing and of a fresh encoding, whether
    the move wrote the learned word or asked the driver."""
    import cupy
    driver = kernel_params.cuda_driver()
    assert driver is not None
    kernel = tma_kernel(box=box, swizzle=swizzle, dtype=dtype)
    a = cupy.zeros((128, 256), dtype=np.float16 if dtype is F16 else np.float32)
    fields = fields_of(kernel, a, M=128, K=256)
    patched = kernel_params._Map(0, fields)
    by_driver = kernel_params._Map(0, fields)
    by_driver.word = None                          # every move asks the driver
    base = a.data.ptr
    moves = [base + 16 * k for k in (1, 2, 3, 5, 8, 16, 17, 64, 256, 4096)] + [
        (base & ~0xFFFF) + (1 << 16), (1 << 40) + 16, (1 << 47) - 16, base]
    for address in moves:
        patched.point_at(address, driver)
        by_driver.point_at(address, driver)
        fresh = encode_tensor_map(tensor_maps.at_address(fields, address)).tobytes()
        assert patched.value().tobytes() == by_driver.value().tobytes() == fresh, hex(address)
    offset = patched.at - ctypes.addressof(patched.storage)
    print(f"{swizzle} {dtype}: address word at byte "
          f"{None if patched.word is None else patched.word - offset}")
