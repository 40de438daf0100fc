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
    with shallow_stack(100):
        # 5000 parentheses: no tree depth (atoms are inlined) but a deep LALR stack
        fusion, _ = round_trip(HEAD + "  z = " + "(" * 5000 + "x * 2" + ")" * 5000 +
                               "\n  output z\n}\n")
        np.testing.assert_array_equal(evaluated(fusion), X * 2)
        # a split factor behind 3000 minus signs is a constant 4
        fusion, printed = round_trip(HEAD + "  z = relu(x)\n  output z\n}\n"
                                     "schedule f {\n  z.split(0, " + "-" * 3000 + "4)\n}\n")
        assert "z.split(0, 4)" in printed
        # a list nested 3000 deep is walked, then refused, at the argument
        text = HEAD + "  z = sum(x, axes=" + "[" * 3000 + "0" + "]" * 3000 + ")\n  output z\n}\n"
        with pytest.raises(DslError) as caught:
            fuserir.parse(text)
    assert (caught.value.line, caught.value.column) == (2, 19)
    assert caught.value.message == "sum: axes must be an integer or a list of integers"


def test_deep_map_argument_is_refused_at_the_argument():
    text = (HEAD + "  z = relu(x)\n  output z\n}\nschedule f {\n  z.reorder(" +
            "{0: " * 2000 + "0" + "}" * 2000 + ")\n}\n")
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
    of the graph: 5,000 nested negations parse in well under a second (7 s when both
    scanned every tensor)."""
    text = HEAD + "  z = " + "-" * 5000 + "x\n  output z\n}\n"
    started = time.perf_counter()
    f = fuserir.parse(text)
    assert time.perf_counter() - started < 2.0
    names = [t.name for t in f.tensors]
    assert len(names) == len(set(names)) == 5001       # x, 4,999 intermediates, z
    assert names[:3] == ["x", "t1", "t2"] and names[-1] == "z"
