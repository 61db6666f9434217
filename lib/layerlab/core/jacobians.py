"""Exact block Jacobians of the residual branch, fast.

Aubry, Meng, Sugolov, Papyan, *Transformer Block Coupling ...*, ICLR 2025 (arXiv:2407.07810;
code ``sugolov/coupling/jacobian.py``); spec ``coupling.md`` 3.1 and 6. For block l with input
rows x_t (the residual stream entering the block) and output rows F_t = x_t + f_t::

    J^l_{t1 t2} = d f^l(X)_{t2} / d x_{t1}  in R^{d x d},  [J]_{ab} = d f_{t2,a} / d x_{t1,b}

with all other tokens held fixed; the identity (skip) is subtracted only when t1 = t2.

Three exact methods, all built on the block modules found by :func:`layerlab.core.arch.view` and the
arguments the model itself passes to each block (recorded by forward pre-hooks inside a context
manager, never from ``hidden_states``):

* :func:`frozen_context_jacobians` (Method A): in a causal block the keys/values of positions < t
  do not depend on x_t, so J_tt is the Jacobian of a single-token map with a frozen KV cache of the
  prefix (the block is called on one token with a read-only cache; RoPE position t and GQA come
  from the model's own code). The d basis vectors are vectorised as d batched copies of the token
  and one backward pass. Cost ~ 2 P_block d per Jacobian, independent of the prompt length.
* :func:`output_token_jacobians` (Method B, reverse mode): J_{t1 t2} for all t1 <= t2 at once.
* :func:`input_token_jacobians` (Method C, forward mode): J_{t1 t2} for all t2 >= t1 at once.
* :func:`reference_jacobians`: the authors' method, d VJPs of the output row through the whole
  sequence (the baseline of ``bench/bench_jacobians.py``).

``authors_compat=True`` reproduces the released behaviour: the last block's endpoint includes the
final norm (HF ``hidden_states[L]``) and I is subtracted from every Jacobian, also cross-token ones.
Bidirectional stacks (the ViT of :mod:`layerlab.training.vit`) use the ``*_fn`` variants on a block function.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd import forward_ad as fwAD

from layerlab.core import validate
from layerlab.core.arch import view

BlockFn = Callable[[Tensor], Tensor]  # [B, n, d] -> [B, n, d] block output (with skip)
_CACHE_KEYS = ("cache", "past_key_values", "layer_past")


@dataclass
class _Call:
    """Arguments one block received in a forward pass (hidden states kept separately)."""

    hidden: Tensor  # [B, n, d]
    args: tuple
    kwargs: dict[str, Any]
    positional_hidden: bool


@contextlib.contextmanager
def _record_calls(blocks: Sequence[nn.Module]) -> Iterator[dict[int, _Call]]:
    """Forward pre-hooks (removed in ``finally``) recording each block's inputs and kwargs."""
    calls: dict[int, _Call] = {}
    handles = []

    def make(i: int):
        def hook(module, args, kwargs):
            if args:
                calls[i] = _Call(args[0].detach(), tuple(args[1:]), dict(kwargs), True)
            else:
                kw = dict(kwargs)
                calls[i] = _Call(kw.pop("hidden_states").detach(), (), kw, False)

        return hook

    try:
        for i, b in enumerate(blocks):
            handles.append(b.register_forward_pre_hook(make(i), with_kwargs=True))
        yield calls
    finally:
        for h in handles:
            h.remove()


class _FrozenKV:
    """Read-only stand-in for a transformers ``Cache`` of one layer: ``update`` returns the frozen
    prefix keys/values ([1, kv_heads, t, head_dim], broadcast to the batch of copies) followed by the
    new token's, and stores nothing, so every call sees the same prefix."""

    def __init__(self, keys: Tensor | None, values: Tensor | None):
        self.keys, self.values = keys, values

    def update(self, key_states: Tensor, value_states: Tensor, *args: Any, **kwargs: Any):
        if self.keys is None or self.keys.shape[-2] == 0:
            return key_states, value_states
        b = key_states.shape[0]
        k = torch.cat([self.keys.expand(b, -1, -1, -1), key_states], dim=-2)
        v = torch.cat([self.values.expand(b, -1, -1, -1), value_states], dim=-2)
        return k, v


