"""Transformer block coupling: the m_K metric, depth/token coupling matrices, scalar summaries
and their nulls.

Aubry, Meng, Sugolov, Papyan, *Transformer Block Coupling and its Correlation with Generalization
in LLMs*, ICLR 2025 (arXiv:2407.07810; code ``sugolov/coupling``, ``metrics.py``). Book: coupling
chapter; spec ``coupling.md`` sections 3.2-3.4 and 5.

Everything works on a stack of residual-branch Jacobians ``J [N, d, d]`` (identity already
subtracted on the diagonal; see :mod:`layerlab.core.jacobians`). The stack can be the L blocks of one
token (depth-wise coupling), one block at T tokens (self-coupling) or the context Jacobians of a
fixed input/output token (context coupling): the metric is the same.

Orientation follows the released code: ``mat[i, j] = m_K(J_i, J_j)`` (row: the Jacobian being
diagonalised; column: the basis), not symmetric, zero on the diagonal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

K_DEFAULT: tuple[int, ...] = (10, 30, 50)
NORMS: tuple[str, ...] = ("norm", "trace")
VARIANTS: tuple[str, ...] = ("ujv", "vju")


@dataclass(frozen=True)
class SVD:
    """Full SVD of a Jacobian stack: ``J[i] = U[i] @ diag(s[i]) @ Vh[i]``, s descending."""

    U: Tensor  # [N, d, d]
    s: Tensor  # [N, d]
    Vh: Tensor  # [N, d, d]


@dataclass(frozen=True)
class CouplingMatrices:
    """``m[k, n, v, i, j] = m_{K_k}^{norm_n, variant_v}(J_rows[i], J_cols[j])``.

    ks: the K values; norms ("norm", "trace"); variants ("ujv", "vju"). NaN marks a pair whose row
    Jacobian has a zero top-K spectrum (m_K undefined, spec section 7 identity 8).
    """

    m: Tensor  # [len(ks), 2, 2, N, M]
    ks: tuple[int, ...]

    def get(self, k: int, norm: str = "norm", variant: str = "ujv") -> Tensor:
        """The [N, M] matrix for one K, normalisation and variant."""
        if k not in self.ks:
            raise ValueError(f"K={k} was not computed: available K are {self.ks}")
        if norm not in NORMS or variant not in VARIANTS:
            raise ValueError(f"norm must be one of {NORMS} and variant one of {VARIANTS}")
        return self.m[self.ks.index(k), NORMS.index(norm), VARIANTS.index(variant)]


def _check_stack(J: Tensor, name: str = "J") -> Tensor:
    if not isinstance(J, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape [N, d, d], got {type(J).__name__}")
    if J.ndim == 2:
        J = J[None]
    if J.ndim != 3 or J.shape[-1] != J.shape[-2]:
        raise ValueError(f"{name} must have shape [N, d, d] (square Jacobians), got {tuple(J.shape)}")
    return J


def _check_ks(ks: Sequence[int], d: int) -> tuple[int, ...]:
    ks = tuple(int(k) for k in ks)
    if not ks:
        raise ValueError("ks is empty: pass at least one K, e.g. ks=(10, 30, 50)")
    bad = [k for k in ks if k < 1 or k > d]
    if bad:
        raise ValueError(f"K={bad[0]} is out of range for d={d}: choose 1 <= K <= {d} (e.g. ks=(10, 30, 50))")
    return ks


def svd(J: Tensor) -> SVD:
    """Full SVD (LAPACK) of every Jacobian in the stack, as the authors' ``jacobian.svd``."""
    J = _check_stack(J)
    U, s, Vh = torch.linalg.svd(J)
    return SVD(U, s, Vh)


def cross_alignment(J_rows: Tensor, basis: SVD, k: int, variant: str = "ujv") -> Tensor:
    """``A[i, j] = U_{j,K}^T J_i V_{j,K}`` (ujv) or ``V_{j,K}^T J_i U_{j,K}`` (vju), one einsum.

    J_rows: [N, d, d]; basis: SVD of M Jacobians. Returns A [N, M, K, K] (signed; the metric and
    the co-diagonalisation panels take ``abs``).
    """
    J_rows = _check_stack(J_rows, "J_rows")
    _check_ks([k], J_rows.shape[-1])
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    Uk = basis.U[..., :k]  # [M, d, K]
    Vk = basis.Vh[:, :k, :].transpose(-1, -2)  # [M, d, K]
    left, right = (Uk, Vk) if variant == "ujv" else (Vk, Uk)
    JR = torch.einsum("iab,jbk->ijak", J_rows, right)  # [N, M, d, K]
    return torch.einsum("jal,ijak->ijlk", left, JR)  # [N, M, K, K]


