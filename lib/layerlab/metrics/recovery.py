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
    """Raised by :func:`_block_inputs`'s hook once the last block asked for has its input."""


def _block_inputs(model: torch.nn.Module, ids: Tensor, layers: Sequence[int]) -> dict[int, Tensor]:
    """The inputs of blocks ``layers`` [B, T, d] each for ``ids`` [B, T], from one forward pass that runs only
    the blocks before the last of them: bit-identical to ``residual.capture``'s ``block_in`` of a full forward
    (the same operations on the same batch), without the later blocks, the final norm or the unembedding.
    (Kept here rather than in ``core.arch``: every cached result, the trained family included, is keyed by
    ``core.arch``'s source.)"""
    mv = arch.view(model)
    want = sorted({mv.check_layer(layer) for layer in layers})
    if not want:
        raise ValueError("no layer given: pass at least one block index")
    got: dict[int, Tensor] = {}

    def hook(layer: int):
        def read(module, args, kwargs):
            got[layer] = (args[0] if args else kwargs["hidden_states"]).detach().clone()
            if layer == want[-1]:
                raise _StopForward
        return read

    handles = [mv.blocks[layer].block.register_forward_pre_hook(hook(layer), with_kwargs=True) for layer in want]
    try:
        model(input_ids=ids, use_cache=False)
    except _StopForward:
        pass
    finally:
        for h in handles:
            h.remove()
    if len(got) != len(want):
        missing = [layer for layer in want if layer not in got]
        raise RuntimeError(f"blocks {missing} were never called in the forward pass; cannot read their inputs")
    return got


def _block_input(model: torch.nn.Module, ids: Tensor, layer: int) -> Tensor:
    """The input of block ``layer`` [B, T, d] for ``ids`` [B, T], running only blocks < ``layer``
    (:func:`_block_inputs` of one layer)."""
    (h,) = _block_inputs(model, ids, [layer]).values()
    return h


def _ids_key(ids: Tensor) -> tuple:
    return tuple(ids.shape), ids.detach().cpu().numpy().tobytes()


class CleanInputs:
    """The clean inputs of blocks ``layers`` for fixed batches of ids, read in one forward pass per batch and
    shared by every layer-scope :func:`recovery_run` on those batches. Such a run perturbs and fine-tunes only
    block ``layer``, so the input of block ``layer`` is the clean model's in all of them: the σ = 0 control and
    the perturbed run of a layer, and the runs of every layer, can read it from one pass instead of each running
    blocks < ``layer`` again. Build it on the unperturbed model; :func:`recovery_run` falls back to its own
    prefix pass for a batch or layer it does not hold, so a mismatch costs time, never a wrong number.

    :meth:`for_runs` builds it for the batches that :func:`recovery_run` with given settings reads, as many as
    ``max_bytes`` holds. Protocol of spec anatomy.md section 3.7 (Wietrzykowski (arXiv:2603.19348), finding 3).
    """

    def __init__(self, model: torch.nn.Module, batches: Sequence[Tensor], layers: Sequence[int]) -> None:
        self.layers = sorted({arch.view(model).check_layer(layer) for layer in layers})
        self._inputs: dict[tuple, dict[int, Tensor]] = {}
        with torch.no_grad():
            for b in batches:  # [B, T] each
                if (key := _ids_key(b)) not in self._inputs:
                    self._inputs[key] = _block_inputs(model, b, self.layers)

    @classmethod
    def for_runs(cls, model: torch.nn.Module, layers: Sequence[int], *, train_ids: Tensor, eval_ids: Tensor,
                 steps: int, batch_size: int, eval_batch_size: int, seed: int,
                 max_bytes: int = 2 << 30) -> CleanInputs:
        """For the runs of :func:`recovery_run` on ``layers`` with these arguments: its evaluation batches, then the
        training batch of each step in order (the same for every σ, kind and layer at one ``seed``), as many as
        fit in ``max_bytes`` of inputs (default 2 GiB; the runs compute the rest themselves). The cpu presets hold
        every batch in a few MiB; a paper-scale fine-tune of hundreds of steps keeps its first steps."""
        device = next(model.parameters()).device
        train_ids, eval_ids = train_ids.to(device), eval_ids.to(device)
        ev = [eval_ids[i:i + eval_batch_size] for i in range(0, eval_ids.shape[0], eval_batch_size)]
        tr = [train_ids[idx] for idx in train_batches(train_ids.shape[0], steps, batch_size, seed)]
        per_id = len(set(layers)) * arch.view(model).d_model * next(model.parameters()).element_size()
        keep, used = [], 0
        for b in ev + tr:
            used += b.numel() * per_id
            if used > max_bytes:
                break
            keep.append(b)
        return cls(model, keep, layers)

    def get(self, ids: Tensor, layer: int) -> Tensor | None:
        """The clean input of block ``layer`` for the batch ``ids`` [B, T], or None when not held."""
        return self._inputs.get(_ids_key(ids), {}).get(layer)


