"""Every code block of README.md and docs/*.md runs, so the documentation stays true.

Each fenced block is one test, by its kind (the fence's language):

* ```fz: DSL text; it must parse (fuserir.parse). Preceded by `<!-- refused -->` it must
  instead be refused with a DslError.
* ```python: executed in a fresh namespace, in the document's scratch directory.
* ```sh: each line (`\\` continues it) is a command, run with bash in that directory;
  `&&`-separated steps that create a virtual environment or pip-install are left out (the
  tests run in the installed environment). Must exit 0.
* ```console: a transcript. Each `$ COMMAND` line is run as above, and the lines after it
  are its output (stdout, then stderr): they must appear in that order, a line `...`
  standing for any number of lines left out and `…` inside a line for any text cut out of
  it. A command whose transcript shows `fuserir: error:` must exit 1, any other 0 (or 1
  where its output reports hazards or mismatches); never 2 (an internal error).
* ```text: illustrative output, pseudo-code or a diagram; not run.

An indented code block is a shell block (```sh): README's install-and-run commands keep
that form, which tests/test_packaging.py and .ci/run read. Anything else, a fence without a
language or of another one, fails the test: a block must say what it is.

HTML comments on the lines right above a fence say more about it:

* `<!-- file: NAME -->`: the block is also saved as NAME in the document's scratch
  directory (before any block of the document runs), for later blocks to read; where
  examples/NAME exists, the block must equal it.
* `<!-- needs: gpu -->`: the block needs an NVIDIA GPU and is skipped without one
  (pytest.mark.gpu); `<!-- needs: gpu, slow -->` also marks it slow (a benchmark that runs
  for minutes: `-m slow` on a GPU machine).
* `<!-- skip: REASON -->`: not run, for the reason given (e.g. the block runs this whole
  test suite).
* `<!-- figures: vary -->` (console): the transcript's numbers are one run's (timings);
  each number matches any number, the rest of the line must match.

The scratch directory of a document holds links to the repository's examples/ and
benchmarks/, and a bin/ of `fuserir`, `python` and `python3` (and `.venv/bin/python`) that
run this interpreter with this checkout first on its path.
"""

import contextlib
import io
import os
import pathlib
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

import fuserir
from fuserir.errors import DslError

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
KINDS = ("fz", "python", "sh", "console", "text")
COMMAND_TIMEOUT = 120


@dataclass
class Block:
    doc: pathlib.Path
    line: int                       # of the opening fence, 1-based
    kind: str
    text: str
    notes: dict = field(default_factory=dict)

    @property
    def id(self):
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def _notes(lines, fence):
    """The `<!-- key: value -->` comments on the lines right above line index `fence`."""
    notes = {}
    i = fence - 1
    if i >= 0 and not lines[i].strip() and not lines[fence].lstrip().startswith("```"):
        i -= 1                  # an indented block follows its comments after a blank line
    while i >= 0 and lines[i].strip().startswith("<!--") and lines[i].strip().endswith("-->"):
        body = lines[i].strip()[4:-3].strip()
        key, _, value = body.partition(":")
        notes[key.strip()] = value.strip()
        i -= 1
    return notes


def _indented_code_blocks(lines):
    """Line numbers of indented (unfenced) code blocks: 4+ spaces after a blank line, not
    inside a list item and not inside a fence."""
    found, fenced = [], False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or not line.startswith("    ") or not line.strip():
            continue
        if i == 0 or lines[i - 1].strip():
            continue
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        previous = lines[k] if k >= 0 else ""
        if previous.startswith(" ") or re.match(r"([*-]|\d+\.) ", previous):
            continue                                # a list item's continuation
        found.append(i + 1)
    return found


def blocks(doc):
    lines = doc.read_text().split("\n")
    found, i = [], 0
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith("```"):
            kind = stripped[3:].strip()
            j = i + 1
            while not lines[j].strip().startswith("```"):
                j += 1
            found.append(Block(doc, i + 1, kind, "\n".join(lines[i + 1:j]) + "\n",
                               _notes(lines, i)))
            i = j + 1
        else:
            i += 1
    for n in _indented_code_blocks(lines):
        j = n - 1
        while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
            j += 1
        text = "\n".join(line[4:] for line in lines[n - 1:j]).strip("\n") + "\n"
        found.append(Block(doc, n, "sh", text, _notes(lines, n - 1)))
    return sorted(found, key=lambda b: b.line)


ALL = [b for doc in DOCS for b in blocks(doc)]


def _marks(block):
    needs = {n.strip() for n in block.notes.get("needs", "").split(",") if n.strip()}
    marks = [getattr(pytest.mark, n) for n in sorted(needs)]
    return pytest.param(block, id=block.id, marks=marks)


def test_every_code_block_has_a_known_kind():
    bad = [f"{b.id}: fence kind {b.kind!r}" for b in ALL if b.kind not in KINDS]
    assert not bad, "\n".join(bad)


def test_the_blocks_are_found():
    assert len(ALL) > 30
    assert {b.kind for b in ALL} == set(KINDS)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """{doc: its scratch directory}, made on first use, with the document's files."""
    made = {}
    bin_dir = tmp_path_factory.mktemp("bin")
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    for name, run in (("fuserir", f"{sys.executable} -m fuserir"),
                      ("python", sys.executable), ("python3", sys.executable)):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\nPYTHONPATH={path} exec {run} \"$@\"\n")
        script.chmod(0o755)

    def get(doc):
        if doc not in made:
            here = tmp_path_factory.mktemp(doc.stem)
            for name in ("examples", "benchmarks"):
                (here / name).symlink_to(ROOT / name)
            (here / ".venv" / "bin").mkdir(parents=True)
            (here / ".venv" / "bin" / "python").symlink_to(bin_dir / "python")
            for b in blocks(doc):
                if "file" in b.notes:
                    (here / b.notes["file"]).write_text(b.text)
            made[doc] = here
        return made[doc]

    get.bin = bin_dir
    return get


