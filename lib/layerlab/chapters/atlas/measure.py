"""The atlas's measurement: every lens on every layer, from shared passes (issue 18).

Nothing here defines a metric; each lens is the library's own function, called on a shared pass:

* one clean forward per batch of windows, with capture, inside the prefix-cached ablation engine
  (:func:`layerlab.metrics.ablation.evaluate_interventions`, ``on_batch``) serves the ablations
  (skip / skip_attn / skip_mlp / neighbour_avg, Wietrzykowski 2026), both logit lenses
  (:func:`layerlab.core.residual.lens_logits`; nostalgebraist 2020 and Kamigaito et al. 2025 Eq. 1), the
  residual norms, ShortGPT block influence and angular distance (:func:`~layerlab.metrics.ablation.block_geometry`;
  Men et al. 2024, BI = 1 − cos(x_l, x_{l+1}); Gromov et al. 2024) and the residual members of the
  bias-diversity decomposition (:func:`layerlab.metrics.members.member_features`,
  :func:`layerlab.metrics.diversity.terms_at_depth`) with the information gain of the logit-lens summaries
  (:func:`layerlab.metrics.infotheory.marginal_gains`);
* the frozen-context method (:func:`layerlab.core.jacobians.frozen_context_jacobians`) gives the block
  Jacobians, read by :mod:`layerlab.metrics.coupling` (spectral norm, ‖J‖_F, m_K to the neighbouring
  blocks and its spectrum-matched null; Aubry et al. 2025);
* the weights give the delta correlation and the held-out lag-1 predictability R² of the innovations
  (:mod:`layerlab.metrics.weights`, :mod:`layerlab.metrics.predictability`; Wietrzykowski 2026);
* recovery, where cheap (:func:`recovery_piece`): the anatomy chapter's perturb-and-fine-tune run
  (:func:`layerlab.metrics.recovery.recovery_run`; Wietrzykowski 2026, finding 3), short and of fixed length,
  beside the same fine-tune without noise (its control); both runs of every layer read the blocks' clean inputs
  from one pass per batch (:class:`layerlab.metrics.recovery.CleanInputs`).

``shared=False`` computes the clean-pass lenses with each metric's own forward pass instead (the
reference the tests compare bit-for-bit and the bench times). All outputs are per window (the lens
statistics) or per sample, so the run can bootstrap over documents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from layerlab.core.arch import view
from layerlab.core.jacobians import frozen_context_jacobians
from layerlab.core.residual import lens_logits, run_with_capture
from layerlab.metrics import ablation, coupling, diversity, members, predictability, recovery, weights

__all__ = ["OPS", "batch_pieces", "jacobian_piece", "lens_positions", "members_defined", "omitted_lenses",
           "reader_components", "recovery_piece", "weight_piece"]

#: The ablation operators of the atlas (mean ablation needs a calibration split; it is left out).
OPS: tuple[str, ...] = ("skip", "skip_attn", "skip_mlp", "neighbour_avg")
MEMBER_POINTS = ("embed", "attn_out", "mlp_out")


def lens_positions(T: int, n: int, seed: int) -> Tensor:
    """``n`` sorted seeded positions in 0..T−2 (each has a next token), the same for every window of a batch."""
    rng = np.random.default_rng(seed)
    return torch.from_numpy(np.sort(rng.choice(T - 1, size=min(n, T - 1), replace=False)))


@torch.no_grad()
def _lens_stats(model: nn.Module, ids: Tensor, x_in: Tensor, x_out: Tensor, pos: Tensor) -> dict[str, Tensor]:
    """Per-window lens NLL at every depth (both lenses), norm growth, block influence and angle.

    x_in, x_out: block inputs / outputs [L, B, T, d] of the clean pass; pos: lens positions [P]."""
    hs = torch.cat([x_in, x_out[-1:]])  # [L+1, B, T, d]: h_0 (embedding) .. h_L (before the final norm)
    h = hs[:, :, pos]  # [L+1, B, P, d]
    tgt = ids[:, pos + 1]  # [B, P]
    rec, fro = [], []
    for k in range(h.shape[0]):
        lr = lens_logits(model, h[k], mode="recompute")
        lf = lens_logits(model, h[k], mode="frozen", ref=h[-1])
        for out, lg in ((rec, lr), (fro, lf)):
            work = torch.float64 if lg.dtype == torch.float64 else torch.float32
            nll = F.cross_entropy(lg.to(work).flatten(0, 1), tgt.flatten(), reduction="none").double()
            out.append(nll.view(tgt.shape).mean(1))  # [B]
    nrm = hs.double().norm(dim=-1)  # [L+1, B, T]
    bi, angle = ablation.block_geometry(x_in, x_out)  # [L, B, T], [L, B]
    return {"lens_recompute": torch.stack(rec).cpu(), "lens_frozen": torch.stack(fro).cpu(),
            "norm_growth": (nrm[1:] / nrm[:-1]).mean(-1).cpu(), "block_influence": bi.mean(-1).cpu(),
            "angular_distance": (angle / np.pi).cpu()}


def _member_writes(cap: Mapping[str, Tensor], pos: Tensor) -> Tensor:
    """Raw residual writes at ``pos`` ordered embed, attn0, mlp0, ... : [B·P, M, d] (as ``contributions``)."""
    attn, mlp = cap["attn_out"][:, :, pos], cap["mlp_out"][:, :, pos]  # [L, B, P, d]
    inter = torch.stack([attn, mlp], dim=1).flatten(0, 1)  # [2L, B, P, d]
    u = torch.cat([cap["embed"][:, pos][None], inter]).permute(1, 2, 0, 3)  # [B, P, M, d]
    return u.flatten(0, 1)


@torch.no_grad()
def _member_stats(model: nn.Module, feats: members.MemberFeatures, chunk: int) -> dict[str, Tensor]:
    """Per read position: each member's bias and diversity terms (ensemble MSE, one-hot next-token target,
    full-vocabulary frozen-norm lens) and the logit-lens summaries S_k (k = 0..L) for the information gain."""
    readout = members.lens_readout(model)
    dtype = feats.g.dtype
    bias, div, summ = [], [], []
    for mr in members.readout_chunks(feats, readout, chunk, dtype=dtype):
        mse, _, _ = diversity.terms_at_depth(mr)
        bias.append(mse.bias_i.double())
        div.append(mse.div_i.double())
        summ.append(diversity.summaries(mr))
    return {"member_bias": torch.cat(bias), "member_div": torch.cat(div), "summaries": torch.cat(summ),
            "labels": feats.labels.clone()}


def batch_pieces(model: nn.Module, ids: Tensor, layers: Sequence[int], *, lens_pos: Tensor, member_pos: Tensor,
                 ops: Sequence[str] = OPS, member_chunk: int = 8, shared: bool = True) -> dict[str, Tensor]:
    """Everything the clean pass gives for one batch of windows ``ids`` [B, T].

    Returns per-window arrays: ``base`` [B] and ``nll/<op>@<layer>`` [B] (mean NLL per window),
    ``lens_recompute``/``lens_frozen`` [L+1, B] (mean lens NLL at the lens positions), ``norm_growth``,
    ``block_influence`` [L, B] (token means), ``angular_distance`` [L, B] (last token), and per member read
    position (B·P, window-major): ``member_bias``/``member_div`` [B·P, 2L+1], ``summaries`` [B·P, L+1],
    ``labels`` [B·P]. ``shared=False`` runs the lens and member passes as separate forwards (same numbers).
    """
    ivs = ablation.sweep_interventions(model, ops, layers)
    labels = ids[:, member_pos + 1].reshape(-1)
    decompose = members_defined(model)
    got: dict[str, object] = {}

    def on_batch(start: int, b_ids: Tensor, logits: Tensor, cap: Mapping[str, Tensor]) -> None:
        got["lens"] = _lens_stats(model, b_ids, cap["block_in"], cap["block_out"], lens_pos)
        if decompose:
            u = _member_writes(cap, member_pos)
            names = ["embed"] + [f"{k}{layer}" for layer in range(view(model).n_layers) for k in ("attn", "mlp")]
            got["feats"] = members.member_features(model, u, labels, names)

    B = ids.shape[0]
    if shared:
        res = ablation.evaluate_interventions(model, ids, ivs, batch_size=B, points=MEMBER_POINTS if decompose else (),
                                              on_batch=on_batch)
        lens, feats = got["lens"], got.get("feats")
    else:
        res = ablation.evaluate_interventions(model, ids, ivs, batch_size=B)
        _, cap = run_with_capture(model, ids, ("block_in", "block_out"))
        lens = _lens_stats(model, ids, cap["block_in"], cap["block_out"], lens_pos)
        del cap
        seqs = list(ids)
        feats = members.collect(model, seqs, labels.tolist(), [member_pos.tolist()] * B, batch_size=B) \
            if decompose else None
    out: dict[str, Tensor] = {"base": torch.from_numpy(res.base)}
    out.update({f"nll/{k}": torch.from_numpy(v) for k, v in res.nll.items()})
    out.update(lens)  # type: ignore[arg-type]
    if feats is not None:
        out.update(_member_stats(model, feats, member_chunk))  # type: ignore[arg-type]
    return out


def members_defined(model: nn.Module) -> bool:
    """Do the residual members sum to the logits, so that the bias-diversity lenses are defined? Not for a
    model that soft-caps its final logits (Gemma 2): its atlas has no member columns (attn/mlp bias and
    diversity, info_gain), and says so (:func:`omitted_lenses`)."""
    return view(model).logit_softcap is None


def omitted_lenses(model: nn.Module) -> str:
    """Why lenses are missing from this model's atlas ("" when none is)."""
    if members_defined(model):
        return ""
    return (f"no bias-diversity or information-gain columns: {view(model).family} soft-caps its final logits, so "
            "the residual members do not sum to them (Kamigaito et al. 2025, Eq. 1 needs an additive readout)")


