"""Figures of the growth chapter (Wietrzykowski 2026, arXiv:2603.19348, findings 5-6: GTT against
uniform training, stacking and MSLT), and of the book's model family. Each function takes a
:class:`~layerlab.chapters.growth.result.GrowthResult` and returns the Figure (transparent background)."""

from __future__ import annotations

import numpy as np

from layerlab.chapters.growth.analysis import AXES
from layerlab.chapters.growth.result import GrowthResult
from layerlab.report.plots import use_style

__all__ = ["fig_curves", "fig_family", "fig_importance", "fig_seeds", "use_style"]

AXIS_LABELS = {"tokens": "training tokens", "flops": "training FLOPs", "wall": "training wall-clock (s)"}


def _scale(axis: str, top: float) -> tuple[float, str]:
    """Divisor and label of ``axis`` so that its ticks are short numbers (tokens, FLOPs: a power of 10)."""
    if axis == "wall" or top <= 0:
        return 1.0, AXIS_LABELS[axis]
    e = int(np.floor(np.log10(top)))
    return 10.0**e, f"{AXIS_LABELS[axis]} ($10^{{{e}}}$)"
STYLE = {"uniform": "-", "gtt": "-", "stacking": "--", "mslt": "--", "uniform-flops": ":", "uniform-wall": ":"}


FONT = 11  # points at the figure's own size; the page shows these figures at ~0.9x, so >= 9 pt there


def _finish(fig, rect=None):
    fig.patch.set_alpha(0.0)
    for ax in fig.axes:
        ax.patch.set_alpha(0.0)
        ax.tick_params(labelsize=FONT - 1)
        ax.xaxis.label.set_size(FONT)
        ax.yaxis.label.set_size(FONT)
    fig.tight_layout(rect=rect)
    return fig


def fig_curves(result: GrowthResult, axes=AXES):
    """Held-out NLL vs tokens, FLOPs and wall-clock per arm: seed mean (line) and min-max band."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    df = result.curves
    fig, axs = plt.subplots(1, len(axes), figsize=(7.6, 3.6), sharey=True)
    for ax, axis in zip(np.atleast_1d(axs), axes):
        div, label = _scale(axis, float(df[axis].max()))
        for arm, g in df.groupby("arm", sort=False):
            x = g.pivot_table(index="step", columns="seed", values=axis).mean(1) / div
            y = g.pivot_table(index="step", columns="seed", values="val_nll")
            ax.plot(x, y.mean(1), STYLE.get(arm, "-"), label=arm, lw=1.6)
            ax.fill_between(x, y.min(1), y.max(1), alpha=0.15)
        ax.set_xlabel(label)
        ax.xaxis.set_major_locator(MaxNLocator(4))
    first = np.atleast_1d(axs)[0]
    first.set_ylabel("held-out NLL (nats / token)")
    handles, labels = first.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=FONT - 1, frameon=False)
    return _finish(fig, rect=(0, 0.16, 1, 1))


def fig_importance(result: GrowthResult):
    """Per-layer ΔNLL of ablating each layer of the trained uniform model: one dot per seed, mean
    over seeds as a bar; anti-layers by the test (Holm-adjusted sign flips over documents) ringed."""
    import matplotlib.pyplot as plt

    imp = result.importance
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    m = imp.groupby("layer").delta_nll.mean()
    ax.bar(m.index, m.values, color="0.75", label="mean over seeds")
    ax.scatter(imp.layer, imp.delta_nll, s=14, color="C0", zorder=3, label="one seed")
    anti = imp[imp.anti]
    if len(anti):
        ax.scatter(anti.layer, anti.delta_nll, s=60, facecolors="none", edgecolors="C3", zorder=4,
                   label="anti-layer (test)")
    ax.axhline(0, color="0.3", lw=0.8)
    ax.set_xlabel("layer (0-based)")
    ax.set_ylabel(r"$\Delta$NLL when ablated (nats)")
    ax.set_xticks(list(m.index))
    ax.legend(fontsize=FONT - 1)
    return _finish(fig)


def fig_seeds(result: GrowthResult, rows=None):
    """Per-seed statistic of each loss claim (dots; one colour per seed) with the mean and its 95%
    interval from the claim row (bar), against 0 (no difference). ``rows``: the claim rows (default:
    ``claims(result)``)."""
    if rows is None:
        from layerlab.chapters.growth.claims import claims

        rows = claims(result)
    import matplotlib.pyplot as plt

    from layerlab.chapters.growth.claims import loss_seeds

    data = loss_seeds(result.comparison)
    by_id = {c.id: c for c in rows}
    ids = [i for i in data if i in by_id and by_id[i].ours is not None]
    fig, ax = plt.subplots(figsize=(7.0, 3.4))
    for k, i in enumerate(ids):
        seeds, d = data[i]
        ax.scatter(np.full(len(d), k) + np.linspace(-0.15, 0.15, len(d)), d, s=16, c=[f"C{s % 10}" for s in seeds],
                   zorder=3)
        c = by_id[i]
        ax.errorbar([k + 0.3], [c.ours], yerr=[[c.ours - c.ci_low], [c.ci_high - c.ours]], fmt="ks", ms=4, capsize=3)
    ax.axhline(0, color="0.3", lw=0.8)
    ax.set_xticks(range(len(ids)), ids)
    ax.set_ylabel(r"$\Delta$NLL, GTT $-$ other arm (nats)")
    return _finish(fig)


def fig_family(result: GrowthResult):
    """Held-out NLL of the family: vs depth (members at the family's main width and learning rate,
    seed mean and range) and the held-out curve over log-spaced checkpoints of every member, coloured
    by depth."""
    import matplotlib.pyplot as plt

    t = result.family
    w0, lr0 = t.width.mode()[0], t.lr.mode()[0]
    sub = t[(t.width == w0) & (t.lr == lr0)].groupby("depth").heldout_nll
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    a.plot(sub.mean().index, sub.mean().values, marker="o")
    a.fill_between(sub.min().index, sub.min().values, sub.max().values, alpha=0.25)
    a.set_xlabel(f"depth (width {w0}, lr {lr0:g})")
    a.set_ylabel("held-out NLL (nats / token)")
    depths = sorted(t.depth.unique())
    cmap = plt.get_cmap("viridis", max(len(depths), 2))
    depth_of = dict(zip(t.name, t.depth))
    seen = set()
    for name, c in result.family_curves.groupby("name", sort=False):
        d = depth_of.get(name, depths[0])
        lab = f"depth {d}" if d not in seen else None
        seen.add(d)
        b.plot(c["step"].to_numpy()[1:], c["val_nll"].to_numpy()[1:], lw=0.9, alpha=0.7,
               color=cmap(depths.index(d)), label=lab)
    b.set_xscale("log")
    from matplotlib.ticker import NullFormatter

    b.xaxis.set_minor_formatter(NullFormatter())  # minor labels on a short log axis run together
    b.set_xlabel("training step (checkpoints)")
    b.legend(fontsize=FONT - 2, ncol=2, title="members by depth", title_fontsize=FONT - 2)
    return _finish(fig)
