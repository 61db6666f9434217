"""The calibration appendix's run: preset -> :class:`CalibrationResult` (one row per design).

Each case of the preset is simulated ``n_sims`` times under its null and under its claimed effect
(:func:`layerlab.report.calibration.calibrate`) with the rule its chapter uses (:func:`rule_of`: the
one-sided :class:`layerlab.report.verdicts.Direction`, or a two-sided family); the whole result is cached.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pandas as pd

from layerlab.chapters.calibration.presets import CalibrationPreset, Case
from layerlab.core.cache import cached
from layerlab.core.fingerprints import fingerprint
from layerlab.core.protocol import Provenance, provenance
from layerlab.report.calibration import Calibration, calibrate, scenario
from layerlab.report.verdicts import ANY_EFFECT, Direction, Family

__all__ = ["CalibrationResult", "rule_of", "run"]


@dataclass(frozen=True, kw_only=True)
class CalibrationResult:
    """The calibration of every design: ``table`` has one row per case (label, scenario, n with its
    unit, false-supported rate under the null, power and false-contradicted rate under the effect,
    the effect, the number of simulations) and ``calibrations`` the typed records in the same order."""

    provenance: Provenance
    preset: CalibrationPreset
    calibrations: list[Calibration]
    table: pd.DataFrame

    @property
    def numbers(self) -> dict[str, float]:
        """Glued values: the worst false-supported rate among the designs the book uses, and n_sims."""
        used = [c for c, case in zip(self.calibrations, self.preset.cases, strict=True) if case.expect_calibrated]
        return {"n_sims": self.preset.n_sims, "worst_false": max(c.false_supported for c in used),
                "n_cases": len(self.calibrations)}


def rule_of(case: Case) -> Direction | Family:
    """The rule a case's chapter applies: one-sided :class:`Direction` (the default), or for a family design
    ("paired_family") any of its pairs, two-sided, after Holm."""
    return ANY_EFFECT if case.kind == "paired_family" else Direction()


def _compute(P: CalibrationPreset) -> CalibrationResult:
    cals, rows = [], []
    for i, case in enumerate(P.cases):
        kw = ({"sd": 0.1, "held_out": case.held_out} if case.kind == "peak_drop" else
              {"pairs": case.pairs} if case.kind == "paired_family" else {})
        sc = scenario(case.kind, n=case.n, unit=case.unit, effect=case.effect, **kw)
        cal = calibrate(rule_of(case), sc, n_sims=P.n_sims, seed=P.seed + i)
        cals.append(cal)
        rows.append({"design": case.label, **cal.row(), "false contradicted": cal.false_contradicted})
    table = pd.DataFrame(rows)[["design", "scenario", "n", "false supported", "power", "false contradicted",
                                "effect", "sims"]]
    return CalibrationResult(provenance=provenance("calibration", P, model="simulation",
                                                   tokens=fingerprint([dataclasses.asdict(c) for c in P.cases])),
                             preset=P, calibrations=cals, table=table)


def run(preset: CalibrationPreset) -> CalibrationResult:
    """Simulate every case of ``preset`` (or read the result back from the cache)."""
    return cached("calibration", {"preset": dataclasses.asdict(preset)}, lambda: _compute(preset))
