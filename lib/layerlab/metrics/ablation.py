"""Layer ablation: operators, a prefix-cached evaluation engine, effect sizes, tiers, activation geometry.

Wietrzykowski, *Anatomical Heterogeneity in Transformer Language Models* (arXiv:2603.19348), finding 2
(critical core L8–11, anti-layers L14/L17); operators and tiers as reconstructed in the project spec
``shared/papers/anatomy.md`` sections 3.2 (ΔNLL, ΔPPL% = 100·(exp ΔNLL − 1)), 3.6 (AB1–AB4), 3.9 (tiers,
ShortGPT Block Influence, Gromov et al. angular distance) and 6 (prefix caching).
Book: anatomy chapter, section "Which layers matter".

All weight edits happen inside context managers that restore the original tensors bit-for-bit.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from layerlab.core import arch, validate
from layerlab.core.residual import capture

#: Ablation operators of spec 3.6: skip (AB1), attention-only / MLP-only skip (AB3),
#: neighbour average (AB2), mean ablation (AB4).
OPERATORS: tuple[str, ...] = ("skip", "skip_attn", "skip_mlp", "neighbour_avg", "mean")
#: The paper's named layers, as printed (indexing not stated: both readings are checked).
PAPER_CORE: tuple[int, ...] = (8, 9, 10, 11)
PAPER_ANTI: tuple[int, ...] = (14, 17)


def paper_layers(numbers: Sequence[int], base: int) -> list[int]:
    """Map the paper's printed layer numbers to 0-based indices under a ``base``-based reading (0 or 1)."""
    if base not in (0, 1):
        raise ValueError(f"base must be 0 or 1, got {base}")
    return [n - base for n in numbers]


# ---------------------------------------------------------------- exact weight edits
@contextlib.contextmanager
def swap_weights(model: torch.nn.Module, new: dict[int, dict[str, Tensor]]) -> Iterator[None]:
    """Temporarily set block weights: ``new[layer][component] = tensor``; restored bit-for-bit on exit."""
    mv = arch.view(model)
    saved: list[tuple[torch.nn.Parameter, Tensor]] = []
    try:
        with torch.no_grad():
            for layer, comps in new.items():
                mv.check_layer(layer)
                params = mv.blocks[layer].weights()
                for comp, value in comps.items():
                    if comp not in params:
                        raise ValueError(f"unknown component {comp!r}: layer {layer} has {sorted(params)}")
                    p = params[comp]
                    if value.shape != p.shape:
                        raise ValueError(f"shape {tuple(value.shape)} for {comp} of layer {layer}; "
                                         f"expected {tuple(p.shape)}")
                    saved.append((p, p.detach().clone()))
                    p.copy_(value.to(p.dtype))
        yield
    finally:
        with torch.no_grad():
            for p, old in reversed(saved):
                p.copy_(old)


@contextlib.contextmanager
def _zero_modules(modules: Sequence[torch.nn.Module]) -> Iterator[None]:
    """Zero weight and bias of the given modules; restored bit-for-bit on exit."""
    saved: list[tuple[Tensor, Tensor]] = []
    try:
        with torch.no_grad():
            for m in modules:
                for name in ("weight", "bias"):
                    t = getattr(m, name, None)
                    if isinstance(t, Tensor):
                        saved.append((t, t.detach().clone()))
                        t.zero_()
        yield
    finally:
        with torch.no_grad():
            for t, old in reversed(saved):
                t.copy_(old)


def neighbour_average(model: torch.nn.Module, layer: int, *, include_norms: bool = False) -> dict[str, Tensor]:
    """AB2 weights for ``layer``: ½(W_{l−1} + W_{l+1}) per component; edge layers copy their one neighbour."""
    mv = arch.view(model)
    mv.check_layer(layer)
    nbrs = [j for j in (layer - 1, layer + 1) if 0 <= j < mv.n_layers]
    out = {}
    for comp in mv.blocks[layer].weights():
        if "norm" in comp and not include_norms:
            continue
        vals = [mv.blocks[j].weights()[comp].detach() for j in nbrs]
        out[comp] = vals[0].clone() if len(vals) == 1 else 0.5 * (vals[0] + vals[1])
    return out


