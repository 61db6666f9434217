"""The verdict engine: a few named rules that turn :class:`~layerlab.report.inference.Evidence` into a
verdict, and the one-sentence reading of each outcome.

Rules (each one a frozen dataclass with a ``name`` that the claim table prints):

* :class:`Direction` — "the effect is above (below) the null". *supported*: the one-sided
  permutation p-value in the claimed direction is <= alpha/2 (0.025: the two-sided 5% level) and the
  shown interval lies on that side of the null (a mean's interval at 6-7 units inverts the exact test, so
  the two agree; elsewhere a Student-t or bootstrap interval can still reach the null when the test
  rejects: then the row is *inconclusive*, never "supported" beside an interval containing the null);
  *contradicted*: the same in the opposite direction;
  *not supported*: the interval lies inside the stated equivalence ``margin`` around the null; else
  *inconclusive* (lack of power is never "contradicted" nor "not supported").
  With ``direction="two-sided"`` the claim is "there is an effect, either way": *supported* when the
  two-sided p = min(1, 2 min(p_greater, p_less)) is <= alpha and the interval excludes the null; there
  is no opposite side, so never
  *contradicted* (only the equivalence ``margin`` can say "not supported").
* :class:`Band` — "the value lies in [lo, hi]": supported if the interval is inside the band,
  contradicted if it is disjoint from it, inconclusive otherwise.
* :class:`Equivalence` — "there is no effect": supported if the interval is inside +-margin,
  contradicted if it lies wholly outside it, inconclusive otherwise.
* :class:`Identity` — an algebraic identity checked numerically: tagged ``[identity]``, never counted
  as an empirical finding (:func:`empirical`).
* :func:`missing` — a claim whose inputs are absent still gets its row: "inconclusive", with the reason.

A family of tests (one per layer, per pair) is decided by :class:`Direction` with ``family="all"``
or ``"any"`` on Holm-adjusted p-values (:func:`layerlab.report.inference.holm`); :class:`Family` is that
decision as a rule object (what the calibration appendix simulates).

Calibration (false "supported" under the null, power under the claimed effect) is measured by
:func:`layerlab.report.calibration.calibrate` at each chapter's real n.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from layerlab.report.claims import Claim, fmt, fmt_interval, plain_unit
from layerlab.report.inference import Evidence, holm

__all__ = ["ANY_EFFECT", "Band", "Decision", "Direction", "Equivalence", "Family", "Identity", "decide_family",
           "empirical", "missing"]


@dataclass(frozen=True, kw_only=True)
class Decision:
    """A rule's outcome: the verdict, the rule's name and the sentence that reads it. ``remedy``: for an
    undecided verdict, what a replication would need to decide it, as the rule knows it (a sentence, e.g.
    "no effect size can decide it at this n; more seeds would"); "" leaves the default of
    :func:`layerlab.report.claims.what_would_change` (more units, or a larger effect). ``undo``: for a
    "supported" verdict, what new data would have to show to undo it, where the rule knows better than its
    interval (a family: new units that leave no test, or not every test, significant after the correction)."""

    verdict: str
    rule: str
    reading: str
    remedy: str = ""
    undo: str = ""


def _family_undo(evidence: Sequence[Evidence], family: str) -> str:
    """What would undo a supported family: new units that "left no test significant" ("any") or "made any test
    lose significance" ("all") after the correction."""
    undo = "left no test significant" if family == "any" else "made any test lose significance"
    return f"new {plain_unit(evidence[0].unit)} that {undo} after the correction"


def _interval(ev: Evidence, digits: int = 3) -> str:
    ci = f"95% CI {fmt_interval(ev.low, ev.high, digits)}, " if ev.has_interval else ""
    return f"{ci}n = {ev.n} {ev.unit}"


def _no_effect_size(ev: Evidence, p_min: float, level: float) -> str:
    """The remedy of a row whose test cannot reach its level at this n, whatever the effect."""
    return (f"With n = {ev.n} {plain_unit(ev.unit)} the smallest attainable p is {p_min:.2g} > {level:g}, so no "
            f"effect size can decide it: only more {plain_unit(ev.unit)} would.")


