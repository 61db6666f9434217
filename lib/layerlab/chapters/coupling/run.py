"""The coupling chapter's run, preset -> :class:`CouplingResult` (Aubry et al., ICLR 2025; spec ``coupling.md``).

One call computes every experiment of the chapter in the notebook's order: the side-by-side Jacobian
timing, depth-wise coupling of the main model vs its random-init twins and the nulls
(:mod:`layerlab.chapters.coupling.depth`), the co-diagonalisation panels, the token-wise grids, the
trajectories, the trained family's coupling vs held-out loss, over checkpoints, layer locality and
the Q4_1 control (:mod:`layerlab.chapters.coupling.members`), the ViT curve and, on ``gpu``, the
Fig. 1a models and Pythia checkpoints. The result holds every table, figure input, claim input and
glued number; it is cached whole (``coupling-result``) on top of the per-prompt caches, so an
unchanged rebuild recomputes nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
from torch import Tensor

import layerlab.chapters.coupling.depth as cd
import layerlab.chapters.coupling.members as cm
import layerlab.chapters.coupling.stats as cs
from layerlab.chapters.coupling.presets import CouplingPreset, fig1a_table
from layerlab.core import hub, models
from layerlab.core import jacobians as jac
from layerlab.core.cache import cached, fingerprint
from layerlab.core.protocol import Provenance, provenance
from layerlab.data.fetch import data_fingerprint
from layerlab.metrics import coupling as cp
from layerlab.metrics import trajectories as tr
from layerlab.training import vit

__all__ = ["LSS_COLUMNS", "CouplingResult", "run"]

LSS_COLUMNS = ["lss_median", "lss_last", "expodistance", "equidistance", "step_slope", "step_r2", "norm_slope",
               "inv_s1_slope", "lin_cos"]
"""The linearity / spacing statistics of the trajectory table (trained vs random init)."""
TOKEN_PANELS = {"self_m": "self, block {0}", "self_cross_m": "self, blocks {0} vs {1}",
                "out_m": "fixed output token", "in_m": "fixed input token"}
"""The token-wise grids of the first prompt: key of :func:`layerlab.chapters.coupling.depth.token_run` -> title."""


@dataclass(frozen=True, kw_only=True)
class CouplingResult:
    """Everything the coupling chapter shows, for one preset.

    ``speed``: :func:`~layerlab.chapters.coupling.depth.speed_side_by_side`. ``trained``/``init``: per-prompt
    summaries (:func:`~layerlab.chapters.coupling.depth.summarise`) of the main model and its random-init
    twins (seeds pooled); ``robust``: every candidate scalar at every K for the model, the nulls, the
    authors' endpoints and the twins; ``depth_matrices``: title -> prompt-mean 1 - m_K [L, L] (trained,
    first twin, spectrum null); ``panels``: {"trained", "random init"} -> |U_j^T J_i V_j| [n, n, K, K] on the
    demo prompt. Token-wise: ``token_grids`` title -> 1 - m_K [T, T] of the first prompt (diagonal of the
    self grid NaN), ``token_positions``, and per-prompt token-wise scalars ``tokens`` (one DataFrame per
    key: "self", "self_null", "self_init", "self_init_null", and context coupling "out", "out_null", "in",
    "in_null" on the prompts that have it). ``distance``: {"trained", "random init"} -> per-prompt
    excess of 1 - m_K over the own spectrum null at each depth distance [P, L-1].
    Trajectories: ``step_norms``/``top_sv`` {"trained", "random init"} -> per-prompt [L]
    curves, ``pca_coords`` [n, L+1, 2] and ``pca_ratio`` [2] of the demo prompt, ``lss`` (the
    :data:`LSS_COLUMNS` means). Family: ``family`` (one row per member), ``family_stats``
    (:func:`~layerlab.chapters.coupling.stats.predictor_stats` of held-out NLL on ``predictors``),
    ``incremental``, ``checkpoints``, ``locality`` (with ``per_prompt``) and ``locality_mats`` {(seed, step):
    m_K}, ``locality_shown`` (the steps of the circle graphs), ``quant``. ``vit_rows``: dataset ->
    :func:`layerlab.training.vit.vit_coupling_curve` (``vit_skipped``: dataset -> why). ``fig1a`` (with
    ``fig1a_stats`` on gpu) and ``pythia`` (gpu). ``numbers``: the values the prose glues, by glue name.
    """

    provenance: Provenance
    preset: CouplingPreset
    k: int  # the preset's largest K: the headline C_l2@K
    coupling_col: str  # C_l2 at the family's largest K
    n_prompts: int
    model_note: str
    speed: dict[str, Any]
    trained: pd.DataFrame
    init: pd.DataFrame
    robust: pd.DataFrame
    depth_matrices: dict[str, Tensor]
    panels: dict[str, Tensor]
    token_grids: dict[str, Tensor]
    token_positions: list[int]
    tokens: dict[str, pd.DataFrame]
    step_norms: dict[str, list[Tensor]]
    top_sv: dict[str, list[Tensor]]
    pca_coords: Tensor
    pca_ratio: Tensor
    lss: pd.DataFrame
    predictors: list[str]
    family: pd.DataFrame
    family_stats: pd.DataFrame
    incremental: dict[str, float]
    checkpoints: pd.DataFrame
    locality: pd.DataFrame
    locality_mats: dict[tuple[int, int], Tensor]
    locality_shown: list[int]
    quant: pd.DataFrame
    vit_rows: dict[str, list[dict]]
    vit_skipped: dict[str, str]
    fig1a: pd.DataFrame
    fig1a_stats: pd.DataFrame | None = None
    pythia: pd.DataFrame | None = None
    numbers: dict[str, Any] = field(default_factory=dict)
    distance: dict[str, Tensor] = field(default_factory=dict)
    family_members: pd.DataFrame | None = None  # the whole family (training.regime.members_table): its regime

    def speed_table(self) -> pd.Series:
        return pd.Series(self.speed)

    def checkpoint_table(self) -> pd.DataFrame:
        return self.checkpoints[["name", "step", "val_nll", self.coupling_col, f"excess:{self.coupling_col}"]].round(3)

    def locality_table(self) -> pd.DataFrame:
        return self.locality.drop(columns=["per_prompt", "null"], errors="ignore").round(3)

    def vit_table(self) -> pd.DataFrame | None:
        """Step, test accuracy and C_l2 at the last patch token and at CLS, per dataset (None: no ViT ran)."""
        if not self.vit_rows:
            return None
        vk = max(self.preset.vit_ks)
        cols = ["step", "test_acc", f"last:C_l2@{vk}", f"cls:C_l2@{vk}"]
        return pd.concat({k: pd.DataFrame(v)[cols] for k, v in self.vit_rows.items()}).round(3)

    def fig1a_table(self) -> pd.DataFrame:
        return self.fig1a[["model", "hub_id", "coupling", "leaderboard_avg", "provenance"]]

    def pythia_table(self) -> pd.DataFrame | None:
        if self.pythia is None:
            return None
        return self.pythia[["model", "step", f"C_l2@{self.k}", f"C_tr@{self.k}", "locality"]].round(4)


def run(preset: CouplingPreset) -> CouplingResult:
    """Load the main model (on ``preset.device``), draw the prompts, make sure the family is trained,
    and compute (or read back) the chapter's result. A hub model's hub cache is deleted afterwards
    (:func:`layerlab.core.hub.release`; each Fig. 1a model and Pythia revision right after its run)."""
    P = preset
    with hub.release(P.model):
        model, tok = models.load_model(P.model, dtype=P.torch_dtype)
        model = model.to(P.device)
        prompts = [p.to(P.device) for p in cd.prompt_set(tok, P.n_prompts, P.max_tokens, seed=P.seed)]
        from layerlab.training.family import get_family

        fam = get_family(P.family_profile)
        key = {"preset": dataclasses.asdict(P), "prompts": [fingerprint(p) for p in prompts],
               "data": data_fingerprint(), "family": fam.root.name}
        return cached("coupling-result", key, lambda: _compute(P, model, tok, prompts))


def _init_model(P: CouplingPreset, seed: int) -> torch.nn.Module:
    return models.load_model(P.model, random_init=True, seed=seed, dtype=P.torch_dtype)[0].to(P.device)


def _compute(P: CouplingPreset, model: torch.nn.Module, tok: Any, prompts: list[Tensor]) -> CouplingResult:
    K = max(P.ks)
    col = f"C_l2@{K}"
    longest = max(prompts, key=lambda p: p.shape[1])
    speed = cd.speed_side_by_side(model, longest, P.model, P.speed_layers)
    numbers: dict[str, Any] = {
        "K_max": K, "speed_ratio": float(speed["ratio"]), "speed_fast": float(speed["frozen_s_per_block"]),
        "speed_ref": float(speed["reference_s_per_block"]), "speed_err": float(speed["rel_error"]),
        "n_prompts": len(prompts), "prompt_tokens": int(longest.shape[1]),
    }

    # depth-wise coupling: the trained model, its random-init twins and the nulls
    trained = cd.depth_run(model, prompts, P.ks, label=P.model, n_null=P.n_null)
    init_runs = [cd.depth_run(_init_model(P, s), prompts[: P.n_init_prompts], P.ks, label=f"{P.model}-init{s}",
                              n_null=P.n_init_prompts) for s in P.init_seeds]  # each twin against its own null
    df_t = cd.summarise(trained)
    df_i = pd.concat([cd.summarise(r).assign(seed=s) for s, r in zip(P.init_seeds, init_runs, strict=True)],
                     ignore_index=True)
    distance = {"trained": cd.distance_excess(trained, K), "random init": cd.distance_excess(init_runs[0], K)}
    depth_matrices = {"trained": cd.mean_matrix(trained, K),
                      f"random init, seed {P.init_seeds[0]}": cd.mean_matrix(init_runs[0], K),
                      "spectrum-matched null": cd.mean_matrix(trained, K, name="m_spectrum")}
    numbers.update({"c_trained": float(df_t[col].mean()), "c_init": float(df_i[col].mean()),
                    "c_spec": float(df_t[f"spectrum:{col}"].mean()), "c_rot": float(df_t[f"rotation:{col}"].mean())})
    robust = _robust_table(P, df_t, df_i)
    numbers.update({"min_gap": float(df_t["min_gap"].min()), "ctr_trained": float(robust.loc["trained", f"C_tr@{K}"]),
                    "ctr_init": float(robust.loc["random init", f"C_tr@{K}"]),
                    "ctr_spec": float(robust.loc["spectrum null", f"C_tr@{K}"])})

    # co-diagonalisation panels on the demo prompt, token-wise coupling, trajectories
    demo = cd.encode(tok, cd.DEMO_PROMPT, P.max_tokens).to(P.device)
    m0 = _init_model(P, P.init_seeds[0])
    panels = {name: cd.depth_panels(mdl, demo, list(P.panel_layers), K).cpu()
              for name, mdl in [("trained", model), ("random init", m0)]}
    tok_prompts = prompts[: max(2, P.n_init_prompts)]
    tok_runs = cd.token_runs(model, tok_prompts, P.model, P.token_layers, P.n_tokens, P.ks,
                             n_context=P.n_context_prompts)
    tok_init = cd.token_runs(m0, tok_prompts, f"{P.model}/init{P.init_seeds[0]}", P.token_layers, P.n_tokens,
                             P.ks, n_context=0)
    tokens = {"self": _self_coupling(tok_runs, "self_m", P.ks),
              "self_null": _self_coupling(tok_runs, "self_null_m", P.ks),
              "self_init": _self_coupling(tok_init, "self_m", P.ks),
              "self_init_null": _self_coupling(tok_init, "self_null_m", P.ks),
              "out": _self_coupling(tok_runs, "out_m", P.ks), "out_null": _self_coupling(tok_runs, "out_null_m", P.ks),
              "in": _self_coupling(tok_runs, "in_m", P.ks), "in_null": _self_coupling(tok_runs, "in_null_m", P.ks)}
    numbers.update({"tok_self": float(tokens["self"][col].mean()), "tok_null": float(tokens["self_null"][col].mean()),
                    "tok_init": float(tokens["self_init"][col].mean()),
                    "tok_init_null": float(tokens["self_init_null"][col].mean()), "tok_n": len(tokens["self"])})
    coords, ratio = tr.trajectory_pca(jac.block_trajectory(model, demo).double())
    lss = pd.DataFrame({"trained": df_t[LSS_COLUMNS].mean(), "random init": df_i[LSS_COLUMNS].mean()})
    numbers.update({"lss_t": float(df_t["lss_median"].mean()), "lss_i": float(df_i["lss_median"].mean()),
                    "lin_t": float(df_t["lin_cos"].mean())})

    # the trained family: coupling vs held-out loss, over checkpoints, locality, the Q4_1 control
    fam = cm.family_table(P.family_profile, P.family_prompts, P.family_max_tokens, P.family_ks)
    fcol = f"C_l2@{max(P.family_ks)}"
    preds = [f"excess:{fcol}", "depth", "width", "log10_params"]  # coupling as the excess over own null
    fstats = cs.predictor_stats(fam, "heldout_nll", preds, seed=P.seed)  # descriptive (pooled members)
    fc = fstats.set_index("predictor").loc[f"excess:{fcol}"]
    inc = cs.incremental_r2(fam, "heldout_nll", ["final_train_loss"], [fcol], seed=P.seed)
    from layerlab.training.family import get_family
    from layerlab.training.regime import members_table

    members = members_table(get_family(P.family_profile, train_missing=False))
    reg = cs.family_regime(members, rows=fam)
    numbers.update({"fam_rho": float(fc["spearman"]), "fam_r2": float(fc["R2"]), "fam_n": int(fc["n"]),
                    "fam_steps": int(fam["steps"].max()), "inc_gain": float(inc["gain"]),
                    "fam_regime": reg["regime"], "fam_rule": reg["rule"], "fam_tested": reg["n_tested"],
                    "fam_kept": ", ".join(str(d) for d in reg["kept"]) or "none"})
    ck = cm.checkpoint_table(P.family_profile, P.checkpoint_filter, P.family_prompts, P.family_max_tokens,
                             P.family_ks)
    loc, loc_mats = cm.locality_run(P.family_profile, P.locality_filter, P.family_prompts, P.family_max_tokens,
                                    max(P.family_ks), seed=P.seed)
    shown, loc_numbers = _locality_numbers(loc, loc_mats)
    numbers.update(loc_numbers)
    qc = cm.quantisation_control(P.family_profile, P.quant_filter, P.family_prompts, P.family_max_tokens,
                                 max(P.family_ks), seed=P.seed)
    numbers.update({"q_diff": float(qc["diff"].mean()), "q_rel": float(100 * qc["rel_weight_change"].mean()),
                    "q_nll": float((qc["nll_q4_1"] - qc["nll"]).mean()), "q_n": len(qc)})

    vit_rows, vit_skipped = _vit(P)
    fig1a, fig1a_stats = _fig1a(P)
    return CouplingResult(
        provenance=provenance("coupling", P, model=P.model, tokens=fingerprint([fingerprint(p) for p in prompts]),
                              seed=P.seed),
        preset=P, k=K, coupling_col=fcol, n_prompts=len(prompts), model_note=f"{P.model}, {len(prompts)} prompts",
        speed=speed, trained=df_t, init=df_i, robust=robust, depth_matrices=depth_matrices, panels=panels,
        token_grids=_token_grids(tok_runs[0], P.ks, K, P.token_layers),
        token_positions=[int(t) for t in tok_runs[0]["tokens"]], tokens=tokens,
        step_norms={"trained": [r["delta"] for r in trained["per_prompt"]],
                    "random init": [r["delta"] for r in init_runs[0]["per_prompt"]]},
        top_sv={"trained": [r["s_top"][:, 0] for r in trained["per_prompt"]],
                "random init": [r["s_top"][:, 0] for r in init_runs[0]["per_prompt"]]},
        pca_coords=coords.cpu(), pca_ratio=ratio.cpu(), lss=lss, predictors=preds, family=fam,
        family_members=members, family_stats=fstats, incremental=inc, checkpoints=ck, locality=loc,
        locality_mats=loc_mats,
        locality_shown=shown, quant=qc, vit_rows=vit_rows, vit_skipped=vit_skipped, fig1a=fig1a,
        fig1a_stats=fig1a_stats, pythia=_pythia(P, K), numbers=numbers, distance=distance,
    )


def _robust_table(P: CouplingPreset, df_t: pd.DataFrame, df_i: pd.DataFrame) -> pd.DataFrame:
    """Prompt means of every candidate scalar (C_l2, C_tr, C_sq) at every K, one row per model or null."""
    rows = {}
    for name, df, prefix in [("trained", df_t, ""), ("spectrum null", df_t, "spectrum:"),
                             ("rotation null", df_t, "rotation:"), ("authors_compat endpoints", df_t, "compat:"),
                             ("random init", df_i, "")]:
        rows[name] = {f"{c}@{k}": df[f"{prefix}{c}@{k}"].mean() for c in ("C_l2", "C_tr", "C_sq") for k in P.ks}
    return pd.DataFrame(rows).T


def _self_coupling(runs: list[dict[str, Tensor]], key: str, ks: tuple[int, ...]) -> pd.DataFrame:
    """One row per prompt that has the token-wise matrix ``key``: every scalar (C_l2, C_tr, C_sq at
    every K) over the token grid, with the prompt's index."""
    rows = [{"prompt": i, **cp.scalar_summaries(cp.CouplingMatrices(t[key].double(), ks))}
            for i, t in enumerate(runs) if key in t]
    return pd.DataFrame(rows, columns=["prompt"] + [f"{c}@{k}" for k in ks for c in ("C_tr", "C_l2", "C_sq")])