def _block_fn(block: nn.Module, call: _Call, cache: Any = None, post: nn.Module | None = None) -> BlockFn:
    """The block as a function of its input rows, with everything else as the model passed it."""
    from transformers.cache_utils import Cache

    # the model's cache may arrive as a keyword or positionally (GPT-2): swap it wherever it is
    args = tuple(cache if isinstance(a, Cache) else a for a in call.args)
    kwargs = {k: (cache if (k in _CACHE_KEYS or isinstance(a, Cache)) else a) for k, a in call.kwargs.items()}

    def fn(X: Tensor) -> Tensor:
        out = block(X, *args, **kwargs) if call.positional_hidden else block(hidden_states=X, **kwargs)
        out = out[0] if isinstance(out, (tuple, list)) else out
        return post(out) if post is not None else out

    return fn


# ------------------------------------------------------------------------------------ validation
def _check_ids(model: nn.Module, input_ids: Tensor, where: str) -> Tensor:
    """One prompt [n] or [1, n] of in-vocabulary ids (n >= 1) → [1, n]."""
    ids = input_ids[None] if isinstance(input_ids, Tensor) and input_ids.ndim == 1 else input_ids
    validate.model_ids(model, ids, where=where)
    if ids.shape[0] != 1:
        raise ValueError(f"{where}: input_ids must hold one prompt, shape [n] or [1, n]; got {list(input_ids.shape)}")
    return ids


def _check_token(token: int, n: int, what: str = "token") -> int:
    if not -n <= int(token) < n:
        raise ValueError(f"{what} index {token} is out of range for a {n}-token prompt: use 0..{n - 1} or -{n}..-1")
    return int(token) % n


def _check_layers(model: nn.Module, layers: Sequence[int] | int | None) -> list[int]:
    v = view(model)
    if layers is None:
        return list(range(v.n_layers))
    layers = [layers] if isinstance(layers, int) else list(layers)
    for layer in layers:
        v.check_layer(layer)
    return [int(x) for x in layers]


def _cache_kw(model: nn.Module) -> str:
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _post(model: nn.Module, layer: int, authors_compat: bool) -> nn.Module | None:
    v = view(model)
    return v.final_norm if authors_compat and layer == v.n_layers - 1 else None


# ------------------------------------------------------------------------ generic function methods
def diagonal_jacobian_single(
    fn: BlockFn, x: Tensor, *, chunk_size: int | None = None, layout: str = "batch"
) -> Tensor:
    """J_F = d fn(x)/dx for a single-token map, vectorised over the d basis vectors: c copies of x
    and one backward of sum_b out_b[idx_b] (copy b's gradient is row idx_b of J_F).

    layout "batch": fn maps [c, 1, d] -> [c, 1, d] (copies in the batch dimension); "seq": fn maps
    [1, c, d] -> [1, c, d] (copies as c query rows that cannot see each other; see
    :func:`frozen_context_jacobians`). x: [d]. Returns [d(out), d(in)] (skip included).
    """
    if layout not in ("batch", "seq"):
        raise ValueError(f"layout must be 'batch' or 'seq', got {layout!r}")
    d = x.shape[-1]
    chunk = chunk_size or d
    rows = []
    with torch.enable_grad():
        for s in range(0, d, chunk):
            idx = torch.arange(s, min(s + chunk, d))
            c = len(idx)
            shape = (c, 1, d) if layout == "batch" else (1, c, d)
            X = x.detach().reshape(1, 1, d).expand(*shape).clone().requires_grad_(True)
            out = fn(X).reshape(c, d)  # [c, d]
            (g,) = torch.autograd.grad(out[torch.arange(c), idx].sum(), X)
            rows.append(g.reshape(c, d))
    return torch.cat(rows)  # [d(out), d(in)]


