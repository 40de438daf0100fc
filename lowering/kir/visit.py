"""Visitors and mutators over kernel IR: the traversals the passes share.

A pass that looks at, or rewrites, the statements (or expressions) of some classes
subclasses one of these and defines one method per class it is about, named after the
class: `visit_Store`, `mutate_ExprStmt`, `mutate_Load`. Everything else is traversed in
program order: a statement's nested lists (kir.Stmt.bodies: a loop's body, an if's then and
else branches), an expression's operands (the ScalarExpr fields of its dataclass). The
recursion lives here once, so that a pass says only what it does to the nodes it is about
(as TVM's StmtExprVisitor / StmtExprMutator and nvFuser's kir::IrVisitor /
kir::ExprMutator do).

kir's traversal module keeps the helpers every layer uses (walk, walk_expr, substitute,
copy_stmt, relabel); the visitors are here, not re-exported as `kir.<name>`, because only
lowering's passes rewrite kernel IR.
"""

from dataclasses import fields, replace

from .. import kir


def _method(obj, prefix, node):
    return getattr(obj, prefix + type(node).__name__, None)


class StmtVisitor:
    """Calls visit_<Class>(stmt) for every statement of a list, in program order; a
    statement whose class has no such method goes to generic_visit, which visits its
    nested lists. A visit_ method that should look inside its statement too calls
    generic_visit itself."""

    def visit(self, stmts):
        for s in stmts:
            self.visit_stmt(s)

    def visit_stmt(self, stmt):
        (_method(self, "visit_", stmt) or self.generic_visit)(stmt)

    def generic_visit(self, stmt):
        for body in stmt.bodies():
            self.visit(body)


class StmtMutator:
    """Rewrites statement lists. mutate_<Class>(stmt) returns what replaces the statement:
    a statement, a list of statements (spliced in; [] drops it) or None (dropped). What it
    returns is not traversed again. A statement whose class has no such method goes to
    generic_mutate, which rewrites its nested lists in place and keeps it."""

    def mutate(self, stmts):
        """The rewritten list (a new list; the statements kept are the same objects)."""
        out = []
        for s in stmts:
            new = self.mutate_stmt(s)
            if isinstance(new, list):
                out.extend(new)
            elif new is not None:
                out.append(new)
        return out

    def mutate_stmt(self, stmt):
        return (_method(self, "mutate_", stmt) or self.generic_mutate)(stmt)

    def generic_mutate(self, stmt):
        for body in stmt.bodies():
            body[:] = self.mutate(body)
        return stmt


class ExprMutator:
    """Rewrites a scalar expression. mutate_<Class>(expr) returns the expression that
    replaces it; an expression whose class has no such method goes to generic_mutate,
    which mutates its operands and rebuilds it (dataclasses.replace: expressions are
    immutable) only where one changed. An expression nothing changed in is returned as
    the very same object, so identities survive (index ranges and lane proofs key on
    them)."""

    def mutate(self, expr):
        return (_method(self, "mutate_", expr) or self.generic_mutate)(expr)

    def generic_mutate(self, expr):
        changes = {}
        for f in fields(expr):
            value = getattr(expr, f.name)
            if isinstance(value, kir.ScalarExpr):
                new = self.mutate(value)
                if new is not value:
                    changes[f.name] = new
        return replace(expr, **changes) if changes else expr


def find_place(stmts, predicate):
    """(statement list, index) of the first statement, in program order, for which
    `predicate` holds; None where none does."""
    for i, s in enumerate(stmts):
        if predicate(s):
            return stmts, i
        for body in s.bodies():
            found = find_place(body, predicate)
            if found is not None:
                return found
    return None
