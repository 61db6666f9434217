"""A small-LM trainer for Llama-style pre-norm decoders (RMSNorm, SwiGLU, RoPE) with exact
resume, log-spaced safetensors checkpoints and a compute ledger.

Models are plain Hugging Face ``LlamaForCausalLM`` (eager attention, untied embeddings), so every
analysis module of layerlab works on them. Training follows a :class:`layerlab.training.growth.Schedule`
(uniform training is a one-phase schedule). Everything is a function of the seed: the weights
are drawn from ``seed``, batch ``s`` is drawn from ``(seed, s)`` alone, so resuming from a
checkpoint reproduces an uninterrupted run exactly (no RNG state needs to be saved).

Ledger [reconstructed; anatomy spec section 6, "GTT ledger"]: per step and per phase, tokens,
forward FLOPs, activation-gradient FLOPs, weight-gradient FLOPs and wall-clock. FLOPs count the
matrix multiplications actually executed (2 per multiply-add): the projections of every active
layer, the attention scores and mixing (full T x T, since eager attention does not exploit the
causal mask) and the unembedding; elementwise work (norms, SiLU, RoPE, softmax) is not counted.
:func:`flops_per_token` is tested against ``torch.utils.flop_counter`` on a tiny model.

Data parallel: under ``torchrun`` (``WORLD_SIZE`` > 1) :func:`init_distributed` starts a process
group; each rank takes ``rows[rank::world]`` of the global batch and gradients are all-reduced
(mean), so the update equals the single-process one up to summation order.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Generator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import Tensor, nn
from tqdm.auto import tqdm

from layerlab.training.checkpoints import list_checkpoints, load_weights, opt_tensors, save_checkpoint
from layerlab.training.growth import Schedule, apply_init, only_layers, set_trainable


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of a small Llama-style decoder (HF ``LlamaConfig`` fields in brackets)."""

    depth: int  # num_hidden_layers
    width: int = 64  # hidden_size
    heads: int = 4  # num_attention_heads
    kv_heads: int = 2  # num_key_value_heads
    ffn: int = 0  # intermediate_size; 0 -> 8/3 * width rounded up to a multiple of 16
    vocab_size: int = 2048
    seq_len: int = 128
    rope_theta: float = 10000.0
    init_std: float = 0.02

    def config(self):
        from transformers import LlamaConfig

        if self.depth < 1 or self.width % self.heads or self.heads % self.kv_heads:
            raise ValueError(
                f"invalid ModelSpec {self}: need depth >= 1, width divisible by heads and heads by kv_heads"
            )
        ffn = self.ffn or 16 * math.ceil(8 * self.width / 3 / 16)
        cfg = LlamaConfig(
            vocab_size=self.vocab_size, hidden_size=self.width, intermediate_size=ffn,
            num_hidden_layers=self.depth, num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads, max_position_embeddings=max(self.seq_len, 128),
            rope_theta=self.rope_theta, initializer_range=self.init_std, tie_word_embeddings=False,
            bos_token_id=None, eos_token_id=None, pad_token_id=None, use_cache=False,
        )
        cfg._attn_implementation = "eager"
        return cfg


def build_model(spec: ModelSpec, seed: int = 0, dtype: torch.dtype = torch.float32) -> nn.Module:
    """A fresh ``LlamaForCausalLM`` for ``spec`` with weights drawn from ``seed`` (eval mode)."""
    from transformers import LlamaForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(spec.config())
    return model.to(dtype).eval()


@dataclass(frozen=True)
class TrainConfig:
    """Optimiser and bookkeeping settings (AdamW, decoupled weight decay on matrices only)."""

    batch_size: int = 16
    seed: int = 0
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    grad_clip: float = 1.0
    checkpoints: tuple[int, ...] = ()  # steps (after that many updates) to save; 0 = init
    eval_steps: tuple[int, ...] = ()  # steps at which to measure validation NLL
    eval_per_window: bool = False  # also store the NLL of every validation window at each eval
    defer_eval: bool = False  # at eval_steps keep a copy of the weights (TrainResult.snapshots) instead of
    # measuring: evaluate them later, elsewhere, with evaluate_snapshots (same numbers, bit for bit)


def log_steps(total: int, per_octave: int = 1) -> tuple[int, ...]:
    """0, then log-spaced steps (``per_octave`` per doubling) up to and including ``total``."""
    out = {0, total}
    k = 0
    while True:
        s = int(round(2 ** (k / per_octave)))
        if s >= total:
            break
        out.add(s)
        k += 1
    return tuple(sorted(out))


# ----------------------------------------------------------------------------- FLOPs


