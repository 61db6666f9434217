"""Speed of the diversity chapter's two hot paths, measured side by side in one run (ratios only).

1. Member collection: batched right-padded forwards (``collect(batch_size=8)``) vs one forward per
   example (``batch_size=1``), on a tiny random Llama and prompts of mixed length.
2. Bootstrap of I(S_k;Y): the vectorised contingency-table bootstrap vs a loop over replicates.

    python bench/diversity.py
"""

from __future__ import annotations

import time

import numpy as np
import torch

from layerlab.core.models import tiny_model
from layerlab.metrics import infotheory as it
from layerlab.metrics import members as dm


def _time(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    torch.set_num_threads(1)
    model = tiny_model("llama", dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 259, (int(n),), generator=g) for n in torch.randint(40, 80, (64,), generator=g)]
    labels = [0] * len(seqs)
    t1 = _time(lambda: dm.collect(model, seqs, labels, batch_size=1))
    t8 = _time(lambda: dm.collect(model, seqs, labels, batch_size=8))
    print(f"collect, 64 prompts: batch 1 {t1:.3f}s, batch 8 {t8:.3f}s, speed-up x{t1 / t8:.2f}")

    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 500)
    s = np.where(rng.random(500) < 0.6, y, rng.integers(0, 4, 500))
    idx = rng.integers(0, 500, (300, 500))
    loop = _time(lambda: [it.mutual_info(s[i], y[i], miller_madow=True) for i in idx], repeat=1)
    vec = _time(lambda: it.bootstrap_mi(s, y, n_boot=300, seed=0))
    print(f"bootstrap I(S;Y), 300 replicates: loop {loop:.3f}s, vectorised {vec:.3f}s, speed-up x{loop / vec:.1f}")


if __name__ == "__main__":
    main()
