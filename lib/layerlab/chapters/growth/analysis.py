"""Matched-budget analysis of the growth chapter's runs (Wietrzykowski 2026, arXiv:2603.19348,
findings 5-6: GTT's loss at the same steps, its step time and its "~54% cost reduction"; spec
anatomy.md sections 4.7 and 6 "GTT ledger").

Every function takes the raw comparison of :func:`layerlab.chapters.growth.run.run_comparison`
(``{"runs": [...]}``: per arm x seed, evaluation points with cumulative tokens, FLOPs, wall-clock and
per-window validation NLL) and turns the curves into comparisons at equal tokens, FLOPs and
wall-clock, costs to a target loss and speed-ups, with bootstrap CIs [reconstructed].
"""

from __future__ import annotations

import numpy as np

from layerlab.chapters.growth.presets import ARMS

AXES = ("tokens", "flops", "wall")


def curves(comp: dict):
    """Long DataFrame: arm, seed, step, tokens, flops, wall, val_nll (one row per eval point)."""
    import pandas as pd

    rows = [{"arm": r["arm"], "seed": r["seed"], **{k: e[k] for k in ("step", *AXES, "val_nll")}}
            for r in comp["runs"] for e in r["evals"]]
    return pd.DataFrame(rows)


def _runs(comp: dict, arm: str) -> list[dict]:
    runs = sorted((r for r in comp["runs"] if r["arm"] == arm), key=lambda r: r["seed"])
    if not runs:
        raise ValueError(f"no runs of arm {arm!r} in these runs (arms: {sorted({r['arm'] for r in comp['runs']})})")
    return runs


def windows_at(run: dict, axis: str, budget: float) -> np.ndarray:
    """Per-window validation NLL [N] of ``run`` after spending ``budget`` of ``axis`` (tokens, flops
    or wall seconds), linearly interpolated between evaluation points; NaN beyond the run's end."""
    xs = np.array([e[axis] for e in run["evals"]], dtype=float)
    ys = np.array([e["windows"] for e in run["evals"]], dtype=float)  # [E, N]
    if budget > xs[-1] * (1 + 1e-9):
        return np.full(ys.shape[1], np.nan)
    k = int(np.clip(np.searchsorted(xs, budget), 1, len(xs) - 1))
    t = (budget - xs[k - 1]) / max(xs[k] - xs[k - 1], 1e-300)
    return (1 - t) * ys[k - 1] + t * ys[k]


def hierarchical_delta(a: np.ndarray, b: np.ndarray, *, n_boot: int = 2000, seed: int = 0):
    """Mean of ``a`` minus mean of ``b`` with a percentile CI from a two-level bootstrap: seeds
    are resampled within each arm and validation windows jointly (they are shared by both arms).

    a: [S_a, N], b: [S_b, N] per-window NLL (nats). ``b`` may be None (CI of the mean of ``a``).
    """
    from layerlab.report.stats import CI

    rng = np.random.default_rng(seed)
    n = a.shape[1]
    reps = np.empty(n_boot)
    for i in range(n_boot):
        w = rng.integers(n, size=n)
        ma = a[rng.integers(len(a), size=len(a))].mean(0)[w].mean()
        mb = 0.0 if b is None else b[rng.integers(len(b), size=len(b))].mean(0)[w].mean()
        reps[i] = ma - mb
    est = a.mean() - (0.0 if b is None else b.mean())
    lo, hi = np.percentile(reps, [2.5, 97.5])
    return CI(float(est), float(lo), float(hi))


