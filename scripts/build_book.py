"""Build the layerlab book: execute every chapter notebook with papermill, then run Jupyter Book.

    python scripts/build_book.py [--profile cpu|smoke|gpu] [--chapters a,b] [--output DIR] [--executed-dir DIR]

Chapters are the ``book/chapters/<name>`` entries of ``_toc.yml``; the source of chapter ``<name>``
is ``notebooks/<name>.ipynb`` (stored without outputs). Each is executed with papermill and
``-p profile <PROFILE>`` on the ``layerlab`` kernel (this interpreter, registered on demand), with
the working directory at ``notebooks/`` (as when a reader opens it in Jupyter). The executed copy is
cached as ``<executed-dir>/<name>.<profile>.<key>.ipynb`` where ``key`` fingerprints what executes:
the code cells (source and execution tags, not the markdown), the parameters and the library modules
the notebook imports, transitively (``layerlab.core.fingerprints.module_fingerprint``: an edit to an
unrelated module keeps the chapter cached).

The page ``book/chapters/<name>.ipynb`` is made from the *current* source and the cached execution
(scripts/bookpages.py): the source's markdown spliced around the cached outputs, plumbing cells
hidden by tags, papermill's injected cell and machine paths dropped. So a prose edit re-renders
without re-executing, and an unchanged rebuild rewrites no page and lets Sphinx skip them all. Then
``jupyter-book build --warningiserror --nitpick --keep-going`` writes ``<output>/_build/html``, with
MathJax served from the build (scripts/vendor_assets.py, fetched from npm on first use).

Progress: one line per phase and per chapter on stderr (elapsed time, and the estimate from the last
build), plus a line per section of a long-running chapter; ``QUIET=1`` silences them (errors stay).

A chapter listed in the toc without a notebook source fails the build, naming the file. A failing
notebook fails the build with its name and the error; the partially executed notebook is kept in
``<executed-dir>/failed/`` for inspection. What a reader must never see (stderr output, tracebacks,
machine paths) is reported per chapter as a WARNING line, and fails the build with ``--strict``.
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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import nbformat
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bookpages  # noqa: E402  (scripts/ is not a package)
import vendor_assets  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHAPTER_PREFIX = "book/chapters/"
KERNEL_NAME = "layerlab"
# Progress bars off, hub off: the book build is quiet and offline. The kernel imports tqdm.auto
# (transformers, the trainer) without ipywidgets, which warns "IProgress not found" into the page
# although every bar is disabled: silenced in the kernel's environment, not by a filter in a page.
BUILD_ENV = {
    "TQDM_DISABLE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_HUB_OFFLINE": "1",
    "PYTHONWARNINGS": "ignore:IProgress not found",
}
# The kernel's own log ("running over TCP without encryption") is not the book's business.
KERNEL_ARGS = ["--IPKernelApp.log_level=ERROR"]
# Book sources copied when building into a separate output tree (tests): everything but chapters.
BOOK_SOURCES = ("_config.yml", "_toc.yml", "book")
TIMINGS = "timings.json"
Log = Callable[[str], None]


class BuildError(RuntimeError):
    """A chapter could not be built; the message names the chapter and the fix."""


@dataclass(frozen=True)
class Chapter:
    name: str
    source: Path  # notebooks/<name>.ipynb


@dataclass(frozen=True)
class Rendered:
    """What the build did for one chapter: ``executed`` or ``cached`` (outputs reused; the page was
    re-rendered from the current source), its page and the reader-facing problems found in it."""

    name: str
    action: str
    page: Path
    seconds: float
    problems: tuple[str, ...] = ()


# ----------------------------------------------------------------------------- progress
class Progress:
    """Progress lines on stderr, ``[book 1:23] message`` (time since the build started); silent
    when ``QUIET=1`` (or ``quiet=True``). Callable, so it is the ``log`` of every step."""

    def __init__(self, quiet: bool | None = None, stream=None) -> None:
        self.quiet = os.environ.get("QUIET", "") not in ("", "0") if quiet is None else quiet
        self.stream = stream
        self.t0 = time.perf_counter()

    def __call__(self, message: str) -> None:
        if self.quiet:
            return
        s = int(time.perf_counter() - self.t0)
        print(f"[book {s // 60}:{s % 60:02d}] {message}", file=self.stream or sys.stderr, flush=True)


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def load_timings(executed_dir: Path) -> dict[str, float]:
    """Seconds each step took in the last build (``<profile>:<chapter>``, ``<profile>:html``, ...)."""
    try:
        return {k: float(v) for k, v in json.loads((executed_dir / TIMINGS).read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def save_timing(executed_dir: Path, key: str, seconds: float) -> None:
    from layerlab.core.cache import atomic_write

    timings = {**load_timings(executed_dir), key: round(seconds, 1)}
    executed_dir.mkdir(parents=True, exist_ok=True)
    with atomic_write(executed_dir / TIMINGS) as tmp:
        tmp.write_text(json.dumps(timings, indent=1, sort_keys=True))


def _estimate(timings: dict[str, float], key: str) -> str:
    return f" (last build: {_seconds(timings[key])})" if key in timings else ""


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
    """What defines a notebook's result: its code cells (sources and execution tags), in order.
    Markdown, cell ids, display tags and outputs are not part of it: a prose edit keeps the key."""
    nb = nbformat.read(path, as_version=4)
    return {"code": bookpages.code_signature(nb), "nbformat": nb.nbformat}


def cache_key(chapter: Chapter, parameters: dict) -> str:
    """Fingerprint of (the notebook's code cells, papermill parameters, library modules it imports)."""
    from layerlab.core.cache import fingerprint

    return fingerprint(notebook_source_key(chapter.source), parameters, library_key(chapter.source))[:16]


def library_key(path: Path) -> str:
    """Fingerprint of the layerlab modules the notebook's code cells import (transitively)."""
    from layerlab.core.cache import module_fingerprint

    nb = nbformat.read(path, as_version=4)
    lines = [ln for c in nb.cells if c.cell_type == "code" for ln in c.source.splitlines()]
    code = "\n".join(ln for ln in lines if not ln.lstrip().startswith(("%", "!")))
    return module_fingerprint(source=code)


def executed_path(chapter: Chapter, profile: str, executed_dir: Path, parameters: dict | None = None) -> Path:
    """Where the executed copy of ``chapter`` at ``profile`` is cached (it may not exist yet)."""
    key = cache_key(chapter, {"profile": profile, **(parameters or {})})
    return executed_dir / f"{chapter.name}.{profile}.{key}.ipynb"


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


def _plain_heading(text: str, width: int = 60) -> str:
    """A markdown heading as a terminal line: inline maths, code and emphasis marks dropped, cut at a word
    boundary with an ellipsis when longer than ``width``."""
    plain = re.sub(r"[$`*]", "", text).strip()
    if len(plain) <= width:
        return plain
    cut = plain.rfind(" ", 0, width)  # the last word boundary that fits (-1: none, cut mid-word)
    return plain[: cut if cut > 0 else width].rstrip(" ,:;") + "…"


def _section_reporter(nb: nbformat.NotebookNode, name: str, log: Log, every: float = 15.0):
    """A papermill ``cell_start`` hook: a line when execution enters a new ``##`` section of the
    chapter, if at least ``every`` seconds passed since the last line (long chapters only)."""
    sections: dict[str, str] = {}  # cell id -> its section (papermill's injected cell has none)
    current = "start"
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            heads = re.findall(r"^#{2,3} +(.+)$", cell.source, flags=re.M)
            current = heads[-1].strip() if heads else current
        sections[cell.get("id", "")] = current
    n_code = sum(c.cell_type == "code" for c in nb.cells)
    state = {"t0": time.perf_counter(), "last": time.perf_counter(), "section": None, "code": 0}

    def on_cell(cell, index: int | None) -> None:
        if cell.cell_type != "code" or cell.get("id", "") not in sections:
            return
        state["code"] += 1
        section, now = sections[cell.get("id", "")], time.perf_counter()
        if section != state["section"] and now - state["last"] >= every:
            log(f"{name}: § {_plain_heading(section)} (code cell {state['code']} of {n_code}, "
                f"{_seconds(now - state['t0'])} in)")
            state["last"] = now
        state["section"] = section

    return on_cell


def _progress_engine():
    """papermill's nbclient engine, reporting each cell start to an ``on_cell`` callback."""
    from papermill.engines import NBClientEngine, papermill_engines

    class ProgressEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, on_cell=None, **kwargs):
            if on_cell is not None:
                start = nb_man.cell_start

                def cell_start(cell, cell_index=None, **kw):
                    on_cell(cell, cell_index)
                    return start(cell, cell_index, **kw)

                nb_man.cell_start = cell_start
            return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)

    papermill_engines.register("layerlab", ProgressEngine)
    return "layerlab"


