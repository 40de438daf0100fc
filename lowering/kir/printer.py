"""The kernel-IR text printer: what `fuserir dump --stage kernel` shows, every barrier
and wait with its id and reasons. Operators print as C spells them (fuserir.op_table).
"""

from fuserir import op_table
from fuserir.instructions import MMA_M16N8K16 as MMA
from fuserir.dtypes import DataType

from .expressions import BinOp, Cast, Const, Load, Select, Special, ShuffleXor, UnOp, Var
from .statements import (Allocate, Barrier, Comment, CpAsync, CpAsyncCommit, CpAsyncWait,
                         ExprStmt, Fence, ForLoop, IfThenElse, LdMatrix, Mma, SemRelease,
                         SemWait, Store)
from . import hopper as h


# ---------------------------------------------------------------------------------------
# Printer
# ---------------------------------------------------------------------------------------

def format_expr(e):
    if isinstance(e, Const):
        if e.dtype is DataType.bool:
            return "true" if e.value else "false"
        return repr(float(e.value)) if e.dtype.is_float else str(int(e.value))
    if isinstance(e, (Var, Special)):
        return e.name
    if isinstance(e, BinOp):
        infix = op_table.BINARY[e.op].infix      # as C spells it
        if infix:
            return f"({format_expr(e.a)} {infix} {format_expr(e.b)})"
        return f"{e.op}({format_expr(e.a)}, {format_expr(e.b)})"
    if isinstance(e, UnOp):
        return f"{e.op}({format_expr(e.a)})"
    if isinstance(e, Select):
        return f"({format_expr(e.cond)} ? {format_expr(e.a)} : {format_expr(e.b)})"
    if isinstance(e, Cast):
        return f"({e.dtype}){format_expr(e.a)}"
    if isinstance(e, Load):
        vector = f" x{e.width}" if e.width > 1 else ""
        return f"{e.buffer.name}[{format_expr(e.index)}{vector}]"
    if isinstance(e, ShuffleXor):
        return f"shfl_xor({format_expr(e.value)}, {e.lane_mask})"
    raise TypeError(type(e).__name__)


def format_stmt(s):
    """One line for a statement (loops and ifs: their header)."""
    if isinstance(s, Allocate):
        b = s.buffer
        where = f" @ byte {format_expr(b.byte_offset)}" if b.byte_offset is not None else ""
        return f"alloc {b.memory.value} {b.dtype} {b.name}[{format_expr(b.size)}]{where}"
    if isinstance(s, Store):
        vector = f" x{s.width}" if s.width > 1 else ""
        return f"{s.buffer.name}[{format_expr(s.index)}{vector}] = {format_expr(s.value)}"
    if isinstance(s, ForLoop):
        unroll = "unroll " if s.kind == "unroll" else ""
        return f"{unroll}for {s.var.name} in 0..{format_expr(s.extent)}"
    if isinstance(s, IfThenElse):
        return f"if {format_expr(s.cond)}"
    if isinstance(s, Barrier):
        sid = f" [{s.sync_id}]" if s.sync_id else ""
        why = "; ".join(str(r) for r in s.reasons)
        return f"__syncthreads(){sid}" + (f"  // {why}" if why else "")
    if isinstance(s, Comment):
        return f"// {s.text}"
    if isinstance(s, ExprStmt):
        return f"{s.role} {s.tv.definition}"
    if isinstance(s, LdMatrix):
        trans = ".trans" if s.trans else ""
        return (f"ldmatrix.x{s.num}{trans} {s.dst.name}[{format_expr(s.dst_index)}..] <- "
                f"{s.src.name}[{format_expr(s.address)}]")
    if isinstance(s, Mma):
        def frag(buf, index):
            return f"{buf.name}[{format_expr(index)}..]"
        return (f"{MMA.label}.{s.dtype} {frag(s.d, s.d_index)} = {frag(s.a, s.a_index)} * "
                f"{frag(s.b, s.b_index)} + {frag(s.c, s.c_index)}")
    if isinstance(s, CpAsync):
        return (f"cp.async.{s.cache} {s.dst.name}[{format_expr(s.dst_index)}] <- "
                f"{s.src.name}[{format_expr(s.src_index)}], {s.nbytes} bytes, src-size "
                f"{format_expr(s.src_size)}")
    if isinstance(s, CpAsyncCommit):
        return "cp.async.commit_group"
    if isinstance(s, CpAsyncWait):
        sid = f" [{s.sync_id}]" if s.sync_id else ""
        why = "; ".join(str(r) for r in s.reasons)
        return f"cp.async.wait_group {s.n}{sid}" + (f"  // {why}" if why else "")
    if isinstance(s, Fence):
        return "__threadfence()"
    if isinstance(s, SemWait):
        return (f"sem_wait {s.sem.name}[{format_expr(s.index)}] == "
                f"{format_expr(s.value)}  (acquire)")
    if isinstance(s, SemRelease):
        return (f"sem_release {s.sem.name}[{format_expr(s.index)}] = "
                f"{format_expr(s.value)}  (release)")
    line = _format_hopper(s)
    if line is None:
        raise TypeError(type(s).__name__)
    return line


