"""Weight manipulations (anatomy spec 3.8, 7.2, 7.6, 7.9)."""

import numpy as np
import pytest
import torch

from layerlab.core.models import tiny_model
from layerlab.core.residual import capture
from layerlab.metrics import ablation as A
from layerlab.metrics import manipulation as M
from layerlab.metrics import weights as W


def _ids(n=3, t=16, seed=0):
    return torch.randint(0, 259, (n, t), generator=torch.Generator().manual_seed(seed))


def _params(m):
    return {k: v.detach().clone() for k, v in m.named_parameters()}


def _changed(m, before):
    return sorted(k for k, v in m.named_parameters() if not torch.equal(v, before[k]))


def test_clone_changes_exactly_the_intended_tensors_and_zeroes_the_delta():
    m = tiny_model("llama")
    before = _params(m)
    with M.manipulate(m, [2], "clone"):
        ch = _changed(m, before)
        assert len(ch) == 7 and all(k.startswith("model.layers.2.") for k in ch)
        for c in W.COMPONENTS:
            st = W.component_stack(m, c)
            assert torch.equal(st[2], st[1])  # Δ_1 = 0 for the cloned pair
    with M.manipulate(m, [0], "clone", components="writers"):
        assert _changed(m, before) == ["model.layers.0.mlp.down_proj.weight", "model.layers.0.self_attn.o_proj.weight"]
        assert torch.equal(m.model.layers[0].mlp.down_proj.weight, before["model.layers.1.mlp.down_proj.weight"])
    assert _changed(m, before) == []


def test_scale_one_is_noop_and_zero_writers_equals_skip():
    m = tiny_model("llama")
    ids = _ids()
    ref = m(ids).logits
    with M.manipulate(m, [0, 3], "scale", alpha=1.0):
        assert torch.equal(m(ids).logits, ref)
    with M.manipulate(m, [0, 3], "scale_block", alpha=1.0):
        assert torch.allclose(m(ids).logits, ref, atol=1e-12, rtol=0)
    with M.manipulate(m, [1], "zero", components="writers"):
        z = m(ids).logits
    with A.ablate(m, 1, "skip"):
        assert torch.equal(z, m(ids).logits)


def test_scaling_writers_scales_module_outputs_exactly_but_not_the_block():
    m = tiny_model("llama")
    ids = _ids()
    pts = ("block_in", "block_out", "attn_out", "mlp_out")
    with capture(m, points=pts, layers=[2]) as c0:
        m(ids)
    alpha = 0.7
    with M.manipulate(m, [2], "scale", alpha=alpha, components="writers"), capture(m, points=pts, layers=[2]) as c1:
        m(ids)
    assert torch.allclose(c1["attn_out"], alpha * c0["attn_out"], atol=1e-12, rtol=0)
    contrib0 = c0["block_out"] - c0["block_in"]
    contrib1 = c1["block_out"] - c1["block_in"]
    assert not torch.allclose(contrib1, alpha * contrib0, atol=1e-6)  # sequential block: MLP input changed
    with M.manipulate(m, [2], "scale_block", alpha=alpha), capture(m, points=pts, layers=[2]) as c2:
        m(ids)
    assert torch.allclose(c2["block_out"] - c2["block_in"], alpha * contrib0, atol=1e-12, rtol=0)


def test_blend_and_predicted_weights():
    m = tiny_model("llama")
    before = _params(m)
    with M.manipulate(m, [2], "blend", beta=1.0):
        nb = A.neighbour_average(m, 2)
        assert torch.equal(m.model.layers[2].mlp.up_proj.weight, nb["up"]) or torch.allclose(
            m.model.layers[2].mlp.up_proj.weight, 0.5 * (before["model.layers.1.mlp.up_proj.weight"]
                                                          + before["model.layers.3.mlp.up_proj.weight"]), atol=1e-15)
    with M.manipulate(m, [2], "blend", beta=0.0):
        assert _changed(m, before) == []
    with M.manipulate(m, [3], "predicted"):
        assert len(_changed(m, before)) == 7
    assert _changed(m, before) == []


def test_manipulation_interventions_cached_equals_naive():
    m = tiny_model("llama")
    ivs = M.manipulation_interventions(m, {"one": [2], "all": range(4)},
                                       {"scale": {"strategy": "scale", "alpha": 0.9},
                                        "zero_w": {"strategy": "zero", "components": "writers"},
                                        "clone": {"strategy": "clone"}, "pred": {"strategy": "predicted"},
                                        "block": {"strategy": "scale_block", "alpha": 0.9}})
    assert len(ivs) == 10
    ids = _ids(4)
    a = A.evaluate_interventions(m, ids, ivs, prefix_cache=True, batch_size=2)
    b = A.evaluate_interventions(m, ids, ivs, prefix_cache=False, batch_size=2)
    assert all(np.array_equal(a.nll[k], b.nll[k]) for k in a.nll)


def test_bad_inputs_give_clear_errors():
    m = tiny_model("llama")
    with pytest.raises(ValueError, match="alpha must be > 0"):
        M.manipulate(m, [1], "scale", alpha=0.0)
    with pytest.raises(ValueError, match="alpha must be > 0"):
        M.manipulate(m, [1], "scale_block", alpha=-1.0)
    with pytest.raises(ValueError, match="unknown strategy"):
        M.manipulate(m, [1], "melt")
    with pytest.raises(ValueError, match="unknown component set"):
        M.manipulate(m, [1], "zero", components="q")
    with pytest.raises(ValueError, match="out of range"):
        M.manipulate(m, [7], "zero")
    with pytest.raises(ValueError, match="beta"):
        M.manipulate(m, [1], "blend", beta=2)
    with pytest.raises(ValueError, match="predecessor"):
        M.manipulate(m, [0], "predicted")
