"""Identities of the bias-diversity decomposition (spec diversity.md section 7, items 1-7) in float64
on tiny random models and random tensors."""

import pytest
import torch

from layerlab.core.models import tiny_model
from layerlab.core.residual import lens_logits, run_with_capture
from layerlab.metrics import diversity as dv
from layerlab.metrics import members as dm

TOL = 1e-10


def _rand(n=6, m=5, c=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    f = torch.randn(n, m, c, generator=g, dtype=torch.float64) * 3
    labels = torch.randint(0, c, (n,), generator=g)
    return f, labels


@pytest.mark.parametrize("kind", dv.TARGETS)
def test_mse_equals_bias_minus_diversity_and_omega_identities(kind):
    f, labels = _rand()
    y = dv.target(labels, f.shape[-1], kind, tau=2.5)
    d = dv.decompose_mse(f, y)
    assert torch.allclose(d.mse, d.bias - d.div, atol=TOL, rtol=0)
    fbar = f.mean(1)
    assert torch.allclose(d.bias, (y**2).sum(-1) - 2 * (y * fbar).sum(-1) + d.omega, atol=TOL, rtol=0)
    assert torch.allclose(d.div, d.omega - (fbar**2).sum(-1), atol=TOL, rtol=0)
    assert torch.all(d.div >= 0) and torch.all(d.div <= d.bias + TOL)
    assert torch.allclose(d.bias_i.mean(1), d.bias) and torch.allclose(d.div_i.mean(1), d.div)


def test_single_member_has_zero_diversity():
    f, labels = _rand(m=1)
    d = dv.decompose_mse(f, dv.target(labels, 4))
    assert torch.all(d.div.abs() < TOL) and torch.allclose(d.bias, d.mse, atol=TOL)


def test_scaled_form_is_m_squared_times_unscaled():
    f, labels = _rand()
    M = f.shape[1]
    c = f / M  # f_i = M c_i with b = 0
    y = dv.target(labels, 4)
    scaled = dv.decompose_mse(dv.ensemble(c, torch.zeros(4, dtype=torch.float64)), y)
    unscaled = dv.decompose_mse(c, y / M)
    for a, b in ((scaled.mse, unscaled.mse), (scaled.bias, unscaled.bias), (scaled.div, unscaled.div)):
        assert torch.allclose(a, M**2 * b, atol=TOL, rtol=0)


def test_ce_equals_mean_member_ce_minus_mean_kl_and_shift_invariance():
    f, labels = _rand()
    g = torch.Generator().manual_seed(1)
    y_soft = torch.softmax(torch.randn(6, 4, generator=g, dtype=torch.float64), -1)
    for y in (dv.target(labels, 4), y_soft):
        d = dv.decompose_ce(f, y)
        assert torch.allclose(d.ce, d.member_ce - d.kl, atol=TOL, rtol=0)
        assert torch.all(d.kl_i >= -TOL)
        f2 = f.clone()
        f2[:, 2] += 7.0  # shift one member by a constant: p and every term are unchanged
        d2 = dv.decompose_ce(f2, y)
        for a, b in ((d.ce, d2.ce), (d.member_ce, d2.member_ce), (d.kl, d2.kl)):
            assert torch.allclose(a, b, atol=1e-9, rtol=0)


@pytest.fixture(scope="module", params=["llama", "gpt2", "neox"])
def tiny_features(request):
    model = tiny_model(request.param, seed=0)
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 259, (t,), generator=g) for t in (5, 9, 7)]
    feats = dm.collect(model, seqs, labels=[1, 2, 3])
    return model, seqs, feats


def test_members_sum_to_the_models_logits(tiny_features):
    model, seqs, feats = tiny_features
    full = dm.apply_readout(feats, dm.lens_readout(model))
    c, b = full.at_depth()
    assert c.shape[1] == 2 * 4 + 1
    with torch.no_grad():
        ref = torch.stack([model(s[None]).logits[0, -1] for s in seqs])
    assert torch.allclose(c.sum(1) + b, ref, atol=TOL, rtol=0)
    # restricted to verbaliser tokens, and at layer level
    ids = [3, 17, 42]
    r = dm.apply_readout(feats, dm.lens_readout(model, ids)).to_layer_level()
    c, b = r.at_depth()
    assert c.shape[1] == 4 + 1
    assert torch.allclose(c.sum(1) + b, ref[:, ids], atol=TOL, rtol=0)


