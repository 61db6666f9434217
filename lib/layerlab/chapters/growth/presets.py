"""Presets of the growth chapter: one frozen dataclass per profile (Wietrzykowski 2026,
arXiv:2603.19348, findings 5-6; spec anatomy.md sections 3.10 and 5 "A11-A13").

A preset fixes the architecture of every arm (``depth`` x ``width``, a Llama-style decoder with the
family's heads and sequence length), the training budget (``steps`` x ``batch_size`` windows), the
training ``seeds`` (the unit of every claim: arms of one seed share the initial weights and the batch
order, so they are compared seed by seed), the uniform baseline's learning-rate sweep, the evaluation grid
(``n_evals`` points after step 0), the held-out text (``windows_per_doc`` windows from each document of
``heldout_splits``: documents that no training window comes from) and the importance profile that orders
GTT's phases (the ablation ``ablation`` of every layer of each seed's trained uniform model, on
``imp_windows_per_doc`` windows of each of ``imp_docs`` training documents). ``boot_seed`` seeds the
analysis' permutation tests only.
"""

from __future__ import annotations

from dataclasses import dataclass

from layerlab.core.protocol import Preset, make_preset

ARMS = ("uniform", "gtt", "stacking", "mslt")
"""The compared schedules. Every comparison adds two controls: ``uniform-flops`` and ``uniform-wall``,
uniform training on its own (shorter) cosine schedule with GTT's FLOPs or GTT's measured seconds."""
CONTROLS = ("uniform-flops", "uniform-wall")


@dataclass(frozen=True, kw_only=True)
class GrowthPreset(Preset):
    """One profile of the growth chapter (``smoke`` | ``cpu`` | ``gpu``)."""

    family: str  # family profile whose tokenizer and windows are used
    depth: int
    width: int
    steps: int
    seeds: tuple[int, ...]
    lr_sweep: tuple[float, ...]  # the rates always tried; run.sweep_lr adds rates beyond an edge optimum
    n_evals: int  # evaluation points after step 0
    batch_size: int
    windows_per_doc: int = 32  # held-out windows per document (fewer if a document is shorter)
    heldout_splits: tuple[str, ...] = ("validation", "test")
    imp_docs: int = 16  # training documents the importance profile is measured on
    imp_windows_per_doc: int = 8
    ablation: str = "neighbour_avg"
    arms: tuple[str, ...] = ARMS
    workers: int = 1  # parallel processes: for the runs whose wall-clock no claim uses, and for the timed pairs
    # (GTT beside a uniform repeat, run.train_pair), which then train that many at a time with nothing else beside
    warmup: int = 0
    lr_extend: int = 2  # at most this many rates added beyond the grid's edge while the best rate sits on it
    boot_seed: int = 0  # seed of the Monte-Carlo tests (not of training: that is ``seeds``)


PRESETS: dict[str, GrowthPreset] = {
    "smoke": GrowthPreset(family="smoke", depth=4, width=32, steps=12, seeds=(0, 1, 2), lr_sweep=(3e-3, 1e-2),
                          n_evals=4, batch_size=4, windows_per_doc=4, imp_docs=4, imp_windows_per_doc=2,
                          workers=1),
    # four rates: the sweep's two rounds on two cores leave no core idle (with three, the third trained alone, and so
    # did a rate added beyond the grid's edge when the best was 3e-3, the smallest, as on 2026-12-07)
    "cpu": GrowthPreset(family="cpu", depth=12, width=32, steps=128, seeds=(0, 1, 2, 3, 4, 5),
                        lr_sweep=(1e-3, 3e-3, 1e-2, 3e-2), n_evals=8, batch_size=8, windows_per_doc=32,
                        workers=2, warmup=8),
    "gpu": GrowthPreset(family="gpu", depth=12, width=256, steps=5000, seeds=(0, 1, 2, 3, 4, 5, 6, 7),
                        lr_sweep=(3e-4, 1e-3, 3e-3, 1e-2), n_evals=20, batch_size=64, windows_per_doc=128,
                        imp_docs=32, imp_windows_per_doc=16, workers=1, warmup=100, device="cuda"),
}

ANALYSIS_FIELDS = ("profile", "boot_seed", "workers")
"""Preset fields that do not change what is trained (left out of the training runs' cache keys)."""


def preset(profile: str, **overrides) -> GrowthPreset:
    """``PRESETS[profile]`` with ``overrides`` (unknown profiles or fields raise a clear ValueError)."""
    return make_preset(PRESETS, profile, **overrides)


def describe(p: GrowthPreset):
    """The preset as a one-column table (for the notebook)."""
    import dataclasses

    import pandas as pd

    values = {f.name: str(getattr(p, f.name)) for f in dataclasses.fields(p)}
    return pd.Series(values, name=f"preset '{p.profile}'").to_frame()
