"""The book build (scripts/build_book.py): the executed-notebook cache (code, parameters and library
only: a prose edit is spliced in without executing), clean pages (plumbing hidden, no injected cell,
no warning or machine path), offline MathJax, progress lines, clear failures, and a smoke build of
the whole book with Jupyter Book (warnings are errors)."""

from __future__ import annotations

import re

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


def test_cache_key_tracks_code_and_parameters_not_markdown_or_outputs(tmp_path):
    ch = _notebook(tmp_path / "a.ipynb")
    k_cpu, k_smoke = bb.cache_key(ch, {"profile": "cpu"}), bb.cache_key(ch, {"profile": "smoke"})
    assert k_cpu != k_smoke
    nb = nbformat.read(ch.source, as_version=4)  # outputs and counts do not change the key
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", text="hello")]
    nb.cells[2].execution_count = 3
    nbformat.write(nb, ch.source)
    assert bb.cache_key(ch, {"profile": "cpu"}) == k_cpu
    nb.cells[0].source += "\n\nA new paragraph of prose."  # nor markdown, nor a display tag
    nb.cells.insert(2, nbformat.v4.new_markdown_cell("## A new section"))
    nb.cells[3].metadata["tags"] = ["hide-input"]
    nbformat.write(nb, ch.source)
    assert bb.cache_key(ch, {"profile": "cpu"}) == k_cpu
    nb.cells[3].source += "\ny = 2"  # a code edit does
    nbformat.write(nb, ch.source)
    assert bb.cache_key(ch, {"profile": "cpu"}) != k_cpu


def _page(rendered):
    return nbformat.read(rendered.page, as_version=4)


def test_render_executes_once_then_reuses(tmp_path):
    ch = _notebook(tmp_path / "nb" / "a.ipynb", body="import os\nprint(os.getcwd())")
    logs: list[str] = []
    first = bb.render(ch, "smoke", tmp_path / "exec", tmp_path / "pages", log=logs.append)
    assert first.action == "executed"
    executed = next((tmp_path / "exec").glob("a.smoke.*.ipynb"))
    raw = nbformat.read(executed, as_version=4)
    assert raw.metadata["layerlab"]["profile"] == "smoke"
    assert "input_path" not in raw.metadata["papermill"] and "output_path" not in raw.metadata["papermill"]
    page = _page(first)
    body = next(c for c in page.cells if "getcwd" in c.source)
    assert body.outputs[0]["text"].strip() == str(ch.source.parent)  # cwd = the notebook's dir
    assert not [c for c in page.cells if "injected-parameters" in c.metadata.get("tags", [])]
    params = next(c for c in page.cells if "parameters" in c.metadata.get("tags", []))
    assert params.source == 'profile = "smoke"'  # the values it ran with, so the download reproduces it
    assert "remove-cell" in params.metadata["tags"]
    mtime = executed.stat().st_mtime_ns
    again = bb.render(ch, "smoke", tmp_path / "exec", tmp_path / "pages", log=logs.append)
    assert again.action == "cached" and executed.stat().st_mtime_ns == mtime
    assert any("cached (page unchanged)" in line for line in logs)
    assert not list((tmp_path / "exec").glob(".*.tmp")), "no temporary files left behind"


def test_a_markdown_edit_is_spliced_without_executing_and_a_code_edit_executes(tmp_path):
    ch = _notebook(tmp_path / "nb" / "a.ipynb", body="print('first output')")
    nb = nbformat.read(ch.source, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("Old closing words."))
    nb.cells.append(nbformat.v4.new_code_cell("print('second output')"))
    nbformat.write(nb, ch.source)
    assert bb.render(ch, "smoke", tmp_path / "exec", tmp_path / "pages").action == "executed"

    nb = nbformat.read(ch.source, as_version=4)  # prose only: edit, insert, delete, move
    nb.cells[0].source = "# A retitled chapter"
    nb.cells.insert(2, nbformat.v4.new_markdown_cell("A paragraph before the first output."))
    del nb.cells[4]  # "Old closing words."
    nb.cells.append(nbformat.v4.new_markdown_cell("New closing words."))
    nbformat.write(nb, ch.source)
    done = bb.render(ch, "smoke", tmp_path / "exec", tmp_path / "pages")
    assert done.action == "cached"
    page = _page(done)
    assert [c.source for c in page.cells if c.cell_type == "markdown"] == [
        "# A retitled chapter", "A paragraph before the first output.", "New closing words."]
    assert [c.id for c in page.cells] == [c.id for c in nb.cells]  # the source's ids and order
    printed = {c.source.splitlines()[-1]: c.outputs[0]["text"] for c in page.cells if "print" in c.source}
    assert printed == {"print('first output')": "first output\n", "print('second output')": "second output\n"}

    nb.cells[-2].source = "print('edited output')"  # a code edit re-executes
    nbformat.write(nb, ch.source)
    done = bb.render(ch, "smoke", tmp_path / "exec", tmp_path / "pages")
    assert done.action == "executed"
    assert any(o.get("text") == "edited output\n" for c in _page(done).cells for o in c.get("outputs", []))
    assert len(list((tmp_path / "exec").glob("a.smoke.*.ipynb"))) == 1, "one executed copy per chapter"


