"""Every DSL error path: a DslError whose text is `file:line:col: message`, the offending
line and a caret under the column; never a traceback from lark or the IR."""

import ml_dtypes
import numpy as np
import pytest

import fuserir
from fuserir import DslError, FusionError, ScheduleError

HEADER = "fusion f(x: f32[M, N], b: f32[N]) {\n"
BODY = HEADER + "  y = relu(x)\n  output y\n}\n"


def schedule(*statements):
    """The fusion BODY followed by a schedule block holding `statements` (line 6 on)."""
    return BODY + "schedule f {\n" + "".join(f"  {s}\n" for s in statements) + "}\n"


def expected_message(text, line, column, message):
    source_line = text.splitlines()[line - 1]
    return f"t.fz:{line}:{column}: {message}\n    {source_line}\n    {' ' * (column - 1)}^"


def parse_error(text):
    with pytest.raises(DslError) as caught:
        fuserir.parse(text, "t.fz")
    return caught.value


def check(text, line, column, message):
    error = parse_error(text)
    assert (error.filename, error.line, error.column) == ("t.fz", line, column)
    assert error.message == message
    assert str(error) == expected_message(text, line, column, message)
    return error


SYNTAX_ERRORS = [
    (HEADER + "  y = relu(x, )\n  output y\n}\n", 2, 15,
     "unexpected ')', expected an expression"),
    (HEADER + "  y = relu(x))\n  output y\n}\n", 2, 14,
     "unexpected ')', expected 'output', '}' or a name"),
    (HEADER + "  y = relu(x) @ 2\n  output y\n}\n", 2, 15, "unexpected character '@'"),
    (HEADER + "  y = x +* 2\n  output y\n}\n", 2, 10, "unexpected '*', expected an expression"),
    (HEADER + "  y = relu(x) x\n  output y\n}\n", 3, 3, "unexpected 'output', expected ',' or '='"),
    (HEADER + "  y relu(x)\n  output y\n}\n", 2, 5, "unexpected name 'relu', expected ',' or '='"),
    (HEADER + "  y = sum(x, axes=[1 2])\n  output y\n}\n", 2, 22,
     "unexpected number 2, expected an operator, ',' or ']'"),
    (HEADER + "  y = x < y < b\n  output y\n}\n", 2, 13,
     "unexpected '<', expected '+', '-', 'output', '}' or a name"),
    ("fusion f(x f32[N]) {\n}\n", 1, 12, "unexpected name 'f32', expected ':'"),
    ("fusion f(x: f32[N] {\n}\n", 1, 20, "unexpected '{', expected ')' or ','"),
    ("fusion f(x: f32[N]) {\n  output\n}\n", 3, 1, "unexpected '}', expected a name"),
    (schedule("y.split(0 4)"), 6, 13, "unexpected number 4, expected an operator, ')' or ','"),
    (BODY + "schedule f {\n  y.split(0, 4)\n", 6, 16,
     "unexpected end of input, expected '}' or a name"),
    ("fusion f(x: f32[N]) {\n  y = relu(x)\n  output y\n", 3, 11,
     "unexpected end of input, expected ',', 'output', '}' or a name"),
    ("y = relu(x)\n", 1, 1,
     "unexpected name 'y', expected 'fusion', 'schedule' or end of input"),
]


@pytest.mark.parametrize("text, line, column, message", SYNTAX_ERRORS)
def test_syntax_errors_are_one_line_explanations(text, line, column, message):
    error = check(text, line, column, message)
    assert error.__cause__ is None and error.__suppress_context__, "no lark traceback"


