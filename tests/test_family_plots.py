"""The growth chapter's section on the shared family's scaling curve, on synthetic family tables."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd

from layerlab.chapters.growth import family_plots as fp


def _table(depth_means, width_means=(1.9, 1.8, 1.7), noise=0.002, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    cfgs = [(d, 64, mu) for d, mu in zip((1, 2, 4, 8), depth_means)]
    cfgs += [(4, w, mu) for w, mu in zip((32, 128), (width_means[0], width_means[2]))]
    for d, w, mu in cfgs:
        for s in range(3):
            rows.append({"name": f"d{d}-w{w}-s{s}", "depth": d, "width": w, "lr": 3e-3, "steps": 1024, "seed": s,
                         "heldout_nll": mu + noise * rng.standard_normal()})
    return pd.DataFrame(rows)


def test_main_sweep_has_seed_bands():
    s = fp.main_sweep(_table((2.0, 1.9, 1.8, 1.7)), "depth")
    assert list(s["depth"]) == [1, 2, 4, 8] and (s["n"] == 3).all()
    assert (s["low"] < s["mean"]).all() and (s["mean"] < s["high"]).all()
    w = fp.main_sweep(_table((2.0, 1.9, 1.8, 1.7)), "width")
    assert list(w["width"]) == [32, 64, 128] and (w["depth"] == 4).all()


def test_regime_table_and_sentences_when_loss_falls_with_depth_and_width():
    t = _table((2.0, 1.9, 1.8, 1.7))
    tab = fp.regime_table(t)
    assert list(tab["step"]) == ["depth 1 → 2", "depth 2 → 4", "depth 4 → 8", "width 32 → 64", "width 64 → 128"]
    assert (tab["exceeds seed noise"] == "yes").all() and (tab["ΔNLL"].astype(float) < 0).all()
    assert tab["ΔNLL"].str.match(r"^-\d\.\d{3}$").all()  # signed, 3 decimals (not -0.035000)
    text = fp.scaling_sentences(t)
    assert "falls with depth at every step" in text and "falls with width at every step" in text
    assert "3 of the 3 adjacent depth steps exceed seed noise" in text
    assert "separated pairwise (what a family claim may use) is 1, 2, 4, 8" in text and "1 vs 8" in text


def test_sentences_when_loss_is_not_monotone_or_rises():
    bumpy = fp.scaling_sentences(_table((2.0, 1.9, 1.95, 1.7)))
    assert "but not at every step: it does not fall at 2 → 4" in bumpy
    rising = fp.scaling_sentences(_table((1.7, 1.8, 1.9, 2.0)))
    assert "does not fall with depth" in rising and "best at depth 1" in rising


def test_differences_inside_seed_noise_are_not_called_resolved():
    t = _table((2.0, 1.999, 1.998, 1.997), noise=0.05)
    tab = fp.regime_table(t)
    assert (tab[tab.step.str.startswith("depth")]["exceeds seed noise"] == "no").all()
    text = fp.scaling_sentences(t)
    assert "0 of the 3 adjacent depth steps exceed seed noise" in text
    assert "no two depth values are separated beyond seed noise" in text


def test_figure_and_glue_values():
    t = _table((2.0, 1.9, 1.8, 1.7))
    fig = fp.fig_scaling(t)
    assert len(fig.axes) == 2 and fig.axes[0].get_xlabel().startswith("depth")
    v = fp.section_values(t)
    assert v["n_members"] == len(t) and v["best"].startswith("depth 8, width 64")
    assert v["depth_first"] == 1 and v["depth_last"] == 8 and v["depth_seeds"] == 3
    assert "falls with depth" in v["reading"].data


def test_page_table_has_no_index():
    html = fp.show_regime(_table((2.0, 1.9, 1.8, 1.7))).to_html()
    assert "depth 1 → 2" in html and 'class="row_heading' not in html
