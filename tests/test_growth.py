"""Growth schedules: freezing, identity growth, stacking, validation (anatomy spec 7, ids 10-12)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layerlab.core import arch
from layerlab.training import growth
from layerlab.training.growth import Phase, Schedule
from layerlab.training.train import ModelSpec, TrainConfig, build_model, train

SPEC = ModelSpec(depth=4, width=16, heads=4, kv_heads=2, ffn=32, vocab_size=50, seq_len=8)


def _ids(n: int = 40, seed: int = 0) -> torch.Tensor:
    return torch.randint(50, (n, 8), generator=torch.Generator().manual_seed(seed))


def _blk(model, layer):
    return arch.view(model).blocks[layer].block


def _block_params(model, layer):
    return {k: v.detach().clone() for k, v in arch.view(model).blocks[layer].block.state_dict().items()}


def test_frozen_layers_bit_identical_and_no_optimizer_state():
    """Identity 10: frozen parameters are bitwise unchanged (weight decay cannot touch them) and
    have no optimiser state; trained ones change."""
    model = build_model(SPEC, 0, torch.float64)
    before = {i: _block_params(model, i) for i in range(4)}
    emb = arch.view(model).embed.weight.detach().clone()
    sched = Schedule((Phase((1, 3), 5, lr=1e-2, embed=False),), name="frozen-test")
    res = train(model, sched, _ids(), TrainConfig(batch_size=4, weight_decay=0.5), progress=False)
    for i in (0, 2):
        after = _block_params(model, i)
        assert all(torch.equal(before[i][k], after[k]) for k in after), f"frozen layer {i} changed"
    assert torch.equal(emb, arch.view(model).embed.weight)
    for i in (1, 3):
        after = _block_params(model, i)
        assert not torch.equal(before[i]["self_attn.q_proj.weight"], after["self_attn.q_proj.weight"])
    state_ids = {id(p) for p in res.optimizer.state}
    frozen = [*_blk(model, 0).parameters(), *_blk(model, 2).parameters(),
              arch.view(model).embed.weight]
    assert not any(id(p) in state_ids for p in frozen)
    assert all(id(p) in state_ids for p in _blk(model, 1).parameters())


def test_frozen_mask_gets_no_weight_gradients():
    model = build_model(SPEC, 0, torch.float64)
    growth.set_trainable(model, Phase((2,), 1, embed=False))
    x = _ids(2)
    model(input_ids=x).logits.sum().backward()
    assert all(p.grad is None for p in _blk(model, 0).parameters())
    assert all(p.grad is not None for p in _blk(model, 2).parameters())
    assert arch.view(model).embed.weight.grad is None


def test_identity_growth_is_function_preserving_bitwise():
    """Identity 11: in true growth, activating a layer with identity init leaves the logits
    bitwise unchanged at the moment of growth (float64)."""
    model = build_model(SPEC, 0, torch.float64)
    x = _ids(3)
    with growth.only_layers(model, [0, 1]):
        before = model(input_ids=x).logits
    gen = torch.Generator().manual_seed(0)
    for layer in (2, 3):
        growth.apply_init(model, layer, Phase((2, 3), 1, init="identity"), {0, 1}, gen)
    with growth.only_layers(model, [0, 1, 2, 3]):
        after = model(input_ids=x).logits
    assert torch.equal(before, after)
    # and the skipped forward is really restored afterwards
    assert "forward" not in _blk(model, 2).__dict__


def test_identity_growth_inside_training_is_function_preserving():
    """Same identity after real training of the shallow part: logits of the trained 2-layer model
    equal those of the 4-layer model right after identity growth."""
    sched = Schedule((Phase((0, 1), 3, embed=True), Phase((0, 1, 2, 3), 2, init="identity", embed=True)),
                     mode="grow", name="identity-growth")
    val = _ids(4, seed=5)
    ref = build_model(SPEC, 0, torch.float64)
    part = train(ref, Schedule(sched.phases[:1], mode="grow", name="p"), _ids(), TrainConfig(batch_size=4),
                 progress=False)
    with growth.only_layers(part.model, [0, 1]):
        a = part.model(input_ids=val).logits
    gen = torch.Generator().manual_seed(0)
    for layer in (2, 3):
        growth.apply_init(part.model, layer, sched.phases[1], {0, 1}, gen)
    b = part.model(input_ids=val).logits
    assert torch.equal(a, b)


def test_stacking_copies_exactly_the_intended_layers():
    sched = growth.stacking(4, 4)
    model = build_model(SPEC, 0, torch.float64)
    train(model, Schedule(sched.phases[:1], mode="grow", name="s"), _ids(), TrainConfig(batch_size=4),
          progress=False)
    lower = {i: _block_params(model, i) for i in range(2)}
    gen = torch.Generator().manual_seed(0)
    for layer in (2, 3):
        growth.apply_init(model, layer, sched.phases[1], {0, 1}, gen)
    for src, dst in ((0, 2), (1, 3)):
        got = _block_params(model, dst)
        assert all(torch.equal(lower[src][k], got[k]) for k in got)
    assert not torch.equal(lower[0]["mlp.up_proj.weight"], lower[1]["mlp.up_proj.weight"])


def test_scale_and_random_actions():
    model = build_model(SPEC, 0, torch.float64)
    o = _blk(model, 1).self_attn.o_proj.weight.detach().clone()
    q = _blk(model, 1).self_attn.q_proj.weight.detach().clone()
    gen = torch.Generator().manual_seed(0)
    growth.apply_init(model, 1, Phase((1,), 1, init="scale", alpha=0.9), {0}, gen)
    assert torch.equal(_blk(model, 1).self_attn.o_proj.weight, o * 0.9)
    assert torch.equal(_blk(model, 1).self_attn.q_proj.weight, q)
    growth.apply_init(model, 1, Phase((1,), 1, init="random"), {0}, gen)
    w = _blk(model, 1).self_attn.q_proj.weight
    assert not torch.equal(w, q)
    assert abs(float(w.detach().std()) - model.config.initializer_range) < 0.01


@pytest.mark.parametrize(
    "phases,match",
    [
        ((Phase((0, 7), 3),), "out of range"),
        ((Phase((0,), -1),), "positive integer"),
        ((Phase((0,), 0),), "positive integer"),
        ((Phase((0,), 2, init="grow"),), "unknown init action"),
        ((Phase((0,), 2, lr=0),), "lr must be > 0"),
        ((), "no phases"),
    ],
)
def test_schedules_reject_impossible_specs(phases, match):
    with pytest.raises(ValueError, match=match):
        Schedule(phases, name="bad").validate(4)


def test_schedule_rejects_bad_mode_and_copy_source():
    with pytest.raises(ValueError, match="unknown schedule mode"):
        Schedule((Phase((0,), 1),), mode="magic").validate(4)
    bad = Schedule((Phase((1,), 1), Phase((0, 1), 1, init="copy")), mode="grow", name="copy")
    with pytest.raises(ValueError, match="no active layer below"):
        bad.validate(4)


def test_map_profile_relative_depth():
    imp = np.arange(30, dtype=float)
    m = growth.map_profile(imp, 12)
    assert m.shape == (12,)
    # the spec's core L8-11 of 30 maps to layers 3-4 of 12: l' = round(l * 11 / 29)
    assert {int(round(layer * 11 / 29)) for layer in range(8, 12)} == {3, 4}
    assert np.all(np.diff(m) > 0)
    assert np.array_equal(growth.map_profile([1.0, 2.0, 3.0], 3), np.array([1.0, 2.0, 3.0]))


def test_gtt_schedule_structure():
    imp = np.array([0.5, 0.2, 5.0, 4.0, 0.1, -0.3, 0.3, 0.4, 0.05, -0.1, 0.2, 1.0])
    s = growth.gtt(imp, 120).validate(12)
    assert [p.name for p in s.phases] == list(growth.GTT_PHASES)
    assert s.total_steps == 120
    assert set(s.phases[0].layers) == {2, 3}  # core = top 20% by importance
    anti = {5, 9}
    assert not anti & set().union(*(p.layers for p in s.phases[:5]))
    assert set(s.phases[4].activate) == anti and s.phases[4].init == "scale"
    assert set(s.phases[5].layers) == set(range(12))
    covered = set().union(*(p.layers for p in s.phases[:4]))
    assert covered == set(range(12)) - anti


def test_mslt_trains_only_new_top_layers():
    s = growth.mslt(4, 10).validate(4)
    assert s.phases[0].layers == (0, 1) and s.phases[1].layers == (2, 3)
    assert s.phases[1].copy_from == {2: 0, 3: 1} and s.phases[1].trains_embed() is False
    assert s.phases[-1].layers == (0, 1, 2, 3)
    assert s.total_steps == 10


# ----------------------------------------------------------------------------- matched-budget analysis


def _run(arm, seed, nll_curve, flops_per_step=10.0, wall_per_step=1.0, n_windows=4):
    evals = []
    for k, v in enumerate(nll_curve):
        evals.append({"step": k, "tokens": 100 * k, "flops": flops_per_step * k, "wall": wall_per_step * k,
                      "val_nll": v, "windows": [v] * n_windows})
    return {"arm": arm, "seed": seed, "evals": evals,
            "totals": {"wall": wall_per_step * (len(nll_curve) - 1), "flops": flops_per_step * (len(nll_curve) - 1)}}


def test_windows_at_interpolates_and_refuses_extrapolation():
    from layerlab.chapters.growth.analysis import windows_at

    r = _run("uniform", 0, [6.0, 5.0, 4.0])
    assert np.allclose(windows_at(r, "tokens", 150), 4.5)
    assert np.allclose(windows_at(r, "flops", 0), 6.0)
    assert np.isnan(windows_at(r, "tokens", 201)).all()


def test_cost_to_target_and_speedups():
    from layerlab.chapters.growth.analysis import cost_to_target, speedups

    r = _run("uniform", 0, [6.0, 5.0, 4.0])
    assert cost_to_target(r, "tokens", 4.5) == pytest.approx(150.0)
    assert cost_to_target(r, "tokens", 3.0) == float("inf")
    # an arm that is twice as cheap per step on the FLOP axis and follows the same loss curve
    res = {"runs": [_run("uniform", s, [6.0, 5.0, 4.0]) for s in range(3)]
           + [_run("gtt", s, [6.0, 5.0, 4.0], flops_per_step=5.0) for s in range(3)]}
    sp = speedups(res, "flops").set_index("arm")
    assert sp.loc["gtt", "saving"] == pytest.approx(0.5)
    assert sp.loc["gtt", "speedup"] == pytest.approx(2.0)
    assert sp.loc["uniform", "saving"] == pytest.approx(0.0)


def test_hierarchical_delta_ci_covers_a_known_shift():
    from layerlab.chapters.growth.analysis import hierarchical_delta

    rng = np.random.default_rng(0)
    base = rng.normal(5.0, 0.3, size=64)
    a = base[None, :] + rng.normal(0, 0.01, size=(3, 64)) - 0.2
    b = base[None, :] + rng.normal(0, 0.01, size=(3, 64))
    ci = hierarchical_delta(a, b, n_boot=500)
    assert ci.low < -0.2 < ci.high and ci.high < 0
    assert ci.estimate == pytest.approx(a.mean() - b.mean())


def test_matched_uses_the_smallest_budget_and_reports_deltas():
    from layerlab.chapters.growth.analysis import matched

    res = {"runs": [_run("uniform", s, [6.0, 5.0, 4.0]) for s in range(3)]
           + [_run("gtt", s, [6.0, 5.5, 4.5], flops_per_step=5.0) for s in range(3)]}
    m = matched(res, "flops").set_index("arm")
    assert m.loc["gtt", "budget"] == 10.0  # gtt spent 2 x 5 FLOPs; uniform read at 10 = step 1
    assert m.loc["uniform", "nll"] == pytest.approx(5.0)
    assert m.loc["gtt", "delta"] == pytest.approx(-0.5)
    t = matched(res, "tokens").set_index("arm")
    assert t.loc["gtt", "delta"] == pytest.approx(0.5)


# ----------------------------------------------------------------------------- the chapter's result and claims


def _comparison(arms: dict[str, tuple[list[float], float, float]], seeds=(0, 1, 2)) -> dict:
    """A synthetic comparison: per arm (NLL curve, FLOPs per step, seconds per step), ``seeds`` runs each."""
    runs = []
    for arm, (curve, flops, wall) in arms.items():
        for s in seeds:
            r = _run(arm, s, curve, flops_per_step=flops, wall_per_step=wall)
            r["totals"]["tokens"] = r["evals"][-1]["tokens"]
            runs.append({**r, "seconds": wall * (len(curve) - 1)})
    return {"best_lr": 1e-2, "sweep": [{"lr": 1e-2, "final_nll": 4.0}], "runs": runs,
            "importance": {"operator": "neighbour_avg", "delta_nll": [0.1, 0.3, 0.2, 0.0]},
            "gtt_schedule": [{"phase": "maturation", "steps": 2, "layers": [0, 1, 2, 3]}]}


def _synthetic_result(arms):
    import pandas as pd

    from layerlab.chapters.growth import preset
    from layerlab.chapters.growth.run import assemble
    from layerlab.core.protocol import provenance

    p = preset("smoke")
    fam = (pd.DataFrame({"name": ["a"], "depth": [1], "width": [32], "lr": [3e-3], "heldout_nll": [6.0]}),
           pd.DataFrame({"name": ["a", "a"], "step": [0, 8], "val_nll": [7.0, 6.0]}),
           {"family_n": 1, "family_minutes": 0.0, "family_best": "a", "family_best_nll": 6.0})
    return assemble(p, _comparison(arms), fam, provenance("growth", p, model="synthetic", tokens="-"))


def test_claims_follow_the_result_tables():
    """GTT: same steps, half the FLOPs and time per step and a lower loss curve; stacking and MSLT
    follow uniform. Every claim must then come out on GTT's side."""
    from layerlab.chapters.growth import claims
    from layerlab.report.claims import VERDICTS

    same = ([6.0, 5.0, 4.0], 10.0, 1.0)
    r = _synthetic_result({"uniform": same, "gtt": ([6.0, 3.8, 3.5], 5.0, 0.5), "stacking": same, "mslt": same})
    rows = {c.id: c for c in claims(r)}
    assert list(rows) == ["G1", "G1b", "G1c", "G2", "G3", "G4", "G5-stacking", "G5-mslt"]
    assert all(c.verdict in VERDICTS for c in rows.values())
    assert rows["G1"].ours == pytest.approx(-0.5) and rows["G1"].verdict == "supported"
    # equal FLOPs: GTT's final 10 FLOPs buy uniform one step (NLL 5.0)
    assert rows["G1b"].ours == pytest.approx(3.5 - 5.0) and rows["G1b"].verdict == "supported"
    assert rows["G2"].ours == pytest.approx(0.5) and rows["G2"].verdict == "supported"
    # cost to the target 4.0: GTT crosses it 2/2.2 of the way through its first step (5 FLOPs), uniform at 20
    assert rows["G3"].ours == pytest.approx(1 - (2 / 2.2 * 5.0) / 20) and rows["G3"].verdict == "supported"
    assert rows["G4"].verdict == "supported"  # GTT at 63% of the tokens (NLL ≈ 3.72) beats uniform's final 4.0
    assert rows["G5-mslt"].verdict == "supported"
    assert r.numbers["ratio"] == pytest.approx(3.5 / 4.0) and r.numbers["nruns"] == 12


