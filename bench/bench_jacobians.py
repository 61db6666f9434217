"""Speed of the frozen-context single-token Jacobian vs the authors' reference method.

Goal (issue 4): J^l_tt at the last token of a 64-token prompt for all 30 blocks of SmolLM2-135M,
frozen-context >= 20x faster than the reference (d VJPs of the output row through the whole
sequence, as released in sugolov/coupling). Both run side by side in this process with the same
thread count. The reference over all 30 blocks takes many minutes on 2 CPU cores, so by default it
is timed on ``--ref-layers`` blocks and extrapolated linearly to 30 (every block has the same
shape); the output says so. ``--ref-layers 30`` times it in full.

    python bench/bench_jacobians.py [--threads 1] [--ref-layers 2] [--tokens 64]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

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
    ap.add_argument("--ref-layers", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--model", default="smollm2-135m")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model(args.model)
    v = view(model)
    ids, source = prompt_ids(tok, args.tokens)
    L = v.n_layers
    ref_layers = list(range(0, L, max(1, L // max(1, args.ref_layers))))[: args.ref_layers]
    print(f"model {args.model}: {L} blocks, d={v.d_model}; prompt {ids.shape[1]} tokens from {source}; "
          f"torch threads {args.threads}")

    jac.frozen_context_jacobians(model, ids[:, :8], layers=[0])  # warm-up
    t0 = time.perf_counter()
    A = jac.frozen_context_jacobians(model, ids)  # [L, d, d]
    t_frozen = time.perf_counter() - t0
    print(f"frozen-context (seq layout), all {L} blocks: {t_frozen:.2f} s ({t_frozen / L:.3f} s/block)")

    t0 = time.perf_counter()
    jac.frozen_context_jacobians(model, ids, layers=ref_layers, layout="batch")
    t_batch = (time.perf_counter() - t0) / len(ref_layers)
    print(f"frozen-context (batch layout) on blocks {ref_layers}: {t_batch:.3f} s/block")

    t0 = time.perf_counter()
    R = jac.reference_jacobians(model, ids, layers=ref_layers, vectorize=False)
    t_ref = (time.perf_counter() - t0) / len(ref_layers)
    t0 = time.perf_counter()
    jac.reference_jacobians(model, ids, layers=ref_layers[:1], vectorize=True)
    t_ref_vec = time.perf_counter() - t0
    err = float((A[ref_layers] - R).norm() / R.norm())
    extrap = "" if len(ref_layers) == L else f" (timed on blocks {ref_layers}, extrapolated x{L / len(ref_layers):g})"
    print(f"reference (authors: d={v.d_model} VJPs through {ids.shape[1]} tokens), per block: {t_ref:.2f} s; "
          f"all {L} blocks: {t_ref * L:.1f} s{extrap}")
    print(f"reference with batched VJPs (is_grads_batched), block {ref_layers[0]}: {t_ref_vec:.2f} s/block")
    print(f"relative difference frozen-context vs reference (fp32): {err:.2e}")
    print(f"RATIO reference / frozen-context (all {L} blocks): {t_ref * L / t_frozen:.1f}x  (goal >= 20x)")
    print(f"RATIO batched-VJP reference / frozen-context: {t_ref_vec * L / t_frozen:.1f}x")


if __name__ == "__main__":
    main()
