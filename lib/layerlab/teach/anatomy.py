"""Checkers of the anatomy chapter's exercises: the consecutive-delta correlation, its −0.5 null,
and the cost of removing one layer.

References: :func:`layerlab.metrics.weights.delta_correlations` and
:func:`~layerlab.metrics.weights.analytic_delta_correlation` (Wietrzykowski 2026, arXiv:2603.19348,
"oscillatory" deltas; null ρ_Δ = (2ρ1 − 1 − ρ2) / (2(1 − ρ1)) = −1/2 when ρ1 = ρ2), and
:func:`layerlab.metrics.ablation.ablate` (operator ``skip``: zero the block's residual writers) with
:func:`~layerlab.metrics.ablation.token_nll`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from layerlab.metrics.ablation import ablate, token_nll
from layerlab.metrics.weights import (
    analytic_delta_correlation,
    component_stack,
    delta_correlations,
    delta_tolerance,
    entry_covariance,
)
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


def _stacks(seed: int = 0) -> dict[str, torch.Tensor]:
    """Weight stacks [L, out, in] with known delta correlations, plus a real tiny model's."""
    g = torch.Generator().manual_seed(seed)
    iid = torch.randn(10, 24, 24, generator=g, dtype=torch.float64)
    template = torch.randn(1, 24, 24, generator=g, dtype=torch.float64)
    walk = torch.randn(10, 24, 24, generator=g, dtype=torch.float64).cumsum(0)
    return {
        "i.i.d. layers (null: −0.5)": iid,
        "a shared template + i.i.d. deviations (null: −0.5)": 3 * template + iid,
        "a random walk over depth (≈ 0)": walk,
        "tiny-llama gate projections": component_stack(tiny("llama"), "gate"),
    }


def _lag1_correlation(stack: torch.Tensor) -> torch.Tensor:
    """corr(W_l, W_{l+1}) from the library's entry covariance: the value a common slip returns."""
    c = entry_covariance(stack)
    sd = c.diagonal().sqrt()
    r = c / (sd[:, None] * sd[None, :])
    return r.diagonal(1)


def check_delta_correlation(fn: Callable, *, quiet: bool = False) -> CheckResult:
    """Check ``fn(stack) -> rho``: ρ_l = corr(Δ_l, Δ_{l+1}) with Δ_l = vec(W_{l+1} − W_l), for a
    weight stack [L, ...] → [L − 2], on i.i.d., template, random-walk and tiny-model stacks."""
    name = "check_delta_correlation"
    try:
        for label, stack in _stacks().items():
            ref = delta_correlations(stack)
            got = as_tensor(run_student(fn, stack.clone(), what=f"your function on {label}"), "your function")
            if got.ndim == 1 and got.shape[0] == stack.shape[0] - 1:
                raise Failure(f"on {label} you returned {got.shape[0]} values for L = {stack.shape[0]} layers: "
                              "there are L − 1 deltas and so L − 2 consecutive pairs (Δ_l, Δ_{l+1})")
            check_shape(got, ref, f"delta correlations of {label} [L={stack.shape[0]}]")
            if close(got, ref, 1e-8):
                continue
            lag1 = _lag1_correlation(stack)
            if got.shape[0] <= lag1.shape[0] and close(got, lag1[: got.shape[0]], 1e-6):
                raise Failure(f"on {label} your values are corr(W_l, W_(l+1)) of the weights themselves: "
                              "correlate the deltas Δ_l = W_(l+1) − W_l with the next delta instead")
            tol = delta_tolerance(stack[0].numel())
            mean_got, mean_ref = float(got.mean()), float(ref.mean())
            extra = ""
            if "null" in label and abs(mean_got + 0.5) > tol:
                extra = (f"; under this null the deltas must correlate at −0.5 ± {tol:.2f}, "
                         f"yours average {mean_got:+.3f}")
            raise Failure(f"on {label} your correlations differ from the library's by up to "
                          f"{max_err(got, ref):.3g} (mean {mean_got:+.3f} vs {mean_ref:+.3f}){extra}")
    except Failure as e:
        return finish(name, False, str(e), quiet=quiet)
    return finish(name, True, "matches the delta correlation on i.i.d., template, random-walk and tiny-model "
                  "stacks; the i.i.d. ones sit at −0.5 as the null says", quiet=quiet)


