"""The anatomy chapter's experiments: the four diagnostics run on a preset's model and text, with caching.

Wietrzykowski, *Anatomical Heterogeneity in Transformer Language Models* (arXiv:2603.19348). The
metrics live in :mod:`layerlab.metrics.weights`, :mod:`layerlab.metrics.predictability`,
:mod:`layerlab.metrics.ablation`, :mod:`layerlab.metrics.recovery` and
:mod:`layerlab.metrics.manipulation`; this module loads the preset's models and text, runs
the diagnostics, caches each heavy part (:mod:`layerlab.core.cache`) and turns raw results into tables.
:func:`layerlab.chapters.anatomy.run.run` assembles them into one result; Growth Transformer Training
lives in :mod:`layerlab.training.growth` (the growth chapter)."""

from __future__ import annotations

import time
from dataclasses import asdict

import numpy as np
import pandas as pd
import torch

from layerlab.chapters.anatomy.presets import PRIMARY_OPS, SECONDARY_OPS, AnatomyPreset
from layerlab.core.cache import cached_json
from layerlab.metrics import ablation, manipulation, predictability, recovery, weights


# ---------------------------------------------------------------- models and text
def load(preset: AnatomyPreset, *, random_init: bool = False, seed: int = 0):
    """(model, tokenizer) for the preset, on ``preset.device`` in ``preset.torch_dtype``; tiny-* models
    have ``tiny_layers`` blocks (a random-init twin of a tiny model uses seed + 1000)."""
    from layerlab.core.models import byte_tokenizer, load_model, tiny_model

    if preset.model.startswith("tiny-") and preset.tiny_layers:
        s = seed + (1000 if random_init else 0)
        model, tok = tiny_model(preset.model[5:], seed=s, dtype=preset.torch_dtype,
                                num_hidden_layers=preset.tiny_layers), byte_tokenizer()
    else:
        model, tok = load_model(preset.model, random_init=random_init, seed=seed, dtype=preset.torch_dtype)
    return model.to(preset.device), tok


def windows(preset: AnatomyPreset, tokenizer, split: str, max_tokens: int, *, window: int | None = None, seed: int = 0):
    """Token windows of ``split`` (``layerlab.data.corpora.token_windows``) capped at ``max_tokens`` scored tokens."""
    from layerlab.data.corpora import token_windows

    return token_windows(tokenizer, split, window=window or preset.window, max_tokens=max_tokens, seed=seed)


def sentence_ids(preset: AnatomyPreset, tokenizer, seed: int = 0) -> tuple[list[str], list[torch.Tensor]]:
    """The 10-sentence protocol: sentences drawn once with ``seed`` from held-out text, tokenised with BOS policy."""
    from layerlab.data.corpora import bos_policy, ten_sentences

    sents = ten_sentences(seed, n=preset.sentences)
    bos = bos_policy(tokenizer)
    ids = [torch.tensor(([bos] if bos is not None else []) + tokenizer(s, add_special_tokens=False).input_ids)
           for s in sents]
    return sents, ids


def _key(preset: AnatomyPreset, part: str, **extra) -> dict:
    return {"preset": asdict(preset), "part": part, **extra}