def _seq_copies_fn(block: nn.Module, call: _Call, cache: _FrozenKV, post: nn.Module | None) -> BlockFn:
    """The single-token block call of ``call`` (one query at position t over a frozen prefix)
    rewritten so that c copies of the token sit in the query dimension: the recorded additive mask
    [1, 1, 1, m] becomes [1, 1, c, m-1+c] (prefix columns as recorded, copies see only themselves),
    rotary (cos, sin) [1, 1, hd] and position ids are broadcast to the c rows. The prefix K/V are
    shared instead of copied c times, so attention costs one [c, t+c] product per head."""
    from transformers.cache_utils import Cache

    def widen(key: str | int, a: Any, c: int) -> Any:
        if isinstance(a, Cache) or key in _CACHE_KEYS:
            return cache
        if isinstance(a, Tensor) and a.ndim == 4 and a.shape[-2] == 1 and a.is_floating_point():
            prefix = a[..., :-1].expand(a.shape[0], a.shape[1], c, a.shape[-1] - 1)  # [1, 1, c, m-1]
            eye = torch.eye(c, dtype=torch.bool, device=a.device)
            own = torch.zeros((), dtype=a.dtype).where(eye, torch.finfo(a.dtype).min)  # [c, c]
            return torch.cat([prefix, own.expand(a.shape[0], a.shape[1], c, c)], dim=-1)
        if key == "position_embeddings" and isinstance(a, (tuple, list)):
            return tuple(p.expand(p.shape[0], c, *p.shape[2:]) for p in a)
        if key == "position_ids" and isinstance(a, Tensor):
            return a.expand(a.shape[0], c)
        return a

    def fn(X: Tensor) -> Tensor:  # X [1, c, d]
        c = X.shape[1]
        args = tuple(widen(i, a, c) for i, a in enumerate(call.args))
        kwargs = {k: widen(k, a, c) for k, a in call.kwargs.items()}
        out = block(X, *args, **kwargs) if call.positional_hidden else block(hidden_states=X, **kwargs)
        out = out[0] if isinstance(out, (tuple, list)) else out
        return post(out) if post is not None else out

    return fn


def output_token_jacobians_fn(fn: BlockFn, X: Tensor, t2: int, *, vectorize: bool = True) -> Tensor:
    """Reverse mode from output row t2 through the whole sequence: d VJPs (vectorised with
    ``is_grads_batched`` unless ``vectorize=False``, the authors' loop). X: [1, n, d].
    Returns J_F[t1] = d fn(X)_{t2} / d x_{t1} for all t1: [n, d, d] (skip included at t1 = t2)."""
    X = X.detach().clone().requires_grad_(True)
    d = X.shape[-1]
    with torch.enable_grad():
        out = fn(X)[0, t2]  # [d]
        if vectorize:
            eye = torch.eye(d, dtype=out.dtype, device=out.device)
            (g,) = torch.autograd.grad(out, X, grad_outputs=eye, is_grads_batched=True)  # [d, 1, n, d]
            g = g[:, 0]
        else:
            g = torch.stack([torch.autograd.grad(out[a], X, retain_graph=True)[0][0] for a in range(d)])
    return g.permute(1, 0, 2)  # [n(t1), d(a), d(b)]


def input_token_jacobians_fn(fn: BlockFn, X: Tensor, t1: int, *, chunk_size: int | None = None) -> Tensor:
    """Forward mode (dual numbers) from input row t1: d tangents as batched copies of the sequence.
    X: [1, n, d]. Returns J_F[t2] = d fn(X)_{t2} / d x_{t1} for all t2: [n, d, d]."""
    _, n, d = X.shape
    chunk = chunk_size or d
    cols = []
    with torch.no_grad():
        for s in range(0, d, chunk):
            idx = torch.arange(s, min(s + chunk, d))
            T = torch.zeros(len(idx), n, d, dtype=X.dtype, device=X.device)
            T[torch.arange(len(idx)), t1, idx] = 1.0
            with fwAD.dual_level():
                out = fn(fwAD.make_dual(X.detach().expand(len(idx), n, d).contiguous(), T))
                cols.append(fwAD.unpack_dual(out).tangent)  # [c(b), n(t2), d(a)]
    return torch.cat(cols).permute(1, 2, 0)  # [n(t2), d(a), d(b)]


