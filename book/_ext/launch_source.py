"""Sphinx extension: the book's launch buttons (Colab, Binder) open the *source* notebook.

A chapter page is built from the executed copy ``book/chapters/<name>.ipynb`` (written by
scripts/build_book.py, not in git), so sphinx-book-theme's launch links point at a file the
repository does not hold. This handler runs after the theme has built its header buttons
(``html-page-context``, priority 502 > the theme's 501) and rewrites every launch link's
``book/chapters/<name>.ipynb`` into ``notebooks/<name>.ipynb``, the notebook a reader can run
(its hidden set-up cell installs layerlab there: scripts/setup_cell.py).
"""

from __future__ import annotations

from typing import Any

CHAPTER_PREFIX = "book/chapters/"
SOURCE_DIR = "notebooks/"


def _rewrite(buttons: list[dict[str, Any]], old: str, new: str) -> None:
    for b in buttons:
        if b.get("type") == "group" and b.get("label") == "launch-buttons":
            for link in b.get("buttons", []):
                if "url" in link:
                    link["url"] = link["url"].replace(old, new)


def point_launch_buttons_at_sources(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    if not pagename.startswith(CHAPTER_PREFIX) or "header_buttons" not in context:
        return
    prefix = app.config["html_theme_options"].get("path_to_docs", "").strip("/")
    prefix = f"{prefix}/" if prefix else ""
    name = pagename[len(CHAPTER_PREFIX):]
    _rewrite(context["header_buttons"], f"{prefix}{pagename}.ipynb", f"{prefix}{SOURCE_DIR}{name}.ipynb")


def setup(app) -> dict:
    app.connect("html-page-context", point_launch_buttons_at_sources, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