# ---------------------------------------------------------------- finding 1: weights
def run_weights(preset: AnatomyPreset, model, null_model) -> dict:
    """Structure table, delta correlations (real, N1, N2), predictability (P1–P5 + nulls), split CIs, Q4_1."""
    comps = tuple(weights.components_of(model))
    t0 = time.perf_counter()
    out = {"structure": weights.structure_table(model),
           "structure_null": weights.structure_table(null_model)}
    out["delta"], out["delta_pairs"] = weights.delta_table(model, seed=preset.seed)
    out["delta_null"], out["delta_null_pairs"] = weights.delta_table(null_model, seed=preset.seed)
    stacks = {c: weights.component_stack(model, c) for c in comps}
    shuffled = {c: weights.shuffle_layers(st, preset.seed) for c, st in stacks.items()}
    out["delta_shuffled"], _ = weights.delta_table(shuffled, seed=preset.seed)
    null_stacks = {c: weights.component_stack(null_model, c) for c in comps}
    out["predictability"] = predictability.predictability_table(stacks, null_stacks, seed=preset.seed,
                                                                n_shuffles=preset.n_shuffles)
    out["r2_splits"] = r2_over_splits(stacks, null_stacks, n_splits=preset.n_shuffles)
    out["r2_loo"] = r2_leave_one_out(stacks, null_stacks, shuffled)
    if preset.model == "smollm2-135m":
        from layerlab.metrics.quant import gguf_roundtrip

        q = weights.gguf_error_table()
        out["quant"] = q
        out["quant_delta"] = weights.delta_energy_table(model, q)
        out["delta_null_q"], _ = weights.delta_table(gguf_roundtrip(null_model, embeddings=False), seed=preset.seed)
    out["seconds"] = time.perf_counter() - t0
    return out


def r2_over_splits(stacks: dict[str, torch.Tensor], null_stacks: dict[str, torch.Tensor], *, n_splits: int = 50,
                   predictors: tuple[str, ...] = ("P1", "P2", "P3")) -> pd.DataFrame:
    """Level and innovation R² of P1–P3 over ``n_splits`` random held-out splits (spread = split uncertainty)."""
    rows = []
    for comp, st in stacks.items():
        for name, s in (("real", st), ("N1", null_stacks[comp])):
            g = predictability.gram(s)
            for split in range(n_splits):
                train, held = predictability.split_layers(s.shape[0], seed=split)
                gi = predictability.innovation_gram(g, train)
                for p in predictors:
                    rows.append({"component": comp, "model": name, "split": split, "predictor": p,
                                 "level": predictability.gram_r2(g, p, train, held),
                                 "innov": predictability.gram_r2(gi, p, train, held)})
    return pd.DataFrame(rows)


def r2_leave_one_out(stacks: dict[str, torch.Tensor], null_stacks: dict[str, torch.Tensor],
                     shuffled: dict[str, torch.Tensor], *, predictor: str = "P1") -> pd.DataFrame:
    """Level and innovation R² of ``predictor`` for every layer l >= 2 held out alone (fitted on all the
    others): one value per layer, the unit of A1's interval; for the real stack, N1 and N2 (shuffled)."""
    rows = []
    for comp, st in stacks.items():
        for name, s in (("real", st), ("N1", null_stacks[comp]), ("N2", shuffled[comp])):
            g = predictability.gram(s)
            L = s.shape[0]
            for layer in range(2, L):
                train = [i for i in range(L) if i != layer]
                rows.append({"component": comp, "model": name, "layer": layer,
                             "level": predictability.gram_r2(g, predictor, train, [layer]),
                             "innov": predictability.gram_r2(predictability.innovation_gram(g, train), predictor,
                                                             train, [layer])})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- finding 2: ablation