def flops_per_token(
    config, seq_len: int, active: Sequence[int], trainable: Sequence[int], embed: bool, head: bool
) -> dict[str, int]:
    """Matmul FLOPs per input token of one training step (see module docstring).

    forward  = sum_active (2 P_l + 4 T d_q) + 2 d V
    act_grad = [something below the head trains] * sum_{active l >= lo} (2 P_l + 8 T d_q) + 2 d V
    weight   = sum_trainable 2 P_l + head * 2 d V
    with P_l = d d_q + 2 d d_kv + d_q d + 3 d f the matmul parameters of a layer and lo the lowest
    layer whose parameters (or the embedding's, lo = 0) need gradients.
    """
    d, f, V, T = config.hidden_size, config.intermediate_size, config.vocab_size, seq_len
    hd = getattr(config, "head_dim", None) or d // config.num_attention_heads
    dq, dkv = config.num_attention_heads * hd, config.num_key_value_heads * hd
    p_layer = d * dq + 2 * d * dkv + dq * d + 3 * d * f
    active, trainable = sorted(set(active)), sorted(set(trainable))
    if not set(trainable) <= set(active):
        raise ValueError(f"trainable layers {trainable} must be active ({active})")
    fwd = sum(2 * p_layer + 4 * T * dq for _ in active) + 2 * d * V
    lower = bool(trainable) or embed
    lo = 0 if embed else (trainable[0] if trainable else None)
    act = 0
    if lower:
        act += sum(2 * p_layer + 8 * T * dq for layer in active if layer >= lo)
    if lower or head:
        act += 2 * d * V
    wgt = 2 * p_layer * len(trainable) + (2 * d * V if head else 0)
    return {"forward": fwd, "act_grad": act, "weight_grad": wgt}


# ----------------------------------------------------------------------------- distributed


def init_distributed() -> tuple[int, int]:
    """Start a process group when launched by torchrun (``WORLD_SIZE`` > 1); return (rank, world)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def default_device() -> torch.device:
    """``cuda:LOCAL_RANK`` when a GPU is present (one device per torchrun process), else CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def _rank_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def batch_rows(n_rows: int, batch_size: int, seed: int, step: int) -> Tensor:
    """Row indices of the global batch for ``step``: a function of (seed, step) only. [B]"""
    g = torch.Generator().manual_seed(1_000_003 * (seed + 1) + step)
    return torch.randint(n_rows, (batch_size,), generator=g)


# ----------------------------------------------------------------------------- training


@dataclass
class TrainResult:
    """What :func:`train` returns: the model (eval mode) plus per-step log, evals and ledger."""

    model: nn.Module
    log: list[dict] = field(default_factory=list)  # per step: step, phase, loss, lr, tokens, flops, wall
    evals: list[dict] = field(default_factory=list)  # step, tokens, flops, wall, val_nll
    snapshots: list[dict] = field(default_factory=list)  # defer_eval: step, tokens, flops, wall, active, state
    ledger: list[dict] = field(default_factory=list)  # per phase sums
    totals: dict = field(default_factory=dict)
    run_dir: Path | None = None
    optimizer: torch.optim.Optimizer | None = None  # the last phase's AdamW (its state: trained params only)


@torch.no_grad()
def window_nlls(model: nn.Module, ids: Tensor, batch_size: int = 16) -> Tensor:
    """Mean next-token NLL (nats) of each window of ``ids`` [N, T] -> [N] float64."""
    was = model.training
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(ids), batch_size):
            x = ids[i : i + batch_size].to(next(model.parameters()).device)
            logits = model(input_ids=x).logits[:, :-1]  # [b, T-1, V]
            # log-softmax in the model's dtype on contiguous rows (a transposed float64 copy is ~10x slower)
            nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="none")
            out.append(nll.view(len(x), -1).double().mean(dim=1).cpu())  # [b]
    model.train(was)
    return torch.cat(out)


def eval_row(model: nn.Module, active: Sequence[int] | set[int], val_ids: Tensor, row: dict, per_window: bool) -> dict:
    """``row`` plus ``val_nll`` (and ``windows``: every window's NLL) of ``model`` on ``val_ids`` [N, T] with
    only the decoder layers in ``active`` (the others skipped, as in training)."""
    with only_layers(model, active):
        per = window_nlls(model, val_ids)  # [N]
    out = {**row, "val_nll": float(per.mean())}
    if per_window:
        out["windows"] = per.tolist()
    return out


def evaluate_snapshots(model: nn.Module, snapshots: Sequence[dict], val_ids: Tensor, per_window: bool) -> list[dict]:
    """The eval rows of a run trained with ``TrainConfig.defer_eval``: each snapshot's weights are loaded into
    ``model`` (same architecture) and measured as :func:`train` would have measured them at that step."""
    rows = []
    for snap in snapshots:
        model.load_state_dict(snap["state"])
        row = {k: v for k, v in snap.items() if k not in ("state", "active")}
        rows.append(eval_row(model, snap["active"], val_ids, row, per_window))
    return rows


