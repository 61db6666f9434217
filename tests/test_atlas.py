"""The layer atlas (issue 18): every column is the library's metric, the shared passes give exactly what
separate runs give, the CLI rejects bad input with one clear message each, and a run resumes from its pieces."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layerlab.chapters import atlas
from layerlab.chapters.atlas import measure
from layerlab.chapters.residual.analysis import lens_nll
from layerlab.core.jacobians import reference_jacobians
from layerlab.core.models import TINY_FAMILIES, tiny_model
from layerlab.core.residual import run_with_capture
from layerlab.metrics import ablation, coupling, diversity, members, weights

L = 5


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", seed=0, num_hidden_layers=L)  # float64


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 256, (3, 24), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def pos():
    return measure.lens_positions(24, 6, 0), measure.lens_positions(24, 2, 1)


@pytest.fixture(scope="module")
def shared(model, ids, pos):
    return measure.batch_pieces(model, ids, range(L), lens_pos=pos[0], member_pos=pos[1], member_chunk=2)


def test_shared_pass_equals_separate_runs_bit_for_bit(model, ids, pos, shared):
    sep = measure.batch_pieces(model, ids, range(L), lens_pos=pos[0], member_pos=pos[1], member_chunk=2,
                               shared=False)
    assert sorted(shared) == sorted(sep)
    for k in shared:
        assert torch.equal(shared[k], sep[k]), k


def test_ablation_and_geometry_columns_are_the_engine(model, ids, shared):
    ivs = ablation.sweep_interventions(model, measure.OPS)
    ref = ablation.evaluate_interventions(model, ids, ivs, batch_size=3, geometry=True)
    naive = ablation.evaluate_interventions(model, ids, ivs, batch_size=3, prefix_cache=False)
    np.testing.assert_array_equal(shared["base"].numpy(), ref.base)
    for k, v in ref.nll.items():
        np.testing.assert_array_equal(shared[f"nll/{k}"].numpy(), v)
        np.testing.assert_allclose(shared[f"nll/{k}"].numpy(), naive.nll[k], rtol=0, atol=1e-10)
    # equal windows: the mean of per-window token means is the engine's token mean
    np.testing.assert_allclose(shared["block_influence"].mean(1).numpy(), ref.block_influence, rtol=1e-12)
    np.testing.assert_allclose(shared["angular_distance"].mean(1).numpy(), ref.angular_distance, rtol=1e-12)


def test_lens_and_norm_columns_are_the_residual_chapters(model, ids, pos, shared):
    lp = pos[0]
    _, cap = run_with_capture(model, ids, ("block_in", "block_out"))
    hs = torch.cat([cap["block_in"], cap["block_out"][-1:]])  # [L+1, B, T, d]
    for b in range(ids.shape[0]):
        rec, fro = lens_nll(model, hs[:, b, lp], hs[-1, b, lp], ids[b, lp + 1], fast=False)
        np.testing.assert_allclose(shared["lens_recompute"][:, b].numpy(), rec.mean(1).numpy(), rtol=1e-12)
        np.testing.assert_allclose(shared["lens_frozen"][:, b].numpy(), fro.mean(1).numpy(), rtol=1e-12)
    n = hs.norm(dim=-1)
    np.testing.assert_allclose(shared["norm_growth"].numpy(), (n[1:] / n[:-1]).mean(-1).numpy(), rtol=1e-12)


def test_member_columns_are_the_diversity_decomposition(model, ids, pos, shared):
    mp = pos[1]
    labels = ids[:, mp + 1].reshape(-1).tolist()
    feats = members.collect(model, list(ids), labels, [mp.tolist()] * ids.shape[0])
    mr = members.apply_readout(feats, members.lens_readout(model))
    mse, _, _ = diversity.terms_at_depth(mr)
    np.testing.assert_allclose(shared["member_bias"].numpy(), mse.bias_i.numpy(), rtol=1e-12)
    np.testing.assert_allclose(shared["member_div"].numpy(), mse.div_i.numpy(), rtol=1e-12)
    assert torch.equal(shared["summaries"], diversity.summaries(mr))


def test_jacobian_columns_are_the_coupling_metrics(model, ids):
    layers = list(range(L))
    got = measure.jacobian_piece(model, ids[0], 20, layers, k=6)
    J = reference_jacobians(model, ids[0], token=20, layers=layers).double()
    np.testing.assert_allclose(got["spectral_norm"].numpy(), torch.linalg.matrix_norm(J, 2).numpy(), rtol=1e-8)
    np.testing.assert_allclose(got["jacobian_fro"].numpy(), torch.linalg.matrix_norm(J).numpy(), rtol=1e-8)
    m = torch.stack([torch.stack([coupling.coupling(J[i], J[j], 6) for j in layers]) for i in layers])
    want = [m[0, 1], *[(m[i, i - 1] + m[i, i + 1]) / 2 for i in range(1, L - 1)], m[L - 1, L - 2]]
    np.testing.assert_allclose(got["coupling"].numpy(), torch.stack(want).numpy(), rtol=1e-6)
    assert torch.isfinite(got["coupling_null"]).all()


def test_weight_columns_are_the_anatomy_metrics(model):
    got = measure.weight_piece(model, ("gate", "up"))
    d = torch.stack([weights.delta_correlations(weights.component_stack(model, c)) for c in ("gate", "up")]).mean(0)
    np.testing.assert_allclose(got["delta_corr"][1:L - 1].numpy(), d.numpy(), rtol=1e-12)
    assert np.isnan(got["delta_corr"][0]) and np.isnan(got["weight_r2"][0])
    assert torch.isfinite(got["weight_r2"][1:]).all()


def test_recovery_columns_are_the_anatomy_metric(model, ids):
    """The recovery pieces are the anatomy chapter's perturb-and-fine-tune run (layer scope, fixed length) and its
    σ = 0 control: the damage is the perturbed model's NLL minus the clean one, both by plain full forwards (no
    frozen prefix); the damage left is the two runs' final NLLs apart; the drift is the control's final NLL minus
    the clean one. The model comes back unchanged."""
    from layerlab.metrics import recovery
    from layerlab.metrics.ablation import window_nll

    train = torch.randint(0, 256, (4, 12), generator=torch.Generator().manual_seed(5))
    ev = ids[:2]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    base = recovery.baseline_nll(model, ev, eval_batch_size=2)
    got = measure.recovery_piece(model, 2, train_ids=train, eval_ids=ev, base_nll=base, sigma=0.5, lr=1e-2, steps=4,
                                 batch_size=1)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    clean = recovery.CleanInputs.for_runs(model, [1, 2], train_ids=train, eval_ids=ev, steps=4, batch_size=1,
                                          eval_batch_size=2, seed=0)
    shared = measure.recovery_piece(model, 2, train_ids=train, eval_ids=ev, base_nll=base, sigma=0.5, lr=1e-2,
                                    steps=4, batch_size=1, clean=clean)
    assert all(torch.equal(shared[k], got[k]) for k in got)  # the atlas's shared clean inputs: the same bits
    kw = dict(train_ids=train, eval_ids=ev, lr=1e-2, steps=4, eval_every=4, batch_size=1, eval_batch_size=2)
    noisy = recovery.recovery_run(model, 2, sigma_rel=0.5, **kw)
    control = recovery.recovery_run(model, 2, sigma_rel=0.0, **kw)
    assert noisy.steps == control.steps == [0, 4]  # evaluated before and after only
    assert float(got["recovery_left"]) == noisy.nll[-1] - control.nll[-1]
    assert float(got["recovery_drift"]) == control.nll[-1] - base
    with torch.no_grad():
        clean = float(window_nll(model(ev, use_cache=False).logits, ev).mean())
        with recovery.perturb(model, 2, 0.5, seed=0):
            noisy0 = float(window_nll(model(ev, use_cache=False).logits, ev).mean())
        # the control's fine-tune, replayed by hand: AdamW on layer 2's matrices, plain full forwards
        params = [p for k, p in model.named_parameters() if ".layers.2." in k]
        opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.0)
        order = np.random.default_rng(0).permutation(4)
        saved = [p.detach().clone() for p in params]
        for step in range(4):
            x = train[[int(order[step])]]
            with torch.enable_grad():
                lg = model(x, use_cache=False).logits
                loss = torch.nn.functional.cross_entropy(lg[:, :-1].reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1))
                opt.zero_grad(set_to_none=True)
                loss.backward()
            opt.step()
        tuned = float(window_nll(model(ev, use_cache=False).logits, ev).mean())
        for p, old in zip(params, saved):
            p.copy_(old)
        model.zero_grad(set_to_none=True)
    np.testing.assert_allclose(float(got["noise_damage"]), noisy0 - clean, rtol=1e-10)
    np.testing.assert_allclose(float(got["recovery_drift"]), tuned - clean, rtol=1e-8, atol=1e-12)
    assert abs(noisy0 - clean) > 1e-6  # the noise changed the model (a random one need not get worse)


def test_recovery_fraction_is_left_over_damage_and_undefined_below_the_drift():
    """1 = nothing healed, 0 = all, above 1 = worse; NaN where the damage does not exceed what the control's
    fine-tune alone moved (in either direction), including a negative damage."""
    from layerlab.chapters.atlas.analysis import recovery_fraction

    got = recovery_fraction([2.0, 0.5, 0.5, 0.05, -0.1, 0.3], [0.5, 0.5, 0.6, 0.01, 0.0, 0.0],
                            [0.01, -0.02, 0.0, -0.06, 0.0, 0.3])
    np.testing.assert_array_equal(got[:3], [0.25, 1.0, 1.2])
    assert np.isnan(got[3:]).all()


def test_bad_recovery_settings_fail_with_one_message():
    with pytest.raises(ValueError, match="recovery_eval_windows and recovery_batch >= 1"):
        atlas.run(atlas.preset("smoke", recovery_batch=0), progress=False)
    with pytest.raises(ValueError, match="recovery_steps >= 0"):
        atlas.run(atlas.preset("smoke", recovery_steps=-1), progress=False)


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_every_family_gets_every_column(family):
    """The atlas's pieces on a tiny model of every supported family (fused qkv, no gate, parallel residual,
    sandwich norms, ...): the shared pass equals the separate passes bit for bit, every column is finite, and
    the weight lens reads the family's own reader matrices (a fused qkv where there is one)."""
    m = tiny_model(family, seed=0, num_hidden_layers=4)
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(2))
    lp, mp = measure.lens_positions(16, 4, 0), measure.lens_positions(16, 2, 1)
    got = measure.batch_pieces(m, x, range(4), lens_pos=lp, member_pos=mp, member_chunk=2)
    ref = measure.batch_pieces(m, x, range(4), lens_pos=lp, member_pos=mp, member_chunk=2, shared=False)
    assert got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in got)
    assert all(torch.isfinite(v).all() for v in got.values())
    # the member lenses exist exactly where the members sum to the logits (not under Gemma 2's soft-cap)
    defined = family != "gemma2"
    assert measure.members_defined(m) == defined and ("member_bias" in got) == defined
    assert (measure.omitted_lenses(m) == "") == defined
    jac = measure.jacobian_piece(m, x[0], 15, list(range(4)), k=4)
    assert all(torch.isfinite(v).all() for v in jac.values())
    readers = measure.reader_components(m)
    assert ("qkv" in readers) != ("q" in readers) and set(readers) <= {"q", "k", "v", "gate", "up", "qkv"}
    w = measure.weight_piece(m)
    assert torch.isfinite(w["weight_r2"][1:]).all() and torch.isfinite(w["delta_corr"][1:3]).all()
    from layerlab.metrics.recovery import baseline_nll

    train = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(3))
    rec = measure.recovery_piece(m, 1, train_ids=train, eval_ids=x[:1], base_nll=baseline_nll(m, x[:1]), sigma=0.5,
                                 lr=1e-3, steps=2, batch_size=1)
    assert all(torch.isfinite(v) for v in rec.values()) and float(rec["noise_damage"]) != 0


