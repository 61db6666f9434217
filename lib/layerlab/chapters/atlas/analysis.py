"""The atlas's statistics: per-layer estimates with 95% intervals over documents (each document's mean
first: :func:`layerlab.report.inference.unit_interval`; no percentile bootstrap over the few documents a cpu
atlas reads), the agreement between lenses
(Spearman over layers, permutation p, bootstrap CI, Holm over pairs) and the tiers (agglomerative
clustering of the layers on all rank-normalised lenses). Pure functions of the measured pieces."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from layerlab.metrics.infotheory import marginal_gains
from layerlab.report.inference import Evidence, correlation, holm, permutations_for_holm, unit_interval

__all__ = ["LENSES", "agreement", "layer_table", "recovery_fraction", "tiers"]

#: lens -> (family, what it is). Higher values: more loss on ablation, more loss removed, larger norm growth,
#: more change, larger Jacobian, more coupled than the null, worse / more diverse member, more information,
#: more predictable weights, more negative-or-positive delta correlation, slower recovery.
LENSES: dict[str, tuple[str, str]] = {
    "skip": ("ablation", "ΔNLL when the block is skipped (nats)"),
    "skip_attn": ("ablation", "ΔNLL when the attention write is skipped"),
    "skip_mlp": ("ablation", "ΔNLL when the MLP write is skipped"),
    "neighbour_avg": ("ablation", "ΔNLL when the block is replaced by its neighbours' average"),
    "lens_drop_recompute": ("residual", "logit-lens NLL removed by the block (recomputed norm)"),
    "lens_drop_frozen": ("residual", "logit-lens NLL removed by the block (frozen norm)"),
    "norm_growth": ("residual", "‖h_{l+1}‖ / ‖h_l‖"),
    "block_influence": ("residual", "ShortGPT block influence 1 − cos(x_l, x_{l+1})"),
    "angular_distance": ("residual", "angular distance at the last token (Gromov et al.)"),
    "spectral_norm": ("coupling", "spectral norm of the block Jacobian"),
    "jacobian_fro": ("coupling", "‖J‖_F of the block Jacobian"),
    "coupling": ("coupling", "m_K(null) − m_K to the neighbouring blocks (higher: more coupled)"),
    "attn_bias": ("diversity", "bias term of the attention member"),
    "attn_div": ("diversity", "diversity term of the attention member"),
    "mlp_bias": ("diversity", "bias term of the MLP member"),
    "mlp_div": ("diversity", "diversity term of the MLP member"),
    "info_gain": ("diversity", "information gain of the lens summary I(S_{l+1};Y) − I(S_l;Y) (bits)"),
    "weight_r2": ("anatomy", "held-out lag-1 R² of the layer's weight innovation"),
    "delta_corr": ("anatomy", "consecutive weight-delta correlation centred on the layer"),
    # noise on a block is a partial ablation of it: its damage is in the ablation family, so that its (expected)
    # agreement with the ablations never counts as one between different families
    "noise_damage": ("ablation", "excess NLL right after noise on the layer's matrices (nats)"),
    # the fraction healed is the anatomy paper's finding 3 (recovery vs importance): a cross-family question
    "recovery": ("anatomy", "fraction of the noise damage left after a short fine-tune of the layer, against the "
                            "same fine-tune without noise (higher: slower recovery)"),
}


def recovery_fraction(damage: np.ndarray, left: np.ndarray, drift: np.ndarray) -> np.ndarray:
    """The recovery lens per layer: ``left / damage``, the fraction of the noise damage still there after the
    fine-tune (measured against the same fine-tune without noise; 1: nothing healed, 0: all, above 1: the
    fine-tune made it worse). Undefined (NaN) where the damage is not larger than ``|drift|``, what the
    fine-tune alone moved the NLL: there the fraction would divide by noise.

    Wietrzykowski (arXiv:2603.19348), finding 3 ("recovery speed correlates with importance"), with the σ = 0
    control of the anatomy chapter's protocol; inputs from :func:`layerlab.chapters.atlas.measure.recovery_piece`."""
    damage, left, drift = (np.asarray(a, dtype=float) for a in (damage, left, drift))
    ok = damage > np.abs(drift)
    return np.where(ok, left / np.where(ok, damage, 1.0), np.nan)


