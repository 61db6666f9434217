"""The growth chapter (Wietrzykowski 2026, arXiv:2603.19348, findings 5-6): Growth Transformer
Training against uniform training, progressive stacking and MSLT at matched tokens, FLOPs and
wall-clock, and the book's model family. The chapter protocol: ``PRESETS``, ``preset``, ``run``,
``claims``, ``plots`` (see :mod:`layerlab.core.protocol`)."""

from layerlab.chapters.growth import plots
from layerlab.chapters.growth.claims import claims
from layerlab.chapters.growth.presets import PRESETS, GrowthPreset, describe, preset
from layerlab.chapters.growth.result import GrowthResult
from layerlab.chapters.growth.run import run

USES_FAMILY = True
"""``run`` loads the shared trained family (its table and checkpoint curves are part of the result)."""

__all__ = ["PRESETS", "USES_FAMILY", "GrowthPreset", "GrowthResult", "claims", "describe", "plots", "preset", "run"]
