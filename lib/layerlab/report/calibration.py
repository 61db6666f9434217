"""Calibration of a verdict rule at a chapter's real n: how often it says "supported" when the claim
is false (the null), and how often when the claimed effect is there (power).

A scenario is a pair of samplers, one drawing data under the null and one under the claimed effect,
plus the function that turns one draw into :class:`~layerlab.report.inference.Evidence` exactly as the
chapter does. :func:`calibrate` runs ``n_sims`` draws of each and counts verdicts; :func:`extend_null`
adds null draws to a calibration whose false-"supported" rate is still too uncertain to decide (each
added draw has its own seed, so the rate over N null draws is the same however it was reached). The
book's standard: false "supported" <= 5% at the real n, with the power printed next to it.

Built-in scenarios (:func:`scenario`) cover the designs of the book: a paired mean difference over
units (seeds, prompts, documents), a correlation over units, and the peak-then-drop of a depth curve
(the winner's-curse case: choosing the peak on the data that measure the drop).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from layerlab.report.inference import Evidence, correlation, held_out_peak_drop, mean_effect
from layerlab.report.verdicts import Band, Direction, Equivalence, Family

__all__ = ["Calibration", "Scenario", "calibrate", "extend_null", "family_scenario", "naive_peak_drop", "scenario",
           "sequential_scenario"]

Rule = Direction | Band | Equivalence | Family


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """A design to calibrate: ``null(rng)`` and ``effect(rng)`` draw one data set each;
    ``evidence(data, seed)`` computes the chapter's Evidence from it."""

    name: str
    n: int
    unit: str
    null: Callable[[np.random.Generator], Any]
    effect: Callable[[np.random.Generator], Any]
    evidence: Callable[[Any, int], Evidence]
    effect_size: str  # the claimed effect the power refers to, in words


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """Verdict rates of ``rule`` on ``scenario`` over ``n_sims`` draws of each hypothesis; the false-"supported"
    rate over ``null_sims`` null draws (more than ``n_sims`` after :func:`extend_null`)."""

    scenario: str
    rule: str
    n: int
    unit: str
    n_sims: int
    effect_size: str
    false_supported: float  # P(supported | null)
    false_contradicted: float  # P(contradicted | effect)
    power: float  # P(supported | effect)
    n_null: int | None = None  # null draws behind false_supported when extended (None: n_sims)

    @property
    def null_sims(self) -> int:
        """The null draws behind ``false_supported``."""
        return self.n_sims if self.n_null is None else self.n_null

    @property
    def null_supported(self) -> int:
        """How many of the null draws the rule called "supported"."""
        return round(self.false_supported * self.null_sims)

    @property
    def calibrated(self) -> bool:
        """False "supported" at most 5% (with Monte-Carlo slack of two standard errors)."""
        return self.false_supported <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / self.null_sims)

    def row(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "rule": self.rule, "n": f"{self.n} {self.unit}",
                "false supported": self.false_supported, "power": self.power, "effect": self.effect_size,
                "sims": self.n_sims, "null sims": self.null_sims}


def calibrate(rule: Rule, sc: Scenario, *, n_sims: int = 400, seed: int = 0) -> Calibration:
    """Run ``sc`` ``n_sims`` times under its null and under its effect and count ``rule``'s verdicts."""
    if n_sims < 20:
        raise ValueError(f"calibrate needs n_sims >= 20 to say anything, got {n_sims}")
    rng = np.random.default_rng(seed)
    null_v, eff_v = [], []
    for i in range(n_sims):
        null_v.append(rule.decide(sc.evidence(sc.null(rng), i)).verdict)
        eff_v.append(rule.decide(sc.evidence(sc.effect(rng), i)).verdict)
    null_a, eff_a = np.array(null_v), np.array(eff_v)
    return Calibration(scenario=sc.name, rule=rule.name, n=sc.n, unit=sc.unit, n_sims=n_sims,
                       effect_size=sc.effect_size, false_supported=float((null_a == "supported").mean()),
                       false_contradicted=float((eff_a == "contradicted").mean()),
                       power=float((eff_a == "supported").mean()))


