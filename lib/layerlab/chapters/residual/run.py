"""Chapter 1, "Reading the residual stream": the run, preset -> :class:`ResidualResult`.

One pass over held-out windows for the trained model and one for its random-init twin
(:func:`layerlab.chapters.residual.analysis.analyse`): held-out perplexity with CIs, the recompute
lens (nostalgebraist 2020) and the frozen lens (Kamigaito et al. 2025, Eq. 1) at every depth, and the
residual norm and relative block update by depth. The result holds every table, figure input and
number the notebook shows; it is cached whole (``layerlab.core.cache.cached``) on top of the cached
forward passes, so an unchanged rebuild neither reruns the model nor the bootstraps.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from layerlab.chapters.residual.analysis import LensResult, analyse
from layerlab.chapters.residual.presets import ResidualPreset
from layerlab.core import hub, models
from layerlab.core.cache import cached
from layerlab.core.protocol import Provenance, provenance
from layerlab.data import corpora
from layerlab.data.corpora import TokenWindows
from layerlab.report.inference import mean_effect

__all__ = ["DocumentUnits", "Interval", "ResidualResult", "run"]


@dataclass(frozen=True, kw_only=True)
class Interval:
    """An estimate with its 95% CI (the result says which interval: cluster bootstrap or t-interval)."""

    estimate: float
    low: float
    high: float

    @classmethod
    def of(cls, ci: Any) -> Interval:
        """From a :class:`layerlab.report.stats.CI` (estimate, low, high) or ``Corr`` (r, low, high, p)."""
        return cls(estimate=float(ci[0]), low=float(ci[1]), high=float(ci[2]))


@dataclass(frozen=True, kw_only=True)
class DocumentUnits:
    """Per-document summaries: the resampling unit of the chapter's claims.

    Windows cut from one document share its text, so the claims are tested over documents, not over
    windows or positions. Curves [D, L+1] are means over the document's sampled positions at each depth;
    ``gap`` [D_r] is the mean per-token NLL of the random-init twin minus the trained model's on the
    shared windows of each document (paired: same tokens)."""

    documents: list[str]
    lens_recompute: np.ndarray
    lens_frozen: np.ndarray
    norm: np.ndarray
    documents_random: list[str]
    lens_recompute_random: np.ndarray
    lens_frozen_random: np.ndarray
    norm_random: np.ndarray
    gap: np.ndarray


def _per_document(res: LensResult, doc_of_window: np.ndarray) -> tuple[list[str], dict[str, np.ndarray]]:
    """Mean lens NLL and norm curves per document ([D, L+1] each) from per-position arrays."""
    pos_doc = doc_of_window[res.window_of]  # [P]
    docs = sorted(set(pos_doc.tolist()))
    curves = {name: np.stack([arr[:, pos_doc == d].mean(axis=1) for d in docs])
              for name, arr in (("rec", res.nll_recompute), ("fro", res.nll_frozen), ("norm", res.norm))}
    return docs, curves


def document_units(res: LensResult, res_r: LensResult, windows: TokenWindows, rand_idx: np.ndarray,
                   trained_sub: np.ndarray, random_sub: np.ndarray) -> DocumentUnits:
    """The chapter's per-document units for the trained model and its random-init twin."""
    doc_ids = np.asarray(windows.doc_ids)
    docs, c = _per_document(res, doc_ids)
    docs_r, c_r = _per_document(res_r, doc_ids[rand_idx])
    rdocs = doc_ids[rand_idx]
    gap = np.array([(random_sub - trained_sub)[rdocs == d].mean() for d in docs_r])
    return DocumentUnits(documents=docs, lens_recompute=c["rec"], lens_frozen=c["fro"], norm=c["norm"],
                         documents_random=docs_r, lens_recompute_random=c_r["rec"],
                         lens_frozen_random=c_r["fro"], norm_random=c_r["norm"], gap=gap)


