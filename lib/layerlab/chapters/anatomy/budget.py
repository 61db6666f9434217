"""Adaptive token budgets for the ablation profile: spend tokens where a layer's tier is still open.

Wietrzykowski (arXiv:2603.19348), finding 2. Every (operator, layer) is first evaluated on a small
document-disjoint sample; only the pairs whose interval still contains a decision threshold (ΔNLL = 0,
the 1% "redundant" line, the +100% "critical" line) get more documents and windows, up to the last
planned look. The resampling unit is the **document**: a document's value is its mean ΔNLL over the
windows of it seen so far, and every interval and test is over documents
(:func:`layerlab.report.sequential.sequential_mean`). The looks spend the 5% level in weighted
Bonferroni shares, so stopping where a tier is settled does not inflate false "supported" (the
calibration appendix simulates the design).

Documents come from an evaluation pool that no part of the chapter fits on: the ``test`` split and
the ``train`` documents not used by the recovery fine-tunes (:func:`document_plan`); mean ablation
calibrates on ``validation``. The NLLs come from the prefix-cached engine
(:func:`layerlab.metrics.ablation.evaluate_interventions`), cached per look.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import numpy as np
import pandas as pd
import torch

from layerlab.chapters.anatomy.presets import DECIDING
from layerlab.core.cache import cached_json
from layerlab.metrics import ablation
from layerlab.report.sequential import SequentialDesign, sequential_mean, settled

__all__ = ["DECIDING", "DECIDING_A5_A7", "REDUNDANT_BAND", "THRESHOLDS", "adaptive_profile", "decided",
           "deciding_rows", "design", "doc_sample", "document_plan", "forced", "pool_windows"]

#: ΔNLL decision thresholds (nats): no effect, the redundant line (ΔPPL 1%), the critical line (ΔPPL 100%).
THRESHOLDS: tuple[float, ...] = (0.0, math.log1p(0.01), math.log(2.0))
#: A layer whose interval lies inside this ΔNLL band is settled as redundant and as no anti-layer of the
#: paper's size (ΔPPL between the digest's −0.6% and the 1% redundant line).
REDUNDANT_BAND: tuple[float, float] = (math.log1p(-0.006), math.log1p(0.01))


#: Every row that can decide A5 (every core layer critical) or A7 (each anti-layer) in either reading of
#: the paper's layer numbers: the neighbour average (the claims' operator) on layers 7-11, 13, 14, 16 and
#: 17. ``preset("cpu", budget_force=DECIDING_A5_A7)`` takes all nine to the last look (32 documents,
#: 32,130 scored tokens at cpu: up to 4 windows each, one document holds fewer), and no other row; the
#: cpu default, :data:`DECIDING`, takes only those that decide the verdicts (:func:`deciding_rows`).
_NAMED = (*ablation.PAPER_CORE, *ablation.PAPER_ANTI)
DECIDING_A5_A7: tuple[str, ...] = tuple(
    f"neighbour_avg@{x}" for x in sorted({x for base in (0, 1) for x in ablation.paper_layers(_NAMED, base)}))


def deciding_rows(evidence: Mapping[str, Any], *, op: str = "neighbour_avg") -> set[str]:
    """The rows that decide A5 and A7 given the evidence so far (``evidence``: {"op@layer": Evidence}).

    A7 (one claim per anti-layer and reading) is decided by its own row: every anti-layer row. A5 (every
    core layer critical, ΔPPL > +100%) is decided, in each reading, by the core rows whose interval does not
    yet lie above the critical line: the ones that can make it "contradicted" (an interval wholly below
    the line) or keep it open. When every core row of a reading already lies above the line, all of
    them decide it ("supported" needs each one). The repeated intervals hold at every look, so choosing
    which rows go on from the data seen so far keeps them valid. Rows a shallow model lacks are left out.
    """
    rows = {f"{op}@{x}" for base in (0, 1) for x in ablation.paper_layers(ablation.PAPER_ANTI, base)}
    critical = THRESHOLDS[2]
    for base in (0, 1):
        core = [n for n in (f"{op}@{x}" for x in ablation.paper_layers(ablation.PAPER_CORE, base)) if n in evidence]
        open_ = [n for n in core if not (evidence[n].has_interval and evidence[n].low > critical)]
        rows |= set(open_ or core)
    return {n for n in rows if n in evidence}


def forced(name: str, force: tuple[int | str, ...]) -> bool:
    """Whether the row ``name`` ("op@layer") always goes on to the last look: ``force`` names its layer
    (every operator on it) or the row itself."""
    layer = int(name.partition("@")[2])
    return name in force or any(not isinstance(f, str) and int(f) == layer for f in force)


def check_force(force: tuple[int | str, ...], n_layers: int) -> None:
    """One clear error for a ``budget_force`` entry that names no row: a layer out of 0..L−1, or a string
    that is not "op@layer" with a primary operator (only those run on the large protocol) nor
    :data:`DECIDING`."""
    from layerlab.chapters.anatomy.presets import PRIMARY_OPS

    for f in force:
        if f == DECIDING:
            continue
        if isinstance(f, str):
            op, _, layer = f.partition("@")
            ok = op in PRIMARY_OPS and layer.isdigit() and int(layer) < n_layers
        else:
            ok = 0 <= int(f) < n_layers
        if not ok:
            raise ValueError(f"budget_force entry {f!r} names no row: give a layer in 0..{n_layers - 1} or "
                             f"'op@layer' with op in {PRIMARY_OPS} (e.g. 'neighbour_avg@9'), or {DECIDING!r}")


def decided(ev) -> bool:
    """The stopping rule: the repeated interval has left every threshold, or lies inside the redundant band."""
    inside = ev.has_interval and REDUNDANT_BAND[0] < ev.low and ev.high < REDUNDANT_BAND[1]
    return inside or settled(ev, THRESHOLDS)


def design(preset, max_looks: int | None = None) -> SequentialDesign:
    """The preset's planned looks (documents at each look) and its alpha split; with ``max_looks`` only the
    first looks, their shares rescaled to spend the whole level (a protocol planned with fewer looks, e.g.
    the secondary operators' single look at the full 5%)."""
    n = len(preset.budget_docs) if max_looks is None else max(1, min(int(max_looks), len(preset.budget_docs)))
    w = np.asarray(preset.budget_weights[:n], dtype=float)
    return SequentialDesign(looks=tuple(preset.budget_docs[:n]), weights=tuple((w / w.sum()).tolist()))


_POOLS: dict = {}  # (tokenizer id, window, need, seed) -> pool_windows result (a run asks several times)


def pool_windows(preset, tokenizer, *, window: int) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Windows of every document of the evaluation pool ({doc id: [n_windows, window]}, in look order)
    and the recovery documents (train documents left out of the pool)."""
    key = (id(tokenizer), window, int(preset.budget_docs[-1]), preset.seed)
    if key not in _POOLS:
        if len(_POOLS) >= 4:
            _POOLS.clear()
        _POOLS[key] = _pool_windows(preset, tokenizer, window=window)
    return _POOLS[key]


def _pool_windows(preset, tokenizer, *, window: int) -> tuple[dict[str, torch.Tensor], list[str]]:
    from layerlab.data.corpora import token_windows

    by_doc: dict[str, list[torch.Tensor]] = {}
    split_docs: dict[str, list[str]] = {"test": [], "train": []}
    for split in ("test", "train"):
        w = token_windows(tokenizer, split, window=window)
        for i, d in enumerate(w.doc_ids):
            if d not in by_doc:
                split_docs[split].append(d)
            by_doc.setdefault(d, []).append(w.input_ids[i])
    pool, recovery = document_plan(split_docs["test"], split_docs["train"], need=int(preset.budget_docs[-1]),
                                   seed=preset.seed)
    return {d: torch.stack(by_doc[d]) for d in pool}, recovery


def document_plan(test: list[str], train: list[str], *, need: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """Split document ids into the ablation pool in look order (seeded) and the recovery documents.

    The pool is every test document plus as many train documents as the last look (``need``) requires,
    drawn with the seed; the remaining train documents are the recovery fine-tunes' text, so the two
    never share a document."""
    test, train = sorted(test), sorted(train)
    rng = np.random.default_rng(seed)
    train = [train[i] for i in rng.permutation(len(train))]
    n_train = max(0, need - len(test))
    if n_train > len(train) - 1:
        raise ValueError(f"the last look needs {need} documents; the corpus has {len(test)} test and "
                         f"{len(train)} train documents (one must stay for recovery): lower budget_docs")
    pool = test + train[:n_train]
    pool = [pool[i] for i in rng.permutation(len(pool))][:max(need, 0)]
    return pool, sorted(train[n_train:])


def doc_sample(preset, tokenizer, tokens: int, *, window: int, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    """Windows from the first ``preset.sample_docs`` pool documents, as many per document as ``tokens``
    scored tokens need (at least one; seeded choice): ``(ids [N, window], groups [N] document index)``,
    so every interval on them is a cluster bootstrap over documents."""
    docs_w, _ = pool_windows(preset, tokenizer, window=window)
    docs = list(docs_w)[:preset.sample_docs]
    per_doc = max(1, math.ceil(tokens / (len(docs) * (window - 1))))
    rng = np.random.default_rng(seed)
    ids, groups = [], []
    for g, d in enumerate(docs):
        for j in rng.permutation(docs_w[d].shape[0])[:per_doc]:
            ids.append(docs_w[d][int(j)])
            groups.append(g)
    return torch.stack(ids), np.asarray(groups)


def _evaluate(model, ids: torch.Tensor, ivs: list[ablation.Intervention], preset, key: dict,
              geometry: bool) -> ablation.EvalResult:
    def compute():
        import time

        t0 = time.perf_counter()
        res = ablation.evaluate_interventions(model, ids, ivs, batch_size=preset.batch_size, geometry=geometry)
        res.meta["seconds"] = time.perf_counter() - t0
        return res.to_dict()

    return ablation.EvalResult.from_dict(cached_json("anatomy-budget", key, compute,
                                                     sources="layerlab.metrics.ablation"))


def adaptive_profile(preset, model, tokenizer, ops: tuple[str, ...], *, window: int, windows_per_doc: tuple[int, ...],
                     max_looks: int, protocol: str, mean_contrib: torch.Tensor | None = None,
                     force: tuple[int | str, ...] = ()) -> tuple[pd.DataFrame, dict]:
    """The sequential ablation sweep of ``ops`` on every layer.

    Look k uses the first ``budget_docs[k]`` pool documents and up to ``windows_per_doc[k]`` windows of
    each (seeded order); an (op, layer) goes on to the next look until :func:`decided` (its repeated interval holds
    no threshold of :data:`THRESHOLDS`, or lies inside :data:`REDUNDANT_BAND`; rows that ``force`` names, by
    layer or as "op@layer" (:func:`forced`), always go on, and with :data:`DECIDING` in ``force`` so do the
    rows :func:`deciding_rows` picks at each look), up to ``max_looks`` (the design then plans that many
    looks: :func:`design`).
    Returns (profile, extras): one row per (op, layer) with ΔNLL over documents, its repeated CI,
    ΔPPL%, tier, adjusted one-sided p-values, documents, tokens and looks spent, and ``forced`` (it went on
    because ``force`` named it or, settled, because it decides A5 or A7); extras holds the
    per-document values at the first look ({name: [budget_docs[0]]}, common to all layers), the clean
    pass's Block Influence / angular distance and the seconds spent."""
    from layerlab.core import arch

    D = design(preset, max_looks)
    L = arch.view(model).n_layers
    check_force(tuple(force), L)
    docs_w, _ = pool_windows(preset, tokenizer, window=window)
    docs = list(docs_w)
    rng = np.random.default_rng(preset.seed + 7)
    order = {d: rng.permutation(docs_w[d].shape[0]) for d in docs}
    ivs = {iv.name: iv for iv in ablation.sweep_interventions(model, ops, mean_contrib=mean_contrib)}
    active = list(ivs)
    seen: list[tuple[str, int]] = []  # (doc, window index) evaluated so far
    delta: dict[str, dict[tuple[str, int], float]] = {n: {} for n in ivs}
    history: dict[str, list[np.ndarray]] = {n: [] for n in ivs}
    looks_of: dict[str, int] = {}
    pushed: set[str] = set()  # settled rows that went on because they decide A5 or A7 (DECIDING)
    evidence: dict = {}
    first_values: dict[str, list[float]] = {}
    geo: dict = {}
    base_nll: list[float] = []
    seconds = 0.0
    n_looks = len(D.looks)
    for k in range(n_looks):
        units = [(d, int(j)) for d in docs[:D.looks[k]] for j in order[d][:windows_per_doc[k]]]
        done = set(seen)
        new = [u for u in units if u not in done]
        if new and active:
            ids = torch.stack([docs_w[d][j] for d, j in new])  # [n_new, window]
            key = {"preset": asdict(preset), "protocol": protocol, "look": k, "active": active,
                   "units": new, "window": window}
            res = _evaluate(model, ids, [ivs[n] for n in active], preset, key, geometry=k == 0)
            seconds += float(res.meta.get("seconds", 0.0))
            if k == 0:
                geo = {"block_influence": res.block_influence, "angular_distance": res.angular_distance}
            base_nll += [float(b) for b in res.base]
            for n in active:
                for u, b, v in zip(new, res.base, res.nll[n]):
                    delta[n][u] = float(v - b)
            seen += new
        for n in active:
            per_doc = [np.mean([delta[n][u] for u in units if u[0] == d]) for d in docs[:D.looks[k]]]
            history[n].append(np.asarray(per_doc))
            evidence[n], looks_of[n] = sequential_mean(history[n], D, unit="documents", seed=preset.seed), k + 1
            if k == 0:
                first_values[n] = [float(x) for x in per_doc]
        deciding = deciding_rows(evidence) if DECIDING in force else set()
        pushed |= {n for n in active if n in deciding and decided(evidence[n]) and k + 1 < n_looks}
        active = [n for n in active if (forced(n, force) or n in deciding or not decided(evidence[n]))
                  and k + 1 < n_looks]
    rows = []
    tiers = ablation.Tiers()
    for n, ev in evidence.items():
        op, _, layer = n.partition("@")
        n_units = len(delta[n])
        rows.append({"op": op, "layer": int(layer), "protocol": protocol, "dnll": ev.estimate, "dnll_low": ev.low,
                     "dnll_high": ev.high, "dppl_pct": 100 * math.expm1(ev.estimate),
                     "dppl_low": 100 * math.expm1(ev.low), "dppl_high": 100 * math.expm1(ev.high),
                     "tier": tiers.classify(ev.estimate, ev.low, ev.high), "p_greater": ev.p_greater,
                     "p_less": ev.p_less, "p_min": ev.p_min, "n_docs": ev.n, "n_windows": n_units,
                     "n_tokens": n_units * (window - 1), "looks": looks_of[n],
                     "forced": forced(n, force) or n in pushed})
    prof = pd.DataFrame(rows).sort_values(["op", "layer"]).reset_index(drop=True)
    assert len(prof) == len(ops) * L
    from layerlab.core.cache import fingerprint

    extras = {"first_values": first_values, "seconds": seconds, "design": D.name, "base_mean": float(np.mean(base_nll)),
              "text": fingerprint(sorted(seen), docs), **geo}
    return prof, extras