def cross_coupling(
    J_rows: Tensor,
    J_cols: Tensor | None = None,
    ks: Sequence[int] = K_DEFAULT,
    *,
    rows_svd: SVD | None = None,
    cols_svd: SVD | None = None,
) -> CouplingMatrices:
    """m_K(J_rows[i], J_cols[j]) for all pairs, K values, both normalisations and both variants.

    Aubry et al. (ICLR 2025), Eq. for m_K (released ``diag_sv_trace_similarity``)::

        m_K(J1, J2) = || |U2_K^T J1 V2_K| - diag(s1_K) ||_F / ||s1_K||_p,   p = 2 ('norm'), 1 ('trace')

    A is computed once at K_max and its leading K x K blocks are sliced for smaller K.
    J_rows [N, d, d], J_cols [M, d, d] (default: J_rows). Returns m [len(ks), 2, 2, N, M].
    """
    J_rows = _check_stack(J_rows, "J_rows")
    same = J_cols is None
    J_cols = J_rows if same else _check_stack(J_cols, "J_cols")
    if J_cols.shape[-1] != J_rows.shape[-1]:
        raise ValueError(f"J_rows and J_cols have different d: {J_rows.shape[-1]} vs {J_cols.shape[-1]}")
    ks = _check_ks(ks, J_rows.shape[-1])
    kmax = max(ks)
    rows_svd = rows_svd if rows_svd is not None else svd(J_rows)
    cols_svd = cols_svd if cols_svd is not None else (rows_svd if same else svd(J_cols))
    N, M = J_rows.shape[0], J_cols.shape[0]
    m = torch.empty(len(ks), 2, 2, N, M, dtype=J_rows.dtype)
    for v, variant in enumerate(VARIANTS):
        A = cross_alignment(J_rows, cols_svd, kmax, variant).abs()  # [N, M, Kmax, Kmax]
        for ki, k in enumerate(ks):
            s1 = rows_svd.s[:, :k]  # [N, K]
            diff = A[:, :, :k, :k] - torch.diag_embed(s1)[:, None]  # [N, M, K, K]
            fro = torch.linalg.matrix_norm(diff)  # [N, M]
            for n, denom in enumerate((s1.norm(dim=-1), s1.abs().sum(dim=-1))):  # 'norm', 'trace'
                den = denom[:, None].expand(N, M)
                m[ki, n, v] = torch.where(den > 0, fro / den.clamp_min(torch.finfo(den.dtype).tiny), torch.nan)
    return CouplingMatrices(m, ks)


def coupling(J1: Tensor, J2: Tensor, k: int, norm: str = "norm", variant: str = "ujv") -> Tensor:
    """m_K(J1, J2) for one pair of [d, d] Jacobians (see :func:`cross_coupling`). Returns a 0-d tensor.

    Aubry et al., ICLR 2025 (arXiv:2407.07810); spec coupling.md section 3.2.
    """
    return cross_coupling(J1[None], J2[None], (k,)).get(k, norm, variant)[0, 0]


def depth_coupling(J: Tensor, ks: Sequence[int] = K_DEFAULT) -> CouplingMatrices:
    """L x L depth-wise coupling of one token's diagonal Jacobians J [L, d, d] (spec 3.3)."""
    return cross_coupling(J, None, ks)


def token_coupling(J_tokens: Tensor, ks: Sequence[int] = K_DEFAULT) -> CouplingMatrices:
    """Token-wise coupling: T x T matrix over a stack of per-token Jacobians [T, d, d].

    Self-coupling uses the diagonal J^l_tt of the tokens; context coupling uses the context
    Jacobians J^l_{t1 t2} of a fixed input token (over t2) or a fixed output token (over t1).

    Aubry et al., ICLR 2025 (arXiv:2407.07810); spec coupling.md section 3.3.
    """
    return cross_coupling(J_tokens, None, ks)


def codiag_panels(J: Tensor, k: int = 50, variant: str = "ujv") -> Tensor:
    """Co-diagonalisation panels ``|A_ij| = |U_{j,K}^T J_i V_{j,K}|`` for heatmaps (spec 3.2, 4.4).

    J: [n, d, d]. Returns [n, n, K, K]: panel (i, j) shows how well block j's singular vectors
    diagonalise block i's Jacobian (diagonal panels are exactly diag(s_i)).
    """
    J = _check_stack(J)
    return cross_alignment(J, svd(J), k, variant).abs()


