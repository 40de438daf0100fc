"""`import fuserir` stays cheap: it loads the front end only. lark and its grammar (the
DSL parser), the GPU stack (CuPy, cuda.bindings) and the layers
above (lowering, codegen, driver) are imported where first used, each checked here in a
fresh interpreter, where sys.modules says what an import really loaded."""

import json
import subprocess
import sys
import time
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]

NOT_AT_IMPORT = ("networkx", "lark", "cupy", "cupy_backends", "cuda", "nvidia", "lowering",
                 "codegen", "driver")


def _loaded_by(code):
    """The top-level package names in sys.modules after running `code` in a fresh
    interpreter (from the repository root, as the tests import it)."""
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys, json\n"
         "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"],
        cwd=ROOT, capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_fuserir_loads_no_graph_library_parser_gpu_stack_or_upper_layer():
    loaded = _loaded_by("import fuserir")
    assert "fuserir" in loaded
    assert loaded.isdisjoint(NOT_AT_IMPORT), sorted(loaded & set(NOT_AT_IMPORT))


def test_the_lazy_parts_load_when_used():
    loaded = _loaded_by("import fuserir\n"
                        "fuserir.parse('fusion f(x: f32[N]) { y = x + 1.0\\n output y }')")
    assert "lark" in loaded
    assert loaded.isdisjoint({"networkx", "cupy", "lowering", "codegen", "driver"})
    loaded = _loaded_by("import fuserir\nfuserir.compile")
    assert {"driver", "codegen", "lowering"} <= loaded
    assert "cupy" not in loaded             # compiling for the interpreter needs no GPU stack
    assert "networkx" not in loaded         # the fusion graph is fuserir.ir.graph


def test_import_fuserir_is_quick():
    """Generous (a loaded CI machine): the checks above are the real test."""
    def wall(code):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
        return time.perf_counter() - started
    assert min(wall("import fuserir") for _ in range(3)) < 1.0
