"""The shared family's scaling curve (growth chapter, section "The shared family's scaling curve"):
held-out NLL against depth and width with seed bands, and which member differences exceed seed noise.

Every function takes the family's table (``GrowthResult.family`` or
:meth:`layerlab.training.family.Family.table`: one row per member with ``depth, width, lr, steps, seed,
heldout_nll``). The noise rule is :func:`layerlab.training.regime.seed_resolved_pairs` (per-seed paired
differences, Student-t, Holm over every compared pair of the family); the band of a configuration is
the 95% Student-t interval of its mean over seeds (3 seeds: never a percentile bootstrap).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from layerlab.training.family import CONFIG, config_label
from layerlab.training.regime import seed_resolved_pairs, separated

__all__ = ["AXES", "fig_scaling", "main_sweep", "regime_table", "scaling_numbers", "scaling_sentences",
           "section_values", "show_regime"]

AXES = ("depth", "width")
"""The sweeps the section shows."""


def main_sweep(table: pd.DataFrame, axis: str) -> pd.DataFrame:
    """Per configuration of the sweep along ``axis`` with the most configurations (the others fixed):
    the axis value, fixed fields, ``label`` (as in :func:`~layerlab.training.family.config_label`),
    ``sweep`` (the fixed fields' label), seeds ``n``, mean held-out NLL and its 95% t-interval over seeds
    (NaN with one seed), sorted along the axis; empty when no sweep varies ``axis``."""
    from scipy import stats

    others = [c for c in CONFIG if c != axis]
    groups = {k: g for k, g in table.groupby(others) if g[axis].nunique() >= 2}
    if not groups:
        return pd.DataFrame(columns=[axis, *others, "label", "sweep", "n", "mean", "low", "high"])
    key = max(groups, key=lambda k: groups[k][axis].nunique())
    rows = []
    for value, g in groups[key].groupby(axis):
        x = g["heldout_nll"].to_numpy(dtype=float)  # [n seeds]
        half = stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size) if x.size >= 2 else math.nan
        cfg = {axis: value, **dict(zip(others, key))}
        rows.append({**cfg, "label": config_label(tuple(cfg[c] for c in CONFIG)),
                     "sweep": config_label(tuple(cfg[c] for c in CONFIG), skip=CONFIG.index(axis)),
                     "n": x.size, "mean": x.mean(), "low": x.mean() - half, "high": x.mean() + half})
    return pd.DataFrame(rows)


def _fixed(s: pd.DataFrame, axis: str) -> str:
    r = s.iloc[0]
    parts = {"depth": f"depth {r['depth']}", "width": f"width {r['width']}", "lr": f"lr {r['lr']:g}",
             "steps": f"{r['steps']} steps"}
    return ", ".join(v for k, v in parts.items() if k != axis)


def fig_scaling(table: pd.DataFrame, axes: tuple[str, ...] = AXES):
    """Held-out NLL against each axis of ``axes`` (one panel each, log2 axis): the seed mean (line),
    its 95% t-interval over seeds (band) and every seed (dots)."""
    import matplotlib.pyplot as plt

    fig, axs = plt.subplots(1, len(axes), figsize=(4.4 * len(axes), 3.6), squeeze=False)
    for ax, axis in zip(axs[0], axes):
        s = main_sweep(table, axis)
        if s.empty:
            ax.set_axis_off()
            ax.text(0.5, 0.5, f"no {axis} sweep", ha="center", transform=ax.transAxes)
            continue
        ax.plot(s[axis], s["mean"], marker="o", color="C0", label="seed mean")
        ax.fill_between(s[axis], s["low"], s["high"], color="C0", alpha=0.25, label="95% t-interval (seeds)")
        sel = table[np.logical_and.reduce([table[c] == s.iloc[0][c] for c in CONFIG if c != axis])]
        ax.scatter(sel[axis], sel["heldout_nll"], s=12, color="C1", zorder=3, label="one seed")
        ax.set_xscale("log", base=2)
        ax.set_xticks(s[axis].tolist(), [str(v) for v in s[axis]])
        ax.set_xlabel(f"{axis} ({_fixed(s, axis)})")
        ax.set_ylabel("held-out NLL (nats per byte)")
        ax.legend(fontsize=9)
    fig.tight_layout()
    return fig


def regime_table(table: pd.DataFrame, axes: tuple[str, ...] = AXES, digits: int = 3) -> pd.DataFrame:
    """Adjacent steps of each main sweep: the pair, seeds n, mean ΔNLL (larger minus smaller
    configuration; < 0: the larger one is better) with its 95% t-interval, the Holm-adjusted p
    (over every pair of the family) and whether the step exceeds seed noise."""
    pairs = seed_resolved_pairs(table)
    rows = []
    for axis in axes:
        s = main_sweep(table, axis)
        values = s[axis].tolist()
        for a, b in zip(values, values[1:]):
            r = pairs[(pairs.axis == axis) & (pairs.sweep == s["sweep"].iloc[0]) & (pairs.a == a) & (pairs.b == b)]
            r = r.iloc[0]
            ci = "n/a" if math.isnan(r["low"]) else f"[{r['low']:+.{digits}f}, {r['high']:+.{digits}f}]"
            rows.append({"step": f"{axis} {a} → {b}", "seeds": int(r["n"]), "ΔNLL": f"{r['diff']:+.{digits}f}",
                         "95% CI": ci, "Holm p": "n/a" if math.isnan(r["p_holm"]) else f"{r['p_holm']:.3g}",
                         "exceeds seed noise": "yes" if r["resolved"] else "no"})
    return pd.DataFrame(rows)


def scaling_numbers(table: pd.DataFrame) -> dict[str, float | int | str]:
    """Glue values of the section: members, seeds per depth point, the depth and width sweeps' end
    points (mean NLL), the best configuration, resolved / tested pairs."""
    pairs = seed_resolved_pairs(table)
    d, w = main_sweep(table, "depth"), main_sweep(table, "width")
    cfg = table.groupby(list(CONFIG))["heldout_nll"].mean()
    best = cfg.idxmin()
    out: dict[str, float | int | str] = {
        "n_members": len(table), "n_pairs": int(pairs["p"].notna().sum()), "n_resolved": int(pairs.resolved.sum()),
        "best": f"depth {best[0]}, width {best[1]}, lr {best[2]:g}", "best_nll": float(cfg.min()),
    }
    for name, s in (("depth", d), ("width", w)):
        if len(s):
            out |= {f"{name}_seeds": int(s["n"].min()), f"{name}_first": s[name].iloc[0],
                    f"{name}_last": s[name].iloc[-1], f"{name}_first_nll": float(s["mean"].iloc[0]),
                    f"{name}_last_nll": float(s["mean"].iloc[-1])}
    return out


def _trend_sentence(s: pd.DataFrame, axis: str) -> str:
    if len(s) < 2:
        return f"The family has no {axis} sweep."
    m, v = s["mean"].to_numpy(), s[axis].tolist()
    lo, hi = int(s["n"].min()), int(s["n"].max())
    where = f"({_fixed(s, axis)}, mean over {lo if lo == hi else f'{lo}-{hi}'} seeds)"
    rises = [f"{v[i]} → {v[i + 1]}" for i in range(len(v) - 1) if m[i + 1] >= m[i]]
    if not rises:
        return (f"Held-out NLL falls with {axis} at every step of the sweep {where}: from {m[0]:.3f} nats per "
                f"byte at {axis} {v[0]} to {m[-1]:.3f} at {axis} {v[-1]}.")
    best = v[int(np.argmin(m))]
    if m[-1] < m[0]:
        return (f"Held-out NLL is lower at {axis} {v[-1]} ({m[-1]:.3f}) than at {axis} {v[0]} ({m[0]:.3f}) "
                f"{where}, but not at every step: it does not fall at {', '.join(rises)} (best: {axis} {best}).")
    return (f"Held-out NLL does not fall with {axis} {where}: {m[0]:.3f} at {axis} {v[0]}, {m[-1]:.3f} at "
            f"{axis} {v[-1]}, best at {axis} {best}; claims that need a loss ordering along {axis} have none.")


def scaling_sentences(table: pd.DataFrame, axes: tuple[str, ...] = AXES) -> str:
    """The section's reading, generated from the table: for each axis, the trend (one sentence per
    outcome: falls at every step / lower at the end but not monotone / does not fall), then how many
    adjacent steps exceed seed noise and the largest set of configurations separated pairwise beyond it
    (:func:`layerlab.training.regime.separated`, the set other chapters' family claims may use)."""
    pairs = seed_resolved_pairs(table)
    tested = int(pairs["p"].notna().sum())
    out = []
    for axis in axes:
        s = main_sweep(table, axis)
        out.append(_trend_sentence(s, axis))
        if len(s) < 2:
            continue
        steps = regime_table(table, (axis,))
        k, n = int((steps["exceeds seed noise"] == "yes").sum()), len(steps)
        kept = [f"{v:g}" for v in separated(pairs, axis, s["sweep"].iloc[0])]
        if tested == 0:
            out.append(f"No {axis} step can be tested against seed noise (fewer than 2 shared seeds).")
            continue
        res = pairs[(pairs.axis == axis) & (pairs.sweep == s["sweep"].iloc[0]) & pairs.resolved]
        sep = (f"pairs of {axis} values separated beyond seed noise: "
               + ", ".join(f"{a:g} vs {b:g}" for a, b in zip(res["a"], res["b"]))
               + (f"; the largest set of {axis} values separated pairwise (what a family claim may use) is "
                  f"{', '.join(kept)}" if len(kept) >= 2
                  else "") if len(res) else f"no two {axis} values are separated beyond seed noise")
        out.append(f"{k} of the {n} adjacent {axis} steps exceed seed noise (paired over seeds, Holm over all "
                   f"{tested} tested pair{'s' if tested != 1 else ''} at 5%); {sep}.")
    return " ".join(out)


def section_values(table: pd.DataFrame) -> dict:
    """Everything the section glues: :func:`scaling_numbers` plus ``reading``, the generated
    :func:`scaling_sentences` as Markdown (for ``{glue:md}``)."""
    from IPython.display import Markdown

    return {**scaling_numbers(table), "reading": Markdown(scaling_sentences(table))}


def show_regime(table: pd.DataFrame, axes: tuple[str, ...] = AXES):
    """:func:`regime_table` for the page: a Styler without the index."""
    return regime_table(table, axes).style.hide(axis="index")
