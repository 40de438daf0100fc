"""What the subcommands share: sizes, random inputs, loading fusions, the GPU, hazards."""

import functools
import math

from ..device import OPT_IN_SHARED
from ..dsl import parse_file
from ..ir import extent as ext
from ..ir.iterdomain import Split, history

DEFAULT_SIZE = 19          # an odd size with no tile: exercises remainders
DEFAULT_SCALAR = 3         # a named split factor nobody bound
SIZE_MAX = 2 ** 63 - 1     # a size or run-time scalar is a 64-bit integer


class UsageError(Exception):
    """Bad command-line input (reported like a DSL error: one line, exit 1)."""


# ---------------------------------------------------------------------------------------
# Sizes and inputs
# ---------------------------------------------------------------------------------------

def parse_sizes(text):
    """"M=64,N=32" -> {"M": 64, "N": 32}."""
    sizes = {}
    for item in filter(None, (text or "").split(",")):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise UsageError(f"--size: expected NAME=VALUE, got {item!r}")
        value = value.strip()
        if not value.isascii() or not value.lstrip("+-").isdigit():
            raise UsageError(f"--size: {name} must be an integer, got {value!r}")
        if len(value.lstrip("+-0")) > len(str(SIZE_MAX)) or int(value) > SIZE_MAX:
            raise UsageError(f"--size: {name}={value} does not fit in 64 bits (at most "
                             f"{SIZE_MAX})")
        sizes[name] = int(value)
        if sizes[name] < 1:
            raise UsageError(f"--size: {name} must be >= 1, got {sizes[name]}")
    return sizes


def default_sizes(fusion):
    """Sizes for every symbol of `fusion`: twice the largest constant tile split off an
    axis of that size plus a remainder, so defaults exercise both full and partial tiles."""
    dims, factors, tiles = set(), set(), {}
    for tv in fusion.inputs:
        for e in tv.shape:
            dims |= ext.symbols(e)
    for tv in fusion.tensors:
        for t in history(tv.loop + tv.logical):
            if isinstance(t, Split):
                factors |= ext.symbols(t.factor)
                if isinstance(t.factor, int):
                    for name in ext.symbols(t.input.extent):
                        tiles[name] = max(tiles.get(name, 1), t.factor)
    sizes = {name: 2 * tiles[name] + 3 if name in tiles else DEFAULT_SIZE for name in dims}
    sizes.update({name: DEFAULT_SCALAR for name in factors - dims})
    # a declared run-time scalar's default is what run() uses: the tools use it too
    sizes.update({name: d for name, d in fusion.scalars.items() if d is not None})
    return sizes


def sizes_for(fusion, given):
    """default_sizes(fusion) overridden by `given`, every name of which must exist."""
    sizes = default_sizes(fusion)
    unknown = set(given) - set(sizes)
    if unknown:
        raise UsageError(f"--size: fusion {fusion.name} has no size named "
                         f"{', '.join(sorted(unknown))} (it has: "
                         f"{', '.join(sorted(sizes)) or 'none'})")
    sizes.update(given)
    return sizes


def format_sizes(sizes):
    return ", ".join(f"{k}={v}" for k, v in sorted(sizes.items())) or "no sizes"


def random_inputs(fusion, sizes, rng, integer_valued=False):
    """Random arrays for the fusion's inputs. Floats are standard normal, or with
    `integer_valued` small integers in [-4, 4] (exact in every dtype, so products and sums
    stay exact); integers in [-8, 8); booleans at random."""
    inputs = {}
    for tv in fusion.inputs:
        shape = [ext.evaluate(e, sizes) for e in tv.shape]
        try:
            inputs[tv.name] = _random_array(tv, shape, rng, integer_valued)
        except (MemoryError, ValueError):  # numpy: "Maximum allowed dimension exceeded"
            elements = math.prod(shape)
            dims = ", ".join(map(str, shape))
            raise UsageError(f"--size: input {tv.name} is {tv.dtype}[{dims}] at "
                             f"{format_sizes(sizes)}: {elements} elements "
                             f"({elements * tv.dtype.itemsize} bytes), too many to allocate "
                             "here") from None
    return inputs


