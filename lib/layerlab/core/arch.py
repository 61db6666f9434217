"""One uniform view of a decoder-only model: the only module that knows module paths.

``view(model)`` maps the Llama/SmolLM2 (and Mistral), Qwen2, Gemma 1/2/3, OLMo, Phi, Falcon,
GPT-2 and GPT-NeoX families onto the same anatomy: token embedding, a list of blocks (each with
its attention and MLP submodules and the modules whose outputs are written into the residual
stream), the final norm and the unembedding. Everything else in layerlab (hooks, ablations,
Jacobians, weight statistics) goes through this view, so supporting a new family means adding one
entry here.

Module paths follow the Hugging Face ``transformers`` implementations (``modeling_<type>.py``):
OLMo (Groeneveld et al. 2024) uses weightless LayerNorms; Phi-1/1.5/2 (Gunasekar et al. 2023,
Li et al. 2023) and Falcon (Almazrouei et al. 2023; ``parallel_attn`` / ``new_decoder_architecture``)
write attention and MLP in parallel from the same block input. Falcon adds the attention output
*in place* into the MLP writer's output tensor, so :mod:`layerlab.core.residual` clones writes of
blocks with ``inplace_writes`` before the block modifies them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

# family -> (backbone attr, layers attr, embed attr, final-norm attr)
_BACKBONES = {
    "llama": ("model", "layers", "embed_tokens", "norm"),
    "qwen2": ("model", "layers", "embed_tokens", "norm"),
    "gemma2": ("model", "layers", "embed_tokens", "norm"),
    "gemma3": ("model", "layers", "embed_tokens", "norm"),
    "gpt2": ("transformer", "h", "wte", "ln_f"),
    "neox": ("gpt_neox", "layers", "embed_in", "final_layer_norm"),
    "gemma": ("model", "layers", "embed_tokens", "norm"),
    "olmo": ("model", "layers", "embed_tokens", "norm"),
    "phi": ("model", "layers", "embed_tokens", "final_layernorm"),
    "falcon": ("transformer", "h", "word_embeddings", "ln_f"),
}
_MODEL_TYPES = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "gemma2": "gemma2",
                "gemma3_text": "gemma3", "gemma3": "gemma3", "gpt2": "gpt2", "gpt_neox": "neox",
                "gemma": "gemma", "olmo": "olmo", "phi": "phi", "falcon": "falcon"}
GEMMA_NORMS = ("gemma", "gemma2", "gemma3")  # RMSNorm scale is (1 + w)

# component name -> attribute path inside a block, per family (HF [out, in] weights)
_LLAMA_WEIGHTS = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
                  "o": "self_attn.o_proj", "gate": "mlp.gate_proj", "up": "mlp.up_proj",
                  "down": "mlp.down_proj", "input_norm": "input_layernorm",
                  "post_attn_norm": "post_attention_layernorm"}
_WEIGHTS = {
    "llama": _LLAMA_WEIGHTS, "qwen2": _LLAMA_WEIGHTS,
    "gemma2": {**_LLAMA_WEIGHTS, "pre_ff_norm": "pre_feedforward_layernorm",
               "post_ff_norm": "post_feedforward_layernorm"},
    "gemma3": {**_LLAMA_WEIGHTS, "pre_ff_norm": "pre_feedforward_layernorm",
               "post_ff_norm": "post_feedforward_layernorm"},
    "gpt2": {"qkv": "attn.c_attn", "o": "attn.c_proj", "up": "mlp.c_fc", "down": "mlp.c_proj",
             "input_norm": "ln_1", "post_attn_norm": "ln_2"},
    "neox": {"qkv": "attention.query_key_value", "o": "attention.dense", "up": "mlp.dense_h_to_4h",
             "down": "mlp.dense_4h_to_h", "input_norm": "input_layernorm",
             "post_attn_norm": "post_attention_layernorm"},
    "gemma": _LLAMA_WEIGHTS,
    "olmo": _LLAMA_WEIGHTS,  # its LayerNorms have no weights: weights() lists only what exists
    "phi": {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.dense",
            "up": "mlp.fc1", "down": "mlp.fc2", "input_norm": "input_layernorm"},
    # Falcon: one input norm (7B, 11B), two parallel norms (40B-style) or sequential norms
    "falcon": {"qkv": "self_attention.query_key_value", "o": "self_attention.dense", "up": "mlp.dense_h_to_4h",
               "down": "mlp.dense_4h_to_h", "input_norm": "input_layernorm", "attn_norm": "ln_attn",
               "mlp_norm": "ln_mlp", "post_attn_norm": "post_attention_layernorm"},
}
# (attention module, MLP module, attention writer, MLP writer)
_PARTS = {
    "llama": ("self_attn", "mlp", "self_attn.o_proj", "mlp.down_proj"),
    "qwen2": ("self_attn", "mlp", "self_attn.o_proj", "mlp.down_proj"),
    "gemma2": ("self_attn", "mlp", "post_attention_layernorm", "post_feedforward_layernorm"),
    "gemma3": ("self_attn", "mlp", "post_attention_layernorm", "post_feedforward_layernorm"),
    "gpt2": ("attn", "mlp", "attn.c_proj", "mlp.c_proj"),
    "neox": ("attention", "mlp", "attention.dense", "mlp.dense_4h_to_h"),
    "gemma": ("self_attn", "mlp", "self_attn.o_proj", "mlp.down_proj"),
    "olmo": ("self_attn", "mlp", "self_attn.o_proj", "mlp.down_proj"),
    "phi": ("self_attn", "mlp", "self_attn.dense", "mlp.fc2"),
    "falcon": ("self_attention", "mlp", "self_attention.dense", "mlp.dense_4h_to_h"),
}


def _parallel(family: str, config) -> bool:
    """Do attention and MLP both read the block input (GPT-J style parallel residual)?"""
    if family == "neox":
        return bool(getattr(config, "use_parallel_residual", False))
    if family == "falcon":
        return bool(getattr(config, "parallel_attn", False) or getattr(config, "new_decoder_architecture", False))
    return family == "phi"


def _has(module: nn.Module, path: str) -> bool:
    for part in path.split("."):
        module = getattr(module, part, None)
        if module is None:
            return False
    return isinstance(getattr(module, "weight", None), torch.Tensor)


def _get(module: nn.Module, path: str) -> nn.Module:
    for part in path.split("."):
        module = getattr(module, part)
    return module


@dataclass(frozen=True)
class NormParams:
    """Final norm as data: y = w_eff ⊙ (h − μ·centered) / sqrt(stat(h) + eps) + bias."""

    kind: str  # "rms" or "layer"
    weight: torch.Tensor  # [d] effective scale (Gemma: 1 + w)
    bias: torch.Tensor | None  # [d] or None
    eps: float

    def scale(self, h: torch.Tensor) -> torch.Tensor:
        """Denominator sqrt(mean(h²)+eps) (RMSNorm) or sqrt(var(h)+eps) (LayerNorm); h [..., d] → [...]."""
        if self.kind == "rms":
            return torch.sqrt(h.pow(2).mean(-1) + self.eps)
        return torch.sqrt(h.var(-1, unbiased=False) + self.eps)

    def center(self, u: torch.Tensor) -> torch.Tensor:
        """The linear part of the norm's numerator (LayerNorm subtracts the mean)."""
        return u - u.mean(-1, keepdim=True) if self.kind == "layer" else u


