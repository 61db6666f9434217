import dataclasses
import importlib
import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from layerlab.chapters import residual
from layerlab.chapters.residual import analysis as lens
from layerlab.core.cache import cache_dir
from layerlab.core.models import byte_tokenizer, tiny_model
from layerlab.core.residual import contributions, lens_logits, run_with_capture
from layerlab.data import corpora as data
from layerlab.metrics import perplexity
from layerlab.report.claims import VERDICTS, claim_table


@pytest.fixture(scope="module")
def windows():
    return data.token_windows(byte_tokenizer(), "test", window=24, max_tokens=23 * 6, seed=0)


def _resid(model, ids):
    _, cap = run_with_capture(model, ids, ("embed", "block_out"))
    return torch.cat([cap["embed"][None], cap["block_out"]])  # [L+1, B, T, d]


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt2"])
def test_lens_nll_matches_the_generic_lens_and_the_model(family):
    model = tiny_model(family, seed=0)  # float64
    ids = torch.randint(0, 256, (2, 10), generator=torch.Generator().manual_seed(1))
    resid = _resid(model, ids)[:, :, :-1].flatten(1, 2)  # [L+1, P, d]
    targets = ids[:, 1:].flatten()
    rec, fro = lens.lens_nll(model, resid, resid[-1], targets)
    rec_slow, fro_slow = lens.lens_nll(model, resid, resid[-1], targets, fast=False)
    torch.testing.assert_close(rec, rec_slow, rtol=0, atol=1e-10)
    torch.testing.assert_close(fro, fro_slow, rtol=0, atol=1e-10)
    for k in (0, resid.shape[0] // 2):
        ref = F.cross_entropy(lens_logits(model, resid[k], mode="frozen", ref=resid[-1]), targets, reduction="none")
        torch.testing.assert_close(fro[k], ref.detach(), rtol=0, atol=1e-10)
    # at the last depth both lenses are the model itself
    model_nll = perplexity.token_nll(model, ids).flatten()
    torch.testing.assert_close(rec[-1], model_nll, rtol=0, atol=1e-10)
    torch.testing.assert_close(fro[-1], model_nll, rtol=0, atol=1e-10)


def test_frozen_lens_is_the_sum_of_member_logits():
    """Kamigaito et al. Eq. 1: frozen lens at depth k = sum of the first k+1 layer members' logits."""
    model = tiny_model("llama", seed=2)
    ids = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(2))
    resid = _resid(model, ids)[:, 0]  # [L+1, T, d]
    c = contributions(model, ids, level="layer")
    partial = c.member_logits()[0].cumsum(dim=1) + c.bias()  # [T, M, V]: embed, +block0, ...
    targets = ids[0, 1:]
    _, fro = lens.lens_nll(model, resid[:, :-1], resid[-1, :-1], targets)
    for k in range(resid.shape[0]):
        direct = F.cross_entropy(partial[:-1, k], targets, reduction="none")
        torch.testing.assert_close(fro[k], direct.detach(), rtol=0, atol=1e-10)


def test_analyze_identities_and_definitions(windows, tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path))
    model = tiny_model("llama", seed=0)
    res = lens.analyse(model, windows, lens_positions=5, batch_size=4, n_boot=100,
                       cache_key={"model": "tiny-llama", "seed": 0})
    L = 4
    P = len(windows) * 5
    assert res.nll_recompute.shape == (L + 1, P) and res.norm.shape == (L + 1, P)
    assert res.update_ratio.shape == (L, P) and res.window_of.shape == (P,)
    assert res.max_abs_logit_err < 1e-10
    np.testing.assert_allclose(res.nll_recompute[-1], res.model_nll, atol=1e-10, rtol=0)
    np.testing.assert_allclose(res.nll_frozen[-1], res.model_nll, atol=1e-10, rtol=0)
    # perplexity from the same pass equals the standalone evaluation
    ref = perplexity.evaluate(model, windows, n_boot=100)
    np.testing.assert_allclose(res.perplexity.window_nll, ref.window_nll, atol=1e-9, rtol=0)
    assert res.perplexity.ppl.estimate == pytest.approx(ref.ppl.estimate, rel=1e-12)
    # norms and update ratios are what they say, on one window
    w0 = windows.input_ids[:1]
    h = _resid(model, w0)[:, 0]  # [L+1, T, d]
    norms = h.norm(dim=-1)  # [L+1, T]
    assert (res.window_of[:5] == 0).all()
    np.testing.assert_allclose(res.norm[:, :5], norms[:, res.position[:5]].numpy(), rtol=1e-12)
    ratio = (h[1:] - h[:-1]).norm(dim=-1) / norms[:-1]  # [L, T]
    np.testing.assert_allclose(res.update_ratio[:, :5], ratio[:, res.position[:5]].numpy(), rtol=1e-12)
    assert np.isclose(res.norm[0].mean(), res.norm_curve(n_boot=50)["norm"][0])
    curve = res.lens_curve(n_boot=50)
    assert set(curve["variant"]) == {"recompute", "frozen"} and len(curve) == 2 * (L + 1)
    assert (curve["low"] <= curve["nll"]).all() and (curve["nll"] <= curve["high"]).all()
    # cached: identical arrays on a second call, no recomputation needed
    again = lens.analyse(model, windows, lens_positions=5, batch_size=4, n_boot=100,
                         cache_key={"model": "tiny-llama", "seed": 0})
    assert np.array_equal(again.nll_frozen, res.nll_frozen)
    assert list(tmp_path.glob("lens/*.safetensors"))


