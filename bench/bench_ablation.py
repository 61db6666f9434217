"""Prefix-cached vs naive layer-ablation sweep: measured speed-up next to the FLOP-count ideal.

Anatomy spec section 6: ablating layer l leaves h_0..h_{l-1} unchanged, so a sweep can capture the clean
block inputs once and run only blocks l..L-1 plus the unembedding per ablation. This script times the full
skip sweep over every layer both ways, side by side in one run (interleaved rounds naive, cached, GEMM
probes, ...; median of the per-round ratios), checks that the per-window NLLs are bit-identical, and prints

    measured speed-up = t_naive / t_cached,   ideal = FLOPs_naive / FLOPs_cached,   ratio = measured / ideal.

FLOPs count every matmul (2 per multiply-add): the seven block matrices, the attention scores and
weighted sums (causal, mean context (T+1)/2), and the unembedding of every position.

It also prints each sweep's achieved FLOP rate against the fp32 GEMM peak (``_timing.GemmPeak``, same
rounds, same threads). A skipped block is still computed (its writers are zeroed), so the FLOPs are

    naive  = L · (L·block + unembed)                         per token
    cached = (L·block + unembed) + Σ_l ((L−l)·block + unembed)

    python bench/bench_ablation.py                    # SmolLM2-135M (offline), 2 windows of 256 tokens
    python bench/bench_ablation.py --quick            # 1 window of 64 tokens, 2 rounds
    python bench/bench_ablation.py --model tiny-llama --windows 8 --window 64
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import _timing as tm  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from layerlab.core import arch  # noqa: E402
from layerlab.core.models import load_model  # noqa: E402
from layerlab.metrics import ablation  # noqa: E402


def sweep_flops(n_layers: int, block: float, unembed: float) -> tuple[float, float]:
    """Matmul FLOPs per token of the skip sweep: (naive, cached). Naive: L full passes. Cached: one clean
    pass + Σ_l (blocks l..L-1 + unembedding). ``block``/``unembed`` from ``_timing.block_matmul_flops``
    (2·Σ_W d_in·d_out + 2·2·n_heads·head_dim·(T+1)/2 per block, 2·d_model·vocab for the unembedding)."""
    full = n_layers * block + unembed
    cached = full + sum((n_layers - layer) * block + unembed for layer in range(n_layers))
    return n_layers * full, cached


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--windows", type=int)
    ap.add_argument("--window", type=int)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    n_win = args.windows or (1 if args.quick else 2)
    win = args.window or (64 if args.quick else 256)
    rounds = args.rounds or (2 if args.quick else 3)

    model, _ = load_model(args.model)
    mv = arch.view(model)
    g = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(0, mv.vocab_size, (n_win, win), generator=g)
    ivs = ablation.sweep_interventions(model, ["skip"])
    with torch.no_grad():
        model(ids[:1, :8])  # warm-up
    results = {}

    def run(mode):
        def fn():
            results[mode] = ablation.evaluate_interventions(model, ids, ivs, batch_size=n_win,
                                                            prefix_cache=(mode == "cached"))
        return fn

    peak = tm.gemm_peak(tm.own_shapes(model, n_win * win))
    times = tm.interleaved({"naive": run("naive"), "cached": run("cached"), "gemm": peak}, rounds=rounds, warmup=0)
    identical = all(np.array_equal(results["naive"].nll[k], results["cached"].nll[k]) for k in results["naive"].nll)
    identical &= np.array_equal(results["naive"].base, results["cached"].base)
    block, unembed, _ = tm.block_matmul_flops(model, (win + 1) / 2)
    f_naive, f_cached = sweep_flops(mv.n_layers, block, unembed)
    ideal = f_naive / f_cached
    measured, lo, hi = tm.pair_ratio(times["naive"], times["cached"])
    tm.info(f"model {args.model}: {mv.n_layers} layers, {n_win}x{win} tokens, torch threads "
            f"{torch.get_num_threads()}, full skip sweep ({mv.n_layers} ablations), {rounds} interleaved rounds")
    tm.info(f"naive {tm.spread(times['naive'])}; prefix-cached {tm.spread(times['cached'])}")
    tm.info(f"FLOPs/token: block {block / 1e6:.2f} M, unembedding {unembed / 1e6:.2f} M; ideal speed-up {ideal:.3f}x")
    tm.info(peak.describe())
    tm.result("prefix-cached sweep speed-up / FLOP ideal",
              f"{measured / ideal:.3f} (speed-up {measured:.3f}x, spread {lo:.3f}..{hi:.3f}; ideal {ideal:.3f}x)",
              ">= 0.90", measured / ideal >= 0.90)
    tm.result("naive vs prefix-cached NLLs", "bit-identical" if identical else "DIFFERENT", "bit-identical", identical)
    n_tok = n_win * win
    tm.achieved_vs_peak("naive sweep", f_naive * n_tok, min(times["naive"]), peak)
    tm.achieved_vs_peak("prefix-cached sweep", f_cached * n_tok, min(times["cached"]), peak)


if __name__ == "__main__":
    main()
