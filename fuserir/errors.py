"""Exception types users see.

Every error fuserir raises on bad input is one of these, with a message that names the
problem and where it is (tensor, axis, DSL line:column). They live in their own module so
that every layer (IR, DSL, evaluator, later lowering) can raise them without import cycles.
"""


class FuserirError(Exception):
    """Base class of every error fuserir raises on bad input."""


class FusionError(FuserirError):
    """An ill-formed fusion definition: dtype or shape mismatch, bad axis, wrong arity."""


class LiteralError(FusionError):
    """A number that cannot take the dtype it would have (a literal operand of fuserir.ops).
    `argument` names the operand it was passed as ("a", "b"), so that the DSL can point at
    the literal rather than at the operator."""

    def __init__(self, message, argument=None):
        super().__init__(message)
        self.argument = argument


class ScheduleError(FuserirError):
    """An illegal scheduling transform; the message names the tensor and the axis."""


class EvaluationError(FuserirError):
    """Inputs that do not fit the fusion handed to the reference evaluator."""


class DslError(FuserirError):
    """A syntax or semantic error in DSL text, located as file:line:col with a caret."""

    def __init__(self, message, filename="<string>", line=None, column=None, source_line=None):
        self.message = message
        self.filename = filename
        self.line = line
        self.column = column
        self.source_line = source_line
        super().__init__(self._format())

    def _format(self):
        if self.line is None:
            return f"{self.filename}: {self.message}"
        text = f"{self.filename}:{self.line}:{self.column}: {self.message}"
        if self.source_line is not None:
            # the caret line copies the tabs before the column, so the caret lines up
            before = self.source_line[:max(self.column, 1) - 1]
            caret = "".join(c if c == "\t" else " " for c in before)
            caret += " " * (max(self.column, 1) - 1 - len(before)) + "^"
            text += f"\n    {self.source_line}\n    {caret}"
        return text
