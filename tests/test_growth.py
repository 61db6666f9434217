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


# ----------------------------------------------------------------------------- the chapter's run


def test_gtt_takes_anti_layers_from_the_caller():
    """Anti-layers chosen by a test (the chapter) override the point estimates' signs."""
    imp = np.array([0.5, -0.2, 5.0, 4.0])
    assert set(growth.gtt(imp, 60).phases[4].activate) == {1}  # fallback: negative point estimate
    s = growth.gtt(imp, 60, anti=()).validate(4)
    assert s.phases[4].activate == () and 1 in set().union(*(p.layers for p in s.phases[:4]))
    with pytest.raises(ValueError, match="must lie in"):
        growth.gtt(imp, 60, anti=(7,))


def test_anti_layers_need_the_test_not_a_negative_mean():
    """A layer whose ΔNLL is negative on every document is anti; one whose mean is negative but whose
    documents disagree is not (Holm-adjusted exact sign flips over 16 documents)."""
    from layerlab.chapters.growth.importance import anti_layers

    rng = np.random.default_rng(0)
    split = np.r_[np.full(8, 0.19), np.full(8, -0.21)]  # mean -0.01, documents disagree
    per_doc = np.stack([rng.normal(0.5, 0.1, 16), -np.abs(rng.normal(0.05, 0.01, 16)), split])
    assert per_doc[2].mean() < 0
    anti, adj = anti_layers(per_doc)
    assert anti == [1] and adj.shape == (3,)


def test_planned_flops_equal_the_trainers_ledger():
    """The budget of the uniform-flops control is computed before training: it must equal what the
    trainer's ledger then counts."""
    from layerlab.chapters.growth import preset
    from layerlab.chapters.growth.run import _spec, make_schedule, planned_flops

    p = preset("smoke", depth=4, steps=6, batch_size=2)
    spec = _spec(p, 50)
    ids = torch.randint(50, (20, spec.seq_len), generator=torch.Generator().manual_seed(0))
    for arm, imp in (("gtt", [0.1, 0.4, 0.2, 0.3]), ("stacking", None), ("uniform", None)):
        sched = make_schedule(arm, p, 1e-2, imp, anti=())
        res = train(build_model(spec, 0), sched, ids, TrainConfig(batch_size=2), progress=False)
        assert planned_flops(p, sched, 50) == res.totals["flops"], arm


def test_run_smoke_is_cached_and_typed():
    """A second ``run`` returns the stored result: the same tables, numbers and provenance; held-out
    text comes from >= 8 documents and every arm runs every seed."""
    import pandas as pd

    from layerlab.chapters.growth import claims, preset, run
    from layerlab.chapters.growth.run import GrowthResult
    from layerlab.report.claims import claim_table

    a, b = run(preset("smoke")), run(preset("smoke"))
    assert isinstance(a, GrowthResult) and a.provenance == b.provenance and a.provenance.profile == "smoke"
    assert a.numbers == b.numbers
    for f in ("sweep", "importance", "gtt_schedule", "curves", "arms", "family", "family_curves"):
        pd.testing.assert_frame_equal(getattr(a, f), getattr(b, f))
    pd.testing.assert_frame_equal(claim_table(claims(a)), claim_table(claims(b)))
    assert a.numbers["val_docs"] >= 8
    assert (a.arms.seeds == len(preset("smoke").seeds)).all()
    assert set(a.arms.arm) == {"uniform", "gtt", "stacking", "mslt", "uniform-flops", "uniform-wall"}
    # the page's arm table gives training FLOPs in TFLOPs: the mean over seeds of each run's ledger / 1e12
    from layerlab.chapters.growth import prose

    shown = prose.arm_table(a)
    assert "PFLOPs" not in shown.to_html()
    for arm in ("uniform", "gtt"):
        ledgers = [r["totals"]["flops"] for r in a.comparison["runs"] if r["arm"] == arm]
        assert len(ledgers) == len(preset("smoke").seeds)
        assert shown.data.set_index("arm").loc[arm, "TFLOPs"] == pytest.approx(np.mean(ledgers) / 1e12)
    # GTT was trained beside a repeat of uniform training and scored afterwards, at every evaluation step; the
    # uniform record keeps the pooled run's scores with the repeat's seconds, and the repeat did the same work
    from layerlab.chapters.growth.run import _eval_steps, train_pair

    timed = [r for r in a.comparison["runs"] if r["timed"]]
    assert [r["arm"] for r in timed] == ["uniform", "gtt"] * len(preset("smoke").seeds)
    pair_seconds = 0.0
    for u, g in zip(timed[::2], timed[1::2]):
        assert [e["step"] for e in g["evals"]] == list(_eval_steps(preset("smoke"), g["steps"]))
        assert g["eval_seconds"] > 0 and all(len(e["windows"]) == a.numbers["val_windows"] for e in g["evals"])
        assert u["repeat_identical"] and u["seed"] == g["seed"]
        assert u["at_once"] == g["at_once"] == 1  # smoke: one worker, so one pair at a time
        prof = a.comparison["profiles"][str(u["seed"])]
        pair = train_pair(preset("smoke"), u["seed"], a.best_lr, prof["mean"], prof["anti"])  # cached
        assert u["totals"] == pair["uniform"]["totals"] and g["totals"] == pair["gtt"]["totals"]
        assert [e["wall"] for e in u["evals"]] == [e["wall"] for e in pair["uniform"]["evals"]]
        assert u["evals"][-1]["wall"] == pytest.approx(u["totals"]["wall"])
        assert pair["seconds"] >= u["totals"]["wall"] + g["totals"]["wall"]
        pair_seconds += pair["seconds"]
    assert a.numbers["repeat_identical"] == len(preset("smoke").seeds)
    # the page's "minutes training alone" are the pairs' own seconds, also when the pairs came from the cache
    assert a.numbers["timed_minutes"] == pytest.approx(pair_seconds / 60)


