import math
import os

import numpy as np
import pytest
import torch

from layerlab.core.models import byte_tokenizer, load_model, tiny_model
from layerlab.data import corpora as data
from layerlab.metrics import perplexity


@pytest.fixture(scope="module")
def windows():
    return data.token_windows(byte_tokenizer(), "test", window=32, max_tokens=31 * 12, seed=0)


def test_token_nll_is_the_next_token_log_softmax():
    model = tiny_model("llama", seed=0)  # float64
    ids = torch.randint(0, 259, (3, 9), generator=torch.Generator().manual_seed(0))
    nll = perplexity.token_nll(model, ids, batch_size=2)
    logp = torch.log_softmax(model(ids).logits, -1)  # [3, 9, V]
    manual = -logp[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
    assert nll.shape == (3, 8) and nll.dtype == torch.float64
    torch.testing.assert_close(nll, manual.detach(), rtol=0, atol=1e-12)
    torch.testing.assert_close(perplexity.token_nll(model, ids, batch_size=1), nll, rtol=0, atol=1e-12)


def test_uniform_model_has_perplexity_equal_to_vocab_size(windows):
    model = tiny_model("llama", seed=0)
    with torch.no_grad():
        model.get_output_embeddings().weight.zero_()  # logits all 0: p = 1/V for every token
    res = perplexity.evaluate(model, windows, n_boot=200)
    assert res.nll.estimate == pytest.approx(math.log(259), abs=1e-12)
    assert res.ppl.estimate == pytest.approx(259, rel=1e-12)
    assert res.ppl.low == pytest.approx(259, rel=1e-12) and res.ppl.high == pytest.approx(259, rel=1e-12)
    # bits/byte = nats / (ln 2 * bytes); the byte tokenizer scores one byte per token on ASCII text
    expected = res.window_nll.sum() / (math.log(2) * windows.total_bytes)
    assert res.bits_per_byte.estimate == pytest.approx(expected, rel=1e-12)


def test_evaluate_definitions_and_cache(windows, tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path))
    model = tiny_model("llama", seed=1)
    res = perplexity.evaluate(model, windows, n_boot=300, seed=0, cache_key={"model": "tiny-llama", "seed": 1})
    nll = perplexity.token_nll(model, windows.input_ids)
    assert res.nll.estimate == pytest.approx(float(nll.mean()), rel=1e-12)
    assert res.ppl.estimate == pytest.approx(math.exp(float(nll.mean())), rel=1e-12)
    assert res.nll.low <= res.nll.estimate <= res.nll.high
    assert res.n_tokens == nll.numel() and res.n_windows == len(windows)
    assert list(tmp_path.glob("perplexity/*.safetensors"))
    again = perplexity.evaluate(model, windows, n_boot=300, seed=0, cache_key={"model": "tiny-llama", "seed": 1})
    assert again.ppl == res.ppl
    grouped = perplexity.evaluate(model, windows, n_boot=300, group_by_doc=True)
    assert grouped.nll.estimate == pytest.approx(res.nll.estimate)
    back = perplexity.PerplexityResult.from_dict(res.to_dict())
    assert back.ppl == res.ppl and np.array_equal(back.window_nll, res.window_nll)


def test_clear_errors(windows):
    model = tiny_model("llama", seed=0, vocab_size=100, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    with pytest.raises(ValueError, match="tokenizer"):
        perplexity.token_nll(model, windows.input_ids)
    with pytest.raises(ValueError, match="T >= 2"):
        perplexity.token_nll(model, torch.zeros(2, 1, dtype=torch.long))


@pytest.mark.slow
def test_smollm2_britannica_sanity():
    """Environment fact: SmolLM2-135M-Instruct (fp32 from the Q4_1 GGUF) gives PPL ~ 34 on the
    Britannica article. Two 1024-token windows; generous band for the short sample."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model, tok = load_model("smollm2-135m")
    w = data.token_windows(tok, "test", window=1024, max_tokens=2046, sources=("britannica",))
    res = perplexity.evaluate(model, w, batch_size=2, n_boot=200)
    assert 15 < res.ppl.estimate < 70
    assert 0.5 < res.bits_per_byte.estimate < 2.5
