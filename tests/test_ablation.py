"""Ablation operators, the prefix-cached engine and effect sizes (anatomy spec 3.2, 3.6, 3.9, 6, 7.1–7.3)."""

import math

import numpy as np
import pytest
import torch

from layerlab.core import arch
from layerlab.core.models import TINY_FAMILIES, tiny_model
from layerlab.core.residual import capture
from layerlab.metrics import ablation as A


def _ids(n=6, t=24, seed=0):
    return torch.randint(0, 259, (n, t), generator=torch.Generator().manual_seed(seed))


def _params(model):
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def _changed(model, before):
    return sorted(k for k, v in model.named_parameters() if not torch.equal(v, before[k]))


class _PassThrough(torch.nn.Module):
    def forward(self, hidden_states, *args, **kwargs):
        return hidden_states


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2", "neox"])
def test_skip_equals_identity_block_and_removal(family):
    m = tiny_model(family)
    mv = arch.view(m)
    ids = _ids()
    for layer in range(mv.n_layers):
        with A.ablate(m, layer, "skip"), capture(m, points=("block_in", "block_out"), layers=[layer]) as cap:
            skipped = m(ids).logits
        assert torch.equal(cap["block_in"], cap["block_out"])  # the block is exactly the identity
        block = mv.layer_list[layer]
        mv.layer_list[layer] = _PassThrough()
        try:
            removed = m(ids).logits
        finally:
            mv.layer_list[layer] = block
        assert torch.equal(skipped, removed)


def test_skip_is_zeroing_o_and_down_and_restores_exactly():
    m = tiny_model("llama")
    before = _params(m)
    with A.ablate(m, 2, "skip"):
        assert _changed(m, before) == ["model.layers.2.mlp.down_proj.weight", "model.layers.2.self_attn.o_proj.weight"]
        assert not m.model.layers[2].self_attn.o_proj.weight.detach().any()
        assert not m.model.layers[2].mlp.down_proj.weight.detach().any()
    assert _changed(m, before) == []
    with A.ablate(m, 1, "skip_attn"):
        assert _changed(m, before) == ["model.layers.1.self_attn.o_proj.weight"]
    with A.ablate(m, 1, "skip_mlp"):
        assert _changed(m, before) == ["model.layers.1.mlp.down_proj.weight"]
    assert _changed(m, before) == []


def test_neighbour_average_changes_exactly_the_intended_tensors():
    m = tiny_model("llama")
    mv = arch.view(m)
    before = _params(m)
    for layer in range(mv.n_layers):
        with A.ablate(m, layer, "neighbour_avg"):
            changed = _changed(m, before)
            assert changed and all(k.startswith(f"model.layers.{layer}.") and "norm" not in k for k in changed)
            assert len(changed) == 7
            nb = [j for j in (layer - 1, layer + 1) if 0 <= j < mv.n_layers]
            for comp, p in mv.blocks[layer].weights().items():
                if "norm" in comp:
                    continue
                want = sum(before[f"model.layers.{j}.{_path(comp)}.weight"] for j in nb) / len(nb)
                if len(nb) == 2:
                    want = 0.5 * (before[f"model.layers.{nb[0]}.{_path(comp)}.weight"]
                                  + before[f"model.layers.{nb[1]}.{_path(comp)}.weight"])
                assert torch.equal(p, want)
        assert _changed(m, before) == []


