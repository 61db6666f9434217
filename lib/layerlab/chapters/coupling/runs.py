"""Experiment runners of the coupling chapter (Aubry et al., ICLR 2025; spec ``coupling.md`` section 4).

Each runner computes per-prompt results with :mod:`layerlab.core.jacobians`, :mod:`layerlab.metrics.coupling` and
:mod:`layerlab.metrics.trajectories`, caches them per prompt with :mod:`layerlab.core.cache` (safetensors; an
interrupted run resumes) and returns tensors/DataFrames that the notebook plots. Cache keys hold a
hash of the coupling modules' sources, not of the whole library, so unrelated edits keep results.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
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
    out["lin_cos"] = torch.tensor([tr.linearisation_cosine(J.double(), x[-1, 0], x[-1, -1])])
    out["seconds"] = torch.tensor([seconds])
    if nulls:
        nm = cp.null_coupling(J, ks, seed=null_seed, svd_J=S)
        out["m_spectrum"], out["m_rotation"] = nm["spectrum"].m.float(), nm["rotation"].m.float()
        Jc = J.clone()
        Jc[-1] = jac.frozen_context_jacobians(model, ids, layers=[J.shape[0] - 1], authors_compat=True)[0]
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


# ----------------------------------------------------------------------------------- family
def member_jacobians(m: Any, step: int | None, prompts: list[Tensor]) -> tuple[torch.nn.Module, Tensor]:
    """(model, last-token block Jacobians [P, L, d, d] float64) of family member ``m`` at checkpoint
    ``step`` (None: final weights), cached once per (run, step, prompts) and shared by
    :func:`family_table`, :func:`checkpoint_table`, :func:`locality_run` and
    :func:`quantisation_control` (a small member loads in milliseconds, so the model is always
    returned: the trajectories and the quantisation control need it)."""
    step = m.steps if step is None else step
    model = m.load(step=step)[0]
    key = {"member": m.name, "run": m.run_dir.parent.name, "step": step,
           "ids": [fingerprint(ids) for ids in prompts]}
    J = cached_tensors("coupling-jac", key, lambda: {"J": torch.stack(
        [jac.frozen_context_jacobians(model, ids) for ids in prompts])}, sources=_SOURCES)["J"]
    return model, J.double()


def _member_row(m: Any, step: int | None, prompts: list[Tensor], ks: tuple[int, ...]) -> dict[str, float]:
    model, J = member_jacobians(m, step, prompts)
    return member_coupling(model, prompts, ks, J)


def member_coupling(model: torch.nn.Module, prompts: list[Tensor], ks: tuple[int, ...],
                    jacobians: Tensor | None = None) -> dict[str, float]:
    """Prompt-mean scalar summaries, LSS and spacing of one (small) model; ``jacobians``
    [P, L, d, d] (from :func:`member_jacobians`) skips recomputing the block Jacobians."""
    rows = []
    for i, ids in enumerate(prompts):
        J = jacobians[i] if jacobians is not None else jac.frozen_context_jacobians(model, ids).double()
        cm = cp.cross_coupling(J, None, ks)
        row = cp.scalar_summaries(cm)
        if J.shape[0] > 2:
            row["neighbour_ratio"] = cp.neighbour_ratio(cm.get(max(ks)))
        x = jac.block_trajectory(model, ids).double()
        row["lss_last"] = float(tr.line_shape_score(x[-1]))
        row["lss_median"] = float(torch.nanmedian(tr.line_shape_score(x[1:])))
        rows.append(row)
    return pd.DataFrame(rows).mean().to_dict()


def family_table(profile: str, n_prompts: int, max_tokens: int, ks: tuple[int, ...], *,
                 min_depth: int = 2, progress: bool = False) -> pd.DataFrame:
    """Coupling of every family member (final weights) with its hyperparameters and held-out NLL."""
    from layerlab.core.arch import n_params
    from layerlab.training.family import get_family

    fam = get_family(profile, progress=progress)
    prompts = prompt_set(fam.tokenizer, n_prompts, max_tokens)
    rows = []
    for m in fam:
        if m.depth < min_depth:
            continue
        key = {"member": m.name, "profile": profile, "run": str(m.run_dir.name if m.run_dir else ""),
               "n": n_prompts, "T": max_tokens, "ks": list(ks)}

        def compute(m=m) -> dict:
            row = _member_row(m, None, prompts, ks)
            model, _ = m.load()
            row["params"] = n_params(model)
            return row

        row = cached_json("coupling-member", key, compute, sources=_SOURCES)
        rows.append({"name": m.name, "depth": m.depth, "width": m.width, "lr": m.lr, "seed": m.seed,
                     "steps": m.steps, "heldout_nll": m.heldout_nll,
                     "final_train_loss": float(np.mean(m.train_loss[-8:])), **row})
        if progress:
            print(f"family {m.name}: C_l2@{max(ks)}={row[f'C_l2@{max(ks)}']:.3f}", flush=True)
    df = pd.DataFrame(rows)
    df["log10_params"] = np.log10(df["params"])
    return df


def checkpoint_table(profile: str, filters: dict, n_prompts: int, max_tokens: int, ks: tuple[int, ...],
                     *, progress: bool = False) -> pd.DataFrame:
    """Coupling, LSS and held-out NLL at every checkpoint of the members matching ``filters``."""
    from layerlab.training.family import get_family

    fam = get_family(profile, progress=progress)
    prompts = prompt_set(fam.tokenizer, n_prompts, max_tokens)
    rows = []
    for m in fam.select(**filters):
        val = {c["step"]: c["val_nll"] for c in m.curve}
        for step in m.checkpoints:
            key = {"member": m.name, "profile": profile, "step": step, "n": n_prompts, "T": max_tokens,
                   "ks": list(ks)}
            row = cached_json("coupling-ckpt", key,
                              lambda m=m, step=step: _member_row(m, step, prompts, ks),
                              sources=_SOURCES)
            rows.append({"name": m.name, "seed": m.seed, "step": step, "val_nll": val.get(step, float("nan")),
                         **row})
    return pd.DataFrame(rows)


def predictor_stats(df: pd.DataFrame, y: str, predictors: list[str], *, n_boot: int = 2000,
                    seed: int = 0) -> pd.DataFrame:
    """For each predictor x: OLS R^2 of y on x with a percentile-bootstrap CI (models resampled, the
    line refitted), Pearson r and Spearman rho with CIs (:mod:`layerlab.report.stats`)."""
    from layerlab.report.stats import bootstrap_ci, pearson, spearman

    out = []
    yv = df[y].to_numpy(float)
    for p in predictors:
        xv = df[p].to_numpy(float)

        def r2(idx: np.ndarray, xv=xv) -> float:
            idx = idx.astype(int)
            xs, ys = xv[idx], yv[idx]
            if np.std(xs) == 0 or np.std(ys) == 0:
                return 0.0
            return float(np.corrcoef(xs, ys)[0, 1] ** 2)

        row = {"predictor": p, "n": len(df)}
        if len(df) < 4:  # too few models for a CI: report nothing rather than a fake interval
            row.update({c: float("nan") for c in ("R2", "R2_low", "R2_high", "pearson", "pearson_low",
                                                  "pearson_high", "spearman", "spearman_low", "spearman_high")})
        else:
            ci = bootstrap_ci(np.arange(len(df)), r2, n_boot=n_boot, seed=seed)
            pr, sp = pearson(xv, yv, seed=seed), spearman(xv, yv, seed=seed)
            row.update({"R2": ci.estimate, "R2_low": ci.low, "R2_high": ci.high,
                        "pearson": pr.r, "pearson_low": pr.low, "pearson_high": pr.high,
                        "spearman": sp.r, "spearman_low": sp.low, "spearman_high": sp.high})
        out.append(row)
    return pd.DataFrame(out)


def incremental_r2(df: pd.DataFrame, y: str, base: list[str], extra: list[str], *, n_boot: int = 2000,
                   seed: int = 0) -> dict[str, float]:
    """Does ``extra`` (e.g. coupling) add to ``base`` (e.g. training loss)? OLS R^2 of y on base and on
    base + extra, and the gain with a percentile-bootstrap CI (models resampled, both fits redone).
    Spec section 5 (C4/C5): coupling and held-out loss both move with training."""
    from layerlab.report.stats import bootstrap_ci

    yv = df[y].to_numpy(float)
    Xb, Xf = df[base].to_numpy(float), df[base + extra].to_numpy(float)

    def r2(X: np.ndarray, idx: np.ndarray) -> float:
        A = np.column_stack([np.ones(len(idx)), X[idx]])
        coef, *_ = np.linalg.lstsq(A, yv[idx], rcond=None)
        res = yv[idx] - A @ coef
        sst = ((yv[idx] - yv[idx].mean()) ** 2).sum()
        return float(1 - (res**2).sum() / sst) if sst > 0 else float("nan")

    n = len(df)
    if n < len(base) + len(extra) + 3:
        return {"r2_base": float("nan"), "r2_full": float("nan"), "gain": float("nan"), "gain_low": float("nan"),
                "gain_high": float("nan"), "n": n}
    ci = bootstrap_ci(np.arange(n), lambda i: r2(Xf, i.astype(int)) - r2(Xb, i.astype(int)), n_boot=n_boot, seed=seed)
    return {"r2_base": r2(Xb, np.arange(n)), "r2_full": r2(Xf, np.arange(n)), "gain": ci.estimate,
            "gain_low": ci.low, "gain_high": ci.high, "n": n}


# ------------------------------------------------------------------------- locality (Fig. 1c-e)
def member_matrices(model: torch.nn.Module | None, prompts: list[Tensor], k: int,
                    jacobians: Tensor | None = None) -> Tensor:
    """Per-prompt depth-coupling matrices m_K (norm, ujv) at the last token: [P, L, L] float64
    (``jacobians`` [P, L, d, d] from :func:`member_jacobians` skips recomputing them)."""
    mats = []
    for i, ids in enumerate(prompts):
        J = jacobians[i] if jacobians is not None else jac.frozen_context_jacobians(model, ids).double()
        mats.append(cp.cross_coupling(J, None, (k,)).get(k))
    return torch.stack(mats)


def locality_run(profile: str, filters: dict, n_prompts: int, max_tokens: int, k: int, *,
                 n_perm: int = 1000, seed: int = 0) -> tuple[pd.DataFrame, dict[tuple[int, int], Tensor]]:
    """Layer locality over training (spec 4.3 and the C7 test of section 5) for the family members
    matching ``filters``, at every checkpoint: :func:`layerlab.metrics.coupling.locality` of the prompt-mean
    matrix with a bootstrap CI over prompts and a permutation-null p-value over layer order.

    Returns (rows: name, seed, step, val_nll, C_l2, locality, low, high, p_perm, neighbour_ratio,
    per_prompt (list of per-prompt locality values);
    {(seed, step): prompt-mean m_K [L, L]} for the circle graphs)."""
    from layerlab.report.stats import bootstrap_ci
    from layerlab.training.family import get_family

    fam = get_family(profile)
    prompts = prompt_set(fam.tokenizer, n_prompts, max_tokens)
    rows, mats = [], {}
    for m in fam.select(**filters):
        val = {c["step"]: c["val_nll"] for c in m.curve}
        for step in m.checkpoints:
            key = {"member": m.name, "run": m.run_dir.parent.name, "step": step, "n": n_prompts,
                   "T": max_tokens, "k": k}
            M = cached_tensors("coupling-locality", key,
                               lambda m=m, step=step: {"m": member_matrices(
                                   None, prompts, k, member_jacobians(m, step, prompts)[1])},
                               sources=_SOURCES)["m"]  # [P, L, L]
            mean = M.mean(0)
            obs = cp.locality(mean)
            per_prompt = np.array([cp.locality(x) for x in M])
            ci = bootstrap_ci(per_prompt, seed=seed)
            null = cp.locality_null(mean, n_perm, seed=seed)
            off = ~torch.eye(mean.shape[0], dtype=torch.bool)
            rows.append({"name": m.name, "seed": m.seed, "step": step, "val_nll": val.get(step, float("nan")),
                         "C_l2": float(1 - mean[off].mean()), "locality": obs, "low": ci.low, "high": ci.high,
                         "p_perm": float((1 + (null >= obs).sum()) / (1 + n_perm)),
                         "neighbour_ratio": cp.neighbour_ratio(mean), "per_prompt": per_prompt.tolist()})
            mats[(m.seed, step)] = mean
    return pd.DataFrame(rows), mats


# ---------------------------------------------------------------------- Q4_1 round-trip control
def quantisation_control(profile: str, filters: dict, n_prompts: int, max_tokens: int, k: int, *,
                         seed: int = 0, min_depth: int = 2) -> pd.DataFrame:
    """Coupling change caused by the SmolLM2 GGUF's quantisation (spec 5, "Quantisation"): each
    family member matching ``filters`` (final weights) before and after :func:`layerlab.metrics.quant.gguf_roundtrip`,
    on the same prompts. Per member: C_l2@k of both, the paired difference with a bootstrap CI over
    prompts, the relative weight change and the held-out NLL of both."""
    from layerlab.metrics.quant import gguf_roundtrip, relative_error
    from layerlab.report.stats import bootstrap_ci
    from layerlab.training.family import get_family
    from layerlab.training.train import eval_nll

    fam = get_family(profile)
    prompts = prompt_set(fam.tokenizer, n_prompts, max_tokens)
    val = fam.val_windows()
    rows = []
    for m in fam.select(**filters):
        if m.depth < min_depth:  # one block has no off-diagonal pair
            continue
        key = {"member": m.name, "run": m.run_dir.parent.name, "n": n_prompts, "T": max_tokens, "k": k,
               "q": "q4_1+q8_0"}

        def compute(m=m) -> dict[str, Tensor]:
            model, J = member_jacobians(m, None, prompts)
            q = gguf_roundtrip(model)
            return {"orig": member_matrices(model, prompts, k, J), "quant": member_matrices(q, prompts, k),
                    "rel_err": torch.tensor([relative_error(model, q)], dtype=torch.float64),
                    "nll": torch.tensor([eval_nll(model, val), eval_nll(q, val)], dtype=torch.float64)}

        r = cached_tensors("coupling-quant", key, compute, sources=_SOURCES)
        L = r["orig"].shape[-1]
        off = ~torch.eye(L, dtype=torch.bool)
        c0 = (1 - r["orig"][:, off].mean(-1)).numpy()  # [P] per-prompt C_l2
        c1 = (1 - r["quant"][:, off].mean(-1)).numpy()
        ci = bootstrap_ci(c1 - c0, seed=seed)
        rows.append({"name": m.name, "depth": m.depth, "width": m.width, "seed": m.seed,
                     "C_l2": float(c0.mean()), "C_l2_q4_1": float(c1.mean()), "diff": ci.estimate,
                     "diff_low": ci.low, "diff_high": ci.high, "rel_weight_change": float(r["rel_err"][0]),
                     "nll": float(r["nll"][0]), "nll_q4_1": float(r["nll"][1])})
    return pd.DataFrame(rows)
