"""Member features and per-task checks of the diversity chapter (Kamigaito et al. 2025,
arXiv:2505.24009, Eq. 1 and Theorem 1; spec ``shared/papers/diversity.md`` sections 3.1-3.3): prompts,
cached member features, accuracy with bootstrap CIs, the live Eq. 1 check and the fp64 identities.

The forward passes (member features) are cached with ``layerlab.core.cache.cached_tensors``, keyed by
the model's tag, the task, the prompts' token ids and the labels.
"""

from __future__ import annotations

import torch

from layerlab.chapters.diversity.presets import DiversityPreset
from layerlab.core.cache import cached_tensors, fingerprint
from layerlab.core.models import load_model
from layerlab.data import tasks as tk
from layerlab.metrics import diversity as dv
from layerlab.metrics import members as dm
from layerlab.report.stats import bootstrap_ci

# Cache keys: this module's source closure plus the model loader (models are named by tag in keys).
SOURCES = (__name__, "layerlab.core.models")


def load(preset: DiversityPreset, *, random_init: bool = False):
    """(model, tokenizer) of the preset (eval mode, eager attention)."""
    return load_model(preset.model, random_init=random_init, seed=preset.seed, dtype=preset.torch_dtype,
                      device=preset.device)


def model_tag(preset: DiversityPreset, *, random_init: bool = False) -> str:
    """Cache tag of the preset's model (name, dtype, seed, init); the loader's code is in every key."""
    init = "random-init" if random_init else "pretrained"
    return f"{preset.model}|{preset.dtype}|seed{preset.seed}|{init}"


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


def prompt_ids(task: tk.Task, tokenizer, preset: DiversityPreset, *, split: str = "test", limit: int | None = None,
               verbalisers: bool = True) -> tuple[list[torch.Tensor], list[tk.Example]]:
    """The prompts' token ids and the examples of a task split (the first ``limit``)."""
    exs = (task.test if split == "test" else task.train)[:limit]
    seqs, _ = encode_prompts(task, tokenizer, exs, preset.shots, preset.seed, verbalisers)
    return seqs, exs


def task_features(
    model,
    tokenizer,
    task: tk.Task,
    preset: DiversityPreset,
    *,
    tag: str,
    split: str = "test",
    limit: int | None = None,
    verbalisers: bool = True,
) -> dm.MemberFeatures:
    """Member features of a task split, cached by model tag, task, prompts and preset."""
    seqs, exs = prompt_ids(task, tokenizer, preset, split=split, limit=limit, verbalisers=verbalisers)
    key = {
        "model": tag,
        "task": task.name,
        "split": split,
        "prompts": fingerprint([s.tolist() for s in seqs]),
        "labels": [e.label for e in exs],
    }

    def compute():
        return dm.collect(model, seqs, [e.label for e in exs]).to_tensors()

    t = cached_tensors("diversity-members", key, compute, sources=SOURCES)
    names = ["embed"] + [f"{k}{l}" for l in range(t["scales"].shape[1] - 1) for k in ("attn", "mlp")]
    return dm.MemberFeatures.from_tensors(t, names)


def accuracy_ci(readout: dv.MemberReadout, n_boot: int, seed: int) -> dict[str, float]:
    """Accuracy of the full-depth readout with a percentile bootstrap CI over examples."""
    c, b = readout.at_depth()
    correct = ((c.sum(1) + b).argmax(-1) == readout.labels).double().numpy()
    ci = bootstrap_ci(correct, n_boot=n_boot, seed=seed)
    return {"acc": ci.estimate, "acc_low": ci.low, "acc_high": ci.high}


def identity_mse(readout: dv.MemberReadout) -> dict[str, float]:
    """Max relative error of MSE = Bias - Div and CE = member CE - KL over examples and depths (fp64)."""
    e_mse = e_ce = 0.0
    for k in range(readout.n_layers + 1):
        d, ce, _ = dv.terms_at_depth(readout, k)
        e_mse = max(e_mse, float(((d.mse - (d.bias - d.div)).abs() / d.bias.clamp_min(1e-300)).max()))
        e_ce = max(e_ce, float(((ce.ce - (ce.member_ce - ce.kl)).abs() / ce.member_ce.clamp_min(1e-300)).max()))
    return {"mse": e_mse, "ce": e_ce}


def identity_error(model, tokenizer, task: tk.Task, preset: DiversityPreset, n: int = 2) -> float:
    """Live check of Eq. 1 in the run's own dtype: max |sum_i c_i + b - model logits| / max |logits|
    over the verbaliser logits of ``n`` prompts."""
    seqs, ids = encode_prompts(task, tokenizer, task.test[:n], preset.shots, preset.seed)
    f = dm.collect(model, seqs, [e.label for e in task.test[:n]])
    c, b = dm.apply_readout(f, dm.lens_readout(model, ids), dtype=f.g.dtype).at_depth()
    with torch.no_grad():
        ref = torch.stack([model(s[None]).logits[0, -1, ids] for s in seqs])
    return float((c.sum(1) + b - ref).abs().max() / ref.abs().max())
