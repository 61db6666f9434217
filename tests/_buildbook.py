"""Shared helpers for the notebook and book tests: load scripts/build_book.py as a module and
name the session's directory of smoke-executed notebooks (shared by test_notebooks and test_book,
so each notebook is executed once per test session)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def load_build_book():
    """scripts/build_book.py as a module (scripts/ is not a package)."""
    name = "layerlab_build_book"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "build_book.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def smoke_executed_dir(tmp_path_factory) -> Path:
    """One directory per pytest session (the session's base temp dir) for smoke-executed notebooks."""
    d = tmp_path_factory.getbasetemp() / "executed-smoke"
    d.mkdir(parents=True, exist_ok=True)
    return d