def test_residual_sum_and_truncation_match_the_recomputed_lens():
    model = tiny_model("llama", seed=1)
    ids = torch.randint(0, 259, (1, 8), generator=torch.Generator().manual_seed(2))
    _, cap = run_with_capture(model, ids, ("embed", "attn_out", "mlp_out", "block_out"))
    h_L = cap["embed"] + cap["attn_out"].sum(0) + cap["mlp_out"].sum(0)
    assert torch.allclose(h_L, cap["block_out"][-1], atol=TOL, rtol=0)
    feats = dm.collect(model, [ids[0]], labels=[0])
    ro = dm.apply_readout(feats, dm.lens_readout(model))
    for k in range(1, ro.n_layers + 1):
        c, b = ro.at_depth(k)
        lens = lens_logits(model, cap["block_out"][k - 1][:, -1], mode="recompute")
        assert torch.allclose(c.sum(1) + b, lens, atol=TOL, rtol=0)
    c0, _ = ro.at_depth(0)
    assert c0.shape[1] == 1
    with pytest.raises(ValueError, match="out of range"):
        ro.at_depth(ro.n_layers + 1)


def test_truncated_terms_follow_their_definition():
    """After k blocks the members are the first 2k+1, each divided by r_k; with f_i = M_k c_i + b the
    terms are the definitions of section 3.3, computed here by hand."""
    f, labels = _rand(n=5, m=9, c=3)
    labels = labels % 3
    scales = torch.rand(5, 5, dtype=torch.float64) + 0.5
    b = torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64)
    ro = dv.MemberReadout(f, scales, b, labels)
    y = torch.nn.functional.one_hot(labels, 3).double()
    for k in range(ro.n_layers + 1):
        m = 2 * k + 1
        members = m * f[:, :m] / scales[:, k, None, None] + b  # [N, M_k, C]
        z = f[:, :m].sum(1) / scales[:, k, None] + b  # the lens of h_k
        d, ce, pred = dv.terms_at_depth(ro, k)
        assert torch.allclose(members.mean(1), z, atol=TOL, rtol=0)
        assert torch.allclose(d.mse, ((z - y) ** 2).sum(-1), atol=TOL, rtol=0)
        assert torch.allclose(d.bias, ((members - y[:, None]) ** 2).sum(-1).mean(1), atol=TOL, rtol=0)
        assert torch.allclose(d.div, ((members - z[:, None]) ** 2).sum(-1).mean(1), atol=TOL, rtol=0)
        assert torch.equal(pred, z.argmax(-1))
        assert torch.allclose(ce.ce, -torch.log_softmax(z, -1)[torch.arange(5), labels], atol=TOL, rtol=0)


