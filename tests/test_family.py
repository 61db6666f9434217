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
    assert {1, 2, 3, 4, 6, 8, 12} <= {m.depth for m in cpu.members}
    assert len({m.seed for m in cpu.members}) >= 3
