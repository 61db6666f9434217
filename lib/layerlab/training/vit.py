"""A small vision transformer for the coupling chapter's ViT experiment (spec ``coupling.md`` 4.9).

Aubry et al. (ICLR 2025) report that ViTs corroborate the emergence of coupling and its relation
to generalisation [paper: abstract]. Offline we train a pre-LN ViT on scikit-learn's 8x8 digits
(and Fashion-MNIST when ``layerlab.data.corpora.data_path("fashion-mnist")`` provides the idx files), keep
log-spaced checkpoints, and measure depth-wise coupling vs test accuracy over checkpoints.

The ViT is bidirectional, so the frozen-context method does not apply: block Jacobians use the
reference reverse-mode method on the block as a function of the whole token sequence
(:func:`layerlab.core.jacobians.output_token_jacobians_fn`), at the last patch token (the authors'
choice) and at the CLS token.
"""

from __future__ import annotations

import functools
import gzip
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import Tensor, nn

from layerlab.core import jacobians as jac
from layerlab.core.cache import cached_tensors
from layerlab.metrics import coupling as cp


@dataclass(frozen=True)
class ViTConfig:
    """Architecture and training of the small ViT (one preset per profile in the chapter)."""

    dataset: str = "digits"  # "digits" (8x8) or "fashion-mnist" (28x28)
    patch: int = 2
    d_model: int = 32
    n_layers: int = 4
    n_heads: int = 4
    mlp_ratio: int = 2
    steps: int = 600
    batch_size: int = 64
    lr: float = 3e-3
    seed: int = 0
    n_checkpoints: int = 8
    eval_images: int | None = None  # test accuracy on the first N test images (None: all)


