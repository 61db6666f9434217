"""scripts/gpu_check.py and gpu_check.sh, exercised on the CPU: the dry run builds every chapter's
smoke preset with device="cpu"/"cuda", and one chapter really runs on cpu in a fresh cache."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib"), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_dry_run_lists_one_line_per_chapter():
    from layerlab.chapters import CHAPTERS

    p = _run("--dry-run", "--device", "cuda")
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.strip().splitlines()
    assert lines[0].startswith("INFO device")
    assert len(lines) == 1 + len(CHAPTERS)
    for name, line in zip(CHAPTERS, lines[1:]):
        assert f"chapter    {name} smoke:" in line and line.split()[0] in ("PLAN", "SKIP"), line
    assert sum(line.startswith("PLAN") for line in lines) >= 3  # residual, diversity, growth


def test_one_chapter_runs_on_cpu():
    p = _run("--device", "cpu", "--chapters", "residual")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1].startswith("PASS chapter    residual smoke:")


def test_cuda_without_a_gpu_fails_in_one_line():
    import torch

    if torch.cuda.is_available():
        return
    p = _run("--device", "cuda", "--chapters", "residual")
    assert p.returncode == 1 and p.stdout.startswith("FAIL device")


def test_shell_script_is_prepared():
    sh = (ROOT / "scripts" / "gpu_check.sh").read_text()
    assert os.access(ROOT / "scripts" / "gpu_check.sh", os.X_OK)
    assert "gpu_check.py --device cuda" in sh and "tests/test_cuda_parity.py" in sh
    assert "timeout 300" in sh and "timeout 180" in sh  # <= 8 minutes in all
