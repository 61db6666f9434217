"""Chapter 1, "Reading the residual stream": one preset per profile.

The logit lens (nostalgebraist 2020) and the frozen-denominator readout (Kamigaito et al. 2025, Eq. 1)
on held-out windows; ``smoke`` runs a tiny random model, ``cpu`` the offline SmolLM2-135M-Instruct
(Q4_1 dequantised to float32) and ``gpu`` the hub's base SmolLM2-135M.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from layerlab.core.protocol import Preset, make_preset
from layerlab.data.corpora import ALL_SOURCES

__all__ = ["PRESETS", "ResidualPreset", "preset"]


@dataclass(frozen=True, kw_only=True)
class ResidualPreset(Preset):
    """Chapter-1 parameters for one profile (pick one with :func:`preset`)."""

    model: str  # layerlab.core.models.load_model name
    window: int  # token ids per window (see layerlab.data.corpora)
    windows_per_doc: int  # held-out windows per test document (seeded, stratified: every document counts)
    lens_positions: int  # positions per window read through the lens
    random_windows_per_doc: int = 1  # of those, windows per document also scored by the random-init twin
    sources: tuple[str, ...] = ALL_SOURCES  # corpora of the test split (python-docs adds 7 test documents)
    batch_size: int = 4
    n_boot: int = 1000
    sanity_doc: str = "britannica/shakespeare"  # document for the PPL sanity check
    seed: int = 0  # windows, lens positions and bootstraps; the random-init twin uses seed + 1


PRESETS: dict[str, ResidualPreset] = {
    "smoke": ResidualPreset(model="tiny-llama", window=64, windows_per_doc=2, lens_positions=8, batch_size=4,
                            n_boot=200),
    "cpu": ResidualPreset(model="smollm2-135m", window=1024, windows_per_doc=2, lens_positions=64, batch_size=2,
                          n_boot=1000),
    "gpu": ResidualPreset(model="HuggingFaceTB/SmolLM2-135M", window=2048, windows_per_doc=60, lens_positions=128,
                          random_windows_per_doc=8, batch_size=16, n_boot=2000, device="cuda"),
}


def preset(profile: str, **overrides: Any) -> ResidualPreset:
    """``PRESETS[profile]`` with ``overrides`` (e.g. ``seed=1``); unknown profiles or fields fail clearly."""
    return make_preset(PRESETS, profile, **overrides)