def jacobian_piece(model: nn.Module, ids: Tensor, token: int, layers: Sequence[int], *, k: int,
                   seed: int = 0) -> dict[str, Tensor]:
    """Block Jacobians of ``layers`` (consecutive runs get neighbours) at one token of one window, by the
    frozen-context method: spectral norm and ‖J‖_F per layer, and the mean m_K to the adjacent computed
    layers, of the real stack (``coupling``) and of its spectrum-matched null (``coupling_null``) [n]."""
    J = frozen_context_jacobians(model, ids, token=token, layers=list(layers)).double()  # [n, d, d]
    S = coupling.svd(J)
    k = min(k, J.shape[-1])
    m = coupling.cross_coupling(J, None, (k,), rows_svd=S).get(k)  # [n, n]
    m_null = coupling.null_coupling(J, (k,), seed=seed, svd_J=S)["spectrum"].get(k)
    idx = {layer: i for i, layer in enumerate(layers)}
    nb = torch.full((len(layers),), float("nan"), dtype=torch.float64)
    nb_null = nb.clone()
    for i, layer in enumerate(layers):
        adj = [idx[j] for j in (layer - 1, layer + 1) if j in idx]
        if adj:
            nb[i] = m[i, adj].mean()
            nb_null[i] = m_null[i, adj].mean()
    return {"spectral_norm": S.s[:, 0].clone(), "jacobian_fro": S.s.norm(dim=-1), "coupling": nb,
            "coupling_null": nb_null}


