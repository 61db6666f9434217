"""How the trained family is read: which held-out loss differences exceed seed noise, and which
members a family-based claim may use (one rule for the coupling, diversity and growth chapters).

Separate from :mod:`layerlab.training.family`, which trains the members: a change to how the family is
read must not retrain it (the trained members are cached under the source that trains them).
"""

from __future__ import annotations

from layerlab.training.family import CONFIG, Family, config_label

__all__ = ["REGIME_RULE", "depth_sweep", "family_regime", "members_table", "seed_resolved_pairs", "separated"]


def seed_resolved_pairs(source, *, alpha: float = 0.05):
    """Which held-out loss differences of the family exceed seed noise.

    ``source``: a :class:`Family` or a table with columns ``depth, width, lr, steps, seed,
    heldout_nll`` (``Family.table()``). Returns one row per compared pair of configurations.

    Rule (stated so that a chapter can restrict a family-based claim to what the family resolves):

    * a *sweep* along an axis of :data:`CONFIG` (depth, width, lr, steps) is a set of >= 2
      configurations that agree on every other field; every pair of configurations inside a sweep is
      compared (``axis``, ``a`` < ``b`` along the axis);
    * the unit is the seed, paired: the same seed means the same batch order, and every member is
      scored on the same validation windows, so per seed ``diff = NLL(b) - NLL(a)`` (nats; < 0: b is
      better), over the ``n`` seeds that both configurations have;
    * ``low``/``high``: the 95% Student-t interval of the mean difference; ``p``: the two-sided paired
      t-test (n - 1 degrees of freedom; with 3 seeds an exact sign-flip test could never reach
      p < 0.25, a t-test can); ``p_holm``: Holm's step-down adjustment over every tested pair of the
      family (Holm 1979); ``resolved``: ``p_holm < alpha``;
    * a pair with fewer than 2 shared seeds (or zero seed variance and no difference) is untestable:
      ``p`` NaN, ``resolved`` False, ``reason`` says why.

    Columns: axis, sweep (the fixed fields), a, b (the axis values), name_a, name_b (configuration
    labels), n, diff, low,
    high, p, p_holm, resolved, reason. The family-wise rate of falsely resolved pairs is at most
    ``alpha`` under Gaussian seed noise (tested by simulation in ``tests/test_family_regime.py``).
    """
    import math

    import numpy as np
    import pandas as pd
    from scipy import stats

    from layerlab.report.inference import holm

    t = source.table() if isinstance(source, Family) else pd.DataFrame(source)
    missing = {*CONFIG, "seed", "heldout_nll"} - set(t.columns)
    if missing:
        raise ValueError(f"seed_resolved_pairs needs columns {sorted(missing)} (a Family or Family.table())")
    by_cfg = {cfg: g.set_index("seed")["heldout_nll"] for cfg, g in t.groupby(list(CONFIG))}
    rows = []
    for i, axis in enumerate(CONFIG):
        sweeps: dict[tuple, list[tuple]] = {}
        for cfg in by_cfg:
            sweeps.setdefault(cfg[:i] + cfg[i + 1:], []).append(cfg)
        for cfgs in sweeps.values():
            cfgs = sorted(cfgs, key=lambda c: c[i])
            for j, ca in enumerate(cfgs):
                for cb in cfgs[j + 1:]:
                    a, b = by_cfg[ca], by_cfg[cb]
                    d = (b - a.reindex(b.index)).dropna().to_numpy(dtype=float)  # [n] per shared seed
                    row = {"axis": axis, "sweep": config_label(ca, skip=i), "a": ca[i], "b": cb[i],
                           "name_a": config_label(ca), "name_b": config_label(cb),
                           "n": d.size, "diff": float(d.mean()) if d.size else math.nan,
                           "low": math.nan, "high": math.nan, "p": math.nan, "reason": ""}
                    sd = float(d.std(ddof=1)) if d.size >= 2 else math.nan
                    if d.size < 2:
                        row["reason"] = f"{d.size} shared seed(s): no seed noise to compare with"
                    elif sd == 0 and d.mean() == 0:
                        row["reason"] = "identical losses"
                    else:
                        half = stats.t.ppf(0.975, d.size - 1) * sd / math.sqrt(d.size)
                        tt = d.mean() / (sd / math.sqrt(d.size)) if sd > 0 else math.copysign(math.inf, d.mean())
                        row |= {"low": row["diff"] - half, "high": row["diff"] + half,
                                "p": float(2 * stats.t.sf(abs(tt), d.size - 1))}
                    rows.append(row)
    cols = ["axis", "sweep", "a", "b", "name_a", "name_b", "n", "diff", "low", "high", "p", "p_holm", "resolved"]
    out = pd.DataFrame(rows, columns=[*cols[:-2], "reason"])
    tested = out["p"].notna().to_numpy()
    out["p_holm"] = np.nan
    if tested.any():
        out.loc[tested, "p_holm"] = holm(out.loc[tested, "p"].to_numpy())
    out["resolved"] = (out["p_holm"] < alpha).fillna(False).astype(bool)
    return out[[*cols, "reason"]]