def test_presets_and_errors(windows):
    assert residual.preset("smoke").model.startswith("tiny-")
    assert residual.preset("cpu").model == "smollm2-135m" and residual.PRESETS["cpu"].windows_per_doc >= 2
    gpu = residual.PRESETS["gpu"]
    assert gpu.windows_per_doc * (gpu.window - 1) * 13 >= 1_000_000 and gpu.device == "cuda"
    assert residual.preset("cpu", seed=3).seed == 3 and residual.PRESETS["cpu"].seed == 0
    with pytest.raises(ValueError, match="profile"):
        residual.preset("laptop")
    model = tiny_model("llama", seed=0)
    with pytest.raises(ValueError, match="lens_positions"):
        lens.analyse(model, windows, lens_positions=0)
    res = lens.analyse(model, windows, lens_positions=2, n_boot=50)
    with pytest.raises(ValueError, match="windows_per_doc"):
        lens.subset_perplexity(res, windows, "no/such-doc")


# ----------------------------------------------------------------------------- the chapter protocol
def _same(a, b, where="result"):
    """Exact equality of two (nested) chapter results: DataFrames/Series with dtypes, NaN == NaN."""
    if isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    elif isinstance(a, pd.Series):
        pd.testing.assert_series_equal(a, b, check_exact=True)
    elif dataclasses.is_dataclass(a):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, where
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} != {b!r}"


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    """``run(preset("smoke"))`` into an empty cache (the fetched corpus linked in), then again with the
    computation disabled: the second result can only come from the cache."""
    run_module = importlib.import_module("layerlab.chapters.residual.run")
    root = tmp_path_factory.mktemp("cache")
    (root / "data").symlink_to(cache_dir() / "data", target_is_directory=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYERLAB_CACHE", str(root))
        first = residual.run(residual.preset("smoke"))

        def recompute(*args, **kwargs):
            raise AssertionError("run() recomputed: the result was not read back from the cache")

        mp.setattr(run_module, "_compute", recompute)
        second = residual.run(residual.preset("smoke"))
    assert list(root.glob("residual/*.json")) and list(root.glob("lens/*.safetensors"))
    return first, second


def test_run_is_read_back_from_the_cache(smoke_runs):
    first, second = smoke_runs
    _same(first, second)
    assert isinstance(first, residual.ResidualResult) and isinstance(first.gap, residual.Interval)
    p = first.provenance
    assert (p.chapter, p.profile, p.seed) == ("residual", "smoke", 0) and p.tokens and p.source
    assert p.model.startswith("tiny-llama")


def test_run_tables_and_numbers_agree(smoke_runs):
    r, _ = smoke_runs
    n = r.numbers
    # the glued numbers are the typed fields (what the prose says is what the claims test)
    assert (n["ppl"], n["ppl_low"], n["ppl_high"]) == (r.ppl.estimate, r.ppl.low, r.ppl.high)
    assert (n["gap"], n["drop"]) == (r.gap.estimate, r.drop.estimate)
    # the paired gap is a mean over documents (one value per document), the claims' unit
    assert r.gap.estimate == pytest.approx(r.units.gap.mean()) and n["gap_docs"] == len(r.units.gap) >= 8
    assert n["n_window_docs"] == len(set(r.units.documents)) >= 8
    assert n["n_layers"] == r.n_layers == 4 and n["ln_vocab"] == pytest.approx(math.log(r.vocab))
    assert n["recL"] == pytest.approx(n["nll"], abs=0.05)  # the last lens depth is the model (on a sample)
    # tables survive the cache with their display shape (index names are rebuilt, not stored)
    t = r.per_doc_table()
    assert t.index.name == "document" and list(t.columns) == ["NLL (nats/token)", "windows", "perplexity"]
    assert t["windows"].sum() == n["n_windows"] and n["hardest_doc"] in t.index
    lt = r.lens_table()
    assert lt.columns.tolist() == ["frozen", "recompute"] and lt.index.tolist() == list(range(r.n_layers + 1))
    curve = r.lens_curve.set_index(["variant", "depth"])["nll"]
    assert lt.loc[r.n_layers, "frozen"] == round(curve[("frozen", r.n_layers)], 3)
    assert len(r.norm_curve) == r.n_layers + 1 and r.norm_curve["update_ratio"].isna().tolist()[-1]
    assert r.comparison.loc["perplexity", "random init"] == r.ppl_random.estimate


def test_claims_rows_and_verdicts(smoke_runs):
    r, _ = smoke_runs
    rows = residual.claims(r)
    assert [c.id for c in rows] == ["R1", "R2", "R2b", "R3", "R5", "R6"]
    assert all(c.verdict in VERDICTS for c in rows)
    by = {c.id: c for c in rows}
    assert by["R1"].verdict == "supported" and by["R1"].null == "tolerance 0.0001"  # float32 model, exact lens
    assert by["R1"].tag == "identity"
    # empirical rows are tested over documents, with the unit and n in the row
    gap = r.units.gap
    assert by["R5"].ours == pytest.approx(gap.mean()) and by["R5"].n == len(gap) and by["R5"].unit == "documents"
    assert all(by[k].rule and by[k].reading for k in ("R2", "R2b", "R3", "R5", "R6"))
    assert len(claim_table(rows)) == 6
    # broken identity; float64 models are held to the tight tolerance
    assert {c.id: c for c in residual.claims(dataclasses.replace(r, ident_err=1.0))}["R1"].verdict == "contradicted"
    f64 = dataclasses.replace(r, model_dtype="float64", ident_err=1e-6)
    assert {c.id: c for c in residual.claims(f64)}["R1"].verdict == "contradicted"


def _units(r, n_docs: int, *, fall: float, grow: float, gap: float, seed: int = 0):
    """Synthetic per-document units: loss falls by ``fall`` per depth, norm grows by ``grow``, the twin is
    worse by ``gap`` nats (negative values: the opposite effect)."""
    rng = np.random.default_rng(seed)
    L1 = r.n_layers + 1
    depth = np.arange(L1, dtype=float)

    def curves(slope):
        return 5.0 + slope * depth[None] + rng.normal(0, 0.05, (n_docs, L1))

    docs = [f"d{i}" for i in range(n_docs)]
    return residual.DocumentUnits(
        documents=docs, lens_recompute=curves(-fall), lens_frozen=curves(-fall), norm=curves(grow),
        documents_random=docs, lens_recompute_random=curves(0.0), lens_frozen_random=curves(0.0),
        norm_random=curves(0.0), gap=gap + rng.normal(0, 0.05, n_docs))


@pytest.mark.parametrize("n_docs,effect,expected", [
    (10, 1.0, "supported"),      # a true effect over enough documents
    (10, -1.0, "contradicted"),  # the opposite effect
    (10, 0.0, None),             # no effect: never "supported"
    (3, 1.0, "inconclusive"),    # too few documents for an exact test to decide
])
def test_claims_follow_synthetic_units(smoke_runs, n_docs, effect, expected):
    r, _ = smoke_runs
    u = _units(r, n_docs, fall=effect, grow=effect, gap=effect)
    by = {c.id: c for c in residual.claims(dataclasses.replace(r, units=u))}
    for cid in ("R2", "R2b", "R3", "R5", "R6"):
        if expected is None:
            assert by[cid].verdict != "supported", (cid, by[cid])
        else:
            assert by[cid].verdict == expected, (cid, by[cid])
        assert by[cid].n == n_docs
    if n_docs == 3:
        assert "smallest attainable p" in by["R5"].reading


def test_generated_sentences_follow_the_verdicts(smoke_runs):
    from layerlab.chapters.residual.claims import gap_sentence, growth_sentence, norm_sentence

    r, _ = smoke_runs
    rows = residual.claims(r)

    def with_verdict(cid, verdict):
        return [dataclasses.replace(c, verdict=verdict) if c.id == cid else c for c in rows]

    assert "training lowers the loss" in gap_sentence(r, with_verdict("R5", "supported"))
    assert "worse" in gap_sentence(r, with_verdict("R5", "contradicted"))
    assert "not settled" in gap_sentence(r, with_verdict("R5", "inconclusive"))
    assert "grows with depth" in growth_sentence(r, with_verdict("R6", "supported"))
    assert "shrinks" in growth_sentence(r, with_verdict("R6", "contradicted"))
    assert "not settled" in growth_sentence(r, with_verdict("R6", "inconclusive"))
    assert "grows with depth" in norm_sentence(with_verdict("R6", "supported"))
    assert "not settled" in norm_sentence(with_verdict("R6", "inconclusive"))
    # the numbers in the sentence are the result's
    assert f"{r.gap.estimate:.3g}" in gap_sentence(r, rows)