def _path(comp):
    return {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
            "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}[comp]


def test_neighbour_average_is_noop_on_weights_linear_in_depth():
    m = tiny_model("llama")
    mv = arch.view(m)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for comp in ("q", "gate", "down"):
            shape = mv.blocks[0].weights()[comp].shape
            a = torch.randn(shape, generator=g, dtype=torch.float64)
            b = torch.randn(shape, generator=g, dtype=torch.float64)
            for layer, blk in enumerate(mv.blocks):
                blk.weights()[comp].copy_(a + layer * b)
    for comp in ("q", "gate", "down"):
        new = A.neighbour_average(m, 2)[comp]
        assert torch.allclose(new, mv.blocks[2].weights()[comp], atol=1e-12, rtol=0)


@pytest.mark.parametrize("family", ["llama", "gpt2", "neox"])
def test_prefix_cached_sweep_equals_naive_bit_for_bit(family):
    m = tiny_model(family)
    ids = _ids(n=5)
    mc = A.mean_contributions(m, _ids(n=4, seed=1))
    ivs = A.sweep_interventions(m, A.OPERATORS, mean_contrib=mc)
    cached = A.evaluate_interventions(m, ids, ivs, batch_size=2, prefix_cache=True)
    naive = A.evaluate_interventions(m, ids, ivs, batch_size=2, prefix_cache=False)
    assert cached.nll.keys() == naive.nll.keys()
    for k in cached.nll:
        assert np.array_equal(cached.nll[k], naive.nll[k]), k
    assert np.array_equal(cached.base, naive.base)


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_sentences_batched_with_padding_equal_one_sentence_at_a_time(family):
    """The token-level protocol right-pads sentences of different lengths into shared batches; every real
    token's NLL, the sentence groups and the geometry equal running each sentence alone (float64)."""
    m = tiny_model(family, dtype=torch.float64)
    g = torch.Generator().manual_seed(3)
    sents = [torch.randint(0, 259, (n,), generator=g) for n in (9, 3, 17, 2, 12)]
    ivs = A.sweep_interventions(m, A.OPERATORS, mean_contrib=A.mean_contributions(m, _ids(n=4, seed=1)))
    for prefix_cache in (True, False):
        got = A.evaluate_interventions(m, sents, ivs, batch_size=2, prefix_cache=prefix_cache, geometry=True)
        alone = [A.evaluate_interventions(m, s[None], ivs, batch_size=1, prefix_cache=prefix_cache, geometry=True,
                                          _token_level=True) for s in sents]
        assert got.n_tokens == sum(len(s) - 1 for s in sents) == len(got.base)
        assert np.array_equal(got.groups, np.concatenate([np.full(len(s) - 1, i) for i, s in enumerate(sents)]))
        np.testing.assert_allclose(got.base, np.concatenate([r.base for r in alone]), rtol=0, atol=1e-12)
        for iv in ivs:
            np.testing.assert_allclose(got.nll[iv.name], np.concatenate([r.nll[iv.name] for r in alone]),
                                       rtol=0, atol=1e-12, err_msg=iv.name)
        w = np.array([len(s) for s in sents], dtype=np.float64)
        np.testing.assert_allclose(got.block_influence, np.average([r.block_influence for r in alone], axis=0,
                                                                   weights=w), rtol=0, atol=1e-12)
        np.testing.assert_allclose(got.angular_distance, np.mean([r.angular_distance for r in alone], axis=0),
                                   rtol=0, atol=1e-12)


def test_mean_ablation_writes_the_mean_contribution():
    m = tiny_model("llama")
    ids = _ids(n=4)
    mc = A.mean_contributions(m, ids)
    with capture(m, points=("block_in", "block_out")) as cap:
        m(ids)
    want = (cap["block_out"] - cap["block_in"]).mean(dim=(1, 2))
    assert torch.allclose(mc, want, atol=1e-12, rtol=0)
    with A.ablate(m, 1, "mean", mean_contrib=mc[1]), capture(m, points=("block_in", "block_out"), layers=[1]) as c2:
        m(ids)
    assert torch.equal(c2["block_out"][0], c2["block_in"][0] + mc[1])


def test_geometry_matches_definitions():
    m = tiny_model("llama")
    ids = _ids(n=4)
    res = A.evaluate_interventions(m, ids, [], geometry=True, batch_size=3)
    with capture(m, points=("block_in", "block_out")) as cap:
        m(ids)
    cos = torch.nn.functional.cosine_similarity(cap["block_in"], cap["block_out"], dim=-1)  # [L, B, T]
    assert np.allclose(res.block_influence, (1 - cos).mean(dim=(1, 2)).numpy(), atol=1e-12)
    ang = torch.arccos(cos[:, :, -1]).mean(dim=1) / math.pi
    assert np.allclose(res.angular_distance, ang.numpy(), atol=1e-12)


def test_effects_identity_and_tiers():
    rng = np.random.default_rng(0)
    base = rng.normal(3.0, 0.1, size=40)
    e = A.effect(base, base + 0.7, n_boot=200)
    assert e["dnll"] == pytest.approx(0.7, abs=1e-12)
    assert e["dppl_pct"] == pytest.approx(100 * math.expm1(0.7), rel=1e-12)  # ΔPPL% = 100 (exp ΔNLL − 1)
    assert e["dnll_low"] == pytest.approx(0.7, abs=1e-9) and e["dnll_high"] == pytest.approx(0.7, abs=1e-9)
    t = A.Tiers()
    assert t.classify(1.0, 0.9, 1.1) == "critical"
    assert t.classify(-0.01, -0.02, -0.005) == "anti"
    assert t.classify(0.001, -0.01, 0.02) == "redundant"
    assert t.classify(0.05, 0.04, 0.06) == "intermediate"
    assert A.paper_layers(A.PAPER_CORE, 1) == [7, 8, 9, 10]
    assert A.paper_layers(A.PAPER_ANTI, 0) == [14, 17]


def test_effect_table_and_rank_agreement():
    m = tiny_model("llama")
    ids = _ids(n=6)
    res = A.evaluate_interventions(m, ids, A.sweep_interventions(m, ["skip", "neighbour_avg"]), geometry=True)
    tab = A.effect_table(res, n_boot=100)
    assert len(tab) == 8 and set(tab.tier) <= {"critical", "anti", "redundant", "intermediate"}
    agree = A.rank_agreement(tab, res)
    assert {"skip", "neighbour_avg", "block_influence"} <= set(agree.a) | set(agree.b)
    assert agree.rho.between(-1, 1).all()


def test_bad_inputs_give_clear_errors():
    m = tiny_model("llama")
    with pytest.raises(ValueError, match="out of range"):
        A.ablate(m, 4, "skip")
    with pytest.raises(ValueError, match="unknown operator"):
        A.ablate(m, 0, "drop")
    with pytest.raises(ValueError, match="mean_contrib"):
        A.ablate(m, 0, "mean")
    with pytest.raises(ValueError, match="unknown operator"):
        A.sweep_interventions(m, ["nope"])
    with pytest.raises(ValueError, match="unknown component"):
        with A.swap_weights(m, {0: {"qq": torch.zeros(1)}}):
            pass
    with pytest.raises(ValueError, match="base must be 0 or 1"):
        A.paper_layers([1], 2)


@pytest.mark.parametrize("family", ["gpt2", "olmo"])
def test_every_full_forward_runs_without_a_kv_cache(family):
    """The engine's clean and naive passes, its mean contributions and the perplexity pass call the model with
    ``use_cache=False``, as ``run_with_capture`` does. With a cache, GPT-2 and OLMo take another attention path
    whose floats differ by an ulp on some CPUs (an AVX2 AMD EPYC, 2026-12-06), which broke the atlas's
    "shared pass == separate passes, bit for bit" there; this pins the one code path on every CPU."""
    from layerlab.metrics.perplexity import token_nll

    m = tiny_model(family, num_hidden_layers=2)
    seen: list[object] = []
    forward = m.forward

    def spy(*args, **kwargs):
        seen.append(kwargs.get("use_cache", "default"))
        return forward(*args, **kwargs)

    m.forward = spy
    ids = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(0))
    ivs = A.sweep_interventions(m, ["skip"], [0, 1])
    for prefix_cache in (True, False):
        A.evaluate_interventions(m, ids, ivs, batch_size=2, prefix_cache=prefix_cache, geometry=True)
    A.mean_contributions(m, ids, batch_size=2)
    token_nll(m, ids, batch_size=2)
    assert len(seen) >= 6 and all(v is False for v in seen), seen
