"""The reshape builder: a tensor's elements, in row-major order, in another shape.

The result's root axes are copies of the input's axes, and its logical domain (its shape)
is derived from them by merges and splits, as nvFuser's reshape derives its rfactor
domain: lowering replays them backwards from the shape's indices to the root's, the way it
replays a schedule, so a reshape is no copy and fuses like a view. The shapes are grouped
left to right: each group of input axes whose extents multiply to the product of a group
of result extents is merged into one axis, which is then split into the result's extents.
Products are compared symbolically (integers times sizes, `M*N` against `N*M`), so a
group must be provably equal for every size: `[M, N] -> [M*N]`, `[B, S, H*D] -> [B, S, H,
D]`, `[6, 4] -> [3, 8]`, `[M, N] -> [N, M]` (one group: merged, then split). A size
expression other than a product (`E / 4`) is one opaque factor: `[E] -> [4, E / 4]` is
refused, as it holds only where 4 divides E. Axes of extent 1 take part in no group: the input's are dropped,
and the result's are new broadcast axes (as an input axis declared of size 1 is).
"""

from collections import Counter

from .errors import FusionError
from .ir import extent as ext
from .ir.exprs import ReshapeOp
from .ir.iterdomain import IterDomain, IterKind, Merge, Split
from .ops import _check_known, _check_tensor, _new_tensor
from .slicing import _size


def _factors(e):
    """(integer, Counter of symbolic factors) whose product is extent e."""
    if isinstance(e, int):
        return e, Counter()
    if isinstance(e, ext.Mul):
        (a, fa), (b, fb) = _factors(e.lhs), _factors(e.rhs)
        return a * b, fa + fb
    return 1, Counter([e])


def _product(extents):
    number, symbols = 1, Counter()
    for e in extents:
        n, s = _factors(e)
        number, symbols = number * n, symbols + s
    return number, symbols


def _divides(a, b):
    """Does the product a divide the product b (for every size)?"""
    return b[0] % a[0] == 0 and not (a[1] - b[1])


def _quotient(b, a):
    """The extent b / a of products, where a divides b."""
    result = b[0] // a[0]
    for symbol, count in sorted((b[1] - a[1]).items(), key=lambda sc: str(sc[0])):
        for _ in range(count):
            result = ext.mul(result, symbol)
    return result


def _shape(x, shape):
    """The result's extents, with one -1 (the extent that keeps the element count) solved."""
    if isinstance(shape, (str, int)) or not hasattr(shape, "__len__"):
        raise FusionError("reshape: shape must be a list of sizes")
    sizes = [_size("reshape", v, "size") for v in shape]
    for v in sizes:
        if isinstance(v, int) and (v == 0 or v < -1):
            raise FusionError(f"reshape: size {v} of shape {list(shape)} is neither positive "
                              "nor -1 (the size that keeps the element count)")
    _check_known("reshape", x.fusion, sizes)
    unknown = [i for i, v in enumerate(sizes) if v == -1]
    if len(unknown) > 1:
        raise FusionError(f"reshape: shape {list(shape)} has {len(unknown)} sizes -1; at most "
                          "one size is solved for")
    total = _product(a.extent for a in x.shape_axes)
    if unknown:
        known = _product(v for v in sizes if v != -1)
        if not _divides(known, total):
            raise FusionError(f"reshape: the sizes {_listed(v for v in sizes if v != -1)} do "
                              f"not divide the {_shown(x)} elements of {x.name}")
        sizes[unknown[0]] = _quotient(total, known)
    if _product(sizes) != total:
        raise FusionError(f"reshape: shape {_listed(sizes)} holds "
                          f"{_shown_product(_product(sizes))} elements but {x.name} holds "
                          f"{_shown(x)}; a reshape keeps every element")
    return sizes


def _listed(sizes):
    return f"[{', '.join(str(v) for v in sizes)}]"


def _shown_product(product):
    number, symbols = product
    factors = ([str(number)] if number != 1 or not symbols else []) + \
        [str(s) if isinstance(s, ext.Sym) else f"({s})"
         for s, n in sorted(symbols.items(), key=lambda sc: str(sc[0])) for _ in range(n)]
    return "*".join(factors)


def _shown(x):
    return _shown_product(_product(a.extent for a in x.shape_axes))


def _groups(root, sizes):
    """[(input root axes, result extents)], left to right, each with equal products. A
    group grows on the side whose product divides the other's, on both where neither
    does (M into N of [M, N] -> [N, M]); as the totals are equal, the last group closes
    when both sides run out."""
    ins = [a for a in root if a.extent != 1]
    outs = [v for v in sizes if v != 1]
    groups = []
    while ins and outs:
        group_in, group_out = [ins.pop(0)], [outs.pop(0)]
        while (p_in := _product(a.extent for a in group_in)) != (p_out := _product(group_out)):
            if outs and (_divides(p_out, p_in) or not ins):
                group_out.append(outs.pop(0))        # the result's side is short
            elif ins and (_divides(p_in, p_out) or not outs):
                group_in.append(ins.pop(0))          # the input's side is short
            else:                                    # neither divides: grow both
                group_out.append(outs.pop(0))
                group_in.append(ins.pop(0))
        groups.append((group_in, group_out))
    return groups


def reshape(x, shape):
    """x's elements in row-major order in `shape` (torch.reshape, nvFuser's reshape): sizes
    are integers, names of sizes, size expressions (`M*N`) or one -1, whose product must
    equal x's element count for every size (compared symbolically)."""
    _check_tensor("reshape", x)
    sizes = _shape(x, list(shape) if not isinstance(shape, (str, int)) else shape)
    root = [IterDomain(a.extent, IterKind.broadcast if a.extent == 1 else IterKind.iteration)
            for a in x.shape_axes]
    made = {}                       # result position (of an extent other than 1) -> axis
    position = iter(i for i, v in enumerate(sizes) if v != 1)
    for group_in, group_out in _groups(root, sizes):
        axis = group_in[0]
        for inner in group_in[1:]:
            axis = Merge(axis, inner).output
        for k, extent in enumerate(group_out[:-1]):
            split = Split(axis, extent, inner_split=False)
            rest = _product(group_out[k + 1:])
            split.inner.extent = _quotient(rest, (1, Counter()))   # exact, not a ceildiv
            made[next(position)] = split.outer
            axis = split.inner
        made[next(position)] = axis
    logical = [made.get(i) or IterDomain(1, IterKind.broadcast) for i in range(len(sizes))]
    out = _new_tensor(x.fusion, x.dtype, root)
    out.logical = logical
    x.fusion.add_expr(ReshapeOp(x, out, sizes))
    out.loop = list(logical)
    return out
