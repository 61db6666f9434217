"""Sentences of the anatomy chapter whose truth depends on the numbers, generated from the result
(one sentence per outcome) so that the prose cannot drift from the figures and tables.

Wietrzykowski (arXiv:2603.19348). :func:`sentences` returns ``{name: sentence}``; the notebook glues
them with prefix ``anat`` (``{glue:text}`anat_<name>```). :func:`tier_table` builds the compact
ablation table the page shows (rounded, no index, units in the column names).
"""

from __future__ import annotations

import pandas as pd

from layerlab.chapters.anatomy.budget import design
from layerlab.chapters.anatomy.run import AnatomyResult
from layerlab.report.claims import Claim, fmt

__all__ = ["MODEL_LABELS", "model_label", "sentences", "tier_table"]

MODEL_LABELS = {"smollm2-135m": "SmolLM2-135M-Instruct-Q4_1", "HuggingFaceTB/SmolLM2-135M": "SmolLM2-135M (base)"}


def model_label(name: str) -> str:
    """How the book names a preset's model (the offline model is the 4-bit instruct GGUF)."""
    return MODEL_LABELS.get(name, name)


def _delta_pairs(r: AnatomyResult) -> str:
    tol = r.delta.set_index("component").pair_tolerance
    p = r.delta_pairs.assign(dev=lambda t: t.rho + 0.5, tol=lambda t: t.component.map(tol))
    out = p[p.dev.abs() > p.tol]
    if out.empty:
        return (f"All {len(p)} per-pair values lie within their sampling tolerance (±{fmt(float(tol.max()))}) "
                "of −0.5.")
    ext = out.loc[out.dev.abs().sort_values(ascending=False).index[:3]]
    worst = ", ".join(f"{c} pair {int(i)} at {v:.2f}" for c, i, v in zip(ext.component, ext.pair, ext.rho))
    n_null = int(((r.delta_null_pairs.rho + 0.5).abs() > r.delta_null_pairs.component.map(tol)).sum())
    return (f"{len(out)} of {len(p)} per-pair values lie outside their sampling tolerance of −0.5 (the furthest: "
            f"{worst}); in the random-init model {n_null} of {len(r.delta_null_pairs)} do. Single pairs scatter "
            "widely, which is why the claim rows average each component over its pairs and test over components.")


def _predicted_vs_zero(r: AnatomyResult) -> str:
    m = r.manipulation.set_index(["config", "target"])
    g = r.r2_loo
    r2 = float(g[(g.model == "real") & (g.component == "gate")].level.mean()) if len(g) else float("nan")
    pairs = [(t, m.loc[("predicted", t)], m.loc[("zero", t)]) for t in r.manipulation.target.unique()
             if ("predicted", t) in m.index and ("zero", t) in m.index]
    if not pairs:
        return "The predicted and zeroed manipulations were not both run."
    close = [abs(p.dnll - z.dnll) <= max(p.dnll_high - p.dnll_low, z.dnll_high - z.dnll_low) for _, p, z in pairs]
    text = "; ".join(f"{t}: {fmt(p.dppl_pct)}% vs {fmt(z.dppl_pct)}%" for t, p, z in pairs)
    if all(close) and r2 < 0.1:
        return (f"The 'predicted' rows match the 'zero' rows ({text}) because P1's held-out R² for gate_proj is "
                f"{r2:.3f}: a lag-1 fit with R² near 0 predicts little more than its constant term, so a "
                "'predicted' layer is in effect a zeroed one, and A3's failure of generated weights is a "
                "zeroing result.")
    return (f"The 'predicted' rows differ from the 'zero' rows ({text}; P1's held-out R² for gate_proj "
            f"{r2:.3f}): the predictions carry something a zeroed layer does not.")