def test_the_kernel_prints_no_tqdm_warning_and_pages_carry_no_machine_path(tmp_path):
    """tqdm.auto without ipywidgets warns "IProgress not found" (with the venv's path) in a kernel:
    the build's kernel environment silences it, so the page has no stderr and no path."""
    ch = _notebook(tmp_path / "nb" / "a.ipynb", body="import tqdm.auto\nimport layerlab.training.train")
    done = bb.render(ch, "smoke", tmp_path / "exec", tmp_path / "pages")
    assert done.problems == ()
    text = done.page.read_text()
    assert str(bb.ROOT) not in text and str(tmp_path) not in text and "site-packages" not in text


def test_build_reports_progress_with_estimates_and_is_quiet_with_QUIET(tmp_path, monkeypatch, capsys):
    src = tmp_path / "notebooks"
    _notebook(src / "calibration.ipynb", body="y = n + 1")
    out, exec_dir = tmp_path / "out", tmp_path / "exec"
    lines: list[str] = []
    report: list = []
    bb.build("smoke", output=out, executed_dir=exec_dir, notebooks_dir=src, html=False,
             only={"calibration"}, log=lines.append, report=report)
    assert [r.action for r in report] == ["executed"]
    assert any(ln.startswith("notebooks: 1 of 1 to execute") for ln in lines)
    assert any(ln.startswith("calibration: executed in") for ln in lines)
    nb = nbformat.read(src / "calibration.ipynb", as_version=4)
    nb.cells[2].source += "\nz = 3"
    nbformat.write(nb, src / "calibration.ipynb")
    lines.clear()
    bb.build("smoke", output=out, executed_dir=exec_dir, notebooks_dir=src, html=False,
             only={"calibration"}, log=lines.append)
    assert any("estimate" in ln and "from the last build" in ln for ln in lines), lines
    assert any(ln.startswith("calibration: executing") and "last build:" in ln for ln in lines), lines

    progress = bb.Progress(quiet=False)
    progress("a phase")
    assert capsys.readouterr().err.strip().endswith("] a phase")
    monkeypatch.setenv("QUIET", "1")
    quiet = bb.Progress()
    quiet("a phase")
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


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


# ----------------------------------------------------------------------------- clean pages
pages = bb.bookpages


@pytest.mark.parametrize("source, tag", [
    ("import os\nfrom layerlab.chapters import residual", "remove-cell"),
    ("import time\nT0 = time.perf_counter()\nplots.use_style()\nP = residual.preset(profile, seed=seed)",
     "remove-cell"),
    ('glue_values("res", r.numbers)\nglue_figure("fig_lens", plots.fig_lens(r));', "remove-cell"),
    ('if profile != "gpu":\n    os.environ.setdefault("HF_HUB_OFFLINE", "1")', "remove-cell"),
    ("# only a comment", "remove-cell"),
    ("r.per_doc_table()", "remove-input"),
    ('glue_figure("fig_norms", plots.fig_norms(r))\nr.norm_curve.round(3)', "remove-input"),
    ("display(r.delta_table())\nfig = plots.delta_figure(r)", "remove-input"),
    ('r = residual.run(P)\nglue_values("", r.numbers)\nr.overview', "hide-input"),
    ("r = residual.run(P)\nr.overview", None),
    ("x = [", None),  # not Python: shown as written
])
def test_plumbing_is_hidden_by_tags(source, tag):
    assert pages.classify(source) == tag