def train_batches(n: int, steps: int, batch_size: int, seed: int) -> list[list[int]]:
    """The training windows of each step of :func:`recovery_run`: a permutation of the ``n`` windows seeded by
    ``seed``, read ``batch_size`` at a time and cycled."""
    order = np.random.default_rng(seed).permutation(n)
    return [[int(order[((step - 1) * batch_size + j) % n]) for j in range(batch_size)]
            for step in range(1, steps + 1)]


@torch.no_grad()
def _prefix(model: torch.nn.Module, ids: Tensor, layer: int, bs: int,
            clean: CleanInputs | None = None) -> list[Tensor]:
    """Clean inputs of block ``layer`` per batch (valid while blocks < layer are frozen and unperturbed): from
    ``clean`` where it holds them, else by running blocks < ``layer``."""
    out = []
    for i in range(0, ids.shape[0], bs):
        h = clean.get(ids[i:i + bs], layer) if clean is not None else None
        out.append(_block_input(model, ids[i:i + bs], layer) if h is None else h)
    return out


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
                 base_nll: float | None = None, clean: CleanInputs | None = None,
                 clean_start: bool = False) -> RecoveryCurve:
    """Perturb ``layer``, fine-tune ``scope`` with AdamW on ``train_ids`` [N, T], evaluate on ``eval_ids``.

    The model is returned unchanged. With scope ``"layer"`` the frozen prefix (blocks < layer) is computed
    once and only blocks ≥ layer run forward and backward. ``seed`` drives the noise and the batch order.
    ``stop_at_recovery``: end the run at the first evaluation at or below the baseline (the recovery step is
    then known; the curve ends there and ``auc`` is the mean excess over the evaluated steps). ``base_nll``: the
    unperturbed model's NLL on ``eval_ids`` from :func:`baseline_nll` (computed here when None). ``clean``: the
    blocks' clean inputs (:class:`CleanInputs`) shared with other layer-scope runs on the same windows, read
    instead of running the frozen prefix again (the curve is the same bit for bit). ``clean_start`` (σ_rel = 0
    with ``base_nll`` only): step 0's NLL is the unperturbed model's on ``eval_ids``, so take ``base_nll`` instead
    of evaluating it again.

    Protocol of spec anatomy.md section 3.7 (Wietrzykowski (arXiv:2603.19348), finding 3).
    """
    mv = arch.view(model)
    mv.check_layer(layer)
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}: choose one of {SCOPES}")
    if lr < 0 or steps < 0 or eval_every < 1:
        raise ValueError(f"need lr >= 0, steps >= 0 and eval_every >= 1; got {lr}, {steps}, {eval_every}")
    if clean_start and (sigma_rel != 0 or base_nll is None):
        raise ValueError(f"clean_start takes step 0's NLL to be base_nll, which holds only for sigma_rel = 0 with "
                         f"base_nll given; got sigma_rel={sigma_rel}, base_nll={base_nll}")
    if clean is not None and scope != "layer":
        raise ValueError(f"clean inputs serve layer-scope runs only (scope 'all' trains every block); got {scope!r}")
    train_params = (list(_layer_matrices(model, layer, include_norms=True).values()) if scope == "layer"
                    else list({p.data_ptr(): p for p in model.parameters()}.values()))
    start = layer if scope == "layer" else 0
    use_prefix = scope == "layer" and layer > 0
    device = next(model.parameters()).device
    train_ids, eval_ids = train_ids.to(device), eval_ids.to(device)  # [N, T] each, on the model's device
    base = _eval_nll(model, eval_ids, 0, None, eval_batch_size) if base_nll is None else float(base_nll)
    flags = [(p, p.requires_grad) for p in model.parameters()]
    snapshot = [(p, p.detach().clone()) for p in train_params]
    batches = train_batches(train_ids.shape[0], steps, batch_size, seed)
    threshold = base + math.log1p(tol_pct / 100)
    xs, ys = [], []
    try:
        with perturb(model, layer, sigma_rel, kind=kind, seed=seed):
            ev_prefix = _prefix(model, eval_ids, layer, eval_batch_size, clean) if use_prefix else None
            tr_prefix = {}
            for p, _ in flags:
                p.requires_grad_(False)
            for p in train_params:
                p.requires_grad_(True)
            opt = torch.optim.AdamW(train_params, lr=lr, weight_decay=weight_decay)
            xs.append(0)
            ys.append(base if clean_start
                      else _eval_nll(model, eval_ids, start if use_prefix else 0, ev_prefix, eval_batch_size))
            for step in range(1, steps + 1):
                if stop_at_recovery and ys[-1] <= threshold:
                    break
                idx = batches[step - 1]
                ids = train_ids[idx]  # [B, T]
                with torch.enable_grad():
                    if use_prefix:
                        key = tuple(idx)
                        if key not in tr_prefix:
                            tr_prefix[key] = _prefix(model, ids, layer, batch_size, clean)[0]
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
