"""Identities of layerlab.metrics.infotheory (spec diversity.md section 7, items 8-10)."""

import itertools

import numpy as np
import pytest

from layerlab.metrics import infotheory as it


def _enumerated_ci(seed: int = 0, m: int = 3, k: int = 3, c: int = 2):
    """All (u_1..u_m, y) with P = P(y) prod_i P(u_i | y): conditionally independent members."""
    rng = np.random.default_rng(seed)
    py = rng.dirichlet(np.ones(c))
    pu = rng.dirichlet(np.ones(k), size=(m, c))  # [m, c, k]
    rows, w = [], []
    for y in range(c):
        for us in itertools.product(range(k), repeat=m):
            rows.append((*us, y))
            w.append(py[y] * np.prod([pu[i, y, u] for i, u in enumerate(us)]))
    a = np.array(rows)
    return a[:, :m], a[:, m], np.array(w)


def test_entropy_basics():
    x = np.array([0, 1, 0, 1])
    assert it.entropy(x) == pytest.approx(1.0, abs=1e-12)
    assert it.entropy(np.zeros(5, int)) == 0.0
    # Miller-Madow adds (m-1)/(2N) nats
    assert it.entropy(x, miller_madow=True) - 1.0 == pytest.approx(1 / 8 / np.log(2), abs=1e-12)


def test_chain_rule_exact_on_empirical_joint():
    rng = np.random.default_rng(1)
    n, m = 500, 5
    y = rng.integers(0, 3, n)
    U = (y[:, None] + rng.integers(0, 2, (n, m)) * rng.integers(0, 3, (n, m))) % 3
    t = it.chain_terms(U, y)
    assert t.gains.sum() == pytest.approx(t.total, abs=1e-10)
    assert (t.relevancy.sum() - t.redundancy.sum() + t.cond_redundancy.sum()) == pytest.approx(t.total, abs=1e-10)
    assert np.allclose(t.gains, t.relevancy - t.redundancy + t.cond_redundancy, atol=1e-10)
    assert np.all(t.gains >= -1e-12)  # I(U_i;Y|U_<i) >= 0 for plug-in
    # Redundancy and conditional redundancy are cumulative-monotone sums of non-negative terms (Thms 5, 6)
    assert np.all(t.redundancy >= -1e-12) and np.all(t.cond_redundancy >= -1e-12)


def test_summary_context_terms_are_consistent():
    rng = np.random.default_rng(2)
    n, m = 300, 4
    y = rng.integers(0, 2, n)
    U = np.where(rng.random((n, m)) < 0.7, y[:, None], 1 - y[:, None])
    S = np.zeros_like(U)
    S[:, 1:] = U[:, :-1]  # summary = previous member
    t = it.chain_terms(U, y, context=S)
    assert np.allclose(t.gains, t.relevancy - t.redundancy + t.cond_redundancy, atol=1e-10)
    assert t.total == pytest.approx(t.gains.sum())


def test_submodularity_holds_for_conditionally_independent_members():
    U, y, w = _enumerated_ci(seed=3)
    bad, checks = it.submodularity_violations(U, y, weights=w, tol=1e-12)
    assert checks > 0 and bad == 0


def test_redundant_copy_adds_exactly_zero():
    U, y, w = _enumerated_ci(seed=4, m=2)
    U3 = np.concatenate([U, U[:, :1]], axis=1)  # member 2 is a copy of member 0
    gain = it.set_info(U3, y, (0, 1, 2), weights=w) - it.set_info(U3, y, (0, 1), weights=w)
    assert gain == pytest.approx(0.0, abs=1e-12)


def test_xor_violation_is_found():
    U = np.array(list(itertools.product([0, 1], repeat=2)))
    y = U[:, 0] ^ U[:, 1]
    bad, _ = it.submodularity_violations(U, y)
    assert bad >= 2  # adding either input helps more once the other is present
    t = it.chain_terms(U, y)
    assert t.cond_redundancy.sum() > 0.99 and t.relevancy.sum() == pytest.approx(0.0, abs=1e-12)


