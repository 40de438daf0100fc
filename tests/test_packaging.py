"""The packaging contract: README's two commands, .ci/run running the README's test line."""

import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _readme_commands():
    return [line.strip() for line in (ROOT / "README.md").read_text().splitlines()
            if line.startswith("    python3 -m venv")]


def test_readme_opens_with_main_job_and_test_commands():
    """Both install the GPU stack (the cuda13 extra): the demo and the suite run on a GPU."""
    main_job, tests = _readme_commands()[:2]
    assert main_job.endswith("examples/demo.py") and "'.[cuda13]'" in main_job
    assert "pytest" in tests and "'.[test,cuda13]'" in tests


def test_readme_names_the_core_and_both_cuda_extras():
    readme = (ROOT / "README.md").read_text()
    assert all(name in readme for name in ("`fuserir[cuda13]`", "`fuserir[cuda12]`",
                                           "`pip install fuserir` is the core"))


def test_ci_installs_the_core_alone_and_the_cuda12_extra_before_the_suite():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q -e '.[test]'" in ci and "tests/test_interp.py" in ci
    assert "pip install -q -e '.[cuda12]'" in ci and "check_cuda_install.py 12" in ci
    assert (ROOT / "tools" / "check_cuda_install.py").is_file()


def test_ci_runs_exactly_the_readme_test_command():
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert _readme_commands()[1] == ci_lines[-1]


def _names(requirements):
    return {re.split("[<>=!~ ;\\[]", d)[0] for d in requirements}


def test_pyproject_declares_packages_dependencies_and_script():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert _names(project["dependencies"]) == {"numpy", "ml_dtypes", "lark", "tqdm"}
    assert project["scripts"]["fuserir"] == "fuserir.cli:main"
    extras = project["optional-dependencies"]
    assert {"pytest", "hypothesis", "pytest-xdist", "mypy"} <= _names(extras["test"])


def test_the_gpu_stack_is_an_extra_per_cuda_major():
    """The core installs without any CUDA package; cuda13 and cuda12 bring CuPy, NVRTC and
    cuda.bindings of one CUDA major each, and the test extra brings none of them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert _names(extras["cuda13"]) == {"cupy-cuda13x", "nvidia-cuda-nvrtc", "cuda-bindings"}
    assert _names(extras["cuda12"]) == {"cupy-cuda12x", "nvidia-cuda-nvrtc-cu12",
                                        "cuda-bindings"}
    cuda = _names(extras["cuda13"]) | _names(extras["cuda12"])
    assert cuda.isdisjoint(_names(project["dependencies"]))
    assert cuda.isdisjoint(_names(extras["test"]))
    for extra, major in (("cuda13", 13), ("cuda12", 12)):
        for requirement in extras[extra]:
            if not requirement.startswith("cupy"):        # CuPy's own versions differ
                assert f">={major}." in requirement and f"<{major + 1}" in requirement


def test_version_and_license_have_one_home():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "fuserir.__version__"}
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().split()[:4] == ["Apache", "License", "Version", "2.0,"]


def test_typed_packages_ship_their_marker():
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"][
        "setuptools"]["package-data"]
    for package in ("fuserir", "lowering", "codegen", "driver"):
        assert (ROOT / package / "py.typed").is_file()
        assert "py.typed" in package_data[package]
