"""The coupling chapter's presets: one frozen :class:`CouplingPreset` per profile, and the Fig. 1a data file.

Aubry, Meng, Sugolov, Papyan, *Transformer Block Coupling and its Correlation with Generalization in
LLMs*, ICLR 2025 (arXiv:2407.07810). Spec: ``coupling.md``. ``smoke`` runs a tiny random Llama and the
tiny trained family, ``cpu`` the offline SmolLM2-135M-Instruct (Q4_1 dequantised) and the ``cpu``
family, ``gpu`` Llama-3-8B, the 28 models of Fig. 1a and Pythia over its checkpoints.

``fig1a_leaderboard.csv``: the Fig. 1a read-off values of the spec (coupling and Open LLM
Leaderboard v1 average, read by eye; low/high columns are the stated reading precision, or the range
of a cluster whose points cannot be separated) with a provenance column; the hub ids are our mapping
of the figure's labels [reconstructed]. Nine points have no read-off values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from layerlab.core.protocol import Preset, make_preset
from layerlab.training.vit import ViTConfig

__all__ = ["FIG1A_CSV", "PRESETS", "PYTHIA_STEPS", "CouplingPreset", "fig1a_table", "preset"]

FIG1A_CSV = Path(__file__).parent / "fig1a_leaderboard.csv"
PYTHIA_STEPS = (128, 256, 512, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 143000)  # Fig. 1b [paper]


@dataclass(frozen=True, kw_only=True)
class CouplingPreset(Preset):
    """One profile of the coupling chapter (see the notebook for what each field drives).

    The main model and its random-init twins run on ``device``; the trained family's members and the
    ViT are small and run on the CPU, where they are trained.
    """

    model: str  # main model: layerlab.core.models.load_model name or hub id
    n_prompts: int  # held-out prompts for the depth-wise analysis
    max_tokens: int  # prompt length cap
    ks: tuple[int, ...]  # K values (released: 10, 30, 50)
    init_seeds: tuple[int, ...]  # random-init twins
    n_init_prompts: int  # prompts per random-init twin
    n_null: int  # prompts with spectrum/rotation nulls and authors_compat endpoints
    panel_layers: tuple[int, ...]  # consecutive blocks of the |A| grid
    token_layers: tuple[int, int]  # layer pair of the token-wise analysis
    n_tokens: int  # token-wise grid size
    n_context_prompts: int = 1  # prompts with context (cross-token) Jacobians: a full-sequence pass each
    family_profile: str  # layerlab.training.family profile
    family_prompts: int
    family_max_tokens: int
    family_ks: tuple[int, ...]
    checkpoint_filter: dict = field(default_factory=dict)  # family members followed over training
    locality_filter: dict = field(default_factory=dict)  # members of the circle graphs / locality test (C7)
    quant_filter: dict = field(default_factory=dict)  # members of the Q4_1 round-trip control
    vit: tuple[ViTConfig, ...] = (ViTConfig(),)
    vit_images: int = 16
    vit_ks: tuple[int, ...] = (5, 10)
    speed_layers: tuple[int, ...] = (0,)
    fig1a_models: tuple[str, ...] = ()  # gpu only: the 28 models of Fig. 1a (hub ids)
    pythia: tuple[str, ...] = ()  # gpu only: Pythia runs followed over PYTHIA_STEPS
    pythia_steps: tuple[int, ...] = ()
    seed: int = 0  # prompt sample and every bootstrap / permutation null


def fig1a_table() -> pd.DataFrame:
    """The Fig. 1a read-off values (28 rows; NaN where the spec gives no value)."""
    return pd.read_csv(FIG1A_CSV)


PRESETS: dict[str, CouplingPreset] = {
    "smoke": CouplingPreset(
        model="tiny-llama", n_prompts=3, max_tokens=24, ks=(4, 8, 16), init_seeds=(0, 1), n_init_prompts=2,
        n_null=3, n_context_prompts=2, panel_layers=(0, 1, 2, 3), token_layers=(1, 2), n_tokens=5,
        family_profile="smoke",
        family_prompts=2, family_max_tokens=24, family_ks=(4, 8), checkpoint_filter={"depth": 2, "width": 32},
        locality_filter={"depth": 3}, quant_filter={"depth": 3},
        vit=(ViTConfig(d_model=16, n_layers=3, steps=30, n_checkpoints=3),), vit_images=2, vit_ks=(4, 8)),
    "cpu": CouplingPreset(
        # 16 prompts with nulls (C1), 6 of them shared with 2 random-init twins (C2/C3/C8 need >= 6 paired
        # prompts: the exact sign-flip test's smallest p is 2^-n); was 3 twins x 2 prompts, 4 prompts with nulls
        model="smollm2-135m", n_prompts=16, max_tokens=64, ks=(10, 30, 50), init_seeds=(0, 1),
        n_init_prompts=6, n_null=16, panel_layers=tuple(range(8, 16)), token_layers=(12, 13), n_tokens=12,
        family_profile="cpu", family_prompts=4, family_max_tokens=64, family_ks=(5, 10, 20),
        checkpoint_filter={"depth": 4, "width": 64, "lr": 3e-3},
        locality_filter={"depth": 12, "width": 64, "lr": 3e-3}, quant_filter={"width": 64, "lr": 3e-3, "seed": 0},
        vit=(ViTConfig(), ViTConfig(dataset="fashion-mnist", patch=4, eval_images=2000)), vit_images=16),
    "gpu": CouplingPreset(
        model="meta-llama/Meta-Llama-3-8B", n_prompts=100, max_tokens=64, ks=(10, 30, 50), init_seeds=(0, 1, 2),
        n_init_prompts=16, n_null=16, panel_layers=tuple(range(9, 17)), token_layers=(12, 13), n_tokens=12,
        family_profile="gpu", family_prompts=16, family_max_tokens=64, family_ks=(10, 30, 50),
        checkpoint_filter={"depth": 8, "width": 256, "lr": 1e-3},
        locality_filter={"depth": 24, "width": 256, "lr": 1e-3}, quant_filter={"width": 256, "lr": 1e-3, "seed": 0},
        vit=(ViTConfig(), ViTConfig(dataset="fashion-mnist", patch=4, d_model=64, n_layers=6, steps=3000)),
        vit_images=64, fig1a_models=tuple(fig1a_table()["hub_id"]),
        pythia=("EleutherAI/pythia-6.9b", "EleutherAI/pythia-12b"), pythia_steps=PYTHIA_STEPS, device="cuda"),
}


def preset(profile: str, **overrides: Any) -> CouplingPreset:
    """``PRESETS[profile]`` with ``overrides`` (e.g. ``seed=1``); unknown profiles or fields fail clearly,
    and a preset that lists Fig. 1a models must list all 28."""
    p = make_preset(PRESETS, profile, **overrides)
    if len(p.fig1a_models) not in (0, 28):
        raise ValueError(f"the gpu preset must list the 28 Fig. 1a models, got {len(p.fig1a_models)}")
    return p