def _recovery_design(r: AnatomyResult) -> str:
    """The recovery design of this build and how many perturbed runs recovered within the cap (A9)."""
    P, curves = r.preset, [c for c in r.curves if c.sigma_rel > 0]
    layers = sorted({c.layer for c in curves})
    seeds = sorted({c.seed for c in curves})
    ended = sum(1 for c in curves if c.recovered_at is not None)
    sig = ", ".join(f"{s:g}" for s in P.recovery_sigmas)
    text = (f"{len(layers)} layers ({', '.join(map(str, layers))}) × {len(seeds)} seed(s) (each seed draws the "
            f"noise and the batch order); σ_rel = {sig}, {' and '.join(P.recovery_kinds)} noise; "
            f"{' and '.join(P.recovery_scopes)} scope; AdamW at lr {P.recovery_lr:g} on batches of "
            f"{P.recovery_batch} × {P.recovery_window} tokens; evaluated every {P.recovery_eval_every} steps on "
            f"up to {P.recovery_eval_tokens} validation tokens; cap {P.recovery_steps} steps. "
            f"{ended} of {len(curves)} perturbed runs recovered within the cap")
    if P.recovery_stop:
        text += "; a perturbed run ends at its recovery step, the σ = 0 control runs to the cap"
    return text + "."


def _recovery_control(r: AnatomyResult) -> str:
    """What the σ = 0 control says about the recovery steps: does fine-tuning alone move held-out NLL?"""
    ctl = [c for c in r.curves if c.sigma_rel == 0]
    if not ctl:
        return "No σ = 0 control was run, so generic fine-tuning gain cannot be told apart from repair."
    ends = [c.nll[-1] - c.base_nll for c in ctl]
    steps = ctl[0].steps[-1]
    lo, hi = min(ends), max(ends)
    span = (f"{fmt(-hi)} to {fmt(-lo)} nats below" if hi < 0 else f"{fmt(lo)} to {fmt(hi)} nats above"
            if lo > 0 else f"between {fmt(lo)} and {fmt(hi)} nats from")
    where = (f"The σ = 0 control (layer {ctl[0].layer}, {len(ctl)} seed(s)) ends {span} the baseline after "
             f"{steps} steps")
    # a control that moves by more than the smallest damage it would have to offset confounds the steps
    damage = [c.nll[0] - c.base_nll for c in r.curves if c.sigma_rel > 0]
    small = min(damage) if damage else float("nan")
    if max(ends) < 0 and -max(ends) >= 0.1 * small:
        return (f"{where}: fine-tuning on this corpus lowers held-out NLL by itself, by at least "
                f"{fmt(-max(ends))} nats against a smallest initial damage of {fmt(small)} nats. So a perturbed "
                "run reaches the baseline partly by adapting to the corpus, not only by repairing its layer, "
                "and its step count measures both.")
    return (f"{where}, small against the smallest initial damage of {fmt(small)} nats: reaching the baseline "
            "measures repair of the perturbed layer.")


def _a10_alternatives(r: AnatomyResult, margin: float, target: str = "spread") -> str:
    t = r.manipulation[r.manipulation.target == target].set_index("config")
    if t.empty:
        return "No manipulation was run on the fixed target."
    inside = [c for c in t.index if t.loc[c, "dppl_high"] < margin]
    scale_like = [c for c in inside if c.startswith("scale")]
    other = [c for c in inside if not c.startswith("scale")]
    s = (f"On the fixed layers, {len(inside)} of {len(t)} edits keep ΔPPL below {margin:g}% with their whole "
         f"interval: {', '.join(inside) or 'none'}.")
    if len(scale_like) > 1:
        s += (" So 'only α = 0.9' is too narrow: other scalings (the exact block scaling, the writers-only "
              "variant, other α) preserve quality as well; what the data support is 'small scalings are "
              "harmless', not a special α.")
    if other:
        s += f" Non-scaling edits inside the margin too: {', '.join(other)}."
    return s