@dataclass(frozen=True)
class BlockView:
    """One block: its modules, residual writers and analysable weights."""

    index: int
    block: nn.Module
    attn: nn.Module
    mlp: nn.Module
    attn_writer: nn.Module  # output = the attention's write into the residual stream
    mlp_writer: nn.Module  # output = the MLP's write into the residual stream
    parallel: bool
    family: str = field(repr=False)
    inplace_writes: bool = False  # the block adds into a writer's output tensor in place (Falcon)

    def weights(self) -> dict[str, nn.Parameter]:
        """Component → weight tensor. Linear weights in HF [out, in] convention, except GPT-2's
        Conv1D, whose weights are stored [in, out] (transpose before comparing families).
        Components the block lacks (OLMo's weightless norms, Falcon's variant norms) are omitted."""
        return {name: _get(self.block, path).weight for name, path in _WEIGHTS[self.family].items()
                if _has(self.block, path)}

    def residual_writers(self) -> dict[str, nn.Module]:
        """The output projections o_proj / down_proj (or their families' equivalents)."""
        return {"o": _get(self.block, _WEIGHTS[self.family]["o"]),
                "down": _get(self.block, _WEIGHTS[self.family]["down"])}


@dataclass(frozen=True)
class ModelView:
    model: nn.Module
    family: str
    embed: nn.Embedding
    blocks: list[BlockView]
    layer_list: nn.ModuleList
    final_norm: nn.Module
    unembed: nn.Linear
    logit_softcap: float | None

    @property
    def n_layers(self) -> int:
        return len(self.blocks)

    @property
    def d_model(self) -> int:
        return self.embed.weight.shape[1]

    @property
    def vocab_size(self) -> int:
        return self.unembed.weight.shape[0]

    def check_layer(self, layer: int) -> int:
        """Validate a 0-based layer index (negative indices count from the end)."""
        L = self.n_layers
        if not isinstance(layer, int) or isinstance(layer, bool) or not -L <= layer < L:
            name = getattr(self.model.config, "_name_or_path", "") or self.family
            raise ValueError(f"layer {layer!r} is out of range: {name} has layers 0..{L - 1}")
        return layer % L

    def final_norm_params(self) -> NormParams:
        n = self.final_norm
        if isinstance(n, nn.LayerNorm):
            return NormParams("layer", n.weight, n.bias, float(n.eps))
        if type(n).__name__ == "OlmoLayerNorm":  # F.layer_norm without affine parameters, eps 1e-5
            w = self.embed.weight
            return NormParams("layer", torch.ones(w.shape[1], dtype=w.dtype, device=w.device), None, 1e-5)
        eps = float(getattr(n, "variance_epsilon", getattr(n, "eps", 1e-6)))
        w = 1.0 + n.weight if self.family in GEMMA_NORMS else n.weight
        return NormParams("rms", w, None, eps)

    def softcap(self, logits: torch.Tensor) -> torch.Tensor:
        """Final logit soft-capping (Gemma 2); identity for other families."""
        if self.logit_softcap is None:
            return logits
        return torch.tanh(logits / self.logit_softcap) * self.logit_softcap


