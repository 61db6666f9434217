"""Claim rows of the anatomy chapter: the paper's headline claims tested against our results.

Wietrzykowski, *Anatomical Heterogeneity in Transformer Language Models* (arXiv:2603.19348). Each row
is decided by a named rule of :mod:`layerlab.report.verdicts` on :class:`~layerlab.report.inference.Evidence`
over the real unit (documents for every perplexity effect, components for the delta correlation,
held-out layers for R², layers for the recovery correlation); the rule functions below take plain
tables so that each is unit-tested on synthetic results (``tests/test_anatomy_claims.py``). Growth
Transformer Training (A11–A13) is the growth chapter's; its rows here say so.
"""

from __future__ import annotations

import math

import numpy as np

from layerlab.chapters.anatomy.budget import design
from layerlab.chapters.anatomy.rules import (
    a1_claim,
    a2_claims,
    a3_claims,
    a5_claim,
    a6_claim,
    a7_claim,
    a9_claim,
    a10_claim,
    h1_claim,
    h2_claim,
    structure_claims,
)
from layerlab.chapters.anatomy.run import AnatomyResult
from layerlab.metrics.ablation import PAPER_ANTI, PAPER_CORE, paper_layers
from layerlab.report.claims import Claim
from layerlab.report.stats import bootstrap_ci
from layerlab.report.verdicts import missing

__all__ = ["claims", "summary"]


def claims(result: AnatomyResult) -> list[Claim]:
    """All claim rows of the chapter, in the order the book prints them."""
    r, P = result, result.preset
    rows = a2_claims(r.delta, r.delta_null, r.delta_shuffled, r.delta_null_q)
    rows += [a1_claim(r.r2_loo), h2_claim(r.r2_loo)]
    rows += a3_claims(r.replacement_docs, r.replacement)
    ci = bootstrap_ci(r.sentence_nll, n_boot=P.n_boot, seed=P.seed, groups=r.sentence_groups)
    n_sent = int(len(np.unique(r.sentence_groups))) if r.sentence_groups is not None else len(r.sentence_nll)
    rows.append(Claim(id="A4", claim="Baseline perplexity on 10 English sentences", paper="PPL 22.60 (base model)",
                      tag="secondary", ours=float(np.exp(ci.estimate)), ci_low=float(np.exp(ci.low)),
                      ci_high=float(np.exp(ci.high)), null="—", verdict="not testable offline", unit="sentences",
                      n=n_sent, note="PPL; instruct Q4_1 model and our own sentences: the number is not comparable"))
    prof = r.ablation
    rows.append(h1_claim(prof, r.first_look))
    plan = design(P)  # the large protocol's looks: the repeated interval of a row that stopped at look k
    levels = {k + 1: plan.level(k) for k in range(len(plan.looks))}
    for base in (0, 1):
        core = [c for c in paper_layers(PAPER_CORE, base) if c < r.n_layers]
        rows.append(a5_claim(prof, core, base, levels=levels))
        for a in paper_layers(PAPER_ANTI, base):
            if a < r.n_layers:
                rows.append(a7_claim(prof, a, base, levels=levels))
    rows.append(a6_claim(r.first_look, r.n_layers, seed=P.seed))
    agree = r.agreement
    pair = {"skip", "neighbour_avg"}
    ab = agree[[{a, b} == pair for a, b in zip(agree.a, agree.b)]]
    rho = float(ab.rho.iloc[0]) if len(ab) else math.nan
    rows.append(Claim(id="A8", claim="The paper's ablation operator is replacement by the neighbour average",
                      paper="neighbour average (a digest)", tag="secondary", ours=None, ci_low=None, ci_high=None,
                      null=f"Spearman ρ of the skip and neighbour-average profiles over {r.n_layers} layers: "
                           f"{rho:.2f}", verdict="not testable offline",
                      note="the paper's body is not public; both operators are run, and their agreement is shown"))
    imp = prof[(prof.op == "neighbour_avg") & (prof.protocol == "large")].set_index("layer").dnll.to_dict()
    rows.append(a9_claim([c for c in r.curves if c.sigma_rel > 0], imp, seed=P.seed,
                         controls=[c for c in r.curves if c.sigma_rel == 0]))
    rows.append(a10_claim(r.manipulation, r.manipulation_docs, margin_pct=P.quality_margin_pct))
    rows += structure_claims(r.structure, r.structure_null)
    rows.append(missing(id="A13", claim="GTT proof of concept: 2.1× lower loss with 37% fewer steps",
                        paper="2.1×, 37% (a digest)", tag="secondary",
                        reason="a growth-training claim: tested in the growth chapter as G4 (GTT at 63% of "
                               "the steps vs uniform at the full budget) and G1 (held-out loss at equal steps)"))
    return rows


def summary(rows: list[Claim]) -> dict[str, int]:
    """The claim table's counts the prose glues: ``n_claims`` rows, ``n_supported`` supported."""
    return {"n_claims": len(rows), "n_supported": sum(c.verdict == "supported" for c in rows)}
