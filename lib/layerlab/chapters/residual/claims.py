"""Chapter 1, "Reading the residual stream": the claim rows, from a :class:`ResidualResult`.

R1 is an identity of the lens definitions (at the final residual both lenses are the model) and is
tagged [identity]; R2/R2b are the logit-lens expectation that the loss falls with depth
(nostalgebraist 2020; the frozen lens of Kamigaito et al. 2025, Eq. 1); R3 the frozen-lens drop in
nats; R5 training vs the random-init twin; R6 the growth of pre-LN residual norms.

Every empirical row is tested over **documents** (windows cut from one document share its text):
one statistic per document (a Spearman rho of the document's mean curve against depth, a drop, a
paired loss gap), then :func:`layerlab.report.inference.mean_effect` (exact sign-flip test below
13 documents; the interval that inverts it at 6-7 documents, Student-t from 8) and the
:class:`layerlab.report.verdicts.Direction` rule. With
fewer than 6 documents no exact test can reach p <= 0.025, and the rows say "inconclusive" with that
reason. The earlier perplexity sanity row (a reference value of "about 34" with no source) is gone:
the chapter reports the number and its interval, without a verdict.
"""

from __future__ import annotations

import math

from layerlab.chapters.residual.run import ResidualResult
from layerlab.report.claims import Claim, fmt, key_findings, what_would_change
from layerlab.report.inference import Evidence, mean_effect, unit_trends
from layerlab.report.verdicts import Direction, Identity

__all__ = ["IDENTITY_TOL", "RULES", "claims", "evidence", "norm_sentence", "prose"]

IDENTITY_TOL = {"float32": 1e-4}
"""Tolerance of the R1 identity by parameter dtype (1e-9 for any other, i.e. float64)."""

RULES = {
    "R2": Direction(direction="less"),
    "R2b": Direction(direction="less"),
    "R3": Direction(),
    "R5": Direction(),
    "R6": Direction(),
}
"""The rule of each empirical row (the null is 0 for all of them)."""
RHO = (-1.0, 1.0)
"""Range of a per-document rank correlation (its mean's interval is clipped to it)."""


def evidence(result: ResidualResult, *, seed: int = 0) -> dict[str, Evidence]:
    """Per-document evidence of every empirical row (and of the random twin, ``*_random``)."""
    u = result.units
    docs = "documents"
    ev = {
        "R2": mean_effect(unit_trends(u.lens_recompute), unit=docs, seed=seed, bounds=RHO),
        "R2b": mean_effect(unit_trends(u.lens_frozen), unit=docs, seed=seed, bounds=RHO),
        "R3": mean_effect(u.lens_frozen[:, 0] - u.lens_frozen[:, -1], unit=docs, seed=seed),
        "R5": mean_effect(u.gap, unit=docs, seed=seed),
        "R6": mean_effect(unit_trends(u.norm), unit=docs, seed=seed, bounds=RHO),
    }
    if len(u.documents_random) >= 2:
        ev["R2_random"] = mean_effect(unit_trends(u.lens_recompute_random), unit=docs, seed=seed, bounds=RHO)
        ev["R2b_random"] = mean_effect(unit_trends(u.lens_frozen_random), unit=docs, seed=seed, bounds=RHO)
        ev["R3_random"] = mean_effect(u.lens_frozen_random[:, 0] - u.lens_frozen_random[:, -1], unit=docs, seed=seed)
        ev["R6_random"] = mean_effect(unit_trends(u.norm_random), unit=docs, seed=seed, bounds=RHO)
    return ev


def _control(ev: dict[str, Evidence], key: str, what: str) -> str:
    e = ev.get(f"{key}_random")
    if e is None:
        return "random init: fewer than 2 documents"
    return f"random init: {what} {fmt(e.estimate)} [{fmt(e.low)}, {fmt(e.high)}] (n = {e.n})"


