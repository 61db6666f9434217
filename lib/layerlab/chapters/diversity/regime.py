"""The training regime of the depth family, as the diversity chapter's depth analyses must state it
(Kamigaito et al. 2025, arXiv:2505.24009, Figs. 5-6 read on models trained at each depth; spec meaning 3
of "number of layers").

A depth comparison across trained models says something about depth only if deeper members are
better language models at the budget they were trained with, and only between members whose held-out
losses differ by more than seed noise. Which depths do is decided by the family-wide rule
(:func:`layerlab.training.regime.family_regime`: paired over seeds, Holm over the family's pairs), the
same rule the coupling and growth chapters use; :func:`regime` adds the sentence the chapter prints,
generated for each outcome.
"""

from __future__ import annotations

import math

import pandas as pd

from layerlab.training.regime import family_regime

__all__ = ["regime"]


def regime(members: pd.DataFrame | None) -> dict:
    """The regime of the family whose table is ``members`` (one row per trained member, with
    ``depth, width, lr, steps, seed, heldout_nll``: ``DiversityResult.family_members``).

    Returns {"sentence", "kept" (depths a depth comparison may use), "trend" (Spearman of the seed-mean
    NLL with depth), "n_seeds", "improves" (True / False / None), "best_depth", "n_tested"}."""
    empty = {"kept": [], "trend": float("nan"), "n_seeds": 0, "improves": None, "best_depth": None, "n_tested": 0}
    if members is None or not len(members) or "heldout_nll" not in members:
        return {"sentence": "No depth family was available for this run.", **empty}
    reg = family_regime(members)
    if not reg["means"]:
        return {"sentence": "The depth family has no held-out losses recorded.", **empty}
    means = pd.Series(reg["means"]).sort_index()
    best, trend = int(means.idxmin()), reg["rho_depth"]
    if not math.isfinite(trend):
        shape, improves = f"the depth sweep has {len(means)} depth(s), too few to read a trend", None
    elif trend < 0 and best == int(means.index.max()):
        shape, improves = "held-out NLL improves with depth (the deepest member is best)", True
    elif trend > 0:
        shape = f"held-out NLL gets worse with depth (the best member has depth {best}): the family is under-trained"
        improves = False
    else:
        shape = f"held-out NLL does not improve monotonically with depth (the best member has depth {best})"
        improves = False
    spread = float(means.max() - means.min())
    kept = reg["kept"]
    if reg["n_seeds"] < 2:
        use = "one seed per depth, so seed noise cannot be estimated and no depth comparison is informative"
    elif len(kept) >= 2:
        use = (f"depth comparisons use only depths {kept}, whose held-out losses differ pairwise beyond seed noise "
               f"(paired over {reg['n_seeds']} seeds, Holm over the family's {reg['n_tested']} tested pairs at 5%: the "
               f"rule of the growth chapter's scaling section; a spread of {spread:.3f} nats across depths)")
    else:
        use = (f"no two depths differ beyond seed noise (paired over {reg['n_seeds']} seeds, Holm over the family's "
               f"{reg['n_tested']} tested pairs at 5%), so no depth comparison on this family is informative")
        kept = []
    return {"sentence": f"At the family's training budget {shape}; {use}.", "kept": kept, "trend": trend,
            "n_seeds": reg["n_seeds"], "improves": improves, "best_depth": best, "n_tested": reg["n_tested"]}
