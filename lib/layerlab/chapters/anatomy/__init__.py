"""Chapter 2, "Anatomy": Wietrzykowski, *Anatomical Heterogeneity in Transformer Language Models*
(arXiv:2603.19348) rebuilt on SmolLM2-135M — weight predictability and the −0.5 delta-correlation null,
regression-generated weights, the ablation profile, five weight manipulations and recovery after noise.

The chapter protocol (``layerlab.core.protocol``): ``PRESETS``/``preset`` (presets.py),
``run(preset) -> AnatomyResult`` (run.py; the experiments are analysis.py, the metrics
``layerlab.metrics.{weights,predictability,ablation,manipulation,recovery}``), ``claims(result)``
(claims.py) and ``plots`` (plots.py). The chapter does not use the shared trained family.
"""

from layerlab.chapters.anatomy import plots, prose
from layerlab.chapters.anatomy.claims import claims, summary
from layerlab.chapters.anatomy.presets import PRESETS, AnatomyPreset, preset
from layerlab.chapters.anatomy.run import AnatomyResult, run

USES_FAMILY = False
"""``run`` loads its own model (and random-init null); it needs no ``layerlab.training.family.get_family``."""

__all__ = ["PRESETS", "USES_FAMILY", "AnatomyPreset", "AnatomyResult", "claims", "plots", "preset", "prose", "run",
           "summary"]