def claims(result: ResidualResult) -> list[Claim]:
    """The chapter's claim table rows (R1, R2, R2b, R3, R5, R6), in the order the book prints them."""
    r = result
    tol = IDENTITY_TOL.get(r.model_dtype, 1e-9)
    ident = Identity(tol=tol).decide_error(r.ident_err)
    ev = evidence(r, seed=r.preset.seed)
    rows = [
        Claim(
            id="R1",
            claim="The lens of the final residual reproduces the model's logits and loss (both lenses)",
            paper="exact",
            tag="identity",
            ours=r.ident_err,
            ci_low=None,
            ci_high=None,
            null=f"tolerance {tol:g}",
            verdict=ident.verdict,
            note="max |difference| over sampled positions",
            rule=ident.rule,
            reading=ident.reading,
        ),
    ]
    spec = [
        (
            "R2",
            "Recompute-lens loss falls with depth (mean per-document Spearman rho of depth vs loss < 0)",
            "loss falls with depth",
            "rho",
            "nostalgebraist (2020)",
        ),
        (
            "R2b",
            "Frozen-lens loss falls with depth (mean per-document Spearman rho of depth vs loss < 0)",
            "loss falls with depth",
            "rho",
            "Kamigaito et al. (2025) Eq. 1 readout",
        ),
        (
            "R3",
            "The blocks lower the frozen-lens loss: NLL(embedding) − NLL(final) > 0 nats per token",
            "> 0",
            "drop",
            "frozen lens (the recompute lens at depth 0 is dominated by the tied embedding)",
        ),
        (
            "R5",
            "Training lowers held-out loss vs the random-init twin (nats/token, paired per document)",
            "> 0",
            "",
            f"{r.random_windows} shared windows; random init NLL {fmt(r.nll_random.estimate)} "
            f"vs ln V = {fmt(math.log(r.vocab))}",
        ),
        (
            "R6",
            "The residual norm grows with depth (mean per-document Spearman rho of depth vs norm > 0)",
            "grows",
            "rho",
            "pre-LN residual streams grow with depth",
        ),
    ]
    for cid, text, paper, what, note in spec:
        e = ev[cid]
        null = _control(ev, cid, what) if cid != "R5" else "paired: same windows, twin minus trained"
        rows.append(
            Claim.decided(
                id=cid,
                claim=text,
                paper=paper,
                tag="reconstructed",
                evidence=e,
                decision=RULES[cid].decide(e),
                null=null,
                note=note,
            )
        )
    return rows


def norm_sentence(rows: list[Claim]) -> str:
    """The sentence the norm section closes with, chosen by R6's verdict (never typed as a conclusion)."""
    r6 = next(c for c in rows if c.id == "R6")
    if r6.verdict == "supported":
        return (
            "Because the residual grows with depth (claim R6, supported over documents), an early "
            "residual is short next to the final one: the two lenses disagree most there, and the size "
            "of a block's output alone does not say how much the block matters."
        )
    return (
        f"Whether the residual grows with depth is not settled at this profile (claim R6: {r6.verdict}, "
        f"n = {r6.n} {r6.unit}), so nothing here is read into the size of a block's output."
    )


def gap_sentence(result: ResidualResult, rows: list[Claim]) -> str:
    """What training does to the held-out loss, chosen by R5's verdict (the number is the paired gap)."""
    g, r5 = result.gap, next(c for c in rows if c.id == "R5")
    gap = (f"the random-init twin's loss minus the trained model's is {fmt(g.estimate)} nats per token "
           f"(paired per document; 95% CI {fmt(g.low)} to {fmt(g.high)} over {r5.n} documents)")
    if r5.verdict == "supported":
        return f"On the same windows {gap}: training lowers the loss (claim R5)."
    if r5.verdict == "contradicted":
        return f"On the same windows {gap}: the trained model is *worse* than its random twin (claim R5)."
    return f"On the same windows {gap}: the difference is not settled at this profile (claim R5: {r5.verdict})."


def growth_sentence(result: ResidualResult, rows: list[Claim]) -> str:
    """How the residual norm changes with depth, chosen by R6's verdict and the ratio of the norms."""
    n = result.numbers
    ratio, r6 = n["norm_growth"], next(c for c in rows if c.id == "R6")
    size = (f"from {fmt(n['norm0'])} at the embedding to {fmt(n['normL'])} before the final norm, a ratio of "
            f"{fmt(ratio)} (random twin: {fmt(n['norm_growth_r'])})")
    if r6.verdict == "supported":
        return f"The residual stream of the trained model grows with depth, {size}."
    if r6.verdict == "contradicted":
        return f"The residual stream of the trained model shrinks with depth, {size}."
    return f"The residual norm of the trained model goes {size}; its trend is not settled (claim R6: {r6.verdict})."


def prose(result: ResidualResult, rows: list[Claim]) -> dict[str, object]:
    """What the prose glues from the claims: per-document trend estimates with their intervals and n,
    and the generated sentences (IPython Markdown, for ``{glue:md}``)."""
    from IPython.display import Markdown

    ev = evidence(result, seed=result.preset.seed)
    out: dict[str, object] = {"n_docs": ev["R2"].n}
    for key, name in (("R2", "rho_doc"), ("R2b", "rho_f_doc"), ("R6", "norm_rho_doc")):
        e = ev[key]
        out.update({name: e.estimate, f"{name}_low": e.low, f"{name}_high": e.high})
        r = ev.get(f"{key}_random")
        out[f"{name}_r"] = r.estimate if r is not None else float("nan")
    out["norm_sentence"] = Markdown(norm_sentence(rows))
    out["gap_sentence"] = Markdown(gap_sentence(result, rows))
    out["growth_sentence"] = Markdown(growth_sentence(result, rows))
    out["residual_key_findings"] = Markdown(key_findings(rows))
    out["residual_change_mind"] = Markdown(what_would_change(rows))
    out.update({f"reading_{c.id}": Markdown(c.reading) for c in rows})
    return out
