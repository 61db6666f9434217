"""Trajectory statistics (coupling spec section 7: identities 9-11)."""

import math

import pytest
import torch

from layerlab.metrics import trajectories as tr


def _walk(L: int = 12, d: int = 8, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    dx = torch.randn(L, d, generator=g, dtype=torch.float64)
    return torch.cat([torch.zeros(1, d, dtype=torch.float64), dx.cumsum(0)])


def test_lss_straight_is_one():
    direction = torch.randn(6, dtype=torch.float64)
    lengths = torch.tensor([0.0, 0.1, 0.5, 2.0, 2.2, 7.0, 20.0], dtype=torch.float64)
    x = 3.0 + lengths[:, None] * direction  # collinear, same direction, uneven steps
    assert float(tr.line_shape_score(x)) == pytest.approx(1.0, abs=1e-12)


def test_lss_at_least_one_and_invariances():
    x = _walk()
    lss = float(tr.line_shape_score(x))
    assert lss >= 1.0
    Q, _ = torch.linalg.qr(torch.randn(8, 8, dtype=torch.float64))
    scale = torch.rand(12, 1, dtype=torch.float64) + 0.1
    steps = torch.diff(x, dim=0) * scale
    x2 = torch.cat([x[:1], x[:1] + steps.cumsum(0)]) @ Q.T + 5.0
    assert float(tr.line_shape_score(x2)) == pytest.approx(lss, rel=1e-10)
    batch = tr.line_shape_score(torch.stack([_walk(seed=s) for s in range(5)]))
    assert batch.shape == (5,) and bool((batch >= 1).all())


def test_random_walk_lss_grows():
    short, long = tr.random_walk_lss(4, 64).mean(), tr.random_walk_lss(64, 64).mean()
    assert long > 2.5 * short  # ~ sqrt(L)


def test_spacing_geometric_and_equal():
    d = torch.randn(5, dtype=torch.float64)
    f64 = torch.float64
    geo = torch.cat([torch.zeros(1, dtype=f64), torch.cumsum(1.3 ** torch.arange(10, dtype=f64), 0)])
    x = geo[:, None] * d
    s = tr.spacing_stats(x)
    assert s["expodistance"] == pytest.approx(0.0, abs=1e-12)
    assert s["step_growth"] == pytest.approx(1.3, rel=1e-12) and s["step_r2"] == pytest.approx(1.0)
    eq = tr.spacing_stats(torch.arange(8.0, dtype=torch.float64)[:, None] * d)
    assert eq["equidistance"] == pytest.approx(0.0, abs=1e-12)


def test_loglinear_fit_recovers_ratio():
    y = 2.0 * 0.7 ** torch.arange(6, dtype=torch.float64)
    fit = tr.loglinear_fit(y)
    assert fit.slope == pytest.approx(math.log(0.7)) and fit.intercept == pytest.approx(math.log(2.0))
    with pytest.raises(ValueError, match="positive"):
        tr.loglinear_fit(torch.tensor([1.0, 0.0]))


def test_linearisation_exact_for_linear_blocks():
    g = torch.Generator().manual_seed(0)
    J = 0.3 * torch.randn(5, 7, 7, generator=g, dtype=torch.float64)
    x = torch.randn(7, generator=g, dtype=torch.float64)
    x0 = x.clone()
    for Jl in J:
        x = x + Jl @ x  # linear blocks: f(x) = J x
    assert tr.linearisation_cosine(J, x0, x) == pytest.approx(1.0, abs=1e-12)


def test_singular_value_helpers_and_pca():
    s = torch.sort(torch.rand(20, 9, dtype=torch.float64) + 0.1, descending=True).values
    assert tr.top_singular_values(s, 4).shape == (20, 4)
    fit = tr.inverse_top_sv_fit(s, start=10)
    assert set(fit) >= {"slope", "intercept", "r2"}
    with pytest.raises(ValueError):
        tr.top_singular_values(s, 10)
    coords, ratio = tr.trajectory_pca(torch.stack([_walk(seed=i) for i in range(3)]))
    assert coords.shape == (3, 13, 2) and 0 < float(ratio.sum()) <= 1


def test_bad_trajectory():
    with pytest.raises(ValueError, match="trajectory"):
        tr.line_shape_score(torch.zeros(1, 4))
