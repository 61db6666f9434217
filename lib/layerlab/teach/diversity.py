"""Checkers of the diversity chapter's exercises: the ambiguity decomposition MSE = Bias − Diversity
and the ensemble members of a transformer.

References: :func:`layerlab.metrics.diversity.decompose_mse` (Kamigaito et al. 2025,
arXiv:2505.24009, Theorem 1; Krogh & Vedelsby 1995) and :func:`~layerlab.metrics.diversity.ensemble`
on :func:`layerlab.core.residual.contributions` (f_i = M c_i + b, so mean_i f_i = Σ_i c_i + b = logits).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from layerlab.core.residual import contributions
from layerlab.metrics.diversity import decompose_mse, ensemble, target
from layerlab.teach.harness import (
    CheckResult,
    Failure,
    as_tensor,
    check_shape,
    close,
    finish,
    max_err,
    run_student,
    tiny,
    tiny_ids,
)


def _toy(seed: int = 0) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Toy ensembles f [N, M, C] with targets y [N, C], and a tiny llama's members on one-hot targets."""
    g = torch.Generator().manual_seed(seed)
    f = torch.randn(12, 5, 7, generator=g, dtype=torch.float64)
    y = target(torch.randint(0, 7, (12,), generator=g), 7)
    model, ids = tiny("llama", seed=seed), tiny_ids(9, seed=seed)
    c = contributions(model, ids)
    fm = ensemble(c.member_logits()[0], c.bias())  # [P, M, V]
    ym = target(ids[0].roll(-1), fm.shape[-1])
    return [("a toy ensemble of 5 members (12 examples, 7 classes)", f, y),
            (f"tiny-llama's {fm.shape[1]} members (9 positions, next-token targets)", fm, ym)]


def check_decomposition(fn: Callable, *, quiet: bool = False) -> CheckResult:
    """Check ``fn(f, y) -> (mse, bias, div)``, each [N]: MSE = ||f̄ − y||², Bias = mean_i ||f_i − y||²,
    Diversity = mean_i ||f_i − f̄||², for members f [N, M, C] and targets y [N, C]."""
    name = "check_decomposition"
    try:
        for label, f, y in _toy():
            ref = decompose_mse(f, y)
            out = run_student(fn, f.clone(), y.clone(), what=f"your function on {label}")
            if not isinstance(out, (tuple, list)) or len(out) != 3:
                raise Failure(f"return three per-example tensors (mse, bias, div), got {type(out).__name__}")
            mse, bias, div = (as_tensor(t, "your function") for t in out)
            M = f.shape[1]
            for term, got, r in (("MSE", mse, ref.mse), ("Bias", bias, ref.bias), ("Diversity", div, ref.div)):
                check_shape(got, r, f"{term} on {label} (one value per example)")
                if close(got, r, 1e-9):
                    continue
                if close(got, M * r, 1e-9):
                    raise Failure(f"on {label} your {term} is M = {M} times too large: average over members, "
                                  "do not sum")
                if term == "Diversity" and close(got, ref.bias, 1e-9):
                    raise Failure(f"on {label} your Diversity equals the Bias: measure spread around the "
                                  "ensemble mean f̄ = mean_i f_i, not around the target y")
                raise Failure(f"on {label} your {term} differs by up to {max_err(got, r):.3g}")
            gap = max_err(mse, bias - div)
            if gap > 1e-9 * max(1.0, float(ref.bias.abs().max())):
                raise Failure(f"on {label} MSE ≠ Bias − Diversity by {gap:.3g}")
    except Failure as e:
        return finish(name, False, str(e), quiet=quiet)
    return finish(name, True, "MSE, Bias and Diversity match the library on a toy ensemble and on a tiny "
                  "model's members, and MSE = Bias − Diversity holds to rounding", quiet=quiet)


def check_ensemble_members(fn: Callable, *, families: Sequence[str] = ("llama", "gpt2", "phi", "qwen2"),
                           quiet: bool = False) -> CheckResult:
    """Check ``fn(model, input_ids) -> f`` [T, M, V] (one sequence): ensemble members f_i = M c_i + b whose
    mean is the model's logits, against :func:`layerlab.metrics.diversity.ensemble`."""
    name = "check_ensemble_members"
    try:
        for fam in families:
            model, ids = tiny(fam, seed=7), tiny_ids(7, seed=7)
            c = contributions(model, ids)
            ref = ensemble(c.member_logits()[0], c.bias())  # [T, M, V]
            label = f"tiny-{fam}"
            got = as_tensor(run_student(fn, model, ids, what=f"your function on {label}"), "your function")
            check_shape(got, ref, f"members on {label} [T, M, V]")
            if close(got, ref, 1e-9):
                continue
            with torch.no_grad():
                logits = model(input_ids=ids, use_cache=False).logits[0]  # [T, V]
            M = ref.shape[1]
            mean = got.mean(1)
            if close(mean * M, logits, 1e-6) or close(got, ref / M, 1e-6) or close(got, (ref - c.bias()) / M, 1e-6):
                raise Failure(f"on {label} the mean of your members is the logits / M (M = {M}): scale each "
                              "member's logits c_i by M so that mean_i f_i = Σ_i c_i + b")
            if close(got, ref - c.bias(), 1e-9):
                raise Failure(f"on {label} your members lack the bias b = W_U β + b_U (non-zero for this "
                              "family): add b to every member")
            raise Failure(f"on {label} your members differ from M c_i + b by up to {max_err(got, ref):.3g}; "
                          f"their mean misses the logits by {max_err(mean, logits):.3g}")
    except Failure as e:
        return finish(name, False, str(e), quiet=quiet)
    return finish(name, True, f"members equal M c_i + b and average to the logits on tiny {', '.join(families)}",
                  quiet=quiet)
