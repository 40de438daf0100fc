"""The main job: the split-K matmul of DESIGN.md section 1, as far as fuserir takes it today.

Today (foundation issue landed): parse the seed fusion, schedule split-K with IR
transforms (split + rfactor), show every tensor's loop domain and the replayable schedule,
and check with the reference evaluator, at a small size, that the schedule did not change
what the fusion computes. Lowering to a CUDA kernel with its barriers (and why each
exists), the interpreter and the GPU run arrive with the lowering and matmul issues; the
demo says so rather than pretend.
"""

import pathlib
import sys

import numpy as np

import fuserir

HERE = pathlib.Path(__file__).resolve().parent


def main():
    fusion = fuserir.dsl.parse_file(HERE / "splitk_matmul.fz")
    print("== the fusion and its schedule, as fuserir prints it ==")
    print(fuserir.print_fusion(fusion))
    print("== loop domains after scheduling ==")
    for tv in fusion.tensors:
        print(" ", tv.describe())

    sizes = {"M": 64, "N": 48, "K": 32 * 13, "splitk": 5}   # the last split is short
    rng = np.random.default_rng(0)
    a = rng.standard_normal((sizes["K"], sizes["M"])).astype(np.float16)
    b = rng.standard_normal((sizes["K"], sizes["N"])).astype(np.float16)
    out = fuserir.evaluate(fusion, {"A": a, "B": b, "splitk": sizes["splitk"]})["out"]
    exact = (a.astype(np.float64).T @ b.astype(np.float64))
    error = np.abs(out.astype(np.float64) - exact).max()
    bound = 2.0 ** -10 * np.abs(exact).max() + 1e-5 * sizes["K"]
    print(f"\n== reference evaluation, M={sizes['M']} N={sizes['N']} K={sizes['K']} "
          f"splitk={sizes['splitk']} ==")
    print(f"  max |split-K result - float64 matmul| = {error:.3g} (bound {bound:.3g})")
    print("\nNot yet: lowering to kernel IR, barrier insertion with reasons, CUDA emission and")
    print("the GPU run land with the lowering-core and tensor-core matmul issues.")
    return 0 if error <= bound else 1


if __name__ == "__main__":
    sys.exit(main())
