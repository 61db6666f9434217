"""The diversity chapter's claim builder on synthetic results (true effect / none / opposite / few units /
missing / readouts that disagree / tasks at chance), and the evidence designs behind it."""

import importlib
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from layerlab.chapters.diversity import evidence as de
from layerlab.chapters.diversity.pooling import agreement, pool
from layerlab.chapters.diversity.regime import regime
from layerlab.metrics import diversity as dv
from layerlab.metrics import infotheory as it
from layerlab.report.inference import mean_effect
from layerlab.report.resampled import bootstrap_evidence, half_change_depth, lag, partial_correlation
from layerlab.report.verdicts import Direction

dc = importlib.import_module("layerlab.chapters.diversity.claims")  # the package's `claims` is the function
EMPIRICAL = ("D3", "D5", "D6", "D8", "D9", "D10")
SIGN = {"D8": -1.0}  # D8 claims a negative correlation; the others a positive effect


def _ev(effect: float, n: int = 128, seed: int = 0) -> dict:
    import dataclasses

    x = np.random.default_rng(seed).normal(effect, 1.0, n)
    return dataclasses.asdict(mean_effect(x, unit="examples", seed=seed))


def _evidence(effect: float, n: int, seed: int, miss: bool = False) -> dict:
    m = {"missing": "synthetic: not computed"}
    e = {c: (m if miss else _ev(SIGN.get(c, 1.0) * effect, n, seed + i)) for i, c in enumerate(EMPIRICAL)}
    for c in ("D6", "D10"):  # the fall from every depth to full depth, on all examples (decides the other side)
        e[f"{c}_fall"] = m if miss else _ev(effect, n, seed + 50)
    e["D8"] = {t: e["D8"] for t in ("mse", "bias", "div", "ce")}
    e["D9"] = {"normalised": e["D9"], "raw": e["D9"]}
    e["D4"] = {"error": 1e-16, "corr_bias_omega": 0.99, "corr_div_omega": 0.99, "corr_bias_div": 0.99}
    e["D11"] = {"error": 0.0, "bias_over_mse": 30.0, "centred_floor": 2.0}
    e["peak"] = {"depth": 3, "acc_final": 0.8, "acc_peak_all": 0.8, "depth_all": 3}
    return e


def _task(effects: dict[str, float], *, n: int = 128, acc: float = 0.9, miss: bool = False, seed: int = 0) -> dict:
    return {
        "identity_error": 1e-7, "identity_mse": {"mse": 1e-16, "ce": 1e-16}, "primary": "head", "chance": 0.5,
        "n_test": n, "accuracy": {r: {"acc": acc, "acc_low": acc - 0.08, "acc_high": acc + 0.05} for r in effects},
        "evidence": {r: _evidence(e, n, seed + 10 * j, miss) for j, (r, e) in enumerate(effects.items())},
        "info": pd.DataFrame({"null_floor": [0.01, 0.01]}),
        "gains": {"violations": 5, "steps": 29, "null_mean": 14.0, "p_fewer": 0.01},
        "premise": {"excess": 0.1, "excess_low": 0.05, "excess_high": 0.2},
    }


def _result(effect: float | dict, *, tasks=("sent", "topic"), **kw):
    eff = effect if isinstance(effect, dict) else {"prompt": effect, "head": effect}
    return SimpleNamespace(tasks={t: _task(eff, seed=100 * i, **kw) for i, t in enumerate(tasks)},
                           headline=tasks[0], family=None)


def _verdicts(result) -> dict[str, str]:
    return dc.verdicts(dc.claims(result))


def test_true_effect_is_supported():
    v = _verdicts(_result(1.0))
    assert all(v[c] == "supported" for c in EMPIRICAL), v
    assert v["D1"] == v["D2"] == v["D4"] == v["D11"] == "supported"


