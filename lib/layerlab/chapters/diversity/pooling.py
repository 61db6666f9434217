"""Pooling a diversity claim over tasks and readouts (Kamigaito et al. 2025, arXiv:2505.24009; the
chapter's claims D3-D10): one :class:`~layerlab.report.inference.Evidence` per (task, readout) unit, one
verdict with the sentence that reads it.

Rule (named in the claim table as ``pooled over tasks (Holm, all) x readouts (agreement)``):

* within a readout (the prompt's verbaliser lens or the fitted linear head), the eligible tasks form a
  family: *supported* if every task is significant in the claimed direction after Holm correction,
  *contradicted* if some task is significant the other way and none in the claimed one (tasks that are
  significant in both directions leave it *inconclusive*), *not supported* if every task lies inside
  the rule's equivalence margin, else *inconclusive*. Where the claim gives ``equivalence`` evidence (D6 /
  D10: the largest fall from any depth to full depth, on all examples; a held-out drop from a peak chosen
  at full depth is 0 by construction) that evidence decides the other side: *contradicted* if in every
  task every depth's fall has its 95% upper bound below the null, *not supported* if below the margin;
* across readouts the verdicts must agree; if they differ the claim is *inconclusive* and the reading
  says that it depends on the readout;
* a (task, readout) unit whose input is missing, or that the chapter's eligibility rule excludes (a
  readout at chance for claims about label information), is listed by name and never counted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from layerlab.report.claims import fmt
from layerlab.report.inference import Evidence, holm
from layerlab.report.verdicts import Decision, Direction

__all__ = ["POOL_RULE", "agreement", "pool"]

POOL_RULE = "pooled over tasks (Holm, all) x readouts (agreement)"


def _p(ev: Evidence, direction: str) -> float:
    return ev.p_greater if direction == "greater" else ev.p_less


def agreement(evidence: Mapping[str, Evidence]) -> str:
    """Whether the units' estimates agree in sign: a generated clause."""
    pos = [k for k, e in evidence.items() if e.estimate > 0]
    neg = [k for k, e in evidence.items() if e.estimate < 0]
    zero = [k for k, e in evidence.items() if e.estimate == 0]
    if len(evidence) == 1:
        return "one unit only, so agreement cannot be judged"
    if not neg and not zero:
        return "the tasks agree in sign (all positive)"
    if not pos and not zero:
        return "the tasks agree in sign (all negative)"
    parts = [f"{label} in {', '.join(ks)}" for label, ks in (("positive", pos), ("negative", neg), ("zero", zero))
             if ks]
    return "the tasks disagree in sign: " + "; ".join(parts)


def _within(rule: Direction, evs: dict[str, Evidence],
            equivalence: Mapping[str, Evidence | None] | None = None) -> tuple[str, str]:
    other = "less" if rule.direction == "greater" else "greater"
    names = list(evs)
    a = rule.alpha / 2
    hit = holm([_p(evs[k], rule.direction) for k in names]) <= a
    opp = holm([_p(evs[k], other) for k in names]) <= a
    est = ", ".join(f"{k.split('/')[0]} {fmt(evs[k].estimate)}" for k in names)
    what = (f"{int(hit.sum())} of {len(names)} tasks significant in the claimed direction, {int(opp.sum())} in the "
            f"opposite one (Holm; {est}); {agreement(evs)}")
    if hit.all():
        return "supported", what
    if opp.any() and hit.any():
        return "inconclusive", what + "; tasks are significant in both directions"
    if rule.margin is not None and equivalence is not None:
        # a peak-then-fall claim: a held-out drop below 0 only says that the depth one half chose is not a peak
        # on the other; the evidence the other way is every depth's fall, on all examples (intersection-union)
        eq = [equivalence.get(k) for k in names]
        if all(e is not None and e.high is not None for e in eq):
            highs = ", ".join(f"{k.split('/')[0]} {fmt(e.high)}" for k, e in zip(names, eq, strict=True) if e)
            if all(e.high < rule.null for e in eq if e):
                return "contradicted", what + (f"; in every task full depth beats every earlier depth (largest 95% "
                                               f"upper bound of a fall: {highs})")
            if all(e.high < rule.null + rule.margin for e in eq if e):
                return "not supported", what + (f"; in every task the fall from every depth to full depth lies "
                                                f"below {fmt(rule.margin)} (largest 95% upper bound: {highs})")
            return "inconclusive", what + (f"; some fall to full depth may reach {fmt(rule.margin)} (largest 95% "
                                           f"upper bound: {highs}), so no fall is not shown either")
        return "inconclusive", what + "; the all-example fall evidence is missing, so no fall cannot be judged"
    if opp.any():
        return "contradicted", what
    if rule.margin is not None and all(rule.decide(e).verdict == "not supported" for e in evs.values()):
        return "not supported", what + f"; every task within ±{fmt(rule.margin)} of {fmt(rule.null)}"
    return "inconclusive", what


