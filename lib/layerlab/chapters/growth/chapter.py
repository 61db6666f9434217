"""The growth chapter: Growth Transformer Training (GTT) against uniform training, progressive
stacking and MSLT at matched budgets (Wietrzykowski 2026, arXiv:2603.19348, findings 5-6; spec
anatomy.md sections 3.10, 4.7, 5 "A11-A13" and 6 "GTT ledger").

Protocol [reconstructed]: one architecture (a small Llama-style decoder, ``preset.depth`` layers),
the family's BPE tokenizer and training windows, validation windows from document-disjoint text.
1. Learning-rate sweep for the uniform baseline (seed 0); the best LR is used by every arm.
2. The importance profile of the uniform model (seed 0, best LR): per-layer ΔNLL under an ablation
   operator of :mod:`layerlab.metrics.ablation` (default AB2 neighbour average, the digest's reading), which
   orders GTT's phases. This profile costs a full uniform run that GTT's ledger does not pay for.
3. Every arm x seed trains the same number of steps (= tokens); validation NLL of every window is
   stored at evenly spaced steps together with cumulative tokens, FLOPs and wall-clock.
4. The analysis below turns the curves into matched-budget comparisons (equal tokens, FLOPs,
   wall-clock), costs to a target loss and speed-ups; :mod:`layerlab.chapters.growth.claims` makes the
   claim table.
Runs are cached as JSON (``cache_dir()/growth-run``), keyed by everything that defines them.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
import torch

from layerlab.core import profiles
from layerlab.core.cache import cached_json
from layerlab.training import growth

ARMS = ("uniform", "gtt", "stacking", "mslt")


@dataclass(frozen=True)
class GrowthPreset:
    """One profile of the growth chapter (``smoke`` | ``cpu`` | ``gpu``)."""

    family: str  # family profile whose tokenizer and windows are used
    depth: int
    width: int
    steps: int
    seeds: tuple[int, ...]
    lr_sweep: tuple[float, ...]
    n_evals: int  # evaluation points after step 0
    val_windows: int
    batch_size: int
    ablation: str = "neighbour_avg"
    arms: tuple[str, ...] = ARMS
    workers: int = 1
    warmup: int = 0


PRESETS = {
    "smoke": GrowthPreset(family="smoke", depth=4, width=32, steps=12, seeds=(0, 1, 2), lr_sweep=(3e-3, 1e-2),
                          n_evals=4, val_windows=16, batch_size=4, workers=1),
    "cpu": GrowthPreset(family="cpu", depth=12, width=32, steps=128, seeds=(0, 1, 2),
                        lr_sweep=(1e-3, 3e-3, 1e-2), n_evals=6, val_windows=64, batch_size=8, workers=2,
                        warmup=8),
    "gpu": GrowthPreset(family="gpu", depth=12, width=256, steps=5000, seeds=(0, 1, 2, 3, 4),
                        lr_sweep=(3e-4, 1e-3, 3e-3, 1e-2), n_evals=20, val_windows=512, batch_size=64,
                        workers=1, warmup=100),
}


def get_preset(profile: str) -> GrowthPreset:
    return profiles.select(PRESETS, profile)


def _data(preset: GrowthPreset):
    from layerlab.training.family import family_tokenizer, family_windows

    tok = family_tokenizer(preset.family)
    train_ids = family_windows(preset.family, "train")
    val_ids = family_windows(preset.family, "validation")[: preset.val_windows]
    return tok, train_ids, val_ids


def _spec(preset: GrowthPreset, vocab: int):
    from layerlab.training.family import PRESETS as FAM
    from layerlab.training.train import ModelSpec

    fam = FAM[preset.family]
    return ModelSpec(depth=preset.depth, width=preset.width, heads=fam.heads, kv_heads=fam.kv_heads,
                     vocab_size=vocab, seq_len=fam.seq_len)


def make_schedule(arm: str, preset: GrowthPreset, lr: float, importance=None) -> growth.Schedule:
    """The schedule of ``arm`` for ``preset`` at peak learning rate ``lr``."""
    L, S, w = preset.depth, preset.steps, preset.warmup
    if arm == "uniform":
        return growth.uniform(L, S, lr=lr, warmup=w)
    if arm == "gtt":
        if importance is None:
            raise ValueError("the gtt arm needs an importance profile (one value per layer)")
        return growth.gtt(importance, S, lr=lr, warmup=w)
    if arm == "stacking":
        return growth.stacking(L, S, lr=lr, warmup=w)
    if arm == "mslt":
        return growth.mslt(L, S, lr=lr, warmup=w)
    raise ValueError(f"unknown arm {arm!r}: choose one of {ARMS}")


def run_arm(profile: str, arm: str, seed: int, lr: float, importance=None, threads: int | None = None) -> dict:
    """Train one arm x seed (cached): per-eval tokens, FLOPs, wall-clock and per-window val NLL."""
    preset = get_preset(profile)
    sched = make_schedule(arm, preset, lr, importance)
    key = {"preset": dataclasses.asdict(preset), "arm": arm, "seed": seed, "lr": lr,
           "schedule": dataclasses.asdict(sched)}

    def compute() -> dict:
        from layerlab.training.train import TrainConfig, build_model, default_device, train

        if threads:
            torch.set_num_threads(threads)
        tok, train_ids, val_ids = _data(preset)
        spec = _spec(preset, len(tok))
        evals = tuple(sorted({0, *np.linspace(0, preset.steps, preset.n_evals + 1).round().astype(int).tolist()}))
        cfg = TrainConfig(batch_size=preset.batch_size, seed=seed, eval_steps=evals, eval_per_window=True)
        t0 = time.perf_counter()
        res = train(build_model(spec, seed=seed).to(default_device()), sched, train_ids, cfg, val_ids=val_ids,
                    progress=False)
        return {"arm": arm, "seed": seed, "lr": lr, "evals": res.evals, "ledger": res.ledger,
                "totals": res.totals, "schedule": growth.describe(sched), "seconds": time.perf_counter() - t0,
                "train_loss": [r["loss"] for r in res.log], "mode": sched.mode}

    return cached_json("growth-run", key, compute)


def _run_many(profile: str, jobs: list[tuple], workers: int) -> list[dict]:
    if workers <= 1 or len(jobs) <= 1:
        n = torch.get_num_threads()
        try:  # small models train much faster single-threaded
            torch.set_num_threads(1)
            return [run_arm(profile, *j) for j in jobs]
        finally:
            torch.set_num_threads(n)
    import concurrent.futures as cf
    import multiprocessing as mp

    with cf.ProcessPoolExecutor(min(workers, len(jobs)), mp_context=mp.get_context("spawn")) as ex:
        futs = [ex.submit(run_arm, profile, *j, 1) for j in jobs]
        return [f.result() for f in futs]


def importance_profile(profile: str, lr: float, seed: int = 0) -> dict:
    """Per-layer ΔNLL (nats, ablated − clean, mean over validation windows) of the uniform model
    trained with ``lr`` and ``seed``, under the preset's ablation operator (cached)."""
    preset = get_preset(profile)
    key = {"preset": dataclasses.asdict(preset), "lr": lr, "seed": seed}

    def compute() -> dict:
        from layerlab.metrics import ablation
        from layerlab.training.train import TrainConfig, build_model, train

        tok, train_ids, val_ids = _data(preset)
        model = build_model(_spec(preset, len(tok)), seed=seed)
        sched = make_schedule("uniform", preset, lr)
        train(model, sched, train_ids, TrainConfig(batch_size=preset.batch_size, seed=seed), progress=False)
        ivs = ablation.sweep_interventions(model, [preset.ablation])
        res = ablation.evaluate_interventions(model, val_ids, ivs)
        delta = [float(np.mean(res.nll[iv.name] - res.base)) for iv in ivs]
        return {"operator": preset.ablation, "delta_nll": delta, "base_nll": float(np.mean(res.base))}

    return cached_json("growth-importance", key, compute)


