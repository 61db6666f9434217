"""Which curve fits a unit's data best, judged on held-out points: model comparison by leave-one-out error.

A claim like "step norms grow *exponentially* with depth" is a claim about the shape of a curve, and a
positive log-slope does not test it: linear and power-law growth have one too. The honest test
compares candidate shapes by how well each predicts a point it was not fitted on (leave-one-out
cross-validation; Stone 1974, *J. R. Statist. Soc. B* 36, 111-147; Hastie, Tibshirani & Friedman 2009,
*The Elements of Statistical Learning*, sec. 7.10).

* :data:`GROWTH_MODELS`: exponential ``y = a e^{b x}``, linear ``y = a + b x`` and power law
  ``y = a x^b`` (x > 0), each a two-parameter least-squares line in transformed coordinates
  (:class:`Shape`; leave-one-out predictions in closed form from the hat matrix). Exponential and power
  law are fitted on ``log y``; the linear model on ``y``. Every model's error is measured on the same scale,
  ``log y`` (the growth claims are multiplicative), so the three are comparable.
* :func:`loo_errors`: per unit (prompt, document), the mean squared leave-one-point-out error of each
  model: ``[n_units, n_models]``.
* :func:`preference`: the per-unit log ratio of the best competitor's held-out error to the claimed
  model's (> 0: the claimed model predicts held-out points better), the statistic a
  :class:`~layerlab.report.verdicts.Direction` rule decides on over units (with a margin for "clearly").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from layerlab.report.stats import as_numpy

__all__ = ["GROWTH_MODELS", "Shape", "loo_errors", "preference", "winners"]

@dataclass(frozen=True)
class Shape:
    """A two-parameter growth shape fitted by least squares as a line ``v(y) = a + b u(x)``;
    ``inv`` maps a fitted v back to y."""

    u: Callable[[np.ndarray], np.ndarray]
    v: Callable[[np.ndarray], np.ndarray]
    inv: Callable[[np.ndarray], np.ndarray]


GROWTH_MODELS: dict[str, Shape] = {
    "exponential": Shape(u=lambda x: x, v=np.log, inv=np.exp),  # y = a e^{b x}
    "linear": Shape(u=lambda x: x, v=lambda y: y, inv=lambda v: v),  # y = a + b x
    "power law": Shape(u=np.log, v=np.log, inv=np.exp),  # y = a x^b (x > 0)
}
"""The growth shapes a "grows exponentially" claim must beat (two parameters each)."""


def _loo_fitted(u: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Leave-one-out predictions of every point of every row of V ([n_units, n]) from the line fitted
    to the other points, in closed form: v_i - e_i / (1 - h_ii) with the hat matrix of [1, u]."""
    A = np.column_stack([np.ones_like(u), u])  # [n, 2]
    H = A @ np.linalg.solve(A.T @ A, A.T)  # [n, n]
    E = V - V @ H.T  # residuals of the full fit
    return V - E / (1 - np.diag(H))[None]


def loo_errors(x: Any, ys: Any, models: Mapping[str, Shape] = GROWTH_MODELS) -> np.ndarray:
    """Leave-one-out mean squared error on ``log y`` of each model, per unit.

    x: [n_points] (e.g. layer index 1..L, > 0 for the power law); ys: [n_units, n_points] positive
    values (one curve per prompt). A non-positive prediction (a linear fit below zero) is floored at
    1e-3 of the unit's smallest value. Returns [n_units, len(models)] in the order of ``models``."""
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
    if (x_ <= 0).any() and any(m is GROWTH_MODELS["power law"] for m in models.values()):
        raise ValueError("the power law y = a x^b needs x > 0 (number layers from 1)")
    floor = Y.min(axis=1, keepdims=True) * 1e-3
    out = np.empty((Y.shape[0], len(models)))
    for m, shape in enumerate(models.values()):
        pred = shape.inv(_loo_fitted(shape.u(x_), shape.v(Y)))
        out[:, m] = ((np.log(np.maximum(pred, floor)) - np.log(Y)) ** 2).mean(axis=1)
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
