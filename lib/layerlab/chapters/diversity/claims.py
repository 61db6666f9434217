"""The diversity chapter's claim table (Kamigaito et al. 2025, arXiv:2505.24009; claims D1-D11), built from
a :class:`~layerlab.chapters.diversity.result.DiversityResult`.

Every empirical row is decided on evidence over the test examples of every task and both readouts
(:mod:`layerlab.chapters.diversity.evidence`), pooled by :func:`layerlab.chapters.diversity.pooling.pool`
(tasks: Holm, all must agree; readouts: must agree). Rows that hold by algebra (D1, D2, D4's Omega
mechanism, D11's floor) are tagged ``identity`` and never count as findings. No number of the paper is
known, so the "paper" column quotes the claim's shape only.

Eligibility (stated in every affected row): a (task, readout) whose full-depth accuracy 95% CI does not
clear chance is reported but excluded from the claims about label information (D5, D6, D8, D10).
"""

from __future__ import annotations

from layerlab.chapters.diversity.pooling import headline, pool
from layerlab.chapters.diversity.regime import regime
from layerlab.chapters.diversity.result import DiversityResult
from layerlab.report.claims import Claim, fmt
from layerlab.report.inference import Evidence
from layerlab.report.verdicts import Decision, Direction, Identity, missing

__all__ = ["CHANCE_RULE", "claims", "verdicts"]

CHANCE_RULE = "a (task, readout) whose accuracy 95% CI does not clear chance is excluded"
LABEL_CLAIMS = ("D5", "D6", "D8", "D10")
MARGIN_BITS = 0.02  # D6: equivalence margin for "no fall" (bits of pointwise information)
MARGIN_ACC = 0.02  # D10: equivalence margin for "no fall" (accuracy)


def _evidence(d: dict | None) -> Evidence | None:
    return None if d is None or "missing" in d else Evidence(**d)


def _units(result: DiversityResult, cid: str, sub: str | None = None) -> tuple[dict, dict, list[str]]:
    """{"task/readout": Evidence | None}, the excluded units with reasons, and the missing reasons."""
    units, excluded, why = {}, {}, []
    for task, r in result.tasks.items():
        for readout, ev in r.get("evidence", {}).items():
            key = f"{task}/{readout}"
            d = ev.get(cid)
            if sub is not None and d is not None:
                d = d.get(sub)
            units[key] = _evidence(d)
            if d is not None and "missing" in d:
                why.append(f"{key}: {d['missing']}")
            acc = r["accuracy"][readout]
            if cid in LABEL_CLAIMS and not acc["acc_low"] > r["chance"]:
                excluded[key] = f"accuracy {acc['acc']:.2f}, CI low {acc['acc_low']:.2f} ≤ chance {r['chance']:.2f}"
    return units, excluded, why


def _preferred(result: DiversityResult) -> str:
    h = result.tasks[result.headline]
    return f"{result.headline}/{h['primary']}"


def _row(result: DiversityResult, *, id: str, claim: str, paper: str, tag: str, rule: Direction,
         null: str, note: str = "", sub: str | None = None, units=None, equivalence: bool = False) -> Claim:
    if units is None:
        units, excluded, why = _units(result, id, sub)
    else:
        units, excluded, why = units
    usable = {k: v for k, v in units.items() if k not in excluded}
    if not any(v is not None for v in usable.values()):
        reason = "; ".join(why) or ("every unit excluded: " + "; ".join(f"{k} {v}" for k, v in excluded.items()))
        return missing(id=id, claim=claim, paper=paper, tag=tag, reason=reason or "no evidence was computed")
    # D6 / D10: "no fall" is judged on every depth's fall over all examples (``<id>_fall``), not on the
    # held-out drop, which is 0 by construction when the peak chosen on the other half is full depth
    eq = _units(result, f"{id}_fall")[0] if equivalence else None
    dec = pool(rule, units, excluded, equivalence=eq)
    ev = headline(usable, _preferred(result))
    assert ev is not None
    key = next(k for k, v in usable.items() if v is ev)
    extra = f"'ours' is {key}; " if key else ""
    if id in LABEL_CLAIMS:
        extra += CHANCE_RULE + "; "
    return Claim(id=id, claim=claim, paper=paper, tag=tag, ours=ev.estimate, ci_low=ev.low, ci_high=ev.high,
                 null=null, verdict=dec.verdict, note=extra + note, unit=ev.unit, n=ev.n, rule=dec.rule,
                 reading=dec.reading, remedy=dec.remedy, undo=dec.undo)


