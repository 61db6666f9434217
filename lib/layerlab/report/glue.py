"""Numbers and figures into the book's prose: one call per result instead of one ``glue`` per number.

``glue_values("anat", {"r2_gate": 0.12, "n_tokens": 2040})`` glues ``anat_r2_gate`` and
``anat_n_tokens`` (numpy scalars become plain Python numbers, which myst-nb can format with
``{glue:text}`name:.3f```); nested mappings are flattened with ``_``. Outside a notebook (tests,
scripts) nothing is displayed and the flattened mapping is returned all the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def plain(value: Any) -> Any:
    """A value myst-nb can glue and format: Python numbers for numpy scalars and 0-d arrays/tensors."""
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, np.generic):
        value = value.item()
    return value


def flatten(prefix: str, mapping: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a": {"b": 1}}`` with prefix ``p`` -> ``{"p_a_b": 1}`` (values made :func:`plain`)."""
    out: dict[str, Any] = {}
    for k, v in mapping.items():
        name = f"{prefix}_{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(flatten(name, v))
        else:
            out[name] = plain(v)
    return out


def glue_values(prefix: str, mapping: Mapping[str, Any]) -> dict[str, Any]:
    """Glue every value of ``mapping`` as ``<prefix>_<key>`` (not displayed); return what was glued."""
    values = flatten(prefix, mapping)
    try:
        from myst_nb import glue
    except ImportError:  # outside the book's environment: nothing to glue into
        return values
    for name, v in values.items():
        glue(name, v, display=False)
    return values


def glue_figure(name: str, fig: Any) -> Any:
    """Glue a matplotlib figure under ``name`` (for ``{glue:figure}``) and close it; return it."""
    import matplotlib.pyplot as plt

    try:
        from myst_nb import glue
    except ImportError:
        return fig
    glue(name, fig, display=False)
    plt.close(fig)
    return fig
