"""The coupling chapter: Aubry, Meng, Sugolov, Papyan, *Transformer Block Coupling and its Correlation with
Generalization in LLMs*, ICLR 2025 (arXiv:2407.07810; spec ``coupling.md``).

The chapter protocol (``layerlab.core.protocol``): ``PRESETS``/``preset`` (presets.py), ``run(preset) ->
CouplingResult`` (run.py; the runners are depth.py for one model, members.py for the trained family and
stats.py for the statistics), ``claims(result)`` (claims.py) and ``plots`` (plots.py).
"""

from layerlab.chapters.coupling import plots
from layerlab.chapters.coupling.claims import claims, verdict_glue
from layerlab.chapters.coupling.presets import PRESETS, PYTHIA_STEPS, CouplingPreset, fig1a_table, preset
from layerlab.chapters.coupling.prose import excess_table, prose_glue
from layerlab.chapters.coupling.run import CouplingResult, run

USES_FAMILY = True
"""``run`` reads the shared trained family (``layerlab.training.family.get_family``)."""

__all__ = ["PRESETS", "PYTHIA_STEPS", "USES_FAMILY", "CouplingPreset", "CouplingResult", "claims", "excess_table",
           "fig1a_table", "plots", "preset", "prose_glue", "run", "verdict_glue"]
