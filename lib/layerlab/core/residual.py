"""Reading the residual stream: hook capture and the logit lens.

Hooks exist only inside :func:`capture` (baukit's ``Trace`` pattern) and are removed in
``finally``. Two logit lenses (nostalgebraist 2020):

* ``mode="recompute"``: apply the model's own final norm to a partial residual h_k, then the
  unembedding. The lens of the last block's output *is* the model's forward, so it reproduces
  ``model(...).logits`` exactly.
* ``mode="frozen"``: freeze the final norm's denominator at its value on the full residual h_L.
  The norm is then linear, and the residual writes u_i (embedding, every attention and MLP output)
  map to per-member logits c_i with Σ_i c_i + b = model logits exactly (Kamigaito et al. 2025,
  Eq. 1; direct logit attribution). This is what :func:`contributions` returns.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from layerlab.core import validate
from layerlab.core.arch import ModelView, view

#: Capture points: the embedding, block inputs and outputs, and the attention and MLP residual writes.
POINTS = ("embed", "block_in", "block_out", "attn_out", "mlp_out")


def _first(x):
    return x[0] if isinstance(x, (tuple, list)) else x


class Capture(Mapping):
    """Captured activations. ``cap[point]`` is [L, B, T, d] for per-layer points (layers in the
    order requested) and [B, T, d] for ``"embed"``. Positions are restricted if requested.
    Per-layer tensors are stacked lazily on first access, so capturing costs no copies."""

    def __init__(self, layers: list[int], positions):
        self.layers = layers
        self.positions = positions
        self._raw: dict[str, dict[int, Tensor]] = {}
        self._stacked: dict[str, Tensor] = {}

    def _store(self, point: str, layer: int, t: Tensor, detach: bool) -> None:
        if self.positions is not None:
            t = t[:, self.positions]
        self._raw.setdefault(point, {})[layer] = t.detach() if detach else t

    def layer(self, point: str, layer: int) -> Tensor:
        """One layer's activation [B, T, d] without stacking the others."""
        return self._raw[point][layer]

    def __getitem__(self, point: str) -> Tensor:
        if point not in self._stacked:
            per_layer = self._raw[point]
            self._stacked[point] = (per_layer[-1] if point == "embed"
                                    else torch.stack([per_layer[l] for l in self.layers]))
        return self._stacked[point]

    def __iter__(self):
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


