"""Sequential (adaptive) designs: look at the data several times, stop where the answer is settled,
and keep the false-"supported" rate at the nominal level.

A :class:`SequentialDesign` plans ``K`` looks at increasing numbers of units (documents) and splits the
two-sided level ``alpha`` over them (weighted Bonferroni alpha spending: look ``k`` spends
``alpha * weights[k]``; Dmitrienko, Tamhane & Bretz 2010, *Multiple Testing Problems in
Pharmaceutical Statistics*, ch. 2; the spending-function idea is Lan & DeMets 1983, *Biometrika* 70,
659-663). Repeatedly testing at the full level would inflate the error: a null effect gets ``K``
chances to look significant. With the split, the union bound keeps the chance that *any* look
wrongly rejects at most ``alpha`` whatever the dependence between looks and whatever the stopping
rule, so the book can spend more units exactly where an answer is still open.

:func:`sequential_mean` turns the per-unit values seen at the looks taken so far into one
:class:`~layerlab.report.inference.Evidence`: the adjusted one-sided p-values ``min_j p_j / w_j``
(so that the ordinary :class:`~layerlab.report.verdicts.Direction` rule at ``alpha / 2`` is the
sequential test) and the repeated confidence interval of the last look (level ``1 - alpha * w_k``).
:func:`settled` says whether that interval has left every decision threshold (a tier boundary, a
null), the stopping rule of the adaptive token budgets of the anatomy chapter.
The design as a calibration scenario (kind ``"sequential"``) is
:func:`layerlab.report.calibration.sequential_scenario`; it lives there so that the cache key of a
result computed with this module (the anatomy ablation profile) does not include the verdict rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from layerlab.report.inference import Evidence, mean_effect

__all__ = ["SequentialDesign", "run_sequential", "sequential_mean", "settled"]


@dataclass(frozen=True, kw_only=True)
class SequentialDesign:
    """Planned looks: ``looks[k]`` units in total at look k (strictly increasing, the first >= 2);
    ``weights[k]`` the share of ``alpha`` spent there (positive, summing to 1; default equal)."""

    looks: tuple[int, ...]
    weights: tuple[float, ...] | None = None
    alpha: float = 0.05

    def __post_init__(self) -> None:
        looks = tuple(int(n) for n in self.looks)
        if not looks or looks[0] < 2 or any(b <= a for a, b in zip(looks, looks[1:])):
            raise ValueError(f"SequentialDesign: looks must be strictly increasing unit counts >= 2, got {self.looks}")
        w = tuple(float(x) for x in (self.weights or [1.0 / len(looks)] * len(looks)))
        if len(w) != len(looks) or min(w) <= 0 or abs(sum(w) - 1) > 1e-9:
            raise ValueError(f"SequentialDesign: weights must be {len(looks)} positive shares summing to 1, got {w}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"SequentialDesign: alpha must be in (0, 1), got {self.alpha}")
        object.__setattr__(self, "looks", looks)
        object.__setattr__(self, "weights", w)

    def level(self, k: int) -> float:
        """Confidence level of the repeated interval at look ``k``: 1 - alpha * w_k."""
        return 1.0 - self.alpha * self.weights[k]  # type: ignore[index]

    @property
    def name(self) -> str:
        w = ", ".join(f"{x:.2g}" for x in self.weights)  # type: ignore[union-attr]
        return f"{len(self.looks)} looks at {', '.join(map(str, self.looks))} units, alpha split {w} (Bonferroni)"


def sequential_mean(history: Sequence[Any], design: SequentialDesign, *, null: float = 0.0, unit: str,
                    seed: int = 0, n_perm: int = 4000) -> Evidence:
    """Evidence after ``len(history)`` looks: ``history[j]`` holds the per-unit values at look j
    ([looks[j]] values; a unit's value may be refined between looks, e.g. a document's mean over more
    of its windows). Each look is a sign-flip test and t-interval (:func:`mean_effect`); the returned
    p-values are ``min(1, min_j p_j / w_j)`` and the interval is the last look's at level 1 - alpha w_k."""
    k = len(history)
    if not 1 <= k <= len(design.looks):
        raise ValueError(f"sequential_mean: {k} looks given, the design plans {len(design.looks)}")
    p_g = p_l = p_min = np.inf
    ev = None
    for j, x in enumerate(history):
        x = np.asarray(x, dtype=np.float64).ravel()
        if x.size != design.looks[j]:
            raise ValueError(f"sequential_mean: look {j} has {x.size} units, the design plans {design.looks[j]}")
        w = design.weights[j]  # type: ignore[index]
        ev = mean_effect(x, null=null, unit=unit, seed=seed + j, n_perm=n_perm, level=design.level(j))
        p_g, p_l = min(p_g, ev.p_greater / w), min(p_l, ev.p_less / w)
        p_min = min(p_min, ev.p_min / w)
    assert ev is not None
    return Evidence(estimate=ev.estimate, low=ev.low, high=ev.high, p_greater=min(1.0, p_g), p_less=min(1.0, p_l),
                    unit=unit, n=ev.n, null=null, p_min=min(1.0, p_min),
                    method=f"sequential design ({design.name}); look {k}: {ev.method}, "
                           f"interval at level {design.level(k - 1):.4g}")


def settled(ev: Evidence, thresholds: Sequence[float]) -> bool:
    """True when the (repeated) interval of ``ev`` excludes every threshold: no tier boundary or null is
    still inside it, so more units cannot change which side of any threshold the effect lies on."""
    if not ev.has_interval:
        return False
    assert ev.low is not None and ev.high is not None
    return all(not (ev.low <= t <= ev.high) for t in thresholds)


def run_sequential(values: Any, design: SequentialDesign, *, thresholds: Sequence[float], null: float = 0.0,
                   unit: str = "units", seed: int = 0, n_perm: int = 2000) -> tuple[Evidence, int]:
    """The adaptive procedure on a fixed ordering of units ``values`` ([looks[-1]]): look at the first
    ``looks[k]`` units, stop at the first look whose interval is :func:`settled`, else go on to the last.
    Returns (Evidence, number of looks taken). The anatomy chapter runs the same loop on documents."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size < design.looks[-1]:
        raise ValueError(f"run_sequential: {v.size} units, the design's last look needs {design.looks[-1]}")
    history: list[np.ndarray] = []
    ev = None
    for n in design.looks:
        history.append(v[:n])
        ev = sequential_mean(history, design, null=null, unit=unit, seed=seed, n_perm=n_perm)
        if settled(ev, thresholds):
            break
    assert ev is not None
    return ev, len(history)


def naive_sequential(values: Any, looks: Sequence[int], *, unit: str = "units", seed: int = 0) -> Evidence:
    """The invalid design this module exists to replace: test at the full level at every look and stop at
    the first one that rejects (used only to show the inflation in tests)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    ev = None
    for n in looks:
        ev = mean_effect(v[:n], unit=unit, seed=seed, n_perm=2000)
        if min(ev.p_greater, ev.p_less) <= 0.025:
            break
    assert ev is not None
    return ev
