"""Token trajectories through depth: linearity (line-shape score), exponential spacing
("expodistance"), the product-of-(I + J) linearisation and singular values vs depth.

Aubry et al., *Transformer Block Coupling ...*, ICLR 2025 (arXiv:2407.07810), sections on
linearity and layer-wise exponential growth; spec ``coupling.md`` 3.5-3.7 and 4.6-4.8. The LSS
formula is quoted by a reviewer (after Gai & Zhang 2021) [secondary]; the expodistance formula is
unknown, so all candidates of spec 3.6 are computed [reconstructed].

A trajectory is ``x [..., L+1, d]``: x^0 = input of block 0 (the embedding), x^l = output of block
l-1, x^L = last block output before the final norm (forward hooks; see :mod:`layerlab.core.residual`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


def _check_traj(x: Tensor) -> Tensor:
    if not isinstance(x, Tensor) or x.ndim < 2 or x.shape[-2] < 2:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"a trajectory must be a tensor [..., L+1, d] with L >= 1 steps, got {shape}")
    return x


def steps(x: Tensor) -> Tensor:
    """Residual steps x^l - x^{l-1}. x: [..., L+1, d] -> [..., L, d]."""
    x = _check_traj(x)
    return x[..., 1:, :] - x[..., :-1, :]


def line_shape_score(x: Tensor) -> Tensor:
    """LSS = L / || sum_l (x^l - x^{l-1}) / ||x^l - x^{l-1}|| ||  (spec 3.5; >= 1, = 1 iff straight).

    x: [..., L+1, d]. Returns [...]. A zero-length step has no direction: NaN.
    """
    dx = steps(x)  # [..., L, d]
    n = dx.norm(dim=-1, keepdim=True)  # [..., L, 1]
    unit = dx / n
    lss = dx.shape[-2] / unit.sum(dim=-2).norm(dim=-1)
    return torch.where((n > 0).all(dim=-2).squeeze(-1), lss, torch.nan)


@dataclass(frozen=True)
class LogLinearFit:
    """OLS fit of log y_l on l = 0..n-1: y ~ exp(intercept) * exp(slope * l)."""

    slope: float
    intercept: float
    r2: float

    @property
    def growth(self) -> float:
        """Per-layer growth factor e^slope."""
        return math.exp(self.slope)


def loglinear_fit(y: Tensor) -> LogLinearFit:
    """Fit log y = a + b l by least squares. y: [n] positive values.

    Exponential spacing of Aubry et al., ICLR 2025 (arXiv:2407.07810); spec coupling.md section 3.6.
    """
    y = torch.as_tensor(y, dtype=torch.float64).flatten()
    if y.numel() < 2 or not bool((y > 0).all()):
        raise ValueError(f"loglinear_fit needs >= 2 positive values, got {y.tolist()}")
    t = torch.arange(y.numel(), dtype=torch.float64)
    ly = y.log()
    tc, lc = t - t.mean(), ly - ly.mean()
    b = (tc * lc).sum() / (tc * tc).sum()
    a = ly.mean() - b * t.mean()
    ss_res = ((ly - a - b * t) ** 2).sum()
    ss_tot = (lc**2).sum()
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else torch.tensor(1.0)
    return LogLinearFit(float(b), float(a), float(r2))


def _cv(v: Tensor) -> Tensor:
    """Coefficient of variation (population std / mean) along the last dim."""
    return v.std(dim=-1, unbiased=False) / v.mean(dim=-1)


def spacing_stats(x: Tensor) -> dict[str, float]:
    """Spacing statistics of one trajectory x [L+1, d] (spec 3.6, all candidates):

    expodistance = CV of step ratios delta_{l+1}/delta_l (0 for geometric spacing),
    equidistance = CV of step norms delta_l (0 for equal steps),
    step_slope/step_r2/step_growth: log-linear fit of delta_l on l; the same for ||x^l||.
    """
    x = _check_traj(x)
    if x.ndim != 2:
        raise ValueError(f"spacing_stats takes one trajectory [L+1, d], got {tuple(x.shape)}")
    return spacing_from_norms(steps(x).norm(dim=-1).double(), x.norm(dim=-1).double())


def spacing_from_norms(delta: Tensor, norms: Tensor) -> dict[str, float]:
    """:func:`spacing_stats` from step norms delta [L] and state norms ||x^l|| [L+1]."""
    out = {
        "expodistance": float(_cv(delta[1:] / delta[:-1])) if delta.numel() >= 2 else float("nan"),
        "equidistance": float(_cv(delta)),
    }
    for name, y in (("step", delta), ("norm", norms)):
        if bool((y > 0).all()):
            fit = loglinear_fit(y)
            out.update({f"{name}_slope": fit.slope, f"{name}_r2": fit.r2, f"{name}_growth": fit.growth})
        else:  # a zero step or norm has no logarithm
            out.update({f"{name}_slope": float("nan"), f"{name}_r2": float("nan"), f"{name}_growth": float("nan")})
    return out


def linearisation_cosine(J: Tensor, x0: Tensor, xL: Tensor) -> float:
    """Cosine between x_lin = (I + J^L) ... (I + J^1) x^0 and the true x^L (spec 3.7, 4.8).

    J: [L, d, d] residual-branch Jacobians of one token (block order); x0, xL: [d]. Exact (1) for
    linear blocks.
    """
    if J.ndim != 3 or J.shape[-1] != x0.shape[-1]:
        raise ValueError(f"J must be [L, d, d] matching x0 [d]; got {tuple(J.shape)} and {tuple(x0.shape)}")
    v = x0.to(J.dtype)
    for Jl in J:  # [d, d]
        v = v + Jl @ v
    return float(torch.nn.functional.cosine_similarity(v, xL.to(J.dtype), dim=0))


def top_singular_values(s: Tensor, k: int = 15) -> Tensor:
    """Top-k singular values per layer. s: [L, d] (descending) -> [L, k]."""
    if k > s.shape[-1]:
        raise ValueError(f"k={k} exceeds d={s.shape[-1]}")
    return s[..., :k]


def inverse_top_sv_fit(s: Tensor, start: int = 10) -> dict[str, float]:
    """OLS line of 1/s_1(J^l) on l for l >= start (authors' diagnostic, spec 3.7).

    s: [L, d]. Returns slope, intercept and R^2 (NaN when fewer than 2 layers remain).
    """
    y = 1.0 / s[:, 0].double()
    t = torch.arange(len(y), dtype=torch.float64)
    y, t = y[start:], t[start:]
    if len(y) < 2:
        return {"slope": float("nan"), "intercept": float("nan"), "r2": float("nan"), "start": start}
    tc, yc = t - t.mean(), y - y.mean()
    b = (tc * yc).sum() / (tc * tc).sum()
    a = y.mean() - b * t.mean()
    r2 = 1 - ((y - a - b * t) ** 2).sum() / (yc**2).sum()
    return {"slope": float(b), "intercept": float(a), "r2": float(r2), "start": start}


def trajectory_pca(x: Tensor, n_components: int = 2) -> tuple[Tensor, Tensor]:
    """2-D PCA of all tokens' trajectories (spec 4.6). x: [T, L+1, d] -> (coords [T, L+1, n],
    explained-variance ratio [n])."""
    x = _check_traj(x)
    flat = x.reshape(-1, x.shape[-1]).double()
    flat = flat - flat.mean(0)
    _, S, Vh = torch.linalg.svd(flat, full_matrices=False)
    coords = flat @ Vh[:n_components].T
    ratio = (S[:n_components] ** 2) / (S**2).sum()
    return coords.reshape(*x.shape[:-1], n_components), ratio


def random_walk_lss(L: int, d: int, *, n: int = 256, seed: int = 0) -> Tensor:
    """LSS of n isotropic Gaussian random walks with L steps in d dims: the no-structure reference
    (grows like sqrt(L)). Returns [n]."""
    g = torch.Generator().manual_seed(seed)
    dx = torch.randn(n, L, d, generator=g, dtype=torch.float64)
    x = torch.cat([torch.zeros(n, 1, d, dtype=torch.float64), dx.cumsum(dim=1)], dim=1)
    return line_shape_score(x)