def _row(layer: int, lens: str, est: float, low: float | None = None, high: float | None = None) -> dict:
    nan = math.nan
    return {"layer": layer, "lens": lens, "family": LENSES[lens][0], "estimate": float(est),
            "low": nan if low is None else float(low), "high": nan if high is None else float(high)}


def layer_table(p: Mapping[str, np.ndarray], layers: list[int], docs: np.ndarray, member_docs: np.ndarray | None,
                jac_docs: np.ndarray) -> pd.DataFrame:
    """Long table (layer, lens, family, estimate, low, high): the mean over documents of each document's
    mean with its 95% interval over documents (:func:`layerlab.report.inference.unit_interval`: exact
    sign-flip at 6-7 documents, Student-t otherwise);
    ablations are the paired per-window ΔNLL (ablated − clean NLL on the same window)."""
    rows = []
    has_members = "member_bias" in p  # absent where the members are undefined (measure.members_defined)
    gains = marginal_gains(p["summaries"], p["labels"])[1] if has_members else None
    recovery_frac = (recovery_fraction(p["noise_damage"], p["recovery_left"], p["recovery_drift"])
                     if "noise_damage" in p else None)
    for i, layer in enumerate(layers):
        for op in ("skip", "skip_attn", "skip_mlp", "neighbour_avg"):
            rows.append(_row(layer, op, *unit_interval(p[f"nll/{op}@{layer}"] - p["base"], docs)))
        for v in ("recompute", "frozen"):
            lens = p[f"lens_{v}"]
            rows.append(_row(layer, f"lens_drop_{v}", *unit_interval(lens[layer] - lens[layer + 1], docs)))
        for name in ("norm_growth", "block_influence", "angular_distance"):
            rows.append(_row(layer, name, *unit_interval(p[name][layer], docs)))
        for name in ("spectral_norm", "jacobian_fro"):
            rows.append(_row(layer, name, *unit_interval(p[name][:, i], jac_docs)))
        rows.append(_row(layer, "coupling", *unit_interval(p["coupling_null"][:, i] - p["coupling"][:, i], jac_docs)))
        if has_members:
            for kind, m in (("attn", 1 + 2 * layer), ("mlp", 2 + 2 * layer)):
                rows.append(_row(layer, f"{kind}_bias", *unit_interval(p["member_bias"][:, m], member_docs)))
                rows.append(_row(layer, f"{kind}_div", *unit_interval(p["member_div"][:, m], member_docs)))
            rows.append(_row(layer, "info_gain", gains[layer + 1]))
        rows.append(_row(layer, "weight_r2", p["weight_r2"][layer]))
        rows.append(_row(layer, "delta_corr", p["delta_corr"][layer]))
        if "noise_damage" in p:  # one fine-tune (and its control) per layer: no interval over documents
            rows.append(_row(layer, "noise_damage", p["noise_damage"][i]))
            rows.append(_row(layer, "recovery", recovery_frac[i]))
    return pd.DataFrame(rows)


def wide(table: pd.DataFrame) -> pd.DataFrame:
    """Layers (rows) x lenses (columns, in :data:`LENSES` order) of the estimates."""
    w = table.pivot(index="layer", columns="lens", values="estimate")
    return w[[c for c in LENSES if c in w.columns]]