@dataclass(frozen=True, kw_only=True)
class ResidualResult:
    """Everything chapter 1 shows, for one preset (trained model and its random-init twin).

    Tables: ``overview`` (model and window protocol), ``per_doc`` (one row per test document:
    ``document``, mean NLL ``mean``, ``count`` windows, ``perplexity``), ``comparison`` (NLL and
    perplexity, trained vs random init), ``lens_curve[_random]`` (depth, variant, nll, low, high: mean
    lens NLL with 95% CIs over documents) and ``norm_curve[_random]`` (see ``LensResult.norm_curve``).
    Estimates with 95% CIs over documents (cluster bootstrap): ``nll``/``ppl`` (trained, all windows),
    ``nll_random``/``ppl_random``, ``drop[_random]`` (frozen-lens NLL at depth 0 minus depth L);
    ``sanity``: perplexity on ``preset.sanity_doc`` with a t-interval over its windows (one document);
    ``gap``: random minus trained NLL per document on the shared windows (paired; t-interval over
    documents). Depth trends are per-document statistics (``units``; the claims test them).
    ``ident_err``: max |lens_L - model| over logits and losses. ``numbers``: the values the prose
    glues, under the names it uses.
    """

    provenance: Provenance
    preset: ResidualPreset
    n_layers: int
    vocab: int
    model_dtype: str  # the models' parameter dtype ("float32", ...): sets the identity tolerance
    overview: pd.Series
    per_doc: pd.DataFrame
    comparison: pd.DataFrame
    lens_curve: pd.DataFrame
    lens_curve_random: pd.DataFrame
    norm_curve: pd.DataFrame
    norm_curve_random: pd.DataFrame
    nll: Interval
    ppl: Interval
    nll_random: Interval
    ppl_random: Interval
    sanity: Interval
    sanity_windows: int
    gap: Interval
    random_windows: int
    ident_err: float
    drop: Interval
    drop_random: Interval
    units: DocumentUnits
    numbers: dict[str, Any]

    def per_doc_table(self) -> pd.DataFrame:
        """The per-document loss table as the chapter prints it (rounded)."""
        t = self.per_doc.set_index("document")
        return t.rename(columns={"mean": "NLL (nats/token)", "count": "windows"}).round(3)

    def lens_table(self) -> pd.DataFrame:
        """Mean lens NLL of the trained model (rounded): one row per depth, one column per lens variant
        (L + 1 rows; as columns they ran off the page and the printed sheet at L = 30)."""
        return self.lens_curve.pivot(index="depth", columns="variant", values="nll").round(3)


def run(preset: ResidualPreset) -> ResidualResult:
    """Load the model, cut the held-out windows and compute (or read back) the chapter's result; a hub
    model's hub cache is deleted afterwards (:func:`layerlab.core.hub.release`)."""
    P = preset
    torch.manual_seed(P.seed)
    with hub.release(P.model):
        model, tok = models.load_model(P.model, dtype=P.torch_dtype)
        model = model.to(P.device)
        windows = corpora.token_windows(tok, "test", window=P.window, per_document=P.windows_per_doc, seed=P.seed,
                                        sources=P.sources)
        key = {"preset": dataclasses.asdict(P), "windows": windows.fingerprint()}
        return cached("residual", key, lambda: _compute(P, model, windows))


