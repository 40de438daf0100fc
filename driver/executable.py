"""An Executable: what codegen.compile returns, and what a call does with inputs.

    exe = codegen.compile(fusion, backend="cuda" | "interp",
                          disable_passes=(), drop_syncs=(), verify=True)
    exe.kernels[0].source         # CUDA text (both backends)
    out = exe(a, b, splitk=3)     # a call: arrays by position or name, out= optional
    outs = exe.run({"x": x, ...}) # the same by name: {output name: array}

An explicit schedule's steps are built at compile() (driver.compiler); an automatic one's
per size class at the first call of its sizes (fuserir.scheduler.auto.schedule_key
chooses; plan_for shows which). This module sits in the driver, above codegen: it binds
inputs (fuserir.reference), chooses kernel variants (lowering.indexing.index_bounds,
driver.vector_widths), builds them (driver.build), checks their launches (codegen.launch)
and hands a call's plan to driver.calls; the interpreter (codegen.interp) runs here.

The first call of a signature (driver.calls.call_key: each array's framework, dtype,
shape, strides, device and address modulo 16; each scalar's type and value; the same of
out=) checks the inputs against the fusion (dtypes, ranks, sizes; strides are passed to
the kernels, so non-contiguous inputs are read correctly), and chooses: 64-bit index
kernels where some index or bound expression would leave the i32 range at these sizes
and strides (lowering.indexing.index_bounds), kernels whose vector copies of a tensor are no wider
than its array allows (driver.vector_widths), the segmented plan where a row does not fit
the device's shared memory, and, for an operand TMA cannot read, the plan of a device
without TMA. It then checks each kernel's launch (codegen.launch.bind) and keeps a
driver.calls.CallPlan; later calls with that signature only allocate and launch. Any
change of shape, stride, dtype, alignment, device or scalar value goes the full way
again, with the same checks and errors. Up to codegen.launch.SIGNATURES_KEPT signatures
are kept per Executable; first calls are made one thread at a time.

In the interpreter a call allocates poisoned outputs and intermediates and fresh
workspaces, and raises RaceError for any hazard the interpreter observes.
"""

from __future__ import annotations

import collections
import collections.abc
import functools
import math
import threading
from typing import TYPE_CHECKING, Any, Mapping
import types
from dataclasses import dataclass, field

import numpy as np

from codegen.interp import run_interleavings, run_kernel
from codegen.interp.ordering import needs_ordering
from codegen.launch import (bind, check_launch_limits, cupy_module, current_device,
                            device_model, device_shared_limit, launch_config,
                            new_workspaces, remember, workspace_sizes)
from fuserir import device as devices, reference
from fuserir.dtypes import DataType
from fuserir.errors import EvaluationError, FuserirError
from fuserir.instructions import tma_stride_ok
from fuserir.ir import extent as ext
from fuserir.scheduler.auto import schedule_key
from lowering import kir
from lowering.indexing.index_bounds import index_dtype_for

from .build import CompiledKernel, build_kernel, collector_paused
from .calls import (CallPlan, CuPyArrays, TorchArrays, as_cupy, call_key, describer, is_torch,
                    one_device, pointer_of, scratch_layout,
                    torch_dtype_name)
from .vector_widths import VECTOR_ALIGNMENT, address_of, vector_caps

if TYPE_CHECKING:
    from fuserir.ir.fusion import Fusion



def _poison(dtype):
    if dtype.is_float:
        return np.nan
    if dtype is DataType.bool:
        return True
    return np.iinfo(dtype.numpy).min


INDEX_LIMIT = 2 ** 31 - 1


@dataclass
class Step:
    """One kernel of an executable: the (scheduled) fusion it was lowered from, the tensors
    it reads and writes by name, and its compiled kernel (32-bit indices, the schedule's
    vector widths); variants with 64-bit indices or narrower copies are built on demand."""

    fusion: object
    inputs: list
    outputs: list
    kernel: CompiledKernel
    variants: dict = field(default_factory=dict)   # (index dtype, caps) -> CompiledKernel
    vectors: dict | None = None  # globals accessed by vectors: {name: (bytes, ...)}


@dataclass
class _BoundInputs:
    """What run() keeps for one signature of inputs (see _signature), checked once: the
    size symbols and run-time scalars, the names of the input arrays, whether outputs are
    poisoned, the automatic schedule chosen for its
    sizes, and the step plans by the input addresses modulo VECTOR_ALIGNMENT."""

    env: dict
    arrays: tuple
    poison: bool
    schedule: tuple | None = None   # an automatic schedule's key (fuserir.scheduler.auto)
    device: object = None    # the fuserir.device.Device it is chosen for
    plans: dict = field(default_factory=dict)    # addresses mod 16 -> [_PlannedStep]