UNKNOWN_NAMES = [
    (HEADER + "  y = relu(q)\n  output y\n}\n", 2, 12, "unknown tensor 'q'"),
    (HEADER + "  y = relu(xx)\n  output y\n}\n", 2, 12,
     "unknown tensor 'xx'; did you mean 'x'?"),
    (HEADER + "  z = relu(y)\n  y = exp(x)\n  output y\n}\n", 2, 12,
     "unknown tensor 'y'"),
    (HEADER + "  y = relux(x)\n  output y\n}\n", 2, 7,
     "unknown operation 'relux'; did you mean 'relu'?"),
    (HEADER + "  y = frobnicate(x)\n  output y\n}\n", 2, 7, "unknown operation 'frobnicate'"),
    ("fusion f(x: f8[N]) {\n  y = relu(x)\n  output y\n}\n", 1, 13,
     "unknown dtype 'f8'; expected one of f16, bf16, f32, f64, i32, i64, bool"),
    (HEADER + "  y = cast(x, f8)\n  output y\n}\n", 2, 15,
     "unknown dtype 'f8'; expected one of f16, bf16, f32, f64, i32, i64, bool, welford"),
    (HEADER + "  y = cast(x, x + 1)\n  output y\n}\n", 2, 15,
     "cast: dtype must be a dtype (f16, bf16, f32, f64, i32, i64, bool, welford)"),
    (HEADER + "  y = matmul(x, x, layout=XY)\n  output y\n}\n", 2, 27,
     "unknown layout 'XY'; expected one of TT, TN, NT, NN"),
    (schedule("y.parallelize(0, TIDw)"), 6, 20,
     "unknown parallel type 'TIDw'; expected one of serial, BIDx, BIDy, BIDz, TIDx, TIDy, "
     "TIDz, vectorize, unroll, mma"),
    (schedule("y.parallelize(0, 1)"), 6, 20,
     "parallelize: ptype must be a parallel type (serial, BIDx, BIDy, BIDz, TIDx, TIDy, "
     "TIDz, vectorize, unroll, mma)"),
    (schedule("xs = x.cache_after(sharde)"), 6, 22,
     "unknown memory type 'sharde'; expected one of global, shared, local"),
    (schedule("y.splt(0, 4)"), 6, 5, "unknown scheduling method 'splt'; did you mean 'split'?"),
    (schedule("q.split(0, 4)"), 6, 3, "unknown tensor 'q' in fusion f"),
    (schedule("y.compute_at(yy, 1)"), 6, 16,
     "unknown tensor 'yy' in fusion f; did you mean 'y'?"),
    (schedule("autotune(level=3)"), 6, 3,
     "unknown scheduler 'autotune'; the schedulers are: matmul, scalar"),
]


@pytest.mark.parametrize("text, line, column, message", UNKNOWN_NAMES)
def test_unknown_names(text, line, column, message):
    check(text, line, column, message)


