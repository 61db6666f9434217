"""Weight predictability across depth: R² of predictors P1–P5 on held-out layers, with nulls N1/N2.

Wietrzykowski, *Anatomical Heterogeneity in Transformer Language Models* (arXiv:2603.19348), finding 1
("R² = 0.91 for MLP gate_proj"; regression-generated weights fail). The paper's predictor is unknown;
the variants follow the project spec ``shared/papers/anatomy.md`` section 3.4 (P1–P5, level and
innovation R²), 3.5 (weight generation) and 5 (nulls N1: random init, N2: layer order shuffled).
Book: anatomy chapter, section "Are weights predictable?".

P1–P3 predictions are linear combinations of whole layers and the all-ones matrix, so every fit and
every R² is a function of the Gram matrix of the flattened layers (plus the ones vector): computed
once per component, after which held-out splits and shuffled nulls cost microseconds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

#: Predictors of spec 3.4.
PREDICTORS: tuple[str, ...] = ("P1", "P2", "P3", "P4", "P5")
#: Matrices whose input side is the residual stream (their columns live in the shared basis).
READERS: tuple[str, ...] = ("q", "k", "v", "gate", "up")


def gram(stack: Tensor) -> Tensor:
    """Augmented Gram matrix of a stack ``[L, ...]``: G = X Xᵀ with X = [vec W_0; …; vec W_{L−1}; 1], ``[L+1, L+1]``."""
    x = stack.reshape(stack.shape[0], -1).to(torch.float64)
    ones = torch.ones(1, x.shape[1], dtype=torch.float64)
    x = torch.cat([x, ones])
    return x @ x.T


def innovation_gram(g: Tensor, train: Sequence[int]) -> Tensor:
    """Gram matrix of the innovations W_l − W̄ (W̄: mean of the training layers); the ones vector is kept."""
    n = g.shape[0] - 1
    m = torch.eye(n + 1, dtype=g.dtype)
    m[:n, list(train)] -= 1.0 / len(train)
    return m @ g @ m.T


def permute_gram(g: Tensor, perm: Sequence[int]) -> Tensor:
    """Gram matrix of the stack with its layer order permuted (null N2)."""
    idx = list(perm) + [g.shape[0] - 1]
    return g[idx][:, idx]


def fit_lags(g: Tensor, lags: Sequence[int], train: Sequence[int], lam: float = 0.0) -> Tensor:
    """Scalar ridge Ŵ_l = Σ_j a_j W_{l−lag_j} + b·1 shared by all entries, fitted on target layers ``train``.

    Returns θ = (a_1..a_k, b). Penalty: λ·(mean diagonal of the lag block of the normal matrix)·Σ a_j²,
    so λ is dimensionless; λ = 0 is ordinary least squares (spec 7.7).
    """
    n = g.shape[0] - 1
    k = len(lags)
    targets = [t for t in train if t - max(lags) >= 0]
    if not targets:
        raise ValueError(f"no training layer has lags {list(lags)}: train={list(train)}")
    a = torch.zeros(k + 1, k + 1, dtype=g.dtype)
    r = torch.zeros(k + 1, dtype=g.dtype)
    for t in targets:
        idx = [t - lag for lag in lags] + [n]
        a += g[idx][:, idx]
        r += g[idx, t]
    if lam > 0:
        a[:k, :k] += lam * torch.diagonal(a)[:k].mean() * torch.eye(k, dtype=g.dtype)
    return torch.linalg.solve(a, r)


def lag_coefficients(theta: Tensor, lags: Sequence[int], target: int, n_layers: int) -> Tensor:
    """Coefficient vector c [L+1] of the lag prediction of ``target`` over the augmented basis."""
    c = torch.zeros(n_layers + 1, dtype=theta.dtype)
    for j, lag in enumerate(lags):
        c[target - lag] += theta[j]
    c[n_layers] += theta[-1]
    return c


def poly_coefficients(n_layers: int, train: Sequence[int], target: int, degree: int) -> Tensor:
    """Per-entry polynomial in depth (P3) as a combination of training layers: c [L+1] for ``target``."""
    if len(train) <= degree:
        raise ValueError(f"degree {degree} needs more than {degree} training layers, got {len(train)}")
    x = torch.arange(n_layers, dtype=torch.float64) / max(n_layers - 1, 1)
    v = torch.stack([x**p for p in range(degree + 1)], dim=1)  # [L, deg+1]
    vt = v[list(train)]
    hat = v[target] @ torch.linalg.pinv(vt)  # [n_train]
    c = torch.zeros(n_layers + 1, dtype=torch.float64)
    c[list(train)] = hat
    return c


def r2_from_gram(g: Tensor, targets: Sequence[int], coefs: Sequence[Tensor]) -> float:
    """Pooled R² = 1 − Σ_h ||W_h − Ŵ_h||² / Σ_h ||W_h − mean(W_h)||² (mean over the entries of W_h)."""
    n_ent = g[-1, -1]
    num = den = 0.0
    for h, c in zip(targets, coefs):
        e = -c.clone()
        e[h] += 1.0
        num += float(e @ g @ e)
        den += float(g[h, h] - g[h, -1] ** 2 / n_ent)
    return 1.0 - num / den


def r2_direct(stack: Tensor, targets: Sequence[int], preds: Sequence[Tensor]) -> float:
    """The same pooled R² from explicit predictions (reference for tests)."""
    num = den = 0.0
    for h, p in zip(targets, preds):
        w = stack[h].to(torch.float64)
        num += float(((w - p) ** 2).sum())
        den += float(((w - w.mean()) ** 2).sum())
    return 1.0 - num / den


def split_layers(n_layers: int, *, frac: float = 0.3, min_layer: int = 2, seed: int = 0) -> tuple[list[int], list[int]]:
    """Seeded (train, held-out) split of layers; held-out layers are drawn from ``min_layer..L−1``."""
    if n_layers - min_layer < 2:
        raise ValueError(f"need at least {min_layer + 2} layers for a held-out split, got {n_layers}")
    rng = np.random.default_rng(seed)
    pool = np.arange(min_layer, n_layers)
    k = max(1, int(round(frac * len(pool))))
    held = sorted(int(i) for i in rng.choice(pool, size=k, replace=False))
    return [i for i in range(n_layers) if i not in held], held


def gram_r2(g: Tensor, predictor: str, train: Sequence[int], held: Sequence[int], *, lam: float = 0.0,
            degree: int = 2) -> float:
    """Held-out R² of a Gram-expressible predictor: ``"P1"``, ``"P2"`` (lags 1 / 1–2) or ``"P3"`` (polynomial)."""
    n = g.shape[0] - 1
    if predictor in ("P1", "P2"):
        lags = (1,) if predictor == "P1" else (1, 2)
        theta = fit_lags(g, lags, train, lam)
        held = [h for h in held if h - max(lags) >= 0]
        coefs = [lag_coefficients(theta, lags, h, n) for h in held]
    elif predictor == "P3":
        coefs = [poly_coefficients(n, train, h, degree) for h in held]
    else:
        raise ValueError(f"predictor {predictor!r} is not Gram-expressible: use one of P1, P2, P3")
    return r2_from_gram(g, held, coefs)


def summary_stats(stack: Tensor) -> np.ndarray:
    """P4 features per layer: Frobenius norm, std, mean and the 5/25/50/75/95% quantiles: ``[L, 8]``."""
    x = stack.reshape(stack.shape[0], -1).to(torch.float64).numpy()
    q = np.quantile(x, [0.05, 0.25, 0.5, 0.75, 0.95], axis=1).T
    return np.column_stack([np.linalg.norm(x, axis=1), x.std(axis=1), x.mean(axis=1), q])


def stats_r2(feats: np.ndarray, train: Sequence[int], held: Sequence[int], degree: int = 1) -> float:
    """P4: each summary statistic regressed on depth (polynomial) on training layers; mean held-out R²
    (out-of-sample form: the baseline is the statistic's training-layer mean)."""
    x = np.arange(feats.shape[0]) / max(feats.shape[0] - 1, 1)
    out = []
    for j in range(feats.shape[1]):
        coef = np.polyfit(x[list(train)], feats[list(train), j], degree)
        y, yhat = feats[list(held), j], np.polyval(coef, x[list(held)])
        ss = np.sum((y - feats[list(train), j].mean()) ** 2)
        out.append(1 - np.sum((y - yhat) ** 2) / ss if ss > 0 else np.nan)
    return float(np.nanmean(out))


def residual_profile(stack: Tensor, component: str) -> Tensor:
    """P5 features: norms per residual dimension, ``[L, d]`` (columns of readers, rows of writers)."""
    dim = 1 if component in READERS else 2  # stack [L, out, in]: readers' residual side is "in"
    return torch.linalg.vector_norm(stack.to(torch.float64), dim=dim)


def predictability_row(stack: Tensor, component: str, train: Sequence[int], held: Sequence[int], *,
                       lam: float = 0.0, degree: int = 2, perm: Sequence[int] | None = None,
                       parts: tuple | None = None) -> dict[str, float]:
    """All predictors on one stack: level and innovation R² of P1–P3, P4 (stats) and P5 (basis-aware).

    ``perm`` evaluates the same stack with its layer order permuted (null N2) from precomputed ``parts``
    (:func:`row_parts`), so shuffles cost no further passes over the weights.
    """
    g, feats, gp = parts if parts is not None else row_parts(stack, component)
    if perm is not None:
        g, gp, feats = permute_gram(g, perm), permute_gram(gp, perm), feats[np.asarray(perm)]
    gi = innovation_gram(g, train)
    row = {}
    for p in ("P1", "P2", "P3"):
        row[f"{p}_level"] = gram_r2(g, p, train, held, lam=lam, degree=degree)
        row[f"{p}_innov"] = gram_r2(gi, p, train, held, lam=lam, degree=degree)
    row["P4_level"] = stats_r2(feats, train, held)
    row["P5_level"] = gram_r2(gp, "P1", train, held, lam=lam)
    row["P5_innov"] = gram_r2(innovation_gram(gp, train), "P1", train, held, lam=lam)
    return row


def row_parts(stack: Tensor, component: str) -> tuple[Tensor, np.ndarray, Tensor]:
    """(Gram of the stack, P4 summary statistics [L, 8], Gram of the P5 residual-dimension profile)."""
    prof = residual_profile(stack, component) if stack.ndim == 3 else stack.to(torch.float64)
    return gram(stack), summary_stats(stack), gram(prof)


def predictability_table(stacks: dict[str, Tensor], null_stacks: dict[str, Tensor] | None = None, *,
                         frac: float = 0.3, seed: int = 0, n_shuffles: int = 20, lam: float = 0.0,
                         degree: int = 2) -> pd.DataFrame:
    """Long table: component, predictor (e.g. ``P1_level``), r2 (real), N1 (random init), N2 mean and 95%
    range over ``n_shuffles`` layer-order permutations, all on the same held-out layers.

    Predictors P1–P5 and nulls N1/N2: spec anatomy.md sections 3.4 and 5 (Wietrzykowski (arXiv:2603.19348), finding 1).
    """
    n_layers = next(iter(stacks.values())).shape[0]
    train, held = split_layers(n_layers, frac=frac, seed=seed)
    rng = np.random.default_rng(seed + 1)
    perms = [rng.permutation(n_layers) for _ in range(n_shuffles)]
    rows = []
    for comp, st in stacks.items():
        parts = row_parts(st, comp)
        real = predictability_row(st, comp, train, held, lam=lam, degree=degree, parts=parts)
        n1 = predictability_row(null_stacks[comp], comp, train, held, lam=lam, degree=degree) if null_stacks else {}
        n2 = [predictability_row(st, comp, train, held, lam=lam, degree=degree, perm=p, parts=parts) for p in perms]
        for key, val in real.items():
            sh = np.array([r[key] for r in n2])
            rows.append({"component": comp, "predictor": key, "r2": val, "N1": n1.get(key, np.nan),
                         "N2": float(sh.mean()) if len(sh) else np.nan,
                         "N2_low": float(np.quantile(sh, 0.025)) if len(sh) else np.nan,
                         "N2_high": float(np.quantile(sh, 0.975)) if len(sh) else np.nan})
    out = pd.DataFrame(rows)
    out.attrs.update(train=train, held=held)
    return out


def predict_layers(stacks: dict[str, Tensor], layers: Sequence[int], *, mode: str = "teacher",
                   lags: Sequence[int] = (1,), lam: float = 0.0, fit_layers: Sequence[int] | None = None,
                   thetas: dict[str, Tensor] | None = None) -> dict[int, dict[str, Tensor]]:
    """Regression-generated weights (spec 3.5) for ``layers`` (ascending), per component.

    The lag ridge is fitted on ``fit_layers`` (default: all layers). mode ``"teacher"``: each prediction
    uses the real earlier layers; ``"generated"``: it uses earlier *predicted* layers where they exist
    (error accumulation). ``thetas``: precomputed ``lag_thetas`` (same lags). Returns
    {layer: {component: tensor shaped like the real weight}}.
    """
    if mode not in ("teacher", "generated"):
        raise ValueError(f"unknown mode {mode!r}: choose 'teacher' or 'generated'")
    layers = sorted(layers)
    out: dict[int, dict[str, Tensor]] = {layer: {} for layer in layers}
    for comp, st in stacks.items():
        n = st.shape[0]
        if layers and layers[0] - max(lags) < 0:
            raise ValueError(f"layer {layers[0]} has no lag-{max(lags)} predecessor")
        theta = thetas[comp] if thetas is not None else fit_lags(
            gram(st), lags, fit_layers if fit_layers is not None else range(n), lam)
        src = st.to(torch.float64)  # [L, ...] converted once (the stack itself when it is float64)
        if mode == "generated":
            src = src.clone()  # predictions overwrite their layers in this copy, never in the caller's stack
        for layer in layers:
            pred = sum(theta[j] * src[layer - lag] for j, lag in enumerate(lags)) + theta[-1]
            if mode == "generated":
                src[layer] = pred
            out[layer][comp] = pred.to(st.dtype)
    return out


def lag_thetas(stacks: dict[str, Tensor], lags: Sequence[int] = (1,), lam: float = 0.0,
               fit_layers: Sequence[int] | None = None) -> dict[str, Tensor]:
    """Lag-ridge coefficients (a_1..a_k, b) per component, fitted once on ``fit_layers`` (default: all)."""
    return {c: fit_lags(gram(st), lags, fit_layers if fit_layers is not None else range(st.shape[0]), lam)
            for c, st in stacks.items()}


def matched_norm_random(weights: dict[str, Tensor], seed: int = 0) -> dict[str, Tensor]:
    """Control of spec 3.5: Gaussian matrices whose rows have the same norms as the given weights."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for comp, w in weights.items():
        r = torch.randn(w.shape, generator=g, dtype=torch.float64)
        r = r / torch.linalg.vector_norm(r, dim=-1, keepdim=True)
        out[comp] = (r * torch.linalg.vector_norm(w.to(torch.float64), dim=-1, keepdim=True)).to(w.dtype)
    return out


def replacement_interventions(model: torch.nn.Module, *, ks: Sequence[int] = (1, 2, 4), single: Sequence[int] = (),
                              mode: str = "teacher", lam: float = 0.0, seed: int = 0) -> list:
    """Interventions for the weight-generation experiment (spec 3.5/4.2), all matrices of each layer:

    ``deepest{k}``: the k deepest layers replaced by P1 predictions (``mode`` teacher / generated);
    ``predicted@l`` / ``random@l``: layer l alone replaced by its prediction / by random weights with the
    real layer's row norms; ``randpred@l``: random weights with the *prediction's* row norms (the control
    of spec 5: a prediction no better than its own-norm random twin captured nothing functional);
    ``skip@l``: the layer removed (zeroed writers), so a prediction can be compared with no layer at all.
    """
    from layerlab.core import arch
    from layerlab.metrics import weights
    from layerlab.metrics.ablation import Intervention, ablate, swap_weights

    mv = arch.view(model)
    L = mv.n_layers
    comps = weights.components_of(model)
    stacks = {c: weights.component_stack(model, c, dtype=next(model.parameters()).dtype) for c in comps}
    ivs = []
    thetas = lag_thetas(stacks, lam=lam)
    for k in ks:
        if not 1 <= k <= L - 1:
            raise ValueError(f"k={k} deepest layers: choose 1..{L - 1} for this {L}-layer model")
        new = predict_layers(stacks, range(L - k, L), mode=mode, thetas=thetas)
        ivs.append(Intervention(f"deepest{k}", L - k, lambda new=new: swap_weights(model, new)))
    for layer in single:
        mv.check_layer(layer)
        new = predict_layers(stacks, [layer], mode="teacher", thetas=thetas)
        real = {c: st[layer] for c, st in stacks.items()}
        rnd = {layer: matched_norm_random(real, seed=seed + layer)}  # row norms of the real layer
        rnd_pred = {layer: matched_norm_random(new[layer], seed=seed + 1000 + layer)}  # the prediction's row norms
        ivs.append(Intervention(f"predicted@{layer}", layer, lambda new=new: swap_weights(model, new)))
        ivs.append(Intervention(f"random@{layer}", layer, lambda rnd=rnd: swap_weights(model, rnd)))
        ivs.append(Intervention(f"randpred@{layer}", layer, lambda rnd=rnd_pred: swap_weights(model, rnd)))
        ivs.append(Intervention(f"skip@{layer}", layer, lambda layer=layer: ablate(model, layer, "skip")))
    return ivs
