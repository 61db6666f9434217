import numpy as np
import pytest
import torch

from layerlab.report import stats


def test_bootstrap_mean_matches_normal_theory():
    x = np.random.default_rng(0).normal(1.0, 2.0, size=400)
    ci = stats.bootstrap_ci(x, n_boot=4000, seed=1)
    se = x.std(ddof=1) / np.sqrt(x.size)
    assert ci.estimate == pytest.approx(x.mean())
    # percentile bootstrap of a mean ~ mean +- 1.96 se
    assert ci.low == pytest.approx(x.mean() - 1.96 * se, abs=0.25 * se)
    assert ci.high == pytest.approx(x.mean() + 1.96 * se, abs=0.25 * se)


def test_bootstrap_is_deterministic_and_accepts_tensors():
    x = np.random.default_rng(1).exponential(size=50)
    a = stats.bootstrap_ci(x, seed=3)
    b = stats.bootstrap_ci(torch.tensor(x), seed=3)
    assert a == b
    assert stats.bootstrap_ci(x, seed=4) != a


def test_fast_path_equals_generic_stat():
    x = np.random.default_rng(2).normal(size=37)
    fast = stats.bootstrap_ci(x, np.mean, seed=5, n_boot=500)
    slow = stats.bootstrap_ci(x, lambda z: float(np.mean(z)), seed=5, n_boot=500)
    assert fast.low == pytest.approx(slow.low) and fast.high == pytest.approx(slow.high)


def test_cluster_bootstrap_is_wider_for_correlated_groups():
    rng = np.random.default_rng(3)
    group_effect = rng.normal(0, 1, size=20)
    groups = np.repeat(np.arange(20), 30)
    x = group_effect[groups] + rng.normal(0, 0.1, size=groups.size)
    iid = stats.bootstrap_ci(x, seed=0)
    clustered = stats.bootstrap_ci(x, seed=0, groups=groups)
    assert (clustered.high - clustered.low) > 3 * (iid.high - iid.low)


def test_paired_bootstrap_difference():
    rng = np.random.default_rng(4)
    a = rng.normal(size=200)
    b = a - 0.5 + rng.normal(0, 0.01, size=200)
    ci = stats.paired_bootstrap_ci(a, b, seed=0)
    assert ci.estimate == pytest.approx(0.5, abs=0.01)
    assert ci.low > 0.49 and ci.high < 0.51  # pairing removes the between-example variance


def test_pearson_identity_and_fisher_interval():
    rng = np.random.default_rng(5)
    x = rng.normal(size=100)
    y = 0.6 * x + rng.normal(size=100)
    c = stats.pearson(x, y)
    assert c.r == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-12)
    z, se = np.arctanh(c.r), 1 / np.sqrt(97)
    assert c.low == pytest.approx(np.tanh(z - 1.959963984540054 * se), abs=1e-9)
    assert c.high == pytest.approx(np.tanh(z + 1.959963984540054 * se), abs=1e-9)
    assert c.p < 1e-4
    b = stats.pearson(x, y, method="bootstrap", seed=0)
    assert b.low < c.r < b.high


def test_spearman_is_pearson_of_ranks_and_invariant_to_monotone_maps():
    rng = np.random.default_rng(6)
    x = rng.normal(size=60)
    y = x + rng.normal(scale=0.5, size=60)
    s = stats.spearman(x, y)
    s2 = stats.spearman(np.exp(x), y**3)
    assert s.r == pytest.approx(s2.r, abs=1e-12)
    from scipy.stats import rankdata

    assert s.r == pytest.approx(np.corrcoef(rankdata(x), rankdata(y))[0, 1], abs=1e-12)
    assert s.low < s.r < s.high


def test_r2_identities():
    y = np.arange(10.0)
    assert stats.r2(y, y) == 1.0
    assert stats.r2(y, np.full(10, y.mean())) == pytest.approx(0.0)
    ci = stats.r2_ci(y, y + np.random.default_rng(0).normal(scale=0.1, size=10), seed=0)
    assert 0.99 < ci.estimate <= 1 and ci.low <= ci.estimate


def test_clear_errors():
    with pytest.raises(ValueError, match="at least 2"):
        stats.bootstrap_ci([1.0])
    with pytest.raises(ValueError, match="same length"):
        stats.pearson([1, 2, 3, 4], [1, 2, 3])
    with pytest.raises(ValueError, match="level"):
        stats.bootstrap_ci([1.0, 2.0], level=95)
    with pytest.raises(ValueError, match="groups"):
        stats.bootstrap_ci([1.0, 2.0, 3.0], groups=[0, 1])
