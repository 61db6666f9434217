"""Predictors P1–P5, held-out R², nulls and weight generation (anatomy spec 3.4, 3.5, 7.7)."""

import numpy as np
import pytest
import torch

from layerlab.core.models import tiny_model
from layerlab.metrics import predictability as P
from layerlab.metrics import weights as W


def _stack(L=8, n=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(L, n, generator=g, dtype=torch.float64).cumsum(0) + 0.5


def test_layer_predicted_from_itself_has_r2_one():
    st = _stack()
    g = P.gram(st)
    theta = P.fit_lags(g, (0,), range(8))
    assert torch.allclose(theta, torch.tensor([1.0, 0.0], dtype=torch.float64), atol=1e-10)
    coefs = [P.lag_coefficients(theta, (0,), h, 8) for h in (2, 5)]
    assert P.r2_from_gram(g, [2, 5], coefs) == pytest.approx(1.0, abs=1e-10)


def test_ridge_lambda_zero_is_ols():
    st = _stack()
    train = [1, 2, 3, 5, 6]
    theta = P.fit_lags(P.gram(st), (1, 2), train)
    rows = [t for t in train if t >= 2]
    x = torch.cat([torch.stack([st[t - 1], st[t - 2], torch.ones(300, dtype=torch.float64)], 1) for t in rows])
    y = torch.cat([st[t] for t in rows])
    ols = np.linalg.lstsq(x.numpy(), y.numpy(), rcond=None)[0]
    assert np.allclose(theta.numpy(), ols, atol=1e-10)
    shrunk = P.fit_lags(P.gram(st), (1, 2), train, lam=10.0)
    assert shrunk[:2].abs().sum() < theta[:2].abs().sum()


@pytest.mark.parametrize("predictor", ["P1", "P2", "P3"])
def test_gram_r2_equals_direct_r2(predictor):
    st = _stack()
    train, held = [0, 1, 2, 4, 5, 7], [3, 6]
    g = P.gram(st)
    r2 = P.gram_r2(g, predictor, train, held, degree=2)
    if predictor == "P3":
        x = torch.arange(8, dtype=torch.float64) / 7
        V = torch.stack([x**p for p in range(3)], 1)
        coef = torch.linalg.lstsq(V[train], st[train]).solution
        preds = [V[h] @ coef for h in held]
    else:
        lags = (1,) if predictor == "P1" else (1, 2)
        th = P.fit_lags(g, lags, train)
        preds = [sum(th[j] * st[h - lag] for j, lag in enumerate(lags)) + th[-1] for h in held]
    assert r2 == pytest.approx(P.r2_direct(st, held, preds), abs=1e-10)


def test_innovation_and_permuted_grams():
    st = _stack()
    train = [0, 1, 2, 4, 5, 7]
    centred = st - st[train].mean(0)
    assert torch.allclose(P.innovation_gram(P.gram(st), train), P.gram(centred), atol=1e-8)
    perm = [3, 1, 0, 7, 2, 6, 5, 4]
    assert torch.allclose(P.permute_gram(P.gram(st), perm), P.gram(st[perm]), atol=1e-10)


def test_template_model_r2_matches_theory():
    """W_l = T + ε_l with r = var T / var ε: P1 level R² = (r/(r+1))², innovation R² ≈ 0 (spec 3.4)."""
    g = torch.Generator().manual_seed(5)
    r, n, L = 3.0, 50_000, 10
    st = r**0.5 * torch.randn(n, generator=g, dtype=torch.float64) + torch.randn(L, n, generator=g, dtype=torch.float64)
    train, held = P.split_layers(L, seed=0)
    row = P.predictability_row(st, "x", train, held)
    assert row["P1_level"] == pytest.approx((r / (r + 1)) ** 2, abs=0.02)
    assert abs(row["P1_innov"]) < 0.05


def test_predictability_table_with_nulls():
    m, m0 = tiny_model("llama", num_hidden_layers=6), tiny_model("llama", num_hidden_layers=6, seed=1)
    comps = ("q", "down")
    st = {c: W.component_stack(m, c) for c in comps}
    st0 = {c: W.component_stack(m0, c) for c in comps}
    tab = P.predictability_table(st, st0, n_shuffles=4)
    assert set(tab.predictor) == {"P1_level", "P1_innov", "P2_level", "P2_innov", "P3_level", "P3_innov",
                                  "P4_level", "P5_level", "P5_innov"}
    assert tab.N1.notna().all() and (tab.N2_low <= tab.N2_high).all()
    assert tab.attrs["held"] and not set(tab.attrs["held"]) & set(tab.attrs["train"])


def test_generation_modes_and_matched_norm_control():
    st = {"a": _stack(), "b": _stack(seed=1)}
    before = {c: v.clone() for c, v in st.items()}
    t = P.predict_layers(st, [5, 6], mode="teacher")
    gen = P.predict_layers(st, [5, 6], mode="generated")
    assert torch.equal(t[5]["a"], gen[5]["a"]) and not torch.equal(t[6]["a"], gen[6]["a"])
    th = P.fit_lags(P.gram(st["a"]), (1,), range(8))
    assert torch.allclose(gen[6]["a"], th[0] * gen[5]["a"] + th[1], atol=1e-12)
    assert torch.allclose(t[6]["a"], th[0] * st["a"][5] + th[1], atol=1e-12)  # teacher: the real layer 5
    assert all(torch.equal(st[c], before[c]) for c in st)  # neither mode writes into the caller's stacks
    st32 = {c: v.float() for c, v in st.items()}
    g32 = P.predict_layers(st32, [5, 6], mode="generated")
    assert g32[6]["a"].dtype == torch.float32 and all(torch.equal(st32[c], before[c].float()) for c in st)
    w = {"m": torch.randn(5, 7, dtype=torch.float64)}
    r = P.matched_norm_random(w, seed=0)["m"]
    assert torch.allclose(r.norm(dim=1), w["m"].norm(dim=1), atol=1e-12)
    with pytest.raises(ValueError, match="unknown mode"):
        P.predict_layers(st, [5], mode="dream")
    with pytest.raises(ValueError, match="predecessor"):
        P.predict_layers(st, [0])


def test_replacement_interventions_cached_equals_naive():
    from layerlab.metrics.ablation import evaluate_interventions

    m = tiny_model("llama")
    ivs = P.replacement_interventions(m, ks=(1, 2), single=(2,))
    ids = torch.randint(0, 259, (3, 16), generator=torch.Generator().manual_seed(0))
    a = evaluate_interventions(m, ids, ivs, prefix_cache=True)
    b = evaluate_interventions(m, ids, ivs, prefix_cache=False)
    assert all(np.array_equal(a.nll[k], b.nll[k]) for k in a.nll)
    with pytest.raises(ValueError, match="deepest"):
        P.replacement_interventions(m, ks=(4,))


def test_replacement_controls_use_the_predictions_norms_and_removal():
    from layerlab.core import arch

    m = tiny_model("llama")
    ivs = {iv.name: iv for iv in P.replacement_interventions(m, ks=(1,), single=(2,))}
    assert {"predicted@2", "random@2", "randpred@2", "skip@2"} <= set(ivs)
    blk = arch.view(m).blocks[2]

    def norms():
        return {c: torch.linalg.vector_norm(w.detach().double(), dim=-1).clone() for c, w in blk.weights().items()
                if "norm" not in c}

    with ivs["predicted@2"].context():
        pred = norms()
    with ivs["randpred@2"].context():
        rnd = norms()
        w_rnd = {c: w.detach().clone() for c, w in blk.weights().items()}
    with ivs["predicted@2"].context():
        w_pred = {c: w.detach().clone() for c, w in blk.weights().items()}
    for c in pred:  # same row norms as the prediction, different weights
        assert torch.allclose(pred[c], rnd[c], rtol=1e-6, atol=1e-9)
        assert not torch.equal(w_rnd[c], w_pred[c])
    with ivs["skip@2"].context():
        writers = blk.residual_writers()
        assert all(float(writers[k].weight.detach().abs().max()) == 0 for k in ("o", "down"))
    assert float(blk.residual_writers()["o"].weight.detach().abs().max()) > 0  # restored on exit


def test_shuffled_null_from_parts_equals_explicit_shuffle():
    st = torch.randn(9, 12, 10, generator=torch.Generator().manual_seed(4), dtype=torch.float64).cumsum(0)
    train, held = P.split_layers(9, seed=1)
    perm = [4, 0, 8, 2, 6, 1, 7, 3, 5]
    a = P.predictability_row(st, "gate", train, held, perm=perm)
    b = P.predictability_row(st[perm], "gate", train, held)
    assert a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], abs=1e-9) for k in a)
