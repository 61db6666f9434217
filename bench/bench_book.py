"""Book rebuild times (issue 15): an unchanged rebuild and a prose-only edit, at the smoke profile.

The targets are wall times of the whole step as a reader of the repository runs it
(``scripts/build_book.py``: keys, page splicing, Jupyter Book): an unchanged rebuild <= 30 s and a
rebuild after editing one markdown cell of every chapter <= 60 s, neither executing a notebook.

    python bench/bench_book.py                                # every chapter (executes them first if needed)
    python bench/bench_book.py --chapters residual,calibration

The notebooks are copied to a temporary directory (the prose edit never touches ``notebooks/``);
executed notebooks are cached in ``--executed-dir`` (default: a directory under the system's temp
dir, kept between runs, so only the first run executes). Each step runs once (a build is long and
its cost is dominated by Sphinx, not noise); user+sys CPU seconds of the build process are printed
too, as the machine may be shared.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _timing as tm
import nbformat

ROOT = Path(__file__).resolve().parents[1]


def _build_book():
    spec = importlib.util.spec_from_file_location("layerlab_build_book", ROOT / "scripts" / "build_book.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def timed_build(args: list[str]) -> tuple[float, float, str]:
    """Wall and CPU (user+sys, children included) seconds of one build_book.py run, and its stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_book.py"), *args],
                          capture_output=True, text=True, env={**os.environ, "QUIET": "0"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"build failed:\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stderr


def edit_prose(notebooks: Path, names: list[str], stamp: str) -> None:
    """Append a sentence to the last markdown cell of every chapter (a typo fix's cost)."""
    for name in names:
        path = notebooks / f"{name}.ipynb"
        nb = nbformat.read(path, as_version=4)
        last = [c for c in nb.cells if c.cell_type == "markdown"][-1]
        last.source += f"\n\nA prose edit ({stamp})."
        nbformat.write(nb, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chapters", default="", help="comma-separated chapters (default: all in _toc.yml)")
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--executed-dir", type=Path, default=Path(tempfile.gettempdir()) / "layerlab-bench-book-exec")
    args = ap.parse_args()
    bb = _build_book()
    names = [c.strip() for c in args.chapters.split(",") if c.strip()] or [c.name for c in bb.toc_chapters()]
    with tempfile.TemporaryDirectory(prefix="bench-book-") as tmp:
        notebooks, out = Path(tmp) / "notebooks", Path(tmp) / "out"
        shutil.copytree(ROOT / "notebooks", notebooks)
        common = ["--profile", args.profile, "--chapters", ",".join(names), "--output", str(out),
                  "--executed-dir", str(args.executed_dir), "--notebooks-dir", str(notebooks)]
        wall, cpu, _ = timed_build(common)
        tm.info(f"first build ({len(names)} chapters at {args.profile}, executes what is not cached): "
                f"{wall:.1f} s wall, {cpu:.1f} s CPU")
        wall, cpu, log = timed_build(common)
        executed = log.count(": executing at")
        tm.result("unchanged rebuild", f"{wall:.1f} s wall ({cpu:.1f} s CPU, {executed} executed)",
                  "<= 30 s, 0 executed", wall <= 30 and executed == 0)
        edit_prose(notebooks, names, time.strftime("%H:%M:%S"))
        wall, cpu, log = timed_build(common)
        executed = log.count(": executing at")
        tm.result("prose-edit rebuild", f"{wall:.1f} s wall ({cpu:.1f} s CPU, {executed} executed)",
                  "<= 60 s, 0 executed", wall <= 60 and executed == 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
