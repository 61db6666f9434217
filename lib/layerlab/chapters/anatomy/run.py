"""The anatomy chapter's run: preset -> :class:`AnatomyResult` (Wietrzykowski 2026, arXiv:2603.19348).

The four diagnostics of :mod:`layerlab.chapters.anatomy.analysis`, in the book's order: weights across
depth (delta correlations, predictability R², Q4_1 noise), regression-generated weights, the ablation
profile (five operators, three protocols, activation-side rank agreement), the five manipulations on
the redundant tier, and perturb-and-recover fine-tunes. The result holds every table, figure input,
claim input and glued number the notebook shows; it is cached whole (``layerlab.core.cache.cached``)
on top of the cached ablation, replacement, manipulation and recovery parts, so an unchanged rebuild
neither loads the models nor recomputes anything.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

import layerlab.chapters.anatomy.analysis as an
from layerlab.chapters.anatomy.presets import AnatomyPreset
from layerlab.core import arch, hub
from layerlab.core.cache import cached
from layerlab.core.protocol import Provenance, provenance
from layerlab.data.fetch import data_fingerprint
from layerlab.metrics import ablation
from layerlab.metrics.recovery import RecoveryCurve

__all__ = ["AnatomyResult", "run"]

DELTA_COLUMNS = ["delta_corr", "ci_low", "ci_high", "rho1", "rho2", "analytic", "null", "pair_tolerance"]
REPLACEMENT_COLUMNS = ["name", "ppl", "ppl_low", "ppl_high", "dnll", "dnll_low", "dnll_high"]


@dataclass(frozen=True, kw_only=True)
class AnatomyResult:
    """Everything the anatomy chapter shows, for one preset (the model and its random-init null N1).

    Weights: ``structure[_null]`` (per layer and component: norms, ranks, next-layer cosine),
    ``delta``/``delta_null``/``delta_shuffled`` (delta correlation per component: real, N1, N2 shuffled
    layer order) with per-pair tables ``delta_pairs``/``delta_null_pairs``, ``predictability`` (held-out
    R² of P1–P5 with N1/N2 nulls), ``r2_splits`` (P1–P3 R² over random held-out splits), ``r2_loo`` (P1 R²
    of each layer held out alone: real, N1, N2), ``delta_null_q`` (N1 after a Q4_1 round trip), ``quant`` and
    ``quant_delta`` (Q4_1 error energy; None without a quantised model). ``replacement``: effects of
    predicted-weight replacement (with PPL). ``ablation``: ΔNLL/ΔPPL% with CIs and tiers of every
    operator × layer × protocol (large, small: adaptive budgets over documents, with documents, tokens and
    looks spent; sentences); ``first_look``: per-document ΔNLL of every "op@layer" at the first look (the
    same documents for all layers); ``sentence_nll``/``sentence_groups``: the clean
    per-token NLL of the 10-sentence protocol and its sentence ids (the A4 baseline); ``agreement``:
    Spearman agreement of the profiles with each other and with BI / angular distance. ``manipulation``:
    effects per config × target; ``redundant``: the layers of the redundant target. ``curves``/``recovery``:
    the recovery runs and one row per run. ``numbers``: the values the prose glues (prefix ``anat``).
    """

    provenance: Provenance
    preset: AnatomyPreset
    n_layers: int
    structure: pd.DataFrame
    structure_null: pd.DataFrame
    delta: pd.DataFrame
    delta_pairs: pd.DataFrame
    delta_null: pd.DataFrame
    delta_null_pairs: pd.DataFrame
    delta_shuffled: pd.DataFrame
    predictability: pd.DataFrame
    r2_splits: pd.DataFrame
    r2_loo: pd.DataFrame
    delta_null_q: pd.DataFrame | None
    quant: pd.DataFrame | None
    quant_delta: pd.DataFrame | None
    replacement: pd.DataFrame
    replacement_docs: pd.DataFrame
    ablation: pd.DataFrame
    first_look: dict[str, list[float]]
    sentence_nll: np.ndarray
    sentence_groups: np.ndarray | None
    agreement: pd.DataFrame
    manipulation: pd.DataFrame
    manipulation_docs: pd.DataFrame
    redundant: list[int]
    curves: list[RecoveryCurve]
    recovery: pd.DataFrame
    numbers: dict[str, Any]

    def delta_table(self) -> pd.DataFrame:
        """Delta correlation per component with its CI, lag correlations, analytic value and the −0.5 null."""
        return self.delta.set_index("component")[DELTA_COLUMNS]

    def r2_table(self) -> pd.DataFrame:
        """Held-out R² of the trained model: one row per component, one column per predictor variant."""
        return self.predictability.pivot(index="component", columns="predictor", values="r2").round(3)

    def quant_summary(self) -> pd.DataFrame | None:
        """Median delta energy, quantisation-error energy and their ratio per component (None if unquantised)."""
        if self.quant_delta is None:
            return None
        return self.quant_delta.groupby("component")[["delta_energy", "quant_energy", "ratio"]].median()

    def replacement_table(self) -> pd.DataFrame:
        """The weight-generation effects as PPL and ΔNLL with CIs."""
        return self.replacement[REPLACEMENT_COLUMNS]

    def tiers_table(self) -> pd.DataFrame:
        """The tier of every layer under every protocol × operator."""
        return self.ablation.pivot_table(index="layer", columns=["protocol", "op"], values="tier", aggfunc="first")

    def top_table(self) -> pd.DataFrame:
        """The most important layer of each operator on the large protocol."""
        big = self.ablation[self.ablation.protocol == "large"]
        return big.loc[big.groupby("op").dnll.idxmax()][["op", "layer", "dnll", "dnll_low", "dnll_high", "dppl_pct"]]

    def manipulation_pivot(self) -> pd.DataFrame:
        """ΔPPL% of every manipulation config (rows) on every target (columns)."""
        return self.manipulation.pivot(index="config", columns="target", values="dppl_pct").round(2)


def run(preset: AnatomyPreset) -> AnatomyResult:
    """The anatomy chapter for ``preset`` (cached as a whole; the heavy parts are cached one by one); a
    hub model's hub cache is deleted afterwards (:func:`layerlab.core.hub.release`)."""
    key = {"preset": dataclasses.asdict(preset), "data": data_fingerprint()}
    with hub.release(preset.model):
        return cached("anatomy-result", key, lambda: _compute(preset))


