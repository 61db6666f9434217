"""Task loaders of the diversity chapter: real files, seeded splits, clear errors on malformed files."""

import pytest

from layerlab.core.models import byte_tokenizer
from layerlab.data import tasks


def _have_data() -> bool:
    try:
        tasks._data_path("polarity")
        tasks._data_path("wordnet")
    except FileNotFoundError:
        return False
    return True


needs_data = pytest.mark.skipif(not _have_data(), reason="labelled data not fetched (run `make data`)")


def test_csv_loader_reads_bom_and_quotes(tmp_path):
    p = tmp_path / "ok.csv"
    p.write_text('\ufeff"1","a good, fine &quot;film&quot;"\n"-1","bad"\n', encoding="utf-8")
    ex = tasks.read_labelled_csv(p, {"1": 0, "-1": 1})
    assert [e.label for e in ex] == [0, 1]
    assert ex[0].text == 'a good, fine "film"'


@pytest.mark.parametrize(
    "content, match",
    [
        ('"1","a","b"\n', "expected 2 fields"),
        ('"7","text"\n', "unknown label '7'"),
        ("", "holds no examples"),
    ],
)
def test_csv_loader_rejects_malformed_files(tmp_path, content, match):
    p = tmp_path / "bad.csv"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(tasks.TaskDataError, match=match) as e:
        tasks.read_labelled_csv(p, {"1": 0, "-1": 1})
    assert "python -m layerlab fetch" in str(e.value) and "bad.csv" in str(e.value)


def test_wordnet_parser_and_errors(tmp_path):
    good = tmp_path / "data.noun"
    good.write_text(
        "  1 This software and database is being provided\n"
        '01234567 05 n 02 dog 0 domestic_dog 0 000 | a member of the genus Canis; "the dog barked"\n',
        encoding="utf-8",
    )
    ((lex, lemmas, gloss),) = tasks.parse_wordnet_data(good)
    assert lex == 5 and lemmas == ["dog", "domestic_dog"] and gloss == "a member of the genus Canis"
    bad = tmp_path / "bad.noun"
    bad.write_text("01234567 xx n 01 dog 0 000 | gloss\n", encoding="utf-8")
    with pytest.raises(tasks.TaskDataError, match="line 1: not a WordNet data line"):
        tasks.parse_wordnet_data(bad)


def test_unknown_task_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown task .sst5."):
        tasks.load_task("sst5")


def test_verbalisers_are_distinct_for_the_byte_tokenizer():
    tok = byte_tokenizer()
    ids, sep = tasks.verbaliser_ids(tok, ("positive", "negative"))
    assert sep == "" and len(set(ids)) == 2  # " p"/" n" would share the space byte
    with pytest.raises(ValueError, match="share a first token"):
        tasks.verbaliser_ids(tok, ("place", "person"))


@needs_data
@pytest.mark.parametrize("name", tasks.TASK_NAMES)
def test_real_tasks_split_balanced_disjoint_and_seeded(name):
    t = tasks.load_task(name, n_train=16, n_test=24, seed=1)
    assert len(t.train) == 16 and len(t.test) == 24
    counts = [sum(e.label == c for e in t.test) for c in range(t.n_classes)]
    assert len(set(counts)) == 1  # balanced
    assert not {e.text for e in t.train} & {e.text for e in t.test}
    again = tasks.load_task(name, n_train=16, n_test=24, seed=1)
    assert again.test == t.test
    other = tasks.load_task(name, n_train=16, n_test=24, seed=2)
    assert other.test != t.test
    p = t.prompt(t.test[0], t.shots(2, seed=0))
    assert p.count(t.template.split("{text}")[0].strip()) >= 3 and not p.endswith(" ")


@needs_data
def test_definition_task_options_contain_the_answer():
    t = tasks.load_task("def", n_train=8, n_test=8)
    for e in t.test:
        lines = e.text.splitlines()[-4:]
        assert [ln[0] for ln in lines] == list(tasks.LETTERS)
    assert {e.label for e in t.test} == {0, 1, 2, 3}


def test_gpu_profile_names_the_papers_tasks():
    from layerlab.chapters import diversity

    gpu = diversity.preset("gpu")
    assert set(gpu.tasks) <= set(tasks.HUB_TASKS) and "Llama-3" in gpu.model and gpu.dtype == "bfloat16"
    for p in diversity.PRESETS.values():
        assert set(p.tasks) <= set(tasks.TASK_NAMES) | set(tasks.HUB_TASKS)
    with pytest.raises(ValueError, match="unknown profile"):
        diversity.preset("tpu")