def test_author_tags_win_and_parameters_are_removed():
    cell = nbformat.v4.new_code_cell("r.per_doc_table()", metadata={"tags": ["show-input"]})
    assert pages.auto_tag(cell) == ["show-input"]
    cell = nbformat.v4.new_code_cell("import os", metadata={"tags": ["hide-output"]})
    assert pages.auto_tag(cell) == ["hide-output", "remove-cell"]
    cell = nbformat.v4.new_code_cell('profile = "cpu"', metadata={"tags": ["parameters"]})
    assert pages.auto_tag(cell) == ["parameters", "remove-cell"]
    assert pages.auto_tag(nbformat.v4.new_markdown_cell("import os")) == []


def test_parameters_cell_shows_the_values_it_ran_with():
    src = 'profile = "cpu"\nseed = 0  # the seed\noverrides = {}'
    out = pages.with_values(src, {"profile": "smoke", "seed": 3})
    assert out == 'profile = "smoke"\nseed = 3  # the seed\noverrides = {}'


def test_problems_name_stderr_errors_and_machine_paths():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("Run `.venv/bin/papermill notebooks/x.ipynb` (a relative path is fine)."),
        nbformat.v4.new_code_cell("x", outputs=[
            nbformat.v4.new_output("stream", name="stderr", text="UserWarning: careful\n"),
            nbformat.v4.new_output("execute_result", data={"text/plain": "/work/wt/x/data.bin"}),
            nbformat.v4.new_output("stream", name="stdout",
                                   text="/opt/venv/lib/python3.11/site-packages/tqdm/auto.py:21"),
        ]),
    ]
    nb.metadata["papermill"] = {"input_path": "/root/repo/notebooks/x.ipynb"}
    found = "\n".join(pages.problems(nb, roots=[]))
    assert "stderr output 'UserWarning: careful'" in found
    assert "'/work/'" in found and "site-packages" in found and "notebook metadata" in found
    assert "cell 0" not in found  # the relative .venv/bin in prose is not a machine path
    clean = nbformat.v4.new_notebook()
    clean.cells = [nbformat.v4.new_code_cell("1", outputs=[
        nbformat.v4.new_output("execute_result", data={"text/plain": "1"})])]
    assert pages.problems(clean, roots=[]) == []


def test_mathjax_without_npm_is_one_clear_error(tmp_path, monkeypatch):
    va = bb.vendor_assets
    monkeypatch.setattr(va.shutil, "which", lambda name: None)
    with pytest.raises(va.AssetError, match=r"npm is not installed.*apt-get install -y npm.*make assets"):
        va.ensure_mathjax(tmp_path / "mathjax")
    assert not va.mathjax_ready(tmp_path / "mathjax")
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / va.MATHJAX_ENTRY).write_text("// mathjax")
    (tmp_path / "ok" / "VERSION").write_text(va.MATHJAX_VERSION)
    assert va.ensure_mathjax(tmp_path / "ok") == tmp_path / "ok" / va.MATHJAX_ENTRY  # no npm needed


def test_config_serves_mathjax_and_the_css_from_the_build():
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]
    assert cfg["mathjax_path"] == f"vendor/mathjax/{bb.vendor_assets.MATHJAX_ENTRY}"
    assert bb.vendor_assets.MATHJAX_DIR == ROOT / cfg["html_static_path"][0] / "vendor" / "mathjax"
    assert all((ROOT / "book" / "_static" / css).is_file() for css in cfg["html_css_files"])


@pytest.mark.slow
def test_smoke_build_of_the_whole_book(tmp_path, tmp_path_factory):
    """Execute every present chapter at smoke (reusing this session's executed notebooks) and
    build the HTML book in a temp dir with warnings as errors; no page shows a warning, a machine
    path or papermill's injected cell, and maths is served from the build (no CDN)."""
    out = tmp_path / "book"
    html = bb.build("smoke", output=out, executed_dir=smoke_executed_dir(tmp_path_factory), strict=True)
    assert (html / "index.html").exists()
    assert (html / "book" / "intro.html").exists()
    assert (html / "book" / "bibliography.html").exists()
    assert (html / "_static" / "vendor" / "mathjax" / bb.vendor_assets.MATHJAX_ENTRY).exists()
    for ch in bb.toc_chapters():
        if ch.source.exists():
            page = html / "book" / "chapters" / f"{ch.name}.html"
            assert page.exists(), f"no HTML page for chapter {ch.name}"
            text = page.read_text()
            for bad in ("Traceback", "Warning", "tag_injected-parameters", "cdn.jsdelivr.net", str(ROOT), str(out)):
                assert bad not in text, f"{ch.name}.html contains {bad!r}"
            if 'class="math' in text:  # Sphinx loads MathJax only on pages with maths: the vendored copy
                assert "_static/vendor/mathjax/tex-mml-chtml.js" in text, f"{ch.name}.html: maths without MathJax"
            assert "layerlab.css" in text
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


