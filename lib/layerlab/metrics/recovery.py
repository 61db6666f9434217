"""Perturbation and recovery: perturb one layer, fine-tune, count the steps back to baseline perplexity.

Wietrzykowski, *Anatomical Heterogeneity in Transformer Language Models* (arXiv:2603.19348), finding 3
("recovery speed correlates with importance"; digest: critical L8/L11 ≈ 200 steps after 50% noise,
L14/L17 0 steps). Protocol as reconstructed in the project spec ``shared/papers/anatomy.md`` section 3.7:
additive W ← W + ε, ε ~ N(0, (σ_rel·std W)²) per tensor, or multiplicative W ⊙ (1 + σ_rel·N(0, 1));
AdamW on layer l only or on all parameters, on a training stream disjoint from evaluation; recovery
steps = first evaluated step with NLL ≤ baseline (censored at the cap); area under the excess-NLL curve.
Control: the same fine-tune with σ_rel = 0. Book: anatomy chapter, section "How fast do layers recover?".

Every run restores the model's weights bit-for-bit (and the ``requires_grad`` flags) when it ends.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import Tensor

from layerlab.core import arch
from layerlab.metrics.ablation import window_nll

KINDS: tuple[str, ...] = ("additive", "multiplicative")
SCOPES: tuple[str, ...] = ("layer", "all")


def _layer_matrices(model: torch.nn.Module, layer: int, include_norms: bool) -> dict[str, torch.nn.Parameter]:
    mv = arch.view(model)
    mv.check_layer(layer)
    return {k: p for k, p in mv.blocks[layer].weights().items() if include_norms or "norm" not in k}


@contextlib.contextmanager
def perturb(model: torch.nn.Module, layer: int, sigma_rel: float, *, kind: str = "additive", seed: int = 0,
            include_norms: bool = False) -> Iterator[None]:
    """Add seeded noise to every matrix of ``layer`` (spec 3.7); the original weights come back on exit.

    additive: W + σ_rel·std(W)·N(0, 1); multiplicative: W ⊙ (1 + σ_rel·N(0, 1)). σ_rel = 0 is an exact no-op.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown perturbation kind {kind!r}: choose one of {KINDS}")
    if not sigma_rel >= 0:
        raise ValueError(f"sigma_rel must be >= 0, got {sigma_rel}")
    params = _layer_matrices(model, layer, include_norms)
    g = torch.Generator().manual_seed(seed)
    saved = []
    try:
        with torch.no_grad():
            for _, p in sorted(params.items()):
                saved.append((p, p.detach().clone()))
                if sigma_rel == 0:
                    continue
                # drawn on the CPU so that a seed gives the same noise on every device
                noise = torch.randn(p.shape, generator=g, dtype=p.dtype).to(p.device)
                if kind == "additive":
                    p.add_(sigma_rel * p.std() * noise)
                else:
                    p.mul_(1 + sigma_rel * noise)
        yield
    finally:
        with torch.no_grad():
            for p, old in reversed(saved):
                p.copy_(old)


@dataclass
class RecoveryCurve:
    """One perturb-and-fine-tune run: NLL (nats per token) on the evaluation windows at ``steps``.

    Spec anatomy.md section 3.7 (Wietrzykowski (arXiv:2603.19348), finding 3).
    """

    layer: int
    sigma_rel: float
    kind: str
    scope: str
    seed: int
    lr: float
    steps: list[int]
    nll: list[float]
    base_nll: float
    recovered_at: int | None  # first evaluated step with nll <= base_nll (+ tolerance); None = censored
    cap: int
    auc: float  # mean excess NLL over the run (trapezoid over steps / cap), nats

    @property
    def steps_or_cap(self) -> int:
        """Recovery steps with censored runs set to the cap (for rank statistics)."""
        return self.cap if self.recovered_at is None else self.recovered_at

    def to_dict(self) -> dict:
        return asdict(self)


@torch.no_grad()
def _eval_nll(model: torch.nn.Module, ids: Tensor, start: int, prefix: list[Tensor] | None, bs: int) -> float:
    out = []
    for j, i in enumerate(range(0, ids.shape[0], bs)):
        b = ids[i:i + bs]
        lg = arch.suffix_forward(model, prefix[j], start) if prefix is not None else model(b).logits
        out.append(window_nll(lg, b))
    return float(torch.cat(out).mean())


