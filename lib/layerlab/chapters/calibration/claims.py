"""The calibration appendix's claim rows: for each design, "false 'supported' <= 5%" (or, for the
biased same-data peak, "> 5%"), decided on the simulated rate with an exact binomial test and a
Clopper-Pearson interval over the simulations."""

from __future__ import annotations

from scipy import stats

from layerlab.chapters.calibration.run import CalibrationResult
from layerlab.report.claims import Claim
from layerlab.report.inference import Evidence
from layerlab.report.verdicts import Direction

__all__ = ["LEVEL", "claims", "prose", "rate_evidence"]

LEVEL = 0.05
"""The book's standard: a rule says "supported" under its null at most 5% of the time."""


def rate_evidence(k: int, n: int, *, unit: str = "simulations") -> Evidence:
    """Evidence on a rate k/n against :data:`LEVEL`: exact binomial one-sided p-values and the
    Clopper-Pearson 95% interval."""
    ci = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
    return Evidence(estimate=k / n, low=float(ci.low), high=float(ci.high),
                    p_greater=float(stats.binom.sf(k - 1, n, LEVEL)), p_less=float(stats.binom.cdf(k, n, LEVEL)),
                    unit=unit, n=n, method="exact binomial test; Clopper-Pearson interval", null=LEVEL)


def claims(result: CalibrationResult) -> list[Claim]:
    """One row per design: K1, K2, ... in the order of the preset's cases."""
    rows = []
    for i, (case, cal) in enumerate(zip(result.preset.cases, result.calibrations, strict=True), start=1):
        k = round(cal.false_supported * cal.n_sims)
        ev = rate_evidence(k, cal.n_sims)
        direction = "less" if case.expect_calibrated else "greater"
        rule = Direction(direction=direction, null=LEVEL)
        sign = "<=" if case.expect_calibrated else ">"
        rows.append(Claim.decided(
            id=f"K{i}", claim=f"{case.label}: false 'supported' under the null {sign} 5% at n = {case.n} {case.unit}",
            paper="book standard", tag="reconstructed", evidence=ev, decision=rule.decide(ev),
            null=f"power {cal.power:.2f} at {cal.effect_size}", note=cal.scenario))
    return rows


def prose(result: CalibrationResult) -> dict[str, object]:
    """The generated Markdown the page glues: which designs are the biased ones the book rejects."""
    from IPython.display import Markdown

    bad = [case.label for case in result.preset.cases if not case.expect_calibrated]
    if not bad:
        return {"cal_rejected": Markdown("No design in this run is one the book rejects.")}
    names = [f"*{b}*" for b in bad]
    listed = names[0] if len(names) == 1 else "; ".join(names[:-1]) + f"; and {names[-1]}"
    what = "one design" if len(bad) == 1 else f"{len(bad)} designs"
    return {"cal_rejected": Markdown(f"The table also holds {what} the book rejects: {listed}.")}