@contextlib.contextmanager
def _mean_ablate(model: torch.nn.Module, layer: int, mean_contrib: Tensor) -> Iterator[None]:
    """AB4: block output := block input + mean contribution (a forward hook, removed on exit)."""
    block = arch.view(model).blocks[layer].block

    def hook(module, args, kwargs, output):  # noqa: ANN001 - torch hook signature
        h_in = args[0] if args else kwargs["hidden_states"]  # [B, T, d]
        new = h_in + mean_contrib.to(device=h_in.device, dtype=h_in.dtype)
        if isinstance(output, tuple):
            return (new, *output[1:])
        return new

    handle = block.register_forward_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def ablate(model: torch.nn.Module, layer: int, operator: str, *, mean_contrib: Tensor | None = None,
           include_norms: bool = False) -> contextlib.AbstractContextManager:
    """Context manager applying one ablation operator (spec 3.6) to ``layer``; exits restore the model exactly.

    skip: zero the residual writers (o_proj and down_proj for Llama) — the block becomes the identity.
    skip_attn / skip_mlp: zero only the attention / MLP writer. neighbour_avg: AB2 weights.
    mean: AB4, needs ``mean_contrib`` [d] (see :func:`mean_contributions`).
    """
    mv = arch.view(model)
    mv.check_layer(layer)
    b = mv.blocks[layer]
    writers = b.residual_writers()  # o / down projections: zero output => zero write (also for Gemma)
    if operator == "skip":
        return _zero_modules([writers["o"], writers["down"]])
    if operator == "skip_attn":
        return _zero_modules([writers["o"]])
    if operator == "skip_mlp":
        return _zero_modules([writers["down"]])
    if operator == "neighbour_avg":
        return swap_weights(model, {layer: neighbour_average(model, layer, include_norms=include_norms)})
    if operator == "mean":
        if mean_contrib is None:
            raise ValueError("operator 'mean' needs mean_contrib: compute it with ablation.mean_contributions()")
        if not isinstance(mean_contrib, Tensor) or tuple(mean_contrib.shape) != (mv.d_model,):
            got = list(mean_contrib.shape) if isinstance(mean_contrib, Tensor) else type(mean_contrib).__name__
            raise ValueError(f"ablate: mean_contrib must be [d] = [{mv.d_model}] (one layer's row of "
                             f"mean_contributions(), e.g. mc[{layer}]), got {got}")
        return _mean_ablate(model, layer, mean_contrib)
    raise ValueError(f"unknown operator {operator!r}: choose one of {OPERATORS}")


@torch.no_grad()
def mean_contributions(model: torch.nn.Module, input_ids: Tensor, *, batch_size: int = 8) -> Tensor:
    """Mean block contribution h_l − h_{l−1} over all calibration tokens: ``[L, d]`` (AB4).

    input_ids: [N, T] calibration windows (N, T >= 1, inside the vocabulary).

    Wietrzykowski (arXiv:2603.19348); AB4 of spec anatomy.md section 3.6.
    """
    validate.model_ids(model, input_ids, where="mean_contributions")
    device = next(model.parameters()).device
    total, count = None, 0
    for i in range(0, input_ids.shape[0], batch_size):
        ids = input_ids[i:i + batch_size].to(device)  # [B, T] on the model's device
        with capture(model, points=("block_in", "block_out")) as cap:
            model(input_ids=ids, use_cache=False)
        diff = (cap["block_out"] - cap["block_in"]).to(torch.float64)  # [L, B, T, d]
        s = diff.sum(dim=(1, 2))
        total = s if total is None else total + s
        count += ids.shape[0] * ids.shape[1]
    return (total / count).to(next(model.parameters()).dtype)


# ---------------------------------------------------------------- evaluation engine
@dataclass(frozen=True)
class Intervention:
    """A named model edit: ``context()`` returns a context manager; ``start`` is the lowest layer it changes."""

    name: str
    start: int
    context: Callable[[], contextlib.AbstractContextManager]


