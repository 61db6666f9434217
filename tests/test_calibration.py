"""Calibration of the verdict rules at the book's real n (layerlab.report.calibration).

Each case simulates a rule under its null and under an effect of the claimed size: false
"supported" must stay <= 5% (with two Monte-Carlo standard errors of slack) and the power is printed
(pytest -s shows the table). The n's are the chapters' units: 3 and 5 seeds, 4 and 8 prompts,
22 family members, 16 documents, 31 depths; the winner's-curse case (peak chosen on the data that
measure the drop) must be rejected by the held-out design and caught in the naive one.
"""

from __future__ import annotations

import pytest

from layerlab.report.calibration import calibrate, scenario
from layerlab.report.verdicts import Direction

CASES = [
    ("paired", 3, "seeds", 2.0),
    ("paired", 6, "seeds", 1.5),
    ("paired", 16, "documents", 0.8),
    ("correlation", 4, "prompts", 0.9),
    ("correlation", 8, "prompts", 0.8),
    ("correlation", 22, "members", 0.6),
    ("peak_drop", 16, "documents", 0.3),
]


@pytest.mark.parametrize("kind,n,unit,effect", CASES)
def test_rule_is_calibrated_at_real_n(kind, n, unit, effect):
    kw = {"sd": 0.1} if kind == "peak_drop" else {}
    cal = calibrate(Direction(), scenario(kind, n=n, unit=unit, effect=effect, **kw), n_sims=200, seed=n)
    print(f"\n{cal.scenario}: n = {n} {unit}; false supported {cal.false_supported:.3f}, "
          f"power {cal.power:.3f} at {cal.effect_size}")
    assert cal.calibrated, cal
    assert cal.false_contradicted <= 0.05
    if n <= 4:  # exact tests cannot reach p <= 0.025 with 3 seeds (1/8) or 4 prompts (1/24)
        assert cal.power == 0.0
    else:
        assert cal.power >= 0.3, f"the rule has almost no power at the claimed effect: {cal}"


def test_winners_curse_is_removed_by_the_held_out_peak():
    naive = calibrate(Direction(), scenario("peak_drop", n=16, unit="documents", effect=0.3, sd=0.1,
                                            held_out=False), n_sims=100)
    held = calibrate(Direction(), scenario("peak_drop", n=16, unit="documents", effect=0.3, sd=0.1),
                     n_sims=200)
    print(f"\npeak-drop false supported: naive {naive.false_supported:.3f}, held-out {held.false_supported:.3f}")
    assert naive.false_supported > 0.05  # the biased design says "falls" without a fall
    assert held.calibrated and held.power > 0.8


def test_calibrate_refuses_too_few_sims():
    with pytest.raises(ValueError, match="n_sims"):
        calibrate(Direction(), scenario("paired", n=5, unit="seeds", effect=1.0), n_sims=5)
    with pytest.raises(ValueError, match="unknown scenario"):
        scenario("nope", n=5, unit="seeds", effect=1.0)


def test_the_family_case_has_as_many_pairs_as_the_atlas_has_cross_family_lens_pairs():
    """The calibrated AF/AA design is the atlas's real family of tests: one per pair of lenses of different
    families (a lens added to the atlas changes it)."""
    from layerlab.chapters.atlas.analysis import LENSES
    from layerlab.chapters.calibration.presets import CASES

    fam = [f for f, _ in LENSES.values()]
    cross = sum(fam[i] != fam[j] for i in range(len(fam)) for j in range(i + 1, len(fam)))
    case = next(c for c in CASES if c.kind == "paired_family")
    assert case.pairs == cross and f"any of {cross} lens pairs" in case.label


