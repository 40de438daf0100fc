"""The tensor-core matmul in general, on the CPU: layouts x operand dtypes x output dtypes
x fused epilogues x shared-memory epilogue x stages x warps x odd sizes.

Split-K "two_kernel" runs as two kernels (the tensor-core partial sums, then the
reduction and epilogue), both in the interpreter. CI runs a pairwise-covering subset (every pair of factor values appears in some case,
chosen greedily and deterministically); `-m slow` runs the full product. Each case: the
interpreter equals the reference evaluator bit for bit on integer-valued inputs (the
epilogues here are exact on them), no race, no bank conflict in the operand copies and
ldmatrix loads, and the kernel compiles to a cubin (tests/conftest.py compiles every
generated kernel at the end of the session).
"""

import itertools
import zlib

import ml_dtypes
import numpy as np
import pytest

import codegen
import fuserir
from fuserir.scheduler import MatmulParams, schedule_matmul
from lowering.verify import bank_conflicts

OPERANDS = {"TT": ("[M, K]", "[K, N]"), "TN": ("[M, K]", "[N, K]"),
            "NT": ("[K, M]", "[K, N]"), "NN": ("[K, M]", "[N, K]")}
EPILOGUES = {
    "cast": "out = cast(acc, ODT)",
    "bias_relu": "out = cast(relu(acc + cast(broadcast(bias, [true, false]), f32)), ODT)",
    "scale_residual": "out = cast(acc * 2.0 - res, ODT)",
}
FACTORS = {
    "layout": list(OPERANDS),
    "dtype": ["f16", "bf16"],
    "out_dtype": ["f16", "bf16", "f32"],
    "epilogue": list(EPILOGUES),
    "splitk_mode": ["serial", "two_kernel"],
    "smem_epilogue": [False, True],
    "stages": [2, 3, 4, 5],
    "warps": [4, 8],
    "size": [(136, 72, 168), (40, 264, 72), (200, 56, 328)],
}
SPLITK = {(136, 72, 168): 2, (40, 264, 72): 1, (200, 56, 328): 3}


def pairwise(factors):
    """A small list of cases in which every pair of values of two factors appears."""
    names = list(factors)
    uncovered = {((a, va), (b, vb)) for a, b in itertools.combinations(names, 2)
                 for va in range(len(factors[a])) for vb in range(len(factors[b]))}
    product = list(itertools.product(*(range(len(factors[n])) for n in names)))
    cases = []
    while uncovered:
        def gain(case):
            return sum(((a, case[i]), (b, case[j])) in uncovered
                       for (i, a), (j, b) in itertools.combinations(enumerate(names), 2))
        best = max(product, key=gain)
        uncovered -= {((a, best[i]), (b, best[j]))
                      for (i, a), (j, b) in itertools.combinations(enumerate(names), 2)}
        cases.append({n: factors[n][v] for n, v in zip(names, best)})
    return cases


def case_id(c):
    m, n, k = c["size"]
    return (f"{c['layout']}-{c['dtype']}-{c['out_dtype']}-{c['epilogue']}-"
            f"{c['splitk_mode']}-smem{int(c['smem_epilogue'])}-s{c['stages']}-"
            f"w{c['warps']}-{m}x{n}x{k}")


PAIRWISE = pairwise(FACTORS)
FULL = [dict(zip(FACTORS, values)) for values in itertools.product(*FACTORS.values())]


def build(c):
    a, b = OPERANDS[c["layout"]]
    dt = c["dtype"]
    extra = ""
    if c["epilogue"] == "bias_relu":
        extra = ", bias: f16[N]"
    elif c["epilogue"] == "scale_residual":
        extra = ", res: f32[M, N]"
    text = f"""
fusion mm(A: {dt}{a}, B: {dt}{b}{extra}) {{
  acc = matmul(A, B, layout={c['layout']})
  {EPILOGUES[c['epilogue']].replace('ODT', c['out_dtype'])}
  output out
}}"""
    f = fuserir.parse(text)
    warps_m = 2 if c["warps"] == 4 else 4
    schedule_matmul(f, MatmulParams(cta_tile=(64 * warps_m, 128, 32), warp_tile=(64, 64, 32),
                                    stages=c["stages"], splitk_factor=SPLITK[c["size"]],
                                    splitk_mode=c["splitk_mode"],
                                    use_smem_epilogue=c["smem_epilogue"]))
    return f


def inputs(f, size, rng):
    m, n, k = size
    dims = {"M": m, "N": n, "K": k}
    out = {}
    for tv in f.inputs:
        shape = [dims[str(e)] for e in tv.shape]
        host = np.float16 if tv.dtype.value == "f16" else (
            ml_dtypes.bfloat16 if tv.dtype.value == "bf16" else np.float32)
        out[tv.name] = rng.integers(-3, 4, shape).astype(host)
    return out


def check(c):
    f = build(c)
    exe = codegen.compile(f, backend="interp")
    rng = np.random.default_rng(zlib.crc32(case_id(c).encode()))
    data = inputs(f, c["size"], rng)
    splitk = SPLITK[c["size"]]
    got = exe.run({**data, "splitk": splitk})["out"]        # raises RaceError on a race
    want = fuserir.evaluate(f, {**data, "splitk": splitk})["out"]
    assert np.array_equal(np.asarray(got, np.float64), np.asarray(want, np.float64))
    m, n, k = c["size"]
    reports = bank_conflicts.report(exe.kernels[0].kir, {"M": m, "N": n, "K": k,
                                                         "splitk": splitk},
                                    block=(0, 0, splitk - 1))   # the matmul kernel
    operand = [r for r in reports if r.kind in ("cp.async", "ldmatrix")]
    assert operand and all(r.worst == 1 for r in operand), \
        [(r.label, r.buffer, r.worst) for r in operand]


def test_the_pairwise_subset_covers_every_pair():
    names = list(FACTORS)
    for a, b in itertools.combinations(names, 2):
        seen = {(c[a], c[b]) for c in PAIRWISE}
        assert seen == set(itertools.product(FACTORS[a], FACTORS[b])), (a, b)
    assert len(PAIRWISE) < len(FULL) // 20


@pytest.mark.parametrize("c", PAIRWISE, ids=case_id)
def test_pairwise(c):
    check(c)


@pytest.mark.slow
@pytest.mark.parametrize("c", FULL, ids=case_id)
def test_full_product(c):
    check(c)
