"""The shared cache: keys, atomic writes, module fingerprints."""

import pytest
import torch

from layerlab.core import cache


@pytest.fixture(autouse=True)
def _tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path))


def test_cached_json_computes_once():
    calls = []

    def compute():
        calls.append(1)
        return {"a": [1, 2.5]}

    assert cache.cached_json("t", {"k": 1}, compute) == {"a": [1, 2.5]}
    assert cache.cached_json("t", {"k": 1}, compute) == {"a": [1, 2.5]}
    assert cache.cached_json("t", {"k": 2}, compute) == {"a": [1, 2.5]}
    assert len(calls) == 2


_RACER = """
import os, sys, time
from layerlab.core import cache
def compute():
    with open(os.environ["RACE_LOG"], "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(1.5)  # long enough that the other process asks while this one computes
    return {"by": os.getpid()}
sys.stdout.write(str(cache.cached_json("race", {"k": 1}, compute, sources="layerlab.core.cache")["by"]))
"""


def test_two_processes_wanting_one_entry_compute_it_once(tmp_path):
    """The second process waits on the entry's lock and reads what the first wrote (both return the
    first one's value); the lock file is hidden from ``cache info``."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, LAYERLAB_CACHE=str(tmp_path), RACE_LOG=str(tmp_path / "computed"))
    procs = [subprocess.Popen([sys.executable, "-c", _RACER], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    computed = (tmp_path / "computed").read_text().split()
    assert len(computed) == 1 and outs == [computed[0]] * 2
    assert [e.kind for e in cache.entries(tmp_path)] == ["race"]
    assert any(p.name.endswith(".lock") for p in (tmp_path / "race").iterdir())


def test_cached_tensors_roundtrip_and_corrupt_entry_recomputed(tmp_path):
    x = {"w": torch.arange(6.0).reshape(2, 3)}
    out = cache.cached_tensors("t", {"k": 1}, lambda: x)
    assert torch.equal(out["w"], x["w"])
    (f,) = (tmp_path / "t").glob("*.safetensors")
    f.write_bytes(b"garbage")
    again = cache.cached_tensors("t", {"k": 1}, lambda: {"w": x["w"] + 1})
    assert torch.equal(again["w"], x["w"] + 1)


def test_atomic_write_leaves_nothing_on_error(tmp_path):
    target = tmp_path / "r.json"
    with pytest.raises(RuntimeError):
        with cache.atomic_write(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_fingerprint_is_stable_and_sensitive():
    a = cache.fingerprint({"x": 1, "t": torch.ones(3)}, [1, 2])
    assert a == cache.fingerprint({"t": torch.ones(3), "x": 1}, [1, 2])
    assert a != cache.fingerprint({"x": 1, "t": torch.ones(3) * 2}, [1, 2])
    f32, f64 = torch.ones(2, dtype=torch.float32), torch.ones(2, dtype=torch.float64)
    assert cache.fingerprint(f32) != cache.fingerprint(f64)


def test_module_fingerprint_follows_imports():
    imports = cache.layerlab_imports("from layerlab.core import residual\nfrom layerlab.core.arch import view\n")
    assert imports == {"layerlab.core", "layerlab.core.residual", "layerlab.core.arch"}
    # residual imports arch, so its fingerprint differs from arch's own but is deterministic
    assert cache.module_fingerprint("layerlab.core.residual") == cache.module_fingerprint("layerlab.core.residual")
    assert cache.module_fingerprint("layerlab.core.residual") != cache.module_fingerprint("layerlab.core.arch")
    with pytest.raises(ValueError, match="no layerlab module"):
        cache.module_fingerprint("layerlab.nonexistent")