def test_claims_without_an_effect_are_not_supported():
    from layerlab.chapters.growth import claims

    same = ([6.0, 5.0, 4.0], 10.0, 1.0)
    rows = {c.id: c for c in claims(_synthetic_result({"uniform": same, "gtt": same}))}
    assert list(rows) == ["G1", "G1b", "G1c", "G2", "G3", "G4"]  # no stacking / MSLT arms, no G5 rows
    assert rows["G1"].ours == pytest.approx(0.0) and rows["G1"].verdict == "not supported"
    assert rows["G4"].verdict == "not supported"


def test_run_smoke_is_cached_and_typed():
    """A second ``run`` returns the stored result: the same tables, numbers and provenance."""
    import pandas as pd

    from layerlab.chapters.growth import claims, preset, run
    from layerlab.chapters.growth.run import GrowthResult
    from layerlab.report.claims import claim_table

    a, b = run(preset("smoke")), run(preset("smoke"))
    assert isinstance(a, GrowthResult) and a.provenance == b.provenance and a.provenance.profile == "smoke"
    assert a.numbers == b.numbers and a.step_time == b.step_time
    for f in ("sweep", "importance", "gtt_schedule", "curves", "matched", "speedups", "pair", "early", "family",
              "family_curves"):
        pd.testing.assert_frame_equal(getattr(a, f), getattr(b, f))
    pd.testing.assert_frame_equal(claim_table(claims(a)), claim_table(claims(b)))
    assert len(a.curves) == a.numbers["nruns"] * (preset("smoke").n_evals + 1)
