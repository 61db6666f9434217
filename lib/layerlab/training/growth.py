"""Growth schedules as data, and the built-in schedules of the growth chapter.

Growth Transformer Training (GTT; Wietrzykowski 2026, arXiv:2603.19348, findings 5-6; spec
anatomy.md section 3.10 [reconstructed]) trains a fixed-size decoder in *phases*: each phase
names the layers that train, its number of optimiser steps, its learning-rate schedule and an
initialisation action for layers that become active in it. A :class:`Schedule` is a list of
:class:`Phase` plus an execution mode:

- ``"frozen"`` (frozen-mask): every layer is in the forward pass; layers outside the phase's
  trainable set have ``requires_grad=False`` and are not in the optimiser, so their weights are
  bitwise unchanged and weight-gradient work is really skipped (layers below every trainable
  layer skip the backward entirely).
- ``"grow"`` (true growth): layers that have never been active are skipped (the residual
  stream passes them unchanged) until their first phase; active-but-not-trainable layers are
  frozen as above.

Initialisation actions for newly active layers: ``"keep"`` (leave the weights as they are),
``"random"`` (fresh draw with the config's initializer std), ``"identity"`` (zero the residual
writers o_proj and down_proj, so the block is exactly the identity: identity 1 of the spec),
``"copy"`` (copy a source layer, by default the nearest active layer below) and ``"scale"``
(multiply the residual writers by ``alpha``).

Built-ins: :func:`uniform`, :func:`gtt` (the paper's six-phase importance-ordered schedule),
:func:`stacking` (Gong et al. 2019, progressive stacking) and :func:`mslt` (Yang et al. 2020,
multi-stage layerwise training: only the newly stacked top layers train).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

INIT_ACTIONS = ("keep", "random", "identity", "copy", "scale")
MODES = ("frozen", "grow")


@dataclass(frozen=True)
class Phase:
    """One phase of a growth schedule.

    layers: the trainable decoder layers (0-based). ``steps``: optimiser steps (> 0).
    ``lr``: peak learning rate; linear warm-up over ``warmup`` steps then cosine decay to
    ``lr * min_lr_ratio`` at the end of the phase. ``init``: action applied to layers that are
    active for the first time in this phase (see module docstring); ``copy_from`` maps a new
    layer to its source for ``"copy"``; ``alpha`` is the factor for ``"scale"``.
    ``activate``: extra layers that become active (run in the forward) without training,
    e.g. anti-layers scaled by alpha. ``embed`` / ``head``: whether the token embedding and the
    final norm + unembedding train in this phase (``None`` for embed: train it iff layer 0 trains).
    """

    layers: tuple[int, ...]
    steps: int
    lr: float = 3e-3
    warmup: int = 0
    min_lr_ratio: float = 0.1
    init: str = "keep"
    copy_from: dict[int, int] | None = None
    alpha: float = 0.9
    activate: tuple[int, ...] = ()
    embed: bool | None = None
    head: bool = True
    name: str = ""

    def lr_at(self, step: int) -> float:
        """Learning rate at 0-based ``step`` within the phase (warm-up then cosine)."""
        if self.warmup > 0 and step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        span = max(self.steps - self.warmup, 1)
        t = min(max(step - self.warmup, 0) / span, 1.0)
        return self.lr * (self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + np.cos(np.pi * t)))

    def trains_embed(self) -> bool:
        return (0 in self.layers) if self.embed is None else self.embed


@dataclass(frozen=True)
class Schedule:
    """A list of phases plus an execution mode (``"frozen"`` or ``"grow"``); see module docstring."""

    phases: tuple[Phase, ...]
    mode: str = "frozen"
    name: str = "schedule"
    initially_active: tuple[int, ...] | None = field(default=None)

    @property
    def total_steps(self) -> int:
        return sum(p.steps for p in self.phases)

    def phase_at(self, step: int) -> tuple[int, int]:
        """(phase index, step within phase) of global 0-based ``step``."""
        start = 0
        for i, p in enumerate(self.phases):
            if step < start + p.steps:
                return i, step - start
            start += p.steps
        raise ValueError(f"step {step} is past the end of schedule {self.name!r} ({self.total_steps} steps)")

    def phase_start(self, i: int) -> int:
        return sum(p.steps for p in self.phases[:i])

    def active_before(self, i: int, n_layers: int) -> set[int]:
        """Layers active before phase ``i`` starts (all layers in frozen mode)."""
        if self.mode == "frozen":
            return set(range(n_layers))
        act = set(self.initially_active or ())
        for p in self.phases[:i]:
            act |= set(p.layers) | set(p.activate)
        return act

    def newly_active(self, i: int, n_layers: int) -> set[int]:
        """Layers whose initialisation action runs at the start of phase ``i``: in grow mode the
        layers that join the forward pass; in frozen mode the layers that train (or are
        activated) for the first time."""
        if self.mode == "grow":
            return self.active_in(i, n_layers) - self.active_before(i, n_layers)
        seen = set()
        for p in self.phases[:i]:
            seen |= set(p.layers) | set(p.activate)
        p = self.phases[i]
        return (set(p.layers) | set(p.activate)) - seen

    def active_in(self, i: int, n_layers: int) -> set[int]:
        p = self.phases[i]
        return self.active_before(i, n_layers) | set(p.layers) | set(p.activate)

    def validate(self, n_layers: int) -> Schedule:
        """Raise one clear ValueError for an impossible spec; return ``self`` otherwise."""
        if self.mode not in MODES:
            raise ValueError(f"unknown schedule mode {self.mode!r}: use one of {MODES}")
        if not self.phases:
            raise ValueError(f"schedule {self.name!r} has no phases: give at least one Phase")
        for i, p in enumerate(self.phases):
            where = f"schedule {self.name!r}, phase {i} ({p.name or 'unnamed'})"
            if not isinstance(p.steps, (int, np.integer)) or p.steps <= 0:
                raise ValueError(f"{where}: steps must be a positive integer, got {p.steps!r}")
            if p.warmup < 0 or p.lr <= 0:
                raise ValueError(f"{where}: lr must be > 0 and warmup >= 0 (got lr={p.lr}, warmup={p.warmup})")
            for layer in (*p.layers, *p.activate, *(p.copy_from or {}), *(p.copy_from or {}).values()):
                if not 0 <= int(layer) < n_layers:
                    raise ValueError(
                        f"{where}: layer {layer} is out of range: the model has layers 0..{n_layers - 1}"
                    )
            if p.init not in INIT_ACTIONS:
                raise ValueError(f"{where}: unknown init action {p.init!r}: use one of {INIT_ACTIONS}")
            if p.init == "copy" and self.mode == "grow":
                active = self.active_before(i, n_layers)
                new = set(p.layers) - active
                for layer in new:
                    src = (p.copy_from or {}).get(layer)
                    if src is None and not any(a < layer for a in active):
                        raise ValueError(f"{where}: layer {layer} has no active layer below it to copy")
                    if src is not None and src not in active:
                        raise ValueError(f"{where}: copy source {src} for layer {layer} is not active yet")
            if self.mode == "grow" and i == 0 and not (set(p.layers) | set(p.activate)):
                raise ValueError(f"{where}: the first phase of a growing schedule must activate a layer")
        return self


def _layers(model: nn.Module) -> nn.ModuleList:
    from layerlab.core import arch

    return nn.ModuleList([b.block for b in arch.view(model).blocks])


def _writers(block: nn.Module) -> list[nn.Parameter]:
    # Llama-style residual writers: attention o_proj and MLP down_proj (HF [out, in] weights).
    return [block.self_attn.o_proj.weight, block.mlp.down_proj.weight]


@torch.no_grad()
def apply_init(model: nn.Module, layer: int, phase: Phase, active: set[int], generator: torch.Generator) -> None:
    """Apply ``phase.init`` to ``layer`` of ``model`` that becomes active now (in place)."""
    blocks = _layers(model)
    block = blocks[layer]
    if phase.init == "keep":
        return
    if phase.init == "identity":
        for w in _writers(block):
            w.zero_()
    elif phase.init == "scale":
        for w in _writers(block):
            w.mul_(phase.alpha)
    elif phase.init == "copy":
        src = (phase.copy_from or {}).get(layer)
        if src is None:
            src = max(a for a in active if a < layer)
        block.load_state_dict(blocks[src].state_dict())
    elif phase.init == "random":
        std = model.config.initializer_range
        for name, p in block.named_parameters():
            if name.endswith("norm.weight") or p.ndim == 1:
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64).to(p) * std)


def _skip(hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    return hidden_states


@contextlib.contextmanager
def only_layers(model: nn.Module, active: Sequence[int]) -> Iterator[nn.Module]:
    """True growth: inside the ``with``, decoder layers not in ``active`` are skipped (their
    ``forward`` returns the residual stream unchanged, no compute); restored on exit."""
    blocks = _layers(model)
    skipped = [b for i, b in enumerate(blocks) if i not in set(active)]
    try:
        for b in skipped:
            b.forward = _skip  # instance attribute shadows the class method
        yield model
    finally:
        for b in skipped:
            if "forward" in b.__dict__:
                del b.forward


def set_trainable(model: nn.Module, phase: Phase) -> None:
    """Freeze everything except ``phase.layers`` (+ embedding / final norm and head if set)."""
    from layerlab.core import arch

    v = arch.view(model)
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in phase.layers:
        for p in v.blocks[layer].block.parameters():
            p.requires_grad_(True)
    if phase.trains_embed():
        for p in v.embed.parameters():
            p.requires_grad_(True)
    if phase.head:
        for m in (v.final_norm, v.unembed):
            for p in m.parameters():
                p.requires_grad_(True)


# ----------------------------------------------------------------------------- built-ins


def uniform(n_layers: int, steps: int, lr: float = 3e-3, warmup: int = 0) -> Schedule:
    """The baseline: one phase, every layer (and embedding and head) trainable."""
    ph = Phase(tuple(range(n_layers)), steps, lr=lr, warmup=warmup, embed=True, name="uniform")
    return Schedule((ph,), mode="frozen", name="uniform")


def map_profile(importance: Sequence[float], n_layers: int) -> np.ndarray:
    """Map a per-layer importance profile of an L-layer model to ``n_layers`` = L' layers by
    relative depth, l' = round(l (L'-1)/(L-1)) (anatomy spec 3.10); layers that receive several
    source layers take their maximum, layers that receive none interpolate linearly."""
    imp = np.asarray(importance, dtype=float)
    big = len(imp)
    if big < 2 or n_layers < 1:
        raise ValueError(f"need a profile of >= 2 layers and n_layers >= 1 (got {big}, {n_layers})")
    out = np.full(n_layers, np.nan)
    for src, v in enumerate(imp):
        dst = int(round(src * (n_layers - 1) / (big - 1)))
        out[dst] = v if np.isnan(out[dst]) else max(out[dst], v)
    missing = np.isnan(out)
    if missing.any():
        x = np.arange(n_layers)
        out[missing] = np.interp(x[missing], x[~missing], out[~missing])
    return out


GTT_PHASES = ("gastrulation", "neurulation", "organogenesis", "growth", "connective", "maturation")
"""Phase names of the paper's PoC [secondary: digest]; what each phase trains is [reconstructed]."""


