"""Bench hygiene (no timings asserted: speed targets live in bench/ as printed ratios)."""

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _timing():
    spec = importlib.util.spec_from_file_location("_timing", BENCH / "_timing.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_files_are_named_alike():
    names = sorted(p.name for p in BENCH.glob("*.py"))
    assert names, "no benches"
    assert all(n.startswith("bench_") or n.startswith("_") for n in names), names


def test_matmul_flop_count_matches_the_shapes():
    from layerlab.core import arch
    from layerlab.core.models import tiny_model

    tm = _timing()
    model = tiny_model("llama")
    mv = arch.view(model)
    cfg = model.config
    block, unembed, shapes = tm.block_matmul_flops(model, ctx=10)
    heads = cfg.num_attention_heads
    hd = getattr(cfg, "head_dim", None) or mv.d_model // heads
    weights = sum(p.numel() for p in mv.blocks[0].block.parameters() if p.ndim == 2)
    assert block == pytest.approx(2 * weights + 4 * heads * hd * 10)
    assert unembed == 2 * mv.d_model * mv.vocab_size
    assert all(m == 7 for m, _, _ in tm.own_shapes(model, 7))


def test_gemm_peak_is_max_over_shapes():
    tm = _timing()
    peak = tm.gemm_peak([(8, 8, 8), (16, 8, 4)], big=False)
    peak()
    rate, shape = peak.peak()
    assert rate == max(peak.rates().values()) and shape in peak.rates()