def test_prefix_recomputes_the_norm_at_half_block_points_with_a_biased_readout():
    """Every prefix of members (half-block points after an attention member included) read through a
    fitted linear head (which has a bias) equals the head applied to the normed prefix residual, computed
    here directly from the captured writes. Reusing the previous block's scale fails this (the head's bias
    makes the argmax depend on the scale)."""
    from layerlab.chapters.diversity import analysis as da
    from layerlab.core.arch import view

    model = tiny_model("llama", seed=0)
    g = torch.Generator().manual_seed(3)
    seqs = [torch.randint(0, 259, (7,), generator=g) for _ in range(12)]
    feats = dm.collect(model, seqs, labels=[i % 3 for i in range(12)])
    head = dm.fit_head(feats, 3)
    assert head.b.abs().max() > 1e-3  # the readout has a bias
    ro = dm.apply_readout(feats, head)
    p = view(model).final_norm_params()
    W, b0 = head.W.double(), head.b.double()
    n_members = ro.raw.shape[1]
    worst_old = 0.0
    for s, seq in enumerate(seqs):
        _, cap = run_with_capture(model, seq[None], ("embed", "attn_out", "mlp_out"))
        writes = [cap["embed"][0, -1]]
        for layer in range(ro.n_layers):
            writes += [cap["attn_out"][layer, 0, -1], cap["mlp_out"][layer, 0, -1]]
        prefix = torch.cumsum(torch.stack(writes), 0)  # [M, d]: residual after each member
        for j in range(1, n_members + 1):
            h = prefix[j - 1]
            normed = p.weight * p.center(h) / p.scale(h)
            ref = W @ normed + b0  # [C]
            c, b = ro.prefix(j)
            assert torch.allclose(c[s].sum(0) + b, ref, atol=TOL, rtol=0), (s, j)
            if j % 2 == 0:  # the old definition: the previous block's scale r_{k-1} at a half-block point
                old = ro.raw[s, :j].sum(0) / ro.scales[s, (j - 1) // 2] + ro.bias
                worst_old = max(worst_old, float((old - ref).abs().max().detach()))
    assert worst_old > 1e-3  # the bug this test guards against is visible on this model
    preds = [da._prefix_prediction(ro, j) for j in range(1, n_members + 1)]
    assert all(pr.shape == (12,) for pr in preds)
    with pytest.raises(ValueError, match="out of range"):
        ro.prefix(n_members + 1)


def test_prefix_without_half_block_scales_is_refused():
    f, labels = _rand(n=4, m=5, c=3)
    ro = dv.MemberReadout(f, torch.ones(4, 3, dtype=torch.float64), torch.ones(3, dtype=torch.float64), labels % 3)
    assert ro.prefix(3)[0].shape == (4, 3, 3)  # block boundary: r_1 is stored
    with pytest.raises(ValueError, match="half_scales"):
        ro.prefix(2)


def test_member_shuffle_keeps_class_marginals():
    f, labels = _rand(n=40, m=3, c=2, seed=3)
    s = dv.shuffle_members(f, labels, seed=0)
    for cls in (0, 1):
        idx = labels == cls
        for i in range(3):
            a = f[idx, i].sort(0).values
            b = s[idx, i].sort(0).values
            assert torch.equal(a, b)
    assert not torch.equal(s, f)


def test_linear_head_keeps_additivity():
    model = tiny_model("llama", seed=0)
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 259, (6,), generator=g) for _ in range(12)]
    feats = dm.collect(model, seqs, labels=[i % 3 for i in range(12)])
    head = dm.fit_head(feats, 3)
    ro = dm.apply_readout(feats, head)
    c, b = ro.at_depth()
    direct = feats.final_normed().double() @ head.W.double().T + head.b.double()
    assert torch.allclose(c.sum(1) + b, direct, atol=1e-8)
    with pytest.raises(ValueError, match="at least two classes"):
        dm.fit_head(feats.subset([0, 3]), 3)


def test_bad_inputs_raise_clear_errors():
    f, labels = _rand()
    with pytest.raises(ValueError, match="unknown target"):
        dv.target(labels, 4, "soft")
    with pytest.raises(ValueError, match="need f"):
        dv.decompose_mse(f, torch.zeros(3, 4))


def test_partial_correlation_removes_a_shared_trend():
    import numpy as np

    from layerlab.chapters.diversity import analysis as da

    rng = np.random.default_rng(0)
    z = np.arange(200, dtype=float)
    x, y = z + rng.normal(0, 5, 200), z + rng.normal(0, 5, 200)
    assert np.corrcoef(x, y)[0, 1] > 0.9
    assert abs(da.partial_corr(x, y, z)) < 0.2


def test_sweep_is_consistent_with_direct_terms():
    from layerlab.chapters.diversity import analysis as da

    f, labels = _rand(n=30, m=9, c=3, seed=4)
    scales = torch.rand(30, 5, dtype=torch.float64) + 0.5
    half = torch.rand(30, 4, dtype=torch.float64) + 0.5
    ro = dv.MemberReadout(f, scales, torch.zeros(3, dtype=torch.float64), labels % 3, half_scales=half)
    sw = da.sweep(ro, n_boot=50)
    d, ce, pred = dv.terms_at_depth(ro, 2)
    row = sw[(sw.k == 2)].set_index("term")["value"]
    assert abs(row["mse"] - float(d.mse.mean())) < 1e-12 and abs(row["kl"] - float(ce.kl.mean())) < 1e-12
    assert abs(row["bias_per_m"] - float(d.bias.mean()) / 5) < 1e-12
    assert set(sw.k) == set(range(5)) and (sw.low <= sw.value + 1e-12).all()
    info = da.info_terms(ro, n_boot=20, n_perm=20)
    assert len(info) == 5 and (info.info_low <= info.info_high).all()


