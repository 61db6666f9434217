"""GGML block quantisation round trips: the Q4_1 control of the coupling chapter.

SmolLM2-135M-Instruct reaches us as a GGUF file whose block linear weights (q, k, v, o, gate, up,
down) are Q4_1 and whose token embedding is Q8_0. Q4_1 noise is independent across layers, so it can
only add unaligned components to each block Jacobian; how much coupling it removes is unknown
(coupling spec, section 4 "Where quantisation and instruct tuning matter" and the "Quantisation" row
of section 5). :func:`gguf_roundtrip` applies the same quantise-dequantise round trip to any
Llama-style model (our trained family), so the coupling change it causes can be measured.

Formats (ggml, ``ggml-quants.c``; bit-exact with ``gguf.quants``, tested):

* Q4_1, blocks of 32 consecutive inputs of a weight row: ``d = (max - min) / 15``,
  ``q = trunc((x - min) / d + 0.5)`` clipped to [0, 15], ``x' = q * fp16(d) + fp16(min)``.
* Q8_0, blocks of 32: ``d = max|x| / 127``, ``q = round_half_away(x / d)``, ``x' = q * fp16(d)``.

A row whose length is not a multiple of 32 (the family's SwiGLU width 176) ends with one shorter block
quantised by the same rule; llama.cpp would fall back to another type there [reconstructed].
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

BLOCK = 32
Q4_1_PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _blocks(w: Tensor, block: int) -> list[Tensor]:
    """Split the last dim of ``w`` [..., n] into blocks of ``block`` (the last may be shorter)."""
    if block < 1:
        raise ValueError(f"block size must be >= 1, got {block}")
    return list(torch.split(w.float(), block, dim=-1))


def _fp16(x: Tensor) -> Tensor:
    return x.half().float()


def q4_1_roundtrip(w: Tensor, block: int = BLOCK) -> Tensor:
    """Q4_1 quantise-dequantise of ``w`` [..., n] along its last dim (dtype preserved)."""
    out = []
    for b in _blocks(w, block):  # [..., <=block] float32, as ggml computes
        lo, hi = b.amin(-1, keepdim=True), b.amax(-1, keepdim=True)
        d = (hi - lo) / 15
        inv = torch.where(d == 0, torch.zeros_like(d), 1 / d)
        q = torch.trunc((b - lo) * inv + 0.5).clamp(0, 15)
        out.append(q * _fp16(d) + _fp16(lo))
    return torch.cat(out, dim=-1).to(w.dtype)


def q8_0_roundtrip(w: Tensor, block: int = BLOCK) -> Tensor:
    """Q8_0 quantise-dequantise of ``w`` [..., n] along its last dim (dtype preserved)."""
    out = []
    for b in _blocks(w, block):
        d = b.abs().amax(-1, keepdim=True) / 127
        inv = torch.where(d == 0, torch.zeros_like(d), 1 / d)
        x = b * inv
        q = torch.sign(x) * torch.floor(x.abs() + 0.5)  # roundf: half away from zero
        out.append(q * _fp16(d))
    return torch.cat(out, dim=-1).to(w.dtype)


@torch.no_grad()
def gguf_roundtrip(model: nn.Module, *, embeddings: bool = True) -> nn.Module:
    """A copy of ``model`` with the SmolLM2 GGUF's quantisation applied: Q4_1 on every block
    projection (``Q4_1_PROJ``), Q8_0 on the input embedding and an untied output head
    (``embeddings=False`` keeps them exact); norms stay float. The original is untouched."""
    out = copy.deepcopy(model)
    n = 0
    for name, mod in out.named_modules():
        if isinstance(mod, nn.Linear) and name.rsplit(".", 1)[-1] in Q4_1_PROJ:
            mod.weight.copy_(q4_1_roundtrip(mod.weight))
            n += 1
    if n == 0:
        raise ValueError(
            f"{type(model).__name__} has no Llama-style projections named {Q4_1_PROJ}: "
            "the Q4_1 round trip is defined for Llama-style decoders"
        )
    if embeddings:
        emb = out.get_input_embeddings()
        emb.weight.copy_(q8_0_roundtrip(emb.weight))
        head = out.get_output_embeddings()
        if head is not None and head.weight is not emb.weight:
            head.weight.copy_(q8_0_roundtrip(head.weight))
    return out


@torch.no_grad()
def relative_error(a: nn.Module, b: nn.Module) -> float:
    """||θ_a − θ_b|| / ||θ_a|| over all parameters (how much the round trip moved the weights)."""
    num = sum(float((p - q).double().pow(2).sum()) for p, q in zip(a.parameters(), b.parameters()))
    den = sum(float(p.double().pow(2).sum()) for p in a.parameters())
    return (num / den) ** 0.5
