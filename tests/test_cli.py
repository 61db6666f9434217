"""``python -m layerlab``: the command line a newcomer meets first."""

from __future__ import annotations

import subprocess
import sys

from layerlab import cli
from layerlab.core import cache


def test_help_and_unknown_command(capsys):
    assert cli.main([]) == 0 and "cache prune" in capsys.readouterr().out
    assert cli.main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'frobnicate'" in err and "fetch, family, cache" in err
    assert cli.main(["cache", "sweep"]) == 2 and "cache info" in capsys.readouterr().err


def test_cache_info_and_prune_commands(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path))
    cache.cached_json("demo", {"k": 1}, lambda: [1, 2])
    (tmp_path / "demo" / "orphan.json").write_text('{"module": "layerlab.core.arch", "source": "old"}')
    assert cli.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert "demo" in out and "2 entries" in out and "1 stale" in out
    assert cli.main(["cache", "prune", "--dry-run"]) == 0
    assert "would delete demo/orphan.json" in capsys.readouterr().out
    assert (tmp_path / "demo" / "orphan.json").exists()
    assert cli.main(["cache", "prune"]) == 0
    assert "1 stale entry" in capsys.readouterr().out and not (tmp_path / "demo" / "orphan.json").exists()


def test_module_entry_point(tmp_path):
    env = {"LAYERLAB_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "layerlab", "cache", "info"], capture_output=True, text=True,
                         env=env, check=True).stdout
    assert str(tmp_path) in out and "no entries" in out
