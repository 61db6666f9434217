"""The coupling chapter's figures, each from a :class:`~layerlab.chapters.coupling.run.CouplingResult`.

``fig_depth_matrices`` (prompt-mean 1 - m_K, trained / random init / spectrum null), ``fig_panels``
(co-diagonalisation |U_j^T J_i V_j|), ``fig_tokens`` (token-wise grids), ``fig_trajectories`` (step
norms, top singular values, PCA of the demo prompt), ``fig_family`` (coupling and competitors vs
held-out NLL), ``fig_checkpoints``, ``fig_locality`` (circle graphs, Fig. 1c-e, and locality over
training), ``fig_vit`` and ``fig_pythia`` (gpu). Aubry et al., ICLR 2025.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure

from layerlab.chapters.coupling.run import CouplingResult
from layerlab.report.plots import ci_band, circle_graph, use_style

__all__ = ["fig_checkpoints", "fig_depth_matrices", "fig_family", "fig_locality", "fig_panels", "fig_pythia",
           "fig_tokens", "fig_trajectories", "fig_vit", "use_style"]


def fig_depth_matrices(r: CouplingResult) -> Figure:
    """Prompt-mean 1 - m_K(J_i, J_j) of the trained model, its first random-init twin and the
    spectrum-matched null, on one colour scale; the diagonal (1 by definition) is blanked."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    mats = {name: m.clone().fill_diagonal_(float("nan")) for name, m in r.depth_matrices.items()}
    vmax = max(float(np.nanmax(m.numpy())) for m in mats.values())
    for ax, (name, m) in zip(axes, mats.items()):
        im = ax.imshow(m.numpy(), vmin=0, vmax=vmax, cmap="viridis")
        ax.set_title(name)
        ax.grid(False)
        ax.set_xlabel("basis block j")
        ax.set_ylabel("diagonalised block i")
    fig.colorbar(im, ax=axes, shrink=0.8, label=f"1 - m$_{{{r.k}}}$ (norm)")
    return fig


