"""Weight manipulations: scale, zero, clone, blend, regression-predicted weights (and exact block scaling).

Wietrzykowski, *Anatomical Heterogeneity in Transformer Language Models* (arXiv:2603.19348), finding 4
("only scaling by α = 0.9 of five manipulations preserves quality": +49% PPL; a digest says +19%).
Strategies as reconstructed in the project spec ``shared/papers/anatomy.md`` section 3.8: scale W ← αW;
zero; clone W_l ← W_{l−1} (or W_{l+1}); blend W_l ← (1−β)W_l + β·½(W_{l−1} + W_{l+1}); replace by P1
regression predictions (the unknown fifth strategy). Variant: residual writers only (o_proj, down_proj).
Scaling the weights of a sequential block does not scale its contribution exactly; the exact block-level
scaling is the activation intervention h_l ← h_{l−1} + α(h_l − h_{l−1}) (``"scale_block"``).
Book: anatomy chapter, section "Can we edit layers safely?".
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from layerlab.core import arch
from layerlab.metrics import weights
from layerlab.metrics.ablation import Intervention, swap_weights

STRATEGIES: tuple[str, ...] = ("scale", "zero", "clone", "blend", "predicted", "scale_block")
COMPONENT_SETS: tuple[str, ...] = ("all", "writers")


def _check(model: torch.nn.Module, layers: Sequence[int], strategy: str, alpha: float, beta: float,
           components: str) -> list[int]:
    mv = arch.view(model)
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: choose one of {STRATEGIES}")
    if components not in COMPONENT_SETS:
        raise ValueError(f"unknown component set {components!r}: choose one of {COMPONENT_SETS}")
    if strategy in ("scale", "scale_block") and not alpha > 0:
        raise ValueError(f"alpha must be > 0 for scaling, got {alpha} (use strategy 'zero' to remove a layer)")
    if strategy == "blend" and not 0 <= beta <= 1:
        raise ValueError(f"beta must lie in [0, 1], got {beta}")
    if not layers:
        raise ValueError("no layers given: pass at least one 0-based layer index")
    return sorted({mv.check_layer(layer) for layer in layers})


def manipulated_weights(model: torch.nn.Module, layers: Sequence[int], strategy: str, *, alpha: float = 0.9,
                        beta: float = 0.5, source: str = "prev", components: str = "all",
                        thetas: dict[str, Tensor] | None = None) -> dict[int, dict[str, Tensor]]:
    """New weights {layer: {component: tensor}} for a weight strategy (all read from the unmodified model).

    ``predicted``: teacher-forced P1 weights a·W_{l−1} + b; ``thetas`` are precomputed
    :func:`layerlab.metrics.predictability.lag_thetas` (fitted on all layers when not given)."""
    layers = _check(model, layers, strategy, alpha, beta, components)
    if strategy == "scale_block":
        raise ValueError("'scale_block' is an activation intervention: use manipulate()")
    if source not in ("prev", "next"):
        raise ValueError(f"source must be 'prev' or 'next', got {source!r}")
    mv = arch.view(model)
    L = mv.n_layers
    names = list(weights.WRITERS) if components == "writers" else weights.components_of(model)
    if strategy == "predicted":
        if 0 in layers:
            raise ValueError("layer 0 has no predecessor to predict from: choose layers >= 1")
        if thetas is None:
            from layerlab.metrics.predictability import lag_thetas

            thetas = lag_thetas({c: weights.component_stack(model, c) for c in names})
        return {layer: {c: (thetas[c][0] * mv.blocks[layer - 1].weights()[c].detach().double() + thetas[c][1])
                        .to(mv.blocks[layer].weights()[c].dtype) for c in names} for layer in layers}
    out: dict[int, dict[str, Tensor]] = {}
    for layer in layers:
        w = {c: mv.blocks[layer].weights()[c].detach() for c in names}
        nbrs = [j for j in (layer - 1, layer + 1) if 0 <= j < L]
        if strategy == "scale":
            new = {c: alpha * t for c, t in w.items()}
        elif strategy == "zero":
            new = {c: torch.zeros_like(t) for c, t in w.items()}
        elif strategy == "clone":
            j = layer - 1 if (source == "prev" and layer > 0) or layer == L - 1 else layer + 1
            new = {c: mv.blocks[j].weights()[c].detach().clone() for c in names}
        else:  # blend with the neighbour average
            avg = {c: sum(mv.blocks[j].weights()[c].detach() for j in nbrs) / len(nbrs) for c in names}
            new = {c: (1 - beta) * w[c] + beta * avg[c] for c in names}
        out[layer] = new
    return out


@contextlib.contextmanager
def _scale_blocks(model: torch.nn.Module, layers: Sequence[int], alpha: float) -> Iterator[None]:
    """h_l ← h_{l−1} + α(h_l − h_{l−1}) for each layer (forward hooks, removed on exit)."""
    mv = arch.view(model)
    handles = []

    def hook(module, args, kwargs, output):  # noqa: ANN001 - torch hook signature
        h_in = args[0] if args else kwargs["hidden_states"]
        h_out = output[0] if isinstance(output, tuple) else output
        new = h_in + alpha * (h_out - h_in)
        return (new, *output[1:]) if isinstance(output, tuple) else new

    try:
        for layer in layers:
            handles.append(mv.blocks[layer].block.register_forward_hook(hook, with_kwargs=True))
        yield
    finally:
        for h in handles:
            h.remove()


def manipulate(model: torch.nn.Module, layers: Sequence[int], strategy: str, *, alpha: float = 0.9,
               beta: float = 0.5, source: str = "prev", components: str = "all",
               thetas: dict[str, Tensor] | None = None) -> contextlib.AbstractContextManager:
    """Context manager applying a manipulation (spec 3.8) to ``layers``; the model is restored exactly on exit."""
    layers = _check(model, layers, strategy, alpha, beta, components)
    if strategy == "scale_block":
        if components != "all":
            raise ValueError("'scale_block' scales the whole block output; use components='all'")
        return _scale_blocks(model, layers, alpha)
    return swap_weights(model, manipulated_weights(model, layers, strategy, alpha=alpha, beta=beta, source=source,
                                                   components=components, thetas=thetas))


def manipulation_interventions(model: torch.nn.Module, targets: dict[str, Sequence[int]],
                               configs: dict[str, dict]) -> list[Intervention]:
    """One :class:`~layerlab.metrics.ablation.Intervention` per (config, target), named ``"{config}|{target}"``.

    targets: name -> layers (e.g. ``{"L11": [11], "redundant": [...], "all": range(L)}``);
    configs: name -> keyword arguments of :func:`manipulate` including ``strategy``.

    Strategies of spec anatomy.md section 3.8 (Wietrzykowski (arXiv:2603.19348), finding 4).
    """
    ivs = []
    thetas: dict[str, dict[str, Tensor]] = {}
    for cname, kw in configs.items():
        kw = dict(kw)
        strategy = kw.pop("strategy")
        if strategy == "predicted":  # fit the regression once per component set, not once per batch
            from layerlab.metrics.predictability import lag_thetas

            comps = kw.get("components", "all")
            if comps not in thetas:
                names = list(weights.WRITERS) if comps == "writers" else weights.components_of(model)
                thetas[comps] = lag_thetas({c: weights.component_stack(model, c) for c in names})
            kw["thetas"] = thetas[comps]
        for tname, layers in targets.items():
            layers = list(layers)
            if strategy == "predicted":
                layers = [layer for layer in layers if layer > 0]
            if not layers:
                continue
            _check(model, layers, strategy, kw.get("alpha", 0.9), kw.get("beta", 0.5), kw.get("components", "all"))
            ivs.append(Intervention(f"{cname}|{tname}", min(layers),
                                    lambda layers=layers, s=strategy, kw=kw: manipulate(model, layers, s, **kw)))
    return ivs