@dataclass
class _PlannedStep:
    """One step of a run() plan and what its first run fixed: the kernel (32- or 64-bit
    indices), [(name, _Allocation)] of what it writes and its scalar arguments."""

    step: Step
    kernel: CompiledKernel | None = None
    outputs: list | None = None
    scalars: dict | None = None


@dataclass(frozen=True)
class _Allocation:
    """A fresh output or intermediate: `stored` extents in memory order, `back` the
    transpose to the tensor's axis order (None: the same), the array's numpy dtype (bf16 on
    the GPU as uint16 bits), the poison `fill` (None: left unwritten, GPU only)."""

    on_gpu: bool
    stored: tuple
    back: tuple
    dtype: object
    fill: object

    def layout(self):
        """What new() would make, as shape and strides (bytes) only."""
        contiguous = [int(np.prod(self.stored[i + 1:], dtype=np.int64)) * self.dtype.itemsize
                      for i in range(len(self.stored))]
        order = self.back if self.back is not None else range(len(self.stored))
        return types.SimpleNamespace(shape=tuple(self.stored[a] for a in order),
                                     strides=tuple(contiguous[a] for a in order),
                                     dtype=np.dtype(self.dtype))

    def new(self):
        if not self.on_gpu:
            array = np.full(self.stored, self.fill, dtype=self.dtype)
        elif self.fill is None:
            array = cupy_module().empty(self.stored, dtype=self.dtype)
        else:
            array = cupy_module().full(self.stored, self.fill, dtype=self.dtype)
        return array if self.back is None else array.transpose(self.back)