def _compute(P: ResidualPreset, model: nn.Module, windows: TokenWindows) -> ResidualResult:
    seed, n_boot = P.seed, P.n_boot
    n_layers, vocab = model.config.num_hidden_layers, model.config.vocab_size
    docs = corpora.corpus("test", sources=P.sources)
    label = models.model_label(P.model)
    overview = pd.Series({"model": label, "layers": n_layers, "vocabulary": vocab, "window": P.window,
                          "windows": len(windows), "scored tokens": windows.n_tokens,
                          "documents in the test split": len(docs)})
    numbers: dict[str, Any] = {
        "model_name": label, "n_layers": n_layers, "vocab": vocab, "ln_vocab": math.log(vocab),
        "window": P.window, "n_windows": len(windows), "n_tokens": windows.n_tokens, "n_test_docs": len(docs),
        "n_window_docs": len(set(windows.doc_ids)),
        "bos_policy": "no BOS token is prepended" if windows.protocol["bos_id"] is None
        else f"the BOS token (id {windows.protocol['bos_id']}) is prepended",
    }

    # perplexity of the trained model, overall, per document and on the sanity-check document
    res = analyse(model, windows, lens_positions=P.lens_positions, batch_size=P.batch_size, seed=seed,
                  n_boot=n_boot, cache_key={"model": P.model, "random_init": False})
    ppl = res.perplexity
    sanity_mask = np.asarray(windows.doc_ids) == P.sanity_doc
    if sanity_mask.sum() < 2:
        raise ValueError(f"fewer than 2 windows of the sanity document {P.sanity_doc!r}; raise windows_per_doc")
    sanity_ev = mean_effect(ppl.window_nll[sanity_mask] / windows.n_scored, unit="windows", seed=seed)
    sanity = Interval(estimate=math.exp(sanity_ev.estimate), low=math.exp(sanity_ev.low),
                      high=math.exp(sanity_ev.high))
    per_doc = pd.DataFrame({"document": windows.doc_ids, "nll": ppl.window_nll / windows.n_scored})
    per_doc = per_doc.groupby("document")["nll"].agg(["mean", "count"])
    per_doc["perplexity"] = np.exp(per_doc["mean"])
    hardest, easiest = per_doc["mean"].idxmax(), per_doc["mean"].idxmin()
    numbers.update({
        "ppl": ppl.ppl.estimate, "ppl_low": ppl.ppl.low, "ppl_high": ppl.ppl.high, "nll": ppl.nll.estimate,
        "bpb": ppl.bits_per_byte.estimate, "bpb_low": ppl.bits_per_byte.low, "bpb_high": ppl.bits_per_byte.high,
        "sanity_ppl": sanity.estimate, "sanity_low": sanity.low, "sanity_high": sanity.high,
        "sanity_windows": int(sanity_mask.sum()), "hardest_doc": hardest,
        "hardest_ppl": per_doc.loc[hardest, "perplexity"],
        "easiest_doc": easiest, "easiest_ppl": per_doc.loc[easiest, "perplexity"],
    })

    # the random-init twin on the first random_windows_per_doc windows of every document (paired per token)
    doc_arr = np.asarray(windows.doc_ids)
    rand_idx = np.sort(np.concatenate([np.flatnonzero(doc_arr == d)[:P.random_windows_per_doc]
                                       for d in dict.fromkeys(windows.doc_ids)]))
    rand_windows = windows.subset(rand_idx)
    model_r, _ = models.load_model(P.model, random_init=True, seed=seed + 1, dtype=P.torch_dtype)
    model_r = model_r.to(P.device)
    res_r = analyse(model_r, rand_windows, lens_positions=P.lens_positions, batch_size=P.batch_size, seed=seed,
                    n_boot=n_boot, cache_key={"model": P.model, "random_init": True, "seed": seed + 1})
    trained_sub = res.perplexity.window_nll[rand_idx] / windows.n_scored
    random_sub = res_r.perplexity.window_nll / windows.n_scored
    units = document_units(res, res_r, windows, rand_idx, trained_sub, random_sub)
    gap = mean_effect(units.gap, unit="documents", seed=seed)
    numbers.update({"rand_ppl": res_r.perplexity.ppl.estimate, "rand_nll": res_r.perplexity.nll.estimate,
                    "rand_windows": len(rand_windows), "gap": gap.estimate, "gap_low": gap.low,
                    "gap_high": gap.high, "gap_docs": gap.n})
    comparison = pd.DataFrame({"trained": [res.perplexity.nll.estimate, res.perplexity.ppl.estimate],
                               "random init": [res_r.perplexity.nll.estimate, res_r.perplexity.ppl.estimate]},
                              index=["NLL (nats/token)", "perplexity"])

    curve = res.lens_curve(n_boot=n_boot, seed=seed)
    lens = _lens_numbers(res, res_r, curve, n_layers, vocab, n_boot, seed)
    numbers.update(lens["numbers"])
    nc = res.norm_curve(n_boot=n_boot, seed=seed)
    nc_r = res_r.norm_curve(n_boot=n_boot, seed=seed)
    numbers.update(_norm_numbers(res, nc, nc_r, n_layers))

    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return ResidualResult(
        provenance=provenance("residual", P, model=label, tokens=windows.fingerprint(), seed=seed),
        preset=P, n_layers=n_layers, vocab=vocab, model_dtype=dtype, overview=overview,
        per_doc=per_doc.reset_index(), comparison=comparison, lens_curve=curve,
        lens_curve_random=res_r.lens_curve(n_boot=n_boot, seed=seed), norm_curve=nc, norm_curve_random=nc_r,
        nll=Interval.of(ppl.nll), ppl=Interval.of(ppl.ppl), nll_random=Interval.of(res_r.perplexity.nll),
        ppl_random=Interval.of(res_r.perplexity.ppl), sanity=sanity,
        sanity_windows=int(sanity_mask.sum()),
        gap=Interval(estimate=gap.estimate, low=gap.low, high=gap.high), random_windows=len(rand_windows),
        ident_err=lens["ident_err"], drop=Interval.of(lens["drop"]), drop_random=Interval.of(lens["drop_r"]),
        units=units, numbers=numbers,
    )


