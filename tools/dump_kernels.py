"""Dump the CUDA source of every kernel the tests, examples and benchmarks generate.

    python3 tools/dump_kernels.py OUT_DIR [--no-tests] [--pytest-args "-x -k foo"]
    python3 tools/dump_kernels.py --compare BEFORE_DIR AFTER_DIR

A refactoring that must not change behaviour runs this before and after and compares: the
set of kernel sources must be byte-identical. Every call of codegen.cuda.emit_cuda is
recorded (the function is wrapped wherever a module bound it), with the context that made
it: a test's node id, an example file, or a benchmark configuration. Written under OUT_DIR:

    sources/<sha256>.cu     each distinct source once
    manifest.txt            one line per (sha256, context), sorted

It drives, in one process: every example (examples/*.fz compiled for both backends, with
the automatic plan at the CLI's default sizes where a fusion is unscheduled, and
examples/demo.py's main job), the benchmarks' kernels (the matmul matrix, the user path's
plans at its shapes for every layout, the pointwise and reduction cases' automatic plans),
then the test suite (pytest, default markers; GPU tests skip without a GPU). Kernels
compiled for the cuda backend go through NVRTC, which needs no GPU.

--compare prints how many sources each side has, which contexts produced a source the
other side lacks, and exits 1 when the sets differ.
"""

import argparse
import contextlib
import hashlib
import io
import pathlib
import runpy
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PACKAGES = ("fuserir", "lowering", "codegen", "driver", "benchmarks", "tests", "examples")


class Recorder:
    """Wraps emit_cuda and keeps {sha: source} and {(sha, context)}."""

    def __init__(self):
        import codegen.cuda
        self.original = codegen.cuda.emit_cuda
        self.context = "setup"
        self.sources = {}
        self.seen = set()
        recorder = self

        def emit_cuda(kernel):
            source = recorder.original(kernel)
            sha = hashlib.sha256(source.encode()).hexdigest()
            recorder.sources[sha] = source
            recorder.seen.add((sha, recorder.context))
            return source

        self.wrapper = emit_cuda
        self.patch()

    def patch(self):
        """Replace every module attribute bound to the original emit_cuda by the wrapper."""
        for name, module in list(sys.modules.items()):
            if module is None or name.split(".")[0] not in PACKAGES:
                continue
            for attr, value in list(vars(module).items()):
                if value is self.original:
                    setattr(module, attr, self.wrapper)

    @contextlib.contextmanager
    def within(self, context):
        previous, self.context = self.context, context
        try:
            yield
        finally:
            self.context = previous

    def write(self, out):
        (out / "sources").mkdir(parents=True, exist_ok=True)
        for sha, source in self.sources.items():
            (out / "sources" / f"{sha}.cu").write_text(source)
        lines = sorted(f"{sha} {context}" for sha, context in self.seen)
        (out / "manifest.txt").write_text("\n".join(lines) + "\n")
        print(f"{len(self.sources)} distinct kernel sources from {len(lines)} "
              f"(source, context) pairs written to {out}")


def examples(recorder):
    import codegen
    import fuserir
    from fuserir.cli.common import default_sizes, fusions
    for path in sorted((ROOT / "examples").glob("*.fz")):
        for fusion in fusions(path).values():
            for backend in ("cuda", "interp"):
                with recorder.within(f"example {path.name} {fusion.name} {backend}"):
                    exe = codegen.compile(fusion, backend=backend)
                    if exe.automatic:
                        exe.plan_for(default_sizes(fusion))
    with recorder.within("example demo.py"), contextlib.redirect_stdout(io.StringIO()):
        try:
            runpy.run_path(str(ROOT / "examples" / "demo.py"), run_name="__main__")
        except SystemExit as exit_:
            if exit_.code:
                raise


def benchmarks(recorder):
    import codegen
    from benchmarks import matmul, pointwise, reduction
    from fuserir.device import DEFAULT
    from fuserir.scheduler import schedule_matmul
    from fuserir.scheduler.matmul_heuristic import matmul_heuristic
    for hopper in (False, True):
        for layout, path, size, stages, smem in matmul.matrix_configs(hopper):
            label = f"w{size}" if path == "mma.sync" else f"hopper {size}"
            with recorder.within(f"benchmark matrix {layout} {label} s{stages} "
                                 f"smem={smem}"):
                codegen.compile(matmul.matrix_fusion(layout, path, size, stages, smem),
                                backend="cuda")
    shapes = ((1024, 2048, 4096), (1024, 2048, 50304), (1024, 1024, 4096), (4096, 4096, 4096),
              (128, 128, 262144), (136, 184, 175704), (1023, 2047, 4095))
    for layout in ("TT", "TN", "NT", "NN"):
        auto = codegen.compile(matmul.layout_fusion(layout), backend="cuda")
        for m, n, k in shapes:
            with recorder.within(f"benchmark user-path {layout} {m}x{n}x{k}"):
                auto.plan_for({"M": m, "N": n, "K": k})
                explicit = matmul.layout_fusion(layout)
                schedule_matmul(explicit, matmul_heuristic(m, n, k, layout=layout,
                                                           device=DEFAULT), DEFAULT)
                codegen.compile(explicit, backend="cuda")
    with recorder.within("benchmark seed"):
        codegen.compile(matmul.build(matmul.parse_args([]))[0], backend="cuda")
    for module in (pointwise, reduction):
        from benchmarks import common
        args = common.parse_args(module.parser(), [], module.SIZES)
        for case in module.cases(args):
            with recorder.within(f"benchmark {module.__name__} {case.name}"):
                codegen.compile(case.fusion, backend="cuda").plan_for(case.sizes)


class Plugin:
    """pytest hooks: re-patch after collection, and name each test as the context."""

    def __init__(self, recorder):
        self.recorder = recorder

    def pytest_collection_finish(self, session):
        self.recorder.patch()

    def pytest_runtest_setup(self, item):
        self.recorder.context = f"test {item.nodeid}"

    def pytest_runtest_teardown(self, item):
        self.recorder.context = "between tests"


def compare(before, after):
    def load(d):
        pairs = set()
        for line in (d / "manifest.txt").read_text().splitlines():
            sha, context = line.split(" ", 1)
            pairs.add((sha, context))
        return pairs

    a, b = load(before), load(after)
    sa, sb = {s for s, _ in a}, {s for s, _ in b}
    print(f"{before}: {len(sa)} distinct sources; {after}: {len(sb)} distinct sources; "
          f"{len(sa & sb)} in both")
    for label, mine, theirs, pairs in (("only before", sa, sb, a), ("only after", sb, sa, b)):
        missing = sorted(c for s, c in pairs if s in mine - theirs)
        for context in missing[:40]:
            print(f"  {label}: {context}")
        if len(missing) > 40:
            print(f"  ... and {len(missing) - 40} more")
    return 0 if sa == sb else 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", type=pathlib.Path)
    p.add_argument("--compare", nargs=2, type=pathlib.Path, metavar=("BEFORE", "AFTER"))
    p.add_argument("--no-tests", action="store_true", help="examples and benchmarks only")
    p.add_argument("--pytest-args", default="", help="extra pytest arguments")
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        p.error("give OUT_DIR or --compare BEFORE AFTER")
    recorder = Recorder()
    examples(recorder)
    benchmarks(recorder)
    status = 0
    if not args.no_tests:
        import pytest
        status = pytest.main(["-q", "-p", "no:cacheprovider", *args.pytest_args.split()],
                             plugins=[Plugin(recorder)])
    recorder.write(args.out)
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
