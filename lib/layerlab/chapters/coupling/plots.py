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
from matplotlib.ticker import NullFormatter

from layerlab.chapters.coupling.run import CouplingResult
from layerlab.report.plots import ci_band, circle_graph, use_style

__all__ = ["fig_checkpoints", "fig_depth_matrices", "fig_distance", "fig_family", "fig_locality", "fig_panels",
           "fig_pythia", "fig_tokens", "fig_trajectories", "fig_vit", "use_style"]


def fig_depth_matrices(r: CouplingResult) -> Figure:
    """Prompt-mean 1 - m_K(J_i, J_j) of the trained model, its first random-init twin and the
    spectrum-matched null, on one colour scale; the diagonal (1 by definition) is blanked."""
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.4), layout="constrained")
    mats = {name: m.clone().fill_diagonal_(float("nan")) for name, m in r.depth_matrices.items()}
    vmax = max(float(np.nanmax(m.numpy())) for m in mats.values())
    for ax, (name, m) in zip(axes, mats.items()):
        im = ax.imshow(m.numpy(), vmin=0, vmax=vmax, cmap="viridis")
        ax.set_title(name)
        ax.grid(False)
        ax.set_xlabel("basis block j")
        ax.set_ylabel("diagonalised block i")
    fig.colorbar(im, ax=axes, shrink=0.8, label=f"$1 - m_{{{r.k}}}$ (ℓ2)")
    return _finish(fig)


def fig_panels(r: CouplingResult) -> Figure:
    """|U_j^T J_i V_j| (K x K) for consecutive blocks on the demo prompt, trained vs random init
    (colour scale compressed with power 0.35 to show the weak off-diagonal entries)."""
    layers = r.preset.panel_layers
    fig, axes = plt.subplots(1, 2, figsize=(10, 5), layout="constrained")
    for ax, (name, A) in zip(axes, r.panels.items()):
        n = A.shape[0]
        grid = A.permute(0, 2, 1, 3).reshape(n * A.shape[2], n * A.shape[3])
        im = ax.imshow(grid.numpy(), cmap="magma", norm=PowerNorm(0.35, vmin=0, vmax=float(grid.max())))
        ax.set_title(f"{name}: blocks {layers[0]}–{layers[-1]}, $K$ = {A.shape[-1]}", fontsize=10)
        ax.set_xlabel("basis block $j$ (left to right)")
        ax.set_ylabel("diagonalised block $i$ (top to bottom)")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.grid(False)
        fig.colorbar(im, ax=ax, shrink=0.7, label=r"$|U_j^\top J_i V_j|$")
    return _finish(fig)


def fig_tokens(r: CouplingResult) -> Figure:
    """Token-wise 1 - m_K grids of the first prompt: self-coupling within a block and across the layer
    pair, and context coupling with the output or the input token fixed (position 0 starred)."""
    grids = r.token_grids
    fig, axes = plt.subplots(1, len(grids), figsize=(10, 3.2), layout="constrained", squeeze=False)
    labels = [str(t) + ("*" if t == 0 else "") for t in r.token_positions]
    vmax = max(float(np.nanmax(m.numpy())) for m in grids.values())
    every = max(1, len(labels) // 6)
    for ax, (name, m) in zip(axes[0], grids.items()):
        im = ax.imshow(m.numpy(), vmin=0, vmax=vmax, cmap="viridis")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("token position")
        ax.grid(False)
        ax.set_xticks(range(0, len(labels), every), labels[::every], fontsize=9)
        ax.set_yticks(range(0, len(labels), every), labels[::every], fontsize=9)
    axes[0][0].set_ylabel("token position")
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label=f"$1 - m_{{{r.k}}}$ (ℓ2)")
    return _finish(fig)


def fig_trajectories(r: CouplingResult) -> Figure:
    """Step norms and top singular values by block (one line per prompt, trained vs random init) and
    the 2-D PCA of every token's trajectory on the demo prompt."""
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.2), layout="constrained")
    for name, c in [("trained", "C0"), ("random init", "C3")]:
        for delta, s1 in zip(r.step_norms[name], r.top_sv[name]):
            axes[0].semilogy(delta.numpy(), color=c, alpha=0.3)
            axes[1].semilogy(s1.numpy(), color=c, alpha=0.3)
        axes[0].plot([], color=c, label=name)
    axes[0].set_xlabel("block")
    axes[0].set_ylabel(r"step norm $\|x^l - x^{l-1}\|$")
    axes[0].legend()
    axes[1].set_xlabel("block")
    axes[1].set_ylabel(r"top singular value $s_1(J^l)$")
    axes[2].set_xlabel("PC 1")
    axes[2].set_ylabel("PC 2")
    for t in range(r.pca_coords.shape[0]):
        axes[2].plot(r.pca_coords[t, :, 0], r.pca_coords[t, :, 1], marker=".", ms=3, alpha=0.7)
    axes[2].set_title(f"demo prompt, {100 * float(r.pca_ratio.sum()):.0f}% of variance", fontsize=9)
    return _finish(fig)


def fig_family(r: CouplingResult) -> Figure:
    """Held-out NLL of every family member against coupling and each competing predictor, with R^2
    and Spearman rho in the titles."""
    fig, axes = plt.subplots(1, len(r.predictors), figsize=(10, 3), sharey=True, layout="constrained")
    for ax, p in zip(axes, r.predictors):
        for s, g in r.family.groupby("seed"):
            ax.scatter(g[p], g["heldout_nll"], s=14, label=f"seed {s}")
        ax.set_xlabel(p.replace("excess:", "excess ").replace("log10_params", "log10 params"))
    axes[0].set_ylabel("held-out NLL (nats)")
    axes[-1].legend(fontsize=9)
    return _finish(fig)