def _subtract_identity(J: Tensor, diag_index: int | None, always: bool) -> Tensor:
    """J_F -> J_f: subtract I at the diagonal token (or everywhere, authors_compat). J: [n, d, d]."""
    eye = torch.eye(J.shape[-1], dtype=J.dtype, device=J.device)
    if always:
        return J - eye
    J = J.clone()
    if diag_index is not None:
        J[diag_index] -= eye
    return J


# ------------------------------------------------------------------------------ model-level methods
def _full_calls(model: nn.Module, ids: Tensor) -> dict[int, _Call]:
    blocks = [b.block for b in view(model).blocks]
    with torch.no_grad(), _record_calls(blocks) as calls:
        model(ids, use_cache=False)
    return calls


def block_function(
    model: nn.Module, input_ids: Tensor, layer: int, *, authors_compat: bool = False
) -> tuple[BlockFn, Tensor]:
    """Block ``layer`` as a function of its full-sequence input, and that input X [1, n, d]
    (recorded by pre-hooks during one forward pass). ``fn(X)`` reproduces the block's output."""
    ids = _check_ids(model, input_ids, "block_function")
    (layer,) = _check_layers(model, layer)
    calls = _full_calls(model, ids)
    fn = _block_fn(view(model).blocks[layer].block, calls[layer], None, _post(model, layer, authors_compat))
    return fn, calls[layer].hidden


def frozen_context_jacobians(
    model: nn.Module,
    input_ids: Tensor,
    token: int = -1,
    layers: Sequence[int] | int | None = None,
    *,
    authors_compat: bool = False,
    chunk_size: int | None = None,
    layout: str = "seq",
) -> Tensor:
    """Diagonal Jacobians J^l_tt of every requested block at one token, by the frozen-context
    single-token method (spec section 6, Method A; exact for causal models).

    input_ids: [n] or [1, n]; token: index t (negative allowed; default the last prompt token, as
    the authors). ``layout="seq"`` (default) puts the d copies of x_t in the query dimension with a
    mask that hides them from each other and shares the prefix K/V; ``"batch"`` is the plain fallback
    (copies in the batch dimension, K/V broadcast). Both are exact; tests check both against the
    reference on every tiny family. Returns J [len(layers), d, d] (identity subtracted).
    """
    ids = _check_ids(model, input_ids, "frozen_context_jacobians")
    n = ids.shape[1]
    t = _check_token(token, n)
    layers = _check_layers(model, layers)
    v = view(model)
    blocks = [b.block for b in v.blocks]
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    key = _cache_kw(model)
    with torch.no_grad():
        if t > 0:
            model(ids[:, :t], **{key: cache}, use_cache=True)
        prefix = {i: (None, None) for i in layers}
        if t > 0:
            kv = [cache.layers[i] for i in layers]
            prefix = {i: (c.keys.detach().clone(), c.values.detach().clone()) for i, c in zip(layers, kv)}
        with _record_calls(blocks) as calls:
            model(ids[:, t : t + 1], **{key: cache}, use_cache=True)
    out = []
    for i in layers:
        kv, post = _FrozenKV(*prefix[i]), _post(model, i, authors_compat)
        make = _seq_copies_fn if layout == "seq" else _block_fn
        fn = make(blocks[i], calls[i], kv, post)
        JF = diagonal_jacobian_single(fn, calls[i].hidden[0, -1], chunk_size=chunk_size, layout=layout)
        out.append(JF - torch.eye(JF.shape[-1], dtype=JF.dtype, device=JF.device))
    return torch.stack(out)  # [len(layers), d, d]