def offdiag_mean(mat: Tensor, aggregation: str = "offdiag") -> Tensor:
    """Mean of an [..., N, N] coupling matrix over 'offdiag' (i != j), 'all' or 'neighbours' (|i-j|=1)
    pairs, ignoring NaN (zero-spectrum) entries. Returns [...]."""
    N = mat.shape[-1]
    i, j = torch.meshgrid(torch.arange(N), torch.arange(N), indexing="ij")
    masks = {"offdiag": i != j, "all": torch.ones(N, N, dtype=torch.bool), "neighbours": (i - j).abs() == 1}
    if aggregation not in masks:
        raise ValueError(f"aggregation must be one of {tuple(masks)}, got {aggregation!r}")
    sel = mat[..., masks[aggregation]]
    return torch.nanmean(sel, dim=-1)


def scalar_summaries(cm: CouplingMatrices, aggregation: str = "offdiag") -> dict[str, float]:
    """Candidate scalar coupling scores of spec 3.4 (the paper's exact scalar is unknown):

    C_tr(K) = 1 - mean m_K^trace,  C_l2(K) = 1 - mean m_K^norm,  C_sq(K) = 1 - mean (m_K^norm)^2,

    over the chosen pairs of the ujv matrices. Keys like ``"C_tr@50"``.
    """
    out: dict[str, float] = {}
    for k in cm.ks:
        m_norm, m_tr = cm.get(k, "norm"), cm.get(k, "trace")
        out[f"C_tr@{k}"] = float(1 - offdiag_mean(m_tr, aggregation))
        out[f"C_l2@{k}"] = float(1 - offdiag_mean(m_norm, aggregation))
        out[f"C_sq@{k}"] = float(1 - offdiag_mean(m_norm**2, aggregation))
    return out


def neighbour_ratio(mat: Tensor) -> float:
    """Layer locality (spec 4.3): mean coupling 1-m over neighbours |l-l'|=1 divided by the mean over
    distant pairs |l-l'|>=2. mat: [L, L] m_K matrix."""
    L = mat.shape[-1]
    i, j = torch.meshgrid(torch.arange(L), torch.arange(L), indexing="ij")
    c = 1 - mat
    near, far = c[(i - j).abs() == 1], c[(i - j).abs() >= 2]
    return float(torch.nanmean(near) / torch.nanmean(far))


def locality(mat: Tensor) -> float:
    """Layer locality (spec 4.3, claim C7) as a difference, stable when coupling is near zero:
    mean coupling 1-m over neighbours ``|l-l'| = 1`` minus the mean over distant pairs ``|l-l'| >= 2``.
    0 = no locality. mat: [L, L] m_K matrix, L >= 3."""
    L = mat.shape[-1]
    if mat.ndim != 2 or mat.shape[0] != L or L < 3:
        raise ValueError(f"locality needs one square [L, L] coupling matrix with L >= 3, got {tuple(mat.shape)}")
    i, j = torch.meshgrid(torch.arange(L), torch.arange(L), indexing="ij")
    c = 1 - mat.double()
    return float(torch.nanmean(c[(i - j).abs() == 1]) - torch.nanmean(c[(i - j).abs() >= 2]))


def locality_null(mat: Tensor, n_perm: int = 1000, *, seed: int = 0) -> Tensor:
    """Permutation null of :func:`locality` over layer order (spec 5, C7): the statistic after
    relabelling the layers at random (rows and columns together). Returns [n_perm] float64."""
    L = mat.shape[-1]
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(n_perm, dtype=torch.float64)
    for b in range(n_perm):
        p = torch.randperm(L, generator=g)
        out[b] = locality(mat[p][:, p])
    return out


# ----------------------------------------------------------------------------- nulls (spec section 5)
_HAAR_CACHE: dict[tuple[int, int, int, torch.dtype], Tensor] = {}
_HAAR_CACHE_BYTES = 512 * 2**20  # keep draws up to this size (d = 576, n = 90 in float64: 239 MB)