def _environment(bin_dir):
    env = {k: v for k, v in os.environ.items()
           if k not in ("FUSERIR_DUMP", "FUSERIR_DUMP_AFTER", "FUSERIR_TRACEBACK")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _commands(text):
    """The lines of a shell block, `\\` continuations joined."""
    out, current = [], ""
    for line in text.splitlines():
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        if current.strip() and not current.strip().startswith("#"):
            out.append(current.strip())
        current = ""
    return out


def _without_installs(command):
    steps = [s.strip() for s in command.split("&&")]
    kept = [s for s in steps if not re.match(r"(python3? -m venv|\S*pip3? install)", s)]
    return " && ".join(kept)


def _run(command, cwd, bin_dir):
    """Run a shell command in cwd. A plain `fuserir ARGS` (no environment variables,
    redirections or pipes) runs in this process, through fuserir.cli.main, which is what
    the console script calls: the same output, without a new interpreter's start-up."""
    if re.fullmatch(r"fuserir( [^|<>;&$`=\\]*)?", command) and not any(
            os.environ.get(v) for v in ("FUSERIR_DUMP", "FUSERIR_DUMP_AFTER")):
        from fuserir.cli import main
        out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
        os.chdir(cwd)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(shlex.split(command)[1:])
                except SystemExit as exit_:
                    code = exit_.code
        finally:
            os.chdir(here)
        return subprocess.CompletedProcess(command, code or 0, out.getvalue(),
                                           err.getvalue())
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=_environment(bin_dir),
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT)


NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?")


def _line_matches(want, got, figures_vary=False):
    def literal(text):
        if not figures_vary:
            return re.escape(text)
        pieces = NUMBER.split(text)
        return r"\d+(?:\.\d+)?(?:e[+-]?\d+)?".join(re.escape(p) for p in pieces)
    pattern = ".*".join(literal(part) for part in want.rstrip().split("…"))
    return re.fullmatch(pattern, got.rstrip()) is not None


def _transcript_matches(want, got, figures_vary=False):
    """Whether the lines `want` (a transcript's output, with `...` lines) appear in `got`
    in order; returns the first line that does not, or None."""
    got = [g for g in got if g.strip()]
    position, anywhere = 0, False
    for line in want:
        if not line.strip():
            continue
        if line.strip() == "...":
            anywhere = True
            continue
        while position < len(got) and not _line_matches(line, got[position], figures_vary):
            if not anywhere:
                return line
            position += 1
        if position == len(got):
            return line
        position, anywhere = position + 1, False
    return None


def _transcript(text):
    """[(command, [output lines])] of a console block."""
    steps = []
    for line in text.splitlines():
        if line.startswith("$ "):
            command = line[2:]
            # a trailing `# comment` is for the reader
            command = re.sub(r"\s+#[^'\"]*$", "", command)
            steps.append((command, []))
        elif steps:
            steps[-1][1].append(line)
    return steps


@pytest.mark.parametrize("block", [_marks(b) for b in ALL if b.kind in KINDS])
def test_block(block, scratch):
    if "skip" in block.notes:
        pytest.skip(f"{block.id}: {block.notes['skip']}")
    if block.kind == "text":
        return
    if "file" in block.notes and (ROOT / "examples" / block.notes["file"]).exists():
        shipped = (ROOT / "examples" / block.notes["file"]).read_text()
        assert block.text == shipped, f"{block.id} differs from examples/{block.notes['file']}"
    here = scratch(block.doc)
    if block.kind == "fz":
        if "refused" in block.notes:
            with pytest.raises(DslError):
                fuserir.parse(block.text)
        else:
            fuserir.parse(block.text)
    elif block.kind == "python":
        cwd = os.getcwd()
        os.chdir(here)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(block.text, block.id, "exec"), {"__name__": "__doc_block__"})
        finally:
            os.chdir(cwd)
    elif block.kind == "sh":
        for command in _commands(block.text):
            result = _run(_without_installs(command), here, scratch.bin)
            assert result.returncode == 0, (f"{block.id}: {command}\n{result.stdout}"
                                            f"{result.stderr}")
    elif block.kind == "console":
        steps = _transcript(block.text)
        assert steps, f"{block.id}: a console block shows at least one `$ command`"
        for command, want in steps:
            result = _run(command, here, scratch.bin)
            output = (result.stdout + result.stderr).splitlines()
            shown = "\n".join(output)
            assert result.returncode != 2 and "Traceback" not in result.stderr, shown
            if any(line.startswith("fuserir: error:") for line in want):
                assert result.returncode == 1, f"{block.id}: {command} should fail\n{shown}"
            else:
                assert result.returncode == 0 or (
                    result.returncode == 1 and any("hazard" in x or "differ" in x
                                                   for x in want)), f"{command}\n{shown}"
            missing = _transcript_matches(want, output, "figures" in block.notes)
            assert missing is None, (f"{block.id}: `{command}` did not print\n  {missing}\n"
                                     f"in order; it printed:\n{shown}")
