"""Chapter notebooks: stored clean, parametrised by profile, and executable at the smoke profile.

Every ``notebooks/*.ipynb`` must carry no outputs, have one ``parameters`` cell defining
``profile`` (default ``"cpu"``), start with a single ``# Title`` markdown cell (the page title),
execute with papermill at ``profile=smoke`` into a page without stderr output, traceback or machine
path (scripts/bookpages.py), and fail with a clear message on an unknown profile
(each chapter chooses its preset with ``layerlab.core.profiles.select``).
"""

from __future__ import annotations

import ast
import re

import nbformat
import pytest
from _buildbook import NOTEBOOKS, load_build_book, smoke_executed_dir

IDS = [p.stem for p in NOTEBOOKS]


def _read(path):
    return nbformat.read(path, as_version=4)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_stored_without_outputs(path):
    nb = _read(path)
    dirty = [
        i for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None)
    ]
    assert not dirty, (
        f"{path.name}: cells {dirty} carry outputs or execution counts; strip them "
        "with `make strip` (scripts/strip_notebooks.py)"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_one_parameters_cell_defining_profile(path):
    nb = _read(path)
    tagged = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: {len(tagged)} cells tagged 'parameters'; need exactly one"
    cell = tagged[0]
    assert cell.cell_type == "code"
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert first_code is cell, f"{path.name}: the parameters cell must be the first code cell"
    assigned = {
        t.id: node.value
        for node in ast.parse(cell.source).body if isinstance(node, ast.Assign)
        for t in node.targets if isinstance(t, ast.Name)
    }
    assert "profile" in assigned, f"{path.name}: the parameters cell must define `profile`"
    default = assigned["profile"]
    assert isinstance(default, ast.Constant) and default.value == "cpu", (
        f"{path.name}: the parameters cell must set profile = \"cpu\" (the default book build)"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_starts_with_single_title(path):
    nb = _read(path)
    first = nb.cells[0]
    assert first.cell_type == "markdown", f"{path.name}: the first cell must be the markdown title"
    lines = [ln for ln in first.source.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and re.match(r"^# \S", lines[0]), (
        f"{path.name}: the first cell must be a single '# Title' heading, got {first.source[:80]!r}"
    )
    # No second top-level heading: Jupyter Book takes the page title and toc entry from the first.
    for i, c in enumerate(nb.cells[1:], start=1):
        if c.cell_type != "markdown":
            continue
        text = re.sub(r"```.*?```", "", c.source, flags=re.S)
        h1 = [ln for ln in text.splitlines() if re.match(r"^# \S", ln)]
        assert not h1, f"{path.name}: cell {i} has a second top-level heading {h1[0]!r}; use '##'"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_listed_in_toc(path):
    bb = load_build_book()
    names = [c.name for c in bb.toc_chapters()]
    assert path.stem in names, f"{path.name} is not in _toc.yml; add `- file: book/chapters/{path.stem}`"


def test_every_toc_chapter_has_a_notebook():
    bb = load_build_book()
    missing = [c.name for c in bb.toc_chapters() if not c.source.exists()]
    assert not missing, f"_toc.yml lists chapters without a notebook source: {missing} (notebooks/<name>.ipynb)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_executes_at_smoke_profile(path, tmp_path_factory):
    bb = load_build_book()
    out = bb.execute(bb.Chapter(path.stem, path), "smoke", smoke_executed_dir(tmp_path_factory))
    nb = _read(out)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert nb.metadata["layerlab"]["profile"] == "smoke"
    executed = [c for c in nb.cells if c.cell_type == "code" and c.get("execution_count") is not None]
    assert len(executed) == sum(c.cell_type == "code" for c in nb.cells)
    # The page a reader sees: no stderr (warnings silenced at their source), traceback or machine path.
    page = bb.bookpages.page_notebook(_read(path), nb)
    problems = bb.bookpages.problems(page)
    assert not problems, f"{path.name} at smoke: " + "; ".join(problems)


_REJECT = r"""
import json, sys
import nbformat
out = {}
for path in sys.argv[1:]:
    nb = nbformat.read(path, as_version=4)
    ns, got = {"__name__": "__main__"}, None
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        if "parameters" in cell.metadata.get("tags", []):
            exec(cell.source, ns)
            ns["profile"] = "no-such-profile"  # what papermill injects after the parameters cell
            continue
        try:
            exec(cell.source, ns)
        except Exception as e:  # the cell that rejects the profile
            got = [i, type(e).__name__, str(e), cell.source]
            break
    out[path] = got
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def rejections():
    """Each notebook's code cells run in order in one fresh namespace per notebook (one process for all, as
    papermill would run them with ``profile`` injected as an unknown name): the first cell that raises, and
    what it raised."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", _REJECT, *map(str, NOTEBOOKS)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_unknown_profile_is_rejected_before_anything_runs(path, rejections):
    """Every notebook chooses its preset with ``layerlab.core.profiles.select``: an unknown profile raises its
    ValueError, naming the profile, in a cell before any chapter computation (no ``<chapter>.run(`` reached)."""
    got = rejections[str(path)]
    assert got is not None, f"{path.name}: profile='no-such-profile' ran every cell without an error"
    cell, kind, msg, source = got
    assert kind == "ValueError" and "no-such-profile" in msg, f"{path.name}: cell {cell} raised {kind}: {msg}"
    nb = _read(path)
    before = [c.source for c in nb.cells if c.cell_type == "code"][:cell]
    assert not any(re.search(r"\b(?!subprocess\.)\w+\.run(_family)?\(", s) for s in [*before, source]), (
        f"{path.name}: the unknown profile is rejected only after a chapter computation started (cell {cell})")


def test_unknown_profile_fails_the_build_clearly(tmp_path):
    """Through the book build (papermill, a real kernel): the chapter's ValueError reaches the build's error."""
    bb = load_build_book()
    path = next(p for p in NOTEBOOKS if p.stem == "calibration")
    with pytest.raises(bb.BuildError) as err:
        bb.execute(bb.Chapter(path.stem, path), "no-such-profile", tmp_path, use_cache=False)
    msg = str(err.value)
    assert "ValueError" in msg and "no-such-profile" in msg, (
        f"{path.name}: an unknown profile must raise layerlab.core.profiles.select's ValueError, got: {msg}"
    )

