"""Deep and long DSL programs: parse, print, read back and evaluate
without recursion, whatever the depth.

A 160-term sum or 110 nested exp( used to raise RecursionError in the parser. The tests
here run on a shallow stack (`shallow_stack`: only 100 frames more than the test has), so
that a walk recursing once per level fails at depths of a few hundred as surely as one at
a few thousand would with the default limit; the target sizes (1000-term
sums, 1000 chained statements, 1000 nested calls and negations) run on the default stack,
in about a second each.
"""

import time

import numpy as np
import pytest

import fuserir
from fuserir import DslError
from fuserir.ir.equality import first_difference, structurally_equal

from conftest import shallow_stack

HEAD = "fusion f(x: f32[N]) {\n"
X = np.array([-1.5, 0.25, 3.0], np.float32)


def long_sum(n):
    return HEAD + "  z = " + " + ".join(["x"] * n) + "\n  output z\n}\n"


def right_nested_sum(n):
    return HEAD + "  z = " + "x + (" * (n - 1) + "x" + ")" * (n - 1) + "\n  output z\n}\n"


def chain(n):
    lines = ["  y0 = x + 1.0"] + [f"  y{i} = y{i - 1} + 1.0" for i in range(1, n)]
    return HEAD + "\n".join(lines) + f"\n  output y{n - 1}\n}}\n"


def nested(op, n):
    return HEAD + "  z = " + f"{op}(" * n + "x" + ")" * n + "\n  output z\n}\n"


def negations(n):
    return HEAD + "  z = " + "-" * n + "x\n  output z\n}\n"


def round_trip(text):
    """parse, print, parse again: the two fusions are equal and print the same."""
    fusion = fuserir.parse(text)
    printed = fuserir.print_fusion(fusion)
    again = fuserir.parse(printed)
    assert structurally_equal(fusion, again), first_difference(fusion, again)
    assert fuserir.print_fusion(again) == printed
    return fusion, printed


def evaluated(fusion):
    (out,) = fuserir.evaluate(fusion, {"x": X}).values()
    return out


def iterate(function, n, x=X):
    """`function` applied n times, rounding to f32 after each step, as the reference does."""
    value = x.astype(np.float32)
    with np.errstate(all="ignore"):
        for _ in range(n):
            value = function(value.astype(np.float64)).astype(np.float32)
    return value


CASES = [  # (text, operations, expected output), deeper than a recursive walk gets here
    (long_sum(300), 299, lambda: iterate(lambda v: v + X, 299)),
    (right_nested_sum(300), 299, lambda: iterate(lambda v: v + X, 299)),
    (chain(300), 300, lambda: iterate(lambda v: v + 1.0, 300)),
    (nested("exp", 500), 500, lambda: iterate(np.exp, 500)),
    (nested("relu", 300), 300, lambda: np.maximum(X, 0)),
    (negations(301), 301, lambda: -X),
]


@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=["sum300", "right_sum300", "chain300", "exp500", "relu300",
                              "neg301"])
def test_deep_programs_parse_print_and_evaluate_on_a_shallow_stack(case):
    text, operations, expected = CASES[case]
    with shallow_stack(100):
        fusion, printed = round_trip(text)
        got = evaluated(fusion)
    assert len(fusion.exprs) == operations
    np.testing.assert_array_equal(got, expected())


def test_the_printed_text_of_a_long_sum_is_the_sum():
    fusion, printed = round_trip(long_sum(200))
    assert printed == HEAD + "  z = " + " + ".join(["x"] * 200) + "\n  output z\n}\n"
    fusion, printed = round_trip(nested("exp", 200))
    assert printed == nested("exp", 200)


def test_deep_parentheses_and_constant_arguments():
    """At the supported depth (1,000 levels: fuserir.ir.fusion.MAX_EXPRESSION_DEPTH; deeper
    is refused, test_deeper_than_supported_is_refused_early)."""
    with shallow_stack(100):
        # 1000 parentheses: no tree depth (atoms are inlined) but a deep LALR stack
        fusion, _ = round_trip(HEAD + "  z = " + "(" * 1000 + "x * 2" + ")" * 1000 +
                               "\n  output z\n}\n")
        np.testing.assert_array_equal(evaluated(fusion), X * 2)
        # a split factor behind 998 minus signs (+ the call: 999 levels) is a constant 4
        fusion, printed = round_trip(HEAD + "  z = relu(x)\n  output z\n}\n"
                                     "schedule f {\n  z.split(0, " + "-" * 998 + "4)\n}\n")
        assert "z.split(0, 4)" in printed
        # a list nested 1000 deep is walked, then refused, at the argument
        text = HEAD + "  z = sum(x, axes=" + "[" * 1000 + "0" + "]" * 1000 + ")\n  output z\n}\n"
        with pytest.raises(DslError) as caught:
            fuserir.parse(text)
    assert (caught.value.line, caught.value.column) == (2, 19)
    assert caught.value.message == "sum: axes must be an integer or a list of integers"


