"""Build the layerlab book: execute every chapter notebook with papermill, then run Jupyter Book.

    python scripts/build_book.py [--profile cpu|smoke|gpu] [--output DIR] [--executed-dir DIR]

Chapters are the ``book/chapters/<name>`` entries of ``_toc.yml``; the source of chapter ``<name>``
is ``notebooks/<name>.ipynb`` (stored without outputs). Each is executed with papermill and
``-p profile <PROFILE>`` on the ``layerlab`` kernel (this interpreter, registered on demand), with
the working directory at ``notebooks/`` (as when a reader opens it in Jupyter). The executed copy is
cached as ``<executed-dir>/<name>.<profile>.<key>.ipynb`` where ``key`` fingerprints the notebook
source without outputs, the parameters and the library modules the notebook imports, transitively
(``layerlab.core.cache.module_fingerprint``: an edit to an unrelated module keeps the chapter cached); an
unchanged rebuild only copies cached notebooks to ``book/chapters/`` and lets Sphinx rebuild what
changed. Then ``jupyter-book build --warningiserror --nitpick --keep-going`` writes
``<output>/_build/html``.

A chapter listed in the toc without a notebook source fails the build, naming the file. A failing
notebook fails the build with its name and the error; the partially executed notebook is kept in
``<executed-dir>/failed/`` for inspection.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHAPTER_PREFIX = "book/chapters/"
KERNEL_NAME = "layerlab"
# Progress bars off, hub off: the book build is quiet and offline.
BUILD_ENV = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_OFFLINE": "1"}
# Book sources copied when building into a separate output tree (tests): everything but chapters.
BOOK_SOURCES = ("_config.yml", "_toc.yml", "book")


class BuildError(RuntimeError):
    """A chapter could not be built; the message names the chapter and the fix."""


@dataclass(frozen=True)
class Chapter:
    name: str
    source: Path  # notebooks/<name>.ipynb


# ----------------------------------------------------------------------------- table of contents
def _toc_files(node: object) -> Iterable[str]:
    if isinstance(node, dict):
        if "file" in node:
            yield str(node["file"])
        for key in ("root", "parts", "chapters", "sections"):
            if key == "root" and key in node:
                yield str(node["root"])
            elif key in node:
                yield from _toc_files(node[key])
    elif isinstance(node, list):
        for item in node:
            yield from _toc_files(item)


def toc_chapters(
    toc_path: Path = ROOT / "_toc.yml", notebooks_dir: Path = ROOT / "notebooks"
) -> list[Chapter]:
    """Chapters listed in the toc, in order: ``book/chapters/<name>`` -> ``notebooks/<name>.ipynb``."""
    toc = yaml.safe_load(toc_path.read_text())
    names = [f[len(CHAPTER_PREFIX) :] for f in _toc_files(toc) if f.startswith(CHAPTER_PREFIX)]
    names = [n.removesuffix(".ipynb") for n in names]
    return [Chapter(n, notebooks_dir / f"{n}.ipynb") for n in names]


def _filter_toc(node: object, drop: set[str]) -> object:
    """The toc without the entries whose ``file`` is in ``drop`` (empty lists removed)."""
    if isinstance(node, list):
        kept = [_filter_toc(x, drop) for x in node]
        return [x for x in kept if x is not None]
    if isinstance(node, dict):
        if node.get("file") in drop:
            return None
        out = {}
        for k, v in node.items():
            v = _filter_toc(v, drop)
            if isinstance(v, list) and not v and k in ("chapters", "sections"):
                continue
            if isinstance(v, list) and not v and k == "parts":
                continue
            out[k] = v
        if "chapters" in node and "chapters" not in out and "file" not in out:
            return None  # a part left without chapters
        return out
    return node


# ----------------------------------------------------------------------------- notebook keys
def notebook_source_key(path: Path) -> dict:
    """What defines a notebook's result: cell types, sources and tags (no outputs, no ids)."""
    nb = nbformat.read(path, as_version=4)
    cells = [
        {"type": c.cell_type, "source": c.source, "tags": sorted(c.get("metadata", {}).get("tags", []))}
        for c in nb.cells
    ]
    return {"cells": cells, "nbformat": nb.nbformat}


