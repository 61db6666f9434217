"""Evidence for statistics that are not a plain mean or a plain correlation: a partial correlation over
units with a Freedman-Lane permutation test, and any statistic of a resampled set of units (a depth
curve's lag, a correlation across depths of per-unit means) with a percentile bootstrap over those units.

Both return :class:`layerlab.report.inference.Evidence`, so the rules of :mod:`layerlab.report.verdicts`
decide on them like on any other evidence; the calibration appendix simulates each design at the
chapters' real n (cases labelled "diversity ..." in ``chapters/calibration/presets.py``).

* :func:`partial_correlation`: Pearson r of x and y after regressing both on z (and a constant). The
  p-values permute the residuals of y given z (Freedman & Lane 1983, *J. Bus. Econ. Stat.* 1, 292-298;
  Anderson & Robinson 2001, *Aust. N. Z. J. Stat.* 43, 75-88), the interval is a percentile bootstrap of
  the units with the regression refitted in every replicate.
* :func:`curve_partial_correlation`: the partial correlation, across the points of a curve (depths), of
  two per-unit curves averaged over units, given depth; p is the larger of the bootstrap p over units
  (the curves re-averaged) and the Freedman-Lane p over depths (:func:`larger_p`): the first treats the
  depths as fixed, the second as exchangeable, and a verdict needs both.
* :func:`lag`: how many depths the half-way point of a rising curve trails that of a falling one.
* :func:`bootstrap_evidence`: ``stat(idx)`` evaluated on the units and on ``n_boot`` resamples of them
  (Efron & Tibshirani 1993, ch. 13 and ch. 16 for the bootstrap test). One-sided p-values are the share
  of replicates at or beyond the null on the other side, ``(1 + #)/(B + 1)``: the test that inverts the
  percentile interval.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from layerlab.report.inference import SMALL_N, Evidence
from layerlab.report.stats import as_numpy, resample_indices

__all__ = ["bootstrap_evidence", "curve_partial_correlation", "evidence_from_replicates", "half_change_depth",
           "lag", "larger_p", "partial_correlation", "residualise"]


def residualise(x: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Residuals of x ([n] or [B, n]) after a least-squares fit on the columns of z ([n] or [n, q]) and a
    constant."""
    z = np.asarray(z, dtype=np.float64)
    Z = np.column_stack([np.ones(z.shape[0]), z.reshape(z.shape[0], -1)])  # [n, q + 1]
    Q, _ = np.linalg.qr(Z)  # [n, q + 1], orthonormal columns
    return x - (x @ Q) @ Q.T


