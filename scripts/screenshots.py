"""A full-page PNG of every built book page, for review: ``_build/screenshots/<page>.png``.

    python scripts/screenshots.py [--html _build/html] [--output _build/screenshots] [--width 1300]

Pages are taken in the toc's order with headless Chromium (Debian's ``chromium``: `make browser`),
offline (no host name resolves) and after MathJax has typeset, so a screenshot shows what a reader
without network sees. ``book/chapters/coupling.html`` becomes ``book-chapters-coupling.png``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chromium import Browser, BrowserError, book_pages  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def png_name(page: Path, html_dir: Path) -> str:
    return "-".join(page.relative_to(html_dir).with_suffix("").parts) + ".png"


def take(html_dir: Path, output: Path, toc_path: Path = ROOT / "_toc.yml", *, width: int = 1300,
         dark: bool = False, log=print) -> list[Path]:
    """Screenshot every toc page of ``html_dir`` into ``output``; return the PNG paths."""
    html_dir = html_dir.resolve()
    pages = book_pages(html_dir, toc_path)
    if not pages:
        raise SystemExit(f"no built pages of {toc_path} under {html_dir}: build the book first (`make book`)")
    output.mkdir(parents=True, exist_ok=True)
    shots = []
    with Browser(width=width) as browser:
        page = browser.new_page()
        for path in pages:
            mathjax = page.open(path)
            if dark:
                page.evaluate("document.documentElement.dataset.theme = 'dark'; "
                              "document.documentElement.dataset.mode = 'dark'")
            png = page.screenshot(output / png_name(path, html_dir))
            shots.append(png)
            log(f"[screenshots] {png} (maths {mathjax})")
    return shots


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--html", type=Path, default=ROOT / "_build" / "html", help="the built HTML book")
    ap.add_argument("--toc", type=Path, default=ROOT / "_toc.yml", help="page order (default: _toc.yml)")
    ap.add_argument("--output", type=Path, default=ROOT / "_build" / "screenshots")
    ap.add_argument("--width", type=int, default=1300, help="viewport width in CSS pixels")
    ap.add_argument("--dark", action="store_true", help="the theme's dark mode")
    args = ap.parse_args(argv)
    try:
        shots = take(args.html, args.output, args.toc, width=args.width, dark=args.dark)
    except BrowserError as e:
        print(f"[screenshots] ERROR: {e}", file=sys.stderr)
        return 1
    print(f"[screenshots] {len(shots)} page(s) in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
