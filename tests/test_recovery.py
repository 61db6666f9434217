"""Perturbation and recovery (anatomy spec 3.7, 7.9)."""

import numpy as np
import pytest
import torch

from layerlab.core import arch, residual
from layerlab.core.models import TINY_FAMILIES, tiny_model
from layerlab.metrics import recovery as R


def _ids(n, t=16, seed=0):
    return torch.randint(0, 259, (n, t), generator=torch.Generator().manual_seed(seed))


def _params(m):
    return {k: v.detach().clone() for k, v in m.named_parameters()}


def _same(m, before):
    return all(torch.equal(v, before[k]) for k, v in m.named_parameters())


def test_zero_noise_and_zero_lr_stays_at_baseline():
    m = tiny_model("llama")
    for scope in ("layer", "all"):
        c = R.recovery_run(m, 2, train_ids=_ids(8), eval_ids=_ids(4, seed=1), sigma_rel=0.0, lr=0.0, steps=4,
                           eval_every=2, batch_size=2, scope=scope)
        assert c.steps == [0, 2, 4]
        assert all(v == c.base_nll for v in c.nll)
        assert c.recovered_at == 0 and c.auc == 0.0


def test_perturb_noop_reproducible_and_restored():
    m = tiny_model("llama")
    before = _params(m)
    with R.perturb(m, 1, 0.0):
        assert _same(m, before)
    with R.perturb(m, 1, 0.5, seed=3):
        a = _params(m)
        changed = [k for k in a if not torch.equal(a[k], before[k])]
        assert len(changed) == 7 and all(k.startswith("model.layers.1.") for k in changed)
    with R.perturb(m, 1, 0.5, seed=3):
        assert _same(m, a)
    with R.perturb(m, 1, 0.5, seed=3, kind="multiplicative"):
        w, w0 = m.model.layers[1].mlp.up_proj.weight, before["model.layers.1.mlp.up_proj.weight"]
        assert not torch.equal(w, w0)
    assert _same(m, before)


def test_finetune_recovers_and_restores_model():
    m = tiny_model("llama")
    before = _params(m)
    flags = {k: p.requires_grad for k, p in m.named_parameters()}
    ids = _ids(4)
    c = R.recovery_run(m, 1, train_ids=ids, eval_ids=ids, sigma_rel=1.0, lr=3e-3, steps=20, eval_every=5,
                       batch_size=4, seed=0)
    assert c.nll[0] > c.base_nll  # the perturbation hurts
    assert c.nll[-1] < c.nll[0]  # fine-tuning the layer on the evaluation text helps
    assert c.recovered_at is not None and c.steps_or_cap <= 20
    assert c.auc == pytest.approx(float(np.trapezoid(np.array(c.nll) - c.base_nll, c.steps) / 20))
    assert _same(m, before)
    assert flags == {k: p.requires_grad for k, p in m.named_parameters()}


def test_stop_at_recovery_ends_the_run_at_the_same_step_with_the_same_curve():
    m = tiny_model("llama")
    before = _params(m)
    ids = _ids(4)
    kw = dict(train_ids=ids, eval_ids=ids, sigma_rel=1.0, lr=3e-3, steps=20, eval_every=1, batch_size=4, seed=0)
    full = R.recovery_run(m, 1, **kw)
    short = R.recovery_run(m, 1, stop_at_recovery=True, **kw)
    r = full.recovered_at
    assert r is not None and 0 < r < 20  # the run recovers inside the cap, so stopping saves steps
    assert short.recovered_at == r and short.cap == 20 and short.steps == list(range(r + 1))
    assert short.nll == full.nll[:r + 1]  # the same run up to the recovery step, bit for bit
    assert short.auc == pytest.approx(float(np.trapezoid(np.array(short.nll) - short.base_nll, short.steps) / r))
    censored = R.recovery_run(m, 1, stop_at_recovery=True, **{**kw, "steps": r - 1})
    assert censored.recovered_at is None and censored.steps[-1] == r - 1  # a censored run still reaches the cap
    control = R.recovery_run(m, 1, stop_at_recovery=True, **{**kw, "sigma_rel": 0.0})
    assert control.steps == [0] and control.recovered_at == 0  # at the baseline from the start: nothing to train
    assert _same(m, before)