def test_deep_map_argument_is_refused_at_the_argument():
    text = (HEAD + "  z = relu(x)\n  output z\n}\nschedule f {\n  z.reorder(" +
            "{0: " * 1000 + "0" + "}" * 1000 + ")\n}\n")
    with shallow_stack(100), pytest.raises(DslError) as caught:
        fuserir.parse(text)
    assert (caught.value.line, caught.value.column) == (6, 13)
    assert caught.value.message == "reorder: mapping must be a map {old: new} of axis numbers"


def test_a_python_built_deep_fusion_prints_and_reads_back():
    fusion = fuserir.Fusion("f")
    x = fusion.new_input("x", fuserir.DataType.f32, ["N"])
    value = x
    for i in range(200):
        value = fuserir.ops.mul(fuserir.ops.add(value, 1.0), 0.5) if i % 2 else \
            fuserir.ops.tanh(value)
    fusion.add_output(value)
    with shallow_stack(100):
        printed = fuserir.print_fusion(fusion)
        again = fuserir.parse(printed)
    assert structurally_equal(fusion, again), first_difference(fusion, again)
    np.testing.assert_array_equal(evaluated(again), evaluated(fusion))


TARGET_SIZES = [  # the target sizes in full: (text, operations, expected output)
    (long_sum(1000), 999, lambda: iterate(lambda v: v + X, 999)),
    (chain(1000), 1000, lambda: iterate(lambda v: v + 1.0, 1000)),
    (nested("exp", 1000), 1000, lambda: iterate(np.exp, 1000)),
    (negations(1000), 1000, lambda: X),
]


@pytest.mark.parametrize("case", range(len(TARGET_SIZES)), ids=["sum1000", "chain1000", "exp1000",
                                                        "neg1000"])
def test_issue_sizes(case):
    """On the default stack, in seconds: building a fusion no longer sorts its graph for
    every tensor it adds (it cost tens of seconds at these sizes)."""
    text, operations, expected = TARGET_SIZES[case]
    start = time.perf_counter()
    fusion, _ = round_trip(text)
    assert len(fusion.exprs) == operations
    np.testing.assert_array_equal(evaluated(fusion), expected())
    print(f"{operations} operations: parse, print, parse again in "
          f"{time.perf_counter() - start:.1f} s")


def test_a_fusion_grows_in_time_linear_in_its_tensors():
    """Naming each new intermediate, and checking a name is free, is a lookup, not a scan
    of the graph: 5,000 negations (five statements of 1,000, the supported depth) parse in
    well under a second (7 s when both scanned every tensor)."""
    lines = [f"  z{i} = " + "-" * 1000 + "x" for i in range(5)]
    text = HEAD + "\n".join(lines) + "\n  output z4\n}\n"
    started = time.perf_counter()
    f = fuserir.parse(text)
    assert time.perf_counter() - started < 2.0
    names = [t.name for t in f.tensors]
    assert len(names) == len(set(names)) == 5001       # x, 4,995 intermediates, z0 .. z4
    assert names[:3] == ["x", "t1", "t2"] and {f"z{i}" for i in range(5)} <= set(names)
    assert sum(name.startswith("t") for name in names) == 4995


# -- deeper than supported: refused early, where the depth is passed -------------------------

DEPTH = 1000   # fuserir.ir.fusion.MAX_EXPRESSION_DEPTH




