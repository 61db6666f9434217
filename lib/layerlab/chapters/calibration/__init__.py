"""Appendix, "How the verdicts are calibrated": every verdict rule of the book simulated under its
null and under the claimed effect, at the number of units the chapters really have.

The chapter protocol (``layerlab.core.protocol``): ``PRESETS``/``preset`` (presets.py),
``run(preset) -> CalibrationResult`` (run.py; the simulations are :mod:`layerlab.report.calibration`),
``claims(result)`` (claims.py) and ``plots`` (plots.py). No model and no trained family.
"""

from layerlab.chapters.calibration import plots
from layerlab.chapters.calibration.claims import claims, prose
from layerlab.chapters.calibration.presets import CASES, PRESETS, CalibrationPreset, Case, preset
from layerlab.chapters.calibration.run import CalibrationResult, run

USES_FAMILY = False
"""Simulations only: no model, no family."""

__all__ = ["CASES", "PRESETS", "USES_FAMILY", "CalibrationPreset", "CalibrationResult", "Case", "claims", "plots",
           "preset", "prose", "run"]
