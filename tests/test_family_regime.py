"""Which held-out loss differences of the trained family exceed seed noise
(:func:`layerlab.training.regime.seed_resolved_pairs`, :func:`separated`), on synthetic tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from layerlab.training.regime import seed_resolved_pairs, separated


def _table(means: dict[tuple, float], seeds=(0, 1, 2), noise: float = 0.01, seed: int = 0,
           seed_effect: float = 0.0) -> pd.DataFrame:
    """Members (depth, width) -> mean NLL; per-seed Gaussian noise plus a shared per-seed offset."""
    rng = np.random.default_rng(seed)
    offset = {s: seed_effect * rng.standard_normal() for s in seeds}
    rows = []
    for (d, w), mu in means.items():
        for s in seeds:
            rows.append({"depth": d, "width": w, "lr": 3e-3, "steps": 100, "seed": s,
                         "heldout_nll": mu + offset[s] + noise * rng.standard_normal()})
    return pd.DataFrame(rows)


DEPTHS = {(1, 64): 2.0, (2, 64): 1.9, (4, 64): 1.8, (8, 64): 1.7}


def test_differences_far_above_seed_noise_are_resolved():
    pairs = seed_resolved_pairs(_table(DEPTHS, noise=0.002))
    depth = pairs[pairs.axis == "depth"]
    assert len(depth) == 6  # all pairs of 4 depths
    assert depth.resolved.all() and (depth["diff"] < 0).all() and (depth["high"] < 0).all()
    assert (depth["n"] == 3).all() and (depth["p_holm"] >= depth["p"]).all()
    assert separated(pairs, "depth", "w64-lr0.003-t100") == [1, 2, 4, 8]


def test_differences_below_seed_noise_are_not_resolved():
    flat = {k: 2.0 + 0.001 * i for i, k in enumerate(DEPTHS)}  # steps of 0.001 nats, noise 0.05
    pairs = seed_resolved_pairs(_table(flat, noise=0.05))
    assert not pairs.resolved.any()
    assert separated(pairs, "depth", "w64-lr0.003-t100") == [1]  # no pair separates: one depth, no order


def test_separated_is_the_largest_pairwise_resolved_set():
    means = {(1, 64): 2.0, (2, 64): 2.0, (4, 64): 1.5, (8, 64): 1.5}  # two plateaus
    pairs = seed_resolved_pairs(_table(means, noise=0.002))
    assert separated(pairs, "depth", "w64-lr0.003-t100") == [1, 8]  # one per plateau, the widest span
    steps = {(1, 64): 2.0, (2, 64): 2.0, (4, 64): 1.5, (8, 64): 1.0}
    pairs = seed_resolved_pairs(_table(steps, noise=0.002))
    assert separated(pairs, "depth", "w64-lr0.003-t100") == [1, 4, 8]  # a greedy walk could not do better


def test_pairing_over_seeds_removes_a_shared_seed_effect():
    # a seed offset common to every member (same data order) is 10x the difference: paired, it cancels
    pairs = seed_resolved_pairs(_table({(1, 64): 2.0, (2, 64): 1.95}, seeds=(0, 1, 2, 3), noise=0.002,
                                       seed_effect=0.5))
    assert pairs.resolved.all()


def test_single_seed_configurations_are_untestable_and_sweeps_are_per_axis():
    t = pd.concat([_table(DEPTHS, noise=0.002),
                   _table({(4, 32): 1.9, (4, 128): 1.7}, noise=0.002, seed=1),
                   _table({(4, 256): 1.6}, seeds=(0,), seed=2)])
    pairs = seed_resolved_pairs(t)
    width = pairs[pairs.axis == "width"]
    assert set(zip(width.a, width.b)) == {(32, 64), (32, 128), (32, 256), (64, 128), (64, 256), (128, 256)}
    single = width[width.b == 256]
    assert (single["n"] == 1).all() and single["p"].isna().all() and not single.resolved.any()
    assert single.reason.str.contains("shared seed").all()
    assert set(pairs.axis) == {"depth", "width"}  # lr and steps do not vary
    assert separated(pairs, "lr", "d4-w64-t100") == []


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="heldout_nll"):
        seed_resolved_pairs(pd.DataFrame({"depth": [1], "width": [64], "lr": [1e-3], "steps": [1], "seed": [0]}))


def test_false_resolution_rate_under_the_null_and_power():
    """Under no true difference (Gaussian seed noise, 3 seeds, the cpu family's 5 depths x 3 widths),
    the rate of families with any falsely resolved pair stays <= 5% (Holm controls the family-wise
    rate); power at a difference of 5 seed-SDs per depth step is printed, not asserted."""
    cfgs = [(d, 64) for d in (1, 2, 4, 8, 12)] + [(4, 32), (4, 128)]
    n_sim = 200
    false = sum(seed_resolved_pairs(_table(dict.fromkeys(cfgs, 2.0), noise=0.02, seed=i)).resolved.any()
                for i in range(n_sim))
    assert false / n_sim <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / n_sim)
    effect = {c: 2.0 - 0.1 * k for k, c in enumerate(cfgs[:5])} | {(4, 32): 1.9, (4, 128): 1.7}
    power = np.mean([seed_resolved_pairs(_table(effect, noise=0.02, seed=i)).query("axis == 'depth'").resolved.mean()
                     for i in range(20)])
    print(f"false-resolution rate {false / n_sim:.3f} (n_sim={n_sim}); power per depth pair at 5 SD steps {power:.2f}")


def test_family_claims_are_falsely_allowed_at_most_alpha_at_the_real_n():
    """family_regime opens a family claim (``ok``: 3 depths separated pairwise) under no true depth effect
    in at most 5% of families (3 seeds, the cpu family's layout); power at 5 seed-SD depth steps printed."""
    from layerlab.training.regime import family_regime

    cfgs = [(d, 64) for d in (1, 2, 4, 8, 12)] + [(4, 32), (4, 128)]
    n_sim = 200
    false = sum(family_regime(_table(dict.fromkeys(cfgs, 2.0), noise=0.02, seed=i))["ok"] for i in range(n_sim))
    assert false / n_sim <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / n_sim)
    effect = {c: 2.0 - 0.1 * k for k, c in enumerate(cfgs[:5])} | {(4, 32): 1.9, (4, 128): 1.7}
    power = np.mean([family_regime(_table(effect, noise=0.02, seed=i))["ok"] for i in range(20)])
    assert power > 0.5  # a clear depth effect does open the claims
    print(f"family claims falsely allowed {false / n_sim:.3f} (n_sim={n_sim}); allowed at 5 SD steps {power:.2f}")
