"""Presets of the calibration appendix: how many simulations per design, and the designs themselves.

Each :class:`Case` is one design of the book at its real number of units: the chapter and claims it
stands for, the scenario kind of :func:`layerlab.report.calibration.scenario`, n and the unit, and the
claimed effect (in units of the between-unit standard deviation for a mean, as a correlation for a
correlation, in loss units with noise sd 0.1 for a peak-then-drop curve).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from layerlab.core.protocol import Preset, make_preset

__all__ = ["CASES", "PRESETS", "CalibrationPreset", "Case", "preset"]


@dataclass(frozen=True, kw_only=True)
class Case:
    """One design to calibrate (see the module docstring)."""

    label: str  # where the design is used, e.g. "residual R2-R6"
    kind: str  # a scenario kind of layerlab.report.calibration.scenario ("paired", "correlation", ...)
    n: int
    unit: str
    effect: float
    held_out: bool = True  # peak_drop only: the held-out peak (False: the biased same-data peak)
    pairs: int = 1  # paired_family only: tests in the family (decided "any of them, two-sided, after Holm")
    expect_calibrated: bool = True  # False for the biased design the book rejects


CASES: tuple[Case, ...] = (
    Case(label="residual R2-R6 (12 documents)", kind="paired", n=12, unit="documents", effect=1.0),
    Case(label="3 seeds", kind="paired", n=3, unit="seeds", effect=2.0),
    Case(label="5 seeds", kind="paired", n=5, unit="seeds", effect=2.0),
    Case(label="8 seeds", kind="paired", n=8, unit="seeds", effect=1.5),
    Case(label="4 prompts", kind="correlation", n=4, unit="prompts", effect=0.9),
    Case(label="8 prompts", kind="correlation", n=8, unit="prompts", effect=0.8),
    Case(label="peak then drop, held-out peak", kind="peak_drop", n=16, unit="documents", effect=0.3),
    Case(label="peak then drop, same-data peak", kind="peak_drop", n=16, unit="documents", effect=0.3,
         held_out=False, expect_calibrated=False),
    # coupling chapter at its cpu n (16 prompts with nulls, 6 prompts shared with the random-init twins,
    # 3 seeds x 6 depths in the family's depth sweep, 6 members in the Q4_1 control, 19 Fig. 1a models on gpu)
    Case(label="coupling C1 (16 prompts, excess over own null)", kind="paired", n=16, unit="prompts", effect=1.0),
    Case(label="coupling C2/C3/C8 (6 shared prompts, paired)", kind="paired", n=6, unit="prompts", effect=1.5),
    Case(label="coupling C4 (3 seeds x 6 depths, within-seed)", kind="stratified_correlation", n=18, unit="seeds",
         effect=0.6),
    Case(label="coupling C5/C6/C12 (3 seeds)", kind="paired", n=3, unit="seeds", effect=2.0),
    Case(label="coupling C9 (16 prompts, held-out growth shape)", kind="growth_compare", n=16, unit="prompts",
         effect=0.09),
    Case(label="coupling Q1 (6 family members)", kind="paired", n=6, unit="members", effect=1.5),
    Case(label="coupling C4-Fig1a (19 models, gpu)", kind="correlation", n=19, unit="models", effect=0.8),
    Case(label="anatomy adaptive token budget (looks at 8, 16, 32 documents)", kind="sequential", n=32,
         unit="documents", effect=0.6),
    Case(label="anatomy A9 recovery steps vs importance (8 layers, mean of 3 seeds)", kind="correlation", n=8,
         unit="layers", effect=0.8),
    # diversity chapter, cpu profile: 128 test examples per task and readout, 31 truncation depths
    Case(label="diversity D3 partial r(Bias, Div | Omega) (128 examples)", kind="partial_omega", n=128,
         unit="examples", effect=0.3),
    Case(label="diversity D8 partial r of depth curves (128 examples, 31 depths)", kind="curve_partial", n=128,
         unit="examples", effect=0.6),
    Case(label="diversity D5 partial Spearman over blocks (128 examples)", kind="curve_partial_rank", n=128,
         unit="examples", effect=0.6),
    Case(label="diversity D6/D10 held-out peak, 0/1 accuracy (128 examples)", kind="peak_binary", n=128,
         unit="examples", effect=0.15),
    Case(label="diversity D6/D10 same-data peak, 0/1 accuracy (128 examples)", kind="peak_binary_naive", n=128,
         unit="examples", effect=0.15, expect_calibrated=False),
    Case(label="diversity D9 lag of Div behind Bias (128 examples)", kind="curve_lag", n=128, unit="examples",
         effect=3.0),
    Case(label="growth G1-G5 (6 seeds, seed-paired differences; G2/G3 vs 80% of the claimed size)", kind="paired",
         n=6, unit="seeds", effect=1.5),
    # atlas AF/AA: 174 cross-family lens pairs (21 lenses in 5 families), each a two-sided sign-flip test over the
    # trained family's 17 members (AF: trained minus twin, paired; AA: the twins' rho), "some pair" after Holm
    Case(label="atlas AF/AA any of 174 lens pairs, two-sided (17 family members, paired)", kind="paired_family",
         n=17, unit="members", effect=1.0, pairs=174),
)
"""The designs of the book, at the chapters' real n (``cpu`` profile)."""