def reference_jacobians(
    model: nn.Module,
    input_ids: Tensor,
    token: int = -1,
    layers: Sequence[int] | int | None = None,
    *,
    authors_compat: bool = False,
    vectorize: bool = False,
) -> Tensor:
    """The authors' method: d VJPs of block l's output row ``token`` through the whole n-token
    sequence (``vectorize=False``: one VJP at a time, as released; True: batched VJPs).
    Returns J [len(layers), d, d] (identity subtracted).

    Aubry et al., ICLR 2025 (arXiv:2407.07810), released ``jacobian.py``; spec coupling.md section 3.1.
    """
    ids = _check_ids(model, input_ids, "reference_jacobians")
    t = _check_token(token, ids.shape[1])
    layers = _check_layers(model, layers)
    blocks = [b.block for b in view(model).blocks]
    calls = _full_calls(model, ids)
    out = []
    for i in layers:
        fn = _block_fn(blocks[i], calls[i], None, _post(model, i, authors_compat))
        JF = output_token_jacobians_fn(fn, calls[i].hidden, t, vectorize=vectorize)[t]
        out.append(JF - torch.eye(JF.shape[-1], dtype=JF.dtype, device=JF.device))
    return torch.stack(out)


def output_token_jacobians(
    model: nn.Module, input_ids: Tensor, token: int, layer: int, *, authors_compat: bool = False
) -> Tensor:
    """Context Jacobians J^l_{t1, t2} for a fixed output token t2 = ``token`` and all t1 <= t2 in
    one reverse pass over the prefix (spec 6, Method B). Returns [t2 + 1, d, d] indexed by t1."""
    ids = _check_ids(model, input_ids, "output_token_jacobians")
    t2 = _check_token(token, ids.shape[1])
    (layer,) = _check_layers(model, layer)
    ids = ids[:, : t2 + 1]  # causal: later tokens cannot matter
    calls = _full_calls(model, ids)
    fn = _block_fn(view(model).blocks[layer].block, calls[layer], None, _post(model, layer, authors_compat))
    JF = output_token_jacobians_fn(fn, calls[layer].hidden, t2)  # [t2+1, d, d]
    return _subtract_identity(JF, t2, authors_compat)


def input_token_jacobians(
    model: nn.Module,
    input_ids: Tensor,
    token: int,
    layer: int,
    *,
    authors_compat: bool = False,
    chunk_size: int | None = 64,
) -> Tensor:
    """Context Jacobians J^l_{t1, t2} for a fixed input token t1 = ``token`` and all t2 >= t1 in one
    forward-mode pass (spec 6, Method C). Returns [n - t1, d, d] indexed by t2 - t1."""
    ids = _check_ids(model, input_ids, "input_token_jacobians")
    t1 = _check_token(token, ids.shape[1])
    (layer,) = _check_layers(model, layer)
    calls = _full_calls(model, ids)
    fn = _block_fn(view(model).blocks[layer].block, calls[layer], None, _post(model, layer, authors_compat))
    JF = input_token_jacobians_fn(fn, calls[layer].hidden, t1, chunk_size=chunk_size)[t1:]  # [n-t1, d, d]
    return _subtract_identity(JF, 0, authors_compat)


def block_trajectory(model: nn.Module, input_ids: Tensor) -> Tensor:
    """x^0..x^L of every token from forward hooks (block inputs + last block output, before the
    final norm). input_ids: [n] or [1, n]. Returns [n, L+1, d].

    Token trajectories of Aubry et al., ICLR 2025 (arXiv:2407.07810); spec coupling.md section 3.5.
    """
    from layerlab.core.residual import capture

    ids = _check_ids(model, input_ids, "block_trajectory")
    with torch.no_grad(), capture(model, points=("block_in", "block_out")) as cap:
        model(ids, use_cache=False)
    xs = torch.cat([cap["block_in"], cap["block_out"][-1:]], dim=0)  # [L+1, 1, n, d]
    return xs[:, 0].permute(1, 0, 2)  # [n, L+1, d]
