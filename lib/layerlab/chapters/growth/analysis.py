"""Seed-paired analysis of the growth chapter's runs (Wietrzykowski 2026, arXiv:2603.19348,
findings 5-6: GTT's loss at the same steps, FLOPs and seconds, its step time and its "~54% cost
reduction"; spec anatomy.md sections 4.7, 5 "A11-A13" and 6 "GTT ledger").

The unit is the training seed: runs of one seed share the initial weights and the batch order, so each
claim is one statistic per seed (a difference of two arms of that seed) tested over seeds with the
engine (:func:`layerlab.report.inference.paired_difference`: exact sign-flip test, its inverted interval). The
held-out NLL of a run is the mean over held-out documents of each document's mean window NLL (every
document weighs the same). Input: the comparison of :func:`layerlab.chapters.growth.run.run_comparison`
(``{"runs": [...], "val_doc": [...]}``).
"""

from __future__ import annotations

import numpy as np

AXES = ("tokens", "flops", "wall")


def curves(comp: dict):
    """Long DataFrame: arm, seed, step, tokens, flops, wall, val_nll (one row per eval point; val_nll is
    the document-weighted held-out NLL)."""
    import pandas as pd

    doc = np.asarray(comp["val_doc"])
    rows = [{"arm": r["arm"], "seed": r["seed"], **{k: e[k] for k in ("step", *AXES)},
             "val_nll": doc_mean(e["windows"], doc)} for r in comp["runs"] for e in r["evals"]]
    return pd.DataFrame(rows)


def doc_nll(windows, doc) -> np.ndarray:
    """Per-document mean of per-window NLL: windows [N], doc [N] -> [D] (documents in index order)."""
    w, d = np.asarray(windows, dtype=float), np.asarray(doc)
    return np.array([w[d == k].mean() for k in np.unique(d)])


def doc_mean(windows, doc) -> float:
    """The held-out NLL of one evaluation: mean over documents of :func:`doc_nll`."""
    return float(doc_nll(windows, doc).mean())


def by_seed(comp: dict, arm: str) -> dict[int, dict]:
    """The runs of ``arm`` keyed by seed (the timed runs, where an arm has both)."""
    out = {}
    for r in comp["runs"]:
        if r["arm"] == arm and (r["seed"] not in out or r.get("timed")):
            out[r["seed"]] = r
    return out


def final(run: dict, doc) -> float:
    """Held-out NLL at the run's last step."""
    return doc_mean(run["evals"][-1]["windows"], doc)


def at_step(run: dict, step: int, doc) -> float:
    """Held-out NLL at an evaluated ``step`` of the run."""
    for e in run["evals"]:
        if e["step"] == step:
            return doc_mean(e["windows"], doc)
    done = [e["step"] for e in run["evals"]]
    raise ValueError(f"step {step} was not evaluated in this {run['arm']} run (evaluated steps: {done})")


def cost_to_target(run: dict, axis: str, target: float, doc) -> float:
    """First ``axis`` value at which the run's held-out NLL reaches ``target`` (linear interpolation
    between evaluation points); inf if never."""
    xs = np.array([e[axis] for e in run["evals"]], dtype=float)
    ys = np.array([doc_mean(e["windows"], doc) for e in run["evals"]])
    hit = np.nonzero(ys <= target + 1e-12)[0]
    if not len(hit):
        return float("inf")
    k = int(hit[0])
    if k == 0:
        return float(xs[0])
    t = (ys[k - 1] - target) / (ys[k - 1] - ys[k])
    return float(xs[k - 1] + t * (xs[k] - xs[k - 1]))


def paired(comp: dict, a: str, b: str, stat) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Seeds both arms ran, and ``stat(run, doc)`` of each arm per seed: (seeds, [S], [S])."""
    doc = np.asarray(comp["val_doc"])
    ra, rb = by_seed(comp, a), by_seed(comp, b)
    seeds = sorted(set(ra) & set(rb))
    return seeds, np.array([stat(ra[s], doc) for s in seeds]), np.array([stat(rb[s], doc) for s in seeds])


def step_time_saving(comp: dict) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Per seed: measured 1 - wall(GTT)/wall(uniform) (same steps, timed in one process with their steps
    alternating: :func:`layerlab.chapters.growth.run.train_pair`) and the counted
    1 - FLOPs(GTT)/FLOPs(uniform) of the ledger. Returns (seeds, wall [S], flops [S]), in %."""
    g, u = by_seed(comp, "gtt"), by_seed(comp, "uniform")
    seeds = sorted(set(g) & set(u))
    wall = np.array([100 * (1 - g[s]["totals"]["wall"] / u[s]["totals"]["wall"]) for s in seeds])
    flops = np.array([100 * (1 - g[s]["totals"]["flops"] / u[s]["totals"]["flops"]) for s in seeds])
    return seeds, wall, flops


