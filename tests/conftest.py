"""Test-session settings: tiny models run fastest single-threaded (and stay fast when the
machine is shared); notebooks executed by the tests run in their own kernels."""

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
torch.set_num_threads(1)
if os.environ.get("PYTEST_XDIST_WORKER"):
    # Workers share the cores: the notebook kernels and processes a worker starts run one thread each too.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# ----------------------------------------------------------------------------- parallel runs (pytest-xdist)
BOOK_TESTS = frozenset({"test_book", "test_browser", "test_notebooks", "test_prose", "test_publish"})
"""Test files that share this session's smoke-executed notebooks and smoke book (tests/_buildbook.py,
tests/_smokebook.py): under ``pytest -n 2`` (``make test``) they run in one worker, so each notebook is
executed and the book built once."""


def scope_of(nodeid: str) -> str:
    """The unit a worker takes whole: the test file (its module fixtures and in-file order are kept),
    or ``book`` for every file of :data:`BOOK_TESTS`."""
    path = nodeid.split("::", 1)[0]
    return "book" if Path(path).stem in BOOK_TESTS else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Whole scopes (:func:`scope_of`) to a worker, the largest first. (``--dist loadgroup`` cannot
    do this under pytest 9, whose node ids pytest-xdist 3.8 can no longer suffix with a group.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByScope(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return ByScope(config, log)
