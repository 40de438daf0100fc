"""The packaging contract: README's two commands, .ci/run running the README's test line."""

import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _readme_commands():
    return [line.strip() for line in (ROOT / "README.md").read_text().splitlines()
            if line.startswith("    python3 -m venv")]


def test_readme_opens_with_main_job_and_test_commands():
    main_job, tests = _readme_commands()[:2]
    assert main_job.endswith("examples/demo.py")
    assert "pytest" in tests and "'.[test]'" in tests


def test_ci_runs_exactly_the_readme_test_command():
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert _readme_commands()[1] == ci_lines[-1]


def test_pyproject_declares_packages_dependencies_and_script():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {re.split("[<>=]", d)[0] for d in project["dependencies"]}
    assert {"numpy", "ml_dtypes", "networkx", "lark", "cupy-cuda13x",
            "nvidia-cuda-nvrtc", "cuda-bindings"} <= names
    assert project["scripts"]["fuserir"] == "fuserir.cli:main"
    assert {"pytest", "hypothesis", "pytest-xdist"} <= {re.split("[<>=]", d)[0] for d in
                                         project["optional-dependencies"]["test"]}