def run_comparison(profile: str, *, workers: int | None = None) -> dict:
    """The whole experiment for ``profile``: LR sweep, importance profile, every arm x seed."""
    preset = get_preset(profile)
    workers = preset.workers if workers is None else workers
    t0 = time.perf_counter()
    sweep = _run_many(profile, [("uniform", preset.seeds[0], lr) for lr in preset.lr_sweep], workers)
    finals = [r["evals"][-1]["val_nll"] for r in sweep]
    best_lr = preset.lr_sweep[int(np.argmin(finals))]
    imp = importance_profile(profile, best_lr, preset.seeds[0])
    jobs = []
    for arm in preset.arms:
        for s in preset.seeds:
            if arm == "uniform" and s == preset.seeds[0]:
                continue  # already trained in the sweep
            jobs.append((arm, s, best_lr, imp["delta_nll"] if arm == "gtt" else None))
    runs = _run_many(profile, jobs, workers)
    runs += [r for r in sweep if r["lr"] == best_lr]
    gtt_sched = make_schedule("gtt", preset, best_lr, imp["delta_nll"])
    return {"profile": profile, "preset": dataclasses.asdict(preset), "best_lr": best_lr,
            "sweep": [{"lr": r["lr"], "final_nll": r["evals"][-1]["val_nll"]} for r in sweep],
            "importance": imp, "gtt_schedule": growth.describe(gtt_sched), "runs": runs,
            "seconds": time.perf_counter() - t0}


# ----------------------------------------------------------------------------- analysis

AXES = ("tokens", "flops", "wall")


def curves(result: dict):
    """Long DataFrame: arm, seed, step, tokens, flops, wall, val_nll (one row per eval point)."""
    import pandas as pd

    rows = [{"arm": r["arm"], "seed": r["seed"], **{k: e[k] for k in ("step", *AXES, "val_nll")}}
            for r in result["runs"] for e in r["evals"]]
    return pd.DataFrame(rows)