def _compute(P: AnatomyPreset) -> AnatomyResult:
    model, tok = an.load(P, seed=P.seed)
    null_model, _ = an.load(P, random_init=True, seed=P.null_seed)  # N1: same architecture, random init
    L = arch.view(model).n_layers
    numbers: dict[str, Any] = {"model": P.model, "L": L}

    W = an.run_weights(P, model, null_model)
    numbers.update(_weight_numbers(W))
    rep_res = an.run_replacement(P, model, tok)
    rep = an.replacement_table(rep_res, P)
    numbers.update(rep_single_med=float(rep[rep.name.str.startswith("predicted@")].dppl_pct.median()),
                   rep_random_med=float(rep[rep.name.str.startswith("random@")].dppl_pct.median()),
                   rep_tokens=int(rep_res.n_tokens))

    profile, abl = an.run_ablation(P, model, tok)
    geo = ablation.EvalResult(base=np.zeros(1), nll={}, n_tokens=0, block_influence=abl["large"]["block_influence"],
                              angular_distance=abl["large"]["angular_distance"])
    agree = ablation.rank_agreement(profile[profile.protocol == "large"], geo, seed=P.seed)
    numbers.update(_ablation_numbers(P, abl, profile, agree))

    man_res = an.run_manipulation(P, model, tok, an.redundant_layers(profile))
    man = an.manipulation_table(man_res, P)
    redundant = [int(x) for x in man_res.meta["targets"]["redundant"]]
    numbers.update(sample_docs=int(P.sample_docs), rep_docs=int(len(set(rep_res.groups.tolist()))),
                   manip_tokens=int(man_res.n_tokens), redundant=", ".join(str(x) for x in redundant))

    curves = an.run_recovery(P, model, tok)
    rec = an.recovery_table(curves)
    numbers.update(rec_cap=int(P.recovery_steps), rec_n=int(len(rec)),
                   compute_min=(an.timings(W, man_res) + abl["large"]["seconds"] + abl["small"]["seconds"]) / 60)

    sent = abl["sentences"]
    tokens = abl["large"]["text"]  # the large protocol's documents and windows
    return AnatomyResult(
        provenance=provenance("anatomy", P, model=P.model, tokens=tokens, seed=P.seed), preset=P, n_layers=L,
        structure=W["structure"], structure_null=W["structure_null"], delta=W["delta"],
        delta_pairs=W["delta_pairs"], delta_null=W["delta_null"], delta_null_pairs=W["delta_null_pairs"],
        delta_shuffled=W["delta_shuffled"], predictability=W["predictability"], r2_splits=W["r2_splits"],
        r2_loo=W["r2_loo"], delta_null_q=W.get("delta_null_q"),
        quant=W.get("quant"), quant_delta=W.get("quant_delta"), replacement=rep,
        replacement_docs=an.per_document(rep_res),
        ablation=profile,
        sentence_nll=np.asarray(sent.base), sentence_groups=None if sent.groups is None else np.asarray(sent.groups),
        first_look={**abl["large"]["first_values"], **abl["small"]["first_values"]},
        agreement=agree, manipulation=man,
        manipulation_docs=an.per_document(man_res), redundant=redundant, curves=curves, recovery=rec, numbers=numbers)


