"""compile(): a fusion -> an Executable (codegen.compile re-exports it).

A fusion with a schedule is cut into its kernels (driver.segmentation.cut: one per
intermediate it put in global memory, then one for the outputs) and each is built
(driver.build) at compile(); one without a schedule gets its plan per size class at the
first call of its sizes, or at exe.precompile(...) (driver.segmentation.plan with
fuserir.scheduler.auto's schedules). A fusion compiled before (the same structure,
schedule and names, backend, options and GPU architecture) reuses its kernels: an
in-memory cache of the last COMPILE_CACHE_SIZE compiles (a cache hit prints no
FUSERIR_DUMP_AFTER dumps: nothing is lowered). A plan built before by any process is
loaded from the plan cache on disk (driver.plans).
FUSERIR_DUMP's stages are printed here (driver.stages).
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Sequence

from codegen import gpu_stack, nvrtc
from fuserir import device as devices
from fuserir.errors import FuserirError
from fuserir.ir.equality import fusion_signature
from fuserir.progress import progress

from lowering.pipeline import PASS_NAMES

from . import stages
from .build import build_kernel
from .executable import Executable, Step
from .plans import PLANS, plan_key
from .segmentation import cut, plan

if TYPE_CHECKING:
    from fuserir.ir.fusion import Fusion

BACKENDS = ("cuda", "interp")


def compile(fusion: Fusion, backend: str = "cuda", disable_passes: Sequence[str] = (),
            drop_syncs: Sequence[str] = (), verify: bool = True,
            device: "devices.Device | None" = None,
            deterministic: bool = True) -> Executable:
    """Lower `fusion` and build it for `backend` (see module docstring). A fusion with a
    schedule becomes one kernel; one without gets automatic schedules
    (fuserir.scheduler.auto), segmented into several kernels where one cannot do it.
    `device` (a fuserir.device.Device): the device model schedules are chosen and launch
    limits checked for; by default the GPU present (the H200's where there is none) for
    "cuda", and for "interp" fuserir.device.INTERPRETER, tiles fitted to the sizes of
    each call (pass fuserir.device.H200 to interpret the H200's kernels).
    `deterministic=False` lets an automatic schedule's split-K add its partials with
    atomic adds where it would otherwise sum them in a fixed order: shorter, but the last
    bits of a result may then differ from run to run (an explicit schedule says its own
    mode)."""
    if backend not in BACKENDS:
        raise FuserirError(f"unknown backend {backend!r}; expected one of "
                           f"{', '.join(BACKENDS)}")
    if device is not None and not isinstance(device, devices.Device):
        raise FuserirError(f"device must be a fuserir.device.Device (e.g. "
                           f"fuserir.device.H200), got {type(device).__name__}")
    if not isinstance(deterministic, bool):
        raise FuserirError(f"deterministic must be True or False, got {deterministic!r}")
    if backend == "cuda":
        gpu_stack.nvrtc()   # no NVRTC: GpuUnavailableError now, saying what to install
    options = dict(disable_passes=tuple(disable_passes), drop_syncs=tuple(drop_syncs),
                   verify=verify)
    stages.env_before_compile(fusion)      # FUSERIR_DUMP (driver/stages.py)
    key = _cache_key(fusion, backend, options) + (device, deterministic)
    cached = _compiled.get(key)
    if cached is not None:
        # the same fusion (structurally: definition, schedule, names) compiled before:
        # its kernels serve this one too
        _compiled.move_to_end(key)
        exe = Executable(fusion, backend, options, cached._plan, automatic=cached.automatic,
                         built=cached._steps, device=device, deterministic=deterministic)
        stages.env_after_compile(exe)
        return exe

    def explicit(persistent, sizes, device):
        with progress(f"building {fusion.name}", unit="kernel") as bar:
            return [Step(s.fusion, s.inputs, s.outputs,
                         _built(bar, build_kernel(s.fusion, backend, device=device,
                                                  **options)))
                    for s in cut(fusion)]

    def automatic(persistent, sizes, device):
        # each segment's schedule may put intermediates in global memory (a two-kernel
        # split-K's partial sums): it is cut into its kernels as an explicit schedule is
        with progress(f"planning {fusion.name}", unit="kernel") as bar:
            return [Step(part.fusion, part.inputs, part.outputs,
                         _built(bar, build_kernel(part.fusion, backend, device=device,
                                                  trial=trial, **options)))
                    for s in plan(fusion, persistent, sizes, device)
                    for part, trial in zip(cut(s.fusion), s.kernels)]

    exe = Executable(fusion, backend, options,
                     _cached(explicit if fusion.trace else automatic,
                             repr((key, fusion.name, _nvrtc_version(backend)))),
                     automatic=not fusion.trace, device=device,
                     deterministic=deterministic)
    _compiled[key] = exe
    while len(_compiled) > COMPILE_CACHE_SIZE:
        _compiled.popitem(last=False)
    stages.env_after_compile(exe)
    return exe


COMPILE_CACHE_SIZE = 64
# cache key -> Executable (least recent first)
_compiled: collections.OrderedDict[tuple, Executable] = collections.OrderedDict()


def _cached(build, base):
    """`build(persistent, sizes, device) -> [Step]` as a plan function of the Executable
    (`plan(persistent, schedule, sizes, device)`) that loads the plan from the plan cache
    (driver.plans) where it was built before, in any process, and stores what it builds.
    `base` names the compile (its key, as text). Bypassed while FUSERIR_DUMP_AFTER asks
    for lowering's dumps, which a loaded plan would not print."""
    def plan(persistent, schedule, sizes, device):
        if stages.env_dump_after(PASS_NAMES):
            return build(persistent, sizes, device)
        key = plan_key(base, persistent, schedule, device)
        steps = PLANS.load(key)
        if steps is None:
            steps = build(persistent, sizes, device)
            PLANS.store(key, steps)
        return steps
    return plan


def _built(bar, kernel):
    bar.update()
    return kernel


def _nvrtc_version(backend):
    return nvrtc.nvrtc_version() if backend == "cuda" else None


def _cache_key(fusion, backend, options):
    """What decides the kernels: the fusion's structure and schedule, the backend and
    options, and for the GPU the architecture compiled for."""
    arch = None
    if backend == "cuda":
        arch = nvrtc.default_arch()
    return (fusion_signature(fusion), backend, tuple(sorted(options.items())), arch)