def execute(
    chapter: Chapter,
    profile: str,
    executed_dir: Path,
    *,
    kernel_name: str | None = None,
    extra_parameters: dict | None = None,
    use_cache: bool = True,
    log: Log | None = None,
) -> Path:
    """Execute ``chapter`` at ``profile`` (or reuse the cached result); return the executed notebook
    (papermill's output, its machine paths scrubbed; the page is made from it by :func:`render`).

    Raises BuildError naming the chapter, the failing cell and the error.
    """
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    from layerlab.core.cache import atomic_write

    log = log or Progress()
    if not chapter.source.exists():
        raise BuildError(f"chapter {chapter.name!r}: notebook source {chapter.source} does not exist")
    parameters = {"profile": profile, **(extra_parameters or {})}
    target = executed_path(chapter, profile, executed_dir, extra_parameters)
    if use_cache and target.exists():
        return target
    for k, v in BUILD_ENV.items():  # inherited by the kernel
        if not (k == "HF_HUB_OFFLINE" and profile == "gpu"):  # gpu: hub models, unless set offline
            os.environ.setdefault(k, v)
    executed_dir.mkdir(parents=True, exist_ok=True)
    kernel = kernel_name or ensure_kernel()
    timings = load_timings(executed_dir)
    log(f"{chapter.name}: executing at profile={profile}{_estimate(timings, f'{profile}:{chapter.name}')} ...")
    source = nbformat.read(chapter.source, as_version=4)
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
                engine_name=_progress_engine(),
                on_cell=_section_reporter(source, chapter.name, log),
                extra_arguments=KERNEL_ARGS,
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
        _mark_provenance(tmp_nb, profile, target.stem.rsplit(".", 1)[-1], chapter.source)
        os.replace(tmp_nb, tmp)
    for old in executed_dir.glob(f"{chapter.name}.{profile}.*.ipynb"):
        if old != target:
            old.unlink(missing_ok=True)  # keep one executed copy per chapter and profile
    seconds = time.perf_counter() - t0
    save_timing(executed_dir, f"{profile}:{chapter.name}", seconds)
    log(f"{chapter.name}: executed in {_seconds(seconds)}")
    return target