def check_delta_null(fn: Callable, *, quiet: bool = False) -> CheckResult:
    """Check ``fn(rho1, rho2) -> float``: the delta correlation of a stationary equal-variance
    sequence with lag-1 correlation ρ1 and lag-2 correlation ρ2 (−0.5 whenever ρ1 = ρ2)."""
    name = "check_delta_null"
    grid = [(0.0, 0.0), (0.3, 0.3), (0.9, 0.9), (0.5, 0.2), (0.8, 0.6), (-0.2, 0.1), (0.95, 0.9)]
    try:
        for r1, r2 in grid:
            ref = analytic_delta_correlation(r1, r2)
            got = float(as_tensor(run_student(fn, r1, r2, what=f"your function at ρ1={r1}, ρ2={r2}"), "your function"))
            if abs(got - ref) > 1e-10:
                if r1 == r2:
                    raise Failure(f"at ρ1 = ρ2 = {r1} the null must be exactly −0.5 (a shared template cancels "
                                  f"in every delta), yours is {got:+.4f}")
                raise Failure(f"at ρ1 = {r1}, ρ2 = {r2} the delta correlation is {ref:+.4f}, yours {got:+.4f}: "
                              "expand cov(Δ_l, Δ_(l+1)) = ρ1 − 1 − ρ2 + ρ1 (in units of var W) and "
                              "var(Δ) = 2(1 − ρ1)")
    except Failure as e:
        return finish(name, False, str(e), quiet=quiet)
    return finish(name, True, f"equals (2ρ1 − 1 − ρ2) / (2(1 − ρ1)) on {len(grid)} (ρ1, ρ2) pairs, −0.5 on the "
                  "diagonal ρ1 = ρ2", quiet=quiet)


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def reference_removal_cost(model, input_ids: torch.Tensor, layer: int) -> float:
    """Mean next-token NLL with block ``layer`` skipped minus the clean one (nats), via the library."""
    with torch.no_grad():
        clean = token_nll(model(input_ids=input_ids, use_cache=False).logits, input_ids).mean()
        with ablate(model, layer, "skip"):
            hurt = token_nll(model(input_ids=input_ids, use_cache=False).logits, input_ids).mean()
    return float(hurt - clean)


def check_removal_cost(fn: Callable, *, families: Sequence[str] = ("llama", "gpt2", "gemma2"),
                       quiet: bool = False) -> CheckResult:
    """Check ``fn(model, input_ids, layer) -> float``: ΔNLL (nats/token) of skipping block ``layer``
    (its residual writers zeroed), on tiny float64 models; the model must be unchanged afterwards."""
    name = "check_removal_cost"
    ids = tiny_ids(16, seed=3, batch=2)
    try:
        for fam in families:
            model = tiny(fam, seed=4)
            before = _state(model)
            for layer in (0, 2):
                ref = reference_removal_cost(model, ids, layer)
                out = run_student(fn, model, ids, layer, what=f"your function on tiny-{fam}, layer {layer}")
                changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
                if changed:
                    raise Failure(f"after your function ran on tiny-{fam} (layer {layer}) the model's weights "
                                  f"had changed ({changed[0]}, ...): restore them, e.g. edit inside "
                                  "`with ll.ablate(model, layer, 'skip'):`")
                got = float(as_tensor(out, "your function"))
                if abs(got - ref) <= 1e-8 * max(1.0, abs(ref)):
                    continue
                if abs(got + ref) <= 1e-8 * max(1.0, abs(ref)):
                    raise Failure(f"on tiny-{fam}, layer {layer} you returned {got:+.4g} = −(the cost): "
                                  "subtract the clean NLL from the ablated one, not the other way round")
                raise Failure(f"on tiny-{fam}, layer {layer}: removal cost {ref:+.4g} nats/token, yours "
                              f"{got:+.4g}. Skip the block by zeroing its residual writers (the block becomes "
                              "the identity) and average the next-token NLL over every scored token")
    except Failure as e:
        return finish(name, False, str(e), quiet=quiet)
    return finish(name, True, f"equals the skip-ablation ΔNLL on tiny {', '.join(families)} models and leaves "
                  "the weights untouched", quiet=quiet)
