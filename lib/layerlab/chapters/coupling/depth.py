"""Depth-wise and token-wise runners of the coupling chapter (Aubry et al., ICLR 2025; spec ``coupling.md``
section 4) on one model: the prompts, every block's Jacobian at the last token with the coupling
matrices, nulls, spectra and trajectories (:func:`depth_run`), the co-diagonalisation panels, the
token-wise grids (:func:`token_runs`) and the side-by-side speed measurement.

Each runner computes per-prompt results with :mod:`layerlab.core.jacobians`, :mod:`layerlab.metrics.coupling` and
:mod:`layerlab.metrics.trajectories` and caches them per prompt with :mod:`layerlab.core.cache` (safetensors; an
interrupted run resumes). Cache keys fold in this module's source closure.
"""

from __future__ import annotations

import time
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from layerlab.core import jacobians as jac
from layerlab.core.cache import cached_json, cached_tensors, fingerprint
from layerlab.metrics import coupling as cp
from layerlab.metrics import trajectories as tr

DEMO_PROMPT = "What is the capital of France? The capital is"  # [paper: code]
# Cache keys: this module's source closure plus the model loader (models are named by label in keys).
_SOURCES = (__name__, "layerlab.core.models")


def encode(tok: Any, text: str, max_tokens: int) -> Tensor:
    """Token ids [1, n <= max_tokens] with the tokenizer's own special-token policy (recorded)."""
    ids = tok(text, return_tensors="pt").input_ids[:, :max_tokens]
    return ids.long()


def prompt_set(tok: Any, n: int, max_tokens: int, *, split: str = "test", seed: int = 0) -> list[Tensor]:
    """``n`` held-out passages of the project corpus (:func:`layerlab.data.corpora.texts_for_prompts`), each
    truncated to <= ``max_tokens`` tokens. Returns a list of [1, n_i] id tensors."""
    from layerlab.data.corpora import texts_for_prompts

    texts = texts_for_prompts(split, n, max_tokens=max_tokens, tokenizer=tok, seed=seed)
    return [encode(tok, t, max_tokens) for t in texts]


# --------------------------------------------------------------------------------- one prompt
def prompt_result(model: torch.nn.Module, ids: Tensor, ks: tuple[int, ...], *, nulls: bool,
                  null_seed: int = 0, k_top: int = 50) -> dict[str, Tensor]:
    """Everything the depth-wise analysis needs from one prompt at its last token.

    m [len(ks), 2, 2, L, L] coupling (norm/trace x ujv/vju), s_top [L, k_top] singular values,
    gap [L, len(ks)] spectral gaps s_K/s_{K+1}, lss [n] per-token LSS, delta [L] / norms [L+1] of
    the last token's trajectory, lin_cos [1] linearisation cosine, seconds [1] Jacobian wall time;
    with ``nulls``: m_spectrum / m_rotation (spec 5) and m_compat (authors' endpoints).
    """
    t0 = time.perf_counter()
    J = jac.frozen_context_jacobians(model, ids)  # [L, d, d], model dtype (fp32 runs, spec 3.8)
    seconds = time.perf_counter() - t0
    J = J.double()  # every SVD and coupling matrix in float64, whatever the model's dtype
    S = cp.svd(J)
    out = {"m": cp.cross_coupling(J, None, ks, rows_svd=S).m.float()}
    d = J.shape[-1]
    kk = min(k_top, d)
    out["s_top"] = S.s[:, :kk].float()
    out["gap"] = torch.stack([S.s[:, k - 1] / S.s[:, min(k, d - 1)] for k in ks], dim=1).float()
    x = jac.block_trajectory(model, ids).double()  # [n, L+1, d]
    out["lss"] = tr.line_shape_score(x).float()
    out["delta"] = tr.steps(x[-1]).norm(dim=-1).float()
    out["norms"] = x[-1].norm(dim=-1).float()
    out["lin_cos"] = torch.tensor([tr.linearisation_cosine(J, x[-1, 0], x[-1, -1])])
    out["seconds"] = torch.tensor([seconds])
    if nulls:
        nm = cp.null_coupling(J, ks, seed=null_seed, svd_J=S)
        out["m_spectrum"], out["m_rotation"] = nm["spectrum"].m.float(), nm["rotation"].m.float()
        Jc = J.clone()
        Jc[-1] = jac.frozen_context_jacobians(model, ids, layers=[J.shape[0] - 1], authors_compat=True)[0].double()
        out["m_compat"] = cp.cross_coupling(Jc, None, ks).m.float()
    return out