def test_no_effect_is_never_supported():
    for seed_shift in range(3):
        r = _result(0.0)
        for t in r.tasks.values():  # fresh noise per repetition
            for ro in t["evidence"]:
                t["evidence"][ro] = _evidence(0.0, 128, 7 * seed_shift + len(ro))
        v = _verdicts(r)
        assert all(v[c] in ("inconclusive", "not supported") for c in EMPIRICAL), v


def test_opposite_effect_is_contradicted():
    v = _verdicts(_result(-1.0))
    assert all(v[c] == "contradicted" for c in EMPIRICAL), v


def test_too_few_units_is_inconclusive():
    v = _verdicts(_result(3.0, n=4))
    assert all(v[c] == "inconclusive" for c in EMPIRICAL), v


def test_missing_inputs_keep_their_rows():
    rows = dc.claims(_result(1.0, miss=True))
    assert [c.id for c in rows] == [f"D{i}" for i in range(1, 12)]
    for c in rows:
        if c.id in EMPIRICAL:
            assert c.verdict == "inconclusive" and c.ours is None and "synthetic: not computed" in c.note


def test_readouts_that_disagree_make_the_claim_depend_on_the_readout():
    rows = {c.id: c for c in dc.claims(_result({"prompt": -1.0, "head": 1.0}))}
    assert rows["D3"].verdict == "inconclusive" and "depends on the readout" in rows["D3"].reading
    assert rows["D3"].remedy == "Agreement of the readouts, not more units alone, would decide it."


def test_tasks_at_chance_are_reported_but_excluded():
    rows = {c.id: c for c in dc.claims(_result(1.0, acc=0.52))}  # CI low 0.44 <= chance 0.5
    for cid in ("D5", "D6", "D8", "D10"):
        assert rows[cid].verdict == "inconclusive" and "chance" in rows[cid].note
    assert rows["D3"].verdict == "supported"  # not a claim about label information


def test_pool_names_agreement_and_holm():
    evs = {f"{t}/head": mean_effect(np.random.default_rng(i).normal(s, 1, 64), unit="examples")
           for i, (t, s) in enumerate((("a", 1.0), ("b", -1.0)))}
    d = pool(Direction(), evs)
    assert d.verdict == "inconclusive" and "disagree in sign" in d.reading and "both directions" in d.reading
    assert pool(Direction(), {"b/head": evs["b/head"]}).verdict == "contradicted"
    assert "agree in sign (all positive)" in agreement({k: v for k, v in evs.items() if v.estimate > 0} | {
        "c/head": evs["a/head"]})


# --------------------------------------------------------------------------- the designs
def test_partial_correlation_removes_a_dominating_shared_scale():
    rng = np.random.default_rng(0)
    n = 128
    omega = rng.lognormal(10, 1, n)
    a, b = rng.normal(0, 1, n), rng.normal(0, 1, n)
    bias, div = omega + 100 * a, omega + 100 * b  # raw r ~ 1, nothing beyond omega
    assert np.corrcoef(bias, div)[0, 1] > 0.99
    null = partial_correlation(bias, div, omega, unit="examples", n_boot=200, n_perm=500)
    assert Direction().decide(null).verdict != "supported"
    eff = partial_correlation(omega + 100 * a, omega + 100 * (a + 0.5 * b), omega, unit="examples", n_boot=200,
                              n_perm=500)
    assert eff.estimate > 0.7 and Direction().decide(eff).verdict == "supported"


def test_half_change_depth_and_lag():
    k = np.arange(11, dtype=float)
    assert half_change_depth(k) == pytest.approx(5.0)
    assert half_change_depth(np.r_[0, 0, 0, 1, 1.0]) == pytest.approx(2.5)
    bias = 1 / (1 + np.exp(k - 3))  # falls, half-way at 3
    div = 1 / (1 + np.exp(-(k - 7)))  # rises, half-way at 7
    assert lag(bias, div) == pytest.approx(4.0, abs=0.3)
    assert np.isnan(lag(div, div))  # bias does not fall: no lag defined