class Executable:
    def __init__(self, fusion: Fusion, backend: str, options: dict, plan: Any,
                 automatic: bool = False, built: dict | None = None,
                 device: devices.Device | None = None, deterministic: bool = True) -> None:
        self.fusion = fusion
        self.backend = backend
        self._options = options
        self._plan = plan            # (persistent, schedule, sizes, device) -> [Step]
        self._steps = {} if built is None else built   # (persistent, schedule) -> [Step]
        self._bound_inputs: dict = {}  # (device, poison, input signature) -> _BoundInputs
        self._calls: tuple = ({}, {})  # [poisoned] call_key -> driver.calls.CallPlan
        self._lock = threading.RLock()   # first calls of a signature, one at a time
        self._input_names = tuple(t.name for t in fusion.inputs)
        self._output_names = tuple(t.name for t in fusion.outputs)
        self.automatic = automatic   # scheduled by fuserir.scheduler.auto (several plans)
        self._model = device         # the device model asked for (None: the default)
        self._deterministic = deterministic     # False: split-K may add atomically
        self._operands = _matmul_operands(fusion)   # what TMA would read
        if not automatic:            # an explicit schedule's kernels are built now
            self._steps_for(True, None, {}, self._device())

    @property
    def steps(self) -> list[Step]:
        """The steps compile() shows: an explicit schedule's, built by compile(); an
        automatic schedule's for unknown, large sizes, planned when first asked for (a
        call plans for its own sizes and does not need them)."""
        device = self._device()
        schedule = schedule_key(self.fusion, {}, device)[0] if self.automatic else None
        return self._steps_for(True, schedule, {}, device)

    @property
    def kernels(self) -> list[CompiledKernel]:
        """Every kernel, in launch order (several where the fusion was segmented)."""
        return [step.kernel for step in self.steps]

    def _steps_for(self, persistent, schedule, sizes, device):
        """The steps of the plan for `schedule` (an automatic schedule's key, None for an
        explicit schedule's), built at the first size class that takes it: size classes
        whose sizes choose the same schedule share its kernels."""
        key = (persistent, schedule)
        if key not in self._steps:
            with collector_paused():
                self._steps[key] = self._plan(persistent, schedule, sizes, device)
        return self._steps[key]

    def _device(self):
        """The device model schedules are chosen for: the one compile() was told, else
        the GPU's (the default H200 where there is none), or the interpreter's; with
        compile(deterministic=False), one whose split-K may add atomically."""
        model = self._model
        if model is None:
            model = device_model() if self.backend == "cuda" else devices.INTERPRETER
        return model if self._deterministic else model.with_(deterministic=False)

    def plan_for(self, sizes: Mapping[str, int], device: devices.Device | None = None
                 ) -> tuple[Any, dict[str, int], list[Any]]:
        """(schedule key, run-time scalars, steps) an automatic schedule takes at `sizes`
        ({symbol: int}) on `device` (this executable's, when None); (None, {}, the steps)
        for an explicit schedule. What `fuserir inspect --size` shows."""
        device = device or self._device()
        if not self.automatic:
            return None, {}, self.steps
        schedule, scalars = schedule_key(self.fusion, sizes, device)
        return schedule, scalars, self._steps_for(True, schedule, sizes, device)

    def precompile(self, *sizes: Mapping[str, int], device: devices.Device | None = None
                   ) -> list[list[CompiledKernel]]:
        """Build, ahead of the first calls, the plans that calls at each of `sizes` ({symbol:
        int}, every size symbol of the fusion) take on `device` (this executable's when
        None), as a call would: the automatic schedule for those sizes, segmented where a
        row does not fit the GPU's shared memory; lowered, proved and compiled, and kept in
        the plan cache for later processes. An explicit schedule's kernels were built by
        compile(). Returns the kernels of each, in order. Kernels a call builds for
        particular arrays (64-bit indices past 2^31 elements, narrower copies for
        misaligned or strided arrays, the cp.async plan for operands TMA cannot read) are
        still built at that call."""
        built = []
        for given in sizes:
            if not isinstance(given, collections.abc.Mapping):
                raise FuserirError(f"precompile() takes sizes as dicts ({{symbol: int}}), "
                                   f"got {type(given).__name__}")
            env = dict(given)
            missing = sorted(set(self.fusion.size_symbols()) - set(env))
            if missing:
                raise FuserirError(f"precompile({env}): fusion {self.fusion.name} also needs "
                                   f"{', '.join(missing)}")
            schedule, scalars, steps = self.plan_for(env, device)
            env = {**{n: d for n, d in self.fusion.scalars.items() if d is not None},
                   **scalars, **env}
            if self.backend == "cuda" and not self._fits_shared_memory(steps, env):
                steps = self._steps_for(False, schedule, env, device or self._device())
            built.append([step.kernel for step in steps])
        return built

    def _bind(self, inputs):
        """(input arrays by name, symbol values) checked against the fusion."""
        declared = {t.name: t.dtype for t in self.fusion.inputs}
        host = {k: v for k, v in inputs.items() if not _is_device_array(v)}
        shapes = {k: _ShapeOnly(v, declared.get(k)) for k, v in inputs.items()
                  if _is_device_array(v)}
        arrays, env = reference.bind_inputs(
            self.fusion, {**host, **shapes},
            convert=lambda a: a if isinstance(a, _ShapeOnly) else np.asarray(a))
        return {t.name: inputs[t.name] for t in arrays}, env

    def run(self, inputs: Mapping[str, Any], blocks: Any = None, poison: bool | None = None,
            interleavings: Any = None) -> dict[str, Any]:
        """Run on `inputs` ({name: array} plus {name: int} for named scalars; in the
        interpreter a Python number for a rank-0 input: reference.host_scalars); returns
        {output name: array}: numpy for interp; on the GPU torch tensors for torch inputs,
        else CuPy arrays (bf16 as its uint16 bits). `blocks` (interp only) runs just those
        blocks (x, y, z) of every kernel; the other blocks' outputs stay poisoned. `poison`
        fills outputs with NaN (or an integer sentinel) first, so that an unwritten element
        shows: always in the interpreter; on the GPU it costs a write of every output, so
        ask for it. `interleavings` (interp only): seeds of random interleavings to run
        each warp-specialized kernel under as well, besides both fixed orders of its roles
        (codegen.interp.run_interleavings); a hazard names the interleavings that showed
        it, and the outputs are the first run's. On the GPU this is a call (see __call__)
        by name."""
        if (blocks is not None or interleavings is not None) and self.backend != "interp":
            raise FuserirError("run(blocks=..., interleavings=...) are the interpreter's "
                               "options only")
        if type(inputs) is not dict and not isinstance(inputs, collections.abc.Mapping):
            raise FuserirError(f"run() takes a dict of inputs by name ({{name: array}} "
                               f"and {{name: int}}), got a {type(inputs).__name__}")
        if self.backend != "cuda":
            inputs = reference.host_scalars(self.fusion, inputs)
        if self.backend == "cuda":
            arrays, scalars = self._arguments((), inputs)
            plan, arrays, _ = self._call_plan(arrays, scalars, None, bool(poison))
            return dict(zip(self._output_names, plan(arrays)))
        if blocks is not None:
            blocks = _block_list(blocks)
        bound, values, steps = self._planned(inputs, poison)
        for planned in steps:
            if planned.kernel is None:      # the plan's first run
                self._prepare(planned, bound, values)
            values.update((name, allocation.new()) for name, allocation in planned.outputs)
            self._interpret(planned, values, blocks, interleavings)
        return {t.name: values[t.name] for t in self.fusion.outputs}

    def __call__(self, *arrays: Any, out: Any = None, **named: Any) -> Any:
        """Call the fusion: `exe(a, b)` takes its input tensors in the fusion's order (or by
        name, `exe(A=a, B=b)`), run-time scalars by name (`splitk=3`), and `out=` the
        output array (a tuple, or a dict by name, for several); returns the output (a
        tuple for several). Torch tensors, CuPy arrays and anything with
        __cuda_array_interface__ or __dlpack__ are taken; outputs are torch tensors for
        torch inputs (from torch's caching allocator), else CuPy arrays. On the GPU it
        runs on the caller's current stream on the inputs' device and does not wait; a
        signature seen before costs a key of cheap attributes, the allocations and one
        driver launch per kernel (driver.calls). The interpreter runs it as run() and
        copies the results into out= arrays."""
        scalars: Any = ()
        results: Any
        if named or len(arrays) != len(self._input_names):
            arrays, scalars = self._arguments(arrays, named)
        if out is not None:
            out = self._out_arrays(out)
        if self.backend != "cuda":
            results = self.run({**dict(zip(self._input_names, arrays)),
                                **{name: value for name, _, value in scalars}})
            results = [results[name] for name in self._output_names]
            if out is not None:           # the interpreter's results copied into out=
                for name, given, result in zip(self._output_names, out, results):
                    if getattr(given, "shape", None) != result.shape or \
                            getattr(given, "dtype", None) != result.dtype:
                        raise FuserirError(
                            f"out= {name}: expected {result.dtype} of shape {result.shape}, "
                            f"got {getattr(given, 'dtype', type(given).__name__)} of shape "
                            f"{getattr(given, 'shape', None)}")
                    np.copyto(given, result)
                results = out
        else:
            try:
                plan = self._calls[False][call_key(arrays, scalars, out)]
            except (KeyError, TypeError, AttributeError):    # a new signature
                plan, arrays, out = self._call_plan(arrays, scalars, out)
            results = plan(arrays, out)
        return results[0] if len(results) == 1 else tuple(results)

    def _arguments(self, arrays, named):
        """(input arrays in the fusion's order, run-time scalars as ((name, type, value),
        ...) sorted) of a call by position and by name; a name neither an input nor
        declared is left to _bind, which says so."""
        names = self._input_names
        if len(arrays) > len(names):
            raise FuserirError(f"fusion {self.fusion.name} takes {len(names)} inputs "
                               f"({', '.join(names)}), got {len(arrays)} positional")
        given = dict(zip(names, arrays))
        scalars = []
        for name, value in named.items():
            if name in given and name in names[:len(arrays)]:
                raise FuserirError(f"input {name} of fusion {self.fusion.name} is given "
                                   f"twice, by position and by name")
            if name in names:
                given[name] = value
            else:
                scalars.append(name)
        if len(given) < len(names) or any(not _known_scalar(self.fusion, n) for n in scalars):
            self._bind({**given, **{n: named[n] for n in scalars}})   # raises its error
        return (tuple(given[name] for name in names),
                tuple(sorted((n, type(named[n]), named[n]) for n in scalars)))

    def _out_arrays(self, out):
        """`out=` as a tuple in the order of the fusion's outputs: one array (one output),
        a tuple or list, or a dict by name, of every output."""
        names = self._output_names
        if isinstance(out, collections.abc.Mapping):
            unknown = sorted(set(out) - set(names))
            if unknown or len(out) != len(names):
                raise FuserirError(f"out= names {', '.join(unknown) or 'too few outputs'}; "
                                   f"fusion {self.fusion.name} writes {', '.join(names)}")
            return tuple(out[name] for name in names)
        out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        if len(out) != len(names):
            raise FuserirError(f"out= gives {len(out)} arrays; fusion {self.fusion.name} "
                               f"writes {len(names)} ({', '.join(names)})")
        return out

    def _call_plan(self, arrays, scalars, out, poison=False):
        """(the CallPlan, the arrays, out) of a call on the GPU: arrays of a kind without a
        key taken as CuPy arrays first (driver.calls.as_cupy), the plan made by the first
        call of its signature (_make_plan), one thread at a time."""
        for name, a in zip(self._input_names, arrays):
            if isinstance(a, (bool, int, float, complex)):
                raise FuserirError(
                    f"input {name}: a Python number ({a!r}) for a rank-0 input is taken by "
                    "the interpreter and the reference; on the GPU pass a 0-d array "
                    f"(torch.tensor({a!r}, device='cuda'))")
        cupy = cupy_module()
        arrays = tuple(a if describer(type(a)) else as_cupy(a, cupy) for a in arrays)
        if out is not None:
            out = tuple(a if describer(type(a)) else as_cupy(a, cupy) for a in out)
        calls = self._calls[poison]
        try:
            key = call_key(arrays, scalars, out)
        except (KeyError, TypeError, AttributeError):
            key = None       # not arrays it knows: _make_plan's checks say which
        with self._lock:
            plan = calls.get(key) if key is not None else None
            if plan is None:
                plan = self._make_plan(arrays, scalars, out, poison)
                if key is not None:
                    remember(calls, key, plan)
        return plan, arrays, out

    def _make_plan(self, arrays, scalars, out, poison):
        """The CallPlan of a call's signature, checking it in full: inputs against the
        fusion, one device, `out=` against the outputs, each kernel's launch (bind)."""
        named = dict(zip(self._input_names, arrays))
        for name, value in named.items():
            if describer(type(value)) is None:
                self._bind({**named, **{n: v for n, _, v in scalars}})   # its error
                raise FuserirError(f"input {name}: expected a device array (torch, CuPy, "
                                   f"__cuda_array_interface__ or __dlpack__), got "
                                   f"{type(value).__name__}")
        outs = dict(zip(self._output_names, out or ()))
        device = one_device(named)
        if out is not None:
            one_device({**named, **{f"out= {n}": a for n, a in outs.items()}},
                       "inputs and outputs")
        cupy = cupy_module()
        arrays_of = (TorchArrays(device) if any(map(is_torch, arrays))
                     else CuPyArrays(device, cupy))
        if arrays_of.capturing():
            raise FuserirError(f"the first call of fusion {self.fusion.name} with these "
                               f"shapes, strides and dtypes is being captured in a CUDA "
                               f"graph; it compiles and checks, which a capture cannot "
                               f"hold: make it once before capturing (as torch asks of any "
                               f"warm-up)")
        with cupy.cuda.Device(device):
            bound, values, steps = self._planned(
                {**named, **{n: v for n, _, v in scalars}}, poison)
            final = {}
            for t in self.fusion.outputs:
                allocation = self._allocation(t, bound.env, poison, intermediate=False)
                final[t.name] = allocation
                if t.name in outs:
                    values[t.name] = as_cupy(_checked_out(t, allocation, outs[t.name]), cupy)
            intermediates, workspaces, launches = [], [], []
            for planned in steps:
                self._prepare(planned, bound, values)
                for name, allocation in planned.outputs:
                    if name not in values or name not in final:
                        values[name] = allocation.new()
                    if name not in final:
                        intermediates.append((name, values[name].nbytes))
                spare = new_workspaces(planned.kernel.kir, planned.scalars)
                for w, size in workspace_sizes(planned.kernel.kir, planned.scalars):
                    workspaces.append(((len(launches), w.buffer.name), w.zeroed,
                                       size * spare[w.buffer.name].itemsize))
                launches.append(bind(planned.kernel.kir, planned.kernel.cubin,
                                     _step_args(planned, values, spare)))
        offsets, size, zeroed = scratch_layout(
            intermediates + [(k, n) for k, z, n in workspaces if not z],
            [(k, n) for k, z, n in workspaces if z])
        table = {name: (i, 0) for i, name in enumerate(self._input_names)}
        table.update((name, (len(arrays) + i, 0)) for i, name in enumerate(final))
        scratch = len(arrays) + len(final)
        table.update((name, (scratch, offsets[name])) for name, _ in intermediates)
        zero_flags = {key: z for key, z, _ in workspaces}
        sources = [(launch.launch, tuple([table[name] for name in launch.tensor_names]
                                         + [(scratch + zero_flags[(i, name)],
                                             offsets[(i, name)])
                                            for name in launch.workspace_names]))
                   for i, launch in enumerate(launches)]
        outputs = []
        for t in self.fusion.outputs:
            layout = final[t.name].layout()
            fill = None if not poison else (final[t.name].fill if arrays_of.name == "cupy"
                                            else _poison(t.dtype))
            outputs.append((layout.shape, tuple(_element_strides(layout)),
                            arrays_of.dtype(t.dtype), fill))
        switch = None
        if cupy.cuda.runtime.getDeviceCount() > 1:
            switch = functools.partial(cupy.cuda.Device, device)
        pointers = tuple(map(pointer_of, arrays)) + (
            tuple(map(pointer_of, out)) if out is not None else (arrays_of.pointer,) * len(final))
        return CallPlan(arrays_of, device, tuple(outputs), size, zeroed,
                        (0, size) if poison and size else None, tuple(sources), switch,
                        pointers)

    def kernels_for(self, inputs: Mapping[str, Any]) -> list[CompiledKernel]:
        """The kernels run(inputs) launches, in order: each step's variant for these arrays
        (32- or 64-bit indices, copies as wide as the arrays allow). Plans and allocates as
        run() does, without launching."""
        bound, values, steps = self._planned(inputs, None)
        for planned in steps:
            if planned.kernel is None:
                self._prepare(planned, bound, values)
            values.update((name, allocation.new()) for name, allocation in planned.outputs)
        return [planned.kernel for planned in steps]

    def _planned(self, inputs, poison):
        """(_BoundInputs, the inputs as the backend takes them, [_PlannedStep]) of a run."""
        if type(inputs) is not dict and not isinstance(inputs, collections.abc.Mapping):
            raise FuserirError(f"run() takes a dict of inputs by name ({{name: array}} "
                               f"and {{name: int}}), got a {type(inputs).__name__}")
        poison = self.backend == "interp" if poison is None else poison
        bound = self._bound(inputs, poison)
        values = self.prepare_inputs({name: inputs[name] for name in bound.arrays})
        alignment = tuple([address_of(values[name]) % VECTOR_ALIGNMENT
                           for name in bound.arrays])
        if any(alignment) and bound.schedule is not None and bound.device.tma and any(
                a for name, a in zip(bound.arrays, alignment) if name in self._operands):
            # an operand's address is no TMA base (16 bytes): planned as without TMA
            bound = self._bound(inputs, poison, tma=False)
        steps = bound.plans.get(alignment)
        if steps is None:
            steps = remember(bound.plans, alignment, self._step_runs(bound, values))
        return bound, values, steps

    def _bound(self, inputs, poison, tma=True):
        """The _BoundInputs of `inputs`' signature, checking them in full when new
        (`tma=False`: planned as if the device had no TMA, for operands at addresses TMA
        cannot take)."""
        device = current_device() if self.backend == "cuda" else None
        try:
            key = (device, poison, tma, _signature(inputs))
            bound = self._bound_inputs.get(key)
        except (AttributeError, TypeError):     # not a scalar or array it knows: no key
            key = bound = None
        if bound is None:
            given, env = self._bind(inputs)
            schedule = None
            model = self._device()
            if not self.automatic:
                steps = self.steps
            else:
                # scheduled for these sizes on this device: the plan of its schedule key,
                # with the run-time scalars it chose (a matmul's split-K factor)
                # (for a run whose operand arrays TMA cannot read, as if the device had
                # no TMA: the schedule keeps to cp.async)
                if not tma or not _tma_reads_strides(self._operands, given):
                    model = model.with_(tma=False)
                schedule, scalars, steps = self.plan_for(env, model)
                env.update(scalars)
            for step in steps:
                # a scalar a step's schedule declared with a default (a persistent
                # matmul's CTAs): that default, unless given
                env.update({n: d for n, d in step.fusion.scalars.items()
                            if d is not None and n not in env})
                for p in step.kernel.kir.scalar_params:
                    if p.var.name not in env:
                        raise EvaluationError(
                            f"kernel {step.kernel.name} needs a value for '{p.var.name}', "
                            f"which has no default; pass it in the inputs "
                            f"({step.fusion.describe_run_time()})")
            bound = _BoundInputs(env, tuple(given), poison, schedule, model)
            if key is not None:
                remember(self._bound_inputs, key, bound)
        return bound

    def _step_runs(self, bound, values):
        """The plan for inputs of `bound`'s signature at the addresses of `values` (modulo
        VECTOR_ALIGNMENT): the steps whose rows fit the device's shared memory, each to be
        prepared at its first run."""
        env = bound.env
        sizes = (bound.schedule, env, bound.device)
        steps = self._steps_for(True, *sizes)
        if self.backend == "cuda" and not self._fits_shared_memory(steps, env):
            steps = self._steps_for(False, *sizes)   # a row does not fit: segment the fusion
        return [_PlannedStep(step) for step in steps]

    def _prepare(self, planned, bound, values):
        """Choose the kernel of one step of a plan (32- or 64-bit indices, from the spans of
        the arrays in `values`: its inputs and what earlier steps made; copies as wide as
        those arrays allow), and how its outputs are allocated and its scalars passed."""
        kernel = self._kernel_for(planned.step, bound.env, values)
        final = {t.name for t in self.fusion.outputs}
        planned.outputs = [(t.name, self._allocation(t, bound.env, bound.poison,
                                                     intermediate=t.name not in final))
                           for t in planned.step.fusion.outputs]
        planned.scalars = step_scalars(kernel.kir, bound.env, planned.step.fusion)
        check_launch_limits(kernel.kir, bound.device, planned.scalars)
        planned.kernel = kernel

    def _interpret(self, planned, values, blocks, interleavings):
        """Run one step in the interpreter on `values` (which hold its inputs and its fresh
        outputs); its workspaces are fresh zeros (the interpreter makes them). A kernel
        whose threads order each other beyond barriers (warp-specialized roles) runs under
        both role orders and each seed of `interleavings`, when given, each run on fresh
        copies of the outputs; `values` keeps the first run's."""
        kernel = planned.kernel.kir
        if interleavings is None or not needs_ordering(kir.walk(kernel.body)):
            run_kernel(kernel, _step_args(planned, values, {}), blocks=blocks)
            return
        outputs = [name for name, _ in planned.outputs]

        def fresh():
            return _step_args(planned, {**values, **{n: values[n].copy() for n in outputs}},
                              {})

        first = run_interleavings(kernel, fresh, seeds=tuple(interleavings), blocks=blocks)
        values.update((n, first[n]) for n in outputs)

    def _fits_shared_memory(self, steps, env):
        limit = device_shared_limit()
        return all(launch_config(s.kernel.kir, step_scalars(s.kernel.kir, env, s.fusion))[2]
                   <= limit for s in steps)

    def _kernel_for(self, step, env, values):
        """The step's kernel for these arrays: 32-bit indices unless some index or bound
        expression of it (an offset, a guard, a grid extent, a size) reaches past the i32
        range at these sizes and strides (lowering.indexing.index_bounds), and each global tensor's
        vector copies no wider than its array allows (vector_widths.vector_caps); a variant is lowered
        and compiled the first time it is asked for."""
        strides = {n: _element_strides(values[n]) for n in step.inputs}
        final = {t.name for t in self.fusion.outputs}
        for t in step.fusion.outputs:          # given (out=), or as run() will allocate them
            strides[t.name] = _element_strides(values[t.name] if t.name in values else
                                               self._allocation(t, env, False, intermediate=
                                                                t.name not in final).layout())
        index = index_dtype_for(step.kernel.kir, step_scalars(step.kernel.kir, env, step.fusion),
                                strides, INDEX_LIMIT)
        caps = vector_caps(step, values, env)
        if index is DataType.i32 and not caps:
            return step.kernel
        variant = (index, tuple(sorted(caps.items())))
        if variant not in step.variants:
            with collector_paused():
                step.variants[variant] = build_kernel(
                    step.fusion, self.backend, index_dtype=index, vector_caps=caps or None,
                    device=self._device(), **self._options)
        return step.variants[variant]

    def allocate(self, tv, env, poison, intermediate=False):
        """An output or intermediate (poisoned if asked). An intermediate holding the pieces
        of a split reduction (an rfactor producer, such as split-K's partial sums) is laid
        out with those pieces outermost: [splitk, M, N] in memory for a [M, N, splitk]
        tensor, so that each split's writes and the final sum's reads are contiguous (the
        kernels index through strides, so only the strides change)."""
        return self._allocation(tv, env, poison, intermediate).new()

    def _allocation(self, tv, env, poison, intermediate):
        """How allocate() makes `tv`'s array (see there)."""
        shape = [ext.evaluate(e, env) for e in tv.shape]
        order = list(range(len(shape)))
        if intermediate:
            pieces = [i for i, a in enumerate(tv.shape_axes) if a not in tv.root]
            order = pieces + [i for i in order if i not in pieces]
        stored = tuple(shape[i] for i in order)
        back = tuple(order.index(i) for i in range(len(shape)))
        back = None if back == tuple(range(len(shape))) else back
        if self.backend == "interp":
            return _Allocation(False, stored, back, tv.dtype.numpy, _poison(tv.dtype))
        host_dtype = np.dtype(np.uint16 if tv.dtype is DataType.bf16 else tv.dtype.numpy)
        fill = (np.array(_poison(tv.dtype), dtype=tv.dtype.numpy).view(host_dtype)
                if poison else None)
        return _Allocation(True, stored, back, host_dtype, fill)

    def prepare_inputs(self, inputs):
        """Inputs as the backend takes them (device arrays for cuda, host for interp)."""
        if self.backend == "interp":
            return {k: reference.to_numpy(v) if hasattr(v, "shape") else v
                    for k, v in inputs.items()}
        cupy = cupy_module()
        return {k: as_cupy(v, cupy) for k, v in inputs.items()}


