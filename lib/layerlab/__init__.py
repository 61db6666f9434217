"""layerlab: how transformer layers differ.

A small, tested library behind the layerlab book, reproducing and testing Kamigaito et al. 2025
(diversity), Aubry et al. ICLR 2025 (coupling) and Wietrzykowski 2026 (anatomy). Packages by role:
``core`` (models, architecture adapter, residual capture, Jacobians, cache), ``data``, ``metrics``
(one defining equation per module), ``training``, ``report`` (statistics, claims, plots) and
``chapters/<name>`` (what each book chapter does with them).

The public API is re-exported here and imported on first use (``import layerlab as ll`` is cheap)::

    import layerlab as ll
    model, tok = ll.load_model("smollm2-135m")
    with ll.capture(model, ["block_in"]) as cache:
        model(ids)
"""

from __future__ import annotations

import importlib
from typing import Any

from layerlab.core.version import __version__

# public name -> (module, attribute). One place; docs/api and tests read it.
API: dict[str, tuple[str, str]] = {
    # models and the architecture adapter
    "load_model": ("layerlab.core.models", "load_model"),
    "tiny_model": ("layerlab.core.models", "tiny_model"),
    "KNOWN_MODELS": ("layerlab.core.models", "KNOWN_MODELS"),
    "view": ("layerlab.core.arch", "view"),
    "n_params": ("layerlab.core.arch", "n_params"),
    # the residual stream and the logit lens
    "capture": ("layerlab.core.residual", "capture"),
    "run_with_capture": ("layerlab.core.residual", "run_with_capture"),
    "logit_lens": ("layerlab.core.residual", "lens_logits"),
    "contributions": ("layerlab.core.residual", "contributions"),
    # block Jacobians (Aubry et al.)
    "block_jacobians": ("layerlab.core.jacobians", "frozen_context_jacobians"),
    "reference_jacobians": ("layerlab.core.jacobians", "reference_jacobians"),
    "coupling": ("layerlab.metrics.coupling", "coupling"),
    "depth_coupling": ("layerlab.metrics.coupling", "depth_coupling"),
    # ablation and interventions (Wietrzykowski)
    "ablate": ("layerlab.metrics.ablation", "ablate"),
    "token_nll": ("layerlab.metrics.ablation", "token_nll"),
    "evaluate_interventions": ("layerlab.metrics.ablation", "evaluate_interventions"),
    "Intervention": ("layerlab.metrics.ablation", "Intervention"),
    # bias-diversity decomposition (Kamigaito et al.)
    "decompose_mse": ("layerlab.metrics.diversity", "decompose_mse"),
    # data and cache
    "token_windows": ("layerlab.data.corpora", "token_windows"),
    "cache_dir": ("layerlab.core.cache", "cache_dir"),
}

__all__ = ["API", "__version__", *API]


def __getattr__(name: str) -> Any:
    if name in API:
        module, attr = API[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'layerlab' has no attribute {name!r}; the public API is: {', '.join(sorted(API))}")


def __dir__() -> list[str]:
    return sorted(__all__)
