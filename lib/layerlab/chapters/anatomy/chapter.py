"""The anatomy chapter: presets and thin orchestration of the four diagnostics, with caching.

Wietrzykowski, *Anatomical Heterogeneity in Transformer Language Models* (arXiv:2603.19348). The
metrics live in :mod:`layerlab.metrics.weights`, :mod:`layerlab.metrics.predictability`,
:mod:`layerlab.metrics.ablation`, :mod:`layerlab.metrics.recovery` and
:mod:`layerlab.metrics.manipulation`; this module only picks models, text and settings per profile,
runs them, caches heavy results (:mod:`layerlab.core.cache`) and turns them into claim rows
(:mod:`layerlab.chapters.anatomy.claims`). Growth Transformer Training lives in
:mod:`layerlab.training.growth`."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import torch

from layerlab.core.cache import cached_json
from layerlab.metrics import ablation, manipulation, predictability, recovery, weights


@dataclass(frozen=True)
class Preset:
    """Settings of one profile (token budgets are scored tokens; layers are 0-based)."""

    model: str
    null_seed: int = 1
    tiny_layers: int | None = None        # tiny-* models only: depth of the random model
    window: int = 256
    batch_size: int = 8
    ablation_tokens: int = 32_768         # skip + neighbour_avg (the primary operators)
    ablation_tokens_small: int = 4_096    # skip_attn, skip_mlp, mean (documented subset)
    calib_tokens: int = 4_096             # mean-ablation calibration (validation split)
    sentences: int = 10                   # the paper's 10-sentence protocol
    sentence_ops: tuple[str, ...] = ("skip", "neighbour_avg", "skip_attn", "skip_mlp", "mean")
    replacement_tokens: int = 4_096
    replacement_ks: tuple[int, ...] = (1, 2, 4, 9, 16)
    replacement_single: tuple[int, ...] = (3, 8, 11, 14, 17, 26)
    manip_tokens: int = 4_096
    alphas: tuple[float, ...] = (0.5, 0.7, 0.8, 0.9, 0.95, 1.05)
    writer_alphas: tuple[float, ...] = (0.9,)  # α values also run on the residual writers only
    manip_single: tuple[int, ...] = (11, 17)
    recovery_layers: tuple[int, ...] = (8, 11, 14, 17, 3, 25)
    recovery_control_layer: int = 11      # σ = 0 fine-tune control
    recovery_sigmas: tuple[float, ...] = (0.5,)
    recovery_kinds: tuple[str, ...] = ("additive",)
    recovery_scopes: tuple[str, ...] = ("layer",)
    recovery_seeds: tuple[int, ...] = (0,)
    recovery_steps: int = 20
    recovery_eval_every: int = 5
    recovery_lr: float = 1e-4
    recovery_batch: int = 2
    recovery_window: int = 128
    recovery_train_tokens: int = 8_192
    recovery_eval_tokens: int = 1_024
    n_boot: int = 2000
    n_shuffles: int = 50
    seed: int = 0


PRESETS: dict[str, Preset] = {
    "smoke": Preset(model="tiny-llama", tiny_layers=18, window=64, batch_size=8, ablation_tokens=512,
                    ablation_tokens_small=128, calib_tokens=128, sentences=2, replacement_tokens=128,
                    replacement_ks=(1, 9), replacement_single=(8,), manip_tokens=128, alphas=(0.5, 0.9),
                    manip_single=(11,), recovery_layers=(8, 11, 14, 17), recovery_steps=4, recovery_eval_every=2,
                    recovery_lr=1e-3,
                    recovery_window=32, recovery_train_tokens=256, recovery_eval_tokens=64, n_boot=200,
                    n_shuffles=5),
    # sized for ~15 min on 2 cores of the project machine (measured 2026-12-02: ~55 GFLOP/s in the forward;
    # 60 suffix sweeps over 4,080 tokens took 745 s). The >= 32k-token large protocol is one override away
    # (papermill -y '{"overrides": {"ablation_tokens": 32768}}': about 100 min more on such a machine).
    "cpu": Preset(model="smollm2-135m", ablation_tokens=2_040, ablation_tokens_small=508, calib_tokens=1_020,
                  sentence_ops=("skip", "neighbour_avg"), replacement_tokens=508,
                  replacement_ks=(1, 2, 4, 9, 16), replacement_single=(3, 11, 17, 26),
                  manip_tokens=508, alphas=(0.5, 0.9, 1.05), recovery_layers=(8, 11, 14, 17),
                  recovery_steps=10, recovery_eval_every=5, recovery_eval_tokens=508),
    "gpu": Preset(model="HuggingFaceTB/SmolLM2-135M", batch_size=32, ablation_tokens=1_048_576,
                  ablation_tokens_small=262_144, calib_tokens=65_536, replacement_tokens=131_072,
                  replacement_ks=tuple(range(1, 29)), replacement_single=tuple(range(1, 30)), manip_tokens=131_072,
                  writer_alphas=(0.5, 0.7, 0.8, 0.9, 0.95, 1.05),
                  recovery_layers=tuple(range(30)), recovery_sigmas=(0.1, 0.5, 1.0),
                  recovery_kinds=("additive", "multiplicative"), recovery_scopes=("layer", "all"),
                  recovery_seeds=(0, 1, 2), recovery_steps=200, recovery_eval_every=10, recovery_batch=8,
                  recovery_window=256, recovery_train_tokens=2_000_000, recovery_eval_tokens=16_384),
}

#: The operators run on the large protocol; the others run on the documented subset.
PRIMARY_OPS: tuple[str, ...] = ("skip", "neighbour_avg")
SECONDARY_OPS: tuple[str, ...] = ("skip_attn", "skip_mlp", "mean")


# ---------------------------------------------------------------- models and text
def load(preset: Preset, *, random_init: bool = False, seed: int = 0):
    """(model, tokenizer) for the preset; tiny-* models are float32 with ``tiny_layers`` blocks."""
    from layerlab.core.models import byte_tokenizer, load_model, tiny_model

    if preset.model.startswith("tiny-") and preset.tiny_layers:
        s = seed + (1000 if random_init else 0)
        return tiny_model(preset.model[5:], seed=s, dtype=torch.float32,
                          num_hidden_layers=preset.tiny_layers), byte_tokenizer()
    return load_model(preset.model, random_init=random_init, seed=seed)


def windows(preset: Preset, tokenizer, split: str, max_tokens: int, *, window: int | None = None, seed: int = 0):
    """Token windows of ``split`` (``layerlab.data.corpora.token_windows``) capped at ``max_tokens`` scored tokens."""
    from layerlab.data.corpora import token_windows

    return token_windows(tokenizer, split, window=window or preset.window, max_tokens=max_tokens, seed=seed)


def sentence_ids(preset: Preset, tokenizer, seed: int = 0) -> tuple[list[str], list[torch.Tensor]]:
    """The 10-sentence protocol: sentences drawn once with ``seed`` from held-out text, tokenised with BOS policy."""
    from layerlab.data.corpora import bos_policy, ten_sentences

    sents = ten_sentences(seed, n=preset.sentences)
    bos = bos_policy(tokenizer)
    ids = [torch.tensor(([bos] if bos is not None else []) + tokenizer(s, add_special_tokens=False).input_ids)
           for s in sents]
    return sents, ids


def _key(preset: Preset, part: str, **extra) -> dict:
    return {"preset": asdict(preset), "part": part, **extra}


# ---------------------------------------------------------------- finding 1: weights
def run_weights(preset: Preset, model, null_model) -> dict:
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
    if preset.model == "smollm2-135m":
        q = weights.gguf_error_table()
        out["quant"] = q
        out["quant_delta"] = weights.delta_energy_table(model, q)
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


# ---------------------------------------------------------------- finding 2: ablation
def run_ablation(preset: Preset, model, tokenizer) -> dict[str, ablation.EvalResult]:
    """AB1–AB4 sweeps: primary operators on the large protocol, all operators on the subset and on the
    10 sentences; prefix-cached; cached on disk. Returns {"large", "small", "sentences"} EvalResults."""
    calib = windows(preset, tokenizer, "validation", preset.calib_tokens)
    mc = ablation.mean_contributions(model, calib.input_ids, batch_size=preset.batch_size)
    out = {}
    large = windows(preset, tokenizer, "test", preset.ablation_tokens)
    small = windows(preset, tokenizer, "test", preset.ablation_tokens_small, seed=preset.seed + 1)
    _, sent = sentence_ids(preset, tokenizer, seed=preset.seed)
    jobs = {"large": (large.input_ids, PRIMARY_OPS, large.fingerprint()),
            "small": (small.input_ids, SECONDARY_OPS, small.fingerprint()),
            "sentences": (sent, tuple(preset.sentence_ops), [s.tolist() for s in sent])}
    for name, (ids, ops, fp) in jobs.items():
        def compute(ids=ids, ops=ops):
            t0 = time.perf_counter()
            res = ablation.evaluate_interventions(
                model, ids, ablation.sweep_interventions(model, ops, mean_contrib=mc),
                batch_size=preset.batch_size, geometry=True)
            res.meta["seconds"] = time.perf_counter() - t0
            return res.to_dict()
        out[name] = ablation.EvalResult.from_dict(
            cached_json("anatomy-ablation", _key(preset, name, text=fp, calib=calib.fingerprint()), compute))
    return out


def ablation_profile(results: dict[str, ablation.EvalResult], preset: Preset) -> pd.DataFrame:
    """Effect table (ΔNLL, ΔPPL%, CIs, tier) of every operator × layer × protocol."""
    frames = []
    for proto, res in results.items():
        t = ablation.effect_table(res, n_boot=preset.n_boot, seed=preset.seed)
        t["protocol"] = proto
        frames.append(t)
    return pd.concat(frames, ignore_index=True)


# ---------------------------------------------------------------- weight generation and manipulation
def run_replacement(preset: Preset, model, tokenizer) -> ablation.EvalResult:
    """Predicted-weight replacement (teacher and generated modes) and matched-norm random controls."""
    w = windows(preset, tokenizer, "test", preset.replacement_tokens, seed=preset.seed + 2)
    from layerlab.core import arch

    L = arch.view(model).n_layers
    ks = tuple(k for k in preset.replacement_ks if k < L)
    single = tuple(layer for layer in preset.replacement_single if 0 < layer < L)

    def compute():
        t0 = time.perf_counter()
        ivs = predictability.replacement_interventions(model, ks=ks, single=single)
        gen = predictability.replacement_interventions(model, ks=ks, mode="generated")
        gen = [ablation.Intervention("gen-" + iv.name, iv.start, iv.context) for iv in gen]
        res = ablation.evaluate_interventions(model, w.input_ids, ivs + gen, batch_size=preset.batch_size)
        res.meta["seconds"] = time.perf_counter() - t0
        return res.to_dict()

    return ablation.EvalResult.from_dict(cached_json("anatomy-replacement", _key(preset, "replacement",
                                                                                 text=w.fingerprint()), compute))


def manipulation_configs(preset: Preset) -> dict[str, dict]:
    """The five strategies (plus the α sweep, the writers-only variant and exact block scaling)."""
    cfg = {f"scale{a:g}": {"strategy": "scale", "alpha": a} for a in preset.alphas}
    cfg.update({f"scale{a:g}-writers": {"strategy": "scale", "alpha": a, "components": "writers"}
                for a in preset.writer_alphas})
    cfg.update({"scale_block0.9": {"strategy": "scale_block", "alpha": 0.9}, "zero": {"strategy": "zero"},
                "clone": {"strategy": "clone"}, "blend": {"strategy": "blend", "beta": 0.5},
                "predicted": {"strategy": "predicted"}})
    return cfg


def run_manipulation(preset: Preset, model, tokenizer, redundant: list[int]) -> ablation.EvalResult:
    """All manipulation configs on single layers, the redundant tier and all layers."""
    from layerlab.core import arch

    L = arch.view(model).n_layers
    targets = {f"L{layer}": [layer] for layer in preset.manip_single if layer < L}
    targets.update({"redundant": list(redundant), "all": list(range(L))})
    w = windows(preset, tokenizer, "test", preset.manip_tokens, seed=preset.seed + 3)

    def compute():
        t0 = time.perf_counter()
        ivs = manipulation.manipulation_interventions(model, targets, manipulation_configs(preset))
        res = ablation.evaluate_interventions(model, w.input_ids, ivs, batch_size=preset.batch_size)
        res.meta.update(seconds=time.perf_counter() - t0, targets=targets)
        return res.to_dict()

    return ablation.EvalResult.from_dict(cached_json(
        "anatomy-manipulation", _key(preset, "manipulation", text=w.fingerprint(), targets=targets), compute))


def manipulation_table(res: ablation.EvalResult, preset: Preset) -> pd.DataFrame:
    t = ablation.effect_table(res, n_boot=preset.n_boot, seed=preset.seed).drop(columns=["op", "layer", "tier"])
    names = list(res.nll)
    t.insert(0, "config", [n.split("|")[0] for n in names])
    t.insert(1, "target", [n.split("|")[1] for n in names])
    return t


# ---------------------------------------------------------------- finding 3: recovery
def run_recovery(preset: Preset, model, tokenizer) -> list[recovery.RecoveryCurve]:
    """Perturb-and-fine-tune runs on the preset's layers, plus the σ = 0 control; train split for
    fine-tuning, validation split for evaluation (document-disjoint from each other and from the test text)."""
    from layerlab.core import arch

    L = arch.view(model).n_layers
    train = windows(preset, tokenizer, "train", preset.recovery_train_tokens, window=preset.recovery_window)
    ev = windows(preset, tokenizer, "validation", preset.recovery_eval_tokens, window=preset.recovery_window)
    runs = [(layer, s, k, sc, seed) for layer in preset.recovery_layers if layer < L for s in preset.recovery_sigmas
            for k in preset.recovery_kinds for sc in preset.recovery_scopes for seed in preset.recovery_seeds]
    runs += [(preset.recovery_control_layer % L, 0.0, "additive", sc, seed) for sc in preset.recovery_scopes
             for seed in preset.recovery_seeds]

    def compute():
        curves = []
        for layer, s, k, sc, seed in runs:
            t0 = time.perf_counter()
            c = recovery.recovery_run(model, layer, train_ids=train.input_ids, eval_ids=ev.input_ids, sigma_rel=s,
                                      kind=k, scope=sc, lr=preset.recovery_lr, steps=preset.recovery_steps,
                                      eval_every=preset.recovery_eval_every, batch_size=preset.recovery_batch,
                                      eval_batch_size=preset.batch_size, seed=seed)
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


def replacement_table(res: ablation.EvalResult, preset: Preset) -> pd.DataFrame:
    """Effects of the weight-generation interventions, with PPL (and its CI from the paired ΔNLL CI)."""
    t = ablation.effect_table(res, n_boot=preset.n_boot, seed=preset.seed).drop(columns=["op", "layer", "tier"])
    t.insert(0, "name", list(res.nll))
    base = float(np.mean(res.base))
    t["base_ppl"] = np.exp(base)
    t["ppl"], t["ppl_low"], t["ppl_high"] = (np.exp(base + t.dnll), np.exp(base + t.dnll_low),
                                             np.exp(base + t.dnll_high))
    return t


def claim_rows(preset: Preset, w: dict, profile: pd.DataFrame, abl: dict, rep: pd.DataFrame,
               curves: list, manip: pd.DataFrame, n_layers: int) -> list:
    """All claim rows of the chapter (see :mod:`layerlab.chapters.anatomy.claims` for the decision rules)."""
    from layerlab.chapters.anatomy import claims as ac
    from layerlab.report.stats import bootstrap_ci

    sent = abl["sentences"]
    ci = bootstrap_ci(sent.base, n_boot=preset.n_boot, seed=preset.seed, groups=sent.groups)
    rows = ac.weight_claims(w) + ac.generation_claims(rep, n_layers)
    rows += ac.ablation_claims(profile, float(np.exp(ci.estimate)), (float(np.exp(ci.low)), float(np.exp(ci.high))),
                               n_layers)
    imp = profile[(profile.op == "neighbour_avg") & (profile.protocol == "large")].set_index("layer").dnll.to_dict()
    perturbed = [c for c in curves if c.sigma_rel > 0]
    if len({c.layer for c in perturbed}) >= 4:
        rows.append(ac.recovery_claim(recovery.recovery_vs_importance(perturbed, imp, seed=preset.seed),
                                      len({c.layer for c in perturbed}), "AUC"))
    rows += ac.manipulation_claim(manip)
    return rows
