"""Model loading: names, errors, caching, the offline SmolLM2 conversion."""

import time

import pytest
import torch

from layerlab.core import arch, models, residual


def test_unknown_name_lists_known_names():
    with pytest.raises(ValueError, match="smollm2-135m"):
        models.load_model("smollm3")
    with pytest.raises(ValueError, match="tiny-llama"):
        models.load_model("tiny-bert")


def test_unreachable_hub_id_is_clear(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(models.ModelLoadError, match="HF_HUB_OFFLINE"):
        models.load_model("nobody-here/not-a-model-xyz")


def test_random_init_is_seeded():
    a, _ = models.load_model("tiny-llama", seed=3)
    b, _ = models.load_model("tiny-llama", seed=3)
    c, _ = models.load_model("tiny-llama", seed=4)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_byte_tokenizer_roundtrip():
    tok = models.byte_tokenizer()
    text = "Ünïcode & bytes — ok"
    ids = tok(text).input_ids
    assert max(ids) < 256 and len(ids) == len(text.encode())
    assert tok.decode(ids) == text
    assert len(tok) == 259 and tok.bos_token_id == 256


def test_corrupt_gguf_is_clear_and_leaves_nothing(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"NOPE" + b"\0" * 100)
    out = tmp_path / "out"
    with pytest.raises(models.ModelLoadError, match="corrupt or truncated.*pip install"):
        models.convert_gguf(bad, out)
    assert not out.exists() and list(tmp_path.iterdir()) == [bad]


@pytest.mark.slow
def test_truncated_real_gguf_is_clear(tmp_path):
    src = models.smollm2_gguf_path()
    cut = tmp_path / src.name
    with open(src, "rb") as f:
        cut.write_bytes(f.read(src.stat().st_size // 2))
    with pytest.raises(models.ModelLoadError, match="corrupt or truncated"):
        models.convert_gguf(cut, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_smollm2_offline_conversion():
    models.load_model("smollm2-135m")  # converts once if needed
    t = time.perf_counter()
    model, tok = models.load_model("smollm2-135m")
    assert time.perf_counter() - t < 30  # generous: the bench reports the real number
    v = arch.view(model)
    assert (v.n_layers, v.d_model, v.vocab_size) == (30, 576, 49152)
    assert arch.n_params(model) == 134_515_008  # public config; tied embedding counted once
    assert model.config._attn_implementation == "eager"
    assert getattr(model.config, "quantization_config", None) is None
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    logits, cap = residual.run_with_capture(model, ids, ("block_out",))
    torch.testing.assert_close(residual.lens_logits(model, cap["block_out"][-1]), logits, rtol=0, atol=1e-5)
    c = residual.contributions(model, ids, positions=[-1])
    torch.testing.assert_close(c.logits(), logits[:, -1:], rtol=1e-4, atol=1e-3)
    assert tok.decode(logits[0, -1].argmax()).strip() == "Paris"


@pytest.mark.slow
def test_smollm2_random_init_twin():
    trained, _ = models.load_model("smollm2-135m")
    a, _ = models.load_model("smollm2-135m", random_init=True, seed=0)
    b, _ = models.load_model("smollm2-135m", random_init=True, seed=0)
    assert arch.n_params(a) == arch.n_params(trained)
    assert a.config._attn_implementation == "eager"
    wa = arch.view(a).blocks[3].weights()["q"]
    assert torch.equal(wa, arch.view(b).blocks[3].weights()["q"])
    assert not torch.equal(wa, arch.view(trained).blocks[3].weights()["q"])
    assert abs(wa.std().item() - a.config.initializer_range) < 2e-3


def test_revision_only_for_hub_models():
    with pytest.raises(ValueError, match="hub models only"):
        models.load_model("smollm2-135m", revision="step4000")


@pytest.mark.parametrize("family", models.TINY_FAMILIES)
def test_float64_models_are_float64_end_to_end(family):
    """exact_norms swaps the float32-softmax eager attention for the same formula in float64: it
    agrees with the library's own eager attention to fp32 rounding, and the attention weights of a
    float64 model are no longer quantised to float32 (a row's softmax sums to 1 to 1e-15)."""
    m = models.tiny_model(family)  # float64
    ids = torch.randint(0, 200, (2, 9), generator=torch.Generator().manual_seed(0))
    out = m(ids, output_attentions=True)
    assert out.logits.dtype == torch.float64
    att = out.attentions[0]  # [b, h, t, t]
    assert (att.sum(-1) - 1).abs().max() < 1e-14
    f32 = att.float().double()
    exact_attention = m.config._attn_implementation == models.EXACT_ATTENTION
    assert exact_attention == (family != "gpt2")  # GPT-2's own eager softmax keeps the dtype
    assert (att - f32).abs().max() > 0  # genuinely float64 values, not float32 ones cast up
    m.set_attn_implementation("eager")
    ref = m(ids).logits
    assert (out.logits - ref).abs().max() < 1e-6
    assert models.tiny_model(family, dtype=torch.float32).config._attn_implementation == "eager"


@pytest.mark.parametrize("family", models.TINY_FAMILIES)
def test_a_tiny_model_of_any_depth_builds_and_runs(family):
    """A depth override reaches the config's constructor: what Gemma 2/3 and Qwen2 derive from the depth
    (one attention type per layer) is derived for the new depth, and the model runs."""
    m = models.tiny_model(family, num_hidden_layers=7)
    assert arch.view(m).n_layers == 7
    types = getattr(m.config, "layer_types", None)
    assert types is None or len(types) == 7
    assert m(torch.randint(0, 200, (1, 5))).logits.shape == (1, 5, m.config.vocab_size)


def test_model_label_names_the_offline_model_as_it_is():
    from layerlab.core.models import model_label

    assert model_label("smollm2-135m") == "SmolLM2-135M-Instruct-Q4_1"  # the instruct model, Q4_1-quantised
    assert model_label("tiny-llama").startswith("tiny-llama") and "random" in model_label("tiny-llama")
    assert model_label("HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB/SmolLM2-135M"
