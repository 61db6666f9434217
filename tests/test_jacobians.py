"""Block Jacobians (coupling spec section 7, identities 5-8): frozen-context == reference, finite
differences, context Jacobians, causality, zero blocks, authors_compat, bad inputs."""

import pytest
import torch

from layerlab.core import jacobians as jac
from layerlab.core.arch import view
from layerlab.core.models import tiny_model

FAMILIES = ["llama", "qwen2", "gpt2", "neox", "gemma2", "gemma3"]


def _ids(n: int = 9, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 259, (1, n), generator=torch.Generator().manual_seed(seed))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())




@pytest.mark.parametrize("family", FAMILIES)
def test_frozen_context_equals_reference_fp64(family):
    model = tiny_model(family)
    ids = _ids()
    for token in (-1, 4, 0):
        R = jac.reference_jacobians(model, ids, token=token, vectorize=True)
        for layout, chunk in (("seq", None), ("batch", 24)):
            A = jac.frozen_context_jacobians(model, ids, token=token, layout=layout, chunk_size=chunk)
            assert A.shape == (view(model).n_layers, view(model).d_model, view(model).d_model)
            assert _rel(A, R) <= 1e-10, (layout, token)


def test_reference_loop_equals_vectorised():
    model, ids = tiny_model("llama"), _ids(6)
    a = jac.reference_jacobians(model, ids, layers=[1], vectorize=False)
    b = jac.reference_jacobians(model, ids, layers=[1], vectorize=True)
    assert _rel(a, b) <= 1e-12


def test_frozen_context_equals_reference_fp32():
    model, ids = tiny_model("llama", dtype=torch.float32), _ids()
    A = jac.frozen_context_jacobians(model, ids)
    R = jac.reference_jacobians(model, ids, vectorize=True)
    assert A.dtype == torch.float32 and _rel(A, R) <= 1e-5


@pytest.mark.parametrize("family", ["llama", "gpt2", "neox"])
def test_finite_differences(family):
    model, ids, t = tiny_model(family), _ids(7), 5
    g = torch.Generator().manual_seed(1)
    for layer in (0, view(model).n_layers - 1):
        J = jac.frozen_context_jacobians(model, ids, token=t, layers=[layer])[0]
        fn, X = jac.block_function(model, ids, layer)
        for _ in range(2):
            u = torch.randn(X.shape[-1], dtype=X.dtype, generator=g)
            h = 1e-5
            Xp, Xm = X.clone(), X.clone()
            Xp[0, t] += h * u
            Xm[0, t] -= h * u
            with torch.no_grad():
                fd = (fn(Xp)[0, t] - fn(Xm)[0, t]) / (2 * h) - u  # residual branch: skip removed
            assert _rel(fd, J @ u) <= 1e-6


@pytest.mark.parametrize("family", ["llama", "gpt2", "neox"])
def test_context_jacobians_forward_vs_reverse(family):
    model, ids, layer = tiny_model(family), _ids(8), 1
    B = jac.output_token_jacobians(model, ids, 6, layer)  # J_{t1, 6}, t1 = 0..6
    C = jac.input_token_jacobians(model, ids, 2, layer)  # J_{2, t2}, t2 = 2..7
    assert B.shape[0] == 7 and C.shape[0] == 6
    assert _rel(B[2], C[6 - 2]) <= 1e-10  # the shared entry J_{2,6}
    A = jac.frozen_context_jacobians(model, ids, token=6, layers=[layer])[0]
    assert _rel(B[6], A) <= 1e-10  # identity subtracted only on the diagonal
    A2 = jac.frozen_context_jacobians(model, ids, token=2, layers=[layer])[0]
    assert _rel(C[0], A2) <= 1e-10


def test_causality_exact_zero():
    model, ids = tiny_model("llama"), _ids(8)
    fn, X = jac.block_function(model, ids, 2)
    JF = jac.output_token_jacobians_fn(fn, X, 3)  # [n, d, d] over t1
    assert torch.count_nonzero(JF[4:]) == 0
    assert JF[:4].abs().amax() > 0


def test_zero_writers_give_zero_jacobian():
    model, ids, layer = tiny_model("llama"), _ids(6), 2
    w = view(model).blocks[layer].weights()
    with torch.no_grad():
        w["o"].zero_()
        w["down"].zero_()
    J = jac.frozen_context_jacobians(model, ids)
    assert torch.count_nonzero(J[layer]) == 0
    assert J[layer - 1].abs().amax() > 0


def test_authors_compat_changes_only_last_block():
    model, ids = tiny_model("llama"), _ids(6)
    clean = jac.frozen_context_jacobians(model, ids)
    compat = jac.frozen_context_jacobians(model, ids, authors_compat=True)
    compat_ref = jac.reference_jacobians(model, ids, authors_compat=True, vectorize=True)
    assert _rel(compat, compat_ref) <= 1e-10
    assert torch.equal(clean[:-1], compat[:-1])
    assert _rel(compat[-1], clean[-1]) > 1e-3
    # released behaviour also subtracts I from cross-token Jacobians
    B = jac.output_token_jacobians(model, ids, 4, 1)
    Bc = jac.output_token_jacobians(model, ids, 4, 1, authors_compat=True)
    eye = torch.eye(B.shape[-1], dtype=B.dtype)
    assert torch.allclose(Bc[:4], B[:4] - eye) and torch.allclose(Bc[4], B[4])


def test_trajectory_endpoints_from_hooks():
    model, ids = tiny_model("llama"), _ids(5)
    x = jac.block_trajectory(model, ids)  # [n, L+1, d]
    out = model(ids, output_hidden_states=True)
    hs = out.hidden_states
    assert x.shape == (5, view(model).n_layers + 1, view(model).d_model)
    for i in range(view(model).n_layers):
        assert torch.allclose(x[:, i], hs[i][0])
    assert not torch.allclose(x[:, -1], hs[-1][0])  # hidden_states[L] is after the final norm


def test_bad_inputs():
    model, ids = tiny_model("llama"), _ids(5)
    with pytest.raises(ValueError, match="out of range"):
        jac.frozen_context_jacobians(model, ids, token=5)
    with pytest.raises(ValueError, match="out of range"):
        jac.reference_jacobians(model, ids, token=-6)
    with pytest.raises(ValueError):
        jac.frozen_context_jacobians(model, ids, layers=[4])
    with pytest.raises(TypeError, match="LongTensor"):
        jac.frozen_context_jacobians(model, ids.float())
