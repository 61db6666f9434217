"""Shared helpers of the benches: interleaved timing, the GEMM peak reference, matmul FLOP counts, output.

Not a bench itself (the leading underscore keeps it out of ``bench/bench_*.py``).

* :func:`interleaved` runs several callables round-robin (A, B, A, B, ...) after a warm-up, so load drift
  on a shared machine hits every variant alike; :func:`pair_ratio` is the median of per-round ratios
  with its spread.
* :class:`GemmPeak` is the reference a FLOP rate is compared with: best-of-n fp32 GEMMs at the *current*
  thread count, on large square-ish shapes (2048^3, 4096x4096x1024) and on the measured code's own matmul
  shapes; peak = max over shapes. Its probes are meant to run *inside* the same interleaved rounds as the
  measured code, so a load spike cannot make the measured code look faster than the reference.
  achieved/peak is then <= 100% up to the non-matmul work; a value above 100% means the reference is
  wrong (it is reported as FAIL, never clipped).
* :func:`block_matmul_flops` counts the matmul FLOPs of a transformer's own shapes (2 per multiply-add).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Sequence

import torch

BIG_SHAPES: tuple[tuple[int, int, int], ...] = ((2048, 2048, 2048), (4096, 1024, 4096))  # (m, k, n)


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, warmup: int = 1) -> dict[str, list[float]]:
    """Wall times [s] of every callable, run round-robin ``rounds`` times after ``warmup`` untimed rounds."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return times


def pair_ratio(num: Sequence[float], den: Sequence[float]) -> tuple[float, float, float]:
    """Median of the per-round ratios num[i]/den[i], and their min and max (the spread)."""
    r = [a / b for a, b in zip(num, den, strict=True)]
    return statistics.median(r), min(r), max(r)


def spread(ts: Sequence[float]) -> str:
    return f"median {statistics.median(ts):.3f} s, min {min(ts):.3f}, max {max(ts):.3f} (n={len(ts)})"


class GemmPeak:
    """fp32 GEMM reference. Call the instance once per interleaved round (each shape runs once per call);
    :meth:`peak` is the best rate over all calls and shapes. Runs at ``torch.get_num_threads()``."""

    def __init__(self, shapes: Iterable[tuple[int, int, int]], big: bool = True, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        all_shapes = list(dict.fromkeys([*(BIG_SHAPES if big else ()), *shapes]))
        self.ops = [((m, k, n), torch.randn(m, k, generator=g), torch.randn(k, n, generator=g))
                    for m, k, n in all_shapes]
        self.best: dict[tuple[int, int, int], float] = {}
        self.n_calls = 0

    def __call__(self) -> None:
        self.n_calls += 1
        for shape, a, b in self.ops:
            t0 = time.perf_counter()
            torch.mm(a, b)
            dt = time.perf_counter() - t0
            self.best[shape] = min(self.best.get(shape, float("inf")), dt)

    def rates(self) -> dict[tuple[int, int, int], float]:
        """GFLOP/s per shape (best time): 2·m·k·n / t."""
        return {(m, k, n): 2 * m * k * n / t / 1e9 for (m, k, n), t in self.best.items()}

    def peak(self) -> tuple[float, tuple[int, int, int]]:
        if not self.best:
            self()
        shape, rate = max(self.rates().items(), key=lambda kv: kv[1])
        return rate, shape

    def describe(self) -> str:
        rate, (m, k, n) = self.peak()
        own = [r for s, r in self.rates().items() if s not in BIG_SHAPES]
        own_s = f", own shapes {min(own):.1f}..{max(own):.1f}" if own else ""
        return (f"GEMM peak {rate:.1f} GFLOP/s at {m}x{k}x{n} (fp32, {torch.get_num_threads()} thread(s), "
                f"best of {self.n_calls} over {len(self.ops)} shapes{own_s})")


def gemm_peak(shapes: Iterable[tuple[int, int, int]], big: bool = True) -> GemmPeak:
    """A :class:`GemmPeak` over the big shapes and ``shapes`` (the measured code's own matmuls)."""
    return GemmPeak(shapes, big=big)


def block_matmul_flops(model: torch.nn.Module, ctx: float) -> tuple[float, float, dict[int, list[tuple[int, int]]]]:
    """Matmul FLOPs per token: (one block, the unembedding) and the block's weight shapes (in, out).

    FLOPs per token (2 per multiply-add) =
      block:   2·Σ_W (d_in·d_out) over the block's 2-D weights (q, k, v, o, gate, up, down)
               + 2·2·n_heads·head_dim·ctx   (QK^T and AV against ``ctx`` keys; causal mean ctx = (T+1)/2)
      unembed: 2·d_model·vocab
    For SmolLM2-135M (d 576, 9 heads x 64, 3 KV heads, d_ff 1536, vocab 49152): 7.08 M + 2304·ctx per block,
    56.6 M for the unembedding.
    """
    from layerlab.core import arch

    mv = arch.view(model)
    cfg = model.config
    ws = [p for p in mv.blocks[0].block.parameters() if p.ndim == 2]
    n_heads = getattr(cfg, "num_attention_heads", None) or cfg.n_head
    head_dim = getattr(cfg, "head_dim", None) or mv.d_model // n_heads
    block = 2.0 * sum(p.numel() for p in ws) + 2 * 2 * n_heads * head_dim * ctx
    shapes = sorted({(p.shape[1], p.shape[0]) for p in ws})
    return block, 2.0 * mv.d_model * mv.vocab_size, shapes


def own_shapes(model: torch.nn.Module, tokens: int, unembed: bool = True) -> list[tuple[int, int, int]]:
    """The (m, k, n) GEMMs of one forward over ``tokens`` rows: every block weight, and the unembedding."""
    from layerlab.core import arch

    _, _, shapes = block_matmul_flops(model, 1)
    out = [(tokens, k, n) for k, n in shapes]
    if unembed:
        mv = arch.view(model)
        out.append((tokens, mv.d_model, mv.vocab_size))
    return out


def result(name: str, measured: str, goal: str, ok: bool) -> bool:
    """The one output line of a target: ``name: measured vs goal → PASS/FAIL``."""
    print(f"{name}: {measured} vs {goal} → {'PASS' if ok else 'FAIL'}", flush=True)
    return ok


def achieved_vs_peak(name: str, flops: float, seconds: float, peak: GemmPeak) -> bool:
    """Target line of a FLOP rate against the GEMM peak (must be <= 100%: else the reference is wrong)."""
    rate = flops / seconds / 1e9
    p, _ = peak.peak()
    return result(f"{name} achieved/peak", f"{rate / p:.1%} ({rate:.1f} of {p:.1f} GFLOP/s)",
                  "<= 100% (reference bounds it)", rate <= p)


def info(msg: str) -> None:
    """Context lines (not targets) start with '#'."""
    print(f"# {msg}", flush=True)
