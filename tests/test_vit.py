"""Small ViT of the coupling chapter: shapes, exact bidirectional block Jacobians, training runs."""

import pytest
import torch

from layerlab.training import vit


def _model(cfg: vit.ViTConfig | None = None) -> vit.ViT:
    torch.manual_seed(0)
    return vit.ViT(cfg or vit.ViTConfig(d_model=16, n_layers=2, n_heads=2), image=8).eval()


def test_shapes():
    m = _model()
    x = torch.rand(3, 1, 8, 8)
    assert m.tokens(x).shape == (3, 1 + 16, 16)  # CLS + (8/2)^2 patches
    assert m(x).shape == (3, 10)


def test_jacobians_match_autograd_full_jacobian():
    m = _model()
    img = torch.rand(1, 8, 8)
    for token in (0, -1):
        J = vit.vit_jacobians(m, img, token)  # [L, d, d]
        md = m.double()
        x = md.tokens(img[None].double())
        t = token % x.shape[1]
        for block, Jl in zip(md.blocks, J):
            def f(row, x=x, block=block, t=t):
                X = x.clone()
                X[0, t] = row
                return block(X)[0, t] - row  # residual branch at token t, other tokens fixed

            ref = torch.autograd.functional.jacobian(f, x[0, t])
            assert torch.allclose(Jl, ref, atol=1e-10, rtol=0)
            with torch.no_grad():
                x = block(x)
        m.float()
    assert J.dtype == torch.float64


def test_train_and_coupling_curve(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path))
    cfg = vit.ViTConfig(d_model=16, n_layers=3, n_heads=2, steps=6, n_checkpoints=2, batch_size=16)
    run = vit.train_vit(cfg)
    steps = run["steps"].tolist()
    assert steps[0] == 0 and steps[-1] == 6 and len(run["test_acc"]) == len(steps)
    assert 0.0 <= float(run["test_acc"].min()) <= float(run["test_acc"].max()) <= 1.0
    m0 = vit.load_checkpoint(cfg, run, 0)
    m6 = vit.load_checkpoint(cfg, run, 6)
    assert not torch.equal(m0.head.weight, m6.head.weight)
    rows = vit.vit_coupling_curve(cfg, 2, (4,))
    assert [r["step"] for r in rows] == steps
    assert all(0 < r["last:C_l2@4"] < 1 for r in rows)


def test_checkpoint_steps_and_bad_dataset():
    assert vit.checkpoint_steps(100, 3) == [0, 1, 10, 100]
    with pytest.raises(ValueError, match="unknown dataset"):
        vit.load_images("cifar")