def _token_grids(t0: dict[str, Tensor], ks: tuple[int, ...], k: int, layers: tuple[int, int]) -> dict[str, Tensor]:
    out = {}
    for key, title in TOKEN_PANELS.items():
        m = 1 - cp.CouplingMatrices(t0[key].double(), ks).get(k)
        if key == "self_m":
            m.fill_diagonal_(float("nan"))  # zero by definition
        out[title.format(*layers)] = m
    return out


def _locality_numbers(loc: pd.DataFrame, loc_mats: dict) -> tuple[list[int], dict[str, Any]]:
    """The steps of the circle graphs (first, the paper's relative step 4000, last) and the glued values."""
    steps_avail = sorted(loc["step"].unique())
    mid = cs.middle_step(steps_avail)
    shown = [int(s) for s in (1, mid, steps_avail[-1]) if s in steps_avail]
    seed0 = int(loc["seed"].min())
    mid_rows = loc[loc["step"] == mid]
    return shown, {"loc_mid_step": int(mid), "loc_mid": float(mid_rows["locality"].mean()),
                   "loc_mid_pmax": float(mid_rows["p_perm"].max()),
                   "loc_final": float(loc[loc["step"] == steps_avail[-1]]["locality"].mean()),
                   "loc_depth": int(loc_mats[(seed0, steps_avail[-1])].shape[0])}


