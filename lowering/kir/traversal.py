"""Walking and rewriting kernel IR: every statement in order (walk), a statement's own
expressions (expressions), every subexpression (walk_expr), statement labels (relabel),
substitution, copies and retagging, and the names a kernel holds (the user's and
lowering's namespaces, kept apart by key).
"""

from dataclasses import fields, replace

from .expressions import ScalarExpr, Var
from .statements import AccessInfo, ScalarParam, Stmt


# ---------------------------------------------------------------------------------------
# Names: the user's and lowering's namespaces
# ---------------------------------------------------------------------------------------
# A kernel holds names from two sources: the user's (tensors, sizes, run-time scalars, the
# fusion: `user=True` on Buffer, Var and Kernel) and lowering's (loop indices, strides,
# accumulators, scratch, workspaces). They are kept as written, in dumps and messages,
# and told apart by key: a user's size `i0` and the loop index `i0` are two variables. The
# CUDA emitter gives every key its own C identifier (codegen.cuda: user names mangled so
# that they meet neither generated names nor C/CUDA keywords and built-ins); the
# interpreter binds variables by key.


def arg_name(kernel, param):
    """The key under which run_kernel, launch and bind take the value of `param` (a
    TensorParam, Workspace or ScalarParam): its name, except for a scalar whose name a
    tensor or workspace of the kernel also has (a user may name a size like a tensor,
    `fusion f(N: f32[N])`): `scalar:<name>`."""
    if isinstance(param, ScalarParam):
        name = param.var.name
        taken = {p.buffer.name for p in kernel.tensor_params}
        taken.update(w.buffer.name for w in kernel.workspaces)
        return f"scalar:{name}" if name in taken else name
    return param.buffer.name


def scalar_args(kernel, values):
    """{argument name (arg_name): value} of the kernel's scalar parameters, from `values`
    ({scalar name: value})."""
    return {arg_name(kernel, p): values[p.var.name] for p in kernel.scalar_params}


def walk(stmts):
    """Every statement of a statement list, depth first, in program order."""
    for s in stmts:
        yield s
        for body in s.bodies():
            yield from walk(body)


def expressions(stmt):
    """The scalar expressions a statement evaluates itself: its expression fields, in
    order (not those of the statements nested in it)."""
    return [value for value in (getattr(stmt, f.name) for f in fields(stmt))
            if isinstance(value, ScalarExpr)]


def retag_accesses(stmt, chosen, tag):
    """Retag the accesses a statement makes itself (its effects) for which `chosen(access)`
    holds: the field holding each one's kir.AccessInfo becomes tag(that info)."""
    infos = {id(a.info) for a in stmt.effects().accesses
             if a.info is not None and chosen(a)}
    for f in fields(stmt):
        value = getattr(stmt, f.name)
        if isinstance(value, AccessInfo) and id(value) in infos:
            setattr(stmt, f.name, tag(value))


def relabel(stmts, prefix="S"):
    """Number statements S1, S2, ... in program order (dumps read top to bottom)."""
    for i, s in enumerate(walk(stmts), 1):
        s.label = f"{prefix}{i}"


def substitute(expr, mapping):
    """`expr` with every Var whose id is in `mapping` replaced by mapping[id(var)]."""
    if isinstance(expr, Var):
        return mapping.get(id(expr), expr)
    if not isinstance(expr, ScalarExpr) or not expr.children():
        return expr
    changes = {}
    for f in fields(expr):
        value = getattr(expr, f.name)
        if isinstance(value, ScalarExpr):
            new = substitute(value, mapping)
            if new is not value:
                changes[f.name] = new
    return replace(expr, **changes) if changes else expr


def copy_stmt(stmt, mapping, access=None):
    """A fresh copy of `stmt` (and its bodies) with `mapping` substituted in every
    expression (see substitute); `access(old AccessInfo) -> AccessInfo` may retag the
    shared-memory accesses of the copy."""
    changes = {"label": None}
    for f in fields(stmt):
        value = getattr(stmt, f.name)
        if isinstance(value, ScalarExpr):
            changes[f.name] = substitute(value, mapping)
        elif isinstance(value, list) and value and isinstance(value[0], Stmt):
            changes[f.name] = [copy_stmt(s, mapping, access) for s in value]
        elif isinstance(value, AccessInfo) and access is not None:
            changes[f.name] = access(value)
    return replace(stmt, **changes)


def walk_expr(expr):
    yield expr
    for c in expr.children():
        yield from walk_expr(c)
