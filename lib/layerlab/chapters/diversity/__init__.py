"""The diversity chapter (Kamigaito et al. 2025, arXiv:2505.24009): transformer members as an ensemble,
MSE = Bias - Diversity (Theorem 1) and its information-theoretic analogue. The chapter protocol of
:mod:`layerlab.core.protocol`: ``PRESETS``, ``preset``, ``run``, ``claims`` and ``plots``."""

from layerlab.chapters.diversity import plots
from layerlab.chapters.diversity.claims import claims, verdicts
from layerlab.chapters.diversity.presets import PRESETS, DiversityPreset, describe, preset
from layerlab.chapters.diversity.prose import sentences
from layerlab.chapters.diversity.result import DiversityResult
from layerlab.chapters.diversity.run import run

USES_FAMILY = True
"""``run`` reads the shared depth family (``layerlab.training.family.get_family``)."""

__all__ = ["PRESETS", "USES_FAMILY", "DiversityPreset", "DiversityResult", "claims", "describe", "plots", "preset",
           "run", "sentences", "verdicts"]
