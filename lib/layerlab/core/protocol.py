"""The chapter protocol's shared pieces: the preset base class, :func:`make_preset` and provenance.

Every chapter package (``layerlab.chapters.<name>``) exposes the same five names (style guide,
"One chapter shape")::

    PRESETS: dict[str, Preset]                  # presets.py: one frozen dataclass per profile
    preset(profile, **overrides) -> Preset      # picks one; unknown profiles or fields fail clearly
    run(preset) -> <Name>Result                 # run.py: a typed, cached result with provenance
    claims(result) -> list[Claim]               # claims.py: the chapter's claim rows
    plots                                       # plots.py: figure functions that take the result

Presets carry ``device`` and ``dtype`` so that a chapter's run moves its models and tensors
consistently; analysis keeps its own precision (no autocast).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from layerlab.core.profiles import PROFILE_NAMES, select
from layerlab.core.version import __version__

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True, kw_only=True)
class Preset:
    """Fields every chapter preset has. ``profile`` is filled in by :func:`make_preset`."""

    profile: str = ""
    device: str = "cpu"  # where models and tensors of the run live ("cpu", "cuda", "cuda:1", ...)
    dtype: str = "float32"  # the models' parameter dtype (a key of DTYPES)

    def __post_init__(self) -> None:
        # papermill passes list parameters; presets are frozen and hashed, so lists become tuples
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, list):
                object.__setattr__(self, f.name, tuple(v))

    @property
    def torch_dtype(self) -> torch.dtype:
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r} in the preset: choose one of {', '.join(DTYPES)}")
        return DTYPES[self.dtype]


P = TypeVar("P", bound=Preset)


def make_preset(presets: Mapping[str, P], profile: str, **overrides: Any) -> P:
    """``presets[profile]`` with ``overrides`` applied (``dataclasses.replace``) and ``profile`` set.
    An unknown profile or field name raises one error that lists the valid choices."""
    base = select(presets, profile)
    names = {f.name for f in dataclasses.fields(base)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ValueError(f"unknown preset field(s) {unknown} for {type(base).__name__}: "
                         f"valid fields are {', '.join(sorted(names))}")
    return dataclasses.replace(base, profile=profile, **overrides)


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """Where a result comes from: enough to rerun it and to tell two results apart."""

    chapter: str
    profile: str
    model: str  # the model as the book labels it (e.g. "SmolLM2-135M-Instruct-Q4_1")
    tokens: str  # fingerprint of the token ids (or data) the result was computed on
    seed: int
    device: str
    dtype: str
    library_version: str = __version__
    source: str = ""  # source fingerprint of the chapter package's run module


def provenance(chapter: str, preset: Preset, *, model: str, tokens: str, seed: int = 0) -> Provenance:
    """A :class:`Provenance` for ``preset``'s run of ``chapter`` (source fingerprint of its run module)."""
    from layerlab.core.fingerprints import module_fingerprint

    return Provenance(chapter=chapter, profile=preset.profile, model=model, tokens=tokens, seed=seed,
                      device=preset.device, dtype=preset.dtype,
                      source=module_fingerprint(f"layerlab.chapters.{chapter}.run"))


__all__ = ["DTYPES", "PROFILE_NAMES", "Preset", "Provenance", "make_preset", "provenance"]