@dataclass(frozen=True, kw_only=True)
class CalibrationPreset(Preset):
    """How many simulations per hypothesis and case. ``n_sims`` draws of each hypothesis; then the null
    draws of a case whose false-"supported" rate is still undecided against 5% go on to the next of
    ``null_looks`` (the first is ``n_sims``), each look deciding at its ``look_shares`` of the 5% level
    (Bonferroni over the looks, so the interval of the look that decides is valid whatever made the
    simulations go on)."""

    n_sims: int
    null_looks: tuple[int, ...] = ()  # () = one look at n_sims
    look_shares: tuple[float, ...] = ()  # () = (1.0,): the whole level at the one look
    cases: tuple[Case, ...] = CASES
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        looks, shares = self.looks, self.shares
        if looks[0] != self.n_sims or any(b <= a for a, b in zip(looks, looks[1:], strict=False)):
            raise ValueError(f"CalibrationPreset: null_looks must start at n_sims = {self.n_sims} and increase, "
                             f"got {self.null_looks}")
        if len(shares) != len(looks) or any(s <= 0 for s in shares) or abs(sum(shares) - 1) > 1e-9:
            raise ValueError(f"CalibrationPreset: look_shares needs one positive share per look ({len(looks)}), "
                             f"adding up to 1; got {self.look_shares}")

    @property
    def looks(self) -> tuple[int, ...]:
        """Null draws at each look."""
        return tuple(self.null_looks) or (self.n_sims,)

    @property
    def shares(self) -> tuple[float, ...]:
        """The share of the 5% level each look decides at."""
        return tuple(self.look_shares) or (1.0,)


# cpu: 400 draws per hypothesis; a rate still undecided goes on to 1,600, 6,400 and 25,600 null draws (400
# draws cannot tell a rate of 3.5% from 5%; the atlas's any-of-141 Holm family sat at about 4.4%, which
# 6,400 draws cannot tell from 5% either). The slowest designs cost about 2 s per 100 null draws on one
# core (AMD EPYC, 2026-12-06), the atlas family 0.4 s; the cases are spread over the cores (run.py).
PRESETS: dict[str, CalibrationPreset] = {
    "smoke": CalibrationPreset(n_sims=40, null_looks=(40, 80), look_shares=(0.5, 0.5)),
    "cpu": CalibrationPreset(n_sims=400, null_looks=(400, 1600, 6400, 25600), look_shares=(0.2, 0.2, 0.2, 0.4)),
    "gpu": CalibrationPreset(n_sims=2000, null_looks=(2000, 8000, 32000), look_shares=(0.25, 0.25, 0.5)),
}


def preset(profile: str, **overrides: Any) -> CalibrationPreset:
    """``PRESETS[profile]`` with ``overrides``; unknown profiles or fields fail clearly."""
    return make_preset(PRESETS, profile, **overrides)
