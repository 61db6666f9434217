"""The verdict engine (layerlab.report.verdicts) and the design-respecting evidence it decides on
(layerlab.report.inference): exact tests against brute force, each rule's four outcomes, Holm, and
rows that never vanish."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from layerlab.report.claims import Claim
from layerlab.report.inference import (
    SMALL_N,
    Evidence,
    correlation,
    held_out_peak_drop,
    holm,
    mean_effect,
    paired_difference,
    sign_flip_interval,
    unit_interval,
)
from layerlab.report.verdicts import (
    Band,
    Direction,
    Equivalence,
    Family,
    Identity,
    decide_family,
    empirical,
    missing,
)


def _brute_sign_flip(d):
    obs = np.mean(d)
    stats = [np.mean(np.array(s) * d) for s in itertools.product((1, -1), repeat=len(d))]
    return np.mean([s >= obs - 1e-12 for s in stats]), np.mean([s <= obs + 1e-12 for s in stats])


@pytest.mark.parametrize("d", [[1.0, 2.0, 3.0], [0.3, -0.1, 0.7, 0.2, -0.4, 1.1], [2.0, -2.0, 1.0, -1.0, 0.5]])
def test_exact_sign_flip_matches_brute_force(d):
    ev = mean_effect(d, unit="seeds")
    g, ls = _brute_sign_flip(np.array(d))
    assert ev.p_greater == pytest.approx(g) and ev.p_less == pytest.approx(ls)
    assert ev.p_min == 2.0 ** -len(d) and ev.n == len(d) and "exact" in ev.method


def test_t_interval_matches_scipy():
    from scipy import stats

    x = np.array([0.2, 0.5, 0.1, 0.9, 0.4])
    ev = mean_effect(x, unit="seeds")
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    assert (ev.low, ev.high) == pytest.approx((lo, hi))


def test_exact_permutation_correlation_small_n():
    ev = correlation([1, 2, 3, 4], [10, 20, 30, 40], unit="prompts")
    assert ev.estimate == pytest.approx(1.0)
    assert ev.p_greater == pytest.approx(1 / 24) and ev.p_min == pytest.approx(1 / 24)
    assert not ev.has_interval  # no interval below SMALL_N units, never a Fisher CI
    big = correlation(np.arange(12.0), np.arange(12.0) ** 2, unit="members")
    assert big.has_interval and big.n == 12 >= SMALL_N


def test_paired_difference_pairs_units():
    a, b = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.5, 1.5, 2.5, 3.5])
    ev = paired_difference(a, b, unit="seeds")
    assert ev.estimate == pytest.approx(0.5) and ev.low == ev.high == pytest.approx(0.5)
    with pytest.raises(ValueError, match="pair them"):
        paired_difference(a, b[:3], unit="seeds")


@pytest.mark.parametrize("bad", [[], [1.0], [1.0, float("nan")]])
def test_evidence_inputs_fail_clearly(bad):
    with pytest.raises(ValueError, match="units|finite"):
        mean_effect(bad, unit="seeds")


def test_holm_known_values():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == pytest.approx([0.5])
    assert holm([0.9, 0.8]).max() <= 1.0


def _ev(est, lo, hi, pg, pl, n=20):
    return Evidence(estimate=est, low=lo, high=hi, p_greater=pg, p_less=pl, unit="documents", n=n, method="test")


def test_direction_four_outcomes():
    rule = Direction(direction="greater", margin=0.1)
    assert rule.decide(_ev(0.5, 0.3, 0.7, 0.001, 0.999)).verdict == "supported"
    assert rule.decide(_ev(-0.5, -0.7, -0.3, 0.999, 0.001)).verdict == "contradicted"
    assert rule.decide(_ev(0.01, -0.05, 0.05, 0.4, 0.6)).verdict == "not supported"
    assert rule.decide(_ev(0.1, -0.2, 0.4, 0.2, 0.8)).verdict == "inconclusive"
    # without a margin, "no effect" is never claimed: lack of power stays inconclusive
    assert Direction().decide(_ev(0.01, -0.05, 0.05, 0.4, 0.6)).verdict == "inconclusive"
    less = Direction(direction="less")
    assert less.decide(_ev(-0.5, -0.7, -0.3, 0.999, 0.001)).verdict == "supported"


def test_direction_on_real_evidence_and_too_few_units():
    rng = np.random.default_rng(0)
    assert Direction().decide(mean_effect(rng.normal(1.0, 0.5, 30), unit="documents")).verdict == "supported"
    assert Direction().decide(mean_effect(rng.normal(-1.0, 0.5, 30), unit="documents")).verdict == "contradicted"
    three = Direction().decide(mean_effect([5.0, 6.0, 7.0], unit="seeds"))  # exact test: p >= 1/8 at n = 3
    assert three.verdict == "inconclusive" and "smallest attainable p is 0.12" in three.reading
    four = Direction().decide(correlation([1, 2, 3, 4], [1, 2, 3, 4], unit="prompts"))
    assert four.verdict == "inconclusive" and "n = 4 prompts" in four.reading


def test_each_undecided_outcome_states_what_would_decide_it():
    """The rule that leaves a row undecided says what would decide it (``Decision.remedy``), so that the
    chapter's "What would change our mind" never promises what the design cannot give."""
    rule = Direction()
    # lack of power: the default (more units, or a larger effect) applies, so no remedy of its own
    assert rule.decide(_ev(0.1, -0.2, 0.4, 0.2, 0.8)).remedy == ""
    # no effect size can decide a 3-seed sign-flip test (smallest p 1/8), one- or two-sided
    three = mean_effect([5.0, 6.0, 7.0], unit="seeds (paired)")
    assert rule.decide(three).remedy == ("With n = 3 seeds the smallest attainable p is 0.12 > 0.025, so no effect "
                                         "size can decide it: only more seeds would.")
    assert "smallest attainable p is 0.25 > 0.05" in Direction(direction="two-sided").decide(three).remedy
    # the test rejects but the interval reaches the null: more units, not a larger effect
    split = rule.decide(_ev(0.1, -0.01, 0.2, 0.01, 0.99))
    assert split.verdict == "inconclusive" and split.remedy.startswith("More documents, enough for the test and")
    # a band needs an interval
    band = Band(lo=0.0, hi=1.0, source="s").decide(Evidence(estimate=0.5, low=None, high=None, p_greater=0.5,
                                                             p_less=0.5, unit="runs", n=1, method="one run"))
    assert band.verdict == "inconclusive" and band.remedy == "An interval, i.e. replicate runs, would decide it."
    # decided rows need no remedy
    assert rule.decide(_ev(0.5, 0.3, 0.7, 0.001, 0.999)).remedy == ""


