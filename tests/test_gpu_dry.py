"""The gpu profile's dry run on the CPU (issue 16, item 2): every chapter's ``gpu`` preset, run end to end
under :func:`layerlab.training.standins.standins` (tiny random stand-ins for the hub models, local rows
for the hub data sets, a tiny gpu family), shrunk only by preset overrides of sizes (prompts, tokens,
steps, bootstraps). The gpu-only loops keep their paper size: all 28 Fig. 1a models, both Pythia runs
at every Fig. 1b checkpoint, the four hub tasks, the anatomy operator and recovery variants.

Each test asserts that the gpu-only parts are in the result, the claim rows and the figures, and that
every hub model's (stand-in) hub cache was released after use. The chapters run in one throwaway cache
(module fixture), in book order; the gpu family is trained once and shared.
"""

from __future__ import annotations

import importlib

import matplotlib
import pytest

from layerlab.data import tasks
from layerlab.training.family import PRESETS as FAMILY_PRESETS
from layerlab.training.standins import STANDIN_LAYERS, standins

matplotlib.use("Agg")

REAL_GPU_FAMILY = FAMILY_PRESETS["gpu"]
REAL_HUB_ROWS = tasks._hub_rows
"""Read before any stand-in replaces them (the module fixture keeps the stand-ins on until the end)."""

GPU_FAMILY_FILTERS = dict(checkpoint_filter={"depth": 2, "width": 32, "lr": 1e-3},
                          locality_filter={"depth": 3, "width": 32, "lr": 1e-3},
                          quant_filter={"width": 32, "lr": 1e-3, "seed": 0})
"""The coupling filters for the stand-in gpu family (the real ones: test_gpu_presets_select_family_members)."""

SHRINK = {
    "residual": dict(window=64, windows_per_doc=2, lens_positions=8, batch_size=4, n_boot=200),
    "anatomy": dict(window=32, batch_size=8, sample_docs=4, sample_window=32, budget_windows=(1, 1, 1),
                    budget_window_small=32, budget_windows_small=(1, 1, 1), calib_tokens=128,
                    sentences=2, replacement_tokens=128, manip_tokens=128, recovery_layers=(11,),
                    recovery_sigmas=(0.5, 1.0), recovery_seeds=(0,), recovery_steps=2, recovery_eval_every=1,
                    recovery_batch=2, recovery_window=32, recovery_train_tokens=256, recovery_eval_tokens=64,
                    n_boot=200, n_shuffles=5),
    "coupling": dict(n_prompts=2, max_tokens=16, ks=(4, 8), init_seeds=(0,), n_init_prompts=2, n_null=2,
                     n_tokens=4, family_prompts=2, family_max_tokens=16, family_ks=(4, 8), vit_images=2,
                     vit_ks=(4, 8), **GPU_FAMILY_FILTERS),
    "diversity": dict(shots=1, n_train=16, n_test=16, max_words=12, lm_windows=2, lm_window=32, lm_positions=4,
                      null_examples=12, family_examples=16, n_boot=100),
    "atlas": dict(window=32, tokens=62, batch_size=2, lens_positions=4, member_positions=2, member_chunk=2,
                  jacobian_samples=2, coupling_k=4, recovery_steps=2, recovery_batch=1,
                  recovery_window=32, n_boot=100, n_perm=200, family_min_depth=3),
    "growth": dict(depth=4, width=32, steps=12, seeds=(0, 1), n_evals=4, windows_per_doc=4, imp_docs=4,
                   imp_windows_per_doc=2, batch_size=4, warmup=2, lr_sweep=(3e-3, 1e-2), workers=1),
}
"""Size overrides only: the model lists, tasks, layer indices and variants of the gpu presets are kept."""


@pytest.fixture(scope="module")
def dry(tmp_path_factory, monkeypatch_module):
    monkeypatch_module.delenv("LAYERLAB_KEEP_HUB", raising=False)
    with standins(tmp_path_factory.mktemp("gpu-dry"), layers=dict.fromkeys(STANDIN_LAYERS, 4)) as log:
        yield log


@pytest.fixture
def real_depth(dry):
    """The chapters' main models at their real depth (the gpu presets index their layers)."""
    dry.layers.update(STANDIN_LAYERS)
    yield
    dry.layers.update(dict.fromkeys(STANDIN_LAYERS, 4))


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _gpu_preset(name: str, **extra):
    from layerlab.training.vit import ViTConfig

    ch = importlib.import_module(f"layerlab.chapters.{name}")
    over = dict(SHRINK[name], **extra)
    if name == "coupling":
        over["vit"] = (ViTConfig(d_model=16, n_layers=3, steps=30, n_checkpoints=3),)
    return ch, ch.preset("gpu", device="cpu", dtype="float32", **over)