def fig_checkpoints(r: CouplingResult) -> Figure:
    """Coupling and held-out NLL over the log-spaced checkpoints of the followed members (one line per seed)."""
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.2), layout="constrained")
    col = f"excess:{r.coupling_col}"
    for s, g in r.checkpoints.groupby("seed"):
        g = g.sort_values("step")
        x = g["step"].clip(lower=0.5)
        ax[0].plot(x, g[col], marker="o", label=f"seed {s}")
        ax[1].plot(x, g["val_nll"], marker="o", label=f"seed {s}")
    ax[0].axhline(0, color="k", lw=0.8)
    for a, lab in zip(ax, [f"excess {r.coupling_col} over own null", "held-out NLL (nats)"]):
        a.set_xscale("log")
        a.xaxis.set_minor_formatter(NullFormatter())
        a.set_xlabel("training step (0 plotted at 0.5)")
        a.set_ylabel(lab)
    ax[0].legend()
    return _finish(fig)


def fig_locality(r: CouplingResult) -> Figure:
    """Circle graphs of the first seed at the shown checkpoints (edge opacity: coupling, one scale for
    all panels) and the locality (neighbour - distant coupling, 95% CI band) over training per seed."""
    loc, mats, shown = r.locality, r.locality_mats, r.locality_shown
    seed0 = int(loc["seed"].min())
    vmax = max(float((1 - mats[(seed0, s)]).fill_diagonal_(0).max()) for s in shown)
    fig, axes = plt.subplots(1, len(shown) + 1, figsize=(10, 2.9), layout="constrained")
    for ax, s in zip(axes, shown):
        c = float(loc[(loc["seed"] == seed0) & (loc["step"] == s)]["C_l2"].iloc[0])
        circle_graph(ax, (1 - mats[(seed0, s)]).numpy(), vmax=vmax, title=f"step {s}: $C_{{\\ell_2}}$ {c:.3f}")
    for sd, g in loc.groupby("seed"):
        g = g.sort_values("step")
        ci_band(axes[-1], g["step"].clip(lower=0.5), g["locality"], g["low"], g["high"], label=f"seed {sd}")
    axes[-1].axhline(0, color="k", lw=0.8)
    axes[-1].set_xscale("log")
    axes[-1].xaxis.set_minor_formatter(NullFormatter())
    axes[-1].set_xlabel("training step (0 plotted at 0.5)")
    axes[-1].set_ylabel("neighbour − distant coupling")
    axes[-1].legend()
    axes[-1].set_title(f"locality, {loc['name'].iloc[0].split('-s')[0]}", fontsize=9)
    return _finish(fig)


def fig_vit(r: CouplingResult) -> Figure:
    """ViT coupling at the last patch token and at CLS against test accuracy over checkpoints, per dataset."""
    import pandas as pd

    vk = max(r.preset.vit_ks)
    fig, axes = plt.subplots(1, len(r.vit_rows), figsize=(4.5 * len(r.vit_rows), 3.2), squeeze=False,
                             layout="constrained")
    for ax, (name, rows) in zip(axes[0], r.vit_rows.items()):
        vdf = pd.DataFrame(rows)
        ax.plot(vdf["test_acc"], vdf[f"last:C_l2@{vk}"], marker="o", label="last patch")
        ax.plot(vdf["test_acc"], vdf[f"cls:C_l2@{vk}"], marker="s", label="CLS")
        ax.set_title(name)
        ax.set_xlabel("test accuracy")
        ax.set_ylabel(f"$C_{{\\ell_2}}$ at $K$ = {vk}")
        ax.legend()
    return _finish(fig)


def fig_pythia(r: CouplingResult) -> Figure | None:
    """Coupling and locality of Pythia over the Fig. 1b checkpoints (gpu profile; None elsewhere)."""
    if r.pythia is None:
        return None
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.2), layout="constrained")
    for name, g in r.pythia.groupby("model"):
        ax[0].plot(g["step"], g[f"C_l2@{r.k}"], marker="o", label=name)
        ax[1].plot(g["step"], g["locality"], marker="o", label=name)
    for a, lab in zip(ax, [f"C_l2@{r.k}", "neighbour − distant coupling"]):
        a.set_xscale("log")
        a.set_xlabel("Pythia training step")
        a.set_ylabel(lab)
        a.legend()
    return _finish(fig)


def fig_distance(r: CouplingResult) -> Figure:
    """Excess coupling over each model's own spectrum-matched null by depth distance |i - j|: mean over
    prompts with a 95% t-band, trained vs random init (0: chance for that K, d and spectrum)."""
    from scipy.stats import t as student

    fig, ax = plt.subplots(figsize=(6, 3.2), layout="constrained")
    for name, X in r.distance.items():
        X = np.asarray(X, float)
        if X.size == 0:
            continue
        m = X.mean(0)
        half = (student.ppf(0.975, X.shape[0] - 1) * X.std(0, ddof=1) / np.sqrt(X.shape[0])
                if X.shape[0] > 1 else np.zeros_like(m))
        ci_band(ax, np.arange(1, X.shape[1] + 1), m, m - half, m + half, label=f"{name} ({X.shape[0]} prompts)")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xlabel("depth distance $|i - j|$ (blocks)")
    ax.set_ylabel(f"excess $1 - m_{{{r.k}}}$ over own null")
    ax.legend(fontsize=9)
    return _finish(fig)


def _finish(fig: Figure) -> Figure:
    """Transparent figure background (readable in the book's dark mode)."""
    fig.patch.set_alpha(0.0)
    return fig
