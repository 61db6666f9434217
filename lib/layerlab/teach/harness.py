"""What every checker shares: a result that prints as a pass or one specific hint, the tiny float64
models it runs on, and the comparison of a student's tensor with the library's.

A checker never re-implements a metric: the reference is always the library function that the
test suite checks against its defining identity (``tests/test_lens.py``, ``test_coupling.py``, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

#: Tiny families whose final norm is a LayerNorm (centre, then scale): the centring step matters there.
LAYERNORM_FAMILIES = ("gpt2", "neox", "olmo", "phi", "falcon")
#: Families with (1 + w) RMSNorm weights.
GEMMA_FAMILIES = ("gemma", "gemma2", "gemma3")


@dataclass(frozen=True)
class CheckResult:
    """Outcome of one checker: ``passed``, and the message printed (the pass line or the hint)."""

    name: str
    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        mark = "PASS" if self.passed else "NOT YET"
        return f"[{mark}] {self.name}: {self.message}"

    def _repr_markdown_(self) -> str:  # in a notebook: one readable line
        mark = "✅ **pass**" if self.passed else "❌ **not yet**"
        return f"{mark} `{self.name}`: {self.message}"


def finish(name: str, passed: bool, message: str, *, quiet: bool = False) -> CheckResult:
    """Build the result and print it (unless ``quiet``): the student sees it at once."""
    res = CheckResult(name, passed, message)
    if not quiet:
        print(res)
    return res


class Failure(Exception):
    """Raised inside a checker to stop at the first failing identity with its hint."""


def as_tensor(x: object, what: str) -> Tensor:
    """The student's return value as a float64 tensor, or a Failure saying what came back."""
    if x is None or x is Ellipsis:
        raise Failure(f"{what} returned {x!r}: the function is still a stub; replace `...` with your code")
    try:
        t = x if isinstance(x, Tensor) else torch.as_tensor(x, dtype=torch.float64)  # Python floats: float64
    except (TypeError, ValueError, RuntimeError) as e:
        raise Failure(f"{what} returned a {type(x).__name__}, not a tensor or number ({e})") from None
    return t.detach().to(torch.float64)


def max_err(got: Tensor, ref: Tensor) -> float:
    """max |got - ref| (inf where shapes differ or a value is not finite)."""
    if got.shape != ref.shape:
        return float("inf")
    d = (got.detach().to(torch.float64) - ref.detach().to(torch.float64)).abs()
    return float(d.max()) if d.numel() else 0.0


def check_shape(got: Tensor, ref: Tensor, what: str) -> None:
    if tuple(got.shape) != tuple(ref.shape):
        raise Failure(f"{what}: expected shape {list(ref.shape)}, got {list(got.shape)}")


def close(got: Tensor, ref: Tensor, tol: float) -> bool:
    """Agreement up to ``tol`` relative to the reference's scale (absolute for tiny references)."""
    scale = float(ref.detach().abs().max()) if ref.numel() else 1.0
    return max_err(got, ref) <= tol * max(1.0, scale)


def precision_hint(got: Tensor, ref: Tensor) -> str:
    """A hint when values agree only to float32 precision (a ``torch.tensor([...])`` of floats)."""
    if close(got, ref, 1e-5):
        return (f" (they agree to {max_err(got, ref):.1e} only: float32 somewhere? keep float64, e.g. "
                "torch.tensor(values, dtype=torch.float64))")
    return ""


def tiny(family: str, seed: int = 0):
    """A random tiny float64 model of ``family`` (``layerlab.core.models.tiny_model``)."""
    from layerlab.core.models import tiny_model

    return tiny_model(family, seed=seed)


def tiny_ids(n: int = 8, seed: int = 0, batch: int = 1) -> Tensor:
    """Token ids [batch, n] of the byte tokenizer's vocabulary (0..255), seeded."""
    return torch.randint(0, 256, (batch, n), generator=torch.Generator().manual_seed(seed))


def real_model():
    """The offline SmolLM2-135M-Instruct-Q4_1 (float32), or None with the reason when it is not set up."""
    from layerlab.core.models import load_model

    try:
        model, tok = load_model("smollm2-135m")
    except Exception as e:  # not fetched on this machine: the tiny models still decide
        return None, f"real model not available ({type(e).__name__})"
    return model, tok


def run_student(fn: Callable, *args, what: str, **kwargs):
    """Call the student's function; an exception becomes a Failure naming the input."""
    if not callable(fn):
        raise Failure(f"pass your function itself (e.g. check(my_fn)), not {type(fn).__name__}")
    try:
        return fn(*args, **kwargs)
    except Failure:
        raise
    except Exception as e:
        raise Failure(f"{what} raised {type(e).__name__}: {e}") from None


def families_text(fams: Iterable[str]) -> str:
    return ", ".join(fams)
