"""The project's trained model family: small Llama-style decoders varying depth, width, learning
rate, training steps and seed, with log-spaced checkpoints (step 0 = the random-init twin) and
held-out losses. Used by the coupling chapter (coupling vs held-out loss across the zoo; training
dynamics over checkpoints) and the diversity chapter (performance vs depth at matched tokens).

API (stable)::

    fam = get_family("cpu")            # trains missing members once, then loads from the cache
    for m in fam:                      # FamilyMember
        m.name, m.depth, m.width, m.lr, m.seed, m.steps, m.tokens, m.heldout_nll, m.checkpoints
        model, tok = m.load()          # final weights; m.load(step=16) a checkpoint;
        model0, _ = m.load(random_init=True)   # the random-init twin (== checkpoint 0)
    fam.select(width=64, seed=0)       # members matching all filters
    fam.table()                        # pandas DataFrame, one row per member
    # reading it (which loss differences exceed seed noise, which members a claim may use):
    # layerlab.training.regime.seed_resolved_pairs(fam), family_regime(fam.table())

Protocol [reconstructed]: one tokenizer per profile trained on the ``train`` split
(:mod:`layerlab.data.tokenizer`; for ``smoke`` and ``cpu`` 257 ids, i.e. byte-level: 256 bytes and
``<|endoftext|>``, so nats per token are nats per byte; a BPE for ``gpu``); training windows of
``seq_len`` tokens from the ``train`` split, batches drawn from (seed, step)
(:mod:`layerlab.training.train`); ``heldout_nll`` is the mean next-token NLL in nats on windows of the
``validation`` split (disjoint by document), measured at every checkpoint (``m.curve``). All members of
a profile see the same number of tokens per step; steps differ only where the member says so. Weights
live under ``cache_dir()/family/<profile>-<key>/`` as safetensors.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from layerlab.core import profiles
from layerlab.core.cache import cached_tensors, entry_dir, entry_lock, fingerprint, mark_complete, write_json
from layerlab.data.fetch import data_fingerprint
from layerlab.training.checkpoints import load_weights
from layerlab.training.train import (
    ModelSpec,
    TrainConfig,
    _rank_world,
    build_model,
    default_device,
    eval_nll,
    log_steps,
    train,
)


@dataclass(frozen=True)
class MemberSpec:
    """One model of the family: architecture, learning rate, seed and number of steps."""

    depth: int
    width: int
    lr: float
    seed: int
    steps: int

    @property
    def name(self) -> str:
        return f"d{self.depth}-w{self.width}-lr{self.lr:g}-s{self.seed}-t{self.steps}"


@dataclass(frozen=True)
class FamilyPreset:
    """Everything that defines a family profile."""

    vocab_size: int
    tokenizer_chars: int | None  # train the tokenizer on this many train-split characters (None: all)
    seq_len: int
    batch_size: int
    heads: int
    kv_heads: int
    val_tokens: int
    members: tuple[MemberSpec, ...]
    weight_decay: float = 0.1
    warmup: int = 0
    notes: str = ""


def _grid(depths, widths, lrs, seeds, steps) -> tuple[MemberSpec, ...]:
    import itertools

    return tuple(dict.fromkeys(MemberSpec(*c) for c in itertools.product(depths, widths, lrs, seeds, steps)))


_SMOKE = _grid((1, 2, 3), (32,), (3e-3,), (0,), (8,)) + _grid((2,), (32,), (3e-3,), (1,), (8,))
# The cpu design (measured; the growth chapter's section "The shared family's scaling curve"):
# byte-level tokens (257 ids: no unembedding-dominated members), 1,024 steps of 1,024 tokens, lr 3e-3
# with a 64-step warm-up. At the former 2,048-token BPE and 256 steps the held-out NLL rose with depth
# (the embedding and unembedding were most of every member's parameters, and deeper members were
# under-trained); here it falls with depth and with width. Every sweep point has 3 seeds, so its
# differences can be tested against seed noise (:func:`layerlab.training.regime.seed_resolved_pairs`); fewer depths than
# before pay for the 4x longer schedule.
_CPU = (
    _grid((1, 2, 4, 8, 12), (64,), (3e-3,), (0, 1, 2), (1024,))  # depth at matched tokens
    + _grid((4,), (32, 128), (3e-3,), (0, 1, 2), (1024,))  # width (with d4-w64 above)
    + _grid((4,), (64,), (1e-3, 1e-2), (0,), (1024,))  # coupling zoo: learning rate
)
_GPU = (
    _grid((1, 2, 3, 4, 6, 8, 12, 16, 24), (256,), (1e-3,), (0, 1, 2), (5_000,))
    + _grid((8,), (128, 512, 768), (1e-3,), (0, 1, 2), (5_000,))
    + _grid((8,), (256,), (3e-4, 3e-3), (0, 1, 2), (5_000,))
)

PRESETS: dict[str, FamilyPreset] = {
    "smoke": FamilyPreset(vocab_size=257, tokenizer_chars=400_000, seq_len=32, batch_size=4, heads=4,
                          kv_heads=2, val_tokens=2_048, members=_SMOKE, notes="seconds; exercises the code"),
    "cpu": FamilyPreset(vocab_size=257, tokenizer_chars=400_000, seq_len=128, batch_size=8, heads=4,
                        kv_heads=2, val_tokens=16_384, members=_CPU, warmup=64,
                        notes="2 CPU cores; budget <= 20 min for the whole family (measured: see the growth chapter)"),
    "gpu": FamilyPreset(vocab_size=8192, tokenizer_chars=None, seq_len=512, batch_size=64, heads=8,
                        kv_heads=4, val_tokens=262_144, members=_GPU, warmup=200,
                        notes="one GPU; torchrun for several"),
}


@dataclass
class FamilyMember:
    """A trained model of the family (see module docstring); ``load`` returns (model, tokenizer)."""

    name: str
    depth: int
    width: int
    lr: float
    seed: int
    steps: int
    tokens: int
    heldout_nll: float
    checkpoints: list[int]
    curve: list[dict] = field(repr=False)  # [{step, tokens, flops, wall, val_nll}] at every checkpoint
    train_loss: list[float] = field(repr=False)  # per step
    train_seconds: float = 0.0  # wall-clock of the member's training (contended on a shared machine)
    train_cpu_seconds: float = float("nan")  # CPU time (user + sys) of the training process
    spec: ModelSpec | None = field(default=None, repr=False)
    run_dir: Path | None = field(default=None, repr=False)
    _tokenizer: object = field(default=None, repr=False)

    def load(self, step: int | None = None, random_init: bool = False, dtype: torch.dtype = torch.float32):
        """(model, tokenizer) at checkpoint ``step`` (default: final). ``random_init`` gives the
        random-init twin: the same architecture and seed before any update (== checkpoint 0)."""
        model = build_model(self.spec, seed=self.seed, dtype=dtype)
        if random_init:
            return model, self._tokenizer
        step = self.steps if step is None else step
        if step not in self.checkpoints:
            raise ValueError(f"{self.name} has no checkpoint at step {step}: choose one of {self.checkpoints}")
        return load_weights(model, self.run_dir, step), self._tokenizer


class Family(list):
    """A list of :class:`FamilyMember` with the profile, tokenizer and helpers."""

    def __init__(self, members, *, profile: str, preset: FamilyPreset, tokenizer, root: Path):
        super().__init__(members)
        self.profile, self.preset, self.tokenizer, self.root = profile, preset, tokenizer, root

    def select(self, **filters) -> list[FamilyMember]:
        """Members whose attributes equal every ``filters`` value (e.g. ``width=64, seed=0``)."""
        return [m for m in self if all(getattr(m, k) == v for k, v in filters.items())]

    def table(self):
        """One row per member: name, depth, width, lr, seed, steps, tokens, params, held-out NLL."""
        import pandas as pd

        from layerlab.core.arch import n_params

        rows = []
        for m in self:
            rows.append({"name": m.name, "depth": m.depth, "width": m.width, "lr": m.lr, "seed": m.seed,
                         "steps": m.steps, "tokens": m.tokens,
                         "params": n_params(build_model(m.spec, dtype=torch.float32)),
                         "heldout_nll": m.heldout_nll, "train_seconds": m.train_seconds})
        return pd.DataFrame(rows)

    @property
    def train_seconds(self) -> float:
        """Sum of the members' measured training wall-clock (when they were trained)."""
        return float(sum(m.train_seconds for m in self))

    @property
    def train_cpu_seconds(self) -> float:
        """Sum of the members' measured training CPU time (user + sys; NaN for members trained before
        it was recorded)."""
        return float(sum(m.train_cpu_seconds for m in self))

    def val_windows(self):
        """The held-out windows [N, T] every ``heldout_nll`` is measured on."""
        return _windows(self.tokenizer, "validation", self.preset)


