"""`fuserir inspect`: one summary page of a fusion's kernel.

Tensors (dtype, memory, loop domain), the launch configuration (symbolic and at the chosen
sizes), the shared-memory map (each allocation's byte range, which allocations share
bytes, the total against the device's opt-in limit), every barrier with its id and
reasons, the shared-memory bank conflicts of every shared access (lowering.verify.bank_conflicts,
at the chosen sizes, block 0), registers and spills from ptxas, and the verifier's verdict.
"""

import json

from codegen.errors import GpuUnavailableError
from codegen.nvrtc import DEFAULT_ARCH
from driver import stages

from ..device import DEFAULT
from ..numerics import ceil_div
from .common import (UsageError, add_file_arguments, add_sync_arguments, build, format_sizes,
                     kernel_scalars, normalize_arch, one_fusion, parse_sizes, shared_limit,
                     shared_ranges, sizes_for, sync_options, with_plan_scalars)

BANK_BLOCK = (0, 0, 0)      # the blockIdx the bank-conflict report examines
BANK_ITERATIONS = 2         # each enclosing loop's first iterations (and its last)


def add_parser(sub):
    p = sub.add_parser(
        "inspect", help="one summary page: tensors, launch, shared memory, barriers, "
                        "registers",
        description="One summary page of a fusion's kernel at the chosen sizes.")
    add_file_arguments(p)
    p.add_argument("--arch", help="target for ptxas, e.g. sm_90 (default: this machine's "
                   "GPU, else sm_90)")
    add_sync_arguments(p)
    p.set_defaults(run=cmd_inspect)


def cmd_inspect(args):
    fusion = one_fusion(args.file, args.fusion)
    sizes = sizes_for(fusion, parse_sizes(args.size))
    options = sync_options(args)
    try:
        arch = normalize_arch(args.arch)
    except GpuUnavailableError:      # the core install: no NVRTC, so no ptxas report
        arch = args.arch or DEFAULT_ARCH
    page = build_page(fusion, sizes, options, arch)
    if args.json:
        print(json.dumps(page, indent=2))
    else:
        print("\n".join(render(page)))
    return 1 if any(k["ptxas"].get("error") for k in page["kernels"]) else 0


# ---------------------------------------------------------------------------------------
# Collecting
# ---------------------------------------------------------------------------------------

def build_page(fusion, sizes, options, arch):
    exe, units, refused = build(fusion, options, sizes=sizes)
    plan = _plan(fusion, exe, sizes)
    sizes = with_plan_scalars(exe, sizes)
    page = {"fusion": fusion.name, "sizes": sizes, "plan": plan,
            "options": {"without": list(options["disable_passes"]),
                        "drop": list(options["drop_syncs"])},
            "kernels": [_kernel_page(u, sizes, arch) for u in units],
            "verifier": {"ran": "verify_hazards" not in options["disable_passes"],
                         "refused": refused is not None,
                         "hazards": len(refused.hazards) if refused is not None else 0,
                         "kernel": refused.kernel_name if refused is not None else None}}
    return page


def _plan(fusion, exe, sizes):
    """The run-time scalars the scheduled fusion declares, and for an automatic schedule
    which schedule these sizes take on the device and why."""
    from ..scheduler import auto
    from codegen.launch import device_model
    plan = {"declared": dict(fusion.scalars), "sizes": fusion.size_symbols(),
            "automatic": bool(getattr(exe, "automatic", False))}
    if plan["automatic"]:
        device = device_model()
        schedule, scalars, _ = exe.plan_for(sizes)
        plan.update(device=device.describe(), scalars=scalars,
                    why=auto.explain(fusion, sizes, device))
    return plan


