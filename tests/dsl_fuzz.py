"""Fuzz cases for the DSL front end: mutated example programs and generated deep
and long ones, and the check every case must pass.

A case is (generator, seed) -> text; every generator is a function of a random.Random
seeded with the case's seed, so a failure reproduces from the two printed values alone
(`case_text(generator, seed)`). Mutators work on one of the shipped examples
(examples/*.fz): tokens or characters deleted, duplicated, swapped or inserted, the text
truncated, digits flipped, non-ASCII and line-breaking characters inserted, numbers made
huge or tiny, names swapped. Generators write whole programs: long sums, long chains of
statements, deeply nested calls, parentheses, negations, lists and maps.

`check_case(text)` runs fuserir.parse. An exception must be a DslError with a line and a
column; a text that parses must print (fuserir.print_fusion), parse back to a structurally
equal fusion and print identically. Anything else, and a case that runs past its time
budget (SIGALRM), is a failure described with its generator, seed and text.
"""

import math
import pathlib
import random
import re
import signal
import sys
import time
from contextlib import contextmanager

import fuserir
from fuserir.errors import DslError
from fuserir.ir.equality import first_difference, structurally_equal

from conftest import shallow_stack

EXAMPLES = {p.name: p.read_text() for p in
            sorted((pathlib.Path(__file__).parent.parent / "examples").glob("*.fz"))}

_TOKEN = re.compile(r"\s+|#[^\n]*|[A-Za-z_]\w*|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+|\"[^\"\n]*\""
                    r"|<=|>=|==|!=|.", re.S)
VOCABULARY = (
    "fusion schedule output true false inf nan = ( ) [ ] { } , : . + - * / < <= == != > >= "
    "x y z acc out A B M N K f16 bf16 f32 f64 i32 i64 bool exp log relu gelu sum max cast "
    "broadcast where matmul set split merge reorder parallelize vectorize rfactor cache_after "
    "cache_before compute_at inline_most circular_buffer swizzle scalar TIDx BIDx TIDy mma "
    "unroll serial shared local global NT TT 0 1 2 -1 3 128 0.5 1e3 \"tanh\" # t0 t3 t99"
).split()
ODD_CHARACTERS = ["é", "λ", "\u2028", "\u2029", "\x0c", "\x0b", "\x85", "\x1c", "\r",
                  "\t", "\x00", "\ufeff", "\u200b", "\u00a0", "😀", "\ufffd", "\x7f", "ß"]
HUGE_NUMBERS = ["99999999999999999999", "1e400", "1e-400", "1e39", "1e-50", "2147483648",
                "9223372036854775808", "4294967296", "65520", "1e308", "5e-324", "0.0",
                "1" + "0" * 400, "0." + "0" * 400 + "1", "1" * 5000, "1e99999999999999",
                "-0", "00000000000000000000007", "1.7976931348623159e308"]


def _tokens(text):
    return _TOKEN.findall(text)


def _solid(tokens):
    """Indices of the tokens that are not whitespace."""
    return [i for i, t in enumerate(tokens) if not t.isspace()] or [0]


# -- mutators: (rng, text) -> text ----------------------------------------------------------

def delete_token(rng, text):
    tokens = _tokens(text)
    del tokens[rng.choice(_solid(tokens))]
    return "".join(tokens)


def duplicate_token(rng, text):
    tokens = _tokens(text)
    i = rng.choice(_solid(tokens))
    tokens.insert(i, tokens[i] + rng.choice(["", " "]))
    return "".join(tokens)


def swap_tokens(rng, text):
    tokens = _tokens(text)
    solid = _solid(tokens)
    i = rng.choice(solid)
    j = rng.choice(solid) if rng.random() < 0.5 else solid[min(solid.index(i) + 1,
                                                                len(solid) - 1)]
    tokens[i], tokens[j] = tokens[j], tokens[i]
    return "".join(tokens)


def insert_token(rng, text):
    tokens = _tokens(text)
    tokens.insert(rng.randrange(len(tokens) + 1), f" {rng.choice(VOCABULARY)} ")
    return "".join(tokens)


def replace_token(rng, text):
    tokens = _tokens(text)
    tokens[rng.choice(_solid(tokens))] = rng.choice(VOCABULARY + _tokens(text))
    return "".join(tokens)


def delete_characters(rng, text):
    i = rng.randrange(len(text))
    return text[:i] + text[i + rng.randint(1, 3):]


def duplicate_characters(rng, text):
    i = rng.randrange(len(text))
    j = i + rng.randint(1, 8)
    return text[:j] + text[i:j] + text[j:]


def swap_characters(rng, text):
    i, j = sorted(rng.sample(range(len(text)), 2))
    return text[:i] + text[j] + text[i + 1:j] + text[i] + text[j + 1:]


