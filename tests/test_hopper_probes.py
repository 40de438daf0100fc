"""The sm_90 instructions probed: each probe kernel of tests/hopper_probes.py run by the
interpreter against the module's own model of the PTX ISA layouts (CPU, every byte and
every lane), and on an sm_90 GPU against the interpreter, bit for bit (integer-valued or
raw-bit data, so every result is exact)."""

import numpy as np
import pytest

import hopper_probes as hp
from codegen.interp import run_kernel
from fuserir.dtypes import DataType

F16, BF16 = DataType.f16, DataType.bf16


def _bits(n, seed):
    """n distinct finite 16-bit patterns (no inf or NaN exponent)."""
    return ((np.arange(n) * 7 + 1 + 101 * seed) % 0x7C00).astype(np.uint16)


def _half(bits, dtype):
    return bits.view(dtype.numpy)


def _integers(shape, rng, dtype):
    return rng.integers(-8, 9, shape).astype(np.float64).astype(dtype.numpy)


# -- the probes: (id, kernel, inputs, expected outputs) --------------------------------------

TMA_LOADS = [  # (rows, cols, box, mode, rank)
    (40, 96, (24, 10), "none", 2), (40, 96, (16, 8), "32B", 2),
    (40, 96, (32, 8), "64B", 2), (40, 96, (64, 8), "128B", 2),
    (40, 256, (64, 8, 2), "128B", 3)]