@pytest.mark.parametrize("family", list(TINY_FAMILIES))
def test_the_frozen_prefix_is_the_captured_block_input_and_runs_no_later_block(family):
    m = tiny_model(family, seed=1)
    ids = _ids(2, t=9)
    logits, cap = residual.run_with_capture(m, ids, ("block_in",))
    v = arch.view(m)
    for layer in range(v.n_layers):
        calls: list[int] = []
        hooks = [b.block.register_forward_pre_hook(lambda mod, a, i=i, c=calls: c.append(i))
                 for i, b in enumerate(v.blocks)]
        try:
            (h,) = R._prefix(m, ids, layer, 8)
        finally:
            for hk in hooks:
                hk.remove()
        assert torch.equal(h, cap["block_in"][layer])  # bit for bit
        assert calls == list(range(layer + 1))  # block ``layer`` is entered (its input read), none after it
        assert torch.equal(arch.suffix_forward(m, h, layer), logits)
    assert all(not b.block._forward_pre_hooks for b in v.blocks)  # no hook left behind
    with pytest.raises(ValueError, match="out of range"):
        R._prefix(m, ids, v.n_layers, 8)


def test_a_shared_baseline_gives_the_same_run_bit_for_bit():
    m = tiny_model("llama")
    ids, ev = _ids(8), _ids(4, seed=1)
    kw = dict(train_ids=ids, eval_ids=ev, sigma_rel=1.0, lr=3e-3, steps=6, eval_every=2, batch_size=2, seed=1)
    base = R.baseline_nll(m, ev, eval_batch_size=8)
    for layer, scope in ((0, "layer"), (2, "layer"), (2, "all")):
        own = R.recovery_run(m, layer, scope=scope, **kw)
        shared = R.recovery_run(m, layer, scope=scope, base_nll=base, **kw)
        assert own.base_nll == base and shared.to_dict() == own.to_dict()


def test_recovery_vs_importance_and_errors():
    curves = [R.RecoveryCurve(layer=i, sigma_rel=0.5, kind="additive", scope="layer", seed=0, lr=1e-3, steps=[0],
                              nll=[1.0], base_nll=1.0, recovered_at=None, cap=10, auc=float(i)) for i in range(4)]
    c = R.recovery_vs_importance(curves, {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.5}, measure="auc")
    assert c.estimate == pytest.approx(1.0)
    # 4 layers: no interval (a Fisher CI would be the zero-width [1, 1]) and p can never reach 0.025
    assert c.low is None and c.high is None and c.p_greater == pytest.approx(1 / 24) and c.n == 4
    rng = np.random.default_rng(0)
    imp = {i: float(i) + rng.normal(0, 3) for i in range(12)}
    many = [R.RecoveryCurve(layer=i, sigma_rel=0.5, kind="additive", scope="layer", seed=s, lr=1e-3, steps=[0],
                            nll=[1.0], base_nll=1.0, recovered_at=min(10 * i + s, 199), cap=200, auc=0.0)
            for i in range(12) for s in range(3)]
    e = R.recovery_vs_importance(many, imp)
    assert e.low < e.estimate < e.high and e.high - e.low > 0.05 and e.unit == "layers"
    with pytest.raises(ValueError, match="at least 4"):
        R.recovery_vs_importance(curves[:2], {0: 1, 1: 2})
    m = tiny_model("llama")
    kw = dict(train_ids=_ids(2), eval_ids=_ids(2), steps=1)
    with pytest.raises(ValueError, match="unknown scope"):
        R.recovery_run(m, 0, scope="half", **kw)
    with pytest.raises(ValueError, match="out of range"):
        R.recovery_run(m, 9, **kw)
    with pytest.raises(ValueError, match="unknown perturbation kind"):
        R.recovery_run(m, 0, kind="salt", **kw)
    with pytest.raises(ValueError, match="sigma_rel"):
        R.recovery_run(m, 0, sigma_rel=-1, **kw)


def _block_calls(m):
    """Pre-hooks counting the calls of every block: (calls, handles)."""
    calls: list[int] = []
    hooks = [b.block.register_forward_pre_hook(lambda mod, a, i=i: calls.append(i))
             for i, b in enumerate(arch.view(m).blocks)]
    return calls, hooks


@pytest.mark.parametrize("family", list(TINY_FAMILIES))
def test_one_pass_reads_every_block_input_bit_for_bit_and_stops_at_the_last(family):
    m = tiny_model(family, seed=1)
    ids = _ids(3, t=9)
    _, cap = residual.run_with_capture(m, ids, ("block_in",))
    L = arch.view(m).n_layers
    for layers in (range(L), [L - 2, 1], [0]):
        calls, hooks = _block_calls(m)
        try:
            got = R._block_inputs(m, ids, layers)
        finally:
            for h in hooks:
                h.remove()
        assert sorted(got) == sorted(set(layers))
        assert all(torch.equal(got[j], cap["block_in"][j]) for j in got)  # bit for bit
        assert calls == list(range(max(layers) + 1))  # no block after the last one asked for
    with pytest.raises(ValueError, match="out of range"):
        R._block_inputs(m, ids, [0, L])
    with pytest.raises(ValueError, match="no layer given"):
        R._block_inputs(m, ids, [])