ARGUMENTS = [
    (HEADER + "  y = relu(x, x)\n  output y\n}\n", 2, 15, "relu takes 1 argument (x), got 2"),
    (HEADER + "  y = add(x)\n  output y\n}\n", 2, 7, "add is missing argument 'b'"),
    (HEADER + "  y = where(x)\n  output y\n}\n", 2, 7, "where is missing arguments 'a', 'b'"),
    (HEADER + "  y = relu(x, foo=1)\n  output y\n}\n", 2, 15,
     "relu has no argument 'foo' (its arguments: x)"),
    (HEADER + "  y = relu(x, x=x)\n  output y\n}\n", 2, 15, "relu got argument 'x' twice"),
    (HEADER + "  y = relu(x=x, x)\n  output y\n}\n", 2, 17,
     "relu: positional argument after keyword arguments"),
    (HEADER + "  y = sum(x, axes=[true])\n  output y\n}\n", 2, 19,
     "sum: axes must be an integer or a list of integers"),
    (HEADER + "  y = broadcast(x, [1, 0])\n  output y\n}\n", 2, 20,
     "broadcast: flags must be a list of true/false"),
    (HEADER + "  y = gelu(x, approximate=tanh)\n  output y\n}\n", 2, 27,
     "gelu: approximate must be a string"),
    (schedule("y.split(0)"), 6, 5, "split is missing argument 'factor'"),
    (schedule("y.split(0, 4, true, 1)"), 6, 23,
     "split takes 3 arguments (axis, factor, inner), got 4"),
    (schedule("y.inline_most(1)"), 6, 17, "inline_most takes 0 arguments, got 1"),
    (schedule("y.split(0, 4, outer=true)"), 6, 17,
     "split has no argument 'outer' (its arguments: axis, factor, inner)"),
    (schedule("y.split(0, 4.5)"), 6, 14,
     "split: factor must be an integer or the name of a run-time scalar"),
    (schedule("y.split(x + 1, 4)"), 6, 11, "split: axis must be an integer"),
    (schedule("y.split(0, 4, inner=1)"), 6, 23, "split: inner must be true or false"),
    (schedule("y.reorder([1, 0])"), 6, 13,
     "reorder: mapping must be a map {old: new} of axis numbers"),
    (schedule("y.compute_at(y + 1, 1)"), 6, 16, "compute_at: consumer must be a tensor name"),
    (schedule("xs = x.cache_after(local, consumers=y)"), 6, 39,
     "cache_after: consumers must be a list of tensor names"),
    (schedule("xs = x.cache_after(local, consumers=[y + 1])"), 6, 40,
     "cache_after: consumers must be a tensor name"),
    (schedule("xs = x.cache_after(local, consumers=[z])"), 6, 40,
     "unknown tensor 'z' in fusion f"),
]


@pytest.mark.parametrize("text, line, column, message", ARGUMENTS)
def test_wrong_arguments(text, line, column, message):
    check(text, line, column, message)