def window_nll(logits: Tensor, input_ids: Tensor) -> Tensor:
    """Mean next-token NLL per window (nats): logits [B, T, V], ids [B, T] -> [B] (float64).

    Unchecked (an inner loop of :func:`evaluate_interventions`, which validates its windows once)."""
    lp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # [B, T-1, V]
    nll = -lp.gather(-1, input_ids[:, 1:, None])[..., 0]  # [B, T-1]
    return nll.to(torch.float64).mean(dim=1)


def token_nll(logits: Tensor, input_ids: Tensor) -> Tensor:
    """Next-token NLL of every scored token (nats): logits [B, T, V], ids [B, T] -> [B·(T−1)] (float64).

    NLL_t = −log softmax(logits_t)[x_{t+1}] (spec 3.2); needs T >= 2 and every id < V.
    """
    validate.nll_inputs(logits, input_ids, where="token_nll")
    return _token_nll(logits, input_ids)


def _token_nll(logits: Tensor, input_ids: Tensor) -> Tensor:
    lp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return (-lp.gather(-1, input_ids[:, 1:, None])[..., 0]).to(torch.float64).reshape(-1)


@dataclass
class EvalResult:
    """Per-window mean NLL of the clean model and of each intervention, plus clean-run geometry."""

    base: np.ndarray                      # [N]
    nll: dict[str, np.ndarray]            # name -> [N]
    n_tokens: int                         # scored tokens
    block_influence: np.ndarray | None = None   # [L]
    angular_distance: np.ndarray | None = None  # [L]
    groups: np.ndarray | None = None  # bootstrap unit of each entry (sentence id for token-level results)
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready dict (for ``layerlab.core.cache.cached_json``)."""
        def f(x):
            return None if x is None else np.asarray(x).tolist()
        return {"base": f(self.base), "nll": {k: f(v) for k, v in self.nll.items()}, "n_tokens": self.n_tokens,
                "block_influence": f(self.block_influence), "angular_distance": f(self.angular_distance),
                "groups": f(self.groups), "meta": self.meta}

    @classmethod
    def from_dict(cls, d: dict) -> EvalResult:
        def f(x):
            return None if x is None else np.asarray(x)
        return cls(base=f(d["base"]), nll={k: f(v) for k, v in d["nll"].items()}, n_tokens=int(d["n_tokens"]),
                   block_influence=f(d["block_influence"]), angular_distance=f(d["angular_distance"]),
                   groups=f(d["groups"]), meta=d.get("meta", {}))


def block_geometry(x_in: Tensor, x_out: Tensor) -> tuple[Tensor, Tensor]:
    """Per-token ShortGPT Block Influence 1 − cos(x_l, x_{l+1}) ``[L, B, T]`` (arXiv:2403.03853) and the
    last-token angle arccos cos(x_l, x_{l+1}) ``[L, B]`` in radians (/π: Gromov et al.'s angular distance,
    arXiv:2403.17887), float64, from block inputs and outputs ``[L, B, T, d]``."""
    cos = torch.nn.functional.cosine_similarity(x_in.double(), x_out.double(), dim=-1)  # [L, B, T]
    return 1 - cos, torch.arccos(cos[:, :, -1].clamp(-1, 1))


@torch.no_grad()
def evaluate_interventions(model: torch.nn.Module, input_ids: Tensor, interventions: Sequence[Intervention], *,
                           batch_size: int = 8, prefix_cache: bool = True, geometry: bool = False,
                           points: Sequence[str] = (),
                           on_batch: Callable[[int, Tensor, Tensor, Mapping[str, Tensor]], None] | None = None,
                           _token_level: bool = False) -> EvalResult:
    """Evaluate many interventions on the same windows; ``input_ids`` [N, T] with N >= 1, T >= 2 (or a
    list of 1-D sentences of >= 2 tokens each, scored per token).

    With ``prefix_cache`` the clean block inputs of each batch are captured once and every intervention
    runs only blocks ``start..L−1`` plus the unembedding (``layerlab.core.arch.suffix_forward``): exact,
    because an edit of layers ≥ start cannot change h_0..h_{start−1} (spec 6). Otherwise every intervention
    is a full forward pass (the naive reference, bit-identical).
    With ``geometry`` also accumulates ShortGPT Block Influence BI_l = 1 − E_t cos(x_l, x_{l+1})
    (arXiv:2403.03853) and the last-token angular distance (1/π)·arccos cos(x_l, x_{l+1}) (arXiv:2403.17887).
    ``on_batch(start, ids, logits, capture)`` is called after each batch's clean forward with the capture
    of ``block_in``, ``block_out`` and the extra ``points`` (``layerlab.core.residual.POINTS``), so a caller
    can read the clean pass (lens, norms, members) without a second forward; it does not change the result.
    """
    if isinstance(input_ids, (list, tuple)):
        if not input_ids:
            raise ValueError("evaluate_interventions: got an empty list of sentences; pass at least one")
        for i, ids in enumerate(input_ids):
            validate.model_ids(model, torch.as_tensor(ids).reshape(1, -1), where="evaluate_interventions",
                               name=f"sentence {i}", min_tokens=2)
        return _evaluate_sentences(model, input_ids, interventions, batch_size=batch_size,
                                   prefix_cache=prefix_cache, geometry=geometry)
    if not _token_level:
        validate.model_ids(model, input_ids, where="evaluate_interventions", min_tokens=2)
    mv = arch.view(model)
    names = [iv.name for iv in interventions]
    if len(set(names)) != len(names):
        raise ValueError("intervention names must be unique")
    for iv in interventions:
        mv.check_layer(iv.start)
    base, out = [], {n: [] for n in names}
    bi_sum = torch.zeros(mv.n_layers, dtype=torch.float64)
    ang_sum = torch.zeros(mv.n_layers, dtype=torch.float64)
    n_tok = n_last = 0
    device = next(model.parameters()).device  # inputs follow the model; results come back to the CPU
    for i in range(0, input_ids.shape[0], batch_size):
        ids = input_ids[i:i + batch_size].to(device)  # [B, T]
        with capture(model, points=("block_in", "block_out", *points)) as cap:
            logits = model(input_ids=ids, use_cache=False).logits
        nll_fn = _token_nll if _token_level else window_nll
        base.append(nll_fn(logits, ids).cpu())
        if on_batch is not None:
            on_batch(i, ids, logits, cap)
        if geometry:
            bi, angle = block_geometry(cap["block_in"], cap["block_out"])
            bi_sum += bi.sum(dim=(1, 2)).cpu()
            ang_sum += (angle.sum(dim=1) / math.pi).cpu()
            n_tok += ids.numel()
            n_last += ids.shape[0]
        block_in = cap["block_in"] if prefix_cache else None
        del cap
        for iv in interventions:
            with iv.context():
                if prefix_cache:
                    lg = arch.suffix_forward(model, block_in[iv.start], iv.start)
                else:
                    lg = model(input_ids=ids, use_cache=False).logits
            out[iv.name].append(nll_fn(lg, ids).cpu())
    res = EvalResult(base=torch.cat(base).numpy(), nll={n: torch.cat(v).numpy() for n, v in out.items()},
                     n_tokens=int(input_ids.shape[0] * (input_ids.shape[1] - 1)),
                     meta={"windows": int(input_ids.shape[0]), "window": int(input_ids.shape[1]),
                           "prefix_cache": prefix_cache})
    if geometry:
        res.block_influence = (bi_sum / n_tok).numpy()
        res.angular_distance = (ang_sum / n_last).numpy()
    return res


def _evaluate_sentences(model: torch.nn.Module, sentences: Sequence[Tensor], interventions: Sequence[Intervention],
                        *, batch_size: int, prefix_cache: bool, geometry: bool) -> EvalResult:
    """Token-level variant for variable-length sequences (e.g. the 10-sentence protocol): up to ``batch_size``
    sequences of similar length run as one batch, right-padded, keeping each one's own T_i − 1 next-token NLLs
    (exact: under the causal mask no position attends to a later one; tested on every family). Entries are
    per-token NLLs in sentence order, ``groups`` the sequence index (a grouped bootstrap resamples sentences;
    the mean is the pooled token mean, spec 3.2). Geometry: BI pooled over real tokens, angle at each last token."""
    seqs = [torch.as_tensor(s).reshape(-1) for s in sentences]
    lens = [int(s.numel()) for s in seqs]
    parts: dict[int, dict[str, np.ndarray]] = {}  # sentence -> {"" (clean) or intervention name: [T_i − 1]}
    sums = torch.zeros(2, arch.view(model).n_layers, dtype=torch.float64)  # [BI summed over tokens, angle/π]
    order = sorted(range(len(seqs)), key=lambda i: lens[i])  # similar lengths share a batch (less padding)
    for c in range(0, len(order), batch_size):
        chunk = order[c:c + batch_size]
        n_of = torch.tensor([lens[i] for i in chunk])  # [B]
        ids = torch.stack([torch.cat([seqs[i], seqs[i][-1:].expand(int(n_of.max()) - lens[i])]) for i in chunk])
        geo = functools.partial(_padded_geometry, n_of=n_of, sums=sums) if geometry else None
        r = evaluate_interventions(model, ids, interventions, batch_size=len(chunk), prefix_cache=prefix_cache,
                                   on_batch=geo, _token_level=True)  # ids: [B, T] right-padded
        scored = (torch.arange(1, ids.shape[1])[None, :] < n_of[:, None]).reshape(-1).numpy()  # real targets
        cut = np.cumsum([lens[i] - 1 for i in chunk])[:-1]
        for name, v in [("", r.base), *r.nll.items()]:
            for i, part in zip(chunk, np.split(v[scored], cut)):
                parts.setdefault(i, {})[name] = part
    every = [parts[i] for i in range(len(seqs))]
    bi, ang = ((sums[0] / sum(lens)).numpy(), (sums[1] / len(seqs)).numpy()) if geometry else (None, None)
    return EvalResult(base=np.concatenate([p[""] for p in every]), n_tokens=sum(n - 1 for n in lens),
                      nll={iv.name: np.concatenate([p[iv.name] for p in every]) for iv in interventions},
                      groups=np.concatenate([np.full(n - 1, i) for i, n in enumerate(lens)]),
                      block_influence=bi, angular_distance=ang)


def _padded_geometry(_start: int, _ids: Tensor, _logits: Tensor, cap: Mapping[str, Tensor], *, n_of: Tensor,
                     sums: Tensor) -> None:
    """Add a right-padded batch's BI over its real tokens (``n_of`` [B]) and last-token angle/π to ``sums`` [2, L]."""
    x_in, x_out = cap["block_in"], cap["block_out"]  # [L, B, T, d]
    bi, _ = block_geometry(x_in, x_out)  # [L, B, T]
    sums[0].add_((bi.cpu() * (torch.arange(x_in.shape[2])[None, :] < n_of[:, None])).sum(dim=(1, 2)))
    last = (torch.arange(x_in.shape[1], device=x_in.device), (n_of - 1).to(x_in.device))  # last real positions
    _, angle = block_geometry(x_in[:, last[0], last[1], None], x_out[:, last[0], last[1], None])  # [L, B]
    sums[1].add_(angle.sum(dim=1).cpu() / math.pi)


