"""The growth chapter's run: Growth Transformer Training (GTT) against uniform training, progressive
stacking and MSLT at matched budgets (Wietrzykowski 2026, arXiv:2603.19348, findings 5-6; spec
anatomy.md sections 3.10, 4.7, 5 "A11-A13" and 6 "GTT ledger"), plus the book's model family.

Protocol [reconstructed]: one architecture (a small Llama-style decoder, ``preset.depth`` layers),
the family's BPE tokenizer and training windows, validation windows from document-disjoint text.
1. Learning-rate sweep for the uniform baseline (seed 0); the best LR is used by every arm.
2. The importance profile of the uniform model (seed 0, best LR): per-layer ΔNLL under an ablation
   operator of :mod:`layerlab.metrics.ablation` (default AB2 neighbour average, the digest's reading), which
   orders GTT's phases. This profile costs a full uniform run that GTT's ledger does not pay for.
3. Every arm x seed trains the same number of steps (= tokens); validation NLL of every window is
   stored at evenly spaced steps together with cumulative tokens, FLOPs and wall-clock.
4. :mod:`layerlab.chapters.growth.analysis` turns the curves into matched-budget comparisons (equal
   tokens, FLOPs, wall-clock), costs to a target loss and speed-ups; :func:`run` collects them, with
   the family's table, into one :class:`GrowthResult`.
Runs are cached as JSON (``cache_dir()/growth-run``), keyed by everything that defines them; the
whole result is cached too (``growth-result``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from layerlab.chapters.growth import analysis
from layerlab.chapters.growth.presets import ANALYSIS_FIELDS, ARMS, GrowthPreset
from layerlab.core.cache import cached, cached_json
from layerlab.core.fingerprints import fingerprint
from layerlab.core.protocol import Provenance, provenance
from layerlab.data.fetch import data_fingerprint
from layerlab.training import growth

EARLY_FRAC = 416 / 656
"""The digest's "416 steps beat 656": GTT read at this fraction of the token budget (claim G4)."""


def _train_key(preset: GrowthPreset) -> dict:
    """The preset fields that define what is trained (the bootstrap seed and profile name do not)."""
    return {k: v for k, v in dataclasses.asdict(preset).items() if k not in ANALYSIS_FIELDS}


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


def run_arm(preset: GrowthPreset, arm: str, seed: int, lr: float, importance=None,
            threads: int | None = None) -> dict:
    """Train one arm x seed (cached): per-eval tokens, FLOPs, wall-clock and per-window val NLL."""
    sched = make_schedule(arm, preset, lr, importance)
    key = {"preset": _train_key(preset), "data": data_fingerprint(), "arm": arm, "seed": seed, "lr": lr,
           "schedule": dataclasses.asdict(sched)}

    def compute() -> dict:
        from layerlab.training.train import TrainConfig, build_model, train

        if threads:
            torch.set_num_threads(threads)
        tok, train_ids, val_ids = _data(preset)
        spec = _spec(preset, len(tok))
        evals = tuple(sorted({0, *np.linspace(0, preset.steps, preset.n_evals + 1).round().astype(int).tolist()}))
        cfg = TrainConfig(batch_size=preset.batch_size, seed=seed, eval_steps=evals, eval_per_window=True)
        t0 = time.perf_counter()
        model = build_model(spec, seed=seed, dtype=preset.torch_dtype).to(preset.device)
        res = train(model, sched, train_ids, cfg, val_ids=val_ids, progress=False)
        return {"arm": arm, "seed": seed, "lr": lr, "evals": res.evals, "ledger": res.ledger,
                "totals": res.totals, "schedule": growth.describe(sched), "seconds": time.perf_counter() - t0,
                "train_loss": [r["loss"] for r in res.log], "mode": sched.mode}

    return cached_json("growth-run", key, compute)


def _run_many(preset: GrowthPreset, jobs: list[tuple], workers: int) -> list[dict]:
    if workers <= 1 or len(jobs) <= 1:
        n = torch.get_num_threads()
        try:  # small models train much faster single-threaded
            torch.set_num_threads(1)
            return [run_arm(preset, *j) for j in jobs]
        finally:
            torch.set_num_threads(n)
    import concurrent.futures as cf
    import multiprocessing as mp

    with cf.ProcessPoolExecutor(min(workers, len(jobs)), mp_context=mp.get_context("spawn")) as ex:
        futs = [ex.submit(run_arm, preset, *j, 1) for j in jobs]
        return [f.result() for f in futs]


