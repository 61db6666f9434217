"""Which curve fits a unit's data best, judged on held-out points: model comparison by leave-one-out error.

A claim like "step norms grow *exponentially* with depth" is a claim about the shape of a curve, and a
positive log-slope does not test it: linear and power-law growth have one too. The honest test
compares candidate shapes by how well each predicts a point it was not fitted on (leave-one-out
cross-validation; Stone 1974, *J. R. Statist. Soc. B* 36, 111-147; Hastie, Tibshirani & Friedman 2009,
*The Elements of Statistical Learning*, sec. 7.10).

* :data:`GROWTH_MODELS`: exponential ``y = a e^{b x}``, linear ``y = a + b x`` and power law
  ``y = a x^b`` (x > 0), each a two-parameter least-squares fit. Exponential and power law are fitted
  on ``log y``; the linear model on ``y``. Every model's error is measured on the same scale,
  ``log y`` (the growth claims are multiplicative), so the three are comparable.
* :func:`loo_errors`: per unit (prompt, document), the mean squared leave-one-point-out error of each
  model: ``[n_units, n_models]``.
* :func:`preference`: the per-unit log ratio of the best competitor's held-out error to the claimed
  model's (> 0: the claimed model predicts held-out points better), the statistic a
  :class:`~layerlab.report.verdicts.Direction` rule decides on over units (with a margin for "clearly").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from layerlab.report.stats import as_numpy

__all__ = ["GROWTH_MODELS", "Fit", "loo_errors", "preference", "winners"]

Fit = Callable[[np.ndarray, np.ndarray], Callable[[np.ndarray], np.ndarray]]
"""A model: ``fit(x, y) -> predict`` where ``predict(x_new)`` returns predicted y (> 0 for growth models)."""


def _line(u: np.ndarray, v: np.ndarray) -> tuple[float, float]:
    """Least-squares intercept and slope of v on u."""
    A = np.column_stack([np.ones_like(u), u])
    (a, b), *_ = np.linalg.lstsq(A, v, rcond=None)
    return float(a), float(b)


def _exponential(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    a, b = _line(x, np.log(y))
    return lambda t: np.exp(a + b * t)


def _linear(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    a, b = _line(x, y)
    return lambda t: a + b * t


def _power(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    if (x <= 0).any():
        raise ValueError("the power law y = a x^b needs x > 0 (number layers from 1)")
    a, b = _line(np.log(x), np.log(y))
    return lambda t: np.exp(a + b * np.log(t))


GROWTH_MODELS: dict[str, Fit] = {"exponential": _exponential, "linear": _linear, "power law": _power}
"""The growth shapes a "grows exponentially" claim must beat (two parameters each)."""


def _log_error(pred: np.ndarray, y: np.ndarray, floor: float) -> np.ndarray:
    """Squared error on log y; a non-positive prediction (a linear fit below zero) is floored."""
    return (np.log(np.maximum(pred, floor)) - np.log(y)) ** 2


def loo_errors(x: Any, ys: Any, models: Mapping[str, Fit] = GROWTH_MODELS) -> np.ndarray:
    """Leave-one-out mean squared error on ``log y`` of each model, per unit.

    x: [n_points] (e.g. layer index 1..L, > 0 for the power law); ys: [n_units, n_points] positive
    values (one curve per prompt). Returns [n_units, len(models)] in the order of ``models``."""
    x_ = as_numpy(x).ravel()
    Y = as_numpy(ys)
    if Y.ndim == 1:
        Y = Y[None]
    if Y.ndim != 2 or Y.shape[1] != x_.size:
        raise ValueError(f"loo_errors: ys must be [n_units, {x_.size}] to match x, got shape {Y.shape}")
    if x_.size < 4:
        raise ValueError(f"loo_errors needs >= 4 points per unit to leave one out of a 2-parameter fit, got {x_.size}")
    if not (np.isfinite(Y).all() and (Y > 0).all()):
        raise ValueError("loo_errors: growth curves must be finite and > 0 (errors are measured on log y)")
    out = np.empty((Y.shape[0], len(models)))
    idx = np.arange(x_.size)
    for u, y in enumerate(Y):
        floor = float(y.min()) * 1e-3
        for m, fit in enumerate(models.values()):
            errs = [_log_error(fit(x_[idx != i], y[idx != i])(x_[i : i + 1]), y[i : i + 1], floor)[0] for i in idx]
            out[u, m] = float(np.mean(errs))
    return out


def preference(errors: Any, names: list[str], claimed: str) -> np.ndarray:
    """Per unit: ``log(min competitor error / claimed model's error)``; > 0 where the claimed model
    predicts held-out points better than every competitor. errors: [n_units, n_models] from
    :func:`loo_errors`; names: the models' names in that order."""
    E = as_numpy(errors)
    if claimed not in names:
        raise ValueError(f"claimed model {claimed!r} is not among {names}")
    if len(names) < 2 or E.shape[-1] != len(names):
        raise ValueError(f"preference needs >= 2 models matching the error columns, got {names} for {E.shape}")
    c = names.index(claimed)
    others = np.delete(E, c, axis=-1).min(axis=-1)
    tiny = np.finfo(np.float64).tiny
    return np.log(np.maximum(others, tiny)) - np.log(np.maximum(E[..., c], tiny))


def winners(errors: Any, names: list[str]) -> dict[str, int]:
    """How many units each model wins (smallest held-out error)."""
    E = as_numpy(errors)
    best = E.argmin(axis=-1)
    return {n: int((best == i).sum()) for i, n in enumerate(names)}
