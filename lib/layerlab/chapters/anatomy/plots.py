"""Figures of the anatomy chapter, each drawn from an :class:`AnatomyResult` (no computation here).

Wietrzykowski, *Anatomical Heterogeneity in Transformer Language Models* (arXiv:2603.19348); layout per
the project spec ``shared/papers/anatomy.md`` section 4 (4.1 delta correlations and R², 4.2 generation,
4.3 ablation profile, 4.4 recovery curves, 4.5 manipulation). :func:`use_style` is the book's style
(``layerlab.report.plots``).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter

from layerlab.chapters.anatomy.presets import PRIMARY_OPS, SECONDARY_OPS
from layerlab.chapters.anatomy.run import AnatomyResult
from layerlab.report.plots import FIGSIZE, layer_axis, use_style

__all__ = ["ablation_figure", "alpha_figure", "budget_figure", "delta_figure", "r2_figure", "recovery_figure",
           "replacement_figure", "structure_figure", "use_style"]


def delta_figure(r: AnatomyResult):
    """ρ_l per component vs depth (real: lines; random-init N1: grey), with the −0.5 null."""
    pairs, null_pairs = r.delta_pairs, r.delta_null_pairs
    fig, ax = plt.subplots(figsize=FIGSIZE["wide"])
    for comp, g in pairs.groupby("component", sort=False):
        ax.plot(g.pair, g.rho, marker=".", label=comp)
    for _, g in null_pairs.groupby("component", sort=False):
        ax.plot(g.pair, g.rho, color="0.7", lw=0.8, zorder=0)
    ax.axhline(-0.5, color="k", ls="--", lw=1, label="null −0.5")
    ax.set_xlabel(r"pair $l$: corr($\Delta_l$, $\Delta_{l+1}$), 0-based")
    ax.set_ylabel("delta correlation")
    ax.legend(ncol=4, fontsize="small", loc="upper right")
    return fig


def r2_figure(r: AnatomyResult):
    """Held-out R² per predictor variant, real vs N1 (random init) vs N2 (shuffled, 95% range)."""
    pred = r.predictability
    comps = list(dict.fromkeys(pred.component))
    variants = list(dict.fromkeys(pred.predictor))
    ncol = min(4, len(variants))
    nrow = -(-len(variants) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(FIGSIZE["wide"][0], 3.0 * nrow), sharey=False, squeeze=False)
    for ax in axes.ravel()[len(variants):]:
        ax.axis("off")
    axes = axes.ravel()[:len(variants)]
    for ax, v in zip(axes, variants):
        t = pred[pred.predictor == v].set_index("component").loc[comps]
        x = np.arange(len(comps))
        ax.bar(x - 0.25, t.r2, width=0.25, label="real")
        ax.bar(x, t.N1, width=0.25, label="N1 random init")
        ax.bar(x + 0.25, t.N2, width=0.25, label="N2 shuffled",
               yerr=[t.N2 - t.N2_low, t.N2_high - t.N2], capsize=2)
        ax.set_xticks(x, comps, rotation=90, fontsize="small")
        ax.set_title(v, fontsize="small")
        lo = max(float(np.nanmin(t[["r2", "N1", "N2_low"]].to_numpy())), -1.0)
        ax.set_ylim(min(lo, 0) - 0.05, 1.05)
    axes[0].set_ylabel(r"held-out $R^2$")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize="small")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def ablation_figure(r: AnatomyResult, protocol: str = "large"):
    """ΔNLL per layer with 95% CI band, one line per operator of ``protocol`` (large: the primary operators;
    small: the secondary ones; sentences: the preset's ``sentence_ops``), symlog y axis."""
    ops = {"large": PRIMARY_OPS, "small": SECONDARY_OPS, "sentences": r.preset.sentence_ops}[protocol]
    profile, n_layers = r.ablation, r.n_layers
    fig, ax = plt.subplots(figsize=FIGSIZE["wide"])
    for op in ops:
        t = profile[(profile.op == op) & (profile.protocol == protocol)].sort_values("layer")
        if t.empty:
            continue
        ax.plot(t.layer, t.dnll, marker=".", label=op)
        ax.fill_between(t.layer, t.dnll_low, t.dnll_high, alpha=0.25)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_yscale("symlog", linthresh=1e-2)
    ax.set_ylabel(r"$\Delta$NLL (nats/token)")
    layer_axis(ax, n_layers)
    ax.set_title(f"ablation profile, {protocol} protocol")
    ax.legend(ncol=3, fontsize="small")
    return fig


def replacement_figure(r: AnatomyResult):
    """PPL vs number of replaced deepest layers (teacher-forced and generated), log y."""
    rep = r.replacement
    fig, ax = plt.subplots(figsize=FIGSIZE["single"])
    for prefix, label in (("deepest", "teacher-forced"), ("gen-deepest", "generated")):
        t = rep[rep.name.str.match(rf"^{prefix}\d+$")].copy()
        if t.empty:
            continue
        t["k"] = t.name.str.replace(prefix, "").astype(int)
        t = t.sort_values("k")
        ax.errorbar(t.k, t.ppl, yerr=[t.ppl - t.ppl_low, t.ppl_high - t.ppl], marker="o", capsize=2, label=label)
    ax.axhline(float(rep.base_ppl.iloc[0]), color="k", ls="--", lw=1, label="baseline")
    ax.set_yscale("log")
    ax.set_xlabel("deepest layers replaced by P1 predictions")
    ax.set_ylabel("perplexity")
    ax.legend()
    return fig


def recovery_figure(r: AnatomyResult):
    """(a) Excess NLL (vs the clean baseline) during fine-tuning, one line per run, one colour per layer,
    the σ = 0 control dotted; (b) recovery steps per seed (dots, censored runs at the cap as open circles)
    and their mean against the layer's neighbour-average ΔNLL (the A9 scatter, spec section 4.4)."""
    curves = r.curves
    perturbed = sorted({c.layer for c in curves if c.sigma_rel > 0})
    cmap = plt.get_cmap("viridis")
    colour = {layer: cmap(i / max(1, len(perturbed) - 1)) for i, layer in enumerate(perturbed)}
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(FIGSIZE["wide"][0], FIGSIZE["wide"][1] + 0.8))
    controls = [c for c in curves if c.sigma_rel == 0]
    for c in curves:
        if c.sigma_rel > 0:
            ax.plot(c.steps, np.asarray(c.nll) - c.base_nll, color=colour[c.layer], lw=0.9)
    for i, c in enumerate(controls):
        ax.plot(c.steps, np.asarray(c.nll) - c.base_nll, ls=":", color="k", lw=1.2, marker=".",
                label=rf"control (L{c.layer}, $\sigma$ = 0)" if i == 0 else None)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_yscale("symlog", linthresh=1e-2)
    ax.set_xlabel("fine-tuning step")
    ax.set_ylabel("NLL − baseline (nats)")
    ax.set_title("(a) recovery curves", fontsize="medium")
    prof = r.ablation
    imp = prof[(prof.op == "neighbour_avg") & (prof.protocol == "large")].set_index("layer").dnll
    xs = []
    for layer in perturbed:
        runs = [c for c in curves if c.layer == layer and c.sigma_rel > 0]
        if layer not in imp.index or not runs:
            continue
        x = float(imp[layer])
        xs.append(x)
        for c in runs:
            bx.scatter(x, c.steps_or_cap, s=22, color=colour[layer], alpha=0.85, zorder=3,
                       facecolors="none" if c.recovered_at is None else colour[layer])
        bx.scatter(x, np.mean([c.steps_or_cap for c in runs]), marker="_", s=250, color="k", lw=1.5, zorder=4)
    for cap in {c.cap for c in curves}:
        bx.axhline(cap, color="0.6", ls="--", lw=0.8)
    bx.set_xscale("symlog", linthresh=1e-2)
    if xs and min(xs) > 0:
        bx.set_xlim(min(xs) / 1.6, max(xs) * 1.6)
    bx.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    bx.set_xlabel(r"neighbour-average $\Delta$NLL of the layer (nats)")
    bx.set_ylabel("steps to recover (cap if censored)")
    bx.set_title("(b) steps vs importance (bar: mean over seeds)", fontsize="medium")
    handles = [plt.Line2D([], [], color=colour[x], lw=2, label=f"L{x}") for x in perturbed]
    handles += ax.get_legend_handles_labels()[0]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 10), fontsize="small", frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def alpha_figure(r: AnatomyResult, target: str = "redundant"):
    """ΔPPL% vs α for weight scaling (all matrices and residual writers only) on one target."""
    manip = r.manipulation
    fig, ax = plt.subplots(figsize=FIGSIZE["single"])
    for suffix, label in (("", "all matrices"), ("-writers", "o/down only")):
        t = manip[(manip.target == target) & manip.config.str.match(rf"^scale[\d.]+{suffix}$")].copy()
        if t.empty:
            continue
        t["alpha"] = t.config.str.replace("scale", "").str.replace("-writers", "").astype(float)
        t = t.sort_values("alpha")
        ax.errorbar(t.alpha, t.dppl_pct, yerr=[t.dppl_pct - t.dppl_low, t.dppl_high - t.dppl_pct], marker="o",
                    capsize=2, label=label)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_yscale("symlog", linthresh=1)
    ax.set_xlabel(r"$\alpha$")
    ax.set_ylabel(r"$\Delta$PPL (%)")
    ax.set_title(f"scaling the {target} layers")
    ax.legend()
    return fig