@contextlib.contextmanager
def capture(model: nn.Module, points: Iterable[str] = POINTS, *, layers: Sequence[int] | None = None,
            positions: Sequence[int] | Tensor | slice | None = None, detach: bool = True) -> Iterator[Capture]:
    """Record residual-stream activations of every forward run inside the ``with``.

    points: subset of ``POINTS``; layers: 0-based block indices (default all);
    positions: token positions to keep (default all); detach=False keeps the autograd graph.
    Only the last forward inside the context is kept.
    """
    v = view(model)
    points = tuple(points)
    bad = [p for p in points if p not in POINTS]
    if bad:
        raise ValueError(f"unknown capture point(s) {bad}: choose from {POINTS}")
    layer_ids = list(range(v.n_layers)) if layers is None else [v.check_layer(l) for l in layers]
    cap = Capture(layer_ids, positions)
    handles = []

    def pre(point, l):
        def hook(module, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            cap._store(point, l, h, detach)
        return hook

    def post(point, l, clone=False):
        def hook(module, args, output):
            out = _first(output)
            # a block that later adds into this tensor in place (Falcon) would change what we stored
            cap._store(point, l, out.clone() if clone else out, detach)
        return hook

    try:
        if "embed" in points:
            handles.append(v.blocks[0].block.register_forward_pre_hook(pre("embed", -1), with_kwargs=True))
        for l in layer_ids:
            b = v.blocks[l]
            if "block_in" in points:
                handles.append(b.block.register_forward_pre_hook(pre("block_in", l), with_kwargs=True))
            if "block_out" in points:
                handles.append(b.block.register_forward_hook(post("block_out", l)))
            if "attn_out" in points:
                handles.append(b.attn_writer.register_forward_hook(post("attn_out", l, b.inplace_writes)))
            if "mlp_out" in points:
                handles.append(b.mlp_writer.register_forward_hook(post("mlp_out", l, b.inplace_writes)))
        yield cap
    finally:
        for h in handles:
            h.remove()


def run_with_capture(model: nn.Module, input_ids: Tensor, points: Iterable[str] = POINTS,
                     **capture_kwargs) -> tuple[Tensor, Capture]:
    """One forward under :func:`capture`; returns (logits [B, T, V], capture).

    input_ids: [B, T] token ids (B, T >= 1, every id inside the model's vocabulary).
    """
    validate.model_ids(model, input_ids, where="run_with_capture")
    return _run_with_capture(model, input_ids, points, **capture_kwargs)


def _run_with_capture(model: nn.Module, input_ids: Tensor, points: Iterable[str] = POINTS,
                      **capture_kwargs) -> tuple[Tensor, Capture]:
    with torch.no_grad(), capture(model, points, **capture_kwargs) as cap:
        logits = model(input_ids=input_ids, use_cache=False).logits
    return logits, cap


# --------------------------------------------------------------------------- logit lens
def _unembed(v: ModelView, x: Tensor, token_ids: Tensor | None) -> Tensor:
    W = v.unembed.weight if token_ids is None else v.unembed.weight[token_ids]  # [V', d]
    out = x @ W.T
    b = getattr(v.unembed, "bias", None)
    if b is not None:
        out = out + (b if token_ids is None else b[token_ids])
    return out


def norm_scale(model: nn.Module, h: Tensor) -> Tensor:
    """Final-norm denominator of a (partial) residual h [..., d] → [...].

    s(h) of the frozen-norm members c_i = W_U (w ⊙ center(u_i)) / s(h_L): Kamigaito et al. 2025
    (arXiv:2505.24009), Eq. 1.
    """
    return view(model).final_norm_params().scale(h)


def lens_logits(model: nn.Module, resid: Tensor, *, mode: str = "recompute", ref: Tensor | None = None,
                token_ids: Tensor | None = None) -> Tensor:
    """Logit lens of a residual ``resid`` [..., d] → [..., V] (or [..., len(token_ids)]).

    mode="recompute": the model's final norm on ``resid`` itself (exact model logits at h_L).
    mode="frozen": the norm's denominator taken from ``ref`` (the full residual h_L, same leading
    shape); linear in ``resid``. Soft-capping (Gemma 2) is applied in both modes.

    Logit lens: nostalgebraist (2020); the frozen mode is the linear readout of Kamigaito et al. 2025, Eq. 1.
    """
    v = view(model)
    validate.last_dim(resid, v.d_model, where="logit_lens", name="resid")
    if token_ids is not None:
        tid = torch.as_tensor(token_ids)
        if tid.numel() and (int(tid.min()) < 0 or int(tid.max()) >= v.vocab_size):
            raise ValueError(f"logit_lens: token_ids must lie in 0..{v.vocab_size - 1}, got {tid.min()}..{tid.max()}")
    if mode == "recompute":
        if token_ids is None:
            return v.softcap(v.unembed(v.final_norm(resid)))
        return v.softcap(_unembed(v, v.final_norm(resid), token_ids))
    if mode != "frozen":
        raise ValueError(f"unknown lens mode {mode!r}: use 'recompute' or 'frozen'")
    if ref is None:
        raise ValueError("mode='frozen' needs ref=<full residual h_L> to freeze the norm scale")
    validate.last_dim(ref, v.d_model, where="logit_lens", name="ref")
    try:
        ok = torch.broadcast_shapes(ref.shape, resid.shape) == resid.shape
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"logit_lens: ref {list(ref.shape)} must broadcast to resid's shape {list(resid.shape)}")
    p = v.final_norm_params()
    normed = p.weight * p.center(resid) / p.scale(ref).unsqueeze(-1)
    if p.bias is not None:
        normed = normed + p.bias
    return v.softcap(_unembed(v, normed, token_ids))