TOO_DEEP = {   # shape -> (5,000-deep text, column where level 1,001 starts on line 2)
    "negations": (negations(5000), 7 + DEPTH),
    "parentheses": (HEAD + "  z = " + "(" * 5000 + "x" + ")" * 5000 + "\n  output z\n}\n",
                    7 + DEPTH),
    "calls": (nested("exp", 5000), 7 + 4 * DEPTH + 3),
    "right_sum": (right_nested_sum(5000), 7 + 5 * DEPTH + 4),
    "minus_parens": (HEAD + "  z = " + "-(" * 5000 + "x" + ")" * 5000 + "\n  output z\n}\n",
                     7 + 2 * DEPTH),
    "lists": (HEAD + "  z = sum(x, axes=" + "[" * 5000 + "0" + "]" * 5000 +
              ")\n  output z\n}\n", 19 + DEPTH),
}


@pytest.mark.parametrize("shape", list(TOO_DEEP))
def test_deeper_than_supported_is_refused_early(shape):
    text, column = TOO_DEEP[shape]
    started = time.process_time()        # CPU seconds: the work, not a loaded CI's waits
    with pytest.raises(DslError) as caught:
        fuserir.parse(text)
    elapsed = time.process_time() - started
    assert elapsed < 0.5, f"{shape}: refused in {elapsed:.2f} s"
    assert (caught.value.line, caught.value.column) == (2, column)
    assert caught.value.message == (
        f"expression nested deeper than {DEPTH} levels (each call, parenthesis and unary "
        f"minus nests one); fuserir supports expressions up to {DEPTH} deep")


def test_a_long_flat_sum_is_refused_by_the_builder_at_the_operator():
    """`x + x + ... + x` nests nothing in the text, but each + is an operation on the
    previous sum: the fusion refuses the 1,001st, located at its operator."""
    started = time.process_time()        # CPU seconds: the work, not a loaded CI's waits
    with pytest.raises(DslError) as caught:
        fuserir.parse(long_sum(5000))
    assert time.process_time() - started < 1.0
    assert (caught.value.line, caught.value.column) == (2, 7 + 4 * DEPTH + 2)
    assert caught.value.message == (
        f"t{DEPTH + 1}: expression {DEPTH + 1} operations deep (its operand t{DEPTH} is "
        f"{DEPTH} deep), over the supported depth of {DEPTH} operations from an input; "
        "split the computation into several fusions")


def test_a_python_built_expression_deeper_than_supported_is_refused_naming_the_tensor():
    with fuserir.FusionDefinition("deep") as fd:
        x = fd.define_tensor("x", "f32", ["N"])
        value = x
        for _ in range(DEPTH):
            value = fd.ops.tanh(value)
        fd.name(value, "deepest")
        with pytest.raises(fuserir.FusionError) as caught:
            -value
        assert str(caught.value) == (
            f"t{DEPTH + 1}: expression {DEPTH + 1} operations deep (its operand deepest is "
            f"{DEPTH} deep), over the supported depth of {DEPTH} operations from an input; "
            "split the computation into several fusions")
        assert len(fd.fusion.exprs) == DEPTH          # the refused op left no trace
        fd.add_output(value)


@pytest.mark.parametrize("kind", ["negations", "shared_input_sum"])
def test_the_supported_depth_parses_and_compiles_in_bounded_time(kind):
    """Lowering walks each chain of inlined ops once (it walked it again from every tensor:
    7.7 s for 1,000 negations); about a second here, bounded generously for a loaded CI."""
    import codegen
    import conftest
    text = negations(DEPTH) if kind == "negations" else right_nested_sum(DEPTH + 1)
    started = time.perf_counter()
    fusion = fuserir.parse(text)
    parsed = time.perf_counter() - started
    recorded = set(conftest.KERNEL_SOURCES)
    exe = codegen.compile(fusion, backend="interp")
    compiled = time.perf_counter() - started - parsed
    assert len(exe.kernels) == 1
    assert parsed < 2.0 and compiled < 8.0, (parsed, compiled)
    got = exe.run({"x": X})
    # NVRTC takes minutes over a kernel of 1,000 operations (0.4 s at 400; 3 minutes for
    # the one the run plans at X's size): the suite's cubin check at the file's end skips
    # the kernels of these two, those of the compile and of the run; the CUDA text is the
    # same statements as at depth 200 (tests/test_long_fusions.py), only more of them.
    for source in set(conftest.KERNEL_SOURCES) - recorded:
        del conftest.KERNEL_SOURCES[source]
    (out,) = got.values()
    expected = X if kind == "negations" else iterate(lambda v: v + X, DEPTH)
    np.testing.assert_array_equal(out, expected)