def budget_figure(r: AnatomyResult):
    """Held-out tokens spent per layer by the adaptive budget (one bar group per operator), with the
    documents behind each interval on the right axis."""
    prof = r.ablation[r.ablation.protocol.isin(("large", "small"))]
    ops = list(dict.fromkeys(prof.op))
    fig, ax = plt.subplots(figsize=FIGSIZE["wide"])
    width = 0.8 / max(len(ops), 1)
    for i, op in enumerate(ops):
        t = prof[prof.op == op].sort_values("layer")
        ax.bar(t.layer + (i - (len(ops) - 1) / 2) * width, t.n_tokens, width=width, label=op)
    ax.set_yscale("log")
    ax.set_ylabel("held-out tokens scored")
    layer_axis(ax, r.n_layers)
    ax2 = ax.twinx()
    big = prof[prof.protocol == "large"].groupby("layer").n_docs.max()
    ax2.plot(big.index, big.to_numpy(), "k.", label="documents (primary operators)")
    ax2.set_ylabel("documents")
    ax2.set_ylim(0, max(float(big.max()) * 1.1, 1))
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, ncol=3, fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.18))
    fig.tight_layout()
    return fig


def structure_figure(r: AnatomyResult):
    """Per-layer weight statistics (Frobenius norm, stable rank, effective rank, cosine with the next
    layer), one line per component for the trained model, the random-init null N1 dashed grey."""
    stats = (("frobenius", r"$\|W\|_F$"), ("stable_rank", r"stable rank $\|W\|_F^2/\|W\|_2^2$"),
             ("effective_rank", "effective rank"), ("cos_next", r"cos($W_l$, $W_{l+1}$)"))
    fig, axes = plt.subplots(2, 2, figsize=(FIGSIZE["wide"][0], 6.0), squeeze=False)
    for ax, (col, label) in zip(axes.ravel(), stats):
        for comp, g in r.structure.groupby("component", sort=False):
            if "norm" not in comp:  # the seven matrices (norm vectors have rank 1)
                ax.plot(g.layer, g[col], marker=".", lw=1, label=comp)
        for comp, g in r.structure_null.groupby("component", sort=False):
            if "norm" in comp:
                continue
            ax.plot(g.layer, g[col], color="0.6", ls="--", lw=0.8, zorder=0)
        ax.set_ylabel(label)
        ax.set_xlabel("layer (0-based)")
    axes[0, 0].legend(ncol=2, fontsize="small")
    fig.tight_layout()
    return fig
