"""The layer atlas's run: preset -> :class:`AtlasResult` (issue 18).

Loads the model, cuts document-respecting test windows, measures every lens on every requested layer from
shared passes (:mod:`layerlab.chapters.atlas.measure`), each piece cached on its own (one batch of windows,
one Jacobian sample, the weights), so an interrupted run resumes where it stopped; then the statistics of
:mod:`layerlab.chapters.atlas.analysis`. The whole result is cached too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

import layerlab.chapters.atlas.analysis as an
import layerlab.chapters.atlas.measure as measure
from layerlab.chapters.atlas.presets import AtlasPreset
from layerlab.core.arch import view
from layerlab.core.cache import cached
from layerlab.core.protocol import Provenance, provenance
from layerlab.data.corpora import TokenWindows, token_windows
from layerlab.data.fetch import data_fingerprint

__all__ = ["AtlasResult", "atlas_windows", "check_layers", "downloaded_only", "load", "recovery_windows",
           "run"]

#: what the cached atlas depends on: this module (and, transitively, analysis and measure) and the model loader
_SOURCES = (__name__, "layerlab.core.models")

MEASURE_FIELDS = ("model", "tiny_layers", "window", "tokens", "sources", "batch_size", "lens_positions",
                  "member_positions", "member_chunk", "jacobian_samples", "coupling_k", "seed", "device", "dtype")
RECOVERY_FIELDS = ("recovery_steps", "recovery_eval_windows", "recovery_batch",
                   "recovery_window", "recovery_sigma", "recovery_lr")


@dataclass(frozen=True, kw_only=True)
class AtlasResult:
    """Every lens on every measured layer of one model.

    ``table``: long (layer, lens, family, estimate, low, high; 95% CIs over documents where the lens is a
    statistic); ``agreement``: one row per lens pair (ρ, CI, permutation and Holm p, verdict, sentence);
    ``tiers``: layer -> tier (1 = most important by skip); ``numbers``: the values the prose glues
    (prefix ``atlas``), including the generated headline sentences.
    """

    provenance: Provenance
    preset: AtlasPreset
    n_layers: int
    layers: list[int]
    table: pd.DataFrame
    agreement: pd.DataFrame
    tiers: pd.DataFrame
    numbers: dict[str, Any]

    def wide(self) -> pd.DataFrame:
        """Layers x lenses of the estimates."""
        return an.wide(self.table)

    def compact(self) -> pd.DataFrame:
        """The per-layer table the CLI prints: 0- and 1-based layer, a few lenses, the tier."""
        w = self.wide()
        cols = [c for c in ("skip", "neighbour_avg", "lens_drop_recompute", "block_influence", "coupling",
                            "mlp_div", "weight_r2", "noise_damage", "recovery") if c in w.columns]
        out = w[cols].copy()
        out.insert(0, "layer_1b", out.index + 1)
        out["tier"] = self.tiers.set_index("layer").tier
        return out

    def matrix(self) -> pd.DataFrame:
        """The symmetric Spearman ρ matrix of the lenses (diagonal 1)."""
        names = list(self.wide().columns)
        m = pd.DataFrame(np.eye(len(names)), index=names, columns=names)
        for r in self.agreement.itertuples():
            m.loc[r.a, r.b] = m.loc[r.b, r.a] = r.rho
        return m


FAMILY_PREFIXES = ("family:", "family-init:")
"""``family:<member>`` is a trained member of the book's family (of the preset's profile);
``family-init:<member>`` its random-init twin (the same architecture and seed before any update)."""


def family_member(P: AtlasPreset):
    """The :class:`~layerlab.training.family.FamilyMember` named by ``P.model`` (``family:<name>``); an
    untrained family or an unknown name fails with one message naming the fix or the members."""
    from layerlab.training.family import get_family

    name = P.model.split(":", 1)[1]
    try:
        fam = get_family(P.profile, train_missing=False)
    except FileNotFoundError as e:
        raise ValueError(f"{e} (or run `python -m layerlab family {P.profile}`)") from None
    hit = [m for m in fam if m.name == name]
    if not hit:
        raise ValueError(f"no member {name!r} in the {P.profile} family; members: {', '.join(m.name for m in fam)}")
    return hit[0]


def load(P: AtlasPreset):
    """(model, tokenizer) of the preset on its device and dtype (tiny-* models get ``tiny_layers`` blocks;
    ``family:``/``family-init:`` names load a member of the trained family or its random-init twin)."""
    from layerlab.core.models import byte_tokenizer, load_model, tiny_model

    if P.model.startswith(FAMILY_PREFIXES):
        m = family_member(P)
        model, tok = m.load(random_init=P.model.startswith("family-init:"), dtype=P.torch_dtype)
    elif P.model.startswith("tiny-") and P.tiny_layers:
        model, tok = tiny_model(P.model[5:], seed=P.seed, dtype=P.torch_dtype,
                                num_hidden_layers=P.tiny_layers), byte_tokenizer()
    else:
        model, tok = load_model(P.model, seed=P.seed, dtype=P.torch_dtype)
    return model.to(P.device).eval(), tok


def check_layers(layers: Any, n_layers: int) -> list[int]:
    """The requested layers (None: all), sorted and unique; out-of-range ones fail with one clear message."""
    if layers is None:
        return list(range(n_layers))
    out = sorted({int(x) for x in layers})
    bad = [x for x in out if not 0 <= x < n_layers]
    if bad or not out:
        raise ValueError(f"layers {bad or 'none'} out of range: this model has layers 0..{n_layers - 1} (0-based)")
    return out


def check_tokens(P: AtlasPreset) -> None:
    if P.tokens < P.window - 1:
        raise ValueError(f"--tokens {P.tokens} is below one window: the atlas needs at least {P.window - 1} scored "
                         f"tokens (one window of {P.window} ids)")
    if P.recovery_steps < 0 or (P.recovery_steps and (min(P.recovery_eval_windows, P.recovery_batch) < 1
                                                      or P.recovery_window < 2)):
        raise ValueError(f"recovery needs recovery_steps >= 0 (0: no recovery lens), recovery_eval_windows and "
                         f"recovery_batch >= 1 and recovery_window >= 2; got {P.recovery_steps}, "
                         f"{P.recovery_eval_windows}, {P.recovery_batch}, {P.recovery_window}")


def recovery_windows(tokenizer, P: AtlasPreset) -> TokenWindows:
    """The fine-tuning windows of the recovery lens: ``recovery_steps`` x ``recovery_batch`` windows of
    ``recovery_window`` ids from the validation split (documents the atlas's test windows never include), in a
    seeded order."""
    w = token_windows(tokenizer, "validation", window=P.recovery_window, seed=P.seed, sources=tuple(P.sources))
    if len(w) == 0:
        raise ValueError(f"the validation split holds no window of {P.recovery_window} ids for the recovery lens: "
                         "lower recovery_window, or set recovery_steps=0")
    n = min(len(w), P.recovery_steps * P.recovery_batch)
    pick = np.random.default_rng(P.seed).permutation(len(w))[:n]
    return w.subset(sorted(int(i) for i in pick))


def _family_key(P: AtlasPreset) -> dict:
    """What identifies a family member's weights: its training record (the family cache entry)."""
    if not P.model.startswith(FAMILY_PREFIXES):
        return {}
    m = family_member(P)
    return {"family_entry": str(m.run_dir.parent.name), "member": m.name, "steps": m.steps}


def run(preset: AtlasPreset, *, progress: bool | None = None) -> AtlasResult:
    """The atlas for ``preset`` (cached whole; the measured pieces are cached one by one).
    ``progress``: tqdm bars (None: only on a terminal)."""
    check_tokens(preset)
    key = {"preset": dataclasses.asdict(preset), "data": data_fingerprint(), **_family_key(preset)}
    return cached("atlas-result", key, lambda: _compute(preset, progress), sources=_SOURCES)


def _ids_hash(ids: torch.Tensor) -> str:
    return hashlib.sha256(ids.cpu().numpy().tobytes()).hexdigest()[:16]


def _bar(it, total: int, desc: str, progress: bool | None):
    from tqdm import tqdm

    return tqdm(it, total=total, desc=desc, disable=None if progress is None else not progress, leave=False)


def _piece(kind: str, P: AtlasPreset, extra: dict, compute: Callable[[], dict]) -> dict:
    key = {"measure": {f: getattr(P, f) for f in MEASURE_FIELDS}, "data": data_fingerprint(), **_family_key(P),
           **extra}
    return cached(kind, key, compute, sources=_SOURCES)


def measure_all(P: AtlasPreset, model, windows: TokenWindows, layers: list[int], *,
                train: TokenWindows | None = None, progress: bool | None = None) -> dict[str, np.ndarray]:
    """All pieces, concatenated: per-window arrays along the window axis, Jacobian samples along axis 0, and
    per measured layer the recovery lens when ``train`` (:func:`recovery_windows`) is given."""
    ids = windows.input_ids.to(P.device)
    T = ids.shape[1]
    batches = []
    starts = range(0, ids.shape[0], P.batch_size)
    for b, s in _bar(enumerate(starts), len(starts), "atlas: shared passes", progress):
        x = ids[s:s + P.batch_size]
        lp = measure.lens_positions(T, P.lens_positions, P.seed + b)
        mp = measure.lens_positions(T, P.member_positions, P.seed + 10_000 + b)
        def compute(x=x, lp=lp, mp=mp) -> dict:
            return measure.batch_pieces(model, x, layers, lens_pos=lp.to(P.device), member_pos=mp.to(P.device),
                                        member_chunk=P.member_chunk)

        batches.append(_piece("atlas-batch", P, {"ids": _ids_hash(x), "layers": layers}, compute))
    out: dict[str, np.ndarray] = {}
    for k in batches[0]:
        axis = 0 if batches[0][k].ndim == 1 or k.startswith(("member_", "summaries")) else 1
        out[k] = torch.cat([p[k] for p in batches], dim=axis).cpu().numpy()
    jl = sorted({j for layer in layers for j in (layer - 1, layer, layer + 1) if 0 <= j < view(model).n_layers})
    samples = jacobian_windows(windows, P.jacobian_samples)
    jac = []
    for w in _bar(samples, len(samples), "atlas: Jacobians", progress):
        x = ids[w]
        jac.append(_piece("atlas-jacobian", P, {"ids": _ids_hash(x), "layers": jl}, lambda x=x: measure.jacobian_piece(
            model, x, T - 1, jl, k=P.coupling_k, seed=P.seed)))
    pick = [jl.index(layer) for layer in layers]
    for k in jac[0]:
        out[k] = torch.stack([j[k] for j in jac]).numpy()[:, pick]
    wt = _piece("atlas-weights", P, {}, lambda: measure.weight_piece(model))
    out.update({k: v.numpy() for k, v in wt.items()})
    out["jacobian_windows"] = np.asarray(samples)
    if train is not None and P.recovery_steps > 0:
        out.update(_recovery(P, model, ids[jacobian_windows(windows, P.recovery_eval_windows)],
                             train.input_ids.to(P.device), layers, progress))
    return out


def _recovery(P: AtlasPreset, model, eval_ids: torch.Tensor, train_ids: torch.Tensor, layers: list[int],
              progress: bool | None) -> dict[str, np.ndarray]:
    """The recovery pieces of every measured layer (:func:`measure.recovery_piece`: the noise damage, the damage
    left after the fine-tune and the control's drift), one cached piece per layer (so a run resumes between them).
    The baseline NLL and the blocks' clean inputs on the evaluation and training windows are computed once, for
    every layer, and only if some layer is not cached."""
    from layerlab.metrics.recovery import CleanInputs, baseline_nll

    extra = {"recovery": {f: getattr(P, f) for f in RECOVERY_FIELDS}, "eval": _ids_hash(eval_ids),
             "train": _ids_hash(train_ids)}

    @functools.cache
    def shared() -> tuple[float, CleanInputs]:  # once, and only when some layer is not cached
        return (baseline_nll(model, eval_ids, eval_batch_size=eval_ids.shape[0]),
                CleanInputs.for_runs(model, layers, train_ids=train_ids, eval_ids=eval_ids, steps=P.recovery_steps,
                                     batch_size=P.recovery_batch, eval_batch_size=eval_ids.shape[0], seed=P.seed))

    def piece(layer: int) -> dict:
        base, clean = shared()
        return measure.recovery_piece(model, layer, train_ids=train_ids, eval_ids=eval_ids, base_nll=base,
                                      sigma=P.recovery_sigma, lr=P.recovery_lr, steps=P.recovery_steps,
                                      batch_size=P.recovery_batch, seed=P.seed, clean=clean)

    got = [_piece("atlas-recovery", P, {**extra, "layer": layer}, lambda layer=layer: piece(layer))
           for layer in _bar(layers, len(layers), "atlas: recovery", progress)]
    return {k: np.array([float(g[k]) for g in got]) for k in got[0]}


def atlas_windows(tokenizer, P: AtlasPreset) -> TokenWindows:
    """The atlas's test windows: as many as ``P.tokens`` scored tokens need, spread over documents (one window
    from each document, in a seeded document order, before any document gives a second), so that every
    interval is over as many documents as the budget allows. The cpu preset's 8 windows of 128 ids come
    from 8 different documents."""
    w = token_windows(tokenizer, "test", window=P.window, seed=P.seed, sources=tuple(P.sources))
    need = min(len(w), max(1, math.ceil(P.tokens / (P.window - 1))))
    rng = np.random.default_rng(P.seed)
    docs = list(dict.fromkeys(w.doc_ids))
    docs = [docs[i] for i in rng.permutation(len(docs))]
    of = {d: [i for i, x in enumerate(w.doc_ids) if x == d] for d in docs}
    of = {d: [ix[j] for j in rng.permutation(len(ix))] for d, ix in of.items()}  # seeded order inside a document
    pick: list[int] = []
    rank = 0
    while len(pick) < need:
        pick += [of[d][rank] for d in docs if rank < len(of[d])][:need - len(pick)]
        rank += 1
    return w.subset(sorted(pick))


def jacobian_windows(windows: TokenWindows, n: int) -> list[int]:
    """``n`` window indices, the first window of each distinct document first (then the rest, in order)."""
    first = list(dict.fromkeys(windows.doc_ids))
    idx = [windows.doc_ids.index(d) for d in first]
    rest = [i for i in range(len(windows)) if i not in idx]
    return (idx + rest)[:n]


@contextlib.contextmanager
def downloaded_only(name: str) -> Iterator[None]:
    """``with downloaded_only(hub_id): ...``: a hub model that this block downloads is deleted from the hub
    cache when the block completes (:func:`layerlab.core.hub.release`: kept on an error, or with
    ``LAYERLAB_KEEP_HUB=1``), so the gpu profile's four hub models never sit on disk together; a model that
    was in the cache before (a user's own download) is left there. Offline names, family members and local
    folders are not hub ids and are never touched."""
    from layerlab.core import hub

    if hub.is_hub_id(name) and not hub.repo_dir(name).exists():
        with hub.release(name):
            yield
    else:
        yield


def _compute(P: AtlasPreset, progress: bool | None) -> AtlasResult:
    with downloaded_only(P.model):
        return _measure(P, progress)


def _measure(P: AtlasPreset, progress: bool | None) -> AtlasResult:
    model, tok = load(P)
    L = view(model).n_layers
    layers = check_layers(P.layers, L)
    windows = atlas_windows(tok, P)
    train = recovery_windows(tok, P) if P.recovery_steps > 0 else None
    p = measure_all(P, model, windows, layers, train=train, progress=progress)
    docs = np.unique(np.asarray(windows.doc_ids), return_inverse=True)[1]
    member_docs = np.repeat(docs, p["member_bias"].shape[0] // len(docs)) if "member_bias" in p else None
    jac_docs = docs[p["jacobian_windows"]]
    table = an.layer_table(p, layers, docs, member_docs, jac_docs)
    w = an.wide(table)
    agree = an.agreement(w, n_boot=P.n_boot, n_perm=P.n_perm, seed=P.seed)
    tiers = an.tiers(w, P.n_tiers)
    numbers = _numbers(P, L, layers, windows, w, agree, tiers, omitted=measure.omitted_lenses(model))
    from layerlab.core.models import model_label

    prov = provenance("atlas", P, model=model_label(P.model), tokens=windows.fingerprint(), seed=P.seed)
    return AtlasResult(provenance=prov, preset=P, n_layers=L, layers=layers, table=table, agreement=agree,
                       tiers=tiers, numbers=numbers)


def _rank(w: pd.DataFrame, lens: str, layer: int) -> str:
    if lens not in w.columns:
        return "—"
    r = w[lens].rank(ascending=False)
    return "—" if not np.isfinite(r.get(layer, np.nan)) else f"{int(r[layer])}/{len(w)}"


def _numbers(P: AtlasPreset, L: int, layers: list[int], windows: TokenWindows, w: pd.DataFrame,
             agree: pd.DataFrame, tiers: pd.DataFrame, *, omitted: str = "") -> dict[str, Any]:
    """Glued values: sizes, agreement counts, the tiers, one generated sentence per paper's headline and why
    lenses are missing (``omitted``, "" when none is)."""
    top = {c: int(w[c].idxmax()) for c in ("skip", "coupling", "mlp_div") if c in w.columns and w[c].notna().any()}
    heads = {
        "anatomy": ("skip", "the layer whose removal costs most (skip ablation)", ("coupling", "mlp_div")),
        "coupling": ("coupling", "the layer most coupled to its neighbours beyond the null", ("skip", "mlp_div")),
        "diversity": ("mlp_div", "the layer with the most diverse MLP member", ("skip", "coupling")),
    }
    sentences = {}
    for paper, (lens, what, others) in heads.items():
        if lens in top:
            t = top[lens]
            sentences[f"headline_{paper}"] = (f"{what[0].upper()}{what[1:]} is layer {t} (1-based {t + 1}); it ranks "
                                              f"{_rank(w, others[0], t)} by {others[0]} and "
                                              f"{_rank(w, others[1], t)} by {others[1]}.")
    tier_of = tiers.set_index("layer").tier
    from layerlab.core.models import model_label

    return {"model": model_label(P.model), "L": L, "n_measured": len(layers), "n_tokens": int(windows.n_tokens),
            "n_windows": len(windows), "n_docs": len(set(windows.doc_ids)), "n_lenses": w.shape[1],
            "n_pairs": len(agree), "n_agree": int((agree.verdict == "agree").sum()),
            "n_opposite": int((agree.verdict == "opposite").sum()), "omitted": omitted,
            "tiers": "; ".join(f"tier {t}: layers {', '.join(str(x) for x in tier_of[tier_of == t].index)}"
                               for t in sorted(tier_of.unique())),
            **{f"top_{k}": v for k, v in top.items()}, **sentences}
