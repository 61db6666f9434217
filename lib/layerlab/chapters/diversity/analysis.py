"""Dataset-level analyses of member readouts for the diversity chapter (Kamigaito et al. 2025,
arXiv:2505.24009, Figs. 3-6 and Sec. 5.4; spec ``diversity.md`` sections 4-5): truncation sweeps with
bootstrap CIs, per-member terms, correlation heatmaps with partial correlations and a permutation
null, information-theoretic terms along depth, the trade-off checks and the member-shuffle null.

Inputs are :class:`layerlab.metrics.diversity.MemberReadout` objects; outputs are pandas DataFrames (one row
per depth / member / metric) so that figures and claim tables are drawn from data.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from layerlab.metrics import diversity as dv
from layerlab.metrics import infotheory as it
from layerlab.report.stats import bootstrap_ci, pearson, spearman


def per_example(readout: dv.MemberReadout, k: int | None = None, target_kind: str = "onehot") -> dict[str, np.ndarray]:
    """Per-example terms [N] after k blocks: MSE, Bias, Div, Omega, CE, mean member CE, mean KL, correct."""
    d, ce, pred = dv.terms_at_depth(readout, k, target_kind=target_kind)
    return {
        "mse": d.mse.numpy(),
        "bias": d.bias.numpy(),
        "div": d.div.numpy(),
        "omega": d.omega.numpy(),
        "ce": ce.ce.numpy(),
        "member_ce": ce.member_ce.numpy(),
        "kl": ce.kl.numpy(),
        "acc": (pred == readout.labels).double().numpy(),
    }


def sweep(
    readout: dv.MemberReadout, *, target_kind: str = "onehot", n_boot: int = 500, seed: int = 0, groups=None
) -> pd.DataFrame:
    """Truncation sweep k = 0..L (spec 3.7, meaning 1): mean terms with bootstrap CIs and the
    M-normalised Bias/M_k, Div/M_k (spec 5, D9). One row per (k, term)."""
    rows = []
    for k in range(readout.n_layers + 1):
        m_k = readout.n_members(k)
        ex = per_example(readout, k, target_kind)
        ex["bias_per_m"], ex["div_per_m"] = ex["bias"] / m_k, ex["div"] / m_k
        for term, x in ex.items():
            ci = bootstrap_ci(x, n_boot=n_boot, seed=seed, groups=groups)
            rows.append({"k": k, "M": m_k, "term": term, "value": ci.estimate, "low": ci.low, "high": ci.high})
    return pd.DataFrame(rows)


def members_table(readout: dv.MemberReadout, *, n_boot: int = 300, seed: int = 0) -> pd.DataFrame:
    """Per-member bias_i, div_i (Fig. 4 "module graphs") and the signed label-centred logit
    <c_i, e_y - 1/C> at full depth, with bootstrap CIs over examples. One row per (member, term)."""
    c, b = readout.at_depth()
    f = dv.ensemble(c, b)
    d = dv.decompose_mse(f, dv.target(readout.labels, readout.n_classes, dtype=f.dtype))
    yc = dv.target(readout.labels, readout.n_classes, "centred", dtype=f.dtype)
    signed = (c * yc[:, None]).sum(-1)  # [N, M]
    names = readout.names or [str(i) for i in range(c.shape[1])]
    rows = []
    for i, name in enumerate(names):
        kind = (
            "embed" if i == 0 else ("attn" if name.startswith("attn") else "mlp" if name.startswith("mlp") else "block")
        )
        layer = -1 if i == 0 else (i - 1) // 2 if readout.level == "module" else i - 1
        for term, x in (("bias_i", d.bias_i[:, i]), ("div_i", d.div_i[:, i]), ("signed", signed[:, i])):
            ci = bootstrap_ci(x.numpy(), n_boot=n_boot, seed=seed)
            rows.append(
                {
                    "member": name,
                    "index": i,
                    "kind": kind,
                    "layer": layer,
                    "term": term,
                    "value": ci.estimate,
                    "low": ci.low,
                    "high": ci.high,
                }
            )
    return pd.DataFrame(rows)


def partial_corr(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> float:
    """Pearson correlation of x and y after regressing both linearly on z (and a constant)."""
    Z = np.column_stack([np.ones(len(z)), np.asarray(z, dtype=np.float64)])
    rx = x - Z @ np.linalg.lstsq(Z, x, rcond=None)[0]
    ry = y - Z @ np.linalg.lstsq(Z, y, rcond=None)[0]
    den = np.sqrt((rx @ rx) * (ry @ ry))
    return float(rx @ ry / den) if den > 0 else float("nan")


CORRELATION_COLUMNS = ("term", "pearson", "pearson_low", "pearson_high", "spearman", "spearman_low", "spearman_high",
                       "partial_k", "perm_p", "n_depths")


def correlations(
    sw: pd.DataFrame, terms=("mse", "bias", "div", "ce", "member_ce", "kl"), *, n_perm: int = 1000, seed: int = 0
) -> pd.DataFrame:
    """Fig. 3 cell values over the population of truncation depths k: Pearson and Spearman r of each
    term with accuracy (Fisher-z CIs, descriptive only: depths are not independent units), the partial
    correlation given a cubic in k, and a permutation p-value of |partial r| (shuffling depth labels of
    the term). The claim table's D8 uses :mod:`layerlab.chapters.diversity.evidence` instead."""
    wide = sw.pivot(index="k", columns="term", values="value").sort_index()
    t = np.linspace(-1.0, 1.0, len(wide))
    k = np.column_stack([t, t**2, t**3])  # a cubic in depth: a linear control leaves a curved shared trend
    acc = wide["acc"].to_numpy()
    rng = np.random.default_rng(seed)
    rows = []
    for t in terms:
        x = wide[t].to_numpy()
        if len(x) < 4 or np.std(x) == 0 or np.std(acc) == 0:
            continue
        pr, sr = pearson(x, acc), spearman(x, acc)
        pc = partial_corr(x, acc, k)
        null = np.array([abs(partial_corr(rng.permutation(x), acc, k)) for _ in range(n_perm)])
        rows.append(
            {
                "term": t,
                "pearson": pr.r,
                "pearson_low": pr.low,
                "pearson_high": pr.high,
                "spearman": sr.r,
                "spearman_low": sr.low,
                "spearman_high": sr.high,
                "partial_k": pc,
                "perm_p": float((1 + np.sum(null >= abs(pc))) / (1 + n_perm)),
                "n_depths": len(x),
            }
        )
    return pd.DataFrame(rows, columns=CORRELATION_COLUMNS)  # columns even when no term qualifies


