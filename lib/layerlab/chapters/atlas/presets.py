"""The layer atlas's presets: one frozen dataclass per profile (issue 18).

``smoke`` runs a 6-layer random tiny Llama on a few hundred tokens (it checks the plumbing); ``cpu`` the
offline SmolLM2-135M-Instruct on about a thousand scored tokens, sized for <= 10 min on two cores by sharing
passes (measure.py); ``gpu`` the hub's base SmolLM2-135M on 64k tokens. Token budgets are scored tokens;
layers are 0-based (``None``: all).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from layerlab.core.protocol import Preset, make_preset
from layerlab.data.corpora import ALL_SOURCES

__all__ = ["PRESETS", "AtlasPreset", "preset"]


@dataclass(frozen=True, kw_only=True)
class AtlasPreset(Preset):
    """Settings of one profile (pick one with :func:`preset`). Lists are stored as tuples."""

    model: str  # layerlab.core.models.load_model name (hub id, local folder, smollm2-135m, tiny-<family>)
    tiny_layers: int | None = None  # tiny-* models only: depth of the random model
    layers: tuple[int, ...] | None = None  # the layers to measure (None: every layer)
    window: int = 128
    tokens: int = 1_016  # scored tokens (windows of ``window`` ids from the test split, one per document first)
    sources: tuple[str, ...] = ALL_SOURCES  # corpora of the test split (13 test documents; the family uses its own)
    batch_size: int = 4
    lens_positions: int = 16  # positions per window read through both logit lenses
    member_positions: int = 2  # positions per window whose residual members are decomposed (full vocabulary)
    member_chunk: int = 4  # read positions per full-vocabulary readout chunk
    jacobian_samples: int = 8  # windows (distinct documents first) whose last token gets block Jacobians
    coupling_k: int = 10  # K of m_K (Aubry et al.; clipped to d)
    # recovery (Wietrzykowski 2026, finding 3), "where cheap": per layer, 50% additive noise on the block, then a
    # short fixed-length AdamW fine-tune of that block on validation-split windows (documents the atlas never
    # reads), beside the same fine-tune without noise; both evaluated before and after on the atlas's first
    # windows. Lenses: the noise damage and the fraction of it left. 0 steps: no recovery lenses.
    recovery_steps: int = 4
    recovery_eval_windows: int = 2  # atlas windows (distinct documents first) the fine-tune is evaluated on
    recovery_batch: int = 1  # validation windows per step
    recovery_window: int = 64  # ids per fine-tuning window
    recovery_sigma: float = 0.5
    recovery_lr: float = 1e-3
    family_min_depth: int = 4  # the family section: members with at least this many blocks (and their twins)
    extra_models: tuple[str, ...] = ()  # further models for the cross-model section (the gpu profile's)
    n_tiers: int = 3
    n_boot: int = 1000
    n_perm: int = 2000
    seed: int = 0  # the tiny model's seed, windows, positions, bootstraps and the coupling null


PRESETS: dict[str, AtlasPreset] = {
    "smoke": AtlasPreset(model="tiny-llama", tiny_layers=6, window=32, tokens=248, batch_size=4, lens_positions=8,
                         member_positions=2, jacobian_samples=3, coupling_k=8, recovery_steps=2,
                         recovery_eval_windows=1, recovery_window=32, n_boot=200, n_perm=500,
                         family_min_depth=2),
    # measured 2026-12-03: 270 s for run(preset("cpu")) from a cache holding the converted model, on 2 idle
    # AVX-512 cores (about 2.5x that on AVX2 machines); the 4 x 30 prefix-cached suffix sweeps dominate.
    "cpu": AtlasPreset(model="smollm2-135m"),
    "gpu": AtlasPreset(model="HuggingFaceTB/SmolLM2-135M", device="cuda", window=1024, tokens=65_472, batch_size=16,
                       lens_positions=64, member_positions=4, member_chunk=8, jacobian_samples=32,
                       recovery_steps=50, recovery_eval_windows=8, recovery_batch=4,
                       recovery_window=256, n_boot=2000,
                       n_perm=10_000,
                       extra_models=("EleutherAI/pythia-160m", "EleutherAI/pythia-410m", "meta-llama/Llama-3.2-1B")),
}


def preset(profile: str, **overrides: Any) -> AtlasPreset:
    """``PRESETS[profile]`` with ``overrides`` (e.g. ``model="tiny-qwen2", tokens=512``); unknown profiles or
    fields fail clearly."""
    return make_preset(PRESETS, profile, **overrides)
