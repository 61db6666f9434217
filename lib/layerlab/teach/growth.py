"""Checker of the growth chapter's exercise: the training compute of a growth schedule.

Reference: the trainer's own ledger (:func:`layerlab.training.train.train`, which counts each step's
matmul FLOPs with :func:`~layerlab.training.train.flops_per_token`, tested against
``torch.utils.flop_counter``). The schedules are the library's built-ins (Wietrzykowski 2026,
arXiv:2603.19348, GTT; progressive stacking, Gong et al. 2019).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from layerlab.teach.harness import CheckResult, Failure, as_tensor, finish, run_student
from layerlab.training.growth import Schedule, gtt, stacking, uniform
from layerlab.training.train import ModelSpec, TrainConfig, build_model, flops_per_token, train

SPEC = ModelSpec(depth=4, width=32, heads=2, kv_heads=1, vocab_size=64, seq_len=16)
BATCH = 2


def _schedules() -> list[Schedule]:
    imp = [0.5, 2.0, -0.1, 1.0]
    return [uniform(4, 3), gtt(imp, 12), gtt(imp, 12, mode="grow"), stacking(4, 6)]


def ledger_flops(schedule: Schedule, spec: ModelSpec = SPEC, batch_size: int = BATCH) -> int:
    """Total training FLOPs of ``schedule`` as the trainer's ledger records them (trains a tiny model)."""
    ids = torch.randint(0, spec.vocab_size, (8, spec.seq_len), generator=torch.Generator().manual_seed(0))
    res = train(build_model(spec), schedule, ids, TrainConfig(batch_size=batch_size), progress=False)
    return int(res.totals["flops"])


def _all_trainable(schedule: Schedule, spec: ModelSpec, batch_size: int) -> int:
    """The budget if every layer trained at every step (the slip of counting a schedule as uniform)."""
    f = flops_per_token(spec.config(), spec.seq_len, range(spec.depth), range(spec.depth), True, True)
    return sum(f.values()) * spec.seq_len * batch_size * schedule.total_steps


def check_schedule_flops(fn: Callable, *, quiet: bool = False) -> CheckResult:
    """Check ``fn(schedule, spec, batch_size) -> int``: total matmul FLOPs of training a ``spec`` model
    with ``schedule`` (every step: batch_size × seq_len tokens), against the trainer's ledger, on the
    uniform, GTT (frozen and grow mode) and stacking schedules."""
    name = "check_schedule_flops"
    try:
        for s in _schedules():
            label = f"the {s.name} schedule ({s.mode} mode, {len(s.phases)} phases, {s.total_steps} steps)"
            ref = ledger_flops(s)
            got = float(as_tensor(run_student(fn, s, SPEC, BATCH, what=f"your function on {label}"), "your function"))
            if abs(got - ref) <= 1e-9 * ref:
                continue
            if abs(got - _all_trainable(s, SPEC, BATCH)) <= 1e-9 * ref:
                raise Failure(f"on {label} you counted every layer as trained at every step ({got:.4g}): in each "
                              "phase only phase.layers get weight gradients, the embedding only when "
                              "phase.trains_embed(), and (grow mode) layers not yet active are not run at all")
            raise Failure(f"on {label} the trainer's ledger says {ref:.6g} FLOPs, yours {got:.6g} "
                          f"({got / ref:.3f}×). Per phase: flops_per_token(config, T, active, trainable, "
                          "embed, head) summed over its three parts × T × batch × steps")
    except Failure as e:
        return finish(name, False, str(e), quiet=quiet)
    return finish(name, True, "equals the trainer's FLOP ledger on the uniform, GTT (frozen and grow) and "
                  "stacking schedules", quiet=quiet)