@pytest.mark.parametrize("family", list(TINY_FAMILIES))
def test_shared_clean_inputs_give_the_same_runs_bit_for_bit_and_skip_the_prefix(family):
    """Runs that read the clean inputs from one shared pass (CleanInputs.for_runs) equal runs that compute their
    own frozen prefix, for a perturbed run and its σ = 0 control on several layers, and run no block before
    ``layer``; inputs built for another seed's batches only cost the prefix pass again."""
    m = tiny_model(family, seed=2)
    before = _params(m)
    train, ev = _ids(6, t=12), _ids(3, t=12, seed=1)
    kw = dict(train_ids=train, eval_ids=ev, lr=3e-3, steps=5, eval_every=2, batch_size=2, eval_batch_size=2, seed=4,
              base_nll=R.baseline_nll(m, ev, eval_batch_size=2))
    L = arch.view(m).n_layers
    layers = [1, L - 1]
    clean = R.CleanInputs.for_runs(m, layers, train_ids=train, eval_ids=ev, steps=5, batch_size=2,
                                   eval_batch_size=2, seed=4)
    other = R.CleanInputs.for_runs(m, layers, train_ids=train, eval_ids=ev, steps=5, batch_size=2,
                                   eval_batch_size=2, seed=5)
    assert _same(m, before)
    for layer in layers:
        for sigma in (0.5, 0.0):
            own = R.recovery_run(m, layer, sigma_rel=sigma, **kw)
            calls, hooks = _block_calls(m)
            try:
                shared = R.recovery_run(m, layer, sigma_rel=sigma, clean=clean, **kw)
            finally:
                for h in hooks:
                    h.remove()
            assert shared.to_dict() == own.to_dict()
            assert calls and min(calls) == layer  # nothing before the layer ran: every prefix came from ``clean``
            assert R.recovery_run(m, layer, sigma_rel=sigma, clean=other, **kw).to_dict() == own.to_dict()
    assert _same(m, before)


def test_clean_start_takes_the_baseline_for_the_controls_step_zero():
    m = tiny_model("llama")
    train, ev = _ids(6), _ids(3, seed=1)
    kw = dict(train_ids=train, eval_ids=ev, lr=3e-3, steps=4, eval_every=2, batch_size=2, seed=1)
    base = R.baseline_nll(m, ev)
    own = R.recovery_run(m, 2, sigma_rel=0.0, base_nll=base, **kw)
    quick = R.recovery_run(m, 2, sigma_rel=0.0, base_nll=base, clean_start=True, **kw)
    assert quick.nll[0] == base and quick.nll[1:] == own.nll[1:] and quick.steps == own.steps
    np.testing.assert_allclose(own.nll[0], base, rtol=1e-6)  # what it skips is the same model on the same windows
    with pytest.raises(ValueError, match="only for sigma_rel = 0 with base_nll"):
        R.recovery_run(m, 2, sigma_rel=0.5, base_nll=base, clean_start=True, **kw)
    with pytest.raises(ValueError, match="only for sigma_rel = 0 with base_nll"):
        R.recovery_run(m, 2, sigma_rel=0.0, clean_start=True, **kw)
    clean = R.CleanInputs(m, [ev], [2])
    with pytest.raises(ValueError, match="layer-scope runs only"):
        R.recovery_run(m, 2, sigma_rel=0.0, scope="all", clean=clean, **kw)


def test_clean_inputs_keep_what_fits_in_their_budget_and_the_runs_compute_the_rest():
    m = tiny_model("llama")
    train, ev = _ids(10, t=12), _ids(4, t=12, seed=1)  # 5 steps of 2 windows: each window once
    kw = dict(train_ids=train, eval_ids=ev, steps=5, batch_size=2, eval_batch_size=4, seed=3)
    layers = [1, 3]
    size = next(m.parameters()).element_size()
    per_batch = 2 * 12 * len(layers) * arch.view(m).d_model * size  # one training batch: 2 windows of 12 ids
    steps = R.train_batches(10, 5, 2, 3)
    for budget, n_train in ((2 * per_batch + 2 * per_batch, 2), (2 * per_batch, 0), (0, 0)):
        c = R.CleanInputs.for_runs(m, layers, max_bytes=budget, **kw)
        assert (c.get(ev, 1) is not None) == (budget > 0)  # the evaluation batch (4 windows) comes first
        held = [c.get(train[idx], 3) is not None for idx in steps]
        assert held == [True] * n_train + [False] * (5 - n_train)
        own = R.recovery_run(m, 3, sigma_rel=0.5, lr=3e-3, eval_every=2, **kw)
        assert R.recovery_run(m, 3, sigma_rel=0.5, lr=3e-3, eval_every=2, clean=c, **kw).to_dict() == own.to_dict()
