"""Presets of the calibration appendix: how many simulations per design, and the designs themselves.

Each :class:`Case` is one design of the book at its real number of units: the chapter and claims it
stands for, the scenario kind of :func:`layerlab.report.calibration.scenario`, n and the unit, and the
claimed effect (in units of the between-unit standard deviation for a mean, as a correlation for a
correlation, in loss units with noise sd 0.1 for a peak-then-drop curve).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from layerlab.core.protocol import Preset, make_preset

__all__ = ["CASES", "PRESETS", "CalibrationPreset", "Case", "preset"]


@dataclass(frozen=True, kw_only=True)
class Case:
    """One design to calibrate (see the module docstring)."""

    label: str  # where the design is used, e.g. "residual R2-R6"
    kind: str  # "paired" | "correlation" | "peak_drop"
    n: int
    unit: str
    effect: float
    held_out: bool = True  # peak_drop only: the held-out peak (False: the biased same-data peak)
    expect_calibrated: bool = True  # False for the biased design the book rejects


CASES: tuple[Case, ...] = (
    Case(label="residual R2-R6 (documents)", kind="paired", n=6, unit="documents", effect=1.5),
    Case(label="coupling C6/C7 (3 seeds)", kind="paired", n=3, unit="seeds", effect=2.0),
    Case(label="5 seeds", kind="paired", n=5, unit="seeds", effect=2.0),
    Case(label="8 seeds", kind="paired", n=8, unit="seeds", effect=1.5),
    Case(label="coupling C1 (4 prompts)", kind="correlation", n=4, unit="prompts", effect=0.9),
    Case(label="8 prompts", kind="correlation", n=8, unit="prompts", effect=0.8),
    Case(label="coupling C4 (22 family members)", kind="correlation", n=22, unit="members", effect=0.6),
    Case(label="peak then drop, held-out peak", kind="peak_drop", n=16, unit="documents", effect=0.3),
    Case(label="peak then drop, same-data peak", kind="peak_drop", n=16, unit="documents", effect=0.3,
         held_out=False, expect_calibrated=False),
    Case(label="growth G1-G5 (6 seeds, seed-paired differences; G2/G3 vs 80% of the claimed size)", kind="paired",
         n=6, unit="seeds", effect=1.5),
)
"""The designs of the book, at the chapters' real n (``cpu`` profile)."""


@dataclass(frozen=True, kw_only=True)
class CalibrationPreset(Preset):
    """How many simulated data sets per hypothesis and case."""

    n_sims: int
    cases: tuple[Case, ...] = CASES
    seed: int = 0


PRESETS: dict[str, CalibrationPreset] = {
    "smoke": CalibrationPreset(n_sims=40),
    "cpu": CalibrationPreset(n_sims=400),
    "gpu": CalibrationPreset(n_sims=2000),
}


def preset(profile: str, **overrides: Any) -> CalibrationPreset:
    """``PRESETS[profile]`` with ``overrides``; unknown profiles or fields fail clearly."""
    return make_preset(PRESETS, profile, **overrides)
