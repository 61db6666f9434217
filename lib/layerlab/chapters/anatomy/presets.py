"""The anatomy chapter's presets: one frozen dataclass per profile (Wietrzykowski 2026, arXiv:2603.19348).

``smoke`` runs an 18-layer random tiny Llama on a few hundred tokens (it checks the plumbing, not the
paper); ``cpu`` the offline SmolLM2-135M-Instruct (Q4_1 dequantised to float32), sized for about a quarter
of an hour on two cores; ``gpu`` the hub's base SmolLM2-135M (the paper's model) with the full protocol.
Token budgets are scored tokens; layers are 0-based.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from layerlab.core.protocol import Preset, make_preset

__all__ = ["DECIDING", "PRESETS", "PRIMARY_OPS", "SECONDARY_OPS", "AnatomyPreset", "preset"]

#: A ``budget_force`` entry: the rows that decide A5 and A7 go on to the last look, chosen at each look from
#: the evidence so far (``layerlab.chapters.anatomy.budget.deciding_rows``).
DECIDING: str = "deciding A5/A7"


@dataclass(frozen=True, kw_only=True)
class AnatomyPreset(Preset):
    """Settings of one profile (pick one with :func:`preset`). Lists given for tuple fields (papermill
    passes lists) are stored as tuples."""

    model: str  # layerlab.core.models.load_model name
    null_seed: int = 1  # seed of the random-init null model N1
    tiny_layers: int | None = None        # tiny-* models only: depth of the random model
    window: int = 256
    batch_size: int = 8
    # adaptive token budget of the ablation profile (chapters/anatomy/budget.py): documents at each look,
    # the share of the 5% level spent there, windows per document at each look (primary operators at
    # ``window`` tokens, secondary ones at ``budget_window_small``), the secondary ops' last look, and what
    # always goes on to the last look: a layer (every primary operator on it), one "op@layer"
    # (budget.DECIDING_A5_A7: every neighbour-average row that can decide A5 or A7), or DECIDING (the rows
    # that do decide them, chosen at each look: budget.deciding_rows)
    budget_docs: tuple[int, ...] = (8, 16, 32)
    budget_weights: tuple[float, ...] = (0.25, 0.25, 0.5)
    budget_windows: tuple[int, ...] = (1, 2, 4)
    budget_window_small: int = 64
    budget_windows_small: tuple[int, ...] = (1, 2, 4)
    budget_looks_small: int = 2
    budget_force: tuple[int | str, ...] = ()
    calib_tokens: int = 4_096             # mean-ablation calibration (validation split)
    sentences: int = 10                   # the paper's 10-sentence protocol
    sentence_ops: tuple[str, ...] = ("skip", "neighbour_avg", "skip_attn", "skip_mlp", "mean")
    sample_docs: int = 8                  # documents of the replacement and manipulation samples
    sample_window: int = 256              # their window length
    replacement_tokens: int = 4_096
    replacement_ks: tuple[int, ...] = (1, 2, 4, 9, 16)
    replacement_single: tuple[int, ...] = (3, 8, 11, 14, 17, 26)
    manip_tokens: int = 4_096
    alphas: tuple[float, ...] = (0.5, 0.7, 0.8, 0.9, 0.95, 1.05)
    writer_alphas: tuple[float, ...] = (0.9,)  # α values also run on the residual writers only
    manip_single: tuple[int, ...] = (11, 17)
    manip_spread: tuple[int, ...] = (4, 12, 20, 27)  # A10's target: fixed in advance, not chosen by any effect
    quality_margin_pct: float = 5.0       # A10: an edit "preserves quality" if its ΔPPL% CI lies below this
    recovery_layers: tuple[int, ...] = (8, 11, 14, 17, 3, 25)
    recovery_control_layer: int = 11      # σ = 0 fine-tune control
    recovery_sigmas: tuple[float, ...] = (0.5,)
    recovery_kinds: tuple[str, ...] = ("additive",)
    recovery_scopes: tuple[str, ...] = ("layer",)
    recovery_seeds: tuple[int, ...] = (0,)
    recovery_steps: int = 20
    recovery_eval_every: int = 5
    recovery_lr: float = 1e-4
    recovery_batch: int = 2
    recovery_window: int = 128
    recovery_train_tokens: int = 8_192
    recovery_eval_tokens: int = 1_024
    recovery_stop: bool = True            # end a perturbed run at recovery (the σ = 0 control runs to the cap)
    n_boot: int = 2000
    n_shuffles: int = 50
    seed: int = 0  # the trained model's seed (tiny models), windows and bootstraps


PRESETS: dict[str, AnatomyPreset] = {
    "smoke": AnatomyPreset(model="tiny-llama", tiny_layers=18, window=64, sample_window=64, batch_size=8,
                           budget_docs=(8, 12), manip_spread=(4, 12),
                           budget_weights=(0.5, 0.5), budget_windows=(1, 1), budget_window_small=32,
                           budget_windows_small=(1, 1), calib_tokens=128, sentences=2, replacement_tokens=128,
                           replacement_ks=(1, 9), replacement_single=(8,), manip_tokens=128, alphas=(0.5, 0.9),
                           manip_single=(11,), recovery_layers=(8, 11, 14, 17), recovery_steps=4,
                           recovery_eval_every=2, recovery_lr=1e-3, recovery_window=32, recovery_train_tokens=256,
                           recovery_eval_tokens=64, n_boot=200, n_shuffles=5),
    # adaptive budget: every (operator, layer) on 8 documents x 1 window (2,040 tokens; secondary operators
    # 8 x 63 tokens, one look), undecided ones on 16 x 2, then 32 documents x 4 windows (32,130 tokens: one
    # document holds fewer). The rows that decide A5 and A7 always reach the last look (DECIDING: at the
    # 2026-12-06 AMD EPYC's ~165 GFLOP/s about 35 s each there); the secondary operators, which no claim
    # reads, stop at the first look to pay for them.
    # Recovery (A9): 8 layers x 3 seeds, lr 1e-3 on 64-token batches, evaluated every 2 steps up to 12. In
    # probes (seed 0, 2026-12-04) lr 1e-4 recovered no layer in 10 steps, 5e-4 censored layers 2 and 22 at 12,
    # and 1e-3 recovered layers 2, 8, 14, 22 at steps 10, 4, 5, 10: the rate at which steps differ by layer.
    "cpu": AnatomyPreset(model="smollm2-135m", calib_tokens=1_020, sample_window=128,
                         sentence_ops=("skip", "neighbour_avg"), budget_force=(DECIDING,), budget_looks_small=1,
                         replacement_tokens=508,
                         replacement_ks=(1, 2, 4, 9, 16), replacement_single=(3, 11, 17, 26),
                         manip_tokens=508, alphas=(0.5, 0.9, 1.05), recovery_layers=(2, 5, 8, 11, 14, 17, 22, 27),
                         recovery_seeds=(0, 1, 2), recovery_lr=1e-3, recovery_steps=12, recovery_eval_every=2,
                         recovery_batch=1, recovery_window=64, recovery_eval_tokens=256),
    "gpu": AnatomyPreset(model="HuggingFaceTB/SmolLM2-135M", device="cuda", batch_size=32, sample_docs=32,
                         budget_windows=(16, 64, 160), budget_window_small=256, budget_windows_small=(4, 16, 40),
                         budget_looks_small=3, budget_force=tuple(range(30)), calib_tokens=65_536,
                         replacement_tokens=131_072,
                         replacement_ks=tuple(range(1, 29)), replacement_single=tuple(range(1, 30)),
                         manip_tokens=131_072, writer_alphas=(0.5, 0.7, 0.8, 0.9, 0.95, 1.05),
                         recovery_layers=tuple(range(30)), recovery_sigmas=(0.1, 0.5, 1.0),
                         recovery_kinds=("additive", "multiplicative"), recovery_scopes=("layer", "all"),
                         recovery_seeds=(0, 1, 2), recovery_steps=200, recovery_eval_every=10, recovery_batch=8,
                         recovery_window=256, recovery_train_tokens=2_000_000, recovery_eval_tokens=16_384),
}

#: The operators run on the large protocol; the others run on the documented subset.
PRIMARY_OPS: tuple[str, ...] = ("skip", "neighbour_avg")
SECONDARY_OPS: tuple[str, ...] = ("skip_attn", "skip_mlp", "mean")


def preset(profile: str, **overrides: Any) -> AnatomyPreset:
    """``PRESETS[profile]`` with ``overrides`` (e.g. ``seed=1, budget_force=(13, "neighbour_avg@14")``); unknown
    profiles or fields fail clearly."""
    return make_preset(PRESETS, profile, **overrides)