# ----------------------------------------------------------------------------- configurations
CONFIG = ("depth", "width", "lr", "steps")
"""The fields that define a configuration; members of one configuration differ only in ``seed``."""


def config_label(cfg: tuple, skip: int | None = None) -> str:
    """``d4-w64-lr0.003-t1024`` for a (depth, width, lr, steps) configuration, without field ``skip``."""
    parts = (f"d{cfg[0]}", f"w{cfg[1]}", f"lr{cfg[2]:g}", f"t{cfg[3]}")
    return "-".join(x for k, x in enumerate(parts) if k != skip)


def _windows(tokenizer, split: str, preset: FamilyPreset) -> torch.Tensor:
    from layerlab.data import corpora as data

    max_tokens = preset.val_tokens if split == "validation" else None
    key = {"split": split, "seq": preset.seq_len, "max_tokens": max_tokens,
           "tok": fingerprint(tokenizer.get_vocab())}

    def compute():
        w = data.token_windows(tokenizer, split, window=preset.seq_len, max_tokens=max_tokens, seed=0)
        return {"input_ids": w.input_ids}

    return cached_tensors("family-windows", key, compute)["input_ids"]


def family_windows(profile: str, split: str) -> torch.Tensor:
    """Token windows [N, seq_len] of ``split`` under the family protocol of ``profile`` (cached):
    all ``train`` windows; the ``validation`` subset every ``heldout_nll`` is measured on."""
    preset = profiles.select(PRESETS, profile)
    return _windows(family_tokenizer(profile), split, preset)


