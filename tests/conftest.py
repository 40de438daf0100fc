"""Shared helpers for the IR-core tests: dtypes, random host arrays, tolerances, an
independent model of the split/merge index algebra, and a shallow stack for depth tests."""

import sys
import zlib
from contextlib import contextmanager

import ml_dtypes
import numpy as np
import pytest

from fuserir import DataType
from fuserir.ir import extent as ext
from fuserir.ir.iterdomain import Merge, Split

FLOAT_DTYPES = [DataType.f16, DataType.bf16, DataType.f32, DataType.f64]
INT_DTYPES = [DataType.i32, DataType.i64]
NUMERIC_DTYPES = FLOAT_DTYPES + INT_DTYPES
ALL_DTYPES = NUMERIC_DTYPES + [DataType.bool]

HOST = {
    DataType.f16: np.float16, DataType.bf16: ml_dtypes.bfloat16, DataType.f32: np.float32,
    DataType.f64: np.float64, DataType.i32: np.int32, DataType.i64: np.int64,
    DataType.bool: np.bool_,
}

# Relative tolerance of a result rounded to each float dtype.
RTOL = {DataType.f16: 2.0 ** -10, DataType.bf16: 2.0 ** -7, DataType.f32: 1e-6,
        DataType.f64: 1e-12}


def rtol(dtype):
    return RTOL.get(dtype, 0.0)


def atol(dtype):
    """Absolute slack for results near zero: the dtype's smallest normal number."""
    if not dtype.is_float:
        return 0.0
    return float(ml_dtypes.finfo(HOST[dtype]).smallest_normal)


