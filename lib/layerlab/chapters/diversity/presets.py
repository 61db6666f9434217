"""Presets of the diversity chapter (Kamigaito et al. 2025, arXiv:2505.24009; spec
``shared/papers/diversity.md`` sections 3.7 and 6).

Profiles: ``smoke`` (tiny random Llama, seconds; used by the tests), ``cpu`` (the offline
SmolLM2-135M-Instruct on the four offline tasks, 2 cores), ``gpu`` (paper scale: Llama-3-8B on SST-2,
RTE, AG News and ARC from the hub; not runnable offline, but selectable and validated). The model's
forwards run on ``device`` (``cuda`` for ``gpu``); member features come back to the CPU
(``layerlab.metrics.members.collect``) and the decompositions run there in float64.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pandas as pd

from layerlab.core.protocol import Preset, make_preset

MODEL_LABELS = {"smollm2-135m": "SmolLM2-135M-Instruct-Q4_1", "tiny-llama": "tiny random Llama"}
"""How the book names a preset's model (provenance); other names are shown as they are."""


@dataclass(frozen=True, kw_only=True)
class DiversityPreset(Preset):
    model: str  # layerlab model name or hub id
    tasks: tuple[str, ...]  # offline task names (tasks.TASK_NAMES) or hub task names (tasks.HUB_TASKS)
    n_train: int  # training examples per task (few-shot pool + linear head)
    n_test: int  # analysed examples per task
    shots: int  # in-context examples per prompt
    max_words: int  # clip long texts
    lm_windows: int  # T-LM: held-out windows
    lm_window: int  # T-LM: tokens per window
    lm_positions: int  # T-LM: scored positions per window
    null_examples: int  # random-init null: examples of the first task (train and test each)
    family_profile: str | None  # layerlab.training.family.get_family(profile); None skips the depth family
    family_task: str  # task read with a linear head on every family member
    family_examples: int  # train and test examples per family member
    n_boot: int
    seed: int = 0

    @property
    def model_label(self) -> str:
        return MODEL_LABELS.get(self.model, self.model)


PRESETS: dict[str, DiversityPreset] = {
    "smoke": DiversityPreset(
        model="tiny-llama",
        tasks=("sent", "topic"),
        n_train=24,
        n_test=24,
        shots=1,
        max_words=12,
        lm_windows=2,
        lm_window=32,
        lm_positions=4,
        null_examples=12,
        family_profile="smoke",
        family_task="topic",
        family_examples=16,
        n_boot=100,
    ),
    "cpu": DiversityPreset(
        model="smollm2-135m",
        tasks=("sent", "unc", "topic", "def"),
        n_train=64,
        n_test=128,
        shots=0,
        max_words=28,
        lm_windows=8,
        lm_window=96,
        lm_positions=8,
        null_examples=48,
        family_profile="cpu",
        family_task="topic",
        family_examples=64,
        n_boot=500,
    ),
    "gpu": DiversityPreset(
        model="meta-llama/Meta-Llama-3-8B",
        tasks=("sst2", "rte", "ag_news", "arc_easy"),
        n_train=256,
        n_test=1000,
        shots=4,
        max_words=200,
        lm_windows=64,
        lm_window=512,
        lm_positions=32,
        null_examples=256,
        family_profile="gpu",
        family_task="topic",
        family_examples=512,
        n_boot=2000,
        dtype="bfloat16",
        device="cuda",
    ),
}


def preset(profile: str, **overrides) -> DiversityPreset:
    """``PRESETS[profile]`` with ``overrides`` (e.g. ``seed=1``); unknown profiles or fields fail clearly."""
    return make_preset(PRESETS, profile, **overrides)


def describe(p: DiversityPreset) -> pd.DataFrame:
    """The preset as a one-column table: the chapter's fields, then dtype and seed (and the device when
    it is not the CPU, which no profile of this chapter uses)."""
    rows = [f.name for f in dataclasses.fields(p) if f.name not in ("profile", "device", "dtype", "seed")]
    rows += ["dtype", "seed"] + (["device"] if p.device != "cpu" else [])
    d = dataclasses.asdict(p)
    return pd.DataFrame([{k: d[k] for k in rows}]).T.rename(columns={0: p.profile})
