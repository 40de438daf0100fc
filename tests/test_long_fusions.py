"""Long and deep fusions compile and run: nothing on the way (copying the fusion, ordering
its graph, indexing a chain of inlined tensors) recurses once per op or costs more than
a few seconds for a thousand."""

import time

import numpy as np

import codegen
import fuserir
from fuserir import FusionDefinition


def test_1000_chained_ops_compile_and_run():
    started = time.perf_counter()
    with FusionDefinition("chain") as fd:
        y = fd.define_tensor("x", "f32", ["N"])
        for _ in range(1000):
            y = fd.ops.add(y, 1.0)
        fd.add_output(y, "y")
    exe = codegen.compile(fd.fusion, backend="interp")
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(exe.run({"x": x})["y"], x + 1000)
    assert len(fd.fusion.exprs) == 1000
    assert time.perf_counter() - started < 60      # about 10 s on a loaded 2-core machine


def test_a_long_fusion_deep_copies_without_recursing():
    import copy
    from conftest import shallow_stack
    from fuserir.ir.fusion import MAX_EXPRESSION_DEPTH
    with FusionDefinition("chain") as fd:
        y = fd.define_tensor("x", "f32", ["N"])
        for _ in range(MAX_EXPRESSION_DEPTH):  # the deepest chain a fusion may hold
            y = fd.ops.mul(y, 1.0)
        fd.add_output(y, "y")
    with shallow_stack(100):   # 100 frames: a copy recursing per op (1,000) fails here
        twin = copy.deepcopy(fd.fusion)
    assert fuserir.ir.equality.structurally_equal(twin, fd.fusion)
    assert twin.tensor("y") is not fd.fusion.tensor("y")
    assert twin.tensor("y").definition.inputs[0].fusion is twin
