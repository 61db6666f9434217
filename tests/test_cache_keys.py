"""Every cached result in the library is keyed by the code that computes it (no stale results).

``cached*(..., sources=...)`` fingerprints the named modules *instead of* the calling one, so a call that
names only, say, ``layerlab.core.models`` would serve a stale result after an edit to the chapter that
computes it (the atlas did, until an edit to its agreement rule was served from the old cache)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "lib" / "layerlab"
CACHE_CALLS = {"cached", "cached_json", "cached_tensors"}
# calls whose compute closure runs only the named module's code (the key holds everything else)
ALLOWED = {("chapters/anatomy/budget.py", "layerlab.metrics.ablation")}


def _calls():
    for path in sorted(LIB.rglob("*.py")):
        tree = ast.parse(path.read_text())
        consts = {t.id: n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets
                  if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in CACHE_CALLS:
                for kw in node.keywords:
                    if kw.arg == "sources":
                        value = consts.get(kw.value.id, kw.value) if isinstance(kw.value, ast.Name) else kw.value
                        yield path.relative_to(LIB).as_posix(), node.lineno, value


@pytest.mark.parametrize("rel,line,value", list(_calls()), ids=lambda v: str(v) if not isinstance(v, ast.AST) else "")
def test_sources_include_the_computing_module(rel, line, value):
    if isinstance(value, ast.Constant) and (rel, value.value) in ALLOWED:
        return
    assert isinstance(value, (ast.Tuple, ast.List)), f"{rel}:{line}: sources must list the module itself"
    names = [e.id if isinstance(e, ast.Name) else getattr(e, "value", None) for e in value.elts]
    assert "__name__" in names, f"{rel}:{line}: sources {names} leave out the module that computes the result"


def test_the_scan_finds_the_chapters_cached_results():
    found = {rel for rel, _, _ in _calls()}
    assert {"chapters/atlas/run.py", "chapters/coupling/members.py", "chapters/diversity/run.py"} <= found


def test_the_trained_family_is_not_keyed_by_how_chapters_read_it():
    """The family's members are cached under the source closure of ``training/family.py``. The rules
    that read the family (``training/regime.py``) and the chapters must stay out of it, or every change
    to a reading rule retrains 23 members (10 minutes on 2 cores) for identical weights."""
    from layerlab.core.fingerprints import module_closure

    closure = set(module_closure("layerlab.training.family"))
    assert "layerlab.training.family" in closure
    assert "layerlab.training.regime" not in closure
    assert not [m for m in closure if m.startswith("layerlab.chapters")]


PRESENTATION = ("claims", "claims_training", "export", "family_plots", "plots", "prose", "rules")


@pytest.mark.parametrize("chapter", ["residual", "anatomy", "coupling", "diversity", "atlas", "growth",
                                     "calibration"])
def test_a_chapter_result_is_not_keyed_by_its_claims_prose_or_plots(chapter):
    """The computation of a chapter is keyed by the code that computes it, and not by the code that reads
    the result: editing a claim rule, a generated sentence or a figure re-renders the page from the cached
    result instead of recomputing it (anatomy: 9 min). ``from package import module`` would pull in the
    package ``__init__`` and with it every module of the chapter, so the computing modules import their
    siblings by full name."""
    from layerlab.core.fingerprints import module_closure

    closure = module_closure(f"layerlab.chapters.{chapter}.run")
    own = f"layerlab.chapters.{chapter}"
    assert f"{own}.run" in closure and own not in closure
    leaked = [m for m in closure if m.startswith("layerlab.chapters.") and m.rsplit(".", 1)[-1] in PRESENTATION]
    assert not leaked, f"the {chapter} result would be recomputed after an edit to {leaked}"


@pytest.mark.parametrize("chapter", ["residual", "anatomy", "coupling", "diversity", "atlas", "growth"])
def test_a_chapter_result_is_not_keyed_by_the_shared_verdict_rules_or_the_claim_table(chapter):
    """The shared rules (``report.verdicts``), the claim records and their rendering (``report.claims``)
    and the calibration scenarios read results; none computes one. The anatomy profile had them in its
    key through ``report.sequential``, which held the sequential design's calibration scenario: an
    edit to the claim table's rendering recomputed 16 minutes of anatomy. (The calibration chapter is
    exempt: it computes the rules' error rates, so the rules are its inputs.)"""
    from layerlab.core.fingerprints import module_closure

    closure = module_closure(f"layerlab.chapters.{chapter}.run")
    readers = {"layerlab.report.claims", "layerlab.report.verdicts", "layerlab.report.calibration"}
    assert not readers & set(closure), f"the {chapter} result is keyed by {sorted(readers & set(closure))}"