def _kernel_page(unit, sizes, arch):
    from codegen.launch import launch_config
    from lowering import kir
    kernel = unit.kernel
    scalars = kernel_scalars(kernel, sizes, unit.fusion)
    try:
        grid, block, shared_total = launch_config(kernel, scalars)
    except (ValueError, KeyError) as error:
        raise UsageError(f"kernel {kernel.name}: launch configuration at "
                         f"{format_sizes(sizes)}: {error}") from None
    return {"kernel": kernel.name, "title": unit.title, "index": unit.index,
            "count": unit.count, "inputs": unit.inputs, "outputs": unit.outputs,
            "tensors": _tensors(unit.fusion),
            "launch": {"grid": {"symbolic": [kir.format_expr(e) for e in kernel.launch.grid],
                                "value": list(grid)},
                       "block": {"symbolic": [kir.format_expr(e)
                                              for e in kernel.launch.block],
                                 "value": list(block)},
                       "blocks": _product(grid), "threads_per_block": _product(block),
                       "warps_per_block": ceil_div(_product(block), 32),
                       "index_dtype": str(kernel.index_dtype)},
            "shared": _shared(kernel, scalars, shared_total, arch),
            "barriers": _barriers(kernel),
            "bank_conflicts": _bank_conflicts(kernel, scalars),
            "ptxas": _ptxas(unit.compiled, arch)}


def _product(values):
    out = 1
    for v in values:
        out *= v
    return out


def _tensors(fusion):
    """The tensors as lowering places them; `changed` marks a placement that differs from
    the schedule's (inline_defaults placed it, or re-placed it)."""
    try:
        placed = stages.placed_by_lowering(fusion)
    except Exception:  # noqa: BLE001 - lowering reports its own error below
        placed = fusion
    before = {t.name: t.describe() for t in fusion.tensors}
    rows = []
    for t in placed.tensors:
        rows.append({"name": t.name, "dtype": str(t.dtype),
                     "shape": [str(e) for e in t.shape], "memory": str(t.memory_type),
                     "loop": [str(a) for a in t.loop], "compute_at": t.compute_at_pos,
                     "changed_by_lowering": before.get(t.name) != t.describe()})
    return rows


def _shared(kernel, scalars, total, arch):
    from lowering import kir
    allocations = []
    for stmt, start, end in shared_ranges(kernel, scalars):
        b = stmt.buffer
        allocations.append({"buffer": b.name, "label": stmt.label, "dtype": str(b.dtype),
                            "elements": kir.format_expr(b.size),
                            "offset": kir.format_expr(b.byte_offset)
                            if b.byte_offset is not None else None,
                            "bytes": [start, end], "tensor": b.tensor})
    overlaps = []
    for i, a in enumerate(allocations):
        for b in allocations[i + 1:]:
            lo, hi = max(a["bytes"][0], b["bytes"][0]), min(a["bytes"][1], b["bytes"][1])
            if lo < hi:
                overlaps.append({"buffers": [a["buffer"], b["buffer"]], "bytes": [lo, hi]})
    limit, source = shared_limit(arch)
    return {"allocations": allocations, "overlaps": overlaps, "total": total,
            "limit": limit, "limit_source": source,
            "fits": None if limit is None else total <= limit,
            "needs_opt_in": total > DEFAULT.static_shared}   # 48 KB on every GPU


def _barriers(kernel):
    """Every barrier and inserted wait: id, label, enclosing loops, the
    statements around it, and its reasons."""
    from lowering import kir
    found = []

    def visit(stmts, loops):
        for i, s in enumerate(stmts):
            if kir.effects.is_block_barrier(s.effects()) or getattr(s, "sync_id", None):
                before = stmts[i - 1].label if i > 0 else None
                after = stmts[i + 1].label if i + 1 < len(stmts) else None
                found.append({
                    "id": getattr(s, "sync_id", None), "label": s.label,
                    "statement": kir.format_stmt(s).split("  //")[0],
                    "loops": list(loops), "after": before, "before": after,
                    "reasons": [{"kind": r.kind.value, "buffers": list(r.buffers),
                                 "first": r.first.label, "second": r.second.label,
                                 "loop_carried": r.loop_carried,
                                 "text": str(r)} for r in getattr(s, "reasons", [])]})
            inner = loops + [s.var.name] if isinstance(s, kir.ForLoop) else loops
            for body in s.bodies():
                visit(body, inner)

    visit(kernel.body, [])
    points = {}
    labels = {b_["first"] for b in found for b_ in b["reasons"]} | \
        {b_["second"] for b in found for b_ in b["reasons"]}
    for s in kir.walk(kernel.body):
        if s.label in labels:
            points[s.label] = kir.format_stmt(s)
    for b in found:
        b["program_points"] = {r[k]: points.get(r[k], "") for r in b["reasons"]
                               for k in ("first", "second")}
    return found


