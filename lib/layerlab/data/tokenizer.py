"""A small byte-level BPE tokenizer for the project's own models, trained on the ``train`` split only.

Small models waste capacity on a 49k-token vocabulary (SmolLM2's unembedding alone would be most of
their parameters) and a 259-token byte vocabulary makes sequences long; a byte-level BPE with a
few thousand merges learned from the training documents (never validation or test, so held-out
losses are not flattered) is the usual middle ground [reconstructed]. Trained with the Hugging Face
``tokenizers`` library (deterministic for a given corpus and settings), cached (its ``tokenizer.json``)
under ``cache_dir()/tokenizer/`` and returned as a ``PreTrainedTokenizerFast`` so that
``layerlab.data.corpora.token_windows`` and every analysis module accept it. It adds no BOS token (windows
are plain text ids, as for the byte tokenizer); ``<|endoftext|>`` is the EOS/pad token.
"""

from __future__ import annotations

from functools import lru_cache

from layerlab.core.cache import cached_json

SPECIAL = "<|endoftext|>"


def train_bpe(texts: list[str], vocab_size: int):
    """Train a byte-level BPE on ``texts`` and wrap it as a ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 256 + 1:
        raise ValueError(f"vocab_size must be >= 257 (256 bytes + {SPECIAL}), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[SPECIAL], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return _wrap(tok)


def _wrap(tok):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=SPECIAL, pad_token=SPECIAL)


@lru_cache(maxsize=8)
def project_tokenizer(vocab_size: int = 2048, max_chars: int | None = None):
    """The project BPE tokenizer with ``vocab_size`` entries, trained on the ``train`` split
    (optionally on its first ``max_chars`` characters, for the smoke profile); cached on disk."""
    from tokenizers import Tokenizer

    from layerlab.data.corpora import corpus

    docs = corpus("train")
    texts = [d.text for d in docs]
    if max_chars is not None:
        kept, n = [], 0
        for t in texts:
            kept.append(t[: max(0, max_chars - n)])
            n += len(kept[-1])
            if n >= max_chars:
                break
        texts = kept
    key = {"vocab": vocab_size, "docs": [d.id for d in docs], "chars": sum(len(t) for t in texts),
           "max_chars": max_chars}
    spec = cached_json("tokenizer", key, lambda: train_bpe(texts, vocab_size).backend_tokenizer.to_str())
    return _wrap(Tokenizer.from_str(spec))
