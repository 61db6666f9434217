"""Fingerprints: of values (:func:`fingerprint`, for cache keys) and of source code
(:func:`module_fingerprint`: a layerlab module and everything it imports from layerlab,
transitively, package-aware). :mod:`layerlab.core.cache` folds the caller's source fingerprint into
every key, so an edit to the code that computes a result changes its key.
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from layerlab.core.version import __version__

LIB_DIR = Path(__file__).resolve().parents[1]
"""The ``layerlab`` package directory."""

_INTERNAL = ("layerlab.core.cache", "layerlab.core.fingerprints")


# ----------------------------------------------------------------------------- source fingerprints
class SourceError(ValueError):
    """A layerlab import could not be resolved to a file, so a fingerprint would miss it."""


def module_file(name: str, root: Path | None = None) -> Path | None:
    """The file of layerlab module ``name`` (``layerlab.a.b`` -> ``a/b.py`` or ``a/b/__init__.py``)."""
    root = LIB_DIR if root is None else Path(root)
    parts = name.split(".")
    if parts[0] != "layerlab":
        return None
    base = root.joinpath(*parts[1:])
    for f in (base.with_suffix(".py") if parts[1:] else None, base / "__init__.py"):
        if f is not None and f.is_file():
            return f
    return None


_PARSED: dict[tuple[str, int, int], frozenset[str]] = {}


def layerlab_imports(source: str, package: str = "layerlab", *, root: Path | None = None,
                     where: str = "<source>") -> set[str]:
    """Names of the layerlab modules that Python ``source`` imports, anywhere in it (also inside
    functions). ``package`` resolves relative imports. ``from a import b`` adds ``a`` and, when it is
    a module, ``a.b``. Raises :class:`SourceError` for a layerlab module that has no file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "layerlab":
                    found.add(a.name)
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                mod = f"{base}.{mod}" if mod else base
            if mod.split(".")[0] != "layerlab":
                continue
            found.add(mod)
            found |= {f"{mod}.{a.name}" for a in node.names if module_file(f"{mod}.{a.name}", root)}
    missing = sorted(m for m in found if module_file(m, root) is None)
    if missing:
        raise SourceError(f"{where} imports {', '.join(missing)}, which is not a layerlab module file: "
                          "fix the import (a fingerprint would otherwise miss the code it runs)")
    return found


def _imports_of(name: str, root: Path | None) -> frozenset[str]:
    f = module_file(name, root)
    if f is None:
        raise SourceError(f"no layerlab module named {name!r} (looked under {root or LIB_DIR})")
    st = f.stat()
    memo = (str(f), st.st_mtime_ns, st.st_size)
    if memo not in _PARSED:
        pkg = name if f.name == "__init__.py" else name.rsplit(".", 1)[0]
        _PARSED[memo] = frozenset(layerlab_imports(f.read_text(), pkg, root=root, where=str(f)))
    return _PARSED[memo]


def module_closure(*names: str, source: str | None = None, root: Path | None = None) -> list[str]:
    """The given layerlab modules and everything they import from layerlab, transitively (sorted).
    ``source`` adds the modules a piece of code (e.g. a notebook) imports. Parent packages are not
    added implicitly: a module depends on a package ``__init__`` only if it imports that package."""
    todo = set(names) | (layerlab_imports(source, root=root) if source else set())
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo |= _imports_of(name, root) - seen
    return sorted(seen)


def module_fingerprint(*names: str, source: str | None = None, root: Path | None = None) -> str:
    """Hash of the library version, the files of :func:`module_closure` and the data files
    (non-``.py``) that sit next to them. A change anywhere else in the library leaves it unchanged."""
    h = hashlib.sha256(__version__.encode())
    dirs: set[Path] = set()
    for name in module_closure(*names, source=source, root=root):
        f = module_file(name, root)
        h.update(name.encode())
        h.update(f.read_bytes())
        dirs.add(f.parent)
    for d in sorted(dirs):
        for f in sorted(d.iterdir()):
            if f.is_file() and f.suffix not in {".py", ".pyc"} and not f.name.startswith("."):
                h.update(f.name.encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def library_fingerprint(root: Path | None = None) -> str:
    """Fingerprint of every module of the library (for code outside layerlab that calls the cache)."""
    root = LIB_DIR if root is None else Path(root)
    names = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        names.append(".".join(["layerlab", *parts]))
    return module_fingerprint(*names, root=root)


def calling_module(depth: int = 1) -> str:
    """Name of the first layerlab module (outside this one) on the call stack above ``depth``."""
    frame = sys._getframe(depth + 1)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith("layerlab.") and name not in _INTERNAL:
            return name
        frame = frame.f_back
    return ""


def source_fingerprint(sources: str | Iterable[str] | None = None) -> tuple[str, str]:
    """``(module, fingerprint)`` for ``sources`` (module names) or, by default, the calling layerlab
    module. Code outside the library (tests, scripts) is keyed by the whole library."""
    if sources is None:
        mod = calling_module(1)
        names = (mod,) if mod else ()
    else:
        names = (sources,) if isinstance(sources, str) else tuple(sources)
    if not names:
        return "*", library_fingerprint()
    return ",".join(names), module_fingerprint(*names)


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
