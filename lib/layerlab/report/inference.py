"""Evidence for a verdict, computed the way the design was run: over the real unit, paired, exact at small n.

Every function returns an :class:`Evidence`: the estimate, its 95% interval (or none), one-sided
p-values in both directions, the unit of resampling and its count ``n``, and the method used. The
method follows the number of units (the book's verdict standard):

* the p-values are permutation p-values (Good 2005, *Permutation, Parametric and Bootstrap Tests*,
  ch. 3): sign flips of per-unit differences for a mean, permutations of one variable for a
  correlation; **exact** (every flip / order enumerated) at small n, Monte Carlo above. Verdicts are
  taken on these p-values, so the smallest attainable p (``p_min``: ``2**-n`` for sign flips, ``1/n!``
  for a correlation) says when n units cannot support a claim at all (3 seeds: p >= 0.125);
* the interval of a mean below :data:`SMALL_N` units is the **exact sign-flip interval** wherever it is
  finite (6 and 7 units at 95%): the values of the mean that the two one-sided exact sign-flip tests do
  not reject, read off the ordered means of the 2**n - 1 non-empty subsets of units (Hartigan 1969, "Using
  subsample values as typical values", *J. Amer. Statist. Assoc.* 64, 1303-1317:
  :func:`sign_flip_interval`), so the shown interval and the test that decides a row cannot disagree. At
  2-5 units every mean is inside the exact 95% interval (no finite one exists, and no row can be decided
  whatever its interval), and from :data:`SMALL_N` units on, where the verdict standard no longer asks for
  exact methods, it is the Student-t interval (a rare disagreement with the test is then read as such by
  :class:`~layerlab.report.verdicts.Direction`). A correlation gets a percentile bootstrap over units
  (Efron & Tibshirani 1993, ch. 13) when n >= :data:`SMALL_N` and no interval below (a bootstrap of 4-7
  points is degenerate; a Fisher interval is wrong at that n).

:func:`held_out_peak_drop` removes the winner's curse of "the loss falls after its peak": the peak
depth is chosen on one half of the units and the drop is measured on the other half.
:func:`holm` adjusts a family of p-values (Holm 1979, *Scand. J. Statist.* 6, 65-70).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from layerlab.report.stats import as_numpy, resample_indices

__all__ = ["SMALL_N", "Evidence", "correlation", "held_out_peak_drop", "holm", "mean_effect", "mean_interval",
           "paired_difference", "permutations_for_holm", "sign_flip_interval", "unit_interval", "unit_trends"]

SMALL_N = 8
"""Below this many units, tests are exact (enumerated) and no percentile bootstrap is used."""

_EXACT_FLIPS = 12  # enumerate all 2**n sign flips up to this n (4,096 patterns)
_EXACT_PERMS = 8  # enumerate all n! permutations up to this n (40,320)


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """What a rule decides on.

    estimate: the effect (mean difference, correlation, ...); low/high: its 95% interval, or None when
    the design allows none (a correlation over fewer than :data:`SMALL_N` units); p_greater/p_less:
    one-sided p-values for "effect > null" and "effect < null"; unit: what was resampled
    ("documents", "prompts", "seeds", ...); n: how many; method: how the interval and p were obtained.
    """

    estimate: float
    low: float | None
    high: float | None
    p_greater: float
    p_less: float
    unit: str
    n: int
    method: str
    null: float = 0.0
    p_min: float = 0.0  # smallest p-value the test can attain at this n (exact tests); 0 when unbounded

    def __post_init__(self) -> None:
        if (self.low is None) != (self.high is None):
            raise ValueError("Evidence: give both low and high, or neither")
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"Evidence: low {self.low} > high {self.high}")
        if self.n < 1:
            raise ValueError(f"Evidence: n must be >= 1 unit, got {self.n}")

    @property
    def has_interval(self) -> bool:
        return self.low is not None


def _units(x: Any, what: str) -> np.ndarray:
    arr = as_numpy(x).ravel()
    if arr.size < 2:
        raise ValueError(f"{what} needs at least 2 units, got {arr.size}; add units (documents, prompts, seeds)")
    if not np.isfinite(arr).all():
        raise ValueError(f"{what}: values must be finite (drop NaN/inf units first and say so)")
    return arr


def _t_interval(d: np.ndarray, level: float) -> tuple[float, float]:
    from scipy.stats import t

    n = d.size
    half = t.ppf(0.5 + level / 2, n - 1) * d.std(ddof=1) / math.sqrt(n)
    m = float(d.mean())
    return m - float(half), m + float(half)


def _flip_patterns(n: int) -> np.ndarray:
    """[2**n, n] 0/1: row i flips the units whose bit is set in i (row 0 flips none)."""
    return (np.arange(2**n)[:, None] >> np.arange(n)[None]) & 1


def sign_flip_interval(d: Any, level: float = 0.95) -> tuple[float, float] | None:
    """The exact confidence interval of the mean of ``d`` ([n] per-unit values) obtained by inverting the
    sign-flip test (Hartigan 1969, *J. Amer. Statist. Assoc.* 64, 1303-1317: subset means as typical values),
    or None where it has no finite bounds (fewer units than the level needs: 2**-n > (1 - level) / 2) or
    n > 12 (the test is then Monte Carlo).

    For a candidate mean m and the flipped set F of a sign pattern, the flipped mean of ``d - m`` is at least
    the observed one exactly when mean_F(d) <= m, so the one-sided p-value of "mean > m" is
    (1 + #{F non-empty: mean_F(d) <= m}) / 2**n. Each one-sided test at (1 - level) / 2 therefore rejects
    exactly the m below the k-th smallest (above the k-th largest) of the 2**n - 1 subset means, k =
    floor(2**n (1 - level) / 2): those order statistics are the interval, and it excludes a null exactly when
    the test at that level rejects it (the :func:`mean_effect` p-values). Its coverage is at least
    1 - 2k / 2**n >= level whenever each unit's value is symmetric about the mean."""
    x = as_numpy(d).ravel()
    n = x.size
    k = math.floor(2**n * (1.0 - level) / 2) if n <= _EXACT_FLIPS else 0
    if k < 1:
        return None
    bits = _flip_patterns(n)[1:]  # [2**n - 1, n], every non-empty subset
    means = np.sort(bits @ x / bits.sum(1))
    return float(means[k - 1]), float(means[-k])


def mean_interval(d: Any, level: float = 0.95) -> tuple[float, float, str]:
    """(low, high, name) of the mean of per-unit values ``d`` ([n], n >= 2): below :data:`SMALL_N` units the
    exact sign-flip interval where it is finite (:func:`sign_flip_interval`), else the Student-t interval; a
    point when the units do not vary. The interval :func:`mean_effect` shows."""
    d = as_numpy(d).ravel()
    m = float(d.mean())
    if d.std() == 0:
        return m, m, "no spread over units"
    exact = sign_flip_interval(d, level) if d.size < SMALL_N else None
    if exact is not None:
        return exact[0], exact[1], "exact sign-flip interval"
    lo, hi = _t_interval(d, level)
    return lo, hi, "t-interval"


def unit_interval(x: Any, groups: Any, *, level: float = 0.95) -> tuple[float, float, float]:
    """(estimate, low, high): the mean of the per-unit means of ``x`` ([n] values, ``groups`` [n] the unit of
    each, e.g. its document) with the interval of :func:`mean_effect` over units (exact sign-flip at 6-7
    units, Student-t otherwise). Neither resamples, so both are valid at the few units (documents) where a
    percentile bootstrap is not (:data:`SMALL_N`); NaN values are dropped, and with fewer than 2 units (or
    no spread) the interval is NaN (or zero-width)."""
    v, g = as_numpy(x).ravel(), np.asarray(groups).ravel()
    if v.shape != g.shape:
        raise ValueError(f"unit_interval: {v.size} values but {g.size} unit labels")
    ok = np.isfinite(v)
    units = np.unique(g[ok])
    if units.size == 0:
        return math.nan, math.nan, math.nan
    means = np.array([v[ok & (g == u)].mean() for u in units])
    est = float(means.mean())
    if units.size < 2:
        return est, math.nan, math.nan
    lo, hi, _ = mean_interval(means, level)
    return est, lo, hi


def _sign_flip_p(d: np.ndarray, rng: np.random.Generator, n_perm: int) -> tuple[float, float, float, str]:
    """One-sided p-values of mean(d) under sign flips (the paired null: each unit's sign is exchangeable),
    the smallest attainable p, and the method."""
    n = d.size
    obs = d.mean()
    if n <= _EXACT_FLIPS:
        signs = 1.0 - 2.0 * _flip_patterns(n)  # [2**n, n], every pattern once
        stats_ = signs @ d / n
        eps = 1e-12 * max(1.0, float(np.abs(d).max()))
        return (float((stats_ >= obs - eps).mean()), float((stats_ <= obs + eps).mean()), 2.0**-n,
                f"exact sign-flip test (all {2 ** n} flips)")
    signs = rng.choice((1.0, -1.0), size=(n_perm, n))
    stats_ = signs @ d / n
    return (float((1 + (stats_ >= obs).sum()) / (n_perm + 1)), float((1 + (stats_ <= obs).sum()) / (n_perm + 1)),
            1 / (n_perm + 1), f"sign-flip test ({n_perm} random flips)")


def mean_effect(x: Any, *, null: float = 0.0, unit: str, n_boot: int = 2000, n_perm: int = 4000, seed: int = 0,
                level: float = 0.95, bounds: tuple[float, float] | None = None) -> Evidence:
    """Evidence that the mean of per-unit values ``x`` ([n], one value per unit) differs from ``null``:
    a sign-flip test of ``x - null`` (exact up to 12 units) and :func:`mean_interval`: the interval of the
    mean that inverts the test at 6-7 units (:func:`sign_flip_interval`), else the Student-t interval.
    ``n_boot`` is accepted for a uniform signature; a mean needs no bootstrap. ``bounds``: the range of the
    per-unit values (e.g. (-1, 1) for correlations); the interval is clipped to it."""
    del n_boot
    d = _units(x, "mean_effect") - null
    rng = np.random.default_rng(seed)
    p_g, p_l, p_min, how = _sign_flip_p(d, rng, n_perm)
    lo, hi, interval = mean_interval(d, level)
    if bounds is not None:
        lo, hi = max(lo, bounds[0] - null), min(hi, bounds[1] - null)
    return Evidence(estimate=float(d.mean()) + null, low=lo + null, high=hi + null, p_greater=p_g, p_less=p_l,
                    unit=unit, n=int(d.size), method=f"{interval}; {how}", null=null, p_min=p_min)


def paired_difference(a: Any, b: Any, *, unit: str, null: float = 0.0, **kw: Any) -> Evidence:
    """Evidence on mean(a - b) with a_i, b_i measured on the same unit i (same seed, prompt, tokens)."""
    a_, b_ = as_numpy(a).ravel(), as_numpy(b).ravel()
    if a_.shape != b_.shape:
        raise ValueError(f"paired_difference: a has {a_.size} units and b {b_.size}; pair them unit by unit")
    return mean_effect(a_ - b_, null=null, unit=unit, **kw)


def _rankdata(x: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(x)


def _pearson_rows(x: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Pearson r of x ([n]) with each row of ys ([m, n])."""
    xc = x - x.mean()
    yc = ys - ys.mean(axis=-1, keepdims=True)
    den = np.sqrt((xc @ xc) * (yc * yc).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, yc @ xc / np.where(den > 0, den, 1.0), np.nan)


def correlation(x: Any, y: Any, *, unit: str, kind: str = "spearman", n_boot: int = 2000, n_perm: int = 4000,
                seed: int = 0, level: float = 0.95) -> Evidence:
    """Evidence on the correlation of ``x`` and ``y`` over units (one (x_i, y_i) per unit).

    kind: "spearman" (mid-ranks) or "pearson". p-values from the permutation distribution of y
    (exact for n <= 8); the interval is a percentile bootstrap over units when n >= SMALL_N and none
    below it."""
    x_, y_ = _units(x, "correlation"), _units(y, "correlation")
    if x_.shape != y_.shape:
        raise ValueError(f"correlation: x has {x_.size} units and y {y_.size}")
    if kind not in ("spearman", "pearson"):
        raise ValueError(f"correlation kind must be 'spearman' or 'pearson', got {kind!r}")
    tr = _rankdata if kind == "spearman" else (lambda v: v)
    rx, ry = tr(x_), tr(y_)
    r = float(_pearson_rows(rx, ry[None])[0])
    if not np.isfinite(r):
        raise ValueError("correlation: x or y is constant over the units; the correlation is undefined")
    n = x_.size
    rng = np.random.default_rng(seed)
    if n <= _EXACT_PERMS:
        perms = np.array(list(itertools.permutations(range(n))))
        how = f"exact permutation test (all {len(perms)} orders)"
        p_min = 1 / len(perms)
    else:
        p_min = 1 / (n_perm + 1)
        perms = np.argsort(rng.random((n_perm, n)), axis=1)
        how = f"permutation test ({n_perm} random orders)"
    null_r = _pearson_rows(rx, ry[perms])
    eps = 1e-12
    k = len(perms)
    extra = 0 if n <= _EXACT_PERMS else 1
    p_g = float(((null_r >= r - eps).sum() + extra) / (k + extra))
    p_l = float(((null_r <= r + eps).sum() + extra) / (k + extra))
    lo = hi = None
    method = how
    if n >= SMALL_N:
        idx = resample_indices(n, n_boot, rng)
        bx, by = x_[idx], y_[idx]  # [n_boot, n]
        if kind == "spearman":
            from scipy.stats import rankdata

            bx, by = rankdata(bx, axis=1), rankdata(by, axis=1)
        bxc, byc = bx - bx.mean(1, keepdims=True), by - by.mean(1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            reps = (bxc * byc).sum(1) / np.sqrt((bxc * bxc).sum(1) * (byc * byc).sum(1))
        reps = reps[np.isfinite(reps)]
        a = (1 - level) / 2
        lo, hi = (float(v) for v in np.quantile(reps, [a, 1 - a]))
        method = f"percentile bootstrap over {unit} ({n_boot}); {how}"
    return Evidence(estimate=r, low=lo, high=hi, p_greater=p_g, p_less=p_l, unit=unit, n=n, method=method,
                    p_min=p_min)


def held_out_peak_drop(curves: Any, *, unit: str, seed: int = 0, **kw: Any) -> Evidence:
    """Evidence that a per-unit curve falls after its peak, free of the winner's curse.

    curves: [n_units, n_depths], e.g. one accuracy-by-depth curve per document. The units are split
    in two halves at random (``seed``); the peak depth is the argmax of the mean curve of the first
    half, and the drop ``curve[peak] - curve[-1]`` is measured per unit on the second half only
    (:func:`mean_effect`, null 0). Choosing and measuring on the same units makes a drop appear
    even when the true curve never falls."""
    c = as_numpy(curves)
    if c.ndim != 2 or c.shape[0] < 4 or c.shape[1] < 2:
        raise ValueError(f"held_out_peak_drop needs curves [n_units >= 4, n_depths >= 2], got shape {c.shape}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(c.shape[0])
    half = c.shape[0] // 2
    choose, measure = order[:half], order[half:]
    peak = int(np.argmax(c[choose].mean(axis=0)))
    drops = c[measure, peak] - c[measure, -1]
    ev = mean_effect(drops, unit=f"{unit} (held-out half; peak depth {peak} chosen on the other half)",
                     seed=seed, **kw)
    return ev


def permutations_for_holm(n_perm: int, m: int, alpha: float = 0.05) -> int:
    """Random permutations a family of ``m`` one-sided tests at level ``alpha / 2`` needs so that its
    smallest Holm-adjusted p, ``m / (n_perm + 1)``, can reach half that level: ``max(n_perm, 4m / alpha)``.
    With fewer, no pair can ever be significant (171 pairs at 2,000 permutations: the smallest adjusted
    p is 0.085 > 0.025), and the rule has no power by construction."""
    return max(int(n_perm), math.ceil(4 * max(m, 1) / alpha))


def holm(pvalues: Any) -> np.ndarray:
    """Holm step-down adjusted p-values (Holm 1979): controls the family-wise error rate of a family
    of tests (e.g. one per layer) at the nominal level without independence assumptions."""
    p = as_numpy(pvalues).ravel()
    if p.size == 0:
        raise ValueError("holm needs at least one p-value")
    if ((p < 0) | (p > 1)).any():
        raise ValueError("holm: p-values must lie in [0, 1]")
    m = p.size
    order = np.argsort(p)
    adj = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    return out


def unit_trends(curves: Any, *, kind: str = "spearman") -> np.ndarray:
    """Per-unit rank correlation of a curve with its index: ``curves`` [n_units, n_points] -> [n_units].

    The unit-level statistic of a trend claim ("the loss falls with depth"): one Spearman rho per
    document (or prompt, seed), so that the claim is then tested over units with :func:`mean_effect`
    rather than over the points of one averaged curve (whose n is the number of depths, not of units)."""
    c = as_numpy(curves)
    if c.ndim != 2 or c.shape[1] < 3:
        raise ValueError(f"unit_trends needs curves [n_units, n_points >= 3], got shape {c.shape}")
    if kind not in ("spearman", "pearson"):
        raise ValueError(f"kind must be 'spearman' or 'pearson', got {kind!r}")
    x = np.arange(c.shape[1], dtype=np.float64)
    if kind == "spearman":
        from scipy.stats import rankdata

        c = rankdata(c, axis=1)
    return _pearson_rows(x, c)
