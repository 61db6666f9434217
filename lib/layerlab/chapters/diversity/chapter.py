"""Presets and orchestration of the diversity chapter (Kamigaito et al. 2025, arXiv:2505.24009;
spec ``shared/papers/diversity.md``). The notebook calls :func:`run_task`, :func:`run_lm`,
:func:`run_random_init` and :func:`run_family`; each returns plain data (DataFrames / dicts) and caches
the expensive part (the forward passes: member features) with ``layerlab.core.cache``.

Profiles: ``smoke`` (tiny random Llama, seconds; used by the tests), ``cpu`` (the offline
SmolLM2-135M-Instruct on the four offline tasks, 2 cores), ``gpu`` (paper scale: Llama-3-8B on SST-2,
RTE, AG News and ARC from the hub; not runnable offline, but selectable and validated).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import torch

from layerlab.chapters.diversity import analysis as da
from layerlab.core.cache import cached_tensors, fingerprint
from layerlab.core.models import load_model
from layerlab.data import tasks as tk
from layerlab.metrics import diversity as dv
from layerlab.metrics import members as dm
from layerlab.report.stats import bootstrap_ci, paired_bootstrap_ci

# Cache keys: this module's source closure plus the model loader (models are named by tag in keys).
_SOURCES = (__name__, "layerlab.core.models")

"""Member features depend only on the model, the token ids and ``diversity_members.collect``: they are
cached under this version (bumped when ``collect`` changes) instead of the whole-library fingerprint."""


@dataclass(frozen=True)
class Preset:
    model: str  # layerlab model name or hub id
    tasks: tuple[str, ...]  # offline task names (tasks.TASK_NAMES) or hub task names (tasks.HUB_TASKS)
    n_train: int  # training examples per task (few-shot pool + linear head)
    n_test: int  # analysed examples per task
    shots: int  # in-context examples per prompt
    max_words: int  # clip long texts
    lm_windows: int  # T-LM: held-out windows
    lm_window: int  # T-LM: tokens per window
    lm_positions: int  # T-LM: scored positions per window
    null_examples: int  # random-init null: examples of the first task (train and test each)
    family_profile: str | None  # layerlab.training.family.get_family(profile); None skips the depth family
    family_task: str  # task read with a linear head on every family member
    family_examples: int  # train and test examples per family member
    n_boot: int
    dtype: str = "float32"
    seed: int = 0


PRESETS: dict[str, Preset] = {
    "smoke": Preset(
        model="tiny-llama",
        tasks=("sent", "topic"),
        n_train=24,
        n_test=24,
        shots=1,
        max_words=12,
        lm_windows=2,
        lm_window=32,
        lm_positions=4,
        null_examples=12,
        family_profile="smoke",
        family_task="topic",
        family_examples=16,
        n_boot=100,
    ),
    "cpu": Preset(
        model="smollm2-135m",
        tasks=("sent", "unc", "topic", "def"),
        n_train=64,
        n_test=128,
        shots=0,
        max_words=28,
        lm_windows=8,
        lm_window=96,
        lm_positions=8,
        null_examples=48,
        family_profile="cpu",
        family_task="topic",
        family_examples=64,
        n_boot=500,
    ),
    "gpu": Preset(
        model="meta-llama/Meta-Llama-3-8B",
        tasks=("sst2", "rte", "ag_news", "arc_easy"),
        n_train=256,
        n_test=1000,
        shots=4,
        max_words=200,
        lm_windows=64,
        lm_window=512,
        lm_positions=32,
        null_examples=256,
        family_profile="gpu",
        family_task="topic",
        family_examples=512,
        n_boot=2000,
        dtype="bfloat16",
    ),
}


def _dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}[name]


def load(preset: Preset, *, random_init: bool = False):
    """(model, tokenizer) of the preset (eval mode, eager attention)."""
    return load_model(preset.model, random_init=random_init, seed=preset.seed, dtype=_dtype(preset.dtype))


def model_tag(preset: Preset, *, random_init: bool = False) -> str:
    """Cache tag of the preset's model (name, dtype, seed, init); the loader's code is in every key."""
    init = "random-init" if random_init else "pretrained"
    return f"{preset.model}|{preset.dtype}|seed{preset.seed}|{init}"


# --------------------------------------------------------------------------- tasks
def encode_prompts(
    task: tk.Task, tokenizer, examples: list[tk.Example], shots: int, seed: int, verbalisers: bool = True
):
    """Token ids of each prompt (the answer's separator appended when verbalisers are bare words).
    ``verbalisers=False``: prompts for a linear-head readout only (no verbaliser tokens needed)."""
    ids, sep = tk.verbaliser_ids(tokenizer, task.classes) if verbalisers else ([], " ")
    pool = task.shots(shots, seed=seed)
    bos = getattr(tokenizer, "bos_token_id", None)
    seqs = []
    for e in examples:
        text = task.prompt(e, pool) + ("" if sep == " " else " ")
        x = tokenizer(text, add_special_tokens=False)["input_ids"]
        if bos is not None and tokenizer("a")["input_ids"][:1] == [bos]:
            x = [bos] + x
        seqs.append(torch.tensor(x, dtype=torch.long))
    return seqs, ids


def task_features(
    model,
    tokenizer,
    task: tk.Task,
    preset: Preset,
    *,
    tag: str,
    split: str = "test",
    limit: int | None = None,
    verbalisers: bool = True,
) -> dm.MemberFeatures:
    """Member features of a task split, cached by model tag, task, prompts and preset."""
    exs = (task.test if split == "test" else task.train)[:limit]
    seqs, _ = encode_prompts(task, tokenizer, exs, preset.shots, preset.seed, verbalisers)
    key = {
        "model": tag,
        "task": task.name,
        "split": split,
        "prompts": fingerprint([s.tolist() for s in seqs]),
        "labels": [e.label for e in exs],
    }

    def compute():
        return dm.collect(model, seqs, [e.label for e in exs]).to_tensors()

    t = cached_tensors("diversity-members", key, compute, sources=_SOURCES)
    names = ["embed"] + [f"{k}{l}" for l in range(t["scales"].shape[1] - 1) for k in ("attn", "mlp")]
    return dm.MemberFeatures.from_tensors(t, names)


def accuracy_ci(readout: dv.MemberReadout, n_boot: int, seed: int) -> dict[str, float]:
    c, b = readout.at_depth()
    correct = ((c.sum(1) + b).argmax(-1) == readout.labels).double().numpy()
    ci = bootstrap_ci(correct, n_boot=n_boot, seed=seed)
    return {"acc": ci.estimate, "acc_low": ci.low, "acc_high": ci.high}


def run_task(model, tokenizer, name: str, preset: Preset, *, tag: str) -> dict:
    """Everything the chapter shows for one task: accuracies (prompt and linear head), the truncation
    sweep, per-member terms, correlations, information terms, trade-off and shuffle null. The analysed
    readout is the prompt's when its accuracy CI clears chance, else the linear head's."""
    task = tk.load_task(
        name, n_train=preset.n_train, n_test=preset.n_test, seed=preset.seed, max_words=preset.max_words
    )
    f_test = task_features(model, tokenizer, task, preset, tag=tag)
    f_train = task_features(model, tokenizer, task, preset, tag=tag, split="train")
    ids, _ = tk.verbaliser_ids(tokenizer, task.classes)
    prompt = dm.apply_readout(f_test, dm.lens_readout(model, ids))
    head = dm.apply_readout(f_test, dm.fit_head(f_train, task.n_classes, seed=preset.seed))
    acc = {
        "prompt": accuracy_ci(prompt, preset.n_boot, preset.seed),
        "head": accuracy_ci(head, preset.n_boot, preset.seed),
    }
    chance = 1.0 / task.n_classes
    primary = "prompt" if acc["prompt"]["acc_low"] > chance else "head"
    ro = prompt if primary == "prompt" else head
    ro.names = f_test.names
    sw = da.sweep(ro, n_boot=preset.n_boot, seed=preset.seed)
    sw_layer = da.sweep(ro.to_layer_level(), n_boot=preset.n_boot, seed=preset.seed)
    sw_centred = da.sweep(ro, target_kind="centred", n_boot=preset.n_boot, seed=preset.seed)
    info = da.info_terms(ro, n_boot=min(preset.n_boot, 300), seed=preset.seed)
    return {
        "task": name,
        "n_classes": task.n_classes,
        "classes": task.classes,
        "chance": chance,
        "n_test": len(task.test),
        "n_train": len(task.train),
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
        "identity_error": identity_error(model, tokenizer, task, preset),
        "identity_mse": identity_mse(ro),
        "best_vs_final": best_vs_final(ro, preset.n_boot, preset.seed),
    }


def identity_mse(readout: dv.MemberReadout) -> dict[str, float]:
    """Max relative error of MSE = Bias - Div and CE = member CE - KL over examples and depths (fp64)."""
    e_mse = e_ce = 0.0
    for k in range(readout.n_layers + 1):
        d, ce, _ = dv.terms_at_depth(readout, k)
        e_mse = max(e_mse, float(((d.mse - (d.bias - d.div)).abs() / d.bias.clamp_min(1e-300)).max()))
        e_ce = max(e_ce, float(((ce.ce - (ce.member_ce - ce.kl)).abs() / ce.member_ce.clamp_min(1e-300)).max()))
    return {"mse": e_mse, "ce": e_ce}


def best_vs_final(readout: dv.MemberReadout, n_boot: int, seed: int) -> dict[str, float]:
    """D10: accuracy at full depth minus the best truncation depth's accuracy, paired bootstrap CI."""
    correct = np.stack([da.per_example(readout, k)["acc"] for k in range(readout.n_layers + 1)], 1)  # [N, L+1]
    best = int(correct.mean(0).argmax())
    ci = paired_bootstrap_ci(correct[:, -1], correct[:, best], n_boot=n_boot, seed=seed)
    return {
        "best_k": best,
        "acc_best": float(correct[:, best].mean()),
        "acc_final": float(correct[:, -1].mean()),
        "diff": ci.estimate,
        "diff_low": ci.low,
        "diff_high": ci.high,
    }


def identity_error(model, tokenizer, task: tk.Task, preset: Preset, n: int = 2) -> float:
    """Live check of Eq. 1 in the run's own dtype: max |sum_i c_i + b - model logits| / max |logits|
    over the verbaliser logits of ``n`` prompts."""
    seqs, ids = encode_prompts(task, tokenizer, task.test[:n], preset.shots, preset.seed)
    f = dm.collect(model, seqs, [e.label for e in task.test[:n]])
    c, b = dm.apply_readout(f, dm.lens_readout(model, ids), dtype=f.g.dtype).at_depth()
    with torch.no_grad():
        ref = torch.stack([model(s[None]).logits[0, -1, ids] for s in seqs])
    return float((c.sum(1) + b - ref).abs().max() / ref.abs().max())


# --------------------------------------------------------------------------- language modelling
def run_lm(model, tokenizer, preset: Preset, *, tag: str, chunk: int = 8, n_depths: int = 5) -> dict:
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
    }