def test_timed_pairs_train_two_at_a_time_and_say_so():
    """With two workers the timed pairs (GTT beside a uniform repeat) train two at a time, one process each. Their
    records say so, and so do the wall-clock rows' notes and the page; the repeat, trained in another process
    beside another pair, still ends with the weights of the seed's pooled uniform run, bit for bit."""
    from types import SimpleNamespace

    from layerlab.chapters.growth import analysis, preset, prose
    from layerlab.chapters.growth.run import run_comparison

    # seeds of their own (nothing of this is in the cache yet); one rate and no other arms: only the pairs matter here
    p = preset("smoke", seeds=(11, 12), lr_sweep=(1e-2,), lr_extend=0, arms=("uniform", "gtt"))
    comp = run_comparison(p, workers=2)
    timed = [r for r in comp["runs"] if r["timed"]]
    assert [r["arm"] for r in timed] == ["uniform", "gtt"] * 2
    assert all(r["at_once"] == 2 for r in timed) and analysis.timed_at_once(comp) == [2]
    assert all(r["repeat_identical"] for r in timed if r["arm"] == "uniform")
    assert comp["timed_seconds"] >= sum(r["totals"]["wall"] for r in timed)
    assert analysis.timing_phrase(comp).endswith("2 seeds at a time (one process per seed)")
    assert prose.pairs_clause(SimpleNamespace(comparison=comp)).startswith("2 seeds at a time, one process")
    one_pair = analysis.timed_at_once({"runs": [{**timed[0], "at_once": 1}]})
    alone = {"runs": [{"timed": True}]}  # a record made before pairs ran side by side
    assert one_pair == [1] and analysis.timing_phrase(alone).startswith("alone")
    assert prose.pairs_clause(SimpleNamespace(comparison=alone)).startswith("one seed at a time")


def test_a_timed_run_refuses_a_shorter_budget_or_another_arm():
    """The timed run is GTT trained by train_pair at the preset's full budget; asking for other steps or another
    arm is an error raised before anything trains (a shorter timed run would be compared with a full one)."""
    from layerlab.chapters.growth import preset
    from layerlab.chapters.growth.run import run_arm

    with pytest.raises(ValueError, match="full budget"):
        run_arm(preset("smoke"), "gtt", 0, 1e-2, [0.0] * preset("smoke").depth, [], steps=5, timed=True)
    with pytest.raises(ValueError, match="arm='uniform'"):
        run_arm(preset("smoke"), "uniform", 0, 1e-2, timed=True)


def test_lr_ladder_steps_beyond_an_edge():
    """``beyond`` walks the 1-3-10 ladder the presets' grids are drawn from, from on or between its rungs."""
    from layerlab.chapters.growth.run import beyond

    assert beyond(3e-3, down=True) == 1e-3 and beyond(1e-3, down=True) == 3e-4
    assert beyond(3e-2, down=False) == 1e-1 and beyond(1e-2, down=False) == 3e-2
    assert beyond(2e-3, down=True) == 1e-3 and beyond(2e-3, down=False) == 3e-3


@pytest.mark.parametrize("optimum, added, bracketed", [
    (1e-2, [], True),               # inside the grid: nothing added
    (2e-3, [1e-3], True),           # one rate below the edge brackets it
    (1e-5, [1e-3, 3e-4], False),   # still at the edge after lr_extend = 2 additions
    (1.0, [1e-1, 3e-1], False),    # the other side
])
def test_the_sweep_extends_beyond_an_edge_optimum(monkeypatch, optimum, added, bracketed):
    """A best rate at the grid's edge adds the next rung beyond it, at most ``lr_extend`` times, and the page
    says which rates were added and whether the sweep brackets its optimum (training replaced by a loss that
    is a bowl in log(lr) around ``optimum``)."""
    import importlib
    from types import SimpleNamespace

    import pandas as pd

    from layerlab.chapters.growth import preset, prose

    run = importlib.import_module("layerlab.chapters.growth.run")  # the package's ``run`` is the function

    p = preset("smoke", lr_sweep=(3e-3, 1e-2, 3e-2))
    calls = []

    def fake(preset_, jobs, workers, fn=None):
        calls.append([a[2] for a, _ in jobs])
        return [{"lr": a[2], "train_loss": [(np.log10(a[2]) - np.log10(optimum)) ** 2] * 4} for a, _ in jobs]

    monkeypatch.setattr(run, "_parallel", fake)
    sweep = run.sweep_lr(p, workers=2)
    assert calls[0] == [3e-3, 1e-2, 3e-2] and [c for call in calls[1:] for c in call] == added
    lrs, best = sorted(r["lr"] for r in sweep), run.select_lr(sweep)
    assert (best not in (lrs[0], lrs[-1])) == bracketed
    res = SimpleNamespace(sweep=pd.DataFrame(sweep), comparison={"preset": {"lr_sweep": list(p.lr_sweep)}},
                          numbers={"best_lr": best, "lr_min": lrs[0], "lr_max": lrs[-1],
                                   "lr_at_edge": best in (lrs[0], lrs[-1])})
    text = prose.lr_sentence(res)
    assert ("brackets its optimum" in text) == bracketed and ("does not bracket" in text) == (not bracketed)
    assert ("added" in text) == bool(added) and all(f"{x:g}" in text for x in added)