def _random_array(tv, shape, rng, integer_valued):
    if tv.dtype.is_float:
        if integer_valued:
            return rng.integers(-4, 5, shape).astype(tv.dtype.numpy)
        return rng.standard_normal(shape).astype(tv.dtype.numpy)
    if tv.dtype.is_int:
        return rng.integers(-8, 8, shape).astype(tv.dtype.numpy)
    return rng.integers(0, 2, shape).astype(bool)


def named_scalars(fusion, sizes):
    """The values in `sizes` of the run-time scalars the fusion declares (split factors
    such as splitk): what run() and evaluate() take besides the inputs."""
    return {k: v for k, v in sizes.items() if k in fusion.scalars}


# ---------------------------------------------------------------------------------------
# Fusions
# ---------------------------------------------------------------------------------------

def fusions(path, name=None):
    """{name: Fusion} of the DSL file (only `name` when given)."""
    parsed = parse_file(path)
    found = parsed if isinstance(parsed, dict) else {parsed.name: parsed}
    if name is not None:
        if name not in found:
            raise UsageError(f"{path} has no fusion '{name}' (it has: {', '.join(found)})")
        return {name: found[name]}
    return found


def one_fusion(path, name=None):
    """The one fusion of the file, or the one named; a file of several needs --fusion."""
    found = fusions(path, name)
    if len(found) > 1:
        raise UsageError(f"{path} defines {len(found)} fusions ({', '.join(found)}); "
                         "pick one with --fusion NAME")
    return next(iter(found.values()))


def add_file_arguments(parser, json_output=True):
    """FILE, --size, --fusion (and --json) for a subcommand."""
    parser.add_argument("file", help="a DSL file (.fz)")
    parser.add_argument("--size", metavar="NAME=VALUE,...",
                        help="bind sizes and named scalars, e.g. M=64,N=32,splitk=5 "
                             "(defaults: twice the largest tile plus 3)")
    parser.add_argument("--fusion", metavar="NAME", help="the fusion to use (a file of "
                        "several needs it)")
    if json_output:
        parser.add_argument("--json", action="store_true", help="print JSON")


def add_sync_arguments(parser):
    parser.add_argument("--without", metavar="PASS", action="append", default=[],
                        help="leave out an optional pass (insert_syncs, verify_hazards); "
                             "repeatable")
    parser.add_argument("--drop", metavar="ID,...", default="",
                        help="remove the inserted barriers with these ids (sync1,sync2)")


def sync_options(args):
    """disable_passes / drop_syncs for lowering, from --without and --drop."""
    from lowering.errors import LoweringError
    from lowering.pipeline import check_pass
    without = [n.strip() for item in args.without for n in item.split(",") if n.strip()]
    for name in without:
        try:
            check_pass(name, optional=True, verb="left out")
        except LoweringError as error:
            raise UsageError(f"--without: {error}") from None
    drop = [n.strip() for n in args.drop.split(",") if n.strip()]
    return {"disable_passes": tuple(without), "drop_syncs": tuple(drop)}


# ---------------------------------------------------------------------------------------
# The GPU
# ---------------------------------------------------------------------------------------

