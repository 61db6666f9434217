"""Data-parallel path of the trainer on CPU: 2 processes, gloo backend (torch.multiprocessing)."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import load_file, save_file

from layerlab.training import growth
from layerlab.training.train import ModelSpec, TrainConfig, build_model, init_distributed, train

SPEC = ModelSpec(depth=2, width=16, heads=4, kv_heads=2, ffn=32, vocab_size=50, seq_len=8)
SCHEDULE = growth.gtt([1.0, 2.0], 6)  # several phases, so optimiser rebuilds are exercised too


def _ids() -> torch.Tensor:
    return torch.randint(50, (40, 8), generator=torch.Generator().manual_seed(0))


def _worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), RANK=str(rank))
    torch.set_num_threads(1)
    r, w = init_distributed()
    assert (r, w) == (rank, world)
    try:
        res = train(build_model(SPEC, 0, torch.float64), SCHEDULE, _ids(), TrainConfig(batch_size=4),
                    progress=False)
        losses = torch.tensor([x["loss"] for x in res.log], dtype=torch.float64)
        if rank == 0:
            save_file({**res.model.state_dict(), "__losses__": losses}, out)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available in this build")
def test_two_process_gloo_matches_single_process(tmp_path):
    """Each rank takes half of every global batch and gradients are averaged: the result equals
    single-process training on the whole batch up to floating-point summation order."""
    out = str(tmp_path / "ddp.safetensors")
    mp.spawn(_worker, args=(2, _free_port(), out), nprocs=2, join=True)
    torch.set_num_threads(1)
    single = train(build_model(SPEC, 0, torch.float64), SCHEDULE, _ids(), TrainConfig(batch_size=4),
                   progress=False)
    got = load_file(out)
    losses = got.pop("__losses__")
    ref = single.model.state_dict()
    assert got.keys() == ref.keys()
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-9, atol=1e-11, msg=k)
    torch.testing.assert_close(losses, torch.tensor([x["loss"] for x in single.log], dtype=torch.float64))


def test_batch_not_divisible_by_world_is_rejected(monkeypatch):
    import layerlab.training.train as tr

    monkeypatch.setattr(tr, "_rank_world", lambda: (0, 3))
    with pytest.raises(ValueError, match="divisible by the world size"):
        train(build_model(SPEC, 0, torch.float64), growth.uniform(2, 1), _ids(), TrainConfig(batch_size=4),
              progress=False)
