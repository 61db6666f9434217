"""Presets, the Fig. 1a data file and the claim table of the coupling chapter.

Aubry, Meng, Sugolov, Papyan, *Transformer Block Coupling and its Correlation with Generalization in
LLMs*, ICLR 2025 (arXiv:2407.07810). Spec: ``coupling.md``. The notebook ``notebooks/coupling.ipynb``
picks a preset by profile name and calls the runners of :mod:`layerlab.chapters.coupling.runs` and
:mod:`layerlab.training.vit`; :func:`claims` turns their results into the chapter's claim table.

``fig1a_leaderboard.csv``: the Fig. 1a read-off values of the spec (coupling and Open LLM
Leaderboard v1 average, read by eye; low/high columns are the stated reading precision, or the range
of a cluster whose points cannot be separated) with a provenance column; the hub ids are our mapping
of the figure's labels [reconstructed]. Nine points have no read-off values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from layerlab.core.profiles import select
from layerlab.report.claims import Claim, verdict_from_ci
from layerlab.report.stats import CI, bootstrap_ci
from layerlab.training.vit import ViTConfig

FIG1A_CSV = Path(__file__).parent / "fig1a_leaderboard.csv"
PYTHIA_STEPS = (128, 256, 512, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 143000)  # Fig. 1b [paper]


@dataclass(frozen=True)
class CouplingPreset:
    """One profile of the coupling chapter (see the notebook for what each field drives)."""

    model: str  # main model: layerlab.core.models.load_model name or hub id
    n_prompts: int  # held-out prompts for the depth-wise analysis
    max_tokens: int  # prompt length cap
    ks: tuple[int, ...]  # K values (released: 10, 30, 50)
    init_seeds: tuple[int, ...]  # random-init twins
    n_init_prompts: int  # prompts per random-init twin
    n_null: int  # prompts with spectrum/rotation nulls and authors_compat endpoints
    panel_layers: tuple[int, ...]  # consecutive blocks of the |A| grid
    token_layers: tuple[int, int]  # layer pair of the token-wise analysis
    n_tokens: int  # token-wise grid size
    family_profile: str  # layerlab.training.family profile
    family_prompts: int
    family_max_tokens: int
    family_ks: tuple[int, ...]
    checkpoint_filter: dict = field(default_factory=dict)  # family members followed over training
    locality_filter: dict = field(default_factory=dict)  # members of the circle graphs / locality test (C7)
    quant_filter: dict = field(default_factory=dict)  # members of the Q4_1 round-trip control
    vit: tuple[ViTConfig, ...] = (ViTConfig(),)
    vit_images: int = 16
    vit_ks: tuple[int, ...] = (5, 10)
    speed_layers: tuple[int, ...] = (0,)
    fig1a_models: tuple[str, ...] = ()  # gpu only: the 28 models of Fig. 1a (hub ids)
    pythia: tuple[str, ...] = ()  # gpu only: Pythia runs followed over PYTHIA_STEPS
    pythia_steps: tuple[int, ...] = ()
    seed: int = 0


def fig1a_table() -> pd.DataFrame:
    """The Fig. 1a read-off values (28 rows; NaN where the spec gives no value)."""
    return pd.read_csv(FIG1A_CSV)


PRESETS: dict[str, CouplingPreset] = {
    "smoke": CouplingPreset(
        model="tiny-llama", n_prompts=3, max_tokens=24, ks=(4, 8, 16), init_seeds=(0, 1), n_init_prompts=2,
        n_null=2, panel_layers=(0, 1, 2, 3), token_layers=(1, 2), n_tokens=5, family_profile="smoke",
        family_prompts=2, family_max_tokens=24, family_ks=(4, 8), checkpoint_filter={"depth": 2, "width": 32},
        locality_filter={"depth": 3}, quant_filter={"depth": 3},
        vit=(ViTConfig(d_model=16, n_layers=3, steps=30, n_checkpoints=3),), vit_images=2, vit_ks=(4, 8)),
    "cpu": CouplingPreset(
        model="smollm2-135m", n_prompts=16, max_tokens=64, ks=(10, 30, 50), init_seeds=(0, 1, 2),
        n_init_prompts=2, n_null=4, panel_layers=tuple(range(8, 16)), token_layers=(12, 13), n_tokens=12,
        family_profile="cpu", family_prompts=4, family_max_tokens=64, family_ks=(5, 10, 20),
        checkpoint_filter={"depth": 4, "width": 64, "lr": 3e-3},
        locality_filter={"depth": 12, "width": 64, "lr": 3e-3}, quant_filter={"width": 64, "lr": 3e-3, "seed": 0},
        vit=(ViTConfig(), ViTConfig(dataset="fashion-mnist", patch=4, eval_images=2000)), vit_images=16),
    "gpu": CouplingPreset(
        model="meta-llama/Meta-Llama-3-8B", n_prompts=100, max_tokens=64, ks=(10, 30, 50), init_seeds=(0, 1, 2),
        n_init_prompts=16, n_null=16, panel_layers=tuple(range(9, 17)), token_layers=(12, 13), n_tokens=12,
        family_profile="gpu", family_prompts=16, family_max_tokens=64, family_ks=(10, 30, 50),
        checkpoint_filter={"depth": 8, "width": 256, "lr": 1e-3},
        locality_filter={"depth": 24, "width": 256, "lr": 1e-3}, quant_filter={"width": 256, "lr": 1e-3, "seed": 0},
        vit=(ViTConfig(), ViTConfig(dataset="fashion-mnist", patch=4, d_model=64, n_layers=6, steps=3000)),
        vit_images=64, fig1a_models=tuple(fig1a_table()["hub_id"]),
        pythia=("EleutherAI/pythia-6.9b", "EleutherAI/pythia-12b"), pythia_steps=PYTHIA_STEPS),
}


def preset(profile: str) -> CouplingPreset:
    """The preset of ``profile`` (raises a clear ValueError for unknown names)."""
    p = select(PRESETS, profile)
    if len(p.fig1a_models) not in (0, 28):
        raise ValueError(f"the gpu preset must list the 28 Fig. 1a models, got {len(p.fig1a_models)}")
    return p


def speed_side_by_side(model, ids, label: str, ref_layers: tuple[int, ...] = (0,)) -> dict:
    """The bench measurement, run in the chapter: frozen-context Jacobians of *all* blocks (one prefix
    pass shared by every block, as in a real run) and the authors' reference (d VJPs through the whole
    prompt) on ``ref_layers``, extrapolated to all blocks; timed side by side in one process and cached
    as JSON (a measurement with its thread count, not a recomputable result)."""
    import time

    import torch

    from layerlab.core import jacobians as jac
    from layerlab.core.arch import view
    from layerlab.core.cache import cached_json, fingerprint

    def compute() -> dict:
        L = view(model).n_layers
        t0 = time.perf_counter()
        A = jac.frozen_context_jacobians(model, ids)
        fast = time.perf_counter() - t0
        t0 = time.perf_counter()
        R = jac.reference_jacobians(model, ids, layers=list(ref_layers))
        ref = (time.perf_counter() - t0) / len(ref_layers)
        err = float((A[list(ref_layers)] - R).norm() / R.norm())
        return {"label": label, "tokens": int(ids.shape[1]), "blocks": L, "layers": list(ref_layers),
                "frozen_s_all_blocks": fast, "frozen_s_per_block": fast / L, "reference_s_per_block": ref,
                "reference_s_all_blocks_extrapolated": ref * L, "ratio": ref * L / fast, "rel_error": err,
                "threads": torch.get_num_threads()}

    key = {"label": label, "ids": fingerprint(ids), "layers": list(ref_layers)}
    return cached_json("coupling-speed-all", key, compute, sources=(__name__, "layerlab.core.models"))


# --------------------------------------------------------------------------------- claim table
def _mean_ci(x, seed: int = 0):
    x = np.asarray(x, float)
    x = x[np.isfinite(x)]
    return bootstrap_ci(x, seed=seed) if len(x) >= 2 else None


def claims(*, trained: pd.DataFrame, init: pd.DataFrame, k: int, tokens: dict, family_stats: pd.DataFrame,
           ckpt: pd.DataFrame, vit_rows: dict[str, list[dict]], speed: dict, coupling_col: str,
           model_note: str = "", locality: pd.DataFrame | None = None,
           quant: pd.DataFrame | None = None) -> list[Claim]:
    """The chapter's claim table from the experiment results (see the notebook for each input).

    trained/init: per-prompt summaries (:func:`layerlab.chapters.coupling.runs.summarise`) of the main model
    and its random-init twins; tokens: token-wise self-coupling per prompt {"self", "self_null",
    "self_init"} (trained, its spectrum-matched null, the random-init twin);
    family_stats: :func:`layerlab.chapters.coupling.runs.predictor_stats` of held-out NLL; ckpt: checkpoint
    table; vit_rows: {dataset: :func:`layerlab.training.vit.vit_coupling_curve`}; speed: :func:`speed_side_by_side`;
    locality: :func:`layerlab.chapters.coupling.runs.locality_run` rows; quant:
    :func:`layerlab.chapters.coupling.runs.quantisation_control` rows.
    """
    out: list[Claim] = []
    col = f"C_l2@{k}"
    nul = trained[f"spectrum:{col}"].dropna()
    diff = trained.loc[nul.index, col].to_numpy() - nul.to_numpy()
    ci = _mean_ci(diff)
    out.append(Claim("C1", f"depth-wise coupling of the trained model exceeds the spectrum-matched null ({col})",
                     "qualitative: coupled across depth", "paper", ci.estimate, ci.low, ci.high,
                     f"spectrum-matched Haar null: {nul.mean():.3f}", verdict_from_ci(ci.low, ci.high),
                     f"difference trained - null over prompts; {model_note}"))
    d = diff_ci(trained[col], init[col])
    out.append(Claim("C2", f"random-init twins are less coupled than the trained model ({col})",
                     "qualitative: no coupling untrained", "paper", d.estimate, d.low, d.high,
                     f"random init (seeds pooled): {init[col].mean():.3f}", verdict_from_ci(d.low, d.high)))
    ts, tn = np.asarray(tokens["self"], float), np.asarray(tokens["self_null"], float)
    ti = np.asarray(tokens["self_init"], float)
    if len(ts) >= 2 and len(ti) >= 2:
        ci = diff_ci(ts, ti)
        out.append(Claim("C3", "token-wise self-coupling (diagonal Jacobians over tokens) exceeds random init",
                         "qualitative: strong self-coupling; none untrained", "paper", ci.estimate, ci.low, ci.high,
                         f"random init: {ti.mean():.3f}; spectrum-matched null: {tn.mean():.3f}",
                         verdict_from_ci(ci.low, ci.high),
                         "shared weights make token Jacobians of one block similar even at random init"))
    fs = family_stats.set_index("predictor")
    cr = fs.loc[coupling_col]
    if not np.isfinite(cr["spearman"]):
        out.append(Claim("C4", "coupling correlates with performance (offline: held-out NLL)",
                         "R^2 = 0.80 vs leaderboard (28 LLMs)", "paper", None, None, None,
                         f"only {int(cr['n'])} family models", "inconclusive", "too few models for a CI"))
        return _tail(out, trained, init, k, ckpt, vit_rows, speed, coupling_col, locality, quant)
    out.append(Claim("C4", "coupling correlates with performance (offline: held-out NLL, lower is better)",
                     "R^2 = 0.80 vs leaderboard (28 LLMs)", "paper", cr["spearman"], cr["spearman_low"],
                     cr["spearman_high"], f"R^2 = {cr['R2']:.2f} [{cr['R2_low']:.2f}, {cr['R2_high']:.2f}]",
                     verdict_from_ci(cr["spearman_low"], cr["spearman_high"], "less"),
                     "Spearman of coupling vs held-out NLL across the trained family (negative = paper's direction)"))
    others = fs.drop(index=coupling_col)
    best = others["R2"].idxmax()
    margin = cr["R2"] - others.loc[best, "R2"]
    verdict = "supported" if cr["R2_low"] > others["R2_high"].max() else (
        "not supported" if cr["R2_high"] < others.loc[best, "R2"] else "inconclusive")
    out.append(Claim("C5", "coupling predicts performance better than parameter count, depth or width",
                     "R^2 values unknown", "paper", margin, None, None,
                     f"best competitor {best}: R^2 = {others.loc[best, 'R2']:.2f}", verdict,
                     "R^2(coupling) - R^2(best competitor); supported only if the CIs separate"))
    return _tail(out, trained, init, k, ckpt, vit_rows, speed, coupling_col, locality, quant)


def middle_step(steps, fraction: float = 4000 / 143000) -> int:
    """The checkpoint closest (in log steps) to ``fraction`` of training: the paper's Fig. 1d shows
    Pythia step 4000 of 143000."""
    steps = sorted(s for s in steps if s > 0)
    target = np.log(fraction * steps[-1])
    return min(steps, key=lambda s: abs(np.log(s) - target))


def _locality_claim(loc: pd.DataFrame) -> Claim:
    mid = middle_step(loc["step"].unique())
    rows = loc[loc["step"] == mid]
    vals = np.concatenate([np.asarray(v, float) for v in rows["per_prompt"]])
    groups = np.concatenate([[s] * len(v) for s, v in zip(rows["seed"], rows["per_prompt"])])
    ci = bootstrap_ci(vals, groups=groups if rows["seed"].nunique() >= 2 else None)
    ps = ", ".join(f"{p:.3f}" for p in rows["p_perm"])
    return Claim("C7", f"coupling is layer-local early in training (step {mid}): neighbours above distant pairs",
                 "qualitative (Pythia-12B step 4000 of 143000)", "paper", ci.estimate, ci.low, ci.high,
                 f"layer-order permutation null p = {ps} (per seed)", verdict_from_ci(ci.low, ci.high),
                 "mean coupling 1-m of |i-j|=1 pairs minus |i-j|>=2 pairs; CI resamples seeds (clusters)")


def _quant_claim(q: pd.DataFrame) -> Claim:
    d = q["diff"].to_numpy(float)
    if len(d) >= 2:
        ci = _mean_ci(d)
    else:  # one model: its CI over prompts
        ci = CI(float(d[0]), float(q["diff_low"].iloc[0]), float(q["diff_high"].iloc[0]))
    return Claim("Q1", "a Q4_1 round trip lowers coupling (bounds the effect on SmolLM2-Instruct)",
                 "unknown amount", "reconstructed", ci.estimate, ci.low, ci.high,
                 f"same models unquantised: C_l2 {q['C_l2'].mean():.3f}", verdict_from_ci(ci.low, ci.high, "less"),
                 f"C_l2(Q4_1) - C_l2 over {len(q)} family models; weights moved by "
                 f"{100 * q['rel_weight_change'].mean():.1f}% (relative norm)")


def _tail(out: list[Claim], trained: pd.DataFrame, init: pd.DataFrame, k: int, ckpt: pd.DataFrame,
          vit_rows: dict[str, list[dict]], speed: dict, coupling_col: str, locality: pd.DataFrame | None = None,
          quant: pd.DataFrame | None = None) -> list[Claim]:
    """Claims C6-C10, the quantisation control and the speed goal (see :func:`claims`)."""
    if len(ckpt):
        first, last = ckpt["step"].min(), ckpt["step"].max()
        g = ckpt.pivot_table(index="seed", columns="step", values=coupling_col)
        rise = (g[last] - g[first]).to_numpy()
        ci = _mean_ci(rise) if len(rise) >= 2 else None
        if ci is not None:
            out.append(Claim("C6", "coupling increases from initialisation through training",
                             "Pythia-6.9B 0.071 -> 0.170 (read by eye)", "paper", ci.estimate, ci.low, ci.high,
                             f"step {first} (random init) of the same runs", verdict_from_ci(ci.low, ci.high),
                             "final - initial coupling across seeds of one family configuration"))
    if locality is not None and len(locality):
        out.append(_locality_claim(locality))
    lss = diff_ci(init["lss_median"], trained["lss_median"])
    out.append(Claim("C8", "token trajectories are more linear (lower LSS) after training",
                     "values unknown", "paper", lss.estimate, lss.low, lss.high,
                     f"random-init median LSS {init['lss_median'].mean():.2f}", verdict_from_ci(lss.low, lss.high),
                     "LSS(random init) - LSS(trained), median over tokens excluding position 0"))
    ci = _mean_ci(trained["step_slope"])
    out.append(Claim("C9", "step norms grow exponentially with depth (log-linear slope > 0)",
                     "layer-wise exponential growth", "paper", ci.estimate, ci.low, ci.high,
                     f"random init slope {init['step_slope'].mean():.3f}", verdict_from_ci(ci.low, ci.high),
                     f"R^2 of the log-linear fit {trained['step_r2'].mean():.2f}; expodistance formula unknown"))
    from layerlab.report.stats import spearman

    for dataset, rows in vit_rows.items():
        v = pd.DataFrame(rows)
        vcol = [c for c in v.columns if c.startswith("last:C_l2@")][-1]
        if len(v) < 4:
            continue
        sp = spearman(v[vcol], v["test_acc"], method="bootstrap")
        ok = np.isfinite(sp.low) and np.isfinite(sp.high)
        out.append(Claim(f"C10 ({dataset})", "ViT coupling rises with test accuracy over checkpoints", "unknown",
                         "paper", sp.r, sp.low if ok else None, sp.high if ok else None,
                         f"{len(v)} checkpoints, last patch token",
                         verdict_from_ci(sp.low, sp.high) if ok else "inconclusive",
                         "Spearman over the checkpoints of one training run"))
    if quant is not None and len(quant):
        out.append(_quant_claim(quant))
    goal_setting = speed.get("label") == "smollm2-135m" and speed["tokens"] >= 64
    verdict = ("supported" if speed["ratio"] >= 20 else "not supported") if goal_setting else "inconclusive"
    out.append(Claim("S1", "frozen-context Jacobian is >= 20x faster than the authors' reference",
                     ">= 20x (issue goal: SmolLM2-135M, 64 tokens)", "reconstructed", speed["ratio"], None, None,
                     f"reference {speed['reference_s_per_block']:.1f} s/block", verdict,
                     f"{speed.get('label')}, {speed['tokens']}-token prompt, all blocks vs reference on blocks "
                     f"{speed['layers']} extrapolated; rel. error {speed['rel_error']:.1e}"))
    return out


def diff_ci(a: pd.Series, b: pd.Series, seed: int = 0):
    """Two-sample percentile-bootstrap CI of mean(a) - mean(b) (different prompts/models: unpaired)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    rng = np.random.default_rng(seed)
    reps = [rng.choice(a, len(a)).mean() - rng.choice(b, len(b)).mean() for _ in range(2000)]
    lo, hi = np.percentile(reps, [2.5, 97.5])
    return CI(float(a.mean() - b.mean()), float(lo), float(hi))
