"""The anatomy chapter package: presets, decision rules of the claim rows (spec anatomy.md section 5)."""

from __future__ import annotations

import pandas as pd
import pytest

from layerlab.chapters import anatomy
from layerlab.chapters.anatomy.claims import manipulation_claim
from layerlab.report.claims import Claim


def test_presets_per_profile():
    assert anatomy.PRESETS["gpu"].device == "cuda"
    assert {p.device for k, p in anatomy.PRESETS.items() if k != "gpu"} == {"cpu"}
    p = anatomy.preset("smoke")
    assert (p.model, p.tiny_layers, p.window, p.ablation_tokens, p.recovery_layers) == (
        "tiny-llama",
        18,
        64,
        512,
        (8, 11, 14, 17),
    )


def test_preset_lists_become_tuples():
    # papermill passes list parameters; presets stay hashable and compare equal to the tuple form
    p = anatomy.preset("smoke", alphas=[0.5, 0.9], seed=3)
    assert p.alphas == (0.5, 0.9) and p.seed == 3
    assert hash(p) == hash(anatomy.preset("smoke", alphas=(0.5, 0.9), seed=3))
    with pytest.raises(ValueError, match="unknown preset field"):
        anatomy.preset("cpu", ablation_token=1)


def _manip(scale_high: float, others_low: float) -> pd.DataFrame:
    rows = [
        {
            "config": "scale0.9",
            "target": "redundant",
            "dnll_low": 0.0,
            "dnll_high": scale_high,
            "dppl_pct": 5.0,
            "dppl_low": 0.0,
            "dppl_high": 10.0,
        }
    ]
    rows += [
        {
            "config": c,
            "target": "redundant",
            "dnll_low": others_low,
            "dnll_high": others_low + 1,
            "dppl_pct": 500.0,
            "dppl_low": 400.0,
            "dppl_high": 600.0,
        }
        for c in ("zero", "clone", "blend")
    ]
    return pd.DataFrame(rows)


def test_manipulation_rule():
    # A10 holds only when α = 0.9's ΔNLL CI lies below every other strategy's
    assert manipulation_claim(_manip(0.1, 0.5))[0].verdict == "supported"
    assert manipulation_claim(_manip(0.6, 0.5))[0].verdict == "not supported"
    assert manipulation_claim(_manip(0.1, 0.5).iloc[1:]) == []


def test_summary_counts_supported_rows():
    rows = [
        Claim(id="a", claim="x", paper="y", tag="paper", ours=1.0, ci_low=None, ci_high=None, null="-", verdict=v)
        for v in ("supported", "not supported")
    ]
    rows.append(
        Claim(
            id="b",
            claim="x",
            paper="y",
            tag="paper",
            ours=1.0,
            ci_low=None,
            ci_high=None,
            null="-",
            verdict="supported",
        )
    )
    assert anatomy.summary(rows) == {"n_claims": 3, "n_supported": 2}
