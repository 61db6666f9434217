"""Speed of the frozen-context single-token Jacobian vs the authors' reference method.

Goal (issue 4): J^l_tt at the last token of a 64-token prompt for all 30 blocks of SmolLM2-135M,
frozen-context >= 20x faster than the reference (d VJPs of the output row through the whole
sequence, as released in sugolov/coupling). Both run side by side in this process with the same
thread count. The reference over all 30 blocks takes many minutes on 2 CPU cores, so by default it
is timed on ``--ref-layers`` blocks and extrapolated linearly to 30 (every block has the same
shape); the output says so. ``--ref-layers 30`` times it in full. The variants and the GEMM peak probes
(``_timing.GemmPeak``, same threads) run in interleaved rounds; each variant's achieved FLOP rate is
printed against the peak. FLOPs per block (``_timing.block_matmul_flops``: f(ctx) = 2·Σ_W d_in·d_out +
2·2·n_heads·head_dim·ctx per token row), counting forward + activation-gradient backward as 2x the
forward and no weight gradients (so achieved/peak is a lower bound):

    frozen-context: 2 · d · f(t+1)               (d copies of x_t, each sees t prefix keys + itself)
    reference:      (1 + d) · n · f((n+1)/2)     (one forward over n tokens, d VJPs back through it)

    python bench/bench_jacobians.py [--threads 1] [--ref-layers 2] [--tokens 64] [--rounds 1] [--quick]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import _timing as tm  # noqa: E402
import torch  # noqa: E402

from layerlab.core import jacobians as jac  # noqa: E402
from layerlab.core.arch import view  # noqa: E402
from layerlab.core.models import load_model  # noqa: E402

FALLBACK = ("What is the capital of France? The capital is Paris, a city on the Seine known for its museums, "
            "its cafes and its long history as a centre of art, science and politics in Europe. ") * 4


def prompt_ids(tok, n_tokens: int) -> torch.Tensor:
    try:
        from layerlab.data.corpora import texts_for_prompts

        texts = texts_for_prompts("test", 4, max_tokens=n_tokens + 8, tokenizer=tok)
        text = " ".join(texts)
        source = "held-out corpus (layerlab.data.corpora, split test)"
    except Exception as e:  # data not fetched: timing does not depend on the text
        text, source = FALLBACK, f"built-in text ({type(e).__name__}: corpus unavailable)"
    ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids[:, :n_tokens]
    if ids.shape[1] < n_tokens:
        raise SystemExit(f"prompt has only {ids.shape[1]} tokens")
    return ids, source


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ref-layers", type=int)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="reference on 1 block; no batch-layout/batched-VJP variants")
    ap.add_argument("--model", default="smollm2-135m")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model(args.model)
    v = view(model)
    ids, source = prompt_ids(tok, args.tokens)
    L, d, n = v.n_layers, v.d_model, ids.shape[1]
    n_ref = args.ref_layers or (1 if args.quick else 2)
    ref_layers = list(range(0, L, max(1, L // n_ref)))[:n_ref]
    tm.info(f"model {args.model}: {L} blocks, d={d}; prompt {n} tokens from {source}; torch threads "
            f"{args.threads}; {args.rounds} interleaved round(s) after a warm-up")

    jac.frozen_context_jacobians(model, ids[:, :8], layers=[0])  # warm-up
    out = {}
    fns = {
        "frozen": lambda: out.__setitem__("A", jac.frozen_context_jacobians(model, ids)),  # [L, d, d]
        "reference": lambda: out.__setitem__("R", jac.reference_jacobians(model, ids, layers=ref_layers,
                                                                          vectorize=False)),
    }
    if not args.quick:
        fns["batch layout"] = lambda: jac.frozen_context_jacobians(model, ids, layers=ref_layers, layout="batch")
        fns["batched VJPs"] = lambda: jac.reference_jacobians(model, ids, layers=ref_layers[:1], vectorize=True)
    peak = tm.gemm_peak([*tm.own_shapes(model, d, unembed=False), *tm.own_shapes(model, n, unembed=False)])
    fns["gemm"] = peak
    ts = tm.interleaved(fns, rounds=args.rounds, warmup=0)
    t_frozen = min(ts["frozen"])
    t_ref = min(ts["reference"]) / len(ref_layers)
    err = float((out["A"][ref_layers] - out["R"]).norm() / out["R"].norm())
    extrap = "" if len(ref_layers) == L else f", timed on blocks {ref_layers} and extrapolated x{L / len(ref_layers):g}"
    tm.info(f"frozen-context (seq layout), all {L} blocks: {t_frozen:.2f} s ({t_frozen / L:.3f} s/block)")
    tm.info(f"reference (authors: d={d} VJPs through {n} tokens): {t_ref:.2f} s/block; all {L} blocks "
            f"{t_ref * L:.1f} s{extrap}")
    if not args.quick:
        tm.info(f"frozen-context (batch layout): {min(ts['batch layout']) / len(ref_layers):.3f} s/block; "
                f"reference with batched VJPs: {min(ts['batched VJPs']):.2f} s/block "
                f"(ratio to frozen {min(ts['batched VJPs']) * L / t_frozen:.1f}x)")
    tm.info(peak.describe())
    tm.result(f"reference / frozen-context (all {L} blocks)", f"{t_ref * L / t_frozen:.1f}x", ">= 20x",
              t_ref * L / t_frozen >= 20)
    tm.result("frozen-context vs reference (fp32, relative difference)", f"{err:.2e}", "<= 1e-4", err <= 1e-4)
    t = n - 1  # the last token
    f_frozen = L * 2 * d * tm.block_matmul_flops(model, t + 1)[0]
    f_ref = (1 + d) * n * tm.block_matmul_flops(model, (n + 1) / 2)[0]  # per block
    tm.achieved_vs_peak("frozen-context", f_frozen, t_frozen, peak)
    tm.achieved_vs_peak("reference", f_ref, t_ref, peak)


if __name__ == "__main__":
    main()
