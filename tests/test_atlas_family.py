"""The atlas on the trained family: the learned-vs-architectural rule on synthetic per-member correlations,
and the family section end to end on the smoke family (every member and its twin get an atlas)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from layerlab.chapters import atlas
from layerlab.chapters.atlas.family import compare, run_family


def _results(rhos: np.ndarray) -> list:
    """Stand-ins for AtlasResults: only ``agreement`` (a, b, rho) is read by ``compare``."""
    pairs = [("skip", "coupling"), ("skip", "mlp_div"), ("coupling", "mlp_div")]
    return [SimpleNamespace(agreement=pd.DataFrame({"a": [p[0] for p in pairs], "b": [p[1] for p in pairs],
                                                    "rho": row})) for row in rhos]


def test_compare_labels_learned_architectural_and_undecided():
    rng = np.random.default_rng(0)
    m = 14
    trained = np.stack([0.8 + 0.05 * rng.normal(size=m),  # learned: twins near 0
                        0.6 + 0.05 * rng.normal(size=m),  # architectural: twins agree as much
                        0.1 * rng.normal(size=m)], axis=1)  # nothing anywhere
    init = np.stack([0.05 * rng.normal(size=m), 0.6 + 0.05 * rng.normal(size=m), 0.1 * rng.normal(size=m)], axis=1)
    df = compare(_results(trained), _results(init)).set_index(["a", "b"])
    assert df.loc[("skip", "coupling"), "label"] == "learned: strengthened"
    assert df.loc[("skip", "mlp_div"), "label"] == "architectural"
    assert df.loc[("coupling", "mlp_div"), "label"] == "undecided"
    assert (df.n == m).all() and "agree more" in df.loc[("skip", "coupling"), "sentence"]
    # the twins' mean rho carries its own t-interval over members, and AA reports it (it showed none)
    from scipy import stats

    from layerlab.chapters.atlas.claims import _family_row

    x = init[:, 1]
    half = stats.t.ppf(0.975, m - 1) * x.std(ddof=1) / np.sqrt(m)
    row = df.loc[("skip", "mlp_div")]
    assert (row.init_low, row.init_high) == pytest.approx((x.mean() - half, x.mean() + half))
    fa = SimpleNamespace(pairs=df.reset_index())
    aa = _family_row("AA", fa, learned=False)
    assert aa.ci_low is not None and aa.ci_low <= aa.ours <= aa.ci_high
    # the family rows are two-sided tests and say so (a negative largest effect under "effect > 0" misread)
    af = _family_row("AF", fa, learned=True)
    for r in (aa, af):
        assert r.rule.startswith("two-sided: effect ≠ 0; any of") and "effect > 0" not in r.rule
        assert "claimed direction" not in r.reading
    neg = df.reset_index().assign(rho_init=lambda t: -t.rho_init, init_low=lambda t: -t.init_high,
                                  init_high=lambda t: -t.init_low, p_init_greater=df.reset_index().p_init_less,
                                  p_init_less=df.reset_index().p_init_greater)
    aa_neg = _family_row("AA", SimpleNamespace(pairs=neg), learned=False)
    assert aa_neg.ours < 0 and aa_neg.verdict == aa.verdict == "supported"
    assert "tested" not in af.note  # every cross-family pair has its members
    # a pair no 2 members define (a lens undefined in the twins) is left out, and the note says how many were tested
    gap = df.reset_index()
    gap.loc[(gap.a == "skip") & (gap.b == "coupling"), "n"] = 1
    af_gap = _family_row("AF", SimpleNamespace(pairs=gap), learned=True)
    assert "2 of the 3 cross-family pairs are tested" in af_gap.note and "Holm over 2 pairs" in af_gap.null
    # the opposite effect is "weakened", not "strengthened"
    flipped = compare(_results(init), _results(trained)).set_index(["a", "b"])
    assert flipped.loc[("skip", "coupling"), "label"] == "learned: weakened"
    # too few members: nothing can be decided (the smallest sign-flip p is 2^-n)
    few = compare(_results(trained[:3]), _results(init[:3]))
    assert set(few.label) == {"undecided"}
    with pytest.raises(ValueError, match="one twin per trained member"):
        compare(_results(trained), _results(init[:2]))


def test_family_section_runs_on_the_smoke_family():
    P = atlas.preset("smoke")
    fa = run_family(P, min_depth=2)
    assert len(fa.trained) == len(fa.init) == len(fa.members) >= 2
    assert all(r.provenance.model.startswith("family:") for r in fa.trained)
    assert all(r.provenance.model.startswith("family-init:") for r in fa.init)
    # a twin is a different model from its trained member: some lens differs
    assert not fa.trained[0].table.estimate.equals(fa.init[0].table.estimate)
    assert set(fa.pairs.label) <= {"learned: strengthened", "learned: weakened", "architectural", "undecided"}
    assert fa.numbers["n_members"] == len(fa.members) and fa.numbers["n_pairs"] == len(fa.pairs)
    with pytest.raises(ValueError, match="no member"):
        atlas.run(atlas.preset("smoke", model="family:no-such-member"))


def test_compare_can_decide_one_pair_among_171_at_16_members():
    """16 members are past the exact sign-flip range, so the p-values come from random flips; with 4,000
    the smallest Holm-adjusted p over 171 pairs would be 171 / 4001 = 0.043 > 0.025 and no pair could ever
    be learned. The flip count follows the number of pairs."""
    rng = np.random.default_rng(1)
    m, pairs = 16, [(f"l{i}", f"l{j}") for i in range(19) for j in range(i + 1, 19)]
    assert len(pairs) == 171
    trained, init = 0.1 * rng.normal(size=(m, 171)), 0.1 * rng.normal(size=(m, 171))
    trained[:, 0] += 0.8  # one agreement that training creates

    def res(rhos):
        return [SimpleNamespace(agreement=pd.DataFrame({"a": [p[0] for p in pairs], "b": [p[1] for p in pairs],
                                                        "rho": row})) for row in rhos]

    df = compare(res(trained), res(init))
    assert df.label.iloc[0] == "learned: strengthened" and df.p_diff_greater_holm.iloc[0] <= 0.025
    assert (df.label.iloc[1:] == "undecided").mean() > 0.95
