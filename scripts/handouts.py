"""A one- or two-page PDF handout per chapter: question, key findings, figures and the claim table.

    python scripts/handouts.py [--profile cpu] [--chapters residual] [--output _build/handouts]
                               [--executed-dir DIR]

The content is chosen from the executed notebook exactly as for the slides
(:mod:`layerlab.teach.decks`; see ``scripts/slides.py`` for where executed notebooks come from),
laid out as one A4 HTML page (figures two per row) and printed to PDF by headless Chromium
(``apt-get install -y chromium``). ``<output>/<chapter>.html`` is kept next to the PDF.
"""

from __future__ import annotations

import argparse
import html
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from slides import ROOT, executed_notebooks  # noqa: E402

CSS = """
@page { size: A4; margin: 12mm; }
body { font-family: "DejaVu Sans", Arial, sans-serif; font-size: 9.5pt; color: #111; margin: 0; }
h1 { font-size: 15pt; margin: 0 0 4pt 0; } h2 { font-size: 11pt; margin: 8pt 0 3pt 0; }
p.q { margin: 0 0 6pt 0; } .findings { background: #eef6ee; border-left: 3pt solid #3a3; padding: 3pt 8pt; }
.figs { display: grid; grid-template-columns: 1fr 1fr; gap: 6pt; }
figure { margin: 0; break-inside: avoid; } figure img { width: 100%; max-height: 62mm; object-fit: contain; }
figcaption { font-size: 8pt; color: #444; }
table { border-collapse: collapse; font-size: 7.5pt; width: 100%; break-inside: auto; }
th, td { border: 0.5pt solid #bbb; padding: 1.5pt 3pt; vertical-align: top; text-align: left; }
tbody.claim-row { break-inside: avoid; } tr.claim-main > * { border-bottom: none; }
tr.claim-detail td { border-top: none; font-size: 0.92em; color: #444; } .claim-label { font-weight: 600; }
tr { break-inside: avoid; } footer { margin-top: 6pt; font-size: 7.5pt; color: #666; }
"""


def _markdown(md: str) -> str:
    from nbconvert.filters.markdown import markdown2html

    return markdown2html(md)


def handout_html(content) -> str:
    """One self-contained HTML page (figures inlined as base64 PNG)."""
    parts = [f"<h1>{html.escape(content.title)}</h1>", f"<p class='q'>{_markdown(content.question)}</p>"]
    if content.findings_md:
        parts.append(f"<div class='findings'><h2>Key findings</h2>{_markdown(content.findings_md)}</div>")
    if content.figures:
        figs = "".join(f"<figure><img src='data:image/png;base64,{png.strip()}'/>"
                       f"<figcaption>Figure {i}{': ' + html.escape(cap) if cap else ''}</figcaption></figure>"
                       for i, (png, cap) in enumerate(content.figures[:4], start=1))
        parts.append(f"<h2>Key figures</h2><div class='figs'>{figs}</div>")
    if content.claims_html:
        parts.append(f"<h2>The claims, and our verdicts</h2>{content.claims_html}")
    qs = "".join(f"<li>{_markdown(q)}</li>" for q in content.discussion)
    parts.append(f"<h2>For discussion</h2><ol>{qs}</ol>")
    parts.append("<footer>layerlab: every number is computed from the executed chapter notebook; "
                 f"{html.escape(content.results_label)}.</footer>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(content.title)}</title>"
            f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>")


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    raise SystemExit("handouts are printed by headless Chromium, which is not installed: "
                     "run `apt-get install -y chromium` (as root) and retry")


def print_pdf(page: Path, pdf: Path) -> Path:
    tmp = pdf.with_name(f".{pdf.name}.tmp")
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer",
           f"--print-to-pdf={tmp}", page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if proc.returncode != 0 or not tmp.exists():
        raise SystemExit(f"chromium could not print {page}: {proc.stderr.strip()[-800:]}")
    os.replace(tmp, pdf)
    return pdf


def pages(pdf: Path) -> int | None:
    """Page count (``pdfinfo`` from poppler-utils), or None when it is not installed."""
    if shutil.which("pdfinfo") is None:
        return None
    out = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True).stdout
    return next((int(line.split()[-1]) for line in out.splitlines() if line.startswith("Pages:")), None)


def main(argv: list[str] | None = None) -> int:
    from layerlab.teach.decks import DECKS, select

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=os.environ.get("PROFILE", "cpu"))
    ap.add_argument("--chapters", default=os.environ.get("CHAPTERS", ""))
    ap.add_argument("--output", type=Path, default=ROOT / "_build" / "handouts")
    ap.add_argument("--executed-dir", type=Path, default=None)
    args = ap.parse_args(argv)
    chapters = [c.strip() for c in args.chapters.split(",") if c.strip()] or list(DECKS)
    args.output.mkdir(parents=True, exist_ok=True)
    for ch, path in executed_notebooks(chapters, args.profile, args.executed_dir).items():
        content = select(nbformat.read(path, as_version=4), DECKS[ch])
        page = args.output / f"{ch}.html"
        page.write_text(handout_html(content))
        pdf = print_pdf(page, args.output / f"{ch}.pdf")
        n = pages(pdf)
        warn = "  (more than 2 pages: trim the manifest)" if n and n > 2 else ""
        print(f"[handouts] {pdf}: {n if n is not None else '?'} page(s){warn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
