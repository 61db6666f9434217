"""The layer atlas (issue 18): every lens of the three papers on every layer of one model, side by side,
from shared passes, and whether the lenses agree (Spearman over layers with permutation p, Holm over pairs,
tiers by clustering the layers on all lenses).

The chapter protocol (``layerlab.core.protocol``): ``PRESETS``/``preset`` (presets.py),
``run(preset) -> AtlasResult`` (run.py; the measurement is measure.py, the statistics analysis.py, the
metrics ``layerlab.metrics.*``), ``claims(result)`` (claims.py) and ``plots`` (plots.py). The CLI is
``python -m layerlab atlas MODEL``. The family section (members of depth 4–12) is not built yet.
"""

from layerlab.chapters.atlas import plots
from layerlab.chapters.atlas.claims import claims, summary
from layerlab.chapters.atlas.export import write
from layerlab.chapters.atlas.presets import PRESETS, AtlasPreset, preset
from layerlab.chapters.atlas.run import AtlasResult, run

USES_FAMILY = False
"""``run`` loads its own model; the trained-family section is not part of this chapter yet."""

__all__ = ["PRESETS", "USES_FAMILY", "AtlasPreset", "AtlasResult", "claims", "plots", "preset", "run", "summary",
           "write"]
