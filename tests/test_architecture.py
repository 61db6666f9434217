"""The library's layout is its design: import direction between the role packages, small modules,
one chapter protocol, and cache keys that follow the source code (package-aware, transitively)."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import pytest

from layerlab.core import cache
from layerlab.core.fingerprints import LIB_DIR, SourceError, layerlab_imports, module_closure, module_fingerprint

FLOORS = {"core": 0, "data": 1, "report": 2, "metrics": 3, "training": 4, "chapters": 5, "teach": 5}
# may import anything; nothing but the command line imports them
TOP_LEVEL = {"layerlab", "layerlab.cli", "layerlab.__main__", "layerlab.doctor"}
# Which paper each metric module belongs to: modules of one paper never import another paper's.
PAPER = {
    "ablation": "anatomy", "manipulation": "anatomy", "predictability": "anatomy", "recovery": "anatomy",
    "weights": "anatomy", "coupling": "coupling", "trajectories": "coupling", "quant": "coupling",
    "diversity": "diversity", "members": "diversity", "infotheory": "diversity", "perplexity": None,
}
MAX_LINES = 450  # "modules stay small (~400 lines)"


def _modules() -> dict[str, Path]:
    out = {}
    for f in sorted(LIB_DIR.rglob("*.py")):
        parts = [p for p in f.relative_to(LIB_DIR).with_suffix("").parts if p != "__init__"]
        out[".".join(["layerlab", *parts])] = f
    return out


def _floor(name: str) -> int | None:
    parts = name.split(".")
    return FLOORS.get(parts[1]) if len(parts) > 1 else None


MODULES = _modules()


@pytest.mark.parametrize("name", [m for m in MODULES if m not in TOP_LEVEL])
def test_import_direction(name):
    f = MODULES[name]
    pkg = name if f.name == "__init__.py" else name.rsplit(".", 1)[0]
    floor = _floor(name)
    assert floor is not None, f"{name} is outside the role packages {sorted(FLOORS)}"
    for dep in layerlab_imports(f.read_text(), pkg, where=str(f)):
        assert dep not in TOP_LEVEL, f"{name} imports {dep}: library code imports the module it needs, not the root"
        assert _floor(dep) is not None and _floor(dep) <= floor, f"{name} (floor {floor}) imports {dep} from above"
        # the teaching kit sits beside the chapters (floor 5) and never imports one; no chapter imports it
        assert not (name.startswith("layerlab.teach") and dep.startswith("layerlab.chapters")), (
            f"{name} imports the chapter module {dep}: checkers compare with core/metrics, never a chapter")
        assert not (name.startswith("layerlab.chapters") and dep.startswith("layerlab.teach")), (
            f"chapter {name} imports the teaching kit {dep}")
        if name.startswith("layerlab.chapters.") and dep.startswith("layerlab.chapters."):
            mine, theirs = name.split(".")[2:3], dep.split(".")[2:3]
            assert not theirs or not mine or mine == theirs, f"chapter {name} imports another chapter: {dep}"
        if name.startswith("layerlab.metrics.") and dep.startswith("layerlab.metrics."):
            a, b = PAPER.get(name.split(".")[2]), PAPER.get(dep.split(".")[2])
            assert a is None or b is None or a == b, f"{name} ({a} paper) imports {dep} ({b} paper)"


def test_every_metric_module_has_a_paper():
    metrics = {m.split(".")[2] for m in MODULES if m.startswith("layerlab.metrics.")}
    assert metrics <= set(PAPER), f"add {sorted(metrics - set(PAPER))} to PAPER"


@pytest.mark.parametrize("name", list(MODULES))
def test_modules_stay_small(name):
    n = len(MODULES[name].read_text().splitlines())
    assert n <= MAX_LINES, f"{name} has {n} lines (> {MAX_LINES}): it is probably two concepts"


def test_public_api_resolves():
    import layerlab as ll

    for name in ll.API:
        assert getattr(ll, name) is not None
    with pytest.raises(AttributeError, match="public API"):
        ll.no_such_thing  # noqa: B018


def test_root_import_is_lazy():
    import subprocess
    import sys

    code = "import sys, layerlab; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# ----------------------------------------------------------------------------- cache keys follow code
@pytest.fixture()
def lib_copy(tmp_path) -> Path:
    root = tmp_path / "layerlab"
    shutil.copytree(LIB_DIR, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _append(path: Path, text: str = "\n# an edit\n") -> None:
    path.write_text(path.read_text() + text)


def test_editing_a_dependency_changes_the_key(lib_copy):
    target = "layerlab.chapters.anatomy.run"
    before = module_fingerprint(target, root=lib_copy)
    assert "layerlab.metrics.ablation" in module_closure(target, root=lib_copy)
    _append(lib_copy / "core" / "arch.py")  # imported transitively (ablation -> arch)
    assert module_fingerprint(target, root=lib_copy) != before


def test_editing_an_unrelated_chapter_keeps_the_key(lib_copy):
    target = "layerlab.chapters.anatomy.run"
    before = module_fingerprint(target, root=lib_copy)
    _append(lib_copy / "chapters" / "coupling" / "members.py")
    _append(lib_copy / "__init__.py")  # the root re-exports the API; library modules never import it
    assert module_fingerprint(target, root=lib_copy) == before


def test_package_init_imports_are_followed(lib_copy):
    pkg = lib_copy / "metrics" / "extra"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("X = 1\n")
    _append(lib_copy / "metrics" / "ablation.py", "\nfrom layerlab.metrics.extra import X  # noqa\n")
    target = "layerlab.metrics.ablation"
    assert "layerlab.metrics.extra" in module_closure(target, root=lib_copy)
    before = module_fingerprint(target, root=lib_copy)
    _append(pkg / "__init__.py", "Y = 2\n")
    assert module_fingerprint(target, root=lib_copy) != before


def test_unresolvable_import_fails_loudly(lib_copy):
    _append(lib_copy / "metrics" / "ablation.py", "\nfrom layerlab.metrics.nonexistent import f  # noqa\n")
    with pytest.raises(SourceError, match="nonexistent"):
        module_fingerprint("layerlab.metrics.ablation", root=lib_copy)
    with pytest.raises(SourceError, match="no layerlab module"):
        module_fingerprint("layerlab.no_such_module")


def test_data_files_next_to_a_module_are_in_its_key(lib_copy):
    target = "layerlab.chapters.coupling.presets"
    before = module_fingerprint(target, root=lib_copy)
    _append(lib_copy / "chapters" / "coupling" / "fig1a_leaderboard.csv", "x,y\n")
    assert module_fingerprint(target, root=lib_copy) != before


def _call_as(module: str, fn_source: str, **ns):
    """Run ``fn_source`` as if it were code of layerlab module ``module`` (its frame's __name__)."""
    g = {"__name__": module, **ns}
    exec(compile(fn_source, f"<{module}>", "exec"), g)  # noqa: S102
    return g["result"]


def test_cached_folds_in_the_calling_module(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path))
    calls = []
    code = "result = cache.cached_json('t', {'k': 1}, lambda: calls.append(1) or {'v': 2})"
    a = _call_as("layerlab.metrics.ablation", code, cache=cache, calls=calls)
    b = _call_as("layerlab.metrics.ablation", code, cache=cache, calls=calls)
    c = _call_as("layerlab.metrics.coupling", code, cache=cache, calls=calls)
    assert a == b == c == {"v": 2} and len(calls) == 2  # same module: cached; another module: its own key
    (e_abl,) = [e for e in cache.entries() if e.module == "layerlab.metrics.ablation"]
    assert e_abl.source == module_fingerprint("layerlab.metrics.ablation") and e_abl.current


