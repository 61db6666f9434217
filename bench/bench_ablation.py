"""Prefix-cached vs naive layer-ablation sweep: measured speed-up next to the FLOP-count ideal.

Anatomy spec section 6: ablating layer l leaves h_0..h_{l-1} unchanged, so a sweep can capture the clean
block inputs once and run only blocks l..L-1 plus the unembedding per ablation. This script times the full
skip sweep over every layer both ways, side by side in one run (interleaved repeats, best of each), checks
that the per-window NLLs are bit-identical, and prints

    measured speed-up = t_naive / t_cached,   ideal = FLOPs_naive / FLOPs_cached,   ratio = measured / ideal.

FLOPs count every matmul (2 per multiply-add): the seven block matrices, the attention scores and
weighted sums (causal, mean context (T+1)/2), and the unembedding of every position.

    python bench/bench_ablation.py                    # SmolLM2-135M (offline), 2 windows of 256 tokens
    python bench/bench_ablation.py --model tiny-llama --windows 8 --window 64
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from layerlab.core import arch  # noqa: E402
from layerlab.core.models import load_model  # noqa: E402
from layerlab.metrics import ablation


def flops_per_token(model: torch.nn.Module, window: int) -> tuple[float, float]:
    """(FLOPs of one block, FLOPs of the unembedding) per token, for a causal window of ``window`` tokens."""
    mv = arch.view(model)
    b = mv.blocks[0]
    mats = sum(p.numel() for k, p in b.weights().items() if "norm" not in k)
    cfg = model.config
    n_heads = getattr(cfg, "num_attention_heads", None) or cfg.n_head
    head_dim = getattr(cfg, "head_dim", None) or mv.d_model // n_heads
    attn = 2 * 2 * n_heads * head_dim * (window + 1) / 2  # QK^T and AV over the mean causal context
    return 2.0 * mats + attn, 2.0 * mv.d_model * mv.vocab_size


def ideal_speedup(n_layers: int, block: float, unembed: float) -> float:
    """Naive: L full passes. Cached: one clean pass + Σ_l (blocks l..L-1 + unembedding)."""
    full = n_layers * block + unembed
    naive = n_layers * full
    cached = full + sum((n_layers - layer) * block + unembed for layer in range(n_layers))
    return naive / cached


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--windows", type=int, default=2)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    model, _ = load_model(args.model)
    mv = arch.view(model)
    g = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(0, mv.vocab_size, (args.windows, args.window), generator=g)
    ivs = ablation.sweep_interventions(model, ["skip"])
    with torch.no_grad():
        model(ids[:1, :8])  # warm-up
    times = {"naive": [], "cached": []}
    results = {}
    for _ in range(args.repeats):
        for mode in ("naive", "cached"):
            t0 = time.perf_counter()
            res = ablation.evaluate_interventions(model, ids, ivs, batch_size=args.windows,
                                                  prefix_cache=(mode == "cached"))
            times[mode].append(time.perf_counter() - t0)
            results[mode] = res
    identical = all(np.array_equal(results["naive"].nll[k], results["cached"].nll[k]) for k in results["naive"].nll)
    identical &= np.array_equal(results["naive"].base, results["cached"].base)
    block, unembed = flops_per_token(model, args.window)
    ideal = ideal_speedup(mv.n_layers, block, unembed)
    t_naive, t_cached = min(times["naive"]), min(times["cached"])
    measured = t_naive / t_cached
    print(f"model {args.model}: {mv.n_layers} layers, {args.windows}x{args.window} tokens, "
          f"torch threads {torch.get_num_threads()}")
    print(f"full skip sweep ({mv.n_layers} ablations): naive {t_naive:.2f} s, prefix-cached {t_cached:.2f} s "
          f"(best of {args.repeats}; all: naive {[round(t, 2) for t in times['naive']]}, "
          f"cached {[round(t, 2) for t in times['cached']]})")
    print(f"FLOPs/token: block {block / 1e6:.2f} M, unembedding {unembed / 1e6:.2f} M")
    print(f"measured speed-up {measured:.3f}x | ideal (FLOPs) {ideal:.3f}x | measured/ideal {measured / ideal:.3f} "
          f"(target >= 0.90) | bit-identical: {identical}")


if __name__ == "__main__":
    main()
