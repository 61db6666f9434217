"""One chapter protocol for every chapter package, and notebooks that narrate instead of compute.

Each ``layerlab.chapters.<name>`` has ``presets.py``, ``run.py``, ``claims.py`` and ``plots.py`` and
exposes ``PRESETS`` (one frozen :class:`layerlab.core.protocol.Preset` subclass per profile),
``preset(profile, **overrides)``, ``run(preset) -> <Name>Result`` (a dataclass with provenance),
``claims(result) -> list[Claim]``, ``plots`` and ``USES_FAMILY`` (the book trains the shared family
first when a chapter needs it). Notebook code cells hold no loops, comprehensions, ``def``,
``lambda`` or class, import only in the set-up cell, and glue through ``layerlab.report.glue``.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import typing
from pathlib import Path

import nbformat
import pytest

from layerlab.chapters import CHAPTERS
from layerlab.core.profiles import PROFILE_NAMES
from layerlab.core.protocol import Preset, Provenance

ROOT = Path(__file__).resolve().parents[1]
FILES = ("presets.py", "run.py", "claims.py", "plots.py")


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_protocol(name):
    ch = importlib.import_module(f"layerlab.chapters.{name}")
    pkg_dir = Path(ch.__file__).parent
    for f in FILES:
        assert (pkg_dir / f).is_file(), f"chapters/{name}/ lacks {f}"
    for attr in ("PRESETS", "preset", "run", "claims", "plots", "USES_FAMILY"):
        assert hasattr(ch, attr), f"layerlab.chapters.{name} does not expose {attr}"
    assert isinstance(ch.USES_FAMILY, bool)
    assert tuple(ch.PRESETS) == PROFILE_NAMES
    for p in ch.PRESETS.values():
        assert isinstance(p, Preset) and type(p).__dataclass_params__.frozen
    p = ch.preset("smoke")
    assert p.profile == "smoke" and p.device == "cpu"
    with pytest.raises(ValueError, match="unknown profile"):
        ch.preset("laptop")
    with pytest.raises(ValueError, match="unknown preset field"):
        ch.preset("smoke", no_such_field=1)
    hints = typing.get_type_hints(ch.run)
    result_type = hints.get("return")
    assert result_type is not None and dataclasses.is_dataclass(result_type), f"{name}.run must return a dataclass"
    fields = {f.name: f for f in dataclasses.fields(result_type)}
    assert "provenance" in fields, f"{result_type.__name__} must carry provenance"
    assert typing.get_type_hints(result_type)["provenance"] is Provenance
    assert len(inspect.signature(ch.claims).parameters) >= 1, f"{name}.claims takes the result"


def _code_cells(path: Path):
    """Code cells, without the generated Colab/Binder set-up cell (tag ``launch-setup``: written by
    scripts/setup_cell.py, checked by tests/test_publish.py)."""
    nb = nbformat.read(path, as_version=4)
    return [c for c in nb.cells
            if c.cell_type == "code" and "launch-setup" not in c.get("metadata", {}).get("tags", [])]


def _parse(src: str) -> ast.AST:
    lines = ["pass" if ln.lstrip().startswith(("%", "!")) else ln for ln in src.splitlines()]
    return ast.parse("\n".join(lines))


FORBIDDEN = {
    ast.For: "a for loop", ast.AsyncFor: "a for loop", ast.While: "a while loop", ast.FunctionDef: "a def",
    ast.AsyncFunctionDef: "a def", ast.Lambda: "a lambda", ast.ClassDef: "a class", ast.ListComp: "a comprehension",
    ast.SetComp: "a comprehension", ast.DictComp: "a comprehension", ast.GeneratorExp: "a comprehension",
}


@pytest.mark.parametrize("name", CHAPTERS)
def test_notebook_narrates(name):
    cells = _code_cells(ROOT / "notebooks" / f"{name}.ipynb")
    params = [i for i, c in enumerate(cells) if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert params == [0]
    problems = []
    for i, c in enumerate(cells[1:], start=1):
        for node in ast.walk(_parse(c.source)):
            for kind, what in FORBIDDEN.items():
                if isinstance(node, kind):
                    problems.append(f"code cell {i}: {what} (line {node.lineno}) belongs in the library")
            if isinstance(node, (ast.Import, ast.ImportFrom)) and i != 1:
                problems.append(f"code cell {i}: import mid-notebook (line {node.lineno}); import in the set-up cell")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "glue":
                problems.append(f"code cell {i}: glue(...) (line {node.lineno}); use report.glue.glue_values")
    assert not problems, f"notebooks/{name}.ipynb:\n  " + "\n  ".join(problems)