def _bank_conflicts(kernel, scalars):
    """Every shared access with its worst bank-conflict degree (lowering.verify.bank_conflicts)."""
    from lowering.verify import bank_conflicts
    missing = [p.var.name for p in kernel.scalar_params if p.var.name not in scalars]
    reports = bank_conflicts.report(kernel, scalars, max_iterations=BANK_ITERATIONS,
                                    block=BANK_BLOCK)
    accesses = [r.to_dict() for r in reports]
    return {"block": list(BANK_BLOCK), "max_iterations": BANK_ITERATIONS,
            "needs_sizes": missing, "accesses": accesses,
            "conflicted": sum(1 for a in accesses if a["worst"] is not None and a["worst"] > 1),
            "unknown": sum(1 for a in accesses if a["worst"] is None)}


def _ptxas(compiled, arch):
    """ptxas's report of the kernel for `arch` (this machine's when None), for the target
    its instructions need there (sm_90a for wgmma: driver.build.kernel_arch)."""
    from codegen.errors import CompileError
    from codegen.gpu_stack import INSTALL
    from codegen.nvrtc import default_arch, ptxas_info
    from driver.build import kernel_arch
    try:
        arch = kernel_arch(compiled.kir, arch or default_arch())
        info = ptxas_info(compiled.source, compiled.name, arch=arch)
    except CompileError as error:
        return {"arch": arch, "error": str(error).splitlines()[0]}
    except GpuUnavailableError:
        return {"arch": arch, "unavailable": f"NVRTC is not installed ({INSTALL})"}
    info = {k: v for k, v in info.items() if k != "log"}
    info["arch"] = arch
    return info


# ---------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------

def render(page):
    lines = [f"{page['fusion']} at {format_sizes(page['sizes'])}"]
    opts = page["options"]
    if opts["without"] or opts["drop"]:
        what = [f"without {', '.join(opts['without'])}"] if opts["without"] else []
        what += [f"dropped {', '.join(opts['drop'])}"] if opts["drop"] else []
        lines[0] += f" ({'; '.join(what)})"
    kernels = page["kernels"]
    if len(kernels) > 1:
        lines[0] += f": {len(kernels)} kernels (automatic schedule, segmented)"
    lines += ["", *_render_plan(page["plan"])]
    for k in kernels:
        lines.append("")
        if len(kernels) > 1:
            lines += [f"===== {k['title']} =====", ""]
        lines += _render_kernel(k)

    lines.append("")
    v = page["verifier"]
    if v["refused"]:
        lines.append(f"verifier: REFUSES kernel {v['kernel']} ({v['hazards']} hazard(s)); "
                     "shown as lowered without verify_hazards; `fuserir check` lists them")
    elif not v["ran"]:
        lines.append("verifier: not run (--without verify_hazards)")
    else:
        lines.append("verifier: proved free of shared-memory hazards")
    return lines


def _render_plan(plan):
    declared = [name if d is None else f"{name} (default {d})"
                for name, d in plan["declared"].items()]
    lines = [f"run-time scalars: {', '.join(declared) or 'none declared'}; sizes: "
             f"{', '.join(plan['sizes']) or 'none'}"]
    if plan["automatic"]:
        passed = ", ".join(f"{k}={v}" for k, v in plan["scalars"].items())
        lines.append(f"automatic schedule for these sizes on {plan['device']}"
                     + (f" (run() passes {passed})" if passed else ""))
        lines += [f"  {line}" for line in plan["why"]]
    return lines


def _render_bank_conflicts(bank):
    from lowering.verify.bank_conflicts import format_report
    accesses = bank["accesses"]
    head = (f"shared-memory bank conflicts (block {tuple(bank['block'])}, every warp; each "
            f"enclosing loop at its first {bank['max_iterations']} iterations and its last)")
    if not accesses:
        return [head, "  no shared-memory accesses"]
    summary = f"{bank['conflicted']} of {len(accesses)} access(es) conflicted"
    if bank["unknown"]:
        summary += f", {bank['unknown']} unknown"
    lines = [f"{head}: {summary}"]
    if bank["needs_sizes"]:
        lines.append(f"  the report needs sizes for {', '.join(bank['needs_sizes'])} "
                     "(--size)")
    lines += format_report(accesses, indent="  ")
    return lines