STATEMENTS = [
    (HEADER + "  true = relu(x)\n  output true\n}\n", 2, 3,
     "'true' is a reserved word and cannot name a tensor"),
    ("fusion f(inf: f32[N]) {\n  y = relu(inf)\n  output y\n}\n", 1, 10,
     "'inf' is a reserved word and cannot name a tensor"),
    # a size so named would print as the literal in arithmetic on sizes (mean's count)
    ("fusion f(x: f32[M, false]) {\n  y = mean(x, axes=[1])\n  output y\n}\n", 1, 20,
     "input x: 'false' is a reserved word and cannot name a size"),
    (HEADER + "  y = x + true\n  output y\n}\n", 2, 11,
     "add: literal true cannot take the dtype f32 of x; write 1 or 0"),
    (HEADER + "  y = relu(x)\n  y = exp(x)\n  output y\n}\n", 3, 3, "duplicate name 'y'"),
    (HEADER + "  x = relu(x)\n  output x\n}\n", 2, 3,
     "'x' is an input of fusion f and cannot be redefined"),
    ("fusion f(x: f32[N], x: f32[N]) {\n  y = relu(x)\n  output y\n}\n", 1, 21,
     "duplicate input 'x'"),
    (HEADER + "  y = x\n  output y\n}\n", 2, 7,
     "'y = x' would only rename x; write 'y = set(x)' to copy it"),
    (HEADER + "  y = 2 * 3.5\n  output y\n}\n", 2, 9, "mul: needs at least one tensor operand"),
    (HEADER + "  y = -3\n  output y\n}\n", 2, 7,
     "'y' must be computed from a tensor, not a constant"),
    (HEADER + "  y = -true\n  output y\n}\n", 2, 7, "true and false cannot be negated"),
    (HEADER + "  y = relu(x) + [1]\n  output y\n}\n", 2, 17,
     "a list is not a value; lists are arguments, as in sum(x, axes=[1])"),
    (HEADER + "  y = relu(x) + {0: 1}\n  output y\n}\n", 2, 17,
     "a map is not a value; maps are arguments, as in reorder({0: 1, 1: 0})"),
    (HEADER + "  y = relu(x) + \"a\"\n  output y\n}\n", 2, 17,
     "a string (\"a\") is not a value; strings are arguments, as in "
     "gelu(x, approximate=\"tanh\")"),
    (HEADER + "  y = relu(x)\n  output z\n}\n", 3, 10, "unknown tensor 'z'"),
    (HEADER + "  y = relu(x)\n}\n", 1, 8, "fusion 'f' has no outputs; add `output NAME`"),
    (BODY + BODY, 5, 8, "duplicate fusion 'f' (first at line 1)"),
    (BODY + "schedule g {\n}\n", 5, 10, "schedule for unknown fusion 'g'"),
    (BODY + "schedule ff {\n}\n", 5, 10, "schedule for unknown fusion 'ff'; did you mean 'f'?"),
    (BODY + "schedule f {\n}\nschedule f {\n}\n", 7, 10,
     "duplicate schedule for 'f' (first at line 5)"),
    (schedule("z = y.split(0, 4)"), 6, 3, "split returns no tensor to name 'z'"),
    (schedule("b = x.cache_after(shared)"), 6, 3, "duplicate name 'b'"),
    (schedule("matmul(stages=3)"), 6, 3,
     "schedule_matmul: fusion f has 0 matmuls; the matmul scheduler takes exactly one"),
    (schedule("matmul(tiles=[1, 2, 3])"), 6, 10,
     "matmul has no parameter 'tiles' (short keys: splitk, smem_epilogue; fields: cta_tile, "
     "warp_tile, instruction_tile, stages, splitk_factor, splitk_mode, splitk_interleaved, "
     "use_smem_epilogue, promote_prologue_smem_reuse, async_gmem_load_operands, "
     "producer_registers, staged_along_k, swap_mn, persistent, tma_store, tile_group)"),
    (schedule("matmul(cta_tile=[100, 128, 32])"), 6, 10,
     "MatmulParams: cta_tile M (100) is not a multiple of warp_tile M (64)"),
    (schedule("matmul(stages=x)"), 6, 17, "matmul: stages must be a literal (a number, true/false or a list)"),
    (schedule("matmul(3)"), 6, 10, "matmul(...) takes keyword arguments only (cta_tile=, warp_tile=, "
     "stages=, splitk=, smem_epilogue=, or any MatmulParams field)"),
    (schedule("matmul(splitk=2, splitk_factor=3)"), 6, 20,
     "matmul: 'splitk' and 'splitk_factor' name the same parameter"),
    ("# nothing but a comment\n", 1, 1,
     "no fusion defined; expected `fusion NAME(...) { ... }`"),
]


@pytest.mark.parametrize("text, line, column, message", STATEMENTS)
def test_statement_errors(text, line, column, message):
    check(text, line, column, message)


def test_empty_text_has_no_line_to_show():
    error = parse_error("")
    assert str(error) == "t.fz:1:1: no fusion defined; expected `fusion NAME(...) { ... }`"