def cache_key(chapter: Chapter, parameters: dict) -> str:
    """Fingerprint of (notebook source without outputs, papermill parameters, library version)."""
    from layerlab.core.cache import fingerprint

    return fingerprint(notebook_source_key(chapter.source), parameters, library_key(chapter.source))[:16]


def library_key(path: Path) -> str:
    """Fingerprint of the layerlab modules the notebook's code cells import (transitively)."""
    from layerlab.core.cache import module_fingerprint

    nb = nbformat.read(path, as_version=4)
    lines = [ln for c in nb.cells if c.cell_type == "code" for ln in c.source.splitlines()]
    code = "\n".join(ln for ln in lines if not ln.lstrip().startswith(("%", "!")))
    return module_fingerprint(source=code)


# ----------------------------------------------------------------------------- execution
def ensure_kernel() -> str:
    """Register the ``layerlab`` kernel for this interpreter (sys.prefix) unless it already is."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    ksm = KernelSpecManager()
    try:
        spec = ksm.get_kernel_spec(KERNEL_NAME)
        if Path(spec.argv[0]).resolve() == Path(sys.executable).resolve():
            return KERNEL_NAME
        if not Path(spec.resource_dir).resolve().is_relative_to(Path(sys.prefix).resolve()):
            raise BuildError(
                f"the jupyter kernel {KERNEL_NAME!r} at {spec.resource_dir} runs {spec.argv[0]}, "
                f"not this environment's {sys.executable}; remove it with "
                f"`jupyter kernelspec remove {KERNEL_NAME}` and rerun"
            )
    except NoSuchKernel:
        pass
    from ipykernel.kernelspec import install

    install(prefix=sys.prefix, kernel_name=KERNEL_NAME, display_name="layerlab (.venv)")
    return KERNEL_NAME


def execute(
    chapter: Chapter,
    profile: str,
    executed_dir: Path,
    *,
    kernel_name: str | None = None,
    extra_parameters: dict | None = None,
    use_cache: bool = True,
    log=print,
) -> Path:
    """Execute ``chapter`` at ``profile`` (or reuse the cached result); return the executed notebook.

    Raises BuildError naming the chapter, the failing cell and the error.
    """
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    from layerlab.core.cache import atomic_write

    if not chapter.source.exists():
        raise BuildError(f"chapter {chapter.name!r}: notebook source {chapter.source} does not exist")
    parameters = {"profile": profile, **(extra_parameters or {})}
    key = cache_key(chapter, parameters)
    target = executed_dir / f"{chapter.name}.{profile}.{key}.ipynb"
    if use_cache and target.exists():
        log(f"[book] {chapter.name}: cached ({target.name})")
        return target
    for k, v in BUILD_ENV.items():  # inherited by the kernel
        if not (k == "HF_HUB_OFFLINE" and profile == "gpu"):  # gpu: hub models, unless set offline
            os.environ.setdefault(k, v)
    executed_dir.mkdir(parents=True, exist_ok=True)
    kernel = kernel_name or ensure_kernel()
    log(f"[book] {chapter.name}: executing at profile={profile} ...")
    t0 = time.perf_counter()
    with atomic_write(target) as tmp:
        tmp_nb = tmp.with_suffix(".ipynb")  # papermill wants an .ipynb name
        try:
            pm.execute_notebook(
                str(chapter.source),
                str(tmp_nb),
                parameters=parameters,
                kernel_name=kernel,
                language="python",
                cwd=str(chapter.source.parent),
                progress_bar=False,
                log_output=False,
                report_mode=False,
            )
        except PapermillExecutionError as e:
            failed = executed_dir / "failed" / f"{chapter.name}.{profile}.ipynb"
            failed.parent.mkdir(parents=True, exist_ok=True)
            if tmp_nb.exists():
                shutil.move(tmp_nb, failed)
            raise BuildError(
                f"chapter {chapter.name!r} failed at profile={profile}, cell In[{e.exec_count}]: "
                f"{e.ename}: {e.evalue}\n  (partially executed notebook: {failed})"
            ) from None
        except Exception as e:
            tmp_nb.unlink(missing_ok=True)
            raise BuildError(
                f"chapter {chapter.name!r} could not be executed: {type(e).__name__}: {e}"
            ) from e
        _mark_provenance(tmp_nb, profile, key)
        os.replace(tmp_nb, tmp)
    for old in executed_dir.glob(f"{chapter.name}.{profile}.*.ipynb"):
        if old != target:
            old.unlink(missing_ok=True)  # keep one executed copy per chapter and profile
    log(f"[book] {chapter.name}: done in {time.perf_counter() - t0:.1f} s")
    return target


def _mark_provenance(nb_path: Path, profile: str, key: str) -> None:

    nb = nbformat.read(nb_path, as_version=4)
    nb.metadata["layerlab"] = {"profile": profile, "key": key, "lib": library_key(nb_path)}
    nbformat.write(nb, nb_path)


def _copy_if_changed(src: Path, dst: Path) -> None:
    """Copy only when the bytes differ, so Sphinx's incremental build skips unchanged pages."""
    if dst.exists() and dst.read_bytes() == src.read_bytes():
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