def sweep_interventions(model: torch.nn.Module, operators: Sequence[str], layers: Sequence[int] | None = None, *,
                        mean_contrib: Tensor | None = None) -> list[Intervention]:
    """One :class:`Intervention` per (operator, layer), named ``"{operator}@{layer}"``.

    Operators of spec anatomy.md section 3.6 (Wietrzykowski (arXiv:2603.19348)).
    """
    mv = arch.view(model)
    layers = list(range(mv.n_layers)) if layers is None else list(layers)
    for op in operators:
        if op not in OPERATORS:
            raise ValueError(f"unknown operator {op!r}: choose one of {OPERATORS}")
        if op == "mean" and mean_contrib is None:
            raise ValueError("operator 'mean' needs mean_contrib: compute it with ablation.mean_contributions()")
    ivs = []
    for op in operators:
        for layer in layers:
            mv.check_layer(layer)
            mc = mean_contrib[layer] if op == "mean" else None
            # neighbour_avg only rewrites layer l's own tensors, so the prefix is intact for every operator
            ivs.append(Intervention(f"{op}@{layer}", layer,
                                    lambda op=op, layer=layer, mc=mc: ablate(model, layer, op, mean_contrib=mc)))
    return ivs


# ---------------------------------------------------------------- effect sizes and tiers
@dataclass(frozen=True)
class Tiers:
    """Tier thresholds (spec 3.9): critical if ΔPPL% > critical_pct with CI low > 0; anti if the ΔNLL CI is
    entirely below 0; redundant if the CI contains 0 or ΔPPL% < redundant_pct; otherwise intermediate."""

    critical_pct: float = 100.0
    redundant_pct: float = 1.0

    def classify(self, dnll: float, low: float, high: float) -> str:
        dppl = 100 * math.expm1(dnll)
        if high < 0:
            return "anti"
        if dppl > self.critical_pct and low > 0:
            return "critical"
        if low <= 0 <= high or dppl < self.redundant_pct:
            return "redundant"
        return "intermediate"