def importance_profile(preset: GrowthPreset, lr: float, seed: int = 0) -> dict:
    """Per-layer ΔNLL (nats, ablated − clean, mean over validation windows) of the uniform model
    trained with ``lr`` and ``seed``, under the preset's ablation operator (cached)."""
    key = {"preset": _train_key(preset), "data": data_fingerprint(), "lr": lr, "seed": seed}

    def compute() -> dict:
        from layerlab.metrics import ablation
        from layerlab.training.train import TrainConfig, build_model, train

        tok, train_ids, val_ids = _data(preset)
        model = build_model(_spec(preset, len(tok)), seed=seed, dtype=preset.torch_dtype).to(preset.device)
        sched = make_schedule("uniform", preset, lr)
        train(model, sched, train_ids, TrainConfig(batch_size=preset.batch_size, seed=seed), progress=False)
        model = model.cpu()  # the ablation sweep evaluates on the CPU (as the validation windows are)
        ivs = ablation.sweep_interventions(model, [preset.ablation])
        res = ablation.evaluate_interventions(model, val_ids, ivs)
        delta = [float(np.mean(res.nll[iv.name] - res.base)) for iv in ivs]
        return {"operator": preset.ablation, "delta_nll": delta, "base_nll": float(np.mean(res.base))}

    return cached_json("growth-importance", key, compute)


def run_comparison(preset: GrowthPreset, *, workers: int | None = None) -> dict:
    """The whole experiment for ``preset``: LR sweep, importance profile, every arm x seed."""
    workers = preset.workers if workers is None else workers
    t0 = time.perf_counter()
    sweep = _run_many(preset, [("uniform", preset.seeds[0], lr) for lr in preset.lr_sweep], workers)
    finals = [r["evals"][-1]["val_nll"] for r in sweep]
    best_lr = preset.lr_sweep[int(np.argmin(finals))]
    imp = importance_profile(preset, best_lr, preset.seeds[0])
    jobs = []
    for arm in preset.arms:
        for s in preset.seeds:
            if arm == "uniform" and s == preset.seeds[0]:
                continue  # already trained in the sweep
            jobs.append((arm, s, best_lr, imp["delta_nll"] if arm == "gtt" else None))
    runs = _run_many(preset, jobs, workers)
    runs += [r for r in sweep if r["lr"] == best_lr]
    gtt_sched = make_schedule("gtt", preset, best_lr, imp["delta_nll"])
    return {"profile": preset.profile, "preset": dataclasses.asdict(preset), "best_lr": best_lr,
            "sweep": [{"lr": r["lr"], "final_nll": r["evals"][-1]["val_nll"]} for r in sweep],
            "importance": imp, "gtt_schedule": growth.describe(gtt_sched), "runs": runs,
            "seconds": time.perf_counter() - t0}


# ----------------------------------------------------------------------------- the chapter's result


@dataclass(kw_only=True)
class GrowthResult:
    """Everything the growth notebook shows. Tables are DataFrames; NLL in nats per token.

    sweep: lr, final_nll of the uniform baseline (seed 0); importance: layer, ΔNLL when ablated;
    gtt_schedule: GTT's phases; curves: arm, seed, step, tokens, flops, wall, val_nll per eval point;
    matched: every arm at equal tokens / FLOPs / wall-clock (``analysis.matched``, all axes);
    speedups: cost to the common target and saving vs uniform (all axes); pair: uniform and GTT
    alone at equal FLOPs and wall-clock; early: every arm at ``EARLY_FRAC`` of the token budget;
    step_time: measured wall and counted FLOP saving per step; family: the model family's table;
    family_curves: name, step, val_nll at every checkpoint of every member; numbers: the values the
    prose quotes (glued as ``g_<key>``).
    """

    provenance: Provenance
    best_lr: float
    sweep: pd.DataFrame
    importance: pd.DataFrame
    gtt_schedule: pd.DataFrame
    curves: pd.DataFrame
    matched: pd.DataFrame
    speedups: pd.DataFrame
    pair: pd.DataFrame
    early: pd.DataFrame
    step_time: dict[str, float]
    family: pd.DataFrame
    family_curves: pd.DataFrame
    numbers: dict[str, Any] = field(default_factory=dict)

    def at(self, table: str, axis: str) -> pd.DataFrame:
        """Rows of the ``matched``/``speedups``/``pair`` table for ``axis``, indexed by arm."""
        df = getattr(self, table)
        return df[df["axis"] == axis].set_index("arm")

    def sweep_table(self) -> pd.DataFrame:
        return self.sweep.rename(columns={"lr": "peak LR (uniform, seed 0)", "final_nll": "final validation NLL"})

    def importance_table(self) -> pd.DataFrame:
        return self.importance.rename(columns={"delta_nll": "ΔNLL when ablated"}).set_index("layer").T


