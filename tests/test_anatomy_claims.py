"""Unit tests of every anatomy claim rule on synthetic results (layerlab.chapters.anatomy.rules):
true effect -> supported, no effect -> not supported or inconclusive, opposite -> contradicted,
too few units -> inconclusive, missing input -> its row."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from layerlab.chapters.anatomy import rules
from layerlab.metrics.recovery import RecoveryCurve

COMPS = ["q", "k", "v", "o", "gate", "up", "down"]
RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _fresh_rng():
    """Every test draws from a fresh RNG: its data do not depend on which tests ran before it (``-k``,
    another order, another worker)."""
    global RNG
    RNG = np.random.default_rng(0)


def _delta(values) -> pd.DataFrame:
    return pd.DataFrame({"component": COMPS, "delta_corr": values})


def _near(x, sd=0.005):
    return x + RNG.normal(0, sd, len(COMPS))


@pytest.mark.parametrize("real,verdict_a2,verdict_osc", [
    (-0.62, "contradicted", "supported"),      # below −0.5 and below every null
    (-0.50, "supported", "inconclusive"),      # the null value itself: never "oscillation"
    (-0.30, "contradicted", "contradicted"),   # smooth drift: above −0.5, the wrong side
])
def test_a2_one_sided_against_every_null(real, verdict_a2, verdict_osc):
    a2, osc = rules.a2_claims(_delta(_near(real)), _delta(_near(-0.5)), _delta(_near(-0.5)), _delta(_near(-0.5)))
    assert a2.verdict == verdict_a2 and osc.verdict == verdict_osc
    assert osc.unit == "components" and osc.n == 7 and "Q4_1" in osc.null


def test_a2_osc_needs_to_beat_the_nulls_not_only_minus_half():
    # below −0.5, but the random-init null is as low: the nulls explain it
    _, osc = rules.a2_claims(_delta(_near(-0.62)), _delta(_near(-0.62)), _delta(_near(-0.5)))
    assert osc.verdict != "supported"


def _loo(level, innov, n2_level, n_layers=28):
    rows = []
    for comp in COMPS:
        for model, lv, iv in (("real", level, innov), ("N1", 0.0, 0.0), ("N2", n2_level, 0.0)):
            for layer in range(2, 2 + n_layers):
                rows.append({"component": comp, "model": model, "layer": layer,
                             "level": lv + RNG.normal(0, 0.01), "innov": iv + RNG.normal(0, 0.01)})
    return pd.DataFrame(rows)


def test_a1_needs_band_innovation_and_order():
    assert rules.a1_claim(_loo(0.91, 0.3, 0.5)).verdict == "supported"
    template = rules.a1_claim(_loo(0.91, 0.0, 0.91))  # template + noise: level high, nothing else
    assert template.verdict in ("inconclusive", "not supported")
    assert rules.a1_claim(_loo(0.1, 0.0, 0.1)).verdict == "contradicted"
    assert rules.a1_claim(_loo(0.91, 0.3, 0.5, n_layers=1)).verdict == "inconclusive"  # 1 layer: no interval
    assert rules.a1_claim(None).verdict == "inconclusive" and "not computed" in rules.a1_claim(None).note


def test_h2_innovation_r2():
    assert rules.h2_claim(_loo(0.9, 0.3, 0.5)).verdict == "supported"
    flat = _loo(0.9, 0.0, 0.5)
    real = flat.model == "real"
    flat.loc[real, "innov"] = np.where(flat[real].component.isin(COMPS[::2]), 0.002, -0.002)
    assert rules.h2_claim(flat).verdict == "not supported"
    assert rules.h2_claim(_loo(0.9, -0.3, 0.5)).verdict == "contradicted"


def _docs(effects: dict[str, float], n_docs=8, sd=0.01) -> pd.DataFrame:
    return pd.DataFrame([{"name": k, "doc": d, "dnll": v + RNG.normal(0, sd)} for k, v in effects.items()
                         for d in range(n_docs)])


def test_a3_prediction_vs_skip_and_own_norm_random():
    rep = pd.DataFrame({"name": ["gen-deepest9"], "base_ppl": [20.0]})
    good = _docs({"predicted@3": 0.1, "skip@3": 0.5, "randpred@3": 2.0, "gen-deepest9": 12.0})
    a31, ctl, a39 = rules.a3_claims(good, rep)
    assert (a31.verdict, ctl.verdict, a39.verdict) == ("supported", "supported", "supported")
    like_zero = _docs({"predicted@3": 0.5, "skip@3": 0.5, "randpred@3": 2.0, "gen-deepest9": 2.0})
    _, ctl, a39 = rules.a3_claims(like_zero, rep)
    assert ctl.verdict == "inconclusive" and a39.verdict == "contradicted"
    worse = _docs({"predicted@3": 3.0, "skip@3": 0.5, "randpred@3": 2.0}, n_docs=8)
    assert rules.a3_claims(worse, rep.iloc[:0])[1].verdict == "contradicted"
    few = _docs({"predicted@3": 0.1, "skip@3": 0.5, "randpred@3": 2.0}, n_docs=3)
    assert rules.a3_claims(few, rep.iloc[:0])[1].verdict == "inconclusive"  # 2**-3 > 0.025
    assert rules.a3_claims(few, rep.iloc[:0])[-1].id == "A3-9"  # missing input keeps its row


def _prof(layer_effects: dict[int, tuple[float, float, float]], op="neighbour_avg", protocol="large", n=32):
    rows = []
    for layer, (est, lo, hi) in layer_effects.items():
        rows.append({"op": op, "layer": layer, "protocol": protocol, "dnll": est, "dnll_low": lo, "dnll_high": hi,
                     "dppl_pct": 100 * math.expm1(est), "dppl_low": 100 * math.expm1(lo),
                     "dppl_high": 100 * math.expm1(hi), "p_greater": 1e-4 if lo > 0 else (0.9 if hi < 0 else 0.3),
                     "p_less": 1e-4 if hi < 0 else (0.9 if lo > 0 else 0.3), "p_min": 2.0**-n / 0.5, "n_docs": n,
                     "n_tokens": n * 1020, "tier": ""})
    return pd.DataFrame(rows)


def test_a5_contradicted_only_with_evidence_below_the_line():
    core = [8, 9]
    assert rules.a5_claim(_prof({8: (3, 2.5, 3.5), 9: (2, 1.5, 2.5)}), core, 0).verdict == "supported"
    assert rules.a5_claim(_prof({8: (3, 2.5, 3.5), 9: (0.6, 0.2, 1.5)}), core, 0).verdict == "inconclusive"
    assert rules.a5_claim(_prof({8: (3, 2.5, 3.5), 9: (0.1, 0.05, 0.2)}), core, 0).verdict == "contradicted"
    assert rules.a5_claim(_prof({1: (3, 2.5, 3.5)}), core, 0).verdict == "inconclusive"  # missing


def test_a7_anti_layer_rule():
    sent_neg = _prof({14: (-0.02, -0.03, -0.01)}, protocol="sentences", n=10)
    sent_pos = _prof({14: (0.02, 0.01, 0.03)}, protocol="sentences", n=10)
    anti = _prof({14: (-0.01, -0.015, -0.005)})
    assert rules.a7_claim(pd.concat([anti, sent_neg]), 14, 0).verdict == "supported"
    unconfirmed = rules.a7_claim(pd.concat([anti, sent_pos]), 14, 0)
    assert unconfirmed.verdict == "inconclusive" and unconfirmed.remedy.startswith("The 10 sentences' interval must")
    assert rules.a7_claim(_prof({14: (0.05, 0.03, 0.07)}), 14, 0).verdict == "contradicted"
    assert rules.a7_claim(_prof({14: (0.0, -0.001, 0.001)}), 14, 0).verdict == "not supported"
    assert rules.a7_claim(_prof({14: (0.0, -0.05, 0.05)}), 14, 0).verdict == "inconclusive"
    assert rules.a7_claim(_prof({3: (0.0, -0.05, 0.05)}), 14, 0).verdict == "inconclusive"


def test_all_of_carries_the_remedies_of_its_undecided_components():
    from layerlab.report.verdicts import Decision

    ok = Decision(verdict="supported", rule="a", reading="A.")
    short = Decision(verdict="inconclusive", rule="b", reading="B.", remedy="Only more seeds would.")
    vague = Decision(verdict="inconclusive", rule="c", reading="C.")
    assert rules.all_of([ok, short, short, vague], name="x").remedy == "Only more seeds would."
    assert rules.all_of([ok, vague], name="x").remedy == ""  # the default (more units, or a larger effect)
    assert rules.all_of([ok, short], name="x").verdict == "inconclusive"


def test_h1_chosen_on_sentences_measured_on_documents():
    sent = _prof({0: (0.01, 0, 0.02), 1: (2.0, 1.9, 2.1)}, protocol="sentences", n=10)
    first = {"neighbour_avg@0": list(RNG.normal(0.0, 0.01, 8)), "neighbour_avg@1": list(RNG.normal(2.0, 0.1, 8))}
    assert rules.h1_claim(sent, first).verdict == "supported"
    # Flat on the documents: the paired differences are +-0.001 in equal numbers (mean exactly 0).
    base = np.linspace(-0.002, 0.002, 8)
    flat = {"neighbour_avg@0": list(base), "neighbour_avg@1": list(base + 0.001 * np.tile([1.0, -1.0], 4))}
    assert rules.h1_claim(sent, flat).verdict == "not supported"
    assert rules.h1_claim(sent.iloc[:0], first).verdict == "inconclusive"


def test_a6_band_with_a_document_bootstrap():
    wide = {f"neighbour_avg@{i}": list(np.full(8, v) + RNG.normal(0, 1e-3 * v, 8))
            for i, v in enumerate([1e-7, 1.0])}
    assert rules.a6_claim(wide, 2).verdict == "supported"  # 1e-5 % .. 171 %: seven decades
    narrow = {f"neighbour_avg@{i}": list(np.full(8, v) + RNG.normal(0, 1e-4, 8)) for i, v in enumerate([0.1, 0.2])}
    assert rules.a6_claim(narrow, 2).verdict == "contradicted"
    assert rules.a6_claim({k: v[:4] for k, v in narrow.items()}, 2).verdict == "inconclusive"


def _curves(steps_by_layer: dict[int, list[int]], cap=200):
    return [RecoveryCurve(layer=layer, sigma_rel=0.5, kind="additive", scope="layer", seed=s, steps=[0, cap],
                          nll=[1.0, 1.0], base_nll=1.0, recovered_at=None if v >= cap else v, cap=cap, auc=0.0, lr=1e-4)
            for layer, vs in steps_by_layer.items() for s, v in enumerate(vs)]


def test_a9_steps_or_cap_rank_correlation():
    imp = {i: float(i) for i in range(10)}
    good = _curves({i: [10 * i + s for s in range(3)] for i in range(10)})
    c = rules.a9_claim(good, imp)
    assert c.verdict == "supported" and c.unit == "layers" and c.n == 10 and c.ci_low is not None
    bad = _curves({i: [10 * (9 - i) + s for s in range(3)] for i in range(10)})
    assert rules.a9_claim(bad, imp).verdict == "contradicted"
    few = _curves({i: [10 * i] for i in range(4)})
    assert rules.a9_claim(few, imp).verdict == "inconclusive"  # 4 layers: p >= 1/24
    assert rules.a9_claim(_curves({i: [200] for i in range(5)}), imp).verdict == "inconclusive"
    assert rules.a9_claim([], imp).verdict == "inconclusive"
    assert "0 of 30 runs censored" in c.note and "control" not in c.note
    cap = _curves({i: [10 * i + s if i < 8 else 200 for s in range(3)] for i in range(10)})
    assert "6 of 30 runs censored" in rules.a9_claim(cap, imp).note
    ctl = [_run(5, 0.0, [1.0, 0.8, 0.7], seed=s) for s in range(2)]
    noted = rules.a9_claim(good, imp, controls=ctl)
    assert noted.verdict == c.verdict and noted.ours == c.ours  # the control annotates, never decides
    assert "σ = 0 control: -0.3 nats at step 2 (mean of 2)" in noted.note and "adaptation" in noted.note


def test_a10_quality_margin_and_every_other_strategy():
    table = pd.DataFrame({"config": ["scale0.9", "zero", "clone", "blend", "scale1.05"], "target": "spread",
                          "dppl_pct": [1.0, 500, 400, 300, 2.0], "dppl_high": [2.0, 600, 500, 400, 3.0]})
    ok = _docs({"scale0.9|spread": 0.01, "zero|spread": 2.0, "clone|spread": 1.5, "blend|spread": 1.0})
    c = rules.a10_claim(table, ok)
    assert c.verdict == "supported" and "scale1.05" in c.note
    big = _docs({"scale0.9|spread": 0.4, "zero|spread": 2.0, "clone|spread": 1.5, "blend|spread": 1.0})
    assert rules.a10_claim(table, big).verdict == "contradicted"  # +49% is not quality-preserving
    cheap = _docs({"scale0.9|spread": 0.01, "zero|spread": 0.0, "clone|spread": 1.5, "blend|spread": 1.0})
    assert rules.a10_claim(table, cheap).verdict == "contradicted"  # zeroing keeps quality too
    assert rules.a10_claim(table[table.config != "scale0.9"], ok).verdict == "inconclusive"


def _structure(rank_by_layer) -> pd.DataFrame:
    return pd.DataFrame([{"component": c, "layer": layer, "stable_rank": rank_by_layer(layer) * (1 + 0.01 * i)}
                         for i, c in enumerate(COMPS) for layer in range(12)])


def test_structure_claims():
    init = _structure(lambda layer: 100.0 + RNG.normal(0, 1))
    s1, s2 = rules.structure_claims(_structure(lambda layer: 20.0 + 3 * layer), init)
    assert s1.verdict == "supported" and s2.verdict == "supported"
    s1, s2 = rules.structure_claims(_structure(lambda layer: 200.0 + RNG.normal(0, 1)), init)
    assert s1.verdict == "contradicted"
    missing_rows = rules.structure_claims(init, init.iloc[:0])
    assert [c.id for c in missing_rows] == ["S1", "S2"] and all(c.verdict == "inconclusive" for c in missing_rows)


def _run(layer, sigma, nll, base=1.0, seed=0):
    rec = next((s for s, v in zip(range(len(nll)), nll) if v <= base), None)
    return RecoveryCurve(layer=layer, sigma_rel=sigma, kind="additive", scope="layer", seed=seed,
                         steps=list(range(len(nll))), nll=nll, base_nll=base, recovered_at=rec, cap=len(nll) - 1,
                         auc=0.0, lr=1e-3)


def test_recovery_control_sentence_follows_the_control():
    """One sentence per outcome: a control that falls below the baseline by a tenth of the smallest damage
    or more says the steps measure adaptation too; a flat control says they measure repair; none says so."""
    from types import SimpleNamespace

    from layerlab.chapters.anatomy.prose import _recovery_control

    hurt = [_run(3, 0.5, [1.5, 1.2, 0.99]), _run(9, 0.5, [1.4, 1.1, 1.0])]
    adapting = SimpleNamespace(curves=hurt + [_run(5, 0.0, [1.0, 0.9, 0.8], seed=s) for s in range(2)])
    text = _recovery_control(adapting)
    assert "0.2 to 0.2 nats below" in text and "adapting to the corpus" in text and "2 seed(s)" in text
    flat = SimpleNamespace(curves=hurt + [_run(5, 0.0, [1.0, 1.0, e], seed=s) for s, e in enumerate((1.001, 0.999))])
    text = _recovery_control(flat)
    assert "measures repair" in text and "adapting" not in text and "between -0.001 and 0.001" in text
    assert "No σ = 0 control" in _recovery_control(SimpleNamespace(curves=hurt))


def test_recovery_design_sentence_reads_the_preset_and_the_runs():
    from types import SimpleNamespace

    from layerlab.chapters.anatomy import preset
    from layerlab.chapters.anatomy.prose import _recovery_design

    P = preset("cpu")
    runs = [_run(layer, 0.5, [1.5, 1.2, 0.99 if layer != 11 else 1.1], seed=s) for layer in (2, 11) for s in (0, 1)]
    text = _recovery_design(SimpleNamespace(preset=P, curves=runs + [_run(11, 0.0, [1.0, 0.9, 0.8])]))
    assert text.startswith("2 layers (2, 11) × 2 seed(s)") and f"lr {P.recovery_lr:g}" in text
    assert f"cap {P.recovery_steps} steps" in text and "2 of 4 perturbed runs recovered" in text
    assert "ends at its recovery step" in text  # cpu stops a run at recovery
    assert "ends at" not in _recovery_design(SimpleNamespace(preset=preset("cpu", recovery_stop=False), curves=runs))


def test_a5_and_a7_rows_carry_the_level_of_their_repeated_interval():
    """A row that stopped at look k shows the repeated interval of that look, at level 1 - 5% w_k: the
    table marks it (not a 95% interval), and a row without ``looks`` or without levels stays unmarked."""
    from layerlab.chapters.anatomy.budget import design
    from layerlab.chapters.anatomy.presets import preset
    from layerlab.report.claims import claim_table

    plan = design(preset("cpu"))
    levels = {k + 1: plan.level(k) for k in range(len(plan.looks))}
    assert levels == {1: 0.9875, 2: 0.9875, 3: 0.975}
    prof = _prof({8: (3, 2.5, 3.5), 9: (0.1, 0.05, 0.2)}).assign(looks=[1, 3])
    a5 = rules.a5_claim(prof, [8, 9], 0, levels=levels)
    assert a5.ci_level == 0.975 and "(97.5%)" in claim_table([a5])["95% CI"].iloc[0]
    a7 = rules.a7_claim(_prof({14: (0.05, 0.03, 0.07)}).assign(looks=[2]), 14, 0, levels=levels)
    assert a7.ci_level == 0.9875 and claim_table([a7])["95% CI"].iloc[0].endswith("(98.75%)")
    assert rules.a7_claim(_prof({14: (0.05, 0.03, 0.07)}), 14, 0, levels=levels).ci_level is None
