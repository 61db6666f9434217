"""Input checks at the public boundary: one clear message instead of a trace from inside torch.

Each public entry point that takes token ids calls one of these once, before any forward pass,
so an empty batch, a one-token window or an out-of-vocabulary id fails with a message that names
the function, the problem and the fix (house style: "errors a researcher can act on")::

    token_nll: ids has 0 tokens per row (shape [1, 0]); pass at least 2 token ids per row

Shape or range problems raise ``ValueError``; a non-tensor or a non-integer dtype raises
``TypeError`` (both say what to pass instead).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def _shape(x: Tensor) -> str:
    return "[" + ", ".join(str(s) for s in x.shape) + "]"


def token_ids(ids: Tensor, *, where: str, name: str = "input_ids", min_tokens: int = 1,
              vocab_size: int | None = None) -> Tensor:
    """Check a batch of token ids: a 2-D ``torch.long`` tensor [B, T] with B >= 1 and T >= ``min_tokens``,
    every id in [0, vocab_size) when ``vocab_size`` is given. Returns ``ids`` unchanged."""
    if not isinstance(ids, Tensor) or ids.dtype != torch.long:
        got = type(ids).__name__ if not isinstance(ids, Tensor) else f"a tensor of dtype {ids.dtype}"
        raise TypeError(f"{where}: {name} must be a LongTensor of token ids (torch.long), got {got}; "
                        "convert with torch.as_tensor(ids, dtype=torch.long)")
    if ids.ndim != 2:
        hint = "; for one sequence use ids[None]" if ids.ndim == 1 else ""
        raise ValueError(f"{where}: {name} must be 2-D [batch, tokens], got shape {_shape(ids)}{hint}")
    if ids.shape[0] == 0:
        raise ValueError(f"{where}: {name} has an empty batch (shape {_shape(ids)}); pass at least one row")
    if ids.shape[1] < min_tokens:
        need = "token id" if min_tokens == 1 else "token ids"
        why = " (next-token NLL scores tokens 1..T-1)" if min_tokens == 2 else ""
        n = ids.shape[1]
        raise ValueError(f"{where}: {name} has {n} token{'' if n == 1 else 's'} per row (shape {_shape(ids)}); "
                         f"pass at least {min_tokens} {need} per row{why}")
    if vocab_size is not None:
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"{where}: {name} holds token id {bad}, outside the vocabulary 0..{vocab_size - 1}; "
                             "encode the text with this model's tokenizer")
    return ids


def input_vocab(model: nn.Module) -> int:
    """Number of rows of the model's input embedding (the valid input ids are 0..n-1)."""
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if emb is not None and getattr(emb, "weight", None) is not None:
        return int(emb.weight.shape[0])
    return int(model.config.vocab_size)


def model_ids(model: nn.Module, ids: Tensor, *, where: str, name: str = "input_ids", min_tokens: int = 1) -> Tensor:
    """:func:`token_ids` with the vocabulary taken from ``model``'s input embedding."""
    return token_ids(ids, where=where, name=name, min_tokens=min_tokens, vocab_size=input_vocab(model))


def nll_inputs(logits: Tensor, ids: Tensor, *, where: str) -> None:
    """Check next-token NLL inputs: ids [B, T] with T >= 2, logits [B, T, V], every id < V."""
    token_ids(ids, where=where, name="ids", min_tokens=2)
    if not isinstance(logits, Tensor) or logits.ndim != 3 or tuple(logits.shape[:2]) != tuple(ids.shape):
        got = _shape(logits) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(f"{where}: logits must be [B, T, V] with [B, T] = ids.shape {_shape(ids)}, got {got}")
    token_ids(ids, where=where, name="ids", min_tokens=2, vocab_size=logits.shape[-1])


def last_dim(x: Tensor, d: int, *, where: str, name: str) -> None:
    """Check that ``x`` is a tensor [..., d] (the model's residual width)."""
    if not isinstance(x, Tensor) or x.ndim == 0 or x.shape[-1] != d:
        got = _shape(x) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{where}: {name} must be [..., {d}] (this model's residual width), got {got}")