def reader_components(model: nn.Module) -> tuple[str, ...]:
    """The matrices of a block that read the residual stream, as this model stores them: those of q, k, v, gate
    and up (:data:`layerlab.metrics.predictability.READERS`) that it has (GPT-2 and Phi have no gate), and the
    fused ``qkv`` of GPT-2, GPT-NeoX (Pythia) and Falcon."""
    have = view(model).blocks[0].weights()
    return tuple(c for c in (*predictability.READERS, "qkv") if c in have)


def weight_piece(model: nn.Module, components: Sequence[str] | None = None) -> dict[str, Tensor]:
    """Per layer: the consecutive-delta correlation centred on it (corr(Δ_{l−1}, Δ_l), NaN at the ends) and
    the held-out lag-1 R² of its innovation (P1 fitted on every other layer), each averaged over
    ``components`` [L] (default: :func:`reader_components`). With fewer than 3 layers no layer has a lag-1
    neighbour to train on besides itself, so the R² stays NaN (as do the delta correlations, which need two
    deltas)."""
    components = reader_components(model) if components is None else tuple(components)
    L = view(model).n_layers
    delta = torch.full((len(components), L), float("nan"), dtype=torch.float64)
    r2 = delta.clone()
    for c, comp in enumerate(components):
        stack = weights.component_stack(model, comp)
        if L >= 3:
            delta[c, 1:L - 1] = weights.delta_correlations(stack)
        g = predictability.gram(stack)
        del stack
        for layer in range(1, L if L >= 3 else 1):
            train = [j for j in range(L) if j != layer]
            r2[c, layer] = predictability.gram_r2(predictability.innovation_gram(g, train), "P1", train, [layer])
    return {"delta_corr": delta.mean(0), "weight_r2": r2.mean(0)}