class Block(nn.Module):
    """Pre-LN encoder block: x + Attn(LN x), then + MLP(LN x). Bidirectional attention."""

    def __init__(self, d: int, heads: int, ratio: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, ratio * d), nn.GELU(), nn.Linear(ratio * d, d))

    def forward(self, x: Tensor) -> Tensor:  # [B, n, d]
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class ViT(nn.Module):
    """Patch embedding + CLS + learned positions, ``n_layers`` blocks, final LN, linear head."""

    def __init__(self, cfg: ViTConfig, image: int, channels: int = 1, n_classes: int = 10):
        super().__init__()
        self.cfg = cfg
        n_patches = (image // cfg.patch) ** 2
        self.embed = nn.Linear(channels * cfg.patch**2, cfg.d_model)
        self.cls = nn.Parameter(torch.zeros(1, 1, cfg.d_model))
        self.pos = nn.Parameter(0.02 * torch.randn(1, n_patches + 1, cfg.d_model))
        self.blocks = nn.ModuleList(Block(cfg.d_model, cfg.n_heads, cfg.mlp_ratio) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, n_classes)

    def tokens(self, images: Tensor) -> Tensor:
        """images [B, C, H, W] -> block-0 input [B, 1 + n_patches, d] (CLS first)."""
        p = self.cfg.patch
        B, C, H, W = images.shape
        x = images.unfold(2, p, p).unfold(3, p, p)  # [B, C, H/p, W/p, p, p]
        x = x.permute(0, 2, 3, 1, 4, 5).reshape(B, (H // p) * (W // p), C * p * p)
        x = self.embed(x)
        return torch.cat([self.cls.expand(B, -1, -1), x], dim=1) + self.pos

    def forward(self, images: Tensor) -> Tensor:
        x = self.tokens(images)
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x[:, 0]))


def _idx(path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


@functools.lru_cache(maxsize=4)
def load_images(dataset: str, seed: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(x_train [N, 1, H, W] in [0, 1], y_train, x_test, y_test). digits: a stratified 70/30 split
    with ``seed``; fashion-mnist: the official split from the idx files under ``data_path``."""
    if dataset == "digits":
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        d = load_digits()
        x = torch.tensor(d.images / 16.0, dtype=torch.float32)[:, None]
        y = torch.tensor(d.target)
        tr_i, te_i = train_test_split(np.arange(len(y)), test_size=0.3, random_state=seed, stratify=d.target)
        return x[tr_i], y[tr_i], x[te_i], y[te_i]
    if dataset == "fashion-mnist":
        from layerlab.data.corpora import data_path

        root = data_path("fashion-mnist")
        xs = {s: torch.tensor(_idx(root / f"{s}-images-idx3-ubyte.gz") / 255.0, dtype=torch.float32)[:, None]
              for s in ("train", "t10k")}
        ys = {s: torch.tensor(_idx(root / f"{s}-labels-idx1-ubyte.gz").astype(np.int64)) for s in ("train", "t10k")}
        return xs["train"], ys["train"], xs["t10k"], ys["t10k"]
    raise ValueError(f"unknown dataset {dataset!r}: choose 'digits' or 'fashion-mnist'")


def checkpoint_steps(steps: int, n: int) -> list[int]:
    """Step 0 plus ``n`` log-spaced steps up to ``steps`` (deduplicated)."""
    return sorted({0, *np.unique(np.geomspace(1, steps, n).round().astype(int)).tolist()})


def train_vit(cfg: ViTConfig) -> dict[str, Tensor]:
    """Train (AdamW, fixed seed) and return checkpoints ``"{step}/{param}"`` plus ``"steps"`` and
    ``"test_acc"`` [n_ckpt]; cached as safetensors keyed by the config and this module's source."""

    def compute() -> dict[str, Tensor]:
        xtr, ytr, xte, yte = load_images(cfg.dataset, cfg.seed)
        xte, yte = xte[: cfg.eval_images], yte[: cfg.eval_images]
        torch.manual_seed(cfg.seed)
        model = ViT(cfg, image=xtr.shape[-1], channels=xtr.shape[1])
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.05)
        g = torch.Generator().manual_seed(cfg.seed)
        ckpts = checkpoint_steps(cfg.steps, cfg.n_checkpoints)
        out: dict[str, Tensor] = {}
        accs = []
        for step in range(cfg.steps + 1):
            if step in ckpts:
                model.eval()
                with torch.no_grad():
                    acc = float((model(xte).argmax(-1) == yte).float().mean())
                accs.append(acc)
                out.update({f"{step}/{k}": v.detach().clone() for k, v in model.state_dict().items()})
                model.train()
            if step == cfg.steps:
                break
            idx = torch.randint(0, len(ytr), (cfg.batch_size,), generator=g)
            loss = nn.functional.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        out["steps"] = torch.tensor(ckpts)
        out["test_acc"] = torch.tensor(accs)
        return out

    return cached_tensors("vit", asdict(cfg), compute)


def load_checkpoint(cfg: ViTConfig, run: dict[str, Tensor], step: int) -> ViT:
    """The ViT at checkpoint ``step`` of a :func:`train_vit` run, in eval mode."""
    xte = load_images(cfg.dataset, cfg.seed)[2]
    model = ViT(cfg, image=xte.shape[-1], channels=xte.shape[1])
    prefix = f"{step}/"
    model.load_state_dict({k[len(prefix):]: v for k, v in run.items() if k.startswith(prefix)})
    return model.eval()


def vit_jacobians(model: ViT, image: Tensor, token: int) -> Tensor:
    """J^l_tt of every block at ``token`` (0 = CLS, -1 = last patch) for one image [C, H, W], by the
    reference reverse-mode method (bidirectional: no frozen context). Returns [L, d, d] float64."""
    m = model.double()
    with torch.no_grad():
        x = m.tokens(image[None].double())  # [1, n, d]
    t = token % x.shape[1]
    Js = []
    for b in m.blocks:
        JF = jac.output_token_jacobians_fn(b, x, t)[t]  # [d, d]
        Js.append(JF - torch.eye(JF.shape[-1], dtype=JF.dtype))
        with torch.no_grad():
            x = b(x)
    model.float()
    return torch.stack(Js)


def vit_coupling_curve(cfg: ViTConfig, n_images: int, ks: tuple[int, ...]) -> list[dict]:
    """For every checkpoint: test accuracy and prompt-(image-)mean coupling summaries at the last
    patch and at CLS, over the first ``n_images`` test images. Cached via :func:`train_vit` only
    (the coupling pass is cheap: d ~ 32)."""
    run = train_vit(cfg)
    xte = load_images(cfg.dataset, cfg.seed)[2][:n_images]
    rows = []
    for step, acc in zip(run["steps"].tolist(), run["test_acc"].tolist()):
        model = load_checkpoint(cfg, run, step)
        row = {"step": step, "test_acc": acc}
        for name, token in (("last", -1), ("cls", 0)):
            vals = [cp.scalar_summaries(cp.cross_coupling(vit_jacobians(model, img, token), None, ks))
                    for img in xte]
            row.update({f"{name}:{k}": float(np.nanmean([v[k] for v in vals])) for k in vals[0]})
        rows.append(row)
    return rows