def _run(name: str, log, **extra):
    """The chapter's gpu run under the stand-ins: result, claims, every figure; hub caches released."""
    import matplotlib.pyplot as plt

    ch, p = _gpu_preset(name, **extra)
    result = ch.run(p)
    assert result.provenance.profile == "gpu" and result.provenance.device == "cpu"
    rows = ch.claims(result)
    assert rows and all(c.verdict for c in rows)
    figs = {}
    for fname in dir(ch.plots):
        fn = getattr(ch.plots, fname)
        if callable(fn) and (fname.startswith("fig_") or fname.endswith("_figure")) and \
                getattr(fn, "__module__", "") == ch.plots.__name__:
            figs[fname] = fn(result)
    plt.close("all")
    assert log.cached_repos() == [], f"hub caches not released: {log.cached_repos()}"
    return p, result, rows, figs


def test_residual_gpu_dry(dry):
    p, r, rows, figs = _run("residual", dry)
    assert p.model == "HuggingFaceTB/SmolLM2-135M" and r.n_layers == 4
    assert (p.model, None, False) in dry.loads and (p.model, None, True) in dry.loads  # trained + random init
    assert all(f is not None for f in figs.values())


def test_anatomy_gpu_dry(dry, real_depth):
    p, r, rows, figs = _run("anatomy", dry)
    assert r.n_layers == 30 and (p.model, None, True) in dry.loads
    assert set(r.recovery.kind) == {"additive", "multiplicative"} and set(r.recovery.scope) == {"layer", "all"}
    assert r.quant is None and r.numbers["quant_types"] == "none"  # a hub model has no Q4_1 twin
    assert len(r.replacement) > len(p.replacement_ks)  # every k and single layer of the gpu lists ran
    assert set(r.ablation.op) >= {"skip", "neighbour_avg", "skip_attn", "skip_mlp", "mean"}


def test_diversity_gpu_dry(dry):
    p, r, rows, figs = _run("diversity", dry)
    assert tuple(r.tasks) == ("sst2", "rte", "ag_news", "arc_easy")
    for name, t in r.tasks.items():
        assert t["source"].startswith(("nyu-mll/glue", "fancyzhx/ag_news", "allenai/ai2_arc")), name
        assert t["n_test"] == p.n_test
    assert r.tasks["ag_news"]["n_classes"] == 4 and tuple(r.tasks["arc_easy"]["classes"]) == ("A", "B", "C", "D")
    assert {(c, s) for _, c, s in dry.datasets} >= {("sst2", "validation"), ("rte", "validation"),
                                                     (None, "test"), ("ARC-Easy", "test")}
    assert r.family is not None and r.family.depth.nunique() == 3  # the stand-in gpu family's depth sweep


def test_coupling_gpu_dry(dry, real_depth):
    from layerlab.chapters.coupling import PYTHIA_STEPS

    p, r, rows, figs = _run("coupling", dry)
    assert len(p.fig1a_models) == 28 and p.pythia_steps == PYTHIA_STEPS
    assert len(r.fig1a) == 28 and r.fig1a[f"C_l2@{r.k}"].notna().all()
    assert r.fig1a_stats is not None and len(r.fig1a_stats) >= 3  # the Fig. 1a regression on every C_ scalar
    assert len(r.pythia) == 2 * len(PYTHIA_STEPS) and set(r.pythia.step) == set(PYTHIA_STEPS)
    assert r.pythia_table() is not None and figs["fig_pythia"] is not None
    for h in p.pythia:
        assert dry.revisions(h) == {f"step{s}" for s in PYTHIA_STEPS}
    assert set(p.fig1a_models) <= dry.ids()
    # stand-in checkpoints differ: the coupling changes across Pythia steps
    assert r.pythia.groupby("model")[f"C_l2@{r.k}"].nunique().min() > 1
    assert {c.id for c in rows} >= {"C1", "C2", "C4", "C6", "C7"}


def test_atlas_gpu_dry(dry):
    """The atlas's gpu profile as its notebook runs it: the main model, the family section on the gpu family
    (stand-in depths 1-3, hence ``family_min_depth=3``) and the cross-model section on Pythia-160M, Pythia-410M
    and Llama-3.2-1B, each a row AX<i> with a verdict; every hub model's cache released after its run."""
    import matplotlib.pyplot as plt

    from layerlab.chapters import atlas
    from layerlab.training.standins import GPU_FAMILY

    ch, p = _gpu_preset("atlas")
    assert p.extra_models == ("EleutherAI/pythia-160m", "EleutherAI/pythia-410m", "meta-llama/Llama-3.2-1B")
    r = atlas.run(p)
    fa = atlas.run_family(p, min_depth=p.family_min_depth)
    others = atlas.run_models(p)
    rows = atlas.claims(r, family=fa, others=others)
    assert r.provenance.profile == "gpu" and r.n_layers == 4 and len(r.agreement) == r.numbers["n_pairs"] > 0
    assert {(m, None, False) for m in (p.model, *p.extra_models)} <= set(dry.loads)
    assert [o.preset.model for o in others] == list(p.extra_models) and all(o.n_layers == 4 for o in others)
    assert fa.numbers["n_members"] == sum(m.depth >= 3 for m in GPU_FAMILY.members) == len(fa.init)
    ids = [c.id for c in rows]
    assert ids == ["AG", "AF", "AA", "AX1", "AX2", "AX3"] and all(c.verdict for c in rows)
    for c, res in zip([rows[0], *rows[3:]], [r, *others], strict=True):  # AG and AX<i>: over each model's layers
        assert c.unit == "layers" and 3 <= c.n <= res.n_layers and res.numbers["model"] in c.claim
    text = str(atlas.prose(r, rows, family=fa, others=others)["atlas_others_sentence"].data)
    assert all(o.numbers["model"] in text for o in others)
    figs = [atlas.plots.fig_heatmap(r), atlas.plots.fig_agreement(r), atlas.plots.fig_family(fa)]
    assert all(f is not None for f in figs)
    plt.close("all")
    assert dry.cached_repos() == [], f"hub caches not released: {dry.cached_repos()}"