def extend_null(cal: Calibration, rule: Rule, sc: Scenario, n_total: int, *, seed: int = 0) -> Calibration:
    """``cal`` with its false-"supported" rate over ``n_total`` null draws: the draws it has plus draws
    ``cal.null_sims .. n_total - 1``, draw i from ``default_rng([seed, 1, i])`` with evidence seed i (the
    stream of :func:`calibrate` covers the first ``n_sims``). The power is unchanged. ``seed`` must be the
    seed ``cal`` was made with."""
    if n_total < cal.null_sims:
        raise ValueError(f"extend_null: n_total = {n_total} is below the {cal.null_sims} null draws already made")
    if cal.scenario != sc.name or cal.rule != rule.name or cal.n != sc.n:
        raise ValueError(f"extend_null: the calibration is of {cal.scenario!r} / {cal.rule!r} at n = {cal.n}, "
                         f"not of {sc.name!r} / {rule.name!r} at n = {sc.n}; pass the same rule and scenario")
    if n_total == cal.null_sims:
        return cal
    k = cal.null_supported
    for i in range(cal.null_sims, n_total):
        data = sc.null(np.random.default_rng([seed, 1, i]))
        k += rule.decide(sc.evidence(data, i)).verdict == "supported"
    return replace(cal, false_supported=k / n_total, n_null=n_total)


def naive_peak_drop(curves: Any, *, unit: str, seed: int = 0) -> Evidence:
    """The biased design this module exists to reject: peak chosen and drop measured on the same units."""
    c = np.asarray(curves, dtype=np.float64)
    peak = int(np.argmax(c.mean(axis=0)))
    return mean_effect(c[:, peak] - c[:, -1], unit=unit, seed=seed, n_boot=500, n_perm=2000)


def _builtin_scenario(kind: str, *, n: int, unit: str, effect: float, sd: float = 1.0, n_depths: int = 31,
                      held_out: bool = True) -> Scenario:
    """A built-in design at ``n`` units.

    "paired": one paired difference per unit, N(0, sd) under the null and N(effect, sd) under the effect.
    "correlation": x ~ N(0, 1), y = rho x + noise with rho = 0 (null) or ``effect``.
    "peak_drop": per-unit depth curves ([n, n_depths]) that rise and plateau (null: no fall after the
      peak) or rise then fall by ``effect`` over the last third; noise sd per point. ``held_out``
      picks :func:`~layerlab.report.inference.held_out_peak_drop` or the biased :func:`naive_peak_drop`."""
    if kind == "paired":
        return Scenario(name=f"paired mean, sd {sd:g}", n=n, unit=unit, effect_size=f"mean {effect:g}",
                        null=lambda r: r.normal(0.0, sd, n), effect=lambda r: r.normal(effect, sd, n),
                        evidence=lambda d, s: mean_effect(d, unit=unit, seed=s, n_boot=500, n_perm=2000))
    if kind == "correlation":
        def draw(rho: float) -> Callable[[np.random.Generator], Any]:
            def f(r: np.random.Generator) -> np.ndarray:
                x = r.normal(size=n)
                return np.stack([x, rho * x + np.sqrt(1 - rho**2) * r.normal(size=n)])
            return f
        return Scenario(name="Spearman correlation", n=n, unit=unit, effect_size=f"rho {effect:g}",
                        null=draw(0.0), effect=draw(effect),
                        evidence=lambda d, s: correlation(d[0], d[1], unit=unit, seed=s, n_boot=500, n_perm=2000))
    if kind == "peak_drop":
        depth = np.linspace(0.0, 1.0, n_depths)
        rise = 1 - np.exp(-6 * depth)  # rises, then plateaus: no true fall

        def curves(fall: float) -> Callable[[np.random.Generator], Any]:
            shape = rise - fall * np.clip((depth - 2 / 3) * 3, 0, None)
            return lambda r: shape[None] + r.normal(0.0, sd, (n, n_depths))
        ev = ((lambda d, s: held_out_peak_drop(d, unit=unit, seed=s, n_boot=500, n_perm=2000)) if held_out
              else (lambda d, s: naive_peak_drop(d, unit=unit, seed=s)))
        return Scenario(name=f"peak then drop over {n_depths} depths ({'held-out' if held_out else 'naive'} peak)",
                        n=n, unit=unit, effect_size=f"fall {effect:g}", null=curves(0.0), effect=curves(effect),
                        evidence=ev)
    if kind == "sequential":  # the adaptive-budget design (layerlab.report.sequential)
        return sequential_scenario(n=n, unit=unit, effect=effect, sd=sd)
    raise ValueError(f"unknown scenario kind {kind!r}: use 'paired', 'correlation', 'peak_drop' or 'sequential'")