def haar_orthogonal(d: int, *, n: int = 1, seed: int = 0, dtype: torch.dtype = torch.float64) -> Tensor:
    """n Haar-random orthogonal d x d matrices (QR of a Gaussian with the sign fix of Mezzadri 2007).

    The draw is a deterministic function of (d, n, seed, dtype); draws up to 512 MB are kept in memory
    and returned again (read-only: callers never modify them), because every prompt of a run uses the
    same null seed and the QR of n d x d matrices costs more than the coupling itself."""
    key = (d, n, seed, dtype)
    if key in _HAAR_CACHE:
        return _HAAR_CACHE[key]
    Q = _haar(d, n, seed, dtype)
    if Q.numel() * Q.element_size() <= _HAAR_CACHE_BYTES:
        if len(_HAAR_CACHE) >= 4:
            _HAAR_CACHE.pop(next(iter(_HAAR_CACHE)))
        _HAAR_CACHE[key] = Q
    return Q


def _haar(d: int, n: int, seed: int, dtype: torch.dtype) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    Z = torch.randn(n, d, d, generator=g, dtype=torch.float64).to(dtype)  # same draw for every dtype
    Q, R = torch.linalg.qr(Z)
    return Q * torch.sign(torch.diagonal(R, dim1=-2, dim2=-1))[:, None, :]  # [n, d, d]


def spectrum_matched_null(s: Tensor, *, seed: int = 0) -> Tensor:
    """J'_i = Q1_i diag(s_i) Q2_i^T with Haar Q1, Q2: each layer's real spectrum, unrelated bases.

    s: [N, d] singular values. Returns [N, d, d]; its m_K is chance level for that K and spectrum.
    """
    N, d = s.shape
    Q = haar_orthogonal(d, n=2 * N, seed=seed, dtype=s.dtype)
    return Q[:N] @ torch.diag_embed(s) @ Q[N:].transpose(-1, -2)


def rotation_null(J: Tensor, *, seed: int = 0) -> Tensor:
    """Q J_i Q^T with one Haar Q per Jacobian (spec 5: m_K^norm(J, QJQ^T) ~ 1). J: [N, d, d]."""
    J = _check_stack(J)
    Q = haar_orthogonal(J.shape[-1], n=J.shape[0], seed=seed, dtype=J.dtype)
    return Q @ J @ Q.transpose(-1, -2)


def null_coupling(J: Tensor, ks: Sequence[int] = K_DEFAULT, *, seed: int = 0,
                  svd_J: SVD | None = None) -> dict[str, CouplingMatrices]:
    """Depth coupling of the spectrum-matched null stack and of the rotation null pairs
    (m(J_i, Q_j J_j Q_j^T): every layer's basis rotated independently). The nulls' SVDs are known
    in closed form (Q1 diag(s) Q2^T; Q U diag(s) (Q V)^T), so no extra SVD is computed.

    Nulls (spec coupling.md section 5) of the m_K metric of Aubry et al., ICLR 2025 (arXiv:2407.07810).
    """
    J = _check_stack(J)
    S = svd_J if svd_J is not None else svd(J)
    N, d = S.s.shape
    Q = haar_orthogonal(d, n=3 * N, seed=seed, dtype=J.dtype)
    Q1, Q2, Q3 = Q[:N], Q[N : 2 * N], Q[2 * N :]
    spec = SVD(Q1, S.s, Q2.transpose(-1, -2))
    J_spec = Q1 @ torch.diag_embed(S.s) @ Q2.transpose(-1, -2)  # [N, d, d]
    rot = SVD(Q3 @ S.U, S.s, S.Vh @ Q3.transpose(-1, -2))
    J_rot = Q3 @ J @ Q3.transpose(-1, -2)
    return {
        "spectrum": cross_coupling(J_spec, None, ks, rows_svd=spec, cols_svd=spec),
        "rotation": cross_coupling(J, J_rot, ks, rows_svd=S, cols_svd=rot),
    }


def distance_profile(mat: Tensor) -> Tensor:
    """Mean coupling 1 - m over the pairs at each depth distance |l - l'| = 1..L-1 (NaN entries ignored).

    The chance level of m_K depends on K, d, the spectra and on how far apart two blocks are, so a
    model's profile is read against the same profile of its own spectrum-matched null
    (:func:`null_coupling`): the excess per distance compares across widths and depths.
    mat: [..., L, L] m_K matrices. Returns [..., L-1] float64."""
    L = mat.shape[-1]
    if L < 2 or mat.shape[-2] != L:
        raise ValueError(f"distance_profile needs square [..., L, L] matrices with L >= 2, got {tuple(mat.shape)}")
    i, j = torch.meshgrid(torch.arange(L), torch.arange(L), indexing="ij")
    c = 1 - mat.double()
    return torch.stack([torch.nanmean(c[..., (i - j).abs() == k], dim=-1) for k in range(1, L)], dim=-1)
