"""The machine a timed computation ran on, in words (for results whose numbers are wall-clock seconds).

Wall-clock claims (the growth chapter's G1c and G2) depend on the CPU or GPU that timed them: the same
code gives other seconds, and so other step counts and savings, elsewhere. Such results record
:func:`describe` when they are computed, so that the page can say where its seconds come from.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

__all__ = ["describe"]


def _cpu_name(cpuinfo: str) -> tuple[str, set[str]]:
    name, flags = "", set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not name:
            name = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    return name, flags


def describe(device: str = "cpu", *, cpuinfo: str | None = None) -> str:
    """The device in words, e.g. "Intel(R) Xeon(R) Processor (AVX-512, AMX), 2 cores, 2 torch threads" or
    "NVIDIA H100 80GB HBM3". ``cpuinfo``: the text of /proc/cpuinfo (read from the system when None)."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    if cpuinfo is None:
        p = Path("/proc/cpuinfo")
        cpuinfo = p.read_text(errors="replace") if p.exists() else ""
    name, flags = _cpu_name(cpuinfo)
    name = name or platform.processor() or platform.machine() or "unknown CPU"
    isa = [label for flag, label in (("avx512f", "AVX-512"), ("amx_tile", "AMX")) if flag in flags]
    if not isa and "avx2" in flags:
        isa = ["AVX2"]
    return (f"{name}{' (' + ', '.join(isa) + ')' if isa else ''}, {os.cpu_count() or 1} cores, "
            f"{torch.get_num_threads()} torch thread{'' if torch.get_num_threads() == 1 else 's'}")