def _mark_provenance(nb_path: Path, profile: str, key: str, source: Path) -> None:
    nb = bookpages.scrub_executed(nbformat.read(nb_path, as_version=4))
    nb.metadata["layerlab"] = {"profile": profile, "key": key, "lib": library_key(source)}
    nbformat.write(nb, nb_path)


def _write_if_changed(text: str, dst: Path) -> bool:
    """Write only when the bytes differ, so Sphinx's incremental build skips unchanged pages."""
    if dst.exists() and dst.read_text() == text:
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, dst)
    return True


def render(
    chapter: Chapter,
    profile: str,
    executed_dir: Path,
    chapters_dir: Path,
    *,
    log: Log | None = None,
    **execute_kwargs,
) -> Rendered:
    """The chapter's page in ``chapters_dir``: executed (or the cached execution reused) and spliced
    with the current source (:func:`bookpages.page_notebook`). A prose-only edit never executes."""
    log = log or Progress()
    t0 = time.perf_counter()
    cached = executed_path(chapter, profile, executed_dir, execute_kwargs.get("extra_parameters"))
    action = "cached" if cached.exists() and execute_kwargs.get("use_cache", True) else "executed"
    executed = execute(chapter, profile, executed_dir, log=log, **execute_kwargs)
    source = nbformat.read(chapter.source, as_version=4)
    try:
        page = bookpages.page_notebook(source, nbformat.read(executed, as_version=4))
    except bookpages.SpliceError as e:  # a cache entry that does not match its key: run it again
        log(f"{chapter.name}: cached execution unusable ({e}); executing again")
        executed = execute(chapter, profile, executed_dir, log=log, **{**execute_kwargs, "use_cache": False})
        page = bookpages.page_notebook(source, nbformat.read(executed, as_version=4))
        action = "executed"
    target = chapters_dir / f"{chapter.name}.ipynb"
    changed = _write_if_changed(nbformat.writes(page) + "\n", target)
    found = tuple(bookpages.problems(page))
    for p in found:
        log(f"{chapter.name}: WARNING {p}")
    if action == "cached":
        log(f"{chapter.name}: cached ({'page re-rendered' if changed else 'page unchanged'})")
    return Rendered(chapter.name, action, target, time.perf_counter() - t0, found)


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