def tradeoff(readout: dv.MemberReadout, *, n_boot: int = 500, seed: int = 0) -> dict[str, float]:
    """Sec. 5.4 / D4 checks at full depth over examples: corr(Bias, Omega), corr(Div, Omega), the partial
    correlation of Bias and Div given Omega, and the bias floor under three targets (means with CIs)."""
    ex = per_example(readout)
    out: dict[str, float] = {}
    for a, b in (("bias", "omega"), ("div", "omega"), ("bias", "div")):
        r = spearman(ex[a], ex[b])
        out[f"corr_{a}_{b}"], out[f"corr_{a}_{b}_low"], out[f"corr_{a}_{b}_high"] = r.r, r.low, r.high
    # given MSE the two are tied by the identity (partial r = 1), so the informative control is Omega
    out["partial_bias_div_given_omega"] = partial_corr(ex["bias"], ex["div"], ex["omega"])
    for kind in ("onehot", "centred"):
        ci = bootstrap_ci(per_example(readout, None, kind)["bias"], n_boot=n_boot, seed=seed)
        out[f"bias_floor_{kind}"], out[f"bias_floor_{kind}_low"], out[f"bias_floor_{kind}_high"] = ci
    ci = bootstrap_ci(ex["member_ce"], n_boot=n_boot, seed=seed)
    out["member_ce_floor"], out["member_ce_floor_low"], out["member_ce_floor_high"] = ci
    return out


def shuffle_null(readout: dv.MemberReadout, *, n_rep: int = 20, seed: int = 0) -> dict[str, float]:
    """Member-shuffle null (spec 5): Div and MSE of the real members vs members drawn from independently
    permuted same-label examples. Real Div < shuffled Div means the members' disagreements are not
    independent noise; real MSE < shuffled MSE means co-adaptation helps."""
    c, b = readout.at_depth()
    y = dv.target(readout.labels, readout.n_classes, dtype=c.dtype)
    real = dv.decompose_mse(dv.ensemble(c, b), y)
    div_null, mse_null = [], []
    for r in range(n_rep):
        s = dv.decompose_mse(dv.ensemble(dv.shuffle_members(c, readout.labels, seed=seed + r), b), y)
        div_null.append(float(s.div.mean()))
        mse_null.append(float(s.mse.mean()))
    ci = bootstrap_ci(real.div.numpy(), seed=seed)
    return {
        "div_real": ci.estimate,
        "div_real_low": ci.low,
        "div_real_high": ci.high,
        "div_null_mean": float(np.mean(div_null)),
        "div_null_low": float(np.quantile(div_null, 0.025)),
        "div_null_high": float(np.quantile(div_null, 0.975)),
        "mse_real": float(real.mse.mean()),
        "mse_null_mean": float(np.mean(mse_null)),
    }


