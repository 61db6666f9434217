"""Statistics of the coupling chapter: the trained family's regime and which members may enter a
family claim (:func:`family_regime`), descriptive predictor R^2 across models and the incremental R^2
of coupling over training loss (spec ``coupling.md`` section 5, C4/C5), and the checkpoint at the
paper's relative step of Fig. 1d."""

from __future__ import annotations

import numpy as np
import pandas as pd

from layerlab.report.stats import bootstrap_ci


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


def depth_sweep(fam: pd.DataFrame) -> pd.DataFrame:
    """The family's depth sweep: the members sharing the (width, lr, steps) setting that has the most
    distinct depths, ties broken by the most seeds (the members that differ only in depth and seed).
    A width or learning-rate side arm with as many seeds but one depth is never the sweep."""
    if fam.empty:
        return fam
    g = fam.groupby(["width", "lr", "steps"])
    counts = pd.DataFrame({"depths": g["depth"].nunique(), "seeds": g["seed"].nunique()})
    w, lr, st = counts.sort_values(["depths", "seeds"], ascending=False, kind="stable").index[0]
    return fam[(fam["width"] == w) & (fam["lr"] == lr) & (fam["steps"] == st)]


def family_regime(fam: pd.DataFrame, *, y: str = "heldout_nll", group: str = "depth", z: float = 2.0,
                  min_configs: int = 3) -> dict:
    """Which members of the depth sweep may enter a family claim, and the regime they are in.

    Rule (stated in the book): sigma is the pooled within-configuration standard deviation of ``y``
    over seeds; configurations (depths) are taken in order of their seed-mean ``y`` and kept when
    that mean differs from every configuration kept so far by more than ``z`` standard errors of a
    difference of two means, z * sigma * sqrt(2 / n_seeds). Members of the kept configurations
    qualify. Fewer than ``min_configs`` kept configurations (or no seed replicate, so no noise
    estimate) means the family cannot test a claim: ``ok`` False with the reason.

    Returns {"ok", "reason", "sweep" (the depth-sweep rows), "qualified" (their rows that qualify),
    "sigma", "n_seeds", "kept" (configurations), "rho_depth" (Spearman of the seed-mean y with depth),
    "regime" (a sentence)}."""
    sw = depth_sweep(fam)
    out: dict = {"ok": False, "sweep": sw, "qualified": sw.iloc[0:0], "sigma": float("nan"), "n_seeds": 0,
                 "kept": [], "rho_depth": float("nan"), "regime": "the family has no depth sweep"}
    if sw.empty:
        out["reason"] = "the family has no depth sweep"
        return out
    g = sw.groupby(group)[y]
    means, n_per = g.mean(), g.count()
    reps = sw.groupby(group).filter(lambda d: len(d) >= 2)
    n_seeds = int(n_per.median())
    out["n_seeds"] = n_seeds
    out["regime"] = f"only {len(means)} depth(s) in the depth sweep: no regime can be read"
    if len(means) >= 3:
        from scipy.stats import spearmanr

        out["rho_depth"] = float(spearmanr(means.index.to_numpy(float), means.to_numpy()).statistic)
        trend = ("gets worse with depth (under-trained at this budget: deeper members have not caught up)"
                 if out["rho_depth"] > 0 else "improves with depth (deeper members are better at this budget)")
        out["regime"] = (f"held-out NLL {trend}: Spearman rho of the seed-mean NLL with depth "
                         f"{out['rho_depth']:.2f} over {len(means)} depths")
    if reps.empty:
        out["reason"] = "no configuration has two seeds, so seed noise cannot be estimated"
        return out
    resid = reps[y] - reps.groupby(group)[y].transform("mean")
    dof = len(reps) - reps[group].nunique()
    sigma = float(np.sqrt((resid**2).sum() / max(dof, 1)))
    out["sigma"] = sigma
    threshold = z * sigma * np.sqrt(2 / max(n_seeds, 1))
    kept: list = []
    for c, m in means.sort_values().items():
        if all(abs(m - means[k]) > threshold for k in kept):
            kept.append(c)
    out["kept"] = sorted(kept)
    out["qualified"] = sw[sw[group].isin(kept)]
    out["threshold"] = float(threshold)
    if len(kept) < min_configs:
        out["reason"] = (f"only {len(kept)} of {len(means)} depths differ in held-out NLL by more than seed noise "
                         f"({z:g} SE of a difference = {threshold:.3g} nats; need {min_configs})")
        return out
    out["ok"], out["reason"] = True, ""
    return out