# ----------------------------------------------------------------------------- the book
def _stage_sources(stage: Path) -> None:
    """Copy the book sources (not chapters) into ``stage`` for a build outside the repo tree."""
    for name in BOOK_SOURCES:
        src = ROOT / name
        dst = stage / name
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("chapters", "_build"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)


def uses_family(name: str) -> bool:
    """Whether chapter ``name`` needs the shared trained family: its package says so (``USES_FAMILY``).
    A notebook without a chapter package of that name is assumed not to."""
    import importlib

    try:
        pkg = importlib.import_module(f"layerlab.chapters.{name}")
    except ModuleNotFoundError:
        return False
    if not hasattr(pkg, "USES_FAMILY"):
        raise BuildError(f"layerlab.chapters.{name} does not say whether it needs the trained family: "
                         "set USES_FAMILY = True or False in its __init__.py")
    return bool(pkg.USES_FAMILY)


def train_family(profile: str, *, log=print) -> float:
    """Train (or load) the shared model family before the chapters that use it, in its own process
    (parallel single-threaded workers), so its cost is logged once and not billed to one chapter."""
    t0 = time.perf_counter()
    log(f"[book] family: training or loading the {profile} model family ...")
    proc = subprocess.run([sys.executable, "-m", "layerlab", "family", profile], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"training the {profile} model family failed:\n{proc.stderr[-3000:]}")
    seconds = time.perf_counter() - t0
    log(f"[book] family: ready in {seconds:.1f} s ({proc.stdout.strip().splitlines()[-1]})")
    return seconds