def _matmul_operands(fusion):
    """The names of the fusion's tensors that a matmul reads."""
    return {t.name for e in fusion.exprs if e.op == "matmul" for t in e.inputs}


def _tma_reads_strides(operands, arrays):
    """Do the matmul operands (`operands`, names) among `arrays` give TMA what their sizes
    promise: each one's last axis contiguous, its other strides multiples of 16 bytes,
    or the array's elements laid out as row-major contiguous ones (whose rows are the
    sizes' business: matmul_heuristic decides by them; the strides of axes of one
    element aside, as torch's `x.t()` of a 1 x K row gives them)? (Their addresses are
    not part of an input signature: _planned checks them.)"""
    for name in operands & set(arrays):
        array = arrays[name]
        strides = array.strides if hasattr(array, "strides") else \
            tuple(s * array.element_size() for s in array.stride())
        item = array.itemsize if hasattr(array, "itemsize") else array.element_size()
        shape = tuple(array.shape)
        packed = tuple(item * math.prod(shape[i + 1:]) for i in range(len(shape)))
        laid_out = [(s, p) for n, s, p in zip(shape, strides, packed) if n != 1]
        if strides and any(s != p for s, p in laid_out) and (
                strides[-1] != item or not all(map(tma_stride_ok, strides[:-1]))):
            return False
    return True


