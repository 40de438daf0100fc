"""`fuserir graph`: the fusion's dataflow graph, or the kernel's statement tree, as DOT.

The fusion graph is `fusion.graph` (fuserir.ir.graph) as it is: tensors (boxes: name, dtype,
shape, memory; inputs blue, outputs green, shared yellow) and expressions (ellipses: the
operation). The kernel graph is the statement tree of kernel IR after the last pass: loops
and ifs hold their bodies, barriers are red and name their reasons, and a dashed red edge
joins the two program points of each reason. DOT goes to stdout or `-o out.dot`;
`-o out.svg` (or .png, .pdf) runs Graphviz's `dot`.
"""

import pathlib
import shutil
import subprocess

from .common import UsageError, add_sync_arguments, build, one_fusion, sync_options

RENDERED = ("svg", "png", "pdf")
MAX_LABEL = 100


def add_parser(sub):
    p = sub.add_parser("graph", help="the dataflow graph (or kernel statement tree) as DOT "
                                     "or SVG",
                       description="Print the fusion's dataflow graph, or the kernel's "
                                   "statement tree, as Graphviz DOT.")
    p.add_argument("file", help="a DSL file (.fz)")
    p.add_argument("--stage", choices=("fusion", "kernel"), default="fusion",
                   help="fusion: tensors and expressions; kernel: kernel IR statements "
                        "(default: fusion)")
    p.add_argument("--fusion", metavar="NAME", help="the fusion to use (a file of several "
                   "needs it)")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="write OUT.dot (DOT) or OUT.svg / .png / .pdf (needs Graphviz's "
                        "dot); default: DOT to stdout")
    add_sync_arguments(p)
    p.set_defaults(run=cmd_graph)


def cmd_graph(args):
    out = pathlib.Path(args.output) if args.output else None
    fmt = None
    if out is not None:
        fmt = out.suffix.lstrip(".").lower()
        if fmt not in ("dot", "gv") + RENDERED:
            raise UsageError(f"-o {out}: unknown format '{out.suffix or '(none)'}'; use .dot, "
                             f".gv, {', '.join('.' + f for f in RENDERED)}")
    dot_program = None
    if fmt in RENDERED:
        dot_program = shutil.which("dot")
        if dot_program is None:
            raise UsageError(f"-o {out}: Graphviz is not installed (no 'dot' program on "
                             "PATH); write DOT with -o FILE.dot, or install graphviz")
    options = sync_options(args)
    fusion = one_fusion(args.file, args.fusion)
    if args.stage == "fusion":
        if options["disable_passes"] or options["drop_syncs"]:
            raise UsageError("--without and --drop go with --stage kernel")
        text = fusion_dot(fusion)
    else:
        _, units, _ = build(fusion, options)
        text = kernel_dot([u.kernel for u in units], fusion.name)
    if out is None:
        print(text, end="")
    elif dot_program is None:
        _write(out, text)
    else:
        _render(dot_program, fmt, text, out)
    return 0


def _write(path, text):
    try:
        path.write_text(text)
    except OSError as error:
        raise UsageError(f"-o {path}: cannot write: {error.strerror}") from None


