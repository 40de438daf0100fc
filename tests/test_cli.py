"""The `fuserir` command, run for real in a subprocess: output and every error path."""

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def fuserir(*args, cwd=None):
    result = subprocess.run([sys.executable, "-m", "fuserir", *map(str, args)],
                            capture_output=True, text=True, cwd=cwd)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def test_parse_prints_canonical_text_that_parses_to_itself(tmp_path):
    first = fuserir("parse", EXAMPLES / "pointwise_chain.fz")
    assert first.returncode == 0, first.stderr
    assert "fusion pointwise_chain(x: f32[M, N], y: f32[M, N]) {" in first.stdout
    assert "xs.compute_at(out, 2)" in first.stdout
    again = tmp_path / "again.fz"
    again.write_text(first.stdout)
    second = fuserir("parse", again)
    assert second.returncode == 0 and second.stdout == first.stdout


def test_eval_summarises_outputs_with_given_and_default_sizes():
    result = fuserir("eval", EXAMPLES / "softmax.fz", "--size", "M=4")
    assert result.returncode == 0, result.stderr
    assert "softmax: M=4, N=19" in result.stdout
    assert "out: float32[4, 19]" in result.stdout


def test_eval_json_and_defaults_exercise_edges():
    result = fuserir("eval", EXAMPLES / "splitk_matmul.fz", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)["splitk_nt"]
    assert report["sizes"] == {"M": 19, "N": 19, "K": 19, "splitk": 3}
    assert report["outputs"]["out"]["shape"] == [19, 19]
    softmax = json.loads(fuserir("eval", EXAMPLES / "softmax.fz", "--json").stdout)
    row_sums = softmax["softmax"]["outputs"]["out"]
    assert 0 < row_sums["max"] <= 1.0


def test_eval_default_size_is_twice_the_tile_plus_a_remainder():
    report = json.loads(fuserir("eval", EXAMPLES / "pointwise_chain.fz", "--json").stdout)
    assert report["pointwise_chain"]["sizes"] == {"M": 19, "N": 2 * 128 + 3}


@pytest.mark.parametrize("args, message", [
    (("parse", "missing.fz"), "fuserir: error: cannot read missing.fz: No such file"),
    (("eval", "softmax.fz", "--size", "M"), "--size: expected NAME=VALUE, got 'M'"),
    (("eval", "softmax.fz", "--size", "M=x"), "--size: M must be an integer, got 'x'"),
    (("eval", "softmax.fz", "--size", "M=0"), "--size: M must be >= 1, got 0"),
    (("eval", "softmax.fz", "--size", "Q=4"), "--size: fusion softmax has no size named Q"),
    (("eval", "softmax.fz", "--fusion", "nope"), "softmax.fz has no fusion 'nope'"),
])
def test_bad_command_line_input_is_one_clear_line(args, message):
    result = fuserir(*args, cwd=EXAMPLES)
    assert result.returncode == 1
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_dsl_error_reports_location_and_caret(tmp_path):
    bad = tmp_path / "bad.fz"
    bad.write_text("fusion f(x: f32[N]) {\n  y = frobnicate(x)\n  output y\n}\n")
    result = fuserir("parse", bad)
    assert result.returncode == 1
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"fuserir: error: {bad}:2:7: ")
    assert "frobnicate" in first
    assert result.stderr.splitlines()[-1].strip() == "^"


def test_matmul_schedule_statement_is_not_implemented_yet(tmp_path):
    seed = tmp_path / "seed.fz"
    seed.write_text("fusion f(A: f16[K, M], B: f16[K, N]) {\n"
                    "  acc = matmul(A, B, layout=NT)\n  out = cast(acc, f16)\n  output out\n}\n"
                    "schedule f {\n  matmul(cta_tile=[256, 128, 32], splitk=5)\n}\n")
    result = fuserir("parse", seed)
    assert result.returncode == 1
    assert f"{seed}:7:3:" in result.stderr and "not implemented yet" in result.stderr