@pytest.fixture
def rng(request):
    """A generator seeded from the test's id: fresh data per test, reproducible runs."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def random_array(rng, dtype, shape, low=-4.0, high=4.0, away_from_zero=0.0):
    """Random values of `dtype` in [low, high]; |value| >= away_from_zero where asked."""
    shape = tuple(shape)
    if dtype is DataType.bool:
        return rng.random(shape) < 0.5
    if dtype.is_int:
        values = rng.integers(int(np.floor(low)), int(np.ceil(high)) + 1, size=shape)
        if away_from_zero:
            values = np.where(np.abs(values) < away_from_zero,
                              int(np.ceil(away_from_zero)), values)
        return values.astype(HOST[dtype])
    values = rng.uniform(low, high, size=shape)
    if away_from_zero:
        values = np.where(np.abs(values) < away_from_zero,
                          np.copysign(away_from_zero, values) * 2, values)
    return values.astype(HOST[dtype])


def on_host(outputs, fusion):
    """A run's outputs ({name: array}) as numpy arrays of their fusion dtypes: a CUDA run's
    CuPy arrays copied back, bf16 (which CuPy lacks, so it hands back the bit patterns)
    viewed as ml_dtypes.bfloat16."""
    dtypes = {t.name: t.dtype for t in fusion.outputs}
    host = {}
    for name, array in outputs.items():
        array = array.get() if hasattr(array, "get") else np.asarray(array)
        if dtypes.get(name) is DataType.bf16 and array.dtype == np.uint16:
            array = array.view(HOST[DataType.bf16])
        host[name] = array
    return host


def as_f64(array):
    return np.asarray(array).astype(np.float64)


def assert_matches(actual, expected, dtype, rtol_=None, atol_=None):
    """`actual` is a host array of `dtype` shaped like `expected`, equal to it within the
    rounding of `dtype` (exactly for integers and bool)."""
    expected = np.asarray(expected)
    assert isinstance(actual, np.ndarray), type(actual)
    assert actual.dtype == np.dtype(HOST[dtype]), (actual.dtype, dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if dtype.is_float:
        np.testing.assert_allclose(
            as_f64(actual), as_f64(expected), equal_nan=True,
            rtol=rtol(dtype) if rtol_ is None else rtol_,
            atol=atol(dtype) if atol_ is None else atol_)
    else:
        np.testing.assert_array_equal(actual, expected.astype(HOST[dtype]))


# -- an independent model of the index algebra ---------------------------------------------


def _derives_from(axis, domain):
    if any(axis is d for d in domain):
        return True
    d = axis.definition
    if d is None:
        return False
    inputs = [d.input] if isinstance(d, Split) else [d.outer, d.inner]
    return any(_derives_from(i, domain) for i in inputs)


def loop_to_domain(tv, domain=None, env=None):
    """Map every loop-index tuple of `tv` back to indices of `domain` (default: tv.logical).

    Walks IterDomain.definition with the split/merge formulas (split: in = outer *
    extent(inner) + inner, valid where < extent(in); merge: outer = o // extent(inner),
    inner = o % extent(inner)). Loop axes that do not derive from `domain` (loop-only
    broadcast axes) are left out of the enumeration. Returns (domain extents, a list of
    index arrays, one per domain axis, over the valid loop tuples).
    """
    domain = list(tv.logical if domain is None else domain)
    env = env or {}

    def extent_of(axis):
        return ext.evaluate(axis.extent, env)

    loop = [a for a in tv.loop if _derives_from(a, domain)]
    for a in tv.loop:
        if not any(a is b for b in loop):
            assert a.is_broadcast, f"loop axis {a} of {tv.name} does not derive from {domain}"

    # which transform consumes each axis on the way from the domain to the loop
    consumer = {}

    def walk(axis):
        d = axis.definition
        if d is None or any(axis is x for x in domain):
            return
        inputs = [d.input] if isinstance(d, Split) else [d.outer, d.inner]
        for i in inputs:
            assert id(i) not in consumer or consumer[id(i)] is d, f"{i} is used twice"
            consumer[id(i)] = d
            walk(i)

    for a in loop:
        walk(a)

    shape = [extent_of(a) for a in loop]
    grid = np.indices(shape).reshape(len(shape), -1) if shape else np.zeros((0, 1), int)
    value = {id(a): grid[i] for i, a in enumerate(loop)}
    valid = np.ones(grid.shape[1], dtype=bool)

    def index(axis):
        nonlocal valid
        if id(axis) in value:
            return value[id(axis)]
        if id(axis) not in consumer:
            raise AssertionError(f"axis {axis} of {tv.name} is not reachable from its loop")
        t = consumer[id(axis)]
        if isinstance(t, Split):
            v = index(t.outer) * extent_of(t.inner) + index(t.inner)
            valid = valid & (v < extent_of(axis))
        elif isinstance(t, Merge):
            o = index(t.output)
            inner = extent_of(t.inner)
            v = o // inner if axis is t.outer else o % inner
        else:
            raise AssertionError(f"unknown transform {t}")
        value[id(axis)] = v
        return v

    indices = [index(d) for d in domain]
    return [extent_of(d) for d in domain], [i[valid] for i in indices]


def assert_loop_bijection(tv, domain=None, env=None):
    """The valid loop-index tuples of tv hit every index of `domain` exactly once."""
    extents, indices = loop_to_domain(tv, domain, env)
    total = int(np.prod(extents)) if extents else 1
    flat = (np.ravel_multi_index(indices, extents) if extents
            else np.zeros(len(indices[0]) if indices else 1, dtype=np.int64))
    counts = np.bincount(flat, minlength=total)
    assert len(counts) == total
    missing = np.flatnonzero(counts == 0)
    doubled = np.flatnonzero(counts > 1)
    assert not len(missing) and not len(doubled), (
        f"{tv.name}: loop {tv.loop} over {extents}: {len(missing)} root indices missed, "
        f"{len(doubled)} hit more than once")


# -- GPU tests (codegen): @pytest.mark.gpu tests skip where no GPU answers -----------------
# Begin block owned by the CUDA codegen tests; keep it self-contained.

def _fuserir_gpu_count():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - no driver, no runtime, no device
        return 0


_FUSERIR_HAS_GPU = None


@pytest.fixture(autouse=True)
def _fuserir_skip_gpu_tests_without_gpu(request):
    global _FUSERIR_HAS_GPU
    if request.node.get_closest_marker("gpu") is None:
        return
    if _FUSERIR_HAS_GPU is None:
        _FUSERIR_HAS_GPU = _fuserir_gpu_count() > 0
    if not _FUSERIR_HAS_GPU:
        pytest.skip("needs an NVIDIA GPU (cupy.cuda.runtime.getDeviceCount() found none)")

# End block owned by the CUDA codegen tests.


# -- the longest files first ---------------------------------------------------------------
# README's command runs the files in two processes (`-n 2 --dist loadfile`, each file on
# one worker), handed out in the order collected (pyproject's --no-loadscope-reorder:
# xdist would otherwise hand out the files with the most tests first, and the mutation
# tests, a few tests of a minute each, came last, one worker running them alone for
# minutes). The longest files go first so that the short ones even out the two ends
# (seconds on 2 cores at commit c926a8d, NVRTC included; a stale order costs time,
# never a result).
LONGEST_FIRST = ["test_dsl_depth.py",               # 190 (NVRTC on its deep kernels)
                 "test_hopper_matmul.py",           # 145
                 "test_mutation_sm80.py",           # 129
                 "test_mutation_hopper.py",         # 124
                 "test_matmul.py",                  # 106
                 "test_examples.py",                # 78
                 "test_grid_protocol.py",           # 76
                 "test_cli.py",                     # 53
                 "test_fuzz_dsl.py",                # 46
                 "test_matmul_matrix.py"]           # 28


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))   # stable: in-file order


# -- statistics that tests report in the session summary ---------------------------------
import collections  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402

STATS = collections.Counter()


def pytest_terminal_summary(terminalreporter):
    if not STATS:
        return
    terminalreporter.section("fuserir statistics")
    for key, value in sorted(STATS.items()):
        terminalreporter.write_line(f"{key}: {value}")
    kernels = STATS.get("lowering property: kernels")
    if kernels:
        fraction = STATS["lowering property: kernels with a barrier"] / kernels
        terminalreporter.write_line(f"lowering property: fraction needing a barrier: "
                                    f"{fraction:.2f}")


# -- the core install: without the cuda13/cuda12 extra, tests that need NVRTC skip -------
# Where NVRTC cannot be loaded (a core install: no CuPy, no NVRTC), the GpuUnavailableError
# a test meets when it builds a cubin makes it a skip, not a failure; with NVRTC present
# the same error fails the test as any other.

def _nvrtc_missing():
    """Why NVRTC cannot be loaded here, or None where it can."""
    from codegen import gpu_stack
    from codegen.errors import GpuUnavailableError
    try:
        gpu_stack.nvrtc()
    except GpuUnavailableError as error:
        return error.missing
    return None


NVRTC_MISSING = _nvrtc_missing()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if NVRTC_MISSING and report.failed and call.excinfo is not None:
        from codegen.errors import GpuUnavailableError
        if call.excinfo.errisinstance(GpuUnavailableError):
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1] or 0,
                               f"Skipped: needs NVRTC (the cuda13 or cuda12 extra): "
                               f"{NVRTC_MISSING} not installed")


# -- every kernel the suite generates must compile to a cubin with NVRTC ------------------
# Each test file's kernels are compiled when the file's last test is done (not all at the
# session's end: there the worker that ran the files generating the most kernels spent
# four minutes alone on them), failures reported at the end.
KERNEL_SOURCES = {}   # generated CUDA source -> (kernel name, its target: driver.build's),
                      # not compiled yet
CHECKED = set()       # sources compiled (or refused) already
NVRTC_FAILURES = []


def compile_recorded_kernels():
    """Compile the kernel sources recorded since the last call with NVRTC (nothing
    without it: the core install); a refusal goes to NVRTC_FAILURES."""
    if NVRTC_MISSING:
        return
    from codegen.errors import CompileError
    from codegen.nvrtc import compile_to_cubin
    for source, (name, arch) in list(KERNEL_SOURCES.items()):
        del KERNEL_SOURCES[source]
        CHECKED.add(source)
        try:
            cubin = compile_to_cubin(source, name, arch)
            assert cubin[:4] == b"\x7fELF", name
            STATS["generated kernels compiled to cubin by NVRTC"] += 1
        except CompileError as error:
            NVRTC_FAILURES.append(f"{name}: {error}")
            STATS["generated kernels NVRTC refused"] += 1


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    if nextitem is None or nextitem.path != item.path:
        compile_recorded_kernels()


def pytest_configure(config):
    # The suite's cubins go to a cache of its own, never the user's ~/.cache/fuserir
    # (tests that look at the cache set FUSERIR_CACHE_DIR to a directory of their own).
    if not os.environ.get("FUSERIR_CACHE_DIR"):
        os.environ["FUSERIR_CACHE_DIR"] = tempfile.mkdtemp(prefix="fuserir-tests-")
    import driver.build as build
    emit = build.emit_cuda

    def recording_emit(kernel):
        from codegen import nvrtc
        from codegen.errors import CompileError, GpuUnavailableError
        source = emit(kernel)
        try:
            arch = build.kernel_arch(kernel, nvrtc.default_arch())
        except CompileError:          # a test's GPU too old for it: its own test's concern
            arch = None
        except GpuUnavailableError:   # no NVRTC (the core install): nothing to compile with
            return source
        if source not in CHECKED:
            KERNEL_SOURCES.setdefault(source, (kernel.name, arch))
        return source

    build.emit_cuda = recording_emit


# Under pytest-xdist (the README's `-n 2`) each worker checks its own kernels and hands
# its statistics and NVRTC failures to the controller (workeroutput), which reports them
# and fails the session on any failure.
WORKER_FAILURES = []


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    if NVRTC_MISSING:
        STATS["generated kernels not compiled: no NVRTC (the core install)"] += 1
    elif exitstatus in (0, 1):
        compile_recorded_kernels()             # any left (a session fixture's teardown)
    failures = WORKER_FAILURES + NVRTC_FAILURES
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:                       # an xdist worker: tell the controller
        workeroutput["fuserir_stats"] = dict(STATS)
        workeroutput["fuserir_nvrtc_failures"] = failures
    elif failures:
        print("\n".join(failures))
        session.exitstatus = 1


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """(xdist controller) A worker finished: add its statistics and NVRTC failures."""
    output = getattr(node, "workeroutput", {})
    STATS.update(output.get("fuserir_stats", {}))
    WORKER_FAILURES.extend(output.get("fuserir_nvrtc_failures", []))


def assert_placements_consistent(fusion):
    """Every tensor placed by compute_at shares loops its consumer has: the consumer still
    uses it, both have the shared loops, and shared loops agree in extent (an axis made
    from a broadcast, loop-only or not, matches any consumer loop)."""
    for t in fusion.tensors:
        pos = t.compute_at_pos
        if not pos:
            continue
        c = t.compute_at_consumer
        assert c is not None and c in fusion.tensors, f"{t.name} placed at a lost tensor"
        assert fusion.depends_on(c, t), f"{t.name} is placed at {c.name}, which does not use it"
        assert pos <= t.ndim and pos <= c.ndim, (
            f"{t.name} {t.loop} placed at position {pos} of {c.name} {c.loop}")
        for i in range(pos):
            a, b = t.loop[i], c.loop[i]
            assert _from_broadcast(a) or a.extent == b.extent, (
                f"{t.name} {t.loop} shares loop {i} with {c.name} {c.loop}")


def _from_broadcast(axis):
    """A broadcast axis, or one split or merged from one (it takes any extent it meets)."""
    if axis.is_broadcast:
        return True
    d = axis.definition
    inputs = [] if d is None else [d.input] if isinstance(d, Split) else [d.outer, d.inner]
    return any(_from_broadcast(i) for i in inputs)


@contextmanager
def shallow_stack(frames):
    """Run with room for only `frames` more Python frames than the caller has, so that a
    walk recursing once per level of its input fails at a few hundred levels (the depth
    tests of the DSL, tests/test_dsl_depth.py and tests/dsl_fuzz.py)."""
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + frames)
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)