def _ablation_operators(r: AnatomyResult) -> str:
    big = r.ablation[r.ablation.protocol == "large"].pivot(index="layer", columns="op", values="dnll")
    if not {"skip", "neighbour_avg"} <= set(big.columns):
        return ""
    diff = (big.skip - big.neighbour_avg).abs().sort_values(ascending=False)
    top = diff.index[:3].tolist()
    ends = [x for x in top if x in (0, r.n_layers - 1)]
    s = (f"The two operators differ most at layers {', '.join(map(str, top))} (|ΔNLL(skip) − ΔNLL(neighbour "
         f"average)| up to {fmt(float(diff.iloc[0]))} nats)")
    return s + (", among them the edge layers, which neighbour averaging can only replace by a copy of their "
                "one neighbour." if ends else ".")


def _ranges(xs: list[int]) -> str:
    """[0, 1, 2, 5] -> "0–2, 5"."""
    out, xs = [], sorted(xs)
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(str(xs[i]) if i == j else f"{xs[i]}–{xs[j]}")
        i = j + 1
    return ", ".join(out)


def _budget(r: AnatomyResult) -> str:
    big = r.ablation[r.ablation.protocol == "large"]
    last = big[big.looks == big.looks.max()]
    n_ext = int((big.looks > 1).sum())
    text = (f"Of {len(big)} (operator, layer) pairs of the primary operators, {len(big) - n_ext} were settled at the "
            f"first look ({int(big.n_docs.min())} documents, {int(big.n_tokens.min())} tokens) and {n_ext} went on; "
            f"{len(last)} reached the last look ({int(last.n_docs.max())} documents, {int(last.n_tokens.max())} "
            f"tokens): " + ("; ".join(f"{op} layers {_ranges(g.layer.tolist())}" for op, g in last.groupby("op"))
                            or "none") + ".")
    pushed = big[big.forced] if "forced" in big else big.iloc[:0]
    if len(pushed):
        text += (f" {len(pushed)} rows went on although settled, because they decide A5 or A7 (neighbour "
                 f"average on layers {_ranges(pushed.layer.tolist())}: the anti-layers and the core layers not "
                 "already above the +100% line): they rest on "
                 f"{int(pushed.n_docs.min())} documents and at least {int(pushed.n_tokens.min())} tokens.")
    small = r.ablation[r.ablation.protocol == "small"]
    if len(small):
        looks = design(r.preset, r.preset.budget_looks_small).looks  # the secondary operators' planned looks
        k, docs = len(looks), ", ".join(str(x) for x in looks)
        text += (f" The secondary operators, which no verdict reads, were planned with "
                 f"{'one look' if k == 1 else f'{k} looks'} ({docs} documents) spending the whole 5% level.")
    return text


def sentences(r: AnatomyResult, rows: list[Claim]) -> dict[str, str]:
    """Every data-dependent sentence of the page: {name: sentence}."""
    return {"model_label": model_label(r.preset.model), "delta_pairs": _delta_pairs(r),
            "predicted_vs_zero": _predicted_vs_zero(r), "recovery_control": _recovery_control(r),
            "rec_design": _recovery_design(r),
            "a10_alternatives": _a10_alternatives(r, r.preset.quality_margin_pct),
            "ablation_operators": _ablation_operators(r), "budget": _budget(r)}


def tier_table(r: AnatomyResult) -> pd.DataFrame:
    """Compact ablation summary: per layer, ΔPPL% [CI] and tier of skip and neighbour average, documents."""
    big = r.ablation[r.ablation.protocol == "large"]
    out = pd.DataFrame({"layer": sorted(big.layer.unique())})
    for op in ("skip", "neighbour_avg"):
        t = big[big.op == op].set_index("layer")
        out[f"{op} ΔPPL % [repeated 95% CI]"] = [f"{fmt(t.loc[x, 'dppl_pct'], 2)} [{fmt(t.loc[x, 'dppl_low'], 2)}, "
                                       f"{fmt(t.loc[x, 'dppl_high'], 2)}]" for x in out.layer]
        out[f"{op} tier"] = [t.loc[x, "tier"] for x in out.layer]
        out[f"{op} documents"] = [int(t.loc[x, "n_docs"]) for x in out.layer]
    return out