def run_ablation(preset: AnatomyPreset, model, tokenizer) -> tuple[pd.DataFrame, dict]:
    """AB1–AB4 profiles: the primary operators on the adaptive budget (protocol "large", 256-token
    windows), the secondary ones on short windows (protocol "small"), all of the preset's sentence
    operators on the 10 sentences (protocol "sentences", bootstrap over sentences). Returns (profile,
    extras): extras["large"/"small"] from :func:`layerlab.chapters.anatomy.budget.adaptive_profile`,
    extras["sentences"] the sentences' EvalResult."""
    import layerlab.chapters.anatomy.budget as budget

    calib = windows(preset, tokenizer, "validation", preset.calib_tokens)
    mc = ablation.mean_contributions(model, calib.input_ids, batch_size=preset.batch_size)
    big, ex_big = budget.adaptive_profile(preset, model, tokenizer, PRIMARY_OPS, window=preset.window,
                                          windows_per_doc=preset.budget_windows, max_looks=len(preset.budget_docs),
                                          protocol="large", force=preset.budget_force)
    small, ex_small = budget.adaptive_profile(preset, model, tokenizer, SECONDARY_OPS,
                                              window=preset.budget_window_small,
                                              windows_per_doc=preset.budget_windows_small,
                                              max_looks=preset.budget_looks_small, protocol="small", mean_contrib=mc)
    _, sent = sentence_ids(preset, tokenizer, seed=preset.seed)

    def compute():
        t0 = time.perf_counter()
        res = ablation.evaluate_interventions(model, sent, ablation.sweep_interventions(
            model, tuple(preset.sentence_ops), mean_contrib=mc), batch_size=preset.batch_size, geometry=True)
        res.meta["seconds"] = time.perf_counter() - t0
        return res.to_dict()

    key = _key(preset, "sentences", text=[s.tolist() for s in sent], calib=calib.fingerprint())
    sres = ablation.EvalResult.from_dict(cached_json("anatomy-ablation", key, compute))
    st = ablation.effect_table(sres, n_boot=preset.n_boot, seed=preset.seed)
    st["protocol"] = "sentences"
    st["n_docs"] = len(sent)
    st["n_tokens"] = sres.n_tokens
    profile = pd.concat([big, small, st], ignore_index=True)
    return profile, {"large": ex_big, "small": ex_small, "sentences": sres}


# ---------------------------------------------------------------- weight generation and manipulation
def run_replacement(preset: AnatomyPreset, model, tokenizer) -> ablation.EvalResult:
    """Predicted-weight replacement (teacher and generated modes) and matched-norm random controls."""
    import layerlab.chapters.anatomy.budget as budget
    from layerlab.core import arch

    ids, groups = budget.doc_sample(preset, tokenizer, preset.replacement_tokens, window=preset.sample_window,
                                    seed=preset.seed + 2)

    L = arch.view(model).n_layers
    ks = tuple(k for k in preset.replacement_ks if k < L)
    single = tuple(layer for layer in preset.replacement_single if 0 < layer < L)

    def compute():
        t0 = time.perf_counter()
        ivs = predictability.replacement_interventions(model, ks=ks, single=single)
        gen = predictability.replacement_interventions(model, ks=ks, mode="generated")
        gen = [ablation.Intervention("gen-" + iv.name, iv.start, iv.context) for iv in gen]
        res = ablation.evaluate_interventions(model, ids, ivs + gen, batch_size=preset.batch_size)
        res.meta["seconds"] = time.perf_counter() - t0
        res.groups = groups
        return res.to_dict()

    key = _key(preset, "replacement", text=ids.tolist())
    return ablation.EvalResult.from_dict(cached_json("anatomy-replacement", key, compute))


def manipulation_configs(preset: AnatomyPreset) -> dict[str, dict]:
    """The five strategies (plus the α sweep, the writers-only variant and exact block scaling)."""
    cfg = {f"scale{a:g}": {"strategy": "scale", "alpha": a} for a in preset.alphas}
    cfg.update({f"scale{a:g}-writers": {"strategy": "scale", "alpha": a, "components": "writers"}
                for a in preset.writer_alphas})
    cfg.update({"scale_block0.9": {"strategy": "scale_block", "alpha": 0.9}, "zero": {"strategy": "zero"},
                "clone": {"strategy": "clone"}, "blend": {"strategy": "blend", "beta": 0.5},
                "predicted": {"strategy": "predicted"}})
    return cfg


