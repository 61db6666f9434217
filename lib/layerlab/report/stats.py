"""Confidence intervals and correlations shared by every chapter (generic numpy; tensors accepted).

* :func:`bootstrap_ci`: percentile bootstrap (Efron & Tibshirani 1993, ch. 13) of any statistic, with
  an optional cluster bootstrap over ``groups`` (resample whole groups, e.g. documents or prompts,
  when examples inside a group are correlated).
* :func:`paired_bootstrap_ci`: CI of ``stat(a) - stat(b)`` resampling pairs jointly.
* :func:`pearson`, :func:`spearman`: correlation with a Fisher-z CI (Spearman: Bonett & Wright 2000
  standard error) or a bootstrap CI, and the usual two-sided p-value.
* :func:`r2_ci`: coefficient of determination ``1 - SSE/SST`` with a bootstrap CI over examples.

Every function takes a ``seed`` and is deterministic given it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = ["CI", "Corr", "as_numpy", "bootstrap_ci", "paired_bootstrap_ci", "pearson", "r2", "r2_ci", "spearman"]


class CI(NamedTuple):
    """A point estimate with a two-sided confidence interval."""

    estimate: float
    low: float
    high: float

    def excludes(self, value: float = 0.0) -> bool:
        """True when ``value`` lies outside [low, high]."""
        return not (self.low <= value <= self.high)

    def fmt(self, digits: int = 3) -> str:
        return f"{self.estimate:.{digits}g} [{self.low:.{digits}g}, {self.high:.{digits}g}]"


class Corr(NamedTuple):
    """A correlation coefficient ``r`` with its CI [low, high] and two-sided p-value ``p``."""

    r: float
    low: float
    high: float
    p: float


def as_numpy(x: Any, dtype: Any = np.float64) -> np.ndarray:
    """numpy copy of a list, array or torch tensor (detached, on CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def _check_level(level: float) -> tuple[float, float]:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), e.g. 0.95; got {level}")
    a = (1 - level) / 2
    return 100 * a, 100 * (1 - a)


def resample_indices(n: int, n_boot: int, rng: np.random.Generator,
                     groups: np.ndarray | None = None) -> list[np.ndarray] | np.ndarray:
    """Bootstrap replicate indices: [n_boot, n] rows drawn with replacement, or (``groups``) one
    index array per replicate made of whole groups drawn with replacement (cluster bootstrap).
    The one resampling routine of the library: every bootstrap draws its replicates here."""
    if groups is None:
        return rng.integers(0, n, size=(n_boot, n))
    _, inv = np.unique(groups, return_inverse=True)
    members = [np.flatnonzero(inv == g) for g in range(inv.max() + 1)]
    picks = rng.integers(0, len(members), size=(n_boot, len(members)))
    return [np.concatenate([members[g] for g in row]) for row in picks]


