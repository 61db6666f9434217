"""Presets of the growth chapter: one frozen dataclass per profile (Wietrzykowski 2026,
arXiv:2603.19348, findings 5-6; spec anatomy.md sections 3.10 and 5 "A11-A13").

A preset fixes the architecture of every arm (``depth`` x ``width``, a Llama-style decoder with the
family's heads and sequence length), the training budget (``steps`` x ``batch_size`` windows), the
training ``seeds`` of every arm, the uniform baseline's learning-rate sweep, the evaluation grid
(``n_evals`` points after step 0 on ``val_windows`` validation windows) and the ablation operator of
the importance profile that orders GTT's phases. ``boot_seed`` seeds the analysis' bootstraps only.
"""

from __future__ import annotations

from dataclasses import dataclass

from layerlab.core.protocol import Preset, make_preset

ARMS = ("uniform", "gtt", "stacking", "mslt")


@dataclass(frozen=True, kw_only=True)
class GrowthPreset(Preset):
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
    boot_seed: int = 0  # seed of the bootstrap CIs (not of training: that is ``seeds``)


PRESETS: dict[str, GrowthPreset] = {
    "smoke": GrowthPreset(family="smoke", depth=4, width=32, steps=12, seeds=(0, 1, 2), lr_sweep=(3e-3, 1e-2),
                          n_evals=4, val_windows=16, batch_size=4, workers=1),
    "cpu": GrowthPreset(family="cpu", depth=12, width=32, steps=128, seeds=(0, 1, 2),
                        lr_sweep=(1e-3, 3e-3, 1e-2), n_evals=6, val_windows=64, batch_size=8, workers=2,
                        warmup=8),
    "gpu": GrowthPreset(family="gpu", depth=12, width=256, steps=5000, seeds=(0, 1, 2, 3, 4),
                        lr_sweep=(3e-4, 1e-3, 3e-3, 1e-2), n_evals=20, val_windows=512, batch_size=64,
                        workers=1, warmup=100, device="cuda"),
}

ANALYSIS_FIELDS = ("profile", "boot_seed")
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
