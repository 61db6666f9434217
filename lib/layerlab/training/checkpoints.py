"""Checkpoints of :func:`layerlab.training.train.train`: ``run_dir/ckpt-{step:06d}/`` holds the weights and the
AdamW state as safetensors (never pickle) and ``state.json``, written last and atomically, so a directory with
``state.json`` is a complete checkpoint and an interrupted write leaves none."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from layerlab.core.cache import atomic_write, write_json


def opt_tensors(opt: torch.optim.Optimizer, names: dict[nn.Parameter, str]) -> dict[str, Tensor]:
    """The optimiser state of ``opt`` as flat CPU tensors keyed ``<parameter name>::<state key>``."""
    out = {}
    for p, st in opt.state.items():
        for k, v in st.items():
            out[f"{names[p]}::{k}"] = v.detach().cpu().clone() if torch.is_tensor(v) else torch.tensor(v)
    return out


def save_checkpoint(run_dir: Path, step: int, model: nn.Module, opt_state: dict[str, Tensor], meta: dict) -> Path:
    """Write ``run_dir/ckpt-{step:06d}/{model,optimizer}.safetensors`` + ``state.json`` atomically."""
    d = Path(run_dir) / f"ckpt-{step:06d}"
    d.mkdir(parents=True, exist_ok=True)
    with atomic_write(d / "model.safetensors") as tmp:
        save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(tmp))
    with atomic_write(d / "optimizer.safetensors") as tmp:
        save_file({k: v.contiguous() for k, v in opt_state.items()}, str(tmp))
    write_json(d / "state.json", {"step": step, **meta})  # written last: marks the checkpoint complete
    return d


def list_checkpoints(run_dir: Path) -> list[int]:
    """Steps of the complete checkpoints under ``run_dir``."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        return []
    return sorted(int(p.name[5:]) for p in run_dir.glob("ckpt-*") if (p / "state.json").exists())


def load_weights(model: nn.Module, run_dir: Path, step: int) -> nn.Module:
    """Load the weights of checkpoint ``step`` into ``model`` (safetensors, strict)."""
    path = Path(run_dir) / f"ckpt-{step:06d}" / "model.safetensors"
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at step {step} in {run_dir}: available {list_checkpoints(run_dir)}")
    sd = load_file(str(path))
    model.load_state_dict({k: v.to(next(model.parameters()).dtype) if v.is_floating_point() else v
                           for k, v in sd.items()})
    return model
