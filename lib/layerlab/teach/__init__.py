"""The teaching kit: checkers for the book's exercises (ARENA-style ``check_<name>(fn)``), the
slide/handout manifest of each chapter, and the student-notebook transformation.

Each checker runs a student's function on tiny float64 models of the relevant families (and,
where cheap, on SmolLM2-135M-Instruct-Q4_1), compares it with the library function that the test
suite checks against the defining identity, and prints a pass or one specific hint (which identity
fails, by how much, on which input). It returns a :class:`CheckResult` (truthy when passed)::

    from layerlab import teach
    teach.check_frozen_lens(my_member_logits)   # [PASS] check_frozen_lens: ...

This package sits with ``chapters`` at the top of the import order; it may import anything below
(core, data, report, metrics, training) but never a chapter. Exercises: ``notebooks/exercises/``.
"""

from __future__ import annotations

import importlib
from typing import Any

#: checker name -> (module, chapter whose exercise it checks)
CHECKERS: dict[str, tuple[str, str]] = {
    "check_frozen_lens": ("layerlab.teach.lens", "residual"),
    "check_delta_null": ("layerlab.teach.anatomy", "anatomy"),
    "check_delta_correlation": ("layerlab.teach.anatomy", "anatomy"),
    "check_removal_cost": ("layerlab.teach.anatomy", "anatomy"),
    "check_fd_jacobian": ("layerlab.teach.coupling", "coupling"),
    "check_coupling": ("layerlab.teach.coupling", "coupling"),
    "check_coupling_matrix": ("layerlab.teach.coupling", "coupling"),
    "check_decomposition": ("layerlab.teach.diversity", "diversity"),
    "check_ensemble_members": ("layerlab.teach.diversity", "diversity"),
    "check_schedule_flops": ("layerlab.teach.growth", "growth"),
}

__all__ = ["CHECKERS", "CheckResult", *CHECKERS]


def __getattr__(name: str) -> Any:
    if name in CHECKERS:
        return getattr(importlib.import_module(CHECKERS[name][0]), name)
    if name == "CheckResult":
        from layerlab.teach.harness import CheckResult

        return CheckResult
    raise AttributeError(f"layerlab.teach has no {name!r}: the checkers are {', '.join(CHECKERS)}")
