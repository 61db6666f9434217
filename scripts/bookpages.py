"""The page a reader sees, made from a chapter's source notebook and its cached executed copy.

:func:`page_notebook` splices the *current* source notebook (its markdown, its cell ids and order,
its tags) with the outputs of the cached papermill execution, whose code cells are the same (the
executed-notebook key covers code cells, parameters and the library only; see build_book.py). So a
prose edit re-renders without re-executing. On the way it makes the page a page:

- papermill's injected-parameters cell is dropped, and the ``parameters`` cell shows the values the
  chapter was executed with (so the notebook offered for download reproduces its outputs) and is
  tagged ``remove-cell``;
- plumbing is hidden by tags (:func:`auto_tag`): a cell of imports, glue calls and set-up only is
  removed (``remove-cell``; its glued values still reach the prose); a cell that only displays
  (tables, figures), after optional plumbing, loses its input (``remove-input``); a cell that
  computes something and also holds plumbing is folded behind a toggle (``hide-input``). A cell the
  author tagged ``remove-cell``, ``remove-input``, ``hide-input``, ``hide-cell`` or ``show-input``
  is left as tagged (``show-input``: keep the code visible);
- papermill's metadata with the build machine's paths (input/output path, environment) and the
  per-cell timing metadata are dropped.

:func:`problems` lists what must not reach a reader: stderr output (warnings), errors and
tracebacks, and machine paths (``/work/...``, ``/root/...``, ``.venv/...``) anywhere in the page.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import sys
from pathlib import Path

import nbformat

# Calls that only set things up or feed the prose: a statement calling one of these shows nothing.
PLUMBING_CALLS = frozenset({
    "glue", "glue_values", "glue_figure", "use_style", "set_option", "filterwarnings",
    "simplefilter", "setdefault", "set_num_threads", "seed", "manual_seed", "rcParams.update",
})
# Assignments of these calls are timers (``T0 = time.perf_counter()``), not results.
TIMER_CALLS = frozenset({"perf_counter", "time", "monotonic"})
# Assignments of these calls build the chapter's preset: set-up, described in the prose.
SETUP_CALLS = frozenset({"preset"})
# ``fig = plots.fig_x(r)``: the figure is drawn (shown at the end of the cell), the name unused.
FIGURE_NAMES = frozenset({"fig", "figs", "ax", "axes", "_"})
AUTHOR_TAGS = frozenset({"remove-cell", "remove-input", "hide-input", "hide-cell", "show-input"})
# Tags that change what executes: part of the executed-notebook key.
EXECUTION_TAGS = frozenset({"parameters", "raises-exception", "skip-execution"})
PAPERMILL_KEEP = ("parameters", "version", "duration")
_GENERIC_PATH = re.compile(
    r"(?<![\w.])(?:/work/|/root/|/home/[^/\s\"']+/|/Users/[^/\s\"']+/|/tmp/|[A-Za-z]:\\\\Users)"
    r"|(?:/\.venv|site-packages|dist-packages)[/\\]"
)


def _call_name(node: ast.AST) -> str | None:
    """``glue_values`` for ``glue_values(...)``, ``set_option`` for ``pd.set_option(...)``."""
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    if isinstance(f, ast.Attribute):
        if isinstance(f.value, ast.Attribute) and f.value.attr == "rcParams":
            return f"rcParams.{f.attr}"
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return None


def statement_kind(stmt: ast.stmt) -> str:
    """``plumbing`` (imports, glue, set-up, timers, the preset), ``display`` (a bare expression: its
    value or the figure it draws is shown) or ``code`` (anything that computes)."""
    if isinstance(stmt, ast.Import | ast.ImportFrom | ast.Pass):
        return "plumbing"
    if isinstance(stmt, ast.Expr):
        if isinstance(stmt.value, ast.Constant):  # a docstring-like string
            return "plumbing"
        return "plumbing" if _call_name(stmt.value) in PLUMBING_CALLS else "display"
    if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
        name = _call_name(stmt.value)
        if name in TIMER_CALLS or name in SETUP_CALLS:
            return "plumbing"
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if name and all(isinstance(t, ast.Name) and t.id in FIGURE_NAMES for t in targets):
            return "display"
        return "code"
    if isinstance(stmt, ast.If):
        kinds = {statement_kind(s) for s in stmt.body + stmt.orelse}
        return "plumbing" if kinds == {"plumbing"} else ("display" if "code" not in kinds else "code")
    return "code"


def classify(source: str) -> str | None:
    """The tag the build gives a code cell (see the module docstring), or None to leave it shown."""
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    try:
        body = ast.parse("\n".join(lines)).body
    except SyntaxError:
        return None
    if not body:
        return "remove-cell"
    kinds = {statement_kind(s) for s in body}
    if kinds == {"plumbing"}:
        return "remove-cell"
    if "code" not in kinds:
        return "remove-input"
    if "plumbing" in kinds:
        return "hide-input"
    return None


def auto_tag(cell: nbformat.NotebookNode) -> list[str]:
    """The cell's tags with the build's tag added (unless the author chose one, or it is markdown)."""
    tags = list(cell.get("metadata", {}).get("tags", []))
    if cell.cell_type != "code" or AUTHOR_TAGS & set(tags):
        return tags
    if "parameters" in tags:
        return [*tags, "remove-cell"]
    tag = classify(cell.source)
    return [*tags, tag] if tag else tags


def _is_injected(cell: nbformat.NotebookNode) -> bool:
    return "injected-parameters" in cell.get("metadata", {}).get("tags", [])


def code_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    """The notebook's code cells, papermill's injected-parameters cell left out."""
    return [c for c in nb.cells if c.cell_type == "code" and not _is_injected(c)]


def code_signature(nb: nbformat.NotebookNode) -> list[dict]:
    """What of a notebook executes: each code cell's source and its execution tags, in order.
    Markdown, cell ids, display tags and outputs are not part of it."""
    return [
        {"source": c.source, "tags": sorted(EXECUTION_TAGS & set(c.get("metadata", {}).get("tags", [])))}
        for c in code_cells(nb)
    ]


def with_values(source: str, parameters: dict) -> str:
    """The parameters cell's ``source`` with each ``name = ...`` line of ``parameters`` showing the
    value the notebook was executed with (an end-of-line comment is kept); other lines unchanged."""
    lines = source.splitlines()
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return source
    for stmt in reversed(body):
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            continue
        name = stmt.targets[0].id
        if name not in parameters:
            continue
        tail = lines[stmt.end_lineno - 1][stmt.end_col_offset :]
        comment = tail[tail.index("#") :] if "#" in tail else ""
        value = parameters[name]
        literal = json.dumps(value) if isinstance(value, str) else repr(value)  # "smoke", as typed
        new = f"{name} = {literal}" + (f"  {comment}" if comment else "")
        lines[stmt.lineno - 1 : stmt.end_lineno] = [new]
    return "\n".join(lines)


class SpliceError(ValueError):
    """The cached executed notebook's code cells are not the source's: it must be re-executed."""


def page_notebook(source: nbformat.NotebookNode, executed: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The page: ``source``'s cells (markdown, ids, order, tags) with ``executed``'s outputs spliced
    into its code cells, plumbing tagged, papermill's machine-specific metadata dropped."""
    src_code, run_code = code_cells(source), code_cells(executed)
    if code_signature(source) != code_signature(executed):
        raise SpliceError(
            f"the executed notebook has {len(run_code)} code cells, the source {len(src_code)}, "
            "or their sources differ"
        )
    parameters = dict(executed.metadata.get("papermill", {}).get("parameters", {}))
    page = copy.deepcopy(source)
    outputs = iter(run_code)
    for cell in page.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        ran = next(outputs)
        cell.outputs = copy.deepcopy(ran.get("outputs", []))
        cell.execution_count = ran.get("execution_count")
        if "parameters" in cell.metadata.get("tags", []) and parameters:
            cell.source = with_values(cell.source, parameters)
        tags = auto_tag(cell)
        if tags:
            cell.metadata["tags"] = tags
    meta = copy.deepcopy(executed.metadata)
    meta.update({k: v for k, v in source.metadata.items() if k not in ("papermill", "layerlab")})
    if "language_info" in executed.metadata:
        meta["language_info"] = copy.deepcopy(executed.metadata["language_info"])
    pm = meta.get("papermill", {})
    meta["papermill"] = {k: pm[k] for k in PAPERMILL_KEEP if k in pm}
    page.metadata = meta
    return page