def test_a_family_says_when_no_effect_size_can_decide_it():
    """Holm over m tests: "any" can reach the level only if m * (smallest attainable p) <= alpha / 2."""
    five = [mean_effect(np.array([1.0, 2.0, 3.0, 4.0, 5.0]) * s, unit="members") for s in (1, -1, 1)]  # p_min 1/32
    any3 = decide_family(Direction(), five, family="any")
    assert any3.verdict == "inconclusive" and "smallest attainable Holm-adjusted p is 0.094 > 0.025" in any3.remedy
    two = decide_family(Direction(direction="two-sided"), five[:1], family="any")
    assert two.verdict == "inconclusive" and "0.062 > 0.05" in two.remedy
    # "all": every member must pass after Holm; two members at 6 units (p_min 1/64 each) can reach at best
    # 2/64 = 0.031 > 0.025, so no effect size decides them, though each alone could be decided
    six = [mean_effect(np.array([0.1, -0.2, 0.3, 0.1, 0.2, -0.1]) + s, unit="seeds") for s in (0.0, 0.05)]
    pair = decide_family(Direction(), six, family="all")
    assert pair.verdict == "inconclusive" and "n = 6 seeds per test and 2 tests" in pair.remedy
    assert "smallest attainable Holm-adjusted p is 0.031 > 0.025" in pair.remedy
    assert Direction().decide(six[0]).remedy == ""  # one test at n = 6 can reach 1/64
    # members of different n: Holm of (1/64, 1/32) is (0.031, 0.031), so "any" cannot be decided either
    mixed = decide_family(Direction(), [six[0], mean_effect(np.arange(1.0, 6.0), unit="seeds")], family="any")
    assert mixed.verdict == "inconclusive" and "n = 5-6 seeds per test" in mixed.remedy
    # with enough units per test the family is decidable, so lack of power keeps the default
    rng = np.random.default_rng(0)
    wide = [mean_effect(rng.normal(0.0, 1.0, 30), unit="members") for _ in range(3)]
    dec = decide_family(Direction(), wide, family="any")
    assert dec.verdict == "inconclusive" and dec.remedy == ""


def test_direction_refuses_mismatched_null():
    with pytest.raises(ValueError, match="null"):
        Direction(null=1.0).decide(mean_effect([1.0, 2.0, 3.0], unit="seeds"))


