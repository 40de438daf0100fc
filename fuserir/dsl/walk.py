"""Tree walks whose depth does not use up the Python stack.

DSL text nests as deep as its author likes: a 1000-term sum is a left-leaning tree 1000
levels deep, `exp(exp(...))` nests calls, and a recursive walk of either hits Python's
recursion limit (1000 frames) long before memory runs out. So the parser and the printer
write each step of a walk as a generator: it yields a child node to have it walked,
receives the child's result as the value of the `yield`, and returns its own result.
`walk` runs those generators on a list used as a stack, so the walk code reads like the
recursive version while the Python stack stays a few frames deep at any depth.
"""

from types import GeneratorType


def walk(root, step):
    """The result of walking `root`: `step(node)` returns either the node's result
    directly (a leaf) or a generator that yields the children it needs walked, receives
    their results, and returns the node's result."""
    return run(step(root), step)


def run(started, step):
    """Finish a walk that `started` (a step's generator, or a leaf's result)."""
    if not isinstance(started, GeneratorType):
        return started
    stack = [started]
    result = None
    while stack:
        try:
            child = stack[-1].send(result)
        except StopIteration as done:
            stack.pop()
            result = done.value
            continue
        result = step(child)
        if isinstance(result, GeneratorType):
            stack.append(result)
            result = None
    return result
