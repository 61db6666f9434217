"""m_K coupling metric (coupling spec section 7: identities 1-5, 8, 12) and its summaries/nulls."""

import pytest
import torch

from layerlab.core.jacobians import diagonal_jacobian_single
from layerlab.metrics import coupling as cp


def _stack(n: int = 4, d: int = 24, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, d, generator=g, dtype=torch.float64)


def test_self_coupling_is_zero():
    J = _stack()
    cm = cp.cross_coupling(J, None, ks=(3, 10, 24))
    diag = torch.diagonal(cm.m, dim1=-2, dim2=-1)  # [K, norm, variant, N]
    ujv = diag[:, :, 0]
    assert ujv.abs().max() <= 1e-12
    for k in (3, 10):
        assert float(cp.coupling(J[0], J[0], k, "trace")) <= 1e-12
    # vju of J with itself is zero only when U = V up to sign (symmetric J)
    S = J + J.transpose(-1, -2)
    assert cp.coupling(S[0], S[0], 5, "norm", "vju") <= 1e-12
    off = cm.get(10)[~torch.eye(4, dtype=torch.bool)]
    assert off.min() > 0.1  # unrelated random matrices are not coupled


def test_sign_flip_invariance():
    J = _stack(2)
    S = cp.svd(J)
    flip = torch.ones(J.shape[-1], dtype=J.dtype)
    flip[[0, 3, 7]] = -1
    S2 = cp.SVD(S.U * flip, S.s, S.Vh * flip[:, None])  # flip paired columns of U and rows of Vh
    S3 = cp.SVD(S.U * flip, S.s, S.Vh)  # flip U columns only: |.| still removes it
    a = cp.cross_coupling(J, None, (5, 12), cols_svd=S).m
    assert torch.allclose(a, cp.cross_coupling(J, None, (5, 12), cols_svd=S2).m, atol=1e-12)
    assert torch.allclose(a, cp.cross_coupling(J, None, (5, 12), cols_svd=S3).m, atol=1e-12)


def test_scale_invariance():
    J = _stack(2)
    m = cp.coupling(J[0], J[1], 6)
    assert torch.isclose(cp.coupling(3.0 * J[0], J[1], 6), m, atol=1e-12)
    assert torch.isclose(cp.coupling(J[0], 0.2 * J[1], 6), m, atol=1e-12)
    assert cp.coupling(J[0], 5 * J[0], 6) <= 1e-12


def test_sliced_k_equals_direct_k():
    J = _stack(3)
    big = cp.cross_alignment(J, cp.svd(J), 20)
    small = cp.cross_alignment(J, cp.svd(J), 7)
    assert torch.allclose(big[..., :7, :7], small, atol=1e-12)
    together = cp.cross_coupling(J, None, (7, 20))
    alone = cp.cross_coupling(J, None, (7,))
    assert torch.allclose(together.get(7), alone.get(7), atol=1e-12, equal_nan=True)
    assert torch.allclose(together.get(7, "trace", "vju"), alone.get(7, "trace", "vju"), atol=1e-12)


def test_matches_released_formula():
    """|U2^T J1 V2| - diag(s1), Frobenius, over ||s1||_2 and tr(S1) (released metrics.py)."""
    J1, J2 = _stack(2)
    U2, _, Vh2 = torch.linalg.svd(J2)
    s1 = torch.linalg.svdvals(J1)
    k = 5
    M = U2[:, :k].T @ J1 @ Vh2[:k].T
    diff = torch.linalg.norm(M.abs() - torch.diag(s1[:k]))
    assert torch.isclose(cp.coupling(J1, J2, k, "norm"), diff / s1[:k].norm())
    assert torch.isclose(cp.coupling(J1, J2, k, "trace"), diff / s1[:k].sum())
    Mv = Vh2[:k] @ J1 @ U2[:, :k]
    dv = torch.linalg.norm(Mv.abs() - torch.diag(s1[:k]))
    assert torch.isclose(cp.coupling(J1, J2, k, "norm", "vju"), dv / s1[:k].norm())


def test_linear_block_jacobian_is_weight():
    W = _stack(1, 16)[0]
    J_F = diagonal_jacobian_single(lambda X: X + X @ W.T, torch.randn(16, dtype=torch.float64))
    assert torch.allclose(J_F - torch.eye(16, dtype=torch.float64), W, atol=1e-12)