def eval_nll(model: nn.Module, ids: Tensor, batch_size: int = 16) -> float:
    """Mean next-token NLL in nats over all predicted positions of ``ids`` [N, T] (equal-length
    windows, so the mean of window means is the pooled mean)."""
    return float(window_nlls(model, ids, batch_size).mean())


def _ledger(log: list[dict], n_phases: int) -> tuple[list[dict], dict]:
    keys = ("steps", "tokens", "forward", "act_grad", "weight_grad", "wall")
    rows = [dict.fromkeys(keys, 0) | {"phase": i} for i in range(n_phases)]
    for r in log:
        row = rows[r["phase"]]
        row["steps"] += 1
        for k in keys[1:]:
            row[k] += r[k]
    for row in rows:
        row["flops"] = row["forward"] + row["act_grad"] + row["weight_grad"]
    totals = {k: sum(r[k] for r in rows) for k in (*keys, "flops")}
    return rows, totals


def train(model: nn.Module, schedule: Schedule, train_ids: Tensor, config: TrainConfig, **options) -> TrainResult:
    """Train ``model`` in place following ``schedule`` on windows ``train_ids`` [N, T]; ``options`` (``val_ids``,
    ``run_dir``, ``resume``, ``stop_after``, ``progress``) as in :func:`train_steps`, which describes them."""
    return train_interleaved([train_steps(model, schedule, train_ids, config, **options)])[0]


def train_interleaved(runs: Sequence[Generator[int, None, TrainResult]]) -> list[TrainResult]:
    """Run several trainings (:func:`train_steps`) one update each in turn until all have ended; their results.

    Each run's state is its own (weights from its seed, batches from (seed, step), no global RNG), so each
    result equals that of training it alone, bit for bit; only the measured seconds differ. Interleaving is
    how two runs' wall-clocks are compared fairly: a machine whose speed drifts over seconds slows both alike.
    """
    results: list[TrainResult | None] = [None] * len(runs)
    while any(r is None for r in results):
        for i, run in enumerate(runs):
            if results[i] is None:
                try:
                    next(run)
                except StopIteration as stop:
                    results[i] = stop.value
    return results  # type: ignore[return-value]


