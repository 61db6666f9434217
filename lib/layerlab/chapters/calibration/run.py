"""The calibration appendix's run: preset -> :class:`CalibrationResult` (one row per design).

Each case of the preset is simulated ``n_sims`` times under its null and under its claimed effect
(:func:`layerlab.report.calibration.calibrate`) with the rule its chapter uses (:func:`rule_of`: the
one-sided :class:`layerlab.report.verdicts.Direction`, or a two-sided family). A case whose
false-"supported" rate is still undecided against 5% at its look's share of the level
(:func:`layerlab.chapters.calibration.looks.decide_rate`) gets more null draws, up to the preset's last
look (:func:`layerlab.report.calibration.extend_null`). Cases are independent and seeded by their
index, so they run in worker processes with identical results; the whole result is cached.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from layerlab.chapters.calibration.looks import LEVEL, decide_rate
from layerlab.chapters.calibration.presets import CalibrationPreset, Case
from layerlab.core.cache import cached
from layerlab.core.fingerprints import fingerprint
from layerlab.core.protocol import Provenance, provenance
from layerlab.report.calibration import Calibration, Scenario, calibrate, extend_null, scenario
from layerlab.report.verdicts import ANY_EFFECT, Direction, Family

__all__ = ["CalibrationResult", "rule_of", "run", "run_case", "sequential_looks"]


@dataclass(frozen=True, kw_only=True)
class CalibrationResult:
    """The calibration of every design: ``table`` has one row per case (label, scenario, n with its
    unit, false-supported rate under the null over its null draws, power and false-contradicted rate under
    the effect, the effect, the draws per hypothesis, the null draws and the look that decided the rate),
    ``calibrations`` the typed records and ``looks`` the (1-based) look each case stopped at, in the same order."""

    provenance: Provenance
    preset: CalibrationPreset
    calibrations: list[Calibration]
    looks: list[int]
    table: pd.DataFrame

    @property
    def numbers(self) -> dict[str, float]:
        """Glued values: the worst false-supported rate among the designs the book uses, n_sims, and the
        looks' null draws and shares of the level."""
        used = [c for c, case in zip(self.calibrations, self.preset.cases, strict=True) if case.expect_calibrated]
        looks = self.preset.looks
        return {"n_sims": self.preset.n_sims, "worst_false": max(c.false_supported for c in used),
                "n_cases": len(self.calibrations),
                "looks": ", ".join(f"{n:,}" for n in looks),
                "shares": ", ".join(f"{100 * LEVEL * s:.3g}%" for s in self.preset.shares)}

    def alpha(self, i: int) -> float:
        """The level case ``i`` (0-based) was decided at: its look's share of 5%."""
        return LEVEL * self.preset.shares[self.looks[i] - 1]


def rule_of(case: Case) -> Direction | Family:
    """The rule a case's chapter applies: one-sided :class:`Direction` (the default), or for a family design
    ("paired_family") any of its pairs, two-sided, after Holm."""
    return ANY_EFFECT if case.kind == "paired_family" else Direction()


def _scenario(case: Case) -> Scenario:
    kw = ({"sd": 0.1, "held_out": case.held_out} if case.kind == "peak_drop" else
          {"pairs": case.pairs} if case.kind == "paired_family" else {})
    return scenario(case.kind, n=case.n, unit=case.unit, effect=case.effect, **kw)


def sequential_looks(P: CalibrationPreset, expect_calibrated: bool, supported_at: Callable[[int], int]) -> int:
    """The look (1-based) at which the preset's sequential design stops: ``supported_at(n)`` gives the
    "supported" verdicts among the first n null draws; at look j the rate is decided at ``P.shares[j]`` of
    5% (:func:`~layerlab.chapters.calibration.looks.decide_rate`), and an undecided rate goes on to the
    next look's draws (the last look always stops)."""
    for look, (n, share) in enumerate(zip(P.looks, P.shares, strict=True), start=1):
        _, d = decide_rate(supported_at(n), n, expect_calibrated, alpha=LEVEL * share)
        if d.verdict in ("supported", "contradicted"):
            return look
    return len(P.looks)


def run_case(P: CalibrationPreset, i: int) -> tuple[Calibration, int]:
    """Case ``i`` of ``P`` (seed ``P.seed + i``): ``n_sims`` draws per hypothesis, then more null draws at
    each further look while the rate is undecided (:func:`sequential_looks`). Returns (calibration, look)."""
    case = P.cases[i]
    sc, rule, seed = _scenario(case), rule_of(case), P.seed + i
    cal = calibrate(rule, sc, n_sims=P.n_sims, seed=seed)

    def supported_at(n: int) -> int:
        nonlocal cal
        cal = extend_null(cal, rule, sc, n, seed=seed)
        return cal.null_supported

    look = sequential_looks(P, case.expect_calibrated, supported_at)
    return cal, look


def _run_case_alone(P: CalibrationPreset, i: int) -> tuple[Calibration, int]:
    """:func:`run_case` in a worker process, on one thread (the cases are spread over the cores instead)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return run_case(P, i)


def _compute(P: CalibrationPreset, workers: int) -> CalibrationResult:
    idx = range(len(P.cases))
    if workers <= 1 or len(P.cases) <= 1:
        out = [run_case(P, i) for i in idx]
    else:
        import concurrent.futures as cf
        import multiprocessing as mp

        # the costly designs (diversity curves, the atlas family) close CASES: start them first
        with cf.ProcessPoolExecutor(min(workers, len(P.cases)), mp_context=mp.get_context("spawn")) as ex:
            futs = {i: ex.submit(_run_case_alone, P, i) for i in reversed(idx)}
            out = [futs[i].result() for i in idx]
    cals, looks = [c for c, _ in out], [k for _, k in out]
    rows = [{"design": case.label, **cal.row(), "false contradicted": cal.false_contradicted, "look": k}
            for case, cal, k in zip(P.cases, cals, looks, strict=True)]
    table = pd.DataFrame(rows)[["design", "scenario", "n", "false supported", "null sims", "look", "power",
                                "false contradicted", "effect", "sims"]]
    return CalibrationResult(provenance=provenance("calibration", P, model="simulation",
                                                   tokens=fingerprint([dataclasses.asdict(c) for c in P.cases])),
                             preset=P, calibrations=cals, looks=looks, table=table)


def default_workers() -> int:
    """Worker processes: one per core, at most 4."""
    import os

    return max(1, min(4, os.cpu_count() or 1))


def run(preset: CalibrationPreset, *, workers: int | None = None) -> CalibrationResult:
    """Simulate every case of ``preset`` (or read the result back from the cache), the cases spread over
    ``workers`` processes (default: one per core, at most 4; the result does not depend on it)."""
    w = default_workers() if workers is None else int(workers)
    if w < 1:
        raise ValueError(f"calibration.run: workers must be >= 1, got {workers}")
    return cached("calibration", {"preset": dataclasses.asdict(preset)}, lambda: _compute(preset, w))
