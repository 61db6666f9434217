"""Strip outputs, execution counts and run metadata from chapter notebooks (in place).

    python scripts/strip_notebooks.py [notebooks/*.ipynb]    # default: every notebooks/*.ipynb
    python scripts/strip_notebooks.py --check                # exit 1 if any notebook needs stripping

Source notebooks are stored clean (tests/test_notebooks.py checks it); executed copies are build
artefacts under _build/ and book/chapters/. Cell tags (``parameters`` etc.) and ids are kept.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
RUN_KEYS = ("execution", "papermill", "ExecuteTime", "collapsed", "scrolled")


def strip(nb: nbformat.NotebookNode) -> bool:
    """Remove outputs and run metadata in place; return whether anything changed."""
    changed = False
    for cell in nb.cells:
        for key in RUN_KEYS:
            if key in cell.metadata:
                del cell.metadata[key]
                changed = True
        if cell.cell_type == "code":
            if cell.get("outputs") or cell.get("execution_count") is not None:
                changed = True
            cell.outputs = []
            cell.execution_count = None
    for key in ("papermill", "layerlab"):
        if key in nb.metadata:
            del nb.metadata[key]
            changed = True
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*", type=Path)
    ap.add_argument("--check", action="store_true", help="only report; exit 1 if a notebook is not clean")
    args = ap.parse_args(argv)
    paths = args.paths or sorted((ROOT / "notebooks").glob("*.ipynb"))
    dirty = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        if strip(nb):
            dirty.append(path)
            if not args.check:
                nbformat.write(nb, path)
    verb = "needs stripping" if args.check else "stripped"
    for path in dirty:
        print(f"{verb}: {path}")
    return 1 if (args.check and dirty) else 0


if __name__ == "__main__":
    sys.exit(main())
