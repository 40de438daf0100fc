"""The layering rule, read from the source: every module imports only its own layer or
layers below it, even inside a function; one function is exempt, the contract's lazy
re-export in fuserir/__init__.py (below).

    the contract (codegen/__init__.py: `codegen.compile` and the errors)
      CLI (fuserir.cli, fuserir.__main__)
      -> driver (compile, segmentation, run-time plans, build, dumps)
        -> codegen (CUDA emission, NVRTC, launch, the interpreter)
          -> lowering (kernel IR and its passes)
            -> front door (fuserir, fuserir.dsl and its parser: a schedule block replays
               scheduler calls such as `matmul(...)`)
              -> schedulers (fuserir.scheduler)
                -> front-end core (IR, ops, transforms, DSL printer, reference, dtypes,
                   errors, numerics, device, op table, instruction descriptors)

The codegen package's __init__ is the public contract (`codegen.compile`, the errors),
so it sits on top of every layer: it re-exports the driver's compile (lazily, so that
importing a module of codegen loads no driver) and codegen's own errors. Nothing inside
the packages imports `codegen` itself, only its modules (codegen.errors, codegen.nvrtc,
...).

`fuserir.compile` is the same contract offered by the front package, whose __init__ the
layers below import: only its module-level `__getattr__` (PEP 562, run on the first
`fuserir.compile`) sits at the contract's layer and may import the driver; the rest of
fuserir/__init__.py stays in the front door (CONTRACT_FUNCTIONS).
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("fuserir", "lowering", "codegen", "driver")

# (dotted prefix, layer): the longest matching prefix decides; higher is above
LAYERS = (
    ("fuserir", 0),
    ("fuserir.scheduler", 1),
    ("fuserir.dsl.parser", 2),
    ("fuserir.dsl.__init__", 2),
    ("fuserir.__init__", 2),
    ("lowering", 3),
    ("codegen", 4),
    ("driver", 5),
    ("fuserir.cli", 6),
    ("fuserir.__main__", 6),
    ("codegen.__init__", 7),
)
# (module, top-level function): the function's imports are the contract's (layer 7)
CONTRACT_FUNCTIONS = {("fuserir.__init__", "__getattr__")}
LAYER_NAMES = {0: "front-end core", 1: "schedulers", 2: "front door (fuserir, fuserir.dsl)",
               3: "lowering", 4: "codegen", 5: "driver", 6: "CLI",
               7: "the contract (codegen/__init__.py)"}


def modules():
    """{dotted name (packages as pkg.__init__): path} of every module of the packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[".".join(path.relative_to(ROOT).with_suffix("").parts)] = path
    return found


MODULES = modules()


def layer(name):
    best = max((p for p, _ in LAYERS if name == p or name.startswith(p + ".")), key=len)
    return dict(LAYERS)[best]


def target_module(name):
    """The module an import names: `a.b` is a.b's module if it exists, else its package."""
    parts = name.split(".")
    while parts:
        for candidate in (".".join(parts), ".".join(parts) + ".__init__"):
            if candidate in MODULES:
                return candidate
        parts.pop()
    return None


def imports(name, path):
    """[(imported module, line)] of every import statement of the module, nested ones too."""
    package = name.split(".")[:-1]          # a package's __init__ resolves against itself
    tree = ast.parse(path.read_text(), str(path))
    contract = [n for n in tree.body if isinstance(n, ast.FunctionDef)
                and (name, n.name) in CONTRACT_FUNCTIONS]
    exempt = {id(n) for f in contract for n in ast.walk(f)}
    found = []
    for node in ast.walk(tree):
        if id(node) in exempt:
            continue                        # the contract's own imports (see the header)
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found += [(f"{module}.{a.name}", node.lineno) for a in node.names]
    return [(target_module(m), line) for m, line in found
            if m.split(".")[0] in PACKAGES and target_module(m)]


def violations():
    bad = []
    for name, path in MODULES.items():
        for target, line in imports(name, path):
            if layer(target) > layer(name):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {name} ({LAYER_NAMES[layer(name)]}) "
                           f"imports {target} ({LAYER_NAMES[layer(target)]})")
    return bad


def test_every_import_goes_down():
    assert violations() == []


def test_only_the_front_packages_getattr_imports_upward(tmp_path):
    """The contract exemption is one function of one module: the same import at fuserir's
    top level, or in a `__getattr__` of another module, is reported."""
    source = "def __getattr__(name):\n    import driver\n"
    planted = tmp_path / "planted.py"
    planted.write_text(source)
    assert imports("fuserir.__init__", planted) == []
    assert [t for t, _ in imports("fuserir.ir.__init__", planted)] == ["driver.__init__"]
    planted.write_text("import driver\n" + source)
    assert [t for t, _ in imports("fuserir.__init__", planted)] == ["driver.__init__"]


def test_the_rule_is_checked_on_every_package():
    assert {n.split(".")[0] for n in MODULES} == set(PACKAGES)
    assert layer("lowering.pipeline") == 3 and layer("fuserir.cli.run") == 6
    assert layer("fuserir.scheduler.matmul") == 1 and layer("fuserir.ir.fusion") == 0


@pytest.mark.parametrize("source, expected", [
    ("from codegen.cuda import emit_cuda\n", "lowering.pipeline (lowering) imports codegen.cuda"),
    ("def f():\n    from driver import stages\n", "imports driver.stages (driver)"),
    ("from ..scheduler import auto\n", "imports fuserir.scheduler.auto (schedulers)"),
])
def test_an_upward_import_is_found(tmp_path, source, expected):
    """The checker itself: a planted upward import (also one inside a function) is
    reported with both layers."""
    where = "fuserir.ir.fusion" if source.startswith("from ..") else "lowering.pipeline"
    planted = tmp_path / "planted.py"
    planted.write_text(source)
    found = [f"{where} ({LAYER_NAMES[layer(where)]}) imports {t} ({LAYER_NAMES[layer(t)]})"
             for t, _ in imports(where, planted) if layer(t) > layer(where)]
    assert any(expected in v for v in found), found