def _weight_numbers(W: dict) -> dict[str, Any]:
    """Glued values of the weights sections: delta correlations, R² of gate_proj, quantisation noise."""
    delta = W["delta"].set_index("component")
    pred = W["predictability"]
    g = pred[(pred.component == "gate")].set_index("predictor")
    best = pred.loc[pred.r2.idxmax()]
    out = {"delta_mean": float(delta.delta_corr.mean()), "delta_null_mean": float(W["delta_null"].delta_corr.mean()),
           "delta_shuffled_mean": float(W["delta_shuffled"].delta_corr.mean()),
           "rho1_max": float(delta.rho1.abs().max()),
           "r2_gate_p1": float(g.loc["P1_level", "r2"]), "r2_gate_p1_innov": float(g.loc["P1_innov", "r2"]),
           "r2_gate_p4": float(g.loc["P4_level", "r2"]), "r2_gate_p5": float(g.loc["P5_level", "r2"]),
           "r2_gate_p1_n1": float(g.loc["P1_level", "N1"]),
           "r2_best": f"{best.predictor} for {best.component}_proj, R² = {best.r2:.3f}"}
    if "quant" in W:
        out.update(quant_ratio=float(W["quant_delta"].ratio.median()),
                   quant_types=", ".join(sorted(W["quant"].gguf_type.unique())))
    else:
        out.update(quant_ratio=float("nan"), quant_types="none")
    return out


def _ablation_numbers(P: AnatomyPreset, abl: dict, profile: pd.DataFrame, agree: pd.DataFrame) -> dict[str, Any]:
    """Glued values of the ablation section: budgets, baseline PPL, top layers, significant layers, ρ."""
    big = profile[profile.protocol == "large"]
    small = profile[profile.protocol == "small"]
    top = big.loc[big.groupby("op").dnll.idxmax()].set_index("op")

    def n_sig(op: str) -> int:
        t = big[big.op == op]
        return int(((t.dnll_low > 0) | (t.dnll_high < 0)).sum())

    r = agree[(agree.a == "neighbour_avg") & (agree.b == "skip")]
    r = r if len(r) else agree[(agree.a == "skip") & (agree.b == "neighbour_avg")]
    sent = abl["sentences"]
    return {"abl_tokens_min": int(big.n_tokens.min()), "abl_tokens_max": int(big.n_tokens.max()),
            "abl_docs_min": int(big.n_docs.min()), "abl_docs_max": int(big.n_docs.max()),
            "abl_n_extended": int((big.looks > 1).sum()), "abl_n_last": int((big.looks == big.looks.max()).sum()),
            "abl_n_rows": int(len(big)), "abl_tokens_total": int(big.n_tokens.sum() + small.n_tokens.sum()),
            "abl_small_docs_min": int(small.n_docs.min()), "abl_small_tokens_max": int(small.n_tokens.max()),
            "abl_design": abl["large"]["design"], "abl_window_small": int(P.budget_window_small),
            "sent_tokens": int(sent.n_tokens), "sent_ops": ", ".join(P.sentence_ops),
            "base_ppl_large": float(np.exp(abl["large"]["base_mean"])),
            "skip_top_layer": int(top.loc["skip", "layer"]), "nb_top_layer": int(top.loc["neighbour_avg", "layer"]),
            "n_sig_skip": n_sig("skip"), "n_sig_nb": n_sig("neighbour_avg"), "rho_skip_nb": float(r.rho.iloc[0])}
