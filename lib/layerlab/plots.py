"""One figure style for the whole book (seaborn + matplotlib), and a few helpers every chapter uses.

Call :func:`use_style` once at the top of a notebook. Layers are indexed from 0 internally; axes show
the index convention explicitly (``layer_axis``) so a reader can map them to a paper's 1-based layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib as mpl
import numpy as np

__all__ = ["FIGSIZE", "PALETTE", "ci_band", "layer_axis", "use_style"]

PALETTE = "colorblind"
FIGSIZE = {"single": (6.0, 3.6), "wide": (9.0, 3.6), "square": (4.5, 4.2), "grid": (9.0, 6.5)}


def use_style(context: str = "notebook") -> None:
    """Apply the book's style (idempotent): seaborn whitegrid, colour-blind palette, tight savefig."""
    import seaborn as sns

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