def insert_character(rng, text):
    i = rng.randrange(len(text) + 1)
    c = chr(rng.randrange(32, 127)) if rng.random() < 0.6 else rng.choice(ODD_CHARACTERS)
    return text[:i] + c + text[i:]


def truncate(rng, text):
    return text[:rng.randrange(len(text))]


def flip_digit(rng, text):
    digits = [i for i, c in enumerate(text) if c.isdigit()]
    if not digits:
        return insert_character(rng, text)
    i = rng.choice(digits)
    return text[:i] + rng.choice("0123456789") + text[i + 1:]


def non_ascii(rng, text):
    """An odd character in a comment (where the examples have them) or anywhere."""
    comments = [m.end() for m in re.finditer(r"#[^\n]*", text)]
    i = rng.choice(comments) if comments and rng.random() < 0.5 else rng.randrange(len(text))
    return text[:i] + "".join(rng.choices(ODD_CHARACTERS, k=rng.randint(1, 3))) + text[i:]


def huge_number(rng, text):
    tokens = _tokens(text)
    numbers = [i for i, t in enumerate(tokens) if t[0].isdigit() or t.startswith(".")]
    i = rng.choice(numbers) if numbers else rng.choice(_solid(tokens))
    tokens[i] = rng.choice(HUGE_NUMBERS)
    return "".join(tokens)


def rename(rng, text):
    """One name replaced by another name of the text, everywhere or once."""
    names = sorted({t for t in _tokens(text) if t[0].isalpha() or t[0] == "_"})
    if not names:
        return insert_token(rng, text)
    old, new = rng.choice(names), rng.choice(names + ["t0", "t5", "fusion", "output"])
    if rng.random() < 0.5:
        return re.sub(rf"\b{re.escape(old)}\b", new, text)
    return re.sub(rf"\b{re.escape(old)}\b", new, text, count=1)


MUTATORS = [delete_token, duplicate_token, swap_tokens, insert_token, replace_token,
            delete_characters, duplicate_characters, swap_characters, insert_character,
            truncate, flip_digit, non_ascii, huge_number, rename]


def mutant(rng):
    """One example with one to three mutations; the generator's name lists them."""
    name = rng.choice(sorted(EXAMPLES))
    text = EXAMPLES[name]
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        if text:
            text = rng.choice(MUTATORS)(rng, text)
    return text


# -- generated programs: long, deep, nested ---------------------------------------------------

HEAD = "fusion g(x: f32[M, N], y: f32[M, N], i: i32[M, N], v: f32[N]) {\n"
UNARY = ["exp", "log", "relu", "abs", "tanh", "sigmoid", "sqrt", "neg"]
BINARY = ["+", "-", "*", "/"]


# Programs of many operations are kept this small, deep ones of few operations go to
# thousands of levels: 10,000 cases in two minutes afford no more (a 1000-operation
# program takes about a second to parse, print and parse again). tests/test_dsl_depth.py
# has the big ones.
OPS_LARGEST = 120


def _size(rng, largest):
    """Mostly small, sometimes large: log-uniform in [1, largest]."""
    return int(math.exp(rng.uniform(0, math.log(largest))))


def _operand(rng):
    return rng.choice(["x", "y", "x", "1.0", "2", "0.5", "(x - y)", "-x"])


def long_sum(rng):
    n = _size(rng, OPS_LARGEST)
    terms = " ".join(f"{rng.choice(BINARY)} {_operand(rng)}" for _ in range(n))
    return HEAD + f"  z = x {terms}\n  output z\n}}\n"


def long_chain(rng):
    n = _size(rng, OPS_LARGEST)
    lines = ["  t = x + 1.0"] + [f"  s{k} = {'t' if k == 0 else f's{k - 1}'} "
                                 f"{rng.choice(BINARY)} {_operand(rng)}" for k in range(n)]
    return HEAD + "\n".join(lines) + f"\n  output {'t' if n == 0 else f's{n - 1}'}\n}}\n"


def nested_calls(rng):
    n = _size(rng, OPS_LARGEST)
    text = rng.choice(["x", "y"])
    for _ in range(n):
        kind = rng.random()
        if kind < 0.6:
            text = f"{rng.choice(UNARY)}({text})"
        elif kind < 0.8:
            text = f"({text} {rng.choice(BINARY)} {_operand(rng)})"
        else:
            text = f"maximum({text}, {_operand(rng)})"
    return HEAD + f"  z = {text}\n  output z\n}}\n"


def deep_parentheses(rng):
    n = _size(rng, 3000)
    return HEAD + f"  z = {'(' * n}x + y{')' * n}\n  output z\n}}\n"


