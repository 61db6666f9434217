"""One on-disk cache for everything expensive (model conversions, forward passes, trained model
families, chapter results), keyed by the inputs **and the source code that computes them**.

Layout: ``cache_dir()/<kind>/<digest>.{json,safetensors}`` (or a directory ``<kind>/<name>/`` with an
``entry.json``). ``LAYERLAB_CACHE`` overrides the location (default: the user cache dir, e.g.
``~/.cache/layerlab``). Every write goes to a temporary file in the same directory and is renamed
into place, so an interrupted run never leaves a half-written entry; a missing entry is computed under a
cross-process lock (:func:`entry_lock`), so two processes that want it at once (two notebooks, two test
workers) compute it once and the second reads what the first wrote. Tensors are stored as
safetensors, everything else as JSON: nothing is ever unpickled.

One keying mechanism: :func:`cached`, :func:`cached_json` and :func:`cached_tensors` fold into every
key the *source fingerprint* of the layerlab module that calls them: a hash of that module's file and
of every layerlab module it imports, transitively (package-aware; an import that cannot be resolved
is an error, never silently dropped). An edit to any of those files changes the key, so no entry
needs a hand-bumped version and no edit can serve a stale result; an edit to an unrelated module
(another chapter, say) leaves the key alone. Each entry records the module and fingerprint it was
computed under, which is what ``python -m layerlab cache info`` shows and ``cache prune`` uses.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from layerlab.core.fingerprints import (  # noqa: F401  (re-exported: the cache's key helpers)
    LIB_DIR,
    SourceError,
    fingerprint,
    layerlab_imports,
    library_fingerprint,
    module_closure,
    module_file,
    module_fingerprint,
    source_fingerprint,
)
from layerlab.core.version import __version__

ENTRY_FILE = "entry.json"
"""Marker of a directory entry (written last): its kind, module and source fingerprint."""

UNMANAGED_KINDS = frozenset({"data"})
"""Cache folders not written through this module (the fetched corpora, keyed by their manifest)."""


def cache_dir() -> Path:
    """Root of the layerlab cache (``$LAYERLAB_CACHE`` or the platform user cache dir)."""
    env = os.environ.get("LAYERLAB_CACHE")
    if env:
        root = Path(env).expanduser()
    else:
        from platformdirs import user_cache_dir

        root = Path(user_cache_dir("layerlab"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def cache_path(*parts: str) -> Path:
    """``cache_dir()/part0/part1/...`` with parent directories created."""
    p = cache_dir().joinpath(*parts)
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def entry_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold the cross-process lock of the cache entry at ``path`` (file or directory): a hidden
    ``.<name>.lock`` beside it, which ``cache info`` and ``cache prune`` skip. A caller re-checks the
    entry inside the lock before computing it. Entries must not depend on themselves (no deadlock
    between processes: an entry's computation only ever waits for other entries)."""
    from filelock import FileLock

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.parent / f".{path.name}.lock")):
        yield


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Atomically write ``obj`` as pretty JSON."""
    with atomic_write(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=1, default=_json_default))


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, torch.Tensor):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


# ----------------------------------------------------------------------------- value codec
def _encode(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """JSON-able form of ``obj``; tensors and arrays go to ``tensors`` (stored as safetensors)."""
    import dataclasses

    import pandas as pd

    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (np.integer, np.floating, np.bool_)):
        return obj.item()
    if isinstance(obj, torch.Tensor):
        name = f"t{len(tensors)}"
        tensors[name] = obj.detach().cpu().contiguous()
        return {"__tensor__": name}
    if isinstance(obj, np.ndarray):
        name = f"t{len(tensors)}"
        tensors[name] = torch.from_numpy(np.ascontiguousarray(obj))
        return {"__ndarray__": name}
    if isinstance(obj, pd.DataFrame):
        return {"__dataframe__": _encode(obj.to_dict(orient="split"), tensors),
                "dtypes": [str(t) for t in obj.dtypes], "index_names": list(obj.index.names),
                "column_names": list(obj.columns.names)}
    if isinstance(obj, pd.Series):
        return {"__series__": _encode(obj.to_dict(), tensors), "name": obj.name}
    if isinstance(obj, Path):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        cls = type(obj)
        return {"__dataclass__": f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: _encode(getattr(obj, f.name), tensors) for f in dataclasses.fields(obj)}}
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {k: _encode(v, tensors) for k, v in obj.items()}
        return {"__items__": [[_encode(k, tensors), _encode(v, tensors)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return [_encode(x, tensors) for x in obj]
    raise TypeError(f"cannot cache a {type(obj).__name__}: use numbers, strings, lists, dicts, tensors, "
                    "arrays, DataFrames or dataclasses of those")


def _decode(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    import importlib

    import pandas as pd

    if isinstance(obj, list):
        return [_decode(x, tensors) for x in obj]
    if not isinstance(obj, dict):
        return obj
    if "__tensor__" in obj:
        return tensors[obj["__tensor__"]]
    if "__ndarray__" in obj:
        return tensors[obj["__ndarray__"]].numpy()
    if "__dataframe__" in obj:
        d = _decode(obj["__dataframe__"], tensors)
        df = pd.DataFrame(d["data"], index=_index(d["index"], obj.get("index_names")),
                          columns=_index(d["columns"], obj.get("column_names")))
        dtypes = obj["dtypes"]
        return df.astype({df.columns[i]: t for i, t in enumerate(dtypes) if t != "object"}) if len(df.columns) else df
    if "__series__" in obj:
        return pd.Series(_decode(obj["__series__"], tensors), name=obj["name"])
    if "__dataclass__" in obj:
        mod, qual = obj["__dataclass__"].split(":")
        cls: Any = importlib.import_module(mod)
        for part in qual.split("."):
            cls = getattr(cls, part)
        return cls(**{k: _decode(v, tensors) for k, v in obj["fields"].items()})
    if "__items__" in obj:
        return {_hashable(_decode(k, tensors)): _decode(v, tensors) for k, v in obj["__items__"]}
    return {k: _decode(v, tensors) for k, v in obj.items()}


def _index(values: list, names: list | None) -> Any:
    import pandas as pd

    if values and isinstance(values[0], list):
        return pd.MultiIndex.from_tuples([tuple(v) for v in values], names=names)
    return pd.Index(values, name=names[0] if names else None) if values or names else values


def _hashable(x: Any) -> Any:
    return tuple(_hashable(v) for v in x) if isinstance(x, list) else x


# ----------------------------------------------------------------------------- cached entries
def _entry(kind: str, key: Any, sources: str | Iterable[str] | None) -> tuple[Path, dict]:
    module, src = source_fingerprint(sources)
    meta = {"kind": kind, "module": module, "source": src, "version": __version__}
    return cache_path(kind, fingerprint(key, {"__source__": src})), meta


def _key_text(key: Any) -> str:
    return json.dumps(key, default=str)[:4000]


_MISS = object()


def _read(js: Path, st: Path, codec: str) -> Any:
    """The stored value of an entry, or ``_MISS`` (absent, or corrupt: then it is removed, to be recomputed)."""
    if codec == "tensors":
        if st.exists():
            try:
                return load_file(str(st))
            except Exception:  # a corrupt entry: recompute and overwrite
                st.unlink(missing_ok=True)
        return _MISS
    if js.exists():
        try:
            entry = json.loads(js.read_text())
            tensors = load_file(str(st)) if entry.get("tensors") else {}
            return entry["value"] if codec == "json" else _decode(entry["value"], tensors)
        except Exception:  # a corrupt or half-deleted entry: recompute and overwrite
            js.unlink(missing_ok=True)
    return _MISS


def _cached(kind: str, key: Any, compute: Callable[[], Any], codec: str,
            sources: str | Iterable[str] | None) -> Any:
    base, meta = _entry(kind, key, sources)
    js, st = base.with_suffix(".json"), base.with_suffix(".safetensors")
    if (hit := _read(js, st, codec)) is not _MISS:
        return hit
    with entry_lock(base):
        if (hit := _read(js, st, codec)) is not _MISS:  # another process computed it while we waited
            return hit
        value = compute()
        if codec == "tensors":
            tensors = {k: v.detach().cpu().contiguous() for k, v in value.items()}
            with atomic_write(st) as tmp:
                save_file(tensors, str(tmp), metadata={"layerlab": json.dumps(meta), "key": _key_text(key)})
            return tensors
        tensors: dict[str, torch.Tensor] = {}
        enc = value if codec == "json" else _encode(value, tensors)
        if tensors:  # tensors first: the JSON file is what marks the entry complete
            with atomic_write(st) as tmp:
                save_file(tensors, str(tmp), metadata={"layerlab": json.dumps(meta)})
        write_json(js, {**meta, "key": key, "tensors": bool(tensors), "value": enc})
    entry = json.loads(js.read_text())
    return entry["value"] if codec == "json" else _decode(entry["value"], tensors)


def cached(kind: str, key: Any, compute: Callable[[], Any], *, sources: str | Iterable[str] | None = None) -> Any:
    """Return ``compute()``, cached under ``kind`` and a digest of ``key`` and the caller's source
    fingerprint. The value may nest numbers, strings, lists, dicts (any hashable keys), tensors,
    arrays, DataFrames and dataclasses (typed chapter results); the first call returns the decoded
    stored value, so a cold and a warm run see exactly the same object. ``sources`` names the
    modules to fingerprint instead of the caller (e.g. add ``layerlab.core.models`` when a model
    loaded elsewhere is identified in ``key`` only by its name)."""
    return _cached(kind, key, compute, "value", sources)


def cached_json(kind: str, key: Any, compute: Callable[[], Any], *,
                sources: str | Iterable[str] | None = None) -> Any:
    """:func:`cached` for plain JSON values (returned as JSON gives them back: tuples as lists)."""
    return _cached(kind, key, compute, "json", sources)


def cached_tensors(kind: str, key: Any, compute: Callable[[], dict[str, torch.Tensor]], *,
                   sources: str | Iterable[str] | None = None) -> dict[str, torch.Tensor]:
    """:func:`cached` for a flat ``{name: tensor}`` dict, stored as one safetensors file."""
    return _cached(kind, key, compute, "tensors", sources)


def entry_dir(kind: str, name: str, key: Any, *, sources: str | Iterable[str] | None = None) -> Path:
    """The directory ``cache_dir()/<kind>/<name>-<digest>/`` of a result written as several files
    (trained models, converted weights). Its digest folds in the caller's source fingerprint like
    :func:`cached`. The caller writes its files atomically and calls :func:`mark_complete` last."""
    base, _ = _entry(kind, key, sources)
    d = base.with_name(f"{name}-{base.name}")
    d.mkdir(parents=True, exist_ok=True)
    return d


def mark_complete(d: Path, *, sources: str | Iterable[str] | None = None) -> None:
    """Write the ``entry.json`` marker of a directory entry (its kind and the source fingerprint of
    the calling module, as in :func:`entry_dir`), which ``cache info`` and ``cache prune`` read."""
    module, src = source_fingerprint(sources)
    write_json(Path(d) / ENTRY_FILE, {"kind": Path(d).parent.name, "module": module, "source": src,
                                      "version": __version__})


def is_complete(d: Path) -> bool:
    return (Path(d) / ENTRY_FILE).exists()


# ----------------------------------------------------------------------------- info and prune
@dataclass(frozen=True)
class Entry:
    """One cache entry as ``cache info`` sees it."""

    kind: str
    path: Path
    bytes: int
    module: str  # the module whose source keyed it ("" if unknown)
    source: str  # the fingerprint it was computed under
    current: bool  # the module's fingerprint today equals ``source``


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size


def _read_meta(p: Path) -> dict:
    try:
        if p.is_dir():
            return json.loads((p / ENTRY_FILE).read_text())
        if p.suffix == ".json":
            return json.loads(p.read_text())
        if p.suffix == ".safetensors":
            with safe_open(str(p), "pt") as f:
                return json.loads((f.metadata() or {}).get("layerlab", "{}"))
    except Exception:
        return {}
    return {}


def entries(root: Path | None = None) -> list[Entry]:
    """Every entry of the cache (the fetched corpora excluded) with its provenance and freshness."""
    root = cache_dir() if root is None else Path(root)
    current: dict[str, str | None] = {}

    def fresh(module: str, source: str) -> bool:
        if module not in current:
            try:
                current[module] = (library_fingerprint() if module == "*" else
                                   module_fingerprint(*module.split(",")))
            except SourceError:
                current[module] = None
        return current[module] == source

    out = []
    for kind_dir in sorted(p for p in root.iterdir() if p.is_dir() and p.name not in UNMANAGED_KINDS):
        for p in sorted(kind_dir.iterdir()):
            if p.name.startswith("."):
                continue
            if p.suffix == ".safetensors" and p.with_suffix(".json").exists():
                continue  # the tensor half of a JSON entry
            meta = _read_meta(p)
            module, source = meta.get("module", ""), meta.get("source", "")
            out.append(Entry(kind_dir.name, p, _size(p) + (_size(p.with_suffix(".safetensors"))
                             if p.suffix == ".json" and p.with_suffix(".safetensors").exists() else 0),
                             module, source, bool(module) and fresh(module, source)))
    return out


def prune(root: Path | None = None, *, dry_run: bool = False) -> list[Entry]:
    """Delete the entries that no current key can reach (computed by code that has since changed,
    or of unknown provenance); return them. The fetched corpora are never touched."""
    stale = [e for e in entries(root) if not e.current]
    if not dry_run:
        for e in stale:
            if e.path.is_dir():
                shutil.rmtree(e.path, ignore_errors=True)
                lock = e.path.parent / f".{e.path.name}.lock"
            else:
                e.path.unlink(missing_ok=True)
                if e.path.suffix == ".json":
                    e.path.with_suffix(".safetensors").unlink(missing_ok=True)
                lock = e.path.parent / f".{e.path.stem}.lock"
            lock.unlink(missing_ok=True)  # its entry_lock file, if it was computed under one
    return stale
