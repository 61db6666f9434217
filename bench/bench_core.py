"""Core benchmarks, measured side by side in one run (prints ratios; asserts nothing).

1. Forward with hook capture (all residual points) vs plain forward, SmolLM2-135M, 8×256 tokens.
   Goal: ratio ≤ 1.05.
2. Cached safetensors load vs GGUF dequantise-and-convert load.
3. The machine's fp32 GEMM rate next to the forward pass's achieved FLOP rate.

Run: ``python bench/bench_core.py`` (or ``make bench``).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from layerlab.core import arch, models, residual


def _time(fn, repeats: int = 5, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def forward_flops(model, B: int, T: int) -> float:
    """Matmul FLOPs of one forward: 2·(non-embedding matmul params)·tokens + unembedding + attention."""
    v = arch.view(model)
    cfg = model.config
    block = sum(p.numel() for n, p in v.blocks[0].block.named_parameters() if p.ndim == 2)
    d_attn = cfg.num_attention_heads * getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
    attn = 2 * 2 * T * d_attn  # QK^T and AV per token per layer (full, not causal-halved)
    return B * T * (v.n_layers * (2 * block + attn) + 2 * v.d_model * v.vocab_size)


def main() -> None:
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    models.load_model("smollm2-135m")  # first call: imports (and converts if the cache is cold)
    t0 = time.perf_counter()
    model, tok = models.load_model("smollm2-135m")
    cached = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        models.convert_gguf(models.smollm2_gguf_path(), Path(d) / "m")
        gguf = time.perf_counter() - t0
    print(f"[load]    cached safetensors {cached:.2f} s | GGUF convert {gguf:.1f} s | speed-up {gguf / cached:.0f}x")

    B, T = 8, 256
    ids = torch.randint(0, 49152, (B, T), generator=torch.Generator().manual_seed(0))

    @torch.no_grad()
    def plain():
        model(input_ids=ids, use_cache=False)

    @torch.no_grad()
    def hooked():
        with residual.capture(model):
            model(input_ids=ids, use_cache=False)

    ts_plain, ts_hook = [], []
    plain(), hooked()
    for _ in range(5):  # interleave to cancel drift on a shared machine
        t = time.perf_counter()
        plain()
        ts_plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        hooked()
        ts_hook.append(time.perf_counter() - t)
    p, h = statistics.median(ts_plain), statistics.median(ts_hook)
    print(f"[hooks]   plain {p:.2f} s | capture(all points) {h:.2f} s | ratio {h / p:.3f} (goal <= 1.05)")

    n = 1024
    a, b = torch.randn(n, n), torch.randn(n, n)
    g = _time(lambda: a @ b, repeats=10)
    gemm = 2 * n**3 / g / 1e9
    fl = forward_flops(model, B, T)
    print(f"[flops]   fp32 GEMM {n}^3: {gemm:.1f} GFLOP/s | forward {fl / 1e12:.2f} TFLOP in {p:.2f} s = "
          f"{fl / p / 1e9:.1f} GFLOP/s ({fl / p / 1e9 / gemm:.0%} of GEMM)")


if __name__ == "__main__":
    main()
