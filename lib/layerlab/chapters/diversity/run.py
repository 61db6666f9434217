"""The diversity chapter's run (Kamigaito et al. 2025, arXiv:2505.24009; spec
``shared/papers/diversity.md``): per task the accuracies, the truncation sweeps (Figs. 5-6), the members
(Fig. 4), the correlations (Fig. 3), the information terms (Theorems 4-7) and the Sec. 5.4 checks; the
T-LM sweep over the full vocabulary; the random-init null; performance vs depth across the trained
depth family (spec 3.7, meaning 3). :func:`run` collects them into one :class:`DiversityResult`.

The forward passes (member features) are cached with ``layerlab.core.cache.cached_tensors``; the whole
result is cached too (``diversity-result``) when the depth family may be trained on demand.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

import layerlab.chapters.diversity.analysis as da
import layerlab.chapters.diversity.evidence as ev
import layerlab.chapters.diversity.features as ft
from layerlab.chapters.diversity.presets import DiversityPreset
from layerlab.chapters.diversity.result import DiversityResult
from layerlab.core import hub
from layerlab.core.cache import cached, cached_tensors, fingerprint
from layerlab.core.protocol import provenance
from layerlab.data import tasks as tk
from layerlab.data.fetch import data_fingerprint
from layerlab.metrics import members as dm
from layerlab.report.stats import bootstrap_ci

# Cache keys: this module's source closure plus the model loader (models are named by tag in keys).
_SOURCES = (__name__, "layerlab.core.models")


def _load_task(name: str, preset: DiversityPreset, n: int | None = None) -> tk.Task:
    n_train = preset.n_train if n is None else n
    n_test = preset.n_test if n is None else n
    return tk.load_task(name, n_train=n_train, n_test=n_test, seed=preset.seed, max_words=preset.max_words)


# --------------------------------------------------------------------------- tasks
def run_task(model, tokenizer, name: str, preset: DiversityPreset, *, tag: str) -> dict:
    """Everything the chapter shows for one task: accuracies (prompt and linear head), the truncation
    sweep, per-member terms, correlations, information terms, trade-off and shuffle null. The analysed
    readout is the prompt's when its accuracy CI clears chance, else the linear head's."""
    task = _load_task(name, preset)
    f_test = ft.task_features(model, tokenizer, task, preset, tag=tag)
    f_train = ft.task_features(model, tokenizer, task, preset, tag=tag, split="train")
    ids, _ = tk.verbaliser_ids(tokenizer, task.classes)
    prompt = dm.apply_readout(f_test, dm.lens_readout(model, ids))
    head = dm.apply_readout(f_test, dm.fit_head(f_train, task.n_classes, seed=preset.seed))
    acc = {
        "prompt": ft.accuracy_ci(prompt, preset.n_boot, preset.seed),
        "head": ft.accuracy_ci(head, preset.n_boot, preset.seed),
    }
    chance = 1.0 / task.n_classes
    primary = "prompt" if acc["prompt"]["acc_low"] > chance else "head"
    ro = prompt if primary == "prompt" else head
    ro.names = f_test.names
    sw = da.sweep(ro, n_boot=preset.n_boot, seed=preset.seed)
    sw_layer = da.sweep(ro.to_layer_level(), n_boot=preset.n_boot, seed=preset.seed)
    sw_centred = da.sweep(ro, target_kind="centred", n_boot=preset.n_boot, seed=preset.seed)
    info = da.info_terms(ro, n_boot=min(preset.n_boot, 300), seed=preset.seed)
    prompts = [ft.prompt_ids(task, tokenizer, preset, split=s)[0] for s in ("test", "train")]
    # every claim's evidence at both readouts (the claim table requires them to agree)
    evidence = {name_: ev.claim_evidence(x, n_boot=preset.n_boot, n_boot_info=preset.n_boot, seed=preset.seed)
                for name_, x in (("prompt", prompt), ("head", head))}
    return {
        "task": name,
        "n_classes": task.n_classes,
        "classes": task.classes,
        "chance": chance,
        "n_test": len(task.test),
        "n_train": len(task.train),
        "tokens": fingerprint([[x.tolist() for x in seqs] for seqs in prompts]),
        "primary": primary,
        "accuracy": acc,
        "sweep": sw,
        "sweep_layer": sw_layer,
        "sweep_centred": sw_centred,
        "members": da.members_table(ro, n_boot=min(preset.n_boot, 300), seed=preset.seed),
        "correlations": da.correlations(sw, seed=preset.seed),
        "info": info,
        "gains": da.gain_violations(info, seed=preset.seed),
        "premise": da.pairwise_ci_premise(ro, seed=preset.seed),
        "tradeoff": da.tradeoff(ro, n_boot=preset.n_boot, seed=preset.seed),
        "shuffle": da.shuffle_null(ro, seed=preset.seed),
        "source": task.meta.get("source", ""),
        "example_prompt": task.prompt(task.test[0], task.shots(preset.shots, seed=preset.seed)),
        "identity_error": ft.identity_error(model, tokenizer, task, preset),
        "identity_mse": ft.identity_mse(ro),
        "evidence": evidence,
    }


# --------------------------------------------------------------------------- language modelling
def run_lm(model, tokenizer, preset: DiversityPreset, *, tag: str, chunk: int = 8, n_depths: int = 5) -> dict:
    """T-LM: next-token prediction on held-out windows, full vocabulary, streamed per chunk of positions
    (spec section 6): at about ``n_depths`` depths k (always including 0 and L) the MSE/Bias/Div
    (one-hot target over V) and CE = member CE - KL, with cluster-bootstrap CIs over documents."""
    from layerlab.data.corpora import token_windows

    win = token_windows(
        tokenizer,
        "test",
        window=preset.lm_window,
        seed=preset.seed,
        max_tokens=preset.lm_windows * (preset.lm_window - 1),
    )
    rng = np.random.default_rng(preset.seed)
    T = win.input_ids.shape[1]
    seqs, pos, labels, groups = [], [], [], []
    for j in range(len(win)):
        ids = win.input_ids[j]
        p = np.sort(rng.choice(np.arange(T // 4, T - 1), size=min(preset.lm_positions, T // 2), replace=False))
        seqs.append(ids)
        pos.append(p.tolist())
        labels += ids[p + 1].tolist()
        groups += [win.doc_ids[j]] * len(p)
    key = {"model": tag, "lm": win.fingerprint(), "positions": pos}
    t = cached_tensors(
        "diversity-members-lm", key, lambda: dm.collect(model, seqs, labels, pos).to_tensors(), sources=_SOURCES
    )
    feats = dm.MemberFeatures.from_tensors(t, [])
    lens = dm.lens_readout(model)
    L = feats.n_layers
    depths = sorted(set(range(0, L + 1, max(1, L // n_depths))) | {L})  # full-vocabulary terms are costly
    per_k: dict[int, dict[str, list]] = {}
    for ro in dm.readout_chunks(feats, lens, chunk):
        for k in depths:
            ex = da.per_example(ro, k)
            for term, x in ex.items():
                per_k.setdefault(k, {}).setdefault(term, []).append(x)
    rows = []
    for k, terms in per_k.items():
        for term, xs in terms.items():
            x = np.concatenate(xs)
            ci = bootstrap_ci(x, n_boot=preset.n_boot, seed=preset.seed, groups=groups)
            rows.append({"k": k, "M": 2 * k + 1, "term": term, "value": ci.estimate, "low": ci.low, "high": ci.high})
    return {
        "sweep": pd.DataFrame(rows),
        "n_positions": len(labels),
        "n_documents": len(set(groups)),
        "protocol": win.protocol,
        "tokens": fingerprint(key["lm"], pos),
    }


# --------------------------------------------------------------------------- nulls and the depth family
def run_random_init(preset: DiversityPreset) -> dict:
    """Random-init null: the same architecture with fresh weights, first task, linear head readout."""
    model, tok = ft.load(preset, random_init=True)
    name = preset.tasks[0]
    task = _load_task(name, preset)
    n = preset.null_examples
    tag = ft.model_tag(preset, random_init=True)
    f_test = ft.task_features(model, tok, task, preset, tag=tag, limit=n)
    f_train = ft.task_features(model, tok, task, preset, tag=tag, split="train", limit=n)
    head = dm.apply_readout(f_test, dm.fit_head(f_train, task.n_classes, seed=preset.seed))
    head.names = f_test.names
    ex = da.per_example(head)
    return {
        "task": name,
        "n_test": len(ex["mse"]),
        "accuracy": ft.accuracy_ci(head, preset.n_boot, preset.seed),
        "sweep": da.sweep(head, n_boot=preset.n_boot, seed=preset.seed),
        "shuffle": da.shuffle_null(head, seed=preset.seed),
    }


def run_family(preset: DiversityPreset, *, train_missing: bool = True) -> tuple[pd.DataFrame | None,
                                                                               pd.DataFrame | None]:
    """Performance vs depth across the depth-varied trained family (spec 3.7, meaning 3) and its
    random-init copies: linear-head accuracy, MSE, Bias, Div and CE on ``family_task`` at full depth;
    and the whole family's table (:func:`layerlab.training.regime.members_table`), from which the regime is
    read. (None, None) when the preset has no family or (``train_missing=False``) some members are not
    trained yet."""
    if preset.family_profile is None:
        return None, None
    from layerlab.training.family import get_family
    from layerlab.training.regime import depth_sweep, members_table

    try:
        fam = get_family(preset.family_profile, train_missing=train_missing)
    except FileNotFoundError:
        return None, None
    # the depth sweep, by the family-wide rule (the setting with the most depths; ties: most seeds)
    table = members_table(fam)  # the whole family: its regime is read from it
    sweep = depth_sweep(table)
    members = [m for m in fam if m.name in set(sweep["name"])]
    task = _load_task(preset.family_task, preset, preset.family_examples)
    rows = []
    for member in members:
        for random_init in (False, True):
            model, tok = member.load(random_init=random_init)
            init = "random" if random_init else "trained"
            tag = f"family|{preset.family_profile}|{member.name}|{init}|{fingerprint(member.curve)}"
            f_test = ft.task_features(model, tok, task, preset, tag=tag, verbalisers=False)
            f_train = ft.task_features(model, tok, task, preset, tag=tag, split="train", verbalisers=False)
            ro = dm.apply_readout(f_test, dm.fit_head(f_train, task.n_classes, seed=preset.seed))
            ex = da.per_example(ro)
            row = {
                "name": member.name,
                "depth": member.depth,
                "seed": member.seed,
                "init": init,
                "heldout_nll": getattr(member, "heldout_nll", float("nan")),
                "M": ro.raw.shape[1],
            }
            for term, x in ex.items():
                ci = bootstrap_ci(x, n_boot=preset.n_boot, seed=preset.seed)
                row[term], row[f"{term}_low"], row[f"{term}_high"] = ci
            rows.append(row)
    return pd.DataFrame(rows), table


# --------------------------------------------------------------------------- the chapter's run
def _compute(preset: DiversityPreset, train_family: bool) -> DiversityResult:
    model, tok = ft.load(preset)
    tag = ft.model_tag(preset)
    results = {name: run_task(model, tok, name, preset, tag=tag) for name in preset.tasks}
    null = run_random_init(preset)  # the notebook's order before the move (tasks, null, T-LM, family)
    lm = run_lm(model, tok, preset, tag=tag)
    family, members = run_family(preset, train_missing=train_family)
    tokens = fingerprint({n: r["tokens"] for n, r in results.items()}, lm["tokens"])
    return DiversityResult(
        tasks=results,
        headline=preset.tasks[0],
        lm=lm,
        random_init=null,
        family=family,
        family_members=members,
        provenance=provenance("diversity", preset, model=preset.model_label, tokens=tokens, seed=preset.seed),
    )


def run(preset: DiversityPreset, *, train_family: bool = True) -> DiversityResult:
    """The chapter's result for ``preset``. ``train_family=False`` uses the depth family only if it is
    already trained; that result depends on the family's state, so it is not cached as a whole. A hub
    model's hub cache is deleted afterwards (:func:`layerlab.core.hub.release`)."""
    with hub.release(preset.model):
        if not train_family:
            return _compute(preset, train_family)
        key = {"preset": dataclasses.asdict(preset), "data": data_fingerprint()}  # code: the source key
        return cached("diversity-result", key, lambda: _compute(preset, train_family), sources=_SOURCES)
