"""Information-theoretic diversity of residual-stream members (Kamigaito et al. 2025,
arXiv:2505.24009, Theorems 4-7 and Eq. 13 as reconstructed in ``shared/papers/diversity.md``
section 3.6). Book: diversity chapter, section "Information-theoretic diversity".

Everything here works on *discrete* variables: member predictions ``U_i = argmax_c f_i[c]``,
summaries ``S_k = argmax_c z^(k)[c]`` and the label ``Y``, given as integer arrays ``[N]``
(or ``[N, M]`` for several members). Entropies are plug-in estimates of one empirical joint
(optionally weighted, so that an enumerated distribution can be given exactly as rows with
probabilities), in bits, with an optional Miller-Madow correction.

Chain rule (Eq. 13, reconstructed), exact for plug-in entropies of one joint:

    I(U_{1:M}; Y) = sum_i I(U_i; Y | U_<i)
                  = sum_i I(U_i;Y) - sum_i I(U_i;U_<i) + sum_i I(U_i;U_<i | Y)
                    Relevancy        Redundancy          Conditional redundancy
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from layerlab.report.stats import resample_indices

LN2 = float(np.log(2.0))


def _as_columns(*vars_: np.ndarray | None) -> list[np.ndarray]:
    cols: list[np.ndarray] = []
    n = None
    for v in vars_:
        if v is None:
            continue
        a = np.asarray(v)
        if a.ndim == 1:
            a = a[:, None]
        if a.ndim != 2:
            raise ValueError(f"discrete variables must be [N] or [N, k] integer arrays, got shape {a.shape}")
        if n is not None and a.shape[0] != n:
            raise ValueError(f"all variables need the same number of samples N: got {a.shape[0]} and {n}")
        n = a.shape[0]
        cols.extend(a[:, j] for j in range(a.shape[1]))
    return cols


def joint_codes(*vars_: np.ndarray | None) -> np.ndarray:
    """One integer code per sample for the joint value of all given variables ([N] each or [N, k])."""
    cols = _as_columns(*vars_)
    if not cols:
        raise ValueError("joint_codes needs at least one variable")
    code = np.zeros(len(cols[0]), dtype=np.int64)
    for c in cols:  # mixed-radix code of the per-column factor codes, compacted after every column
        inv = np.unique(c, return_inverse=True)[1].reshape(-1)
        code = code * (int(inv.max()) + 1) + inv
        code = np.unique(code, return_inverse=True)[1].reshape(-1)
    return code


def entropy(*vars_: np.ndarray | None, weights: np.ndarray | None = None, miller_madow: bool = False) -> float:
    """Plug-in joint entropy H(vars) in bits.

    ``weights`` [N] (non-negative, any scale) turns the rows into an enumerated distribution;
    ``miller_madow`` adds (m - 1) / (2N) nats, m = number of occupied cells (unweighted only).
    Constant (empty) variable lists have entropy 0.

    The entropies behind Kamigaito et al. 2025 (arXiv:2505.24009), Theorems 4-7 (spec diversity.md section 3.6);
    Miller-Madow: Miller (1955).
    """
    cols = _as_columns(*vars_)
    if not cols:
        return 0.0
    codes = joint_codes(*cols)
    if weights is None:
        counts = np.bincount(codes).astype(np.float64)
        counts = counts[counts > 0]
        p = counts / counts.sum()
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != codes.shape or np.any(w < 0) or w.sum() <= 0:
            raise ValueError("weights must be a non-negative [N] array with a positive sum")
        if miller_madow:
            raise ValueError("the Miller-Madow correction needs sample counts, not weights")
        counts = np.bincount(codes, weights=w)
        p = counts[counts > 0] / w.sum()
    h = float(-(p * np.log(p)).sum())  # nats
    if miller_madow:
        h += (len(p) - 1) / (2.0 * len(codes))
    return h / LN2


def mutual_info(x, y, z=None, *, weights=None, miller_madow: bool = False) -> float:
    """I(X; Y | Z) in bits from plug-in (or Miller-Madow) entropies of one joint; Z optional.

    I(X;Y|Z) = H(X,Z) + H(Y,Z) - H(X,Y,Z) - H(Z).

    Kamigaito et al. 2025 (arXiv:2505.24009), Theorems 4-7 (spec diversity.md section 3.6).
    """
    kw = dict(weights=weights, miller_madow=miller_madow)
    return entropy(x, z, **kw) + entropy(y, z, **kw) - entropy(x, y, z, **kw) - entropy(z, **kw)


@dataclass(frozen=True)
class ChainTerms:
    """Terms of the chain rule (Eq. 13); per-member arrays are [M], totals in bits."""

    total: float  # I(U_{1:M}; Y) (or I(S_M;Y)-free sum when summaries are used)
    gains: np.ndarray  # I(U_i; Y | C_i), C_i = U_<i or the summary S_{i-1}
    relevancy: np.ndarray  # I(U_i; Y)
    redundancy: np.ndarray  # I(U_i; C_i)
    cond_redundancy: np.ndarray  # I(U_i; C_i | Y)

    @property
    def diversity(self) -> float:
        """Information-theoretic diversity = Conditional redundancy - Redundancy (section 3.6)."""
        return float(self.cond_redundancy.sum() - self.redundancy.sum())


def chain_terms(
    U: np.ndarray,
    y: np.ndarray,
    context: np.ndarray | None = None,
    *,
    weights=None,
    miller_madow: bool = False,
) -> ChainTerms:
    """Relevancy, redundancy and conditional redundancy of members ``U`` [N, M] for label ``y`` [N].

    ``context=None`` conditions member i on the exact joint U_<i (exact chain rule, small M);
    ``context`` [N, M] conditions member i on ``context[:, i]`` instead, e.g. the logit-lens
    summary S_{i-1} (column 0 is ignored: member 0 has no predecessors). ``total`` is
    I(U_{1:M};Y) for the exact joint and the sum of the gains otherwise.

    Chain rule of Kamigaito et al. 2025 (arXiv:2505.24009), Eq. 13 as reconstructed in spec diversity.md section 3.6.
    """
    U = np.asarray(U)
    if U.ndim != 2:
        raise ValueError(f"U must be [N, M] member predictions, got shape {U.shape}")
    n, m = U.shape
    if context is not None and np.asarray(context).shape != (n, m):
        raise ValueError(f"context must have the shape of U {U.shape}, got {np.asarray(context).shape}")
    kw = dict(weights=weights, miller_madow=miller_madow)
    rel, red, cred, gain = (np.zeros(m) for _ in range(4))
    for i in range(m):
        ui = U[:, i]
        c = None if i == 0 else (U[:, :i] if context is None else np.asarray(context)[:, i])
        rel[i] = mutual_info(ui, y, **kw)
        red[i] = 0.0 if c is None else mutual_info(ui, c, **kw)
        cred[i] = 0.0 if c is None else mutual_info(ui, c, y, **kw)
        gain[i] = mutual_info(ui, y, c, **kw)
    total = mutual_info(U, y, **kw) if context is None else float(gain.sum())
    return ChainTerms(total, gain, rel, red, cred)


def marginal_gains(S: np.ndarray, y: np.ndarray, *, miller_madow: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """I(S_k; Y) for summaries ``S`` [N, K] and the gains G_k = I(S_k;Y) - I(S_{k-1};Y), G_0 = I(S_0;Y).

    Returns (info [K], gains [K]). Unlike I(U_{<=k};Y), I(S_k;Y) can decrease: the summary is a
    readout, not the joint (spec D6).
    """
    S = np.asarray(S)
    info = np.array([mutual_info(S[:, k], y, miller_madow=miller_madow) for k in range(S.shape[1])])
    return info, np.diff(info, prepend=0.0)


def diminishing_violations(gains: np.ndarray, tol: float = 0.0) -> int:
    """Number of steps k >= 1 with G_k > G_{k-1} + tol (a violation of diminishing returns)."""
    g = np.asarray(gains, dtype=np.float64)
    return int(np.sum(g[1:] > g[:-1] + tol))


def set_info(U: np.ndarray, y: np.ndarray, subset: tuple[int, ...], *, weights=None) -> float:
    """F(S) = I(U_S; Y) (plug-in, bits); F(empty) = 0."""
    if not subset:
        return 0.0
    return mutual_info(np.asarray(U)[:, list(subset)], y, weights=weights)


def submodularity_violations(U: np.ndarray, y: np.ndarray, *, weights=None, tol: float = 1e-12) -> tuple[int, int]:
    """Count violations of F(A+i) - F(A) >= F(B+i) - F(B) over all A subset B, i not in B (Theorem 7).

    Exhaustive over subsets, so only for small M (<= 6). Returns (violations, checks).
    """
    U = np.asarray(U)
    m = U.shape[1]
    if m > 6:
        raise ValueError(f"exhaustive submodularity check needs M <= 6 members, got {m}; pass a subset of columns")
    F = {}
    for r in range(m + 1):
        for s in itertools.combinations(range(m), r):
            F[s] = set_info(U, y, s, weights=weights)
    bad = checks = 0
    for B in F:
        for r in range(len(B) + 1):
            for A in itertools.combinations(B, r):
                for i in range(m):
                    if i in B:
                        continue
                    gA = F[tuple(sorted(A + (i,)))] - F[A]
                    gB = F[tuple(sorted(B + (i,)))] - F[B]
                    checks += 1
                    bad += int(gA < gB - tol)
    return bad, checks


def bayes_error(U: np.ndarray, y: np.ndarray, *, weights=None) -> float:
    """Error of the Bayes-optimal decoder of Y from the joint U (empirical / enumerated).

    The error bounded by Kamigaito et al. 2025 (arXiv:2505.24009), Theorem 4 (spec diversity.md section 3.6).
    """
    u = joint_codes(U)
    yc = joint_codes(y)
    w = np.ones(len(u)) if weights is None else np.asarray(weights, dtype=np.float64)
    table = np.zeros((u.max() + 1, yc.max() + 1))
    np.add.at(table, (u, yc), w)
    return float(1.0 - table.max(axis=1).sum() / table.sum())


def error_bounds(h_y: float, info: float, n_classes: int) -> tuple[float, float]:
    """Theorem 4 bounds (bits) on the Bayes error of decoding Y from U:
    Fano  (H(Y) - I - 1) / log2|Y|  <=  P_err  <=  (H(Y) - I) / 2  Hellman-Raviv."""
    if n_classes < 2:
        raise ValueError(f"error bounds need at least 2 classes, got {n_classes}")
    h_cond = h_y - info
    return max(0.0, (h_cond - 1.0) / np.log2(n_classes)), h_cond / 2.0


def _h_counts(counts: np.ndarray, n: int, miller_madow: bool) -> np.ndarray:
    """Entropy (bits) of count vectors along the last axis: [..., K] -> [...]."""
    p = counts / n
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.where(counts > 0, p * np.log(p), 0.0).sum(-1)
    if miller_madow:
        h = h + ((counts > 0).sum(-1) - 1) / (2.0 * n)
    return h / LN2


def _mi_tables(tables: np.ndarray, n: int, miller_madow: bool) -> np.ndarray:
    """I(X;Y) from contingency tables [B, kx, ky] of n samples each -> [B] (same estimator as mutual_info)."""
    b = tables.shape[0]
    return (
        _h_counts(tables.sum(2), n, miller_madow)
        + _h_counts(tables.sum(1), n, miller_madow)
        - _h_counts(tables.reshape(b, -1), n, miller_madow)
    )


def bootstrap_mi(
    x, y, z=None, *, n_boot: int = 1000, seed: int = 0, level: float = 0.95, miller_madow: bool = True
) -> tuple[float, float, float]:
    """Estimate and percentile bootstrap CI of I(X;Y|Z) over examples (resampling rows jointly with
    :func:`layerlab.report.stats.resample_indices`; the replicates are vectorised contingency tables)."""
    rng = np.random.default_rng(seed)
    x, y = np.asarray(x), np.asarray(y)
    z = None if z is None else np.asarray(z)
    n = len(y)
    est = mutual_info(x, y, z, miller_madow=miller_madow)
    idx = resample_indices(n, n_boot, rng)  # [n_boot, n]
    if z is None:  # vectorised: one contingency table per replicate
        xc, yc = joint_codes(x), joint_codes(y)
        kx, ky = int(xc.max()) + 1, int(yc.max()) + 1
        cell = (xc * ky + yc)[idx] + (kx * ky) * np.arange(n_boot)[:, None]  # [B, N]
        tables = np.bincount(cell.ravel(), minlength=n_boot * kx * ky).reshape(n_boot, kx, ky).astype(float)
        boots = _mi_tables(tables, n, miller_madow)
    else:
        boots = np.array([mutual_info(x[i], y[i], z[i], miller_madow=miller_madow) for i in idx])
    a = (1 - level) / 2
    return est, float(np.quantile(boots, a)), float(np.quantile(boots, 1 - a))


def permutation_null(x, y, *, n_perm: int = 200, seed: int = 0, miller_madow: bool = True) -> tuple[np.ndarray, float]:
    """Label-permutation null of I(X;Y): (null values [n_perm], one-sided p-value of the observed MI).

    The null's mean is the estimator's bias floor for independent variables."""
    rng = np.random.default_rng(seed)
    y = np.asarray(y)
    obs = mutual_info(x, y, miller_madow=miller_madow)
    null = np.array([mutual_info(x, rng.permutation(y), miller_madow=miller_madow) for _ in range(n_perm)])
    return null, float((1 + np.sum(null >= obs - 1e-12)) / (1 + n_perm))


def entropy_replicates(code: np.ndarray, idx: np.ndarray, *, miller_madow: bool = False) -> np.ndarray:
    """Plug-in (or Miller-Madow) entropy in bits of one discrete variable on each resample of its rows:
    ``code`` [N] (any integer codes, e.g. :func:`joint_codes` of several variables), ``idx`` [B, n] row
    indices per replicate -> [B]. The same estimator as :func:`entropy`, vectorised with one contingency
    table per replicate (bootstraps of chain-rule terms)."""
    c = np.unique(np.asarray(code), return_inverse=True)[1].reshape(-1)
    idx = np.asarray(idx)
    b, n = idx.shape
    k = int(c.max()) + 1
    cell = c[idx] + k * np.arange(b)[:, None]  # [B, n]
    counts = np.bincount(cell.ravel(), minlength=b * k).reshape(b, k).astype(np.float64)
    return _h_counts(counts, n, miller_madow)
