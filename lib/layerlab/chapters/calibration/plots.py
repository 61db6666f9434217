"""Figures of the calibration appendix: false-supported rate and power per design."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from layerlab.chapters.calibration.claims import case_decision
from layerlab.chapters.calibration.run import CalibrationResult

__all__ = ["fig_calibration"]


def fig_calibration(result: CalibrationResult):
    """Left: false "supported" under the null per design with its Clopper-Pearson interval at the level of
    the look that decided it (line: the 5% standard). Right: power at the claimed effect. One bar per
    design, labelled with its n and unit."""
    t = result.table
    y = np.arange(len(t))
    ci = np.array([[ev.low, ev.high] for ev, _ in (case_decision(result, i) for i in range(len(t)))])
    rate = t["false supported"].to_numpy()
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 0.45 * len(t) + 1.2), sharey=True)
    a.barh(y, rate, color="#c0504d")
    a.errorbar(rate, y, xerr=[rate - ci[:, 0], ci[:, 1] - rate], fmt="none", ecolor="k", elinewidth=1, capsize=2)
    a.axvline(0.05, color="k", lw=1, ls="--")
    a.set_xlabel('false "supported"\nunder the null')
    a.set_yticks(y, [f"{d} (n = {n})" for d, n in zip(t["design"], t["n"], strict=True)], fontsize=9)
    a.invert_yaxis()
    b.barh(y, t["power"], color="#4f81bd")
    b.set_xlim(0, 1)
    b.set_xlabel("power at the\nclaimed effect")
    fig.tight_layout()
    return fig
