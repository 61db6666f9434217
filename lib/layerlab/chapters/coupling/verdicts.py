"""Verdict helpers of the coupling chapter: one claim decided at every (K, normalisation) setting, the
verdict requiring agreement, and the generated closing list.

Aubry et al., ICLR 2025 (spec ``coupling.md`` section 5, "Robustness": a claim must hold for every K
and both normalisations). A claim is the intersection of its settings (Berger 1982, the
intersection-union test: every setting must be significant on its own, so no multiplicity
correction is needed); when the settings disagree the row says "depends on K/normalisation" and is
inconclusive.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from layerlab.report.claims import Claim
from layerlab.report.inference import Evidence
from layerlab.report.verdicts import Decision, Direction, missing

__all__ = ["NORMS", "across_settings", "setting_cols", "verdict_list"]

NORMS = {"C_l2": "ℓ2", "C_tr": "trace"}
"""The two normalisations of m_K (``norm``: p = 2, ``trace``: p = 1) as scalar-column prefixes."""


def setting_cols(ks: Sequence[int]) -> dict[str, str]:
    """``{"K=10, ℓ2": "C_l2@10", ...}`` for every K and both normalisations, largest K first (the headline)."""
    return {f"K={k}, {name}": f"{c}@{k}" for k in sorted(ks, reverse=True) for c, name in NORMS.items()}


def across_settings(*, id: str, claim: str, paper: str, tag: str, null: str, note: str, ks: Sequence[int],
                    evidence: Callable[[str], Evidence], rule: Direction) -> Claim:
    """Decide ``claim`` at every setting (``evidence(col)`` builds the Evidence for one scalar column,
    e.g. "C_l2@50"); the row shows the headline setting (largest K, ℓ2) and its verdict only if every
    setting agrees. A setting whose evidence cannot be built (ValueError: too few units, missing
    column) makes the row inconclusive with the reason."""
    cols = setting_cols(ks)
    evs: dict[str, Evidence] = {}
    for label, col in cols.items():
        try:
            evs[label] = evidence(col)
        except (ValueError, KeyError) as e:
            return missing(id=id, claim=claim, paper=paper, tag=tag, reason=f"{label}: {e}")
    decs = {label: rule.decide(ev) for label, ev in evs.items()}
    head_label = next(iter(cols))
    head, hd = evs[head_label], decs[head_label]
    verdicts = {d.verdict for d in decs.values()}
    rule_name = f"{rule.name}; all {len(evs)} (K, normalisation) settings must agree"
    if len(verdicts) == 1:
        reading = f"{hd.reading} The same verdict holds at every K and both normalisations ({len(evs)} settings)."
        verdict, remedy = hd.verdict, hd.remedy
    else:
        by: dict[str, list[str]] = {}
        for label, d in decs.items():
            by.setdefault(d.verdict, []).append(label)
        parts = "; ".join(f"{v} at {', '.join(labels)}" for v, labels in by.items())
        reading = f"Depends on K/normalisation: {parts}. At {head_label}: {hd.reading}"
        verdict = "inconclusive"
        remedy = "Agreement of the (K, normalisation) settings, not more units alone, would decide it."
    return Claim.decided(id=id, claim=claim, paper=paper, tag=tag, evidence=head,
                         decision=Decision(verdict=verdict, rule=rule_name, reading=reading, remedy=remedy),
                         null=null,
                         note=f"{note}; headline setting {head_label}; {head.method}".strip("; "))


def verdict_list(rows: Iterable[Claim]) -> str:
    """The closing note's verdict list, one bullet per row of the claim table (never typed by hand)."""
    out = []
    for c in rows:
        out.append(f"- **{_escape(c.id)}** ({_escape(c.claim)}): **{c.verdict}**")
    if not out:
        raise ValueError("verdict_list needs the chapter's claim rows")
    return "\n".join(out)


def _escape(text: str) -> str:
    for ch in ("\\", "*", "_", "`", "[", "]", "<", ">", "$", "{", "}", "|"):
        text = text.replace(ch, "\\" + ch)
    return text
