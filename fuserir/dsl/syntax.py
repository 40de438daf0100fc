"""DSL text -> lark syntax tree, with every syntax error one located DslError.

`syntax_tree(text, filename)` runs lark's LALR parser (grammar.lark; lark's parse loop is
iterative, so depth costs no stack) and turns what lark raises into one line that says
what was found and what could have stood there. `read_file` decodes a file as UTF-8 and
locates an invalid byte the same way. `Source` holds the text's lines to show under an
error: lines as lark counts them, that is split at "\n" only (str.splitlines also splits at
form feeds, \\u2028 and the like, which would show the wrong line), with characters that
would not print as one column (controls, line separators) shown as spaces, so the caret
stays under the column it names.

Before lark sees the text, `check_nesting` scans it for nesting deeper than the IR's
MAX_EXPRESSION_DEPTH (unary minus signs, calls, parentheses, nested lists: see there)
and refuses it at the token where the limit is passed: a cheap linear scan, where lark
would first spend seconds building the deep tree that the builder would then refuse.

One case lark reports late: newlines are whitespace, so an expression left unfinished at
the end of a line (`y = x +`) is only noticed at the next line's token (`output`, `}`, or
the `=` of `z = ...` after `z` was taken as the operand). That is reported as an
unexpected end of expression just after the operator, on the operator's line.
"""

import functools
import pathlib
import re
import unicodedata

from ..cache_dir import cache_root
from ..errors import DslError
from ..ir.fusion import MAX_EXPRESSION_DEPTH


def _reserve_output(token):
    """`output` starts a statement wherever it stands. The contextual lexer would read it as
    a name where an operand may stand (`y = x +` then `output y`), making `x + output`
    an expression and the error appear later and elsewhere."""
    return token.update(type="OUTPUT") if token == "output" else token


@functools.cache
def parser():
    """lark's LALR parser of grammar.lark, built on the first parse, not at import: building
    it takes a tenth of a second, and `import fuserir` should not pay for it (nor import
    lark) when no DSL text is parsed. lark keeps its grammar analysis in the cache
    directory (fuserir.cache_dir: lark/), where a later process loads it in milliseconds;
    lark checks the grammar, the options and its own version against the file, and builds
    afresh where they differ or the file cannot be read or written."""
    from lark import Lark
    cache = False
    try:
        directory = cache_root() / "lark"
        directory.mkdir(parents=True, exist_ok=True)
        cache = str(directory / "grammar.cache")
    except OSError:
        pass
    return Lark.open("grammar.lark", rel_to=__file__, parser="lalr", propagate_positions=True,
                     lexer_callbacks={"NAME": _reserve_output}, cache=cache)


class Source:
    """The text being parsed, to locate errors in."""

    def __init__(self, text, filename):
        self.lines = text.split("\n")
        if self.lines[-1] == "":
            self.lines.pop()  # a final newline ends the last line, it does not start one
        self.filename = filename

    def error(self, message, line, column):
        source_line = self.lines[line - 1] if 0 < line <= len(self.lines) else None
        return DslError(message, self.filename, line, column, _printable(source_line))


def _printable(line):
    """`line` with every character that would not print as one column replaced by a space
    (tabs are kept: the caret line copies them)."""
    if line is None:
        return None
    line = line.removesuffix("\r")
    return "".join(c if c.isprintable() or c == "\t" else " " for c in line)


def read_file(path):
    """The text of the DSL file at `path` (UTF-8, a byte order mark allowed); an invalid
    byte is a DslError located at it."""
    data = pathlib.Path(path).read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        start = error.start
        line_start = data.rfind(b"\n", 0, start) + 1
        line_end = data.find(b"\n", start)
        line_bytes = data[line_start:line_end if line_end >= 0 else len(data)]
        line = data.count(b"\n", 0, start) + 1
        column = len(data[line_start:start].decode("utf-8-sig", "replace")) + 1
        raise DslError(f"invalid UTF-8 (byte 0x{data[start]:02x}); a DSL file is UTF-8 text",
                       str(path), line, column,
                       _printable(line_bytes.decode("utf-8-sig", "replace"))) from None


def syntax_tree(text, source):
    """lark's tree of `text`; a syntax error is a DslError located in `source`."""
    check_nesting(text, source)
    from lark.exceptions import UnexpectedInput
    try:
        return parser().parse(text)
    except UnexpectedInput as error:
        late = _unfinished_expression(error)
        if late is not None:
            raise source.error(*late) from None
        raise source.error(_describe(error), *_position(error, source)) from None


# -- nesting -------------------------------------------------------------------------------

# What the scan tells apart: strings and comments (skipped: they may hold brackets), names
# and numbers, brackets, operators (a minus after one, or after an opening bracket, is a
# unary minus), and any other character. A number's exponent sign (1e-5) reads as a binary
# minus after the name-like "1e", which nests nothing, as a binary minus should.
_SCAN = re.compile(r'"[^"\n]*"|#[^\n]*|[A-Za-z0-9_.]+|[<>=!]=|[-+*/<>=,:]|[(\[{]|[)\]}]|\n|\S')
_OPENING, _CLOSING = "([{", ")]}"
_BEFORE_UNARY = frozenset("+-*/<>=,:([{") | {"<=", ">=", "==", "!="}


