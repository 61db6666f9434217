"""layerlab: how transformer layers differ.

A small, tested library behind the layerlab book, reproducing and testing Kamigaito et al. 2025
(diversity), Aubry et al. ICLR 2025 (coupling) and Wietrzykowski 2026 (anatomy). Packages by role:
``core`` (models, architecture adapter, residual capture, Jacobians, cache), ``data``, ``metrics``
(one defining equation per module), ``training``, ``report`` (statistics, claims, plots) and
``chapters/<name>`` (what each book chapter does with them).

The public API is re-exported here and imported on first use (``import layerlab as ll`` is cheap)::

    import layerlab as ll
    model, tok = ll.load_model("smollm2-135m")
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    with ll.capture(model, ["block_in"]) as cache:
        model(ids)
    cache["block_in"]  # [L, B, T, d]

``GROUPS`` sorts the names into the sections of the book's API reference; ``API`` is the flat table.
"""

from __future__ import annotations

import importlib
from typing import Any

from layerlab.core.version import __version__

# section of the API reference -> public name -> (module, attribute). One place: the book's API
# reference (book/api_reference.md), the library guide and tests/test_api.py all read it.
GROUPS: dict[str, dict[str, tuple[str, str]]] = {
    "Models and the architecture adapter": {
        "load_model": ("layerlab.core.models", "load_model"),
        "tiny_model": ("layerlab.core.models", "tiny_model"),
        "KNOWN_MODELS": ("layerlab.core.models", "KNOWN_MODELS"),
        "model_label": ("layerlab.core.labels", "model_label"),
        "ModelLoadError": ("layerlab.core.models", "ModelLoadError"),
        "view": ("layerlab.core.arch", "view"),
        "ModelView": ("layerlab.core.arch", "ModelView"),
        "BlockView": ("layerlab.core.arch", "BlockView"),
        "n_params": ("layerlab.core.arch", "n_params"),
    },
    "The residual stream and the logit lens": {
        "capture": ("layerlab.core.residual", "capture"),
        "Capture": ("layerlab.core.residual", "Capture"),
        "POINTS": ("layerlab.core.residual", "POINTS"),
        "run_with_capture": ("layerlab.core.residual", "run_with_capture"),
        "logit_lens": ("layerlab.core.residual", "lens_logits"),
        "norm_scale": ("layerlab.core.residual", "norm_scale"),
        "contributions": ("layerlab.core.residual", "contributions"),
        "Contributions": ("layerlab.core.residual", "Contributions"),
    },
    "Block Jacobians": {
        "block_jacobians": ("layerlab.core.jacobians", "frozen_context_jacobians"),
        "reference_jacobians": ("layerlab.core.jacobians", "reference_jacobians"),
        "output_token_jacobians": ("layerlab.core.jacobians", "output_token_jacobians"),
        "input_token_jacobians": ("layerlab.core.jacobians", "input_token_jacobians"),
        "block_trajectory": ("layerlab.core.jacobians", "block_trajectory"),
    },
    "Coupling and trajectories": {
        "coupling": ("layerlab.metrics.coupling", "coupling"),
        "cross_coupling": ("layerlab.metrics.coupling", "cross_coupling"),
        "svd": ("layerlab.metrics.coupling", "svd"),
        "SVD": ("layerlab.metrics.coupling", "SVD"),
        "depth_coupling": ("layerlab.metrics.coupling", "depth_coupling"),
        "token_coupling": ("layerlab.metrics.coupling", "token_coupling"),
        "CouplingMatrices": ("layerlab.metrics.coupling", "CouplingMatrices"),
        "null_coupling": ("layerlab.metrics.coupling", "null_coupling"),
        "locality": ("layerlab.metrics.coupling", "locality"),
        "line_shape_score": ("layerlab.metrics.trajectories", "line_shape_score"),
        "loglinear_fit": ("layerlab.metrics.trajectories", "loglinear_fit"),
        "LogLinearFit": ("layerlab.metrics.trajectories", "LogLinearFit"),
    },
    "Ablation and interventions": {
        "ablate": ("layerlab.metrics.ablation", "ablate"),
        "OPERATORS": ("layerlab.metrics.ablation", "OPERATORS"),
        "mean_contributions": ("layerlab.metrics.ablation", "mean_contributions"),
        "Intervention": ("layerlab.metrics.ablation", "Intervention"),
        "sweep_interventions": ("layerlab.metrics.ablation", "sweep_interventions"),
        "evaluate_interventions": ("layerlab.metrics.ablation", "evaluate_interventions"),
        "EvalResult": ("layerlab.metrics.ablation", "EvalResult"),
        "token_nll": ("layerlab.metrics.ablation", "token_nll"),
        "effect": ("layerlab.metrics.ablation", "effect"),
        "effect_table": ("layerlab.metrics.ablation", "effect_table"),
        "Tiers": ("layerlab.metrics.ablation", "Tiers"),
    },
    "Manipulation and recovery": {
        "manipulate": ("layerlab.metrics.manipulation", "manipulate"),
        "manipulation_interventions": ("layerlab.metrics.manipulation", "manipulation_interventions"),
        "perturb": ("layerlab.metrics.recovery", "perturb"),
        "recovery_run": ("layerlab.metrics.recovery", "recovery_run"),
        "baseline_nll": ("layerlab.metrics.recovery", "baseline_nll"),
        "CleanInputs": ("layerlab.metrics.recovery", "CleanInputs"),
        "RecoveryCurve": ("layerlab.metrics.recovery", "RecoveryCurve"),
    },
    "Weights and predictability": {
        "component_stack": ("layerlab.metrics.weights", "component_stack"),
        "structure_table": ("layerlab.metrics.weights", "structure_table"),
        "delta_table": ("layerlab.metrics.weights", "delta_table"),
        "predictability_table": ("layerlab.metrics.predictability", "predictability_table"),
        "predict_layers": ("layerlab.metrics.predictability", "predict_layers"),
    },
    "Bias-diversity decomposition and information theory": {
        "decompose_mse": ("layerlab.metrics.diversity", "decompose_mse"),
        "decompose_ce": ("layerlab.metrics.diversity", "decompose_ce"),
        "Decomposition": ("layerlab.metrics.diversity", "Decomposition"),
        "CEDecomposition": ("layerlab.metrics.diversity", "CEDecomposition"),
        "ensemble": ("layerlab.metrics.diversity", "ensemble"),
        "MemberReadout": ("layerlab.metrics.diversity", "MemberReadout"),
        "collect_members": ("layerlab.metrics.members", "collect"),
        "MemberFeatures": ("layerlab.metrics.members", "MemberFeatures"),
        "Readout": ("layerlab.metrics.members", "Readout"),
        "lens_readout": ("layerlab.metrics.members", "lens_readout"),
        "fit_head": ("layerlab.metrics.members", "fit_head"),
        "apply_readout": ("layerlab.metrics.members", "apply_readout"),
        "entropy": ("layerlab.metrics.infotheory", "entropy"),
        "mutual_info": ("layerlab.metrics.infotheory", "mutual_info"),
        "chain_terms": ("layerlab.metrics.infotheory", "chain_terms"),
        "ChainTerms": ("layerlab.metrics.infotheory", "ChainTerms"),
        "bayes_error": ("layerlab.metrics.infotheory", "bayes_error"),
        "error_bounds": ("layerlab.metrics.infotheory", "error_bounds"),
    },
    "Perplexity": {
        "perplexity": ("layerlab.metrics.perplexity", "evaluate"),
        "PerplexityResult": ("layerlab.metrics.perplexity", "PerplexityResult"),
    },
    "Statistics for intervals": {
        "bootstrap_ci": ("layerlab.report.stats", "bootstrap_ci"),
        "paired_bootstrap_ci": ("layerlab.report.stats", "paired_bootstrap_ci"),
        "pearson": ("layerlab.report.stats", "pearson"),
        "spearman": ("layerlab.report.stats", "spearman"),
        "r2_ci": ("layerlab.report.stats", "r2_ci"),
        "CI": ("layerlab.report.stats", "CI"),
        "Corr": ("layerlab.report.stats", "Corr"),
    },
    "Data and cache": {
        "token_windows": ("layerlab.data.corpora", "token_windows"),
        "TokenWindows": ("layerlab.data.corpora", "TokenWindows"),
        "cache_dir": ("layerlab.core.cache", "cache_dir"),
        "cached": ("layerlab.core.cache", "cached"),
    },
}
API: dict[str, tuple[str, str]] = {name: target for group in GROUPS.values() for name, target in group.items()}
"""Public name -> (module, attribute); ``ll.<name>`` imports the module on first use."""

__all__ = ["API", "GROUPS", "__version__", *API]


def __getattr__(name: str) -> Any:
    if name in API:
        module, attr = API[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'layerlab' has no attribute {name!r}; the public API is: {', '.join(sorted(API))}")


def __dir__() -> list[str]:
    return sorted(__all__)