def _usable(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3 or np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0:
        return np.zeros_like(ok)
    return ok


def agreement(w: pd.DataFrame, *, n_boot: int, n_perm: int, seed: int, alpha: float = 0.05) -> pd.DataFrame:
    """One row per lens pair: Spearman ρ over the layers where both are defined, bootstrap CI over layers,
    permutation p (``report.inference.correlation``), Holm-adjusted one-sided p over all pairs, a verdict
    (agree: ρ > 0 significant after Holm; opposite: ρ < 0 significant; no evidence) and its sentence."""
    cols = list(w.columns)
    pairs = [(a, b) for i, a in enumerate(cols) for b in cols[i + 1:]]
    usable = {(a, b): _usable(w[a].to_numpy(float), w[b].to_numpy(float)) for a, b in pairs}
    n_perm = permutations_for_holm(n_perm, sum(ok.sum() >= 3 for ok in usable.values()), alpha)
    rows, evs = [], []
    for a, b in pairs:
        x, y = w[a].to_numpy(float), w[b].to_numpy(float)
        ok = usable[(a, b)]
        ev = (correlation(x[ok], y[ok], unit="layers", n_boot=n_boot, n_perm=n_perm, seed=seed)
              if ok.sum() >= 3 else None)
        evs.append(ev)
        rows.append({"a": a, "b": b, "family_a": LENSES[a][0], "family_b": LENSES[b][0], "n": int(ok.sum())})
    df = pd.DataFrame(rows)
    have = [e is not None for e in evs]
    got: list[Evidence] = [e for e in evs if e is not None]
    for col, f in (("rho", lambda e: e.estimate), ("low", lambda e: e.low), ("high", lambda e: e.high),
                   ("p_greater", lambda e: e.p_greater), ("p_less", lambda e: e.p_less)):
        df[col] = [math.nan if e is None or f(e) is None else float(f(e)) for e in evs]
    df["p_holm_greater"] = math.nan
    df["p_holm_less"] = math.nan
    if got:
        df.loc[have, "p_holm_greater"] = holm([e.p_greater for e in got])
        df.loc[have, "p_holm_less"] = holm([e.p_less for e in got])
    a2 = alpha / 2
    df["verdict"] = np.where(df.p_holm_greater <= a2, "agree",
                             np.where(df.p_holm_less <= a2, "opposite", "no evidence"))
    df["sentence"] = [_sentence(r) for r in df.itertuples()]
    return df


def _sentence(r) -> str:
    if not np.isfinite(r.rho):
        return f"{r.a} and {r.b}: undefined (a lens is constant or missing on the measured layers)."
    ci = "" if not np.isfinite(r.low) else f" [{r.low:.2f}, {r.high:.2f}]"
    est = f"ρ = {r.rho:.2f}{ci} over {r.n} layers"
    if r.verdict == "agree":
        return f"{r.a} and {r.b} pick the same layers ({est}; Holm p = {r.p_holm_greater:.2g})."
    if r.verdict == "opposite":
        return f"{r.a} and {r.b} rank the layers in opposite order ({est}; Holm p = {r.p_holm_less:.2g})."
    return f"{r.a} and {r.b}: no evidence that they pick the same layers ({est})."


def tiers(w: pd.DataFrame, n_tiers: int, *, order_by: str = "skip") -> pd.DataFrame:
    """Agglomerative (Ward) clustering of the layers on every lens, each rank-normalised to (0, 1] (missing
    values at the middle rank). Tier 1 is the cluster with the largest mean ``order_by`` rank."""
    from scipy.cluster.hierarchy import fcluster, linkage

    r = w.rank(pct=True).fillna(0.5)
    n = len(r)
    if n < 2:
        return pd.DataFrame({"layer": r.index, "tier": 1})
    lab = fcluster(linkage(r.to_numpy(), method="ward"), t=min(n_tiers, n), criterion="maxclust")
    score = pd.Series(r[order_by].to_numpy(), index=lab).groupby(level=0).mean().sort_values(ascending=False)
    rename = {c: i + 1 for i, c in enumerate(score.index)}
    return pd.DataFrame({"layer": r.index.to_numpy(), "tier": [rename[c] for c in lab]})