def _why(s):
    sid = f" [{s.sync_id}]" if s.sync_id else ""
    why = "; ".join(str(r) for r in s.reasons)
    return sid + (f"  // {why}" if why else "")


def _at(buf, index):
    return f"{buf.name}[{format_expr(index)}]"


def _format_hopper(s):
    """The line of an sm_90 statement (kir.hopper), None for any other."""
    if isinstance(s, h.Wgmma):
        def operand(buf, index, layout, trans):
            if layout is None:
                return f"{buf.name}[{format_expr(index)}..]"
            major = "MN" if trans else "K"
            return (f"desc({_at(buf, index)}, {major}-major, LBO {layout.leading}, SBO "
                    f"{layout.stride}, swizzle {layout.swizzle})")
        acc = "" if s.accumulate is None else f" (accumulate if {format_expr(s.accumulate)})"
        return (f"wgmma.m64n{s.n}k16.{s.dtype} {s.d.name}[{format_expr(s.d_index)}..] += "
                f"{operand(s.a, s.a_index, s.a_layout, s.trans_a)} * "
                f"{operand(s.b, s.b_index, s.b_layout, s.trans_b)}{acc}")
    if isinstance(s, h.WgmmaFence):
        return f"wgmma.fence{_why(s)}"
    if isinstance(s, h.WgmmaCommit):
        return "wgmma.commit_group"
    if isinstance(s, h.WgmmaWait):
        return f"wgmma.wait_group {s.n}{_why(s)}"
    if isinstance(s, h.StMatrix):
        trans = ".trans" if s.trans else ""
        return (f"stmatrix.x{s.num}{trans} {_at(s.dst, s.address)} <- "
                f"{s.src.name}[{format_expr(s.src_index)}..]")
    if isinstance(s, h.SetMaxNReg):
        return f"setmaxnreg.{'inc' if s.increase else 'dec'} {s.count}"
    if isinstance(s, h.NamedBarrier):
        return f"bar.{'arrive' if s.arrive_only else 'sync'} {s.id}, {s.count}{_why(s)}"
    if isinstance(s, h.FenceProxyAsync):
        return f"fence.proxy.async.shared::cta{_why(s)}"
    if isinstance(s, h.MbarrierInit):
        return f"mbarrier.init {_at(s.bar, s.index)}, count {format_expr(s.count)}"
    if isinstance(s, h.FenceMbarrierInit):
        return f"fence.mbarrier_init{_why(s)}"
    if isinstance(s, h.MbarrierArrive):
        tx = "" if s.tx_bytes is None else f".expect_tx {format_expr(s.tx_bytes)} bytes"
        return f"mbarrier.arrive{tx} {_at(s.bar, s.index)}"
    if isinstance(s, h.MbarrierWait):
        return (f"mbarrier.wait {_at(s.bar, s.index)}, parity "
                f"{format_expr(s.parity)}{_why(s)}")
    if isinstance(s, (h.TmaLoad, h.TmaStore)):
        box = "x".join(str(b) for b in s.map.box)
        at = ", ".join(format_expr(c) for c in s.coords)
        if isinstance(s, h.TmaLoad):
            return (f"tma.load {_at(s.dst, s.dst_index)} <- {s.map.name}({at}) box {box}, "
                    f"complete_tx {_at(s.bar, s.bar_index)}")
        return f"tma.store {s.map.name}({at}) box {box} <- {_at(s.src, s.src_index)}"
    if isinstance(s, h.BulkCommit):
        return "cp.async.bulk.commit_group"
    if isinstance(s, h.BulkWait):
        return f"cp.async.bulk.wait_group{'.read' if s.read else ''} {s.n}{_why(s)}"
    return None


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
            f"  grid=({grid}) block=({block}) index={kernel.index_dtype}"]
    return "\n".join(head + format_stmts(kernel.body)) + "\n"
