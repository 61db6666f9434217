"""The trained model family API (smoke profile: trains in seconds, then cached)."""

from __future__ import annotations

import math

import pytest
import torch

from layerlab.training.family import PRESETS, Family, FamilyMember, get_family
from layerlab.training.train import eval_nll


@pytest.fixture(scope="module")
def fam() -> Family:
    return get_family("smoke")  # conftest.py runs the suite single-threaded


def _same(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_members_and_fields(fam):
    preset = PRESETS["smoke"]
    assert len(fam) == len(preset.members)
    assert {m.depth for m in fam} >= {1, 2, 3}
    for m in fam:
        assert isinstance(m, FamilyMember)
        assert m.checkpoints[0] == 0 and m.checkpoints[-1] == m.steps
        assert m.tokens == m.steps * preset.batch_size * preset.seq_len
        assert [c["step"] for c in m.curve] == m.checkpoints
        assert len(m.train_loss) == m.steps
        assert math.isfinite(m.heldout_nll) and 0 < m.heldout_nll < 2 * math.log(len(fam.tokenizer))
    assert len(fam.select(depth=2)) == 2 and len(fam.select(depth=2, seed=1)) == 1


def test_load_checkpoints_and_random_init_twin(fam):
    m = fam.select(depth=2, seed=0)[0]
    final, tok = m.load()
    twin, _ = m.load(random_init=True)
    step0, _ = m.load(step=0)
    assert _same(twin, step0)
    assert not _same(twin, final)
    assert tok is fam.tokenizer and final.config.num_hidden_layers == 2
    with pytest.raises(ValueError, match="no checkpoint at step 3"):
        m.load(step=3)


def test_heldout_nll_reproduces_from_the_stored_weights(fam):
    m = fam[0]
    model, _ = m.load()
    assert eval_nll(model, fam.val_windows()) == pytest.approx(m.heldout_nll, rel=1e-6)
    # training lowered the held-out loss below the random-init twin's
    assert m.curve[-1]["val_nll"] < m.curve[0]["val_nll"]


def test_second_call_is_cached(fam):
    again = get_family("smoke", train_missing=False)
    assert [m.heldout_nll for m in again] == [m.heldout_nll for m in fam]


def test_table(fam):
    t = fam.table()
    assert list(t["name"]) == [m.name for m in fam]
    assert {"depth", "width", "params", "heldout_nll", "tokens"} <= set(t.columns)
    assert (t["params"].diff().dropna().iloc[:2] > 0).all()  # depth 1 < 2 < 3


def test_unknown_profile_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown profile 'tiny'"):
        get_family("tiny")


def test_gpu_preset_is_defined_and_larger():
    gpu, cpu = PRESETS["gpu"], PRESETS["cpu"]
    assert max(m.width for m in gpu.members) > max(m.width for m in cpu.members)
    assert min(m.steps for m in gpu.members) > max(m.steps for m in cpu.members)
    assert {1, 2, 4, 8, 12} <= {m.depth for m in cpu.members}
    assert len({m.seed for m in cpu.members}) >= 3


def test_cpu_sweeps_have_three_seeds_at_every_point():
    """The depth and width sweeps of the cpu family can be tested against seed noise."""
    members = PRESETS["cpu"].members
    seeds: dict[tuple, set] = {}
    for m in members:
        seeds.setdefault((m.depth, m.width, m.lr, m.steps), set()).add(m.seed)
    depth_sweep = [c for c in seeds if c[1:] == (64, 3e-3, 1024)]
    width_sweep = [c for c in seeds if c[0] == 4 and c[2:] == (3e-3, 1024)]
    assert len(depth_sweep) >= 5 and len(width_sweep) >= 3
    assert all(len(seeds[c]) >= 3 for c in depth_sweep + width_sweep)


@pytest.mark.parametrize("profile", ["smoke", "cpu", "gpu"])
def test_every_chapter_filter_selects_members(profile):
    """The members the coupling chapter follows (checkpoints, locality, quantisation) and the
    diversity chapter's depth sweep exist in every family profile."""
    from layerlab.chapters.coupling.presets import PRESETS as COUPLING

    members = PRESETS[profile].members
    cp = COUPLING[profile]
    for filt in (cp.checkpoint_filter, cp.locality_filter, cp.quant_filter):
        assert [m for m in members if all(getattr(m, k) == v for k, v in filt.items())], (profile, filt)
    assert max(cp.family_ks) <= min(m.width for m in members if m.depth >= 2)


def test_seed_resolved_pairs_on_the_trained_family(fam):
    from layerlab.training.regime import seed_resolved_pairs

    pairs = seed_resolved_pairs(fam)
    depth = pairs[pairs.axis == "depth"]
    assert set(zip(depth.a, depth.b)) == {(1, 2), (1, 3), (2, 3)}
    # only depth 2 has two seeds in the smoke family: no pair shares two seeds, none is resolved
    assert (depth["n"] == 1).all() and not pairs.resolved.any()
