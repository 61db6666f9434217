"""Figures of the diversity chapter (Kamigaito et al. 2025, arXiv:2505.24009): per-member bias and
diversity (Fig. 4), terms and accuracy as layers are added (Figs. 5-6), term-accuracy correlations
(Fig. 3), information terms along depth (Theorems 4-7), the T-LM sweep and performance vs depth across
the trained family. Each function takes a :class:`~layerlab.chapters.diversity.result.DiversityResult`
and returns a matplotlib Figure, already closed in pyplot: a notebook cell that returns it shows it once.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from layerlab.chapters.diversity.result import DiversityResult
from layerlab.report.plots import ci_band, use_style

__all__ = ["fig_correlations", "fig_family", "fig_info", "fig_lm", "fig_members", "fig_sweep", "use_style"]

HEAT_TERMS = ["mse", "bias", "div", "ce", "member_ce", "kl"]


def _band(ax, d: pd.DataFrame, label: str, *, positive: bool = False, **kw) -> None:
    """One term of a sweep (rows k, value, low, high) with its CI band; ``positive`` drops values <= 0
    (Div = 0 at k = 0, a single member), as a log axis needs."""
    if positive or ax.get_yscale() == "log":
        d = d[d.value > 0]
    ci_band(ax, d.k, d.value, d.low, d.high, label=label, marker=None, **kw)


def _grid(rows: int, cols: int, figsize: tuple[float, float], **kw):
    """A figure with a 2-D array of axes. pyplot makes it (which also sets up a notebook's inline
    display) and lets it go at once, so the inline backend does not show it a second time."""
    fig, axes = plt.subplots(rows, cols, figsize=figsize, squeeze=False, **kw)
    plt.close(fig)
    return fig, axes


def fig_members(r: DiversityResult) -> Figure:
    """Fig. 4: bias_i, div_i and the signed label-centred logit of every member at full depth."""
    fig, axes = _grid(3, len(r.tasks), (3.6 * len(r.tasks), 8), sharex=True)
    for j, (n, t) in enumerate(r.tasks.items()):
        m = t["members"]
        for i, term in enumerate(("bias_i", "div_i", "signed")):
            ax = axes[i, j]
            for kind, mk in (("attn", "o"), ("mlp", "s"), ("embed", "*")):
                d = m[(m.term == term) & (m.kind == kind)]
                ax.errorbar(d.layer, d.value, yerr=[d.value - d.low, d.high - d.value], fmt=mk, ms=3, label=kind,
                            lw=0.8)
            if term != "signed":
                ax.set_yscale("log")
            ax.set_title(f"{n} ({t['primary']}): {term}", fontsize=9)
        axes[-1, j].set_xlabel("layer (0-based; embedding at -1)")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def fig_sweep(r: DiversityResult) -> Figure:
    """Figs. 5-6: MSE, Bias, Div and Omega after k blocks, the M-normalised terms, and accuracy."""
    fig, axes = _grid(3, len(r.tasks), (3.6 * len(r.tasks), 8.5), sharex=True)
    for j, (n, t) in enumerate(r.tasks.items()):
        sw = t["sweep"]
        for term in ("mse", "bias", "div", "omega"):
            _band(axes[0, j], sw[sw.term == term], term, positive=True)
        axes[0, j].set_yscale("log")
        axes[0, j].set_title(f"{n}: terms (scaled f = M c + b)", fontsize=9)
        for term in ("bias_per_m", "div_per_m"):
            _band(axes[1, j], sw[sw.term == term], term, positive=True)
        axes[1, j].set_yscale("log")
        axes[1, j].set_title("M-normalised", fontsize=9)
        _band(axes[2, j], sw[sw.term == "acc"], "accuracy", color="k")
        axes[2, j].axhline(t["chance"], ls=":", c="grey")
        axes[2, j].set_xlabel("blocks k")
        axes[2, j].set_title("accuracy of the lens after k blocks", fontsize=9)
    axes[0, 0].legend(fontsize=8)
    axes[1, 0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def fig_correlations(r: DiversityResult) -> Figure:
    """Fig. 3: Spearman r of each term with accuracy over depths, and the partial r given depth."""
    corr = r.correlations()
    fig, axes = _grid(1, 2, (9, 3.4))
    for ax, col, title in ((axes[0, 0], "spearman", "Spearman r with accuracy"),
                           (axes[0, 1], "partial_k", "partial r given depth")):
        h = corr.pivot(index="term", columns="task", values=col).reindex(HEAT_TERMS)
        im = ax.imshow(h.to_numpy(dtype=float), vmin=-1, vmax=1, cmap="RdBu_r")
        ax.grid(False)
        ax.set_xticks(range(h.shape[1]), h.columns)
        ax.set_yticks(range(h.shape[0]), h.index)
        ax.set_title(title, fontsize=9)
        for (a, b), v in np.ndenumerate(h.to_numpy(dtype=float)):
            ax.text(b, a, f"{v:.2f}", ha="center", va="center", fontsize=7)
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8)
    return fig


def fig_info(r: DiversityResult) -> Figure:
    """Theorems 4-7: I(S_k;Y) with its permutation floor, and the cumulative chain-rule terms."""
    fig, axes = _grid(2, len(r.tasks), (3.6 * len(r.tasks), 6), sharex=True)
    for j, (n, t) in enumerate(r.tasks.items()):
        info = t["info"]
        ax = axes[0, j]
        ci_band(ax, info.k, info["info"], info.info_low, info.info_high, label="I(S_k;Y)", color="k", marker=None)
        ax.plot(info.k, info.null_floor, c="grey", ls=":", label="permutation floor")
        ax.set_title(f"{n}: I(S_k;Y) [bits]", fontsize=9)
        ax = axes[1, j]
        for col in ("relevancy", "redundancy", "cond_redundancy"):
            ax.plot(info.k, info[col], label=col)
        ax.set_xlabel("blocks k")
        ax.set_title("cumulative chain-rule terms [bits]", fontsize=9)
    axes[0, 0].legend(fontsize=8)
    axes[1, 0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def fig_lm(r: DiversityResult) -> Figure:
    """T-LM: the MSE form over the vocabulary, CE = member CE - KL, and top-1 accuracy after k blocks."""
    s = r.lm["sweep"]
    fig, axes = _grid(1, 3, (11, 3.2))
    axes = axes[0]
    for term in ("mse", "bias", "div"):
        _band(axes[0], s[s.term == term], term, positive=True)
    axes[0].set_yscale("log")
    axes[0].set_title("MSE form (V-dim one-hot)", fontsize=9)
    for term in ("ce", "member_ce", "kl"):
        _band(axes[1], s[s.term == term], term)
    axes[1].set_title("CE = member CE - KL [nats]", fontsize=9)
    _band(axes[2], s[s.term == "acc"], "top-1", color="k")
    axes[2].set_title("top-1 accuracy", fontsize=9)
    for ax in axes:
        ax.set_xlabel("blocks k")
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def fig_family(r: DiversityResult) -> Figure:
    """Head accuracy, Div/M and Bias/M vs depth across the trained family and its random-init copies;
    a figure that says so when the run has no depth family (the page's numbered figure stays valid)."""
    if r.family is None:
        fig, ax = _grid(1, 1, (6, 1.2))
        ax[0, 0].axis("off")
        ax[0, 0].text(0.5, 0.5, "no depth family for this run (none in the profile, or not trained and "
                      "train_family=False)", ha="center", va="center", fontsize=9)
        return fig
    fig, ax = _grid(1, 2, (8, 3))
    ax = ax[0]
    for init, g in r.family.groupby("init"):
        g = g.groupby("depth").mean(numeric_only=True).reset_index()
        ax[0].errorbar(g.depth, g.acc, yerr=[g.acc - g.acc_low, g.acc_high - g.acc], marker="o", label=init)
        ax[1].plot(g.depth, g["div"] / g["M"], marker="o", label=f"Div/M ({init})")
        ax[1].plot(g.depth, g["bias"] / g["M"], marker="s", ls="--", label=f"Bias/M ({init})")
    ax[0].set_xlabel("depth")
    ax[0].set_ylabel("head accuracy")
    ax[0].legend(fontsize=8)
    ax[1].set_xlabel("depth")
    ax[1].set_yscale("log")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    return fig