def run_manipulation(preset: AnatomyPreset, model, tokenizer, redundant: list[int]) -> ablation.EvalResult:
    """All manipulation configs on single layers, the redundant tier and all layers."""
    from layerlab.core import arch

    L = arch.view(model).n_layers
    targets = {f"L{layer}": [layer] for layer in preset.manip_single if layer < L}
    targets.update({"spread": [x for x in preset.manip_spread if x < L], "redundant": list(redundant),
                    "all": list(range(L))})
    import layerlab.chapters.anatomy.budget as budget

    ids, groups = budget.doc_sample(preset, tokenizer, preset.manip_tokens, window=preset.sample_window,
                                    seed=preset.seed + 3)

    def compute():
        t0 = time.perf_counter()
        ivs = manipulation.manipulation_interventions(model, targets, manipulation_configs(preset))
        res = ablation.evaluate_interventions(model, ids, ivs, batch_size=preset.batch_size)
        res.meta.update(seconds=time.perf_counter() - t0, targets=targets)
        res.groups = groups
        return res.to_dict()

    return ablation.EvalResult.from_dict(cached_json(
        "anatomy-manipulation", _key(preset, "manipulation", text=ids.tolist(), targets=targets), compute))


def manipulation_table(res: ablation.EvalResult, preset: AnatomyPreset) -> pd.DataFrame:
    t = ablation.effect_table(res, n_boot=preset.n_boot, seed=preset.seed).drop(columns=["op", "layer", "tier"])
    names = list(res.nll)
    t.insert(0, "config", [n.split("|")[0] for n in names])
    t.insert(1, "target", [n.split("|")[1] for n in names])
    return t