def _vit(P: CouplingPreset) -> tuple[dict[str, list[dict]], dict[str, str]]:
    rows, skipped = {}, {}
    for cfg in P.vit:
        try:
            rows[cfg.dataset] = vit.vit_coupling_curve(cfg, P.vit_images, P.vit_ks)
        except Exception as e:  # Fashion-MNIST is optional set-up data
            skipped[cfg.dataset] = f"{type(e).__name__}: {e}"
    return rows, skipped


def _paper_run(P: CouplingPreset, hub_id: str, label: str, **load: Any) -> dict[str, Any]:
    with hub.release(hub_id):  # one model (or Pythia revision) on disk at a time
        mdl, tk = models.load_model(hub_id, dtype=P.torch_dtype, **load)
        mdl = mdl.to(P.device)
        ids = [p.to(P.device) for p in cd.prompt_set(tk, P.n_prompts, P.max_tokens, seed=P.seed)]
        return cd.depth_run(mdl, ids, P.ks, label=label, n_null=0)


def _fig1a(P: CouplingPreset) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The Fig. 1a read-off table; on gpu merged with each model's depth-wise summaries and the
    leaderboard average regressed on every candidate scalar."""
    fig1a = fig1a_table()
    if not P.fig1a_models:
        return fig1a, None
    rows = [{"hub_id": h, **cd.summarise(_paper_run(P, h, h)).mean(numeric_only=True).to_dict()}
            for h in P.fig1a_models]
    fig1a = fig1a.merge(pd.DataFrame(rows), on="hub_id")
    known = fig1a.dropna(subset=["leaderboard_avg"])
    return fig1a, cs.predictor_stats(known, "leaderboard_avg", [c for c in known.columns if c.startswith("C_")],
                                     seed=P.seed)


def _pythia(P: CouplingPreset, k: int) -> pd.DataFrame | None:
    """Pythia runs over the Fig. 1b checkpoints (gpu): summaries and locality of the mean matrix."""
    rows = []
    for hub_id in P.pythia:
        for step in P.pythia_steps:
            r = _paper_run(P, hub_id, f"{hub_id}@step{step}", revision=f"step{step}")
            rows.append({"model": hub_id, "step": step, **cd.summarise(r).mean(numeric_only=True).to_dict(),
                         "locality": cp.locality(cd.mean_matrix(r, k))})
    return pd.DataFrame(rows) if rows else None
