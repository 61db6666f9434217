"""The calibration appendix's claim rows: for each design, "false 'supported' <= 5%" (or, for the
biased same-data peak, "> 5%"), decided on the simulated rate with an exact binomial test and a
Clopper-Pearson interval over the null simulations, at the share of the level of the look that decided
it (:mod:`layerlab.chapters.calibration.looks`)."""

from __future__ import annotations

from layerlab.chapters.calibration.looks import LEVEL, decide_rate, rate_evidence
from layerlab.chapters.calibration.run import CalibrationResult
from layerlab.report.claims import Claim
from layerlab.report.inference import Evidence
from layerlab.report.verdicts import Decision

__all__ = ["LEVEL", "case_decision", "claims", "prose", "rate_evidence"]


def case_decision(result: CalibrationResult, i: int) -> tuple[Evidence, Decision]:
    """(evidence, decision) on case ``i``'s false-"supported" rate, at the level of the look that decided it."""
    cal = result.calibrations[i]
    return decide_rate(cal.null_supported, cal.null_sims, result.preset.cases[i].expect_calibrated,
                       alpha=result.alpha(i))


def claims(result: CalibrationResult) -> list[Claim]:
    """One row per design: K1, K2, ... in the order of the preset's cases."""
    rows = []
    P = result.preset
    n_looks = len(P.looks)
    for i, (case, cal) in enumerate(zip(P.cases, result.calibrations, strict=True)):
        alpha, look = result.alpha(i), result.looks[i]
        ev, decision = case_decision(result, i)
        sign = "≤" if case.expect_calibrated else ">"
        done = "decided" if decision.verdict in ("supported", "contradicted") else "still undecided"
        where = ("" if n_looks == 1 else
                 f"; {done} at look {look} of {n_looks} ({cal.null_sims:,} null draws: tested at "
                 f"{100 * alpha:.3g}%, {100 * (1 - alpha):.4g}% interval)")
        claim = f"{case.label}: false 'supported' under the null {sign} 5% at n = {case.n} {case.unit}"
        rows.append(Claim.decided(
            id=f"K{i + 1}", claim=claim,
            paper="book standard", tag="reconstructed", evidence=ev, decision=decision,
            null=f"power {cal.power:.2f} at {cal.effect_size} ({cal.n_sims:,} draws)", note=cal.scenario + where,
            ci_level=1 - alpha))
    return rows


def prose(result: CalibrationResult) -> dict[str, object]:
    """The generated Markdown the page glues: which designs are the biased ones the book rejects, and
    which designs needed more null draws than the first look."""
    from IPython.display import Markdown

    P = result.preset
    bad = [case.label for case in P.cases if not case.expect_calibrated]
    if not bad:
        rejected = "No design in this run is one the book rejects."
    else:
        names = [f"*{b}*" for b in bad]
        listed = names[0] if len(names) == 1 else "; ".join(names[:-1]) + f"; and {names[-1]}"
        what = "one design" if len(bad) == 1 else f"{len(bad)} designs"
        rejected = f"The table also holds {what} the book rejects: {listed}."
    return {"cal_rejected": Markdown(rejected), "cal_extended": Markdown(_looks_sentence(result))}


def _looks_sentence(result: CalibrationResult) -> str:
    P = result.preset
    n = result.numbers
    if len(P.looks) == 1:
        return f"Every rate rests on {P.n_sims:,} null draws, decided at the whole 5% level."
    went = [(f"K{i + 1}", c.null_sims) for i, c in enumerate(result.calibrations) if result.looks[i] > 1]
    head = (f"A rate still undecided against 5% after {P.n_sims:,} null draws goes on to the next look "
            f"({n['looks']} null draws). The looks decide at {n['shares']}: shares of the 5% level that add up "
            "to it, so the interval of the look that decides is valid whatever made the simulations go on. ")
    if not went:
        return head + "No design needed more than the first look."
    listed = ", ".join(f"{k} ({m:,})" for k, m in went)
    undecided = [f"K{i + 1}" for i in range(len(P.cases))
                 if case_decision(result, i)[1].verdict not in ("supported", "contradicted")]
    tail = (f" Still undecided at the last look: {', '.join(undecided)}." if undecided else
            " Each of them was decided.")
    one = len(went) == 1
    return head + f"{len(went)} design{'' if one else 's'} went on: {listed}." + tail
