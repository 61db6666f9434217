"""Figures of the growth chapter (Wietrzykowski 2026, arXiv:2603.19348, findings 5-6: GTT against
uniform training, stacking and MSLT at matched budgets), and of the book's model family. Each
function takes a :class:`~layerlab.chapters.growth.run.GrowthResult` and returns the Figure."""

from __future__ import annotations

import numpy as np

from layerlab.chapters.growth.analysis import AXES
from layerlab.chapters.growth.run import GrowthResult
from layerlab.report.plots import use_style

__all__ = ["fig_curves", "fig_family", "use_style"]

AXIS_LABELS = {"tokens": "training tokens", "flops": "training FLOPs", "wall": "training wall-clock (s)"}


def fig_curves(result: GrowthResult, axes=AXES):
    """Validation NLL vs tokens, FLOPs and wall-clock per arm: seed mean (line) and min-max band."""
    import matplotlib.pyplot as plt

    df = result.curves
    fig, axs = plt.subplots(1, len(axes), figsize=(4.2 * len(axes), 3.4), sharey=True)
    for ax, axis in zip(np.atleast_1d(axs), axes):
        for arm, g in df.groupby("arm", sort=False):
            piv_x = g.pivot(index="step", columns="seed", values=axis).mean(1)
            piv_y = g.pivot(index="step", columns="seed", values="val_nll")
            ax.plot(piv_x, piv_y.mean(1), label=arm)
            ax.fill_between(piv_x, piv_y.min(1), piv_y.max(1), alpha=0.2)
        ax.set_xlabel(AXIS_LABELS[axis])
    np.atleast_1d(axs)[0].set_ylabel("validation NLL (nats / token)")
    np.atleast_1d(axs)[0].legend()
    fig.tight_layout()
    return fig


def fig_family(result: GrowthResult):
    """Held-out NLL of the family: vs depth (members at the family's main width and learning rate,
    seed mean and range) and the held-out curve over log-spaced checkpoints for every member."""
    import matplotlib.pyplot as plt

    t = result.family
    w0, lr0 = t.width.mode()[0], t.lr.mode()[0]
    sub = t[(t.width == w0) & (t.lr == lr0)].groupby("depth").heldout_nll
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    a.plot(sub.mean().index, sub.mean().values, marker="o")
    a.fill_between(sub.min().index, sub.min().values, sub.max().values, alpha=0.25)
    a.set_xlabel(f"depth (width {w0}, lr {lr0:g})")
    a.set_ylabel("held-out NLL (nats / token)")
    for _name, c in result.family_curves.groupby("name", sort=False):
        b.plot(c["step"].to_numpy()[1:], c["val_nll"].to_numpy()[1:], lw=0.8, alpha=0.6)
    b.set_xscale("log")
    b.set_xlabel("training step (checkpoints)")
    fig.tight_layout()
    return fig
