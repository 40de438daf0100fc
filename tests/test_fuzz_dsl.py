"""The DSL fuzz test: 10,000 deterministic cases, mutated examples and generated
deep and long programs (tests/dsl_fuzz.py), through parse, print and parse again. Zero
exceptions other than located DslErrors, zero round-trip differences, zero hangs; a failure
prints the generator, the seed and the text. A small sample also goes through the real CLI
in a subprocess: exit 0 or 1, never a traceback or an internal error."""

import collections
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import dsl_fuzz

# (generator, cases): 10,000 in all. Generators of many operations get fewer cases (each
# costs more: see dsl_fuzz.OPS_LARGEST), deep ones of few operations more.
PLAN = [("mutant", 9000),
        *[(name, 100) for name in ("long_sum", "long_chain", "nested_calls", "deep_negation")],
        *[(name, 150) for name in ("deep_parentheses", "deep_list", "deep_map", "unfinished")]]
CASE_BUDGET_S = 20  # far above the slowest case (about 0.5 s): only a hang gets there


def test_plan_has_ten_thousand_cases():
    assert sum(n for _, n in PLAN) == 10_000
    assert {g for g, _ in PLAN} == {"mutant", *dsl_fuzz.GENERATOR_NAMES}


def test_fuzz_the_dsl_front_end():
    counts = collections.Counter()
    failures, slowest = [], (0.0, None)
    longest = deepest = operators = 0
    start = time.perf_counter()
    for generator, cases in PLAN:
        for seed in range(cases):
            outcome, elapsed, failure, text = dsl_fuzz.run_case(generator, seed,
                                                                CASE_BUDGET_S)
            counts[outcome] += 1
            slowest = max(slowest, (elapsed, f"{generator} {seed}"))
            depth, ops = dsl_fuzz.nesting(text)
            longest, deepest, operators = (max(longest, len(text)), max(deepest, depth),
                                           max(operators, ops))
            if failure is not None and len(failures) < 5:
                failures.append(failure)
    wall = time.perf_counter() - start
    print(f"\nDSL fuzz: {sum(counts.values())} cases in {wall:.1f} s: "
          f"{counts['error']} located errors, {counts['accepted']} accepted, "
          f"{counts['crash']} crashes, {counts['hang']} hangs; slowest {slowest[0]:.2f} s "
          f"({slowest[1]}); largest texts: {longest} characters, brackets {deepest} deep, "
          f"{operators} operators")
    assert not failures, "\n\n".join(failures)
    assert counts["crash"] == counts["hang"] == 0
    assert counts["error"] + counts["accepted"] == 10_000
    # the mutants must exercise both paths, or the fuzzer tests nothing
    assert counts["accepted"] > 1000 and counts["error"] > 5000


def _cli(path, command):
    env = dict(os.environ, FUSERIR_TRACEBACK="")
    return subprocess.run([sys.executable, "-m", "fuserir", command, str(path)],
                          capture_output=True, text=True, timeout=300, env=env)


def test_cli_on_mutants(tmp_path):
    """24 mutants through `fuserir parse`, those that parse (at most 6) through `fuserir
    check` too: exit 0 or 1, an error on one line, never a traceback. (Few: a fuserir
    process takes over a second to start.)"""
    paths = []
    for seed in range(24):
        path = tmp_path / f"mutant{seed}.fz"
        path.write_text(dsl_fuzz.case_text("mutant", seed), encoding="utf-8")
        paths.append(path)
    with ThreadPoolExecutor(2) as pool:
        parsed = list(pool.map(lambda p: (p, _cli(p, "parse")), paths))
        good = [p for p, r in parsed if r.returncode == 0][:6]
        checked = list(pool.map(lambda p: (p, _cli(p, "check")), good))
    assert 0 < len(good) < len(paths), "the sample should hold both good and bad programs"
    for path, result in parsed + checked:
        where = f"{' '.join(result.args[2:])}:\n{path.read_text()}\n{result.stderr}"
        assert result.returncode in (0, 1), where
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr, \
            where
        if result.returncode == 1:
            assert result.stderr.startswith("fuserir: error: "), where


@pytest.mark.parametrize("generator", sorted(dsl_fuzz.GENERATOR_NAMES))
def test_generators_are_deterministic(generator):
    assert dsl_fuzz.case_text(generator, 7) == dsl_fuzz.case_text(generator, 7)
    assert dsl_fuzz.case_text("mutant", 7) == dsl_fuzz.case_text("mutant", 7)