def separated(pairs, axis: str, sweep: str) -> list:
    """The largest set of values along ``axis`` in ``sweep`` (a ``sweep`` label of
    :func:`seed_resolved_pairs`) whose every pair is ``resolved``: the configurations a family claim may
    order. Ties go to the set with the widest span, then the smallest values; a single value when no
    pair is resolved, [] when the sweep has no pair."""
    import itertools

    sub = pairs[(pairs["axis"] == axis) & (pairs["sweep"] == sweep)]
    values = sorted(set(sub["a"]) | set(sub["b"]))
    if not values:
        return []
    resolved = {(r.a, r.b) for r in sub.itertuples() if r.resolved}
    for size in range(len(values), 1, -1):
        sets = [c for c in itertools.combinations(values, size)
                if all((a, b) in resolved for a, b in itertools.combinations(c, 2))]
        if sets:
            return list(max(sets, key=lambda c: (c[-1] - c[0], [-v for v in c])))
    return values[:1]


_SETTING = ("width", "lr", "steps")  # the fields a depth sweep holds fixed


def _sweep_setting(table) -> tuple:
    """The (width, lr, steps) setting with the most distinct depths, ties broken by the most seeds."""
    import pandas as pd

    g = table.groupby(list(_SETTING))
    counts = pd.DataFrame({"depths": g["depth"].nunique(), "seeds": g["seed"].nunique()})
    return counts.sort_values(["depths", "seeds"], ascending=False, kind="stable").index[0]


def _in_setting(rows, setting: tuple):
    """The rows of ``rows`` at ``setting`` (a (width, lr, steps) tuple)."""
    keep = True
    for col, value in zip(_SETTING, setting):
        keep = keep & (rows[col] == value)
    return rows[keep]


def depth_sweep(table):
    """The family's depth sweep: the rows of ``table`` (columns of :data:`CONFIG`, ``seed``) that share
    the (width, lr, steps) setting with the most distinct depths, ties broken by the most seeds. A width
    or learning-rate side arm with as many seeds but one depth is never the sweep."""
    return table if table.empty else _in_setting(table, _sweep_setting(table))


REGIME_RULE = ("depths whose held-out NLL differ pairwise beyond seed noise: paired over seeds, Student-t, "
               "Holm over every tested pair of the family at 5% (the growth chapter's scaling section)")
"""The member rule of every family-based claim, as the chapters print it."""


def members_table(fam: Family):
    """One row per member of ``fam``: name, depth, width, lr, steps, seed and held-out NLL (what the
    rules here read; :meth:`Family.table` without building every model to count its parameters)."""
    import pandas as pd

    return pd.DataFrame([{"name": m.name, "depth": m.depth, "width": m.width, "lr": m.lr, "steps": m.steps,
                          "seed": m.seed, "heldout_nll": m.heldout_nll} for m in fam])