def test_zero_spectrum_is_nan():
    J = _stack(3)
    J[1] = 0
    cm = cp.cross_coupling(J, None, (4,))
    m = cm.get(4)
    assert torch.isnan(m[1]).all() and not torch.isnan(m[0]).any()
    s = cp.scalar_summaries(cm)
    assert all(torch.isfinite(torch.tensor(v)) for v in s.values())


def test_rotation_and_spectrum_nulls_near_chance():
    d = 96
    J = _stack(3, d)
    m_rot = cp.cross_coupling(J, cp.rotation_null(J, seed=1), (10,)).get(10)
    assert torch.diagonal(m_rot).min() > 0.8  # statistical: ~1 for Haar rotations
    nulls = cp.null_coupling(J, (10,), seed=2)
    assert set(nulls) == {"spectrum", "rotation"}
    s = cp.scalar_summaries(nulls["spectrum"])
    assert s["C_l2@10"] < 0.2


def test_scalar_summaries_and_locality():
    J = _stack(4)
    cm = cp.depth_coupling(J, (5,))
    s = cp.scalar_summaries(cm)
    m = cm.get(5)
    off = m[~torch.eye(4, dtype=torch.bool)]
    assert s["C_l2@5"] == pytest.approx(float(1 - off.mean()))
    assert s["C_sq@5"] == pytest.approx(float(1 - (off**2).mean()))
    assert cp.offdiag_mean(m, "all") < cp.offdiag_mean(m, "offdiag")
    assert cp.neighbour_ratio(m) > 0


def test_codiag_panels_diagonal_blocks_are_spectra():
    J = _stack(3)
    A = cp.codiag_panels(J, k=6)
    s = torch.linalg.svdvals(J)[:, :6]
    for i in range(3):
        assert torch.allclose(A[i, i], torch.diag(s[i]), atol=1e-12)


def test_bad_inputs():
    J = _stack(2, 8)
    with pytest.raises(ValueError, match="K=9 is out of range"):
        cp.cross_coupling(J, None, (9,))
    with pytest.raises(ValueError, match="square"):
        cp.cross_coupling(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="not computed"):
        cp.cross_coupling(J, None, (2,)).get(3)
    with pytest.raises(ValueError, match="aggregation"):
        cp.offdiag_mean(torch.zeros(3, 3), "diagonal")


def test_chapter_presets_and_fig1a_file():
    from layerlab.chapters import coupling as ch

    with pytest.raises(ValueError, match="unknown profile"):
        ch.preset("laptop")
    assert len(ch.preset("gpu").fig1a_models) == 28 and ch.preset("gpu").device == "cuda"
    with pytest.raises(ValueError, match="28 Fig. 1a models"):
        ch.preset("gpu", fig1a_models=("EleutherAI/pythia-12b",))
    fig = ch.fig1a_table()
    assert len(fig) == 28 and fig["provenance"].notna().all()
    known = fig.dropna(subset=["coupling"])
    assert known["coupling"].between(0.889, 0.954).all()  # Fig. 1a range [paper]
    for name in ("smoke", "cpu"):
        p = ch.preset(name)
        assert max(p.ks) <= 576 and p.n_prompts >= (16 if name == "cpu" else 1)


