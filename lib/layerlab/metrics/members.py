"""Collecting residual-stream members from a model for the diversity chapter (Kamigaito et al.
2025, arXiv:2505.24009, Eq. 1; spec ``diversity.md`` sections 3.1-3.2, 3.7 and 6).

One forward pass per example (``layerlab.core.residual.contributions``) at the prediction position only.
What is stored is the *normed numerator* of every member, g_i = w ⊙ center(u_i) [M, d], plus the
final-norm denominators r_k = scale(h_k) of every partial residual h_k = e + sum_{l<=k}(a_l + m_l).
Any linear readout R [C, d] (verbaliser rows of the unembedding, a fitted linear head, the full
unembedding) then gives member logits c_i^(k) = R g_i / r_k exactly and cheaply, for every
truncation depth k, without another forward pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from layerlab.core.arch import view
from layerlab.core.residual import contributions
from layerlab.metrics.diversity import MemberReadout


@dataclass
class MemberFeatures:
    """Normed member numerators of N examples.

    Fields::

        g:      [N, M, d] w ⊙ center(u_i), module level (order e, a_0, m_0, a_1, ...), M = 2L+1
        scales: [N, L+1]  r_k = final-norm denominator of h_k (k = 0: embedding only; k = L: h_L)
        beta:   [d]       final-norm bias (zeros for RMSNorm)
        labels: [N]       class index (tasks) or next-token id (language modelling)
        half_scales: [N, L] final-norm denominator of the half-block residual h_{k-1} + a_k (k = 1..L), the
                          norm of a prefix that ends on an attention member; None for features stored before
                          it was recorded
    """

    g: Tensor
    scales: Tensor
    beta: Tensor
    labels: Tensor
    names: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    half_scales: Tensor | None = None

    @property
    def n_layers(self) -> int:
        return self.scales.shape[1] - 1

    def final_normed(self) -> Tensor:
        """N_f(h_L) = sum_i g_i / r_L + beta: the final normed residual [N, d] (linear-head input)."""
        return self.g.sum(1) / self.scales[:, -1, None] + self.beta

    def subset(self, idx) -> MemberFeatures:
        idx = torch.as_tensor(np.asarray(idx), dtype=torch.long)
        half = None if self.half_scales is None else self.half_scales[idx]
        return MemberFeatures(self.g[idx], self.scales[idx], self.beta, self.labels[idx], self.names, self.meta, half)

    def to_tensors(self) -> dict[str, Tensor]:
        t = {"g": self.g, "scales": self.scales, "beta": self.beta, "labels": self.labels}
        if self.half_scales is not None:
            t["half_scales"] = self.half_scales
        return t

    @classmethod
    def from_tensors(cls, t: dict[str, Tensor], names: list[str], meta: dict | None = None) -> MemberFeatures:
        return cls(t["g"], t["scales"], t["beta"], t["labels"], names, meta or {}, t.get("half_scales"))


def _check_additive(model: nn.Module) -> None:
    v = view(model)
    if v.logit_softcap is not None:
        raise ValueError(
            f"{v.family} soft-caps its logits, so the members do not sum to the logits; "
            "use a family without final logit soft-capping (Llama, Qwen2, Gemma 3, GPT-2, NeoX)"
        )


def collect(
    model: nn.Module,
    sequences: Sequence[Tensor],
    labels: Sequence[int],
    positions: Sequence[Sequence[int]] | None = None,
    *,
    batch_size: int = 8,
) -> MemberFeatures:
    """Members of every sequence at its prediction position(s), one forward per sequence.

    sequences: 1-D token-id tensors (lengths may differ); positions: per sequence, the positions to
    read (default: the last token); labels: one per read position, in order. The forwards run on the
    model's device; the features come back to the CPU. Sequences of similar
    length are batched with right padding: a causal model's output at position t never sees later
    (pad) tokens, so the read positions are unaffected. Features keep the model's dtype (fp64 for
    identity tests).

    Members of Kamigaito et al. 2025 (arXiv:2505.24009), Eq. 1; spec diversity.md sections 3.1-3.2.
    """
    _check_additive(model)
    lengths = [int(s.shape[-1]) for s in sequences]
    want = [
        [lengths[j] - 1] if positions is None else [q % lengths[j] for q in positions[j]] for j in range(len(sequences))
    ]
    device = next(model.parameters()).device
    order = sorted(range(len(sequences)), key=lambda j: lengths[j])
    per_seq: dict[int, Tensor] = {}
    names: list[str] = []
    for s in range(0, len(order), batch_size):
        batch = order[s : s + batch_size]
        T = max(lengths[j] for j in batch)
        ids = torch.zeros(len(batch), T, dtype=torch.long)  # [B, T], right-padded
        for r, j in enumerate(batch):
            ids[r, : lengths[j]] = sequences[j].reshape(-1)
        union = sorted({q for j in batch for q in want[j]})
        con = contributions(model, ids.to(device), positions=union, level="module")
        names = con.names
        for r, j in enumerate(batch):
            per_seq[j] = con.members[r, [union.index(q) for q in want[j]]]  # [P_j, M, d]
    u = torch.cat([per_seq[j] for j in range(len(sequences))])  # [N, M, d]
    return member_features(model, u, labels, names)


def member_features(model: nn.Module, u: Tensor, labels: Sequence[int] | Tensor, names: list[str]) -> MemberFeatures:
    """Features of raw residual writes ``u`` [N, M, d] (module level: embed, attn0, mlp0, ...; they sum to
    h_L) read at N positions with ``labels`` [N]: the normed numerators g_i = w ⊙ center(u_i) and the
    final-norm denominators r_k of every partial residual (what :func:`collect` stores; a caller that
    already captured the writes in its own forward pass uses this directly). Computed on the model's
    device; the features are returned on the CPU."""
    _check_additive(model)
    p = view(model).final_norm_params()
    with torch.no_grad():
        u = u.to(next(model.parameters()).device)
        prefix = torch.cumsum(u, dim=1)  # [N, M, d]: the residual after each member
        h = prefix[:, 0::2]  # [N, L+1, d]: h_0 = e, h_k after block k
        g, scales = (p.weight * p.center(u)).cpu(), p.scale(h).cpu()
        half = p.scale(prefix[:, 1::2]).cpu()  # [N, L]: h_{k-1} + a_k, after block k's attention
    lab = torch.as_tensor(list(labels) if not isinstance(labels, Tensor) else labels, dtype=torch.long)
    if lab.shape[0] != g.shape[0]:
        raise ValueError(f"{lab.shape[0]} labels for {g.shape[0]} read positions")
    beta = p.bias.detach().to("cpu", g.dtype) if p.bias is not None else torch.zeros(g.shape[-1], dtype=g.dtype)
    return MemberFeatures(g, scales, beta, lab, names, half_scales=half)


# --------------------------------------------------------------------------- readouts
@dataclass(frozen=True)
class Readout:
    """A linear readout of the normed residual: logits = W x + b. W [C, d], b [C]."""

    W: Tensor
    b: Tensor
    kind: str  # "lens" (unembedding rows) or "head" (fitted logistic regression)


def lens_readout(model: nn.Module, token_ids: Sequence[int] | None = None) -> Readout:
    """Rows of the unembedding for the verbaliser tokens (all tokens if None), with its bias.

    Verbaliser readout of Kamigaito et al. 2025 (arXiv:2505.24009), Eq. 1; spec diversity.md section 3.7.
    """
    v = view(model)
    W = v.unembed.weight.detach()
    b = getattr(v.unembed, "bias", None)
    b = torch.zeros(W.shape[0], dtype=W.dtype) if b is None else b.detach()
    if token_ids is not None:
        idx = torch.as_tensor(list(token_ids), dtype=torch.long)
        W, b = W[idx], b[idx]
    return Readout(W, b, "lens")


def fit_head(features: MemberFeatures, n_classes: int, *, C: float = 1.0, seed: int = 0) -> Readout:
    """Logistic-regression head on N_f(h_L) (spec 3.8 "linear head"). Binary tasks get the symmetric
    two-row form [-w/2; w/2], so softmax equals the fitted sigmoid."""
    from sklearn.linear_model import LogisticRegression

    x = features.final_normed().double().numpy()
    y = features.labels.numpy()
    if len(np.unique(y)) < 2:
        raise ValueError("the linear head needs training examples of at least two classes")
    clf = LogisticRegression(C=C, max_iter=5000, random_state=seed).fit(x, y)
    W, b = clf.coef_, clf.intercept_
    if W.shape[0] == 1:  # binary
        W = np.concatenate([-W / 2, W / 2])
        b = np.concatenate([-b / 2, b / 2])
    if W.shape[0] != n_classes:
        raise ValueError(f"head has {W.shape[0]} classes, task has {n_classes}: training split misses a class")
    return Readout(torch.tensor(W, dtype=torch.float32), torch.tensor(b, dtype=torch.float32), "head")


def apply_readout(features: MemberFeatures, readout: Readout, *, dtype=torch.float64) -> MemberReadout:
    """Member logits through ``readout``: raw_i = W g_i, bias = W beta + b, so that
    sum_i raw_i / r_L + bias = W N_f(h_L) + b (exact for the lens: the model's logits).

    Member logits of Kamigaito et al. 2025 (arXiv:2505.24009), Eq. 1.
    """
    W = readout.W.to(dtype)
    raw = features.g.to(dtype) @ W.T  # [N, M, C]
    bias = W @ features.beta.to(dtype) + readout.b.to(dtype)
    half = None if features.half_scales is None else features.half_scales.to(dtype)
    return MemberReadout(
        raw, features.scales.to(dtype), bias, features.labels, "module", list(features.names),
        {"readout": readout.kind}, half_scales=half,
    )


def readout_chunks(features: MemberFeatures, readout: Readout, chunk: int = 8, *, dtype=torch.float32):
    """Yield MemberReadouts of at most ``chunk`` examples (full-vocabulary readouts: ~12 MB per example
    for SmolLM2, so stream them into running sums instead of storing them; spec section 6)."""
    for s in range(0, features.g.shape[0], chunk):
        yield apply_readout(features.subset(range(s, min(s + chunk, features.g.shape[0]))), readout, dtype=dtype)