def test_atlas_keeps_a_hub_model_the_user_had_cached(dry):
    """The atlas deletes only what its run downloaded: a model already in the hub cache stays there."""
    from layerlab.chapters import atlas
    from layerlab.core import hub

    ch, p = _gpu_preset("atlas", model="EleutherAI/pythia-160m", tokens=31, seed=1)
    d = hub.repo_dir(p.model)
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    atlas.run(p)
    assert (p.model, None, False) in dry.loads and dry.cached_repos() == [p.model]
    assert (d / "config.json").exists()
    hub.delete_cached(p.model, force=True)


def test_growth_gpu_dry(dry):
    from layerlab.training.standins import GPU_FAMILY

    p, r, rows, figs = _run("growth", dry)
    assert p.family == "gpu" and len(r.family) == len(GPU_FAMILY.members)  # the stand-in gpu family
    assert r.numbers["seeds"] == len(p.seeds)


def test_keep_hub_keeps_the_cache(dry, monkeypatch):
    """LAYERLAB_KEEP_HUB=1: the (cached) residual rerun loads the model and keeps its hub cache."""
    monkeypatch.setenv("LAYERLAB_KEEP_HUB", "1")
    ch, p = _gpu_preset("residual")
    ch.run(p)
    assert dry.cached_repos() == ["HuggingFaceTB/SmolLM2-135M"]
    monkeypatch.delenv("LAYERLAB_KEEP_HUB")
    from layerlab.core import hub

    with hub.release(p.model):
        pass
    assert dry.cached_repos() == []


def test_gpu_presets_select_family_members():
    """The real gpu presets' family filters select members of the real gpu family (no training)."""
    from layerlab.chapters import coupling, diversity, growth

    members = REAL_GPU_FAMILY.members
    p = coupling.preset("gpu")
    for filt in (p.checkpoint_filter, p.locality_filter, p.quant_filter):
        assert [m for m in members if all(getattr(m, k) == v for k, v in filt.items())], filt
    assert diversity.preset("gpu").family_profile == "gpu" and growth.preset("gpu").family == "gpu"


def test_every_gpu_hub_id_has_a_standin():
    """Every hub id a gpu preset names is in the hub table with a model type that has a tiny config."""
    from layerlab.chapters import CHAPTERS
    from layerlab.core import hub
    from layerlab.core.models import TINY_FAMILIES
    from layerlab.doctor import preset_models
    from layerlab.training.standins import MODEL_TYPES

    ids = set()
    for name in CHAPTERS:
        ids |= {i for i, _ in preset_models(importlib.import_module(f"layerlab.chapters.{name}").preset("gpu"))}
    assert {"EleutherAI/pythia-160m", "EleutherAI/pythia-410m", "meta-llama/Llama-3.2-1B"} <= ids  # the atlas's
    assert len(ids) >= 31
    for i in ids:
        m = hub.lookup(i)
        assert m is not None, i
        assert MODEL_TYPES.get(m.model_type, m.model_type) in TINY_FAMILIES, (i, m.model_type)


def test_hub_tasks_under_standins(tmp_path):
    """Every hub task loads from the stand-in rows (ARC: items without 4 letter options are skipped);
    without the stand-ins and without ``datasets`` the error names the package."""
    import importlib.util

    with standins(tmp_path) as log:
        for name, (repo, config, split, *_rest) in tasks.HUB_TASKS.items():
            t = tasks.load_task(name, n_train=8, n_test=8)
            assert len(t.train) == len(t.test) == 8 and {e.label for e in t.test} <= set(range(t.n_classes))
            assert (repo, config, split) in log.datasets and (repo, config, "train") in log.datasets
        rows = tasks._hub_rows("allenai/ai2_arc", "ARC-Easy", "test")
        kept = [r for r in rows if r["choices"]["label"] == list("ABCD")]
        assert 0 < len(kept) < len(rows) and {r["answerKey"] for r in kept} == set("ABCD")
    if importlib.util.find_spec("datasets") is None:
        with pytest.raises(ValueError, match="datasets"):
            REAL_HUB_ROWS("nyu-mll/glue", "sst2", "validation")