# --------------------------------------------------------------------------- the chapter (smoke profile)
def _assert_same(a, b, where="result"):
    """Deep equality of chapter results (DataFrames compared exactly, dtypes included)."""
    import dataclasses

    import pandas as pd

    if dataclasses.is_dataclass(a):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            _assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b, check_exact=True, obj=where)
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}[{k!r}]")
    else:
        assert a == b, where


@pytest.fixture(scope="module")
def smoke_result():
    from layerlab.chapters import diversity

    return diversity.run(diversity.preset("smoke"))


def test_run_is_served_from_the_cache_with_provenance(smoke_result, monkeypatch):
    import importlib

    from layerlab.chapters import diversity
    from layerlab.core.fingerprints import module_fingerprint

    run_mod = importlib.import_module("layerlab.chapters.diversity.run")  # the package's `run` is the function

    def recompute(*args, **kwargs):
        raise AssertionError("the second run recomputed instead of reading the cache")

    monkeypatch.setattr(run_mod, "_compute", recompute)
    again = diversity.run(diversity.preset("smoke"))
    _assert_same(smoke_result, again)
    p = again.provenance
    assert (p.chapter, p.profile, p.seed, p.device, p.dtype) == ("diversity", "smoke", 0, "cpu", "float32")
    assert p.source == module_fingerprint("layerlab.chapters.diversity.run") and len(p.tokens) >= 16
    assert list(again.tasks) == ["sent", "topic"] and again.headline == "sent" and again.family is not None


def test_claims_of_the_smoke_result(smoke_result):
    from layerlab.chapters import diversity
    from layerlab.report.claims import VERDICTS

    rows = diversity.claims(smoke_result)
    assert [c.id for c in rows] == [f"D{i}" for i in range(1, 12)]
    assert all(c.verdict in VERDICTS for c in rows)
    by_id = {c.id: c for c in rows}
    # the algebra is tagged identity and holds on the tiny model (fp32 live check, fp64 decompositions)
    assert {c.id for c in rows if c.tag == "identity"} == {"D1", "D2", "D4", "D11"}
    assert all(by_id[i].verdict == "supported" for i in ("D1", "D2", "D4", "D11")) and by_id["D2"].ours < 1e-10
    assert diversity.verdicts(rows) == {c.id: c.verdict for c in rows}
    # D3's "ours" is the partial correlation of the headline task's analysed readout
    h = smoke_result.tasks[smoke_result.headline]
    assert by_id["D3"].ours == h["evidence"][h["primary"]]["D3"]["estimate"]
    assert by_id["D3"].n == h["n_test"] and by_id["D3"].unit == "examples"


def test_glued_numbers_cover_the_prose(smoke_result):
    import re
    from pathlib import Path

    import nbformat

    from layerlab.chapters import diversity
    from layerlab.report.glue import flatten

    nb = nbformat.read(Path(__file__).resolve().parents[1] / "notebooks" / "diversity.ipynb", as_version=4)
    used = {m for c in nb.cells if c.cell_type == "markdown" for m in re.findall(r"\{glue:text\}`(\w+)", c.source)}
    glued = set(flatten("div", smoke_result.numbers))
    rows = diversity.claims(smoke_result)
    glued |= set(flatten("div_verdict", diversity.verdicts(rows)))
    glued |= set(flatten("div_text", diversity.sentences(smoke_result, rows)))
    assert used and used <= glued, sorted(used - glued)
    acc = smoke_result.accuracy_table()
    assert list(acc.task) == ["sent", "topic"] and smoke_result.numbers["n_test"] == int(acc.n_test.iloc[0])