def test_prompt_result_and_summary_on_tiny_model():
    from layerlab.chapters.coupling import depth as cr
    from layerlab.core.models import tiny_model

    model = tiny_model("llama")
    ids = torch.randint(3, 259, (1, 10), generator=torch.Generator().manual_seed(0))
    r = cr.prompt_result(model, ids, (4, 8), nulls=True)
    assert {"m", "m_spectrum", "m_rotation", "m_compat", "s_top", "gap", "lss", "delta", "norms"} <= set(r)
    L = 4
    assert r["m"].shape == (2, 2, 2, L, L) and r["lss"].shape == (10,)
    assert torch.diagonal(r["m"][:, :, 0], dim1=-2, dim2=-1).abs().max() < 1e-5  # m_K(J, J) = 0
    # authors_compat changes only the last block's Jacobian: pairs among blocks 0..L-2 are identical
    assert torch.allclose(r["m_compat"][..., :-1, :-1], r["m"][..., :-1, :-1])
    df = cr.summarise({"per_prompt": [r, r], "label": "tiny", "ks": (4, 8)})
    assert len(df) == 2 and {"C_l2@8", "spectrum:C_l2@8", "compat:C_tr@4", "lss_median", "step_slope"} <= set(df)
    # the excess is over the prompt's own spectrum-matched null, at the same K and normalisation
    assert df["excess:C_tr@4"].iloc[0] == pytest.approx(df["C_tr@4"].iloc[0] - df["spectrum:C_tr@4"].iloc[0])
    # the coupling matrices come from float64 SVDs even for a float32 model
    m32 = cr.prompt_result(tiny_model("llama", dtype=torch.float32), ids, (4,), nulls=False)["m"]
    J64 = cr.jac.frozen_context_jacobians(tiny_model("llama", dtype=torch.float32), ids).double()
    assert torch.allclose(m32, cp.cross_coupling(J64, None, (4,)).m.float(), rtol=0, atol=0, equal_nan=True)
    # the distance profile of the excess: one value per depth distance, 0 for a model against itself
    dx = cr.distance_excess({"per_prompt": [dict(r, m_spectrum=r["m"])], "ks": (4, 8)}, 8)
    assert dx.shape == (1, L - 1) and dx.abs().max() == 0


def test_predictor_stats_and_incremental_r2():
    import numpy as np
    import pandas as pd

    from layerlab.chapters.coupling import stats as cr

    rng = np.random.default_rng(0)
    x1, x2 = rng.normal(size=30), rng.normal(size=30)
    df = pd.DataFrame({"x1": x1, "x2": x2, "noise": rng.normal(size=30), "y": 2 * x1 + x2})
    st = cr.predictor_stats(df, "y", ["x1", "noise"], n_boot=200).set_index("predictor")
    assert st.loc["x1", "R2"] > 0.6 and st.loc["x1", "R2_low"] <= st.loc["x1", "R2"] <= st.loc["x1", "R2_high"]
    assert st.loc["noise", "R2"] < st.loc["x1", "R2"]
    inc = cr.incremental_r2(df, "y", ["x1"], ["x2"], n_boot=200)
    assert inc["r2_full"] == pytest.approx(1.0) and inc["gain_low"] > 0
    few = cr.predictor_stats(df.head(3), "y", ["x1"])
    assert np.isnan(few.loc[0, "R2"])


def test_locality_difference_and_permutation_null():
    L = 8
    i, j = torch.meshgrid(torch.arange(L), torch.arange(L), indexing="ij")
    banded = torch.where((i - j).abs() == 1, 0.2, 0.9).double()  # neighbours coupled (1-m = 0.8), others 0.1
    banded.fill_diagonal_(0.0)
    assert cp.locality(banded) == pytest.approx(0.7)
    null = cp.locality_null(banded, 200, seed=0)
    assert null.shape == (200,) and float((null >= cp.locality(banded)).float().mean()) < 0.05
    flat = torch.full((L, L), 0.5, dtype=torch.float64)
    assert cp.locality(flat) == pytest.approx(0.0)
    assert torch.equal(cp.locality_null(banded, 10, seed=3), cp.locality_null(banded, 10, seed=3))
    with pytest.raises(ValueError, match="L >= 3"):
        cp.locality(torch.zeros(2, 2))


def test_locality_run_and_quantisation_control_on_smoke_family():
    from layerlab.chapters.coupling import members as cr

    df, mats = cr.locality_run("smoke", {"depth": 3}, n_prompts=2, max_tokens=12, k=4, n_perm=50)
    assert len(df) == len(mats) and set(df["step"]) >= {0, 8}
    assert ((df["p_perm"] > 0) & (df["p_perm"] <= 1)).all() and (df["low"] <= df["high"]).all()
    q = cr.quantisation_control("smoke", {"depth": 3}, n_prompts=2, max_tokens=12, k=4)
    assert len(q) == 1 and q["rel_weight_change"].iloc[0] > 0
    assert q["diff_low"].iloc[0] <= q["diff"].iloc[0] <= q["diff_high"].iloc[0]


def test_circle_graph_draws_every_layer():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from layerlab.report.plots import circle_graph

    fig, ax = plt.subplots()
    circle_graph(ax, 1 - torch.rand(5, 5, generator=torch.Generator().manual_seed(0)).numpy(), title="t")
    assert len(ax.texts) == 5 and len(ax.lines) > 0
    plt.close(fig)


