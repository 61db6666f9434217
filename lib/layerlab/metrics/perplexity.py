"""Held-out perplexity with a confidence interval, on the token-window protocol of :mod:`layerlab.data.corpora`.

For windows with scored tokens x_1..x_{T-1} (the first id of each window is context only):

    NLL/token = (1 / N_tok) sum_windows sum_t -log p(x_t | x_<t)        [nats]
    perplexity = exp(NLL/token)
    bits/byte  = (sum of NLL) / (ln 2 * sum of UTF-8 bytes of the scored text)

The 95% CI is a percentile bootstrap over windows (optionally over documents, ``group_by_doc``),
resampling the per-window NLL sums and byte counts jointly; perplexity's CI is exp of the NLL CI
(the map is monotone). Progress bars use tqdm and are silenced by ``TQDM_DISABLE=1``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from layerlab.data.corpora import TokenWindows
from layerlab.report.stats import CI, bootstrap_ci

__all__ = ["PerplexityResult", "evaluate", "token_nll"]


@torch.inference_mode()
def token_nll(model: nn.Module, input_ids: torch.Tensor, batch_size: int = 8, *,
              progress: bool | None = None, desc: str = "nll") -> torch.Tensor:
    """-log p(x_t | x_<t) for t = 1..T-1 of every row: [N, T] long -> [N, T-1] float64 (nats).

    Batched forward passes in the model's dtype; log-softmax in float32 (float64 for float64 models).
    """
    if input_ids.ndim != 2 or input_ids.shape[1] < 2:
        raise ValueError(f"input_ids must be [N, T] with T >= 2, got shape {tuple(input_ids.shape)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    vocab = model.get_input_embeddings().num_embeddings
    if int(input_ids.max()) >= vocab or int(input_ids.min()) < 0:
        raise ValueError(f"token ids must be in [0, {vocab}); were the windows made with this model's tokenizer?")
    device = next(model.parameters()).device
    out = torch.empty(input_ids.shape[0], input_ids.shape[1] - 1, dtype=torch.float64)
    starts = range(0, input_ids.shape[0], batch_size)
    for s in tqdm(starts, desc=desc, disable=None if progress is None else not progress, leave=False):
        ids = input_ids[s:s + batch_size].to(device)  # [b, T]
        logits = model(input_ids=ids, use_cache=False).logits[:, :-1]  # [b, T-1, V]
        work = torch.float64 if logits.dtype == torch.float64 else torch.float32
        nll = F.cross_entropy(logits.to(work).flatten(0, 1), ids[:, 1:].flatten(), reduction="none")
        out[s:s + batch_size] = nll.view(ids.shape[0], -1).double().cpu()
    return out


@dataclass(frozen=True)
class PerplexityResult:
    """NLL/token (nats), perplexity and bits/byte with 95% CIs; per-window NLL sums for re-analysis.

    CIs by percentile bootstrap (Efron & Tibshirani 1993, ch. 13).
    """

    nll: CI
    ppl: CI
    bits_per_byte: CI
    n_tokens: int
    n_bytes: int
    n_windows: int
    window_nll: np.ndarray = field(repr=False)  # [N] summed NLL (nats) of each window
    window_bytes: np.ndarray = field(repr=False)  # [N]
    protocol: dict = field(repr=False, default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["window_nll"] = self.window_nll.tolist()
        d["window_bytes"] = self.window_bytes.tolist()
        for k in ("nll", "ppl", "bits_per_byte"):
            d[k] = list(getattr(self, k))
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PerplexityResult:
        return cls(nll=CI(*d["nll"]), ppl=CI(*d["ppl"]), bits_per_byte=CI(*d["bits_per_byte"]),
                   n_tokens=int(d["n_tokens"]), n_bytes=int(d["n_bytes"]), n_windows=int(d["n_windows"]),
                   window_nll=np.asarray(d["window_nll"]), window_bytes=np.asarray(d["window_bytes"]),
                   protocol=dict(d.get("protocol", {})))


def summarise(window_nll: np.ndarray, window_bytes: np.ndarray, n_scored: int, *, n_boot: int = 1000,
              seed: int = 0, groups: Any = None, protocol: dict | None = None) -> PerplexityResult:
    """PerplexityResult from per-window NLL sums [N] and byte counts [N] (``n_scored`` tokens per window)."""
    wn, wb = np.asarray(window_nll, dtype=np.float64), np.asarray(window_bytes, dtype=np.float64)
    both = np.stack([wn, wb], axis=1)  # [N, 2]
    nll = bootstrap_ci(wn / n_scored, n_boot=n_boot, seed=seed, groups=groups)
    bpb = bootstrap_ci(both, lambda z: z[:, 0].sum() / (math.log(2) * z[:, 1].sum()), n_boot=n_boot,
                       seed=seed, groups=groups)
    ppl = CI(math.exp(nll.estimate), math.exp(nll.low), math.exp(nll.high))
    return PerplexityResult(nll=nll, ppl=ppl, bits_per_byte=bpb, n_tokens=int(wn.size * n_scored),
                            n_bytes=int(wb.sum()), n_windows=int(wn.size), window_nll=wn, window_bytes=wb,
                            protocol=dict(protocol or {}))


def evaluate(model: nn.Module, windows: TokenWindows, *, batch_size: int = 8, n_boot: int = 1000,
             seed: int = 0, group_by_doc: bool = False, cache_key: dict | None = None,
             progress: bool | None = None) -> PerplexityResult:
    """Perplexity of ``model`` on ``windows`` with bootstrap 95% CIs (over windows, or documents).

    cache_key: identifies the model (e.g. ``{"model": "smollm2-135m", "random_init": False}``); when
    given, per-window NLL sums are cached (``layerlab.core.cache``) under it and the windows' fingerprint.

    Percentile bootstrap: Efron & Tibshirani 1993, ch. 13; formulas in ``layerlab.metrics.perplexity``.
    """
    if len(windows) < 2:
        raise ValueError(f"need at least 2 windows for a CI, got {len(windows)}; lower `window` or raise "
                         "`max_tokens`")

    def compute() -> dict[str, torch.Tensor]:
        return {"window_nll": token_nll(model, windows.input_ids, batch_size, progress=progress).sum(1)}

    if cache_key is None:
        wn = compute()["window_nll"]
    else:
        from layerlab.core.cache import cached_tensors

        key = {**cache_key, "windows": windows.fingerprint(), "dtype": str(next(model.parameters()).dtype)}
        wn = cached_tensors("perplexity", key, compute, sources=(__name__, "layerlab.core.models"))["window_nll"]
    groups = windows.doc_ids if group_by_doc else None
    return summarise(wn.numpy(), windows.n_bytes.numpy(), windows.n_scored, n_boot=n_boot, seed=seed,
                     groups=groups, protocol={**windows.protocol, "group_by_doc": group_by_doc})