def _members_done(profile: str, since: float) -> int:
    """Family members whose ``result.json`` was written after ``since`` (the trainer writes one per
    member when it finishes), under ``<cache>/family/<profile>-*/``."""
    from layerlab.core.cache import cache_dir

    found = (cache_dir() / "family").glob(f"{profile}-*/*/result.json")
    return sum(1 for f in found if f.stat().st_mtime >= since)


def family_summary(stdout: str) -> str:
    """The family CLI's summary line ("21 members; elapsed ...") from its output, which goes on with tables
    after it (the seed-noise pairs); the last line when there is no summary."""
    lines = stdout.strip().splitlines()
    found = [ln for ln in lines if " members; elapsed " in ln]
    return (found or lines or [""])[-1].strip()


def train_family(profile: str, *, log: Log | None = None, estimate: str = "", every: float = 60.0) -> float:
    """Train (or load) the shared model family before the chapters that use it, in its own process
    (parallel single-threaded workers), so its cost is logged once and not billed to one chapter.
    While it trains, a line every ``every`` seconds says how many members have finished."""
    log = log or Progress()
    t0, wall0 = time.perf_counter(), time.time()
    log(f"family: training or loading the {profile} model family{estimate} ...")
    with subprocess.Popen([sys.executable, "-m", "layerlab", "family", profile], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        while True:
            try:
                stdout, stderr = proc.communicate(timeout=every)
                break
            except subprocess.TimeoutExpired:
                log(f"family: {_members_done(profile, wall0)} member(s) trained so far, "
                    f"{_seconds(time.perf_counter() - t0)} in")
    if proc.returncode != 0:
        raise BuildError(f"training the {profile} model family failed:\n{stderr[-3000:]}")
    seconds = time.perf_counter() - t0
    log(f"family: ready in {_seconds(seconds)} ({family_summary(stdout)})")
    return seconds


def build(
    profile: str,
    *,
    output: Path = ROOT,
    executed_dir: Path | None = None,
    notebooks_dir: Path = ROOT / "notebooks",
    html: bool = True,
    only: set[str] | None = None,
    strict: bool = False,
    log: Log | None = None,
    report: list[Rendered] | None = None,
) -> Path:
    """Execute (or reuse) every toc chapter at ``profile`` and build the HTML book; return its dir.

    ``report`` (a list) receives one :class:`Rendered` per chapter; ``strict`` turns the problems a
    reader would see (stderr, tracebacks, machine paths) into a BuildError."""
    from layerlab.core.profiles import PROFILE_NAMES

    log = log or Progress()
    if profile not in PROFILE_NAMES:
        raise BuildError(f"unknown profile {profile!r}: choose one of {', '.join(PROFILE_NAMES)} (PROFILE=...)")
    output = output.resolve()
    executed_dir = (executed_dir or output / "_build" / "executed").resolve()
    if html:
        try:
            vendor_assets.ensure_mathjax(log=log)
        except vendor_assets.AssetError as e:
            raise BuildError(str(e)) from None
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
        log(f"building only {sorted(only)} (CHAPTERS=...)")
    missing = [c for c in chapters if not c.source.exists()]
    if missing:
        names = ", ".join(str(c.source) for c in missing)
        raise BuildError(f"notebook source(s) listed in _toc.yml do not exist: {names}. "
                         "Add the notebook, or remove its entry from _toc.yml.")
    chapters_dir = output / "book" / "chapters"
    chapters_dir.mkdir(parents=True, exist_ok=True)
    for stale in chapters_dir.glob("*.ipynb"):
        if stale.stem not in {c.name for c in chapters}:
            stale.unlink()
    t0 = time.perf_counter()
    timings = load_timings(executed_dir)
    to_run = [c for c in chapters if not executed_path(c, profile, executed_dir).exists()]
    estimate = sum(timings.get(f"{profile}:{c.name}", 0.0) for c in to_run)
    log(f"notebooks: {len(to_run)} of {len(chapters)} to execute at profile={profile}"
        + (f" (estimate {_seconds(estimate)} from the last build)" if to_run and estimate else ""))
    if any(uses_family(c.name) for c in to_run):  # cached chapters need no family
        train_family(profile, log=log, estimate=_estimate(timings, f"{profile}:family"))
        save_timing(executed_dir, f"{profile}:family", time.perf_counter() - t0)
    failures, problems = [], []
    for c in chapters:  # run every chapter, then report all failures at once
        try:
            done = render(c, profile, executed_dir, chapters_dir, log=log)
        except BuildError as e:
            log(f"FAILED: {e}")
            failures.append(str(e))
            continue
        problems += [f"{c.name}: {p}" for p in done.problems]
        if report is not None:
            report.append(done)
    if failures:
        raise BuildError(f"{len(failures)} chapter(s) failed:\n" + "\n".join(failures))
    if strict and problems:
        raise BuildError(f"{len(problems)} problem(s) a reader would see (--strict):\n" + "\n".join(problems))
    log(f"notebooks: ready in {_seconds(time.perf_counter() - t0)}")
    if not html:
        return chapters_dir
    if left_out:
        toc = yaml.safe_load(toc_path.read_text())
        filtered = _filter_toc(toc, {f"{CHAPTER_PREFIX}{c.name}" for c in left_out})
        toc_path = output / "_build" / "_toc.available.yml"
        toc_path.parent.mkdir(parents=True, exist_ok=True)
        text = yaml.safe_dump(filtered, sort_keys=False)
        if not toc_path.exists() or toc_path.read_text() != text:
            toc_path.write_text(text)
    return run_jupyter_book(output, toc_path, log=log, executed_dir=executed_dir, profile=profile)


def sync_static(source: Path, html: Path) -> list[str]:
    """Copy every file of the book's ``html_static_path`` whose built copy is missing or differs into
    ``html/_static``; returns their paths relative to ``_static``. Sphinx copies static files only when
    it writes at least one page, so an edit to ``book/_static/layerlab.css`` alone would otherwise never
    reach the built book."""
    config = yaml.safe_load((source / "_config.yml").read_text()) or {}
    dirs = config.get("sphinx", {}).get("config", {}).get("html_static_path", [])
    out = html / "_static"
    changed: list[str] = []
    for d in dirs:
        root = source / d
        for f in sorted(root.rglob("*")):
            rel = f.relative_to(root)
            if not f.is_file() or any(part.startswith(".") for part in rel.parts):
                continue
            dest = out / rel
            if not dest.exists() or dest.read_bytes() != f.read_bytes():
                dest.parent.mkdir(parents=True, exist_ok=True)
                tmp = dest.with_name(f".{dest.name}.tmp")
                shutil.copyfile(f, tmp)
                tmp.replace(dest)
                changed.append(str(rel))
    return changed


def run_jupyter_book(source: Path, toc_path: Path, *, log: Log | None = None,
                     executed_dir: Path | None = None, profile: str = "") -> Path:
    """``jupyter-book build`` with warnings as errors; raise BuildError with the log tail on failure."""
    log = log or Progress()
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
    key = f"{profile}:html"
    log(f"html: jupyter-book build{_estimate(load_timings(executed_dir), key) if executed_dir else ''} ...")
    proc = subprocess.run(cmd, cwd=source, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        # Sphinx reports a page's warnings only when it re-reads the page: forget the environment so
        # that a rerun re-reads everything and fails again instead of passing on a stale cache.
        shutil.rmtree(source / "_build" / ".doctrees", ignore_errors=True)
        text = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)  # drop terminal colours
        tail = "\n".join(text.strip().splitlines()[-40:])
        raise BuildError(f"jupyter-book build failed (exit {proc.returncode}):\n{tail}")
    html = source / "_build" / "html"
    stale = sync_static(source, html)
    if stale:
        log(f"html: {len(stale)} static file(s) updated ({', '.join(stale[:3])}{', ...' if len(stale) > 3 else ''})")
    seconds = time.perf_counter() - t0
    if executed_dir is not None:
        save_timing(executed_dir, key, seconds)
    log(f"html: done in {_seconds(seconds)} -> {html}")
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
    ap.add_argument("--strict", action="store_true", default=os.environ.get("STRICT", "") not in ("", "0"),
                    help="fail on stderr output, tracebacks or machine paths in a page (STRICT=1)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    log = Progress()
    try:
        out = build(
            args.profile,
            output=args.output,
            executed_dir=args.executed_dir,
            notebooks_dir=args.notebooks_dir,
            html=not args.no_html,
            only={c.strip() for c in args.chapters.split(",") if c.strip()} or None,
            strict=args.strict,
            log=log,
        )
    except BuildError as e:
        print(f"[book] ERROR: {e}", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - t0
    log(f"done in {_seconds(seconds)}")
    print(json.dumps({"profile": args.profile, "output": str(out), "seconds": round(seconds, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
