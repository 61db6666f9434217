"""Statistics of the coupling chapter: descriptive predictor R^2 across models and the incremental R^2
of coupling over training loss (spec ``coupling.md`` section 5, C4/C5), and the checkpoint at the
paper's relative step of Fig. 1d. The family's regime and which members may enter a family claim
(:func:`family_regime`) is the family-wide rule of :mod:`layerlab.training.regime`, re-exported here."""

from __future__ import annotations

import numpy as np
import pandas as pd

from layerlab.report.stats import bootstrap_ci
from layerlab.training.regime import depth_sweep, family_regime

__all__ = ["depth_sweep", "family_regime", "incremental_r2", "middle_step", "predictor_stats"]


def middle_step(steps, fraction: float = 4000 / 143000) -> int:
    """The checkpoint closest (in log steps) to ``fraction`` of training: the paper's Fig. 1d shows
    Pythia step 4000 of 143000."""
    steps = sorted(s for s in steps if s > 0)
    target = np.log(fraction * steps[-1])
    return min(steps, key=lambda s: abs(np.log(s) - target))


def predictor_stats(df: pd.DataFrame, y: str, predictors: list[str], *, n_boot: int = 2000,
                    seed: int = 0) -> pd.DataFrame:
    """For each predictor x: OLS R^2 of y on x with a percentile-bootstrap CI (models resampled, the
    line refitted), Pearson r and Spearman rho with CIs (:mod:`layerlab.report.stats`)."""
    from layerlab.report.stats import pearson, spearman

    out = []
    yv = df[y].to_numpy(float)
    for p in predictors:
        xv = df[p].to_numpy(float)

        def r2(idx: np.ndarray, xv=xv) -> float:
            idx = idx.astype(int)
            xs, ys = xv[idx], yv[idx]
            if np.std(xs) == 0 or np.std(ys) == 0:
                return 0.0
            return float(np.corrcoef(xs, ys)[0, 1] ** 2)

        row = {"predictor": p, "n": len(df)}
        if len(df) < 4:  # too few models for a CI: report nothing rather than a fake interval
            row.update({c: float("nan") for c in ("R2", "R2_low", "R2_high", "pearson", "pearson_low",
                                                  "pearson_high", "spearman", "spearman_low", "spearman_high")})
        else:
            ci = bootstrap_ci(np.arange(len(df)), r2, n_boot=n_boot, seed=seed)
            pr, sp = pearson(xv, yv, seed=seed), spearman(xv, yv, seed=seed)
            row.update({"R2": ci.estimate, "R2_low": ci.low, "R2_high": ci.high,
                        "pearson": pr.r, "pearson_low": pr.low, "pearson_high": pr.high,
                        "spearman": sp.r, "spearman_low": sp.low, "spearman_high": sp.high})
        out.append(row)
    return pd.DataFrame(out)


def incremental_r2(df: pd.DataFrame, y: str, base: list[str], extra: list[str], *, n_boot: int = 2000,
                   seed: int = 0) -> dict[str, float]:
    """Does ``extra`` (e.g. coupling) add to ``base`` (e.g. training loss)? OLS R^2 of y on base and on
    base + extra, and the gain with a percentile-bootstrap CI (models resampled, both fits redone).
    Spec section 5 (C4/C5): coupling and held-out loss both move with training."""
    yv = df[y].to_numpy(float)
    Xb, Xf = df[base].to_numpy(float), df[base + extra].to_numpy(float)

    def r2(X: np.ndarray, idx: np.ndarray) -> float:
        A = np.column_stack([np.ones(len(idx)), X[idx]])
        coef, *_ = np.linalg.lstsq(A, yv[idx], rcond=None)
        res = yv[idx] - A @ coef
        sst = ((yv[idx] - yv[idx].mean()) ** 2).sum()
        return float(1 - (res**2).sum() / sst) if sst > 0 else float("nan")

    n = len(df)
    if n < len(base) + len(extra) + 3:
        return {"r2_base": float("nan"), "r2_full": float("nan"), "gain": float("nan"), "gain_low": float("nan"),
                "gain_high": float("nan"), "n": n}
    ci = bootstrap_ci(np.arange(n), lambda i: r2(Xf, i.astype(int)) - r2(Xb, i.astype(int)), n_boot=n_boot, seed=seed)
    return {"r2_base": r2(Xb, np.arange(n)), "r2_full": r2(Xf, np.arange(n)), "gain": ci.estimate,
            "gain_low": ci.low, "gain_high": ci.high, "n": n}