def check_nesting(text, source, limit=None):
    """Refuse `text` if an expression in it nests deeper than `limit` levels, as a DslError
    at the token that passes the limit. A level is a unary minus, a call, a parenthesis
    (one after a unary minus is the minus's own: `-(-(-x))`, as the printer writes it, is 3
    deep) and a list or map inside a list or map (the outermost one is a call's argument,
    a leaf); the braces of a fusion or schedule block are none. So printed text nests no
    deeper than its fusion's operations. Brackets that do not match are left to lark."""
    limit = MAX_EXPRESSION_DEPTH if limit is None else limit
    depth, pending, outer, previous = 0, 0, [], None
    line, line_start = 1, 0
    for match in _SCAN.finditer(text):
        token = match.group()
        if token == "\n":
            line, line_start = line + 1, match.end()
            continue
        first = token[0]
        if first == '"' or first == "#":
            continue
        if token == "-" and (previous is None or previous in _BEFORE_UNARY):
            pending += 1                            # a unary minus: one level more
            if depth + pending > limit:
                raise _too_deep(source, limit, line, match.start() - line_start + 1)
        elif first in _OPENING:
            enclosing = outer[-1][1] if outer else None
            outer.append((depth, first))
            if first == "(":
                depth += max(pending, 1)
            elif first == "[" or previous in _BEFORE_UNARY:     # not a block's brace
                depth += pending + (enclosing in ("[", "{"))
            pending = 0
            if depth > limit:
                raise _too_deep(source, limit, line, match.start() - line_start + 1)
        elif first in _CLOSING:
            depth = outer.pop()[0] if outer else depth
            pending = 0
        elif not (first.isalnum() or first in "_."):
            pending = 0                             # an operator: the minus signs applied
        previous = token if len(token) <= 2 else "name"
    return depth


def _too_deep(source, limit, line, column):
    return source.error(f"expression nested deeper than {limit} levels (each call, "
                        "parenthesis and unary minus nests one); fuserir supports "
                        f"expressions up to {limit} deep", line, column)


# -- describing what lark found ------------------------------------------------------------

_EXPRESSION_START = {"NAME", "INT", "FLOAT", "MINUS", "LPAR", "LSQB", "LBRACE", "STRING",
                     "INF", "NAN", "TRUE", "FALSE"}
_OPERATORS = {"PLUS", "MINUS", "STAR", "SLASH", "COMPARE"}
_TERMINAL_WORDS = {"NAME": "a name", "INT": "an integer", "FLOAT": "a number",
                   "STRING": "a string", "COMPARE": "a comparison", "$END": "end of input"}


def _describe(error):
    """One line: what was found, and what could have stood there instead."""
    from lark.exceptions import UnexpectedCharacters
    if isinstance(error, UnexpectedCharacters):
        return f"unexpected character {_character(error.char)}"
    accepts = getattr(error, "accepts", None)  # exact, if known
    expected = _describe_expected(set(accepts or error.expected))
    found = _found(getattr(error, "token", None))
    return f"unexpected {found}, expected {expected}" if expected else f"unexpected {found}"


def _character(char):
    if char.isprintable() and not char.isspace():
        return f"'{char}'"
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" ({name})" if name else "")


def _found(token):
    if token is None or token.type == "$END":
        return "end of input"
    if token.type == "NAME":
        return f"name '{token}'"
    if token.type in ("INT", "FLOAT"):
        return f"number {_shortened(token)}"
    return f"'{token}'"


def _shortened(text, limit=40):
    text = str(text)
    return text if len(text) <= limit else f"{text[:20]}...{text[-8:]} ({len(text)} characters)"


def _describe_expected(expected):
    words = []
    if {"NAME", "INT", "LPAR", "MINUS"} <= expected:
        words.append("an expression")
        expected -= _EXPRESSION_START
    if {"PLUS", "STAR", "COMPARE"} <= expected:
        words.append("an operator")
        expected -= _OPERATORS
    words += sorted(_TERMINAL_WORDS.get(name) or f"'{parser().get_terminal(name).pattern.value}'"
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


def _unfinished_expression(error):
    """(message, line, column) for an expression that ends after an operator (or a
    statement after its '='), located just after that token; None for other errors."""
    from lark.exceptions import UnexpectedToken
    if not isinstance(error, UnexpectedToken) or error.interactive_parser is None:
        return None
    stack = error.interactive_parser.parser_state.value_stack
    token = error.token
    if token.type == "EQUAL" and len(stack) >= 2 and _is_token(stack[-1], "NAME"):
        # `y = x +` / `z = ...`: lark took z as the operand and then found '='.
        last, found, where = stack[-2], f"'{stack[-1]} =' (the next statement)", stack[-1]
    elif stack:
        last, found, where = stack[-1], _found(token), token
    else:
        return None
    if not _is_token(last, *_OPERATORS, "EQUAL"):
        return None
    if where.type == "$END":
        found_where = found
    elif where.line > last.line:
        found_where = f"{found} on line {where.line}"
    else:
        return None  # on the same line the usual message, at the token, says it
    if last.type == "EQUAL":
        message = ("unexpected end of statement after '=': expected an expression, found "
                   f"{found_where}")
    else:
        message = (f"unexpected end of expression after '{last}': expected an operand, "
                   f"found {found_where}")
    return message, last.end_line, last.end_column


def _is_token(value, *types):
    from lark import Token
    return isinstance(value, Token) and value.type in types
