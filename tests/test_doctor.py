"""``python -m layerlab doctor``: a useful report on this CPU machine, exit 0 unless --strict."""

import dataclasses

import pytest

from layerlab import doctor
from layerlab.cli import main


def test_gpu_report_on_this_machine(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["doctor", "--profile", "gpu"]) == 0
    out = capsys.readouterr().out
    for needle in ("device", "disk", "datasets", "HF_HUB_OFFLINE", "gated", "meta-llama/Meta-Llama-3-8B",
                   "GiB in all", "coupling:", "guess, not measured", "verdict:"):
        assert needle in out, needle
    import torch

    if not torch.cuda.is_available():
        assert "the gpu profile cannot run here" in out and "no CUDA GPU" in out
        assert main(["doctor", "--profile", "gpu", "--strict"]) == 1


def test_smoke_profile_runs_here(capsys):
    assert main(["doctor", "--profile", "smoke", "--strict"]) == 0
    assert "the smoke profile can run here" in capsys.readouterr().out


def test_preset_models_reads_ids_and_revisions():
    @dataclasses.dataclass(frozen=True)
    class P:
        model: str = "meta-llama/Meta-Llama-3-8B"
        sanity_doc: str = "britannica/shakespeare"  # a document id, not a model
        fig1a_models: tuple = ("openai-community/gpt2", "tiny-llama")
        pythia: tuple = ("EleutherAI/pythia-12b",)
        pythia_steps: tuple = (1, 2, 3)

    got = dict(doctor.preset_models(P()))
    assert got == {"meta-llama/Meta-Llama-3-8B": 1, "openai-community/gpt2": 1, "EleutherAI/pythia-12b": 3}


def test_every_gpu_preset_model_is_in_the_hub_table():
    from layerlab.core.hub import hub_models

    table = hub_models()
    presets = doctor.chapter_presets("gpu")
    assert {"residual", "coupling", "diversity"} <= set(presets)
    ids = {i for p in presets.values() for i, _ in doctor.preset_models(p)}
    assert ids and ids <= set(table), sorted(ids - set(table))


def test_unknown_profile():
    with pytest.raises(ValueError, match="unknown profile"):
        doctor.diagnose("laptop")
