"""The training regime of the depth family, as the diversity chapter's depth analyses must state it
(Kamigaito et al. 2025, arXiv:2505.24009, Figs. 5-6 read on models trained at each depth; spec meaning 3
of "number of layers").

A depth comparison across trained models says something about depth only if deeper members are
better language models at the budget they were trained with, and only between members whose held-out
losses differ by more than seed noise. :func:`regime` measures both from the family's rows and returns
the sentence the chapter prints, generated for each outcome.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["regime"]


def regime(family: pd.DataFrame | None, *, k_sigma: float = 2.0) -> dict:
    """Held-out NLL against depth of the trained members: per-depth mean, pooled seed sd, the trend
    (Spearman over members), the depths kept for depth comparisons and the generated sentence.

    Kept depths: from the shallowest, a depth is kept when its mean NLL differs from the last kept one
    by more than ``k_sigma`` standard errors of a difference of two seed means (pooled seed sd x
    sqrt(2 / seeds)); with a single seed per depth no noise can be estimated and nothing is kept."""
    if family is None or not len(family) or "heldout_nll" not in family:
        return {"sentence": "No depth family was available for this run.", "kept": [], "trend": float("nan"),
                "noise": float("nan"), "n_seeds": 0, "improves": None}
    tr = family[family.init == "trained"].drop_duplicates("name")
    tr = tr[np.isfinite(tr.heldout_nll)]
    if tr.empty:
        return {"sentence": "The depth family has no held-out losses recorded.", "kept": [], "trend": float("nan"),
                "noise": float("nan"), "n_seeds": 0, "improves": None}
    g = tr.groupby("depth").heldout_nll
    means, sds, counts = g.mean(), g.std(ddof=1), g.size()
    n_seeds = int(counts.min())
    noise = float(np.sqrt(np.nanmean(sds.to_numpy() ** 2))) if n_seeds >= 2 else float("nan")
    from scipy.stats import spearmanr

    trend = float(spearmanr(tr.depth, tr.heldout_nll).statistic) if tr.depth.nunique() > 1 else float("nan")
    kept: list[int] = []
    if np.isfinite(noise):
        se = k_sigma * noise * np.sqrt(2.0 / n_seeds)
        for d, m in means.items():
            if not kept or abs(m - means[kept[-1]]) > se:
                kept.append(int(d))
    best = int(means.idxmin())
    spread = float(means.max() - means.min())
    if not np.isfinite(trend):
        shape = "the family has a single depth"
        improves = None
    elif trend < 0 and best == int(means.index.max()):
        shape = "held-out NLL improves with depth (the deepest member is best)"
        improves = True
    elif trend > 0:
        shape = f"held-out NLL gets worse with depth (the best member has depth {best}): the family is under-trained"
        improves = False
    else:
        shape = f"held-out NLL does not improve monotonically with depth (the best member has depth {best})"
        improves = False
    noise_s = (f"seed noise {noise:.3f} nats ({n_seeds} seeds per depth) against a spread of {spread:.3f} nats "
               "across depths" if np.isfinite(noise) else "one seed per depth, so seed noise cannot be estimated")
    use = (f"depth comparisons use only depths {kept}, whose mean losses differ by more than {k_sigma:g} "
           "standard errors" if len(kept) >= 2 else "no two depths differ by more than seed noise, so no depth "
           "comparison on this family is informative")
    sentence = f"At the family's training budget {shape}; {noise_s}; {use}."
    return {"sentence": sentence, "kept": kept, "trend": trend, "noise": noise, "n_seeds": n_seeds,
            "improves": improves, "best_depth": best}