@dataclass
class Contributions:
    """Residual-stream members at selected positions, read through the frozen-norm lens.

    members: [B, P, M, d] raw residual writes u_i, ordered embed, attn0, mlp0, attn1, ... (module
    level, M = 2L+1) or embed, block0, block1, ... (layer level, M = L+1); they sum to h_L.
    scale: [B, P] final-norm denominator of h_L. resid: [B, P, d] = h_L.

    Sum_i c_i + b equals the model's logits: Kamigaito et al. 2025 (arXiv:2505.24009), Eq. 1.
    """

    members: Tensor
    names: list[str]
    scale: Tensor
    resid: Tensor
    model_view: ModelView

    @property
    def M(self) -> int:
        return self.members.shape[-2]

    def member_logits(self, token_ids: Tensor | None = None) -> Tensor:
        """c_i = W_U (w ⊙ center(u_i)) / s  → [B, P, M, V'] (no bias, no soft-cap)."""
        p = self.model_view.final_norm_params()
        normed = p.weight * p.center(self.members) / self.scale[..., None, None]
        W = self.model_view.unembed.weight if token_ids is None else self.model_view.unembed.weight[token_ids]
        return normed @ W.T

    def bias(self, token_ids: Tensor | None = None) -> Tensor:
        """b = W_U β + b_U (zero for RMSNorm models without an unembedding bias) → [V']."""
        v = self.model_view
        p = v.final_norm_params()
        W = v.unembed.weight if token_ids is None else v.unembed.weight[token_ids]
        b = torch.zeros(W.shape[0], dtype=W.dtype, device=W.device)
        if p.bias is not None:
            b = b + W @ p.bias
        ub = getattr(v.unembed, "bias", None)
        if ub is not None:
            b = b + (ub if token_ids is None else ub[token_ids])
        return b

    def logits(self, token_ids: Tensor | None = None) -> Tensor:
        """Σ_i c_i + b, soft-capped like the model: equals the model's logits. [B, P, V']."""
        return self.model_view.softcap(self.member_logits(token_ids).sum(-2) + self.bias(token_ids))


def contributions(model: nn.Module, input_ids: Tensor, *, positions: Sequence[int] | Tensor | None = None,
                  level: str = "module") -> Contributions:
    """Residual members of one forward pass at ``positions`` (default: all) — Kamigaito et al. Eq. 1.

    input_ids: [B, T] token ids (B, T >= 1, inside the vocabulary); level: ``"module"`` (embed, attn0,
    mlp0, ...; M = 2L+1) or ``"layer"`` (embed, block0, ...; M = L+1). Members sum to h_L exactly.
    """
    validate.model_ids(model, input_ids, where="contributions")
    if level not in ("module", "layer"):
        raise ValueError(f"unknown member level {level!r}: use 'module' (M=2L+1) or 'layer' (M=L+1)")
    v = view(model)
    T = input_ids.shape[1]
    if positions is not None:
        pos = torch.as_tensor(positions, dtype=torch.long)
        if pos.numel() and (pos.max() >= T or pos.min() < -T):
            raise ValueError(f"position out of range for a sequence of {T} tokens: {pos.tolist()}")
        positions = pos
    _, cap = _run_with_capture(model, input_ids, ("embed", "attn_out", "mlp_out", "block_out"),
                              positions=positions)
    attn, mlp = cap["attn_out"], cap["mlp_out"]  # [L, B, P, d]
    if level == "module":
        inter = torch.stack([attn, mlp], dim=1).flatten(0, 1)  # [2L, B, P, d]: attn0, mlp0, attn1, ...
        names = ["embed"] + [f"{k}{l}" for l in range(v.n_layers) for k in ("attn", "mlp")]
    else:
        inter = attn + mlp
        names = ["embed"] + [f"block{l}" for l in range(v.n_layers)]
    members = torch.cat([cap["embed"][None], inter]).permute(1, 2, 0, 3)  # [B, P, M, d]
    h_L = cap["block_out"][-1]  # [B, P, d]
    return Contributions(members, names, v.final_norm_params().scale(h_L), h_L, v)
