"""Run profiles: ``smoke`` (seconds, tiny random model), ``cpu`` (default book build:
the offline SmolLM2-135M-Instruct and real text on 2 cores) and ``gpu`` (paper scale,
hub models). Each chapter keeps a dict of frozen preset dataclasses and picks one with
:func:`select` (nanoGPT-style config presets); notebooks receive only the name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

PROFILE_NAMES = ("smoke", "cpu", "gpu")

T = TypeVar("T")


def select(presets: Mapping[str, T], name: str) -> T:
    """Return ``presets[name]``; unknown names raise one clear error listing the choices."""
    if not isinstance(name, str) or name not in presets:
        known = ", ".join(repr(k) for k in presets)
        raise ValueError(
            f"unknown profile {name!r}: choose one of {known} "
            "(set it in the notebook's parameters cell or with `make book PROFILE=...`)"
        )
    return presets[name]
