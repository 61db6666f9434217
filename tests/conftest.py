"""Test-session settings: tiny models run fastest single-threaded (and stay fast when the
machine is shared); notebooks executed by the tests run in their own kernels."""

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
torch.set_num_threads(1)


@pytest.fixture
def fp64_softmax(monkeypatch):
    """HF eager attention computes softmax in float32 even for float64 models; keep it in the input
    dtype so finite differences and forward-vs-reverse comparisons are float64-exact."""
    orig = torch.nn.functional.softmax

    def softmax(x, dim=None, _stacklevel=3, dtype=None):
        return orig(x, dim=dim, dtype=None if x.dtype == torch.float64 else dtype)

    monkeypatch.setattr(torch.nn.functional, "softmax", softmax)
