"""The text of each compilation stage: what `fuserir dump` and FUSERIR_DUMP print.

    fusion      the DSL definition (no schedule)
    scheduled   every tensor's loop domain with parallel types, the replayable schedule
                trace, and the tensors as lowering places them (after inline_defaults)
    kernel      kernel IR after the last pass (or any pass), every barrier with id and reasons
    cuda        the generated CUDA C++
    ptx         the PTX NVRTC makes of it

Environment (as NVFUSER_DUMP does), read at every codegen.compile:

    FUSERIR_DUMP=fusion,scheduled,kernel,cuda,ptx   print these stages to stderr
    FUSERIR_DUMP_AFTER=pass1,pass2                  print the kernel IR after these passes

Each dump is preceded by one header line, `===== fuserir dump: <what> (<fusion>) =====`.
An unknown name raises DumpOptionError (a FuserirError) at the compile that reads it.
The driver calls env_before_compile / env_after_compile around codegen.compile and gives
lowering.pipeline.lower the instrument env_instrument makes; nothing below the driver
knows about dumps (lowering calls an instrument, whatever it does).
"""

import copy
import os
import sys

from codegen import nvrtc
from codegen.cuda import emit_cuda
from fuserir.dsl import print_fusion
from fuserir.errors import FuserirError
from lowering import kir
from lowering.context import LoweringContext
from lowering.passes import inline_defaults

STAGES = ("fusion", "scheduled", "kernel", "cuda", "ptx")
ENV_DUMP = "FUSERIR_DUMP"
ENV_DUMP_AFTER = "FUSERIR_DUMP_AFTER"


class DumpOptionError(FuserirError):
    """An unknown name in FUSERIR_DUMP or FUSERIR_DUMP_AFTER."""


# ---------------------------------------------------------------------------------------
# Stage texts
# ---------------------------------------------------------------------------------------

def _split_printed(fusion):
    """(definition, schedule block) of the fusion's canonical DSL text."""
    text = print_fusion(fusion)
    marker = f"\nschedule {fusion.name} {{\n"
    at = text.find(marker)
    if at < 0:
        return text, ""
    return text[:at + 1], text[at + 1:]


def fusion_text(fusion):
    """The fusion's DSL definition, without its schedule."""
    return _split_printed(fusion)[0]


def placed_by_lowering(fusion):
    """A copy of `fusion` as lowering's first pass (inline_defaults) leaves it: every
    tensor placed. The user's fusion is not changed."""
    ctx = LoweringContext(copy.deepcopy(fusion))
    inline_defaults.run(ctx, None)
    return ctx.fusion


def scheduled_text(fusion):
    """Every tensor's loop domain and parallel types, the schedule trace, and what lowering's
    placement (inline_defaults) changes."""
    lines = [f"# {fusion.name} as scheduled: each tensor's loop domain (i iteration, "
             "r reduction, b broadcast; BIDx..TIDz parallel types)"]
    lines += [t.describe() for t in fusion.tensors]
    schedule = _split_printed(fusion)[1]
    lines.append("")
    if schedule:
        lines.append("# schedule trace (replayable DSL: `fuserir parse` prints it back)")
        lines += schedule.rstrip("\n").splitlines()
    else:
        lines.append("# no schedule: lowering places every tensor itself")
    try:
        placed = placed_by_lowering(fusion)
    except FuserirError as error:
        lines += ["", f"# lowering cannot place these tensors: {error}"]
        return "\n".join(lines) + "\n"
    before = {t.name: t.describe() for t in fusion.tensors}
    after = [t.describe() for t in placed.tensors]
    changed = sum(1 for t, text in zip(placed.tensors, after) if before.get(t.name) != text)
    lines += ["", f"# as lowering places them (after pass inline_defaults): "
                  f"{changed} changed, marked *"]
    lines += [("* " if before.get(t.name) != text else "  ") + text
              for t, text in zip(placed.tensors, after)]
    return "\n".join(lines) + "\n"


def kernel_text(kernel):
    return kir.format_kernel(kernel)


def cuda_text(kernel):
    return emit_cuda(kernel)


def ptx_text(source, name, arch=None):
    return nvrtc.ptx(source, name, arch=arch)


# ---------------------------------------------------------------------------------------
# The environment hook
# ---------------------------------------------------------------------------------------

def _names(variable, allowed):
    value = os.environ.get(variable, "")
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise DumpOptionError(f"{variable}: unknown name{'s' if len(unknown) > 1 else ''} "
                              f"{', '.join(repr(n) for n in unknown)}; expected a comma-"
                              f"separated list of: {', '.join(allowed)}")
    return names


def env_stages():
    """The stages FUSERIR_DUMP names (checked)."""
    return _names(ENV_DUMP, STAGES)


def env_dump_after(pass_names):
    """The passes FUSERIR_DUMP_AFTER names (checked against `pass_names`)."""
    return _names(ENV_DUMP_AFTER, tuple(pass_names))


def emit(what, fusion_name, text):
    """Print one dump to stderr under its header line."""
    stream = sys.stderr
    stream.write(f"===== fuserir dump: {what} ({fusion_name}) =====\n")
    stream.write(text if text.endswith("\n") else text + "\n")
    stream.flush()


def emit_after_pass(name, kernel, fusion):
    """FUSERIR_DUMP_AFTER: the kernel IR after pass `name` (before loop_nests builds a
    kernel: every tensor's loop domain and placement, as lowering's copy holds them)."""
    if kernel is not None:
        text = kernel_text(kernel)
    else:
        text = "\n".join(t.describe() for t in fusion.tensors) + "\n"
    emit(f"after pass {name}", fusion.name, text)


def env_instrument(pass_names):
    """The instrument lowering.pipeline.lower calls after each pass: it prints the kernel IR
    after the passes FUSERIR_DUMP_AFTER names (checked against `pass_names`); None when it
    names none. Trial lowerings (segmentation asking "does this lower?") pass none."""
    wanted = env_dump_after(pass_names)
    if not wanted:
        return None

    def instrument(name, kernel, fusion):
        if name in wanted:
            emit_after_pass(name, kernel, fusion)
    return instrument


def env_before_compile(fusion):
    """FUSERIR_DUMP's fusion and scheduled stages (also checks FUSERIR_DUMP's names)."""
    stages = env_stages()
    if "fusion" in stages:
        emit("fusion", fusion.name, fusion_text(fusion))
    if "scheduled" in stages:
        emit("scheduled", fusion.name, scheduled_text(fusion))


def env_after_compile(executable):
    """FUSERIR_DUMP's kernel, cuda and ptx stages of a compiled Executable."""
    stages = env_stages()
    if not {"kernel", "cuda", "ptx"} & set(stages):
        return
    name = executable.fusion.name
    kernels = executable.kernels
    for i, compiled in enumerate(kernels, 1):
        which = f" {i} of {len(kernels)}, {compiled.name}" if len(kernels) > 1 else ""
        if "kernel" in stages:
            emit(f"kernel{which}", name, kernel_text(compiled.kir))
        if "cuda" in stages:
            emit(f"cuda{which}", name, compiled.source)
        if "ptx" in stages:
            emit(f"ptx{which}", name, ptx_text(compiled.source, compiled.name))