def effect(base: np.ndarray, other: np.ndarray, *, groups: np.ndarray | None = None, n_boot: int = 2000,
           seed: int = 0) -> dict[str, float]:
    """ΔNLL (nats; mean over windows of equal length = pooled token mean) with a paired bootstrap 95% CI
    over windows (or document ``groups``), and ΔPPL% = 100·(exp ΔNLL − 1) with the transformed CI (spec 3.2)."""
    from layerlab.report.stats import bootstrap_ci

    # the paired bootstrap of a mean difference is the bootstrap of the per-unit differences
    diff = np.asarray(other, dtype=np.float64) - np.asarray(base, dtype=np.float64)
    ci = bootstrap_ci(diff, n_boot=n_boot, seed=seed, groups=groups)
    return {"dnll": float(ci.estimate), "dnll_low": float(ci.low), "dnll_high": float(ci.high),
            "dppl_pct": 100 * math.expm1(ci.estimate), "dppl_low": 100 * math.expm1(ci.low),
            "dppl_high": 100 * math.expm1(ci.high)}


def effect_table(res: EvalResult, *, tiers: Tiers = Tiers(), groups: np.ndarray | None = None,
                 n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """One row per intervention named ``"{op}@{layer}"`` (others get layer −1): op, layer, effects, tier.
    Bootstrap units: ``groups`` if given, else ``res.groups`` (sentences), else windows.

    ΔNLL, ΔPPL% and tiers of spec anatomy.md sections 3.2 and 3.9 (Wietrzykowski (arXiv:2603.19348)).
    """
    groups = res.groups if groups is None else groups
    rows = []
    for name, v in res.nll.items():
        op, _, layer = name.partition("@")
        e = effect(res.base, v, groups=groups, n_boot=n_boot, seed=seed)
        rows.append({"op": op, "layer": int(layer) if layer.isdigit() else -1, **e,
                     "tier": tiers.classify(e["dnll"], e["dnll_low"], e["dnll_high"])})
    return pd.DataFrame(rows)


def rank_agreement(profile: pd.DataFrame, res: EvalResult, *, seed: int = 0) -> pd.DataFrame:
    """Spearman correlations (with CI) between operators' ΔNLL profiles and with BI / angular distance."""
    from layerlab.report.stats import spearman

    wide = profile.pivot(index="layer", columns="op", values="dnll").sort_index()
    cols = {op: wide[op].to_numpy() for op in wide.columns}
    if res.block_influence is not None:
        cols["block_influence"] = res.block_influence[wide.index.to_numpy()]
        cols["angular_distance"] = res.angular_distance[wide.index.to_numpy()]
    names, rows = list(cols), []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            c = spearman(cols[a], cols[b], seed=seed)
            rows.append({"a": a, "b": b, "rho": c.r, "low": c.low, "high": c.high, "p": c.p})
    return pd.DataFrame(rows)
