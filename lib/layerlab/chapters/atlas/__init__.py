"""The layer atlas (issue 18): every lens of the three papers on every layer of one model, side by side,
from shared passes, and whether the lenses agree (Spearman over layers with permutation p, Holm over pairs,
tiers by clustering the layers on all lenses).

The chapter protocol (``layerlab.core.protocol``): ``PRESETS``/``preset`` (presets.py),
``run(preset) -> AtlasResult`` (run.py; the measurement is measure.py, the statistics analysis.py, the
metrics ``layerlab.metrics.*``), ``claims(result)`` (claims.py) and ``plots`` (plots.py). The CLI is
``python -m layerlab atlas MODEL`` (MODEL may be ``family:<member>`` or ``family-init:<member>``). The family
section (``family.run_family``) runs the atlas on every trained family member with at least
``family_min_depth`` blocks and on its random-init twin, and asks which agreements are learned;
``family.run_models`` runs it on the gpu profile's further models.
"""

from layerlab.chapters.atlas import plots
from layerlab.chapters.atlas.claims import claims, pair_claims, prose, summary
from layerlab.chapters.atlas.export import write
from layerlab.chapters.atlas.family import FamilyAtlas, run_family, run_models
from layerlab.chapters.atlas.presets import PRESETS, AtlasPreset, preset
from layerlab.chapters.atlas.run import AtlasResult, run

USES_FAMILY = True
"""The family section reads the trained family (the book build trains it first)."""

__all__ = ["PRESETS", "USES_FAMILY", "AtlasPreset", "AtlasResult", "FamilyAtlas", "claims", "pair_claims", "plots",
           "preset", "prose", "run", "run_family", "run_models", "summary", "write"]