def bootstrap_ci(x: Any, stat: Callable[[np.ndarray], float] = np.mean, *, n_boot: int = 2000, seed: int = 0,
                 groups: Sequence[Any] | np.ndarray | None = None, level: float = 0.95) -> CI:
    """Percentile-bootstrap CI of ``stat(x)``; rows of ``x`` (axis 0) are resampled.

    x: [n] or [n, ...] (2-D lets ``stat`` combine columns, e.g. a ratio of sums);
    groups: [n] labels for a cluster bootstrap (whole groups are resampled with replacement).

    Efron & Tibshirani 1993, ch. 13 (percentile bootstrap; cluster bootstrap over ``groups``).
    """
    arr = as_numpy(x)
    n = arr.shape[0] if arr.ndim else 0
    if n < 2:
        raise ValueError(f"bootstrap needs at least 2 observations, got {n}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    g = None if groups is None else np.asarray(groups)
    if g is not None and g.shape[0] != n:
        raise ValueError(f"groups has {g.shape[0]} labels for {n} observations")
    lo_q, hi_q = _check_level(level)
    rng = np.random.default_rng(seed)
    est = float(stat(arr))
    idx = resample_indices(n, n_boot, rng, g)
    if stat is np.mean and g is None and arr.ndim == 1:  # vectorised fast path, in chunks
        reps = np.concatenate([arr[idx[i:i + 256]].mean(axis=1) for i in range(0, n_boot, 256)])
    else:
        reps = np.array([float(stat(arr[i])) for i in idx])
    low, high = np.percentile(reps, [lo_q, hi_q])
    return CI(est, float(low), float(high))


def paired_bootstrap_ci(a: Any, b: Any, stat: Callable[[np.ndarray], float] = np.mean, *, n_boot: int = 2000,
                        seed: int = 0, groups: Sequence[Any] | np.ndarray | None = None,
                        level: float = 0.95) -> CI:
    """CI of ``stat(a) - stat(b)`` with pairs (a_i, b_i) resampled jointly (a, b: [n]).

    Efron & Tibshirani 1993, ch. 13.
    """
    a_, b_ = as_numpy(a), as_numpy(b)
    if a_.shape != b_.shape:
        raise ValueError(f"paired samples must have the same shape, got {a_.shape} and {b_.shape}")
    both = np.stack([a_, b_], axis=1)  # [n, 2, ...]
    return bootstrap_ci(both, lambda z: float(stat(z[:, 0]) - stat(z[:, 1])), n_boot=n_boot, seed=seed,
                        groups=groups, level=level)


def _xy(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    x_, y_ = as_numpy(x).ravel(), as_numpy(y).ravel()
    if x_.shape != y_.shape:
        raise ValueError(f"x and y must have the same length, got {x_.size} and {y_.size}")
    if x_.size < 4:
        raise ValueError(f"a correlation CI needs at least 4 pairs, got {x_.size}")
    if not (np.isfinite(x_).all() and np.isfinite(y_).all()):
        raise ValueError("x and y must be finite (drop NaN/inf pairs first)")
    return x_, y_


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    xc, yc = x - x.mean(), y - y.mean()
    den = np.sqrt((xc @ xc) * (yc @ yc))
    return float(xc @ yc / den) if den > 0 else float("nan")


def _rank(x: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(x)


def _fisher(r: float, n: int, level: float, se: float) -> tuple[float, float]:
    from scipy.stats import norm

    z = np.arctanh(np.clip(r, -1 + 1e-15, 1 - 1e-15))
    q = norm.ppf(0.5 + level / 2)
    return float(np.tanh(z - q * se)), float(np.tanh(z + q * se))


def _boot_corr(x: np.ndarray, y: np.ndarray, f: Callable, n_boot: int, seed: int,
               level: float) -> tuple[float, float]:
    ci = bootstrap_ci(np.stack([x, y], 1), lambda z: f(z[:, 0], z[:, 1]), n_boot=n_boot, seed=seed,
                      level=level)
    return ci.low, ci.high


def pearson(x: Any, y: Any, *, method: str = "fisher", n_boot: int = 2000, seed: int = 0,
            level: float = 0.95) -> Corr:
    """Pearson r with a Fisher-z CI (se = 1/sqrt(n-3)) or a pairs bootstrap CI (``method="bootstrap"``)."""
    from scipy.stats import pearsonr

    x_, y_ = _xy(x, y)
    r = _corr(x_, y_)
    p = float(pearsonr(x_, y_).pvalue) if np.isfinite(r) else float("nan")
    if method == "fisher":
        lo, hi = _fisher(r, x_.size, level, 1 / np.sqrt(x_.size - 3))
    elif method == "bootstrap":
        lo, hi = _boot_corr(x_, y_, _corr, n_boot, seed, level)
    else:
        raise ValueError(f"unknown method {method!r}: use 'fisher' or 'bootstrap'")
    return Corr(r, lo, hi, p)


def spearman(x: Any, y: Any, *, method: str = "fisher", n_boot: int = 2000, seed: int = 0,
             level: float = 0.95) -> Corr:
    """Spearman rho (Pearson r of mid-ranks) with a Fisher-z CI using the Bonett-Wright standard error
    sqrt((1 + rho^2 / 2) / (n - 3)), or a pairs bootstrap CI."""
    from scipy.stats import spearmanr

    x_, y_ = _xy(x, y)
    rho = _corr(_rank(x_), _rank(y_))
    p = float(spearmanr(x_, y_).pvalue) if np.isfinite(rho) else float("nan")
    if method == "fisher":
        lo, hi = _fisher(rho, x_.size, level, np.sqrt((1 + rho**2 / 2) / (x_.size - 3)))
    elif method == "bootstrap":
        lo, hi = _boot_corr(x_, y_, lambda a, b: _corr(_rank(a), _rank(b)), n_boot, seed, level)
    else:
        raise ValueError(f"unknown method {method!r}: use 'fisher' or 'bootstrap'")
    return Corr(rho, lo, hi, p)


def r2(y: Any, yhat: Any) -> float:
    """Coefficient of determination 1 - sum (y - yhat)^2 / sum (y - mean y)^2."""
    y_, p_ = as_numpy(y).ravel(), as_numpy(yhat).ravel()
    sst = float(((y_ - y_.mean()) ** 2).sum())
    return 1.0 - float(((y_ - p_) ** 2).sum()) / sst if sst > 0 else float("nan")


def r2_ci(y: Any, yhat: Any, *, n_boot: int = 2000, seed: int = 0, groups: Any = None,
          level: float = 0.95) -> CI:
    """R^2 of predictions ``yhat`` for ``y`` ([n] each) with a bootstrap CI over examples (or groups).

    Percentile bootstrap: Efron & Tibshirani 1993, ch. 13.
    """
    y_, p_ = _xy(y, yhat)
    return bootstrap_ci(np.stack([y_, p_], 1), lambda z: r2(z[:, 0], z[:, 1]), n_boot=n_boot, seed=seed,
                        groups=groups, level=level)