def test_member_jacobians_cached_once_and_exact(monkeypatch):
    """The family callers share one Jacobian cache entry per (run, step, prompts), equal to a fresh
    computation; the second call must not recompute."""
    from layerlab.chapters.coupling import members as cr
    from layerlab.training.family import get_family

    fam = get_family("smoke")
    m = fam.select(depth=3)[0]
    prompts = cr.prompt_set(fam.tokenizer, 2, 12)
    model, J = cr.member_jacobians(m, None, prompts)  # [P, L, d, d]
    direct = torch.stack([cr.jac.frozen_context_jacobians(model, ids) for ids in prompts]).double()
    assert J.shape == (2, 3, model.config.hidden_size, model.config.hidden_size) and torch.equal(J, direct)

    def boom(*a, **k):
        raise AssertionError("recomputed a cached Jacobian")

    monkeypatch.setattr(cr.jac, "frozen_context_jacobians", boom)
    _, J2 = cr.member_jacobians(m, m.steps, prompts)  # explicit final step == None
    assert torch.equal(J, J2)
    row = cr.member_coupling(model, prompts, (4,), J2)
    assert 0 <= row["C_l2@4"] <= 1


def test_run_smoke_is_cached_whole_and_drives_claims_and_plots(monkeypatch):
    """``run`` returns a typed result with provenance; a second call reads the whole result back
    (``_compute`` is not called again); the claim rows and every figure come from the result alone."""
    import importlib

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from layerlab.chapters import coupling

    run_mod = importlib.import_module("layerlab.chapters.coupling.run")  # the package's `run` is the function

    a = coupling.run(coupling.preset("smoke"))
    assert isinstance(a, coupling.CouplingResult) and a.provenance.profile == "smoke" and a.provenance.source

    def boom(*args, **kwargs):
        raise AssertionError("recomputed a cached coupling result")

    monkeypatch.setattr(run_mod, "_compute", boom)
    b = coupling.run(coupling.preset("smoke"))
    assert a.provenance == b.provenance and a.numbers == b.numbers
    pd.testing.assert_frame_equal(a.trained, b.trained)
    rows = coupling.claims(b)
    assert [c.id for c in rows][:2] == ["C1", "C2"] and rows[-1].id == "S1"
    assert set(coupling.verdict_glue(rows)) == {f"verdict_{c.id}" for c in rows} | {"verdict_list"}
    assert len({c.id for c in rows}) == len(rows) and {"C3", "C5", "C6", "C10 (digits)", "C11", "C12", "S1",
                                                        "C4-Fig1a", "C6-Pythia"} <= {c.id for c in rows}
    assert {"K_max", "c_trained", "fam_rho", "loc_mid", "q_diff", "tok_self"} <= set(b.numbers)
    for name in ("fig_depth_matrices", "fig_panels", "fig_tokens", "fig_trajectories", "fig_family",
                 "fig_checkpoints", "fig_locality", "fig_vit"):
        plt.close(getattr(coupling.plots, name)(b))
    assert coupling.plots.fig_pythia(b) is None and b.pythia_table() is None and len(b.fig1a_table()) == 28


def test_distance_profile_reads_each_depth_distance():
    L = 6
    i, j = torch.meshgrid(torch.arange(L), torch.arange(L), indexing="ij")
    m = (0.1 * (i - j).abs()).double()  # 1 - m falls by 0.1 per unit of depth distance
    prof = cp.distance_profile(m)
    assert prof.shape == (L - 1,) and torch.allclose(prof, 1 - 0.1 * torch.arange(1, L).double())
    with pytest.raises(ValueError, match="square"):
        cp.distance_profile(torch.zeros(3, 4))


def test_haar_draws_are_reused_unchanged():
    a = cp.haar_orthogonal(8, n=3, seed=5)
    assert cp.haar_orthogonal(8, n=3, seed=5) is a and torch.equal(a, cp._haar(8, 3, 5, torch.float64))
    assert torch.allclose(a @ a.transpose(-1, -2), torch.eye(8, dtype=torch.float64).expand(3, 8, 8), atol=1e-12)
    assert not torch.equal(cp.haar_orthogonal(8, n=3, seed=6), a)
