"""One package per book chapter (``notebooks/<name>.ipynb``), each with the same files: ``presets``
(frozen dataclasses per profile), ``run`` (preset -> typed result), ``claims`` (result -> claim rows)
and ``plots`` (result -> figures). Chapters never import each other."""

CHAPTERS = ("residual", "anatomy", "coupling", "diversity", "atlas", "growth", "calibration")
"""The chapter packages, in book order."""