def info_terms(readout: dv.MemberReadout, *, n_boot: int = 200, n_perm: int = 200, seed: int = 0) -> pd.DataFrame:
    """Theorems 4-6 along depth (spec 3.6-3.7): I(S_k;Y) with bootstrap CIs and the label-permutation
    floor, marginal gains G_k, and cumulative Relevancy / Redundancy / Conditional redundancy with the
    summary S_{i-1} standing in for U_<i. One row per depth k."""
    y = readout.labels.numpy()
    S = dv.summaries(readout).numpy()  # [N, L+1]
    U = dv.member_predictions(readout).numpy()  # [N, M]
    # member i's context: the lens summary just before it (S of the block containing its predecessor)
    ctx = np.zeros_like(U)
    if readout.level == "module":
        pre = [_prefix_prediction(readout, j) for j in range(1, U.shape[1])]
        ctx[:, 1:] = np.stack(pre, 1)
    else:
        ctx[:, 1:] = S[:, :-1]
    terms = it.chain_terms(U, y, ctx, miller_madow=True)
    info, gains = it.marginal_gains(S, y)
    rows = []
    h_y = it.entropy(y)
    for k in range(S.shape[1]):
        est, lo, hi = it.bootstrap_mi(S[:, k], y, n_boot=n_boot, seed=seed)
        null, _ = it.permutation_null(S[:, k], y, n_perm=max(20, n_perm // 5), seed=seed)
        m_k = readout.n_members(k)
        fano, hr = it.error_bounds(h_y, max(est, 0.0), readout.n_classes)
        rows.append(
            {
                "k": k,
                "M": m_k,
                "info": est,
                "info_low": lo,
                "info_high": hi,
                "gain": gains[k],
                "null_floor": float(null.mean()),
                "relevancy": terms.relevancy[:m_k].sum(),
                "redundancy": terms.redundancy[:m_k].sum(),
                "cond_redundancy": terms.cond_redundancy[:m_k].sum(),
                "fano_lower": fano,
                "hellman_raviv_upper": hr,
                "error": float(np.mean(S[:, k] != y)),
            }
        )
    return pd.DataFrame(rows)


def _prefix_prediction(readout: dv.MemberReadout, j: int) -> np.ndarray:
    """The lens prediction argmax_c z[c] after the first ``j`` members, the norm recomputed on their
    partial sum (half-block points use the half-block scale: with a readout bias, e.g. the linear head,
    the argmax depends on the scale, not only on the direction). [N]"""
    c, b = readout.prefix(j)
    return (c.sum(1) + b).argmax(-1).numpy()


def gain_violations(info: pd.DataFrame, *, n_perm: int = 500, seed: int = 0) -> dict[str, float]:
    """Diminishing-returns check (Theorem 7): violations of G_k <= G_{k-1} along depth, against a null
    that shuffles the order of the gains."""
    g = info["gain"].to_numpy()[1:]
    obs = it.diminishing_violations(g)
    rng = np.random.default_rng(seed)
    null = np.array([it.diminishing_violations(rng.permutation(g)) for _ in range(n_perm)])
    return {
        "violations": obs,
        "steps": max(len(g) - 1, 0),
        "null_mean": float(null.mean()),
        "p_fewer": float((1 + np.sum(null <= obs)) / (1 + n_perm)),
    }


def pairwise_ci_premise(readout: dv.MemberReadout, *, max_pairs: int = 200, seed: int = 0) -> dict[str, float]:
    """Theorem 7's premise, members independent given Y: mean plug-in I(U_i;U_j|Y) over member pairs vs
    the same statistic with U_j permuted within each class (which makes the premise true)."""
    U = dv.member_predictions(readout).numpy()
    y = readout.labels.numpy()
    rng = np.random.default_rng(seed)
    pairs = [(i, j) for i in range(U.shape[1]) for j in range(i + 1, U.shape[1])]
    if len(pairs) > max_pairs:
        pairs = [pairs[p] for p in rng.choice(len(pairs), max_pairs, replace=False)]
    real, null = [], []
    for i, j in pairs:
        real.append(it.mutual_info(U[:, i], U[:, j], y, miller_madow=True))
        uj = U[:, j].copy()
        for cls in np.unique(y):
            idx = np.flatnonzero(y == cls)
            uj[idx] = uj[rng.permutation(idx)]
        null.append(it.mutual_info(U[:, i], uj, y, miller_madow=True))
    ci = bootstrap_ci(np.array(real) - np.array(null), seed=seed)
    return {
        "cmi_real": float(np.mean(real)),
        "cmi_null": float(np.mean(null)),
        "excess": ci.estimate,
        "excess_low": ci.low,
        "excess_high": ci.high,
        "pairs": len(pairs),
    }
