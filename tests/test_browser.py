"""The smoke book as a reader sees it: every page opened in headless Chromium (offline, 1300 px wide,
after MathJax) and inspected in its rendered DOM.

A page fails on: raw TeX delimiters (``\\(``, ``\\[``: maths not typeset, e.g. MathJax not served by the
build), a MathJax "Math input error", a truncated table cell (pandas' "..."), a table wider than the
text column, a traceback, a warning or a stderr output, a path of the build machine, a figure
without a number (or an image shown outside a numbered figure), a missing image, or a broken internal
link (a missing file or ``#anchor``). The executed notebooks offered for download carry no machine path.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml
from _buildbook import ROOT
from _smokebook import load_script, require_chromium, smoke_book

chromium = load_script("chromium")

# Paths of a build machine: absolute home / temp / work directories, installed packages, this tree.
# (A relative `.venv/` in prose, as in "make creates .venv/", is not one.)
MACHINE_PATH = re.compile(
    r"(?:/home/\w|/root/|/tmp/|/work/|/Users/\w|/private/var/|site-packages/|dist-packages/|\.venv/lib/"
    r"|/usr/lib/python|/opt/conda|[A-Z]:\\Users|" + re.escape(str(ROOT)) + r")"
)
WARNING = re.compile(r"\b\w*Warning\b|\bWARNING\b")

# Run in the page after it is ready; returns what Python needs to judge it.
INSPECT_JS = r"""
(() => {
  const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const cs = getComputedStyle(article);
  const column = article.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
  const prose = article.cloneNode(true);
  prose.querySelectorAll('pre, code, script, style, mjx-container, .highlight, mjx-assistive-mml')
       .forEach(e => e.remove());
  const label = el => (el.closest('[id]') || {}).id || el.tagName.toLowerCase();
  const cellText = td => td.innerText.trim();
  const scrolls = t => {
    for (let e = t.parentElement; e && e !== article; e = e.parentElement) {
      const o = getComputedStyle(e).overflowX;
      if ((o === 'auto' || o === 'scroll') && e.getBoundingClientRect().width <= column + 1) return true;
    }
    return false;
  };
  return {
    title: document.title,
    prose: prose.innerText,
    text: document.body.innerText,
    merrors: [...document.querySelectorAll('mjx-merror')].map(e => e.getAttribute('data-mjx-error') || e.innerText),
    stderr: [...article.querySelectorAll('.output.stderr, .output.traceback, .output.error')]
             .map(e => e.innerText.slice(0, 200)),
    truncated: [...article.querySelectorAll('td, th')].map(cellText).filter(t => /(\.\.\.|\u2026)$/.test(t))
             .slice(0, 20),
    // a table wider than the column is a defect unless it scrolls inside its own box that fits the column
    wide: [...article.querySelectorAll('table')].filter(t => !scrolls(t))
             .map(t => ({id: label(t), width: t.getBoundingClientRect().width,
             head: (t.querySelector('th, td') || {innerText: ''}).innerText.slice(0, 40)}))
             .filter(t => t.width > column + 1),
    column: column,
    figures: [...article.querySelectorAll('figure')].map(f => ({id: f.id || label(f),
             numbered: !!f.querySelector('.caption-number')})),
    loose_images: [...article.querySelectorAll('img')].filter(i => !i.closest('figure')).map(i => i.src),
    broken_images: [...document.querySelectorAll('img')].filter(i => !i.complete || i.naturalWidth === 0)
             .map(i => i.getAttribute('src')),
    links: [...new Set([...document.querySelectorAll('a[href]')].map(a => a.href))],
  };
})()
"""


def _toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            files.extend(str(node[k]) for k in ("root", "file") if k in node)
            for k in ("parts", "chapters", "sections"):
                walk(node.get(k))
        elif isinstance(node, list):
            for x in node:
                walk(x)

    walk(toc)
    return files


PAGES = _toc_pages()


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    require_chromium()
    html = smoke_book(tmp_path_factory)
    with chromium.Browser(width=1300, height=900, offline=True) as browser:
        yield html, browser.new_page()


_IDS: dict[Path, set[str]] = {}


def _ids(path: Path) -> set[str]:
    if path not in _IDS:
        _IDS[path] = set(re.findall(r'\bid="([^"]+)"', path.read_text(errors="replace")))
    return _IDS[path]


def _broken_links(links: list[str], html: Path) -> list[str]:
    broken = []
    for href in links:
        parts = urlsplit(href)
        if parts.scheme != "file":
            continue
        target = Path(unquote(parts.path))
        if not target.resolve().is_relative_to(html.resolve()):
            broken.append(f"{href} (outside the book)")
        elif not target.exists():
            broken.append(f"{target.relative_to(html)} (no such file)")
        elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in _ids(target):
            broken.append(f"{target.relative_to(html)}#{parts.fragment} (no such anchor)")
    return broken


def problems(page, path: Path, html: Path) -> dict[str, list]:
    """Every defect of the rendered page at ``path``, by check (empty lists: none)."""
    mathjax = page.open(path)
    r = page.evaluate(INSPECT_JS)
    raw = sorted(set(re.findall(r".{0,30}(?:\\\(|\\\[|\\begin\{).{0,30}", r["prose"])))
    found = {
        "raw TeX (maths not typeset)": raw[:8] + ([f"MathJax {mathjax}"] if raw else []),
        "Math input error": r["merrors"] + (["Math input error"] if "Math input error" in r["text"] else []),
        "truncated table cell": r["truncated"],
        "table wider than the text column": [f"{t['id']} ({t['head']!r}): {t['width']:.0f} px > {r['column']:.0f} px"
                                             for t in r["wide"]],
        "Traceback": sorted(set(re.findall(r".{0,40}Traceback.{0,40}", r["text"]))),
        "Warning / stderr output": sorted(set(re.findall(r".{0,40}(?:" + WARNING.pattern + r").{0,40}", r["text"])))
                                   + r["stderr"],
        "machine path": sorted(set(re.findall(r".{0,30}" + MACHINE_PATH.pattern + r".{0,30}", r["text"]))),
        "unnumbered figure": [f["id"] for f in r["figures"] if not f["numbered"]]
                             + [f"image outside a figure: {Path(urlsplit(s).path).name}" for s in r["loose_images"]],
        "missing image": r["broken_images"],
        "broken internal link": _broken_links(r["links"], html),
    }
    return {k: v for k, v in found.items() if v}


@pytest.mark.slow
@pytest.mark.parametrize("entry", PAGES)
def test_page_renders_cleanly(book, entry):
    html, page = book
    path = html / f"{entry}.html"
    assert path.exists(), f"{entry}: no HTML page"
    found = problems(page, path, html)
    assert not found, f"{entry}.html:\n" + json.dumps(found, indent=1, ensure_ascii=False)


@pytest.mark.slow
def test_downloadable_notebooks_carry_no_machine_path(tmp_path_factory):
    """The executed notebooks behind the download button (``_sources/``) hold no build-machine path
    (papermill's metadata records the input and output paths unless the build removes them)."""
    html = smoke_book(tmp_path_factory)
    sources = sorted((html / "_sources").rglob("*.ipynb"))
    assert sources, "no downloadable notebooks"
    bad = {}
    for nb in sources:
        hits = sorted(set(m.group(0) for m in re.finditer(r".{0,30}" + MACHINE_PATH.pattern + r".{0,30}",
                                                          nb.read_text())))
        if hits:
            bad[str(nb.relative_to(html))] = hits[:5]
    assert not bad, json.dumps(bad, indent=1)


def test_the_checks_catch_each_defect(tmp_path):
    """A hand-made page with one defect of each kind fails every check (and a clean one none)."""
    require_chromium()
    (tmp_path / "img.png").write_bytes(b"")  # an empty file: not an image
    wide_row = "".join(f"<td>column {i} with a long value</td>" for i in range(30))
    bad = f"""<html><body><article class="bd-article" style="width:600px">
      <p>Raw maths \\(x^2\\) left untypeset. <mjx-merror data-mjx-error="Missing argument"></mjx-merror></p>
      <table><tr><td>a claim cut at fifty charac...</td></tr></table>
      <table><tr>{wide_row}</tr></table>
      <pre>Traceback (most recent call last)</pre>
      <div class="output stderr"><pre>/root/.venv/lib/python3.11/site-packages/tqdm/auto.py:21:
        TqdmWarning: IProgress not found</pre></div>
      <figure id="fig-x"><img src="img.png"><figcaption>no number</figcaption></figure>
      <a href="nowhere.html">a broken link</a> <a href="#no-anchor">a broken anchor</a>
    </article></body></html>"""
    (tmp_path / "bad.html").write_text(bad)
    (tmp_path / "good.html").write_text('<html><body><article class="bd-article"><p id="a">Fine text, '
                                        '<a href="#a">a link</a>.</p></article></body></html>')
    with chromium.Browser(width=1300) as browser:
        page = browser.new_page()
        found = problems(page, tmp_path / "bad.html", tmp_path)
        assert not problems(page, tmp_path / "good.html", tmp_path)
    assert set(found) == {
        "raw TeX (maths not typeset)", "Math input error", "truncated table cell", "table wider than the text column",
        "Traceback", "Warning / stderr output", "machine path", "unnumbered figure", "missing image",
        "broken internal link",
    }, found
    assert len(found["broken internal link"]) == 2


def _tiny_book(root: Path) -> tuple[Path, Path]:
    """A two-page 'built book' and its toc, for the scripts' own tests."""
    html = root / "html"
    (html / "book").mkdir(parents=True)
    (html / "book" / "intro.html").write_text("<html><head><title>Intro</title></head><body><article "
                                              "class='bd-article'><h1>The intro page</h1></article></body></html>")
    (html / "book" / "two.html").write_text("<html><body><article class='bd-article'><h1>Second page</h1>"
                                            "<p>text</p></article></body></html>")
    toc = root / "_toc.yml"
    toc.write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/two\n  - file: book/not_built\n")
    return html, toc


def test_screenshots_writes_one_png_per_built_page(tmp_path):
    require_chromium()
    shots = load_script("screenshots")
    html, toc = _tiny_book(tmp_path)
    pngs = shots.take(html, tmp_path / "shots", toc, width=800, log=lambda *_: None)
    assert [p.name for p in pngs] == ["book-intro.png", "book-two.png"]  # toc order, unbuilt entry left out
    for p in pngs:
        head = p.read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(head[16:20], "big") == 800


def test_a_page_whose_mathjax_has_started_is_reported_typeset(tmp_path):
    """``Page.open`` reports "typeset" once MathJax's startup promise resolves (it resolves to undefined,
    as MathJax 3's does), "not loaded" when MathJax never appears, "absent" on a page without maths."""
    require_chromium()
    started = ("<html><body><p class='math'>x</p><script>window.MathJax = {startup: {promise: "
               "new Promise(r => setTimeout(r, 100))}};</script></body></html>")
    (tmp_path / "started.html").write_text(started)
    (tmp_path / "never.html").write_text("<html><body><p class='math'>x</p></body></html>")
    (tmp_path / "plain.html").write_text("<html><body><p>no maths</p></body></html>")
    with chromium.Browser(width=800) as browser:
        page = browser.new_page()
        assert page.open(tmp_path / "started.html", math_timeout_s=5) == "typeset"
        assert page.open(tmp_path / "never.html", math_timeout_s=0.3) == "not loaded"
        assert page.open(tmp_path / "plain.html") == "absent"