def family_tokenizer(profile: str):
    from layerlab.data.tokenizer import project_tokenizer

    preset = profiles.select(PRESETS, profile)
    return project_tokenizer(preset.vocab_size, preset.tokenizer_chars)


def _member_spec(preset: FamilyPreset, m: MemberSpec, vocab: int) -> ModelSpec:
    return ModelSpec(depth=m.depth, width=m.width, heads=preset.heads, kv_heads=preset.kv_heads,
                     vocab_size=vocab, seq_len=preset.seq_len)


def default_workers() -> int:
    """Parallel training processes: one per CPU core (max 4) on CPU, 1 with a GPU."""
    import os

    return 1 if torch.cuda.is_available() else max(1, min(4, os.cpu_count() or 1))


def get_family(profile: str, *, progress: bool = False, train_missing: bool = True,
               workers: int | None = None) -> Family:
    """The trained family of ``profile`` (``smoke`` | ``cpu`` | ``gpu``), training missing members
    (resuming any interrupted one from its last checkpoint) and caching them.

    Missing members train in ``workers`` processes with one thread each (small models train much
    faster single-threaded, and members are independent); results do not depend on ``workers``.
    """
    preset = profiles.select(PRESETS, profile)
    tok = family_tokenizer(profile)
    root = entry_dir("family", profile,
                     {"preset": asdict(preset), "vocab": tok.get_vocab(), "data": data_fingerprint()})
    missing = _missing(preset, root)
    if missing and not train_missing:
        raise FileNotFoundError(
            f"{len(missing)} member(s) of the {profile} family are not trained yet (e.g. {missing[0].name}): "
            f"call get_family({profile!r}) to train them"
        )
    if missing and _rank_world()[1] > 1:  # torchrun: the ranks train each member together, at barriers
        _train_missing(profile, preset, tok, root, missing, progress, workers)
    elif missing:
        with entry_lock(root):  # another process training this family at once: wait, then train what it left
            _train_missing(profile, preset, tok, root, _missing(preset, root), progress, workers)
    members = []
    for ms in preset.members:
        res = json.loads((root / ms.name / "result.json").read_text())
        members.append(FamilyMember(
            name=ms.name, depth=ms.depth, width=ms.width, lr=ms.lr, seed=ms.seed, steps=ms.steps,
            tokens=res["tokens"], heldout_nll=res["heldout_nll"], checkpoints=res["checkpoints"],
            curve=res["curve"], train_loss=res["train_loss"], train_seconds=res["train_seconds"],
            train_cpu_seconds=res.get("train_cpu_seconds", float("nan")),
            spec=_member_spec(preset, ms, len(tok)), run_dir=root / ms.name, _tokenizer=tok,
        ))
    mark_complete(root)
    return Family(members, profile=profile, preset=preset, tokenizer=tok, root=root)