def _p(ev: Evidence, direction: str) -> float:
    if direction == "two-sided":
        return min(1.0, 2 * min(ev.p_greater, ev.p_less))
    return ev.p_greater if direction == "greater" else ev.p_less


@dataclass(frozen=True, kw_only=True)
class Direction:
    """The claimed direction vs a null: ``direction`` "greater" or "less" than ``null``, or "two-sided"
    (an effect either way: tested on the two-sided p at ``alpha``)."""

    direction: str = "greater"
    null: float = 0.0
    margin: float | None = None  # equivalence margin for "not supported" (None: never "not supported")
    alpha: float = 0.05  # two-sided level; each direction is tested at alpha / 2

    def __post_init__(self) -> None:
        if self.direction not in ("greater", "less", "two-sided"):
            raise ValueError(f"Direction: direction must be 'greater', 'less' or 'two-sided', got {self.direction!r}")
        if self.margin is not None and self.margin <= 0:
            raise ValueError(f"Direction: margin must be > 0 (or None), got {self.margin}")

    @property
    def name(self) -> str:
        m = "" if self.margin is None else f", equivalence ±{fmt(self.margin)}"
        if self.direction == "two-sided":
            return f"two-sided: effect ≠ {fmt(self.null)}{m}"
        sign = ">" if self.direction == "greater" else "<"
        return f"direction: effect {sign} {fmt(self.null)}{m}"

    def _check_null(self, ev: Evidence) -> None:
        if abs(ev.null - self.null) > 1e-12:
            raise ValueError(
                f"{self.name}: the evidence was computed against null {ev.null}, the rule uses "
                f"{self.null}; compute the Evidence with null={self.null}"
            )

    def _beyond(self, ev: Evidence, direction: str) -> bool:
        self._check_null(ev)
        return _p(ev, direction) <= self.alpha / 2

    def _interval_on_side(self, ev: Evidence, direction: str) -> bool:
        """Whether the shown interval agrees with a test that rejected towards ``direction``: it lies wholly on
        that side of the null (two-sided: excludes it); evidence without an interval has nothing to disagree."""
        if not ev.has_interval or ev.low is None or ev.high is None:
            return True
        side = self._interval_side(ev)
        return side is not None if direction == "two-sided" else side == direction

    def _interval_side(self, ev: Evidence) -> str | None:
        """The side of the null ("greater"/"less") that the shown interval lies wholly on, else None."""
        if not ev.has_interval or ev.low is None or ev.high is None:
            return None
        return "greater" if ev.low > self.null else "less" if ev.high < self.null else None

    def _undecided(self, ev: Evidence, est: str, tail: str) -> Decision:
        """Neither side rejected. If the shown interval still clears the null (an interval that is not the
        test's own: Student-t beside a Monte-Carlo test, a bootstrap beside a permutation test), say that the two
        disagree, instead of a reading the interval contradicts."""
        side = self._interval_side(ev)
        if side is None:
            return Decision(verdict="inconclusive", rule=self.name,
                            reading=f"The estimate {est} does not separate from {fmt(self.null)}{tail}")
        two = self.direction == "two-sided"
        test, p, level = ("two-sided", _p(ev, "two-sided"), self.alpha) if two else \
            ("one-sided", _p(ev, side), self.alpha / 2)
        where = "above" if side == "greater" else "below"
        return Decision(verdict="inconclusive", rule=self.name,
                        reading=f"The estimate {est} has an interval wholly {where} {fmt(self.null)}, but the "
                        f"{test} test, which decides the row, gives p = {p:.2g} > {level:g}: the test and the "
                        "interval disagree at this n, so more units are needed.",
                        remedy=f"More {plain_unit(ev.unit)}, enough for the test and the interval to agree, would "
                        "decide it.")

    def _disagree(self, est: str, test: str, unit: str) -> Decision:
        """The test rejected but the interval (a different procedure: Student-t, bootstrap) still reaches the
        null: a reader would see "supported" beside an interval containing 0, so the row stays undecided."""
        return Decision(verdict="inconclusive", rule=self.name,
                        reading=f"The estimate {est} passes the {test} test, but its interval reaches "
                        f"{fmt(self.null)}: the test and the interval disagree at this n, so more units are needed.",
                        remedy=f"More {plain_unit(unit)}, enough for the test and the interval to agree, would "
                        "decide it.")

    def decide(self, ev: Evidence) -> Decision:
        if self.direction == "two-sided":
            return self._decide_two_sided(ev)
        other = "less" if self.direction == "greater" else "greater"
        p = _p(ev, self.direction)
        est = f"{fmt(ev.estimate)} ({_interval(ev)}; one-sided p = {p:.2g})"
        side = "above" if self.direction == "greater" else "below"
        if self._beyond(ev, self.direction):
            if not self._interval_on_side(ev, self.direction):
                return self._disagree(est, "one-sided", ev.unit)
            return Decision(
                verdict="supported",
                rule=self.name,
                reading=f"The estimate {est} lies {side} {fmt(self.null)}, as claimed.",
            )
        if self._beyond(ev, other):
            if not self._interval_on_side(ev, other):
                return self._disagree(est, "opposite one-sided", ev.unit)
            opp = "below" if self.direction == "greater" else "above"
            return Decision(
                verdict="contradicted",
                rule=self.name,
                reading=f"The estimate {est} lies {opp} {fmt(self.null)}: the opposite of the claim.",
            )
        if ev.p_min > self.alpha / 2:
            return Decision(
                verdict="inconclusive",
                rule=self.name,
                reading=f"The estimate {est} cannot decide the claim: with n = {ev.n} {ev.unit} the "
                f"smallest attainable p is {ev.p_min:.2g} > {self.alpha / 2:g}; more units are "
                "needed.",
                remedy=_no_effect_size(ev, ev.p_min, self.alpha / 2),
            )
        if self._within_margin(ev):
            return Decision(
                verdict="not supported",
                rule=self.name,
                reading=f"The estimate {est} lies within ±{fmt(self.margin)} of {fmt(self.null)}: "
                "no effect of the claimed size.",
            )
        return self._undecided(ev, est, " in either direction: too little evidence to decide.")

    def _within_margin(self, ev: Evidence) -> bool:
        return (self.margin is not None and ev.has_interval and ev.low is not None and ev.high is not None
                and self.null - self.margin < ev.low and ev.high < self.null + self.margin)

    def _decide_two_sided(self, ev: Evidence) -> Decision:
        self._check_null(ev)
        p = _p(ev, "two-sided")
        est = f"{fmt(ev.estimate)} ({_interval(ev)}; two-sided p = {p:.2g})"
        if p <= self.alpha:
            if not self._interval_on_side(ev, "two-sided"):
                return self._disagree(est, "two-sided", ev.unit)
            side = "above" if ev.p_greater <= ev.p_less else "below"
            return Decision(verdict="supported", rule=self.name,
                            reading=f"The estimate {est} lies {side} {fmt(self.null)}: an effect, as claimed.")
        if 2 * ev.p_min > self.alpha:
            return Decision(verdict="inconclusive", rule=self.name,
                            reading=f"The estimate {est} cannot decide the claim: with n = {ev.n} {ev.unit} the "
                            f"smallest attainable two-sided p is {min(1.0, 2 * ev.p_min):.2g} > {self.alpha:g}; "
                            "more units are needed.",
                            remedy=_no_effect_size(ev, min(1.0, 2 * ev.p_min), self.alpha))
        if self._within_margin(ev):
            return Decision(verdict="not supported", rule=self.name,
                            reading=f"The estimate {est} lies within ±{fmt(self.margin)} of {fmt(self.null)}: "
                            "no effect of the claimed size.")
        return self._undecided(ev, est, ": too little evidence to decide (a two-sided claim has no opposite side; "
                               "only an equivalence margin could say there is no effect).")


