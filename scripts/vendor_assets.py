"""Vendor the book's browser assets at set-up, so that the built HTML works offline.

    python scripts/vendor_assets.py        # `make assets` (part of `make data`)

MathJax 3 comes from the npm registry (``npm pack mathjax@<version>``) and is unpacked into
``book/_static/vendor/mathjax/`` (git-ignored; ``_config.yml`` points ``mathjax_path`` at it), so a
formula renders without a network and no page references a CDN. Only what the ``tex-mml-chtml``
component loads is kept (the component, its lazily loaded TeX extensions, the CHTML fonts, the
accessibility and menu modules). Without ``npm`` the step fails with one message saying how to get it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MATHJAX_VERSION = "3.2.2"
MATHJAX_DIR = ROOT / "book" / "_static" / "vendor" / "mathjax"
MATHJAX_ENTRY = "tex-mml-chtml.js"
"""``mathjax_path`` in _config.yml is ``vendor/mathjax/tex-mml-chtml.js`` (relative to _static)."""
KEEP = (MATHJAX_ENTRY, "a11y", "adaptors", "input", "output", "sre", "ui")


class AssetError(RuntimeError):
    """An asset could not be vendored; the message says why and what to do."""


def mathjax_ready(dest: Path = MATHJAX_DIR) -> bool:
    """Whether ``dest`` holds MathJax at :data:`MATHJAX_VERSION`."""
    stamp = dest / "VERSION"
    return (dest / MATHJAX_ENTRY).is_file() and stamp.is_file() and stamp.read_text().strip() == MATHJAX_VERSION


def ensure_mathjax(dest: Path = MATHJAX_DIR, *, log=print) -> Path:
    """MathJax at ``dest`` (fetched with npm unless already there); return its entry script.

    Raises AssetError when npm is missing or the registry cannot be reached."""
    if mathjax_ready(dest):
        return dest / MATHJAX_ENTRY
    npm = shutil.which("npm")
    if npm is None:
        raise AssetError(
            "npm is not installed, so MathJax cannot be vendored for offline maths: install Node.js "
            "with npm (Debian/Ubuntu: `apt-get install -y npm`), then rerun `make assets`"
        )
    log(f"[assets] fetching mathjax@{MATHJAX_VERSION} from the npm registry ...")
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([npm, "pack", f"mathjax@{MATHJAX_VERSION}", "--silent"], cwd=tmp,
                              capture_output=True, text=True)
        tarballs = list(Path(tmp).glob("mathjax-*.tgz"))
        if proc.returncode != 0 or not tarballs:
            err = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise AssetError(f"`npm pack mathjax@{MATHJAX_VERSION}` failed (is the npm registry "
                             f"reachable?): {' '.join(err)}")
        with tarfile.open(tarballs[0]) as tar:
            if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4: refuse unsafe members
                tar.extractall(tmp, filter="data")
            else:
                tar.extractall(tmp)  # noqa: S202 - the npm registry's own tarball
        es5 = Path(tmp) / "package" / "es5"
        staged = dest.with_name(f".{dest.name}.tmp")
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir(parents=True)
        for name in KEEP:
            src = es5 / name
            if src.is_dir():
                shutil.copytree(src, staged / name)
            elif src.is_file():
                shutil.copyfile(src, staged / name)
        shutil.copyfile(Path(tmp) / "package" / "LICENSE", staged / "LICENSE")
        (staged / "VERSION").write_text(MATHJAX_VERSION + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(staged, dest)
    log(f"[assets] mathjax {MATHJAX_VERSION} -> {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
    return dest / MATHJAX_ENTRY


def main() -> int:
    try:
        ensure_mathjax()
    except AssetError as e:
        print(f"[assets] ERROR: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
