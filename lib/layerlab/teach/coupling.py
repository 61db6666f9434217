"""Checkers of the coupling chapter's exercises: one block's Jacobian by finite differences, the
coupling metric m_K, and one depth-wise coupling matrix.

References: :func:`layerlab.core.jacobians.frozen_context_jacobians` (exact, tested against the
authors' reference method on every tiny family) and :func:`layerlab.metrics.coupling.coupling` /
:func:`~layerlab.metrics.coupling.depth_coupling` (Aubry et al., ICLR 2025, arXiv:2407.07810:
m_K(J1, J2) = || |U2_Kᵀ J1 V2_K| − diag(s1_K) ||_F / ||s1_K||_2; ``mat[i, j] = m_K(J_i, J_j)``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from layerlab.core.jacobians import frozen_context_jacobians
from layerlab.metrics.coupling import coupling, cross_alignment, depth_coupling, svd
from layerlab.teach.harness import (
    CheckResult,
    Failure,
    as_tensor,
    check_shape,
    close,
    finish,
    max_err,
    precision_hint,
    run_student,
    tiny,
    tiny_ids,
)

FD_TOL = 1e-6  # central differences in float64 at eps ~ 1e-5: error ~ 1e-10 of the scale


FD_FAMILIES = ("llama", "gemma2", "gpt2", "neox", "phi", "falcon")


def check_fd_jacobian(fn: Callable, *, families: Sequence[str] = FD_FAMILIES, quiet: bool = False) -> CheckResult:
    """Check ``fn(model, input_ids, layer, token) -> J`` [d, d]: the residual-branch Jacobian
    J = ∂f(x_t)/∂x_t − I of block ``layer`` at ``token`` (other tokens fixed), [J]_ab = ∂F_a/∂x_b,
    against the exact frozen-context Jacobian on tiny float64 models of six families (RMSNorm,
    Gemma-2, LayerNorm, parallel-residual NeoX, Phi and Falcon)."""
    name = "check_fd_jacobian"
    ids = tiny_ids(6, seed=5)
    try:
        for fam in families:
            model = tiny(fam, seed=6)
            for layer, token in ((1, 5),):
                ref = frozen_context_jacobians(model, ids, token, [layer])[0]  # [d, d], identity subtracted
                label = f"tiny-{fam}, layer {layer}, token {token}"
                got = as_tensor(run_student(fn, model, ids, layer, token, what=f"your function on {label}"),
                                "your function")
                check_shape(got, ref, f"Jacobian on {label}")
                if close(got, ref, FD_TOL):
                    continue
                eye = torch.eye(ref.shape[0], dtype=ref.dtype)
                if close(got - eye, ref, 1e-4):
                    diag = float((got - ref).diagonal().abs().max())
                    raise Failure(f"on {label} your J − (exact J) ≈ I (max |diag| {diag:.3f}): "
                                  "subtract the identity: the skip connection x_t passes through unchanged, "
                                  "the metric is about the residual branch f")
                if close(got.T, ref, 1e-4) or close(got.T - eye, ref, 1e-4):
                    raise Failure(f"on {label} your Jacobian is the transpose of the exact one: row a is the "
                                  "output coordinate, column b the input coordinate ([J]_ab = ∂F_a/∂x_b)")
                err = max_err(got, ref)
                if err < 1e-2 * max(1.0, float(ref.abs().max())):
                    raise Failure(f"on {label} your Jacobian is close but off by {err:.2g}: use central "
                                  "differences (F(x + εe_b) − F(x − εe_b)) / 2ε in float64 with ε ≈ 1e-5, "
                                  "and perturb only token t's row")
                raise Failure(f"on {label} your Jacobian differs from the exact one by up to {err:.3g}: "
                              "perturb row t of the block's input only, read row t of its output")
    except Failure as e:
        return finish(name, False, str(e), quiet=quiet)
    return finish(name, True, f"matches the exact block Jacobian on {len(families)} tiny float64 families "
                  f"(tolerance {FD_TOL:g})", quiet=quiet)


def _jacobians(seed: int = 0) -> list[tuple[str, torch.Tensor]]:
    """Jacobian stacks: a tiny llama's four blocks at its last token, and random Gaussian matrices."""
    J = frozen_context_jacobians(tiny("llama", seed=seed), tiny_ids(6, seed=seed), -1)  # [4, 64, 64]
    R = torch.randn(3, 20, 20, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return [("the tiny-llama block Jacobians", J), ("random 20 × 20 matrices", R)]


def _unsigned(J1: torch.Tensor, J2: torch.Tensor, k: int) -> float:
    """m_K without the absolute value (a common slip), from the library's signed alignment."""
    A = cross_alignment(J1[None], svd(J2[None]), k)[0, 0]  # [K, K], signed
    s1 = svd(J1[None]).s[0, :k]
    return float(torch.linalg.matrix_norm(A - torch.diag(s1)) / s1.norm())


def check_coupling(fn: Callable, *, quiet: bool = False) -> CheckResult:
    """Check ``fn(J1, J2, k) -> float``: m_K(J1, J2) = || |U2_Kᵀ J1 V2_K| − diag(s1_K) ||_F / ||s1_K||_2
    on the block Jacobians of a tiny model and on random matrices, for pairs in both orders."""
    name = "check_coupling"
    try:
        for label, J in _jacobians():
            for i, j, k in ((0, 1, 10), (2, 0, 5), (1, 2, 3)):
                ref = float(coupling(J[i], J[j], k))
                where = f"{label} {i} and {j}, K={k}"
                got = float(as_tensor(run_student(fn, J[i].clone(), J[j].clone(), k, what=f"your m_K on {where}"),
                                      "your m_K"))
                if abs(got - ref) <= 1e-9 * max(1.0, abs(ref)):
                    continue
                if abs(got - float(coupling(J[j], J[i], k))) <= 1e-9:
                    raise Failure(f"on {where} your value is m_K(J2, J1) = {got:.4f}, not m_K(J1, J2) = {ref:.4f}: "
                                  "the first Jacobian is the one diagonalised, in the SECOND one's singular "
                                  "basis (U2ᵀ J1 V2), normalised by the first one's singular values s1")
                if abs(got - float(coupling(J[i], J[j], k, norm="trace"))) <= 1e-9:
                    raise Failure(f"on {where} you divided by Σ s1 (the 'trace' variant): divide by ||s1_K||_2")
                if abs(got - float(coupling(J[i], J[j], k, variant="vju"))) <= 1e-9:
                    raise Failure(f"on {where} you computed V2ᵀ J1 U2: left singular vectors go on the left, U2ᵀ J1 V2")
                if abs(got - _unsigned(J[i], J[j], k)) <= 1e-9:
                    raise Failure(f"on {where} you forgot the absolute value: singular vectors have arbitrary "
                                  "signs, so compare |U2ᵀ J1 V2| with diag(s1)")
                raise Failure(f"on {where}: m_K = {ref:.6f}, yours {got:.6f}; keep the top-K singular "
                              "vectors (largest singular values first) of J2")
    except Failure as e:
        return finish(name, False, str(e), quiet=quiet)
    return finish(name, True, "equals the library's m_K on tiny-model Jacobians and random matrices, in both "
                  "orders and for K = 3, 5, 10", quiet=quiet)


def check_coupling_matrix(fn: Callable, *, k: int = 10, quiet: bool = False) -> CheckResult:
    """Check ``fn(J, k) -> mat`` [L, L]: the depth-wise coupling matrix mat[i, j] = m_K(J_i, J_j) of
    one token's block Jacobians J [L, d, d] (a tiny llama's), against the library's."""
    name = "check_coupling_matrix"
    J = _jacobians()[0][1]
    ref = depth_coupling(J, (k,)).get(k)
    try:
        got = as_tensor(run_student(fn, J.clone(), k, what="your function"), "your function")
        check_shape(got, ref, f"coupling matrix of {J.shape[0]} blocks")
        if not close(got, ref, 1e-9):
            if close(got, ref.T, 1e-9):
                raise Failure("your matrix is the transpose of the library's: mat[i, j] = m_K(J_i, J_j), "
                              "row i is the Jacobian diagonalised, column j the basis it is read in")
            if float(got.diagonal().abs().max()) > 1e-9:
                raise Failure(f"your diagonal is not zero (max {float(got.diagonal().abs().max()):.3g}): "
                              "m_K(J, J) = 0 since J's own singular basis diagonalises it exactly")
            bad = (got - ref).abs()
            i, j = divmod(int(bad.argmax()), ref.shape[1])
            raise Failure(f"entry [{i}, {j}] is {float(got[i, j]):.6f}, expected m_K(J_{i}, J_{j}) = "
                          f"{float(ref[i, j]):.6f}" + precision_hint(got, ref))
    except Failure as e:
        return finish(name, False, str(e), quiet=quiet)
    return finish(name, True, f"reproduces the {ref.shape[0]} × {ref.shape[0]} depth-coupling matrix of a tiny "
                  f"llama at K = {k} (not symmetric: your orientation is right)", quiet=quiet)
