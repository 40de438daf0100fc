"""Matmuls: `matmul` (one MatmulOp, leading batch axes broadcast as torch.matmul's),
`bmm` (torch.bmm's stricter form) and `linear` (x @ W^T + b, as
torch.nn.functional.linear, any number of leading axes of x).

One MatmulOp is a multiply fused with a sum over K on the tensor cores, f32 out; its
output root is [batch..., M, N, rK]. An operand's batch axes are its axes before the last
two, aligned to the right with the output's (an operand with fewer has the rest shared
across the batch); each is the output's extent or a broadcast axis (read at 0). The
layout (TT, TN, NT, NN) says how each operand's last two axes hold its matrix. The
builders sit beside fuserir.ops (which re-exports them) because they check more than a
pointwise op and build the epilogue of linear from ops' builders.
"""

from .dtypes import DataType
from .errors import FusionError
from .ir.exprs import LAYOUTS, MatmulOp
from .ir.iterdomain import IterDomain, IterKind
from .ops import _check_tensor, _fusion_of, _new_tensor, broadcast, cast, set


def _shape(t):
    return "[" + ", ".join(str(a.extent) for a in t.shape_axes) + "]"


def _batch_root(op, a, b):
    """The output's batch axes: A's and B's axes before their last two, right-aligned,
    each pair of one extent or one of them a broadcast axis."""
    nb = max(a.rank, b.rank) - 2
    root = []
    for i in range(nb):
        axes = [(t, t.shape_axes[i - (nb - (t.rank - 2))]) for t in (a, b)
                if i >= nb - (t.rank - 2)]
        concrete = [(t, x) for t, x in axes if not x.is_broadcast]
        for (t0, x0), (t1, x1) in zip(concrete, concrete[1:]):
            if x0.extent != x1.extent:
                raise FusionError(f"{op}: batch axis {i} of the result: {x0.extent} "
                                  f"({t0.name} {_shape(t0)}) vs {x1.extent} ({t1.name} "
                                  f"{_shape(t1)}); batch extents must be equal, or one a "
                                  "broadcast axis")
        root.append(IterDomain(concrete[0][1].extent, IterKind.iteration) if concrete
                    else IterDomain(1, IterKind.broadcast))
    return root


def matmul(a, b, layout="TT"):
    """f32 matmul of f16/bf16 operands stored per layout (TT, TN, NT, NN) in their last two
    axes; axes before those are batch axes, broadcast as torch.matmul's (see the module
    header). See MatmulOp."""
    _check_tensor("matmul", a, "A")
    _check_tensor("matmul", b, "B")
    if layout not in LAYOUTS:
        raise FusionError(f"matmul: unknown layout {layout!r}; expected one of "
                          f"{', '.join(LAYOUTS)}")
    _fusion_of("matmul", [a, b])
    if b is a:
        # x^T x: the two operands are cached and read differently (each its own shared
        # tile and register fragment layout), so B is a copy of A, a tensor of its own
        b = set(a)
    for name, t in (("A", a), ("B", b)):
        if t.rank < 2:
            raise FusionError(f"matmul: {name} ({t.name}) must have at least 2 axes (a "
                              f"matrix, after any batch axes), has {t.rank}")
        if t.dtype not in (DataType.f16, DataType.bf16):
            raise FusionError(f"matmul: {name} ({t.name}) must be f16 or bf16, got {t.dtype}")
    if a.dtype is not b.dtype:
        raise FusionError(f"matmul: A ({a.name}) is {a.dtype} but B ({b.name}) is {b.dtype}")
    m_axis, ka = (a.shape_axes[-2], a.shape_axes[-1]) if layout[0] == "T" else \
        (a.shape_axes[-1], a.shape_axes[-2])
    kb, n_axis = (b.shape_axes[-2], b.shape_axes[-1]) if layout[1] == "T" else \
        (b.shape_axes[-1], b.shape_axes[-2])
    if ka.extent != kb.extent:
        raise FusionError(f"matmul: K extents differ: {ka.extent} ({a.name}) vs {kb.extent} "
                          f"({b.name}) for layout {layout}")
    root = _batch_root("matmul", a, b) + [
        IterDomain(m_axis.extent), IterDomain(n_axis.extent),
        IterDomain(ka.extent, IterKind.reduction)]
    out = _new_tensor(a.fusion, DataType.f32, root)
    a.fusion.add_expr(MatmulOp(a, b, out, layout))
    return out


def bmm(a, b, layout="TT"):
    """The batched matmul of torch.bmm: A and B of 3 axes, the first (the batch) of one
    extent; per layout as matmul."""
    for name, t in (("A", a), ("B", b)):
        _check_tensor("bmm", t, name)
        if t.rank != 3:
            raise FusionError(f"bmm: {name} ({t.name}) must have 3 axes [batch, rows, "
                              f"columns], has {t.rank}; matmul broadcasts batch axes")
    if a.shape_axes[0].extent != b.shape_axes[0].extent:
        raise FusionError(f"bmm: batch extents differ: {a.shape_axes[0].extent} ({a.name}) "
                          f"vs {b.shape_axes[0].extent} ({b.name})")
    return matmul(a, b, layout)


def linear(x, weight, bias=None):
    """x @ weight^T + bias, as torch.nn.functional.linear: x [..., K] (any leading axes: a
    batched matmul sharing weight) and weight [N, K] of one type, f16 or bf16 (layout TN,
    accumulated in f32); bias [N] (any float type) is added in f32 and the sum rounded once
    to x's type."""
    _check_tensor("linear", x, "x")
    _check_tensor("linear", weight, "weight")
    for name, t, rank in (("x", x, "at least 2"), ("weight", weight, "2")):
        if t.rank < 2 or (t is weight and t.rank != 2):
            raise FusionError(f"linear: {name} ({t.name}) must have {rank} axes, has "
                              f"{t.rank}")
        if t.dtype not in (DataType.f16, DataType.bf16):
            raise FusionError(f"linear: {name} ({t.name}) must be f16 or bf16 (the tensor "
                              f"cores' operands), got {t.dtype}")
    k, j = x.shape_axes[-1].extent, weight.shape_axes[1].extent
    if k != j:
        raise FusionError(f"linear: x ({x.name}) has rows of {k} but weight "
                          f"({weight.name}) rows of {j}: they must be equal (K)")
    y = matmul(x, weight, layout="TN")
    if bias is not None:
        _check_tensor("linear", bias, "bias")
        n = weight.shape_axes[0].extent
        if bias.rank != 1 or bias.shape_axes[0].extent != n:
            raise FusionError(f"linear: bias ({bias.name}) must be [{n}], one value per "
                              f"row of weight ({weight.name}), is {_shape(bias)}")
        if not bias.dtype.is_float:
            raise FusionError(f"linear: bias ({bias.name}) is {bias.dtype}; it must be a "
                              "float")
        f32 = bias if bias.dtype is DataType.f32 else cast(bias, DataType.f32)
        y = y + broadcast(f32, [True] * (y.rank - 1) + [False])
    return cast(y, x.dtype)
