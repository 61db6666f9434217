"""The whole book as one PDF: each built HTML page printed by headless Chromium, merged in toc order.

    python scripts/pdf.py [--html _build/html] [--toc _toc.yml] [--output _build/pdf/layerlab.pdf]

Why Chromium and not Jupyter Book's LaTeX builder: the pages' tables (claim tables, summaries) are
HTML outputs of the executed notebooks, which the LaTeX builder drops for their plain-text repr;
printing the built pages keeps the same tables, figures, verdict colours and typeset maths as the
HTML book (MathJax runs before printing). The theme's navigation chrome is hidden in print.
Each page starts on a new sheet and is one entry of the PDF's outline (bookmarks), named by its title.
Needs Debian's ``chromium`` (`make browser`) and ``pypdf`` (requirements.txt).
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chromium import Browser, BrowserError, book_pages  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# Print styles: no navigation chrome, the article at the full sheet width, no link underlines.
PRINT_CSS = """
@media print {
  .bd-header, .bd-header-article, .bd-sidebar-primary, .bd-sidebar-secondary, .header-article,
  .prev-next-area, .bd-footer, .bd-footer-article, .bd-footer-content, footer, .skip-link,
  .search-button-field, .theme-switch-button, .headerlink, .copybtn, #pst-back-to-top,
  .bd-search, .sidebar-toggle { display: none !important; }
  .bd-main, .bd-content, .bd-article-container, .bd-article, .bd-page-width, .bd-container,
  .bd-container__inner { max-width: 100% !important; width: 100% !important; margin: 0 !important;
    padding-left: 0 !important; padding-right: 0 !important; }
  a { text-decoration: none !important; }
  figure, .cell_output img, mjx-container[display="true"] { break-inside: avoid; }
  /* tables fit the sheet: cells wrap anywhere rather than push the last (verdict) column off the page */
  table { max-width: 100% !important; font-size: 78% !important; }
  th, td { overflow-wrap: break-word; hyphens: auto; }
  tr { break-inside: avoid; }
  h1, h2, h3 { break-after: avoid; }
  details > summary { display: none !important; }
  details, details * { opacity: 1 !important; animation: none !important; transition: none !important; }
  html, body { background: white !important; }
}
"""
INJECT_JS = f"""
(() => {{
  const s = document.createElement('style'); s.textContent = {PRINT_CSS!r}; document.head.appendChild(s);
  document.documentElement.dataset.theme = 'light'; document.documentElement.dataset.mode = 'light';
  // a printed page has no toggles: outputs hidden behind "Show code cell outputs" (tables) are printed open
  document.querySelectorAll('details').forEach(d => {{ d.open = true; }});
  const h = document.querySelector('main h1, article h1, h1');
  return (h ? h.innerText : document.title).replace(/[#¶]\\s*$/, '').trim();
}})()
"""


WIDE_TABLES_JS = """
[...document.querySelectorAll('article table, main table')]
  .filter(t => t.getBoundingClientRect().width > (t.closest('article, main') || document.body).clientWidth + 1)
  .map(t => ((t.closest('[id]') || {}).id || 'table') + ' ' + Math.round(t.getBoundingClientRect().width) + ' px')
"""


def _overflowing_tables(page, width_px: int) -> list[str]:
    """Tables wider than the printed text column, measured in print media at the sheet's width."""
    page.send("Emulation.setEmulatedMedia", {"media": "print"})
    page._metrics(width_px, page.browser.height)
    try:
        return page.evaluate(WIDE_TABLES_JS)
    finally:
        page.send("Emulation.setEmulatedMedia", {"media": ""})
        page._metrics(page.browser.width, page.browser.height)


def build_pdf(html_dir: Path, output: Path, toc_path: Path = ROOT / "_toc.yml", *, log=print) -> dict:
    """Print every toc page of ``html_dir`` and merge them into ``output``; return a summary."""
    from pypdf import PdfReader, PdfWriter

    html_dir = html_dir.resolve()
    pages = book_pages(html_dir, toc_path)
    if not pages:
        raise SystemExit(f"no built pages of {toc_path} under {html_dir}: build the book first (`make book`)")
    writer = PdfWriter()
    titles: list[str] = []
    overflow: dict[str, list[str]] = {}
    paper_px = int((8.27 - 2 * 0.5) * 96)  # A4 less the margins, in CSS pixels
    t0 = time.perf_counter()
    with Browser(width=1100) as browser, tempfile.TemporaryDirectory(prefix="layerlab-pdf-") as tmp:
        page = browser.new_page()
        for i, path in enumerate(pages):
            mathjax = page.open(path)
            title = page.evaluate(INJECT_JS) or path.stem
            wide = _overflowing_tables(page, paper_px)
            if wide:
                overflow[str(path.relative_to(html_dir))] = wide
            part = page.pdf(Path(tmp) / f"{i:03d}.pdf")
            reader = PdfReader(io.BytesIO(part.read_bytes()))
            first = len(writer.pages)
            for p in reader.pages:
                writer.add_page(p)
            writer.add_outline_item(title=title, page_number=first)
            titles.append(title)
            log(f"[pdf] {path.relative_to(html_dir)}: {len(reader.pages)} page(s), maths {mathjax}")
    writer.add_metadata({"/Title": "layerlab: how transformer layers differ", "/Creator": "scripts/pdf.py"})
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = output.with_name(f".{output.name}.tmp")
    with open(tmp_out, "wb") as fh:
        writer.write(fh)
    tmp_out.replace(output)
    summary = {"pdf": str(output), "pages": len(writer.pages), "html_pages": len(pages), "titles": titles,
               "overflowing_tables": overflow,
               "seconds": round(time.perf_counter() - t0, 1)}
    for name, tables in overflow.items():
        log(f"[pdf] WARNING {name}: table(s) wider than the sheet, clipped in print: {', '.join(tables)}")
    log(f"[pdf] {output}: {summary['pages']} pages from {len(pages)} HTML pages in {summary['seconds']} s")
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--html", type=Path, default=ROOT / "_build" / "html", help="the built HTML book")
    ap.add_argument("--toc", type=Path, default=ROOT / "_toc.yml", help="page order (default: _toc.yml)")
    ap.add_argument("--output", type=Path, default=ROOT / "_build" / "pdf" / "layerlab.pdf")
    args = ap.parse_args(argv)
    try:
        build_pdf(args.html, args.output, args.toc)
    except BrowserError as e:
        print(f"[pdf] ERROR: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
