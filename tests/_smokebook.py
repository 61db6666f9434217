"""The smoke book built once per test session, shared by tests/test_browser.py and test_publish.py.

It reuses the session's smoke-executed notebooks (tests/_buildbook.py), so a notebook executed by
test_notebooks or test_book is not executed again; only the Jupyter Book HTML build is added.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _buildbook import ROOT, load_build_book, smoke_executed_dir

_BUILT: dict[str, Path] = {}


def smoke_book(tmp_path_factory) -> Path:
    """The HTML dir of this session's smoke build of the whole book (built on first use).

    ``LAYERLAB_SMOKE_HTML=<dir>`` reuses a smoke book built beforehand (``scripts/build_book.py
    --profile smoke --output <out>``, then ``<out>/_build/html``): for iterating on the page checks.
    """
    reuse = os.environ.get("LAYERLAB_SMOKE_HTML")
    if reuse:
        html = Path(reuse)
        if not (html / "index.html").exists():
            pytest.fail(f"LAYERLAB_SMOKE_HTML={reuse} holds no built book (no index.html)")
        return html
    if "html" not in _BUILT:
        bb = load_build_book()
        out = tmp_path_factory.getbasetemp() / "smoke-book"
        _BUILT["html"] = bb.build("smoke", output=out, executed_dir=smoke_executed_dir(tmp_path_factory))
    return _BUILT["html"]


def load_script(name: str):
    """scripts/<name>.py as a module (scripts/ is not a package; its modules import each other)."""
    import importlib
    import sys

    scripts = str(ROOT / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    return importlib.import_module(name)


def require_chromium() -> None:
    """Skip (saying how to install it) when no Chromium is on this machine."""
    chromium = load_script("chromium")
    if chromium.find_chromium() is None:
        pytest.skip(f"no Chromium: {chromium.INSTALL_HINT}")
