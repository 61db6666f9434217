"""The atlas's figures, each from an :class:`AtlasResult`: the heatmap (layers x lenses, every lens
rank-normalised over the layers, the raw numbers in ``result.table``) and the agreement matrix
(Spearman ρ between lenses, pairs that agree after Holm marked)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from layerlab.chapters.atlas.run import AtlasResult
from layerlab.report.plots import use_style

__all__ = ["fig_agreement", "fig_family", "fig_heatmap", "use_style"]

LABEL_COLOURS = {"learned: strengthened": "#2a7ab0", "learned: weakened": "#c0504d", "architectural": "#e69f00",
                 "undecided": "#9a9a9a"}


def fig_heatmap(r: AtlasResult) -> Figure:
    """Layers (columns, 0-based) x lenses (rows): each lens's rank over the layers, 0 (lowest) to 1 (highest);
    the tier of each layer on top."""
    w = r.wide()
    z = w.rank(pct=True).to_numpy().T  # [lenses, layers]
    fig, ax = plt.subplots(figsize=(7.2, 0.3 * w.shape[1] + 1.8))  # the text column is ~7.3 in wide
    cmap = plt.get_cmap("viridis").with_extremes(bad="#bdbdbd")  # undefined (NaN) cells grey, as the caption says
    im = ax.imshow(np.ma.masked_invalid(z), aspect="auto", cmap=cmap, vmin=0, vmax=1)
    ax.grid(False)  # the book's whitegrid style would draw white lines across the cells
    ax.set_yticks(range(w.shape[1]), w.columns, fontsize=9)
    # two-digit layer numbers overlap beyond ~20 columns in the text column's width: set them upright then
    ax.set_xticks(range(len(w)), [str(x) for x in w.index], fontsize=9 if len(w) <= 20 else 7.5,
                  rotation=0 if len(w) <= 20 else 90)
    ax.set_xlabel("layer (0-based)")
    tiers = r.tiers.set_index("layer").tier.reindex(w.index)
    top = ax.secondary_xaxis("top")
    top.set_xticks(range(len(w)), [str(t) for t in tiers], fontsize=9)
    top.set_xlabel("tier")
    fig.colorbar(im, ax=ax, label="rank over layers (per lens)")
    ax.set_title(f"Layer atlas of {r.numbers.get('model', r.preset.model)}", fontsize=10)
    fig.tight_layout()
    return fig


def fig_agreement(r: AtlasResult) -> Figure:
    """Spearman ρ between every pair of lenses over the layers; '*' marks pairs significant after Holm."""
    m = r.matrix()
    fig, ax = plt.subplots(figsize=(min(7.2, 0.36 * len(m) + 2.5), min(7.0, 0.36 * len(m) + 1.8)))
    im = ax.imshow(m.to_numpy(dtype=float), cmap="RdBu_r", vmin=-1, vmax=1)
    ax.grid(False)
    ax.set_xticks(range(len(m)), m.columns, rotation=90, fontsize=9)
    ax.set_yticks(range(len(m)), m.index, fontsize=9)
    pos = {n: i for i, n in enumerate(m.index)}
    for row in r.agreement.itertuples():
        if row.verdict != "no evidence":
            for i, j in ((pos[row.a], pos[row.b]), (pos[row.b], pos[row.a])):
                dark = abs(float(m.iat[i, j])) > 0.6  # white on the saturated cells, black elsewhere
                ax.text(j, i, "*", ha="center", va="center", fontsize=11, fontweight="bold",
                        color="white" if dark else "black")
    fig.colorbar(im, ax=ax, label="Spearman ρ over layers")
    fig.tight_layout()
    return fig


def fig_family(fa) -> Figure:
    """One point per lens pair: mean Spearman ρ over the random-init twins (x) and over the trained members
    (y), with the paired 95% interval of the difference as a vertical bar; colour: the pair's label."""
    p = fa.pairs[fa.pairs.n >= 2]
    fig, ax = plt.subplots(figsize=(5.6, 5.0))
    ax.plot([-1, 1], [-1, 1], color="0.6", lw=1, ls="--", zorder=0)
    for label, colour in LABEL_COLOURS.items():
        q = p[p.label == label]
        if q.empty:
            continue
        ax.errorbar(q.rho_init, q.rho_trained, yerr=[q["diff"] - q.low, q.high - q["diff"]], fmt="o", ms=5,
                    color=colour, ecolor=colour, elinewidth=0.8, alpha=0.9, label=f"{label} ({len(q)})")
    ax.set_xlim(-1.05, 1.05)
    ax.set_ylim(-1.05, 1.05)
    ax.set_xlabel(r"mean $\rho$ over layers, random-init twins", fontsize=10)
    ax.set_ylabel(r"mean $\rho$ over layers, trained members", fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=9, loc="lower right", frameon=False)
    else:
        ax.text(0, 0, "no lens pair is defined on two or more members", ha="center", va="center", fontsize=9)
    fig.tight_layout()
    return fig