def depth_run(model: torch.nn.Module, prompts: list[Tensor], ks: tuple[int, ...], *, label: str,
              n_null: int = 4, null_seed: int = 0, progress: bool = False) -> dict[str, Any]:
    """:func:`prompt_result` for every prompt (nulls on the first ``n_null``), cached per prompt under
    ``label`` (model name + init + seed). Returns {"per_prompt": [dict], "label", "ks"}."""
    results = []
    for i, ids in enumerate(prompts):
        key = {"label": label, "ids": fingerprint(ids), "ks": list(ks), "nulls": i < n_null,
               "null_seed": null_seed}
        r = cached_tensors("coupling-prompt", key,
                           lambda ids=ids, i=i: prompt_result(model, ids, ks, nulls=i < n_null, null_seed=null_seed),
                           sources=_SOURCES)
        results.append(r)
        if progress:
            print(f"{label}: prompt {i + 1}/{len(prompts)} ({float(r['seconds']):.1f} s Jacobians)", flush=True)
    return {"per_prompt": results, "label": label, "ks": tuple(ks)}


def summarise(run: dict[str, Any], aggregation: str = "offdiag") -> pd.DataFrame:
    """One row per prompt: candidate scalars C_tr/C_l2/C_sq at every K (and for the nulls and the
    authors' endpoints where computed), LSS of the last token and over tokens, spacing statistics."""
    rows = []
    ks = run["ks"]
    for i, r in enumerate(run["per_prompt"]):
        row: dict[str, Any] = {"prompt": i, "label": run["label"]}
        for name in ("m", "m_spectrum", "m_rotation", "m_compat"):
            if name in r:
                s = cp.scalar_summaries(cp.CouplingMatrices(r[name].double(), ks), aggregation)
                prefix = "" if name == "m" else name[2:] + ":"
                row.update({prefix + k: v for k, v in s.items()})
        if "m_spectrum" in r:  # the excess over the prompt's own spectrum-matched null (same K, d, spectrum)
            row.update({f"excess:{c}@{k}": row[f"{c}@{k}"] - row[f"spectrum:{c}@{k}"]
                        for c in ("C_l2", "C_tr", "C_sq") for k in ks})
        m50 = cp.CouplingMatrices(r["m"].double(), ks).get(max(ks))
        row["neighbour_ratio"] = cp.neighbour_ratio(m50) if m50.shape[0] > 2 else float("nan")
        row["lss_last"] = float(r["lss"][-1])
        row["lss_median"] = float(torch.nanmedian(r["lss"][1:]))  # position 0 flagged: excluded
        row.update(tr.spacing_from_norms(r["delta"].double(), r["norms"].double()))
        L = r["s_top"].shape[0]
        fit = tr.inverse_top_sv_fit(r["s_top"].double(), start=min(10, L // 3))
        row["inv_s1_slope"], row["inv_s1_r2"] = fit["slope"], fit["r2"]
        row["lin_cos"] = float(r["lin_cos"])
        row["min_gap"] = float(r["gap"].min())
        row["jacobian_seconds"] = float(r["seconds"])
        rows.append(row)
    return pd.DataFrame(rows)


def mean_matrix(run: dict[str, Any], k: int, norm: str = "norm", name: str = "m") -> Tensor:
    """Prompt-mean L x L coupling matrix 1 - m_K (the demo's "coupling matrix")."""
    ks = run["ks"]
    mats = [cp.CouplingMatrices(r[name].double(), ks).get(k, norm) for r in run["per_prompt"] if name in r]
    return 1 - torch.stack(mats).mean(0)


def distance_excess(run: dict[str, Any], k: int, norm: str = "norm") -> Tensor:
    """Per prompt, the coupling 1 - m_K at each depth distance minus that of the prompt's own
    spectrum-matched null (:func:`layerlab.metrics.coupling.distance_profile`): [P, L-1] float64 over
    the prompts that have the null."""
    ks = run["ks"]
    rows = [cp.distance_profile(cp.CouplingMatrices(r["m"].double(), ks).get(k, norm))
            - cp.distance_profile(cp.CouplingMatrices(r["m_spectrum"].double(), ks).get(k, norm))
            for r in run["per_prompt"] if "m_spectrum" in r]
    return torch.stack(rows) if rows else torch.empty(0, 0, dtype=torch.float64)


# ---------------------------------------------------------------------------- panels / tokens
def depth_panels(model: torch.nn.Module, ids: Tensor, layers: list[int], k: int) -> Tensor:
    """|A_ij| = |U_j^T J_i V_j| (K x K) for consecutive blocks ``layers`` at the last token (Fig. 4.4).
    Returns [n, n, K, K]."""
    J = jac.frozen_context_jacobians(model, ids, layers=layers).double()
    return cp.codiag_panels(J, k=min(k, J.shape[-1])).float()


def token_run(model: torch.nn.Module, ids: Tensor, layer_pair: tuple[int, int], n_tokens: int,
              ks: tuple[int, ...], *, panel_k: int = 10, null_seed: int = 0, context: bool = True) -> dict[str, Tensor]:
    """Token-wise coupling (spec 3.3, 4.5) over the last ``n_tokens`` positions T of one prompt.

    self_*: diagonal Jacobians J^l_tt (t in T) at the two layers (within-layer and cross-layer T x T);
    out_*: context Jacobians J^l_{t1, t_last} for a fixed output token (t1 in T);
    in_*: J^l_{t_first, t2} for a fixed input token (t2 in T). ``*_m`` [len(ks), 2, 2, T, T];
    ``self_panels`` |A| at ``panel_k`` for the within-layer self-coupling grid; ``self_null_m`` the
    spectrum-matched null of the first layer's stack. ``context=False`` skips out_*/in_* (the
    context Jacobians cost a full-sequence pass with d cotangents/tangents each).
    """
    n = ids.shape[1]
    T = list(range(max(0, n - n_tokens), n))
    l1, l2 = layer_pair
    Jd = torch.stack([jac.frozen_context_jacobians(model, ids, token=t, layers=[l1, l2]) for t in T]).double()
    J1, J2 = Jd[:, 0], Jd[:, 1]  # [T, d, d]
    out = {"tokens": torch.tensor(T)}
    out["self_m"] = cp.cross_coupling(J1, None, ks).m.float()
    out["self_cross_m"] = cp.cross_coupling(J1, J2, ks).m.float()
    out["self_panels"] = cp.codiag_panels(J1, k=panel_k).float()
    out["self_null_m"] = cp.cross_coupling(cp.spectrum_matched_null(cp.svd(J1).s, seed=null_seed), None, ks).m.float()
    if not context:
        return out
    O1 = jac.output_token_jacobians(model, ids, n - 1, l1).double()[T]  # [T, d, d] over t1
    O2 = jac.output_token_jacobians(model, ids, n - 1, l2).double()[T]
    out["out_m"] = cp.cross_coupling(O1, O2, ks).m.float()
    I1 = jac.input_token_jacobians(model, ids, T[0], l1).double()  # [len(T), d, d] over t2
    I2 = jac.input_token_jacobians(model, ids, T[0], l2).double()
    out["in_m"] = cp.cross_coupling(I1, I2, ks).m.float()
    for name, (A, B) in {"out_null_m": (O1, O2), "in_null_m": (I1, I2)}.items():  # spectrum-matched nulls
        nA = cp.spectrum_matched_null(cp.svd(A).s, seed=null_seed + 1)
        nB = cp.spectrum_matched_null(cp.svd(B).s, seed=null_seed + 2)
        out[name] = cp.cross_coupling(nA, nB, ks).m.float()
    return out


def token_runs(model: torch.nn.Module, prompts: list[Tensor], label: str, layer_pair: tuple[int, int],
               n_tokens: int, ks: tuple[int, ...], *, n_context: int = 1) -> list[dict[str, Tensor]]:
    """:func:`token_run` for every prompt (context Jacobians on the first ``n_context``), cached per prompt."""
    out = []
    for i, ids in enumerate(prompts):
        key = {"label": label, "ids": fingerprint(ids), "pair": list(layer_pair), "T": n_tokens, "ks": list(ks),
               "context": i < n_context}
        out.append(cached_tensors("coupling-tokens", key, lambda ids=ids, i=i: token_run(
            model, ids, layer_pair, n_tokens, ks, context=i < n_context), sources=_SOURCES))
    return out


# ----------------------------------------------------------------------------------- speed
def speed_side_by_side(model, ids, label: str, ref_layers: tuple[int, ...] = (0,)) -> dict:
    """The bench measurement, run in the chapter: frozen-context Jacobians of *all* blocks (one prefix
    pass shared by every block, as in a real run) and the authors' reference (d VJPs through the whole
    prompt) on ``ref_layers``, extrapolated to all blocks; timed side by side in one process and cached
    as JSON (a measurement with its thread count, not a recomputable result)."""
    from layerlab.core.arch import view

    def compute() -> dict:
        L = view(model).n_layers
        t0 = time.perf_counter()
        A = jac.frozen_context_jacobians(model, ids)
        fast = time.perf_counter() - t0
        t0 = time.perf_counter()
        R = jac.reference_jacobians(model, ids, layers=list(ref_layers))
        ref = (time.perf_counter() - t0) / len(ref_layers)
        err = float((A[list(ref_layers)] - R).norm() / R.norm())
        return {"label": label, "tokens": int(ids.shape[1]), "blocks": L, "layers": list(ref_layers),
                "frozen_s_all_blocks": fast, "frozen_s_per_block": fast / L, "reference_s_per_block": ref,
                "reference_s_all_blocks_extrapolated": ref * L, "ratio": ref * L / fast, "rel_error": err,
                "threads": torch.get_num_threads()}

    key = {"label": label, "ids": fingerprint(ids), "layers": list(ref_layers)}
    return cached_json("coupling-speed-all", key, compute, sources=(__name__, "layerlab.core.models"))