def family_of(model: nn.Module) -> str:
    mt = getattr(model.config, "model_type", None)
    if mt not in _MODEL_TYPES:
        raise ValueError(f"unsupported model type {mt!r}: layerlab supports {sorted(_MODEL_TYPES)} "
                         "(add the family to layerlab/core/arch.py)")
    return _MODEL_TYPES[mt]


def view(model: nn.Module) -> ModelView:
    """The uniform anatomy of a supported causal LM (see module docstring)."""
    family = family_of(model)
    bb_name, layers_name, embed_name, norm_name = _BACKBONES[family]
    backbone = getattr(model, bb_name)
    layer_list = getattr(backbone, layers_name)
    attn_p, mlp_p, aw_p, mw_p = _PARTS[family]
    parallel = _parallel(family, model.config)
    inplace = family == "falcon" and parallel  # FalconDecoderLayer: mlp_output += attention_output
    blocks = [BlockView(i, b, _get(b, attn_p), _get(b, mlp_p), _get(b, aw_p), _get(b, mw_p), parallel, family,
                        inplace)
              for i, b in enumerate(layer_list)]
    softcap = getattr(model.config, "final_logit_softcapping", None) if family.startswith("gemma") else None
    return ModelView(model, family, getattr(backbone, embed_name), blocks, layer_list,
                     getattr(backbone, norm_name), model.get_output_embeddings(), softcap)


def n_params(model: nn.Module) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in {p.data_ptr(): p for p in model.parameters()}.values())


# --------------------------------------------------------------------------- running a suffix
class _PassThrough(nn.Module):
    def forward(self, hidden_states, *args, **kwargs):  # noqa: D401 - mimics a decoder layer
        return hidden_states


def block_input_hook(hidden: torch.Tensor):
    """A forward pre-hook (with_kwargs) that replaces a block's hidden-state input."""

    def hook(module, args, kwargs):
        if args:
            return (hidden, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": hidden}

    return hook


@contextlib.contextmanager
def skip_prefix(model: nn.Module, start: int, hidden: torch.Tensor) -> Iterator[None]:
    """Inside the context, blocks 0..start−1 are pass-throughs and block ``start`` receives ``hidden``.

    Layer positions are kept (per-layer attention types, e.g. Gemma's sliding windows, are looked
    up by index), and masks / rotary embeddings are built by the model as usual, so running the
    suffix this way is bit-identical to the corresponding part of a full forward.
    """
    v = view(model)
    start = v.check_layer(start)
    saved = [v.layer_list[i] for i in range(start)]
    handle = v.blocks[start].block.register_forward_pre_hook(block_input_hook(hidden), with_kwargs=True)
    try:
        for i in range(start):
            v.layer_list[i] = _PassThrough()
        yield
    finally:
        handle.remove()
        for i, b in enumerate(saved):
            v.layer_list[i] = b


def suffix_forward(model: nn.Module, hidden: torch.Tensor, start: int, **forward_kwargs) -> torch.Tensor:
    """Logits of blocks ``start``..L−1 + final norm + unembedding applied to the block-``start`` input.

    hidden: [B, T, d] (the clean input of block ``start``, e.g. from ``residual.capture``).
    Returns logits [B, T, V], bit-identical to the model's own forward on the same input.
    """
    B, T, _ = hidden.shape
    dummy = torch.zeros(B, T, dtype=torch.long, device=hidden.device)
    with skip_prefix(model, start, hidden):
        return model(input_ids=dummy, use_cache=False, **forward_kwargs).logits