def gtt(
    importance: Sequence[float],
    steps: int,
    lr: float = 3e-3,
    *,
    fractions: Sequence[float] = (0.2, 0.15, 0.15, 0.15, 0.2, 0.15),
    core_frac: float = 0.2,
    alpha: float = 0.9,
    mode: str = "frozen",
    warmup: int = 0,
    anti: Sequence[int] | None = None,
) -> Schedule:
    """The six-phase importance-ordered GTT schedule [reconstructed from the digest, spec 3.10].

    ``importance``: one value per layer of the model being trained (already mapped, see
    :func:`map_profile`; larger = more important). ``anti``: the "anti-layers" (layers whose
    ablation helps), chosen by the caller from a test with an interval (the growth chapter: Holm-adjusted
    sign-flip tests over documents); ``None`` falls back to the point estimates (importance < 0). Phases:
    gastrulation trains the core (top ``core_frac`` layers by importance), neurulation the
    early layers (first third, not yet trained), organogenesis the middle third, growth the
    remaining non-anti layers, connective all non-anti layers together (anti-layers are
    activated untrained and scaled by ``alpha``), maturation everything. The embedding trains
    with whichever phase trains layer 0; the head trains throughout. Steps are split by
    ``fractions`` (rounded; the last phase absorbs the remainder) so the total is ``steps``.
    """
    imp = np.asarray(importance, dtype=float)
    n = len(imp)
    if len(fractions) != 6 or min(fractions) <= 0:
        raise ValueError("fractions must be six positive numbers (one per GTT phase)")
    anti = {i for i in range(n) if imp[i] < 0} if anti is None else {int(i) for i in anti}
    if not all(0 <= i < n for i in anti):
        raise ValueError(f"anti-layers {sorted(anti)} must lie in 0..{n - 1}")
    order = [i for i in np.argsort(-imp, kind="stable") if i not in anti]
    n_core = max(1, int(round(core_frac * n)))
    core = set(order[:n_core])
    third = max(1, n // 3)
    early = {i for i in range(third) if i not in core | anti}
    middle = {i for i in range(third, 2 * third) if i not in core | early | anti}
    rest = set(range(n)) - core - early - middle - anti
    normal = set(range(n)) - anti
    tiers = [core, early, middle, rest, normal, set(range(n))]
    fr = np.asarray(fractions, float) / np.sum(fractions)
    counts = [max(1, int(round(f * steps))) for f in fr[:-1]]
    counts.append(steps - sum(counts))
    if counts[-1] <= 0:
        raise ValueError(f"steps={steps} is too small for six phases")
    phases = []
    so_far: set[int] = set()
    for k, (tier, c, name) in enumerate(zip(tiers, counts, GTT_PHASES)):
        init = "scale" if k == 4 else "keep"
        so_far |= tier
        phases.append(
            Phase(
                tuple(int(i) for i in sorted(tier or so_far)),  # an empty tier keeps training what is active
                c,
                lr=lr,
                warmup=min(warmup, c - 1) if k == 0 else 0,
                init=init if anti else "keep",
                alpha=alpha,
                activate=tuple(int(i) for i in sorted(anti)) if k == 4 else (),
                name=name,
            )
        )
    return Schedule(tuple(phases), mode=mode, name="gtt", initially_active=None)


def stacking(n_layers: int, steps: int, lr: float = 3e-3, *, first_frac: float = 0.5, warmup: int = 0) -> Schedule:
    """Progressive stacking (Gong et al., ICML 2019): train the bottom L/2 layers, then copy
    them on top (layer L/2 + i <- layer i) and train all L layers (true growth)."""
    if n_layers < 2 or n_layers % 2:
        raise ValueError(f"stacking needs an even number of layers >= 2, got {n_layers}")
    half = n_layers // 2
    s1 = max(1, int(round(first_frac * steps)))
    p1 = Phase(tuple(range(half)), s1, lr=lr, warmup=warmup, embed=True, name="shallow")
    p2 = Phase(
        tuple(range(n_layers)),
        steps - s1,
        lr=lr,
        init="copy",
        copy_from={half + i: i for i in range(half)},
        embed=True,
        name="stacked",
    )
    return Schedule((p1, p2), mode="grow", name="stacking")


def mslt(
    n_layers: int, steps: int, lr: float = 3e-3, *, stages: int = 2, final_frac: float = 0.2, warmup: int = 0
) -> Schedule:
    """MSLT-style training (Yang et al. 2020): grow by stacking copies of the top block(s) and
    train only the newly added top layers (plus head), then a short joint phase on all layers."""
    if n_layers % stages:
        raise ValueError(f"n_layers={n_layers} must be divisible by stages={stages}")
    k = n_layers // stages
    fin = max(1, int(round(final_frac * steps)))
    per = [(steps - fin) // stages] * stages
    per[0] += steps - fin - sum(per)
    phases = [Phase(tuple(range(k)), per[0], lr=lr, warmup=warmup, embed=True, name="stage0")]
    for s in range(1, stages):
        new = tuple(range(s * k, (s + 1) * k))
        phases.append(
            Phase(new, per[s], lr=lr, init="copy", copy_from={s * k + i: (s - 1) * k + i for i in range(k)},
                  embed=False, name=f"stage{s}")
        )
    phases.append(Phase(tuple(range(n_layers)), fin, lr=lr, embed=True, name="joint"))
    return Schedule(tuple(phases), mode="grow", name="mslt")


def describe(schedule: Schedule) -> list[dict]:
    """One row per phase (name, steps, trainable layers, init), for tables in the book."""
    return [
        {"phase": p.name or str(i), "steps": p.steps, "layers": list(p.layers), "init": p.init,
         "activate": list(p.activate)}
        for i, p in enumerate(schedule.phases)
    ]


def replace(schedule: Schedule, **kw) -> Schedule:
    return dataclasses.replace(schedule, **kw)