def _runs(result: dict, arm: str) -> list[dict]:
    runs = sorted((r for r in result["runs"] if r["arm"] == arm), key=lambda r: r["seed"])
    if not runs:
        raise ValueError(f"no runs of arm {arm!r} in this result (arms: {sorted({r['arm'] for r in result['runs']})})")
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


def matched(result: dict, axis: str, *, frac: float = 1.0, baseline: str = "uniform",
            arms: tuple[str, ...] | None = None, seed: int = 0):
    """Arms at the same budget of ``axis``: the smallest final budget of any run of ``arms``
    (default all; x ``frac``). Returns a DataFrame: arm, budget, nll [CI], delta vs ``baseline``
    [CI] (nats)."""
    import pandas as pd

    arms = [a for a in ARMS if any(r["arm"] == a for r in result["runs"]) and (arms is None or a in arms)]
    budget = frac * min(r["evals"][-1][axis] for a in arms for r in _runs(result, a))
    mats = {a: np.stack([windows_at(r, axis, budget) for r in _runs(result, a)]) for a in arms}
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


def speedups(result: dict, axis: str, target: float | None = None, *, baseline: str = "uniform",
             n_boot: int = 2000, seed: int = 0):
    """Cost of each arm to reach ``target`` (default: the highest final NLL of any run, which
    every run reaches) on ``axis``, and the saving 1 - cost(arm)/cost(baseline) with a CI
    from resampling seeds of both arms."""
    import pandas as pd

    from layerlab.report.stats import CI

    arms = [a for a in ARMS if any(r["arm"] == a for r in result["runs"])]
    if target is None:
        target = max(r["evals"][-1]["val_nll"] for a in arms for r in _runs(result, a))
    cost = {a: np.array([cost_to_target(r, axis, target) for r in _runs(result, a)]) for a in arms}
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


def step_time_saving(result: dict, arm: str = "gtt", baseline: str = "uniform", *, n_boot: int = 2000,
                     seed: int = 0) -> dict:
    """1 - wall(arm)/wall(baseline) for the same number of steps (measured) and the same for the
    FLOP ledger (counted); CI over seeds."""
    wa = np.array([r["totals"]["wall"] for r in _runs(result, arm)])
    wb = np.array([r["totals"]["wall"] for r in _runs(result, baseline)])
    fa = np.mean([r["totals"]["flops"] for r in _runs(result, arm)])
    fb = np.mean([r["totals"]["flops"] for r in _runs(result, baseline)])
    rng = np.random.default_rng(seed)
    reps = [1 - wa[rng.integers(len(wa), size=len(wa))].mean() / wb[rng.integers(len(wb), size=len(wb))].mean()
            for _ in range(n_boot)]
    lo, hi = np.percentile(reps, [2.5, 97.5])
    return {"wall_saving": float(1 - wa.mean() / wb.mean()), "low": float(lo), "high": float(hi),
            "flop_saving": float(1 - fa / fb)}


def plot_curves(result: dict, axes=AXES):
    """Validation NLL vs tokens, FLOPs and wall-clock per arm: seed mean (line) and min-max band."""
    import matplotlib.pyplot as plt

    from layerlab.report.plots import use_style

    use_style()
    df = curves(result)
    fig, axs = plt.subplots(1, len(axes), figsize=(4.2 * len(axes), 3.4), sharey=True)
    labels = {"tokens": "training tokens", "flops": "training FLOPs", "wall": "training wall-clock (s)"}
    for ax, axis in zip(np.atleast_1d(axs), axes):
        for arm, g in df.groupby("arm", sort=False):
            piv_x = g.pivot(index="step", columns="seed", values=axis).mean(1)
            piv_y = g.pivot(index="step", columns="seed", values="val_nll")
            ax.plot(piv_x, piv_y.mean(1), label=arm)
            ax.fill_between(piv_x, piv_y.min(1), piv_y.max(1), alpha=0.2)
        ax.set_xlabel(labels[axis])
    np.atleast_1d(axs)[0].set_ylabel("validation NLL (nats / token)")
    np.atleast_1d(axs)[0].legend()
    fig.tight_layout()
    return fig


def plot_family(fam):
    """Held-out NLL of the family: vs depth (width-64-like members, seed mean and range) and
    the held-out curve over log-spaced checkpoints for every member."""
    import matplotlib.pyplot as plt

    from layerlab.report.plots import use_style

    use_style()
    t = fam.table()
    w0, lr0 = t.width.mode()[0], t.lr.mode()[0]
    sub = t[(t.width == w0) & (t.lr == lr0)].groupby("depth").heldout_nll
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    a.plot(sub.mean().index, sub.mean().values, marker="o")
    a.fill_between(sub.min().index, sub.min().values, sub.max().values, alpha=0.25)
    a.set_xlabel(f"depth (width {w0}, lr {lr0:g})")
    a.set_ylabel("held-out NLL (nats / token)")
    for m in fam:
        steps = [c["step"] for c in m.curve][1:]
        b.plot(steps, [c["val_nll"] for c in m.curve][1:], lw=0.8, alpha=0.6)
    b.set_xscale("log")
    b.set_xlabel("training step (checkpoints)")
    fig.tight_layout()
    return fig