def tma_load_case(rows, cols, box, mode, rank):
    kernel = hp.tma_load_probe(rows, cols, box, mode, rank)
    x = _half(_bits(rows * cols, 1), F16).reshape(rows, cols)
    n = hp.box_elements(box)
    if rank == 2:       # dimension 0 at a multiple of 16 bytes (TMA_COORD_ALIGN)
        at = ((cols - box[0] - box[0] // 2) // 8 * 8, -3)
    else:
        at = (0, rows - 4, cols // 64 - 1)
    args = {"x": x, "out1": np.zeros(n, np.float16), "out2": np.zeros(n, np.float16)}
    args.update({f"c{d}": v for d, v in enumerate(at)})
    first, second = hp.expected_tma_load(x, box, mode, rank, at)
    return kernel, args, {"out1": first, "out2": second}


TMA_STORES = [(40, 96, (24, 10), "none"), (40, 96, (16, 8), "32B"),
              (40, 96, (32, 8), "64B"), (40, 96, (64, 8), "128B")]


def tma_store_case(rows, cols, box, mode):
    kernel = hp.tma_store_probe(rows, cols, box, mode)
    n = hp.box_elements(box)
    src = _half(_bits(n, 2), F16)
    y = _half(_bits(rows * cols, 3), F16).reshape(rows, cols)
    at = ((cols - box[0] // 2 - 8) // 8 * 8, rows - box[1] // 2)
    args = {"src": src, "y": y.copy(), "c0": at[0], "c1": at[1]}
    return kernel, args, {"y": hp.expected_tma_store(src, y, box, mode, at)}


WGMMAS = ([dict(n=64, a_major=m, b_major=m, mode=s) for m in ("K", "MN")
           for s in ("none", "32B", "64B", "128B")]
          + [dict(n=64, a_major="K", b_major="MN", mode="128B"),
             dict(n=64, a_major="MN", b_major="K", mode="64B", a_mode="32B")]
          + [dict(n=n, a_major="K", b_major="K", mode="128B") for n in (8, 128, 256)]
          + [dict(n=64, b_major="K", mode="128B", register_a=True),
             dict(n=64, b_major="MN", mode="none", register_a=True),
             dict(n=64, a_major="K", b_major="K", mode="128B", dtype=BF16)])


def wgmma_case(n, dtype=F16, **layout):
    kernel, a_lay, b_lay = hp.wgmma_probe(n, dtype, **layout)
    rng = np.random.default_rng(n)
    a_img = _integers(a_lay.elements, rng, dtype)
    b_img = _integers(b_lay.elements, rng, dtype)
    a_reg = _integers((hp.THREADS, 16), rng, dtype)
    args = {"a_img": a_img, "b_img": b_img, "a_reg": a_reg,
            "d": np.zeros((hp.THREADS, n // 2), np.float32)}
    want = hp.expected_wgmma(n, a_lay, b_lay, a_img, b_img,
                             a_reg if layout.get("register_a") else None)
    return kernel, args, {"d": want}


STMATRICES = [(num, trans) for num in (1, 2, 4) for trans in (False, True)]


def stmatrix_case(num, trans):
    kernel = hp.stmatrix_probe(num, trans)
    src = _half(_bits(hp.THREADS * 2 * num, 4), F16).reshape(hp.THREADS, 2 * num)
    args = {"src": src, "out": np.zeros(4 * 64 * num, np.float16)}
    return kernel, args, {"out": hp.expected_stmatrix(src, num, trans)}


def roles_case():
    kernel = hp.roles_probe()
    x = np.arange(2 * hp.THREADS, dtype=np.float32) - 77
    args = {"x": x, "y": np.zeros(2 * hp.THREADS, np.float32),
            "z": np.zeros(hp.THREADS, np.float32), "done": np.zeros(2 * hp.THREADS, np.int32)}
    return kernel, args, hp.expected_roles(x)


def _wgmma_id(p):
    return "-".join(f"{k}={v}" for k, v in p.items())


CASES = ([(f"tma_load-{r}d-{m}-box{'x'.join(map(str, b))}", tma_load_case, (R, C, b, m, r))
          for R, C, b, m, r in TMA_LOADS]
         + [(f"tma_store-{m}", tma_store_case, (R, C, b, m)) for R, C, b, m in TMA_STORES]
         + [(f"wgmma-{_wgmma_id(p)}", wgmma_case, p) for p in WGMMAS]
         + [(f"stmatrix-x{n}{'-trans' if t else ''}", stmatrix_case, (n, t))
            for n, t in STMATRICES]
         + [("roles-setmaxnreg-named-barriers-arrive", roles_case, ())])


def build(case):
    _, make, params = case
    return make(**params) if isinstance(params, dict) else make(*params)


def _same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    g = got.view(np.uint32 if got.itemsize == 4 else np.uint16)
    w = want.view(g.dtype)
    bad = np.flatnonzero(g.ravel() != w.ravel())
    return bad


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_interpreter_matches_the_ptx_layouts(case):
    kernel, args, want = build(case)
    run_kernel(kernel, args)                 # raises RaceError on any hazard
    for name, expected in want.items():
        bad = _same_bits(args[name], expected)
        assert not len(bad), (f"{case[0]} {name}: {len(bad)} of {expected.size} differ, first "
                              f"at flat {bad[:8]}: got {args[name].ravel()[bad[:4]]}, want "
                              f"{expected.ravel()[bad[:4]]}")


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_gpu_matches_the_interpreter_bit_for_bit(case):
    import cupy
    from codegen import nvrtc
    from codegen.cuda import emit_cuda
    from codegen.launch import launch
    from driver.build import kernel_arch

    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the probes are of sm_90 instructions")
    kernel, args, want = build(case)
    source = emit_cuda(kernel)
    cubin = nvrtc.compile_to_cubin(source, kernel.name,
                                   kernel_arch(kernel, nvrtc.default_arch()))
    gpu = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
    launch(kernel, cubin, gpu)
    cupy.cuda.Device().synchronize()
    run_kernel(kernel, args)
    for name in want:
        got = cupy.asnumpy(gpu[name])
        bad = _same_bits(got, args[name])
        assert not len(bad), (f"{case[0]} {name}: GPU and interpreter differ at {len(bad)} "
                              f"of {got.size}, first at flat {bad[:8]}: GPU "
                              f"{got.ravel()[bad[:4]]}, interpreter {args[name].ravel()[bad[:4]]}")