def fig_panels(r: CouplingResult) -> Figure:
    """|U_j^T J_i V_j| (K x K) for consecutive blocks on the demo prompt, trained vs random init
    (colour scale compressed with power 0.35 to show the weak off-diagonal entries)."""
    layers = r.preset.panel_layers
    fig, axes = plt.subplots(1, 2, figsize=(12, 6))
    for ax, (name, A) in zip(axes, r.panels.items()):
        n = A.shape[0]
        grid = A.permute(0, 2, 1, 3).reshape(n * A.shape[2], n * A.shape[3])
        ax.imshow(grid.numpy(), cmap="magma", norm=PowerNorm(0.35, vmin=0, vmax=float(grid.max())))
        ax.set_title(f"{name}: |U_j^T J_i V_j|, blocks {layers[0]}-{layers[-1]}, K={A.shape[-1]}", fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.grid(False)
    return fig


def fig_tokens(r: CouplingResult) -> Figure:
    """Token-wise 1 - m_K grids of the first prompt: self-coupling within a block and across the layer
    pair, and context coupling with the output or the input token fixed (position 0 starred)."""
    grids = r.token_grids
    fig, axes = plt.subplots(1, len(grids), figsize=(16, 4))
    labels = [str(t) + ("*" if t == 0 else "") for t in r.token_positions]
    for ax, (name, m) in zip(axes, grids.items()):
        ax.imshow(m.numpy(), vmin=0, cmap="viridis")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("token")
        ax.set_ylabel("token")
        ax.grid(False)
        ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
    return fig


def fig_trajectories(r: CouplingResult) -> Figure:
    """Step norms and top singular values by block (one line per prompt, trained vs random init) and
    the 2-D PCA of every token's trajectory on the demo prompt."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for name, c in [("trained", "C0"), ("random init", "C3")]:
        for delta, s1 in zip(r.step_norms[name], r.top_sv[name]):
            axes[0].semilogy(delta.numpy(), color=c, alpha=0.3)
            axes[1].semilogy(s1.numpy(), color=c, alpha=0.3)
        axes[0].plot([], color=c, label=name)
    axes[0].set_xlabel("block")
    axes[0].set_ylabel("step norm ||x^l - x^(l-1)||")
    axes[0].legend()
    axes[1].set_xlabel("block")
    axes[1].set_ylabel("top singular value s_1(J^l)")
    for t in range(r.pca_coords.shape[0]):
        axes[2].plot(r.pca_coords[t, :, 0], r.pca_coords[t, :, 1], marker=".", ms=3, alpha=0.7)
    axes[2].set_title(f"PCA of token trajectories (demo prompt), {100 * float(r.pca_ratio.sum()):.0f}% var.")
    return fig


def fig_family(r: CouplingResult) -> Figure:
    """Held-out NLL of every family member against coupling and each competing predictor, with R^2
    and Spearman rho in the titles."""
    fig, axes = plt.subplots(1, len(r.predictors), figsize=(16, 3.6), sharey=True)
    stats = r.family_stats.set_index("predictor")
    for ax, p in zip(axes, r.predictors):
        ax.scatter(r.family[p], r.family["heldout_nll"], s=18)
        ax.set_xlabel(p)
        ax.set_title(f"R$^2$={stats.loc[p, 'R2']:.2f}, ρ={stats.loc[p, 'spearman']:.2f}")
    axes[0].set_ylabel("held-out NLL (nats)")
    return fig


def fig_checkpoints(r: CouplingResult) -> Figure:
    """Coupling and held-out NLL over the log-spaced checkpoints of the followed members (one line per seed)."""
    fig, ax = plt.subplots(1, 2, figsize=(12, 4))
    for s, g in r.checkpoints.groupby("seed"):
        g = g.sort_values("step")
        x = g["step"].clip(lower=0.5)
        ax[0].plot(x, g[r.coupling_col], marker="o", label=f"seed {s}")
        ax[1].plot(x, g["val_nll"], marker="o", label=f"seed {s}")
    for a, lab in zip(ax, [r.coupling_col, "held-out NLL (nats)"]):
        a.set_xscale("log")
        a.set_xlabel("training step (0 plotted at 0.5)")
        a.set_ylabel(lab)
    ax[0].legend()
    return fig


def fig_locality(r: CouplingResult) -> Figure:
    """Circle graphs of the first seed at the shown checkpoints (edge opacity: coupling, one scale for
    all panels) and the locality (neighbour - distant coupling, 95% CI band) over training per seed."""
    loc, mats, shown = r.locality, r.locality_mats, r.locality_shown
    seed0 = int(loc["seed"].min())
    vmax = max(float((1 - mats[(seed0, s)]).fill_diagonal_(0).max()) for s in shown)
    fig, axes = plt.subplots(1, len(shown) + 1, figsize=(4 * (len(shown) + 1), 4))
    for ax, s in zip(axes, shown):
        c = float(loc[(loc["seed"] == seed0) & (loc["step"] == s)]["C_l2"].iloc[0])
        circle_graph(ax, (1 - mats[(seed0, s)]).numpy(), vmax=vmax, title=f"step {s}: C_l2 {c:.3f}")
    for sd, g in loc.groupby("seed"):
        g = g.sort_values("step")
        ci_band(axes[-1], g["step"].clip(lower=0.5), g["locality"], g["low"], g["high"], label=f"seed {sd}")
    axes[-1].axhline(0, color="k", lw=0.8)
    axes[-1].set_xscale("log")
    axes[-1].set_xlabel("training step (0 plotted at 0.5)")
    axes[-1].set_ylabel("neighbour − distant coupling")
    axes[-1].legend()
    axes[-1].set_title(f"locality, {loc['name'].iloc[0].split('-s')[0]}")
    return fig


def fig_vit(r: CouplingResult) -> Figure:
    """ViT coupling at the last patch token and at CLS against test accuracy over checkpoints, per dataset."""
    import pandas as pd

    vk = max(r.preset.vit_ks)
    fig, axes = plt.subplots(1, len(r.vit_rows), figsize=(6 * len(r.vit_rows), 4), squeeze=False)
    for ax, (name, rows) in zip(axes[0], r.vit_rows.items()):
        vdf = pd.DataFrame(rows)
        ax.plot(vdf["test_acc"], vdf[f"last:C_l2@{vk}"], marker="o", label="last patch")
        ax.plot(vdf["test_acc"], vdf[f"cls:C_l2@{vk}"], marker="s", label="CLS")
        ax.set_title(name)
        ax.set_xlabel("test accuracy")
        ax.set_ylabel(f"C_l2@{vk}")
        ax.legend()
    return fig


def fig_pythia(r: CouplingResult) -> Figure | None:
    """Coupling and locality of Pythia over the Fig. 1b checkpoints (gpu profile; None elsewhere)."""
    if r.pythia is None:
        return None
    fig, ax = plt.subplots(1, 2, figsize=(12, 4))
    for name, g in r.pythia.groupby("model"):
        ax[0].plot(g["step"], g[f"C_l2@{r.k}"], marker="o", label=name)
        ax[1].plot(g["step"], g["locality"], marker="o", label=name)
    for a, lab in zip(ax, [f"C_l2@{r.k}", "neighbour − distant coupling"]):
        a.set_xscale("log")
        a.set_xlabel("Pythia training step")
        a.set_ylabel(lab)
        a.legend()
    return fig