def test_family_scenario_is_the_atlas_test_and_is_calibrated():
    """The atlas AF/AA design (any of 174 two-sided paired tests over 17 members, Holm): each pair's p-values
    are exactly the chapter's sign-flip test (mean_effect with the same seed and flips), and the family
    rule stays at 5% under the null while a 1-sd effect in a single pair is found often."""
    import numpy as np

    from layerlab.chapters.calibration.presets import CASES
    from layerlab.chapters.calibration.run import rule_of
    from layerlab.report.inference import mean_effect, permutations_for_holm
    from layerlab.report.verdicts import Family

    case = next(c for c in CASES if c.kind == "paired_family")
    assert (case.n, case.pairs) == (17, 174)
    sc = scenario(case.kind, n=case.n, unit=case.unit, effect=case.effect, pairs=case.pairs)
    d = sc.effect(np.random.default_rng(3))
    evs = sc.evidence(d, 5)
    assert len(evs) == 174
    for j in range(case.pairs):  # every pair, ties of the identity flip included
        ref = mean_effect(d[:, j], unit="members", seed=5, n_perm=permutations_for_holm(4000, 174))
        assert (evs[j].p_greater, evs[j].p_less) == (ref.p_greater, ref.p_less)
    rule = rule_of(case)
    assert isinstance(rule, Family) and rule.rule.direction == "two-sided"
    cal = calibrate(rule, sc, n_sims=200, seed=0)
    assert cal.calibrated and cal.false_contradicted == 0.0 and cal.power > 0.2


# ------------------------------------------------------------------ sequential null draws (the appendix's looks)
def _paired(n: int = 12):
    return scenario("paired", n=n, unit="documents", effect=1.0)


def test_extend_null_does_not_depend_on_the_path_and_keeps_the_power():
    """Extending 40 -> 100 null draws in one step or in two gives the same rate (each added draw has its own
    seed); the power, made on the first 40 effect draws, does not move; the rate over 100 draws differs from
    the rate over 40 (new draws were really made)."""
    from layerlab.report.calibration import extend_null

    sc, rule = _paired(), Direction()
    cal = calibrate(rule, sc, n_sims=40, seed=7)
    one = extend_null(cal, rule, sc, 100, seed=7)
    two = extend_null(extend_null(cal, rule, sc, 70, seed=7), rule, sc, 100, seed=7)
    assert one == two and one.null_sims == 100 and cal.null_sims == 40
    assert one.power == cal.power and one.false_contradicted == cal.false_contradicted
    assert extend_null(cal, rule, sc, 40, seed=7) == cal
    # a "null" that is a 10-sd effect is supported on every draw: all 100 draws count, the added ones too
    import dataclasses

    big = scenario("paired", n=12, unit="documents", effect=10.0)
    big = dataclasses.replace(big, null=big.effect)
    every = calibrate(rule, big, n_sims=40, seed=0)
    assert every.false_supported == 1.0
    assert extend_null(every, rule, big, 100, seed=0).null_supported == 100


def test_extend_null_refuses_fewer_draws_and_another_design():
    from layerlab.report.calibration import extend_null

    sc, rule = _paired(), Direction()
    cal = calibrate(rule, sc, n_sims=40, seed=0)
    with pytest.raises(ValueError, match="below the 40 null draws"):
        extend_null(cal, rule, sc, 20)
    with pytest.raises(ValueError, match="same rule and scenario"):
        extend_null(cal, rule, _paired(8), 80)


def test_the_looks_decide_a_rate_that_400_draws_cannot():
    """The residual design (paired, 12 documents) says "supported" under its null at about 3%: 400 draws
    cannot tell that from 5% at the first look's 1% level, 1,600 can. With a single look the row stays
    inconclusive; with the cpu looks it is supported at look 2, on 1,600 null draws, and says so."""
    from layerlab.chapters import calibration
    from layerlab.chapters.calibration.presets import CASES
    from layerlab.chapters.calibration.run import _compute

    case = next(c for c in CASES if c.label.startswith("residual"))
    one = _compute(calibration.preset("cpu", cases=(case,), null_looks=(400,), look_shares=(1.0,)), 1)
    (row1,) = calibration.claims(one)
    assert row1.verdict == "inconclusive" and row1.n == 400 and one.looks == [1]
    seq = _compute(calibration.preset("cpu", cases=(case,)), 1)
    (row,) = calibration.claims(seq)
    assert seq.looks == [2] and row.n == 1600 and row.verdict == "supported"
    assert row.ci_high < 0.05 and "decided at look 2 of 4 (1,600 null draws: tested at 1%, 99% interval)" in row.note
    assert seq.calibrations[0].power == one.calibrations[0].power  # the power rests on the same 400 draws
    assert "K1 (1,600)" in calibration.prose(seq)["cal_extended"].data