def _signature(inputs):
    """What run()'s checks and choices read of `inputs`, as a tuple: each name with the
    type and value of a scalar, or the type, shape, strides and dtype of an array (numpy,
    CuPy, torch). Anything else raises AttributeError here or TypeError when hashed."""
    described = []
    for name, value in inputs.items():
        kind = type(value)
        if kind is int or isinstance(value, np.integer):
            described.append((name, kind, value))
        elif hasattr(value, "strides"):                 # numpy, CuPy
            described.append((name, kind, value.shape, value.strides, value.dtype))
        else:                                           # torch
            described.append((name, kind, tuple(value.shape), value.stride(), value.dtype))
    return tuple(described)


def _step_args(planned, values, workspaces):
    """{name: value} of every argument of a _PlannedStep's kernel, as launch() takes them."""
    return {**{name: values[name] for name in planned.step.inputs},
            **{name: values[name] for name, _ in planned.outputs},
            **kir.scalar_args(planned.kernel.kir, planned.scalars), **workspaces}


def _element_strides(array):
    """An array's strides in elements."""
    return [s // array.dtype.itemsize for s in array.strides]


class _ShapeOnly:
    """A device array seen only through its shape and dtype (binding checks no data). A
    2-byte integer array stands for a bf16 input (its bits: CuPy has no bfloat16)."""

    def __init__(self, array, declared):
        self.shape = tuple(array.shape)
        name = str(array.dtype).replace("torch.", "")
        bf16_bits = name in ("uint16", "int16", "bfloat16") and declared is DataType.bf16
        self.dtype = DataType.bf16.numpy if bf16_bits else np.dtype(name)
        self.ndim = len(self.shape)


def _is_device_array(value):
    module = type(value).__module__
    return module.startswith("cupy") or module.startswith("torch")


def _known_scalar(fusion, name):
    """Is `name` a run-time scalar or size symbol of `fusion` (what a call may name)?"""
    return name in fusion.scalars or name in fusion.size_symbols()


def _checked_out(tv, allocation, array):
    """`array` given as out= for the output `tv`, checked: its dtype and shape (`allocation`
    is the output as a call would allocate it)."""
    shape = allocation.layout().shape
    if is_torch(array):
        dtype, want = str(array.dtype).replace("torch.", ""), torch_dtype_name(tv.dtype)
    else:
        dtype, want = str(array.dtype), str(np.dtype(allocation.dtype))
    if dtype != want:
        raise FuserirError(f"out= {tv.name}: expected {tv.dtype} ({want}), got {dtype}")
    if tuple(array.shape) != tuple(shape):
        raise FuserirError(f"out= {tv.name}: expected shape {tuple(shape)}, got "
                           f"{tuple(array.shape)}")
    return array


def _block_list(blocks):
    """run(blocks=...) as [(x, y, z)]: each block a tuple of 1 to 3 integers >= 0."""
    listed = []
    for b in blocks if isinstance(blocks, (list, tuple)) else [None]:
        ok = isinstance(b, (list, tuple)) and 1 <= len(b) <= 3 and all(
            isinstance(i, (int, np.integer)) and not isinstance(i, bool) and i >= 0
            for i in b)
        if not ok:
            raise FuserirError(f"run(blocks=...): each block is a tuple (x,), (x, y) or "
                               f"(x, y, z) of integers >= 0, got {b!r} in {blocks!r}")
        listed.append(tuple(int(i) for i in b) + (0,) * (3 - len(b)))
    return listed


def step_scalars(kernel_ir, env, fusion):
    """The values of a kernel's scalar parameters: from `env` (the call's sizes and
    scalars), else the default its step's `fusion` declares (a segment's own: the CTAs a
    persistent matmul segment walks with)."""
    defaults = {n: d for n, d in fusion.scalars.items() if d is not None}
    return {p.var.name: int(env[p.var.name] if p.var.name in env else defaults[p.var.name])
            for p in kernel_ir.scalar_params}