def test_pointwise_information_averages_to_the_plug_in_mi():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 300)
    S = np.stack([rng.integers(0, 3, 300), np.where(rng.random(300) < 0.7, y, rng.integers(0, 3, 300))], 1)
    pmi = de.pointwise_information(S, y)
    for k in range(2):
        assert pmi[:, k].mean() == pytest.approx(it.mutual_info(S[:, k], y), abs=1e-12)


def test_d5_blocks_equal_the_chain_terms_on_the_original_sample():
    rng = np.random.default_rng(2)
    n, L = 80, 4
    y = rng.integers(0, 2, n)
    U = np.where(rng.random((n, 2 * L + 1)) < 0.7, y[:, None], 1 - y[:, None])
    ctx = np.roll(U, 1, axis=1)
    S = U[:, 0::2]
    G, D, R = de.d5_blocks(U, ctx, S, y, np.arange(n)[None])
    t = it.chain_terms(U, y, ctx, miller_madow=True)
    info, gains = it.marginal_gains(S, y)
    d = t.cond_redundancy - t.redundancy
    assert np.allclose(G[0], gains[1:], atol=1e-12)
    assert np.allclose(D[0], d[1::2] + d[2::2], atol=1e-12)
    assert np.allclose(R[0], t.relevancy[1::2] + t.relevancy[2::2], atol=1e-12)


def test_claim_evidence_on_a_synthetic_readout_has_every_claim():
    g = torch.Generator().manual_seed(0)
    n, L, C = 40, 4, 3
    labels = torch.randint(0, C, (n,), generator=g)
    raw = torch.randn(n, 2 * L + 1, C, generator=g, dtype=torch.float64)
    raw += 2.0 * torch.nn.functional.one_hot(labels, C)[:, None] * torch.linspace(0, 1, 2 * L + 1)[None, :, None]
    ro = dv.MemberReadout(raw, torch.rand(n, L + 1, generator=g, dtype=torch.float64) + 0.5,
                          torch.tensor([0.5, -0.2, 0.1], dtype=torch.float64), labels,
                          half_scales=torch.rand(n, L, generator=g, dtype=torch.float64) + 0.5)
    out = de.claim_evidence(ro, n_boot=50, n_boot_info=30, n_perm=200)
    assert {"D3", "D4", "D5", "D6", "D6_fall", "D8", "D9", "D10", "D10_fall", "D11", "peak"} <= set(out)
    assert out["D10_fall"]["unit"].startswith("examples (all; the largest fall, from depth")
    assert out["D4"]["error"] < 1e-10 and out["D11"]["error"] <= 1e-10
    assert out["D10"]["unit"].startswith("examples (held-out half")


def test_bootstrap_evidence_refuses_small_n_and_finds_a_clear_mean():
    with pytest.raises(ValueError, match="exact test"):
        bootstrap_evidence(lambda i: 0.0, 5, unit="seeds")
    x = np.random.default_rng(3).normal(1.0, 1.0, 64)
    ev = bootstrap_evidence(lambda i: float(x[i].mean()), 64, unit="examples", n_boot=300)
    assert ev.low < ev.estimate < ev.high and ev.p_greater < 0.01 and ev.p_less > 0.9


def test_regime_states_an_under_trained_family_and_keeps_only_separable_depths():
    rng = np.random.default_rng(0)
    rows = []
    for d, nll in ((1, 3.0), (2, 3.2), (4, 3.201), (6, 3.6)):
        for s in range(3):
            rows.append({"name": f"d{d}s{s}", "depth": d, "width": 64, "lr": 3e-3, "steps": 256, "seed": s,
                         "heldout_nll": nll + 0.005 * rng.standard_normal()})
    r = regime(pd.DataFrame(rows))
    # 2 and 4 are within noise of each other: one of them is kept, with 1 and 6
    assert r["improves"] is False and "gets worse with depth" in r["sentence"] and r["kept"] == [1, 2, 6]
    assert "Holm" in r["sentence"]
    good = pd.DataFrame([{**x, "heldout_nll": 5 - x["heldout_nll"]} for x in rows])
    assert regime(good)["improves"] is True
    assert "No depth family" in regime(None)["sentence"]
    one_seed = pd.DataFrame([x for x in rows if x["seed"] == 0])
    assert regime(one_seed)["kept"] == [] and "cannot be estimated" in regime(one_seed)["sentence"]