@dataclass(frozen=True, kw_only=True)
class Band:
    """The value lies in the band [lo, hi] (e.g. a paper's reported value with its tolerance and source)."""

    lo: float
    hi: float
    source: str  # where the band comes from (a paper's table, a derivation); required

    def __post_init__(self) -> None:
        if not self.lo < self.hi:
            raise ValueError(f"Band: lo {self.lo} must be < hi {self.hi}")
        if not self.source.strip():
            raise ValueError("Band: name the source of the band (a paper's table or a derivation)")

    @property
    def name(self) -> str:
        return f"band [{fmt(self.lo)}, {fmt(self.hi)}] ({self.source})"

    def decide(self, ev: Evidence) -> Decision:
        if not ev.has_interval:
            return Decision(
                verdict="inconclusive",
                rule=self.name,
                reading=f"{fmt(ev.estimate)} has no interval at n = {ev.n} {ev.unit}; a band needs one.",
                remedy=f"An interval, i.e. replicate {plain_unit(ev.unit)}, would decide it.",
            )
        assert ev.low is not None and ev.high is not None
        est = f"{fmt(ev.estimate)} ({_interval(ev)})"
        if self.lo <= ev.low and ev.high <= self.hi:
            return Decision(verdict="supported", rule=self.name, reading=f"The estimate {est} lies inside the band.")
        if ev.high < self.lo or ev.low > self.hi:
            return Decision(
                verdict="contradicted", rule=self.name, reading=f"The estimate {est} lies outside the band."
            )
        return Decision(
            verdict="inconclusive", rule=self.name, reading=f"The estimate {est} straddles the band's edge."
        )