IR_ERRORS = [
    (HEADER + "  y = x + b\n  output y\n}\n", 2, 9, FusionError,
     "add: operand ranks differ (x has 2, b has 1); broadcast the smaller operand first"),
    ("fusion f(i: i32[N]) {\n  y = i * 2.5\n  output y\n}\n", 2, 11, FusionError,
     "mul: literal 2.5 cannot take the dtype i32 of i"),
    (HEADER + "  y = -(x < 1)\n  output y\n}\n", 2, 7, FusionError,
     "neg: operand t2 is bool; cast it first"),
    (HEADER + "  y = exp(broadcast(b, [true, true]))\n  output y\n}\n", 2, 11, FusionError,
     "broadcast: b has 1 axes but the flags keep 0 (one flag per output axis, true = new "
     "axis)"),
    (HEADER + "  y = gelu(x, approximate=\"tan\")\n  output y\n}\n", 2, 7, FusionError,
     "gelu: approximate must be \"none\" or \"tanh\", got 'tan'"),
    (HEADER + "  y = matmul(x, x)\n  output y\n}\n", 2, 7, FusionError,
     "matmul: A (x) must be f16 or bf16, got f32"),
    ("fusion f(x: f32[0]) {\n  y = relu(x)\n  output y\n}\n", 1, 10, FusionError,
     "input x: dimension 0 must be >= 1"),
    (HEADER + "  y = relu(x)\n  output y, y\n}\n", 3, 13, FusionError,
     "y is already an output of fusion f"),
    (HEADER + "  y = relu(x)\n  output x\n}\n", 3, 10, FusionError,
     "x is a fusion input and cannot also be an output"),
    (schedule("y.split(5, 4)"), 6, 3, ScheduleError,
     "split: axis 5 is out of range for tensor y with 2 loop axes"),
    (schedule("y.split(-3, 4)"), 6, 3, ScheduleError,
     "split: axis -3 is out of range for tensor y with 2 loop axes"),
    (schedule("y.split(0, 0)"), 6, 3, ScheduleError,
     "split: factor must be >= 1, got 0 (tensor y, axis 0)"),
    (schedule("x.split(0, 4)"), 6, 3, ScheduleError,
     "split: x is a fusion input; inputs are read, not computed: schedule a cache of it "
     "(cache_after) instead"),
    (schedule("y.compute_at(x, 1)"), 6, 3, ScheduleError,
     "compute_at: x does not use y, directly or indirectly"),
    (schedule("xs = x.cache_after(shared)", "xs.compute_at(b, 1)"), 7, 3, ScheduleError,
     "compute_at: b does not use xs, directly or indirectly"),
    (schedule("y.vectorize(0)"), 6, 3, ScheduleError,
     "vectorize: axis 0 is not the innermost loop axis of y (2 loop axes) (tensor y, axis 0)"),
    (schedule("y.rfactor(1)"), 6, 3, ScheduleError,
     "rfactor: y is not defined by a reduction or matmul"),
    (schedule("y.set_memory_type(shared)"), 6, 3, ScheduleError,
     "set_memory_type: y is a fusion output and stays in global memory"),
    (schedule("y.circular_buffer(1)"), 6, 3, ScheduleError,
     "circular_buffer: stages must be an integer >= 2, got 1 (tensor y)"),
    (schedule("y.parallelize(0, TIDx)", "y.parallelize(1, TIDx)"), 7, 3, ScheduleError,
     "parallelize: y already binds TIDx to axis 0; each block/thread index binds one axis "
     "(axis 1)"),
]


@pytest.mark.parametrize("text, line, column, kind, message", IR_ERRORS)
def test_ir_errors_are_located_at_the_offending_call(text, line, column, kind, message):
    error = check(text, line, column, message)
    assert isinstance(error.__cause__, kind) and str(error.__cause__) == message


# -- line breaks, odd characters, unfinished expressions, files ---------------------------

OUT = "\n  output y\n}\n"

