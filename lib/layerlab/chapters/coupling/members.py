"""Runners of the coupling chapter on the shared trained family (:func:`layerlab.training.family.get_family`):
coupling of every member (:func:`family_table`, Fig. 1a offline), over checkpoints
(:func:`checkpoint_table`, Fig. 1b), layer locality over training (:func:`locality_run`, Fig. 1c-e)
and the Q4_1 round-trip control (:func:`quantisation_control`). Spec ``coupling.md`` sections 4-5.

Members are small and run on the CPU, where they were trained. Their block Jacobians are cached once
per (run, step, prompts) and shared by every runner (:func:`member_jacobians`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from layerlab.chapters.coupling.depth import prompt_set
from layerlab.core import jacobians as jac
from layerlab.core.cache import cached_json, cached_tensors, fingerprint
from layerlab.metrics import coupling as cp
from layerlab.metrics import trajectories as tr
from layerlab.report.inference import mean_effect

# Cache keys: this module's source closure plus the model loader.
_SOURCES = (__name__, "layerlab.core.models")


def member_jacobians(m: Any, step: int | None, prompts: list[Tensor]) -> tuple[torch.nn.Module, Tensor]:
    """(model, last-token block Jacobians [P, L, d, d] float64) of family member ``m`` at checkpoint
    ``step`` (None: final weights), cached once per (run, step, prompts) and shared by
    :func:`family_table`, :func:`checkpoint_table`, :func:`locality_run` and
    :func:`quantisation_control` (a small member loads in milliseconds, so the model is always
    returned: the trajectories and the quantisation control need it)."""
    step = m.steps if step is None else step
    model = m.load(step=step)[0]
    key = {"member": m.name, "run": m.run_dir.parent.name, "step": step,
           "ids": [fingerprint(ids) for ids in prompts]}
    J = cached_tensors("coupling-jac", key, lambda: {"J": torch.stack(
        [jac.frozen_context_jacobians(model, ids) for ids in prompts])}, sources=_SOURCES)["J"]
    return model, J.double()


def _member_row(m: Any, step: int | None, prompts: list[Tensor], ks: tuple[int, ...]) -> dict[str, float]:
    model, J = member_jacobians(m, step, prompts)
    return member_coupling(model, prompts, ks, J)


def member_coupling(model: torch.nn.Module, prompts: list[Tensor], ks: tuple[int, ...],
                    jacobians: Tensor | None = None) -> dict[str, float]:
    """Prompt-mean scalar summaries, LSS and spacing of one (small) model; ``jacobians``
    [P, L, d, d] (from :func:`member_jacobians`) skips recomputing the block Jacobians. Every scalar
    ``C_*@K`` comes with its spectrum-matched null (``null:C_*@K``, the member's own spectra, so the
    chance level of its K, d and depth) and the excess over it (``excess:C_*@K``), which is what
    compares across widths and depths."""
    rows = []
    for i, ids in enumerate(prompts):
        J = jacobians[i] if jacobians is not None else jac.frozen_context_jacobians(model, ids).double()
        S = cp.svd(J)
        cm = cp.cross_coupling(J, None, ks, rows_svd=S)
        row = cp.scalar_summaries(cm)
        null = cp.scalar_summaries(cp.null_coupling(J, ks, seed=i, svd_J=S)["spectrum"])
        row.update({f"null:{c}": v for c, v in null.items()})  # the member's own spectrum-matched null
        row.update({f"excess:{c}": row[c] - v for c, v in null.items()})
        if J.shape[0] > 2:
            row["neighbour_ratio"] = cp.neighbour_ratio(cm.get(max(ks)))
        x = jac.block_trajectory(model, ids).double()
        row["lss_last"] = float(tr.line_shape_score(x[-1]))
        row["lss_median"] = float(torch.nanmedian(tr.line_shape_score(x[1:])))
        rows.append(row)
    return pd.DataFrame(rows).mean().to_dict()


def family_table(profile: str, n_prompts: int, max_tokens: int, ks: tuple[int, ...], *,
                 min_depth: int = 2, progress: bool = False) -> pd.DataFrame:
    """Coupling of every family member (final weights) with its hyperparameters and held-out NLL."""
    from layerlab.core.arch import n_params
    from layerlab.training.family import get_family

    fam = get_family(profile, progress=progress)
    prompts = prompt_set(fam.tokenizer, n_prompts, max_tokens)
    rows = []
    for m in fam:
        if m.depth < min_depth:
            continue
        key = {"member": m.name, "profile": profile, "run": str(m.run_dir.name if m.run_dir else ""),
               "n": n_prompts, "T": max_tokens, "ks": list(ks)}

        def compute(m=m) -> dict:
            row = _member_row(m, None, prompts, ks)
            model, _ = m.load()
            row["params"] = n_params(model)
            return row

        row = cached_json("coupling-member", key, compute, sources=_SOURCES)
        rows.append({"name": m.name, "depth": m.depth, "width": m.width, "lr": m.lr, "seed": m.seed,
                     "steps": m.steps, "heldout_nll": m.heldout_nll,
                     "final_train_loss": float(np.mean(m.train_loss[-8:])), **row})
        if progress:
            print(f"family {m.name}: C_l2@{max(ks)}={row[f'C_l2@{max(ks)}']:.3f}", flush=True)
    df = pd.DataFrame(rows)
    df["log10_params"] = np.log10(df["params"])
    return df


def checkpoint_table(profile: str, filters: dict, n_prompts: int, max_tokens: int, ks: tuple[int, ...],
                     *, progress: bool = False) -> pd.DataFrame:
    """Coupling, LSS and held-out NLL at every checkpoint of the members matching ``filters``."""
    from layerlab.training.family import get_family

    fam = get_family(profile, progress=progress)
    prompts = prompt_set(fam.tokenizer, n_prompts, max_tokens)
    rows = []
    for m in fam.select(**filters):
        val = {c["step"]: c["val_nll"] for c in m.curve}
        for step in m.checkpoints:
            key = {"member": m.name, "profile": profile, "step": step, "n": n_prompts, "T": max_tokens,
                   "ks": list(ks)}
            row = cached_json("coupling-ckpt", key,
                              lambda m=m, step=step: _member_row(m, step, prompts, ks),
                              sources=_SOURCES)
            rows.append({"name": m.name, "seed": m.seed, "step": step, "val_nll": val.get(step, float("nan")),
                         **row})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------- locality (Fig. 1c-e)
def member_matrices(model: torch.nn.Module | None, prompts: list[Tensor], k: int,
                    jacobians: Tensor | None = None) -> Tensor:
    """Per-prompt depth-coupling matrices m_K (norm, ujv) at the last token: [P, L, L] float64
    (``jacobians`` [P, L, d, d] from :func:`member_jacobians` skips recomputing them)."""
    mats = []
    for i, ids in enumerate(prompts):
        J = jacobians[i] if jacobians is not None else jac.frozen_context_jacobians(model, ids).double()
        mats.append(cp.cross_coupling(J, None, (k,)).get(k))
    return torch.stack(mats)


def locality_run(profile: str, filters: dict, n_prompts: int, max_tokens: int, k: int, *,
                 n_perm: int = 1000, seed: int = 0) -> tuple[pd.DataFrame, dict[tuple[int, int], Tensor]]:
    """Layer locality over training (spec 4.3 and the C7 test of section 5) for the family members
    matching ``filters``, at every checkpoint: :func:`layerlab.metrics.coupling.locality` of the prompt-mean
    matrix with a t-interval over prompts and a permutation-null p-value over layer order.

    Returns (rows: name, seed, step, val_nll, C_l2, locality, low, high, p_perm, neighbour_ratio,
    per_prompt (list of per-prompt locality values), null (the ``n_perm`` layer-order null draws);
    {(seed, step): prompt-mean m_K [L, L]} for the circle graphs)."""
    from layerlab.training.family import get_family

    fam = get_family(profile)
    prompts = prompt_set(fam.tokenizer, n_prompts, max_tokens)
    rows, mats = [], {}
    for m in fam.select(**filters):
        val = {c["step"]: c["val_nll"] for c in m.curve}
        for step in m.checkpoints:
            key = {"member": m.name, "run": m.run_dir.parent.name, "step": step, "n": n_prompts,
                   "T": max_tokens, "k": k}
            M = cached_tensors("coupling-locality", key,
                               lambda m=m, step=step: {"m": member_matrices(
                                   None, prompts, k, member_jacobians(m, step, prompts)[1])},
                               sources=_SOURCES)["m"]  # [P, L, L]
            mean = M.mean(0)
            obs = cp.locality(mean)
            per_prompt = np.array([cp.locality(x) for x in M])
            ci = mean_effect(per_prompt, unit="prompts", seed=seed)  # t-interval: few prompts, no bootstrap
            null = cp.locality_null(mean, n_perm, seed=seed)
            off = ~torch.eye(mean.shape[0], dtype=torch.bool)
            rows.append({"name": m.name, "seed": m.seed, "step": step, "val_nll": val.get(step, float("nan")),
                         "C_l2": float(1 - mean[off].mean()), "locality": obs, "low": ci.low, "high": ci.high,
                         "p_perm": float((1 + (null >= obs).sum()) / (1 + n_perm)),
                         "neighbour_ratio": cp.neighbour_ratio(mean), "per_prompt": per_prompt.tolist(),
                         "null": null.tolist()})
            mats[(m.seed, step)] = mean
    return pd.DataFrame(rows), mats


# ---------------------------------------------------------------------- Q4_1 round-trip control
def quantisation_control(profile: str, filters: dict, n_prompts: int, max_tokens: int, k: int, *,
                         seed: int = 0, min_depth: int = 2) -> pd.DataFrame:
    """Coupling change caused by the SmolLM2 GGUF's quantisation (spec 5, "Quantisation"): each
    family member matching ``filters`` (final weights) before and after :func:`layerlab.metrics.quant.gguf_roundtrip`,
    on the same prompts. Per member: C_l2@k of both, the paired difference with a t-interval over
    prompts, the relative weight change and the held-out NLL of both."""
    from layerlab.metrics.quant import gguf_roundtrip, relative_error
    from layerlab.training.family import get_family
    from layerlab.training.train import eval_nll

    fam = get_family(profile)
    prompts = prompt_set(fam.tokenizer, n_prompts, max_tokens)
    val = fam.val_windows()
    rows = []
    for m in fam.select(**filters):
        if m.depth < min_depth:  # one block has no off-diagonal pair
            continue
        key = {"member": m.name, "run": m.run_dir.parent.name, "n": n_prompts, "T": max_tokens, "k": k,
               "q": "q4_1+q8_0"}

        def compute(m=m) -> dict[str, Tensor]:
            model, J = member_jacobians(m, None, prompts)
            q = gguf_roundtrip(model)
            return {"orig": member_matrices(model, prompts, k, J), "quant": member_matrices(q, prompts, k),
                    "rel_err": torch.tensor([relative_error(model, q)], dtype=torch.float64),
                    "nll": torch.tensor([eval_nll(model, val), eval_nll(q, val)], dtype=torch.float64)}

        r = cached_tensors("coupling-quant", key, compute, sources=_SOURCES)
        L = r["orig"].shape[-1]
        off = ~torch.eye(L, dtype=torch.bool)
        c0 = (1 - r["orig"][:, off].mean(-1)).numpy()  # [P] per-prompt C_l2
        c1 = (1 - r["quant"][:, off].mean(-1)).numpy()
        ci = mean_effect(c1 - c0, unit="prompts", seed=seed)  # paired over the same prompts; t-interval
        rows.append({"name": m.name, "depth": m.depth, "width": m.width, "seed": m.seed,
                     "C_l2": float(c0.mean()), "C_l2_q4_1": float(c1.mean()), "diff": ci.estimate,
                     "diff_low": ci.low, "diff_high": ci.high, "rel_weight_change": float(r["rel_err"][0]),
                     "nll": float(r["nll"][0]), "nll_q4_1": float(r["nll"][1])})
    return pd.DataFrame(rows)
