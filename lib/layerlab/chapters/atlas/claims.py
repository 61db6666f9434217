"""Claim rows of the atlas: whether lenses agree, whether agreement is learned or architectural, and
whether the agreements hold on other models.

The atlas is the book's own question (issue 18): do "important by ablation", "coupled", "diverse" and
"predictable" pick the same layers? Each pair is a Spearman correlation over layers with a permutation
p-value; the verdicts use Holm-adjusted one-sided p over all pairs (``report.inference.holm``): supported =
they agree (ρ > 0), contradicted = opposite order (ρ < 0), inconclusive otherwise. The summary rows use
``report.verdicts.decide_family`` over the pairs from *different* lens families (:func:`cross_family`; pairs
within a family are tied by construction) (some pair agrees; some agreement is learned, i.e. differs between trained
family members and their random-init twins, paired over members; some agreement is architectural, i.e.
already present in the twins). :func:`pair_claims` gives one row per lens pair.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from layerlab.chapters.atlas.analysis import LENSES
from layerlab.chapters.atlas.family import FamilyAtlas
from layerlab.chapters.atlas.run import AtlasResult
from layerlab.report.claims import Claim
from layerlab.report.inference import Evidence
from layerlab.report.verdicts import ANY_EFFECT, Direction, decide_family, missing

__all__ = ["FAMILY_RULE", "claims", "family_sentence", "others_sentence", "pair_claims", "prose", "summary"]

VERDICT = {"agree": "supported", "opposite": "contradicted", "no evidence": "inconclusive"}
#: The rule of the family rows AF and AA: a two-sided sign-flip test per lens pair (over members), any of the
#: pairs after Holm (simulated at the real n by the calibration appendix's "atlas AF/AA" case).
FAMILY_RULE = ANY_EFFECT


def _pair_evidence(ag, unit: str = "layers") -> list[Evidence]:
    return [Evidence(estimate=r.rho, low=None, high=None, p_greater=r.p_greater, p_less=r.p_less, unit=unit,
                     n=int(r.n), method="permutation test over layers") for r in ag.itertuples() if r.rho == r.rho]


def cross_family(pairs: pd.DataFrame) -> pd.DataFrame:
    """The lens pairs from different families (ablation, residual, coupling, diversity, anatomy). Pairs within
    a family are tied by construction (an MLP member's Bias and Div share its Ω; skip and skip_mlp share
    the MLP write), so they are shown pair by pair but never decide a summary row."""
    fam = {k: v[0] for k, v in LENSES.items()}
    return pairs[[fam.get(a) != fam.get(b) for a, b in zip(pairs.a, pairs.b)]]


def _agree_row(cid: str, result: AtlasResult, what: str) -> Claim:
    ag = cross_family(result.agreement)
    evs = _pair_evidence(ag)
    text = f"Some pair of lenses from different families picks the same layers of {what} (Spearman over layers)"
    if not evs:
        return missing(id=cid, claim=text, paper="—", tag="reconstructed",
                       reason="no lens pair is defined on the measured layers")
    d = decide_family(Direction(), evs, family="any")
    best = ag.loc[ag.rho.idxmax()]
    return Claim(id=cid, claim=text, paper="—", tag="reconstructed", ours=float(best.rho), ci_low=None,
                 ci_high=None, null=f"permutation null per pair; Holm over {len(evs)} pairs", verdict=d.verdict,
                 note=f"largest ρ: {best.a} vs {best.b}", unit="layers", n=int(best.n), rule=d.rule,
                 reading=d.reading, remedy=d.remedy, undo=d.undo)


def _family_row(cid: str, fa: FamilyAtlas, *, learned: bool) -> Claim:
    p = cross_family(fa.pairs[fa.pairs.n >= 2])
    text = ("Some agreement between lenses of different families is learned: trained members differ from their "
            "random-init twins" if learned else
            "Some agreement between lenses of different families is architectural: random-init twins already show it")
    if p.empty:
        return missing(id=cid, claim=text, paper="—", tag="reconstructed",
                       reason="fewer than 2 family members define a lens pair")
    # stronger or weaker after training (learned), agreeing or disagreeing in the twins (architectural): both
    # are two-sided claims, so each pair's Evidence carries its two one-sided sign-flip p-values
    col, lo_col, hi_col, pg, pl = (("diff", "low", "high", "p_diff_greater", "p_diff_less") if learned else
                                   ("rho_init", "init_low", "init_high", "p_init_greater", "p_init_less"))
    evs = [Evidence(estimate=float(getattr(r, col)), low=float(getattr(r, lo_col)), high=float(getattr(r, hi_col)),
                    p_greater=float(getattr(r, pg)), p_less=float(getattr(r, pl)), unit="members", n=int(r.n),
                    method="sign-flip test") for r in p.itertuples()]
    best = p.loc[p[col].abs().idxmax()]
    d = FAMILY_RULE.decide(evs)
    null = ("paired: ρ(trained) − ρ(twin) = 0 per member" if learned else "mean twin ρ = 0")
    return Claim(id=cid, claim=text, paper="—", tag="reconstructed", ours=float(best[col]), ci_low=float(best[lo_col]),
                 ci_high=float(best[hi_col]), null=f"{null}; Holm over {len(evs)} pairs", verdict=d.verdict,
                 note=f"largest |effect|: {best.a} vs {best.b}{_untested(fa, len(evs))}", unit="members",
                 n=int(best.n), rule=d.rule,
                 reading=d.reading, remedy=d.remedy, undo=d.undo)


def _untested(fa: FamilyAtlas, tested: int) -> str:
    total = len(cross_family(fa.pairs))
    if tested == total:
        return ""
    return (f"; {tested} of the {total} cross-family pairs are tested: in the others fewer than 2 members define "
            "both lenses")


def claims(result: AtlasResult, family: FamilyAtlas | None = None,
           others: Sequence[AtlasResult] = ()) -> list[Claim]:
    """The summary rows: ``AG`` (some pair of lenses agrees on the model), ``AF`` (some agreement is learned)
    and ``AA`` (some is architectural) on the trained family, and ``AX-<i>`` (AG on each other model of the
    gpu profile; one inconclusive row when none was run)."""
    rows = [_agree_row("AG", result, result.numbers.get("model", result.preset.model))]
    if family is None:
        for cid, learned in (("AF", True), ("AA", False)):
            rows.append(missing(id=cid, claim=f"Some agreement between lenses is "
                                f"{'learned' if learned else 'architectural'} (trained family vs twins)",
                                paper="—", tag="reconstructed", reason="the family section was not run"))
    else:
        rows += [_family_row("AF", family, learned=True), _family_row("AA", family, learned=False)]
    if not others:
        rows.append(missing(id="AX", claim="The lens agreements hold on other models (Pythia-160M/410M, "
                            "Llama-3.2-1B)", paper="—", tag="reconstructed",
                            reason="those models run at the gpu profile only"))
    for i, o in enumerate(others, start=1):
        rows.append(_agree_row(f"AX{i}", o, o.numbers.get("model", o.preset.model)))
    return rows


def pair_claims(result: AtlasResult) -> list[Claim]:
    """One row ``AG<i>`` per lens pair (in the agreement table's order)."""
    ag = result.agreement
    m = len(ag)
    rows = []
    for i, r in enumerate(ag.itertuples(), start=1):
        ok = r.rho == r.rho
        ci = (float(r.low), float(r.high)) if ok and r.low == r.low else (None, None)
        rows.append(Claim(id=f"AG{i}", claim=f"{r.a} and {r.b} pick the same layers", paper="—",
                          tag="reconstructed", ours=float(r.rho) if ok else None, ci_low=ci[0], ci_high=ci[1],
                          null=f"permutation over {r.n} layers; Holm over {m} pairs",
                          verdict=VERDICT[r.verdict] if ok else "inconclusive", note=r.sentence,
                          unit="layers", n=int(r.n)))
    return rows


def summary(rows: list[Claim]) -> dict[str, int]:
    """Counts the prose glues from :func:`pair_claims` rows: pairs, agreeing pairs, opposite pairs."""
    pairs = [c for c in rows if c.id.startswith("AG") and c.id != "AG"]
    return {
        "n_claims": len(pairs),
        "n_supported": sum(c.verdict == "supported" for c in pairs),
        "n_contradicted": sum(c.verdict == "contradicted" for c in pairs),
    }


def family_sentence(fa: FamilyAtlas | None) -> str:
    """The family section's summary, from the labels of :func:`~layerlab.chapters.atlas.family.compare`."""
    if fa is None:
        return "The family section was not run."
    n = fa.numbers
    parts = [f"{n['learned_strengthened']} strengthened by training", f"{n['learned_weakened']} weakened by it",
             f"{n['architectural']} already present in the random-init twins (architectural)",
             f"{n['undecided']} undecided"]
    return (f"Over {n['n_members']} trained members (depths {n['depths']}) and their twins, of the {n['n_pairs']} "
            f"lens pairs {', '.join(parts[:-1])} and {parts[-1]}.")


def others_sentence(others: Sequence[AtlasResult], profile: str) -> str:
    """The cross-model section's summary: how many lens pairs agree on each further model."""
    if not others:
        return (f"At the {profile} profile no further model is run; the gpu profile adds Pythia-160M, "
                "Pythia-410M and Llama-3.2-1B from the hub.")
    return "; ".join(f"{o.numbers['model']}: {o.numbers['n_agree']} of {o.numbers['n_pairs']} lens pairs agree and "
                     f"{o.numbers['n_opposite']} are opposite" for o in others) + "."


def recovery_design(P) -> str:
    """How the recovery lenses were measured at this preset (from the preset's numbers)."""
    if P.recovery_steps <= 0:
        return "This profile measures no recovery (`recovery_steps = 0`)."
    windows = f"{P.recovery_batch} window{'s' if P.recovery_batch > 1 else ''} of {P.recovery_window} ids"
    evals = (f"the first {P.recovery_eval_windows} atlas windows (distinct documents)" if P.recovery_eval_windows > 1
             else "the first atlas window")
    return (f"Recovery, kept cheap: each layer's matrices get additive noise of {P.recovery_sigma:g} times their "
            f"own standard deviation, then that layer alone is fine-tuned for {P.recovery_steps} AdamW steps "
            f"(learning rate {P.recovery_lr:g}, {windows} per step, from the validation split, whose documents the "
            "atlas never reads); the same fine-tune without the noise is the control. Both are evaluated on "
            f"{evals} before and after. Two lenses come out. *noise_damage* is the excess NLL right after the "
            "noise, a partial ablation. *recovery* is the fraction of that damage still there after the "
            "fine-tune, against the control's NLL: 1 means nothing healed, 0 all of it, and above 1 the fine-tune "
            "made things worse. It is undefined where the damage is no larger than what the control's fine-tune "
            "alone moved. Dividing by the damage keeps *recovery* from re-reading how much the noise hurt, "
            "which is what *noise_damage* reads. Each lens is one run per layer, so neither "
            "has an interval over documents.")


def prose(result: AtlasResult, rows: list[Claim], family: FamilyAtlas | None = None,
          others: Sequence[AtlasResult] = ()) -> dict[str, object]:
    """The generated Markdown the page glues (prefix-free names): key findings, the family and cross-model
    summaries, and what would change our mind."""
    from IPython.display import Markdown

    from layerlab.report.claims import key_findings, what_would_change

    return {"atlas_key_findings": Markdown(key_findings(rows)),
            "atlas_change_mind": Markdown(what_would_change(rows)),
            "atlas_family_sentence": Markdown(family_sentence(family)),
            "atlas_others_sentence": Markdown(others_sentence(others, result.preset.profile)),
            "atlas_recovery_design": Markdown(recovery_design(result.preset))}
