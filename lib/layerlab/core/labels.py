"""How the book labels the models its results come from."""

from __future__ import annotations

__all__ = ["MODEL_LABELS", "model_label"]

MODEL_LABELS = {"smollm2-135m": "SmolLM2-135M-Instruct-Q4_1"}
"""How the book labels results of an offline model: the offline SmolLM2 is the *Instruct* model,
quantised to Q4_1 and dequantised (not the base SmolLM2-135M of the papers)."""


def model_label(name: str) -> str:
    """The label results of ``name`` carry in tables and prose: ``"SmolLM2-135M-Instruct-Q4_1"`` for the
    offline SmolLM2, ``"tiny-llama (random, smoke)"`` for a tiny random model, a hub id or folder as given."""
    if name in MODEL_LABELS:
        return MODEL_LABELS[name]
    if name.startswith("tiny-"):
        return f"{name} (random, smoke)"
    return name