def _lens_numbers(res: LensResult, res_r: LensResult, curve: pd.DataFrame, n_layers: int, vocab: int,
                  n_boot: int, seed: int) -> dict[str, Any]:
    """The logit-lens section: the frozen-lens drop, the last-depth identity, glued values."""
    drop = res.drop("frozen", n_boot=n_boot, seed=seed)
    drop_r = res_r.drop("frozen", n_boot=n_boot, seed=seed)
    rec = curve[curve.variant == "recompute"].set_index("depth")["nll"]
    fro = curve[curve.variant == "frozen"].set_index("depth")["nll"]
    ident_err = max(res.max_abs_logit_err, float(np.abs(res.nll_recompute[-1] - res.model_nll).max()),
                    float(np.abs(res.nll_frozen[-1] - res.model_nll).max()))
    ln_v = math.log(vocab)
    below = rec.values < ln_v
    peak = int(rec.iloc[1:].idxmax())
    numbers = {
        "n_lens_positions": res.nll_recompute.shape[1], "rec0": rec[0], "fro0": fro[0],
        "rec_mid": rec[n_layers // 2], "fro_mid": fro[n_layers // 2], "mid": n_layers // 2, "recL": rec[n_layers],
        "ident_err": ident_err,
        "first_below": int(np.argmax(below)) if below.any() else -1,
        "rec0_vs": "above" if rec[0] > ln_v else "below", "rec_peak_depth": peak, "rec_peak": rec[peak],
        "fro_monotone": int((np.diff(fro.values) < 0).sum()), "drop": drop.estimate, "drop_r": drop_r.estimate,
    }
    return {"numbers": numbers, "ident_err": ident_err, "drop": drop, "drop_r": drop_r}


def _norm_numbers(res: LensResult, nc: pd.DataFrame, nc_r: pd.DataFrame, n_layers: int) -> dict[str, Any]:
    """The residual-norm section's glued values: growth, largest update, mean/median spread, outliers."""
    upd = nc.dropna()
    spread = (nc.norm / nc.norm_median).iloc[1:]
    big = res.outliers(int(spread.idxmax()))
    return {
        "norm0": nc.norm[0], "normL": nc.norm[n_layers], "norm_growth": nc.norm[n_layers] / nc.norm[0],
        "norm_growth_r": nc_r.norm[n_layers] / nc_r.norm[0],
        "upd_max_block": int(upd.depth[upd.update_ratio.idxmax()]), "upd_max": float(upd.update_ratio.max()),
        "upd_median": float(upd.update_ratio.median()), "spread_depth": int(spread.idxmax()),
        "spread": float(spread.max()), "outlier_pct": 100 * big.mean(),
        "outlier_first_pct": 100 * float((res.position[big] == 0).mean()) if big.any() else float("nan"),
    }
