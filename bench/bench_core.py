"""Core benchmarks, measured side by side in one run (prints ratios; asserts nothing).

1. Forward with hook capture (all residual points) vs plain forward, SmolLM2-135M: interleaved rounds
   (plain, capture, GEMM probes, plain, capture, ...) after a warm-up; the overhead is the median of the
   per-round ratios capture/plain, with its spread. Goal: <= 1.05.
2. The plain forward's achieved FLOP rate against the machine's fp32 GEMM peak, measured in the same
   rounds at the same thread count (large GEMMs and the forward's own shapes; see ``_timing.GemmPeak``).
3. Cached safetensors load vs GGUF dequantise-and-convert load (skipped with ``--quick``).

Run: ``python bench/bench_core.py [--quick]`` (or ``make bench``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import _timing as tm  # noqa: E402
import torch  # noqa: E402

from layerlab.core import arch, models, residual  # noqa: E402


def forward_flops(model, B: int, T: int) -> float:
    """Matmul FLOPs of one causal forward over B×T tokens (2 per multiply-add):

        B·T · (L · [2·Σ_W d_in·d_out + 2·2·n_heads·head_dim·(T+1)/2] + 2·d_model·vocab)

    i.e. the seven block matrices, QK^T and AV over the mean causal context, and the unembedding of every
    position (SmolLM2-135M: 269 MFLOP/token at T=256)."""
    v = arch.view(model)
    block, unembed, _ = tm.block_matmul_flops(model, (T + 1) / 2)
    return B * T * (v.n_layers * block + unembed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2x128 tokens, 4 rounds, no GGUF conversion")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seq", type=int)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's; 1 on a crowded machine)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    B = a.batch or (2 if a.quick else 4)
    T = a.seq or (128 if a.quick else 256)
    rounds = a.rounds or (4 if a.quick else 7)
    torch.manual_seed(0)
    tm.info(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {os.cpu_count()} CPUs; "
            f"forward {B}x{T} tokens, {rounds} interleaved rounds after 1 warm-up")
    models.load_model("smollm2-135m")  # first call: imports (and converts if the cache is cold)
    t0 = time.perf_counter()
    model, _ = models.load_model("smollm2-135m")
    cached = time.perf_counter() - t0

    ids = torch.randint(0, arch.view(model).vocab_size, (B, T), generator=torch.Generator().manual_seed(0))

    @torch.no_grad()
    def plain():
        model(input_ids=ids, use_cache=False)

    @torch.no_grad()
    def hooked():
        with residual.capture(model):
            model(input_ids=ids, use_cache=False)

    peak = tm.gemm_peak(tm.own_shapes(model, B * T))
    ts = tm.interleaved({"plain": plain, "capture": hooked, "gemm": peak}, rounds=rounds, warmup=1)
    med, lo, hi = tm.pair_ratio(ts["capture"], ts["plain"])
    tm.info(f"plain forward {tm.spread(ts['plain'])}; capture {tm.spread(ts['capture'])}")
    tm.info(peak.describe())
    tm.result("capture-hook overhead (capture/plain, median of per-round ratios)",
              f"{med:.3f} (spread {lo:.3f}..{hi:.3f}, {rounds} rounds)", "<= 1.05", med <= 1.05)
    fl = forward_flops(model, B, T)
    tm.info(f"forward {fl / 1e12:.3f} TFLOP (matmuls), best plain time {min(ts['plain']):.3f} s")
    tm.achieved_vs_peak("forward", fl, min(ts["plain"]), peak)

    if not a.quick:
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            models.convert_gguf(models.smollm2_gguf_path(), Path(d) / "m")
            gguf = time.perf_counter() - t0
        tm.result("cached load speed-up (GGUF convert / cached safetensors)",
                  f"{gguf / cached:.0f}x ({gguf:.1f} s / {cached:.2f} s)", "> 1x", gguf > cached)


if __name__ == "__main__":
    main()
