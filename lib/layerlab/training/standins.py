"""Stand-ins for the gpu profile's hub models, hub data sets and model family: the gpu dry run on a
CPU (issue 16, item 2). Used by ``tests/test_gpu_dry.py``; nothing in a chapter knows about it.

::

    with standins(tmp_path) as log:
        r = coupling.run(coupling.preset("gpu", device="cpu", dtype="float32", n_prompts=2, ...))
    log.loads  # every (hub id, revision, random_init) the run asked for

Inside the block:

* ``load_model(hub_id[, revision=])`` returns a tiny random model of the id's model type
  (``tables/hub_models.csv`` -> :data:`layerlab.core.models.TINY_FAMILIES`, d_model 64, 4 layers, byte
  tokenizer), seeded by ``(hub_id, revision, random_init, seed)`` so that two Pythia "checkpoints"
  differ and a rerun is identical. The chapters' main models keep their real depth
  (:data:`STANDIN_LAYERS`), so the gpu presets' layer indices are checked against it. An id missing
  from the table is an error: every hub id a gpu preset names must be in the table (sizes, gating).
  Each load also writes a small folder ``models--<owner>--<name>`` into the stand-in hub cache, as a
  download would, so that :func:`layerlab.core.hub.release` has something to delete.
* the hub data sets of :data:`layerlab.data.tasks.HUB_TASKS` (GLUE SST-2 / RTE, AG News, ARC) are
  :data:`STANDIN_ROWS` rows with the real columns (ARC includes items the loader must skip); the
  ``datasets`` package is not needed.
* the ``gpu`` model family is :data:`GPU_FAMILY` (the gpu family's heads and grid axes, tiny sizes),
  trained in this process.
* ``LAYERLAB_CACHE`` points to ``root`` (the fetched data, tokenizers and token windows of the real
  cache linked in: :data:`SHARED_KINDS`) and ``HF_HUB_CACHE`` to
  ``root/hub``: stand-in results are keyed like real gpu results, so they must never reach the real
  cache, and :func:`~layerlab.core.hub.release` must never touch the real hub cache.
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

__all__ = ["GPU_FAMILY", "STANDIN_LAYERS", "STANDIN_ROWS", "StandinLog", "standin_model", "standin_rows",
           "standins"]

MODEL_TYPES = {"gpt_neox": "neox"}
"""hub model_type -> tiny family name, where they differ."""

STANDIN_LAYERS = {"HuggingFaceTB/SmolLM2-135M": 30, "meta-llama/Meta-Llama-3-8B": 32}
"""Depths of the chapters' main gpu models (``num_hidden_layers`` of their config.json), kept by the
stand-ins because the gpu presets index layers (anatomy, coupling); the other stand-ins have 4."""


SHARED_KINDS = ("data", "tokenizer", "family-windows")
"""Cache folders linked from the real cache into the stand-ins' one: the fetched corpora, the project's
BPE tokenizers and the family's token windows depend on the data only, never on a stand-in."""

STANDIN_ROWS = 48
"""Rows per split of every stand-in data set (class-balanced)."""

_WORDS = ("river", "stone", "market", "engine", "garden", "signal", "winter", "paper", "orbit", "candle",
          "harbour", "ladder", "meadow", "pencil", "rocket", "violin")


@dataclass
class StandinLog:
    """What the run asked for inside :func:`standins`."""

    root: Path
    layers: dict[str, int] = field(default_factory=lambda: dict(STANDIN_LAYERS))  # hub id -> stand-in depth
    loads: list[tuple[str, str | None, bool]] = field(default_factory=list)  # (hub id, revision, random_init)
    datasets: list[tuple[str, str | None, str]] = field(default_factory=list)  # (repo, config, split)

    @property
    def hub_dir(self) -> Path:
        return self.root / "hub"

    def cached_repos(self) -> list[str]:
        """Hub ids whose stand-in hub cache folder still exists (not released)."""
        if not self.hub_dir.exists():
            return []
        return sorted(p.name[len("models--"):].replace("--", "/", 1) for p in self.hub_dir.glob("models--*"))

    def ids(self) -> set[str]:
        return {h for h, _, _ in self.loads}

    def revisions(self, hub_id: str) -> set[str | None]:
        return {r for h, r, _ in self.loads if h == hub_id}


def _seed(*parts: object) -> int:
    return zlib.crc32("|".join(map(str, parts)).encode()) % (2**31)


def standin_model(hub_id: str, *, revision: str | None = None, random_init: bool = False, seed: int = 0,
                  dtype: torch.dtype = torch.float32, log: StandinLog | None = None, layers: int | None = None):
    """(tiny random model of ``hub_id``'s model type, byte tokenizer); see the module docstring."""
    from layerlab.core import hub
    from layerlab.core.models import TINY_FAMILIES, byte_tokenizer, tiny_model

    m = hub.lookup(hub_id)
    if m is None:
        raise KeyError(f"{hub_id!r} is not in {hub.TABLE.name}: every hub id a gpu preset names needs a row "
                       "(model type, size, gating)")
    family = MODEL_TYPES.get(m.model_type, m.model_type)
    if family not in TINY_FAMILIES:
        raise KeyError(f"{hub_id!r} has model type {m.model_type!r}, which has no tiny config in TINY_FAMILIES")
    s = _seed(hub_id, revision, "init" if random_init else "trained", seed)
    model = tiny_model(family, seed=s, dtype=dtype, num_hidden_layers=layers or STANDIN_LAYERS.get(hub_id, 4))
    if log is not None:
        log.loads.append((hub_id, revision, random_init))
        _fake_download(log.hub_dir, hub_id, revision)
    return model, byte_tokenizer()


