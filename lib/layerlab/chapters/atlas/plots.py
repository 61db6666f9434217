"""The atlas's figures, each from an :class:`AtlasResult`: the heatmap (layers x lenses, every lens
rank-normalised over the layers, the raw numbers in ``result.table``) and the agreement matrix
(Spearman ρ between lenses, pairs that agree after Holm marked)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from layerlab.chapters.atlas.run import AtlasResult
from layerlab.report.plots import use_style

__all__ = ["fig_agreement", "fig_heatmap", "use_style"]


def fig_heatmap(r: AtlasResult) -> Figure:
    """Layers (columns, 0-based) x lenses (rows): each lens's rank over the layers, 0 (lowest) to 1 (highest);
    the tier of each layer on top."""
    w = r.wide()
    z = w.rank(pct=True).to_numpy().T  # [lenses, layers]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.28 * len(w) + 3), 0.32 * w.shape[1] + 1.6))
    im = ax.imshow(np.ma.masked_invalid(z), aspect="auto", cmap="viridis", vmin=0, vmax=1)
    ax.set_yticks(range(w.shape[1]), w.columns, fontsize=8)
    ax.set_xticks(range(len(w)), [str(x) for x in w.index], fontsize=7)
    ax.set_xlabel("layer (0-based)")
    tiers = r.tiers.set_index("layer").tier.reindex(w.index)
    top = ax.secondary_xaxis("top")
    top.set_xticks(range(len(w)), [str(t) for t in tiers], fontsize=7)
    top.set_xlabel("tier")
    fig.colorbar(im, ax=ax, label="rank over layers (per lens)")
    ax.set_title(f"Layer atlas of {r.preset.model}", fontsize=10)
    fig.tight_layout()
    return fig


def fig_agreement(r: AtlasResult) -> Figure:
    """Spearman ρ between every pair of lenses over the layers; '*' marks pairs significant after Holm."""
    m = r.matrix()
    fig, ax = plt.subplots(figsize=(0.38 * len(m) + 2.5, 0.38 * len(m) + 1.5))
    im = ax.imshow(m.to_numpy(dtype=float), cmap="RdBu_r", vmin=-1, vmax=1)
    ax.set_xticks(range(len(m)), m.columns, rotation=90, fontsize=7)
    ax.set_yticks(range(len(m)), m.index, fontsize=7)
    pos = {n: i for i, n in enumerate(m.index)}
    for row in r.agreement.itertuples():
        if row.verdict != "no evidence":
            for i, j in ((pos[row.a], pos[row.b]), (pos[row.b], pos[row.a])):
                ax.text(j, i, "*", ha="center", va="center", fontsize=8)
    fig.colorbar(im, ax=ax, label="Spearman ρ over layers")
    fig.tight_layout()
    return fig