def recovery_piece(model: nn.Module, layer: int, *, train_ids: Tensor, eval_ids: Tensor, base_nll: float,
                   sigma: float, lr: float, steps: int, batch_size: int, seed: int = 0,
                   clean: recovery.CleanInputs | None = None) -> dict[str, Tensor]:
    """Recovery of one layer (Wietrzykowski 2026, finding 3; the anatomy chapter's protocol and its σ = 0
    control): additive noise σ·std(W)·N(0, 1) on the layer's matrices, then ``steps`` AdamW steps on that layer
    alone over ``train_ids`` [N, T] (fixed length: no stop at recovery), and the same fine-tune without the noise.
    Both are evaluated on ``eval_ids`` [M, T] before and after. Returns, in nats per token:

    * ``noise_damage``: the excess NLL right after the noise (perturbed step 0 − ``base_nll``);
    * ``recovery_left``: the excess still there after the fine-tune, against the control
      (perturbed step ``steps`` − control step ``steps``);
    * ``recovery_drift``: what the fine-tune alone did (control step ``steps`` − ``base_nll``).

    :func:`layerlab.chapters.atlas.analysis.recovery_fraction` turns them into the recovery lens. ``base_nll``:
    :func:`layerlab.metrics.recovery.baseline_nll` on ``eval_ids``. ``clean``: the blocks' clean inputs on these
    windows (:meth:`layerlab.metrics.recovery.CleanInputs.for_runs`, built once for every layer), which both runs
    read instead of each running the frozen blocks before ``layer`` again; the control's step 0, the unperturbed
    model, is ``base_nll`` and is not evaluated again. The numbers are the same bit for bit.
    The model comes back unchanged."""
    kw = dict(train_ids=train_ids, eval_ids=eval_ids, kind="additive", scope="layer", lr=lr, steps=steps,
              eval_every=max(steps, 1), batch_size=batch_size, eval_batch_size=eval_ids.shape[0], seed=seed,
              base_nll=base_nll, clean=clean)
    noisy = recovery.recovery_run(model, layer, sigma_rel=sigma, **kw)
    control = recovery.recovery_run(model, layer, sigma_rel=0.0, clean_start=True, **kw)
    f64 = torch.float64
    return {"noise_damage": torch.tensor(noisy.nll[0] - base_nll, dtype=f64),
            "recovery_left": torch.tensor(noisy.nll[-1] - control.nll[-1], dtype=f64),
            "recovery_drift": torch.tensor(control.nll[-1] - base_nll, dtype=f64)}