def test_cache_info_and_prune(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "catalog.json").write_text("{}")  # fetched corpora: never pruned
    cache.cached_json("fresh", {"k": 1}, lambda: 1)
    cache.cached_tensors("fresh-t", {"k": 1}, lambda: {"x": torch.ones(2)})
    cache.cached("fresh-v", {"k": 1}, lambda: {"t": torch.zeros(1), (1, 2): [3]})
    d = cache.entry_dir("dirs", "run", {"k": 1})
    (d / "weights.bin").write_bytes(b"0")
    cache.mark_complete(d)
    stale = tmp_path / "old" / "abc.json"
    stale.parent.mkdir()
    stale.write_text('{"module": "layerlab.metrics.ablation", "source": "0000", "value": 1}')
    legacy = tmp_path / "old" / "legacy.safetensors"
    legacy.write_bytes(b"not a safetensors file")
    (tmp_path / "old" / ".abc.lock").write_text("")  # the entry_lock file it was computed under
    es = cache.entries()
    assert {e.kind for e in es} == {"fresh", "fresh-t", "fresh-v", "dirs", "old"}
    assert {e.path.name for e in es if not e.current} == {"abc.json", "legacy.safetensors"}
    assert len(cache.prune(dry_run=True)) == 2 and stale.exists()
    removed = cache.prune()
    assert {e.path.name for e in removed} == {"abc.json", "legacy.safetensors"} and not stale.exists()
    assert not (tmp_path / "old" / ".abc.lock").exists()  # the stale entry's lock goes with it
    assert (tmp_path / "fresh" / f".{next((tmp_path / 'fresh').glob('*.json')).stem}.lock").exists()
    assert all(e.current for e in cache.entries()) and (tmp_path / "data" / "catalog.json").exists()


def test_cached_values_roundtrip_typed_results(tmp_path, monkeypatch):
    import numpy as np
    import pandas as pd
    import torch

    from layerlab.core.protocol import Provenance

    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path))
    prov = Provenance(chapter="x", profile="smoke", model="m", tokens="t", seed=0, device="cpu", dtype="float32")
    multi = pd.DataFrame({"v": [1.0, 2.0]}, index=pd.MultiIndex.from_tuples([("a", 1), ("b", 2)], names=["s", "k"]))
    value = {"prov": prov, "df": pd.DataFrame({"a": [1, 2], "b": [0.5, np.nan], "c": ["x", "y"]}), "multi": multi,
             "t": torch.arange(3.0, dtype=torch.float64), "arr": np.ones((2, 2)), (0, 1): 3}
    first = cache.cached("roundtrip", {"k": 1}, lambda: value)
    again = cache.cached("roundtrip", {"k": 1}, lambda: pytest.fail("recomputed"))
    for out in (first, again):
        assert out["prov"] == prov and out[(0, 1)] == 3
        pd.testing.assert_frame_equal(out["df"], value["df"])
        pd.testing.assert_frame_equal(out["multi"], multi)
        assert torch.equal(out["t"], value["t"]) and np.array_equal(out["arr"], value["arr"])


# ----------------------------------------------------------------------------- one chapter protocol
CHAPTER_NAMES = importlib.import_module("layerlab.chapters").CHAPTERS
