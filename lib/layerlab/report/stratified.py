"""Evidence from tests that permute *within* strata (seeds), for designs that nest points in units.

A family of models trained with 3 seeds x 6 depths is not 18 independent members: members of one
seed share the data order and initialisation stream, so a correlation over the 18 points is
pseudo-replicated. The honest tests here keep the strata apart (Good 2005, *Permutation,
Parametric and Bootstrap Tests*, sec. 3.5 and 5.2, "stratified" / "synchronised" permutations):

* :func:`stratified_correlation`: the rank correlation computed within each stratum and averaged;
  its null permutes y within each stratum (depth order scrambled inside a seed, never across seeds).
  The interval is the Student-t interval over the per-stratum correlations (n = strata).
* :func:`combined_null`: a statistic computed per stratum with its own permutation null draws (e.g.
  a layer-order permutation per seed): the mean over strata against the mean of independent null
  draws, one per stratum.

Both return :class:`~layerlab.report.inference.Evidence` with ``unit`` the strata, ``n`` their
number, and p-values whose resolution is the number of permutations.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from layerlab.report.inference import Evidence
from layerlab.report.stats import as_numpy

__all__ = ["combined_null", "stratified_correlation"]


def _t(values: np.ndarray, level: float = 0.95) -> tuple[float | None, float | None]:
    if values.size < 2:
        return None, None
    from scipy.stats import t

    m = float(values.mean())
    sd = float(values.std(ddof=1))
    if sd == 0:
        return m, m
    half = float(t.ppf(0.5 + level / 2, values.size - 1)) * sd / math.sqrt(values.size)
    return max(-1.0, m - half), min(1.0, m + half)


def _ranks(v: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(v, axis=-1)


def _corr_rows(x: np.ndarray, ys: np.ndarray) -> np.ndarray:
    xc = x - x.mean()
    yc = ys - ys.mean(axis=-1, keepdims=True)
    den = np.sqrt((xc @ xc) * (yc * yc).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, yc @ xc / np.where(den > 0, den, 1.0), np.nan)


def stratified_correlation(x: Any, y: Any, strata: Any, *, unit: str, kind: str = "spearman", n_perm: int = 4000,
                           seed: int = 0, min_points: int = 3) -> Evidence:
    """Mean within-stratum correlation of x and y (one point per member; ``strata`` labels the seed
    of each member), tested by permuting y within every stratum.

    Strata with fewer than ``min_points`` points, or with constant x or y, are left out (they carry
    no within-stratum order). ``unit`` names the strata ("seeds"); ``n`` is the number kept."""
    x_, y_, s_ = as_numpy(x).ravel(), as_numpy(y).ravel(), np.asarray(strata).ravel()
    if not (x_.size == y_.size == s_.size):
        raise ValueError(f"stratified_correlation: x, y and strata differ in length ({x_.size}, {y_.size}, {s_.size})")
    if not (np.isfinite(x_).all() and np.isfinite(y_).all()):
        raise ValueError("stratified_correlation: x and y must be finite (drop missing members first and say so)")
    if kind not in ("spearman", "pearson"):
        raise ValueError(f"kind must be 'spearman' or 'pearson', got {kind!r}")
    rng = np.random.default_rng(seed)
    obs, nulls, sizes = [], [], []
    for s in dict.fromkeys(s_.tolist()):
        sel = s_ == s
        xs, ys = x_[sel], y_[sel]
        if xs.size < min_points or np.ptp(xs) == 0 or np.ptp(ys) == 0:
            continue
        if kind == "spearman":
            xs, ys = _ranks(xs), _ranks(ys)
        obs.append(float(_corr_rows(xs, ys[None])[0]))
        perms = np.argsort(rng.random((n_perm, xs.size)), axis=1)
        nulls.append(_corr_rows(xs, ys[perms]))  # [n_perm]
        sizes.append(int(xs.size))
    if not obs:
        raise ValueError(f"stratified_correlation: no stratum has >= {min_points} points with varying x and y")
    r = np.array(obs)
    null = np.mean(nulls, axis=0)  # [n_perm]: one independent within-stratum permutation per stratum
    est = float(r.mean())
    eps = 1e-12
    p_g = float((1 + (null >= est - eps).sum()) / (n_perm + 1))
    p_l = float((1 + (null <= est + eps).sum()) / (n_perm + 1))
    lo, hi = _t(r)
    pts = "+".join(str(k) for k in sizes) if len(set(sizes)) > 1 else f"{sizes[0]} each"
    return Evidence(estimate=est, low=lo, high=hi, p_greater=p_g, p_less=p_l, unit=unit, n=len(obs),
                    method=f"mean within-{unit} {kind} ({pts} points); t-interval over {unit}; "
                    f"within-{unit} permutation test ({n_perm} random orders)", p_min=1 / (n_perm + 1))


def combined_null(observed: Any, null_draws: Any, *, unit: str, what: str = "permutation") -> Evidence:
    """Mean of a per-stratum statistic against the mean of per-stratum null draws.

    observed: [n_strata]; null_draws: [n_strata, n_perm] (draw b of every stratum is combined into the
    b-th null mean, so the strata's nulls stay independent). Interval: t over strata (None below 2)."""
    o = as_numpy(observed).ravel()
    N = as_numpy(null_draws)
    if N.ndim != 2 or N.shape[0] != o.size or N.shape[1] < 19:
        raise ValueError(f"combined_null: null_draws must be [{o.size}, >= 19], got {N.shape}")
    if not (np.isfinite(o).all() and np.isfinite(N).all()):
        raise ValueError("combined_null: values must be finite")
    est = float(o.mean())
    null = N.mean(axis=0)
    k = null.size
    p_g = float((1 + (null >= est).sum()) / (k + 1))
    p_l = float((1 + (null <= est).sum()) / (k + 1))
    if o.size >= 2:
        from scipy.stats import t

        sd = float(o.std(ddof=1))
        half = float(t.ppf(0.975, o.size - 1)) * sd / math.sqrt(o.size)
        lo, hi = est - half, est + half
    else:
        lo = hi = None
    return Evidence(estimate=est, low=lo, high=hi, p_greater=p_g, p_less=p_l, unit=unit, n=int(o.size),
                    method=f"t-interval over {unit}; {what} null per {unit} ({k} draws), combined by the mean",
                    p_min=1 / (k + 1))
