"""One figure style for the whole book (seaborn + matplotlib), and a few helpers every chapter uses.

Call :func:`use_style` once at the top of a notebook. Layers are indexed from 0 internally; axes show
the index convention explicitly (``layer_axis``) so a reader can map them to a paper's 1-based layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib as mpl
import numpy as np

__all__ = ["FIGSIZE", "PALETTE", "ci_band", "circle_graph", "layer_axis", "use_style"]

PALETTE = "colorblind"
FIGSIZE = {"single": (6.0, 3.6), "wide": (9.0, 3.6), "square": (4.5, 4.2), "grid": (9.0, 6.5)}


def use_style(context: str = "notebook") -> None:
    """Apply the book's style (idempotent): seaborn whitegrid, colour-blind palette, tight savefig; pandas
    shows every row, column and character of a displayed table (a book page never elides cells with
    "..."; wide tables scroll in their own box, book/_static/layerlab.css)."""
    import pandas as pd
    import seaborn as sns

    for opt in ("display.max_rows", "display.max_columns", "display.max_colwidth"):
        pd.set_option(opt, None)

    sns.set_theme(context=context, style="whitegrid", palette=PALETTE)
    mpl.rcParams.update({
        "figure.figsize": FIGSIZE["single"],
        "figure.dpi": 110,
        "savefig.dpi": 150,
        "savefig.bbox": "tight",
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.titlesize": "medium",
        "axes.titleweight": "bold",
        "legend.frameon": False,
        "image.cmap": "viridis",
        "svg.fonttype": "none",
    })


def layer_axis(ax: Any, n_layers: int, *, label: str = "layer (0-based)", axis: str = "x",
               every: int | None = None) -> None:
    """Integer layer ticks 0..n_layers-1 (every ``every`` layers; default about 8 ticks)."""
    step = every or max(1, int(np.ceil(n_layers / 8)))
    ticks = list(range(0, n_layers, step))
    if axis == "x":
        ax.set_xticks(ticks)
        ax.set_xlabel(label)
    else:
        ax.set_yticks(ticks)
        ax.set_ylabel(label)


def ci_band(ax: Any, x: Sequence[float], estimate: Sequence[float], low: Sequence[float],
            high: Sequence[float], *, label: str | None = None, color: Any = None, marker: str = "o",
            alpha: float = 0.2, **kwargs: Any) -> Any:
    """A line of ``estimate`` over ``x`` with a shaded [low, high] band; returns the line."""
    (line,) = ax.plot(x, estimate, marker=marker, markersize=3, label=label, color=color, **kwargs)
    ax.fill_between(x, low, high, color=line.get_color(), alpha=alpha, linewidth=0)
    return line


def circle_graph(ax: Any, weights: Any, *, title: str = "", color: str = "C0", vmax: float | None = None) -> None:
    """Coupling circle graph (Aubry et al., Fig. 1c-e): layers 0..L-1 on a circle (clockwise from
    the top), an edge per pair with opacity proportional to ``weights[i, j]`` (e.g. coupling 1 - m),
    scaled by ``vmax`` (default: the largest off-diagonal weight). Every layer is drawn."""
    w = np.asarray(weights, dtype=float)
    L = w.shape[0]
    ang = np.pi / 2 - 2 * np.pi * np.arange(L) / L
    xy = np.stack([np.cos(ang), np.sin(ang)], axis=1)
    off = ~np.eye(L, dtype=bool)
    top = vmax if vmax is not None else float(np.nanmax(w[off])) if L > 1 else 1.0
    for i in range(L):
        for j in range(i + 1, L):
            a = float(np.clip((w[i, j] + w[j, i]) / 2 / top, 0, 1)) if top > 0 else 0.0
            if a > 0.01:
                ax.plot(*xy[[i, j]].T, color=color, alpha=a, lw=0.4 + 1.6 * a)
    ax.scatter(xy[:, 0], xy[:, 1], s=60, color="white", edgecolor="black", zorder=3)
    for i in range(L):
        ax.annotate(str(i), xy[i], ha="center", va="center", fontsize=6, zorder=4)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title, fontsize=9)
