"""Tables shown in the book are never elided: after ``report.plots.use_style`` (every chapter notebook's set-up
call), pandas renders every row, column and character. The browser test fails a page with a cell that ends in
"..." (tests/test_browser.py); at the smoke profile the tables are too small to show it, at cpu they are not."""

from __future__ import annotations

import pandas as pd

from layerlab.report import plots


def test_use_style_shows_whole_tables():
    long = "Aubry et al. ICLR 2025 Fig. 1a, read by eye (+/- 0.02 on the y axis, 28 LLMs)"
    df = pd.DataFrame({f"c{j}": [f"{long} {i}" if j == 0 else i * j for i in range(120)] for j in range(40)})
    with pd.option_context("display.max_rows", 60, "display.max_columns", 20, "display.max_colwidth", 50):
        assert "..." in df._repr_html_()  # pandas' defaults elide this table
        plots.use_style()
        html = df._repr_html_()
    assert "..." not in html and "…" not in html and f"{long} 119" in html and "c39" in html
