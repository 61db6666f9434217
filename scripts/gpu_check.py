"""Run the smoke profile of every chapter on one device and print one line per check.

    python scripts/gpu_check.py --device cuda            # what scripts/gpu_check.sh runs
    python scripts/gpu_check.py --dry-run                # list the checks, build the presets, run nothing
    python scripts/gpu_check.py --device cpu --chapters residual

Each chapter that follows the chapter protocol (``preset(profile, **overrides)`` and ``run(preset)``,
lib/layerlab/core/protocol.py) runs as ``run(preset("smoke", device=DEVICE))`` in a fresh cache (the
fetched corpora linked in), so nothing is read back from an earlier CPU run. On CUDA the line also
says how much GPU memory the run allocated: a chapter whose models never left the CPU shows
``0 MiB`` and is reported as ``WARN`` (the issue-16 defect this check exists to find). Chapters
not yet on the protocol are ``SKIP``. Exit status 1 if any check FAILs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))


def _fresh_cache() -> Path:
    """An empty LAYERLAB_CACHE with the fetched corpora of the current cache linked in."""
    from layerlab.core.cache import cache_dir

    data = Path(cache_dir()) / "data"
    root = Path(tempfile.mkdtemp(prefix="layerlab-gpu-check-"))
    if data.exists():
        (root / "data").symlink_to(data.resolve(), target_is_directory=True)
    return root


def check_chapter(name: str, device: str, dry_run: bool) -> tuple[str, str]:
    """(status, detail) for one chapter's smoke run on ``device``."""
    import torch

    try:
        pkg = importlib.import_module(f"layerlab.chapters.{name}")
    except Exception as e:
        return "FAIL", f"import: {type(e).__name__}: {e}"
    if not (callable(getattr(pkg, "preset", None)) and callable(getattr(pkg, "run", None))):
        return "SKIP", "not on the chapter protocol yet (no preset()/run())"
    try:
        p = pkg.preset("smoke", device=device)
    except Exception as e:
        return "FAIL", f"preset('smoke', device={device!r}): {type(e).__name__}: {e}"
    if dry_run:
        return "PLAN", f"would run {name}.run(preset('smoke', device={device!r}))"
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    try:
        result = pkg.run(p)
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)[-1]
        return "FAIL", f"{type(e).__name__}: {str(e)[:160]} (at {Path(tb.filename).name}:{tb.lineno})"
    dt = time.perf_counter() - t0
    prov = getattr(result, "provenance", None)
    if prov is not None and getattr(prov, "device", device) != device:
        return "FAIL", f"{dt:.1f} s, but provenance says device {prov.device!r}"
    if cuda:
        peak = torch.cuda.max_memory_allocated() / 2**20
        if peak == 0:
            return "WARN", f"{dt:.1f} s, 0 MiB on {device}: the run never used the GPU"
        return "PASS", f"{dt:.1f} s, peak {peak:.0f} MiB on {device}"
    return "PASS", f"{dt:.1f} s on {device}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--chapters", nargs="*", default=None, help="default: every chapter, in book order")
    ap.add_argument("--dry-run", action="store_true", help="build presets and list the checks; run nothing")
    ap.add_argument("--keep-cache", action="store_true", help="use the current LAYERLAB_CACHE, not a fresh one")
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from layerlab.chapters import CHAPTERS

    names = list(a.chapters or CHAPTERS)
    if a.device.startswith("cuda") and not torch.cuda.is_available() and not a.dry_run:
        print(f"FAIL device     {a.device}: torch {torch.__version__} sees no CUDA GPU")
        return 1
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    print(f"INFO device     torch {torch.__version__}, CUDA {torch.version.cuda}, GPU {gpu}, checks on {a.device}")
    if not a.keep_cache and not a.dry_run:
        os.environ["LAYERLAB_CACHE"] = str(_fresh_cache())
    failed = 0
    for name in names:
        status, detail = check_chapter(name, a.device, a.dry_run)
        failed += status == "FAIL"
        print(f"{status:4s} chapter    {name} smoke: {detail}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
