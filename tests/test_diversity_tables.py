"""The diversity chapter's family tables: narrow enough for a page and a printed sheet, and faithful."""

from __future__ import annotations

import numpy as np
import pandas as pd

from layerlab.chapters.diversity.result import FAMILY_TERMS, DiversityResult


def _family() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for depth in (4, 2):
        for seed in (1, 0):
            for init in ("trained", "random"):
                row = {"name": f"d{depth}s{seed}", "depth": depth, "seed": seed, "init": init,
                       "heldout_nll": 1.8 + 0.01 * depth, "M": 2 * depth + 1}
                for t in FAMILY_TERMS:
                    v = float(rng.uniform(0.1, 1.0))
                    row[t], row[f"{t}_low"], row[f"{t}_high"] = v, v - 0.05, v + 0.04
                rows.append(row)
    return pd.DataFrame(rows)


def _result(family):
    return DiversityResult(tasks={}, headline="topic", lm={}, random_init={}, family=family, provenance=None)


def test_family_tables_split_estimates_from_intervals_and_keep_every_member():
    fam = _family()
    r = _result(fam)
    est, ci = r.family_table(), r.family_table(intervals=True)
    # one row per member and init, in depth then seed order (the raw frame was in reverse order)
    assert len(est) == len(ci) == len(fam)
    assert list(est.index) == sorted(est.index, key=lambda i: (i[0], i[1], i[2]))
    assert list(est.columns) == ["held-out NLL", "M", *FAMILY_TERMS]
    assert list(ci.columns) == FAMILY_TERMS
    # narrow: no _low/_high columns in the estimates (the 30-column frame overflowed the printed sheet)
    assert not [c for c in est.columns if c.endswith(("_low", "_high"))]
    # faithful: each cell is the member's own number, not a neighbour's
    src = fam.set_index(["depth", "seed", "init"])
    for key in est.index:
        assert est.loc[key, "acc"] == round(src.loc[key, "acc"], 3)
        assert ci.loc[key, "div"] == f"{src.loc[key, 'div_low']:.3f}–{src.loc[key, 'div_high']:.3f}"


def test_family_table_is_none_without_a_family():
    r = _result(None)
    assert r.family_table() is None and r.family_table(intervals=True) is None