def test_sequential_looks_keep_a_rate_of_exactly_5_percent_from_passing_as_calibrated(monkeypatch):
    """The looks spend the level in Bonferroni shares: simulated at a true rate of exactly 5% (binomial
    draws), the sequential design says "<= 5%" in at most 2.5% of 2,000 runs (one side of the 5% level),
    although it gets four chances; each look alone at the full 5% level would say it more often."""
    import functools
    import importlib

    import numpy as np

    from layerlab.chapters import calibration
    from layerlab.chapters.calibration.looks import decide_rate as exact_decide_rate
    from layerlab.chapters.calibration.run import sequential_looks

    # A decision depends only on (k, n, side, level), and 10,000 of them repeat a few hundred distinct
    # ones: each is computed once (scipy's exact Clopper-Pearson interval takes ~6 ms a call).
    decide_rate = functools.lru_cache(maxsize=None)(exact_decide_rate)
    monkeypatch.setattr(importlib.import_module("layerlab.chapters.calibration.run"), "decide_rate", decide_rate)
    P = calibration.preset("cpu")
    rng = np.random.default_rng(0)
    fooled = naive = 0
    for _ in range(2000):
        draws = rng.random(P.looks[-1]) < 0.05
        cum = np.concatenate([[0], np.cumsum(draws)])
        look = sequential_looks(P, True, lambda n, cum=cum: int(cum[n]))
        n = P.looks[look - 1]
        fooled += decide_rate(int(cum[n]), n, True, alpha=0.05 * P.shares[look - 1])[1].verdict == "supported"
        naive += any(decide_rate(int(cum[m]), m, True)[1].verdict == "supported" for m in P.looks)
    assert fooled / 2000 <= 0.025, fooled
    assert naive > fooled


def test_cases_in_worker_processes_give_the_same_result():
    from layerlab.chapters import calibration
    from layerlab.chapters.calibration.presets import CASES
    from layerlab.chapters.calibration.run import _compute

    P = calibration.preset("smoke", cases=CASES[:3])
    a, b = _compute(P, 1), _compute(P, 2)
    assert a.calibrations == b.calibrations and a.looks == b.looks
    assert a.table.equals(b.table)


@pytest.mark.parametrize("over,match", [
    ({"null_looks": (100, 400)}, "must start at n_sims = 40"),
    ({"null_looks": (40, 40)}, "increase"),
    ({"null_looks": (40, 80), "look_shares": (1.0,)}, "one positive share per look"),
    ({"null_looks": (40, 80), "look_shares": (0.5, 0.6)}, "adding up to 1"),
])
def test_preset_rejects_bad_looks(over, match):
    from layerlab.chapters import calibration

    with pytest.raises(ValueError, match=match):
        calibration.preset("smoke", **over)


def test_rate_evidence_interval_widens_with_a_smaller_share_and_rejects_bad_counts():
    from layerlab.chapters.calibration.looks import rate_evidence

    wide, narrow = rate_evidence(10, 400, alpha=0.01), rate_evidence(10, 400)
    assert wide.low < narrow.low and wide.high > narrow.high and wide.p_less == narrow.p_less
    with pytest.raises(ValueError, match="0 <= k <= n"):
        rate_evidence(5, 4)