def pool(rule: Direction, units: Mapping[str, Evidence | None], excluded: Mapping[str, str] | None = None, *,
         equivalence: Mapping[str, Evidence | None] | None = None) -> Decision:
    """Decide one claim from its units ``{"<task>/<readout>": Evidence or None (missing)}``; ``excluded``
    maps a unit to the reason it was left out (e.g. "at chance"). ``equivalence``: per unit, the evidence
    that decides "not supported" instead of the unit's own (its interval's upper end must lie below
    ``rule.null + rule.margin``), for claims whose tested statistic cannot show equivalence (D6 / D10)."""
    excluded = dict(excluded or {})
    by_readout: dict[str, dict[str, Evidence]] = {}
    missing = []
    for key, ev in units.items():
        if key in excluded:
            continue
        if ev is None:
            missing.append(key)
            continue
        by_readout.setdefault(key.split("/", 1)[1], {})[key] = ev
    left = ([f"excluded: {', '.join(f'{k} ({why})' for k, why in excluded.items())}"] if excluded else []) + (
        [f"missing: {', '.join(missing)}"] if missing else [])
    tail = f" ({'; '.join(left)})" if left else ""
    if equivalence is not None and rule.margin is not None:  # the margin is one-sided here: a fall below it
        bare = dataclasses.replace(rule, margin=None).name
        name = (f"{bare}; contradicted / not supported only if, in every task, the fall from every depth to full "
                f"depth has its 95% upper bound below {fmt(rule.null)} / {fmt(rule.margin)} (all examples; "
                f"intersection-union); {POOL_RULE}")
    else:
        name = f"{rule.name}; {POOL_RULE}"
    if not by_readout:
        return Decision(verdict="inconclusive", rule=name,
                        reading=f"No (task, readout) unit could test the claim{tail}.")
    outcome = {r: _within(rule, evs, equivalence) for r, evs in by_readout.items()}
    verdicts = {v for v, _ in outcome.values()}
    body = "; ".join(f"{r} readout: {v}, {what}" for r, (v, what) in outcome.items())
    if len(verdicts) == 1:
        verdict = verdicts.pop()
        agree = "both readouts agree" if len(outcome) == 2 else "only one readout is eligible"
        return Decision(verdict=verdict, rule=name, reading=f"{verdict.capitalize()} ({agree}): {body}{tail}.")
    return Decision(verdict="inconclusive", rule=name,
                    reading=f"It depends on the readout: {body}{tail}.",
                    remedy="Agreement of the readouts, not more units alone, would decide it.")


def headline(units: Mapping[str, Evidence | None], preferred: str) -> Evidence | None:
    """The unit whose estimate fills the table's "ours" column: ``preferred`` if present, else the first."""
    if units.get(preferred) is not None:
        return units[preferred]
    return next((e for e in units.values() if e is not None), None)


def finite(x: float | None) -> bool:
    return x is not None and bool(np.isfinite(x))