@dataclass(frozen=True, kw_only=True)
class Equivalence:
    """There is no effect: the value lies within ±``margin`` of ``null``."""

    margin: float
    null: float = 0.0

    def __post_init__(self) -> None:
        if self.margin <= 0:
            raise ValueError(f"Equivalence: margin must be > 0, got {self.margin}")

    @property
    def name(self) -> str:
        return f"equivalence: |effect - {fmt(self.null)}| < {fmt(self.margin)}"

    def decide(self, ev: Evidence) -> Decision:
        return Band(lo=self.null - self.margin, hi=self.null + self.margin, source="equivalence margin").decide(ev)


@dataclass(frozen=True, kw_only=True)
class Identity:
    """An identity that holds by algebra, checked numerically to ``tol``. Never an empirical finding."""

    tol: float

    @property
    def name(self) -> str:
        return f"identity: max |error| <= {self.tol:.0e}"

    def decide_error(self, max_abs_error: float) -> Decision:
        ok = max_abs_error <= self.tol
        return Decision(
            verdict="supported" if ok else "contradicted",
            rule=self.name,
            reading=(
                f"The identity holds to {max_abs_error:.1e} (tolerance {self.tol:.0e})."
                if ok
                else f"The identity fails: error {max_abs_error:.1e} > tolerance {self.tol:.0e}; a bug, not a finding."
            ),
        )


def decide_family(rule: Direction, evidence: Sequence[Evidence], *, family: str = "all") -> Decision:
    """Decide a claim that is a family of tests (one :class:`Evidence` per layer or pair) on
    Holm-adjusted one-sided p-values at ``rule.alpha / 2``.

    family "all": supported if every member is significant in the claimed direction; "any": if at
    least one is. Contradicted if (any / all, mirrored) are significant the other way; else inconclusive.
    A two-sided ``rule``: Holm on the two-sided p-values at ``rule.alpha``; supported as above, never
    contradicted (an effect either way has no opposite side)."""
    if family not in ("all", "any"):
        raise ValueError(f"family must be 'all' or 'any', got {family!r}")
    if not evidence:
        raise ValueError("decide_family needs at least one Evidence")
    if rule.direction == "two-sided":
        return _decide_family_two_sided(rule, evidence, family)
    other = "less" if rule.direction == "greater" else "greater"
    p_claim = holm([_p(e, rule.direction) for e in evidence])
    p_other = holm([_p(e, other) for e in evidence])
    a = rule.alpha / 2
    hit = p_claim <= a
    opp = p_other <= a
    m = len(evidence)
    name = f"{rule.name}; {family} of {m} (Holm)"
    units = f"n = {evidence[0].n} {evidence[0].unit} each"
    if hit.all() if family == "all" else hit.any():
        return Decision(
            verdict="supported",
            rule=name,
            reading=f"{int(hit.sum())} of {m} tests are significant in the claimed direction "
            f"after Holm correction ({units}).",
            undo=_family_undo(evidence, family),
        )
    if opp.any() if family == "all" else opp.all():
        return Decision(
            verdict="contradicted",
            rule=name,
            reading=f"{int(opp.sum())} of {m} tests are significant in the opposite direction "
            f"after Holm correction ({units}).",
        )
    return Decision(
        verdict="inconclusive",
        rule=name,
        reading=f"{int(hit.sum())} of {m} tests are significant in the claimed direction and "
        f"{int(opp.sum())} in the opposite one after Holm correction ({units}).",
        remedy=_family_remedy(evidence, family, a, two_sided=False),
    )