class _StopForward(Exception):
    """Raised by :func:`_block_input`'s hook once block ``layer`` has its input."""


def _block_input(model: torch.nn.Module, ids: Tensor, layer: int) -> Tensor:
    """The input of block ``layer`` [B, T, d] for ``ids`` [B, T], running only blocks < ``layer``: bit-identical
    to ``residual.capture``'s ``block_in`` of a full forward (the same operations on the same batch), without
    the blocks after it, the final norm or the unembedding. (Kept here rather than in ``core.arch``: every
    cached result, the trained family included, is keyed by ``core.arch``'s source.)"""
    mv = arch.view(model)
    layer = mv.check_layer(layer)
    got: list[Tensor] = []

    def hook(module, args, kwargs):
        got.append(args[0] if args else kwargs["hidden_states"])
        raise _StopForward

    handle = mv.blocks[layer].block.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        model(input_ids=ids, use_cache=False)
    except _StopForward:
        pass
    finally:
        handle.remove()
    if not got:
        raise RuntimeError(f"block {layer} was never called in the forward pass; cannot read its input")
    return got[0]


@torch.no_grad()
def _prefix(model: torch.nn.Module, ids: Tensor, layer: int, bs: int) -> list[Tensor]:
    """Clean inputs of block ``layer`` per batch (valid while blocks < layer are frozen and unperturbed)."""
    return [_block_input(model, ids[i:i + bs], layer) for i in range(0, ids.shape[0], bs)]


def baseline_nll(model: torch.nn.Module, eval_ids: Tensor, *, eval_batch_size: int = 8) -> float:
    """The unperturbed model's NLL (nats per token) on ``eval_ids`` [N, T]: the level a run must get back to.
    Computed once, it can be passed to every :func:`recovery_run` on the same evaluation windows.

    Spec anatomy.md section 3.7 (Wietrzykowski (arXiv:2603.19348), finding 3): recovery = back to this NLL.
    """
    return _eval_nll(model, eval_ids.to(next(model.parameters()).device), 0, None, eval_batch_size)


