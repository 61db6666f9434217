"""Claim rows of the atlas: one agreement verdict per lens pair, and the family-level question.

The atlas is the book's own question (issue 18): do "important by ablation", "coupled", "diverse" and
"predictable" pick the same layers? Each pair is a Spearman correlation over layers with a permutation
p-value; the verdicts use Holm-adjusted one-sided p over all pairs (``report.inference.holm``): supported =
they agree (ρ > 0), contradicted = opposite order (ρ < 0), inconclusive otherwise. The family row uses
``report.verdicts.decide_family`` (some pair agrees).
"""

from __future__ import annotations

from layerlab.chapters.atlas.run import AtlasResult
from layerlab.report.claims import Claim
from layerlab.report.inference import Evidence
from layerlab.report.verdicts import Direction, decide_family

__all__ = ["claims", "summary"]

VERDICT = {"agree": "supported", "opposite": "contradicted", "no evidence": "inconclusive"}


def claims(result: AtlasResult) -> list[Claim]:
    """The family row ``AG`` first, then one row ``AG<i>`` per lens pair (in the agreement table's order)."""
    ag = result.agreement
    m = len(ag)
    rows = []
    evs = [
        Evidence(
            estimate=r.rho,
            low=None,
            high=None,
            p_greater=r.p_greater,
            p_less=r.p_less,
            unit="layers",
            n=int(r.n),
            method="permutation test over layers",
        )
        for r in ag.itertuples()
        if r.rho == r.rho
    ]
    if evs:
        d = decide_family(Direction(), evs, family="any")
        rows.append(
            Claim(
                id="AG",
                claim="Some pair of lenses picks the same layers (Spearman over layers)",
                paper="—",
                tag="reconstructed",
                ours=float(ag.rho.max()),
                ci_low=None,
                ci_high=None,
                null=f"permutation null per pair; Holm over {len(evs)} pairs",
                verdict=d.verdict,
                note=d.reading,
            )
        )
    for i, r in enumerate(ag.itertuples(), start=1):
        ok = r.rho == r.rho
        ci = (float(r.low), float(r.high)) if ok and r.low == r.low else (None, None)
        rows.append(
            Claim(
                id=f"AG{i}",
                claim=f"{r.a} and {r.b} pick the same layers",
                paper="—",
                tag="reconstructed",
                ours=float(r.rho) if ok else None,
                ci_low=ci[0],
                ci_high=ci[1],
                null=f"permutation over {r.n} layers; Holm over {m} pairs",
                verdict=VERDICT[r.verdict] if ok else "inconclusive",
                note=r.sentence,
            )
        )
    return rows


def summary(rows: list[Claim]) -> dict[str, int]:
    """Counts the prose glues: pairs, agreeing pairs, opposite pairs."""
    pairs = [c for c in rows if c.id != "AG"]
    return {
        "n_claims": len(pairs),
        "n_supported": sum(c.verdict == "supported" for c in pairs),
        "n_contradicted": sum(c.verdict == "contradicted" for c in pairs),
    }