def _identity(*, id: str, claim: str, paper: str, err: float, tol: float, null: str, note: str) -> Claim:
    dec: Decision = Identity(tol=tol).decide_error(err)
    return Claim(id=id, claim=claim, paper=paper, tag="identity", ours=err, ci_low=None, ci_high=None, null=null,
                 verdict=dec.verdict, note=note, rule=dec.rule, reading=dec.reading,
                 remedy=dec.remedy)


def _all(result: DiversityResult, cid: str) -> list[dict]:
    return [ev[cid] for r in result.tasks.values() for ev in r.get("evidence", {}).values() if cid in ev]


def claims(result: DiversityResult) -> list[Claim]:
    """Claims D1-D11 (one row each, always, in order)."""
    res = result.tasks
    h = res[result.headline]
    cl: list[Claim] = []
    err = max(r["identity_error"] for r in res.values())
    cl.append(_identity(id="D1", claim="The members (embedding, every MHA and MLP output) read through the frozen-norm "
                        "lens sum to the model's logits (Eq. 1)", paper="exact (Eq. 1)", err=err, tol=1e-4,
                        null="fp32 tolerance 1e-4 (relative)",
                        note="max relative error over tasks, verbaliser logits, live fp32 run"))
    e2 = max(max(r["identity_mse"].values()) for r in res.values())
    cl.append(_identity(id="D2", claim="MSE = Bias − Diversity (Theorem 1); CE = mean member CE − mean KL",
                        paper="exact (Theorem 1)", err=e2, tol=1e-10, null="fp64 tolerance 1e-10 (relative)",
                        note="max relative error over tasks, examples, depths; both forms"))
    d4 = _all(result, "D4")
    raw = ", ".join(f"{x['corr_bias_div']:.3f}" for x in d4)
    cl.append(_row(result, id="D3", claim="Diversity is most critical where members are far from the target: beyond "
                   "their shared scale Omega, examples with larger Bias have larger Div", paper="qualitative",
                   tag="paper", rule=Direction(direction="greater"),
                   null="partial r = 0 (Freedman-Lane permutation over examples)",
                   note=f"partial Pearson r(Bias, Div | Omega) at full depth; the raw r(Bias, Div) is {raw} "
                   "(per task and readout), ~1 by algebra because Omega dominates both"))
    cl.append(_identity(id="D4", claim="Bias-diversity trade-off: Bias and Div move together through "
                        "Ω (Theorem 3: at a fixed output, Bias − Div is fixed)", paper="qualitative (secondary)",
                        err=max(x["error"] for x in d4), tol=1e-10,
                        null="Bias = ‖y‖² − 2⟨y, f⟩ + Ω and Div = Ω − ‖f‖², fp64 tolerance 1e-10",
                        note="the trade-off is algebra, not evidence; corr(Bias, Omega) = "
                        + ", ".join(f"{x['corr_bias_omega']:.3f}" for x in d4) + "; corr(Div, Omega) = "
                        + ", ".join(f"{x['corr_div_omega']:.3f}" for x in d4)
                        + "; what goes beyond Omega is tested in D3"))
    cl.append(_row(result, id="D5", claim="Adding a block helps only when it is diverse: the block's gain in I(Sₖ; Y) "
                   "rises with its information diversity (CondRed − Red) beyond its relevancy", paper="qualitative",
                   tag="paper", rule=Direction(direction="greater"),
                   null="partial Spearman 0 (bootstrap over examples)",
                   note="partial Spearman over blocks given the block's relevancy (the chain identity gain = "
                   "Relevancy − Red + CondRed builds the rest in); every term re-estimated per resample"))
    info = h["info"]
    cl.append(_row(result, id="D6", claim="More layers need not help: the measured I(Sₖ; Y) falls from its peak "
                   "depth to full depth", paper="qualitative", tag="secondary",
                   rule=Direction(direction="greater", margin=MARGIN_BITS),
                   null=f"no fall (label-permutation floor at full depth {info['null_floor'].iloc[-1]:.3f} bits)",
                   note="drop of per-example pointwise information (bits) from the peak depth, chosen on one half "
                   "of the examples, to full depth, measured on the other half (a peak chosen at full depth gives "
                   "0 for every example); 'no fall' is judged on all examples, at every depth",
                   equivalence=True))
    g, p = h["gains"], h["premise"]
    v7 = "supported" if g["p_fewer"] < 0.05 else "inconclusive"
    cl.append(Claim(id="D7", claim="Gains from adding layers diminish (submodular; Theorem 7 derives it from members "
                    "independent given Y)", paper="qualitative", tag="paper",
                    ours=g["violations"] / max(g["steps"], 1), ci_low=None, ci_high=None,
                    null=f"shuffled-order null: {g['null_mean'] / max(g['steps'], 1):.2f} (p={g['p_fewer']:.2f})",
                    verdict=v7, unit="depth steps (order permutation)", n=int(g["steps"]),
                    rule="fewer violations of Gₖ ≤ Gₖ₋₁ than under shuffled order, p < 0.05",
                    reading=f"{g['violations']} of {g['steps']} steps violate diminishing returns against "
                    f"{g['null_mean']:.1f} under shuffled order (p = {g['p_fewer']:.2f}): {v7}.",
                    note=f"headline task {result.headline} only. Premise: excess I(Uᵢ; Uⱼ | Y) = {p['excess']:.3f} "
                    f"[{p['excess_low']:.3f}, {p['excess_high']:.3f}] bits over a within-class permutation"
                    + (" (> 0: the premise fails, so Theorem 7 does not apply)" if p["excess_low"] > 0 else "")))
    others = []
    for t in ("bias", "div", "ce"):
        u, _, _ = _units(result, "D8", t)
        others.append(f"{t}: " + ", ".join(f"{k} {fmt(e.estimate, 2)}" for k, e in u.items() if e is not None))
    cl.append(_row(result, id="D8", claim="MSE correlates strongly (negatively) with accuracy across depths, beyond "
                   "their shared depth trend", paper="values unknown", tag="secondary", sub="mse",
                   rule=Direction(direction="less"), null="partial r given depth = 0",
                   note="partial Pearson r of the MSE and accuracy curves given depth; CI over examples, p the larger "
                   "of the example-bootstrap and depth-permutation p. Bias, Div and CE (paper: unclear, "
                   "task-dependent): " + "; ".join(others)))
    cl.append(_d9(result))
    cl.append(_d10(result))
    d11 = _all(result, "D11")
    cl.append(_identity(id="D11", claim="Bias does not tend to zero in practice (Bias ≥ MSE ≥ 0, with equality only "
                        "if every member equals the target)", paper="qualitative (secondary)",
                        err=max(x["error"] for x in d11), tol=1e-10, null="max(MSE − Bias) ≤ 0 (relative)",
                        note="holds for any model by algebra; Bias/MSE = "
                        + ", ".join(f"{x['bias_over_mse']:.3g}" for x in d11)
                        + "; label-centred Bias floor = " + ", ".join(f"{x['centred_floor']:.3g}" for x in d11)))
    return cl


