"""Trainer: FLOP accounting, exact resume, determinism, ledger sums (anatomy spec section 7, id. 12)."""

from __future__ import annotations

import json
import time

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch.utils.flop_counter import FlopCounterMode

from layerlab.training import growth
from layerlab.training.checkpoints import list_checkpoints
from layerlab.training.train import (
    ModelSpec,
    TrainConfig,
    build_model,
    evaluate_snapshots,
    flops_per_token,
    log_steps,
    train,
    train_interleaved,
    train_steps,
)

SPEC = ModelSpec(depth=3, width=16, heads=4, kv_heads=2, ffn=32, vocab_size=50, seq_len=8)


def _ids(n: int = 40, t: int = 8, v: int = 50, seed: int = 0) -> torch.Tensor:
    return torch.randint(v, (n, t), generator=torch.Generator().manual_seed(seed))


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_flops_hand_count():
    # d=16, d_q=16, d_kv=8 (2 kv heads of 4), f=32, V=50, T=8.
    cfg = SPEC.config()
    p_layer = 16 * 16 + 2 * 16 * 8 + 16 * 16 + 3 * 16 * 32  # q, k+v, o, gate+up+down = 2304
    assert p_layer == 2304
    f = flops_per_token(cfg, 8, active=[0, 1, 2], trainable=[0, 1, 2], embed=True, head=True)
    assert f["forward"] == 3 * (2 * 2304 + 4 * 8 * 16) + 2 * 16 * 50  # 16960
    assert f["act_grad"] == 3 * (2 * 2304 + 8 * 8 * 16) + 2 * 16 * 50  # 18496
    assert f["weight_grad"] == 3 * 2 * 2304 + 2 * 16 * 50  # 15424
    # only the top layer trains: act grads stop at layer 2, weight grads of one layer + head
    g = flops_per_token(cfg, 8, active=[0, 1, 2], trainable=[2], embed=False, head=True)
    assert g["forward"] == f["forward"]
    assert g["act_grad"] == (2 * 2304 + 8 * 8 * 16) + 2 * 16 * 50
    assert g["weight_grad"] == 2 * 2304 + 2 * 16 * 50


@pytest.mark.parametrize(
    "trainable,embed,head",
    [((0, 1, 2), True, True), ((1,), False, True), ((2,), False, False), ((), False, True), ((0,), False, True)],
)
def test_flops_match_torch_flop_counter(trainable, embed, head):
    """The ledger's forward and backward FLOPs equal what torch actually executes, so frozen
    layers' weight-gradient (and, below the lowest trainable layer, all backward) work is skipped."""
    model = build_model(SPEC, seed=0, dtype=torch.float64)
    growth.set_trainable(model, growth.Phase(trainable, 1, embed=embed, head=head))
    x = _ids(2)
    with FlopCounterMode(display=False) as fc:
        logits = model(input_ids=x).logits
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), x[:, 1:].flatten())
    with FlopCounterMode(display=False) as fb:
        loss.backward()
    f = flops_per_token(model.config, 8, range(3), trainable, embed, head)
    n_tok = x.numel()
    assert fc.get_total_flops() == f["forward"] * n_tok
    assert fb.get_total_flops() == (f["act_grad"] + f["weight_grad"]) * n_tok


def test_log_steps():
    assert log_steps(8) == (0, 1, 2, 4, 8)
    assert log_steps(10) == (0, 1, 2, 4, 8, 10)
    assert log_steps(1) == (0, 1)


def test_deterministic_given_seed():
    cfg = TrainConfig(batch_size=4, seed=3)
    a = train(build_model(SPEC, 1, torch.float64), growth.uniform(3, 4), _ids(), cfg, progress=False)
    b = train(build_model(SPEC, 1, torch.float64), growth.uniform(3, 4), _ids(), cfg, progress=False)
    c = train(build_model(SPEC, 1, torch.float64), growth.uniform(3, 4), _ids(),
              TrainConfig(batch_size=4, seed=4), progress=False)
    assert _same(a.model, b.model)
    assert not _same(a.model, c.model)


@pytest.mark.parametrize("make", [lambda: growth.uniform(4, 7, warmup=2), lambda: growth.stacking(4, 8),
                                  lambda: growth.gtt([1.0, 3.0, -0.5, 0.2], 12)])