@functools.cache
def gpu():
    """(True, "NVIDIA H200 (sm_90)") when a CUDA device answers, else (False, why not)."""
    try:
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
        if count < 1:
            return False, "no CUDA device"
        device = cupy.cuda.Device()
        props = cupy.cuda.runtime.getDeviceProperties(device.id)
        name = props["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        return True, f"{name} (sm_{device.compute_capability})"
    except Exception as error:  # noqa: BLE001 - no driver, no device, no cupy
        text = str(error).strip().splitlines()
        return False, text[0] if text else type(error).__name__


def shared_limit(arch):
    """(bytes of shared memory per block after opt-in, where the number comes from)."""
    present, device = gpu()
    if present:
        from codegen.launch import device_model     # the device model run() uses
        return device_model().shared_limit, f"queried from {device}"
    base = arch.rstrip("af")
    if base in OPT_IN_SHARED:
        return OPT_IN_SHARED[base], f"no GPU here: {base}'s documented opt-in limit"
    return None, f"no GPU here and no documented limit for {arch}"


def normalize_arch(arch):
    from codegen import nvrtc
    try:
        return nvrtc.normalize_arch(arch)
    except ValueError as error:
        raise UsageError(f"--arch: {error}") from None


# ---------------------------------------------------------------------------------------
# Kernels and hazards
# ---------------------------------------------------------------------------------------

def shared_ranges(kernel, scalars):
    """[(buffer, first byte, one past the last byte)] of every shared allocation, in
    program order, at the given scalar values."""
    from lowering import kir
    ranges = []
    for s in kir.walk(kernel.body):
        if isinstance(s, kir.Allocate) and s.buffer.memory is kir.Memory.shared:
            b = s.buffer
            start = kir.evaluate_scalar(b.byte_offset, scalars) if b.byte_offset is not None \
                else None
            size = kir.evaluate_scalar(b.size, scalars) * b.dtype.itemsize
            ranges.append((s, start, None if start is None else start + size))
    return ranges


def kernel_scalars(kernel, sizes, fusion):
    """The kernel's scalar arguments at `sizes` that have a value, as run() passes them:
    a scalar its step's `fusion` declares with a default takes that where `sizes` has
    none (driver.executable.step_scalars)."""
    known = {**{n: d for n, d in fusion.scalars.items() if d is not None}, **sizes}
    return {p.var.name: int(known[p.var.name]) for p in kernel.scalar_params
            if p.var.name in known}


def hazard_dict(hazard, source, buffer_bytes=None):
    """A hazard (lowering.errors.Hazard) as JSON-able data. The verifier names no bytes:
    `buffer_bytes` ({buffer: (start, end)}) supplies each buffer's whole range."""
    data = {"source": source, "kind": hazard.kind, "buffer": hazard.buffer,
            "bytes": list(hazard.byte_range) if hazard.byte_range is not None else None,
            "bytes_are_whole_buffer": False,
            "first": hazard.first, "second": hazard.second,
            "threads": [list(t) for t in hazard.threads] if hazard.threads else None,
            "iterations": list(hazard.iterations) if hazard.iterations else None,
            "block": list(hazard.block) if hazard.block is not None else None,
            "detail": hazard.detail}
    if data["bytes"] is None and buffer_bytes:
        spans = [buffer_bytes[b] for b in hazard.buffer.split("/") if b in buffer_bytes]
        if spans and all(s[0] is not None for s in spans):
            data["bytes"] = [min(s[0] for s in spans), max(s[1] for s in spans)]
            data["bytes_are_whole_buffer"] = True
    return data


def format_hazard(number, h):
    """Lines for one hazard dict (hazard_dict)."""
    head = f"  {number}. {h['kind']} on {h['buffer']}"
    if h["bytes"] is not None:
        head += f", bytes [{h['bytes'][0]}, {h['bytes'][1]})"
        if h["bytes_are_whole_buffer"]:
            head += " (the whole buffer: the verifier reasons per allocation)"
    lines = [head, f"       first:  {h['first']}", f"       second: {h['second']}"]
    if h["threads"]:
        t1, t2 = (tuple(t) for t in h["threads"])
        where = f"       threads {t1} and {t2}"
        if h["iterations"]:
            where += f"; iterations {h['iterations'][0]} and {h['iterations'][1]}"
        if h["block"] is not None:
            where += f"; block {tuple(h['block'])}"
        lines.append(where)
    elif h["source"] == "verifier":
        lines.append("       threads: any two that may touch these bytes (static analysis)")
    if h["detail"]:
        lines.append(f"       {h['detail']}")
    return lines


# ---------------------------------------------------------------------------------------
# Building: what codegen.compile makes of a fusion
# ---------------------------------------------------------------------------------------

class Unit:
    """One kernel codegen.compile built: the scheduled fusion it was lowered from (the
    user's, or an automatic schedule of a segment), the kernel (.name, .kir, .source) and
    the tensors it reads and writes."""

    def __init__(self, index, count, fusion, compiled, inputs, outputs):
        self.index, self.count = index, count
        self.fusion = fusion
        self.compiled = compiled
        self.kernel = compiled.kir
        self.inputs, self.outputs = list(inputs), list(outputs)

    @property
    def title(self):
        return (f"kernel {self.index} of {self.count}: {self.compiled.name} (reads "
                f"{', '.join(self.inputs)}; writes {', '.join(self.outputs)})")


def with_plan_scalars(exe, sizes):
    """`sizes` plus the run-time scalars an automatic schedule picks for them (a matmul's
    split-K factor), as run() passes them to its kernels."""
    if getattr(exe, "automatic", False):
        return {**sizes, **exe.plan_for(sizes)[1]}
    return sizes


def build(fusion, options, backend="interp", sizes=None):
    """(executable, [Unit], HazardError or None). Compiles as codegen.compile (the
    driver's compile) does (an unscheduled fusion gets automatic schedules, perhaps
    several kernels, chosen for `sizes` as run() would choose them); a kernel the verifier
    refuses is built again with verify=False, and the refusal returned, so that the tools
    can still show it. With `sizes`, an automatic schedule's kernels are those the sizes
    plan, and the verifier's verdict is on them: the kernels the tools show, interpret
    and drop syncs from are the kernels verified."""
    import driver
    from codegen.errors import HazardError
    if sizes is not None and not fusion.trace:
        return _build_planned(fusion, options, backend, sizes)
    refused = None
    try:
        exe = driver.compile(fusion, backend=backend, verify=True, device=gpu_model(),
                             **options)
    except HazardError as error:
        refused = error
        exe = driver.compile(fusion, backend=backend, verify=False, device=gpu_model(),
                             **options)
    steps = getattr(exe, "steps", None)
    if steps:
        parts = [(s.fusion, s.kernel, s.inputs, s.outputs) for s in steps]
    else:
        parts = [(fusion, k, [t.name for t in fusion.inputs], [t.name for t in fusion.outputs])
                 for k in exe.kernels]
    return exe, _units(parts), refused


def _build_planned(fusion, options, backend, sizes):
    """build() of an automatic schedule at `sizes`: its kernels built as planned (syncs
    dropped as asked), then each verified (the proofs the driver keeps serve here too);
    the first refusal is returned."""
    import driver
    from codegen.errors import HazardError
    from driver.proofs import PROOFS
    from lowering.passes.verify_hazards import verify
    exe = driver.compile(fusion, backend=backend, verify=False, device=gpu_model(),
                         **options)
    steps = exe.plan_for(sizes)[2]
    refused = None
    if "verify_hazards" not in options.get("disable_passes", ()):
        for step in steps:
            try:
                verify(step.kernel.kir, PROOFS)
            except HazardError as error:
                refused = refused or error
    parts = [(s.fusion, s.kernel, s.inputs, s.outputs) for s in steps]
    return exe, _units(parts), refused


def gpu_model():
    """The device model the tools show, check and interpret kernels for: the GPU's, or
    the H200's where there is none (not the interpreter's own fitted tiles: the tools are
    about the kernels a GPU runs)."""
    from codegen.launch import device_model
    return device_model()


def _units(parts):
    return [Unit(i, len(parts), *p) for i, p in enumerate(parts, 1)]