def test_band_and_equivalence():
    band = Band(lo=30.0, hi=40.0, source="paper, Table 2")
    assert band.decide(_ev(35, 33, 37, 0, 0)).verdict == "supported"
    assert band.decide(_ev(50, 45, 55, 0, 0)).verdict == "contradicted"
    assert band.decide(_ev(39, 37, 42, 0, 0)).verdict == "inconclusive"
    with pytest.raises(ValueError, match="source"):
        Band(lo=0, hi=1, source=" ")
    eq = Equivalence(margin=0.1)
    assert eq.decide(_ev(0.0, -0.05, 0.05, 0.5, 0.5)).verdict == "supported"
    assert eq.decide(_ev(0.5, 0.3, 0.7, 0.0, 1.0)).verdict == "contradicted"


def test_identity_is_not_an_empirical_finding():
    d = Identity(tol=1e-6)
    assert d.decide_error(1e-9).verdict == "supported" and d.decide_error(1e-3).verdict == "contradicted"
    rows = [
        Claim(
            id="R1",
            claim="lens = logits",
            paper="exact",
            tag="identity",
            ours=1e-9,
            ci_low=None,
            ci_high=None,
            null="—",
            verdict="supported",
        ),
        Claim(
            id="R2",
            claim="loss falls",
            paper="yes",
            tag="paper",
            ours=0.5,
            ci_low=0.1,
            ci_high=0.9,
            null="0",
            verdict="supported",
        ),
    ]
    assert [c.id for c in empirical(rows)] == ["R2"]


def test_missing_inputs_keep_their_row():
    row = missing(
        id="C3",
        claim="coupling higher for trained",
        paper="yes",
        tag="paper",
        reason="the init runs were not computed at this profile",
    )
    assert row.verdict == "inconclusive" and "not computed" in row.note and row.ours is None
    with pytest.raises(ValueError, match="why"):
        missing(id="C3", claim="x", paper="y", tag="paper", reason="")


def test_family_with_holm():
    strong = [_ev(1, 0.5, 1.5, 1e-4, 1.0) for _ in range(10)]
    weak = [_ev(0.1, -0.1, 0.3, 0.02, 0.98) for _ in range(10)]  # 0.02 < 0.025 alone, not after Holm
    assert decide_family(Direction(), strong).verdict == "supported"
    assert decide_family(Direction(), weak).verdict == "inconclusive"
    assert decide_family(Direction(), strong[:1] + weak, family="any").verdict == "supported"
    assert decide_family(Direction(direction="less"), strong).verdict == "contradicted"
    # a supported family states what would undo it: its tests after the correction, not its largest member
    assert decide_family(Direction(), strong).undo == (
        "new documents that made any test lose significance after the correction")
    assert decide_family(Direction(), strong[:1] + weak, family="any").undo == (
        "new documents that left no test significant after the correction")
    assert decide_family(Direction(), weak).undo == decide_family(Direction(direction="less"), strong).undo == ""


def test_two_sided_direction_has_no_opposite_side():
    rule = Direction(direction="two-sided", margin=0.1)
    assert rule.name == "two-sided: effect ≠ 0, equivalence ±0.1"
    up = rule.decide(_ev(0.5, 0.3, 0.7, 0.01, 0.99))  # two-sided p = 0.02 <= 0.05
    down = rule.decide(_ev(-0.5, -0.7, -0.3, 0.99, 0.01))
    assert up.verdict == down.verdict == "supported"
    assert "lies above 0" in up.reading and "lies below 0" in down.reading and "two-sided p = 0.02" in up.reading
    # 0.03 one-sided is 0.06 two-sided: not enough, and a strong effect the "other" way is no contradiction
    assert rule.decide(_ev(0.3, -0.1, 0.7, 0.03, 0.97)).verdict == "inconclusive"
    assert rule.decide(_ev(0.01, -0.05, 0.05, 0.4, 0.6)).verdict == "not supported"
    assert Direction(direction="two-sided").decide(_ev(0.01, -0.05, 0.05, 0.4, 0.6)).verdict == "inconclusive"
    # an exact test at n = 5 can reach p = 1/32 one-sided, 1/16 two-sided: too few units to decide at 5%
    five = Direction(direction="two-sided").decide(mean_effect([5.0, 6.0, 7.0, 8.0, 9.0], unit="seeds"))
    assert five.verdict == "inconclusive" and "smallest attainable two-sided p is 0.062" in five.reading
    with pytest.raises(ValueError, match="'two-sided'"):
        Direction(direction="both")
    with pytest.raises(ValueError, match="null"):
        Direction(direction="two-sided", null=1.0).decide(mean_effect([1.0, 2.0, 3.0], unit="seeds"))


