"""One reveal.js deck per chapter, from the chapter's executed notebook.

    python scripts/slides.py [--profile cpu] [--chapters residual,coupling] [--output _build/slides]
                             [--executed-dir DIR]

Each deck holds the chapter's question (its title and opening paragraph), the key findings when the
chapter glues them, 3-5 key figures, the claim table and two discussion questions. What goes in is
chosen by the chapter's manifest in :mod:`layerlab.teach.decks` (cell tags ``slide`` /
``slide-claims`` override it). The executed notebooks come from ``--executed-dir`` (files
``<chapter>.<profile>.*.ipynb`` or ``<chapter>.ipynb``), else from ``scripts/build_book.py``'s
``execute`` (reused from the book build's cache ``_build/executed`` or executed at ``--profile``, the
shared model family trained first when a chapter needs it).

Decks are written with Jupyter's slides exporter (nbconvert) as ``<output>/<chapter>.slides.html``;
reveal.js and require.js are served from ``<output>/reveal.js`` and ``<output>/require.js``, copied
from ``book/_static/vendor/`` (git-ignored), which is filled from the npm registry on first use
(``npm pack``; install npm with ``apt-get install -y npm``): no CDN is needed to present.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
VENDOR = ROOT / "book" / "_static" / "vendor"
PACKAGES = {"reveal.js": "reveal.js@4.6.1", "requirejs": "requirejs@2.3.7"}  # what nbconvert's template loads
KEEP = {"reveal.js": ("dist/", "plugin/", "LICENSE"), "requirejs": ("require.js", "LICENSE")}


def vendor(dest: Path = VENDOR) -> Path:
    """Unpack reveal.js and require.js from the npm registry into ``dest`` (once); return ``dest``."""
    if all((dest / name / ".complete").exists() for name in PACKAGES):
        return dest
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("slides need reveal.js from the npm registry, and npm is not installed: "
                         "run `apt-get install -y npm` (as root) and retry")
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in PACKAGES.items():
            proc = subprocess.run([npm, "pack", spec, "--silent"], cwd=tmp, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"`npm pack {spec}` failed: {proc.stderr.strip()[-500:]}")
            tgz = Path(tmp) / proc.stdout.strip().splitlines()[-1]
            target = dest / name
            shutil.rmtree(target, ignore_errors=True)
            with tarfile.open(tgz) as tf:
                members = [m for m in tf.getmembers() if m.name.startswith("package/")
                           and m.name[len("package/"):].startswith(KEEP[name]) and (m.isfile() or m.isdir())]
                for m in members:
                    m.name = m.name[len("package/"):]
                tf.extractall(target, members=members, filter="data")
            (target / ".complete").write_text(spec + "\n")
    return dest


def load_build_book():
    spec = importlib.util.spec_from_file_location("layerlab_build_book", ROOT / "scripts" / "build_book.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("layerlab_build_book", module)
    spec.loader.exec_module(module)
    return module


def executed_notebooks(chapters: list[str], profile: str, executed_dir: Path | None) -> dict[str, Path]:
    """chapter -> its executed notebook (from ``executed_dir``, else built or reused by build_book)."""
    if executed_dir is not None:
        out = {}
        for ch in chapters:
            hits = sorted(executed_dir.glob(f"{ch}.{profile}.*.ipynb")) or sorted(executed_dir.glob(f"{ch}.ipynb"))
            if not hits:
                raise SystemExit(f"no executed notebook for {ch!r} at profile {profile} in {executed_dir}: run "
                                 f"`python scripts/build_book.py --profile {profile} --chapters {ch} --no-html`")
            out[ch] = hits[-1]
        return out
    bb = load_build_book()
    present = [c for c in bb.toc_chapters() if c.name in chapters]
    try:
        if any(bb.uses_family(c.name) for c in present):
            bb.train_family(profile)
        # the book build's cache: an unchanged chapter already executed by `make book` is reused
        return {c.name: bb.execute(c, profile, ROOT / "_build" / "executed") for c in present}
    except bb.BuildError as e:
        raise SystemExit(f"[slides] could not execute the chapters: {e}") from None


def _md(source: str, slide: str = "slide") -> nbformat.NotebookNode:
    return nbformat.v4.new_markdown_cell(source, metadata={"slideshow": {"slide_type": slide}})


def _output_cell(data: dict, slide: str = "-") -> nbformat.NotebookNode:
    c = nbformat.v4.new_code_cell("", metadata={"slideshow": {"slide_type": slide}})
    c.outputs = [nbformat.v4.new_output("display_data", data=data)]
    return c


# Slides are 960 x 700: claim tables and captions are set small, figures fit the height.
STYLE = ("<style>.reveal .jp-OutputArea table, .reveal table { font-size: 0.5em; } "
         ".reveal .jp-OutputArea img { max-height: 470px; } .reveal p.caption, .reveal em.caption "
         "{ font-size: 0.5em; } .reveal tr.claim-detail td { font-size: 0.85em; color: #444; } "
         ".reveal h1 { font-size: 1.7em; } .reveal h3 { text-transform: none; }</style>")


def deck_notebook(content) -> nbformat.NotebookNode:
    """The deck as a notebook with slide metadata (input cells are empty and excluded on export)."""
    cells = [_md(f"{STYLE}\n\n# {content.title}\n\n{content.question}\n\n"
                 f"*layerlab seminar, {content.chapter} chapter ({content.results_label})*")]
    if content.findings_md:
        cells.append(_md(f"## Key findings\n\n{content.findings_md}"))
    for i, (png, caption) in enumerate(content.figures, start=1):
        cells.append(_md(f"### Figure {i}"))
        cells.append(_output_cell({"image/png": png}))
        if caption:
            cells.append(_md(f'<p class="caption">{caption}</p>', "-"))
    if content.claims_html:
        cells.append(_md("## The claims, and our verdicts"))
        cells.append(_output_cell({"text/html": content.claims_html}))
    qs = "\n".join(f"{i}. {q}" for i, q in enumerate(content.discussion, start=1))
    cells.append(_md(f"## Discussion\n\n{qs}\n\n*{content.results_label}*"))
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    for i, c in enumerate(nb.cells):
        c.id = f"deck-{i}"
    nb.metadata = {"language_info": {"name": "python"}}
    return nb


def export_deck(nb: nbformat.NotebookNode, target: Path) -> Path:
    from nbconvert import SlidesExporter

    exp = SlidesExporter(reveal_url_prefix="reveal.js", require_js_url="require.js/require.js",
                         mathjax_url=MATHJAX, exclude_input=True, exclude_input_prompt=True,
                         exclude_output_prompt=True, reveal_scroll=True, reveal_theme="white")
    body, _ = exp.from_notebook_node(nb)
    # nbconvert's template configures MathJax 2; the vendored copy is MathJax 3, which reads window.MathJax
    body = body.replace(f'<script src="{MATHJAX}">', MATHJAX_CONFIG + f'<script src="{MATHJAX}">', 1)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(body)
    os.replace(tmp, target)
    return target


MATHJAX = "mathjax/tex-mml-chtml.js"
"""The decks load MathJax 3 from next to them (the book's vendored copy: ``make assets``), never a CDN."""
MATHJAX_CONFIG = ("<script>window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], "
                  "displayMath: [['$$', '$$'], ['\\\\[', '\\\\]']], processEscapes: true}};</script>")


def install_assets(output: Path) -> None:
    """Copy the vendored reveal.js, require.js and MathJax next to the decks (they load them relatively)."""
    src = vendor()
    shutil.copytree(src / "reveal.js", output / "reveal.js", dirs_exist_ok=True)
    shutil.copytree(src / "requirejs", output / "require.js", dirs_exist_ok=True)
    mathjax = src / "mathjax"
    if not (mathjax / "tex-mml-chtml.js").exists():
        import vendor_assets  # scripts/vendor_assets.py: MathJax from the npm registry

        vendor_assets.main()
    shutil.copytree(mathjax, output / "mathjax", dirs_exist_ok=True)


def main(argv: list[str] | None = None) -> int:
    from layerlab.teach.decks import DECKS, select

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=os.environ.get("PROFILE", "cpu"))
    ap.add_argument("--chapters", default=os.environ.get("CHAPTERS", ""))
    ap.add_argument("--output", type=Path, default=ROOT / "_build" / "slides")
    ap.add_argument("--executed-dir", type=Path, default=None)
    args = ap.parse_args(argv)
    chapters = [c.strip() for c in args.chapters.split(",") if c.strip()] or list(DECKS)
    unknown = [c for c in chapters if c not in DECKS]
    if unknown:
        raise SystemExit(f"no deck manifest for {unknown}: layerlab.teach.decks.DECKS has {list(DECKS)}")
    install_assets(args.output)
    for ch, path in executed_notebooks(chapters, args.profile, args.executed_dir).items():
        content = select(nbformat.read(path, as_version=4), DECKS[ch])
        target = export_deck(deck_notebook(content), args.output / f"{ch}.slides.html")
        note = f" (not found: {', '.join(content.missing)})" if content.missing else ""
        claims = "yes" if content.claims_html else "no"
        print(f"[slides] {target}: {len(content.figures)} figures, claims {claims}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