def test_resume_equals_uninterrupted(tmp_path, make):
    spec = ModelSpec(depth=4, width=16, heads=4, kv_heads=2, vocab_size=50, seq_len=8)
    sched = make()
    cfg = TrainConfig(batch_size=4, checkpoints=(0, 2, 3, 5), eval_steps=(0, 3, sched.total_steps))
    val = _ids(6, seed=9)
    full = train(build_model(spec, 0, torch.float64), sched, _ids(), cfg, val_ids=val, progress=False)
    # "kill" after step 4: the latest checkpoint on disk is step 3
    train(build_model(spec, 0, torch.float64), sched, _ids(), cfg, val_ids=val, run_dir=tmp_path,
          stop_after=4, progress=False)
    assert list_checkpoints(tmp_path) == [0, 2, 3]
    resumed = train(build_model(spec, 0, torch.float64), sched, _ids(), cfg, val_ids=val, run_dir=tmp_path,
                    progress=False)
    assert _same(full.model, resumed.model)
    assert [r["loss"] for r in full.log] == [r["loss"] for r in resumed.log]
    assert [e["val_nll"] for e in full.evals] == [e["val_nll"] for e in resumed.evals]


@pytest.mark.parametrize("make", [lambda: growth.uniform(4, 7, warmup=2), lambda: growth.stacking(4, 8),
                                  lambda: growth.gtt([1.0, 3.0, -0.5, 0.2], 12)])
def test_deferred_evaluation_equals_inline_bit_for_bit(make):
    """defer_eval keeps the weights at each eval step; evaluate_snapshots, run later on a fresh model, gives
    the rows train() measures inline: the same steps, ledger columns and NLLs (per window too), bit for bit,
    also at stacking's early steps, where the upper layers are not yet in the forward pass."""
    spec = ModelSpec(depth=4, width=16, heads=4, kv_heads=2, vocab_size=50, seq_len=8)
    sched = make()
    steps = (0, 2, 5, sched.total_steps)
    val = _ids(6, seed=9)
    inline = train(build_model(spec, 0), sched, _ids(), TrainConfig(batch_size=4, eval_steps=steps,
                   eval_per_window=True), val_ids=val, progress=False)
    deferred = train(build_model(spec, 0), sched, _ids(), TrainConfig(batch_size=4, eval_steps=steps,
                     defer_eval=True), progress=False)
    assert deferred.evals == [] and [s["step"] for s in deferred.snapshots] == list(steps)
    if sched.mode == "grow":  # the snapshots record the layers that were in the forward pass at each step
        assert len(deferred.snapshots[0]["active"]) < spec.depth
    assert _same(inline.model, deferred.model)  # keeping snapshots does not change training
    rows = evaluate_snapshots(build_model(spec, 1), deferred.snapshots, val, per_window=True)
    wall = [r.pop("wall") for r in rows] + [r.pop("wall") for r in inline.evals]  # timings differ run to run
    assert all(w >= 0 for w in wall)
    assert rows == inline.evals


def test_deferred_evaluation_refuses_a_checkpointed_run(tmp_path):
    cfg = TrainConfig(batch_size=4, checkpoints=(0, 2), eval_steps=(0, 2), defer_eval=True)
    with pytest.raises(ValueError, match="defer_eval"):
        train(build_model(SPEC, 0), growth.uniform(3, 2), _ids(), cfg, run_dir=tmp_path, progress=False)


def test_interleaved_training_equals_training_each_alone_bit_for_bit(tmp_path):
    """train_interleaved steps GTT and uniform runs in turn (different seeds, schedules and lengths; one of them
    checkpointed): each ends with the weights, losses, ledger FLOPs, eval rows and checkpoints of the same run
    trained alone; each run's seconds count only its own steps."""
    spec = ModelSpec(depth=4, width=16, heads=4, kv_heads=2, vocab_size=50, seq_len=8)
    scheds = [growth.uniform(4, 9, warmup=2), growth.gtt([1.0, 3.0, -0.5, 0.2], 12)]
    cfgs = [TrainConfig(batch_size=4, seed=3, eval_steps=(0, 4, 9), checkpoints=(4, 9)),
            TrainConfig(batch_size=4, seed=5, eval_steps=(0, 6, 12), defer_eval=True)]
    val = _ids(6, seed=9)

    def _counts(r: dict) -> tuple:  # a log or eval row without its seconds
        return tuple(v for k, v in r.items() if k != "wall")

    def runs(tag: str) -> list:
        return [train_steps(build_model(spec, c.seed), s, _ids(), c, val_ids=val, progress=False,
                            run_dir=None if c.defer_eval else tmp_path / tag) for s, c in zip(scheds, cfgs)]

    t0 = time.perf_counter()
    together = train_interleaved(runs("together"))
    elapsed = time.perf_counter() - t0
    alone = [train_interleaved([r])[0] for r in runs("alone")]
    for a, b in zip(together, alone):
        assert _same(a.model, b.model)
        assert [_counts(r) for r in a.log] == [_counts(r) for r in b.log]
        assert [_counts(e) for e in a.evals] == [_counts(e) for e in b.evals]
        assert [s["step"] for s in a.snapshots] == [s["step"] for s in b.snapshots]
    assert sum(r.totals["wall"] for r in together) <= elapsed  # each run timed its own steps only
    assert len(together[0].log) == 9 and len(together[1].log) == 12 and len(together[1].snapshots) == 3
    for step in (4, 9):
        ta = load_file(str(tmp_path / "together" / f"ckpt-{step:06d}" / "model.safetensors"))
        tb = load_file(str(tmp_path / "alone" / f"ckpt-{step:06d}" / "model.safetensors"))
        assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)