def _fake_download(hub_dir: Path, hub_id: str, revision: str | None) -> None:
    """The hub cache layout a download leaves (refs/<rev> -> snapshots/<hash>/config.json)."""
    from layerlab.core.hub import repo_dir

    d = repo_dir(hub_id, hub_dir)
    commit = f"{_seed(hub_id, revision):040x}"[-40:]
    (d / "snapshots" / commit).mkdir(parents=True, exist_ok=True)
    (d / "snapshots" / commit / "config.json").write_text("{}")
    (d / "refs").mkdir(exist_ok=True)
    (d / "refs" / (revision or "main")).write_text(commit)


def _text(rng: random.Random, label: int, n: int = 8) -> str:
    return " ".join([_WORDS[label % len(_WORDS)]] + [rng.choice(_WORDS) for _ in range(n - 1)])


def standin_rows(repo: str, config: str | None, split: str, n: int = STANDIN_ROWS) -> list[dict]:
    """Rows with the columns of the real data set (``datasets.load_dataset(repo, config, split=split)``)."""
    rng = random.Random(_seed(repo, config, split))
    if repo == "nyu-mll/glue" and config == "sst2":
        return [{"sentence": _text(rng, i % 2), "label": i % 2, "idx": i} for i in range(n)]
    if repo == "nyu-mll/glue" and config == "rte":
        return [{"sentence1": _text(rng, i % 2), "sentence2": _text(rng, i % 2, 5), "label": i % 2, "idx": i}
                for i in range(n)]
    if repo == "fancyzhx/ag_news":
        return [{"text": _text(rng, i % 4, 12), "label": i % 4} for i in range(n)]
    if repo == "allenai/ai2_arc":
        rows, kept = [], 0
        for i in range(n + n // 7):
            skip = i % 8 == 7  # items the loader skips: 3 options, numeric keys
            labels = (["A", "B", "C"] if i % 16 == 7 else ["1", "2", "3", "4"]) if skip else list("ABCD")
            key = labels[i % len(labels)] if skip else labels[kept % 4]  # kept items: answers cycle A-D
            kept += not skip
            rows.append({"id": f"q{i}", "question": _text(rng, i, 6) + "?",
                         "choices": {"text": [_text(rng, j, 2) for j in range(len(labels))], "label": labels},
                         "answerKey": key})
        return rows
    raise KeyError(f"no stand-in rows for data set {repo!r} (config {config!r}); add them to standin_rows")


@contextlib.contextmanager
def standins(root: str | os.PathLike | None = None, *, layers: dict[str, int] | None = None) -> Iterator[StandinLog]:
    """Hub models, hub data sets and the gpu family replaced by tiny stand-ins (module docstring);
    everything is restored on exit. ``root``: the throwaway cache (default: a new temporary dir);
    ``layers``: stand-in depths by hub id on top of :data:`STANDIN_LAYERS` (also ``log.layers``, which a
    caller may change between runs; the depth is not part of any cache key)."""
    from layerlab.core import models
    from layerlab.data import tasks
    from layerlab.data.fetch import data_root
    from layerlab.training import family

    real = data_root().parent
    root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="layerlab-standins-"))
    root.mkdir(parents=True, exist_ok=True)
    for kind in SHARED_KINDS:
        if kind != "data":  # the data are fetched at set-up, never created here
            (real / kind).mkdir(parents=True, exist_ok=True)
        if not (root / kind).exists() and (real / kind).exists():
            (root / kind).symlink_to((real / kind).resolve(), target_is_directory=True)
    log = StandinLog(root=root)
    log.layers.update(layers or {})
    env = {k: os.environ.get(k) for k in ("LAYERLAB_CACHE", "HF_HUB_CACHE")}
    saved = (models.HUB_STANDIN, tasks._hub_rows, family.PRESETS["gpu"], family.default_workers)

    def model(hub_id, **kw):
        return standin_model(hub_id, log=log, layers=log.layers.get(hub_id, 4), **kw)

    def rows(repo, config, split):
        log.datasets.append((repo, config, split))
        return standin_rows(repo, config, split)

    os.environ["LAYERLAB_CACHE"] = str(root)
    os.environ["HF_HUB_CACHE"] = str(log.hub_dir)
    models.HUB_STANDIN, tasks._hub_rows = model, rows
    family.PRESETS["gpu"] = GPU_FAMILY
    family.default_workers = lambda: 1  # spawned workers would read the real gpu preset
    try:
        yield log
    finally:
        models.HUB_STANDIN, tasks._hub_rows, family.PRESETS["gpu"], family.default_workers = saved
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _gpu_family():
    from layerlab.training.family import PRESETS, FamilyPreset, _grid

    real = PRESETS["gpu"]
    members = (_grid((1, 2, 3), (32,), (1e-3,), (0, 1), (8,))  # depth sweep, matched tokens, 2 seeds
               + _grid((2,), (64,), (1e-3,), (0,), (8,))  # width
               + _grid((2,), (32,), (3e-3,), (0,), (8,)))  # learning rate
    return FamilyPreset(vocab_size=512, tokenizer_chars=400_000, seq_len=32, batch_size=4, heads=real.heads,
                        kv_heads=real.kv_heads, val_tokens=2_048, members=members, warmup=2,
                        notes="gpu dry-run stand-in (layerlab.training.standins): the gpu family's heads, tiny sizes")


GPU_FAMILY = _gpu_family()
"""The stand-in of ``layerlab.training.family.PRESETS["gpu"]`` inside :func:`standins`."""