def train_steps(
    model: nn.Module,
    schedule: Schedule,
    train_ids: Tensor,
    config: TrainConfig,
    *,
    val_ids: Tensor | None = None,
    run_dir: str | os.PathLike | None = None,
    resume: bool = True,
    stop_after: int | None = None,
    progress: bool = True,
) -> Generator[int, None, TrainResult]:
    """:func:`train` one update at a time, for :func:`train_interleaved`: the inputs are checked now, and the
    returned generator yields the step count after each update and returns the :class:`TrainResult`.

    Checkpoints (``config.checkpoints``) go to ``run_dir``; with ``resume`` the latest complete
    checkpoint there is loaded first and training continues exactly. ``stop_after`` ends the run
    after that many total steps (used to test resumption). Validation NLL (nats) is measured
    on ``val_ids`` at ``config.eval_steps``; with ``config.defer_eval`` the weights there are kept instead
    (``TrainResult.snapshots``), for :func:`evaluate_snapshots` to measure later in another process.
    """
    from layerlab.core import arch

    L = arch.view(model).n_layers
    schedule.validate(L)
    if train_ids.ndim != 2 or train_ids.shape[1] < 2:
        raise ValueError(f"train_ids must be [N, T] token windows with T >= 2, got {tuple(train_ids.shape)}")
    if config.defer_eval and run_dir is not None:
        raise ValueError("defer_eval keeps its snapshots in memory only, so a checkpointed run could not resume "
                         "them: pass run_dir=None, or measure at eval_steps (defer_eval=False)")
    rank, world = _rank_world()
    if config.batch_size % world:
        raise ValueError(f"batch_size {config.batch_size} must be divisible by the world size {world}")
    device = next(model.parameters()).device
    names = {p: n for n, p in model.named_parameters()}
    T = train_ids.shape[1]
    total = schedule.total_steps
    run_dir = Path(run_dir) if run_dir is not None else None
    log: list[dict] = []
    evals: list[dict] = []
    snapshots: list[dict] = []
    opt_state: dict[str, Tensor] = {}
    start = 0
    if run_dir is not None and resume:
        done = [s for s in list_checkpoints(run_dir) if s <= total]
        if done:
            start = done[-1]
            load_weights(model, run_dir, start)
            ck = run_dir / f"ckpt-{start:06d}"
            opt_state = load_file(str(ck / "optimizer.safetensors"))
            meta = json.loads((ck / "state.json").read_text())
            log, evals = meta["log"], meta["evals"]
    meta_static = {"schedule": asdict(schedule), "config": asdict(config), "model_config": model.config.to_dict()}

    def checkpoint(step: int, opt: torch.optim.Optimizer | None) -> None:
        if run_dir is None or rank != 0:
            return
        state = dict(opt_state)
        if opt is not None:
            state.update(opt_tensors(opt, names))
        save_checkpoint(run_dir, step, model, state, {**meta_static, "log": log, "evals": evals})

    def evaluate(step: int, active: set[int]) -> None:
        if step not in config.eval_steps or any(e["step"] == step for e in (*evals, *snapshots)):
            return
        cum = _ledger(log, len(schedule.phases))[1]
        row = {"step": step, "tokens": cum["tokens"], "flops": cum["flops"], "wall": cum["wall"]}
        if config.defer_eval:
            state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            snapshots.append({**row, "active": sorted(active), "state": state})
        elif val_ids is not None:
            evals.append(eval_row(model, active, val_ids, row, config.eval_per_window))

    def steps() -> Generator[int, None, TrainResult]:
        opt = None
        end = total if stop_after is None else min(total, stop_after)
        if start == 0:
            evaluate(0, schedule.active_in(0, L))
            if 0 in config.checkpoints:
                checkpoint(0, None)
        bar = tqdm(range(start, end), disable=not progress or rank != 0, desc=schedule.name, leave=False)
        model.train()
        phase_i = -1
        for step in bar:
            i, j = schedule.phase_at(step)
            phase = schedule.phases[i]
            active = schedule.active_in(i, L)
            if i != phase_i:  # entering (or resuming inside) a phase
                if j == 0:
                    newly = schedule.newly_active(i, L)
                    before = schedule.active_before(i, L)
                    gen = torch.Generator().manual_seed(7919 * (config.seed + 1) + i)
                    for layer in sorted(newly):
                        apply_init(model, layer, phase, before, gen)
                if opt is not None:
                    opt_state.update(opt_tensors(opt, names))
                set_trainable(model, phase)
                params = [p for p in model.parameters() if p.requires_grad]
                decay = [p for p in params if p.ndim >= 2]
                no_decay = [p for p in params if p.ndim < 2]
                opt = torch.optim.AdamW(
                    [{"params": decay, "weight_decay": config.weight_decay},
                     {"params": no_decay, "weight_decay": 0.0}],
                    lr=phase.lr, betas=config.betas, eps=config.eps,
                )
                for p in params:  # carry Adam moments of parameters that trained before
                    st = {k.split("::")[1]: v.to(device) for k, v in opt_state.items() if k.split("::")[0] == names[p]}
                    if st:
                        opt.state[p] = st
                trainable = [b.index for b in arch.view(model).blocks if b.index in phase.layers]
                fpt = flops_per_token(model.config, T, active, trainable, phase.trains_embed(), phase.head)
                phase_i = i
            lr = phase.lr_at(j)
            for g in opt.param_groups:
                g["lr"] = lr
            t0 = time.perf_counter()
            rows = batch_rows(len(train_ids), config.batch_size, config.seed, step)[rank::world]
            x = train_ids[rows].to(device)  # [B / world, T]
            with only_layers(model, active):
                logits = model(input_ids=x).logits  # [b, T, V]
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), x[:, 1:].flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grads = [p for p in opt.param_groups[0]["params"] + opt.param_groups[1]["params"] if p.grad is not None]
            if world > 1:
                for p in grads:
                    dist.all_reduce(p.grad)
                    p.grad /= world
                lt = loss.detach().clone()
                dist.all_reduce(lt)
                loss_val = float(lt) / world
            else:
                loss_val = float(loss.detach())
            if config.grad_clip:
                torch.nn.utils.clip_grad_norm_(grads, config.grad_clip)
            opt.step()
            wall = time.perf_counter() - t0
            n_tok = config.batch_size * T
            log.append({"step": step + 1, "phase": i, "loss": loss_val, "lr": lr, "tokens": n_tok,
                        **{k: v * n_tok for k, v in fpt.items()}, "wall": wall})
            bar.set_postfix(loss=f"{loss_val:.3f}")
            evaluate(step + 1, active)
            if step + 1 in config.checkpoints:
                checkpoint(step + 1, opt)
            yield step + 1
        for p in model.parameters():
            p.requires_grad_(True)
        model.eval()
        ledger, totals = _ledger(log, len(schedule.phases))
        return TrainResult(model=model, log=log, evals=evals, snapshots=snapshots, ledger=ledger, totals=totals,
                           run_dir=run_dir, optimizer=opt)

    return steps()