def test_held_out_peak_on_binary_accuracy_is_calibrated_and_the_same_data_peak_is_not():
    from layerlab.report.calibration import calibrate, scenario

    held = calibrate(Direction(), scenario("peak_binary", n=128, unit="examples", effect=0.15), n_sims=200, seed=3)
    naive = calibrate(Direction(), scenario("peak_binary_naive", n=128, unit="examples", effect=0.15), n_sims=200,
                      seed=3)
    assert held.calibrated and held.power > 0.2
    assert naive.false_supported > held.false_supported


def test_largest_fall_is_the_depth_with_the_largest_upper_bound():
    rng = np.random.default_rng(0)
    n, depths = 200, 8
    flat = np.ones((n, depths)) + rng.normal(0, 0.1, (n, depths))
    ev = de.largest_fall(flat, unit="examples")
    falls = flat[:, :-1] - flat[:, -1:]
    highs = [mean_effect(falls[:, k], unit="examples").high for k in range(depths - 1)]
    assert ev.high == pytest.approx(max(highs)) and ev.n == n
    assert f"from depth {int(np.argmax(highs))} to full depth" in ev.unit
    # a curve that peaks mid-way and falls by 0.1: some depth's fall is large, whichever half would choose it
    fall = flat.copy()
    fall[:, 4] += 0.1
    assert de.largest_fall(fall, unit="examples").low > 0.05
    with pytest.raises(ValueError, match="n_units >= 2, n_depths >= 2"):
        de.largest_fall(np.ones((5,)), unit="examples")


def _peak_at_end_units(n: int = 128, fall: float = 0.0, seed: int = 0) -> tuple[dict, dict]:
    """One task's D10 units: curves that rise and plateau, whose chosen peak is full depth (held-out drop 0
    for every example), and the all-example evidence of the largest fall (``fall`` added at depth 2)."""
    rng = np.random.default_rng(seed)
    c = np.array([0.5, 0.7, 0.9, 0.9, 0.9, 0.9])[None] + rng.normal(0, 0.03, (n, 6))  # rises, then plateaus
    c[:, 2] += fall
    held = mean_effect(np.zeros(n), unit="examples")  # the chosen peak is full depth: 0 by construction
    return {"sent/head": held}, {"sent/head": de.largest_fall(c, unit="examples")}


def test_a_held_out_drop_of_zero_by_construction_is_no_evidence_of_no_fall():
    rule = Direction(direction="greater", margin=0.02)
    held, eq = _peak_at_end_units()
    # the old reading: a zero-width interval at 0 lies "within the margin", whatever the curve
    assert pool(rule, held).verdict == "not supported"
    # judged on every depth's fall over all examples: a plateau that rises to full depth has no fall ...
    d = pool(rule, held, equivalence=eq)
    assert d.verdict == "not supported" and "fall from every depth to full depth lies below 0.02" in d.reading
    assert "intersection-union" in d.rule and "below 0 / 0.02" in d.rule and "±" not in d.rule
    # a curve that rises to full depth: every depth's fall is below 0, which is evidence the other way
    rise = 0.5 + 0.3 * np.arange(6)[None] / 5 + np.random.default_rng(1).normal(0, 0.05, (128, 6))
    up = pool(rule, held, equivalence={"sent/head": de.largest_fall(rise, unit="examples")})
    assert up.verdict == "contradicted" and "full depth beats every earlier depth" in up.reading
    # a held-out drop below 0 says only that the chosen depth is no peak on the other half: not "contradicted"
    below = {"sent/head": mean_effect(np.random.default_rng(2).normal(-0.2, 0.1, 64), unit="examples")}
    assert pool(rule, below).verdict == "contradicted"  # without the fall evidence (other claims): as before
    assert pool(rule, below, equivalence={"sent/head": _peak_at_end_units(fall=0.3)[1]["sent/head"]}).verdict == \
        "inconclusive"
    # ... and a fall of 0.3 at depth 2 (one the chosen half missed) is not "no fall": undecided
    held, eq = _peak_at_end_units(fall=0.3)
    assert pool(rule, held, equivalence=eq).verdict == "inconclusive"
    assert "some fall to full depth may reach 0.02" in pool(rule, held, equivalence=eq).reading
    # missing equivalence evidence never gives "not supported"
    gone = pool(rule, held, equivalence={"sent/head": None})
    assert gone.verdict == "inconclusive" and "fall evidence is missing" in gone.reading


