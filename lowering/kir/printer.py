"""The kernel-IR text printer: what `fuserir dump --stage kernel` shows, every barrier
and wait with its id and reasons. Each statement states its own line (Stmt.line, beside
its fields and effects), each expression its text (expressions.format_expr); this module
lays them out: nesting, labels, the kernel's parameters and launch.
"""

from .expressions import format_expr
from .statements import ForLoop, IfThenElse


def format_stmt(s):
    """One line for a statement (loops and ifs: their header)."""
    return s.line()


def format_stmts(stmts, indent=0):
    lines = []
    for s in stmts:
        lines.append(f"{s.label:>5}  {'  ' * indent}{format_stmt(s)}")
        if isinstance(s, ForLoop):
            lines.extend(format_stmts(s.body, indent + 1))
        elif isinstance(s, IfThenElse):
            lines.extend(format_stmts(s.then_body, indent + 1))
            if s.else_body:
                lines.append(f"{'':>5}  {'  ' * indent}else")
                lines.extend(format_stmts(s.else_body, indent + 1))
    return lines


def format_kernel(kernel):
    params = [f"{p.buffer.dtype} {p.buffer.name}[{', '.join(format_expr(s) for s in p.sizes)}]"
              for p in kernel.tensor_params]
    params += [f"tensor_map {m.name}({m.tensor.buffer.name}, box "
               f"{'x'.join(str(b) for b in m.box)}, swizzle {m.swizzle})"
               for m in kernel.tensor_maps]
    params += [f"workspace {w.buffer.dtype} {w.buffer.name}[{format_expr(w.size)}]"
               + (" zeroed" if w.zeroed else "") for w in kernel.workspaces]
    params += [f"{p.var.dtype} {p.var.name}" for p in kernel.scalar_params]
    launch = kernel.launch
    grid = ", ".join(format_expr(e) for e in launch.grid) if launch.grid else "?"
    block = ", ".join(format_expr(e) for e in launch.block) if launch.block else "?"
    head = [f"kernel {kernel.name}({', '.join(params)})",
            f"  grid=({grid}) block=({block}) index={kernel.index_dtype}"
            + (" co-resident" if kernel.co_resident else "")
            + (f" cluster=({', '.join(format_expr(e) for e in kernel.cluster)})"
               if kernel.cluster else "")]
    return "\n".join(head + format_stmts(kernel.body)) + "\n"
