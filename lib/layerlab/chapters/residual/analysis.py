"""Chapter 1, "Reading the residual stream": the measurement (per-layer logit-lens loss and residual norms).

For a residual h_k at depth k (k = 0: the embedding output, the input of block 0; k = l + 1: the
output of block l; k = L: the final residual, before the final norm) and the next token y:

* recompute lens (nostalgebraist 2020): NLL_k = -log softmax(W_U Norm(h_k))_y, the final norm
  recomputed on h_k. At k = L this is exactly the model's loss.
* frozen lens (Kamigaito et al. 2025, Eq. 1): NLL_k = -log softmax(W_U (w ⊙ h_k) / s(h_L))_y, the
  norm's denominator frozen at the full residual. Linear in h_k, so the per-member logits of
  :func:`layerlab.core.residual.contributions` add up to it; at k = L it is again the model's loss.
  For RMSNorm models without soft-capping the two lenses differ by the scalar s(h_k)/s(h_L) on the
  logits (an exact identity used as the fast path; tested against ``residual.lens_logits``).

:func:`analyse` runs one batched forward over token windows with the residual captured (hooks via
:mod:`layerlab.core.residual`) and returns, in one :class:`LensResult`: the model's perplexity on all
windows, both lens NLLs at every depth on a seeded sample of positions, the residual-stream L2 norm by
depth, and the relative size of each block's update. Results are cached (``layerlab.core.cache``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from layerlab.core.arch import view
from layerlab.core.residual import capture, lens_logits
from layerlab.data.corpora import TokenWindows
from layerlab.metrics.perplexity import PerplexityResult, summarise
from layerlab.report.stats import CI, bootstrap_ci

__all__ = ["LensResult", "analyse", "lens_nll", "subset_perplexity"]


@torch.no_grad()
def lens_nll(model: nn.Module, resid: torch.Tensor, ref: torch.Tensor, targets: torch.Tensor,
             *, fast: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """NLL of ``targets`` under the recompute and frozen lenses of ``resid``.

    resid: [K, P, d] residuals at K depths; ref: [P, d] the final residual h_L; targets: [P] token ids.
    Returns (nll_recompute, nll_frozen), each [K, P] float64 (nats).
    """
    v = view(model)
    p = v.final_norm_params()
    simple = fast and p.kind == "rms" and p.bias is None and v.logit_softcap is None
    out_r, out_f = [], []
    s_ref = p.scale(ref)  # [P]
    for h in resid:  # h: [P, d]
        rec = lens_logits(model, h, mode="recompute")  # [P, V]
        if simple:  # W_U (w h / s(h_L)) = (s(h) / s(h_L)) * W_U (w h / s(h))
            fro = rec * (p.scale(h) / s_ref).unsqueeze(-1)
        else:
            fro = lens_logits(model, h, mode="frozen", ref=ref)
        work = torch.float64 if rec.dtype == torch.float64 else torch.float32
        out_r.append(F.cross_entropy(rec.to(work), targets, reduction="none").double())
        out_f.append(F.cross_entropy(fro.to(work), targets, reduction="none").double())
    return torch.stack(out_r).cpu(), torch.stack(out_f).cpu()


@dataclass(frozen=True)
class LensResult:
    """Everything chapter 1 measures on one model (arrays on CPU, numpy).

    depth k = 0..L (0 = embedding output, k = output of block k-1). P sampled positions in total.
    nll_recompute, nll_frozen: [L+1, P] lens NLL (nats); norm: [L+1, P] ||h_k||_2;
    update_ratio: [L, P] ||h_{k+1} - h_k|| / ||h_k||; window_of, position: [P] window index and
    position in the window of each sampled position (its target is the token at position + 1);
    model_nll: [P] the model's own NLL there; max_abs_logit_err: max |lens_L - model logits| (both lenses).
    """

    perplexity: PerplexityResult
    nll_recompute: np.ndarray = field(repr=False)
    nll_frozen: np.ndarray = field(repr=False)
    norm: np.ndarray = field(repr=False)
    update_ratio: np.ndarray = field(repr=False)
    window_of: np.ndarray = field(repr=False)
    position: np.ndarray = field(repr=False)
    model_nll: np.ndarray = field(repr=False)
    max_abs_logit_err: float = 0.0
    doc_of_window: np.ndarray | None = field(default=None, repr=False)  # [N] document index of each window

    @property
    def n_layers(self) -> int:
        return self.norm.shape[0] - 1

    def _ci(self, x: np.ndarray, n_boot: int, seed: int) -> CI:
        """Bootstrap CI of a per-position mean, resampling whole documents (windows of one document
        share its text), or whole windows when the document of each window is unknown."""
        groups = self.window_of if self.doc_of_window is None else self.doc_of_window[self.window_of]
        return bootstrap_ci(x, n_boot=n_boot, seed=seed, groups=groups)

    def lens_curve(self, *, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
        """Mean lens NLL per depth and lens variant with 95% CIs (bootstrap over documents)."""
        rows = []
        for variant, arr in (("recompute", self.nll_recompute), ("frozen", self.nll_frozen)):
            for k in range(arr.shape[0]):
                ci = self._ci(arr[k], n_boot, seed)
                rows.append({"depth": k, "variant": variant, "nll": ci.estimate, "low": ci.low, "high": ci.high})
        return pd.DataFrame(rows)

    def norm_curve(self, *, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
        """Mean residual norm ||h_k|| (95% CI) and its median, and the relative update per depth (95% CI).

        The mean is sensitive to rare positions with very large norms ("massive activations", often at
        the first token of a window); the median is not, so the two are reported side by side."""
        rows = []
        for k in range(self.norm.shape[0]):
            ci = self._ci(self.norm[k], n_boot, seed)
            upd = self._ci(self.update_ratio[k], n_boot, seed) if k < self.n_layers else CI(*(math.nan,) * 3)
            rows.append({"depth": k, "norm": ci.estimate, "norm_low": ci.low, "norm_high": ci.high,
                         "norm_median": float(np.median(self.norm[k])),
                         "update_ratio": upd.estimate, "update_low": upd.low, "update_high": upd.high})
        return pd.DataFrame(rows)

    def outliers(self, depth: int, factor: float = 10.0) -> np.ndarray:
        """Boolean mask [P] of sampled positions whose norm at ``depth`` exceeds ``factor`` x the median."""
        n = self.norm[depth]
        return n > factor * np.median(n)

    def drop(self, variant: str = "recompute", *, n_boot: int = 1000, seed: int = 0) -> CI:
        """NLL at depth 0 minus NLL at depth L (nats), CI over documents: the loss the blocks remove."""
        arr = self.nll_recompute if variant == "recompute" else self.nll_frozen
        return self._ci(arr[0] - arr[-1], n_boot, seed)


@torch.no_grad()
def _forward(model: nn.Module, windows: TokenWindows, lens_positions: int, batch_size: int, seed: int,
             progress: bool | None) -> dict[str, torch.Tensor]:
    v = view(model)
    device = next(model.parameters()).device
    rng = np.random.default_rng(seed)
    T = windows.input_ids.shape[1]
    k_pos = min(lens_positions, T - 1)
    acc: dict[str, list[torch.Tensor]] = {k: [] for k in
                                          ("window_nll", "rec", "fro", "norm", "upd", "win", "pos", "mnll")}
    max_err = 0.0
    starts = range(0, len(windows), batch_size)
    for s in tqdm(starts, desc="lens", disable=None if progress is None else not progress, leave=False):
        ids = windows.input_ids[s:s + batch_size].to(device)  # [B, T]
        B = ids.shape[0]
        pos = torch.from_numpy(np.sort(rng.choice(T - 1, size=k_pos, replace=False)))  # [P'] same for the batch
        with capture(model, ("embed", "block_out"), positions=pos.to(device)) as cap:
            logits = model(input_ids=ids, use_cache=False).logits  # [B, T, V]
            resid = torch.cat([cap["embed"][None], cap["block_out"]])  # [L+1, B, P', d]
        work = torch.float64 if logits.dtype == torch.float64 else torch.float32
        nll = F.cross_entropy(logits[:, :-1].to(work).flatten(0, 1), ids[:, 1:].flatten(), reduction="none")
        nll = nll.view(B, T - 1).double().cpu()  # [B, T-1]
        acc["window_nll"].append(nll.sum(1))
        targets = ids[:, pos.to(device) + 1]  # [B, P']
        flat = resid.flatten(1, 2)  # [L+1, B*P', d]
        rec, fro = lens_nll(model, flat, flat[-1], targets.flatten())
        last = lens_logits(model, flat[-1], mode="recompute")  # [B*P', V]: must equal the model's logits
        sel = logits[:, pos.to(device)].flatten(0, 1)
        max_err = max(max_err, float((last - sel).abs().max()))
        h = resid.double()
        norms = h.norm(dim=-1)  # [L+1, B, P']
        upd = (h[1:] - h[:-1]).norm(dim=-1) / norms[:-1]  # [L, B, P']
        acc["rec"].append(rec.view(-1, B, k_pos))
        acc["fro"].append(fro.view(-1, B, k_pos))
        acc["norm"].append(norms.cpu())
        acc["upd"].append(upd.cpu())
        acc["win"].append(torch.arange(s, s + B).repeat_interleave(k_pos).view(B, k_pos))
        acc["pos"].append(pos.repeat(B, 1))
        acc["mnll"].append(nll[:, pos])
    assert v.n_layers + 1 == acc["rec"][0].shape[0]
    cat = {k: torch.cat(vals, dim=1 if k in ("rec", "fro", "norm", "upd") else 0) for k, vals in acc.items()}
    return {
        "window_nll": cat["window_nll"], "nll_recompute": cat["rec"].flatten(1), "nll_frozen": cat["fro"].flatten(1),
        "norm": cat["norm"].flatten(1), "update_ratio": cat["upd"].flatten(1), "window_of": cat["win"].flatten(),
        "position": cat["pos"].flatten(), "model_nll": cat["mnll"].flatten(),
        "max_abs_logit_err": torch.tensor([max_err], dtype=torch.float64),
    }


def analyse(model: nn.Module, windows: TokenWindows, *, lens_positions: int = 64, batch_size: int = 4,
            seed: int = 0, n_boot: int = 1000, cache_key: dict | None = None,
            progress: bool | None = None) -> LensResult:
    """Perplexity, both logit lenses at every depth, and residual norms, from one pass over ``windows``.

    lens_positions: positions per window read through the lens (sampled with ``seed``, shared within a
    batch); cache_key: identifies the model (e.g. ``{"model": "smollm2-135m", "random_init": False}``) —
    when given, the arrays are cached under it, the windows' fingerprint, the settings and a fingerprint
    of the code they depend on (edits elsewhere in the library keep the cache).
    """
    if lens_positions < 1:
        raise ValueError(f"lens_positions must be >= 1, got {lens_positions}")
    if len(windows) < 2:
        raise ValueError(f"need at least 2 windows for confidence intervals, got {len(windows)}")

    def compute() -> dict[str, torch.Tensor]:
        return _forward(model, windows, lens_positions, batch_size, seed, progress)

    settings = {"lens_positions": lens_positions, "batch_size": batch_size, "seed": seed,
                "dtype": str(next(model.parameters()).dtype)}
    if cache_key is None:
        t = compute()
    else:
        from layerlab.core.cache import cached_tensors

        key = {**cache_key, **settings, "windows": windows.fingerprint()}
        t = cached_tensors("lens", key, compute, sources=(__name__, "layerlab.core.models"))
    doc_index = {d: i for i, d in enumerate(dict.fromkeys(windows.doc_ids))}
    doc_of_window = np.array([doc_index[d] for d in windows.doc_ids])  # [N]
    ppl = summarise(t["window_nll"].numpy(), windows.n_bytes.numpy(), windows.n_scored, n_boot=n_boot,
                    seed=seed, groups=doc_of_window, protocol={**windows.protocol, "group_by_doc": True})
    return LensResult(
        perplexity=ppl, nll_recompute=t["nll_recompute"].numpy(), nll_frozen=t["nll_frozen"].numpy(),
        norm=t["norm"].numpy(), update_ratio=t["update_ratio"].numpy(), window_of=t["window_of"].numpy(),
        position=t["position"].numpy(), model_nll=t["model_nll"].numpy(),
        max_abs_logit_err=float(t["max_abs_logit_err"][0]), doc_of_window=doc_of_window,
    )


def subset_perplexity(result: LensResult, windows: TokenWindows, doc_id: str, *, n_boot: int = 1000,
                      seed: int = 0) -> PerplexityResult:
    """Perplexity restricted to the windows of one document (e.g. the Britannica sanity check)."""
    mask = np.array([d == doc_id for d in windows.doc_ids])
    if mask.sum() < 2:
        raise ValueError(f"fewer than 2 windows of {doc_id!r} among the evaluated windows; raise windows_per_doc")
    p = result.perplexity
    return summarise(p.window_nll[mask], p.window_bytes[mask], windows.n_scored, n_boot=n_boot, seed=seed,
                     protocol={**windows.protocol, "document": doc_id})
