"""Student notebooks from the exercise notebooks (Neuromatch-style: solution cells stripped).

An exercise notebook (``notebooks/exercises/<chapter>.ipynb``) marks its cells with tags:
``parameters`` (papermill), ``exercise`` (a stub the student completes: its body is ``...``),
``solution`` (the reference solution and the ``{solution-start}`` / ``{solution-end}`` markdown around
it: removed for students) and ``check`` (a checker call, kept). The book renders the directives with
sphinx-exercise; the student copy turns them into plain headings, which read well in Jupyter.
"""

from __future__ import annotations

import ast
import copy
import re

import nbformat

TAGS = ("parameters", "exercise", "solution", "check")
_START = re.compile(r"^```\{exercise-start\}\s*(?P<title>[^\n]*)\n(?P<opts>(?::[^\n]*\n)*)```\n?", re.M)
_END = re.compile(r"^```\{exercise-end\}\s*\n```\s*$", re.M)
STUDENT_NOTE = ("*Student copy: the solutions are removed. Replace each `...` with your code and run the "
                "checker cell below it; the book's exercise page has the folded solutions.*")


def tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def is_stub(source: str) -> bool:
    """Whether a code cell still holds a stub: a statement that is only ``...`` (Ellipsis)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and n.value.value is Ellipsis
               for n in ast.walk(tree))


def _plain_heading(source: str) -> str:
    """``{exercise-start} Title`` + options -> ``## Exercise: Title``; the end marker disappears."""
    source = _START.sub(lambda m: f"## Exercise: {m['title'].strip()}\n\n", source)
    return _END.sub("", source).strip("\n")


def student_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of exercise notebook ``nb`` without its solution cells and outputs, stubs kept.

    Raises ValueError when the notebook has an ``exercise`` cell that is not a stub (it would hand
    the student the answer) or a ``solution`` cell that is a stub (a solution was never written).
    """
    out = copy.deepcopy(nb)
    cells = []
    for i, c in enumerate(out.cells):
        t = tags(c)
        if c.cell_type == "code" and "exercise" in t and not is_stub(c.source):
            raise ValueError(f"cell {i} is tagged 'exercise' but holds no `...` stub: students would get the answer")
        if c.cell_type == "code" and "solution" in t and is_stub(c.source):
            raise ValueError(f"cell {i} is tagged 'solution' but is still a stub")
        if "solution" in t:
            continue
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
        else:
            c.source = _plain_heading(c.source)
            if not c.source.strip():
                continue
        cells.append(c)
    title = next((i for i, c in enumerate(cells) if c.cell_type == "markdown"), None)
    note = nbformat.v4.new_markdown_cell(STUDENT_NOTE)
    note.id = "student-note"
    cells.insert(0 if title is None else title + 1, note)
    out.cells = cells
    return out


def until_first_stub(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook's cells up to and including its first stub cell (what runs before the student types)."""
    out = copy.deepcopy(nb)
    for i, c in enumerate(out.cells):
        if c.cell_type == "code" and is_stub(c.source):
            out.cells = out.cells[: i + 1]
            return out
    return out


def checker_calls(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """(checker name, function name) of every ``teach.check_<name>(fn, ...)`` call in ``check`` cells."""
    calls = []
    for c in nb.cells:
        if c.cell_type != "code" or "check" not in tags(c):
            continue
        for node in ast.walk(ast.parse(c.source)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr.startswith("check_") and node.args and isinstance(node.args[0], ast.Name)):
                calls.append((node.func.attr, node.args[0].id))
    return calls