def test_two_sided_family_tests_two_sided_p_at_alpha_after_holm():
    rule = Family(rule=Direction(direction="two-sided"), family="any")
    null = [_ev(0.0, -0.1, 0.1, 0.5, 0.5) for _ in range(9)]
    # one pair each way: 0.002 one-sided -> 0.004 two-sided -> 0.04 after Holm over 10 <= 0.05
    for e in (_ev(-1, -1.5, -0.5, 0.998, 0.002), _ev(1, 0.5, 1.5, 0.002, 0.998)):
        d = rule.decide(null + [e])
        assert d.verdict == "supported" and d.rule == "two-sided: effect ≠ 0; any of 10 (Holm)"
        assert d.reading.startswith("1 of 10 tests are significant (two-sided)")
        assert d.undo == "new documents that left no test significant after the correction"
    # 0.003 one-sided -> 0.06 after Holm: not significant, and never "contradicted"
    assert rule.decide(null + [_ev(-1, -1.5, -0.5, 0.997, 0.003)]).verdict == "inconclusive"
    assert Family(rule=Direction(direction="two-sided"), family="all").decide(null + null).verdict == "inconclusive"
    assert rule.name == "two-sided: effect ≠ 0; any of the family (Holm)"
    with pytest.raises(ValueError, match="'all' or 'any'"):
        Family(rule=Direction(), family="some")


def test_held_out_peak_drop_finds_a_real_fall():
    depth = np.linspace(0, 1, 31)
    rng = np.random.default_rng(1)
    fall = (1 - np.exp(-6 * depth)) - 0.5 * np.clip((depth - 2 / 3) * 3, 0, None)
    curves = fall[None] + rng.normal(0, 0.05, (16, 31))
    ev = held_out_peak_drop(curves, unit="documents")
    assert ev.n == 8 and Direction().decide(ev).verdict == "supported"
    assert math.isclose(ev.estimate, 0.5, abs_tol=0.15)
    with pytest.raises(ValueError, match="n_units >= 4"):
        held_out_peak_drop(curves[:3], unit="documents")


def test_supported_never_sits_beside_an_interval_that_reaches_the_null():
    """Where the shown interval is a different procedure from the deciding test (a Student-t interval beside a
    Monte Carlo sign-flip test above 12 units), the two can disagree. A test that rejects beside an interval
    reaching the null leaves the row inconclusive, and says why; with an interval that clears 0 it is
    supported."""
    ev = _ev(-0.072, -0.144, 0.0005, 0.99, 0.016)
    dec = Direction(direction="less").decide(ev)
    assert dec.verdict == "inconclusive" and "its interval reaches 0" in dec.reading
    assert "more units are needed" in dec.reading
    tight = mean_effect(np.random.default_rng(0).normal(-0.05, 0.005, 20), unit="seeds")
    assert tight.high < 0 and Direction(direction="less").decide(tight).verdict == "supported"
    # the same disagreement the other way is no contradiction either
    assert Direction(direction="greater").decide(ev).verdict == "inconclusive"
    # two-sided: p = 2 * 0.016 = 0.032 <= 0.05, interval reaches 0 -> inconclusive
    two = Direction(direction="two-sided").decide(ev)
    assert two.verdict == "inconclusive" and "two-sided test" in two.reading
    # the reverse: the interval clears 0 but the test does not reach 0.025. The row stays inconclusive, and its
    # reading says the two disagree instead of "does not separate from 0"
    rev = _ev(-0.052, -0.101, -0.0033, 0.97, 0.031)
    for direction, test in (("less", "one-sided"), ("greater", "one-sided"), ("two-sided", "two-sided")):
        dec = Direction(direction=direction).decide(rev)
        assert dec.verdict == "inconclusive" and "does not separate" not in dec.reading, direction
        assert f"interval wholly below 0, but the {test} test" in dec.reading and "disagree" in dec.reading
        assert "documents" in dec.remedy
    wide = mean_effect(np.array([-0.3, 0.2, -0.1, 0.15, -0.2, 0.1]), unit="seeds")
    assert "does not separate from 0" in Direction(direction="less").decide(wide).reading
    # evidence without an interval is decided by its test alone
    bare = Evidence(estimate=-0.1, low=None, high=None, p_greater=1.0, p_less=0.01, unit="seeds", n=6,
                    method="test only", null=0.0, p_min=2.0 ** -6)
    assert Direction(direction="less").decide(bare).verdict == "supported"


