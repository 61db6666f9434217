"""Chapter 1, "Reading the residual stream": held-out perplexity, the recompute logit lens
(nostalgebraist 2020) and the frozen lens (Kamigaito et al. 2025, Eq. 1) at every depth, and the
residual norm by depth, for SmolLM2-135M and its random-init twin.

The chapter protocol (``layerlab.core.protocol``): ``PRESETS``/``preset`` (presets.py),
``run(preset) -> ResidualResult`` (run.py; the measurement itself is analysis.py), ``claims(result)``
(claims.py) and ``plots`` (plots.py). The chapter does not use the shared trained family.
"""

from layerlab.chapters.residual import plots
from layerlab.chapters.residual.claims import claims, prose
from layerlab.chapters.residual.presets import PRESETS, ResidualPreset, preset
from layerlab.chapters.residual.run import DocumentUnits, Interval, ResidualResult, run

USES_FAMILY = False
"""``run`` loads its own model; it needs no ``layerlab.training.family.get_family``."""

__all__ = ["PRESETS", "USES_FAMILY", "DocumentUnits", "Interval", "ResidualPreset", "ResidualResult", "claims",
           "plots", "preset", "prose", "run"]
