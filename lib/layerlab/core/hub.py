"""The Hugging Face hub side of the gpu profile: what the models weigh, which are gated, what is
cached, and deleting a model's hub cache after use.

``tables/hub_models.csv`` lists every hub model a gpu preset names (the 28 Fig. 1a models of Aubry
et al., ICLR 2025, spec ``coupling.md`` section 2; the Pythia checkpoints of Fig. 1b; the chapters'
main models) with its ``model_type``, parameter count in billions (from the model cards / config
shapes, rounded), the bytes per parameter of the weights the hub stores (fp32 = 4, fp16/bf16 = 2)
and whether the repository is gated (``yes``: accept the terms on the hub and set ``HF_TOKEN``;
``check``: the licence may ask for it). Sizes are estimates (±20 %), not measured downloads. The
table sits in a subdirectory so that editing it changes no cache key (see
:func:`layerlab.core.fingerprints.module_fingerprint`).

The hub cache layout (``models--<owner>--<name>/{blobs,snapshots,refs}`` under ``HF_HUB_CACHE``) is
the one documented for ``huggingface_hub`` ("Understand caching", huggingface.co/docs/huggingface_hub).
:func:`release` deletes one model's folder unless ``LAYERLAB_KEEP_HUB=1``, so a gpu run over 28
models needs the disk of the largest one, not of all of them (~0.8 TB).
"""

from __future__ import annotations

import contextlib
import csv
import os
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

TABLE = Path(__file__).parent / "tables" / "hub_models.csv"
KEEP_ENV = "LAYERLAB_KEEP_HUB"


@dataclass(frozen=True)
class HubModel:
    """One row of ``tables/hub_models.csv``."""

    hub_id: str
    model_type: str
    params_b: float  # parameters, billions
    stored_bytes_per_param: int  # 4 (fp32 weights on the hub) or 2 (fp16 / bf16)
    gated: str  # "yes", "no" or "check"
    note: str

    @property
    def download_bytes(self) -> int:
        """Estimated size of one revision's weights (the tokenizer and config are negligible)."""
        return int(self.params_b * 1e9 * self.stored_bytes_per_param)

    def memory_bytes(self, bytes_per_param: int = 2) -> int:
        """Parameter memory once loaded in a dtype of ``bytes_per_param`` (activations not included)."""
        return int(self.params_b * 1e9 * bytes_per_param)


def hub_models() -> dict[str, HubModel]:
    """hub id → :class:`HubModel`, in table order."""
    with open(TABLE, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {r["hub_id"]: HubModel(r["hub_id"], r["model_type"], float(r["params_b"]),
                                  int(r["stored_bytes_per_param"]), r["gated"], r["note"]) for r in rows}


def lookup(hub_id: str) -> HubModel | None:
    return hub_models().get(hub_id)


def is_hub_id(name: str) -> bool:
    """``owner/name`` that is not an existing local directory."""
    return isinstance(name, str) and name.count("/") == 1 and not Path(name).expanduser().exists() \
        and all(part and not part.startswith(".") for part in name.split("/"))


# ------------------------------------------------------------------------------ the local cache
def hub_cache_dir() -> Path:
    """Where ``huggingface_hub`` keeps downloads (``HF_HUB_CACHE``, else ``$HF_HOME/hub``)."""
    env = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if env:
        return Path(env).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def repo_dir(hub_id: str, cache_dir: Path | None = None) -> Path:
    """The cache folder of a model repository: ``models--<owner>--<name>``."""
    return Path(cache_dir or hub_cache_dir()) / ("models--" + hub_id.replace("/", "--"))


def is_cached(hub_id: str, revision: str | None = None, cache_dir: Path | None = None) -> bool:
    """Is a snapshot of ``hub_id`` (the ref ``revision``, default ``main``) in the cache?"""
    d = repo_dir(hub_id, cache_dir)
    ref = d / "refs" / (revision or "main")
    if ref.is_file():
        return (d / "snapshots" / ref.read_text().strip()).is_dir()
    snaps = d / "snapshots"
    return revision is None and snaps.is_dir() and any(snaps.iterdir())


def cached_bytes(hub_id: str, cache_dir: Path | None = None) -> int:
    """Bytes the repository's folder holds (blobs; snapshots are links into them)."""
    d = repo_dir(hub_id, cache_dir)
    if not d.exists():
        return 0
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file() and not f.is_symlink())


def keep_hub() -> bool:
    return os.environ.get(KEEP_ENV, "0").strip().lower() in ("1", "true", "yes")


def delete_cached(hub_id: str, cache_dir: Path | None = None, *, force: bool = False) -> int:
    """Delete ``hub_id``'s hub cache folder; returns the bytes freed (0 if absent).

    Kept (nothing deleted, 0 returned) when ``LAYERLAB_KEEP_HUB=1`` unless ``force``. Only the
    folder ``models--<owner>--<name>`` inside the cache directory is ever removed."""
    if keep_hub() and not force:
        return 0
    if not is_hub_id(hub_id):
        raise ValueError(f"{hub_id!r} is not a hub id of the form 'owner/name'")
    root = Path(cache_dir or hub_cache_dir()).resolve()
    d = repo_dir(hub_id, root)
    if not d.exists():
        return 0
    if d.resolve().parent != root:  # never follow a link out of the cache
        raise ValueError(f"refusing to delete {d}: it resolves outside the hub cache {root}")
    freed = cached_bytes(hub_id, root)
    shutil.rmtree(d)
    return freed


@contextlib.contextmanager
def release(hub_id: str, cache_dir: Path | None = None) -> Iterator[None]:
    """``with release(hub_id): model = load_model(hub_id) ...``: the model's hub cache is deleted
    when the block completes, unless ``LAYERLAB_KEEP_HUB=1``. On an error it is kept, so a rerun
    does not download it again. A name that is not a hub id (offline names, local dirs) is left alone."""
    yield
    if is_hub_id(hub_id):
        delete_cached(hub_id, cache_dir)


# ------------------------------------------------------------------------------ access
def token_present() -> bool:
    """Is a hub token available (``HF_TOKEN`` or a ``huggingface-cli login`` token file)?"""
    if os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"):
        return True
    try:
        from huggingface_hub import get_token

        return bool(get_token())
    except Exception:  # an old huggingface_hub, or no token file
        return False


def offline() -> bool:
    """Does the environment forbid hub downloads? layerlab defaults ``HF_HUB_OFFLINE`` to 1 (set on
    import of :mod:`layerlab.core.models`): a gpu run needs ``HF_HUB_OFFLINE=0``."""
    return os.environ.get("HF_HUB_OFFLINE", "1").strip().lower() in ("1", "true", "yes", "on")


def reachable(timeout: float = 3.0) -> tuple[bool, str]:
    """Can huggingface.co be reached? (a HEAD request; never raises)."""
    import urllib.request

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout)  # noqa: S310
        return True, f"{endpoint} reachable"
    except Exception as e:  # no network, DNS, proxy, TLS ...
        return False, f"{endpoint} not reachable ({type(e).__name__}: {str(e)[:80]})"


def download_plan(ids: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Total and peak download bytes for ``(hub_id, n_revisions)`` pairs: ``total`` (everything),
    ``peak_with_release`` (largest single revision: what :func:`release` needs on disk) and
    ``unknown`` (ids missing from the table)."""
    table = hub_models()
    total = peak = unknown = 0
    for hub_id, n in ids:
        m = table.get(hub_id)
        if m is None:
            unknown += 1
            continue
        total += n * m.download_bytes
        peak = max(peak, m.download_bytes)
    return {"total": total, "peak_with_release": peak, "unknown": unknown}
