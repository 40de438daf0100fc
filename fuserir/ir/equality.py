"""Structural equality of fusions: same graph, same types, same schedules.

Two fusions are structurally equal when their signatures are: tensors and expressions in
topological order, each tensor's dtype, memory type, placement (compute-at, circular
buffering) and domains (root, logical, loop, and the transforms between them, axes numbered
in order of appearance), and the declared run-time scalars with their defaults. Names are
compared for inputs, outputs and tensors a user named; unnamed intermediates are
identified by position, so a printed-and-reparsed fusion compares equal to the original
whatever counter produced their names.
"""

from .iterdomain import history
from .tensor import Scalar


def _domain_signature(tv):
    numbers = {}

    def ref(axis):
        if axis not in numbers:
            numbers[axis] = len(numbers)
        return numbers[axis]

    def axis_sig(axis):
        return (ref(axis), str(axis.extent), axis.kind.value, axis.parallel.value)

    root = tuple(axis_sig(a) for a in tv.root)
    transforms = []
    for t in history(tv.loop + tv.logical):
        inputs = tuple(axis_sig(i) for i in t.inputs)
        outputs = tuple(axis_sig(o) for o in t.outputs)
        params = (str(t.factor), t.inner_split) if hasattr(t, "factor") else ()
        transforms.append((type(t).__name__, inputs, outputs, params))
    logical = tuple(axis_sig(a) for a in tv.logical)
    loop = tuple(axis_sig(a) for a in tv.loop)
    return root, tuple(transforms), logical, loop


def fusion_signature(fusion):
    tensors = fusion.tensors
    # inputs and outputs are the fusion's interface: always by name (run() binds and
    # returns them by name), however the name was given
    interface = set(fusion.inputs) | set(fusion.outputs)
    ident = {t: (t.name if t.is_named or t in interface else f"#{i}")
             for i, t in enumerate(tensors)}

    def operand(v):
        if isinstance(v, Scalar):
            return ("scalar", repr(v.value), v.dtype.value)
        return ident[v]

    tensor_sigs = []
    for t in tensors:
        consumer = t.compute_at_consumer
        tensor_sigs.append((ident[t], t.dtype.value, t.memory_type.value, t.is_input,
                            t.is_output, t.compute_at_pos,
                            ident[consumer] if consumer is not None else None,
                            t.circular_buffer_stages, t.warp_specialized, t.producer_registers,
                            t.swizzle_row,
                            t.row_padding, t.reuse_shared, t.grid_reduction,
                            _domain_signature(t)))
    expr_sigs = []
    for e in fusion.exprs:
        attrs = tuple((k, str(v)) for k, v in e.attributes())
        expr_sigs.append((type(e).__name__, e.op, tuple(operand(v) for v in e.inputs),
                          ident[e.output], attrs))
    return (fusion.name, tuple(ident[t] for t in fusion.inputs),
            tuple(ident[t] for t in fusion.outputs), tuple(tensor_sigs), tuple(expr_sigs),
            tuple(fusion.scalars.items()))


def structurally_equal(a, b):
    return fusion_signature(a) == fusion_signature(b)


def first_difference(a, b):
    """A short description of where two fusions first differ (None if they do not)."""
    sa, sb = fusion_signature(a), fusion_signature(b)
    labels = ("name", "inputs", "outputs", "tensors", "exprs", "run-time scalars")
    for label, x, y in zip(labels, sa, sb):
        if x != y:
            if isinstance(x, tuple) and isinstance(y, tuple) and label in ("tensors", "exprs"):
                for i, (u, v) in enumerate(zip(x, y)):
                    if u != v:
                        return f"{label}[{i}]: {u} != {v}"
                return f"{label}: {len(x)} vs {len(y)} entries"
            return f"{label}: {x} != {y}"
    return None


