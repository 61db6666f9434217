"""The evidence behind the diversity chapter's claims (Kamigaito et al. 2025, arXiv:2505.24009; claims
D3-D11 of the chapter), computed over the real unit, the test examples (prompts), for one readout of one
task. :func:`claim_evidence` returns plain dicts (``Evidence`` fields, or ``{"missing": reason}``) that
the claim table decides on (:mod:`layerlab.chapters.diversity.claims`).

Designs (each simulated at the real n in the calibration appendix, cases "diversity ..."):

* D3: partial correlation of Bias and Div given Omega over examples (Freedman-Lane permutation). The raw
  correlation is ~1 for any model because Omega dominates both (Theorem 3); only the part beyond Omega
  is evidence.
* D5: partial Spearman, across blocks k, of the gain G_k = I(S_k;Y) - I(S_{k-1};Y) with the block's
  information diversity (CondRed - Red) *given the block's relevancy*; the chain identity
  gain = Relevancy - Redundancy + CondRedundancy builds part of any gain-diversity association in, the
  part beyond relevancy is not. Interval and p: bootstrap over examples, every term re-estimated.
* D6 / D10: the peak depth chosen on one random half of the examples, the drop from it to full depth
  measured on the other half (``held_out_peak_drop``): per-example pointwise information
  log2 p(y|S_k)/p(y) (D6; its mean is the plug-in I(S_k;Y)) and per-example correctness (D10). That
  decides "it falls" (or the opposite). "No fall of the claimed size" needs more: when the chosen peak
  is full depth itself the held-out drop is 0 for every example whatever the curve, which is no evidence
  of anything. :func:`largest_fall` gives that side its own evidence, on all examples: the fall from
  *every* earlier depth to full depth must lie below the margin (an intersection-union test).
* D8: partial correlation, across depths, of a term's mean curve with the accuracy curve given depth;
  interval from a bootstrap over examples (the curves are re-averaged), p the larger of the bootstrap p
  and the Freedman-Lane permutation p over depths (both must agree).
* D9: the lag of the diversity rise behind the bias fall: the depth where Div has made half its change
  minus the depth where Bias has, on M-normalised and on raw curves; bootstrap over examples.
"""

from __future__ import annotations

import dataclasses

import numpy as np

import layerlab.chapters.diversity.analysis as da
from layerlab.metrics import diversity as dv
from layerlab.metrics import infotheory as it
from layerlab.report.inference import Evidence, held_out_peak_drop, mean_effect, mean_interval
from layerlab.report.resampled import (
    bootstrap_evidence,
    curve_partial_correlation,
    evidence_from_replicates,
    lag,
    larger_p,
    partial_correlation,
    residualise,
)
from layerlab.report.stats import resample_indices

__all__ = ["claim_evidence", "d5_blocks", "depth_terms", "pointwise_information"]

UNIT = "examples"
D8_TERMS = ("mse", "bias", "div", "ce")


def _ev(e: Evidence) -> dict:
    return dataclasses.asdict(e)


def largest_fall(curves: np.ndarray, *, unit: str, seed: int = 0) -> Evidence:
    """Evidence for "no fall of the claimed size" (D6 / D10's equivalence side), on all units.

    curves: [n_units, n_depths]. For every depth k before full depth, the per-unit fall
    ``curve[k] - curve[-1]`` has a mean and a 95% interval (:func:`mean_effect`); the depth whose upper
    bound is largest is returned. "Every depth's fall lies below the margin" is an intersection-union
    test (Berger 1982: each depth at the one-sided 2.5% level, no multiplicity correction needed), and it
    holds iff this interval's upper end lies below the margin. Nothing is chosen on the estimate being
    tested, so no units need to be held out."""
    c = np.asarray(curves, dtype=np.float64)
    if c.ndim != 2 or c.shape[0] < 2 or c.shape[1] < 2:
        raise ValueError(f"largest_fall needs curves [n_units >= 2, n_depths >= 2], got shape {c.shape}")
    falls = c[:, :-1] - c[:, -1:]  # [n_units, n_depths - 1]
    # every depth's interval upper end (the one mean_effect shows); only the chosen depth needs its test
    high = [mean_interval(falls[:, j])[1] for j in range(falls.shape[1])]
    k = int(np.argmax(high))
    ev = mean_effect(falls[:, k], unit=unit, seed=seed, n_perm=1000)
    return dataclasses.replace(ev, unit=f"{unit} (all; the largest fall, from depth {k} to full depth)")


