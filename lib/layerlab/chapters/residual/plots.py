"""Chapter 1, "Reading the residual stream": the figures, each from a :class:`ResidualResult`.

``fig_lens``: logit-lens loss by depth, recompute lens (nostalgebraist 2020) and frozen lens
(Kamigaito et al. 2025, Eq. 1), trained vs random init; ``fig_norms``: the residual norm by depth and
each block's relative update. :func:`use_style` is the book's style (``layerlab.report.plots``).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from layerlab.chapters.residual.run import ResidualResult
from layerlab.report.plots import FIGSIZE, ci_band, layer_axis, use_style

__all__ = ["fig_lens", "fig_norms", "use_style"]


def fig_lens(r: ResidualResult) -> Figure:
    """Mean lens NLL at every depth (log scale), both lenses, trained (solid) and random init (dotted),
    with 95% CI bands over windows, the uniform loss ln V and the model's own loss."""
    fig, ax = plt.subplots(figsize=FIGSIZE["wide"])
    for (label, c), ls in zip([("trained", r.lens_curve), ("random init", r.lens_curve_random)], ["-", ":"]):
        for variant in ("recompute", "frozen"):
            d = c[c.variant == variant]
            ci_band(ax, d.depth, d.nll, d.low, d.high, label=f"{label}, {variant} lens", linestyle=ls)
    ax.axhline(math.log(r.vocab), color="grey", lw=0.8, ls="--", label=r"uniform ($\ln V$)")
    ax.axhline(r.nll.estimate, color="black", lw=0.8, label="model loss")
    layer_axis(ax, r.n_layers + 1, label="depth k (0 = embedding, k = output of block k-1)")
    ax.set_yscale("log")
    ax.set_ylabel("lens NLL (nats/token, log scale)")
    ax.set_title("Logit-lens loss by depth")
    ax.legend(fontsize="small", ncol=2)
    return fig


def fig_norms(r: ResidualResult) -> Figure:
    """Left: mean (95% CI band) and median residual norm by depth; right: each block's update relative
    to the residual it receives (95% CI band); trained (solid) and random init (dotted), log scales."""
    fig, axes = plt.subplots(1, 2, figsize=FIGSIZE["wide"])
    for label, c, ls in (("trained", r.norm_curve, "-"), ("random init", r.norm_curve_random, ":")):
        line = ci_band(axes[0], c.depth, c.norm, c.norm_low, c.norm_high, label=f"{label} (mean)", linestyle=ls)
        axes[0].plot(c.depth, c.norm_median, linestyle=ls, color=line.get_color(), alpha=0.5, lw=2.5,
                     label=f"{label} (median)")
        u = c.dropna()
        ci_band(axes[1], u.depth, u.update_ratio, u.update_low, u.update_high, label=label, linestyle=ls)
    axes[0].set_yscale("log")
    axes[0].set_ylabel(r"$\|h_k\|_2$")
    axes[0].set_title("Residual norm by depth")
    layer_axis(axes[0], r.n_layers + 1, label="depth k")
    axes[1].set_yscale("log")
    axes[1].set_ylabel(r"$\|h_{k+1} - h_k\| \,/\, \|h_k\|$")
    axes[1].set_title("Relative size of block k's update")
    layer_axis(axes[1], r.n_layers, label="block k")
    axes[0].legend()
    return fig
