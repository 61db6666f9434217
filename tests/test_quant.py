"""Q4_1 / Q8_0 round trips: bit-exact with the gguf reference implementation; model round trip."""

import numpy as np
import pytest
import torch

from layerlab.core.models import tiny_model
from layerlab.metrics import quant


@pytest.mark.parametrize("qtype,fn", [("Q4_1", quant.q4_1_roundtrip), ("Q8_0", quant.q8_0_roundtrip)])
def test_roundtrip_matches_gguf_reference(qtype, fn):
    gguf = pytest.importorskip("gguf")
    t = getattr(gguf.GGMLQuantizationType, qtype)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(8, 96, generator=g) * torch.logspace(-3, 1, 8)[:, None]
    w[0, :32] = 0.25  # a constant block (d = 0)
    ref = gguf.quants.dequantize(gguf.quants.quantize(w.numpy(), t), t)
    assert np.array_equal(fn(w).numpy(), ref)


def test_q4_1_levels_and_partial_block():
    w = torch.randn(3, 48, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    r = quant.q4_1_roundtrip(w)
    assert r.dtype == torch.float64 and r.shape == w.shape
    for b in (r[:, :32], r[:, 32:]):  # the 16-wide tail block follows the same rule
        assert all(len(torch.unique(row)) <= 16 for row in b)
    assert (r - w).abs().max() < (w.abs().max() / 15 + 1e-3)
    assert torch.equal(quant.q4_1_roundtrip(r.float()), r.float())  # levels are fixed points


def test_gguf_roundtrip_touches_only_the_quantised_tensors():
    m = tiny_model("llama", dtype=torch.float32)
    q = quant.gguf_roundtrip(m)
    for (name, p), (_, p2) in zip(m.named_parameters(), q.named_parameters()):
        quantised = name.endswith("proj.weight") or "embed" in name or "lm_head" in name
        assert torch.equal(p, p2) != quantised, name
    assert 0 < quant.relative_error(m, q) < 0.2
    with pytest.raises(ValueError, match="Llama-style"):
        quant.gguf_roundtrip(torch.nn.Sequential(torch.nn.Linear(4, 4)))
