"""The parity identities on a CUDA device (skipped without one; scripts/gpu_check.sh runs them).

Float64 tiny models of every family on ``cuda``: the last lens layer is the logits, members sum
to the logits, the frozen-context Jacobian equals the reference, and the device agrees with the
CPU to float64 rounding (same identities as tests/test_residual.py, tests/test_jacobians.py,
tests/test_families.py)."""

import pytest
import torch

from layerlab.core import jacobians as jac
from layerlab.core import residual
from layerlab.core.models import TINY_FAMILIES, load_model, tiny_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (scripts/gpu_check.sh)")


@pytest.fixture(scope="module")
def device() -> str:
    return "cuda"


def _ids(device, seed=0, B=2, T=9):
    return torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(seed)).to(device)


@pytest.fixture(scope="module", params=list(TINY_FAMILIES))
def pair(request, device):
    cpu = tiny_model(request.param, seed=1)
    return cpu, tiny_model(request.param, seed=1).to(device)


def test_lens_and_members_on_device(pair, device):
    _, m = pair
    ids = _ids(device)
    logits, cap = residual.run_with_capture(m, ids, ("block_out",))
    assert logits.device.type == "cuda"
    torch.testing.assert_close(residual.lens_logits(m, cap["block_out"][-1]), logits, rtol=0, atol=1e-10)
    c = residual.contributions(m, ids)
    torch.testing.assert_close(c.logits(), logits, rtol=0, atol=1e-8)


def test_device_agrees_with_cpu(pair, device):
    cpu, m = pair
    ids = _ids("cpu", 1)
    torch.testing.assert_close(m(ids.to(device)).logits.cpu(), cpu(ids).logits, rtol=0, atol=1e-9)


def test_jacobian_on_device(pair, device):
    _, m = pair
    ids = _ids(device, 2)[:1]
    R = jac.reference_jacobians(m, ids, vectorize=True)
    A = jac.frozen_context_jacobians(m, ids)
    assert A.device.type == "cuda" and ((A - R).norm() / R.norm()).item() <= 1e-10


def test_load_model_on_device(device):
    m, _ = load_model("tiny-llama", device=device, dtype="bfloat16")
    p = next(m.parameters())
    assert p.device.type == "cuda" and p.dtype == torch.bfloat16
    assert torch.isfinite(m(_ids(device)).logits.float()).all()
