"""The importance profile that orders GTT's phases (Wietrzykowski 2026, arXiv:2603.19348, section
"Growth Transformer Training"; spec anatomy.md sections 3.6, 3.9 and 3.10) and what it costs.

For each seed the trained uniform model's layers are ablated one at a time (default AB2, the neighbour
average of :mod:`layerlab.metrics.ablation`) on windows of *training* documents (the held-out documents
that score the arms never shape GTT's schedule). Per layer l and document d the effect is
ΔNLL_{l,d} = mean over d's windows of NLL_ablated − NLL_clean (nats). The layer order uses the mean over
documents; a layer is an **anti-layer** (ablating it helps) only if its ΔNLL is below 0 by an exact
sign-flip test over documents, Holm-adjusted over the layers (:func:`anti_layers`), not because its
point estimate is negative.

Cost: the sweep is one clean forward pass plus, per layer, the forward of the blocks from that layer up
and the unembedding (the prefix cache of :func:`layerlab.metrics.ablation.evaluate_interventions`);
:func:`sweep_flops` counts these matmuls with the trainer's ledger (:func:`layerlab.training.train.flops_per_token`).
"""

from __future__ import annotations

import numpy as np

from layerlab.report.inference import holm, mean_effect


def measure(model, ids, doc, operator: str) -> dict:
    """Per-document ΔNLL of ablating each layer of ``model`` with ``operator``.

    ids: [N, T] windows of training documents; doc: [N] document index of each window.
    Returns ``per_doc`` [L][D] (nats), ``flops`` of the sweep and the number of windows."""
    from layerlab.metrics import ablation

    ivs = ablation.sweep_interventions(model, [operator])
    res = ablation.evaluate_interventions(model, ids, ivs)
    doc = np.asarray(doc)
    docs = np.unique(doc)
    per_doc = [[float(np.mean(res.nll[iv.name][doc == d] - res.base[doc == d])) for d in docs] for iv in ivs]
    return {"operator": operator, "per_doc": per_doc, "flops": sweep_flops(model, ids.shape, [iv.start for iv in ivs]),
            "windows": int(ids.shape[0]), "docs": int(len(docs))}


def sweep_flops(model, shape: tuple[int, int], starts) -> int:
    """Matmul FLOPs of one ablation sweep over windows of ``shape`` [N, T]: a clean forward plus, for an
    intervention starting at layer s, the forward of layers s..L-1 and the unembedding."""
    from layerlab.training.train import flops_per_token

    n, t = shape
    L = model.config.num_hidden_layers
    full = flops_per_token(model.config, t, range(L), [], False, False)["forward"]
    suffix = sum(flops_per_token(model.config, t, range(s, L), [], False, False)["forward"] for s in starts)
    return int(n * t * (full + suffix))


def anti_layers(per_doc, *, alpha: float = 0.05, seed: int = 0) -> tuple[list[int], np.ndarray]:
    """Layers whose ablation lowers the NLL: one-sided sign-flip p-value of the mean ΔNLL over documents
    below 0, Holm-adjusted over layers, <= alpha / 2. Returns (anti-layers, adjusted p-values [L])."""
    d = np.asarray(per_doc, dtype=float)  # [L, D]
    p = np.array([mean_effect(row, unit="documents", seed=seed).p_less for row in d])
    adj = holm(p)
    return [int(i) for i in np.nonzero(adj <= alpha / 2)[0]], adj


def profile(per_doc, *, seed: int = 0) -> dict:
    """The profile GTT uses: mean ΔNLL per layer (order), anti-layers by the test, and the Holm p-values."""
    d = np.asarray(per_doc, dtype=float)
    anti, adj = anti_layers(d, seed=seed)
    return {"mean": d.mean(axis=1).tolist(), "anti": anti, "p_anti": adj.tolist(),
            "point_negative": [int(i) for i in np.nonzero(d.mean(axis=1) < 0)[0]]}