def scrub_executed(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The executed copy as it is cached: papermill's input/output paths and environment dropped."""
    pm = nb.metadata.get("papermill")
    if pm:
        for key in ("input_path", "output_path", "environment_variables"):
            pm.pop(key, None)
    return nb


def machine_roots() -> list[str]:
    """Absolute paths of this machine that must not appear in a page: the repository, the home,
    the interpreter's prefix and the layerlab cache."""
    roots = {str(Path(__file__).resolve().parents[1]), str(Path.home()), sys.prefix}
    try:
        from layerlab.core.cache import cache_dir

        roots.add(str(cache_dir()))
    except Exception:  # noqa: BLE001 - no cache configured: nothing more to look for
        pass
    return sorted((r for r in roots if len(r) > 1), key=len, reverse=True)


def _texts(output: dict) -> list[str]:
    if output.get("output_type") == "stream":
        return [output.get("text", "")]
    if output.get("output_type") == "error":
        return ["\n".join(output.get("traceback", []))]
    data = output.get("data", {})
    return [v if isinstance(v, str) else "".join(v) for k, v in data.items()
            if isinstance(v, str | list) and not k.startswith("image/")]


def problems(nb: nbformat.NotebookNode, roots: list[str] | None = None) -> list[str]:
    """What a reader must never see in this (page) notebook: stderr output, errors, machine paths."""
    roots = machine_roots() if roots is None else roots
    found: list[str] = []

    def paths_in(text: str) -> list[str]:
        hits = [r for r in roots if r in text]
        hits += [m.group(0) for m in _GENERIC_PATH.finditer(text)]
        return hits

    for i, cell in enumerate(nb.cells):
        where = f"cell {i}"
        for p in paths_in(cell.source):
            found.append(f"{where}: machine path {p!r} in the cell source")
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                first = out.get("text", "").strip().splitlines()[:1]
                found.append(f"{where}: stderr output {first[0][:120] if first else ''!r}")
            if out.get("output_type") == "error":
                found.append(f"{where}: error {out.get('ename')}: {out.get('evalue', '')[:120]}")
            for text in _texts(out):
                if "Traceback (most recent call last)" in text:
                    found.append(f"{where}: a traceback in the output")
                for p in paths_in(text):
                    found.append(f"{where}: machine path {p!r} in the output")
    meta = json.dumps(nb.metadata)
    for p in paths_in(meta):
        found.append(f"notebook metadata: machine path {p!r}")
    return sorted(set(found), key=found.index)
