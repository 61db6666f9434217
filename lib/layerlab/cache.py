"""One on-disk cache for everything expensive (model conversions, forward passes,
trained model families, chapter results), keyed by the inputs and the library version.

Layout: ``cache_dir()/<kind>/<key>.{safetensors,json}``. ``LAYERLAB_CACHE`` overrides the
location (default: the user cache dir, e.g. ``~/.cache/layerlab``). Every write goes to a
temporary file in the same directory and is renamed into place, so an interrupted run
never leaves a half-written entry. Tensors are stored as safetensors, metadata as JSON:
nothing is ever unpickled.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from . import __version__

_LIB_DIR = Path(__file__).resolve().parent


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


def _lib_fingerprint() -> str:
    h = hashlib.sha256(__version__.encode())
    for f in sorted(_LIB_DIR.rglob("*")):
        if f.is_file() and f.suffix in {".py", ".csv", ".json", ".txt"} and "__pycache__" not in f.parts:
            h.update(f.relative_to(_LIB_DIR).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


LIB_FINGERPRINT = _lib_fingerprint()
"""Hash of the library's version and source files: a code change invalidates derived results."""


def layerlab_imports(source: str, package: str = "layerlab") -> set[str]:
    """Names of the layerlab modules that Python ``source`` imports (``layerlab.x`` form)."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "layerlab"}
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:  # relative import inside the package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                mod = f"{base}.{mod}" if mod else base
            if mod.split(".")[0] != "layerlab":
                continue
            found.add(mod)
            found |= {f"{mod}.{a.name}" for a in node.names}
    return {m for m in found if _module_file(m) is not None}


def _module_file(name: str) -> Path | None:
    parts = name.split(".")[1:]
    if not parts:
        return _LIB_DIR / "__init__.py"
    f = _LIB_DIR.joinpath(*parts).with_suffix(".py")
    return f if f.exists() else None


def module_fingerprint(*names: str, source: str | None = None) -> str:
    """Hash of the given layerlab modules, everything they import from layerlab (transitively),
    the package ``__init__`` and the package data files; ``source`` adds the modules that a piece of
    code (e.g. a notebook) imports. A change elsewhere in the library leaves it unchanged, so
    expensive results (trained families, executed chapters) survive unrelated edits."""
    todo = set(names) | (layerlab_imports(source) if source else set()) | {"layerlab"}
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        f = _module_file(name)
        if f is None:
            raise ValueError(f"no layerlab module named {name!r}")
        seen.add(name)
        pkg = name if f.name == "__init__.py" else name.rsplit(".", 1)[0]
        todo |= layerlab_imports(f.read_text(), package=pkg) - seen
    h = hashlib.sha256(__version__.encode())
    for name in sorted(seen):
        h.update(name.encode())
        h.update(_module_file(name).read_bytes())
    for f in sorted((_LIB_DIR / "data").glob("*")) if (_LIB_DIR / "data").is_dir() else []:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _update(h: Any, obj: Any) -> None:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(obj, np.ndarray):
        a = np.ascontiguousarray(obj)
        h.update(f"A{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    elif isinstance(obj, bytes):
        h.update(b"B" + obj)
    elif isinstance(obj, dict):
        h.update(b"D")
        for k in sorted(obj, key=str):
            _update(h, str(k))
            _update(h, obj[k])
    elif isinstance(obj, (list, tuple)):
        h.update(b"L")
        for x in obj:
            _update(h, x)
    elif hasattr(obj, "__dataclass_fields__"):
        import dataclasses

        _update(h, {"__type__": type(obj).__name__, **dataclasses.asdict(obj)})
    else:
        h.update(json.dumps(obj, default=str).encode())


def fingerprint(*objs: Any) -> str:
    """Stable short sha256 of JSON-able values, tensors, arrays, bytes and dataclasses."""
    h = hashlib.sha256()
    for o in objs:
        _update(h, o)
    return h.hexdigest()[:20]


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


def _entry(kind: str, key: dict, lib_versioned: bool) -> tuple[Path, str]:
    full_key = dict(key)
    if lib_versioned:
        full_key["__lib__"] = LIB_FINGERPRINT
    digest = fingerprint(full_key)
    return cache_path(kind, digest), digest


def cached_tensors(
    kind: str,
    key: dict,
    compute: Callable[[], dict[str, torch.Tensor]],
    *,
    lib_versioned: bool = True,
) -> dict[str, torch.Tensor]:
    """Return ``compute()`` cached as safetensors under ``kind`` and a digest of ``key``."""
    base, _ = _entry(kind, key, lib_versioned)
    path = base.with_suffix(".safetensors")
    if path.exists():
        try:
            return load_file(str(path))
        except Exception:  # corrupt entry: recompute and overwrite
            path.unlink()
    out = compute()
    tensors = {k: v.detach().cpu().contiguous() for k, v in out.items()}
    with atomic_write(path) as tmp:
        save_file(tensors, str(tmp), metadata={"key": json.dumps(key, default=str)[:4000]})
    return tensors


def cached_json(kind: str, key: dict, compute: Callable[[], Any], *, lib_versioned: bool = True) -> Any:
    """Return ``compute()`` cached as JSON under ``kind`` and a digest of ``key``."""
    base, _ = _entry(kind, key, lib_versioned)
    path = base.with_suffix(".json")
    if path.exists():
        try:
            return json.loads(path.read_text())["value"]
        except (json.JSONDecodeError, KeyError):
            path.unlink()
    value = compute()
    write_json(path, {"key": key, "value": value})
    return json.loads(path.read_text())["value"]