def _render(program, fmt, text, out):
    try:
        done = subprocess.run([program, f"-T{fmt}", "-o", str(out)], input=text,
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise UsageError(f"-o {out}: running {program} failed: {error}") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[0]
        raise UsageError(f"-o {out}: Graphviz's dot failed: {why}")


# ---------------------------------------------------------------------------------------
# DOT
# ---------------------------------------------------------------------------------------

def _escape(text):
    text = str(text)
    if len(text) > MAX_LABEL:
        text = text[:MAX_LABEL - 3] + "..."
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _quote(text):
    return f'"{_escape(text)}"'


def _label(*lines):
    """A quoted DOT label of several lines, each cut at MAX_LABEL characters."""
    return '"' + "\\n".join(_escape(line) for line in lines) + '"'


def _attrs(**attrs):
    return ", ".join(f"{k}={v}" for k, v in attrs.items())


def fusion_dot(fusion):
    """The fusion's graph as DOT: nodes in the graph's deterministic order."""
    from ..ir.tensor import MemoryType, TensorView
    graph = fusion.graph
    order = sorted(graph.nodes, key=lambda n: graph.nodes[n]["serial"])
    ids = {}
    lines = [f"digraph {_quote(fusion.name)} {{", "  rankdir=TB;",
             '  node [fontname="monospace", fontsize=10];',
             '  edge [fontname="monospace", fontsize=9];']
    for node in order:
        if isinstance(node, TensorView):
            ids[node] = f"t_{node.name}"
            shape = ", ".join(str(e) for e in node.shape)
            role = "input" if node.is_input else "output" if node.is_output else ""
            color = {"input": "lightblue", "output": "palegreen"}.get(role)
            if color is None and node.memory_type is MemoryType.shared:
                color = "lightyellow"
            loop = " ".join(str(a) for a in node.loop)
            label = _label(node.name + (f" ({role})" if role else ""),
                           f"{node.dtype}[{shape}] {node.memory_type}", f"loop [{loop}]")
            attrs = dict(shape="box", label=label)
            if color:
                attrs.update(style="filled", fillcolor=color)
        else:
            ids[node] = f"e{graph.nodes[node]['serial']}"
            text = str(node)
            op = text.split(" = ", 1)[1] if " = " in text else text
            attrs = dict(shape="ellipse", label=_label(op))
        lines.append(f"  {ids[node]} [{_attrs(**attrs)}];")
    for node in order:
        successors = sorted(graph.successors(node), key=lambda n: graph.nodes[n]["serial"])
        for succ in successors:
            lines.append(f"  {ids[node]} -> {ids[succ]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def kernel_dot(kernels, name):
    """The kernels' statement trees as DOT (one cluster per kernel where there are
    several), barriers red with their reasons."""
    lines = [f"digraph {_quote(name)} {{", "  rankdir=LR;",
             '  node [fontname="monospace", fontsize=10, shape=box];',
             '  edge [fontname="monospace", fontsize=9];']
    if len(kernels) == 1:
        lines += _kernel_nodes(kernels[0], "", "  ")
    else:
        for i, kernel in enumerate(kernels, 1):
            lines += [f"  subgraph cluster_{i} {{",
                      f"    label={_quote(f'kernel {i} of {len(kernels)}: {kernel.name}')};"]
            lines += _kernel_nodes(kernel, f"k{i}_", "    ")
            lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _kernel_nodes(kernel, prefix, indent):
    from lowering import kir
    header = kir.format_kernel(kernel).splitlines()[:2]
    root = f"{prefix}kernel"
    lines = [f"{indent}{root} [label={_label(*(h.strip() for h in header))}, style=filled, "
             "fillcolor=lightblue];"]
    reasons = []

    def visit(parent, stmts, edge_label=None):
        for s in stmts:
            node = prefix + s.label
            text = kir.format_stmt(s)
            if kir.effects.is_block_barrier(s.effects()):
                head = text.split("  //")[0]
                attrs = dict(label=_label(f"{s.label}: {head}",
                                          *(str(r) for r in s.reasons)),
                             style="filled", fillcolor="mistyrose", color="red")
                reasons.extend(s.reasons)
            else:
                attrs = dict(label=_label(f"{s.label}: {text}"))
                if isinstance(s, (kir.ForLoop, kir.IfThenElse)):
                    attrs.update(style="rounded")
            lines.append(f"{indent}{node} [{_attrs(**attrs)}];")
            edge = f"{indent}{parent} -> {node}"
            lines.append(edge + (f" [label={_quote(edge_label)}];" if edge_label else ";"))
            if isinstance(s, kir.IfThenElse):
                visit(node, s.then_body)
                visit(node, s.else_body, "else")
            else:
                for body in s.bodies():
                    visit(node, body)

    visit(root, kernel.body)
    for r in reasons:
        why = f"{r.kind.value} {'/'.join(r.buffers)}" + (", loop-carried" if r.loop_carried
                                                          else "")
        lines.append(f"{indent}{prefix}{r.first.label} -> {prefix}{r.second.label} "
                     f"[style=dashed, color=red, fontcolor=red, constraint=false, "
                     f"label={_quote(why)}];")
    return lines
