"""Training throughput and the measured step-time saving of frozen layers (growth chapter).

Side by side in one run, on the same model and batches: a fully trainable model against the same
model with (a) only the top quarter of the layers trainable (frozen layers below every trainable
layer skip the backward entirely) and (b) every other layer trainable (weight gradients skipped,
activation gradients still flow through everything). Steps are interleaved (round-robin) so load
drift on a shared machine hits every variant alike; we report the median step time, tokens/s and
the measured saving next to the saving the FLOP ledger predicts. Run: ``python bench/bench_train.py``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import _timing as tm
import torch
import torch.nn.functional as F

from layerlab.training import growth
from layerlab.training.train import ModelSpec, build_model, flops_per_token


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--quick", action="store_true", help="6 steps")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    if a.quick:
        a.steps = 6
    torch.set_num_threads(a.threads)
    spec = ModelSpec(depth=a.depth, width=a.width, vocab_size=2048, seq_len=a.seq)
    L = a.depth
    variants = {
        "all trainable": growth.Phase(tuple(range(L)), 1, embed=True),
        f"top {max(1, L // 4)} trainable": growth.Phase(tuple(range(L - max(1, L // 4), L)), 1, embed=False),
        "every other trainable": growth.Phase(tuple(range(0, L, 2)), 1, embed=False),
    }
    models = {k: build_model(spec, seed=0) for k in variants}
    opts = {}
    for k, ph in variants.items():
        growth.set_trainable(models[k], ph)
        opts[k] = torch.optim.AdamW([p for p in models[k].parameters() if p.requires_grad], lr=1e-3)
    g = torch.Generator().manual_seed(0)
    times = {k: [] for k in variants}
    for step in range(a.steps + 2):
        x = torch.randint(2048, (a.batch, a.seq), generator=g)
        for k, m in models.items():
            t0 = time.perf_counter()
            logits = m(input_ids=x).logits
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), x[:, 1:].flatten())
            opts[k].zero_grad(set_to_none=True)
            loss.backward()
            opts[k].step()
            if step >= 2:  # warm-up steps excluded
                times[k].append(time.perf_counter() - t0)
    base = statistics.median(times["all trainable"])
    f_all = flops_per_token(models["all trainable"].config, a.seq, range(L), range(L), True, True)
    n_tok = a.batch * a.seq
    tm.info(f"model depth {L} width {a.width} vocab 2048, batch {a.batch}x{a.seq}, {a.threads} thread(s), "
            f"median of {a.steps} interleaved steps")
    for k, ph in variants.items():
        med = statistics.median(times[k])
        f = flops_per_token(models[k].config, a.seq, range(L), ph.layers, ph.trains_embed(), ph.head)
        counted = 1 - sum(f.values()) / sum(f_all.values())
        tm.info(f"{k}: {med * 1e3:.1f} ms/step, {n_tok / med:.0f} tokens/s")
        if k != "all trainable":
            tm.result(f"step-time saving, {k}", f"{1 - med / base:.1%}", f"> 0 (FLOP ledger {counted:.1%})",
                      med < base)


if __name__ == "__main__":
    main()
