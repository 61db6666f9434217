"""Sentences of the growth page that depend on numbers, generated from the result and the claim rows
(one sentence per outcome), so that the prose cannot disagree with the data. Each function returns
MyST Markdown for ``{glue:md}``."""

from __future__ import annotations

import numpy as np

import layerlab.chapters.growth.analysis as analysis
from layerlab.chapters.growth.claims import CLAIM_FRACTION, MIN_EFFECT
from layerlab.chapters.growth.claims import table as claim_table
from layerlab.chapters.growth.result import GrowthResult
from layerlab.report.claims import fmt

__all__ = ["anti_sentence", "arm_table", "budget_sentence", "claim_table", "cost_sentence", "compact",
           "lr_sentence", "machine_sentence", "pairs_clause", "rule_numbers"]


def rule_numbers() -> dict[str, float]:
    """The verdict rules' constants the page quotes: the loss margin (nats) and the size fraction (%)."""
    return {"min_effect": MIN_EFFECT, "claim_fraction": 100 * CLAIM_FRACTION}


def lr_sentence(result: GrowthResult) -> str:
    """Whether the learning-rate sweep brackets its optimum, and which rates it added beyond the preset's grid."""
    n = result.numbers
    tried = sorted(result.sweep.lr)
    grid = sorted(result.comparison["preset"]["lr_sweep"])
    added = [x for x in tried if x not in grid]

    def listed(xs):
        xs = [f"{x:g}" for x in xs]
        return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]

    how = (f" The preset's grid ({listed(grid)}) had its best rate at an edge, so the sweep added {listed(added)} "
           "beyond it, one rate at a time" if added else "")
    if n["lr_at_edge"]:
        side = "smallest" if n["best_lr"] == n["lr_min"] else "largest"
        return (f"The chosen learning rate, {n['best_lr']:g}, is the **{side}** of the rates tried ({listed(tried)}): "
                "the sweep does not bracket its optimum, so the uniform baseline may be under-tuned and every "
                "comparison with it may favour GTT." + (how + ", as many as the preset allows." if added else ""))
    return (f"The chosen learning rate, {n['best_lr']:g}, lies inside the rates tried ({listed(tried)}): both of "
            "its neighbours train to a higher loss, so the sweep brackets its optimum." + (how + "." if added else ""))


def anti_sentence(result: GrowthResult) -> str:
    """How many anti-layers the test finds, against the point estimates."""
    imp = result.importance
    n = result.numbers
    found = imp[imp.anti]
    where = ", ".join(f"layer {r.layer} (seed {r.seed})" for r in found.itertuples()) or "none"
    return (f"Over {n['layer_seeds']} layer × seed profiles the test names {n['anti_test']} anti-layer(s) ({where}); "
            f"the sign of the point estimates alone would have named {n['anti_point']}.")


def budget_sentence(result: GrowthResult) -> str:
    """The budgets of the uniform runs each loss row compares GTT with (why G1, G1b, G1c differ)."""
    a = result.arms.set_index("arm")
    S = result.numbers["steps"]
    parts = [f"G1 compares GTT with uniform training of the same {S} steps"]
    if "uniform-flops" in a.index:
        parts.append(f"G1b with uniform training on its own cosine schedule of {int(a.loc['uniform-flops', 'steps'])} "
                     "steps (as many as GTT's training FLOPs buy, mean over seeds)")
    if "uniform-wall" in a.index:
        parts.append(f"G1c with one of {int(a.loc['uniform-wall', 'steps'])} steps (as many as GTT's measured seconds "
                     "buy at the uniform run's measured step time)")
    return "; ".join(parts) + ". The rows differ because these budgets differ."


def pairs_clause(result: GrowthResult) -> str:
    """How many timed pairs (GTT beside its uniform repeat) trained at once, as their records say."""
    ks = analysis.timed_at_once(result.comparison)
    if ks in ([], [1]):
        return "one seed at a time, one thread, with nothing else of the chapter running"
    return (f"{' or '.join(map(str, ks))} seeds at a time, one process and one thread each, with nothing else of "
            "the chapter running beside them")


def machine_sentence(result: GrowthResult) -> str:
    """Where the seconds behind the wall-clock rows (G1c, G2) were measured, whether the uniform repeat timed
    beside GTT did the pooled uniform run's work bit for bit, and what that means for a rerun."""
    where = analysis.timed_on(result.comparison)
    if not where:
        return "The timed runs did not record their machine (they predate that record)."
    n, k = result.numbers["seeds"], result.numbers.get("repeat_identical", 0)
    same = (f"In {'all ' if k == n else ''}{k} of {n} seeds the uniform repeat timed beside GTT ended with the "
            "weights of the seed's scored uniform run, bit for bit, so it repeated that run's work exactly")
    if k < n:
        same += (f"; in the other {n - k} its weights differ (the two processes' float kernels differed), "
                 "though it ran the same operations on tensors of the same shapes")
    return (f"The seconds behind G1c and G2 were measured on {' and on '.join(where)}. {same}. On another CPU the "
            "step times differ, and with them G1c's step budget and G2's saving: compare these two rows across "
            "machines only by rerunning them, never by their seconds.")


def cost_sentence(result: GrowthResult) -> str:
    """What GTT's full cost is made of, against uniform training's (mean over seeds, 10^12 FLOPs)."""
    cs = analysis.cost_savings(result.comparison)
    if not len(cs["seeds"]):
        return "Without both GTT and uniform runs there is no cost to compare."
    u = analysis.by_seed(result.comparison, "uniform")
    run_f = np.mean([u[s]["totals"]["flops"] for s in cs["seeds"]]) / 1e12
    sweep_f = np.mean([u[s]["importance"]["flops"] for s in cs["seeds"]]) / 1e12
    return (f"To the common target (the worse final NLL of each pair, {fmt(np.mean(cs['target']))} nats on average) "
            f"uniform training spends {fmt(np.mean(cs['cost_uniform']) / 1e12)} TFLOPs and GTT's own training "
            f"{fmt(np.mean(cs['cost_gtt_training']) / 1e12)} TFLOPs; the uniform run that orders GTT's phases adds "
            f"{fmt(run_f)} TFLOPs and the ablation sweep {fmt(sweep_f, 2)} TFLOPs, for a full cost of "
            f"{fmt(np.mean(cs['cost_gtt_full']) / 1e12)} TFLOPs.")


def arm_table(result: GrowthResult):
    """:attr:`GrowthResult.arms` as the page shows it (training FLOPs in TFLOPs; floats to three significant
    digits)."""
    return compact(result.arms)


def compact(df, digits: int = 3):
    """A table as the page shows it: no index, floats to ``digits`` significant digits."""
    import pandas as pd

    floats = [c for c in df.columns if pd.api.types.is_float_dtype(df[c])]
    return df.style.hide(axis="index").format({c: f"{{:.{digits}g}}" for c in floats})