def deep_negation(rng):
    """`- - - x` in an expression (an op each) or `---4` as an argument (a constant)."""
    if rng.random() < 0.5:
        n = _size(rng, OPS_LARGEST)
        return HEAD + f"  z = {'-' * n}x\n  output z\n}}\n"
    n = _size(rng, 3000)
    return HEAD + f"  z = relu(x)\n  output z\n}}\nschedule g {{\n  z.split(1, {'-' * n}4)\n}}\n"


def deep_list(rng):
    n = _size(rng, 3000)
    inner = rng.choice(["1", "true", "x", "{0: 1}", ""])
    arg = rng.choice(["axes=", "", "flags="])
    call = "sum(x, " if arg != "flags=" else "broadcast(v, "
    return HEAD + f"  z = {call}{arg}{'[' * n}{inner}{']' * n})\n  output z\n}}\n"


def deep_map(rng):
    n = _size(rng, 2000)
    text = "0"
    for _ in range(n):
        text = f"{{0: {text}}}" if rng.random() < 0.7 else f"[{text}]"
    return HEAD + f"  z = relu(x)\n  output z\n}}\nschedule g {{\n  z.reorder({text})\n}}\n"


def unfinished(rng):
    """An expression cut after an operator (or a statement after '='), then more text."""
    head = HEAD + f"  z = x {rng.choice(BINARY + ['<', '=='])}"
    if rng.random() < 0.3:
        head = HEAD + "  z ="
    tail = rng.choice(["\n  output z\n}\n", "\n}\n", "\n  w = y * 2\n  output w\n}\n", "",
                       "  # comment\n\n  output z\n}\n", " \x0c\n  output z\n}\n"])
    return head + tail


GENERATORS = [long_sum, long_chain, nested_calls, deep_parentheses, deep_negation, deep_list,
              deep_map, unfinished]
GENERATOR_NAMES = {g.__name__: g for g in GENERATORS}


def case_text(generator, seed):
    """The text of case (generator, seed): "mutant" or a generator's name."""
    rng = random.Random(f"{generator}:{seed}")
    return mutant(rng) if generator == "mutant" else GENERATOR_NAMES[generator](rng)


# -- the check ------------------------------------------------------------------------------

STACK_FRAMES = 100  # what parse and print need of the stack, with room to spare


class Hang(Exception):
    """A case ran past its time budget."""


@contextmanager
def time_budget(seconds):
    def expire(signum, frame):
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_case(text):
    """"error" (a located DslError) or "accepted" (parsed, printed, read back equal);
    raises AssertionError (or whatever escaped) otherwise."""
    try:
        parsed = fuserir.parse(text, "fuzz.fz")
    except DslError as error:
        assert isinstance(error.line, int) and isinstance(error.column, int), \
            f"DslError without a location: {error}"
        assert str(error).startswith(f"fuzz.fz:{error.line}:{error.column}: ")
        return "error"
    fusions = parsed if isinstance(parsed, dict) else {parsed.name: parsed}
    for fusion in fusions.values():
        printed = fuserir.print_fusion(fusion)
        again = fuserir.parse(printed)
        assert structurally_equal(fusion, again), \
            f"round trip differs: {first_difference(fusion, again)}\n{printed}"
        assert fuserir.print_fusion(again) == printed, "printing the read-back text differs"
    return "accepted"


def nesting(text):
    """The deepest nesting of brackets in `text`, and the number of operator characters."""
    depth = deepest = 0
    for c in text:
        depth += (c in "([{") - (c in ")]}")
        deepest = max(deepest, depth)
    return deepest, sum(text.count(c) for c in "+-*/")


def run_case(generator, seed, budget):
    """(outcome, seconds, failure, text): outcome "error", "accepted", "crash" or "hang";
    failure a description with generator, seed and text, or None."""
    text = case_text(generator, seed)
    start = time.perf_counter()
    try:
        with time_budget(budget), shallow_stack(STACK_FRAMES):
            outcome = check_case(text)
        failure = None
    except Hang as hang:
        outcome, failure = "hang", str(hang)
    except Exception as error:  # noqa: BLE001 - anything else escaping is a failure
        outcome, failure = "crash", f"{type(error).__name__}: {error}"
    elapsed = time.perf_counter() - start
    if failure is not None:
        shown = text if len(text) < 3000 else text[:1500] + "\n...\n" + text[-1500:]
        failure = (f"generator {generator}, seed {seed} ({outcome}, {elapsed:.2f} s; "
                   f"tests/dsl_fuzz.case_text({generator!r}, {seed}) rebuilds it): "
                   f"{failure}\n--- text ---\n{shown!s}\n--- end ---")
    return outcome, elapsed, failure, text


if __name__ == "__main__":  # python tests/dsl_fuzz.py GENERATOR SEED: rerun one case
    print(case_text(sys.argv[1], int(sys.argv[2])))
    print(run_case(sys.argv[1], int(sys.argv[2]), budget=60)[:3])