def _render_kernel(k):
    lines = [f"kernel {k['kernel']}", "", "tensors (as lowering places them)"]
    rows = [(("* " if t["changed_by_lowering"] else "  ") + t["name"],
             f"{t['dtype']}[{', '.join(t['shape'])}]", t["memory"],
             f"loop=[{' '.join(t['loop'])}]"
             + (f" compute_at={t['compute_at']}" if t["compute_at"] is not None else ""))
            for t in k["tensors"]]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines += [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}"
              for r in rows]
    if any(t["changed_by_lowering"] for t in k["tensors"]):
        lines.append("  (* placed by lowering's inline_defaults, not as the schedule left it: "
                     "`fuserir dump --stage scheduled` compares)")

    launch = k["launch"]
    grid, block = launch["grid"], launch["block"]
    lines += ["", "launch",
              f"  grid   ({', '.join(grid['symbolic'])}) = ({', '.join(map(str, grid['value']))})"
              f": {launch['blocks']} block(s)",
              f"  block  ({', '.join(block['symbolic'])}) = "
              f"({', '.join(map(str, block['value']))}): {launch['threads_per_block']} "
              f"thread(s), {launch['warps_per_block']} warp(s)",
              f"  shared {k['shared']['total']} bytes of dynamic shared memory; "
              f"index type {launch['index_dtype']}"]

    shared = k["shared"]
    limit = (f"{shared['limit']} bytes ({shared['limit'] // 1024} KB)"
             if shared["limit"] is not None else "unknown")
    lines += ["", f"shared memory: {shared['total']} bytes at these sizes; limit per block "
                  f"after opt-in {limit} ({shared['limit_source']})"]
    if not shared["allocations"]:
        lines.append("  no shared allocations")
    else:
        rows = [(a["label"], a["buffer"], f"{a['dtype']}[{a['elements']}]",
                 f"bytes [{a['bytes'][0]}, {a['bytes'][1]})",
                 f"@ byte {a['offset']}" if a["offset"] is not None else "unplaced")
                for a in shared["allocations"]]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines += ["  " + "  ".join(f"{r[i]:<{widths[i]}}" for i in range(4)) + f"  {r[4]}"
                  for r in rows]
        if shared["overlaps"]:
            for o in shared["overlaps"]:
                lines.append(f"  {o['buffers'][0]} and {o['buffers'][1]} share bytes "
                             f"[{o['bytes'][0]}, {o['bytes'][1]})")
        else:
            lines.append("  no two allocations share bytes")
    if shared["fits"] is False:
        lines.append(f"  DOES NOT FIT: {shared['total']} > {shared['limit']} bytes")
    elif shared["needs_opt_in"]:
        lines.append("  above 48 KB: the launch raises the kernel's dynamic shared-memory "
                     "limit (opt-in)")

    barriers = k["barriers"]
    lines += ["", f"barriers ({len(barriers)})"]
    if not barriers:
        lines.append("  none")
    for b in barriers:
        where = " > ".join(f"for {v}" for v in b["loops"]) or "top level"
        around = ", ".join(x for x in (f"after {b['after']}" if b["after"] else "",
                                       f"before {b['before']}" if b["before"] else "") if x)
        lines.append(f"  {b['id'] or '-'}  {b['label']}  {b['statement']}  in {where}"
                     + (f" ({around})" if around else ""))
        for r in b["reasons"]:
            lines.append(f"      {r['text']}")
        for label, text in b["program_points"].items():
            lines.append(f"        {label}: {text}")

    lines += [""] + _render_bank_conflicts(k["bank_conflicts"])

    info = k["ptxas"]
    if info.get("error"):
        lines += ["", f"registers (ptxas, {info['arch']}): NVRTC failed: {info['error']}"]
    elif info.get("unavailable"):
        lines += ["", f"registers (ptxas, {info['arch']}): not available: "
                      f"{info['unavailable']}"]
    else:
        lines += ["", f"registers (ptxas, {info['arch']}): {info['registers']} registers, "
                      f"spill stores {info['spill_stores']} bytes, spill loads "
                      f"{info['spill_loads']} bytes, stack frame {info['stack_frame']} bytes, "
                      f"static shared {info['shared']} bytes, barriers {info['barriers']}"]
    return lines