def recovery_run(model: torch.nn.Module, layer: int, *, train_ids: Tensor, eval_ids: Tensor, sigma_rel: float = 0.5,
                 kind: str = "additive", scope: str = "layer", lr: float = 1e-4, steps: int = 200,
                 eval_every: int = 10, batch_size: int = 4, eval_batch_size: int = 8, seed: int = 0,
                 tol_pct: float = 0.0, weight_decay: float = 0.0, stop_at_recovery: bool = False,
                 base_nll: float | None = None) -> RecoveryCurve:
    """Perturb ``layer``, fine-tune ``scope`` with AdamW on ``train_ids`` [N, T], evaluate on ``eval_ids``.

    The model is returned unchanged. With scope ``"layer"`` the frozen prefix (blocks < layer) is computed
    once and only blocks ≥ layer run forward and backward. ``seed`` drives the noise and the batch order.
    ``stop_at_recovery``: end the run at the first evaluation at or below the baseline (the recovery step is
    then known; the curve ends there and ``auc`` is the mean excess over the evaluated steps). ``base_nll``: the
    unperturbed model's NLL on ``eval_ids`` from :func:`baseline_nll` (computed here when None).

    Protocol of spec anatomy.md section 3.7 (Wietrzykowski (arXiv:2603.19348), finding 3).
    """
    mv = arch.view(model)
    mv.check_layer(layer)
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}: choose one of {SCOPES}")
    if lr < 0 or steps < 0 or eval_every < 1:
        raise ValueError(f"need lr >= 0, steps >= 0 and eval_every >= 1; got {lr}, {steps}, {eval_every}")
    train_params = (list(_layer_matrices(model, layer, include_norms=True).values()) if scope == "layer"
                    else list({p.data_ptr(): p for p in model.parameters()}.values()))
    start = layer if scope == "layer" else 0
    use_prefix = scope == "layer" and layer > 0
    device = next(model.parameters()).device
    train_ids, eval_ids = train_ids.to(device), eval_ids.to(device)  # [N, T] each, on the model's device
    base = _eval_nll(model, eval_ids, 0, None, eval_batch_size) if base_nll is None else float(base_nll)
    flags = [(p, p.requires_grad) for p in model.parameters()]
    snapshot = [(p, p.detach().clone()) for p in train_params]
    rng = np.random.default_rng(seed)
    order = rng.permutation(train_ids.shape[0])
    threshold = base + math.log1p(tol_pct / 100)
    xs, ys = [], []
    try:
        with perturb(model, layer, sigma_rel, kind=kind, seed=seed):
            ev_prefix = _prefix(model, eval_ids, layer, eval_batch_size) if use_prefix else None
            tr_prefix = {}
            for p, _ in flags:
                p.requires_grad_(False)
            for p in train_params:
                p.requires_grad_(True)
            opt = torch.optim.AdamW(train_params, lr=lr, weight_decay=weight_decay)
            xs.append(0)
            ys.append(_eval_nll(model, eval_ids, start if use_prefix else 0, ev_prefix, eval_batch_size))
            for step in range(1, steps + 1):
                if stop_at_recovery and ys[-1] <= threshold:
                    break
                k = (step - 1) * batch_size
                idx = [int(order[(k + j) % len(order)]) for j in range(batch_size)]
                ids = train_ids[idx]  # [B, T]
                with torch.enable_grad():
                    if use_prefix:
                        key = tuple(idx)
                        if key not in tr_prefix:
                            tr_prefix[key] = _prefix(model, ids, layer, batch_size)[0]
                        logits = arch.suffix_forward(model, tr_prefix[key], start)
                    else:
                        logits = model(input_ids=ids, use_cache=False).logits
                    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                             ids[:, 1:].reshape(-1))
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                opt.step()
                if step % eval_every == 0 or step == steps:
                    xs.append(step)
                    ys.append(_eval_nll(model, eval_ids, start if use_prefix else 0, ev_prefix, eval_batch_size))
            # restore the fine-tuned tensors before ``perturb`` restores the perturbed layer
            with torch.no_grad():
                for p, old in snapshot:
                    p.copy_(old)
    finally:
        with torch.no_grad():
            for p, old in snapshot:
                p.copy_(old)
        for p, f in flags:
            p.requires_grad_(f)
    rec = next((s for s, v in zip(xs, ys) if v <= threshold), None)
    excess = np.asarray(ys) - base
    auc = float(np.trapezoid(excess, xs) / xs[-1]) if xs[-1] > 0 else float(excess[0])
    return RecoveryCurve(layer=layer, sigma_rel=sigma_rel, kind=kind, scope=scope, seed=seed, lr=lr, steps=xs,
                         nll=[float(y) for y in ys], base_nll=base, recovered_at=rec, cap=steps, auc=auc)


def recovery_vs_importance(curves: Sequence[RecoveryCurve], importance: dict[int, float], *,
                           measure: str = "steps", seed: int = 0):
    """Spearman between per-layer recovery (mean over runs of ``measure``: ``"steps"`` = ``steps_or_cap``,
    censored runs at the cap, or ``"auc"``) and ablation importance (e.g. ΔNLL), as
    :class:`layerlab.report.inference.Evidence` over layers: a permutation p-value (exact up to 8 layers)
    and a bootstrap interval over layers from 8 layers on (none below: a Fisher interval of 4 points is
    degenerate, e.g. [1, 1] at rho = 1)."""
    from layerlab.report.inference import correlation

    if measure not in ("auc", "steps"):
        raise ValueError(f"unknown measure {measure!r}: choose 'auc' or 'steps'")
    per: dict[int, list[float]] = {}
    for c in curves:
        per.setdefault(c.layer, []).append(c.auc if measure == "auc" else c.steps_or_cap)
    layers = sorted(layer for layer in per if layer in importance)
    if len(layers) < 4:
        raise ValueError(f"need recovery runs on at least 4 layers with an importance value, got {layers}")
    x = [float(np.mean(per[layer])) for layer in layers]
    y = [importance[layer] for layer in layers]
    return correlation(x, y, unit="layers", seed=seed)