def sequential_scenario(*, n: int, unit: str, effect: float, sd: float = 1.0, looks: Sequence[int] | None = None):
    """The calibration scenario of a sequential design with its last look at ``n`` units (looks at n/4,
    n/2, n by default, alpha split 1/4, 1/4, 1/2; the anatomy chapter's design): per-unit values
    N(0, sd) under the null and N(effect, sd) under the effect, stopping as soon as 0 leaves the
    repeated interval."""
    from layerlab.report.sequential import SequentialDesign, run_sequential

    looks = tuple(looks) if looks is not None else (max(2, n // 4), max(3, n // 2), n)
    design = SequentialDesign(looks=looks, weights=(0.25, 0.25, 0.5) if len(looks) == 3 else None)
    return Scenario(name=f"sequential paired mean ({design.name}), sd {sd:g}", n=n, unit=unit,
                    effect_size=f"mean {effect:g}", null=lambda r: r.normal(0.0, sd, n),
                    effect=lambda r: r.normal(effect, sd, n),
                    evidence=lambda d, s: run_sequential(d, design, thresholds=(0.0,), unit=unit, seed=s,
                                                         n_perm=1000)[0])


# --------------------------------------------------------------------------------------------------
# Scenario kinds of the coupling chapter (C4, C9).


def _stratified_scenario(*, n: int, unit: str, effect: float, n_strata: int = 3) -> Scenario:
    """``n`` members in ``n_strata`` seeds (n // n_strata each). Null: within a seed x and y are
    independent, but each seed shifts both (the pseudo-replication trap of pooling members); effect:
    within-seed correlation ``effect``. Evidence: :func:`layerlab.report.stratified.stratified_correlation`."""
    from layerlab.report.stratified import stratified_correlation

    per = n // n_strata
    strata = np.repeat(np.arange(n_strata), per)

    def draw(rho: float) -> Callable[[np.random.Generator], Any]:
        def f(r: np.random.Generator) -> np.ndarray:
            shift = np.repeat(r.normal(0.0, 3.0, n_strata), per)
            x = r.normal(size=per * n_strata)
            y = rho * x + np.sqrt(1 - rho**2) * r.normal(size=per * n_strata)
            return np.stack([x + shift, y + shift])
        return f
    return Scenario(name=f"within-seed Spearman, {n_strata} seeds x {per}", n=n_strata, unit=f"{unit} ({per} each)",
                    effect_size=f"rho {effect:g} within seeds", null=draw(0.0), effect=draw(effect),
                    evidence=lambda d, s: stratified_correlation(d[0], d[1], strata, unit=unit, seed=s, n_perm=1000))


def _growth_scenario(*, n: int, unit: str, effect: float, n_depths: int = 30, sd: float = 0.1,
                     margin: float = float(np.log(1.2))) -> Scenario:
    """Per-unit step-norm curves over ``n_depths`` blocks with log-normal noise ``sd``. Null: linear
    growth from 1 to the same end value as the effect's; effect: exponential growth at rate ``effect``
    per block. Evidence: the mean over units of log(best competitor's / exponential's leave-one-out
    error) minus ``margin`` (:mod:`layerlab.report.model_compare`; "exponential wins clearly")."""
    from layerlab.report.model_compare import GROWTH_MODELS, loo_errors, preference

    x = np.arange(1, n_depths + 1, dtype=np.float64)
    exp_curve = np.exp(effect * (x - 1))
    lin_curve = 1 + (exp_curve[-1] - 1) * (x - 1) / (n_depths - 1)

    def draw(curve: np.ndarray) -> Callable[[np.random.Generator], Any]:
        return lambda r: curve[None] * np.exp(sd * r.normal(size=(n, n_depths)))

    def ev(d: np.ndarray, s: int) -> Evidence:
        pref = preference(loo_errors(x, d), list(GROWTH_MODELS), "exponential")
        return mean_effect(pref - margin, unit=unit, seed=s, n_perm=2000)
    return Scenario(name=f"exponential vs linear / power law, {n_depths} depths, held out", n=n, unit=unit,
                    effect_size=f"growth {effect:g} per block", null=draw(lin_curve), effect=draw(exp_curve),
                    evidence=ev)


# --------------------------------------------------------------------------- diversity designs (appended)
def _diversity_scenario(kind: str, *, n: int, unit: str, effect: float, n_depths: int = 31) -> Scenario | None:
    """The diversity chapter's designs (Kamigaito et al. 2025 claims D3, D5/D8, D6/D10, D9) at ``n`` units
    and ``n_depths`` depths; None for any other kind.

    "partial_omega" (D3): Bias = Omega + a, Div = Omega + b per example with Omega dominating both (raw
      r ~ 1); corr(a, b) = 0 (null) or ``effect``; :func:`~layerlab.report.resampled.partial_correlation`.
    "curve_partial" / "curve_partial_rank" (D8 / D5): per-example curves over depths sharing one depth
      trend; the depth-level deviations of y from the trend are independent of x's (null) or correlated
      ``effect``; :func:`~layerlab.report.resampled.curve_partial_correlation` (Pearson / Spearman).
    "peak_binary" / "peak_binary_naive" (D6 / D10): per-example 0/1 correctness over depths, persistent
      within an example, rising to a plateau (null) or falling by ``effect`` over the last third; the
      held-out peak or the biased same-data peak.
    "curve_lag" (D9): per-example falling Bias and rising Div curves with half-way points ``effect``
      depths apart (null: the same depth); bootstrap of :func:`~layerlab.report.resampled.lag`."""
    from layerlab.report import resampled as rs

    k = np.arange(n_depths, dtype=np.float64)
    if kind == "partial_omega":
        def draw(rho: float) -> Callable[[np.random.Generator], Any]:
            def f(r: np.random.Generator) -> np.ndarray:
                omega = r.lognormal(10.0, 1.0, n)
                a = r.normal(size=n)
                b = rho * a + np.sqrt(1 - rho**2) * r.normal(size=n)
                return np.stack([omega + 100 * a, omega + 100 * b, omega])
            return f
        return Scenario(name="partial r(Bias, Div | Omega), Omega dominating", n=n, unit=unit,
                        effect_size=f"partial rho {effect:g}", null=draw(0.0), effect=draw(effect),
                        evidence=lambda d, s: rs.partial_correlation(d[0], d[1], d[2], unit=unit, n_boot=200,
                                                                     n_perm=500, seed=s))
    if kind in ("curve_partial", "curve_partial_rank"):
        trend = 1 - np.exp(-k / 6)

        def draw_c(rho: float) -> Callable[[np.random.Generator], Any]:
            def f(r: np.random.Generator) -> np.ndarray:
                ex, ey = r.normal(0, 0.1, n_depths), r.normal(0, 0.1, n_depths)  # depth-level deviations
                ey = rho * ex + np.sqrt(1 - rho**2) * ey
                x = trend + ex + r.normal(0, 0.5, (n, n_depths))
                y = -trend + ey + r.normal(0, 0.5, (n, n_depths))
                return np.stack([x, y])
            return f
        rank = kind == "curve_partial_rank"
        return Scenario(name=f"partial {'Spearman' if rank else 'r'} of mean curves given depth ({n_depths} depths)",
                        n=n, unit=unit, effect_size=f"depth-level rho {effect:g}", null=draw_c(0.0),
                        effect=draw_c(effect),
                        evidence=lambda d, s: rs.curve_partial_correlation(d[0], d[1], unit=unit, rank=rank,
                                                                           n_boot=100, n_perm=300, seed=s))
    if kind in ("peak_binary", "peak_binary_naive"):
        p_rise = 0.3 + 0.5 * (1 - np.exp(-6 * k / max(n_depths - 1, 1)))

        def draw_p(fall: float) -> Callable[[np.random.Generator], Any]:
            p = p_rise - fall * np.clip((k / max(n_depths - 1, 1) - 2 / 3) * 3, 0, None)

            def f(r: np.random.Generator) -> np.ndarray:
                keep = r.random((n, 1)) < 0.7  # an example's difficulty persists across depths
                w = np.where(keep, r.random((n, 1)), r.random((n, n_depths)))
                return (w < p[None]).astype(np.float64)
            return f
        naive = kind == "peak_binary_naive"
        ev = ((lambda d, s: naive_peak_drop(d, unit=unit, seed=s)) if naive
              else (lambda d, s: held_out_peak_drop(d, unit=unit, seed=s, n_perm=2000)))
        return Scenario(name=f"0/1 accuracy peak then drop over {n_depths} depths "
                        f"({'naive' if naive else 'held-out'} peak)", n=n, unit=unit,
                        effect_size=f"fall {effect:g}", null=draw_p(0.0), effect=draw_p(effect), evidence=ev)
    if kind == "curve_lag":
        def draw_l(shift: float) -> Callable[[np.random.Generator], Any]:
            def f(r: np.random.Generator) -> np.ndarray:
                kb = n_depths / 3
                b = 1 / (1 + np.exp((k - kb) / 2)) + r.normal(0, 0.3, (n, n_depths))
                dv = 1 / (1 + np.exp(-(k - kb - shift) / 2)) + r.normal(0, 0.3, (n, n_depths))
                return np.stack([b, dv])
            return f
        return Scenario(name=f"lag of half-change depths ({n_depths} depths)", n=n, unit=unit,
                        effect_size=f"lag {effect:g} depths", null=draw_l(0.0), effect=draw_l(effect),
                        evidence=lambda d, s: rs.bootstrap_evidence(
                            lambda i: rs.lag(d[0][i].mean(0), d[1][i].mean(0)), n, unit=unit, n_boot=200, seed=s))
    return None


def family_scenario(*, n: int, unit: str, effect: float, pairs: int) -> Scenario:
    """A family of ``pairs`` paired tests over the same ``n`` units (the atlas's AF/AA rows: one test per lens
    pair over family members, any of them after Holm). Null: every pair's per-unit differences N(0, 1);
    effect: one pair shifted by ``effect`` (the weakest "some pair" claim), the others null. Each pair's
    Evidence is the chapter's sign-flip test (:func:`~layerlab.report.inference.mean_effect`, exact up to 12
    units, else ``permutations_for_holm(4000, pairs)`` random flips, the same flips for every pair, as the
    chapter draws them with one seed); the rule sees one Evidence per pair. The random-flip branch is
    :func:`~layerlab.report.inference._sign_flip_p` for all pairs at once (a test checks they agree): changing
    that function instead would re-key every cached result of the book."""
    from layerlab.report.inference import _EXACT_FLIPS, mean_effect, permutations_for_holm

    n_perm = permutations_for_holm(4000, pairs)

    def evidence(d: np.ndarray, s: int) -> list[Evidence]:  # d [n, pairs]
        if n <= _EXACT_FLIPS:
            return [mean_effect(d[:, j], unit=unit, seed=s, n_perm=n_perm) for j in range(pairs)]
        signs = np.random.default_rng(s).choice((1.0, -1.0), size=(n_perm, n))
        cols = np.ascontiguousarray(d.T)  # [pairs, n]: each pair's units contiguous, as mean_effect sums them
        stats_, obs = signs @ d / n, cols.mean(axis=1)  # [n_perm, pairs], [pairs]
        if (signs > 0).all(axis=1).any():
            # the identity flip (drawn in about n_perm / 2^n of the draws) ties the observed mean and counts or not
            # by the last bit of the sum: then every pair is summed as the chapter's test sums it (other flips
            # cannot tie continuous data)
            for j in range(pairs):
                stats_[:, j] = signs @ cols[j] / n
        pg = (1 + (stats_ >= obs).sum(axis=0)) / (n_perm + 1)
        pl = (1 + (stats_ <= obs).sum(axis=0)) / (n_perm + 1)
        return [Evidence(estimate=float(obs[j]), low=None, high=None, p_greater=float(pg[j]), p_less=float(pl[j]),
                         unit=unit, n=n, method=f"sign-flip test ({n_perm} random flips)", p_min=1 / (n_perm + 1))
                for j in range(pairs)]

    def draw(shift: float) -> Callable[[np.random.Generator], Any]:
        def f(r: np.random.Generator) -> np.ndarray:
            d = r.normal(size=(n, pairs))
            d[:, 0] += shift
            return d
        return f
    return Scenario(name=f"any of {pairs} paired tests, two-sided, Holm", n=n, unit=unit,
                    effect_size=f"mean {effect:g} in one pair", null=draw(0.0), effect=draw(effect), evidence=evidence)


def scenario(kind: str, *, n: int, unit: str, effect: float, **kw: Any) -> Scenario:
    """The design ``kind`` at ``n`` units: the built-in kinds ("paired", "correlation", "peak_drop",
    "sequential"; :func:`_builtin_scenario`), the coupling chapter's "stratified_correlation" (C4: members
    nested in seeds) and "growth_compare" (C9: exponential vs linear / power law by held-out error), and
    the diversity chapter's kinds (:func:`_diversity_scenario`), and "paired_family" (``pairs=m``: the atlas's
    any-of-m family, :func:`family_scenario`)."""
    if kind == "paired_family":
        return family_scenario(n=n, unit=unit, effect=effect, pairs=int(kw.get("pairs", 1)))
    if kind == "stratified_correlation":
        return _stratified_scenario(n=n, unit=unit, effect=effect)
    if kind == "growth_compare":
        return _growth_scenario(n=n, unit=unit, effect=effect)
    sc = _diversity_scenario(kind, n=n, unit=unit, effect=effect, n_depths=kw.get("n_depths", 31))
    return sc if sc is not None else _builtin_scenario(kind, n=n, unit=unit, effect=effect, **kw)
