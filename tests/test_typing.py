"""The public API is typed, and mypy (the `test` extra) checks it with pyproject.toml's
[tool.mypy] settings: the modules that define fuserir's front door (parse, print_fusion,
evaluate, FusionDefinition, Fusion and TensorView with the scheduling transforms,
DataType, the errors), the matmul scheduler's public functions, and compile /
Executable / CompiledKernel with the errors of codegen."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

TYPED_MODULES = (
    "fuserir/__init__.py", "fuserir/builder.py", "fuserir/dtypes.py", "fuserir/errors.py",
    "fuserir/reference.py", "fuserir/dsl/__init__.py", "fuserir/dsl/parser.py",
    "fuserir/dsl/printer.py", "fuserir/ir/fusion.py", "fuserir/ir/tensor.py",
    "fuserir/transforms/__init__.py", "fuserir/transforms/domain.py",
    "fuserir/transforms/memory.py", "fuserir/transforms/parallel.py",
    "fuserir/transforms/placement.py", "fuserir/transforms/rewrites.py",
    "fuserir/scheduler/__init__.py", "fuserir/scheduler/matmul.py",
    "fuserir/scheduler/matmul_heuristic.py",
    "codegen/__init__.py", "codegen/errors.py", "codegen/gpu_stack.py",
    "driver/__init__.py", "driver/compiler.py", "driver/executable.py", "driver/build.py",
)


def test_the_typed_modules_exist():
    assert all((ROOT / m).is_file() for m in TYPED_MODULES)


def test_mypy_passes_on_the_public_api(tmp_path):
    pytest.importorskip("mypy", reason="mypy comes with the test extra")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml",
         "--cache-dir", str(tmp_path / "mypy-cache"), *TYPED_MODULES],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
