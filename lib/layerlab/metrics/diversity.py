"""Bias-diversity decomposition of residual-stream members (Kamigaito et al. 2025,
arXiv:2505.24009, Theorem 1 / Eq. 8, Theorems 2-3; exact CE/KL extension after Wood et al.
2023, JMLR, arXiv:2301.03962). Book: diversity chapter. Spec: ``shared/papers/diversity.md``
sections 3.2-3.5 and 3.7.

Members are the residual writes (embedding, every attention and MLP output: M = 2L+1 at module
level; embedding and per-block sums: M = L+1 at layer level) read through the logit lens with
the final norm frozen, so that ``sum_i c_i + b`` equals the model's logits exactly (Eq. 1,
``layerlab.core.residual.contributions``). The readout is restricted to a task's C verbaliser tokens
(or a fitted linear head, or the full vocabulary). With the ensemble scaling f_i = M c_i + b the
mean member f_bar equals the model's logits z, and for any target y (section 3.3):

    MSE  = ||f_bar - y||^2
    Bias = (1/M) sum_i ||f_i - y||^2
    Div  = (1/M) sum_i ||f_i - f_bar||^2          MSE = Bias - Div  (exact)
    Omega = (1/M) sum_i ||f_i||^2                 Bias = ||y||^2 - 2<y, f_bar> + Omega,  Div = Omega - ||f_bar||^2
    CE(y, softmax z) = (1/M) sum_i CE(y, q_i) - (1/M) sum_i KL(p || q_i)   (exact, section 3.5)

This module holds the tensor algebra; collecting members from a model lives in
``layerlab.metrics.members`` (one forward per example, prediction position only).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

TARGETS = ("onehot", "scaled", "centred")


# --------------------------------------------------------------------------- members at depth k
@dataclass
class MemberReadout:
    """Raw member readouts of N examples, enough for every truncation depth (spec section 6).

    Fields::

        raw:    [N, M, C] un-normalised member logits R(gamma * u_i) (the frozen-norm lens times r)
        scales: [N, L+1]  norm denominators r_k recomputed on the partial residual h_k (k = 0: embedding
                          only, k = L: the full residual, where the lens is exact)
        bias:   [C]       constant b of the readout (W_U beta + b_U for LayerNorm models, 0 for RMSNorm)
        labels: [N]       class index in 0..C-1 (or the target token for full-vocabulary readouts)
        level:  "module" (M = 2L+1, order e, a_1, m_1, ...) or "layer" (M = L+1, order e, b_1, ...)
        half_scales: [N, L] norm denominators of the half-block residuals h_{k-1} + a_k (module level;
                          None when not recorded: then prefixes ending on an attention member are refused)
    """

    raw: Tensor
    scales: Tensor
    bias: Tensor
    labels: Tensor
    level: str = "module"
    names: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    half_scales: Tensor | None = None

    def __post_init__(self) -> None:
        if self.level not in ("module", "layer"):
            raise ValueError(f"level must be 'module' or 'layer', got {self.level!r}")
        n, m, _ = self.raw.shape
        if self.scales.shape[0] != n or self.labels.shape[0] != n:
            raise ValueError("raw, scales and labels must have the same number of examples N")
        if self.n_members(self.n_layers) != m:
            raise ValueError(f"{m} members do not match {self.n_layers} layers at level {self.level!r}")

    @property
    def n_layers(self) -> int:
        return self.scales.shape[1] - 1

    @property
    def n_classes(self) -> int:
        return self.raw.shape[-1]

    def n_members(self, k: int) -> int:
        """M_k: members up to and including block k (2k+1 module level, k+1 layer level)."""
        return 2 * k + 1 if self.level == "module" else k + 1

    def at_depth(self, k: int | None = None) -> tuple[Tensor, Tensor]:
        """Member logits c [N, M_k, C] and constant b [C] after k blocks (k=None: the full model).

        The norm is frozen at r_k = norm of the partial residual h_k (section 3.7, meaning 1), so
        sum_i c_i + b is the logit lens of h_k; at k = L it is the model's own logits.
        """
        k = self.n_layers if k is None else k
        if not 0 <= k <= self.n_layers:
            raise ValueError(f"depth {k} is out of range: this readout has depths 0..{self.n_layers}")
        c = self.raw[:, : self.n_members(k)] / self.scales[:, k, None, None]  # [N, M_k, C]
        return c, self.bias

    def prefix(self, j: int) -> tuple[Tensor, Tensor]:
        """Member logits c [N, j, C] and constant b [C] of the first ``j`` members (1 <= j <= M), with
        the norm recomputed on *their* partial sum, so that sum_i c_i + b is the logit lens of that
        prefix residual (spec 3.7, half-block points). At module level an even ``j`` ends on the
        attention member a_k (k = j/2) and needs the half-block scale of h_{k-1} + a_k: reusing r_{k-1}
        is wrong whenever b != 0 (the argmax of c/r + b depends on r), e.g. for a fitted linear head.
        """
        m = self.raw.shape[1]
        if not 1 <= j <= m:
            raise ValueError(f"prefix length {j} is out of range: this readout has 1..{m} members")
        if self.level == "layer" or j % 2 == 1:
            k = j - 1 if self.level == "layer" else (j - 1) // 2
            r = self.scales[:, k]  # [N]: the prefix ends on a block boundary
        elif self.half_scales is None:
            raise ValueError(
                f"prefix of {j} members ends on an attention member, whose norm scale was not recorded; "
                "collect the features again (layerlab.metrics.members.member_features records half_scales)"
            )
        else:
            r = self.half_scales[:, j // 2 - 1]  # [N]: h_{k-1} + a_k
        return self.raw[:, :j] / r[:, None, None], self.bias

    def to_layer_level(self) -> MemberReadout:
        """Layer-level members e, a_l + m_l (M = L+1) from module-level ones."""
        if self.level == "layer":
            return self
        raw = torch.cat([self.raw[:, :1], self.raw[:, 1::2] + self.raw[:, 2::2]], dim=1)
        names = ["embed"] + [f"block{l}" for l in range(self.n_layers)]
        return MemberReadout(raw, self.scales, self.bias, self.labels, "layer", names, dict(self.meta),
                             self.half_scales)

    def restrict(self, idx: Tensor | np.ndarray) -> MemberReadout:
        """Subset of examples (bootstrap resampling, train/test splits)."""
        idx = torch.as_tensor(np.asarray(idx), dtype=torch.long)
        half = None if self.half_scales is None else self.half_scales[idx]
        return MemberReadout(
            self.raw[idx], self.scales[idx], self.bias, self.labels[idx], self.level, self.names, self.meta, half
        )


def ensemble(c: Tensor, b: Tensor) -> Tensor:
    """Ensemble scaling f_i = M c_i + b (section 3.2), so that mean_i f_i = sum_i c_i + b = z.

    c: [N, M, C] member logits, b: [C] -> f: [N, M, C]."""
    return c.shape[1] * c + b


def target(labels: Tensor, n_classes: int, kind: str = "onehot", *, tau: float = 1.0, dtype=None) -> Tensor:
    """Target vectors y [N, C]: one-hot e_y, scaled tau e_y, or label-centred e_y - 1/C."""
    if kind not in TARGETS:
        raise ValueError(f"unknown target {kind!r}: choose one of {TARGETS}")
    y = torch.nn.functional.one_hot(labels.long(), n_classes).to(dtype or torch.float64)
    if kind == "scaled":
        y = tau * y
    elif kind == "centred":
        y = y - 1.0 / n_classes
    return y


def centre(f: Tensor) -> Tensor:
    """Subtract the mean over classes (the last axis); softmax is invariant to it."""
    return f - f.mean(-1, keepdim=True)


# --------------------------------------------------------------------------- Theorem 1 / 3
@dataclass
class Decomposition:
    """Per-example terms [N] and per-member terms [N, M] of one decomposition.

    MSE = Bias − Div: Kamigaito et al. 2025 (arXiv:2505.24009), Theorem 1 / Eq. 8.
    """

    mse: Tensor
    bias: Tensor
    div: Tensor
    omega: Tensor
    bias_i: Tensor  # [N, M] ||f_i - y||^2
    div_i: Tensor  # [N, M] ||f_i - f_bar||^2
    n_members: int

    def mean(self) -> dict[str, float]:
        return {k: float(getattr(self, k).mean()) for k in ("mse", "bias", "div", "omega")}


def decompose_mse(f: Tensor, y: Tensor) -> Decomposition:
    """MSE = Bias - Div per example (Theorem 1, Krogh & Vedelsby ambiguity decomposition).

    f: [N, M, C] ensemble members (f_bar = mean over M is the model's output); y: [N, C] target.
    """
    if f.ndim != 3 or y.shape != (f.shape[0], f.shape[2]):
        raise ValueError(f"need f [N, M, C] and y [N, C]; got {tuple(f.shape)} and {tuple(y.shape)}")
    fbar = f.mean(1)  # [N, C]
    bias_i = ((f - y[:, None]) ** 2).sum(-1)  # [N, M]
    div_i = ((f - fbar[:, None]) ** 2).sum(-1)  # [N, M]
    mse = ((fbar - y) ** 2).sum(-1)  # [N]
    omega = (f**2).sum(-1).mean(1)  # [N]
    return Decomposition(mse, bias_i.mean(1), div_i.mean(1), omega, bias_i, div_i, f.shape[1])


@dataclass
class CEDecomposition:
    """CE(y, p) = mean member CE - mean KL(p || q_i) (section 3.5); per example [N], per member [N, M]."""

    ce: Tensor
    member_ce: Tensor
    kl: Tensor
    member_ce_i: Tensor
    kl_i: Tensor


def decompose_ce(f: Tensor, y: Tensor) -> CEDecomposition:
    """Exact cross-entropy decomposition for any target distribution y [N, C] (rows sum to 1).

    p = softmax(mean_i f_i) is the normalised geometric mean of q_i = softmax(f_i) (Wood et al.
    2023); the identity holds because log p = mean_i log q_i - log Z with Z = sum_c exp(mean_i log q_i).
    """
    logq = torch.log_softmax(f, -1)  # [N, M, C]
    logp = torch.log_softmax(f.mean(1), -1)  # [N, C]
    ce = -(y * logp).sum(-1)  # [N]
    member_ce_i = -(y[:, None] * logq).sum(-1)  # [N, M]
    kl_i = (logp.exp()[:, None] * (logp[:, None] - logq)).sum(-1)  # [N, M]
    return CEDecomposition(ce, member_ce_i.mean(1), kl_i.mean(1), member_ce_i, kl_i)


# --------------------------------------------------------------------------- sweeps and nulls
def terms_at_depth(
    readout: MemberReadout, k: int | None = None, *, target_kind: str = "onehot", tau: float = 1.0
) -> tuple[Decomposition, CEDecomposition, Tensor]:
    """Decompositions after k blocks and the model's predictions argmax z^(k) [N]."""
    c, b = readout.at_depth(k)
    f = ensemble(c, b)  # [N, M_k, C]
    y = target(readout.labels, readout.n_classes, target_kind, tau=tau, dtype=f.dtype)
    if target_kind == "centred":
        f = centre(f)
    onehot = target(readout.labels, readout.n_classes, "onehot", dtype=f.dtype)
    return decompose_mse(f, y), decompose_ce(f, onehot), f.mean(1).argmax(-1)


def member_predictions(readout: MemberReadout, k: int | None = None) -> Tensor:
    """U_i = argmax_c f_i[c] for the members after k blocks: [N, M_k] (section 3.6)."""
    c, b = readout.at_depth(k)
    return ensemble(c, b).argmax(-1)


def summaries(readout: MemberReadout) -> Tensor:
    """S_k = argmax_c z^(k)[c], the logit-lens prediction after k blocks, k = 0..L: [N, L+1]."""
    out = []
    for k in range(readout.n_layers + 1):
        c, b = readout.at_depth(k)
        out.append((c.sum(1) + b).argmax(-1))
    return torch.stack(out, 1)


def shuffle_members(c: Tensor, labels: Tensor, *, seed: int = 0) -> Tensor:
    """Member-shuffle null (spec section 5): member i's contribution is taken from an independently
    permuted example *of the same label*, keeping each member's class-conditional marginal and
    destroying co-adaptation between members. c: [N, M, C] -> [N, M, C]."""
    g = torch.Generator().manual_seed(seed)
    out = torch.empty_like(c)
    for cls in labels.unique():
        idx = (labels == cls).nonzero().flatten()
        for i in range(c.shape[1]):
            perm = idx[torch.randperm(len(idx), generator=g)]
            out[idx, i] = c[perm, i]
    return out