def family_regime(table, *, rows=None, alpha: float = 0.05, min_configs: int = 3) -> dict:
    """Which members of the depth sweep may enter a family claim, and the regime they are in.

    One rule for every chapter that reads the family (coupling C4/C5, diversity D10, the growth
    chapter's scaling section): the pairs of configurations are tested by :func:`seed_resolved_pairs`
    over the whole family (paired by seed, Holm over every tested pair), and the depths a claim may use
    are :func:`separated` along the depth sweep (:func:`depth_sweep`): the largest set of depths whose
    every pair differs beyond seed noise. Fewer than ``min_configs`` such depths (or no seed replicate)
    means the family cannot test a claim: ``ok`` False with the reason.

    ``table``: one row per member with the columns of :data:`CONFIG`, ``seed`` and ``heldout_nll``
    (:meth:`Family.table`, :func:`members_table`): the **whole** family, so that every chapter adjusts over
    the same pairs. ``rows``: a chapter's own per-member rows (e.g. with its measurements; the members
    it measured, a subset of ``table``), from which ``sweep`` and ``qualified`` are taken (default:
    ``table``). Returns {"ok", "reason", "sweep" (the depth-sweep rows), "qualified" (their
    rows at the kept depths), "kept", "n_seeds", "n_tested" (pairs tested in the family), "rho_depth"
    (Spearman of the seed-mean NLL with depth), "means" ({depth: seed-mean NLL}), "regime" (a
    sentence), "rule" (:data:`REGIME_RULE`)}."""
    import numpy as np
    import pandas as pd

    table = pd.DataFrame(table)
    own = table if rows is None else pd.DataFrame(rows)
    out: dict = {"ok": False, "reason": "the family has no depth sweep", "sweep": own.iloc[0:0],
                 "qualified": own.iloc[0:0], "kept": [], "n_seeds": 0, "n_tested": 0, "rho_depth": float("nan"),
                 "means": {},
                 "regime": "the family has no depth sweep", "rule": REGIME_RULE}
    if table.empty:
        return out
    setting = _sweep_setting(table)
    sw, mine = _in_setting(table, setting), _in_setting(own, setting)
    out["sweep"] = mine
    sw = sw[np.isfinite(sw["heldout_nll"].to_numpy(dtype=float))]
    means = sw.groupby("depth")["heldout_nll"].mean()
    out["means"] = {int(d): float(m) for d, m in means.items()}
    out["n_seeds"] = int(sw.groupby("depth")["seed"].nunique().min())
    out["regime"] = f"only {len(means)} depth(s) in the depth sweep: no regime can be read"
    if len(means) >= 3:
        from scipy.stats import spearmanr

        out["rho_depth"] = float(spearmanr(means.index.to_numpy(float), means.to_numpy()).statistic)
        trend = ("gets worse with depth (under-trained at this budget: deeper members have not caught up)"
                 if out["rho_depth"] > 0 else "improves with depth (deeper members are better at this budget)")
        out["regime"] = (f"held-out NLL {trend}: Spearman rho of the seed-mean NLL with depth "
                         f"{out['rho_depth']:.2f} over {len(means)} depths")
    pairs = seed_resolved_pairs(table, alpha=alpha)
    out["n_tested"] = int(pairs["p"].notna().sum())
    label = config_label((0, *setting), skip=0)
    if not (pairs["p"].notna() & (pairs["axis"] == "depth") & (pairs["sweep"] == label)).any():
        out["reason"] = "no two depths share two seeds, so seed noise cannot be estimated"
        return out
    kept = [int(d) for d in separated(pairs, "depth", label)]
    out["kept"] = kept
    out["qualified"] = mine[mine["depth"].isin(kept)]
    measured = sorted(int(d) for d in set(out["qualified"]["depth"]))
    if len(kept) < min_configs:
        out["reason"] = (f"only {len(kept)} of {len(means)} depths ({', '.join(map(str, kept))}) differ pairwise "
                         f"in held-out NLL beyond seed noise (paired over {out['n_seeds']} seeds, Holm over the "
                         f"family's {out['n_tested']} tested pairs at {alpha:g}); a family claim needs "
                         f"{min_configs} such depths")
        return out
    if len(measured) < min_configs:
        out["reason"] = (f"of the depths separated beyond seed noise ({', '.join(map(str, kept))}) only "
                         f"{len(measured)} are among the members this chapter measured; a family claim needs "
                         f"{min_configs}")
        return out
    out["ok"], out["reason"] = True, ""
    return out
