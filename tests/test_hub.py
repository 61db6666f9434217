"""core/hub.py: the hub model table and deleting a model's hub cache after use (fake cache dir)."""

import pytest

from layerlab.core import hub


def _fake_repo(root, hub_id, revision="main", size=1000):
    d = root / ("models--" + hub_id.replace("/", "--"))
    (d / "blobs").mkdir(parents=True)
    (d / "blobs" / "abc").write_bytes(b"x" * size)
    snap = d / "snapshots" / "0123"
    snap.mkdir(parents=True)
    (snap / "model.safetensors").symlink_to(d / "blobs" / "abc")
    (d / "refs").mkdir()
    (d / "refs" / revision).write_text("0123")
    return d


def test_table_covers_sizes_and_gates():
    t = hub.hub_models()
    assert t["meta-llama/Meta-Llama-3-8B"].gated == "yes" and t["openai-community/gpt2"].gated == "no"
    assert t["openai-community/gpt2"].download_bytes == int(0.124e9 * 4)
    assert all(m.gated in ("yes", "no", "check") for m in t.values())
    plan = hub.download_plan([("EleutherAI/pythia-12b", 12), ("openai-community/gpt2", 1), ("no/such", 1)])
    assert plan["total"] == 12 * t["EleutherAI/pythia-12b"].download_bytes + t["openai-community/gpt2"].download_bytes
    assert plan["peak_with_release"] == t["EleutherAI/pythia-12b"].download_bytes and plan["unknown"] == 1


def test_cached_and_delete(tmp_path, monkeypatch):
    monkeypatch.delenv(hub.KEEP_ENV, raising=False)
    other = _fake_repo(tmp_path, "owner/other")
    d = _fake_repo(tmp_path, "owner/model", size=1234)
    assert hub.is_cached("owner/model", cache_dir=tmp_path) and not hub.is_cached("owner/absent", cache_dir=tmp_path)
    assert not hub.is_cached("owner/model", revision="step4000", cache_dir=tmp_path)
    assert hub.cached_bytes("owner/model", tmp_path) == 1234 + len("0123")  # blob + ref file
    assert hub.delete_cached("owner/model", tmp_path) == 1238
    assert not d.exists() and other.exists()  # only that model's folder goes
    assert hub.delete_cached("owner/model", tmp_path) == 0
    with pytest.raises(ValueError, match="hub id"):
        hub.delete_cached("../etc", tmp_path)


def test_keep_hub_and_release(tmp_path, monkeypatch):
    d = _fake_repo(tmp_path, "owner/model")
    monkeypatch.setenv(hub.KEEP_ENV, "1")
    with hub.release("owner/model", tmp_path):
        pass
    assert d.exists()  # kept on request
    assert hub.delete_cached("owner/model", tmp_path, force=True) > 0 and not d.exists()
    monkeypatch.setenv(hub.KEEP_ENV, "0")
    d = _fake_repo(tmp_path, "owner/model")
    with pytest.raises(RuntimeError):
        with hub.release("owner/model", tmp_path):
            raise RuntimeError("crash")
    assert d.exists()  # kept after a failure, so a rerun does not download it again
    with hub.release("owner/model", tmp_path):
        pass
    assert not d.exists()
    with hub.release("tiny-llama", tmp_path):  # offline names are left alone
        pass


def test_cache_dir_and_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert hub.hub_cache_dir() == tmp_path
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub.hub_cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.offline()
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert not hub.offline()
