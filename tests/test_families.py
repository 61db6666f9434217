"""Parity of the Fig. 1a families' adapters (Aubry et al. ICLR 2025, spec coupling.md section 2):
Mistral, Gemma 1, OLMo, Phi and Falcon, as tiny random float64 models built from each family's
``transformers`` config class. The same identities as tests/test_residual.py and
tests/test_jacobians.py: the last lens layer is the logits, members sum to the logits, skipping a
block (zeroed writers) is the identity, and the frozen-context Jacobian equals the reference."""

import pandas as pd
import pytest
import torch

from layerlab.core import arch, residual
from layerlab.core import jacobians as jac
from layerlab.core.hub import hub_models
from layerlab.core.models import ModelLoadError, load_model, tiny_model
from layerlab.metrics import ablation

# name -> (tiny family, config overrides)
VARIANTS = {
    "mistral": ("mistral", {}),
    "gemma": ("gemma", {}),
    "olmo": ("olmo", {}),
    "phi": ("phi", {}),
    "falcon-11b": ("falcon", {}),  # new decoder architecture, one parallel norm
    "falcon-7b": ("falcon", {"new_decoder_architecture": False, "multi_query": True, "parallel_attn": True}),
    "falcon-40b": ("falcon", {"num_ln_in_parallel_attn": 2}),  # two parallel norms
    "falcon-seq": ("falcon", {"new_decoder_architecture": False, "multi_query": False, "parallel_attn": False,
                              "bias": True, "num_kv_heads": 4}),
}


def _ids(seed=0, B=2, T=9):
    return torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module", params=list(VARIANTS))
def model(request):
    family, overrides = VARIANTS[request.param]
    return tiny_model(family, seed=1, **overrides)


def test_last_lens_layer_is_model_logits(model):
    logits, cap = residual.run_with_capture(model, _ids(), ("block_out",))
    torch.testing.assert_close(residual.lens_logits(model, cap["block_out"][-1]), logits, rtol=0, atol=1e-12)


def test_contributions_sum_to_logits(model):
    ids = _ids(1)
    logits = model(ids).logits
    for level in ("module", "layer"):
        c = residual.contributions(model, ids, level=level)
        torch.testing.assert_close(c.members.sum(-2), c.resid, rtol=0, atol=1e-10)
        torch.testing.assert_close(c.logits(), logits, rtol=0, atol=1e-8)


def test_writes_are_the_block_update(model):
    """attn_out + mlp_out = block_out − block_in for every block (Falcon's in-place parallel write
    would otherwise leak the attention into the captured MLP write)."""
    _, cap = residual.run_with_capture(model, _ids(2), ("block_in", "block_out", "attn_out", "mlp_out"))
    torch.testing.assert_close(cap["attn_out"] + cap["mlp_out"], cap["block_out"] - cap["block_in"],
                               rtol=0, atol=1e-12)


def test_skip_is_zeroed_writers(model):
    ids = _ids(3)
    for layer in (0, 2):
        with ablation.ablate(model, layer, "skip"):
            _, cap = residual.run_with_capture(model, ids, ("block_in", "block_out"))
        assert torch.equal(cap["block_in"][layer], cap["block_out"][layer])
    with ablation.ablate(model, 1, "skip_attn"):
        _, cap = residual.run_with_capture(model, ids, ("attn_out",))
    assert torch.count_nonzero(cap["attn_out"][1]) == 0


def test_frozen_context_jacobian_equals_reference(model):
    ids = _ids(4)[:1]
    for token in (-1, 3):
        R = jac.reference_jacobians(model, ids, token=token, vectorize=True)
        for layout, chunk in (("seq", None), ("batch", 24)):
            A = jac.frozen_context_jacobians(model, ids, token=token, layout=layout, chunk_size=chunk)
            assert ((A - R).norm() / R.norm()).item() <= 1e-10, (layout, token)


def test_falcon_mlp_write_is_the_mlp_alone():
    m = tiny_model("falcon", seed=2)
    v = arch.view(m)
    assert v.blocks[0].parallel and v.blocks[0].inplace_writes
    _, cap = residual.run_with_capture(m, _ids(5), ("block_in", "mlp_out"))
    b = v.blocks[1].block
    with torch.no_grad():
        direct = b.mlp(b.input_layernorm(cap["block_in"][1]))
    torch.testing.assert_close(cap["mlp_out"][1], direct, rtol=0, atol=1e-12)


def test_weights_and_norms_per_family():
    names = {k: list(arch.view(tiny_model(f, **o)).blocks[0].weights()) for k, (f, o) in VARIANTS.items()}
    assert names["olmo"] == ["q", "k", "v", "o", "gate", "up", "down"]  # weightless LayerNorms
    assert names["phi"] == ["q", "k", "v", "o", "up", "down", "input_norm"]
    assert "attn_norm" in names["falcon-40b"] and "post_attn_norm" in names["falcon-seq"]
    p = arch.view(tiny_model("olmo")).final_norm_params()
    assert p.kind == "layer" and p.bias is None and torch.equal(p.weight, torch.ones_like(p.weight))
    g = tiny_model("gemma")
    torch.testing.assert_close(arch.view(g).final_norm_params().weight, 1 + g.model.norm.weight)


def test_every_fig1a_model_type_has_an_adapter():
    from pathlib import Path

    import transformers as tf

    import layerlab

    fig1a = pd.read_csv(Path(layerlab.__file__).parent / "chapters" / "coupling" / "fig1a_leaderboard.csv")
    table = hub_models()
    missing = [h for h in fig1a["hub_id"] if h not in table]
    assert not missing, f"Fig. 1a ids missing from core/tables/hub_models.csv: {missing}"
    for hub_id in fig1a["hub_id"]:
        mt = table[hub_id].model_type
        cfg = tf.AutoConfig.for_model(mt)

        class Stub(torch.nn.Module):
            config = cfg

        assert arch.family_of(Stub()) in {"llama", "qwen2", "gemma", "olmo", "phi", "falcon", "gpt2", "neox"}


def test_load_model_device_and_dtype():
    m, _ = load_model("tiny-phi", device="cpu", dtype="float32")
    assert next(m.parameters()).dtype == torch.float32 and next(m.parameters()).device.type == "cpu"
    m64, _ = load_model("tiny-falcon", dtype=torch.float64)
    assert next(m64.parameters()).dtype == torch.float64
    with pytest.raises(ValueError, match="unknown dtype"):
        load_model("tiny-llama", dtype="float8")
    if not torch.cuda.is_available():
        with pytest.raises(ModelLoadError, match="no CUDA GPU"):
            load_model("tiny-llama", device="cuda")