def _subset_means(d):
    return sorted(np.mean(c) for r in range(1, len(d) + 1) for c in itertools.combinations(d, r))


@pytest.mark.parametrize("n", [6, 7, 8, 10, 12])
def test_exact_interval_is_the_set_of_means_the_sign_flip_test_keeps(n):
    """The exact sign-flip interval (Hartigan 1969) inverts the exact test: a null lies below it exactly when
    the one-sided test for "greater" rejects at 0.025, above it exactly when the test for "less" does, for
    nulls just inside and just outside each end and anywhere in between. Below SMALL_N units it is the
    interval every Evidence of a mean shows."""
    rng = np.random.default_rng(n)
    k = math.floor(2**n * 0.025)
    for draw in range(4):
        d = rng.standard_normal(n) if draw % 2 == 0 else np.round(rng.exponential(1.0, n) - 0.7, 1)  # ties
        if d.std() == 0:
            continue
        lo, hi = sign_flip_interval(d)
        m = _subset_means(d)
        assert (lo, hi) == pytest.approx((m[k - 1], m[-k]), abs=1e-12)  # brute-force order statistics
        eps = 1e-7 * (1 + np.abs(d).max())
        for null in (lo - eps, lo + eps, hi - eps, hi + eps, (lo + hi) / 2, *rng.uniform(lo - 1, hi + 1, 8)):
            ev = mean_effect(d, null=float(null), unit="seeds")
            assert (lo > null) == (ev.p_greater <= 0.025), (n, draw, null)
            assert (hi < null) == (ev.p_less <= 0.025), (n, draw, null)
            if n >= SMALL_N:
                assert ev.method.startswith("t-interval")
                continue
            assert (ev.low, ev.high) == pytest.approx((lo, hi), abs=1e-12) and ev.method.startswith("exact")
            # so a row is never "supported" beside an interval that reaches its null, nor the reverse
            for direction in ("greater", "less", "two-sided"):
                assert "disagree" not in Direction(direction=direction, null=float(null)).decide(ev).reading


def test_exact_interval_covers_at_its_level():
    """Calibration of the interval itself: under a symmetric (here heavy-tailed) unit distribution the exact
    interval covers the mean with probability 1 - 2k/2**n >= 95% (n = 8: 1 - 12/256 = 0.953)."""
    rng = np.random.default_rng(1)
    sims, n = 3000, 8
    x = rng.standard_t(3, size=(sims, n)) + 0.4
    covered = np.mean([lo <= 0.4 <= hi for lo, hi in (sign_flip_interval(row) for row in x)])
    exact = 1 - 2 * math.floor(2**n * 0.025) / 2**n
    se = math.sqrt(exact * (1 - exact) / sims)
    assert abs(covered - exact) < 4 * se, (covered, exact)


def test_exact_interval_bounds_and_fallbacks():
    """Six units at 95%: k = 1, so the interval is the range of the units. Five or fewer: every mean is kept
    (2**-5 > 0.025), no finite exact interval exists, and the Student-t interval is shown (the row cannot be
    decided anyway); from SMALL_N units on the interval is Student-t (above 12 the test is Monte Carlo)."""
    d = np.array([0.3, -0.1, 0.7, 0.2, -0.4, 1.1])
    assert sign_flip_interval(d) == (-0.4, 1.1)
    ev = mean_effect(d, unit="seeds")
    assert (ev.low, ev.high) == (-0.4, 1.1) and ev.method.startswith("exact sign-flip interval")
    assert sign_flip_interval(d[:5]) is None and sign_flip_interval(np.arange(13.0)) is None
    assert mean_effect(d[:5], unit="seeds").method.startswith("t-interval")
    for n in (SMALL_N, 20):
        assert mean_effect(np.arange(float(n)), unit="seeds").method.startswith("t-interval")
    # a tighter level needs more units: 98.3% (an anatomy look's spent level) needs 7
    assert sign_flip_interval(d, level=1 - 0.05 / 3) is None and sign_flip_interval(np.arange(7.0), 1 - 0.05 / 3)
    # unit_interval (the atlas's per-layer columns) uses the same interval over the per-unit means
    groups = np.repeat(np.arange(6), 2)
    values = np.repeat(d, 2) + np.tile([-0.01, 0.01], 6)
    assert unit_interval(values, groups)[1:] == pytest.approx((-0.4, 1.1))