def matched(comp: dict, axis: str, *, frac: float = 1.0, baseline: str = "uniform",
            arms: tuple[str, ...] | None = None, seed: int = 0):
    """Arms at the same budget of ``axis``: the smallest final budget of any run of ``arms``
    (default all; x ``frac``). Returns a DataFrame: arm, budget, nll [CI], delta vs ``baseline``
    [CI] (nats)."""
    import pandas as pd

    arms = [a for a in ARMS if any(r["arm"] == a for r in comp["runs"]) and (arms is None or a in arms)]
    budget = frac * min(r["evals"][-1][axis] for a in arms for r in _runs(comp, a))
    mats = {a: np.stack([windows_at(r, axis, budget) for r in _runs(comp, a)]) for a in arms}
    rows = []
    for a in arms:
        m = hierarchical_delta(mats[a], None, seed=seed)
        d = hierarchical_delta(mats[a], mats[baseline], seed=seed)
        rows.append({"arm": a, "axis": axis, "budget": budget, "nll": m.estimate, "nll_low": m.low,
                     "nll_high": m.high, "delta": d.estimate, "delta_low": d.low, "delta_high": d.high})
    return pd.DataFrame(rows)


def cost_to_target(run: dict, axis: str, target: float) -> float:
    """First ``axis`` value at which the run's mean validation NLL reaches ``target`` (linear
    interpolation between evaluation points); inf if never."""
    xs = np.array([e[axis] for e in run["evals"]], dtype=float)
    ys = np.array([e["val_nll"] for e in run["evals"]], dtype=float)
    hit = np.nonzero(ys <= target)[0]
    if not len(hit):
        return float("inf")
    k = int(hit[0])
    if k == 0:
        return float(xs[0])
    t = (ys[k - 1] - target) / (ys[k - 1] - ys[k])
    return float(xs[k - 1] + t * (xs[k] - xs[k - 1]))


def speedups(comp: dict, axis: str, target: float | None = None, *, baseline: str = "uniform",
             n_boot: int = 2000, seed: int = 0):
    """Cost of each arm to reach ``target`` (default: the highest final NLL of any run, which
    every run reaches) on ``axis``, and the saving 1 - cost(arm)/cost(baseline) with a CI
    from resampling seeds of both arms."""
    import pandas as pd

    from layerlab.report.stats import CI

    arms = [a for a in ARMS if any(r["arm"] == a for r in comp["runs"])]
    if target is None:
        target = max(r["evals"][-1]["val_nll"] for a in arms for r in _runs(comp, a))
    cost = {a: np.array([cost_to_target(r, axis, target) for r in _runs(comp, a)]) for a in arms}
    rng = np.random.default_rng(seed)
    rows = []
    for a in arms:
        ca, cb = cost[a], cost[baseline]
        est = 1 - ca.mean() / cb.mean()
        reps = [1 - ca[rng.integers(len(ca), size=len(ca))].mean() / cb[rng.integers(len(cb), size=len(cb))].mean()
                for _ in range(n_boot)]
        lo, hi = (np.percentile(reps, [2.5, 97.5]) if np.isfinite(est) else (np.nan, np.nan))
        ci = CI(float(est), float(lo), float(hi))
        rows.append({"arm": a, "axis": axis, "target": target, "cost": float(ca.mean()),
                     "saving": ci.estimate, "saving_low": ci.low, "saving_high": ci.high,
                     "speedup": float(cb.mean() / ca.mean())})
    return pd.DataFrame(rows)


def step_time_saving(comp: dict, arm: str = "gtt", baseline: str = "uniform", *, n_boot: int = 2000,
                     seed: int = 0) -> dict:
    """1 - wall(arm)/wall(baseline) for the same number of steps (measured) and the same for the
    FLOP ledger (counted); CI over seeds."""
    wa = np.array([r["totals"]["wall"] for r in _runs(comp, arm)])
    wb = np.array([r["totals"]["wall"] for r in _runs(comp, baseline)])
    fa = np.mean([r["totals"]["flops"] for r in _runs(comp, arm)])
    fb = np.mean([r["totals"]["flops"] for r in _runs(comp, baseline)])
    rng = np.random.default_rng(seed)
    reps = [1 - wa[rng.integers(len(wa), size=len(wa))].mean() / wb[rng.integers(len(wb), size=len(wb))].mean()
            for _ in range(n_boot)]
    lo, hi = np.percentile(reps, [2.5, 97.5])
    return {"wall_saving": float(1 - wa.mean() / wb.mean()), "low": float(lo), "high": float(hi),
            "flop_saving": float(1 - fa / fb)}