# --------------------------------------------------------------------------- nulls and the depth family
def run_random_init(preset: Preset) -> dict:
    """Random-init null: the same architecture with fresh weights, first task, linear head readout."""
    model, tok = load(preset, random_init=True)
    name = preset.tasks[0]
    task = tk.load_task(
        name, n_train=preset.n_train, n_test=preset.n_test, seed=preset.seed, max_words=preset.max_words
    )
    n = preset.null_examples
    tag = model_tag(preset, random_init=True)
    f_test = task_features(model, tok, task, preset, tag=tag, limit=n)
    f_train = task_features(model, tok, task, preset, tag=tag, split="train", limit=n)
    head = dm.apply_readout(f_test, dm.fit_head(f_train, task.n_classes, seed=preset.seed))
    head.names = f_test.names
    ex = da.per_example(head)
    return {
        "task": name,
        "n_test": len(ex["mse"]),
        "accuracy": accuracy_ci(head, preset.n_boot, preset.seed),
        "sweep": da.sweep(head, n_boot=preset.n_boot, seed=preset.seed),
        "shuffle": da.shuffle_null(head, seed=preset.seed),
    }


def run_family(preset: Preset, *, train_missing: bool = True) -> pd.DataFrame | None:
    """Performance vs depth across the depth-varied trained family (spec 3.7, meaning 3) and its
    random-init copies: linear-head accuracy, MSE, Bias, Div and CE on ``family_task`` at full depth.
    None when the family module is unavailable, the preset has no family, or (``train_missing=False``)
    some members are not trained yet."""
    if preset.family_profile is None:
        return None
    try:
        from layerlab.training.family import get_family
    except ImportError:
        return None
    try:
        fam = get_family(preset.family_profile, train_missing=train_missing)
    except FileNotFoundError:
        return None
    # the depth sweep: the (width, lr) group with the most distinct depths (matched tokens and seeds)
    groups: dict[tuple, set] = {}
    for m in fam:
        groups.setdefault((m.width, m.lr), set()).add(m.depth)
    width, lr = max(groups, key=lambda g: len(groups[g]))
    members = [m for m in fam if m.width == width and m.lr == lr]
    task = tk.load_task(
        preset.family_task,
        n_train=preset.family_examples,
        n_test=preset.family_examples,
        seed=preset.seed,
        max_words=preset.max_words,
    )
    rows = []
    for member in members:
        for random_init in (False, True):
            model, tok = member.load(random_init=random_init)
            init = "random" if random_init else "trained"
            tag = f"family|{preset.family_profile}|{member.name}|{init}|{fingerprint(member.curve)}"
            f_test = task_features(model, tok, task, preset, tag=tag, verbalisers=False)
            f_train = task_features(model, tok, task, preset, tag=tag, split="train", verbalisers=False)
            ro = dm.apply_readout(f_test, dm.fit_head(f_train, task.n_classes, seed=preset.seed))
            ex = da.per_example(ro)
            row = {
                "name": member.name,
                "depth": member.depth,
                "seed": member.seed,
                "init": "random" if random_init else "trained",
                "heldout_nll": getattr(member, "heldout_nll", float("nan")),
                "M": ro.raw.shape[1],
            }
            for term, x in ex.items():
                ci = bootstrap_ci(x, n_boot=preset.n_boot, seed=preset.seed)
                row[term], row[f"{term}_low"], row[f"{term}_high"] = ci
            rows.append(row)
    return pd.DataFrame(rows)


def describe(preset: Preset) -> dict:
    return asdict(preset)