def _family(name: str) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    from layerlab.training.family import get_family

    fam = get_family(name)
    table = fam.table()
    curves = pd.DataFrame([{"name": m.name, "step": c["step"], "val_nll": c["val_nll"]} for m in fam for c in m.curve])
    best = table.loc[table.heldout_nll.idxmin()]
    numbers = {"family_n": len(fam), "family_minutes": fam.train_seconds / 60, "family_best": best["name"],
               "family_best_nll": float(best["heldout_nll"])}
    return table.drop(columns=["train_seconds"]), curves, numbers


def assemble(preset: GrowthPreset, comp: dict, family: tuple[pd.DataFrame, pd.DataFrame, dict],
             prov: Provenance) -> GrowthResult:
    """The result from a comparison (:func:`run_comparison`), the family's table, curves and numbers
    (:func:`_family`) and the provenance: every table and number the notebook shows."""
    s = preset.boot_seed
    matched = pd.concat([analysis.matched(comp, axis, seed=s) for axis in analysis.AXES], ignore_index=True)
    speed = pd.concat([analysis.speedups(comp, axis, seed=s) for axis in analysis.AXES], ignore_index=True)
    pair = pd.concat([analysis.matched(comp, axis, arms=("uniform", "gtt"), seed=s) for axis in ("flops", "wall")],
                     ignore_index=True)
    early = analysis.matched(comp, "tokens", frac=EARLY_FRAC, seed=s)
    st = analysis.step_time_saving(comp, seed=s)
    fam_table, fam_curves, fam_numbers = family
    tok = matched[matched["axis"] == "tokens"].set_index("arm")
    uniform = [r for r in comp["runs"] if r["arm"] == "uniform"]
    numbers = {
        "best_lr": comp["best_lr"], "steps": preset.steps, "tokens": uniform[0]["totals"]["tokens"],
        "seeds": len(preset.seeds), "depth": preset.depth, "width": preset.width, "nruns": len(comp["runs"]),
        "operator": comp["importance"]["operator"],
        "uni_nll": float(tok.loc["uniform", "nll"]), "gtt_nll": float(tok.loc["gtt", "nll"]),
        "gtt_delta": float(tok.loc["gtt", "delta"]), "gtt_delta_lo": float(tok.loc["gtt", "delta_low"]),
        "gtt_delta_hi": float(tok.loc["gtt", "delta_high"]),
        "ratio": float(tok.loc["gtt", "nll"] / tok.loc["uniform", "nll"]),
        "wall_saving": 100 * st["wall_saving"], "flop_saving": 100 * st["flop_saving"],
        "train_minutes": sum(r["seconds"] for r in comp["runs"]) / 60, **fam_numbers,
    }
    return GrowthResult(
        provenance=prov, best_lr=comp["best_lr"], sweep=pd.DataFrame(comp["sweep"]),
        importance=pd.DataFrame({"layer": range(preset.depth), "delta_nll": comp["importance"]["delta_nll"]}),
        gtt_schedule=pd.DataFrame(comp["gtt_schedule"]), curves=analysis.curves(comp), matched=matched,
        speedups=speed, pair=pair, early=early, step_time=st, family=fam_table, family_curves=fam_curves,
        numbers=numbers)


def _compute(preset: GrowthPreset) -> GrowthResult:
    comp = run_comparison(preset)
    _, train_ids, val_ids = _data(preset)
    prov = provenance("growth", preset, model=f"Llama-style decoder d{preset.depth}-w{preset.width}",
                      tokens=fingerprint(train_ids, val_ids), seed=preset.seeds[0])
    return assemble(preset, comp, _family(preset.family), prov)


def run(preset: GrowthPreset) -> GrowthResult:
    """The growth chapter for ``preset`` (cached as a whole; the training runs are cached one by one)."""
    return cached("growth-result", {"preset": dataclasses.asdict(preset), "data": data_fingerprint()},
                  lambda: _compute(preset))
