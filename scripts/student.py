"""Write the student copies of the exercise notebooks: solution cells removed, stubs kept.

    python scripts/student.py [--output _build/student] [--chapters residual,anatomy]

Reads ``notebooks/exercises/<chapter>.ipynb`` (the instructor version with folded solutions, also
rendered in the book) and writes ``<output>/<chapter>.ipynb`` through
:func:`layerlab.teach.notebooks.student_notebook`. The copies run at the ``smoke`` profile up to their
first stub without error (``tests/test_teach.py``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "notebooks" / "exercises"


def exercise_notebooks(chapters: list[str] | None = None) -> list[Path]:
    """The exercise notebooks, all or the named ones (a missing one is a clear error)."""
    paths = sorted(EXERCISES.glob("*.ipynb"))
    if chapters:
        known = {p.stem: p for p in paths}
        missing = [c for c in chapters if c not in known]
        if missing:
            raise SystemExit(f"no exercise notebook for {missing}: have {sorted(known)} in {EXERCISES}")
        paths = [known[c] for c in chapters]
    return paths


def write_student(path: Path, output: Path) -> Path:
    from layerlab.core.cache import atomic_write
    from layerlab.teach.notebooks import student_notebook

    nb = student_notebook(nbformat.read(path, as_version=4))
    target = output / path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(target) as tmp:
        nbformat.write(nb, tmp)
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", type=Path, default=ROOT / "_build" / "student")
    ap.add_argument("--chapters", default="", help="comma-separated chapters (default: every exercise notebook)")
    args = ap.parse_args(argv)
    chapters = [c.strip() for c in args.chapters.split(",") if c.strip()] or None
    for p in exercise_notebooks(chapters):
        print(f"[student] {write_student(p, args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