def _missing(preset: FamilyPreset, root: Path) -> list[MemberSpec]:
    return [ms for ms in preset.members if not (root / ms.name / "result.json").exists()]


def _train_missing(profile: str, preset: FamilyPreset, tok, root: Path, missing: list[MemberSpec],
                   progress: bool, workers: int | None) -> None:
    """Train ``missing`` members into ``root`` (serially, or in ``workers`` single-threaded processes)."""
    if not missing:
        return
    _windows(tok, "train", preset)  # tokenise once, before the workers start
    _windows(tok, "validation", preset)
    workers = default_workers() if workers is None else workers
    if workers <= 1 or len(missing) == 1:
        for ms in missing:
            _train_one(profile, ms, root, progress)
    else:
        import concurrent.futures as cf
        import multiprocessing as mp

        # longest first (cost ~ depth x width x steps): the makespan of 2 workers is then near total / 2
        order = sorted(missing, key=lambda ms: -ms.depth * ms.width * ms.steps)
        with cf.ProcessPoolExecutor(min(workers, len(missing)), mp_context=mp.get_context("spawn")) as ex:
            for fut in [ex.submit(_train_one, profile, ms, root, False, 1) for ms in order]:
                fut.result()
    if _rank_world()[1] > 1:  # under torchrun, wait until rank 0 has written every result
        torch.distributed.barrier()


def _train_one(profile: str, ms: MemberSpec, root: Path, progress: bool, threads: int | None = None) -> str:
    if threads:
        torch.set_num_threads(threads)
    preset = PRESETS[profile]
    tok = family_tokenizer(profile)
    spec = _member_spec(preset, ms, len(tok))
    train_ids = _windows(tok, "train", preset)
    val_ids = _windows(tok, "validation", preset)
    _train_member(preset, ms, spec, train_ids, val_ids, root / ms.name, progress)
    return ms.name


def _train_member(preset, ms: MemberSpec, spec: ModelSpec, train_ids, val_ids, run_dir: Path, progress: bool):
    from layerlab.training.growth import uniform

    ckpts = log_steps(ms.steps)
    cfg = TrainConfig(batch_size=preset.batch_size, seed=ms.seed, weight_decay=preset.weight_decay,
                      checkpoints=ckpts, eval_steps=ckpts)
    model = build_model(spec, seed=ms.seed).to(default_device())
    t0, c0 = time.perf_counter(), time.process_time()
    res = train(model, uniform(ms.depth, ms.steps, lr=ms.lr, warmup=min(preset.warmup, ms.steps // 4)),
                train_ids, cfg, val_ids=val_ids, run_dir=run_dir, progress=progress)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    final = [e for e in res.evals if e["step"] == ms.steps]
    nll = final[0]["val_nll"] if final else eval_nll(res.model, val_ids)
    rank, world = _rank_world()
    if world > 1:
        torch.distributed.barrier()
    if rank != 0:
        return
    write_json(run_dir / "result.json", {
        "name": ms.name, "tokens": res.totals["tokens"], "heldout_nll": nll, "checkpoints": list(ckpts),
        "curve": res.evals, "train_loss": [r["loss"] for r in res.log], "train_seconds": seconds,
        "train_cpu_seconds": cpu_seconds, "ledger": res.totals,
    })


def main(argv: list[str] | None = None) -> Family:
    """``python -m layerlab family [smoke|cpu|gpu] [--workers N]``: train (or load) a family, print its table;
    returns the family (the CLI then prints which loss differences exceed seed noise)."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("profile", nargs="?", default="cpu")
    ap.add_argument("--workers", type=int, default=None)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    fam = get_family(a.profile, workers=a.workers)
    print(fam.table().to_string())
    print(f"{len(fam)} members; elapsed {time.perf_counter() - t0:.0f} s; "
          f"summed member training time {fam.train_seconds:.0f} s wall, {fam.train_cpu_seconds:.0f} s CPU")
    return fam


if __name__ == "__main__":
    main()
