"""The growth chapter's result (Wietrzykowski 2026, arXiv:2603.19348, findings 5-6): the typed
:class:`GrowthResult` the notebook, claims and plots read, and :func:`assemble`, which builds it from the
raw comparison of :func:`layerlab.chapters.growth.run.run_comparison` and the model family's table. No
training or I/O here: :mod:`layerlab.chapters.growth.run` computes, this module only arranges."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

import layerlab.chapters.growth.analysis as analysis
from layerlab.chapters.growth.presets import GrowthPreset
from layerlab.core.protocol import Provenance


@dataclass(kw_only=True)
class GrowthResult:
    """Everything the growth notebook shows (NLL in nats per token, document-weighted).

    comparison: the raw runs (:func:`layerlab.chapters.growth.run.run_comparison`; the claims are computed from it by
    :mod:`layerlab.chapters.growth.claims`); sweep: lr, training loss of the last quarter, final held-out NLL
    of the uniform baseline (seed 0); importance: layer x seed mean ΔNLL when ablated, and whether the layer
    is an anti-layer by the test; gtt_schedule: GTT's phases for the first seed; curves: arm, seed, step,
    tokens, flops, wall, val_nll per eval point; arms: one row per arm (steps, FLOPs, seconds, final NLL);
    family: the model family's table; family_curves: name, step, val_nll at every checkpoint of every
    member; numbers: the values the prose quotes (glued as ``g_<key>``).
    """

    provenance: Provenance
    best_lr: float
    comparison: dict
    sweep: pd.DataFrame
    importance: pd.DataFrame
    gtt_schedule: pd.DataFrame
    curves: pd.DataFrame
    arms: pd.DataFrame
    family: pd.DataFrame
    family_curves: pd.DataFrame
    numbers: dict[str, Any] = field(default_factory=dict)

    def sweep_table(self) -> pd.DataFrame:
        """The learning-rate sweep as the page shows it (rounded)."""
        return self.sweep.rename(columns={"lr": "peak LR", "train_loss_last_quarter": "training loss, last quarter",
                                          "final_nll": "held-out NLL"}).round(3)

    def importance_table(self) -> pd.DataFrame:
        """Mean ΔNLL (nats) per layer over seeds and how many seeds call the layer an anti-layer."""
        g = self.importance.groupby("layer")
        return pd.DataFrame({"layer": g.size().index, "ΔNLL (mean over seeds)": g.delta_nll.mean().round(3).values,
                             "anti-layer in # seeds": g.anti.sum().values}).set_index("layer").T

    def schedule_table(self) -> pd.DataFrame:
        """GTT's phases (first seed): steps, trainable layers, initialisation, activated layers."""
        return self.gtt_schedule.assign(layers=lambda d: d.layers.map(lambda v: ", ".join(map(str, v))),
                                        activate=lambda d: d.activate.map(lambda v: ", ".join(map(str, v)) or "—"))


def family_view(name: str) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
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
    """The result from a comparison (:func:`layerlab.chapters.growth.run.run_comparison`), the family's
    table, curves and numbers (:func:`family_view`) and the provenance: every table and number the notebook
    shows."""
    fam_table, fam_curves, fam_numbers = family
    uni = analysis.by_seed(comp, "uniform")
    imp_rows = [{"seed": int(s), "layer": i, "delta_nll": m, "anti": i in p["anti"],
                 "point_negative": i in p["point_negative"]}
                for s, p in comp["profiles"].items() for i, m in enumerate(p["mean"])]
    imp = pd.DataFrame(imp_rows)
    first = analysis.by_seed(comp, "gtt")[min(analysis.by_seed(comp, "gtt"))]
    sweep = pd.DataFrame(comp["sweep"])
    lrs = sorted(sweep.lr)
    u0 = next(iter(uni.values()))
    numbers = {
        "best_lr": comp["best_lr"], "lr_at_edge": comp["best_lr"] in (lrs[0], lrs[-1]), "lr_min": lrs[0],
        "lr_max": lrs[-1], "steps": preset.steps, "tokens": u0["totals"]["tokens"], "seeds": len(uni),
        "depth": preset.depth, "width": preset.width, "nruns": len(comp["runs"]) + len(comp["sweep"]),
        "operator": u0["importance"]["operator"], "val_docs": len(comp["val_docs"]),
        "val_windows": len(comp["val_doc"]),
        "imp_docs": u0["importance"]["docs"], "imp_windows": u0["importance"]["windows"],
        "anti_test": int(imp.anti.sum()), "anti_point": int(imp.point_negative.sum()), "layer_seeds": len(imp),
        "train_minutes": sum(r["seconds"] + r.get("eval_seconds", 0.0) + r.get("pool_seconds", 0.0)
                             for r in comp["runs"]) / 60,
        "timed_minutes": comp["timed_seconds"] / 60, **fam_numbers,
        "repeat_identical": sum(bool(r.get("repeat_identical")) for r in uni.values()),
    }
    return GrowthResult(
        provenance=prov, best_lr=comp["best_lr"], comparison=comp, sweep=sweep, importance=imp,
        gtt_schedule=pd.DataFrame(first["schedule"]), curves=analysis.curves(comp), arms=analysis.arm_table(comp),
        family=fam_table, family_curves=fam_curves, numbers=numbers)
