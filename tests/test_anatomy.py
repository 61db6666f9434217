"""The anatomy chapter package: presets, decision rules of the claim rows (spec anatomy.md section 5)."""

from __future__ import annotations

import pytest

from layerlab.chapters import anatomy
from layerlab.report.claims import Claim


def test_presets_per_profile():
    assert anatomy.PRESETS["gpu"].device == "cuda"
    assert {p.device for k, p in anatomy.PRESETS.items() if k != "gpu"} == {"cpu"}
    p = anatomy.preset("smoke")
    assert (p.model, p.tiny_layers, p.window, p.budget_docs, p.recovery_layers) == (
        "tiny-llama",
        18,
        64,
        (8, 12),
        (8, 11, 14, 17),
    )
    cpu = anatomy.preset("cpu")
    # the adaptive budget's last look: 32 documents x 4 windows of 255 scored tokens >= 32k tokens
    assert cpu.budget_docs[-1] >= 30 and cpu.budget_docs[-1] * cpu.budget_windows[-1] * (cpu.window - 1) >= 32_000
    assert min(cpu.budget_docs) >= 8 and cpu.sample_docs >= 8 and len(cpu.recovery_layers) >= 8


def test_preset_lists_become_tuples():
    # papermill passes list parameters; presets stay hashable and compare equal to the tuple form
    p = anatomy.preset("smoke", alphas=[0.5, 0.9], seed=3)
    assert p.alphas == (0.5, 0.9) and p.seed == 3
    assert hash(p) == hash(anatomy.preset("smoke", alphas=(0.5, 0.9), seed=3))
    with pytest.raises(ValueError, match="unknown preset field"):
        anatomy.preset("cpu", ablation_token=1)


def test_document_plan_keeps_recovery_text_out_of_the_pool():
    from layerlab.chapters.anatomy.budget import document_plan

    test, train = [f"t{i}" for i in range(6)], [f"r{i}" for i in range(40)]
    pool, rec = document_plan(test, train, need=32, seed=0)
    assert len(pool) == 32 == len(set(pool)) and set(test) <= set(pool)
    assert not set(pool) & set(rec) and set(pool) | set(rec) == set(test) | set(train)
    assert document_plan(test, train, need=32, seed=0) == (pool, rec)  # seeded
    with pytest.raises(ValueError, match="budget_docs"):
        document_plan(test, train[:5], need=32)


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