def _d9(result: DiversityResult) -> Claim:
    units, excluded, why = {}, {}, []
    for variant in ("normalised", "raw"):
        u, e, w = _units(result, "D9", variant)
        units |= {f"{k}, {variant}": v for k, v in u.items()}
        excluded |= {f"{k}, {variant}": v for k, v in e.items()}
        why += [f"{x} ({variant})" for x in w]
    return _row(result, id="D9", claim="As layers are added the diversity rise lags the bias fall (Div reaches half "
                "its change at a later depth than Bias), on M-normalised and raw terms", paper="qualitative",
                tag="secondary", rule=Direction(direction="greater"), null="lag 0 blocks",
                note="lag = half-change depth of Div minus that of Bias (blocks), on mean curves; bootstrap over "
                "examples; the normalised and raw variants count as readouts that must agree",
                units=(units, excluded, why))


def _d10(result: DiversityResult) -> Claim:
    reg = regime(getattr(result, "family_members", None))
    note = "truncation: drop of accuracy from the peak depth (chosen on one half of the examples) to full depth, " \
           "on the other half (a peak chosen at full depth gives 0 for every example); 'no fall' is judged on all " \
           "examples, at every depth. Depth family: " + reg["sentence"]
    fam = result.family
    if fam is not None and len(fam) and reg["kept"]:
        tr = fam[(fam.init == "trained") & fam.depth.isin(reg["kept"])].groupby("depth")["acc"].mean()
        note += " Head accuracy on those depths: " + ", ".join(f"L={d}: {a:.2f}" for d, a in tr.items())
    return _row(result, id="D10", claim="Performance first rises, then falls with the number of layers",
                paper="qualitative", tag="secondary", rule=Direction(direction="greater", margin=MARGIN_ACC),
                null=f"no fall (every depth's fall < {MARGIN_ACC})", note=note, equivalence=True)


def verdicts(rows: list[Claim]) -> dict[str, str]:
    """``{claim id: verdict}``, for ``glue_values("div_verdict", ...)``."""
    return {c.id: c.verdict for c in rows}