def _family_remedy(evidence: Sequence[Evidence], family: str, level: float, *, two_sided: bool) -> str:
    """The remedy of a family that no effect size can decide at its n. Holm's adjusted p-values only grow
    with the raw ones, so the smallest attainable ones are Holm of the members' smallest attainable p:
    "any" needs the least of them at the level, "all" the largest."""
    p_min = holm([min(1.0, (2 if two_sided else 1) * e.p_min) for e in evidence])
    best = float(p_min.max() if family == "all" else p_min.min())
    if best <= level:
        return ""
    ns = sorted({e.n for e in evidence})
    n = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"
    unit = plain_unit(evidence[0].unit)
    return (f"With n = {n} {unit} per test and {len(evidence)} tests, the smallest attainable Holm-adjusted p is "
            f"{best:.2g} > {level:g}, so no effect size can decide it: only more {unit} would.")


def _decide_family_two_sided(rule: Direction, evidence: Sequence[Evidence], family: str) -> Decision:
    hit = holm([_p(e, "two-sided") for e in evidence]) <= rule.alpha
    m = len(evidence)
    units = f"n = {evidence[0].n} {evidence[0].unit} each"
    ok = hit.all() if family == "all" else hit.any()
    return Decision(
        verdict="supported" if ok else "inconclusive",
        rule=f"{rule.name}; {family} of {m} (Holm)",
        reading=f"{int(hit.sum())} of {m} tests are significant (two-sided) after Holm correction ({units}).",
        remedy="" if ok else _family_remedy(evidence, family, rule.alpha, two_sided=True),
        undo=_family_undo(evidence, family) if ok else "",
    )


@dataclass(frozen=True, kw_only=True)
class Family:
    """A family claim as a rule: :func:`decide_family` of ``rule`` over one Evidence per member, "all" or
    "any" (what :func:`layerlab.report.calibration.calibrate` simulates for a family design)."""

    rule: Direction
    family: str = "any"

    def __post_init__(self) -> None:
        if self.family not in ("all", "any"):
            raise ValueError(f"Family: family must be 'all' or 'any', got {self.family!r}")

    @property
    def name(self) -> str:
        return f"{self.rule.name}; {self.family} of the family (Holm)"

    def decide(self, evidence: Sequence[Evidence]) -> Decision:
        return decide_family(self.rule, evidence, family=self.family)


ANY_EFFECT = Family(rule=Direction(direction="two-sided"), family="any")
"""Some member of a family shows an effect, either way, after Holm (the atlas's AF/AA rows)."""


def missing(*, id: str, claim: str, paper: str, tag: str, reason: str) -> Claim:
    """The row of a claim whose inputs are missing: inconclusive, with the reason (never dropped)."""
    if not reason.strip():
        raise ValueError(f"claim {id}: say why its inputs are missing")
    return Claim(
        id=id,
        claim=claim,
        paper=paper,
        tag=tag,
        ours=None,
        ci_low=None,
        ci_high=None,
        null="—",
        verdict="inconclusive",
        note=f"not computed: {reason}",
    )


def empirical(claims: Sequence[Claim]) -> list[Claim]:
    """The claims that count as empirical findings: every row except the [identity] ones."""
    return [c for c in claims if c.tag != "identity"]
