"""The calibration appendix's decision on one design, which is also its stopping rule: is the
false-"supported" rate at most 5%? (:func:`layerlab.chapters.calibration.run.run_case` draws more null
simulations while it is undecided, so this module is part of what the cached result is computed by.)

The rate is k "supported" verdicts in n null simulations. It is compared with :data:`LEVEL` by an exact
binomial test with a Clopper-Pearson interval, at the share of the level that the look deciding it
spends (the preset's ``look_shares``): one-sided p <= alpha / 2 and an interval on the claimed side, as
every row of the book (:class:`layerlab.report.verdicts.Direction`). For the biased designs the book
rejects, the claim is the opposite one: the rate is above 5%.
"""

from __future__ import annotations

from scipy import stats

from layerlab.report.inference import Evidence
from layerlab.report.verdicts import Decision, Direction

__all__ = ["LEVEL", "decide_rate", "rate_evidence", "rate_rule"]

LEVEL = 0.05
"""The book's standard: a rule says "supported" under its null at most 5% of the time."""


def rate_evidence(k: int, n: int, *, alpha: float = LEVEL, unit: str = "simulations") -> Evidence:
    """Evidence on a rate k/n against :data:`LEVEL`: exact binomial one-sided p-values and the
    Clopper-Pearson interval at level 1 - ``alpha``."""
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"rate_evidence: need 0 <= k <= n and n >= 1, got k = {k}, n = {n}")
    ci = stats.binomtest(k, n).proportion_ci(1 - alpha, method="exact")
    return Evidence(estimate=k / n, low=float(ci.low), high=float(ci.high),
                    p_greater=float(stats.binom.sf(k - 1, n, LEVEL)), p_less=float(stats.binom.cdf(k, n, LEVEL)),
                    unit=unit, n=n, method=f"exact binomial test; Clopper-Pearson {100 * (1 - alpha):.4g}% interval",
                    null=LEVEL)


def rate_rule(expect_calibrated: bool, *, alpha: float = LEVEL) -> Direction:
    """The claim on the rate: below :data:`LEVEL` for a design the book uses, above it for one it rejects."""
    return Direction(direction="less" if expect_calibrated else "greater", null=LEVEL, alpha=alpha)


def decide_rate(k: int, n: int, expect_calibrated: bool, *, alpha: float = LEVEL) -> tuple[Evidence, Decision]:
    """(evidence, decision) on k "supported" verdicts in n null simulations at level ``alpha``."""
    ev = rate_evidence(k, n, alpha=alpha)
    return ev, rate_rule(expect_calibrated, alpha=alpha).decide(ev)
