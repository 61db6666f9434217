"""Speed of the diversity chapter's two hot paths, measured side by side in one run (ratios only).

1. Member collection: batched right-padded forwards (``collect(batch_size=8)``) vs one forward per
   example (``batch_size=1``), on a tiny random Llama and prompts of mixed length.
2. Bootstrap of I(S_k;Y): the vectorised contingency-table bootstrap vs a loop over replicates.

    python bench/bench_diversity.py
"""

from __future__ import annotations

import _timing as tm
import numpy as np
import torch

from layerlab.core.models import tiny_model
from layerlab.metrics import infotheory as it
from layerlab.metrics import members as dm


def main() -> None:
    torch.set_num_threads(1)
    model = tiny_model("llama", dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 259, (int(n),), generator=g) for n in torch.randint(40, 80, (64,), generator=g)]
    labels = [0] * len(seqs)
    ts = tm.interleaved({"b1": lambda: dm.collect(model, seqs, labels, batch_size=1),
                         "b8": lambda: dm.collect(model, seqs, labels, batch_size=8)}, rounds=3)
    med, lo, hi = tm.pair_ratio(ts["b1"], ts["b8"])
    tm.info(f"collect, 64 prompts: batch 1 {tm.spread(ts['b1'])}; batch 8 {tm.spread(ts['b8'])}")
    tm.result("collect speed-up batch 8 / batch 1", f"{med:.2f}x (spread {lo:.2f}..{hi:.2f})", "> 1x", med > 1)

    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 500)
    s = np.where(rng.random(500) < 0.6, y, rng.integers(0, 4, 500))
    idx = rng.integers(0, 500, (300, 500))
    ts = tm.interleaved({"loop": lambda: [it.mutual_info(s[i], y[i], miller_madow=True) for i in idx],
                         "vec": lambda: it.bootstrap_mi(s, y, n_boot=300, seed=0)}, rounds=3)
    med, lo, hi = tm.pair_ratio(ts["loop"], ts["vec"])
    tm.info(f"bootstrap I(S;Y), 300 replicates: loop {tm.spread(ts['loop'])}; vectorised {tm.spread(ts['vec'])}")
    tm.result("bootstrap speed-up vectorised / loop", f"{med:.1f}x (spread {lo:.1f}..{hi:.1f})", "> 1x", med > 1)


if __name__ == "__main__":
    main()