# ---------------------------------------------------------------- finding 3: recovery
def run_recovery(preset: AnatomyPreset, model, tokenizer) -> list[recovery.RecoveryCurve]:
    """Perturb-and-fine-tune runs on the preset's layers, plus the σ = 0 control; fine-tuning on train
    documents outside the ablation pool, evaluation on the validation split (document-disjoint from each
    other and from every evaluated text)."""
    from layerlab.core import arch

    L = arch.view(model).n_layers
    import layerlab.chapters.anatomy.budget as budget

    _, rec_docs = budget.pool_windows(preset, tokenizer, window=preset.window)  # train documents outside the pool
    every = windows(preset, tokenizer, "train", None, window=preset.recovery_window)
    keep = np.flatnonzero([d in set(rec_docs) for d in every.doc_ids])
    n_keep = min(len(keep), max(1, -(-preset.recovery_train_tokens // every.n_scored)))
    train = every.subset(np.sort(np.random.default_rng(preset.seed).choice(keep, n_keep, replace=False)))
    ev = windows(preset, tokenizer, "validation", preset.recovery_eval_tokens, window=preset.recovery_window)
    runs = [(layer, s, k, sc, seed) for layer in preset.recovery_layers if layer < L for s in preset.recovery_sigmas
            for k in preset.recovery_kinds for sc in preset.recovery_scopes for seed in preset.recovery_seeds]
    runs += [(preset.recovery_control_layer % L, 0.0, "additive", sc, seed) for sc in preset.recovery_scopes
             for seed in preset.recovery_seeds]

    def compute():
        curves = []
        base = recovery.baseline_nll(model, ev.input_ids, eval_batch_size=preset.batch_size)  # shared by every run
        # the clean inputs of the layer-scope runs' blocks, one pass per batch for every layer, σ and the control;
        # one set per seed (its batch order), all of them within the default 2 GiB
        at = sorted({r[0] for r in runs if r[3] == "layer"})
        seeds = sorted({r[4] for r in runs if r[3] == "layer"})
        clean = {seed: recovery.CleanInputs.for_runs(
            model, at, train_ids=train.input_ids, eval_ids=ev.input_ids, steps=preset.recovery_steps,
            batch_size=preset.recovery_batch, eval_batch_size=preset.batch_size, seed=seed,
            max_bytes=(2 << 30) // len(seeds)) for seed in seeds}
        for layer, s, k, sc, seed in runs:
            t0 = time.perf_counter()
            c = recovery.recovery_run(model, layer, train_ids=train.input_ids, eval_ids=ev.input_ids, sigma_rel=s,
                                      kind=k, scope=sc, lr=preset.recovery_lr, steps=preset.recovery_steps,
                                      eval_every=preset.recovery_eval_every, batch_size=preset.recovery_batch,
                                      eval_batch_size=preset.batch_size, seed=seed,
                                      stop_at_recovery=preset.recovery_stop and s > 0, base_nll=base,
                                      clean=clean.get(seed) if sc == "layer" else None)
            curves.append({**c.to_dict(), "seconds": time.perf_counter() - t0})
        return curves

    raw = cached_json("anatomy-recovery", _key(preset, "recovery", train=train.fingerprint(), eval=ev.fingerprint(),
                                               runs=runs), compute)
    return [recovery.RecoveryCurve(**{k: v for k, v in d.items() if k != "seconds"}) for d in raw]


def recovery_table(curves: list[recovery.RecoveryCurve]) -> pd.DataFrame:
    """One row per run: layer, σ, kind, scope, seed, recovered_at (None = censored), cap, auc, NLL drop."""
    return pd.DataFrame([{"layer": c.layer, "sigma_rel": c.sigma_rel, "kind": c.kind, "scope": c.scope,
                          "seed": c.seed, "recovered_at": c.recovered_at, "cap": c.cap, "auc": c.auc,
                          "excess_start": c.nll[0] - c.base_nll, "excess_end": c.nll[-1] - c.base_nll}
                         for c in curves])


def redundant_layers(profile: pd.DataFrame, *, op: str = "skip", protocol: str = "large", k: int = 3) -> list[int]:
    """The redundant tier of ``op`` on ``protocol``; if it is empty, the ``k`` layers with the smallest ΔNLL."""
    t = profile[(profile.op == op) & (profile.protocol == protocol)]
    red = sorted(t[t.tier == "redundant"].layer.tolist())
    return red if red else sorted(t.nsmallest(k, "dnll").layer.tolist())


def timings(*parts: dict | ablation.EvalResult | list) -> float:
    """Total recorded compute seconds of cached parts (what a cold build spends)."""
    total = 0.0
    for p in parts:
        if isinstance(p, ablation.EvalResult):
            total += float(p.meta.get("seconds", 0.0))
        elif isinstance(p, dict):
            total += sum(timings(v) for v in p.values() if isinstance(v, ablation.EvalResult))
            total += float(p.get("seconds", 0.0)) if isinstance(p.get("seconds", 0.0), float) else 0.0
    return total


def ppl(nll: np.ndarray) -> float:
    """Pooled perplexity exp(mean NLL) (spec 3.2)."""
    return float(np.exp(np.mean(nll)))


def replacement_table(res: ablation.EvalResult, preset: AnatomyPreset) -> pd.DataFrame:
    """Effects of the weight-generation interventions, with PPL (and its CI from the paired ΔNLL CI)."""
    t = ablation.effect_table(res, n_boot=preset.n_boot, seed=preset.seed).drop(columns=["op", "layer", "tier"])
    t.insert(0, "name", list(res.nll))
    base = float(np.mean(res.base))
    t["base_ppl"] = np.exp(base)
    t["ppl"], t["ppl_low"], t["ppl_high"] = (np.exp(base + t.dnll), np.exp(base + t.dnll_low),
                                             np.exp(base + t.dnll_high))
    return t


def per_document(res: ablation.EvalResult) -> pd.DataFrame:
    """Mean ΔNLL (intervention − clean) per document of every intervention of a grouped EvalResult:
    columns name, doc, dnll (the unit-level values the claim rules test)."""
    if res.groups is None:
        raise ValueError("per_document needs an EvalResult with document groups (budget.doc_sample)")
    g = np.asarray(res.groups)
    rows = []
    for name, v in res.nll.items():
        d = np.asarray(v) - np.asarray(res.base)
        for doc in np.unique(g):
            rows.append({"name": name, "doc": int(doc), "dnll": float(d[g == doc].mean())})
    return pd.DataFrame(rows)