def build(
    profile: str,
    *,
    output: Path = ROOT,
    executed_dir: Path | None = None,
    notebooks_dir: Path = ROOT / "notebooks",
    html: bool = True,
    only: set[str] | None = None,
    log=print,
) -> Path:
    """Execute (or reuse) every toc chapter at ``profile`` and build the HTML book; return its dir."""
    from layerlab.core.profiles import PROFILE_NAMES

    if profile not in PROFILE_NAMES:
        raise BuildError(f"unknown profile {profile!r}: choose one of {', '.join(PROFILE_NAMES)} (PROFILE=...)")
    output = output.resolve()
    executed_dir = (executed_dir or output / "_build" / "executed").resolve()
    if output != ROOT:
        _stage_sources(output)
    toc_path = output / "_toc.yml"
    chapters = toc_chapters(toc_path, notebooks_dir.resolve())
    left_out = []
    if only:
        unknown = sorted(only - {c.name for c in chapters})
        if unknown:
            raise BuildError(f"unknown chapter(s) {unknown}: _toc.yml lists {[c.name for c in chapters]}")
        left_out = [c for c in chapters if c.name not in only]
        chapters = [c for c in chapters if c.name in only]
        log(f"[book] building only {sorted(only)} (CHAPTERS=...)")
    missing = [c for c in chapters if not c.source.exists()]
    if missing:
        names = ", ".join(str(c.source) for c in missing)
        raise BuildError(f"notebook source(s) listed in _toc.yml do not exist: {names}. "
                         "Add the notebook, or remove its entry from _toc.yml.")
    chapters_dir = output / "book" / "chapters"
    chapters_dir.mkdir(parents=True, exist_ok=True)
    present = chapters
    for stale in chapters_dir.glob("*.ipynb"):
        if stale.stem not in {c.name for c in present}:
            stale.unlink()
    t0 = time.perf_counter()
    if any(uses_family(c.name) for c in present):
        train_family(profile, log=log)
    failures = []
    for c in present:  # run every chapter, then report all failures at once
        try:
            executed = execute(c, profile, executed_dir, log=log)
        except BuildError as e:
            log(f"[book] FAILED: {e}")
            failures.append(str(e))
            continue
        _copy_if_changed(executed, chapters_dir / f"{c.name}.ipynb")
    if failures:
        raise BuildError(f"{len(failures)} chapter(s) failed:\n" + "\n".join(failures))
    log(f"[book] notebooks ready in {time.perf_counter() - t0:.1f} s")
    if not html:
        return chapters_dir
    if left_out:
        toc = yaml.safe_load(toc_path.read_text())
        filtered = _filter_toc(toc, {f"{CHAPTER_PREFIX}{c.name}" for c in left_out})
        toc_path = output / "_build" / "_toc.available.yml"
        toc_path.parent.mkdir(parents=True, exist_ok=True)
        toc_path.write_text(yaml.safe_dump(filtered, sort_keys=False))
    return run_jupyter_book(output, toc_path, log=log)


def run_jupyter_book(source: Path, toc_path: Path, *, log=print) -> Path:
    """``jupyter-book build`` with warnings as errors; raise BuildError with the log tail on failure."""
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [
        str(jb) if jb.exists() else "jupyter-book",
        "build",
        str(source),
        "--path-output",
        str(source),
        "--toc",
        str(toc_path),
        "--warningiserror",
        "--nitpick",
        "--keep-going",
        "--quiet",
    ]
    env = {**os.environ, **BUILD_ENV, "NO_COLOR": "1"}
    t0 = time.perf_counter()
    log("[book] jupyter-book build ...")
    proc = subprocess.run(cmd, cwd=source, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        # Sphinx reports a page's warnings only when it re-reads the page: forget the environment so
        # that a rerun re-reads everything and fails again instead of passing on a stale cache.
        shutil.rmtree(source / "_build" / ".doctrees", ignore_errors=True)
        text = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)  # drop terminal colours
        tail = "\n".join(text.strip().splitlines()[-40:])
        raise BuildError(f"jupyter-book build failed (exit {proc.returncode}):\n{tail}")
    html = source / "_build" / "html"
    log(f"[book] html in {time.perf_counter() - t0:.1f} s -> {html}")
    return html


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default=os.environ.get("PROFILE", "cpu"), help="smoke | cpu | gpu")
    ap.add_argument(
        "--output",
        type=Path,
        default=ROOT,
        help="directory to build in (default: the repo root; HTML in <output>/_build/html)",
    )
    ap.add_argument(
        "--executed-dir",
        type=Path,
        default=None,
        help="cache of executed notebooks (default: <output>/_build/executed)",
    )
    ap.add_argument(
        "--notebooks-dir",
        type=Path,
        default=ROOT / "notebooks",
        help="where chapter sources live (default: notebooks/)",
    )
    ap.add_argument("--no-html", action="store_true", help="only execute the notebooks")
    ap.add_argument(
        "--chapters",
        default=os.environ.get("CHAPTERS", ""),
        help="comma-separated chapter names to build (default: all in _toc.yml)",
    )
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        out = build(
            args.profile,
            output=args.output,
            executed_dir=args.executed_dir,
            notebooks_dir=args.notebooks_dir,
            html=not args.no_html,
            only={c.strip() for c in args.chapters.split(",") if c.strip()} or None,
        )
    except BuildError as e:
        print(f"[book] ERROR: {e}", file=sys.stderr)
        return 1
    print(
        json.dumps(
            {"profile": args.profile, "output": str(out), "seconds": round(time.perf_counter() - t0, 1)}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
