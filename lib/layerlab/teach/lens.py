"""Checker of the residual chapter's exercise: the frozen-norm logit lens.

Reference: :meth:`layerlab.core.residual.Contributions.member_logits` and the identity it is
tested by (Kamigaito et al. 2025, arXiv:2505.24009, Eq. 1): with the final norm's denominator
frozen at its value on the full residual h_L, the members' logits c_i = W_U (w ⊙ centre(u_i)) / s(h_L)
sum, with the bias b, to the model's logits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from layerlab.core.models import TINY_FAMILIES
from layerlab.core.residual import contributions
from layerlab.teach.harness import (
    GEMMA_FAMILIES,
    LAYERNORM_FAMILIES,
    CheckResult,
    Failure,
    as_tensor,
    check_shape,
    close,
    finish,
    max_err,
    real_model,
    run_student,
    tiny,
    tiny_ids,
)

TOL = 1e-9  # float64 tiny models: agreement to rounding


def _one(fn: Callable, model, ids: torch.Tensor, label: str, tol: float) -> float:
    """Compare the student's member logits on one model; return the sum-identity error."""
    c = contributions(model, ids)
    ref = c.member_logits()  # [B, P, M, V]
    got = as_tensor(run_student(fn, model, c.members, c.resid, what=f"your function on {label}"), "your function")
    check_shape(got, ref, f"member logits on {label} (members {list(c.members.shape)})")
    if not close(got, ref, tol):
        doubled = as_tensor(run_student(fn, model, 2 * c.members, c.resid, what=f"your function on {label}"), "")
        # a recomputed scale makes the lens (nearly: eps) invariant to scaling the members, not linear
        if got.abs().max() > 0 and max_err(doubled, got) < 0.5 * max_err(doubled, 2 * got):
            raise Failure(
                f"on {label}, doubling every member u_i left your logits unchanged: the lens is not linear "
                "in the members. You recomputed the norm's scale from each member; freeze it at the full "
                "residual's value s(h_L) (the `resid` argument), so that c(2u) = 2 c(u)"
            )
        err = max_err(got, ref)
        bad = (got - ref).abs().amax(dim=(0, 2, 3))  # [P]
        raise Failure(f"on {label} your member logits differ from the frozen lens by up to {err:.3g} "
                      f"(worst at position {int(bad.argmax())})")
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits  # [B, T, V]
    total = c.model_view.softcap(got.sum(-2) + c.bias())
    return max_err(total, logits)


def check_frozen_lens(fn: Callable, *, families: Sequence[str] = TINY_FAMILIES, real: bool = False,
                      quiet: bool = False) -> CheckResult:
    """Check ``fn(model, members, resid) -> c``: the frozen-norm logit lens of residual members.

    members: [B, P, M, d] residual writes u_i (embedding, attention and MLP outputs); resid: [B, P, d]
    the full residual h_L. Returns c [B, P, M, V] with Σ_i c_i + b = the model's logits (before the
    Gemma-2 soft-cap). Runs on a tiny float64 model of every family and, with ``real=True``, on
    SmolLM2-135M-Instruct-Q4_1 (float32, 8 tokens).
    """
    name = "check_frozen_lens"
    failed: dict[str, str] = {}
    worst = 0.0
    for fam in families:
        try:
            worst = max(worst, _one(fn, tiny(fam), tiny_ids(8, seed=1), f"tiny-{fam}", TOL))
        except Failure as e:
            failed[fam] = str(e)
    if failed:
        fams = sorted(failed)
        first = failed[fams[0]]
        if set(fams) <= set(LAYERNORM_FAMILIES) and len(fams) < len(families):
            hint = (f"passes on RMSNorm families but fails on the LayerNorm families {', '.join(fams)}: "
                    "centre each member (subtract its mean over d) before scaling; the norm's bias β goes "
                    f"into b, not into the members. First failure: {first}")
        elif set(fams) <= set(GEMMA_FAMILIES) and len(fams) < len(families):
            hint = (f"fails only on {', '.join(fams)}: Gemma's RMSNorm multiplies by (1 + w), not w; "
                    f"use view(model).final_norm_params().weight. First failure: {first}")
        else:
            hint = first + (f" (also fails on {len(fams) - 1} other families)" if len(fams) > 1 else "")
        return finish(name, False, hint, quiet=quiet)
    fams = f"{len(families)} tiny float64 families" if len(families) > 1 else f"tiny-{families[0]} (float64)"
    msg = f"members match the frozen lens and Σ c_i + b equals the logits on {fams} (max error {worst:.1e})"
    if real:
        model, tok = real_model()
        if model is None:
            msg += f"; {tok}"
        else:
            ids = tok("The capital of France is Paris, and", return_tensors="pt").input_ids[:, :8]
            try:
                err = _one(fn, model, ids, "SmolLM2-135M-Instruct-Q4_1", 1e-4)
            except Failure as e:
                return finish(name, False, str(e), quiet=quiet)
            msg += f"; on SmolLM2-135M-Instruct-Q4_1 the sum identity holds to {err:.1e} (float32)"
    return finish(name, True, msg, quiet=quiet)