def test_a_soft_capped_model_gets_an_atlas_without_member_lenses(capsys, fresh_cache, tmp_path):
    """Gemma 2 (final-logit soft-cap, 6 blocks: its per-layer attention types follow the depth): the CLI
    writes the atlas without the bias-diversity and information-gain columns and says why."""
    from layerlab.cli import main

    assert main(["atlas", "tiny-gemma2", "--profile", "smoke", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "note: no bias-diversity or information-gain columns: gemma2 soft-caps its final logits" in out
    r = atlas.run(atlas.preset("smoke", model="tiny-gemma2"))
    assert r.n_layers == 6 and "skip" in r.wide() and "coupling" in r.wide()
    assert not {"attn_bias", "attn_div", "mlp_bias", "mlp_div", "info_gain"} & set(r.wide().columns)
    assert r.numbers["n_pairs"] == len(r.agreement) == r.wide().shape[1] * (r.wide().shape[1] - 1) // 2
    assert "headline_diversity" not in r.numbers and "ranks" in r.numbers["headline_anatomy"]


def _cli(argv, capsys):
    from layerlab.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert "Traceback" not in err and err.count("\n") == 1
    return err


@pytest.fixture()
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache that sees the fetched corpora."""
    from layerlab.core.cache import cache_dir

    (tmp_path / "data").symlink_to(cache_dir() / "data")
    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path))
    return tmp_path


def test_cli_rejects_bad_input_with_one_message(capsys, fresh_cache):
    assert "unknown model 'no-such-model'" in _cli(["atlas", "no-such-model", "--profile", "smoke"], capsys)
    assert "out of range" in _cli(["atlas", "tiny-llama", "--profile", "smoke", "--layers", "0-40"], capsys)
    assert "below one window" in _cli(["atlas", "tiny-llama", "--profile", "smoke", "--tokens", "3"], capsys)


def test_run_resumes_from_cached_pieces(fresh_cache, monkeypatch):
    P = atlas.preset("smoke", tiny_layers=3, tokens=124, batch_size=2, jacobian_samples=2, n_boot=50, n_perm=50)
    real, calls = measure.batch_pieces, []

    def flaky(*a, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # interrupted in the second batch
        return real(*a, **kw)

    monkeypatch.setattr(measure, "batch_pieces", flaky)
    with pytest.raises(KeyboardInterrupt):
        atlas.run(P, progress=False)
    calls.clear()
    r = atlas.run(P, progress=False)
    n_batches = -(-r.numbers["n_windows"] // P.batch_size)
    assert len(calls) == n_batches - 1  # the first batch came from the cache
    assert isinstance(r, atlas.AtlasResult) and set(r.table.layer) == {0, 1, 2}
    calls.clear()
    assert atlas.run(P, progress=False).numbers == r.numbers and not calls  # the whole result is cached
    assert len(atlas.pair_claims(r)) == len(r.agreement)
    assert [c.id for c in atlas.claims(r)] == ["AG", "AF", "AA", "AX"]


def test_an_interrupted_recovery_resumes_from_its_cached_layers(fresh_cache, monkeypatch):
    P = atlas.preset("smoke", tiny_layers=3, tokens=124, batch_size=2, jacobian_samples=2, n_boot=50, n_perm=50)
    real, calls, interrupt = measure.recovery_piece, [], [True]

    def flaky(model, layer, **kw):
        calls.append(layer)
        if interrupt[0] and len(calls) == 2:
            raise KeyboardInterrupt  # interrupted in the second layer's fine-tune
        return real(model, layer, **kw)

    monkeypatch.setattr(measure, "recovery_piece", flaky)
    with pytest.raises(KeyboardInterrupt):
        atlas.run(P, progress=False)
    calls.clear()
    interrupt[0] = False
    r = atlas.run(P, progress=False)
    assert calls == [1, 2]  # layer 0 came from the cache
    assert r.wide()["noise_damage"].notna().all() and "recovery" in r.table.lens.values
    assert not r.table[r.table.lens.isin(["noise_damage", "recovery"])][["low", "high"]].notna().any().any()  # no CI


def test_agreement_can_reach_significance_after_holm_over_all_pairs():
    """19 lenses = 171 pairs: with the preset's 2,000 permutations the smallest Holm-adjusted p would be
    171 / 2001 = 0.085 > 0.025 and no pair could ever agree. The permutation count follows the family size,
    so two lenses that rank 30 layers identically agree, and independent noise does not."""
    import pandas as pd

    from layerlab.chapters.atlas.analysis import LENSES, agreement
    from layerlab.report.inference import permutations_for_holm

    assert permutations_for_holm(2000, 171) * 0.025 >= 2 * 171 and permutations_for_holm(50_000, 3) == 50_000
    rng = np.random.default_rng(0)
    names = list(LENSES)[:19]
    w = pd.DataFrame({n: rng.normal(size=30) for n in names})
    w[names[1]] = 2 * w[names[0]] + 1  # the same ranking of the layers
    df = agreement(w, n_boot=50, n_perm=2000, seed=0)
    assert len(df) == 171
    hit = df[(df.a == names[0]) & (df.b == names[1])].iloc[0]
    assert hit.verdict == "agree" and hit.p_holm_greater <= 0.025
    assert (df.verdict == "agree").sum() <= 2  # the others are noise (at most a chance hit)


def test_summary_rows_are_decided_by_cross_family_pairs_only():
    """Bias and Div of one member share its Ω, so they rank layers alike for any model: such a within-family
    pair is shown in the pair rows but cannot make AG "supported"."""
    import pandas as pd

    from layerlab.chapters.atlas.analysis import agreement
    from layerlab.chapters.atlas.claims import _agree_row, cross_family

    rng = np.random.default_rng(3)
    w = pd.DataFrame({n: rng.normal(size=30) for n in ("mlp_bias", "mlp_div", "skip", "coupling")})
    w["mlp_div"] = w["mlp_bias"] + 1e-3 * rng.normal(size=30)  # tied, as by Ω
    ag = agreement(w, n_boot=50, n_perm=2000, seed=0)
    assert len(cross_family(ag)) == 5 and ag[(ag.a == "mlp_bias") & (ag.b == "mlp_div")].verdict.iloc[0] == "agree"
    row = _agree_row("AG", type("R", (), {"agreement": ag})(), "x")
    assert row.verdict == "inconclusive" and "different families" in row.claim
    w["coupling"] = 3 * w["skip"]  # a cross-family pair that ranks the layers alike decides it
    row = _agree_row("AG", type("R", (), {"agreement": agreement(w, n_boot=50, n_perm=2000, seed=0)})(), "x")
    assert row.verdict == "supported" and row.note == "largest ρ: skip vs coupling"


def test_atlas_windows_come_from_distinct_documents_first():
    """Every interval of the atlas is over documents, so its windows are spread over documents: one from
    each document (seeded order) before any document gives a second; the cpu preset's 8 windows are 8
    documents (the old seeded subset of all windows drew them from 3)."""
    from layerlab.chapters.atlas.run import atlas_windows
    from layerlab.core.models import byte_tokenizer

    tok = byte_tokenizer()
    P = atlas.preset("smoke", window=64)
    n_docs = len(set(atlas_windows(tok, atlas.preset("smoke", window=64, tokens=10**6)).doc_ids))
    assert n_docs >= 8
    for n in (3, n_docs, n_docs + 2):
        w = atlas_windows(tok, atlas.preset("smoke", window=64, tokens=n * 63))
        docs = list(w.doc_ids)
        assert len(docs) == n and len(set(docs)) == min(n, n_docs)
    assert atlas_windows(tok, P).doc_ids == atlas_windows(tok, P).doc_ids  # seeded


def test_layer_table_intervals_are_over_document_means():
    """A lens's interval is the interval of a mean over the per-document means (two windows of one document
    count once): Student-t from 8 documents, the exact sign-flip interval below (6 documents: their range),
    never a percentile bootstrap over a handful of documents."""
    from scipy import stats

    from layerlab.report.inference import unit_interval

    rng = np.random.default_rng(0)
    x = rng.normal(1.0, 0.5, 16)
    g = np.repeat(np.arange(8), 2)
    m = x.reshape(8, 2).mean(1)
    half = stats.t.ppf(0.975, 7) * m.std(ddof=1) / np.sqrt(8)
    est, lo, hi = unit_interval(x, g)
    assert est == pytest.approx(m.mean()) and (lo, hi) == pytest.approx((m.mean() - half, m.mean() + half))
    assert unit_interval(x[:12], g[:12])[1:] == pytest.approx((m[:6].min(), m[:6].max()))
    # NaN values are dropped; one document gives no interval; no spread gives a zero-width one
    x2 = x.copy()
    x2[0] = np.nan
    assert unit_interval(x2, g)[0] == pytest.approx(np.mean([x2[1], *m[1:]]))
    assert np.isnan(unit_interval(x[:2], g[:2])[1])
    assert unit_interval(np.ones(4), np.arange(4)) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="unit labels"):
        unit_interval(x, g[:3])


def test_agreement_caption_names_the_colours_the_figure_uses():
    """The caption of the agreement figure said "blue: same order" under a RdBu_r map that draws ρ = +1 red."""
    import json
    import re
    from pathlib import Path

    import matplotlib

    from layerlab.chapters.atlas import plots

    src = Path(plots.__file__).read_text()
    cmap = matplotlib.colormaps[re.search(r'fig_agreement.*?cmap="(\w+)"', src, re.S).group(1)]
    r, g, b, _ = cmap(1.0)  # ρ = +1 (vmax)
    same = "red" if r > b else "blue"
    nb = json.loads((Path(__file__).parents[1] / "notebooks" / "atlas.ipynb").read_text())
    caption = next("".join(c["source"]) for c in nb["cells"] if "name: fig-atlas-agreement" in "".join(c["source"]))
    assert f"{same}: same order" in caption, caption


@pytest.mark.parametrize("n_layers", [12, 30])
def test_heatmap_layer_numbers_never_overlap(n_layers):
    """The heatmap's layer numbers (x axis) are legible for a short and a deep model: at least 2 points between
    any two tick labels' drawn boxes, with the book's style and all 20 lens names (SmolLM2's 30 layers once ran
    '10 11 12' together: 0.08 px apart)."""
    from types import SimpleNamespace

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    rng = np.random.default_rng(0)
    lenses = ["skip", "skip_attn", "skip_mlp", "neighbour_avg", "lens_drop_recompute", "lens_drop_frozen",
              "norm_growth", "block_influence", "angular_distance", "spectral_norm", "jacobian_fro", "coupling",
              "attn_bias", "attn_div", "mlp_bias", "mlp_div", "info_gain", "weight_r2", "delta_corr", "noise_damage",
              "recovery"]
    atlas.plots.use_style()
    wide = pd.DataFrame(rng.normal(size=(n_layers, len(lenses))), columns=lenses)
    r = SimpleNamespace(wide=lambda: wide, numbers={"model": "m"}, preset=SimpleNamespace(model="m"),
                        tiers=pd.DataFrame({"layer": range(n_layers), "tier": rng.integers(1, 4, n_layers)}))
    fig = atlas.plots.fig_heatmap(r)
    fig.canvas.draw()
    ax = fig.axes[0]
    boxes = [t.get_window_extent() for t in ax.get_xticklabels() if t.get_text()]
    assert len(boxes) == n_layers
    gap = min(b.x0 - a.x1 for a, b in zip(boxes, boxes[1:]))  # pixels
    assert gap >= 2 * fig.dpi / 72, f"layer numbers {gap:.2f} px apart"
    plt.close(fig)


def test_heatmap_draws_undefined_cells_grey():
    """The caption says "grey: undefined": a lens undefined at a layer (weight_r2 at layer 0) is drawn grey, opaque,
    not in the white of the page."""
    from types import SimpleNamespace

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    atlas.plots.use_style()
    wide = pd.DataFrame({"skip": [1.0, 2.0, 3.0], "weight_r2": [np.nan, 0.2, 0.1]})
    r = SimpleNamespace(wide=lambda: wide, numbers={"model": "m"}, preset=SimpleNamespace(model="m"),
                        tiers=pd.DataFrame({"layer": range(3), "tier": [1, 2, 2]}))
    fig = atlas.plots.fig_heatmap(r)
    red, green, blue, alpha = fig.axes[0].images[0].cmap.get_bad()
    assert alpha == 1 and red == green == blue and 0.5 < red < 0.9
    plt.close(fig)


def test_heatmaps_draw_no_grid_across_their_cells():
    """The book's whitegrid style would draw white lines across the heatmaps' cells; both figures turn them off."""
    from types import SimpleNamespace

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    atlas.plots.use_style()
    rng = np.random.default_rng(1)
    lenses = ["skip", "coupling", "mlp_div"]
    wide = pd.DataFrame(rng.normal(size=(8, 3)), columns=lenses)
    m = wide.corr(method="spearman")
    agreement = pd.DataFrame({"a": ["skip"], "b": ["coupling"], "verdict": ["agree"]})
    r = SimpleNamespace(wide=lambda: wide, numbers={"model": "m"}, preset=SimpleNamespace(model="m"),
                        tiers=pd.DataFrame({"layer": range(8), "tier": rng.integers(1, 4, 8)}),
                        matrix=lambda: m, agreement=agreement)
    for fig in (atlas.plots.fig_heatmap(r), atlas.plots.fig_agreement(r)):
        ax = fig.axes[0]
        lines = ax.get_xgridlines() + ax.get_ygridlines()
        assert lines and not any(g.get_visible() for g in lines)
        plt.close(fig)
