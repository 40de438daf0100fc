"""The scheduling transforms' docstrings: their examples run, and every public transform has one.

Each transform a schedule can call (a DSL schedule statement, a TensorView scheduling
method) documents itself in fuserir.transforms with a doctest that prints the tensor's loop
domain (TensorView.describe) before and after it. Running the doctests here keeps those
examples true to what the code does.
"""

import doctest
import importlib
import pkgutil

import pytest

import fuserir.transforms
from fuserir.dsl.parser import SCHEDULE_METHODS
from fuserir.ir.tensor import TensorView

MODULES = sorted(m.name for m in pkgutil.iter_modules(fuserir.transforms.__path__))
# the TensorView methods that the schedule trace records: those a schedule calls
TENSOR_METHODS = sorted(name for name, value in vars(TensorView).items()
                        if hasattr(value, "__wrapped__"))
PUBLIC_TRANSFORMS = sorted(set(SCHEDULE_METHODS) | set(TENSOR_METHODS))


def test_the_package_has_its_modules():
    assert {"common", "domain", "parallel", "rewrites", "placement", "memory"} <= set(MODULES)
    assert TENSOR_METHODS, "no traced TensorView scheduling method found"


@pytest.mark.parametrize("name", ["__init__"] + MODULES)
def test_doctests_pass(name):
    module = (fuserir.transforms if name == "__init__"
              else importlib.import_module(f"fuserir.transforms.{name}"))
    report = []
    runner = doctest.DocTestRunner(verbose=False)
    for test in doctest.DocTestFinder().find(module, module.__name__):
        runner.run(test, out=report.append)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, "".join(report)
    if name not in ("__init__", "common"):
        assert results.attempted > 0, f"fuserir.transforms.{name} has no doctest examples"


def _calls(source, name):
    return f".{name}(" in source or source.startswith(f"{name}(")


def _describe_outputs(examples):
    """(position, output) of each example that prints a tensor's loop domain."""
    return [(i, e.want) for i, e in enumerate(examples)
            if ".describe()" in e.source and "loop=[" in e.want]


@pytest.mark.parametrize("name", PUBLIC_TRANSFORMS)
def test_public_transform_shows_loop_domain_before_and_after(name):
    transform = getattr(fuserir.transforms, name, None)
    assert callable(transform), f"fuserir.transforms.{name} does not exist"
    doc = transform.__doc__ or ""
    assert doc.strip(), f"fuserir.transforms.{name} has no docstring"
    examples = doctest.DocTestParser().get_examples(doc)
    shown = _describe_outputs(examples)
    calls = [i for i, e in enumerate(examples) if _calls(e.source, name)]
    assert calls, f"the example of {name} does not call {name}"
    before_and_after = [
        c for c in calls
        if any(i < c for i, _ in shown) and any(i > c for i, _ in shown)
        and len({want for _, want in shown}) > 1]
    assert before_and_after, (
        f"the docstring of fuserir.transforms.{name} needs an example that prints "
        f"tensor.describe() before and after a call of {name}, showing what it changed")

