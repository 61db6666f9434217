"""Test-session settings: tiny models run fastest single-threaded (and stay fast when the
machine is shared); notebooks executed by the tests run in their own kernels."""

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
torch.set_num_threads(1)


def patch_fp64_softmax(mp: pytest.MonkeyPatch) -> None:
    """HF eager attention computes softmax in float32 even for float64 models; keep it in the input
    dtype so float64 identities (finite differences, members summing to the logits) are exact."""
    orig = torch.nn.functional.softmax

    def softmax(x, dim=None, _stacklevel=3, dtype=None):
        return orig(x, dim=dim, dtype=None if x.dtype == torch.float64 else dtype)

    mp.setattr(torch.nn.functional, "softmax", softmax)


@pytest.fixture
def fp64_softmax(monkeypatch):
    """Function-scoped :func:`patch_fp64_softmax`."""
    patch_fp64_softmax(monkeypatch)


@pytest.fixture(scope="module")
def fp64_softmax_module():
    """Module-scoped :func:`patch_fp64_softmax` (for module-scoped fixtures)."""
    mp = pytest.MonkeyPatch()
    patch_fp64_softmax(mp)
    yield
    mp.undo()