LINE_BREAKS = ["\x0c", "\x0b", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r"]


@pytest.mark.parametrize("char", LINE_BREAKS, ids=[f"U+{ord(c):04X}" for c in LINE_BREAKS])
def test_line_breaks_python_counts_but_the_grammar_does_not(char):
    """str.splitlines breaks lines at these characters; lark (and so every line number)
    does not. The line under the error is the one its number names, the character shown
    as a space."""
    text = HEADER + f"  # a comment{char}that goes on\n  y = relu(q)  # and{char}on\n" \
        "  output y\n}\n"
    error = parse_error(text)
    assert str(error) == ("t.fz:3:12: unknown tensor 'q'\n"
                          "      y = relu(q)  # and on\n"
                          f"    {' ' * 11}^")


def test_windows_line_endings_and_tabs():
    error = parse_error((HEADER + "\ty = relu(q)" + OUT).replace("\n", "\r\n"))
    assert str(error) == "t.fz:2:11: unknown tensor 'q'\n    \ty = relu(q)\n    \t         ^"


ODD_CHARACTERS = [
    ("\x0c", "U+000C"), ("\u2028", "U+2028 (LINE SEPARATOR)"), ("\x00", "U+0000"),
    ("\u00a0", "U+00A0 (NO-BREAK SPACE)"), ("\ufeff", "U+FEFF (ZERO WIDTH NO-BREAK SPACE)"),
    ("é", "'é'"), ("😀", "'😀'"),
]


@pytest.mark.parametrize("char, shown", ODD_CHARACTERS)
def test_an_odd_character_outside_a_comment_is_named(char, shown):
    text = HEADER + f"  y = relu(x){char}" + OUT
    error = parse_error(text)
    assert (error.line, error.column) == (2, 14)
    assert error.message == f"unexpected character {shown}"
    assert error.source_line == "  y = relu(x)" + (char if char.isprintable() else " ")


UNFINISHED = [  # an expression cut at the end of a line: reported there, not lines later
    (HEADER + "  y = x +\n  output y\n}\n", 2, 10,
     "unexpected end of expression after '+': expected an operand, found 'output' on line 3"),
    (HEADER + "  y = relu(x) *\n}\n", 2, 16,
     "unexpected end of expression after '*': expected an operand, found '}' on line 3"),
    (HEADER + "  y = x -\n  z = relu(x)\n  output z\n}\n", 2, 10,
     "unexpected end of expression after '-': expected an operand, found 'z =' (the next "
     "statement) on line 3"),
    (HEADER + "  y = x <\n\n  # more\n  output y\n}\n", 2, 10,
     "unexpected end of expression after '<': expected an operand, found 'output' on line 5"),
    (HEADER + "  y = x /", 2, 10,
     "unexpected end of expression after '/': expected an operand, found end of input"),
    (HEADER + "  y =\n  output y\n}\n", 2, 6,
     "unexpected end of statement after '=': expected an expression, found 'output' on "
     "line 3"),
    (HEADER + "  y = x + }\n", 2, 11, "unexpected '}', expected an expression"),
    (HEADER + "  y = x + output\n}\n", 2, 11, "unexpected 'output', expected an expression"),
]


@pytest.mark.parametrize("text, line, column, message", UNFINISHED)
def test_an_unfinished_expression_is_reported_where_it_ends(text, line, column, message):
    check(text, line, column, message)


def test_an_expression_may_still_continue_on_the_next_line():
    fusion = fuserir.parse(HEADER + "  y = x +\n    relu(x)" + OUT)
    assert [e.op for e in fusion.exprs] == ["relu", "add"]


def test_parse_file_locates_a_byte_that_is_not_utf8(tmp_path):
    path = tmp_path / "latin1.fz"
    path.write_bytes((HEADER + "  y = relu(x)  # \xe9t\xe9" + OUT).encode("latin-1"))
    with pytest.raises(DslError) as caught:
        fuserir.dsl.parse_file(path)
    assert str(caught.value) == (f"{path}:2:18: invalid UTF-8 (byte 0xe9); a DSL file is UTF-8 "
                                 "text\n      y = relu(x)  # \ufffdt\ufffd\n    " + " " * 17 + "^")


def test_parse_file_reads_utf8_with_or_without_a_byte_order_mark(tmp_path):
    for name, prefix in (("plain.fz", b""), ("bom.fz", b"\xef\xbb\xbf")):
        path = tmp_path / name
        path.write_bytes(prefix + (HEADER + "  y = relu(x)  # café" + OUT).encode())
        assert fuserir.dsl.parse_file(path).outputs[0].name == "y"


# -- a literal that overflows or underflows its dtype -------------------------------------

F16 = "fusion f(x: f32[N], h: f16[N], g: bf16[N], c: bool[N]) {\n"
TOO_BIG = "is out of range for every dtype (f64, the widest, holds at most 1.798e+308)"
I64 = "does not fit in 64 bits (at most 9223372036854775807)"

LITERALS = [  # a literal that overflows or underflows its dtype is refused, at the literal
    (F16 + "  y = x * 1e400" + OUT, 2, 11, f"literal 1e400 {TOO_BIG}"),
    (F16 + "  y = 1e400 + x" + OUT, 2, 7, f"literal 1e400 {TOO_BIG}"),
    (F16 + "  y = x + 1e-400" + OUT, 2, 11,
     "literal 1e-400 underflows to 0 in every dtype (the smallest nonzero f64 is 5e-324)"),
    (F16 + "  y = x + 1e39" + OUT, 2, 11,
     "add: literal 1e+39 is out of range for the dtype f32 of x"),
    (F16 + "  y = 1e39 * x" + OUT, 2, 7,
     "mul: literal 1e+39 is out of range for the dtype f32 of x"),
    (F16 + "  y = x / 1e-50" + OUT, 2, 11, "div: literal 1e-50 underflows to 0 in the dtype "
     "f32 of x (its smallest nonzero magnitude is 1.4e-45)"),
    (F16 + "  y = 1e-50 - x" + OUT, 2, 7, "sub: literal 1e-50 underflows to 0 in the dtype "
     "f32 of x (its smallest nonzero magnitude is 1.4e-45)"),
    (F16 + "  y = x < 1e39" + OUT, 2, 11,
     "lt: literal 1e+39 is out of range for the dtype f32 of x"),
    (F16 + "  y = maximum(x, 1e39)" + OUT, 2, 18,
     "maximum: literal 1e+39 is out of range for the dtype f32 of x"),
    (F16 + "  y = where(c, 1e-50, x)" + OUT, 2, 16, "where: literal 1e-50 underflows to 0 in "
     "the dtype f32 of x (its smallest nonzero magnitude is 1.4e-45)"),
    (F16 + "  y = where(c, x, -1e39)" + OUT, 2, 19,
     "where: literal -1e+39 is out of range for the dtype f32 of x"),
    (F16 + "  y = h * 1e-8" + OUT, 2, 11, "mul: literal 1e-08 underflows to 0 in the dtype "
     "f16 of h (its smallest nonzero magnitude is 5.96e-08)"),
    (F16 + "  y = h + 70000" + OUT, 2, 11,
     "add: literal 70000 is out of range for the dtype f16 of h"),
    (F16 + "  y = x + 1" + "0" * 400 + OUT, 2, 11,
     f"literal 10000000000000000000...00000000 (401 characters) {TOO_BIG}"),
    (F16 + "  y = x + 1" + "0" * 300 + OUT, 2, 11, "add: literal 100000000000...000000 "
     "(301 characters) is out of range for the dtype f32 of x"),
    ("fusion f(x: f32[99999999999999999999]) {\n  y = relu(x)" + OUT, 1, 17,
     f"input x: dimension 99999999999999999999 {I64}"),
    (BODY + "schedule f {\n  y.split(0, 9223372036854775808)\n}\n", 6, 14,
     f"integer 9223372036854775808 {I64}"),
    (BODY + "schedule f {\n  scalar(s, default=99999999999999999999)\n}\n", 6, 21,
     f"integer 99999999999999999999 {I64}"),
]


@pytest.mark.parametrize("text, line, column, message", LITERALS)
def test_literals_that_overflow_or_underflow_are_errors_at_the_literal(text, line, column,
                                                                       message):
    check(text, line, column, message)


def literals(fusion):
    return [(v.value, str(v.dtype)) for e in fusion.exprs for v in e.inputs
            if isinstance(v, fuserir.ir.tensor.Scalar)]


def test_zero_and_subnormal_literals_are_accepted():
    assert literals(fuserir.parse(F16 + "  y = x * 0.000000e-999 + 1" + OUT)) == \
        [(0.0, "f32"), (1.0, "f32")]
    fusion = fuserir.parse(F16 + "  y = g * 1e-8 + x * 1e-40 + h * 6e-8" + OUT)
    assert literals(fusion) == [(1e-8, "bf16"), (1e-40, "f32"), (6e-8, "f16")]
    zero = np.zeros(2, np.float32)
    got = fuserir.evaluate(fusion, {"x": zero + 1, "h": (zero + 1).astype(np.float16),
                                    "g": (zero + 1).astype(ml_dtypes.bfloat16),
                                    "c": zero > 0})["y"]
    expected = (np.float32(ml_dtypes.bfloat16(1e-8)) + np.float32(1e-40)
                + np.float32(np.float16(6e-8)))
    np.testing.assert_array_equal(got, expected)
    assert expected > np.float32(ml_dtypes.bfloat16(1e-8))


# -- one parallel type per axis; matmul parameters of the right type ----------------------

MATMUL = ("fusion f(A: f16[M, K], B: f16[K, N]) {\n  acc = matmul(A, B)\n"
          "  out = cast(acc, f16)\n  output out\n}\nschedule f {\n  matmul(")
SCHEDULE_ERRORS = [
    (schedule("y.parallelize(0, TIDx)", "y.parallelize(0, BIDx)"), 7, 3,
     "parallelize: axis 0 of y is already parallelized as TIDx; it cannot also be BIDx"),
    (schedule("y.parallelize(-1, unroll)", "y.parallelize(1, serial)"), 7, 3,
     "parallelize: axis 1 of y is already parallelized as unroll; it cannot also be serial"),
    (schedule("y.split(1, 4)", "y.parallelize(2, TIDx)", "y.vectorize(2)"), 8, 3,
     "vectorize: axis 2 of y is already parallelized as TIDx; it cannot also be vectorize"),
    (HEADER + "  t = exp(x)\n  y = relu(t)" + OUT + "schedule f {\n  y.parallelize(0, BIDx)\n"
     "  t.compute_at(y, 1)\n  t.parallelize(0, TIDx)\n}\n", 9, 3,
     "parallelize: axis 0 of t is already parallelized as BIDx; it cannot also be TIDx"),
    (MATMUL + "smem_epilogue=1)\n}\n", 7, 24, "matmul: smem_epilogue must be true or false"),
    (MATMUL + "async_gmem_load_operands=0)\n}\n", 7, 35,
     "matmul: async_gmem_load_operands must be true or false, or a pair [A, B] of them "
     "(one per operand)"),
    (MATMUL + "async_gmem_load_operands=[true, false, true])\n}\n", 7, 35,
     "matmul: async_gmem_load_operands must be true or false, or a pair [A, B] of them "
     "(one per operand)"),
    (MATMUL + "promote_prologue_smem_reuse=\"yes\")\n}\n", 7, 38,
     "matmul: promote_prologue_smem_reuse must be true or false"),
    (MATMUL + "use_smem_epilogue=1.0)\n}\n", 7, 28,
     "matmul: use_smem_epilogue must be true or false"),
    (MATMUL + "stages=true)\n}\n", 7, 17, "matmul: stages must be an integer"),
    (MATMUL + "splitk=2.0)\n}\n", 7, 17, "matmul: splitk must be an integer"),
]


@pytest.mark.parametrize("text, line, column, message", SCHEDULE_ERRORS)
def test_rebinding_an_axis_and_matmul_parameter_types(text, line, column, message):
    check(text, line, column, message)


def test_binding_an_axis_to_its_own_type_again_is_fine():
    fusion = fuserir.parse(schedule("y.parallelize(0, BIDx)", "y.parallelize(0, BIDx)"))
    assert [a.parallel.value for a in fusion.outputs[0].loop] == ["BIDx", "serial"]