def depth_terms(ro: dv.MemberReadout) -> dict[str, np.ndarray]:
    """Per-example terms at every truncation depth: {term: [N, L+1]} for mse, bias, div, omega, ce, acc,
    and the M-normalised bias_per_m, div_per_m."""
    per = [da.per_example(ro, k) for k in range(ro.n_layers + 1)]
    out = {t: np.stack([p[t] for p in per], 1) for t in ("mse", "bias", "div", "omega", "ce", "acc")}
    m = np.array([ro.n_members(k) for k in range(ro.n_layers + 1)], dtype=np.float64)  # [L+1]
    out["bias_per_m"], out["div_per_m"] = out["bias"] / m, out["div"] / m
    return out


def pointwise_information(S: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log2 p(y_i | S_k = s_i) / p(y_i) per example and depth, plug-in tables over all examples:
    S [N, K], y [N] -> [N, K]; the mean over examples is the plug-in I(S_k; Y)."""
    n, K = S.shape
    yc = np.unique(y, return_inverse=True)[1]
    py = np.bincount(yc) / n
    out = np.empty((n, K))
    for k in range(K):
        sc = np.unique(S[:, k], return_inverse=True)[1]
        table = np.zeros((sc.max() + 1, yc.max() + 1))
        np.add.at(table, (sc, yc), 1.0)
        p_y_s = table[sc, yc] / table.sum(1)[sc]
        out[:, k] = np.log2(p_y_s / py[yc])
    return out


def _partial_r(x: np.ndarray, y: np.ndarray, z: np.ndarray, rank: bool = False) -> float:
    if rank:
        from scipy.stats import rankdata

        x, y, z = rankdata(x), rankdata(y), rankdata(z)
    rx, ry = residualise(x, z), residualise(y, z)
    den = np.sqrt((rx @ rx) * (ry @ ry))
    return float(rx @ ry / den) if den > 0 else float("nan")


def _mi_replicates(a: np.ndarray, b: np.ndarray, idx: np.ndarray, z: np.ndarray | None = None) -> np.ndarray:
    """Miller-Madow I(A;B|Z) in bits on each resample ``idx`` [B, n] (same estimator as
    ``infotheory.mutual_info``): [B]."""
    H = lambda *v: it.entropy_replicates(it.joint_codes(*v), idx, miller_madow=True)  # noqa: E731
    if z is None:
        return H(a) + H(b) - H(a, b)
    return H(a, z) + H(b, z) - H(a, b, z) - H(z)


def d5_blocks(U: np.ndarray, ctx: np.ndarray, S: np.ndarray, y: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per resample (rows of ``idx`` [B, n]) and block k = 1..L: the gain G_k = I(S_k;Y) - I(S_{k-1};Y),
    the block's information diversity D_k = sum over its two members of (CondRed - Red) and its
    relevancy R_k (module-level members e, a_1, m_1, ...; member i's context ``ctx[:, i]``). [B, L] each."""
    m = U.shape[1]
    rel = np.stack([_mi_replicates(U[:, i], y, idx) for i in range(m)], 1)  # [B, M]
    red = np.stack([np.zeros(len(idx))] + [_mi_replicates(U[:, i], ctx[:, i], idx) for i in range(1, m)], 1)
    cred = np.stack([np.zeros(len(idx))] + [_mi_replicates(U[:, i], ctx[:, i], idx, y) for i in range(1, m)], 1)
    info = np.stack([_mi_replicates(S[:, k], y, idx) for k in range(S.shape[1])], 1)  # [B, L+1]
    d = cred - red
    return np.diff(info, axis=1), d[:, 1::2] + d[:, 2::2], rel[:, 1::2] + rel[:, 2::2]


def _d5(ro: dv.MemberReadout, n_boot: int, seed: int) -> dict:
    if ro.level != "module" or ro.n_layers < 4:
        return {"missing": "needs module-level members and at least 4 blocks"}
    y = ro.labels.numpy()
    S = dv.summaries(ro).numpy()  # [N, L+1]
    U = dv.member_predictions(ro).numpy()  # [N, M]
    ctx = np.zeros_like(U)
    ctx[:, 1:] = np.stack([da._prefix_prediction(ro, j) for j in range(1, U.shape[1])], 1)
    n = len(y)
    idx = np.concatenate([np.arange(n)[None], resample_indices(n, n_boot, np.random.default_rng(seed))])
    G, D, R = d5_blocks(U, ctx, S, y, idx)  # [B + 1, L]
    reps = np.array([_partial_r(g, d, r, rank=True) if np.std(g) > 0 and np.std(d) > 0 else np.nan
                     for g, d, r in zip(G, D, R, strict=True)])
    if not np.isfinite(reps[0]):
        return {"missing": "the gain or the information diversity is constant over blocks"}
    boot = evidence_from_replicates(reps[0], reps[1:], unit=UNIT, n=n)
    perm = partial_correlation(G[0], D[0], R[0], unit="blocks", rank=True, n_boot=100, seed=seed)
    return _ev(larger_p(boot, perm, unit=f"{UNIT} (CI); {G.shape[1]} blocks (permutation)"))


def _d8(terms: dict[str, np.ndarray], n_boot: int, n_perm: int, seed: int) -> dict:
    acc = terms["acc"]
    if np.std(acc.mean(0)) == 0:
        return {t: {"missing": "accuracy is constant over depth"} for t in D8_TERMS}
    out = {}
    for t in D8_TERMS:
        if np.std(terms[t].mean(0)) == 0:
            out[t] = {"missing": f"{t} is constant over depth"}
            continue
        out[t] = _ev(curve_partial_correlation(terms[t], acc, unit=UNIT, n_boot=n_boot, n_perm=n_perm, seed=seed))
    return out


def _d9(terms: dict[str, np.ndarray], n_boot: int, seed: int) -> dict:
    out = {}
    for variant, (b, d) in (("normalised", ("bias_per_m", "div_per_m")), ("raw", ("bias", "div"))):
        B, D = terms[b], terms[d]
        est = lag(B.mean(0), D.mean(0))
        if not np.isfinite(est):
            why = "Bias does not fall" if not B.mean(0)[-1] < B.mean(0)[0] else "Div does not rise"
            out[variant] = {"missing": f"{why} from depth 0 to full depth ({variant} curves), so no lag is defined"}
            continue
        ev = bootstrap_evidence(lambda i, B=B, D=D: lag(B[i].mean(0), D[i].mean(0)), B.shape[0], unit=UNIT,
                                n_boot=n_boot, seed=seed)
        out[variant] = _ev(ev)
    return out


def claim_evidence(ro: dv.MemberReadout, *, n_boot: int, n_boot_info: int, n_perm: int = 2000,
                   seed: int = 0) -> dict:
    """Every claim's evidence for one readout of one task (see the module docstring); plain dicts."""
    terms = depth_terms(ro)
    n = terms["acc"].shape[0]
    full = {t: v[:, -1] for t, v in terms.items()}
    out: dict = {"n": n}
    try:
        out["D3"] = _ev(partial_correlation(full["bias"], full["div"], full["omega"], unit=UNIT, n_boot=n_boot,
                                            n_perm=n_perm, seed=seed))
    except ValueError as e:
        out["D3"] = {"missing": str(e)}
    # D4 / D11: algebra, checked numerically (Theorem 3's Omega identities; Bias >= MSE >= 0)
    c, b = ro.at_depth()
    f = dv.ensemble(c, b)
    yv = dv.target(ro.labels, ro.n_classes, dtype=f.dtype)
    dec = dv.decompose_mse(f, yv)
    fbar = f.mean(1)
    scale = float(dec.bias.abs().max())
    e_bias = float((dec.bias - ((yv**2).sum(-1) - 2 * (yv * fbar).sum(-1) + dec.omega)).abs().max()) / scale
    e_div = float((dec.div - (dec.omega - (fbar**2).sum(-1))).abs().max()) / scale
    out["D4"] = {"error": max(e_bias, e_div),
                 "corr_bias_omega": float(np.corrcoef(full["bias"], full["omega"])[0, 1]),
                 "corr_div_omega": float(np.corrcoef(full["div"], full["omega"])[0, 1]),
                 "corr_bias_div": float(np.corrcoef(full["bias"], full["div"])[0, 1])}
    out["D11"] = {"error": max(0.0, float((dec.mse - dec.bias).max()) / scale),
                  "bias_over_mse": float(dec.bias.mean() / dec.mse.mean()),
                  "centred_floor": float(da.per_example(ro, None, "centred")["bias"].mean())}
    out["D5"] = _d5(ro, n_boot_info, seed)
    S = dv.summaries(ro).numpy()
    pmi = pointwise_information(S, ro.labels.numpy())
    out["D6"] = _ev(held_out_peak_drop(pmi, unit=UNIT, seed=seed))
    out["D6_fall"] = _ev(largest_fall(pmi, unit=UNIT, seed=seed))
    out["D8"] = _d8(terms, n_boot, n_perm, seed)
    out["D9"] = _d9(terms, n_boot, seed)
    out["D10"] = _ev(held_out_peak_drop(terms["acc"], unit=UNIT, seed=seed))
    out["D10_fall"] = _ev(largest_fall(terms["acc"], unit=UNIT, seed=seed))
    half = np.random.default_rng(seed).permutation(n)[: n // 2]  # held_out_peak_drop's choosing half
    out["peak"] = {"depth": int(np.argmax(terms["acc"][half].mean(0))), "acc_final": float(terms["acc"][:, -1].mean()),
                   "acc_peak_all": float(terms["acc"].mean(0).max()), "depth_all": int(terms["acc"].mean(0).argmax())}
    return out