def test_fano_and_hellman_raviv_bounds_hold():
    for seed in range(5):
        U, y, w = _enumerated_ci(seed=seed, m=2, k=3, c=3)
        hy = it.entropy(y, weights=w)
        info = it.mutual_info(U, y, weights=w)
        lo, hi = it.error_bounds(hy, info, 3)
        pe = it.bayes_error(U, y, weights=w)
        assert lo - 1e-12 <= pe <= hi + 1e-12


def test_marginal_gains_and_diminishing_counter():
    info_like = np.array([0.1, 0.5, 0.7, 0.75])
    assert it.diminishing_violations(np.diff(info_like, prepend=0)) == 1  # 0.4 > 0.1 at step 1
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400)
    S = np.stack([np.where(rng.random(400) < p, y, 1 - y) for p in (0.5, 0.7, 0.9)], 1)
    info, gains = it.marginal_gains(S, y, miller_madow=False)
    for k in range(3):  # each I(S_k;Y) is the plug-in MI of that summary alone
        assert info[k] == pytest.approx(it.mutual_info(S[:, k], y), abs=1e-12)
    # a summary that refines the previous one cannot lose information (data processing): gains >= 0
    fine = np.stack([y * 0, y, y * 2 + rng.integers(0, 2, 400)], 1)
    _, g = it.marginal_gains(fine, y, miller_madow=False)
    assert np.all(g[1:] >= -1e-12) and g[1] == pytest.approx(it.entropy(y), abs=1e-12)
    # a coarser summary can (D6: I(S_k;Y) may fall though I(U_<=k;Y) cannot)
    _, g2 = it.marginal_gains(fine[:, ::-1], y, miller_madow=False)
    assert g2[2] < 0


def test_entropy_replicates_match_the_plain_estimator():
    rng = np.random.default_rng(7)
    x, y = rng.integers(0, 3, 150), rng.integers(0, 2, 150)
    idx = rng.integers(0, 150, (4, 150))
    for mm in (False, True):
        fast = it.entropy_replicates(it.joint_codes(x, y), idx, miller_madow=mm)
        slow = [it.entropy(x[i], y[i], miller_madow=mm) for i in idx]
        assert np.allclose(fast, slow, atol=1e-12)


def test_permutation_null_and_bootstrap():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    x = np.where(rng.random(300) < 0.8, y, 1 - y)
    null, p = it.permutation_null(x, y, n_perm=100, seed=0)
    assert p < 0.05 and null.mean() < it.mutual_info(x, y)
    est, lo, hi = it.bootstrap_mi(x, y, n_boot=200, seed=0)
    assert lo <= est <= hi


def test_bad_shapes_raise_clear_errors():
    with pytest.raises(ValueError, match="same number of samples"):
        it.mutual_info(np.zeros(3, int), np.zeros(4, int))
    with pytest.raises(ValueError, match="M <= 6"):
        it.submodularity_violations(np.zeros((4, 7), int), np.zeros(4, int))


def test_vectorised_bootstrap_matches_the_plain_estimator():
    rng = np.random.default_rng(5)
    y = rng.integers(0, 3, 200)
    x = np.where(rng.random(200) < 0.6, y, rng.integers(0, 4, 200))
    idx = np.random.default_rng(0).integers(0, 200, (3, 200))
    xc, yc = it.joint_codes(x), it.joint_codes(y)
    tables = np.zeros((3, xc.max() + 1, yc.max() + 1))
    for b in range(3):
        np.add.at(tables[b], (xc[idx[b]], yc[idx[b]]), 1)
    for mm in (False, True):
        fast = it._mi_tables(tables, 200, mm)
        slow = [it.mutual_info(x[i], y[i], miller_madow=mm) for i in idx]
        assert np.allclose(fast, slow, atol=1e-12)
