"""DSL text -> lark syntax tree, with every syntax error one located DslError.

`syntax_tree(text, source)` runs lark's LALR parser (grammar.lark; lark's parse loop is
iterative, so depth costs no stack) and turns what lark raises into one line that says
what was found and what could have stood there. `Source` holds the text's lines to show
under an error.
"""

from lark import Lark
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput

from ..errors import DslError

LARK = Lark.open("grammar.lark", rel_to=__file__, parser="lalr", propagate_positions=True)


class Source:
    """The text being parsed, to locate errors in."""

    def __init__(self, text, filename):
        self.lines = text.splitlines()
        self.filename = filename

    def error(self, message, line, column):
        source_line = self.lines[line - 1] if 0 < line <= len(self.lines) else None
        return DslError(message, self.filename, line, column, source_line)


def syntax_tree(text, source):
    """lark's tree of `text`; a syntax error is a DslError located in `source`."""
    try:
        return LARK.parse(text)
    except UnexpectedInput as error:
        raise source.error(_describe(error), *_position(error, source)) from None


# -- describing what lark found ------------------------------------------------------------

_EXPRESSION_START = {"NAME", "INT", "FLOAT", "MINUS", "LPAR", "LSQB", "LBRACE", "STRING",
                     "INF", "NAN", "TRUE", "FALSE"}
_OPERATORS = {"PLUS", "MINUS", "STAR", "SLASH", "COMPARE"}
_TERMINAL_WORDS = {"NAME": "a name", "INT": "an integer", "FLOAT": "a number",
                   "STRING": "a string", "COMPARE": "a comparison", "$END": "end of input"}


def _describe(error):
    """One line: what was found, and what could have stood there instead."""
    if isinstance(error, UnexpectedCharacters):
        return f"unexpected character '{error.char}'"
    token = None if isinstance(error, UnexpectedEOF) else error.token
    if token is None or token.type == "$END":
        found = "end of input"
    elif token.type == "NAME":
        found = f"name '{token}'"
    elif token.type in ("INT", "FLOAT"):
        found = f"number {token}"
    else:
        found = f"'{token}'"
    accepts = None if isinstance(error, UnexpectedEOF) else error.accepts  # exact, if known
    expected = _describe_expected(set(accepts or error.expected))
    return f"unexpected {found}, expected {expected}" if expected else f"unexpected {found}"


def _describe_expected(expected):
    words = []
    if {"NAME", "INT", "LPAR", "MINUS"} <= expected:
        words.append("an expression")
        expected -= _EXPRESSION_START
    if {"PLUS", "STAR", "COMPARE"} <= expected:
        words.append("an operator")
        expected -= _OPERATORS
    words += sorted(_TERMINAL_WORDS.get(name) or f"'{LARK.get_terminal(name).pattern.value}'"
                    for name in expected)
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " or " + words[-1]


def _position(error, source):
    """Where the error is; at the end of the input, just after the last token."""
    token = getattr(error, "token", None)
    if token is not None and token.type == "$END" and token.end_line is not None:
        return token.end_line, token.end_column  # lark gives $END the last token's place
    line, column = getattr(error, "line", None), getattr(error, "column", None)
    if not isinstance(line, int) or line < 1:
        last = source.lines[-1] if source.lines else ""
        return max(len(source.lines), 1), len(last) + 1
    return line, column
