"""Sentences of the diversity chapter whose truth depends on the numbers, generated from the result
(Kamigaito et al. 2025, arXiv:2505.24009): one branch per outcome, never a typed conclusion.
"""

from __future__ import annotations

from layerlab.chapters.diversity.regime import regime
from layerlab.chapters.diversity.result import DiversityResult
from layerlab.report.claims import Claim

__all__ = ["closing", "lm_sentence", "members_sentence", "sentences", "twins_sentence"]


def members_sentence(r: DiversityResult) -> str:
    """Which members carry the largest bias_i in the headline task, by module type and depth."""
    m = r.tasks[r.headline]["members"]
    b = m[m.term == "bias_i"].sort_values("value", ascending=False)
    if b.empty:
        return "No per-member terms were computed."
    top = b.head(5)
    kinds = top.kind.value_counts()
    kind, count = str(kinds.index[0]), int(kinds.iloc[0])
    L = int(m.layer.max()) + 1
    late = int((top.layer >= (2 * L) // 3).sum())
    where = ("in the last third of the blocks" if late >= 3 else "in the first two thirds of the blocks"
             if late <= 1 else "spread over depth")
    return (f"In {r.headline}, the member with the largest bias term biasᵢ is {top.member.iloc[0]}; "
            f"{count} of the 5 largest are {kind} members, {late} of them {where} (L = {L}).")


def lm_sentence(r: DiversityResult) -> str:
    """T-LM at full depth: mean member CE, the model's CE and the mean KL that separates them."""
    f = r.lm_final()["value"]
    ce, mce, kl = float(f["ce"]), float(f["member_ce"]), float(f["kl"])
    share = kl / mce if mce > 0 else float("nan")
    s = (f"At full depth the mean member CE is {mce:.3g} nats and the model's CE {ce:.3g} nats; the mean KL of "
         f"the ensemble from its members, {kl:.3g} nats, cancels {share:.1%} of the members' CE")
    if mce > 2 * ce:
        return s + ": individually the (M-scaled) members predict the next token far worse than their sum."
    return s + ": the members are not much worse than their sum."


def twins_sentence(r: DiversityResult) -> str:
    """Trained family members vs their random-init twins on head accuracy, and the regime."""
    fam = r.family
    reg = regime(r.family_members)["sentence"]
    if fam is None or not len(fam):
        return reg
    w = fam.pivot_table(index="name", columns="init", values="acc")
    if not {"trained", "random"} <= set(w.columns):
        return reg
    beat = int((w["random"] >= w["trained"]).sum())
    return (f"{reg} With the linear head on the family's task, the random-init twin "
            f"matches or beats its trained member in {beat} of {len(w)} pairs"
            + (", so head accuracy on this family says little about what training learned." if beat > len(w) / 2
               else "."))


def closing(rows: list[Claim]) -> str:
    """The closing note: identities apart, each empirical verdict with its claims."""
    ident = [c.id for c in rows if c.tag == "identity"]
    emp = [c for c in rows if c.tag != "identity"]
    parts = []
    for v in ("supported", "contradicted", "not supported", "inconclusive"):
        ids = [c.id for c in emp if c.verdict == v]
        if ids:
            parts.append(f"{v}: {', '.join(ids)}")
    return (f"{len(ident)} of {len(rows)} rows are identities ({', '.join(ident)}): checks of the algebra that hold "
            f"for any model and count as no finding. Of the {len(emp)} empirical claims, " + "; ".join(parts) + ".")


def sentences(r: DiversityResult, rows: list[Claim]) -> dict[str, str]:
    """Every generated sentence of the page, for ``glue_values("div_text", ...)``."""
    return {"members": members_sentence(r), "lm": lm_sentence(r), "twins": twins_sentence(r),
            "regime": regime(r.family_members)["sentence"], "closing": closing(rows)}
