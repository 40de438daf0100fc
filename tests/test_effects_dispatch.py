"""No code asks which class an instruction statement is outside the modules that define,
emit and interpret the statements: the checkers read `stmt.effects()` (lowering.kir.effects),
and the passes that rewrite particular statements ask the statement (zero_filled_unless,
complete_on, overlaps_unrolled), so that a new instruction is a new class in those homes
alone."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("fuserir", "lowering", "codegen", "driver", "examples", "benchmarks", "tools")
# the statements' homes: their definition (and effects), emission, interpretation
HOMES = ("lowering/kir/", "codegen/cuda/", "codegen/interp/")
STRUCTURAL = {"Stmt", "ForLoop", "IfThenElse", "Allocate", "Comment", "ExprStmt"}

def instruction_classes():
    from lowering import kir
    return {name for name in dir(kir) if isinstance(getattr(kir, name), type)
            and issubclass(getattr(kir, name), kir.Stmt) and name not in STRUCTURAL}


def dispatch_sites(source, classes):
    """Each reference to an instruction class as a value (an isinstance test, a class in a
    tuple, set or dict: anything but a call that builds the statement) and each visitor
    method named after one."""
    tree = ast.parse(source)
    built = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    imported = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                and (n.module or "").split(".")[-1] in ("kir", "statements", "hopper")
                for a in n.names if a.name in classes}
    sites = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "kir" and node.attr in classes and id(node) not in built:
            sites += 1
        elif isinstance(node, ast.Name) and node.id in imported and id(node) not in built:
            sites += 1
        elif isinstance(node, ast.FunctionDef) and node.name.split("_", 1)[0] in (
                "visit", "mutate") and node.name.split("_", 1)[-1] in classes:
            sites += 1
    return sites


def found():
    classes = instruction_classes()
    sites = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(HOMES):
                continue
            n = dispatch_sites(path.read_text(), classes)
            if n:
                sites[rel] = n
    return sites


def test_no_class_dispatch_outside_the_statements_homes():
    assert found() == {}


def test_the_census_finds_each_kind_of_dispatch():
    classes = {"Wgmma", "TmaLoad", "Barrier"}
    assert dispatch_sites("isinstance(s, kir.Wgmma)\n", classes) == 1
    assert dispatch_sites("isinstance(s, (kir.Barrier, kir.ForLoop))\n", classes) == 1
    assert dispatch_sites("X = (kir.Wgmma, kir.TmaLoad)\n", classes) == 2
    assert dispatch_sites("X = {(kir.Wgmma, 'd')}\n", classes) == 1
    assert dispatch_sites("class V:\n    def visit_TmaLoad(self, s):\n        pass\n",
                          classes) == 1
    assert dispatch_sites("isinstance(s, kir.ForLoop)\nkir.Barrier()\n", classes) == 0
    assert dispatch_sites("from lowering.kir import Wgmma as W\nisinstance(s, W)\nW()\n",
                          classes) == 1
