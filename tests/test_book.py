"""The book build (scripts/build_book.py): executed-notebook cache, clear failures, and a smoke
build of the whole book with Jupyter Book (warnings are errors)."""

from __future__ import annotations

import nbformat
import pytest
import yaml
from _buildbook import ROOT, load_build_book, smoke_executed_dir

bb = load_build_book()


def _notebook(path, body="x = 1", title="# A throwaway chapter"):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(title),
        nbformat.v4.new_code_cell('profile = "cpu"', metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(
            "from layerlab.core.profiles import select\n"
            "n = select({'smoke': 1, 'cpu': 2, 'gpu': 3}, profile)\n" + body
        ),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return bb.Chapter(path.stem, path)


def test_toc_lists_the_chapters_in_order():
    from layerlab.chapters import CHAPTERS

    names = [c.name for c in bb.toc_chapters()]
    assert names == list(CHAPTERS)  # the book's order is the chapter registry's order
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    assert toc["root"] == "book/intro"
    assert (ROOT / "book" / "intro.md").exists() and (ROOT / "book" / "bibliography.md").exists()


def test_filter_toc_drops_missing_entries():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    out = bb._filter_toc(toc, {"book/chapters/anatomy", "book/chapters/growth"})
    files = list(bb._toc_files(out))
    assert "book/chapters/anatomy" not in files and "book/chapters/growth" not in files
    assert "book/chapters/residual" in files and files[0] == "book/intro"


def test_cache_key_tracks_source_and_parameters_not_outputs(tmp_path):
    ch = _notebook(tmp_path / "a.ipynb")
    k_cpu, k_smoke = bb.cache_key(ch, {"profile": "cpu"}), bb.cache_key(ch, {"profile": "smoke"})
    assert k_cpu != k_smoke
    nb = nbformat.read(ch.source, as_version=4)  # outputs and counts do not change the key
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", text="hello")]
    nb.cells[2].execution_count = 3
    nbformat.write(nb, ch.source)
    assert bb.cache_key(ch, {"profile": "cpu"}) == k_cpu
    nb.cells[2].source += "\ny = 2"  # a source edit does
    nbformat.write(nb, ch.source)
    assert bb.cache_key(ch, {"profile": "cpu"}) != k_cpu


def test_execute_caches_and_reuses(tmp_path):
    ch = _notebook(tmp_path / "nb" / "a.ipynb", body="import os\nprint(os.getcwd())")
    logs: list[str] = []
    first = bb.execute(ch, "smoke", tmp_path / "exec", log=logs.append)
    nb = nbformat.read(first, as_version=4)
    assert nb.metadata["layerlab"]["profile"] == "smoke"
    body = next(c for c in nb.cells if "getcwd" in c.source)
    assert body.outputs[0]["text"].strip() == str(ch.source.parent)  # cwd = the notebook's dir
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and "smoke" in injected[0].source
    mtime = first.stat().st_mtime_ns
    again = bb.execute(ch, "smoke", tmp_path / "exec", log=logs.append)
    assert again == first and again.stat().st_mtime_ns == mtime
    assert any("cached" in line for line in logs)
    assert not list((tmp_path / "exec").glob(".*.tmp")), "no temporary files left behind"


def test_failing_notebook_names_chapter_cell_and_error(tmp_path):
    ch = _notebook(tmp_path / "broken.ipynb", body="raise RuntimeError('deliberate failure')")
    with pytest.raises(bb.BuildError, match=r"'broken'.*RuntimeError: deliberate failure"):
        bb.execute(ch, "smoke", tmp_path / "exec")
    assert not list((tmp_path / "exec").glob("broken.smoke.*.ipynb")), "a failure is never cached"
    assert (tmp_path / "exec" / "failed" / "broken.smoke.ipynb").exists()


def test_unknown_profile_and_missing_sources_are_clear_errors(tmp_path):
    with pytest.raises(bb.BuildError, match="unknown profile 'tpu'"):
        bb.build("tpu", output=tmp_path / "out", html=False)
    with pytest.raises(bb.BuildError, match="do not exist.*remove its entry"):
        bb.build("smoke", output=tmp_path / "out", notebooks_dir=tmp_path / "empty", html=False)


@pytest.mark.slow
def test_smoke_build_of_the_whole_book(tmp_path, tmp_path_factory):
    """Execute every present chapter at smoke (reusing this session's executed notebooks) and
    build the HTML book in a temp dir with warnings as errors."""
    out = tmp_path / "book"
    html = bb.build("smoke", output=out, executed_dir=smoke_executed_dir(tmp_path_factory))
    assert (html / "index.html").exists()
    assert (html / "book" / "intro.html").exists()
    assert (html / "book" / "bibliography.html").exists()
    for ch in bb.toc_chapters():
        if ch.source.exists():
            page = html / "book" / "chapters" / f"{ch.name}.html"
            assert page.exists(), f"no HTML page for chapter {ch.name}"
            assert "Traceback" not in page.read_text()
    bib = (html / "book" / "bibliography.html").read_text().lower()
    for title in ("diversity of transformer layers", "transformer block coupling", "anatomical heterogeneity"):
        assert title in bib


def test_a_chapter_edit_reexecutes_only_that_chapter():
    """The executed-notebook key of each chapter covers the layerlab modules its notebook imports,
    transitively: no other chapter package is among them, so editing one chapter's package changes
    only that chapter's key (and re-executes only it)."""
    from layerlab.chapters import CHAPTERS
    from layerlab.core.fingerprints import module_closure

    for name in CHAPTERS:
        nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        mods = module_closure(source=code)
        assert any(m.startswith(f"layerlab.chapters.{name}") for m in mods), (name, mods)
        own = f"layerlab.chapters.{name}"
        others = [m for m in mods if m.startswith("layerlab.chapters.") and not m.startswith(own)]
        assert not others, f"{name}'s notebook key depends on other chapters: {others}"