def cost_savings(comp: dict) -> dict[str, np.ndarray]:
    """Per seed, GTT's saving (%) in FLOPs to reach the same held-out quality as uniform training.

    target_s = the worse of the two arms' final NLL (both reach it); cost = training FLOPs to the target
    read off each arm's curve. ``training``: GTT's own ledger only. ``full``: plus what its phase order
    needs, the whole uniform run of that seed (its ledger total) and the ablation sweep of its layers.
    Returns seeds, target, cost_uniform, cost_gtt_training, cost_gtt_full, training, full."""
    doc = np.asarray(comp["val_doc"])
    g, u = by_seed(comp, "gtt"), by_seed(comp, "uniform")
    seeds = sorted(set(g) & set(u))
    out = {k: [] for k in ("target", "cost_uniform", "cost_gtt_training", "cost_gtt_full", "training", "full")}
    for s in seeds:
        target = max(final(g[s], doc), final(u[s], doc))
        cu = cost_to_target(u[s], "flops", target, doc)
        cg = cost_to_target(g[s], "flops", target, doc)
        extra = u[s]["totals"]["flops"] + u[s]["importance"]["flops"]
        out["target"].append(target)
        out["cost_uniform"].append(cu)
        out["cost_gtt_training"].append(cg)
        out["cost_gtt_full"].append(cg + extra)
        out["training"].append(100 * (1 - cg / cu))
        out["full"].append(100 * (1 - (cg + extra) / cu))
    return {"seeds": np.array(seeds), **{k: np.array(v) for k, v in out.items()}}


def arm_table(comp: dict):
    """One row per arm: steps, training FLOPs (TFLOPs) and measured seconds (mean over seeds) and the final
    held-out NLL (mean and range over seeds)."""
    import pandas as pd

    doc = np.asarray(comp["val_doc"])
    rows = []
    for arm in dict.fromkeys(r["arm"] for r in comp["runs"]):
        rs = list(by_seed(comp, arm).values())
        f = np.array([final(r, doc) for r in rs])
        rows.append({"arm": arm, "seeds": len(rs), "steps": int(np.mean([r["steps"] for r in rs])),
                     "TFLOPs": np.mean([r["totals"]["flops"] for r in rs]) / 1e12,
                     "seconds": np.mean([r["totals"]["wall"] for r in rs]),
                     "NLL": f.mean(), "NLL min": f.min(), "NLL max": f.max()})
    return pd.DataFrame(rows)


def timed_at_once(comp: dict) -> list[int]:
    """How many timed pairs (GTT beside a uniform repeat) trained at the same time, one process each, as the timed
    runs recorded it, in order of first appearance (1 for records made before pairs ran side by side)."""
    return list(dict.fromkeys(int(r.get("at_once", 1)) for r in comp["runs"] if r.get("timed")))


def timing_phrase(comp: dict) -> str:
    """How GTT and its uniform repeat were timed, for the wall-clock rows' notes and the page: "alone, in one
    process with their steps alternating" or "in one process with their steps alternating, 2 seeds at a time
    (one process per seed)"."""
    ks = timed_at_once(comp)
    if ks in ([], [1]):
        return "alone, in one process with their steps alternating"
    return (f"in one process with their steps alternating, {' or '.join(map(str, ks))} seeds at a time "
            "(one process per seed)")


def timed_on(comp: dict) -> list[str]:
    """The machines (:func:`layerlab.core.machine.describe`) the timed runs recorded, in order of first
    appearance; empty when none recorded one."""
    return list(dict.fromkeys(r["machine"] for r in comp["runs"] if r.get("timed") and r.get("machine")))