def test_train_steps_checks_its_inputs_before_the_first_step():
    with pytest.raises(ValueError, match=r"\[N, T\]"):
        train_steps(build_model(SPEC, 0), growth.uniform(3, 2), torch.zeros(5, dtype=torch.long), TrainConfig())


def test_checkpoint_format(tmp_path):
    cfg = TrainConfig(batch_size=4, checkpoints=(0, 2))
    train(build_model(SPEC, 0, torch.float64), growth.uniform(3, 2), _ids(), cfg, run_dir=tmp_path,
          progress=False)
    ck = tmp_path / "ckpt-000002"
    weights = load_file(str(ck / "model.safetensors"))
    opt = load_file(str(ck / "optimizer.safetensors"))
    meta = json.loads((ck / "state.json").read_text())
    assert meta["step"] == 2 and meta["model_config"]["num_hidden_layers"] == 3
    assert "model.layers.0.self_attn.q_proj.weight" in weights
    assert "model.layers.0.self_attn.q_proj.weight::exp_avg" in opt
    assert len(meta["log"]) == 2


def test_ledger_sums_and_uniform_equivalence():
    """Identity 12: phase sums equal the totals; a one-phase all-trainable schedule (with the
    embedding) reproduces the uniform baseline's ledger."""
    spec = ModelSpec(depth=4, width=16, heads=4, kv_heads=2, vocab_size=50, seq_len=8)
    cfg = TrainConfig(batch_size=4)
    g = train(build_model(spec, 0, torch.float64), growth.gtt([1.0, 3.0, -0.5, 0.2], 12), _ids(), cfg,
              progress=False)
    for k in ("steps", "tokens", "forward", "act_grad", "weight_grad", "flops"):
        assert sum(r[k] for r in g.ledger) == g.totals[k]
    assert g.totals["steps"] == 12 and g.totals["tokens"] == 12 * 4 * 8
    one = growth.Schedule((growth.Phase((0, 1, 2, 3), 5, embed=True),), name="one")
    a = train(build_model(spec, 0, torch.float64), one, _ids(), cfg, progress=False)
    u = train(build_model(spec, 0, torch.float64), growth.uniform(4, 5), _ids(), cfg, progress=False)
    for k in ("steps", "tokens", "forward", "act_grad", "weight_grad", "flops"):
        assert a.totals[k] == u.totals[k]
    assert _same(a.model, u.model)


def test_bad_inputs_raise_clear_errors():
    model = build_model(SPEC, 0, torch.float64)
    with pytest.raises(ValueError, match="train_ids must be"):
        train(model, growth.uniform(3, 1), torch.zeros(5, dtype=torch.long), TrainConfig(), progress=False)
    with pytest.raises(ValueError, match="out of range"):
        train(model, growth.uniform(4, 1), _ids(), TrainConfig(), progress=False)
    with pytest.raises(ValueError, match="invalid ModelSpec"):
        ModelSpec(depth=2, width=10, heads=4).config()


def test_flops_true_growth_skips_inactive_layers():
    """In true growth, skipped layers cost nothing: the ledger's forward/backward for the active
    subset equal torch's count with the other layers bypassed."""
    model = build_model(SPEC, seed=0, dtype=torch.float64)
    growth.set_trainable(model, growth.Phase((0, 1), 1, embed=True))
    x = _ids(2)
    with growth.only_layers(model, [0, 1]):
        with FlopCounterMode(display=False) as fc:
            logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), x[:, 1:].flatten())
        with FlopCounterMode(display=False) as fb:
            loss.backward()
    f = flops_per_token(model.config, 8, [0, 1], [0, 1], True, True)
    assert fc.get_total_flops() == f["forward"] * x.numel()
    assert fb.get_total_flops() == (f["act_grad"] + f["weight_grad"]) * x.numel()
