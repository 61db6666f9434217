"""Parity tests: our reading of the residual stream reproduces the model (float64, every family)."""

import pytest
import torch

from layerlab.core import arch, residual
from layerlab.core.models import TINY_FAMILIES, tiny_model

FAMILIES = list(TINY_FAMILIES)


def _ids(seed=0, B=2, T=9, V=259):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V - 3, (B, T), generator=g)


@pytest.fixture(scope="module", params=FAMILIES)
def model(request):
    return tiny_model(request.param, seed=1)


def test_last_lens_layer_is_model_logits(model):
    ids = _ids()
    logits, cap = residual.run_with_capture(model, ids, ("block_out",))
    lens = residual.lens_logits(model, cap["block_out"][-1])
    torch.testing.assert_close(lens, logits, rtol=0, atol=1e-12)


def test_members_sum_to_residual_and_logits(model):
    ids = _ids(1)
    logits = model(ids).logits
    for level in ("module", "layer"):
        c = residual.contributions(model, ids, level=level)
        L = arch.view(model).n_layers
        assert c.M == (2 * L + 1 if level == "module" else L + 1) == len(c.names)
        torch.testing.assert_close(c.members.sum(-2), c.resid, rtol=0, atol=1e-10)
        torch.testing.assert_close(c.logits(), logits, rtol=0, atol=1e-8)
        tok = torch.tensor([3, 17, 40])
        torch.testing.assert_close(c.logits(tok), logits[..., tok], rtol=0, atol=1e-8)


def test_frozen_lens_equals_recompute_at_full_residual(model):
    ids = _ids(2)
    _, cap = residual.run_with_capture(model, ids, ("block_out",))
    h = cap["block_out"][-1]
    a = residual.lens_logits(model, h, mode="frozen", ref=h)
    b = residual.lens_logits(model, h, mode="recompute")
    torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def test_positions_subset(model):
    ids = _ids(3)
    full = residual.contributions(model, ids)
    sub = residual.contributions(model, ids, positions=[0, 4, -1])
    torch.testing.assert_close(sub.members, full.members[:, [0, 4, -1]], rtol=0, atol=0)


def test_block_in_out_chain(model):
    _, cap = residual.run_with_capture(model, _ids(4), ("embed", "block_in", "block_out"))
    torch.testing.assert_close(cap["block_in"][0], cap["embed"], rtol=0, atol=0)
    torch.testing.assert_close(cap["block_in"][1:], cap["block_out"][:-1], rtol=0, atol=0)


def test_hooks_removed_after_context(model):
    v = arch.view(model)
    before = [len(b.block._forward_hooks) + len(b.block._forward_pre_hooks) for b in v.blocks]
    with pytest.raises(RuntimeError):
        with residual.capture(model):
            raise RuntimeError("boom")
    after = [len(b.block._forward_hooks) + len(b.block._forward_pre_hooks) for b in v.blocks]
    assert before == after


def test_suffix_forward_bit_identical(model):
    ids = _ids(5)
    logits, cap = residual.run_with_capture(model, ids, ("block_in",))
    for start in range(arch.view(model).n_layers):
        out = arch.suffix_forward(model, cap["block_in"][start], start)
        assert torch.equal(out, logits)


def test_skip_block_is_identity_for_llama():
    m = tiny_model("llama", seed=3)
    v = arch.view(m)
    ids = _ids(6)
    with torch.no_grad():
        for w in v.blocks[2].residual_writers().values():
            w.weight.zero_()
    _, cap = residual.run_with_capture(m, ids, ("block_in", "block_out"))
    assert torch.equal(cap["block_in"][2], cap["block_out"][2])


def test_clear_errors():
    m = tiny_model("llama")
    with pytest.raises(ValueError, match="out of range.*0..3"):
        arch.view(m).check_layer(4)
    with pytest.raises(ValueError, match="unknown capture point"):
        with residual.capture(m, ["resid_mid"]):
            pass
    with pytest.raises(ValueError, match="position out of range"):
        residual.contributions(m, _ids(), positions=[99])
    with pytest.raises(ValueError, match="lens mode"):
        residual.lens_logits(m, torch.zeros(64, dtype=torch.float64), mode="tuned")
