"""The atlas on the book's trained family: which agreements between lenses are learned, which are
architectural (issue 18, second section).

Every member of the trained family (of the preset's profile) with at least ``min_depth`` blocks gets the
full atlas twice: once with its trained weights (``family:<name>``) and once as its random-init twin
(``family-init:<name>``: the same architecture and seed before any update). Each run gives, per lens
pair, the Spearman correlation over that member's layers. The unit is the **member** (an independently
trained model); per lens pair:

* *learned*: training changes the agreement — the paired difference rho(trained) - rho(twin) over
  members is significant after Holm over all pairs (exact sign-flip test up to 12 members, Monte Carlo
  beyond; :func:`layerlab.report.inference.paired_difference`), "strengthened" or "weakened";
* *architectural*: the twins already agree (or disagree) — the mean twin correlation differs from 0
  after Holm — and training does not change it significantly;
* *undecided* otherwise (too few members, or effects too small for them).

The per-member atlases are cached like any atlas run (:func:`layerlab.chapters.atlas.run.run`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from layerlab.chapters.atlas.presets import AtlasPreset
from layerlab.chapters.atlas.run import AtlasResult, run
from layerlab.report.inference import holm, mean_effect, paired_difference, permutations_for_holm

__all__ = ["FamilyAtlas", "compare", "family_members", "run_family", "run_models"]


@dataclass(frozen=True, kw_only=True)
class FamilyAtlas:
    """The atlas of each selected family member and of its random-init twin, and their comparison.

    ``members``: table of the members (name, depth, width, lr, seed, held-out NLL); ``trained``/``init``:
    one :class:`AtlasResult` per member, in the same order; ``pairs``: one row per lens pair (mean rho of
    trained and twins, the paired difference with its CI, Holm-adjusted p-values, the label and its
    sentence); ``numbers``: glued values (prefix ``atlasfam``)."""

    members: pd.DataFrame
    trained: list[AtlasResult]
    init: list[AtlasResult]
    pairs: pd.DataFrame
    numbers: dict[str, Any]


def family_members(profile: str, *, min_depth: int = 4) -> list:
    """The trained family's members with at least ``min_depth`` blocks (fewer give at most 3 layers, too
    few for a rank correlation over layers); the family is trained if missing."""
    from layerlab.training.family import get_family

    return [m for m in get_family(profile) if m.depth >= min_depth]


def _rho(results: list[AtlasResult], pairs: list[tuple[str, str]]) -> np.ndarray:
    """[members, pairs] Spearman rho over layers (NaN where a lens is undefined for a member)."""
    out = np.full((len(results), len(pairs)), np.nan)
    for i, r in enumerate(results):
        ag = r.agreement.set_index(["a", "b"])["rho"]
        for j, p in enumerate(pairs):
            out[i, j] = ag.get(p, np.nan)
    return out


def compare(trained: list[AtlasResult], init: list[AtlasResult], *, alpha: float = 0.05,
            seed: int = 0) -> pd.DataFrame:
    """Per lens pair: is the agreement learned (trained vs twin, paired over members) or architectural
    (already there in the twins)? See the module docstring for the rule."""
    if len(trained) != len(init) or not trained:
        raise ValueError(f"compare needs one twin per trained member, got {len(trained)} and {len(init)}")
    pairs = [(r.a, r.b) for r in trained[0].agreement.itertuples()]
    rt, ri = _rho(trained, pairs), _rho(init, pairs)
    # random sign flips beyond 12 members: enough that the smallest Holm-adjusted p can reach alpha / 2
    n_perm = permutations_for_holm(4000, len(pairs), alpha)
    rows = []
    for j, (a, b) in enumerate(pairs):
        ok = np.isfinite(rt[:, j]) & np.isfinite(ri[:, j])
        n = int(ok.sum())
        row: dict[str, Any] = {"a": a, "b": b, "n": n, "rho_trained": np.nan, "rho_init": np.nan, "diff": np.nan,
                               "low": np.nan, "high": np.nan, "init_low": np.nan, "init_high": np.nan,
                               "p_diff_greater": np.nan, "p_diff_less": np.nan,
                               "p_init_greater": np.nan, "p_init_less": np.nan}
        if n >= 2:
            d = paired_difference(rt[ok, j], ri[ok, j], unit="members", seed=seed, n_perm=n_perm)
            z = mean_effect(ri[ok, j], unit="members", seed=seed, bounds=(-1.0, 1.0), n_perm=n_perm)
            row.update(rho_trained=float(rt[ok, j].mean()), rho_init=z.estimate, diff=d.estimate, low=d.low,
                       high=d.high, init_low=z.low, init_high=z.high, p_diff_greater=d.p_greater,
                       p_diff_less=d.p_less, p_init_greater=z.p_greater, p_init_less=z.p_less)
        rows.append(row)
    df = pd.DataFrame(rows)
    have = df.n >= 2
    for col in ("p_diff_greater", "p_diff_less", "p_init_greater", "p_init_less"):
        df[f"{col}_holm"] = np.nan
        if have.any():
            df.loc[have, f"{col}_holm"] = holm(df.loc[have, col].to_numpy())
    a2 = alpha / 2
    up, down = df.p_diff_greater_holm <= a2, df.p_diff_less_holm <= a2
    arch = (df.p_init_greater_holm <= a2) | (df.p_init_less_holm <= a2)
    df["label"] = np.select([up, down, arch], ["learned: strengthened", "learned: weakened", "architectural"],
                            default="undecided")
    df["sentence"] = [_sentence(r) for r in df.itertuples()]
    return df


def _sentence(r: Any) -> str:
    if r.n < 2:
        return f"{r.a} and {r.b}: fewer than 2 members define both lenses; nothing to compare."
    est = (f"mean ρ {r.rho_trained:.2f} trained vs {r.rho_init:.2f} at init; difference {r.diff:+.2f} "
           f"[{r.low:+.2f}, {r.high:+.2f}] over {r.n} members")
    if r.label == "learned: strengthened":
        return f"Training makes {r.a} and {r.b} agree more ({est}; Holm p = {r.p_diff_greater_holm:.2g})."
    if r.label == "learned: weakened":
        return f"Training makes {r.a} and {r.b} agree less ({est}; Holm p = {r.p_diff_less_holm:.2g})."
    if r.label == "architectural":
        sign = "agree" if r.rho_init > 0 else "disagree"
        return (f"{r.a} and {r.b} already {sign} in the random-init twins, and training does not change it "
                f"detectably ({est}).")
    return f"{r.a} and {r.b}: undecided ({est})."


def run_family(P: AtlasPreset, *, min_depth: int = 4, progress: bool | None = None) -> FamilyAtlas:
    """The atlas of every family member with >= ``min_depth`` blocks and of its twin (windows no longer than
    the family's training windows), then :func:`compare`."""
    members = family_members(P.profile, min_depth=min_depth)
    if not members:
        raise ValueError(f"the {P.profile} family has no member with >= {min_depth} blocks; lower min_depth")
    from layerlab.data.corpora import DEFAULT_SOURCES
    from layerlab.training.family import PRESETS as FAMILY_PRESETS

    window = min(P.window, FAMILY_PRESETS[P.profile].seq_len)
    # the family's own corpora (its training text's test split), not the pretrained model's wider test split
    base = dataclasses.replace(P, window=window, tokens=max(P.tokens, window - 1), layers=None, tiny_layers=None,
                               sources=DEFAULT_SOURCES)
    trained = [run(dataclasses.replace(base, model=f"family:{m.name}"), progress=progress) for m in members]
    init = [run(dataclasses.replace(base, model=f"family-init:{m.name}"), progress=progress) for m in members]
    pairs = compare(trained, init, seed=P.seed)
    table = pd.DataFrame([{"member": m.name, "depth": m.depth, "width": m.width, "lr": m.lr, "seed": m.seed,
                           "heldout_nll": m.heldout_nll} for m in members])
    counts = pairs.label.value_counts()
    numbers = {"n_members": len(members), "min_depth": min_depth, "depths": ", ".join(str(d) for d in
                                                                                     sorted(set(table.depth))),
               "n_pairs": len(pairs), "window": window, "n_tokens": int(trained[0].numbers["n_tokens"]),
               **{k.replace(": ", "_").replace(" ", "_"): int(counts.get(k, 0)) for k in
                  ("learned: strengthened", "learned: weakened", "architectural", "undecided")}}
    return FamilyAtlas(members=table, trained=trained, init=init, pairs=pairs, numbers=numbers)


def run_models(P: AtlasPreset, *, progress: bool | None = None) -> list[AtlasResult]:
    """The atlas of every model in ``P.extra_models`` with the preset's settings (empty unless the profile
    names some: the gpu profile runs Pythia-160M, Pythia-410M and Llama-3.2-1B from the hub)."""
    return [run(dataclasses.replace(P, model=m, layers=None, tiny_layers=None), progress=progress)
            for m in P.extra_models]
