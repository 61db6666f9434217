"""Weight statistics, delta correlation and its −0.5 null, Q4_1 error energy.

Anatomy spec 3.3, 3.4, 3.9, 7.4, 7.5, 7.8.
"""

import numpy as np
import pytest
import torch

from layerlab.core.models import tiny_model
from layerlab.metrics import weights as W


def _direct_delta_corr(stack):
    x = stack.reshape(stack.shape[0], -1).numpy()
    d = np.diff(x, axis=0)
    return np.array([np.corrcoef(d[i], d[i + 1])[0, 1] for i in range(len(d) - 1)])


def test_delta_correlation_exact_covariance_form_equals_pearson_of_deltas():
    g = torch.Generator().manual_seed(0)
    walk = torch.randn(7, 13, 11, generator=g, dtype=torch.float64).cumsum(0)
    st = walk + 0.3 * torch.randn(7, 13, 11, generator=g, dtype=torch.float64)
    assert np.allclose(W.delta_correlations(st).numpy(), _direct_delta_corr(st), atol=1e-12)


@pytest.mark.parametrize("template_scale", [0.0, 4.0])
def test_iid_and_template_layers_give_minus_one_half(template_scale):
    g = torch.Generator().manual_seed(1)
    n_entries, L = 40_000, 6
    template = template_scale * torch.randn(n_entries, generator=g, dtype=torch.float64)
    st = template + torch.randn(L, n_entries, generator=g, dtype=torch.float64)
    rho = W.delta_correlations(st)
    tol = W.delta_tolerance(n_entries)  # z=5 s.e. of one pair
    assert (rho + 0.5).abs().max() < tol
    assert W.analytic_delta_correlation(*W.lag_correlations(st)) == pytest.approx(-0.5, abs=tol)


def test_linear_drift_gives_plus_one_and_analytic_formula():
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(500, generator=g, dtype=torch.float64), torch.randn(500, generator=g, dtype=torch.float64)
    st = torch.stack([a + layer * b for layer in range(6)])
    assert torch.allclose(W.delta_correlations(st), torch.ones(4, dtype=torch.float64), atol=1e-9)
    assert W.analytic_delta_correlation(0.3, 0.3) == pytest.approx(-0.5)
    rho = 0.8  # AR(1): ρ2 = ρ1² gives −(1 − ρ1)/2
    assert W.analytic_delta_correlation(rho, rho**2) == pytest.approx(-(1 - rho) / 2)
    with pytest.raises(ValueError, match="rho1"):
        W.analytic_delta_correlation(1.0, 1.0)


def test_matrix_stats_definitions():
    u, v = torch.randn(8, 1, dtype=torch.float64), torch.randn(1, 5, dtype=torch.float64)
    s = W.matrix_stats(u @ v)
    assert s["stable_rank"] == pytest.approx(1.0) and s["effective_rank"] == pytest.approx(1.0)
    s = W.matrix_stats(torch.eye(6, dtype=torch.float64) * 3)
    assert s["frobenius"] == pytest.approx(3 * 6**0.5) and s["spectral"] == pytest.approx(3.0)
    assert s["stable_rank"] == pytest.approx(6.0) and s["effective_rank"] == pytest.approx(6.0)


def test_structure_and_delta_tables_on_tiny_model():
    m = tiny_model("llama")
    tab = W.structure_table(m)
    assert len(tab) == 4 * 9 and tab.cos_next.isna().sum() == 9
    summary, pairs = W.delta_table(m, n_boot=100)
    assert list(summary.component) == list(W.COMPONENTS) and len(pairs) == 7 * 2
    assert (summary.null == -0.5).all()
    # random init: independent layers, so every pair is within tolerance of −0.5
    assert ((pairs.rho + 0.5).abs() < pairs.component.map(summary.set_index("component").pair_tolerance)).all()
    with pytest.raises(ValueError, match="unknown component"):
        W.component_stack(m, "nope")


def _quantise_q4_1(x):
    """Reference Q4_1 quantiser (llama.cpp): per 32 values d = (max − min)/15, m = min, q = round((x − m)/d)."""
    blocks = x.reshape(-1, 32)
    lo, hi = blocks.min(1), blocks.max(1)
    d = ((hi - lo) / 15).astype(np.float16)
    m = lo.astype(np.float16)
    d64, m64 = d[:, None].astype(np.float64), m[:, None].astype(np.float64)
    q = np.clip(np.round((blocks - m64) / d64), 0, 15).astype(np.uint8)
    raw = np.concatenate([d.view(np.uint8).reshape(-1, 2), m.view(np.uint8).reshape(-1, 2),
                          (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)], axis=1)
    deq = d[:, None].astype(np.float64) * q + m[:, None].astype(np.float64)
    return raw, deq.reshape(x.shape), d.astype(np.float64)


def test_q4_1_round_trip_error_and_energy():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 0.05, size=(64, 320))
    raw, deq, d = _quantise_q4_1(x)
    d_read, _ = W.q4_1_block_scales(raw)
    assert np.array_equal(d_read, d)
    err = np.abs(deq - x).reshape(-1, 32)
    assert (err <= d[:, None] / 2 + 1e-3 * d[:, None] + 1e-6).all()  # d/2 plus fp16 rounding of d and m
    expected = W.expected_error_energy(d)
    measured = float(((deq - x) ** 2).sum())
    assert measured == pytest.approx(expected, rel=0.1)  # uniform rounding, 20k entries


@pytest.mark.slow
def test_gguf_error_table_offline_model():
    try:
        path = W.default_gguf_path()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"offline GGUF not available: {e}")
    tab = W.gguf_error_table(path)
    assert len(tab) == 30 * 9
    assert set(tab[tab.component.isin(W.COMPONENTS)].gguf_type) == {"Q4_1"}
    assert set(tab[~tab.component.isin(W.COMPONENTS)].gguf_type) == {"F32"}
    assert (tab[tab.gguf_type == "Q4_1"].error_energy > 0).all()