def test_an_edit_to_a_static_file_reaches_the_built_book(tmp_path):
    """Sphinx copies html_static_path only when it writes a page, so a CSS-only edit used to stay out of
    the built book (and its PDF); ``sync_static`` copies what differs, atomically, and nothing else."""
    config = {"sphinx": {"config": {"html_static_path": ["book/_static"]}}}
    (tmp_path / "_config.yml").write_text(yaml.safe_dump(config))
    static = tmp_path / "book" / "_static"
    (static / "vendor").mkdir(parents=True)
    (static / "layerlab.css").write_text("table { width: 100%; }")
    (static / "vendor" / "a.js").write_text("x")
    (static / ".hidden").write_text("never copied")
    html = tmp_path / "_build" / "html"
    assert sorted(bb.sync_static(tmp_path, html)) == ["layerlab.css", "vendor/a.js"]
    assert not (html / "_static" / ".hidden").exists()
    assert bb.sync_static(tmp_path, html) == []  # nothing differs: nothing copied
    (static / "layerlab.css").write_text("table { width: 90%; }")
    assert bb.sync_static(tmp_path, html) == ["layerlab.css"]
    assert (html / "_static" / "layerlab.css").read_text() == "table { width: 90%; }"
    assert not list((html / "_static").glob(".*.tmp"))


def test_family_log_line_is_the_cli_summary_not_a_table_row():
    """The build logs the family CLI's summary; the CLI prints the seed-noise table after it, whose last row
    was logged instead ("family: ready in 5 s (15     lr       d4-w64-t1024 ...)")."""
    out = ("name depth\n0 d1-w64 1\n21 members; elapsed 5 s; summed member training time 2860 s wall, 2800 s CPU\n"
           "   axis  member_a  member_b\n15     lr       d4-w64-t1024   0.003    0.010\n")
    assert bb.family_summary(out) == "21 members; elapsed 5 s; summed member training time 2860 s wall, 2800 s CPU"
    assert bb.family_summary("only line\n") == "only line" and bb.family_summary("") == ""


def test_every_test_file_reading_the_smoke_book_runs_in_the_book_worker():
    """The test files that use this session's smoke-executed notebooks or smoke book are conftest's
    BOOK_TESTS: under ``make test``'s two workers they run in one, and the notebooks are executed once
    (a file left out would execute them again in the other worker; a file put in without need would
    lengthen the book worker, the longest)."""
    from conftest import BOOK_TESTS, scope_of

    users = {p.stem for p in (ROOT / "tests").glob("test_*.py")
             if re.search(r"\b(smoke_executed_dir|smoke_book)\(", p.read_text())}
    assert users == BOOK_TESTS, sorted(users ^ BOOK_TESTS)
    assert {scope_of(f"tests/{stem}.py::t") for stem in BOOK_TESTS} == {"book"}
    assert scope_of("tests/test_cache.py::t[x]") == "tests/test_cache.py"


def test_progress_lines_show_headings_as_plain_words():
    """The build's per-section progress line drops a heading's maths and code marks and cuts it at a word
    (the anatomy heading once printed as "… the delta correlation and its $-0.5$ n")."""
    head = "Weights across depth: the delta correlation and its $-0.5$ null"
    assert bb._plain_heading(head, width=80) == "Weights across depth: the delta correlation and its -0.5 null"
    assert bb._plain_heading(head) == "Weights across depth: the delta correlation and its -0.5…"
    short = bb._plain_heading(head, width=40)
    assert short == "Weights across depth: the delta…" and len(short) <= 41
    assert bb._plain_heading("`skip_attn` and **ΔNLL**") == "skip_attn and ΔNLL"