def test_d6_and_d10_take_no_fall_from_their_fall_evidence():
    r = _result(0.0, tasks=("sent",))
    ev = r.tasks["sent"]["evidence"]
    for ro in ev:
        for cid in ("D6", "D10"):
            ev[ro][cid] = dataclasses_asdict(mean_effect(np.zeros(128), unit="examples"))
    rows = {c.id: c for c in dc.claims(r)}
    # without the all-example evidence (an older result) the rows stay undecided, never "not supported"
    assert rows["D6"].verdict == rows["D10"].verdict == "inconclusive"
    for ro in ev:
        for cid in ("D6", "D10"):
            ev[ro][f"{cid}_fall"] = dataclasses_asdict(_peak_at_end_units(seed=len(ro))[1]["sent/head"])
    rows = {c.id: c for c in dc.claims(r)}
    assert rows["D6"].verdict == rows["D10"].verdict == "not supported"
    assert "judged on all examples, at every depth" in rows["D10"].note


def dataclasses_asdict(e):
    import dataclasses

    return dataclasses.asdict(e)


def test_the_no_fall_sides_are_calibrated_at_the_chapter_n():
    """D6/D10's intersection-union sides at the chapter's n (128 examples, 31 depths), simulated: with a true
    fall exactly at the margin, "not supported" is wrong at most 5% of the time; with a true plateau (falls of
    exactly 0 over the last depths), "contradicted" is wrong at most 5%; a curve that keeps rising is called
    contradicted most of the time (power). The price of the intersection-union test is power for "no fall":
    at noise sd 0.1 a plateau is rarely "not supported" (every depth's bound must clear the
    margin), at sd 0.03 most of the time."""
    rule, sims, n, depths, sd = Direction(direction="greater", margin=0.02), 150, 128, 31, 0.1
    rng = np.random.default_rng(0)
    shape = 1 - np.exp(-6 * np.linspace(0, 1, depths))  # rises, then plateaus
    held = {"t/r": mean_effect(np.zeros(n), unit="examples")}  # the chosen peak is full depth (the hard case)

    def verdicts(curve: np.ndarray) -> list[str]:
        out = []
        for _ in range(sims):
            c = curve[None] + rng.normal(0.0, sd, (n, depths))
            out.append(pool(rule, held, equivalence={"t/r": de.largest_fall(c, unit="examples")}).verdict)
        return out

    at_margin = shape.copy()
    at_margin[20] += 0.02 + (shape[-1] - shape[20])  # depth 20 sits exactly one margin above full depth
    assert np.mean([v == "not supported" for v in verdicts(at_margin)]) <= 0.05
    plateau = verdicts(shape)
    assert np.mean([v == "contradicted" for v in plateau]) <= 0.05
    sd = 0.03
    assert np.mean([v == "not supported" for v in verdicts(shape)]) >= 0.8
    rising = np.linspace(0.0, 1.0, depths)
    assert np.mean([v == "contradicted" for v in verdicts(rising)]) >= 0.8