def _r(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson r along the last axis (rows of a and b paired)."""
    ac = a - a.mean(-1, keepdims=True)
    bc = b - b.mean(-1, keepdims=True)
    den = np.sqrt((ac * ac).sum(-1) * (bc * bc).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (ac * bc).sum(-1) / np.where(den > 0, den, 1.0), np.nan)


def partial_correlation(x: Any, y: Any, z: Any, *, unit: str, n_boot: int = 1000, n_perm: int = 2000,
                        seed: int = 0, level: float = 0.95, rank: bool = False) -> Evidence:
    """Evidence on the partial correlation r(x, y | z) over units (one (x_i, y_i, z_i) per unit).

    x, y: [n]; z: [n] or [n, q] (the controls). ``rank=True`` uses ranks of x, y and z (a partial
    Spearman). p-values: Freedman-Lane permutations of the residuals of y given z; the interval: a
    percentile bootstrap over units (none below :data:`SMALL_N` units)."""
    x_, y_ = as_numpy(x).ravel(), as_numpy(y).ravel()
    z_ = as_numpy(z)
    z_ = z_.reshape(z_.shape[0], -1)
    n = x_.size
    if y_.size != n or z_.shape[0] != n:
        raise ValueError(f"partial_correlation: x, y and z need one value per unit, got {n}, {y_.size}, {z_.shape[0]}")
    if n < 4:
        raise ValueError(f"partial_correlation needs at least 4 units, got {n}")
    if not (np.isfinite(x_).all() and np.isfinite(y_).all() and np.isfinite(z_).all()):
        raise ValueError("partial_correlation: values must be finite (drop NaN/inf units first and say so)")
    if rank:
        from scipy.stats import rankdata

        x_, y_ = rankdata(x_), rankdata(y_)
        z_ = np.column_stack([rankdata(c) for c in z_.T])
    rx, ry = residualise(x_, z_), residualise(y_, z_)
    r = float(_r(rx, ry))
    if not np.isfinite(r):
        raise ValueError("partial_correlation: x or y is constant given z; the partial correlation is undefined")
    rng = np.random.default_rng(seed)
    perms = np.argsort(rng.random((n_perm, n)), axis=1)  # [n_perm, n]
    null = _r(rx[None], ry[perms])  # residuals of x are already orthogonal to z
    eps = 1e-12
    p_g = float((1 + np.sum(null >= r - eps)) / (n_perm + 1))
    p_l = float((1 + np.sum(null <= r + eps)) / (n_perm + 1))
    lo = hi = None
    how = f"Freedman-Lane permutation test ({n_perm} permutations)"
    if n >= SMALL_N:
        idx = resample_indices(n, n_boot, rng)  # [B, n]
        reps = np.array([float(_r(residualise(x_[i], z_[i]), residualise(y_[i], z_[i]))) for i in idx])
        reps = reps[np.isfinite(reps)]
        a = (1 - level) / 2
        lo, hi = (float(v) for v in np.quantile(reps, [a, 1 - a]))
        how = f"percentile bootstrap over {unit} ({n_boot}); {how}"
    return Evidence(estimate=r, low=lo, high=hi, p_greater=p_g, p_less=p_l, unit=unit, n=n, method=how,
                    p_min=1 / (n_perm + 1))


def bootstrap_evidence(stat: Callable[[np.ndarray], float], n: int, *, unit: str, n_boot: int = 1000, seed: int = 0,
                       null: float = 0.0, level: float = 0.95, groups: Any = None) -> Evidence:
    """Evidence on ``stat(idx)``, a statistic of the units ``idx`` (an index array into ``n`` units).

    The estimate is ``stat(arange(n))``; the interval and the one-sided p-values come from ``n_boot``
    resamples of the units (of whole ``groups`` when given, e.g. documents). Replicates where the
    statistic is undefined (NaN) count against the claim in both directions. Needs >= :data:`SMALL_N`
    units: below that a percentile bootstrap is degenerate."""
    if n < SMALL_N:
        raise ValueError(f"bootstrap_evidence needs at least {SMALL_N} {unit}, got {n}; use an exact test")
    est = float(stat(np.arange(n)))
    rng = np.random.default_rng(seed)
    reps = np.array([float(stat(i)) for i in resample_indices(n, n_boot, rng, groups=groups)])
    return evidence_from_replicates(est, reps, unit=unit, n=n, null=null, level=level)


def evidence_from_replicates(estimate: float, reps: Any, *, unit: str, n: int, null: float = 0.0,
                             level: float = 0.95) -> Evidence:
    """:class:`Evidence` from an estimate and its bootstrap replicates ``reps`` [B] (computed elsewhere,
    e.g. vectorised): percentile interval, bootstrap-test p-values; NaN replicates count against the
    claim in both directions."""
    est = float(estimate)
    if not np.isfinite(est):
        raise ValueError("bootstrap evidence: the statistic is undefined on the observed units")
    reps = np.asarray(reps, dtype=np.float64).ravel()
    ok = np.isfinite(reps)
    a = (1 - level) / 2
    lo, hi = (float(v) for v in np.quantile(reps[ok], [a, 1 - a])) if ok.any() else (est, est)
    lo, hi = min(lo, est), max(hi, est)
    bad = ~ok
    b = reps.size
    p_g = float((1 + np.sum((reps <= null) | bad)) / (b + 1))
    p_l = float((1 + np.sum((reps >= null) | bad)) / (b + 1))
    return Evidence(estimate=est, low=lo, high=hi, p_greater=p_g, p_less=p_l, unit=unit, n=n,
                    method=f"percentile bootstrap over {unit} ({b}); bootstrap test", null=null, p_min=1 / (b + 1))


def larger_p(boot: Evidence, perm: Evidence, *, unit: str) -> Evidence:
    """``boot``'s estimate and interval with each one-sided p the larger of the two tests' (both must
    reject); the unit names both resamplings."""
    return Evidence(estimate=boot.estimate, low=boot.low, high=boot.high, p_greater=max(boot.p_greater, perm.p_greater),
                    p_less=max(boot.p_less, perm.p_less), unit=unit, n=boot.n,
                    method=f"{boot.method}; {perm.method}; p = the larger of the two", null=boot.null,
                    p_min=max(boot.p_min, perm.p_min))


def _partial_r(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> float:
    rx, ry = residualise(x, z), residualise(y, z)
    den = np.sqrt((rx @ rx) * (ry @ ry))
    return float(rx @ ry / den) if den > 0 else float("nan")


def curve_partial_correlation(x: Any, y: Any, z: Any = None, *, unit: str, rank: bool = False, n_boot: int = 1000,
                              n_perm: int = 2000, seed: int = 0) -> Evidence:
    """Partial correlation across K depths of the unit-mean curves of ``x`` and ``y`` ([n, K] each) given
    ``z`` ([K] or [K, q]; default a cubic polynomial in depth: a linear control leaves a curved shared
    trend in both residuals, which alone makes curves that rise and fall together correlate), with
    :func:`larger_p` of a bootstrap over the n units and a Freedman-Lane permutation over the K depths."""
    x_, y_ = as_numpy(x), as_numpy(y)
    if x_.ndim != 2 or x_.shape != y_.shape:
        raise ValueError(f"curve_partial_correlation needs x, y [n_units, n_depths] of one shape, got {x_.shape}, "
                         f"{y_.shape}")
    n, K = x_.shape
    from scipy.stats import rankdata

    tr = rankdata if rank else np.asarray
    if z is None:
        t = np.linspace(-1.0, 1.0, K)
        z_ = np.column_stack([t, t**2, t**3])  # [K, 3]
    else:
        z_ = as_numpy(z).reshape(K, -1)
        z_ = np.column_stack([tr(c) for c in z_.T])

    def stat(i: np.ndarray) -> float:
        return _partial_r(tr(x_[i].mean(0)), tr(y_[i].mean(0)), z_)

    boot = bootstrap_evidence(stat, n, unit=unit, n_boot=n_boot, seed=seed)
    perm = partial_correlation(tr(x_.mean(0)), tr(y_.mean(0)), z_, unit="depths", n_perm=n_perm, n_boot=100,
                               seed=seed)
    return larger_p(boot, perm, unit=f"{unit} (CI); {K} depths (permutation)")


def half_change_depth(curve: Any) -> float:
    """The (linearly interpolated) depth at which ``curve`` [K] first covers half of its change from the
    first to the last depth; NaN when it ends where it started."""
    c = as_numpy(curve).ravel()
    total = c[-1] - c[0]
    if not np.isfinite(total) or abs(total) <= 1e-12 * max(1.0, float(np.abs(c).max())):
        return float("nan")
    s = np.sign(total) * (c - c[0]) - 0.5 * abs(total)  # crosses 0 upward at the half-way point
    k = int(np.argmax(s >= 0))
    if k == 0:
        return 0.0
    return float(k - 1 + (-s[k - 1]) / (s[k] - s[k - 1]))


def lag(falling: Any, rising: Any) -> float:
    """Half-change depth of ``rising`` minus that of ``falling`` (mean curves [K]); NaN unless the first
    falls and the second rises overall."""
    f, r = as_numpy(falling).ravel(), as_numpy(rising).ravel()
    if not (f[-1] < f[0] and r[-1] > r[0]):
        return float("nan")
    return half_change_depth(r) - half_change_depth(f)
